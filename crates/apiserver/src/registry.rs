//! The generic registry: create, read, update, patch, delete, list and watch for every
//! registered resource, with kube-apiserver's semantics. It knows nothing of HTTP; the
//! transport layer turns requests into calls here and `Status` errors into responses.

use std::sync::Arc;

use apimachinery::meta_validation::NameRule;
use apimachinery::resource::ResourceInfo;
use apimachinery::schema::Schema;
use apimachinery::status::Status;
use serde_json::{json, Map, Value};
use store::{KeyValue, ListOptions, Revision, Store, StoreError};

use crate::object::{self, meta_mut};
use crate::stored;

/// How a write treats fields the schema does not know (`fieldValidation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FieldValidation {
    Ignore,
    /// The server default when the parameter is absent.
    #[default]
    Warn,
    Strict,
}

/// Options every write carries.
#[derive(Clone, Debug, Default)]
pub struct WriteOptions {
    pub dry_run: bool,
    pub field_manager: String,
    pub field_validation: FieldValidation,
    /// The writer is a virtplane component (controller, node agent), which KubeVirt's
    /// update webhooks let change what users may not (VMI spec, reserved labels).
    pub privileged: bool,
}

/// A successful result with the `Warning` headers it should carry.
#[derive(Debug)]
pub struct Outcome<T> {
    pub value: T,
    pub warnings: Vec<String>,
    /// Whether the write created the object (201 rather than 200).
    pub created: bool,
    /// The object as the write stored it, when it is `value`: JSON answers are spliced
    /// from it (see `stored`) rather than encoded again.
    pub stored: Option<KeyValue>,
}

/// What admission said about an object.
#[derive(Debug, Default)]
pub struct Admission {
    pub errors: Vec<apimachinery::field::FieldError>,
    pub warnings: Vec<String>,
}

/// Per-resource behaviour: defaulting (mutating admission), validation (validating
/// admission) and anything a kind fills in on create.
/// One read an admission hook asks for: an object by name, or all of a kind (`name`
/// `None`), in the namespace of the object being admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub name: Option<String>,
}

pub trait ResourceHooks: Send + Sync {
    /// The admission webhook whose name prefixes rejections; `None` for built-in kinds,
    /// whose errors are plain `Invalid`.
    fn webhook(&self) -> Option<&'static str> {
        None
    }
    /// The webhook that reviews updates, when it is not the one for creates.
    fn update_webhook(&self) -> Option<&'static str> {
        self.webhook()
    }
    /// Turns the wire form of an object into its stored form (Secret `stringData` into
    /// `data`, for example), failing as the decoder does on malformed input (400).
    fn decode(&self, _obj: &mut Value) -> Result<(), Status> {
        Ok(())
    }
    /// Whether a PUT without `metadata.resourceVersion` overwrites the object (built-in
    /// kinds such as ConfigMaps) or is refused (custom resources).
    fn allows_unconditional_update(&self) -> bool {
        false
    }
    fn default_on_create(&self, _obj: &mut Value) {}
    /// What the server's own controllers would add in their first sync (a finalizer, a
    /// first status, as upstream sets a Pod's Pending phase), stored with the create.
    /// Called after managedFields are recorded, so no manager owns these fields.
    fn controller_fields_on_create(&self, _obj: &mut Value) {}
    fn default_on_update(&self, _obj: &mut Value) {}
    fn validate_create(&self, _obj: &Value) -> Admission {
        Admission::default()
    }
    /// Objects in the new object's namespace that its create admission reads (a
    /// migration's VMI and the migrations beside it), handed to `validate_create_reading`.
    fn create_reads(&self, _obj: &Value) -> Vec<Read> {
        Vec::new()
    }
    /// Create admission that needs what `create_reads` named, in the same order (each a
    /// list: the object read by name, or nothing; every object of a kind listed).
    fn validate_create_reading(&self, _obj: &Value, _read: &[Vec<Value>]) -> Result<(), Status> {
        Ok(())
    }
    fn validate_update(&self, _old: &Value, _new: &Value, _privileged: bool) -> Admission {
        Admission::default()
    }
    /// The rule `metadata.name` follows (most kinds: a DNS subdomain).
    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }
    /// Refuses a delete before the object is read: the Forbidden message (the
    /// NamespaceLifecycle admission keeps the system namespaces).
    fn refuse_delete(&self, _name: &str) -> Option<&'static str> {
        None
    }
    /// Whether a delete only marks the object, even without finalizers, because the
    /// kind's controller removes it once it has cleaned up (namespaces are emptied first).
    fn removed_by_controller(&self) -> bool {
        false
    }
    /// What changes when a delete first marks the object (a namespace turns Terminating).
    fn on_deletion_marked(&self, _obj: &mut Value) {}
}

/// Where kube-apiserver's two handlers differ: built-in kinds are served by typed
/// go-restful routes, custom resources by the apiextensions handler. Set where a kind
/// is registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Serving {
    /// Typed decoding: a body without `kind` or `apiVersion` takes the endpoint's
    /// (clients such as Python's `V1Namespace(...)` omit them). Custom resources insist.
    pub default_type_meta: bool,
    /// `application/strategic-merge-patch+json` is accepted (and listed when a patch type
    /// is refused).
    pub strategic_merge_patch: bool,
    /// Upstream would also answer in protobuf, so an unacceptable `Accept` lists it.
    pub protobuf: bool,
    /// How a verb the kind does not serve is refused.
    pub refusals: Refusals,
}

/// The answer to a verb a path does not serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusals {
    /// go-restful: a method without a route is a generic 405.
    Routes,
    /// The custom resource handler: MethodNotAllowed naming the verb, and update or
    /// patch without a name is `name must be provided`.
    Verbs,
}

impl Serving {
    pub const BUILT_IN: Serving = Serving {
        default_type_meta: true,
        strategic_merge_patch: true,
        protobuf: true,
        refusals: Refusals::Routes,
    };
    pub const CUSTOM_RESOURCE: Serving = Serving {
        default_type_meta: false,
        strategic_merge_patch: false,
        protobuf: false,
        refusals: Refusals::Verbs,
    };
}

/// A served resource: its names and the schema and hooks that govern writes.
pub struct Registration {
    pub info: &'static ResourceInfo,
    pub schema: Schema,
    pub hooks: Box<dyn ResourceHooks>,
    pub serving: Serving,
}

/// The result of a LIST: the objects as stored (see `stored`).
#[derive(Debug)]
pub struct ListResult {
    pub items: Vec<KeyValue>,
    pub resource_version: Revision,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

pub struct Registry {
    pub store: Arc<dyn Store>,
    registrations: Vec<Arc<Registration>>,
}

/// Maps store failures that the caller did not anticipate to a Status.
pub(crate) fn store_failure(e: StoreError) -> Status {
    match e {
        StoreError::Compacted { .. } => {
            Status::gone("The resourceVersion for the provided list is too old.")
        }
        StoreError::FutureRevision { requested, current } => {
            Status::too_large_resource_version(requested, current)
        }
        other => Status::internal(other),
    }
}

impl Registry {
    pub fn new(store: Arc<dyn Store>, registrations: Vec<Registration>) -> Self {
        Registry {
            store,
            registrations: registrations.into_iter().map(Arc::new).collect(),
        }
    }

    pub fn registrations(&self) -> &[Arc<Registration>] {
        &self.registrations
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Registration>> {
        self.registrations
            .iter()
            .find(|r| r.info.group == group && r.info.version == version && r.info.plural == plural)
            .cloned()
    }

    pub fn find_kind(&self, group: &str, kind: &str) -> Option<Arc<Registration>> {
        self.registrations
            .iter()
            .find(|r| r.info.group == group && r.info.kind == kind)
            .cloned()
    }

    /// `/registry/<group>/<plural>/` (`core` for the core group).
    pub fn resource_prefix(info: &ResourceInfo) -> String {
        let group = if info.group.is_empty() {
            "core"
        } else {
            info.group
        };
        format!("/registry/{group}/{}/", info.plural)
    }

    pub fn key(info: &ResourceInfo, namespace: Option<&str>, name: &str) -> String {
        match namespace {
            Some(ns) if info.namespaced => format!("{}{ns}/{name}", Self::resource_prefix(info)),
            _ => format!("{}{name}", Self::resource_prefix(info)),
        }
    }

    fn list_prefix(info: &ResourceInfo, namespace: Option<&str>) -> String {
        match namespace {
            Some(ns) if info.namespaced => format!("{}{ns}/", Self::resource_prefix(info)),
            _ => Self::resource_prefix(info),
        }
    }

    pub async fn get(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, Status> {
        let key = Self::key(reg.info, namespace, name);
        match self.store.get(&key).await.map_err(store_failure)? {
            Some(kv) => stored::decode(&kv),
            None => Err(Status::not_found(&reg.info.group_resource(), name)),
        }
    }

    async fn get_kv(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<KeyValue, Status> {
        let key = Self::key(reg.info, namespace, name);
        self.store
            .get(&key)
            .await
            .map_err(store_failure)?
            .ok_or_else(|| Status::not_found(&reg.info.group_resource(), name))
    }

    /// Whether the namespace exists, and whether it is being deleted.
    pub async fn namespace_state(&self, namespace: &str) -> Result<Option<bool>, Status> {
        let key = format!("/registry/core/namespaces/{namespace}");
        match self.store.get(&key).await.map_err(store_failure)? {
            None => Ok(None),
            Some(kv) => Ok(Some(stored::is_deleting(&kv)?)),
        }
    }

    async fn require_namespace(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<(), Status> {
        let Some(ns) = namespace.filter(|_| reg.info.namespaced) else {
            return Ok(());
        };
        match self.namespace_state(ns).await? {
            None => Err(Status::not_found(
                &apimachinery::status::GroupResource::new("", "namespaces"),
                ns,
            )),
            Some(true) => {
                let mut status = Status::forbidden(
                    &reg.info.group_resource(),
                    name,
                    &format!("unable to create new content in namespace {ns} because it is being terminated"),
                );
                if let Some(details) = status.details.as_mut() {
                    details.causes.push(apimachinery::status::StatusCause {
                        reason: "NamespaceTerminating".into(),
                        message: format!("namespace {ns} is being terminated"),
                        field: "metadata.namespace".into(),
                    });
                }
                Err(status)
            }
            Some(false) => Ok(()),
        }
    }

    /// Checks apiVersion/kind and the namespace of a body against the request.
    fn check_identity(
        reg: &Registration,
        obj: &mut Value,
        namespace: Option<&str>,
    ) -> Result<(), Status> {
        let info = reg.info;
        let Some(root) = obj.as_object_mut() else {
            return Err(Status::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: the body is not a JSON object",
                info.kind, info.version, info.kind
            )));
        };
        if reg.serving.default_type_meta {
            for (field, value) in [
                ("kind", info.kind.to_string()),
                ("apiVersion", info.api_version()),
            ] {
                if root
                    .get(field)
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
                {
                    root.insert(field.into(), Value::String(value));
                }
            }
        }
        let kind = root.get("kind").and_then(Value::as_str).unwrap_or("");
        let api_version = root.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if kind.is_empty() {
            return Err(Status::bad_request(format!(
                "Object 'Kind' is missing in '{}'",
                obj_preview(root)
            )));
        }
        if api_version != info.api_version() {
            return Err(Status::bad_request(format!(
                "the API version in the data ({api_version}) does not match the expected API version ({})",
                info.api_version()
            )));
        }
        if kind != info.kind {
            // The custom resource validator's type-meta check.
            let name = root
                .get("metadata")
                .and_then(|m| m.get("name"))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let err = apimachinery::field::FieldError::invalid(
                "kind",
                kind,
                format!("must be {}", info.kind),
            );
            return Err(Status::invalid(&info.group_kind(), &name, &[err]));
        }
        let meta = meta_mut(obj);
        if info.namespaced {
            let body_ns = meta.get("namespace").and_then(Value::as_str).unwrap_or("");
            if let Some(ns) = namespace {
                if !body_ns.is_empty() && body_ns != ns {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ));
                }
                meta.insert("namespace".into(), Value::String(ns.to_string()));
            }
        } else {
            meta.remove("namespace");
        }
        Ok(())
    }

    /// Drops unknown fields as `fieldValidation` asks, returning warnings.
    fn prune(
        reg: &Registration,
        obj: &mut Value,
        validation: FieldValidation,
        is_patch: bool,
    ) -> Result<Vec<String>, Status> {
        let unknown = reg.schema.prune(obj);
        if unknown.is_empty() {
            return Ok(Vec::new());
        }
        let texts: Vec<String> = unknown
            .iter()
            .map(|p| format!("unknown field {p:?}"))
            .collect();
        match validation {
            FieldValidation::Ignore => Ok(Vec::new()),
            FieldValidation::Warn => Ok(texts),
            FieldValidation::Strict if is_patch => {
                let err = apimachinery::field::FieldError::invalid(
                    "patch",
                    Value::String(obj.to_string()),
                    format!("strict decoding error: {}", texts.join(", ")),
                );
                Err(Status::invalid(
                    &apimachinery::status::GroupKind::new("", ""),
                    "",
                    &[err],
                ))
            }
            FieldValidation::Strict => Err(Status::bad_request(format!(
                "{} in version {:?} cannot be handled as a {}: strict decoding error: {}",
                reg.info.kind,
                reg.info.version,
                reg.info.kind,
                texts.join(", ")
            ))),
        }
    }

    /// Metadata, schema and admission validation of an object about to be written.
    fn validate(
        reg: &Registration,
        obj: &Value,
        old: Option<&Value>,
        privileged: bool,
        status_write: bool,
    ) -> Result<Vec<String>, Status> {
        let info = reg.info;
        let name = object::name(obj).to_string();
        let rule = reg.hooks.name_rule();
        let meta = obj.get("metadata").unwrap_or(&Value::Null);
        let (mut errors, mut warnings) =
            apimachinery::meta_validation::validate_object_meta(meta, info.namespaced, rule);
        if let Some(old) = old {
            let old_meta = old.get("metadata").unwrap_or(&Value::Null);
            errors.extend(apimachinery::meta_validation::validate_object_meta_update(
                meta, old_meta,
            ));
            // Updates warn only about finalizers they add.
            warnings = apimachinery::meta_validation::finalizer_warnings(meta, Some(old_meta));
        }
        errors.extend(reg.schema.validate(obj));
        if !errors.is_empty() {
            return Err(Status::invalid(&info.group_kind(), &name, &errors));
        }
        let admission = match old {
            None => reg.hooks.validate_create(obj),
            // A /status write keeps the stored spec and metadata, which passed admission when
            // they were written; KubeVirt's spec admitters do not run on status either.
            Some(_) if status_write => Admission::default(),
            Some(old) => reg.hooks.validate_update(old, obj, privileged),
        };
        if !admission.errors.is_empty() {
            let webhook = if old.is_some() {
                reg.hooks.update_webhook()
            } else {
                reg.hooks.webhook()
            };
            return Err(match webhook {
                Some(webhook) => {
                    Status::denied_by_webhook(&info.group_kind(), &name, webhook, &admission.errors)
                }
                None => Status::invalid(&info.group_kind(), &name, &admission.errors),
            });
        }
        warnings.extend(admission.warnings);
        Ok(warnings)
    }

    /// Create admission that reads other objects (see [`ResourceHooks::create_reads`]).
    async fn admit_reading(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        obj: &Value,
    ) -> Result<(), Status> {
        let reads = reg.hooks.create_reads(obj);
        if reads.is_empty() {
            return Ok(());
        }
        let mut results = Vec::with_capacity(reads.len());
        for read in reads {
            let Some(other) = self.find(read.group, read.version, read.plural) else {
                results.push(Vec::new());
                continue;
            };
            let found = match &read.name {
                Some(name) => match self.get(&other, namespace, name).await {
                    Ok(found) => vec![found],
                    Err(status) if status.code == 404 => Vec::new(),
                    Err(status) => return Err(status),
                },
                None => {
                    let request = ListRequest {
                        namespace: namespace.map(str::to_string),
                        ..Default::default()
                    };
                    let items = self.list(&other, &request).await?.items;
                    items.iter().map(stored::decode).collect::<Result<_, _>>()?
                }
            };
            results.push(found);
        }
        reg.hooks.validate_create_reading(obj, &results)
    }

    /// POST: create an object in `namespace`.
    pub async fn create(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        obj: Value,
        options: &WriteOptions,
    ) -> Result<Outcome<Value>, Status> {
        self.create_with(reg, namespace, obj, options, true).await
    }

    /// Create; `record_managed_fields` is false when the caller (server-side apply)
    /// has already set `managedFields` for this write.
    pub async fn create_with(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        mut obj: Value,
        options: &WriteOptions,
        record_managed_fields: bool,
    ) -> Result<Outcome<Value>, Status> {
        Self::check_identity(reg, &mut obj, namespace)?;
        let mut warnings = Self::prune(reg, &mut obj, options.field_validation, false)?;
        reg.hooks.decode(&mut obj)?;
        let generate_name = object::meta_str(&obj, "generateName")
            .unwrap_or("")
            .to_string();
        let requested_name = object::name(&obj).to_string();
        self.require_namespace(reg, namespace, &requested_name)
            .await?;

        // System fields are the server's to set.
        {
            let meta = meta_mut(&mut obj);
            for field in [
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "selfLink",
            ] {
                meta.remove(field);
            }
            meta.insert("generation".into(), json!(1));
            meta.insert(
                "uid".into(),
                Value::String(uuid::Uuid::new_v4().to_string()),
            );
            meta.insert(
                "creationTimestamp".into(),
                Value::String(kubevirt_api::meta::now()),
            );
        }
        if reg.info.status_subresource {
            if let Some(root) = obj.as_object_mut() {
                root.remove("status");
            }
        }
        reg.hooks.default_on_create(&mut obj);
        let generated = requested_name.is_empty() && !generate_name.is_empty();
        if generated {
            meta_mut(&mut obj).insert(
                "name".into(),
                Value::String(apimachinery::names::generate_name(&generate_name)),
            );
        }
        warnings.extend(Self::validate(reg, &obj, None, options.privileged, false)?);
        self.admit_reading(reg, namespace, &obj).await?;
        if record_managed_fields {
            apimachinery::ssa::record_update(
                None,
                &mut obj,
                &options.field_manager,
                None,
                &reg.info.api_version(),
                &kubevirt_api::meta::now(),
                &reg.schema,
            );
        }
        reg.hooks.controller_fields_on_create(&mut obj);
        if options.dry_run {
            // Dry-run storage still refuses a name that is taken.
            let key = Self::key(reg.info, namespace, object::name(&obj));
            if self.store.get(&key).await.map_err(store_failure)?.is_some() {
                return Err(Status::already_exists(
                    &reg.info.group_resource(),
                    object::name(&obj),
                ));
            }
            return Ok(Outcome {
                value: obj,
                warnings,
                created: true,
                stored: None,
            });
        }
        // A generated name may collide; upstream retries a few times with fresh names.
        let attempts = if generated { 8 } else { 1 };
        for attempt in 0..attempts {
            if attempt > 0 {
                meta_mut(&mut obj).insert(
                    "name".into(),
                    Value::String(apimachinery::names::generate_name(&generate_name)),
                );
            }
            let name = object::name(&obj).to_string();
            let key = Self::key(reg.info, namespace, &name);
            match self.store.create(&key, stored::encode(&obj)?).await {
                Ok(kv) => {
                    meta_mut(&mut obj).insert(
                        "resourceVersion".into(),
                        Value::String(kv.mod_revision.to_string()),
                    );
                    return Ok(Outcome {
                        value: obj,
                        warnings,
                        created: true,
                        stored: Some(kv),
                    });
                }
                Err(StoreError::AlreadyExists) if attempt + 1 < attempts => continue,
                Err(StoreError::AlreadyExists) => {
                    let existing = self.store.get(&key).await.map_err(store_failure)?;
                    let deleting = existing
                        .as_ref()
                        .and_then(|kv| stored::decode(kv).ok())
                        .is_some_and(|o| object::is_deleting(&o));
                    let mut status = Status::already_exists(&reg.info.group_resource(), &name);
                    if generated {
                        status.message.push_str(
                            ", the server was not able to generate a unique name for the object",
                        );
                        if let Some(d) = status.details.as_mut() {
                            d.retry_after_seconds = Some(1);
                        }
                    } else if deleting {
                        status.message = format!("object is being deleted: {}", status.message);
                    }
                    return Err(status);
                }
                Err(e) => return Err(store_failure(e)),
            }
        }
        Err(Status::internal("name generation exhausted"))
    }

    /// Applies a change to the stored object and writes it with compare-and-swap.
    /// `change` gets the current object (with its resourceVersion) and returns the
    /// desired one. When it returns an object carrying a resourceVersion that differs
    /// from the stored one, the write fails with 409; otherwise conflicts with
    /// concurrent writers are retried against the newer object.
    pub async fn update_with<F>(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
        subresource: Option<&str>,
        options: &WriteOptions,
        change: F,
    ) -> Result<Outcome<Value>, Status>
    where
        F: Fn(&Value) -> Result<Change, Status>,
    {
        loop {
            let kv = self.get_kv(reg, namespace, name).await?;
            let old = stored::decode(&kv)?;
            let Change {
                object: mut new,
                mut warnings,
                managed_fields_done,
            } = change(&old)?;
            if !new.is_object() {
                return Err(Status::bad_request("the body is not a JSON object"));
            }
            let requested_rv = object::meta_str(&new, "resourceVersion").map(str::to_string);
            if let Some(rv) = &requested_rv {
                if rv != &kv.mod_revision.to_string() {
                    return Err(Status::modified(&reg.info.group_resource(), name));
                }
            }
            reg.hooks.decode(&mut new)?;
            new = self.prepare_update(reg, namespace, &old, new, subresource)?;
            if subresource.is_none() {
                reg.hooks.default_on_update(&mut new);
            }
            warnings.extend(Self::prune(
                reg,
                &mut new,
                options.field_validation,
                subresource.is_none() && managed_fields_done.is_none(),
            )?);
            warnings.extend(Self::validate(
                reg,
                &new,
                Some(&old),
                options.privileged,
                subresource == Some("status"),
            )?);
            let unchanged = if managed_fields_done.is_some() {
                // Server-side apply may change only managedFields (a new co-owner of a
                // value); that is still a write.
                let strip = |o: &Value| {
                    let mut c = o.clone();
                    meta_mut(&mut c).remove("resourceVersion");
                    c
                };
                strip(&new) == strip(&old)
            } else {
                object::same_but_bookkeeping(&new, &old)
            };
            if unchanged {
                return Ok(Outcome {
                    value: old,
                    warnings,
                    created: false,
                    stored: None,
                });
            }
            if managed_fields_done.is_none() {
                apimachinery::ssa::record_update(
                    Some(&old),
                    &mut new,
                    &options.field_manager,
                    subresource,
                    &reg.info.api_version(),
                    &kubevirt_api::meta::now(),
                    &reg.schema,
                );
            }
            if options.dry_run {
                // Nothing is written, so the object keeps the stored resourceVersion.
                meta_mut(&mut new).insert(
                    "resourceVersion".into(),
                    Value::String(kv.mod_revision.to_string()),
                );
                return Ok(Outcome {
                    value: new,
                    warnings,
                    created: false,
                    stored: None,
                });
            }
            let key = Self::key(reg.info, namespace, name);
            // The store keeps no resourceVersion; the written one is set below.
            meta_mut(&mut new).remove("resourceVersion");
            let deleted = object::is_deleting(&new) && object::finalizers(&new).is_empty();
            let result = if deleted {
                self.store.delete(&key, Some(kv.mod_revision)).await
            } else {
                self.store
                    .update(&key, stored::encode(&new)?, kv.mod_revision)
                    .await
            };
            match result {
                Ok(written) => {
                    meta_mut(&mut new).insert(
                        "resourceVersion".into(),
                        Value::String(written.mod_revision.to_string()),
                    );
                    return Ok(Outcome {
                        value: new,
                        warnings,
                        created: false,
                        // A delete's stored value is the object before this write.
                        stored: (!deleted).then_some(written),
                    });
                }
                Err(StoreError::Conflict { .. }) if requested_rv.is_none() => continue,
                Err(StoreError::Conflict { .. }) => {
                    return Err(Status::modified(&reg.info.group_resource(), name))
                }
                Err(StoreError::NotFound) => {
                    return Err(Status::not_found(&reg.info.group_resource(), name))
                }
                Err(e) => return Err(store_failure(e)),
            }
        }
    }

    /// Carries over what a write may not change and bumps generation on spec changes.
    fn prepare_update(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        old: &Value,
        mut new: Value,
        subresource: Option<&str>,
    ) -> Result<Value, Status> {
        Self::check_identity(reg, &mut new, namespace)?;
        if subresource == Some("status") {
            // Only status changes through /status; everything else stays as stored.
            let mut merged = old.clone();
            if let Some(root) = merged.as_object_mut() {
                match new.as_object_mut().and_then(|r| r.remove("status")) {
                    Some(status) => root.insert("status".into(), status),
                    None => root.remove("status"),
                };
            }
            let managed_fields = new
                .get_mut("metadata")
                .and_then(Value::as_object_mut)
                .and_then(|m| m.remove("managedFields"));
            if let Some(mf) = managed_fields {
                meta_mut(&mut merged).insert("managedFields".into(), mf);
            }
            return Ok(merged);
        }
        if reg.info.status_subresource {
            if let Some(root) = new.as_object_mut() {
                match old.get("status") {
                    Some(status) => root.insert("status".into(), status.clone()),
                    None => root.remove("status"),
                };
            }
        }
        let no_meta = Map::new();
        let old_meta = object::meta(old).unwrap_or(&no_meta);
        let new_meta = meta_mut(&mut new);
        for field in [
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "name",
            "namespace",
        ] {
            if !new_meta.contains_key(field) {
                if let Some(v) = old_meta.get(field) {
                    new_meta.insert(field.into(), v.clone());
                }
            }
        }
        if !new_meta.contains_key("managedFields") {
            if let Some(v) = old_meta.get("managedFields") {
                new_meta.insert("managedFields".into(), v.clone());
            }
        }
        // rest.BeforeUpdate: requests cannot change generation, creationTimestamp or an
        // existing deletionTimestamp; they are reset from the stored object. A different
        // uid is left for validation (immutable field); PUT checks it as a precondition.
        for field in ["creationTimestamp", "deletionTimestamp"] {
            if let Some(v) = old_meta.get(field).filter(|v| !v.is_null()) {
                new_meta.insert(field.into(), v.clone());
            }
        }
        let old_generation = old_meta
            .get("generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        let spec_changed = !object::same_spec_part(old, &new, reg.info.status_subresource);
        let generation = if spec_changed {
            old_generation + 1
        } else {
            old_generation
        };
        meta_mut(&mut new).insert("generation".into(), json!(generation));
        Ok(new)
    }

    /// DELETE of one object.
    pub async fn delete(
        &self,
        reg: &Registration,
        namespace: Option<&str>,
        name: &str,
        options: &DeleteOptions,
    ) -> Result<Outcome<DeleteResult>, Status> {
        if let Some(message) = reg.hooks.refuse_delete(name) {
            return Err(Status::forbidden(&reg.info.group_resource(), name, message));
        }
        loop {
            let kv = self.get_kv(reg, namespace, name).await?;
            let old = stored::decode(&kv)?;
            if let Some(uid) = &options.precondition_uid {
                if uid != object::uid(&old) {
                    return Err(Status::conflict(
                        &reg.info.group_resource(),
                        name,
                        &format!(
                            "the UID in the precondition ({uid}) does not match the UID in record ({}). The object might have been deleted and then recreated",
                            object::uid(&old)
                        ),
                    )
                    .with_conflict_kind(reg.info));
                }
            }
            if let Some(rv) = &options.precondition_resource_version {
                if rv != &kv.mod_revision.to_string() {
                    return Err(Status::conflict(
                        &reg.info.group_resource(),
                        name,
                        &format!(
                            "the ResourceVersion in the precondition ({rv}) does not match the ResourceVersion in record ({}). The object might have been modified",
                            kv.mod_revision
                        ),
                    )
                    .with_conflict_kind(reg.info));
                }
            }
            let mut finalizers = object::finalizers(&old);
            let gc_finalizer = match options.propagation {
                Propagation::Foreground => Some("foregroundDeletion"),
                Propagation::Orphan => Some("orphan"),
                Propagation::Background => None,
            };
            if let Some(f) = gc_finalizer {
                // The two GC finalizers exclude each other; the newer request wins.
                finalizers.retain(|x| x != "foregroundDeletion" && x != "orphan");
                finalizers.push(f.to_string());
            }
            let key = Self::key(reg.info, namespace, name);
            if finalizers.is_empty() && !reg.hooks.removed_by_controller() {
                if options.dry_run {
                    return Ok(Outcome {
                        value: DeleteResult::Deleted(old),
                        warnings: vec![],
                        created: false,
                        stored: None,
                    });
                }
                match self.store.delete(&key, Some(kv.mod_revision)).await {
                    Ok(_) => {
                        return Ok(Outcome {
                            value: DeleteResult::Deleted(old),
                            warnings: vec![],
                            created: false,
                            stored: None,
                        })
                    }
                    Err(StoreError::Conflict { .. }) => continue,
                    Err(StoreError::NotFound) => {
                        return Err(Status::not_found(&reg.info.group_resource(), name))
                    }
                    Err(e) => return Err(store_failure(e)),
                }
            }
            // Finalizers hold the object: mark it as being deleted instead.
            let mut new = old.clone();
            let changed = {
                let was_deleting = object::is_deleting(&old);
                if !was_deleting {
                    let meta = meta_mut(&mut new);
                    meta.insert(
                        "deletionTimestamp".into(),
                        Value::String(kubevirt_api::meta::now()),
                    );
                    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                    let generation = meta.get("generation").and_then(Value::as_i64).unwrap_or(1);
                    meta.insert("generation".into(), json!(generation + 1));
                    reg.hooks.on_deletion_marked(&mut new);
                }
                object::set_finalizers(&mut new, finalizers.clone());
                !was_deleting || object::finalizers(&old) != finalizers
            };
            if !changed || options.dry_run {
                return Ok(Outcome {
                    value: DeleteResult::Pending(new),
                    warnings: vec![],
                    created: false,
                    stored: None,
                });
            }
            meta_mut(&mut new).remove("resourceVersion");
            match self
                .store
                .update(&key, stored::encode(&new)?, kv.mod_revision)
                .await
            {
                Ok(written) => {
                    meta_mut(&mut new).insert(
                        "resourceVersion".into(),
                        Value::String(written.mod_revision.to_string()),
                    );
                    return Ok(Outcome {
                        value: DeleteResult::Pending(new),
                        warnings: vec![],
                        created: false,
                        stored: None,
                    });
                }
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_failure(e)),
            }
        }
    }

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
                if !filtering || request.matches(&stored::decode(kv)?) {
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

/// What a change function produced for `update_with`.
pub struct Change {
    pub object: Value,
    pub warnings: Vec<String>,
    /// Set when the change already computed managedFields (server-side apply).
    pub managed_fields_done: Option<()>,
}

impl Change {
    pub fn replace(object: Value) -> Self {
        Change {
            object,
            warnings: Vec::new(),
            managed_fields_done: None,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Propagation {
    #[default]
    Background,
    Foreground,
    Orphan,
}

#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    pub precondition_uid: Option<String>,
    pub precondition_resource_version: Option<String>,
    pub dry_run: bool,
}

/// A delete either removed the object or left it waiting for finalizers.
#[derive(Debug)]
pub enum DeleteResult {
    Deleted(Value),
    Pending(Value),
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

    pub fn matches(&self, obj: &Value) -> bool {
        if self.selects_everything() {
            return true;
        }
        let labels = object::labels(obj);
        self.label.matches(&labels)
            && self.field.matches(|field| match field {
                "metadata.name" => Some(object::name(obj).to_string()),
                "metadata.namespace" => Some(object::namespace(obj).to_string()),
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

fn obj_preview(root: &Map<String, Value>) -> String {
    let text = Value::Object(root.clone()).to_string();
    text.chars().take(200).collect()
}

trait StatusExt {
    fn with_conflict_kind(self, info: &ResourceInfo) -> Self;
}

impl StatusExt for Status {
    /// Delete preconditions name the Kind, not the resource, in their message.
    fn with_conflict_kind(mut self, info: &ResourceInfo) -> Self {
        let resource = info.group_resource().qualified();
        let kind = info.group_kind().qualified();
        self.message = self.message.replacen(&resource, &kind, 1);
        // `NewConflict(GroupResource{Group, Resource: Kind}, ...)`: details name the Kind too.
        if let Some(details) = self.details.as_mut() {
            details.kind = info.kind.to_string();
        }
        self
    }
}
