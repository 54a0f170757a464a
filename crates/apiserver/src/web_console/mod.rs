//! The web console: a single-page app served under `/ui/` from the binary itself (see
//! `build.rs`), and its sign-in (`/ui/session`). The app talks only to the public API,
//! as the signed-in user: RBAC, audit and limits apply to it as to kubectl.

mod assets;
mod session;

pub use session::Sessions;

use std::io::Read;

use access::authn::Authenticator;
use apimachinery::status::Status;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{header, HeaderValue, Method, StatusCode};
use http_body_util::BodyExt;
use serde_json::json;

use crate::http::status_response;

/// Where the console lives.
pub const PREFIX: &str = "/ui/";

/// Whether the request is the console's rather than the API's: a path under `/ui`, or a
/// browser asking for `/` (sent on to the console; API clients get the API's answer).
pub fn is_console_request(parts: &Parts) -> bool {
    let path = parts.uri.path();
    if path == "/ui" || path.starts_with(PREFIX) {
        return true;
    }
    path == "/"
        && parts.method == Method::GET
        && parts
            .headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|accept| accept.contains("text/html"))
}

/// Answers a console request.
pub async fn serve(
    sessions: &Sessions,
    authenticator: &Authenticator,
    parts: Parts,
    body: Body,
) -> Response {
    let path = parts.uri.path();
    if path == "/" || path == "/ui" {
        return redirect(PREFIX);
    }
    if path == "/ui/session" {
        return match session(sessions, authenticator, &parts, body).await {
            Ok(response) => response,
            Err(status) => status_response(&status),
        };
    }
    if !matches!(parts.method, Method::GET | Method::HEAD) {
        return status_response(&Status::failure(
            405,
            "MethodNotAllowed",
            format!("{} is not supported on {path}", parts.method),
        ));
    }
    static_file(&parts)
}

fn redirect(to: &'static str) -> Response {
    let mut response = StatusCode::FOUND.into_response();
    response
        .headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static(to));
    response
}

/// `/ui/session`: GET who is signed in, POST `{"token": …}` to sign in, DELETE to sign out.
async fn session(
    sessions: &Sessions,
    authenticator: &Authenticator,
    parts: &Parts,
    body: Body,
) -> Result<Response, Status> {
    match parts.method {
        Method::GET => {
            let (user, csrf) = sessions
                .whoami(parts, authenticator)
                .ok_or_else(Status::unauthorized)?;
            Ok(signed_in(&user, &csrf, None))
        }
        Method::POST => {
            let bytes = http_body_util::Limited::new(body, 64 * 1024)
                .collect()
                .await
                .map_err(|_| Status::bad_request("the sign-in body is not readable or too large"))?
                .to_bytes();
            let asked: serde_json::Value = serde_json::from_slice(&bytes)
                .map_err(|e| Status::bad_request(format!("the sign-in body is not JSON: {e}")))?;
            let token = asked["token"]
                .as_str()
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .ok_or_else(|| Status::bad_request("the sign-in body has no \"token\""))?;
            let user = authenticator.user_of_token(token).ok_or_else(|| {
                tracing::info!("web console sign-in with an unknown token refused");
                Status::unauthorized()
            })?;
            let opened = sessions.open(token);
            tracing::info!(user = %user.name, "web console session opened");
            let cookie = format!(
                "{}={}; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age={}",
                session::COOKIE,
                opened.id,
                session::LIFETIME.as_secs()
            );
            Ok(signed_in(&user, &opened.csrf, Some(cookie)))
        }
        Method::DELETE => {
            // Only the console itself may sign its user out.
            if let Some(Err(status)) = sessions.authenticate(parts, authenticator) {
                if status.code == 403 {
                    return Err(status);
                }
            }
            sessions.close(parts);
            let mut response = StatusCode::NO_CONTENT.into_response();
            let expired = format!(
                "{}=; Path=/; HttpOnly; Secure; SameSite=Strict; Max-Age=0",
                session::COOKIE
            );
            if let Ok(value) = HeaderValue::from_str(&expired) {
                response.headers_mut().insert(header::SET_COOKIE, value);
            }
            Ok(response)
        }
        _ => Err(Status::failure(
            405,
            "MethodNotAllowed",
            format!("{} is not supported on /ui/session", parts.method),
        )),
    }
}

fn signed_in(user: &access::authn::UserInfo, csrf: &str, cookie: Option<String>) -> Response {
    let body = json!({
        "user": {"username": user.name, "groups": user.groups},
        "csrfToken": csrf,
    });
    let mut response = (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some(value) = cookie.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::SET_COOKIE, value);
    }
    response
}

/// What a binary built without the console says at `/ui/`.
const NOT_BUILT: &str = "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>virtplane</title></head>\
<body><h1>virtplane</h1><p>This binary was built without its web console. The API is served as usual \
(kubectl, virtctl, the Python client).</p><p>To get the console, install Node.js and npm \
(<code>apt-get install nodejs npm</code>), run <code>scripts/build-ui</code>, then build virtplane again \
(<code>scripts/run</code> does all of it).</p></body></html>";

/// A file of the app; any other path under `/ui/` is the app's own route (its
/// `index.html`), except under `assets/`, where a missing file is a 404.
fn static_file(parts: &Parts) -> Response {
    let path = parts.uri.path().strip_prefix(PREFIX).unwrap_or("");
    if !assets::built() {
        let mut response = (StatusCode::OK, NOT_BUILT).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        return with_security_headers(response);
    }
    let (asset, immutable) = match assets::find(path) {
        Some(asset) if path != "index.html" => (asset, content_hashed(path)),
        _ if path.starts_with("assets/") => {
            return status_response(&Status::failure(
                404,
                "NotFound",
                format!("the web console has no file {path}"),
            ))
        }
        _ => match assets::find("index.html") {
            Some(index) => (index, false),
            None => return StatusCode::NOT_FOUND.into_response(),
        },
    };
    let gzip_ok = parts
        .headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.split(',').any(|e| e.trim().starts_with("gzip")));
    let body = if gzip_ok {
        asset.gzipped.to_vec()
    } else {
        let mut plain = Vec::with_capacity(asset.size);
        if let Err(e) = flate2::read::GzDecoder::new(asset.gzipped).read_to_end(&mut plain) {
            tracing::error!("embedded web console file {} is damaged: {e}", asset.path);
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
        plain
    };
    let body = if parts.method == Method::HEAD {
        Vec::new()
    } else {
        body
    };
    let mut response = (StatusCode::OK, body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(assets::content_type(asset.path)),
    );
    headers.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if gzip_ok {
        headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    // A file whose name carries a hash of its content never changes; index.html names them.
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if immutable {
            "public, max-age=31536000, immutable"
        } else {
            "no-cache"
        }),
    );
    with_security_headers(response)
}

/// Whether a file's name carries the bundler's hash of its content (`app-T4V4ZZ23.js`).
fn content_hashed(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let stem = name.split('.').next().unwrap_or(name);
    stem.rsplit_once('-').is_some_and(|(_, hash)| {
        hash.len() == 8
            && hash
                .bytes()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit())
    })
}

fn with_security_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    // The app loads only its own files and talks only to this server (websockets
    // included); PatternFly sets inline styles.
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; connect-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; font-src 'self' data:; frame-ancestors 'none'; base-uri 'self'; form-action 'self'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_files_named_by_their_content_are_kept_forever() {
        assert!(content_hashed("assets/app-T4V4ZZ23.js"));
        assert!(content_hashed("assets/app-53ZRKHSW.css.LEGAL.txt"));
        assert!(!content_hashed("assets/favicon.svg"));
        assert!(!content_hashed("index.html"));
        assert!(!content_hashed("assets/my-file.js"));
    }

    #[test]
    fn browsers_asking_for_the_root_go_to_the_console_and_api_clients_do_not() {
        let parts = |path: &str, accept: &str| {
            http::Request::builder()
                .uri(path)
                .header("accept", accept)
                .body(())
                .expect("request")
                .into_parts()
                .0
        };
        assert!(is_console_request(&parts(
            "/",
            "text/html,application/xhtml+xml"
        )));
        assert!(!is_console_request(&parts("/", "application/json")));
        assert!(is_console_request(&parts("/ui/vms/default/x", "*/*")));
        assert!(!is_console_request(&parts("/uix", "text/html")));
        assert!(!is_console_request(&parts("/api/v1/pods", "text/html")));
    }
}
