//! `certificates.k8s.io/v1` CertificateSigningRequests: how a node agent holding only the
//! join token obtains its own identity, as the kubelet's TLS bootstrap does. The request's
//! requester (`spec.username`, `uid`, `groups`, `extra`) is whoever created it, never what
//! the body claims; approval and the issued certificate are written through `/status` by
//! the server's CSR controllers.

use apimachinery::field::FieldError;
#[cfg(test)]
use apimachinery::identity::KUBELET_CLIENT_SIGNER;
use apimachinery::resource::{PrinterColumn, ResourceInfo};
use base64::Engine;
use serde_json::{json, Value};

use crate::registry::{Admission, ResourceHooks};
use access::authn::UserInfo;

pub const GROUP: &str = "certificates.k8s.io";
/// kube's `certificates.MinExpirationSeconds`.
const MIN_EXPIRATION_SECONDS: i64 = 600;

/// The key usages kube accepts (`certificates.KeyUsage`).
const USAGES: &[&str] = &[
    "signing",
    "digital signature",
    "content commitment",
    "key encipherment",
    "key agreement",
    "data encipherment",
    "cert sign",
    "crl sign",
    "encipher only",
    "decipher only",
    "any",
    "server auth",
    "client auth",
    "code signing",
    "email protection",
    "s/mime",
    "ipsec end system",
    "ipsec tunnel",
    "ipsec user",
    "timestamping",
    "ocsp signing",
    "microsoft sgc",
    "netscape sgc",
];

pub static CERTIFICATE_SIGNING_REQUEST: ResourceInfo = ResourceInfo {
    group: GROUP,
    version: "v1",
    kind: "CertificateSigningRequest",
    list_kind: "CertificateSigningRequestList",
    plural: "certificatesigningrequests",
    singular: "certificatesigningrequest",
    short_names: &["csr"],
    categories: &[],
    namespaced: false,
    status_subresource: true,
    printer_columns: &[
        PrinterColumn::AGE,
        PrinterColumn {
            name: "SignerName",
            column_type: "string",
            json_path: ".spec.signerName",
            description: "Name of the signer that will issue the certificate",
            priority: 0,
        },
        PrinterColumn {
            name: "Requestor",
            column_type: "string",
            json_path: ".spec.username",
            description: "Name of the user that created the request",
            priority: 0,
        },
        PrinterColumn {
            name: "RequestedDuration",
            column_type: "string",
            json_path: ".spec.expirationSeconds",
            description: "Requested validity of the issued certificate",
            priority: 0,
        },
        PrinterColumn {
            name: "Condition",
            column_type: "string",
            json_path: ".status.conditions",
            description: "Approval and issuance state of the request",
            priority: 0,
        },
    ],
    schema_name: "io.k8s.api.certificates.v1.CertificateSigningRequest",
};

pub fn is_csr(info: &ResourceInfo) -> bool {
    std::ptr::eq(info, &CERTIFICATE_SIGNING_REQUEST)
}

/// Records who asks (`PrepareForCreate`): whatever the body said is replaced.
pub fn set_requester(obj: &mut Value, user: &UserInfo) {
    if !obj["spec"].is_object() {
        obj["spec"] = json!({});
    }
    let spec = &mut obj["spec"];
    spec["username"] = json!(user.name);
    spec["groups"] = json!(user.groups);
    match user.uid.as_str() {
        "" => _ = spec.as_object_mut().map(|s| s.remove("uid")),
        uid => spec["uid"] = json!(uid),
    }
    match user.extra.is_empty() {
        true => _ = spec.as_object_mut().map(|s| s.remove("extra")),
        false => spec["extra"] = json!(user.extra),
    }
    if let Some(obj) = obj.as_object_mut() {
        obj.remove("status");
    }
}

/// The PEM request of a CSR object (`spec.request` is base64 on the wire).
pub fn request_pem(obj: &Value) -> Option<String> {
    let encoded = obj.pointer("/spec/request")?.as_str()?;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .ok()?;
    String::from_utf8(bytes).ok()
}

/// kube prints the conditions' types joined by `,` (`Approved,Issued`), `Pending` when
/// there are none.
pub fn computed_cell(column: &str, obj: &Value, read: Value) -> Value {
    match column {
        "Condition" => {
            let mut states: Vec<&str> = obj
                .pointer("/status/conditions")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|c| c["type"].as_str())
                .collect();
            if obj
                .pointer("/status/certificate")
                .is_some_and(|c| c.as_str().is_some_and(|c| !c.is_empty()))
            {
                states.push("Issued");
            }
            json!(if states.is_empty() {
                "Pending".to_string()
            } else {
                states.join(",")
            })
        }
        "RequestedDuration" => match read.as_i64() {
            Some(seconds) => json!(human_duration(seconds)),
            None => json!("<none>"),
        },
        _ => read,
    }
}

/// kube's `duration.HumanDuration` for whole minutes, hours and days.
fn human_duration(seconds: i64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 3600 * 3 => format!("{}m", s / 60),
        s if s < 86400 * 2 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

pub struct CsrHooks;

/// kube prints the request's bytes as the value; they are left out here.
fn invalid_request(detail: &str) -> FieldError {
    FieldError {
        kind: apimachinery::field::ErrorType::Invalid,
        field: "spec.request".into(),
        value: None,
        detail: detail.into(),
        verbatim: false,
    }
}

impl CsrHooks {
    fn errors(obj: &Value) -> Vec<FieldError> {
        let mut errors = Vec::new();
        match obj.pointer("/spec/request").and_then(Value::as_str) {
            None | Some("") => errors.push(FieldError::required("spec.request", "")),
            Some(_) => match request_pem(obj) {
                None => errors.push(invalid_request(
                    "PEM block type must be CERTIFICATE REQUEST",
                )),
                Some(pem) => {
                    if !pem.contains("-----BEGIN CERTIFICATE REQUEST-----") {
                        errors.push(invalid_request(
                            "PEM block type must be CERTIFICATE REQUEST",
                        ));
                    } else if let Err(e) = rcgen::CertificateSigningRequestParams::from_pem(&pem) {
                        errors.push(invalid_request(&format!("{e}")));
                    }
                }
            },
        }
        match obj.pointer("/spec/signerName").and_then(Value::as_str) {
            None | Some("") => errors.push(FieldError::required("spec.signerName", "")),
            Some(signer) => {
                let qualified = signer
                    .split_once('/')
                    .is_some_and(|(domain, path)| domain.contains('.') && !path.is_empty());
                if !qualified {
                    errors.push(FieldError::invalid(
                        "spec.signerName",
                        signer,
                        "must be a fully qualified domain and path of the form 'example.com/signer-name'",
                    ));
                }
            }
        }
        match obj.pointer("/spec/usages").and_then(Value::as_array) {
            None => errors.push(FieldError::required("spec.usages", "")),
            Some(usages) if usages.is_empty() => {
                errors.push(FieldError::required("spec.usages", ""))
            }
            Some(usages) => {
                for (i, usage) in usages.iter().enumerate() {
                    let known = usage.as_str().is_some_and(|u| USAGES.contains(&u));
                    if !known {
                        errors.push(FieldError::not_supported(
                            format!("spec.usages[{i}]"),
                            usage.clone(),
                            USAGES,
                        ));
                    }
                }
            }
        }
        if let Some(seconds) = obj
            .pointer("/spec/expirationSeconds")
            .and_then(Value::as_i64)
        {
            if seconds < MIN_EXPIRATION_SECONDS {
                errors.push(FieldError::invalid(
                    "spec.expirationSeconds",
                    seconds,
                    format!("may not specify a duration less than {MIN_EXPIRATION_SECONDS} seconds (10 minutes)"),
                ));
            }
        }
        errors
    }
}

impl ResourceHooks for CsrHooks {
    fn validate_create(&self, obj: &Value) -> Admission {
        Admission {
            errors: Self::errors(obj),
            warnings: Vec::new(),
        }
    }
    /// The request is what was signed: it never changes (kube keeps the old spec).
    fn validate_update(&self, old: &Value, new: &Value, _privileged: bool) -> Admission {
        let mut errors = Vec::new();
        if old.get("spec") != new.get("spec") {
            errors.push(FieldError {
                kind: apimachinery::field::ErrorType::Invalid,
                field: "spec".into(),
                value: None,
                detail: "field is immutable".into(),
                verbatim: false,
            });
        }
        Admission {
            errors,
            warnings: Vec::new(),
        }
    }
}

/// OpenAPI schemas of the kind, in kube-apiserver's components naming.
pub fn schemas() -> Value {
    let strings = json!({"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "atomic"});
    json!({
        "io.k8s.api.certificates.v1.CertificateSigningRequest": {
            "type": "object",
            "description": "CertificateSigningRequest objects provide a mechanism to obtain x509 certificates by submitting a certificate signing request, and having it asynchronously approved and issued.",
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "CertificateSigningRequest", "version": "v1"}],
            "required": ["spec"],
            "properties": {
                "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."},
                "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents."},
                "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta", "default": {}},
                "spec": {"type": "object", "default": {}, "required": ["request", "signerName"],
                    "description": "spec contains the certificate request, and is immutable after creation.",
                    "properties": {
                        "request": {"type": "string", "format": "byte", "description": "request contains an x509 certificate signing request encoded in a \"CERTIFICATE REQUEST\" PEM block."},
                        "signerName": {"type": "string", "default": "", "description": "signerName indicates the requested signer, and is a qualified name."},
                        "expirationSeconds": {"type": "integer", "format": "int32", "description": "expirationSeconds is the requested duration of validity of the issued certificate."},
                        "usages": strings.clone(),
                        "username": {"type": "string", "description": "username contains the name of the user that created the CertificateSigningRequest. Populated by the API server on creation and immutable."},
                        "uid": {"type": "string", "description": "uid contains the uid of the user that created the CertificateSigningRequest. Populated by the API server on creation and immutable."},
                        "groups": strings,
                        "extra": {"type": "object", "additionalProperties": {"type": "array", "items": {"type": "string", "default": ""}}}
                    }},
                "status": {"type": "object", "default": {},
                    "description": "status contains information about whether the request is approved or denied, and the certificate issued by the signer, or the failure condition indicating signer failure.",
                    "properties": {
                        "certificate": {"type": "string", "format": "byte", "x-kubernetes-list-type": "atomic", "description": "certificate is populated with an issued certificate by the signer after an Approved condition is present."},
                        "conditions": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"],
                            "items": {"type": "object", "required": ["type", "status"], "properties": {
                                "type": {"type": "string", "default": ""},
                                "status": {"type": "string", "default": ""},
                                "reason": {"type": "string"},
                                "message": {"type": "string"},
                                "lastUpdateTime": {"type": "string", "format": "date-time"},
                                "lastTransitionTime": {"type": "string", "format": "date-time"}}}}
                    }}
            }
        },
        "io.k8s.api.certificates.v1.CertificateSigningRequestList": crate::openapi::list_schema("io.k8s.api.certificates.v1.CertificateSigningRequest", GROUP, "CertificateSigningRequestList")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn csr(request: &str) -> Value {
        json!({"apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
               "metadata": {"name": "n"},
               "spec": {"request": request, "signerName": KUBELET_CLIENT_SIGNER,
                        "usages": ["digital signature", "client auth"]}})
    }

    fn encoded_request() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "system:node:a");
        let pem = params.serialize_request(&key).unwrap().pem().unwrap();
        base64::engine::general_purpose::STANDARD.encode(pem)
    }

    #[test]
    fn a_well_formed_request_passes_and_bad_ones_name_their_field() {
        assert!(CsrHooks::errors(&csr(&encoded_request())).is_empty());
        let fields = |obj: &Value| -> Vec<String> {
            CsrHooks::errors(obj).into_iter().map(|e| e.field).collect()
        };
        assert_eq!(fields(&csr("bm90IGEgcmVxdWVzdA==")), ["spec.request"]);
        let mut bad = csr(&encoded_request());
        bad["spec"]["signerName"] = json!("nodomain");
        bad["spec"]["usages"] = json!(["client auth", "flying"]);
        bad["spec"]["expirationSeconds"] = json!(60);
        assert_eq!(
            fields(&bad),
            [
                "spec.signerName",
                "spec.usages[1]",
                "spec.expirationSeconds"
            ]
        );
    }

    #[test]
    fn the_requester_is_the_creator() {
        let mut obj = csr("x");
        obj["spec"]["username"] = json!("someone-else");
        obj["spec"]["groups"] = json!(["system:masters"]);
        obj["status"] = json!({"certificate": "Zm9v"});
        let user = UserInfo::new("system:node-joiner", vec!["system:bootstrappers".into()]);
        set_requester(&mut obj, &user);
        assert_eq!(obj["spec"]["username"], "system:node-joiner");
        assert_eq!(obj["spec"]["groups"], json!(["system:bootstrappers"]));
        assert!(obj.get("status").is_none());
    }

    #[test]
    fn the_condition_column_reads_like_kubectl() {
        let mut obj = csr("x");
        assert_eq!(computed_cell("Condition", &obj, Value::Null), "Pending");
        obj["status"] =
            json!({"conditions": [{"type": "Approved", "status": "True"}], "certificate": "Zm9v"});
        assert_eq!(
            computed_cell("Condition", &obj, Value::Null),
            "Approved,Issued"
        );
        assert_eq!(
            computed_cell("RequestedDuration", &obj, json!(86400 * 365)),
            "365d"
        );
    }
}
