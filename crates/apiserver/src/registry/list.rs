//! List: selectors, paging with continue tokens, and resourceVersion semantics.

use apimachinery::status::Status;
use serde_json::Value;
use store::{KeyValue, ListOptions, Revision, StoreError};

use super::{store_failure, Registration, Registry};
use crate::object;
use crate::stored;

/// The result of a LIST: the objects as stored (see `stored`).
#[derive(Debug)]
pub struct ListResult {
    pub items: Vec<KeyValue>,
    pub resource_version: Revision,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

impl Registry {
    /// LIST with selectors, paging and resourceVersion semantics.
    pub async fn list(
        &self,
        reg: &Registration,
        request: &ListRequest,
    ) -> Result<ListResult, Status> {
        let prefix = Self::list_prefix(reg.info, request.namespace.as_deref());
        let resource_prefix = Self::resource_prefix(reg.info);
        let mut continue_start = None;
        let (revision, mut start_after) = match &request.continue_token {
            Some(token) => {
                let (rv, start) =
                    apimachinery::continue_token::decode(token).map_err(Status::bad_request)?;
                let after = Some(format!("{resource_prefix}{start}"));
                continue_start = Some(start);
                // A negative revision (issued with a 410 below) continues at the latest one.
                (Some(rv).filter(|rv| *rv > 0), after)
            }
            None => (request.exact_revision, None),
        };
        if let Some(min) = request.min_revision {
            let current = self.store.current_revision();
            if min > current {
                return Err(Status::too_large_resource_version(min, current));
            }
        }
        let filtering = !request.label.is_empty() || !request.field.is_empty();
        let limit = request.limit.filter(|l| *l > 0);
        let mut items = Vec::new();
        let mut read_revision = revision;
        loop {
            let chunk = limit.map(|l| (l - items.len()).max(1) * if filtering { 4 } else { 1 });
            let page = self
                .store
                .list(&prefix, ListOptions { start_after: start_after.clone(), limit: chunk, revision: read_revision })
                .await
                .map_err(|e| match (e, &continue_start) {
                    // etcd3's handleCompactedErrorForPaging: 410 with a token (revision -1)
                    // that continues at the latest revision, inconsistently.
                    (StoreError::Compacted { .. }, Some(start)) => {
                        let mut status = Status::gone(
                            "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                        );
                        status.continue_token = Some(apimachinery::continue_token::encode(-1, start));
                        status
                    }
                    (other, _) => store_failure(other),
                })?;
            read_revision = Some(page.revision);
            let exhausted = page.remaining == 0;
            let mut last_key = None;
            for kv in &page.items {
                last_key = Some(kv.key.clone());
                if !filtering || request.matches_stored(kv)? {
                    items.push(kv.clone());
                    if limit.is_some_and(|l| items.len() >= l) {
                        break;
                    }
                }
            }
            let full = limit.is_some_and(|l| items.len() >= l);
            let more_after_last = match (&last_key, page.items.last()) {
                (Some(last), Some(page_last)) => last != &page_last.key || !exhausted,
                _ => false,
            };
            if full || exhausted || page.items.is_empty() {
                let revision = page.revision;
                if full && more_after_last {
                    let last = last_key.unwrap_or_default();
                    let relative = last
                        .strip_prefix(&resource_prefix)
                        .unwrap_or(&last)
                        .to_string();
                    let remaining = if filtering {
                        None
                    } else {
                        let consumed_in_page = page
                            .items
                            .iter()
                            .position(|kv| kv.key == last)
                            .map(|p| p + 1)
                            .unwrap_or(0);
                        Some(page.items.len() - consumed_in_page + page.remaining)
                    };
                    return Ok(ListResult {
                        items,
                        resource_version: revision,
                        continue_token: Some(apimachinery::continue_token::encode(
                            revision, &relative,
                        )),
                        remaining,
                    });
                }
                return Ok(ListResult {
                    items,
                    resource_version: revision,
                    continue_token: None,
                    remaining: None,
                });
            }
            start_after = last_key;
        }
    }
}

/// A LIST or WATCH filter and position.
#[derive(Debug, Default, Clone)]
pub struct ListRequest {
    pub namespace: Option<String>,
    pub label: apimachinery::selector::LabelSelector,
    pub field: apimachinery::selector::FieldSelector,
    pub limit: Option<usize>,
    pub continue_token: Option<String>,
    /// `resourceVersionMatch=Exact`: read at exactly this revision.
    pub exact_revision: Option<Revision>,
    /// A resourceVersion the answer must not be older than.
    pub min_revision: Option<Revision>,
}

impl ListRequest {
    /// No label or field selector: every object matches.
    pub fn selects_everything(&self) -> bool {
        self.label.is_empty() && self.field.is_empty()
    }

    /// Whether a stored object matches. A label selector alone reads only the labels,
    /// skipping the rest of the object instead of decoding it (the node agents' watch
    /// for VMIs migrating to them looks at every VMI event).
    pub fn matches_stored(&self, kv: &store::KeyValue) -> Result<bool, Status> {
        if self.selects_everything() {
            return Ok(true);
        }
        if self.field.is_empty() {
            return Ok(self.label.matches(&stored::labels(kv)?));
        }
        Ok(self.matches(&stored::decode(kv)?))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if self.selects_everything() {
            return true;
        }
        let labels = object::labels(obj);
        self.label.matches(&labels)
            && self.field.matches(|field| match field {
                "metadata.name" => Some(object::name(obj).to_string()),
                "metadata.namespace" => Some(object::namespace(obj).to_string()),
                // An Event's `source` selects on its component.
                "source" if obj["source"].is_object() => field_value(obj, "source.component"),
                other => field_value(obj, other),
            })
    }
}

/// Reads a dotted field path as a string, for the field selectors a kind supports
/// beyond name and namespace (e.g. `status.nodeName`).
fn field_value(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    Some(match cur {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    })
}
