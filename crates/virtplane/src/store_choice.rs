//! `--store`: which backend holds the server's state, and how to reach it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context};
use clap::Args;
use store::Store;

/// Flags of the etcd backend, named as kube-apiserver names them.
#[derive(Args, Clone, Debug)]
pub struct EtcdArgs {
    /// CA certificate (PEM) that signed the etcd members' certificates.
    #[arg(long)]
    etcd_cafile: Option<PathBuf>,
    /// Client certificate (PEM) for etcd's --client-cert-auth.
    #[arg(long)]
    etcd_certfile: Option<PathBuf>,
    /// Key (PEM) of --etcd-certfile.
    #[arg(long)]
    etcd_keyfile: Option<PathBuf>,
    /// The etcd key prefix in place of `/registry`, as kube-apiserver's --etcd-prefix:
    /// VMs live at PREFIX/kubevirt.io/virtualmachines/NS/NAME.
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
}

pub enum StoreChoice {
    Sqlite,
    Etcd { endpoints: Vec<String> },
}

/// The server's keys all start with this (kube-apiserver's layout).
const SERVER_ROOT: &str = "/registry";

impl StoreChoice {
    pub fn parse(flag: &str) -> anyhow::Result<StoreChoice> {
        if flag == "sqlite" {
            return Ok(StoreChoice::Sqlite);
        }
        let Some(urls) = flag.strip_prefix("etcd=") else {
            bail!("--store {flag}: unknown store; use `sqlite` or `etcd=URL[,URL...]`");
        };
        let endpoints: Vec<String> = urls
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        if endpoints.is_empty() {
            bail!("--store {flag}: no etcd URL; use etcd=http://HOST:2379[,URL...]");
        }
        if let Some(bad) = endpoints
            .iter()
            .find(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            bail!("--store {flag}: {bad} is not an http:// or https:// URL");
        }
        Ok(StoreChoice::Etcd { endpoints })
    }

    /// Opens the store; for etcd this waits until a member answers.
    pub async fn open(&self, data_dir: &Path, etcd: &EtcdArgs) -> anyhow::Result<Arc<dyn Store>> {
        match self {
            StoreChoice::Sqlite => {
                let db = data_dir.join("state.db");
                let store = store_sqlite::SqliteStore::open(&db)
                    .with_context(|| format!("cannot open the store at {}", db.display()))?;
                Ok(Arc::new(store))
            }
            StoreChoice::Etcd { endpoints } => open_etcd(endpoints, etcd).await,
        }
    }
}

#[cfg(feature = "etcd")]
async fn open_etcd(endpoints: &[String], args: &EtcdArgs) -> anyhow::Result<Arc<dyn Store>> {
    let prefix = args.etcd_prefix.trim_end_matches('/');
    if !prefix.starts_with('/') {
        bail!("--etcd-prefix {}: must start with /", args.etcd_prefix);
    }
    let config = store_etcd::EtcdConfig {
        endpoints: endpoints.to_vec(),
        tls: store_etcd::TlsFiles {
            ca_file: args.etcd_cafile.clone(),
            cert_file: args.etcd_certfile.clone(),
            key_file: args.etcd_keyfile.clone(),
        },
        layout: store_etcd::Layout::new(SERVER_ROOT, prefix),
    };
    // etcd may come up after the server (a cluster starting at once, a member rebooting):
    // an unreachable etcd is waited for, with backoff; bad flags or files are not.
    let mut wait = std::time::Duration::from_millis(200);
    let store = loop {
        match store_etcd::EtcdStore::connect(config.clone()).await {
            Ok(store) => break store,
            Err(e @ store_etcd::ConnectError::Unreachable { .. }) => {
                tracing::warn!("{e}; trying again in {wait:?}");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(std::time::Duration::from_secs(5));
            }
            Err(e) => return Err(e).context("cannot open the etcd store"),
        }
    };
    tracing::info!(
        "store: etcd at {} (keys under {prefix}/)",
        endpoints.join(",")
    );
    Ok(Arc::new(store))
}

#[cfg(not(feature = "etcd"))]
async fn open_etcd(_endpoints: &[String], _args: &EtcdArgs) -> anyhow::Result<Arc<dyn Store>> {
    let _ = SERVER_ROOT;
    bail!("--store etcd=...: this virtplane was built without the `etcd` cargo feature")
}
