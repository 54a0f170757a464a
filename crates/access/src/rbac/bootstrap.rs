//! The roles and bindings a server starts with: kube-apiserver's bootstrap policy (the
//! parts that matter without kube's controllers), KubeVirt's and CDI's aggregated roles
//! as their operators install them, and the role node agents run with.
//!
//! One file on purpose: it is a table of data (each role's rules beside its binding), read
//! top to bottom against kube's and KubeVirt's policy; split, a role and its binding part.
//!
//! At every start, each one is created when missing; an existing one is reconciled
//! additively (missing rules, selectors or subjects are added) unless it carries
//! `rbac.authorization.kubernetes.io/autoupdate: "false"`, as kube-apiserver's
//! `RBACPolicy` post-start hook does.
//!
//! Over 800 lines on purpose: it is data (kube's, KubeVirt's and CDI's rule tables) with
//! one small reconcile; the tables read best in one place.

use serde_json::{json, Map, Value};

use super::{AUTOUPDATE_ANNOTATION, GROUP};

const RW: &[&str] = &[
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];
const WRITE: &[&str] = &["create", "update", "patch", "delete", "deletecollection"];
const READ: &[&str] = &["get", "list", "watch"];

/// The group of virtplane's node agents (the node-join credential's group).
pub use apimachinery::identity::NODES_GROUP;
/// The ClusterRole node agents are bound to.
pub const NODE_ROLE: &str = "system:virtplane:node";
pub const NODE_BOOTSTRAPPER_ROLE: &str = "system:node-bootstrapper";
/// Whoever holds `create` on this subresource has node client CSRs approved (kube's
/// csrapproving controller asks the same question).
pub const NODE_CLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
pub const SELF_NODE_CLIENT_ROLE: &str =
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";
const CERTIFICATES_GROUP: &str = "certificates.k8s.io";
use apimachinery::identity::BOOTSTRAPPERS_GROUP;

fn rule(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Value {
    json!({"verbs": verbs, "apiGroups": groups, "resources": resources})
}

fn urls(verbs: &[&str], urls: &[&str]) -> Value {
    json!({"verbs": verbs, "nonResourceURLs": urls})
}

/// Labels and annotation of kube-apiserver's own policy.
fn kube_meta(name: &str, extra_labels: &[(&str, &str)]) -> Value {
    let mut labels = Map::new();
    labels.insert("kubernetes.io/bootstrapping".into(), json!("rbac-defaults"));
    for (k, v) in extra_labels {
        labels.insert(k.to_string(), json!(v));
    }
    json!({"name": name, "labels": labels, "annotations": {AUTOUPDATE_ANNOTATION: "true"}})
}

fn labelled(name: &str, labels: &[(&str, &str)]) -> Value {
    let labels: Map<String, Value> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect();
    json!({"name": name, "labels": labels})
}

fn cluster_role(metadata: Value, rules: Vec<Value>) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole", "metadata": metadata, "rules": rules})
}

fn aggregated(metadata: Value, selector_label: &str) -> Value {
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRole", "metadata": metadata,
           "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {selector_label: "true"}}]},
           "rules": []})
}

fn binding(metadata: Value, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": GROUP, "name": g}))
        .collect();
    json!({"apiVersion": format!("{GROUP}/v1"), "kind": "ClusterRoleBinding", "metadata": metadata,
           "roleRef": {"apiGroup": GROUP, "kind": "ClusterRole", "name": role}, "subjects": subjects})
}

const AGG_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGG_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGG_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// kube-apiserver's bootstrap ClusterRoles that matter here (1.32's texts).
fn kube_roles() -> Vec<Value> {
    vec![
        cluster_role(
            kube_meta("cluster-admin", &[]),
            vec![rule(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
        ),
        cluster_role(
            kube_meta("system:discovery", &[]),
            vec![urls(
                &["get"],
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        cluster_role(
            kube_meta("system:basic-user", &[]),
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                rule(
                    &["create"],
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                ),
            ],
        ),
        cluster_role(
            kube_meta("system:public-info-viewer", &[]),
            vec![urls(
                &["get"],
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        // Who may scrape the server (kube's system:monitoring).
        cluster_role(
            kube_meta("system:monitoring", &[]),
            vec![urls(
                &["get"],
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        cluster_role(
            kube_meta("system:auth-delegator", &[]),
            vec![
                rule(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                ),
            ],
        ),
        // metrics-server's: whoever may view may read `metrics.k8s.io` (`kubectl top`).
        cluster_role(
            kube_meta(
                "system:aggregated-metrics-reader",
                &[(AGG_VIEW, "true"), (AGG_EDIT, "true"), (AGG_ADMIN, "true")],
            ),
            vec![rule(READ, &["metrics.k8s.io"], &["nodes", "pods"])],
        ),
        aggregated(kube_meta("admin", &[]), AGG_ADMIN),
        aggregated(kube_meta("edit", &[(AGG_ADMIN, "true")]), AGG_EDIT),
        aggregated(kube_meta("view", &[(AGG_EDIT, "true")]), AGG_VIEW),
        cluster_role(
            kube_meta("system:aggregate-to-admin", &[(AGG_ADMIN, "true")]),
            vec![
                rule(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                ),
                rule(RW, &[GROUP], &["rolebindings", "roles"]),
            ],
        ),
        cluster_role(
            kube_meta("system:aggregate-to-edit", &[(AGG_EDIT, "true")]),
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                        "secrets",
                        "services/proxy",
                    ],
                ),
                rule(&["impersonate"], &[""], &["serviceaccounts"]),
                rule(
                    WRITE,
                    &[""],
                    &[
                        "pods",
                        "pods/attach",
                        "pods/exec",
                        "pods/portforward",
                        "pods/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["pods/eviction"]),
                rule(
                    WRITE,
                    &[""],
                    &[
                        "configmaps",
                        "events",
                        "persistentvolumeclaims",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "secrets",
                        "serviceaccounts",
                        "services",
                        "services/proxy",
                    ],
                ),
                rule(&["create"], &[""], &["serviceaccounts/token"]),
                rule(
                    WRITE,
                    &["apps"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "replicasets",
                        "replicasets/scale",
                        "statefulsets",
                        "statefulsets/scale",
                    ],
                ),
                rule(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
                rule(WRITE, &["batch"], &["cronjobs", "jobs"]),
                rule(
                    WRITE,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "deployments",
                        "deployments/rollback",
                        "deployments/scale",
                        "ingresses",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicationcontrollers/scale",
                    ],
                ),
                rule(WRITE, &["policy"], &["poddisruptionbudgets"]),
                rule(
                    WRITE,
                    &["networking.k8s.io"],
                    &["ingresses", "networkpolicies"],
                ),
                rule(WRITE, &["coordination.k8s.io"], &["leases"]),
            ],
        ),
        cluster_role(
            kube_meta("system:aggregate-to-view", &[(AGG_VIEW, "true")]),
            vec![
                rule(
                    READ,
                    &[""],
                    &[
                        "configmaps",
                        "endpoints",
                        "persistentvolumeclaims",
                        "persistentvolumeclaims/status",
                        "pods",
                        "replicationcontrollers",
                        "replicationcontrollers/scale",
                        "serviceaccounts",
                        "services",
                        "services/status",
                    ],
                ),
                rule(
                    READ,
                    &[""],
                    &[
                        "bindings",
                        "events",
                        "limitranges",
                        "namespaces/status",
                        "pods/log",
                        "pods/status",
                        "replicationcontrollers/status",
                        "resourcequotas",
                        "resourcequotas/status",
                    ],
                ),
                rule(READ, &[""], &["namespaces"]),
                rule(READ, &["discovery.k8s.io"], &["endpointslices"]),
                rule(
                    READ,
                    &["apps"],
                    &[
                        "controllerrevisions",
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "statefulsets",
                        "statefulsets/scale",
                        "statefulsets/status",
                    ],
                ),
                rule(
                    READ,
                    &["autoscaling"],
                    &[
                        "horizontalpodautoscalers",
                        "horizontalpodautoscalers/status",
                    ],
                ),
                rule(
                    READ,
                    &["batch"],
                    &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
                ),
                rule(
                    READ,
                    &["extensions"],
                    &[
                        "daemonsets",
                        "daemonsets/status",
                        "deployments",
                        "deployments/scale",
                        "deployments/status",
                        "ingresses",
                        "ingresses/status",
                        "networkpolicies",
                        "replicasets",
                        "replicasets/scale",
                        "replicasets/status",
                        "replicationcontrollers/scale",
                    ],
                ),
                rule(
                    READ,
                    &["policy"],
                    &["poddisruptionbudgets", "poddisruptionbudgets/status"],
                ),
                rule(
                    READ,
                    &["networking.k8s.io"],
                    &["ingresses", "ingresses/status", "networkpolicies"],
                ),
            ],
        ),
    ]
}

const KUBEVIRT_APP: (&str, &str) = ("kubevirt.io", "");

/// KubeVirt's cluster roles (virt-operator's `rbac/cluster.go`).
fn kubevirt_roles() -> Vec<Value> {
    const SUB: &str = "subresources.kubevirt.io";
    let vmi_get = [
        "virtualmachineinstances/console",
        "virtualmachineinstances/vnc",
        "virtualmachineinstances/vnc/screenshot",
        "virtualmachineinstances/portforward",
        "virtualmachineinstances/guestosinfo",
        "virtualmachineinstances/filesystemlist",
        "virtualmachineinstances/userlist",
        "virtualmachineinstances/sev/fetchcertchain",
        "virtualmachineinstances/sev/querylaunchmeasurement",
        "virtualmachineinstances/usbredir",
        "virtualmachines/objectgraph",
        "virtualmachineinstances/objectgraph",
    ];
    let vmi_update = [
        "virtualmachineinstances/pause",
        "virtualmachineinstances/unpause",
        "virtualmachineinstances/addvolume",
        "virtualmachineinstances/removevolume",
        "virtualmachineinstances/freeze",
        "virtualmachineinstances/unfreeze",
        "virtualmachineinstances/softreboot",
        "virtualmachineinstances/reset",
        "virtualmachineinstances/sev/setupsession",
        "virtualmachineinstances/sev/injectlaunchsecret",
        "virtualmachineinstances/evacuate/cancel",
    ];
    let vm_update = [
        "virtualmachines/start",
        "virtualmachines/stop",
        "virtualmachines/restart",
        "virtualmachines/addvolume",
        "virtualmachines/removevolume",
        "virtualmachines/memorydump",
        "virtualmachines/removememorydump",
        "virtualmachines/evacuate/cancel",
    ];
    let core = [
        "virtualmachines",
        "virtualmachineinstances",
        "virtualmachineinstancepresets",
        "virtualmachineinstancereplicasets",
    ];
    let instancetypes = [
        "virtualmachineinstancetypes",
        "virtualmachineclusterinstancetypes",
        "virtualmachinepreferences",
        "virtualmachineclusterpreferences",
    ];
    let admin_verbs: &[&str] = &[
        "get",
        "delete",
        "create",
        "update",
        "patch",
        "list",
        "watch",
        "deletecollection",
    ];
    let edit_verbs: &[&str] = &[
        "get", "delete", "create", "update", "patch", "list", "watch",
    ];
    let writable = |verbs: &[&str]| -> Vec<Value> {
        vec![
            rule(verbs, &["kubevirt.io"], &core),
            rule(
                &["get", "list", "watch"],
                &["kubevirt.io"],
                &["virtualmachineinstancemigrations"],
            ),
            rule(
                verbs,
                &["snapshot.kubevirt.io"],
                &[
                    "virtualmachinesnapshots",
                    "virtualmachinesnapshotcontents",
                    "virtualmachinerestores",
                ],
            ),
            rule(
                verbs,
                &["backup.kubevirt.io"],
                &["virtualmachinebackups", "virtualmachinebackuptrackers"],
            ),
        ]
    };
    let mut admin = vec![
        rule(&["get"], &[SUB], &vmi_get),
        rule(&["update"], &[SUB], &vmi_update),
        rule(
            &["get"],
            &[SUB],
            &["virtualmachines/expand-spec", "virtualmachines/portforward"],
        ),
        rule(&["update"], &[SUB], &vm_update),
        rule(&["update"], &[SUB], &["expand-vm-spec"]),
    ];
    admin.extend(writable(admin_verbs));
    admin.extend([
        rule(admin_verbs, &["pool.kubevirt.io"], &["virtualmachinepools"]),
        rule(admin_verbs, &["plugin.kubevirt.io"], &["plugins"]),
        rule(
            admin_verbs,
            &["export.kubevirt.io"],
            &["virtualmachineexports"],
        ),
        rule(
            admin_verbs,
            &["clone.kubevirt.io"],
            &["virtualmachineclones"],
        ),
        rule(admin_verbs, &["instancetype.kubevirt.io"], &instancetypes),
        rule(&["get", "list"], &["kubevirt.io"], &["kubevirts"]),
        rule(
            &["get", "list", "watch"],
            &["migrations.kubevirt.io"],
            &["migrationpolicies"],
        ),
    ]);
    // edit: the same without vnc/screenshot and without deletecollection.
    let mut edit = vec![
        rule(
            &["get"],
            &[SUB],
            &vmi_get
                .iter()
                .copied()
                .filter(|r| *r != "virtualmachineinstances/vnc/screenshot")
                .collect::<Vec<_>>(),
        ),
        rule(&["update"], &[SUB], &vmi_update),
        rule(
            &["get"],
            &[SUB],
            &["virtualmachines/expand-spec", "virtualmachines/portforward"],
        ),
        rule(&["update"], &[SUB], &vm_update),
        rule(&["update"], &[SUB], &["expand-vm-spec"]),
    ];
    edit.extend(writable(edit_verbs));
    edit.extend([
        rule(
            edit_verbs,
            &["export.kubevirt.io"],
            &["virtualmachineexports"],
        ),
        rule(
            edit_verbs,
            &["clone.kubevirt.io"],
            &["virtualmachineclones"],
        ),
        rule(edit_verbs, &["instancetype.kubevirt.io"], &instancetypes),
        rule(edit_verbs, &["pool.kubevirt.io"], &["virtualmachinepools"]),
        rule(&["get", "list"], &["kubevirt.io"], &["kubevirts"]),
        rule(
            &["get", "list", "watch"],
            &["migrations.kubevirt.io"],
            &["migrationpolicies"],
        ),
    ]);
    let view = vec![
        rule(&["get", "list"], &["kubevirt.io"], &["kubevirts"]),
        rule(
            &["get"],
            &[SUB],
            &[
                "virtualmachines/expand-spec",
                "virtualmachineinstances/guestosinfo",
                "virtualmachineinstances/filesystemlist",
                "virtualmachineinstances/userlist",
                "virtualmachineinstances/sev/fetchcertchain",
                "virtualmachineinstances/sev/querylaunchmeasurement",
                "virtualmachines/objectgraph",
                "virtualmachineinstances/objectgraph",
            ],
        ),
        rule(&["update"], &[SUB], &["expand-vm-spec"]),
        rule(
            READ,
            &["kubevirt.io"],
            &[
                "virtualmachines",
                "virtualmachineinstances",
                "virtualmachineinstancepresets",
                "virtualmachineinstancereplicasets",
                "virtualmachineinstancemigrations",
            ],
        ),
        rule(
            READ,
            &["snapshot.kubevirt.io"],
            &[
                "virtualmachinesnapshots",
                "virtualmachinesnapshotcontents",
                "virtualmachinerestores",
            ],
        ),
        rule(
            READ,
            &["backup.kubevirt.io"],
            &["virtualmachinebackups", "virtualmachinebackuptrackers"],
        ),
        rule(READ, &["export.kubevirt.io"], &["virtualmachineexports"]),
        rule(READ, &["clone.kubevirt.io"], &["virtualmachineclones"]),
        rule(READ, &["instancetype.kubevirt.io"], &instancetypes),
        rule(READ, &["pool.kubevirt.io"], &["virtualmachinepools"]),
        rule(READ, &["migrations.kubevirt.io"], &["migrationpolicies"]),
        rule(READ, &["plugin.kubevirt.io"], &["plugins"]),
    ];
    let default = cluster_role(
        json!({"name": "kubevirt.io:default",
               "labels": {"kubevirt.io": "", "kubernetes.io/bootstrapping": "rbac-defaults"},
               "annotations": {AUTOUPDATE_ANNOTATION: "true"}}),
        vec![
            rule(&["get", "list"], &["kubevirt.io"], &["kubevirts"]),
            rule(&["get", "list"], &[SUB], &["version", "guestfs"]),
        ],
    );
    vec![
        default,
        cluster_role(
            labelled("kubevirt.io:admin", &[KUBEVIRT_APP, (AGG_ADMIN, "true")]),
            admin,
        ),
        cluster_role(
            labelled("kubevirt.io:edit", &[KUBEVIRT_APP, (AGG_EDIT, "true")]),
            edit,
        ),
        cluster_role(
            labelled("kubevirt.io:view", &[KUBEVIRT_APP, (AGG_VIEW, "true")]),
            view,
        ),
        cluster_role(
            labelled("instancetype.kubevirt.io:view", &[KUBEVIRT_APP]),
            vec![rule(
                READ,
                &["instancetype.kubevirt.io"],
                &[
                    "virtualmachineclusterinstancetypes",
                    "virtualmachineclusterpreferences",
                ],
            )],
        ),
        cluster_role(
            labelled("kubevirt.io:migrate", &[KUBEVIRT_APP]),
            vec![
                rule(&["update"], &[SUB], &["virtualmachines/migrate"]),
                rule(
                    admin_verbs,
                    &["kubevirt.io"],
                    &["virtualmachineinstancemigrations"],
                ),
            ],
        ),
    ]
}

const CDI_APP: (&str, &str) = ("cdi.kubevirt.io", "");

/// CDI's cluster roles (cdi-operator's `resources/cluster/rbac.go`).
fn cdi_roles() -> Vec<Value> {
    let admin = vec![
        rule(
            &["*"],
            &["cdi.kubevirt.io"],
            &[
                "datavolumes",
                "dataimportcrons",
                "datasources",
                "volumeimportsources",
                "volumeuploadsources",
                "volumeclonesources",
            ],
        ),
        rule(&["create"], &["cdi.kubevirt.io"], &["datavolumes/source"]),
        rule(
            &["*"],
            &["upload.cdi.kubevirt.io"],
            &["uploadtokenrequests"],
        ),
        rule(
            &["*"],
            &["forklift.cdi.kubevirt.io"],
            &["ovirtvolumepopulators", "openstackvolumepopulators"],
        ),
    ];
    let view = vec![
        rule(
            READ,
            &["cdi.kubevirt.io"],
            &[
                "cdiconfigs",
                "dataimportcrons",
                "datasources",
                "datavolumes",
                "objecttransfers",
                "storageprofiles",
                "volumeimportsources",
                "volumeuploadsources",
                "volumeclonesources",
            ],
        ),
        rule(
            READ,
            &["forklift.cdi.kubevirt.io"],
            &["ovirtvolumepopulators", "openstackvolumepopulators"],
        ),
    ];
    vec![
        cluster_role(
            labelled("cdi.kubevirt.io:admin", &[CDI_APP, (AGG_ADMIN, "true")]),
            admin.clone(),
        ),
        cluster_role(
            labelled("cdi.kubevirt.io:edit", &[CDI_APP, (AGG_EDIT, "true")]),
            admin,
        ),
        cluster_role(
            labelled("cdi.kubevirt.io:view", &[CDI_APP, (AGG_VIEW, "true")]),
            view,
        ),
        cluster_role(
            labelled("cdi.kubevirt.io:clone-sourcer", &[CDI_APP]),
            vec![rule(
                &["create"],
                &["cdi.kubevirt.io"],
                &["datavolumes/source"],
            )],
        ),
        cluster_role(
            labelled("cdi.kubevirt.io:config-reader", &[CDI_APP]),
            vec![rule(
                READ,
                &["cdi.kubevirt.io"],
                &["cdiconfigs", "storageprofiles"],
            )],
        ),
    ]
}

/// What virtplane's node agents do with the API: register and heart-beat their Node,
/// run the VMIs placed on them and read what those use (kube's `system:node` and
/// KubeVirt's virt-handler role, for this server's kinds). `authz::node_authorizer` narrows it to
/// the node's own objects, as kube's Node authorizer and NodeRestriction do.
fn node_role() -> Value {
    cluster_role(
        kube_meta(NODE_ROLE, &[]),
        vec![
            rule(
                &["create", "get", "list", "watch", "update", "patch"],
                &[""],
                &["nodes"],
            ),
            rule(&["update", "patch"], &[""], &["nodes/status"]),
            rule(
                &["get"],
                &[""],
                &["secrets", "configmaps", "persistentvolumeclaims"],
            ),
            rule(
                &["get", "list", "watch", "update", "patch"],
                &["kubevirt.io"],
                &["virtualmachineinstances", "virtualmachineinstances/status"],
            ),
            // Renewing its own certificate.
            rule(
                &["create", "get", "list", "watch"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests"],
            ),
            // Its service proxy and DNS (kube's system:node-proxier), and the Pods it
            // lists as kube's system:node does.
            rule(&["get", "list", "watch"], &[""], &["services", "pods"]),
            rule(
                &["get", "list", "watch"],
                &["discovery.k8s.io"],
                &["endpointslices"],
            ),
            // The secondary networks its VMIs name (Multus reads them as the node).
            rule(
                &["get", "list", "watch"],
                &["k8s.cni.cncf.io"],
                &["network-attachment-definitions"],
            ),
            // The policies it enforces for its Pods, and the namespaces they select by.
            rule(
                &["get", "list", "watch"],
                &["networking.k8s.io"],
                &["networkpolicies"],
            ),
            rule(&["get", "list", "watch"], &[""], &["namespaces"]),
            // What it reports about its VMIs (kube's system:node writes events too).
            rule(
                &["create", "patch", "update"],
                &["", "events.k8s.io"],
                &["events"],
            ),
        ],
    )
}

/// The join credential's roles (kube's TLS bootstrap, as kubeadm binds them): ask for a
/// node client certificate, and have such requests approved.
fn bootstrap_roles() -> Vec<Value> {
    vec![
        cluster_role(
            kube_meta(NODE_BOOTSTRAPPER_ROLE, &[]),
            vec![rule(
                &["create", "get", "list", "watch"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests"],
            )],
        ),
        cluster_role(
            kube_meta(NODE_CLIENT_ROLE, &[]),
            vec![rule(
                &["create"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/nodeclient"],
            )],
        ),
        cluster_role(
            kube_meta(SELF_NODE_CLIENT_ROLE, &[]),
            vec![rule(
                &["create"],
                &[CERTIFICATES_GROUP],
                &["certificatesigningrequests/selfnodeclient"],
            )],
        ),
    ]
}

/// Every bootstrap ClusterRole.
pub fn cluster_roles() -> Vec<Value> {
    let mut all = kube_roles();
    all.extend(kubevirt_roles());
    all.extend(cdi_roles());
    all.push(node_role());
    all.extend(bootstrap_roles());
    all
}

/// Every bootstrap ClusterRoleBinding.
pub fn cluster_role_bindings() -> Vec<Value> {
    let authenticated = crate::authn::AUTHENTICATED_GROUP;
    vec![
        binding(
            kube_meta("cluster-admin", &[]),
            "cluster-admin",
            &[crate::authn::MASTERS_GROUP],
        ),
        binding(
            kube_meta("system:discovery", &[]),
            "system:discovery",
            &[authenticated],
        ),
        binding(
            kube_meta("system:basic-user", &[]),
            "system:basic-user",
            &[authenticated],
        ),
        binding(
            kube_meta("system:public-info-viewer", &[]),
            "system:public-info-viewer",
            &[authenticated, crate::authn::UNAUTHENTICATED_GROUP],
        ),
        binding(
            kube_meta("system:monitoring", &[]),
            "system:monitoring",
            &["system:monitoring"],
        ),
        binding(
            json!({"name": "kubevirt.io:default", "labels": {"kubevirt.io": ""},
                   "annotations": {AUTOUPDATE_ANNOTATION: "true"}}),
            "kubevirt.io:default",
            &[authenticated],
        ),
        binding(
            json!({"name": "instancetype.kubevirt.io:view", "labels": {"kubevirt.io": ""},
                   "annotations": {AUTOUPDATE_ANNOTATION: "true"}}),
            "instancetype.kubevirt.io:view",
            &[authenticated],
        ),
        binding(
            labelled("cdi.kubevirt.io:config-reader", &[CDI_APP]),
            "cdi.kubevirt.io:config-reader",
            &[authenticated, "system:serviceaccount"],
        ),
        binding(kube_meta(NODE_ROLE, &[]), NODE_ROLE, &[NODES_GROUP]),
        binding(
            kube_meta("virtplane:node-bootstrap", &[]),
            NODE_BOOTSTRAPPER_ROLE,
            &[BOOTSTRAPPERS_GROUP],
        ),
        binding(
            kube_meta("virtplane:node-autoapprove-bootstrap", &[]),
            NODE_CLIENT_ROLE,
            &[BOOTSTRAPPERS_GROUP],
        ),
        binding(
            kube_meta("virtplane:node-autoapprove-certificate-rotation", &[]),
            SELF_NODE_CLIENT_ROLE,
            &[NODES_GROUP],
        ),
    ]
}

fn autoupdate(obj: &Value) -> bool {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(AUTOUPDATE_ANNOTATION))
        .and_then(Value::as_str)
        != Some("false")
}

/// `existing[field]` with every item of `wanted[field]` it lacks appended; `None` when
/// nothing is missing.
fn union_list(existing: &Value, wanted: &Value, field: &str) -> Option<Vec<Value>> {
    let have: Vec<Value> = existing
        .get(field)
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let missing: Vec<Value> = wanted
        .get(field)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|w| !have.contains(w))
        .cloned()
        .collect();
    if missing.is_empty() {
        return None;
    }
    let mut all = have;
    all.extend(missing);
    Some(all)
}

/// What reconciling `existing` towards `wanted` changes, or `None`.
pub fn reconciled(existing: &Value, wanted: &Value) -> Option<Value> {
    if !autoupdate(existing) {
        return None;
    }
    let mut out = existing.clone();
    let mut changed = false;
    // Labels and annotations the bootstrap object carries.
    for part in ["labels", "annotations"] {
        if let Some(want) = wanted
            .pointer(&format!("/metadata/{part}"))
            .and_then(Value::as_object)
        {
            let map = &mut out["metadata"][part];
            if map.is_null() {
                *map = json!({});
            }
            if let Some(map) = map.as_object_mut() {
                for (k, v) in want {
                    if map.get(k) != Some(v) {
                        map.insert(k.clone(), v.clone());
                        changed = true;
                    }
                }
            }
        }
    }
    let aggregated = wanted.get("aggregationRule").is_some();
    if aggregated {
        let have = existing.pointer("/aggregationRule/clusterRoleSelectors");
        let want = wanted.pointer("/aggregationRule/clusterRoleSelectors");
        if let (Some(have), Some(Value::Array(want))) = (have.cloned(), want) {
            let mut selectors = have.as_array().cloned().unwrap_or_default();
            for w in want {
                if !selectors.contains(w) {
                    selectors.push(w.clone());
                    changed = true;
                }
            }
            out["aggregationRule"]["clusterRoleSelectors"] = Value::Array(selectors);
        } else if have.is_none() {
            out["aggregationRule"] = wanted["aggregationRule"].clone();
            changed = true;
        }
    } else if let Some(rules) = union_list(existing, wanted, "rules") {
        out["rules"] = Value::Array(rules);
        changed = true;
    }
    if let Some(subjects) = union_list(existing, wanted, "subjects") {
        out["subjects"] = Value::Array(subjects);
        changed = true;
    }
    changed.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconcile_adds_what_is_missing_only() {
        let wanted = cluster_role(
            kube_meta("r", &[]),
            vec![rule(&["get"], &[""], &["a"]), rule(&["get"], &[""], &["b"])],
        );
        let mut existing = wanted.clone();
        assert!(reconciled(&existing, &wanted).is_none());
        existing["rules"] = json!([
            rule(&["get"], &[""], &["b"]),
            rule(&["list"], &[""], &["c"])
        ]);
        let out = reconciled(&existing, &wanted).unwrap();
        assert_eq!(out["rules"].as_array().unwrap().len(), 3);
        existing["metadata"]["annotations"][AUTOUPDATE_ANNOTATION] = json!("false");
        assert!(reconciled(&existing, &wanted).is_none());
        // An aggregated role keeps the rules its controller wrote.
        let agg = aggregated(kube_meta("edit", &[]), AGG_EDIT);
        let mut stored = agg.clone();
        stored["rules"] = json!([rule(&["get"], &[""], &["x"])]);
        assert!(reconciled(&stored, &agg).is_none());
    }

    #[test]
    fn names_are_unique_and_roles_exist() {
        let roles = cluster_roles();
        let names: Vec<&str> = roles
            .iter()
            .map(|r| crate::rbac::metadata_str(r, "name"))
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len());
        for b in cluster_role_bindings() {
            let role = b["roleRef"]["name"].as_str().unwrap();
            assert!(names.contains(&role), "{role}");
        }
    }
}
