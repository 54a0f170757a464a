//! CDI's upload API on the API server's own port. `UploadTokenRequest`
//! (`upload.cdi.kubevirt.io/v1beta1`, authenticated like any API request) hands out a
//! token for one claim; the upload proxy's endpoints (`/v1beta1/upload`, `upload-async`,
//! `upload-form`, `upload-form-async`), authenticated by that token alone, stream the
//! image into `DIR/uploads/<dv-uid>.part`, rename it `.img` once it is whole, and name it
//! in the DataVolume's `virtplane.io/uploaded-image` annotation. The DataVolume
//! controller imports that file into the claim and removes it.
//!
//! `token` signs and checks tokens, `target` decides from the DataVolume whether an
//! upload may start and how it ended; `importer::upload` spools the bytes.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use apimachinery::field::FieldError;
use apimachinery::status::{GroupKind, GroupResource, Status};
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use http::request::Parts;
use http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use importer::upload::{self, Expected, Framing, SpoolError, Spooled};
use kubevirt_api::cdi::model::DataVolume;
use kubevirt_api::names::annotations::UPLOADED_IMAGE;
use serde_json::{json, Value};

use crate::object::meta_mut;
use crate::registry::{Change, ListRequest, Registration, Registry, WriteOptions};
use crate::request::{ResourcePath, Verb};

mod target;
pub mod token;

use target::{Processing, Readiness};

pub const GROUP: &str = "upload.cdi.kubevirt.io";
pub const VERSION: &str = "v1beta1";
pub const RESOURCE: &str = "uploadtokenrequests";
pub const KIND: &str = "UploadTokenRequest";

/// How long the proxy waits for a claim to become ready (CDI's `waitReadyTime`), and
/// how often it looks.
const WAIT_READY: Duration = Duration::from_secs(10);
const WAIT_READY_EVERY: Duration = Duration::from_secs(1);
/// How often a synchronous upload looks at its DataVolume while it is imported.
const PROCESSING_EVERY: Duration = Duration::from_millis(500);
/// How often files that nobody will import are swept away.
const SWEEP_EVERY: Duration = Duration::from_secs(600);
const FIELD_MANAGER: &str = "virtplane-upload-proxy";

/// One of CDI's upload proxy paths (`common.ProxyPaths`; archives are not served).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// Answers once the image is imported.
    Upload,
    /// Answers once the image is received.
    UploadAsync,
    Form,
    FormAsync,
}

impl Endpoint {
    pub fn of_path(path: &str) -> Option<Endpoint> {
        let (version, name) = path.strip_prefix('/')?.split_once('/')?;
        if version != "v1beta1" && version != "v1alpha1" {
            return None;
        }
        Some(match name {
            "upload" => Endpoint::Upload,
            "upload-async" => Endpoint::UploadAsync,
            "upload-form" => Endpoint::Form,
            "upload-form-async" => Endpoint::FormAsync,
            _ => return None,
        })
    }

    fn asynchronous(self) -> bool {
        matches!(self, Endpoint::UploadAsync | Endpoint::FormAsync)
    }

    fn form(self) -> bool {
        matches!(self, Endpoint::Form | Endpoint::FormAsync)
    }
}

/// A refusal as CDI's upload proxy and server answer them: a status and plain text.
#[derive(Debug)]
struct Answer {
    code: StatusCode,
    message: String,
}

impl Answer {
    fn new(code: StatusCode, message: impl Into<String>) -> Answer {
        Answer {
            code,
            message: message.into(),
        }
    }

    /// CDI's `handleStreamError`.
    fn stream_failed(code: StatusCode, why: impl std::fmt::Display) -> Answer {
        Answer::new(code, format!("Saving stream failed: {why}"))
    }
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let mut response = (self.code, self.message).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        response
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The token of `Authorization: Bearer <token>` (CDI's `authHeaderMatcher`).
fn bearer(headers: &HeaderMap) -> Result<&str, Answer> {
    let value = headers
        .get(header::AUTHORIZATION)
        .ok_or_else(|| {
            Answer::new(
                StatusCode::BAD_REQUEST,
                "an upload needs the header Authorization: Bearer <upload token>",
            )
        })?
        .to_str()
        .unwrap_or("");
    let malformed = || {
        Answer::new(
            StatusCode::BAD_REQUEST,
            "the Authorization header is not Bearer <upload token>",
        )
    };
    let (scheme, token) = value
        .split_once(char::is_whitespace)
        .ok_or_else(malformed)?;
    let token = token.trim_start();
    let token_chars = |c: char| c.is_ascii_alphanumeric() || "-._~+/".contains(c);
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || !token.chars().all(token_chars)
    {
        return Err(malformed());
    }
    Ok(token)
}

/// An upload in progress into the DataVolume of this uid; another is refused meanwhile.
struct Slot<'a> {
    uploads: &'a Uploads,
    uid: String,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.uploads.lock_in_flight().remove(&self.uid);
    }
}

/// CDI's upload API: tokens and the upload proxy.
pub struct Uploads {
    registry: Arc<Registry>,
    signer: token::Signer,
    /// `DIR/uploads`, absolute: its paths are handed to the DataVolume controller.
    dir: PathBuf,
    /// DataVolume uids with an upload being received.
    in_flight: Mutex<HashSet<String>>,
}

impl Uploads {
    /// Uploads land in `dir` (created if missing); tokens are signed with `key`.
    pub fn new(registry: Arc<Registry>, key: [u8; 32], dir: &Path) -> std::io::Result<Uploads> {
        std::fs::create_dir_all(dir)?;
        Ok(Uploads {
            registry,
            signer: token::Signer::new(key),
            dir: std::fs::canonicalize(dir)?,
            in_flight: Mutex::new(HashSet::new()),
        })
    }

    fn lock_in_flight(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn registration(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Registration>> {
        self.registry.find(group, version, plural)
    }

    /// An object by name, `None` when it does not exist.
    async fn read(
        &self,
        (group, version, plural): (&str, &str, &str),
        namespace: &str,
        name: &str,
    ) -> Result<Option<Value>, Answer> {
        let Some(reg) = self.registration(group, version, plural) else {
            return Ok(None);
        };
        match self.registry.get(&reg, Some(namespace), name).await {
            Ok(obj) => Ok(Some(obj)),
            Err(status) if status.code == 404 => Ok(None),
            Err(status) => Err(Answer::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                status.message,
            )),
        }
    }

    async fn data_volume(&self, namespace: &str, name: &str) -> Result<Option<DataVolume>, Answer> {
        let Some(stored) = self.read(DATA_VOLUMES, namespace, name).await? else {
            return Ok(None);
        };
        serde_json::from_value(stored).map(Some).map_err(|e| {
            Answer::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the stored DataVolume does not decode: {e}"),
            )
        })
    }

    /// `POST .../namespaces/{ns}/uploadtokenrequests`: the request with `status.token`, a
    /// token for an upload into claim `spec.pvcName` (CDI's apiserver `uploadHandler`).
    pub fn token_request(
        &self,
        verb: &Verb,
        path: &ResourcePath,
        body: &[u8],
    ) -> Result<Value, Status> {
        let resource = GroupResource::new(GROUP, RESOURCE);
        let (Verb::Create, None, None) = (verb, &path.name, &path.subresource) else {
            return Err(Status::method_not_allowed(&resource, verb.as_str()));
        };
        let Some(namespace) = path.namespace.as_deref() else {
            return Err(Status::failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        };
        let mut request: Value = serde_json::from_slice(body)
            .map_err(|e| Status::bad_request(format!("the body is not an {KIND}: {e}")))?;
        if !request.is_object() {
            return Err(Status::bad_request(format!("the body is not an {KIND}")));
        }
        let pvc_name = request
            .pointer("/spec/pvcName")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if pvc_name.is_empty() {
            let name = crate::object::name(&request).to_string();
            return Err(Status::invalid(
                &GroupKind::new(GROUP, KIND),
                &name,
                &[FieldError::required("spec.pvcName", "")],
            ));
        }
        let meta = meta_mut(&mut request);
        match meta.get("namespace").and_then(Value::as_str) {
            Some(ns) if !ns.is_empty() && ns != namespace => {
                return Err(Status::bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request",
                ))
            }
            _ => {}
        }
        meta.insert("namespace".into(), json!(namespace));
        meta.entry("creationTimestamp").or_insert(Value::Null);
        request["apiVersion"] = json!(format!("{GROUP}/{VERSION}"));
        request["kind"] = json!(KIND);
        request["status"] = json!({"token": self.signer.issue(namespace, &pvc_name, unix_now())});
        Ok(request)
    }

    /// One request to the upload proxy.
    pub async fn serve(&self, endpoint: Endpoint, parts: Parts, body: Body) -> Response {
        match self.upload(endpoint, &parts, body).await {
            Ok(()) => StatusCode::OK.into_response(),
            Err(answer) => {
                if answer.code == StatusCode::INTERNAL_SERVER_ERROR {
                    tracing::warn!("upload: {}", answer.message);
                } else {
                    tracing::info!("upload refused: {} {}", answer.code, answer.message);
                }
                answer.into_response()
            }
        }
    }

    async fn upload(&self, endpoint: Endpoint, parts: &Parts, body: Body) -> Result<(), Answer> {
        let token = bearer(&parts.headers)?;
        let grant = self.signer.verify(token, unix_now()).map_err(|e| {
            let code = if e.unauthorized() {
                StatusCode::UNAUTHORIZED
            } else {
                StatusCode::BAD_REQUEST
            };
            Answer::new(code, e.to_string())
        })?;
        let (uid, capacity) = self.wait_ready(&grant).await?;
        // Past the proxy, CDI's upload server: HEAD tells a client that async uploads
        // exist; only POST uploads.
        match parts.method {
            Method::HEAD if endpoint.asynchronous() => return Ok(()),
            Method::POST => {}
            _ => return Err(Answer::new(StatusCode::NOT_FOUND, "")),
        }
        let _slot = self.take_slot(&grant, &uid)?;
        let image = self
            .receive(&uid, endpoint, &parts.headers, body, capacity)
            .await?;
        self.hand_over(&grant, &uid, image).await?;
        tracing::info!(
            "upload into {}/{} received; the DataVolume controller imports it",
            grant.namespace,
            grant.name
        );
        if endpoint.asynchronous() {
            return Ok(());
        }
        self.wait_processed(&grant, &uid).await
    }

    /// Waits (as CDI's proxy does, a few seconds) until the claim takes an upload: the uid
    /// of its DataVolume and the claim's capacity.
    async fn wait_ready(&self, grant: &token::Grant) -> Result<(String, Option<u64>), Answer> {
        let began = Instant::now();
        loop {
            let dv = self.data_volume(&grant.namespace, &grant.name).await?;
            let claim = self.read(CLAIMS, &grant.namespace, &grant.name).await?;
            match target::readiness(&grant.name, dv.as_ref(), claim.as_ref()) {
                Readiness::Ready { uid, capacity } => return Ok((uid, capacity)),
                Readiness::Refused(message) => {
                    return Err(Answer::new(StatusCode::SERVICE_UNAVAILABLE, message))
                }
                Readiness::NotYet(message) if began.elapsed() >= WAIT_READY => {
                    return Err(Answer::new(StatusCode::SERVICE_UNAVAILABLE, message))
                }
                Readiness::NotYet(_) => tokio::time::sleep(WAIT_READY_EVERY).await,
            }
        }
    }

    /// One upload at a time per DataVolume (CDI's upload server refuses a concurrent one
    /// with 503).
    fn take_slot(&self, grant: &token::Grant, uid: &str) -> Result<Slot<'_>, Answer> {
        if !self.lock_in_flight().insert(uid.to_string()) {
            return Err(Answer::new(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "rejecting Upload Request for PVC {}: another upload into it is in progress",
                    grant.name
                ),
            ));
        }
        Ok(Slot {
            uploads: self,
            uid: uid.to_string(),
        })
    }

    /// Spools the body into the upload directory (the importer's job from here on).
    async fn receive(
        &self,
        uid: &str,
        endpoint: Endpoint,
        headers: &HeaderMap,
        body: Body,
        capacity: Option<u64>,
    ) -> Result<Spooled, Answer> {
        let spool_failed = |e: SpoolError| match e {
            SpoolError::Refused(why) => Answer::stream_failed(StatusCode::BAD_REQUEST, why),
            SpoolError::Io(why) => Answer::stream_failed(StatusCode::INTERNAL_SERVER_ERROR, why),
        };
        let framing = if endpoint.form() {
            let content_type = headers
                .get(header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            Framing::form(content_type).map_err(spool_failed)?
        } else {
            Framing::Raw
        };
        let expected = Expected {
            declared: headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse().ok()),
            capacity,
        };
        upload::spool(&self.dir, uid, framing, expected, body.into_data_stream())
            .await
            .map_err(spool_failed)
    }

    /// Names the complete image in the DataVolume's annotation, for its controller: a
    /// privileged write of the DataVolume with this uid, which must still wait for it.
    async fn hand_over(
        &self,
        grant: &token::Grant,
        uid: &str,
        image: Spooled,
    ) -> Result<(), Answer> {
        let Some(reg) = self.registration(DATA_VOLUMES.0, DATA_VOLUMES.1, DATA_VOLUMES.2) else {
            return Err(Answer::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "DataVolumes are not served",
            ));
        };
        let path = image.path().to_string_lossy().into_owned();
        let options = WriteOptions {
            field_manager: FIELD_MANAGER.into(),
            privileged: true,
            ..Default::default()
        };
        let name = grant.name.clone();
        let result = self
            .registry
            .update_with(
                &reg,
                Some(&grant.namespace),
                &grant.name,
                None,
                &options,
                |old| {
                    if crate::object::uid(old) != uid {
                        return Err(Status::conflict(
                            &reg.info.group_resource(),
                            &name,
                            "the DataVolume was replaced during the upload",
                        ));
                    }
                    let typed: Option<DataVolume> = serde_json::from_value(old.clone()).ok();
                    if let Readiness::Refused(message) | Readiness::NotYet(message) =
                        target::readiness(&name, typed.as_ref(), None)
                    {
                        return Err(Status::failure(503, "ServiceUnavailable", message));
                    }
                    let mut new = old.clone();
                    let meta = meta_mut(&mut new);
                    meta.remove("resourceVersion");
                    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
                    if !annotations.is_object() {
                        *annotations = json!({});
                    }
                    annotations[UPLOADED_IMAGE] = json!(path);
                    Ok(Change::replace(new))
                },
            )
            .await;
        match result {
            Ok(_) => {
                image.hand_over();
                Ok(())
            }
            Err(status) => {
                let code = if status.code == 404 || status.code == 409 {
                    StatusCode::SERVICE_UNAVAILABLE
                } else {
                    StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
                };
                Err(Answer::new(code, status.message))
            }
        }
    }

    /// The synchronous endpoint answers once the DataVolume is imported: 200, or 400 with
    /// why it failed.
    async fn wait_processed(&self, grant: &token::Grant, uid: &str) -> Result<(), Answer> {
        loop {
            let dv = self.data_volume(&grant.namespace, &grant.name).await?;
            match target::processing(uid, dv.as_ref()) {
                Processing::Running => tokio::time::sleep(PROCESSING_EVERY).await,
                Processing::Succeeded => return Ok(()),
                Processing::Failed(why) => {
                    return Err(Answer::stream_failed(StatusCode::BAD_REQUEST, why))
                }
                Processing::Gone => {
                    return Err(Answer::stream_failed(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "DataVolume {}/{} was deleted before its upload was imported",
                            grant.namespace, grant.name
                        ),
                    ))
                }
            }
        }
    }

    /// Removes files nobody will import: parts of uploads that are not being received
    /// (a crash mid-upload) and images no live DataVolume names (deleted before the
    /// import finished).
    pub async fn sweep(&self) {
        let Some(reg) = self.registration(DATA_VOLUMES.0, DATA_VOLUMES.1, DATA_VOLUMES.2) else {
            return;
        };
        // Read the directory first: an image handed over after the list is named in it.
        let Ok(entries) = std::fs::read_dir(&self.dir) else {
            return;
        };
        let files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        let named: HashSet<String> = match self.registry.list(&reg, &ListRequest::default()).await {
            Ok(list) => list
                .items
                .iter()
                .filter_map(|kv| crate::stored::decode(kv).ok())
                .filter(|dv| dv.pointer("/metadata/deletionTimestamp").is_none())
                .filter_map(|dv| {
                    dv.pointer("/metadata/annotations")
                        .and_then(|a| a.get(UPLOADED_IMAGE))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect(),
            Err(status) => {
                tracing::warn!("upload sweep: cannot list DataVolumes: {}", status.message);
                return;
            }
        };
        for file in files {
            let Some(uid) = file.file_stem().and_then(|s| s.to_str()) else {
                continue;
            };
            if self.lock_in_flight().contains(uid) {
                continue;
            }
            let orphan = match file.extension().and_then(|e| e.to_str()) {
                Some("part") => true,
                Some("img") => !named.contains(file.to_string_lossy().as_ref()),
                _ => false,
            };
            if orphan {
                tracing::info!("removing {}: no DataVolume will import it", file.display());
                let _ = std::fs::remove_file(&file);
            }
        }
    }

    /// Sweeps now and then, forever.
    pub async fn sweep_periodically(self: Arc<Self>) {
        loop {
            self.sweep().await;
            tokio::time::sleep(SWEEP_EVERY).await;
        }
    }
}

const DATA_VOLUMES: (&str, &str, &str) = ("cdi.kubevirt.io", "v1beta1", "datavolumes");
const CLAIMS: (&str, &str, &str) = ("", "v1", "persistentvolumeclaims");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cdi_proxy_paths() {
        assert_eq!(Endpoint::of_path("/v1beta1/upload"), Some(Endpoint::Upload));
        assert_eq!(
            Endpoint::of_path("/v1alpha1/upload-async"),
            Some(Endpoint::UploadAsync)
        );
        assert_eq!(
            Endpoint::of_path("/v1beta1/upload-form-async"),
            Some(Endpoint::FormAsync)
        );
        for other in [
            "/v1beta1/upload-archive",
            "/v1beta1/upload/",
            "/upload",
            "/api/v1",
        ] {
            assert_eq!(Endpoint::of_path(other), None, "{other}");
        }
    }

    #[test]
    fn the_bearer_token_is_read_as_cdi_reads_it() {
        let headers = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            h
        };
        assert_eq!(bearer(&headers("Bearer a.b-c_d")).unwrap(), "a.b-c_d");
        assert_eq!(bearer(&headers("bearer   x/y+z")).unwrap(), "x/y+z");
        for bad in ["Basic abc", "Bearer", "Bearer a b", "Bearer a,b"] {
            let Err(answer) = bearer(&headers(bad)) else {
                panic!("{bad:?} taken")
            };
            assert_eq!(answer.code, StatusCode::BAD_REQUEST, "{bad:?}");
        }
        assert_eq!(
            bearer(&HeaderMap::new()).unwrap_err().code,
            StatusCode::BAD_REQUEST
        );
    }
}
