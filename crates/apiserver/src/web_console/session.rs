//! The console's sign-in: a bearer token (or the browser's client certificate) opens a
//! session, kept in this server's memory and named by an HttpOnly, Secure,
//! SameSite=Strict cookie. A request with the cookie and no other credentials is the
//! token's own request — authenticated again each time, so a token taken out of the
//! token files stops working in the browser too — and a request that changes anything
//! must carry the session's CSRF token in `X-CSRF-Token`; a websocket (which cannot
//! carry headers from a page) must come from the console's own origin.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use access::authn::{Authentication, Authenticator, ClientCertificateIdentity, UserInfo};
use apimachinery::status::Status;
use base64::Engine;
use http::request::Parts;
use http::{header, Method};
use rand::RngCore;

pub const COOKIE: &str = "virtplane-session";
pub const CSRF_HEADER: &str = "x-csrf-token";
/// How long a session lasts after sign-in.
pub const LIFETIME: Duration = Duration::from_secs(8 * 3600);

struct Session {
    token: String,
    csrf: String,
    expires: Instant,
}

/// A session just opened: its cookie value and CSRF token.
pub struct Opened {
    pub id: String,
    pub csrf: String,
}

#[derive(Default)]
pub struct Sessions {
    open: Mutex<HashMap<String, Session>>,
}

fn random() -> String {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// The value of cookie `name` in a request's `Cookie` headers.
pub fn cookie<'a>(parts: &'a Parts, name: &str) -> Option<&'a str> {
    parts
        .headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

impl Sessions {
    /// Opens a session for a token already known to be good.
    pub fn open(&self, token: &str) -> Opened {
        let opened = Opened {
            id: random(),
            csrf: random(),
        };
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.retain(|_, s| s.expires > now);
        open.insert(
            opened.id.clone(),
            Session {
                token: token.to_string(),
                csrf: opened.csrf.clone(),
                expires: now + LIFETIME,
            },
        );
        opened
    }

    /// Ends the request's session, if it has one.
    pub fn close(&self, parts: &Parts) {
        if let Some(id) = cookie(parts, COOKIE) {
            self.open
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(id);
        }
    }

    /// The (token, CSRF token) of the request's session, if it is open.
    fn session_of(&self, parts: &Parts) -> Option<(String, String)> {
        let id = cookie(parts, COOKIE)?;
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        match open.get(id) {
            Some(s) if s.expires > Instant::now() => Some((s.token.clone(), s.csrf.clone())),
            Some(_) => {
                open.remove(id);
                None
            }
            None => None,
        }
    }

    /// The user and CSRF token of the request's session ("" for a client certificate,
    /// which the browser sends by itself), for `GET /ui/session`.
    pub fn whoami(
        &self,
        parts: &Parts,
        authenticator: &Authenticator,
    ) -> Option<(UserInfo, String)> {
        let certificate = parts.extensions.get::<ClientCertificateIdentity>();
        if certificate.is_some() {
            return match authenticator.authenticate(&http::HeaderMap::new(), certificate) {
                Authentication::User(user) => Some((user, String::new())),
                _ => None,
            };
        }
        let (token, csrf) = self.session_of(parts)?;
        Some((authenticator.user_of_token(&token)?, csrf))
    }

    /// The user of a request made with the session cookie and no other credentials:
    /// `None` when it is not such a request (the usual authenticators decide), else the
    /// user, or 401 for a session that is gone or whose token no longer works, or 403
    /// for a changing request without the session's CSRF token or a websocket from
    /// another origin.
    pub fn authenticate(
        &self,
        parts: &Parts,
        authenticator: &Authenticator,
    ) -> Option<Result<UserInfo, Status>> {
        if parts.headers.contains_key(header::AUTHORIZATION)
            || parts
                .extensions
                .get::<ClientCertificateIdentity>()
                .is_some()
        {
            return None;
        }
        cookie(parts, COOKIE)?;
        let Some((token, csrf)) = self.session_of(parts) else {
            return Some(Err(Status::unauthorized()));
        };
        if let Err(status) = check_request(parts, &csrf) {
            return Some(Err(status));
        }
        Some(
            authenticator
                .user_of_token(&token)
                .ok_or_else(Status::unauthorized),
        )
    }
}

/// What a cookie-authenticated request must show besides the cookie.
fn check_request(parts: &Parts, csrf: &str) -> Result<(), Status> {
    let websocket = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if websocket {
        let origin = parts
            .headers
            .get(header::ORIGIN)
            .and_then(|v| v.to_str().ok());
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok());
        return match (origin, host) {
            (Some(origin), Some(host)) if origin == format!("https://{host}") => Ok(()),
            _ => Err(Status::failure(
                403,
                "Forbidden",
                format!(
                    "websocket from origin {} refused: the web console's session works only from its own origin",
                    origin.unwrap_or("(none)")
                ),
            )),
        };
    }
    if matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Ok(());
    }
    let given = parts.headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    match given {
        Some(given) if constant_time_eq(given.as_bytes(), csrf.as_bytes()) => Ok(()),
        _ => Err(Status::failure(
            403,
            "Forbidden",
            "the web console session's CSRF token is missing or wrong (X-CSRF-Token)",
        )),
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use access::pki::TokenUser;

    fn authenticator() -> Authenticator {
        Authenticator::new([(
            "good".to_string(),
            TokenUser {
                user: "alice".into(),
                uid: None,
                groups: vec![],
            },
        )])
    }

    fn request(method: &str, headers: &[(&str, &str)]) -> Parts {
        let mut builder = http::Request::builder().method(method).uri("/api/v1/pods");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).expect("request").into_parts().0
    }

    #[test]
    fn a_session_stands_for_its_token_and_changes_need_its_csrf_token() {
        let sessions = Sessions::default();
        let auth = authenticator();
        let opened = sessions.open("good");
        let cookie = format!("other=1; {COOKIE}={}", opened.id);
        let get = request("GET", &[("cookie", &cookie)]);
        let user = sessions
            .authenticate(&get, &auth)
            .expect("a session")
            .expect("good");
        assert_eq!(user.name, "alice");
        let post = request("POST", &[("cookie", &cookie)]);
        assert_eq!(
            sessions
                .authenticate(&post, &auth)
                .expect("a session")
                .unwrap_err()
                .code,
            403
        );
        let forged = request("POST", &[("cookie", &cookie), (CSRF_HEADER, "guess")]);
        assert_eq!(
            sessions
                .authenticate(&forged, &auth)
                .expect("a session")
                .unwrap_err()
                .code,
            403
        );
        let post = request("POST", &[("cookie", &cookie), (CSRF_HEADER, &opened.csrf)]);
        assert!(sessions
            .authenticate(&post, &auth)
            .expect("a session")
            .is_ok());
        // A websocket must come from the console's origin.
        let ws = |origin: &str| {
            request(
                "GET",
                &[
                    ("cookie", &cookie),
                    ("upgrade", "websocket"),
                    ("host", "h:6443"),
                    ("origin", origin),
                ],
            )
        };
        assert!(sessions
            .authenticate(&ws("https://h:6443"), &auth)
            .expect("a session")
            .is_ok());
        assert_eq!(
            sessions
                .authenticate(&ws("https://evil"), &auth)
                .expect("a session")
                .unwrap_err()
                .code,
            403
        );
        // Other credentials win; an unknown or closed session is 401.
        let bearer = request("GET", &[("cookie", &cookie), ("authorization", "Bearer x")]);
        assert!(sessions.authenticate(&bearer, &auth).is_none());
        sessions.close(&get);
        assert_eq!(
            sessions
                .authenticate(&get, &auth)
                .expect("a session")
                .unwrap_err()
                .code,
            401
        );
        assert!(sessions.authenticate(&request("GET", &[]), &auth).is_none());
    }

    #[test]
    fn a_session_of_a_token_taken_away_is_refused() {
        let sessions = Sessions::default();
        let opened = sessions.open("gone");
        let get = request("GET", &[("cookie", &format!("{COOKIE}={}", opened.id))]);
        assert_eq!(
            sessions
                .authenticate(&get, &authenticator())
                .expect("a session")
                .unwrap_err()
                .code,
            401
        );
    }
}
