//! Upload tokens, as CDI's UploadTokenRequest hands them out and its upload proxy checks
//! them: a JWT naming the operation (`Upload`), the namespace and the claim, issued by
//! `cdi-apiserver`, valid for five minutes (ten seconds of leeway). CDI signs with RSA
//! (PS256); virtplane signs with HMAC-SHA256 (HS256) under a key derived from the cluster
//! CA's private key, so every server sharing the PKI accepts the tokens of the others.

use std::time::Duration;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

/// CDI's `common.UploadTokenIssuer`.
pub const ISSUER: &str = "cdi-apiserver";
/// CDI's token lifetime.
pub const LIFETIME: Duration = Duration::from_secs(5 * 60);
/// CDI's `uploadTokenLeeway`: clocks may differ this much.
pub const LEEWAY: Duration = Duration::from_secs(10);
/// What the signing key is derived for (`Pki::derived_secret`).
pub const KEY_PURPOSE: &str = "virtplane.io/upload-token-signing-key/v1";

const OPERATION_UPLOAD: &str = "Upload";
const HEADER: &str = r#"{"alg":"HS256","typ":"JWT"}"#;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct GroupVersionResource {
    #[serde(default)]
    group: String,
    #[serde(default)]
    version: String,
    #[serde(default)]
    resource: String,
}

/// The registered claims of a JWT and CDI's `token.Payload`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Claims {
    #[serde(default)]
    iss: String,
    #[serde(default)]
    iat: i64,
    #[serde(default)]
    nbf: i64,
    #[serde(default)]
    exp: i64,
    #[serde(default)]
    operation: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    resource: Option<GroupVersionResource>,
}

/// What a valid upload token allows: an upload into this claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not three base64url parts of JSON, or not an HS256 JWT.
    #[error("the token is not a JWT this server issued")]
    Malformed,
    #[error("the token's signature does not match")]
    BadSignature,
    #[error("the token has expired")]
    Expired,
    #[error("the token is not valid yet")]
    NotYetValid,
    #[error("the token was issued by {0:?}, not {ISSUER:?}")]
    WrongIssuer(String),
    /// Validly signed, but not an upload into a named claim (CDI answers 400).
    #[error("the token is not for an upload into a claim")]
    NotForUpload,
}

impl TokenError {
    /// Whether the token proves nothing (401); otherwise it is merely not for this (400).
    pub fn unauthorized(&self) -> bool {
        !matches!(self, TokenError::NotForUpload)
    }
}

/// Issues and checks upload tokens under one key.
pub struct Signer {
    key: [u8; 32],
}

impl Signer {
    pub fn new(key: [u8; 32]) -> Signer {
        Signer { key }
    }

    fn mac(&self, signed: &str) -> Hmac<Sha256> {
        let mut mac =
            <Hmac<Sha256> as Mac>::new_from_slice(&self.key).expect("HMAC takes any key length");
        mac.update(signed.as_bytes());
        mac
    }

    /// A token for an upload into claim `name` of `namespace`, issued at `now` (Unix
    /// seconds).
    pub fn issue(&self, namespace: &str, name: &str, now: i64) -> String {
        let claims = Claims {
            iss: ISSUER.into(),
            iat: now,
            nbf: now,
            exp: now + LIFETIME.as_secs() as i64,
            operation: OPERATION_UPLOAD.into(),
            name: name.into(),
            namespace: namespace.into(),
            resource: Some(GroupVersionResource {
                group: String::new(),
                version: "v1".into(),
                resource: "persistentvolumeclaims".into(),
            }),
        };
        let payload = serde_json::to_vec(&claims).unwrap_or_default();
        let signed = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(HEADER),
            URL_SAFE_NO_PAD.encode(payload)
        );
        let signature = self.mac(&signed).finalize().into_bytes();
        format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
    }

    /// Checks a token at `now` (Unix seconds): signature, issuer, validity window, and that
    /// it grants an upload into a named claim.
    pub fn verify(&self, token: &str, now: i64) -> Result<Grant, TokenError> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let decode = |part: &str| {
            URL_SAFE_NO_PAD
                .decode(part)
                .map_err(|_| TokenError::Malformed)
        };
        let header: serde_json::Value =
            serde_json::from_slice(&decode(header)?).map_err(|_| TokenError::Malformed)?;
        if header.get("alg").and_then(serde_json::Value::as_str) != Some("HS256") {
            return Err(TokenError::Malformed);
        }
        let signed_len = token.len() - signature.len() - 1;
        self.mac(&token[..signed_len])
            .verify_slice(&decode(signature)?)
            .map_err(|_| TokenError::BadSignature)?;
        let claims: Claims =
            serde_json::from_slice(&decode(payload)?).map_err(|_| TokenError::Malformed)?;
        if claims.iss != ISSUER {
            return Err(TokenError::WrongIssuer(claims.iss));
        }
        let leeway = LEEWAY.as_secs() as i64;
        if now > claims.exp + leeway {
            return Err(TokenError::Expired);
        }
        if now + leeway < claims.nbf {
            return Err(TokenError::NotYetValid);
        }
        let for_claims = claims
            .resource
            .as_ref()
            .is_some_and(|r| r.resource == "persistentvolumeclaims");
        if claims.operation != OPERATION_UPLOAD
            || claims.name.is_empty()
            || claims.namespace.is_empty()
            || !for_claims
        {
            return Err(TokenError::NotForUpload);
        }
        Ok(Grant {
            namespace: claims.namespace,
            name: claims.name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn signer() -> Signer {
        Signer::new([7; 32])
    }

    #[test]
    fn a_token_grants_its_claim_for_five_minutes() {
        let token = signer().issue("team", "disk", NOW);
        let grant = Grant {
            namespace: "team".into(),
            name: "disk".into(),
        };
        assert_eq!(signer().verify(&token, NOW), Ok(grant.clone()));
        // CDI's proxy matches the token with [A-Za-z0-9-._~+/]+.
        assert!(token
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._~+/".contains(c)));
        assert_eq!(signer().verify(&token, NOW + 300 + 10), Ok(grant));
        assert_eq!(
            signer().verify(&token, NOW + 300 + 11),
            Err(TokenError::Expired)
        );
        assert_eq!(
            signer().verify(&token, NOW - 11),
            Err(TokenError::NotYetValid)
        );
    }

    #[test]
    fn another_key_or_a_changed_token_is_refused() {
        let token = signer().issue("team", "disk", NOW);
        assert_eq!(
            Signer::new([8; 32]).verify(&token, NOW),
            Err(TokenError::BadSignature)
        );
        // The payload of a token for another claim with this token's signature.
        let other = signer().issue("team", "other", NOW);
        let mut forged: Vec<&str> = other.split('.').collect();
        let signature = token.rsplit('.').next().unwrap();
        forged[2] = signature;
        assert_eq!(
            signer().verify(&forged.join("."), NOW),
            Err(TokenError::BadSignature)
        );
        for garbage in ["", "a.b", "a.b.c", "a.b.c.d", "not a token"] {
            assert_eq!(
                signer().verify(garbage, NOW),
                Err(TokenError::Malformed),
                "{garbage:?}"
            );
        }
        // alg "none" is not taken for HS256.
        let mut parts: Vec<String> = token.split('.').map(str::to_string).collect();
        parts[0] = URL_SAFE_NO_PAD.encode(r#"{"alg":"none"}"#);
        assert_eq!(
            signer().verify(&parts.join("."), NOW),
            Err(TokenError::Malformed)
        );
    }

    #[test]
    fn a_signed_token_for_something_else_is_not_an_upload_grant() {
        let s = signer();
        let sign = |claims: &Claims| {
            let signed = format!(
                "{}.{}",
                URL_SAFE_NO_PAD.encode(HEADER),
                URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap())
            );
            let signature = s.mac(&signed).finalize().into_bytes();
            format!("{signed}.{}", URL_SAFE_NO_PAD.encode(signature))
        };
        let token = s.issue("team", "disk", NOW);
        let payload = token.split('.').nth(1).unwrap();
        let claims: Claims =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(payload).unwrap()).unwrap();
        let clone = Claims {
            operation: "Clone".into(),
            ..claims.clone()
        };
        assert_eq!(s.verify(&sign(&clone), NOW), Err(TokenError::NotForUpload));
        assert!(!TokenError::NotForUpload.unauthorized());
        let nameless = Claims {
            name: String::new(),
            ..claims.clone()
        };
        assert_eq!(
            s.verify(&sign(&nameless), NOW),
            Err(TokenError::NotForUpload)
        );
        let foreign = Claims {
            iss: "someone".into(),
            ..claims
        };
        assert_eq!(
            s.verify(&sign(&foreign), NOW),
            Err(TokenError::WrongIssuer("someone".into()))
        );
    }
}
