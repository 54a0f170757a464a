//! OpenAPI v3 documents per group-version, generated from the registrations and their
//! schemas. kubectl reads them to decide on server-side field validation, to pick the
//! patch type of client-side apply, and for `kubectl explain`.

use std::collections::BTreeMap;

use apimachinery::resource::ResourceInfo;
use apimachinery::status::Status;
use axum::response::{IntoResponse, Response};
use http::{header, HeaderValue, StatusCode};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha512};

pub struct OpenApi {
    /// (group, version) -> (document, hash)
    documents: BTreeMap<(String, String), (Value, String)>,
}

fn parameter(name: &str, location: &str, description: &str, schema_type: &str) -> Value {
    json!({"name": name, "in": location, "description": description, "schema": {"type": schema_type, "uniqueItems": true}})
}

fn query_parameters(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .map(|name| {
            let (kind, description) = match *name {
                "limit" | "timeoutSeconds" | "gracePeriodSeconds" => ("integer", "see the Kubernetes API conventions"),
                "watch" | "allowWatchBookmarks" | "sendInitialEvents" | "force" => ("boolean", "see the Kubernetes API conventions"),
                "fieldValidation" => (
                    "string",
                    "How the server treats fields it does not know: Ignore drops them, Warn drops them and answers with a Warning header, Strict fails the request.",
                ),
                _ => ("string", "see the Kubernetes API conventions"),
            };
            parameter(name, "query", description, kind)
        })
        .collect()
}

fn schema_ref(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

fn response(name: &str) -> Value {
    json!({"description": "OK", "content": {"application/json": {"schema": schema_ref(name)}, "application/yaml": {"schema": schema_ref(name)}}})
}

fn operation(
    info: &ResourceInfo,
    action: &str,
    id: &str,
    params: &[&str],
    body: Option<Value>,
    ok: Value,
) -> Value {
    let mut op = json!({
        "tags": [info.group],
        "operationId": id,
        "description": format!("{action} {}", info.kind),
        "parameters": query_parameters(params),
        "responses": {"200": ok, "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": info.group, "version": info.version, "kind": info.kind},
    });
    if let Some(body) = body {
        op["requestBody"] = json!({"content": body, "required": true});
    }
    op
}

/// The paths of a kind that is only created (a review, a token request): POST to its
/// collection.
fn create_paths_for(info: &ResourceInfo, paths: &mut Map<String, Value>) {
    let root = format!("/apis/{}/{}", info.group, info.version);
    let mut params = query_parameters(&["dryRun", "fieldManager", "fieldValidation"]);
    let collection = if info.namespaced {
        params.push(parameter(
            "namespace",
            "path",
            "object name and auth scope",
            "string",
        ));
        format!("{root}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{root}/{}", info.plural)
    };
    let kind = info.schema_name;
    let body = json!({"application/json": {"schema": schema_ref(kind)}});
    let mut post = operation(
        info,
        "post",
        &format!("create{}", info.kind),
        &[],
        Some(body),
        response(kind),
    );
    post["parameters"] = Value::Array(params);
    post["responses"]["201"] = response(kind);
    paths.insert(collection, json!({"post": post}));
}

fn paths_for(info: &ResourceInfo, paths: &mut Map<String, Value>) {
    let root = if info.group.is_empty() {
        format!("/api/{}", info.version)
    } else {
        format!("/apis/{}/{}", info.group, info.version)
    };
    let collection = if info.namespaced {
        format!("{root}/namespaces/{{namespace}}/{}", info.plural)
    } else {
        format!("{root}/{}", info.plural)
    };
    let item = format!("{collection}/{{name}}");
    let kind = info.schema_name;
    let list_kind = format!("{}List", info.schema_name);
    let body = json!({"application/json": {"schema": schema_ref(kind)}, "application/yaml": {"schema": schema_ref(kind)}});
    let patch_body = json!({
        "application/json-patch+json": {"schema": {"type": "object"}},
        "application/merge-patch+json": {"schema": {"type": "object"}},
        "application/apply-patch+yaml": {"schema": {"type": "object"}},
    });
    let list_params = [
        "allowWatchBookmarks",
        "continue",
        "fieldSelector",
        "labelSelector",
        "limit",
        "resourceVersion",
        "resourceVersionMatch",
        "sendInitialEvents",
        "timeoutSeconds",
        "watch",
    ];
    let write_params = ["dryRun", "fieldManager", "fieldValidation"];
    let id = |verb: &str| format!("{verb}{}", info.kind);
    let mut name_params = vec![parameter("name", "path", "name of the object", "string")];
    if info.namespaced {
        name_params.push(parameter(
            "namespace",
            "path",
            "object name and auth scope",
            "string",
        ));
    }
    let with_path_params = |mut op: Value, params: &[Value]| {
        if let Some(list) = op["parameters"].as_array_mut() {
            list.extend(params.iter().cloned());
        }
        op
    };
    let ns_params: Vec<Value> = name_params.iter().skip(1).cloned().collect();
    paths.insert(
        collection.clone(),
        json!({
            "get": with_path_params(operation(info, "list", &id("list"), &list_params, None, response(&list_kind)), &ns_params),
            "post": with_path_params(operation(info, "post", &id("create"), &write_params, Some(body.clone()), response(kind)), &ns_params),
            "delete": with_path_params(operation(info, "deletecollection", &id("deleteCollection"), &list_params, None, response(&list_kind)), &ns_params),
        }),
    );
    let patch_params = ["dryRun", "fieldManager", "fieldValidation", "force"];
    let item_ops = |suffix: &str| {
        json!({
            "get": with_path_params(operation(info, "get", &id(&format!("read{suffix}")), &[], None, response(kind)), &name_params),
            "put": with_path_params(operation(info, "put", &id(&format!("replace{suffix}")), &write_params, Some(body.clone()), response(kind)), &name_params),
            "patch": with_path_params(operation(info, "patch", &id(&format!("patch{suffix}")), &patch_params, Some(patch_body.clone()), response(kind)), &name_params),
        })
    };
    let mut item_value = item_ops("");
    item_value["delete"] = with_path_params(
        operation(
            info,
            "delete",
            &id("delete"),
            &["dryRun", "gracePeriodSeconds", "propagationPolicy"],
            None,
            response("io.k8s.apimachinery.pkg.apis.meta.v1.Status"),
        ),
        &name_params,
    );
    paths.insert(item.clone(), item_value);
    if info.status_subresource {
        paths.insert(format!("{item}/status"), item_ops("Status"));
    }
}

/// The schemas reachable from `roots` through `$ref`s.
fn reachable(components: &Map<String, Value>, roots: &[&str]) -> Map<String, Value> {
    let mut out = Map::new();
    let mut pending: Vec<String> = roots.iter().map(|s| s.to_string()).collect();
    while let Some(name) = pending.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(schema) = components.get(&name) else {
            continue;
        };
        collect_refs(schema, &mut pending);
        out.insert(name, schema.clone());
    }
    out
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                if let Some(name) = r.strip_prefix("#/components/schemas/") {
                    out.push(name.to_string());
                }
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

impl OpenApi {
    /// `components` holds every schema, keyed by the names `ResourceInfo::schema_name` uses;
    /// `created_only` are kinds served only for create (without a List schema).
    pub fn new(
        infos: &[&'static ResourceInfo],
        created_only: &[&'static ResourceInfo],
        components: &Map<String, Value>,
    ) -> Self {
        let mut grouped: BTreeMap<(String, String), Vec<(&ResourceInfo, bool)>> = BTreeMap::new();
        let all = infos
            .iter()
            .map(|i| (*i, false))
            .chain(created_only.iter().map(|i| (*i, true)));
        for (info, create_only) in all {
            grouped
                .entry((info.group.to_string(), info.version.to_string()))
                .or_default()
                .push((info, create_only));
        }
        let mut documents = BTreeMap::new();
        for ((group, version), infos) in grouped {
            let mut paths = Map::new();
            let mut roots: Vec<String> = vec!["io.k8s.apimachinery.pkg.apis.meta.v1.Status".into()];
            for (info, create_only) in &infos {
                roots.push(info.schema_name.to_string());
                if *create_only {
                    create_paths_for(info, &mut paths);
                } else {
                    paths_for(info, &mut paths);
                    roots.push(format!("{}List", info.schema_name));
                }
            }
            let root_refs: Vec<&str> = roots.iter().map(String::as_str).collect();
            let schemas = reachable(components, &root_refs);
            let title = if group.is_empty() {
                "Kubernetes".to_string()
            } else {
                group.clone()
            };
            let doc = json!({
                "openapi": "3.0.0",
                "info": {"title": title, "version": version},
                "paths": paths,
                "components": {"schemas": schemas},
            });
            let digest = Sha512::digest(serde_json::to_vec(&doc).unwrap_or_default());
            let hash: String = digest.iter().map(|b| format!("{b:02X}")).collect();
            documents.insert((group, version), (doc, hash));
        }
        OpenApi { documents }
    }

    fn url(group: &str, version: &str) -> String {
        if group.is_empty() {
            format!("api/{version}")
        } else {
            format!("apis/{group}/{version}")
        }
    }

    pub fn root(&self) -> Value {
        let paths: Map<String, Value> = self
            .documents
            .iter()
            .map(|((g, v), (_, hash))| {
                let url = Self::url(g, v);
                (
                    url.clone(),
                    json!({"serverRelativeURL": format!("/openapi/v3/{url}?hash={hash}")}),
                )
            })
            .collect();
        json!({"paths": paths})
    }

    pub fn group_version(
        &self,
        group: &str,
        version: &str,
        hash: Option<&str>,
    ) -> Result<Response, Status> {
        let Some((doc, current)) = self
            .documents
            .get(&(group.to_string(), version.to_string()))
        else {
            return Err(Status::failure(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ));
        };
        if let Some(requested) = hash {
            if requested != current {
                let location = format!("/openapi/v3/{}?hash={current}", Self::url(group, version));
                let mut response = StatusCode::MOVED_PERMANENTLY.into_response();
                if let Ok(value) = HeaderValue::from_str(&location) {
                    response.headers_mut().insert(header::LOCATION, value);
                }
                return Ok(response);
            }
        }
        let mut response =
            (StatusCode::OK, serde_json::to_vec(doc).unwrap_or_default()).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Ok(etag) = HeaderValue::from_str(&format!("\"{current}\"")) {
            headers.insert(header::ETAG, etag);
        }
        if hash.is_some() {
            headers.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, immutable"),
            );
        }
        Ok(response)
    }
}

/// The schema of a built-in kind's list (`items` of `item`, a components name), as
/// kube-apiserver publishes it.
pub(crate) fn list_schema(item: &str, group: &str, list_kind: &str) -> Value {
    serde_json::json!({
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": group, "kind": list_kind, "version": "v1"}],
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta", "default": {}},
            "items": {"type": "array", "items": {"$ref": format!("#/components/schemas/{item}"), "default": {}}}
        }
    })
}

/// The v2 document's protobuf media type. kubectl (client-go's OpenAPISchema) asks for it
/// in its older spelling with `@`, which Go's MIME parser refuses in a Content-Type: the
/// answer carries this one, as kube-apiserver's does.
const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
const V2_PROTOBUF_ACCEPTED: [&str; 2] = [
    V2_PROTOBUF,
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
];

/// `/openapi/v2`: a Swagger 2.0 document without definitions. The schemas live in the v3
/// documents, where kubectl finds server-side field validation for every kind; kubectl
/// reads v2 only where it has no v3 path — a `kind: List` file (as `kubectl get -o yaml`
/// writes), whose client-side check finds no definition here and leaves each item to the
/// server's strict validation, and client-side apply's patch type (no definition: a JSON
/// merge patch, as for any custom resource). Protobuf (gnostic's `openapi.v2.Document`)
/// when asked for it, as kubectl does, JSON otherwise.
pub fn v2(accept: Option<&str>) -> Response {
    let wants_protobuf = accept
        .into_iter()
        .flat_map(|v| v.split(','))
        .any(|t| V2_PROTOBUF_ACCEPTED.iter().any(|p| t.trim().starts_with(p)));
    let (content_type, body) = if wants_protobuf {
        (V2_PROTOBUF, v2_protobuf())
    } else {
        let doc = json!({"swagger": "2.0", "info": {"title": V2_TITLE, "version": V2_VERSION}, "paths": {}});
        (
            "application/json",
            serde_json::to_vec(&doc).unwrap_or_default(),
        )
    };
    let mut response = (StatusCode::OK, body).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

const V2_TITLE: &str = "virtplane";
const V2_VERSION: &str = "v1";

/// `openapi.v2.Document{swagger: "2.0", info: {title, version}, paths: {}}`.
fn v2_protobuf() -> Vec<u8> {
    let mut info = Vec::new();
    protobuf_field(&mut info, 1, V2_TITLE.as_bytes());
    protobuf_field(&mut info, 2, V2_VERSION.as_bytes());
    let mut doc = Vec::new();
    protobuf_field(&mut doc, 1, b"2.0");
    protobuf_field(&mut doc, 2, &info);
    protobuf_field(&mut doc, 8, &[]);
    doc
}

/// Appends a length-delimited field (wire type 2).
fn protobuf_field(out: &mut Vec<u8>, number: u64, payload: &[u8]) {
    protobuf_varint(out, number << 3 | 2);
    protobuf_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

fn protobuf_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod v2_tests {
    use super::*;

    #[test]
    fn the_v2_document_reads_back_as_gnostic_fields() {
        let doc = v2_protobuf();
        let fields = crate::protobuf::fields(&doc).expect("protobuf");
        use crate::protobuf::Field::Bytes;
        assert_eq!(fields[0], (1, Bytes(b"2.0")));
        let (2, Bytes(info)) = fields[1] else {
            panic!("info: {fields:?}")
        };
        assert_eq!(
            crate::protobuf::fields(info).unwrap(),
            [(1, Bytes(b"virtplane")), (2, Bytes(b"v1"))]
        );
        assert_eq!(fields[2], (8, Bytes(b"")));
        assert_eq!(fields.len(), 3);
    }
}
