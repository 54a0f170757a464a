//! What a served kind is: its names, schema, hooks, and how upstream serves it.

use apimachinery::meta_validation::NameRule;
use apimachinery::resource::ResourceInfo;
use apimachinery::schema::Schema;
use apimachinery::status::Status;
use serde_json::Value;

/// What admission said about an object.
#[derive(Debug, Default)]
pub struct Admission {
    pub errors: Vec<apimachinery::field::FieldError>,
    pub warnings: Vec<String>,
}

/// One read an admission hook asks for: an object by name, or all of a kind (`name`
/// `None`), in the namespace of the object being admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Read {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub name: Option<String>,
}

/// Per-resource behaviour: defaulting (mutating admission), validation (validating
/// admission) and anything a kind fills in on create.
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
    /// Whether a create keeps the status it carries, for a kind with a status
    /// subresource (whose creates otherwise drop it); `privileged` as in `WriteOptions`.
    fn keeps_status_on_create(&self, _privileged: bool) -> bool {
        false
    }
    /// Whether writes of the kind hand out what must be unique across the cluster (a
    /// Service's cluster IP and node ports): such writes run one at a time, with every
    /// stored object of the kind given to `allocate`.
    fn allocates(&self) -> bool {
        false
    }
    /// Hands out what `obj` needs (after defaulting, before validation), given the
    /// stored objects of its kind (`old` among them, on an update).
    fn allocate(
        &self,
        _old: Option<&Value>,
        _obj: &mut Value,
        _stored: &[Value],
    ) -> Result<(), Status> {
        Ok(())
    }
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
    /// How long the store keeps an object after its last write (Events'
    /// `--event-ttl`); `None`: until it is deleted.
    fn ttl(&self) -> Option<std::time::Duration> {
        None
    }
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
