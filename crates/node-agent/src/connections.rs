//! The console, VNC and port-forward connections the node's endpoint relays now, per VMI:
//! KubeVirt's `kubevirt_console_active_connections`, `kubevirt_vnc_active_connections` and
//! `kubevirt_portforward_active_tunnels`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Kind {
    Console,
    Vnc,
    PortForward,
}

/// (kind, namespace, VMI name) → connections open now.
type Counts = HashMap<(Kind, String, String), i64>;

#[derive(Default, Debug)]
pub struct Connections {
    open: Mutex<Counts>,
}

impl Connections {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Counts a connection to the VMI `namespace/name` until the returned guard drops.
    pub fn open(self: &Arc<Self>, kind: Kind, namespace: &str, name: &str) -> Open {
        let key = (kind, namespace.to_string(), name.to_string());
        *self.counts().entry(key.clone()).or_default() += 1;
        Open {
            connections: self.clone(),
            key,
        }
    }

    /// What is open now, VMIs with nothing open left out.
    pub fn now(&self) -> Vec<((Kind, String, String), i64)> {
        self.counts().iter().map(|(k, n)| (k.clone(), *n)).collect()
    }
}

/// One open connection.
pub struct Open {
    connections: Arc<Connections>,
    key: (Kind, String, String),
}

impl Drop for Open {
    fn drop(&mut self) {
        let mut counts = self.connections.counts();
        if let Some(n) = counts.get_mut(&self.key) {
            *n -= 1;
            if *n <= 0 {
                counts.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_counts_while_it_is_open() {
        let connections = Arc::new(Connections::default());
        let first = connections.open(Kind::Vnc, "default", "vm1");
        let second = connections.open(Kind::Vnc, "default", "vm1");
        let _console = connections.open(Kind::Console, "default", "vm1");
        let vnc = |c: &Connections| {
            c.now()
                .into_iter()
                .find(|((kind, _, _), _)| *kind == Kind::Vnc)
                .map(|(_, n)| n)
        };
        assert_eq!(vnc(&connections), Some(2));
        drop(first);
        assert_eq!(vnc(&connections), Some(1));
        drop(second);
        assert_eq!(vnc(&connections), None);
        assert_eq!(connections.now().len(), 1);
    }
}
