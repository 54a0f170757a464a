//! `virtplane user add`: a client certificate signed by the cluster CA (CN = user,
//! O = groups) in a kubeconfig of its own, or a bearer token (`--token`), and optionally
//! a binding of a role to it, made through the API with the admin kubeconfig.

use std::path::{Path, PathBuf};

use access::pki::{Credentials, Pki};
use anyhow::{bail, Context};
use kube::api::PostParams;
use kube::core::{ApiResource, DynamicObject, GroupVersionKind};
use kube::Api;
use serde_json::json;

pub struct AddUser {
    pub name: String,
    pub groups: Vec<String>,
    pub namespace: Option<String>,
    pub role: Option<String>,
    /// A bearer token instead of a client certificate.
    pub token: bool,
    pub data_dir: PathBuf,
}

/// The API server URL the server wrote into `DATA_DIR/admin.kubeconfig`.
fn server_urls(data_dir: &Path) -> anyhow::Result<Vec<String>> {
    let path = data_dir.join("admin.kubeconfig");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "cannot read {} (run `virtplane server --data-dir {}` once first)",
            path.display(),
            data_dir.display()
        )
    })?;
    let urls: Vec<String> = text
        .lines()
        .filter_map(|l| {
            l.trim()
                .strip_prefix("server:")
                .map(|s| s.trim().to_string())
        })
        .collect();
    if urls.is_empty() {
        bail!("{} names no server", path.display());
    }
    Ok(urls)
}

/// A user name that is also a file name.
fn check_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty() || name.starts_with('.') || name.contains(['/', '\0']) {
        bail!("user name {name:?} cannot be a file name in users/: no '/', no leading '.'");
    }
    Ok(())
}

pub fn add(user: AddUser) -> anyhow::Result<()> {
    check_name(&user.name)?;
    if user.namespace.is_some() && user.role.is_none() {
        bail!("--namespace says where to bind --role; give --role too");
    }
    if user.token {
        let token = access::pki::add_token(&user.data_dir.join("pki"), &user.name, &user.groups)
            .with_context(|| format!("data dir {}", user.data_dir.display()))?;
        println!("{token}");
        if let Some(role) = &user.role {
            bind(&user, role)?;
        }
        return Ok(());
    }
    let pki = Pki::load_ca(&user.data_dir.join("pki"))
        .with_context(|| format!("data dir {}", user.data_dir.display()))?;
    let urls = server_urls(&user.data_dir)?;
    let groups: Vec<&str> = user.groups.iter().map(String::as_str).collect();
    let (cert, key) = pki.issue_client_certificate(&user.name, &groups)?;
    let kubeconfig = pki.kubeconfig(
        &urls,
        &user.name,
        Credentials::ClientCertificate {
            cert: &cert,
            key: &key,
        },
    );
    let dir = user.data_dir.join("users");
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let path = dir.join(format!("{}.kubeconfig", user.name));
    access::pki::write_private(&path, &kubeconfig)?;
    println!("{}", path.display());
    if let Some(role) = &user.role {
        bind(&user, role)?;
    }
    Ok(())
}

/// A RoleBinding in `--namespace` (or a ClusterRoleBinding) of ClusterRole `role` to the
/// user, named `USER-ROLE`.
fn bind(user: &AddUser, role: &str) -> anyhow::Result<()> {
    let binding_name = format!("{}-{role}", user.name);
    let (kind, plural) = match user.namespace {
        Some(_) => ("RoleBinding", "rolebindings"),
        None => ("ClusterRoleBinding", "clusterrolebindings"),
    };
    let mut metadata = json!({"name": binding_name});
    if let Some(ns) = &user.namespace {
        metadata["namespace"] = json!(ns);
    }
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user.name}],
    });
    let admin = user.data_dir.join("admin.kubeconfig");
    let runtime = tokio::runtime::Runtime::new().context("cannot start the async runtime")?;
    runtime.block_on(async {
        let config = crate::admin::config(Some(&admin)).await?;
        let client = kube::Client::try_from(config).context("cannot build an API client")?;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("rbac.authorization.k8s.io", "v1", kind),
            plural,
        );
        let api: Api<DynamicObject> = match &user.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &resource),
            None => Api::all_with(client, &resource),
        };
        let object: DynamicObject = serde_json::from_value(binding)?;
        let scope = match &user.namespace {
            Some(ns) => format!(" in namespace {ns}"),
            None => " cluster-wide".to_string(),
        };
        match api.create(&PostParams::default(), &object).await {
            Ok(_) => {
                eprintln!(
                    "{} {binding_name} binds ClusterRole {role} to user {}{scope}",
                    kind.to_lowercase(),
                    user.name
                );
                Ok(())
            }
            Err(kube::Error::Api(status)) => {
                bail!("binding {role} to {}: {}", user.name, status.message)
            }
            Err(e) => Err(anyhow::Error::new(e).context(format!(
                "the certificate and kubeconfig are written, but the API server is not reachable to bind {role}{scope}; once it runs: kubectl --kubeconfig {} create {} {binding_name} --clusterrole={role} --user={}{}",
                admin.display(),
                kind.to_lowercase(),
                user.name,
                user.namespace.as_ref().map(|n| format!(" -n {n}")).unwrap_or_default(),
            ))),
        }
    })
}
