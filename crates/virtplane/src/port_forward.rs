//! `virtplane vm port-forward NAME [LOCAL:]PORT` and `virtplane vm ssh USER@NAME`, as
//! virtctl's: each local connection (or, with `--stdio`, this process's stdin and
//! stdout) gets its own websocket to the VM's `portforward/PORT/tcp` subresource, which
//! the server relays to the port at the VMI's Pod IP.

use anyhow::{bail, Context};
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

/// What to forward: `[LOCAL:]REMOTE`.
pub fn parse_ports(text: &str) -> anyhow::Result<(u16, u16)> {
    let parse = |p: &str| {
        p.parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .with_context(|| format!("{p:?} is not a port"))
    };
    match text.split_once(':') {
        Some((local, remote)) => Ok((parse(local)?, parse(remote)?)),
        None => {
            let port = parse(text)?;
            Ok((port, port))
        }
    }
}

fn path(namespace: &str, name: &str, port: u16) -> String {
    format!(
        "/apis/subresources.kubevirt.io/v1/namespaces/{namespace}/virtualmachines/{name}/portforward/{port}/tcp"
    )
}

/// Copies between `local` and one websocket to the VM's port until either side ends.
async fn relay<R, W>(
    config: &kube::Config,
    namespace: &str,
    name: &str,
    port: u16,
    mut from_local: R,
    mut to_local: W,
) -> anyhow::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let what = format!("port {port} of {name}");
    let socket = crate::console::open(config, &path(namespace, name, port), &what).await?;
    let (mut to_server, mut from_server) = socket.split();
    let upstream = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match from_local.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if to_server
                        .send(Message::Binary(buf[..n].to_vec().into()))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = to_server.send(Message::Close(None)).await;
    };
    let downstream = async {
        while let Some(Ok(message)) = from_server.next().await {
            let bytes = match message {
                Message::Binary(b) => b.to_vec(),
                Message::Text(t) => t.as_bytes().to_vec(),
                Message::Close(_) => break,
                _ => continue,
            };
            if to_local.write_all(&bytes).await.is_err() || to_local.flush().await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = upstream => {}
        () = downstream => {}
    }
    Ok(())
}

/// Forwards `address:local` to the VM's `remote` port until interrupted, or relays
/// stdin and stdout to it once (`stdio`, as ssh's ProxyCommand uses it).
pub async fn run(
    config: kube::Config,
    namespace: &str,
    name: &str,
    ports: (u16, u16),
    address: &str,
    stdio: bool,
) -> anyhow::Result<()> {
    let (local, remote) = ports;
    if stdio {
        return relay(
            &config,
            namespace,
            name,
            remote,
            tokio::io::stdin(),
            tokio::io::stdout(),
        )
        .await;
    }
    let listener = tokio::net::TcpListener::bind((address, local))
        .await
        .with_context(|| format!("cannot listen on {address}:{local}"))?;
    eprintln!("Forwarding from {address}:{local} -> {remote}");
    loop {
        let (connection, from) = listener.accept().await?;
        let (config, namespace, name) = (config.clone(), namespace.to_string(), name.to_string());
        tokio::spawn(async move {
            eprintln!("Handling connection for {local}");
            let (read, write) = connection.into_split();
            if let Err(e) = relay(&config, &namespace, &name, remote, read, write).await {
                eprintln!("error forwarding {from}: {e:#}");
            }
        });
    }
}

/// `ssh` to `USER@NAME` through the VM's port 22, with this binary as ssh's
/// ProxyCommand; `extra` goes to ssh as it is.
pub fn ssh(
    kubeconfig: Option<&std::path::Path>,
    namespace: &str,
    target: &str,
    port: u16,
    extra: &[String],
) -> anyhow::Result<std::process::ExitStatus> {
    let (user, name) = match target.split_once('@') {
        Some((user, name)) => (Some(user), name),
        None => (None, target),
    };
    if name.is_empty() {
        bail!("ssh: name the VM as USER@NAME");
    }
    let me = std::env::current_exe().context("cannot find this binary")?;
    let mut proxy = format!(
        "{} vm port-forward {name} {port} --stdio -n {namespace}",
        me.display()
    );
    if let Some(kubeconfig) = kubeconfig {
        proxy.push_str(&format!(" --kubeconfig {}", kubeconfig.display()));
    }
    let host = match user {
        Some(user) => format!("{user}@vm/{name}.{namespace}"),
        None => format!("vm/{name}.{namespace}"),
    };
    std::process::Command::new("ssh")
        .arg("-o")
        .arg(format!("ProxyCommand={proxy}"))
        .args(extra)
        .arg(host)
        .status()
        .context("cannot run ssh (Debian's openssh-client)")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_read_as_kubectl_reads_them() {
        assert_eq!(parse_ports("8080").unwrap(), (8080, 8080));
        assert_eq!(parse_ports("2222:22").unwrap(), (2222, 22));
        assert!(parse_ports("0").is_err());
        assert!(parse_ports("x:22").is_err());
    }
}
