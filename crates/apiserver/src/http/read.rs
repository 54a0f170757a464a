//! GET of one object or a list: JSON spliced from storage, YAML, Tables, metadata.

use apimachinery::status::Status;
use axum::response::Response;
use http::StatusCode;
use serde_json::{json, Value};

use super::resource::ResourceRequest;
use super::response::{
    json_response, object_response, partial_metadata, stored_list_response, table_response,
};
use super::ApiServer;
use crate::negotiate::Format;
use crate::registry::{ListRequest, Registration};
use crate::request::Query;
use crate::stored;

impl ApiServer {
    pub(super) async fn list(&self, req: &ResourceRequest<'_>) -> Result<Response, Status> {
        let (reg, info, query) = (&req.reg, req.reg.info, req.query);
        let format = req.negotiate(true)?;
        let list_request = list_request(reg, req.namespace(), query)?;
        let result = self.registry.list(reg, &list_request).await?;
        let mut metadata = json!({"resourceVersion": result.resource_version.to_string()});
        if let Some(token) = &result.continue_token {
            metadata["continue"] = json!(token);
        }
        if let Some(remaining) = result.remaining {
            metadata["remainingItemCount"] = json!(remaining);
        }
        if format == Format::Json {
            return stored_list_response(info, metadata, &result.items);
        }
        let items = result
            .items
            .iter()
            .map(stored::decode)
            .collect::<Result<Vec<_>, _>>()?;
        if format == Format::Table {
            let table =
                crate::printing::table(info, &items, metadata, query.include_object.as_deref());
            return Ok(table_response(&table));
        }
        if format == Format::Metadata {
            let items: Vec<Value> = items.iter().map(partial_metadata).collect();
            let mut list = json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList",
                               "metadata": metadata});
            list["items"] = Value::Array(items);
            return Ok(json_response(StatusCode::OK, &list));
        }
        // The items move into the list: `json!` would deep-copy them through `to_value`.
        let mut list =
            json!({"apiVersion": info.api_version(), "kind": info.list_kind, "metadata": metadata});
        list["items"] = Value::Array(items);
        Ok(object_response(StatusCode::OK, &list, format))
    }

    pub(super) async fn get(
        &self,
        req: &ResourceRequest<'_>,
        name: &str,
    ) -> Result<Response, Status> {
        let (info, query) = (req.reg.info, req.query);
        let format = req.negotiate(true)?;
        let obj = self.registry.get(&req.reg, req.namespace(), name).await?;
        if format == Format::Table {
            let rv = crate::object::meta_str(&obj, "resourceVersion")
                .unwrap_or("")
                .to_string();
            let table = crate::printing::table(
                info,
                &[obj],
                json!({"resourceVersion": rv}),
                query.include_object.as_deref(),
            );
            return Ok(table_response(&table));
        }
        if format == Format::Metadata {
            return Ok(json_response(StatusCode::OK, &partial_metadata(&obj)));
        }
        Ok(object_response(StatusCode::OK, &obj, format))
    }
}

pub(super) fn parse_revision(rv: &str) -> Result<i64, Status> {
    rv.parse::<i64>()
        .ok()
        .filter(|r| *r >= 0)
        .ok_or_else(|| Status::bad_request(format!("invalid resource version {rv:?}")))
}

pub(super) fn list_request(
    reg: &Registration,
    namespace: Option<&str>,
    query: &Query,
) -> Result<ListRequest, Status> {
    let label = match &query.label_selector {
        Some(s) => apimachinery::selector::LabelSelector::parse(s).map_err(Status::bad_request)?,
        None => Default::default(),
    };
    let field = match &query.field_selector {
        Some(s) => apimachinery::selector::FieldSelector::parse(s).map_err(Status::bad_request)?,
        None => Default::default(),
    };
    let supported = crate::printing::selectable_fields(reg.info);
    for name in field.fields() {
        if name != "metadata.name" && name != "metadata.namespace" && !supported.contains(&name) {
            return Err(Status::bad_request(
                apimachinery::selector::field_label_not_supported(name),
            ));
        }
    }
    let rv_match = query.resource_version_match.as_deref();
    // (The options were validated for a list or a watch by `options::validate_request`;
    // these list-only rules must not refuse a watch with sendInitialEvents.)
    if rv_match.is_some() && query.resource_version.is_none() && !query.watch {
        return Err(Status::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if rv_match.is_some() && query.continue_token.is_some() {
        return Err(Status::bad_request(
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if query.send_initial_events.is_some() && !query.watch {
        return Err(Status::bad_request(
            "sendInitialEvents is forbidden for list",
        ));
    }
    let rv = match query.resource_version.as_deref() {
        Some(rv) => Some(parse_revision(rv)?),
        None => None,
    };
    let (exact, min) = match (rv_match, rv) {
        (Some("Exact"), Some(0)) => {
            return Err(Status::bad_request(
                "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
            ))
        }
        (Some("Exact"), Some(r)) => (Some(r), None),
        (Some("NotOlderThan") | None, Some(r)) if r > 0 && !query.watch => (None, Some(r)),
        (Some("NotOlderThan") | None, _) => (None, None),
        (Some(other), _) => {
            return Err(Status::bad_request(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
            )))
        }
    };
    Ok(ListRequest {
        namespace: namespace.map(str::to_string),
        label,
        field,
        limit: if query.watch { None } else { query.limit },
        continue_token: query.continue_token.clone(),
        exact_revision: exact,
        min_revision: min,
    })
}
