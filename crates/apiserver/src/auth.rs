//! Authentication: a verified client certificate or a known bearer token names the user;
//! anything else is 401. (Authorization comes later: an authenticated user may do anything.)

use std::collections::BTreeMap;

use http::HeaderMap;

use crate::pki::TokenUser;
use crate::tls::ClientCertificateIdentity;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub groups: Vec<String>,
}

/// Members of these groups act as KubeVirt's own service accounts do.
pub const COMPONENT_GROUPS: [&str; 2] = ["system:nodes", "system:virtplane-components"];

impl UserInfo {
    pub fn is_component(&self) -> bool {
        self.groups
            .iter()
            .any(|g| COMPONENT_GROUPS.contains(&g.as_str()))
    }
}

pub struct Authenticator {
    tokens: BTreeMap<String, TokenUser>,
}

impl Authenticator {
    pub fn new(tokens: BTreeMap<String, TokenUser>) -> Self {
        Authenticator { tokens }
    }

    /// The user behind a request, or `None` when it proves nobody.
    pub fn authenticate(
        &self,
        headers: &HeaderMap,
        certificate: Option<&ClientCertificateIdentity>,
    ) -> Option<UserInfo> {
        // kube-apiserver's union authenticator asks the x509 authenticator before the
        // token authenticators and stops at the first success: a verified client
        // certificate names the user whatever bearer token comes with it.
        if let Some(certificate) = certificate {
            return Some(certificate.0.clone());
        }
        if let Some(value) = headers.get(http::header::AUTHORIZATION) {
            let token = value.to_str().ok()?.strip_prefix("Bearer ")?.trim();
            let user = self.tokens.get(token)?;
            return Some(UserInfo {
                name: user.user.clone(),
                groups: user.groups.clone(),
            });
        }
        None
    }
}
