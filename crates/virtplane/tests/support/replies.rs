//! A response as the tests look at it, and checks of the Status bodies and warnings in it.

use reqwest::StatusCode;
use serde_json::{json, Value};

/// A response: status code, decoded JSON body (Null when empty or not JSON), headers.
pub struct Reply {
    pub status: StatusCode,
    pub body: Value,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
}

impl Reply {
    /// Reads the whole response.
    pub async fn read(response: reqwest::Response) -> Reply {
        let status = response.status();
        let headers = response.headers().clone();
        let text = response.text().await.unwrap_or_default();
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Reply {
            status,
            body,
            headers,
            text,
        }
    }
}

/// Checks the common shape of a failure Status and its code, reason and message.
pub fn assert_status(reply: &Reply, code: u16, reason: &str, message: &str) {
    assert_eq!(
        reply.status.as_u16(),
        code,
        "HTTP code; body: {}",
        reply.text
    );
    let body = &reply.body;
    assert_eq!(body["kind"], "Status", "{}", reply.text);
    assert_eq!(body["apiVersion"], "v1", "{}", reply.text);
    assert_eq!(body["metadata"], json!({}), "{}", reply.text);
    assert_eq!(body["status"], "Failure", "{}", reply.text);
    assert_eq!(body["code"], json!(code), "{}", reply.text);
    assert_eq!(body["reason"], reason, "{}", reply.text);
    assert_eq!(body["message"], message, "{}", reply.text);
    let ct = reply
        .headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(ct.starts_with("application/json"), "content-type {ct}");
}

/// The whole Status body, for exact comparisons.
pub fn assert_status_body(reply: &Reply, expected: Value) {
    let code = expected["code"].as_u64().expect("code in expected") as u16;
    assert_eq!(
        reply.status.as_u16(),
        code,
        "HTTP code; body: {}",
        reply.text
    );
    assert_eq!(
        reply.body, expected,
        "\n got: {}\nwant: {}",
        reply.text, expected
    );
}

/// `details.causes` as (reason, field, message) triples.
pub fn causes(reply: &Reply) -> Vec<(String, String, String)> {
    reply.body["details"]["causes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    (
                        c["reason"].as_str().unwrap_or("").to_string(),
                        c["field"].as_str().unwrap_or("").to_string(),
                        c["message"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `Warning` headers of a reply, decoded from `299 - "<text>"`.
pub fn warnings(reply: &Reply) -> Vec<String> {
    reply
        .headers
        .get_all("warning")
        .iter()
        .map(|v| {
            let raw = v.to_str().expect("ascii warning");
            let text = raw
                .strip_prefix("299 - ")
                .unwrap_or_else(|| panic!("warning {raw:?} lacks 299 - "));
            serde_json::from_str::<String>(text)
                .unwrap_or_else(|_| panic!("warning text {text:?} is not quoted"))
        })
        .collect()
}
