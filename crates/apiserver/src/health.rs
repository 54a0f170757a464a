//! `/healthz`, `/livez` and `/readyz` as kube-apiserver answers them: `ok`, or with
//! `?verbose` one `[+]check ok` line per check; a failing check makes the answer 500 and
//! is listed as `[-]check failed: reason`. The store is a check of readiness and health
//! (kube's `etcd`), not of liveness: a server whose store cannot write is alive, but a load
//! balancer should send it nothing.

use axum::response::{IntoResponse, Response};
use http::StatusCode;

use crate::request::Query;

/// One check's outcome.
struct Check {
    name: &'static str,
    failure: Option<String>,
}

/// The answer for `endpoint` (`healthz`, `livez`, `readyz`) or for one named check of it.
pub fn answer(endpoint_or_check: &str, store: &dyn store::Store, query: &Query) -> Response {
    let store_check = || Check {
        name: "store",
        failure: store.health().err(),
    };
    let ping = || Check {
        name: "ping",
        failure: None,
    };
    let (endpoint, checks) = match endpoint_or_check {
        "livez" => ("livez", vec![ping()]),
        "healthz" | "readyz" => (endpoint_or_check, vec![ping(), store_check()]),
        // One check by name (`/readyz/store`).
        "store" => return single(store_check()),
        _ => return single(ping()),
    };
    let failed = checks.iter().any(|c| c.failure.is_some());
    if !failed && !query.verbose {
        return (StatusCode::OK, "ok").into_response();
    }
    let mut body = String::new();
    for check in &checks {
        match &check.failure {
            None => body.push_str(&format!("[+]{} ok\n", check.name)),
            Some(why) => body.push_str(&format!("[-]{} failed: {why}\n", check.name)),
        }
    }
    if failed {
        tracing::warn!("{endpoint} check failed: {}", body.replace('\n', "; "));
        body.push_str(&format!("{endpoint} check failed\n"));
        (StatusCode::INTERNAL_SERVER_ERROR, body).into_response()
    } else {
        body.push_str(&format!("{endpoint} check passed\n"));
        (StatusCode::OK, body).into_response()
    }
}

fn single(check: Check) -> Response {
    match check.failure {
        None => (StatusCode::OK, "ok").into_response(),
        Some(why) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {why}\n"),
        )
            .into_response(),
    }
}
