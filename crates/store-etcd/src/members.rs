//! The etcd members behind one store, one client each, and failing over between them.
//!
//! etcd-client balances one channel over every endpoint and keeps sending requests to a
//! member that died (each fails with `tcp connect error`), so a cluster that keeps its
//! quorum would still fail a share of the server's requests. Instead the store talks to
//! one member at a time, as etcd's own Go client does, and moves to the next when that
//! one cannot be reached: reads go to the next member at once; writes only when the
//! failed attempt never reached the member (a connection refused), since a write whose
//! answer was lost may have been applied.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client::{Client, ConnectOptions, KvClient, WatchClient};

/// etcd answers a range, or a batch of watch events, in one message, which may pass
/// tonic's 4 MiB default (a LIST of thousands of VMs, a watch resumed far back): take
/// what etcd sends, as etcd's Go client does (its limit is 2 GiB).
const MAX_MESSAGE: usize = i32::MAX as usize;

/// `client`'s KV calls, without the 4 MiB answer limit.
pub fn kv(client: &Client) -> KvClient {
    client.kv_client().max_decoding_message_size(MAX_MESSAGE)
}

/// `client`'s watches, without the 4 MiB answer limit.
pub fn watcher(client: &Client) -> WatchClient {
    client.watch_client().max_decoding_message_size(MAX_MESSAGE)
}

/// Whether a request may be sent again after a failure whose outcome is unknown.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// A read: sending it twice changes nothing.
    Any,
    /// A write: only when it never reached a member.
    NotSent,
}

pub struct Members {
    members: Vec<Member>,
    current: AtomicUsize,
}

struct Member {
    endpoint: String,
    client: Client,
}

impl Members {
    /// One client per endpoint (each connects lazily: a member that is down now is
    /// tried again when its turn comes).
    pub async fn connect(
        endpoints: &[String],
        options: ConnectOptions,
    ) -> Result<Members, etcd_client::Error> {
        let mut members = Vec::new();
        for endpoint in endpoints {
            let client = Client::connect([endpoint], Some(options.clone())).await?;
            members.push(Member {
                endpoint: endpoint.clone(),
                client,
            });
        }
        Ok(Members {
            members,
            current: AtomicUsize::new(0),
        })
    }

    /// The member requests go to now, and its index (for `failed`).
    pub fn current(&self) -> (usize, Client) {
        let index = self.current.load(Ordering::Acquire) % self.members.len();
        (index, self.members[index].client.clone())
    }

    /// After a request to member `index` failed with `error`: when the member cannot be
    /// reached, the next one serves from now on. Whether it could not be reached.
    pub fn failed(&self, index: usize, error: &etcd_client::Error) -> bool {
        if !unreachable(error) {
            return false;
        }
        let next = (index + 1) % self.members.len();
        if next != index
            && self
                .current
                .compare_exchange(index, next, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            tracing::warn!(
                "etcd member {} cannot be reached ({error}); moving to {}",
                self.members[index].endpoint,
                self.members[next].endpoint
            );
        }
        true
    }

    /// `request` on the current member, then on the others in turn while members cannot
    /// be reached and `retry` allows sending it again.
    pub async fn call<T, F, Fut>(
        &self,
        retry: Retry,
        mut request: F,
    ) -> Result<T, etcd_client::Error>
    where
        F: FnMut(Client) -> Fut,
        Fut: Future<Output = Result<T, etcd_client::Error>>,
    {
        let mut attempts = self.members.len();
        loop {
            let (index, client) = self.current();
            let error = match request(client).await {
                Ok(answer) => return Ok(answer),
                Err(error) => error,
            };
            attempts -= 1;
            let moved = self.failed(index, &error);
            let again = match retry {
                Retry::Any => moved,
                Retry::NotSent => moved && not_sent(&error),
            };
            if !again || attempts == 0 {
                return Err(error);
            }
        }
    }
}

/// The member is down or cut off: another one may answer.
fn unreachable(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::TransportError(_) => true,
        etcd_client::Error::GRpcStatus(status) => match status.code() {
            tonic::Code::Unavailable | tonic::Code::DeadlineExceeded => true,
            // A connection that broke under a request (the member was killed) is reported
            // with code Unknown and the transport's words.
            tonic::Code::Unknown => ["transport error", "h2 protocol error", "connection"]
                .iter()
                .any(|sign| status.message().contains(sign)),
            _ => false,
        },
        _ => false,
    }
}

/// The request never left: no connection to the member could be made.
fn not_sent(error: &etcd_client::Error) -> bool {
    let text = match error {
        etcd_client::Error::GRpcStatus(status) => status.message().to_string(),
        other => other.to_string(),
    };
    [
        "tcp connect error",
        "Connection refused",
        "error trying to connect",
    ]
    .iter()
    .any(|sign| text.contains(sign))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn a_refused_connection_is_unreachable_and_never_sent() {
        let refused = status(tonic::Code::Unavailable, "tcp connect error");
        assert!(unreachable(&refused));
        assert!(not_sent(&refused));
    }

    #[test]
    fn a_broken_connection_may_have_carried_the_request() {
        let reset = status(
            tonic::Code::Unavailable,
            "error reading a body from connection",
        );
        assert!(unreachable(&reset));
        assert!(!not_sent(&reset));
    }

    #[test]
    fn a_connection_reset_under_a_request_is_unreachable() {
        let reset = status(
            tonic::Code::Unknown,
            "h2 protocol error: error reading a body from connection",
        );
        assert!(unreachable(&reset));
        assert!(!not_sent(&reset));
    }

    #[test]
    fn etcds_own_refusals_are_not_a_member_failure() {
        let full = status(
            tonic::Code::ResourceExhausted,
            "etcdserver: mvcc: database space exceeded",
        );
        assert!(!unreachable(&full));
        let compacted = status(
            tonic::Code::OutOfRange,
            "etcdserver: mvcc: required revision has been compacted",
        );
        assert!(!unreachable(&compacted));
    }
}
