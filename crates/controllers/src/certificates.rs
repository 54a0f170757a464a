//! The CSR controllers of kube-controller-manager, for the two client signers: node client
//! requests (`kubernetes.io/kube-apiserver-client-kubelet`) are approved when their
//! requester may create `certificatesigningrequests/nodeclient` (or `selfnodeclient`, for
//! a node renewing its own identity), asked with a SubjectAccessReview as kube's
//! csrapproving controller does; approved requests of either signer are signed with the
//! cluster CA. Requests for other signers are left to whoever signs them.

use std::sync::Arc;
use std::time::Duration;

use apimachinery::identity::{
    node_user, CLIENT_SIGNER, KUBELET_CLIENT_SIGNER, NODES_GROUP, NODE_USER_PREFIX,
};
use base64::Engine;
use futures::StreamExt;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::controller::{self, Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};
use kubevirt_api::backoff::Backoff;
use serde_json::{json, Value};

use crate::Error;

/// Signs a PEM certificate request for the given lifetime: the PEM certificate, or why not.
pub type SignRequest = Arc<dyn Fn(&str, Duration) -> Result<String, String> + Send + Sync>;

/// kube-controller-manager's `--cluster-signing-duration` default: a year.
const MAX_LIFETIME: Duration = Duration::from_secs(365 * 24 * 3600);
/// The usages a node client certificate may ask for.
const NODE_CLIENT_USAGES: &[&str] = &["digital signature", "key encipherment", "client auth"];
const MANAGER: &str = "certificatesigningrequest-controller";

/// What a certificate request asks for.
#[derive(Debug, PartialEq, Eq)]
pub struct Subject {
    pub common_name: String,
    pub organizations: Vec<String>,
    /// Whether it asks for subject alternative names (DNS, IP, e-mail, URI).
    pub alternative_names: bool,
}

/// Reads the subject of a PEM request (its signature is checked when it is signed).
pub fn subject(request_pem: &str) -> Result<Subject, String> {
    use x509_parser::prelude::FromDer;
    let (_, pem) = x509_parser::pem::parse_x509_pem(request_pem.as_bytes())
        .map_err(|e| format!("not a PEM block: {e}"))?;
    if pem.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, request) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
            .map_err(|e| format!("not a certificate request: {e}"))?;
    let info = &request.certification_request_info;
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue| {
        attr.as_str().map(str::to_string).unwrap_or_default()
    };
    let alternative_names = request.requested_extensions().is_some_and(|mut exts| {
        exts.any(|e| {
            matches!(e, x509_parser::extensions::ParsedExtension::SubjectAlternativeName(san) if !san.general_names.is_empty())
        })
    });
    Ok(Subject {
        common_name: info.subject.iter_common_name().map(text).collect(),
        organizations: info.subject.iter_organization().map(text).collect(),
        alternative_names,
    })
}

/// kube's `ValidateKubeletClientCSR`: the node a node client request is for, or why it
/// is not one.
pub fn node_client(subject: &Subject, usages: &[&str]) -> Result<String, String> {
    let node = subject
        .common_name
        .strip_prefix(NODE_USER_PREFIX)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("subject common name does not begin with {NODE_USER_PREFIX:?}"))?;
    if subject.organizations != [NODES_GROUP] {
        return Err(format!("subject organization is not {NODES_GROUP}"));
    }
    if subject.alternative_names {
        return Err("subject alternative names are not allowed".into());
    }
    if !usages.contains(&"client auth") || usages.iter().any(|u| !NODE_CLIENT_USAGES.contains(u)) {
        return Err(format!(
            "usages must be among {NODE_CLIENT_USAGES:?} and include \"client auth\""
        ));
    }
    Ok(node.to_string())
}

struct Context {
    client: Client,
    sign: Option<SignRequest>,
    backoff: Backoff<String>,
}

pub async fn run(client: Client, sign: Option<SignRequest>) {
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let ctx = Arc::new(Context {
        client,
        sign,
        backoff: Backoff::default(),
    });
    Controller::new(api, watcher::Config::default())
        .with_config(crate::controller_config())
        .run(
            crate::workqueue::measured("certificatesigningrequest", reconcile),
            error_policy,
            ctx.clone(),
        )
        .for_each(|result| {
            match result {
                Ok((csr, _)) => ctx.backoff.succeeded(&csr.name),
                Err(controller::Error::ObjectNotFound(csr)) => ctx.backoff.succeeded(&csr.name),
                Err(controller::Error::ReconcilerFailed(..)) => {}
                Err(e) => tracing::warn!("certificate controller: {e}"),
            }
            futures::future::ready(())
        })
        .await;
}

fn error_policy(csr: Arc<CertificateSigningRequest>, error: &Error, ctx: Arc<Context>) -> Action {
    let retry = ctx.backoff.failed(csr.name_any());
    tracing::warn!(
        "certificate controller: sync of {} failed, retrying in {retry:?}: {error}",
        csr.name_any()
    );
    Action::requeue(retry)
}

fn has_condition(csr: &CertificateSigningRequest, kind: &str) -> bool {
    csr.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == kind && c.status == "True")
}

async fn reconcile(
    csr: Arc<CertificateSigningRequest>,
    ctx: Arc<Context>,
) -> Result<Action, Error> {
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    if issued || has_condition(&csr, "Denied") || has_condition(&csr, "Failed") {
        return Ok(Action::await_change());
    }
    let spec = &csr.spec;
    let signer = spec.signer_name.as_str();
    if signer != KUBELET_CLIENT_SIGNER && signer != CLIENT_SIGNER {
        return Ok(Action::await_change());
    }
    let request = String::from_utf8(spec.request.0.clone()).unwrap_or_default();
    let usages: Vec<&str> = spec.usages.iter().flatten().map(String::as_str).collect();
    let node = subject(&request).and_then(|s| node_client(&s, &usages));
    if !has_condition(&csr, "Approved") {
        // Only node client requests are approved here; others wait for an administrator.
        let node = match &node {
            Ok(node) if signer == KUBELET_CLIENT_SIGNER => node.clone(),
            _ => return Ok(Action::await_change()),
        };
        let requester = spec.username.as_deref().unwrap_or("");
        let subresource = if requester == node_user(&node) {
            "selfnodeclient"
        } else {
            "nodeclient"
        };
        if !may_create(&ctx.client, &csr, subresource).await? {
            tracing::info!(
                "certificate request {} of {requester}: not approved, {requester} may not create certificatesigningrequests/{subresource}",
                csr.name_any()
            );
            return Ok(Action::await_change());
        }
        let approved = condition(
            "Approved",
            "AutoApproved",
            "Auto approving kubelet client certificate after SubjectAccessReview.",
        );
        write_status(&ctx.client, &csr, json!({"conditions": [approved]})).await?;
        return Ok(Action::await_change());
    }
    if signer == KUBELET_CLIENT_SIGNER {
        if let Err(why) = node {
            fail(&ctx.client, &csr, &why).await?;
            return Ok(Action::await_change());
        }
    }
    let Some(sign) = &ctx.sign else {
        return Ok(Action::await_change());
    };
    let lifetime = spec
        .expiration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map(Duration::from_secs)
        .unwrap_or(MAX_LIFETIME)
        .min(MAX_LIFETIME);
    match sign(&request, lifetime) {
        Ok(pem) => {
            let encoded = base64::engine::general_purpose::STANDARD.encode(pem);
            write_status(&ctx.client, &csr, json!({"certificate": encoded})).await?;
        }
        Err(why) => {
            fail(&ctx.client, &csr, &why).await?;
        }
    }
    Ok(Action::await_change())
}

/// Adds the Failed condition the signer gives a request it will not sign.
async fn fail(client: &Client, csr: &CertificateSigningRequest, why: &str) -> Result<(), Error> {
    let mut conditions: Vec<Value> = csr
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    conditions.push(condition("Failed", "SignerValidationFailure", why));
    write_status(client, csr, json!({"conditions": conditions})).await
}

fn condition(kind: &str, reason: &str, message: &str) -> Value {
    let now = kubevirt_api::meta::now();
    json!({"type": kind, "status": "True", "reason": reason, "message": message,
           "lastUpdateTime": now, "lastTransitionTime": now})
}

/// Whether the request's requester may create `certificatesigningrequests/<subresource>`.
async fn may_create(
    client: &Client,
    csr: &CertificateSigningRequest,
    subresource: &str,
) -> Result<bool, Error> {
    let spec = &csr.spec;
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: spec.username.clone(),
            groups: spec.groups.clone(),
            uid: spec.uid.clone(),
            extra: spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                subresource: Some(subresource.into()),
                verb: Some("create".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api = Api::<SubjectAccessReview>::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

async fn write_status(
    client: &Client,
    csr: &CertificateSigningRequest,
    status: Value,
) -> Result<(), Error> {
    let api = Api::<CertificateSigningRequest>::all(client.clone());
    let params = PatchParams {
        field_manager: Some(MANAGER.into()),
        ..Default::default()
    };
    let body = json!({"metadata": {"resourceVersion": csr.resource_version()}, "status": status});
    api.patch_status(&csr.name_any(), &params, &Patch::Merge(&body))
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subject(cn: &str, orgs: &[&str]) -> Subject {
        Subject {
            common_name: cn.into(),
            organizations: orgs.iter().map(|o| o.to_string()).collect(),
            alternative_names: false,
        }
    }

    #[test]
    fn only_a_node_client_request_names_a_node() {
        let usages = ["digital signature", "client auth"];
        assert_eq!(
            node_client(&subject("system:node:a", &["system:nodes"]), &usages),
            Ok("a".into())
        );
        for bad in [
            subject("alice", &["system:nodes"]),
            subject("system:node:", &["system:nodes"]),
            subject("system:node:a", &["system:masters"]),
            subject("system:node:a", &["system:nodes", "system:masters"]),
            Subject {
                alternative_names: true,
                ..subject("system:node:a", &["system:nodes"])
            },
        ] {
            assert!(node_client(&bad, &usages).is_err(), "{bad:?}");
        }
        let ok = subject("system:node:a", &["system:nodes"]);
        assert!(node_client(&ok, &["server auth", "client auth"]).is_err());
        assert!(node_client(&ok, &["digital signature"]).is_err());
    }

    #[test]
    fn the_subject_is_read_from_the_pem_request() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:a");
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "system:nodes");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        assert_eq!(
            super::subject(&pem).unwrap(),
            subject("system:node:a", &["system:nodes"])
        );
        assert!(
            super::subject("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
                .is_err()
        );
    }
}
