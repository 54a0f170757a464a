//! A response body that holds something until the body is done with: a watch's place
//! in its user's watch budget, the audit record a long-running request completes.

use std::pin::Pin;
use std::task::{Context, Poll};

use axum::body::{Body, Bytes, HttpBody};
use axum::response::Response;

/// `response` with `guard` dropped when its body is (sent whole, or the client gone).
pub(crate) fn hold<G: Send + Unpin + 'static>(response: Response, guard: G) -> Response {
    response.map(|body| {
        Body::new(Guarded {
            body,
            _guard: guard,
        })
    })
}

struct Guarded<G> {
    body: Body,
    _guard: G,
}

impl<G: Unpin> HttpBody for Guarded<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
