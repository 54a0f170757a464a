//! Streams of bytes over websockets, for the relays of consoles and VNC (Kubernetes keeps
//! its websocket stream helpers in apimachinery too): a websocket seen as bytes in and
//! bytes out, and one relay that copies two such ends into each other.

use std::future::Future;

use bytes::Bytes;
use futures::{future, Sink, SinkExt, Stream, StreamExt};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// A websocket as the bytes it receives (binary and text payloads, until a close or an
/// error) and a sink that sends bytes as binary messages.
pub fn byte_halves<S>(
    socket: WebSocketStream<S>,
) -> (
    impl Stream<Item = Bytes>,
    impl Sink<Bytes, Error = tungstenite::Error>,
)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (sink, stream) = socket.split();
    let incoming = stream
        .take_while(|m| future::ready(matches!(m, Ok(m) if !m.is_close())))
        .filter_map(|m| {
            future::ready(match m {
                Ok(Message::Binary(b)) => Some(b),
                Ok(Message::Text(t)) => Some(Bytes::copy_from_slice(t.as_bytes())),
                _ => None,
            })
        });
    let outgoing = sink.with(|b: Bytes| future::ready(Ok(Message::Binary(b))));
    (incoming, outgoing)
}

/// Copies `a_in` into `b_out` and `b_in` into `a_out` until either input ends, an output
/// fails, or `until` completes; then closes both outputs (a websocket sink sends its close
/// frame), so the far ends learn that the relay is over.
pub async fn relay<AI, AO, BI, BO>(a_in: AI, a_out: AO, b_in: BI, b_out: BO, until: impl Future)
where
    AI: Stream<Item = Bytes>,
    AO: Sink<Bytes>,
    BI: Stream<Item = Bytes>,
    BO: Sink<Bytes>,
{
    let mut a_out = std::pin::pin!(a_out);
    let mut b_out = std::pin::pin!(b_out);
    let a_to_b = copy(a_in, b_out.as_mut());
    let b_to_a = copy(b_in, a_out.as_mut());
    tokio::select! {
        _ = a_to_b => {}
        _ = b_to_a => {}
        _ = until => {}
    }
    let _ = future::join(a_out.close(), b_out.close()).await;
}

async fn copy<I: Stream<Item = Bytes>, O: Sink<Bytes>>(
    input: I,
    mut output: std::pin::Pin<&mut O>,
) {
    let mut input = std::pin::pin!(input);
    while let Some(bytes) = input.next().await {
        if output.send(bytes).await.is_err() {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::channel::mpsc;

    fn end() -> (mpsc::UnboundedSender<Bytes>, mpsc::UnboundedReceiver<Bytes>) {
        mpsc::unbounded()
    }

    #[tokio::test]
    async fn bytes_cross_both_ways_and_an_ended_input_closes_both_outputs() {
        let (a_feed, a_in) = end();
        let (a_out, mut a_seen) = end();
        let (b_feed, b_in) = end();
        let (b_out, mut b_seen) = end();
        a_feed.unbounded_send(Bytes::from_static(b"to b")).unwrap();
        b_feed.unbounded_send(Bytes::from_static(b"to a")).unwrap();
        drop(a_feed);
        relay(a_in, a_out, b_in, b_out, future::pending::<()>()).await;
        assert_eq!(b_seen.next().await.as_deref(), Some(&b"to b"[..]));
        assert_eq!(b_seen.next().await, None, "b's output was closed");
        // b's bytes may or may not have crossed before a ended; a's output is closed.
        while let Some(bytes) = a_seen.next().await {
            assert_eq!(bytes, Bytes::from_static(b"to a"));
        }
        drop(b_feed);
    }

    #[tokio::test]
    async fn until_ends_a_relay_whose_ends_are_still_open() {
        let (_a_feed, a_in) = end();
        let (a_out, mut a_seen) = end();
        let (_b_feed, b_in) = end();
        let (b_out, mut b_seen) = end();
        relay(a_in, a_out, b_in, b_out, future::ready(())).await;
        assert_eq!(a_seen.next().await, None);
        assert_eq!(b_seen.next().await, None);
    }
}
