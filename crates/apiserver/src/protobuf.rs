//! Kubernetes protobuf bodies (`k8s\0` + runtime.Unknown{2: raw object}): what kubectl's
//! typed clients send for built-in kinds (`create namespace`, `create configmap`,
//! `create secret`, `auth can-i`). Read only, into the JSON the rest of the server takes,
//! and only the fields those clients set.

use base64::Engine;
use serde_json::{json, Map, Value};

/// One field of a message: a varint or a length-delimited payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Field<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

fn varint(data: &[u8]) -> Option<(u64, &[u8])> {
    let mut value = 0u64;
    for (i, byte) in data.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((value, &data[i + 1..]));
        }
    }
    None
}

/// The (number, value) fields of a message; `None` when it is not protobuf we read.
pub fn fields(mut data: &[u8]) -> Option<Vec<(u64, Field<'_>)>> {
    let mut out = Vec::new();
    while !data.is_empty() {
        let (tag, rest) = varint(data)?;
        data = rest;
        match tag & 7 {
            0 => {
                let (value, rest) = varint(data)?;
                out.push((tag >> 3, Field::Varint(value)));
                data = rest;
            }
            2 => {
                let (len, rest) = varint(data)?;
                let len = usize::try_from(len).ok()?;
                if rest.len() < len {
                    return None;
                }
                out.push((tag >> 3, Field::Bytes(&rest[..len])));
                data = &rest[len..];
            }
            _ => return None,
        }
    }
    Some(out)
}

/// The length-delimited fields of a message, by number.
pub fn byte_fields(data: &[u8]) -> Option<Vec<(u64, &[u8])>> {
    Some(
        fields(data)?
            .into_iter()
            .filter_map(|(n, f)| match f {
                Field::Bytes(b) => Some((n, b)),
                Field::Varint(_) => None,
            })
            .collect(),
    )
}

/// The raw object inside `k8s\0` + runtime.Unknown.
pub fn unwrap_unknown(body: &[u8]) -> Option<&[u8]> {
    let unknown = body.strip_prefix(b"k8s\0")?;
    byte_fields(unknown)?
        .into_iter()
        .find(|(n, _)| *n == 2)
        .map(|(_, raw)| raw)
}

pub fn text(bytes: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(bytes).into_owned())
}

/// A `map<string, V>` entry: {1: key, 2: value}, the value as `value` reads it.
fn map_entry(entry: &[u8], value: impl Fn(&[u8]) -> Value) -> Option<(String, Value)> {
    let parts = byte_fields(entry)?;
    let part = |n: u64| {
        parts
            .iter()
            .find(|(number, _)| *number == n)
            .map(|(_, b)| *b)
            .unwrap_or_default()
    };
    Some((
        String::from_utf8_lossy(part(1)).into_owned(),
        value(part(2)),
    ))
}

fn base64_value(bytes: &[u8]) -> Value {
    Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
}

/// ObjectMeta{1 name, 2 generateName, 3 namespace, 11 labels, 12 annotations, 14 finalizers}.
fn object_meta(data: &[u8]) -> Option<Value> {
    let mut meta = Map::new();
    for (number, bytes) in byte_fields(data)? {
        match number {
            1 => _ = meta.insert("name".into(), text(bytes)),
            2 => _ = meta.insert("generateName".into(), text(bytes)),
            3 => _ = meta.insert("namespace".into(), text(bytes)),
            11 | 12 => {
                let key = if number == 11 {
                    "labels"
                } else {
                    "annotations"
                };
                let (k, v) = map_entry(bytes, text)?;
                if let Some(map) = meta.entry(key).or_insert_with(|| json!({})).as_object_mut() {
                    map.insert(k, v);
                }
            }
            14 => {
                if let Some(list) = meta
                    .entry("finalizers")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    list.push(text(bytes));
                }
            }
            _ => {}
        }
    }
    Some(Value::Object(meta))
}

/// How the fields of one kind map to JSON: (number, JSON name, how to read it).
enum Shape {
    Text,
    Bool,
    StringMap,
    BytesMap,
}

fn kind_fields(kind: &str) -> Option<&'static [(u64, &'static str, Shape)]> {
    Some(match kind {
        // Spec and status are server-defaulted.
        "Namespace" => &[],
        "ConfigMap" => &[
            (2, "data", Shape::StringMap),
            (3, "binaryData", Shape::BytesMap),
            (4, "immutable", Shape::Bool),
        ],
        "Secret" => &[
            (2, "data", Shape::BytesMap),
            (3, "type", Shape::Text),
            (4, "stringData", Shape::StringMap),
            (5, "immutable", Shape::Bool),
        ],
        _ => return None,
    })
}

/// Whether bodies of `kind` are read from protobuf.
pub fn reads(kind: &str) -> bool {
    kind_fields(kind).is_some() || rbac_kind(kind) || kind == "Service"
}

/// A varint field as a JSON number.
fn number(field: Field<'_>) -> Option<Value> {
    match field {
        Field::Varint(v) => Some(json!(v as i64 as i32)),
        Field::Bytes(_) => None,
    }
}

/// IntOrString{1 type (0 int, 1 string), 2 intVal, 3 strVal}.
fn int_or_string(bytes: &[u8]) -> Option<Value> {
    let (mut is_string, mut int, mut string) = (false, json!(0), json!(""));
    for (n, field) in fields(bytes)? {
        match (n, field) {
            (1, Field::Varint(t)) => is_string = t == 1,
            (2, Field::Varint(v)) => int = json!(v as i64 as i32),
            (3, Field::Bytes(b)) => string = text(b),
            _ => {}
        }
    }
    Some(if is_string { string } else { int })
}

/// ServicePort{1 name, 2 protocol, 3 port, 4 targetPort, 5 nodePort, 6 appProtocol}.
fn service_port(bytes: &[u8]) -> Option<Value> {
    let mut port = Map::new();
    for (n, field) in fields(bytes)? {
        match (n, field) {
            (1, Field::Bytes(b)) => _ = port.insert("name".into(), text(b)),
            (2, Field::Bytes(b)) => _ = port.insert("protocol".into(), text(b)),
            (3, f) => _ = port.insert("port".into(), number(f)?),
            (4, Field::Bytes(b)) => _ = port.insert("targetPort".into(), int_or_string(b)?),
            (5, f) => _ = port.insert("nodePort".into(), number(f)?),
            (6, Field::Bytes(b)) => _ = port.insert("appProtocol".into(), text(b)),
            _ => {}
        }
    }
    port.retain(|k, v| v != "" && !(k == "nodePort" && v == 0));
    Some(Value::Object(port))
}

/// What `kubectl create service` sends: Service{1 metadata, 2 spec{1 ports, 2 selector,
/// 3 clusterIP, 4 type, 5 externalIPs, 7 sessionAffinity, 10 externalName,
/// 11 externalTrafficPolicy, 13 publishNotReadyAddresses, 18 clusterIPs}}.
fn decode_service(body: &[u8]) -> Option<Value> {
    let raw = unwrap_unknown(body)?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!("Service"));
    for (number, part) in byte_fields(raw)? {
        match number {
            1 => _ = object.insert("metadata".into(), object_meta(part)?),
            2 => {
                let mut spec = Map::new();
                for (n, field) in fields(part)? {
                    let push = |spec: &mut Map<String, Value>, key: &str, value: Value| {
                        if let Some(list) =
                            spec.entry(key).or_insert_with(|| json!([])).as_array_mut()
                        {
                            list.push(value);
                        }
                    };
                    match (n, field) {
                        (1, Field::Bytes(b)) => push(&mut spec, "ports", service_port(b)?),
                        (2, Field::Bytes(b)) => {
                            let (k, v) = map_entry(b, text)?;
                            if let Some(map) = spec
                                .entry("selector")
                                .or_insert_with(|| json!({}))
                                .as_object_mut()
                            {
                                map.insert(k, v);
                            }
                        }
                        (3, Field::Bytes(b)) => _ = spec.insert("clusterIP".into(), text(b)),
                        (4, Field::Bytes(b)) => _ = spec.insert("type".into(), text(b)),
                        (5, Field::Bytes(b)) => push(&mut spec, "externalIPs", text(b)),
                        (7, Field::Bytes(b)) => _ = spec.insert("sessionAffinity".into(), text(b)),
                        (10, Field::Bytes(b)) => _ = spec.insert("externalName".into(), text(b)),
                        (11, Field::Bytes(b)) => {
                            _ = spec.insert("externalTrafficPolicy".into(), text(b))
                        }
                        (13, Field::Varint(v)) => {
                            _ = spec.insert("publishNotReadyAddresses".into(), json!(v != 0))
                        }
                        (18, Field::Bytes(b)) => push(&mut spec, "clusterIPs", text(b)),
                        _ => {}
                    }
                }
                // Go's encoder writes the empty strings of fields never set.
                spec.retain(|_, v| v != "");
                object.insert("spec".into(), Value::Object(spec));
            }
            _ => {}
        }
    }
    Some(Value::Object(object))
}

fn rbac_kind(kind: &str) -> bool {
    matches!(
        kind,
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding"
    )
}

fn strings_of(bytes: &[u8]) -> Option<Vec<(u64, Value)>> {
    Some(
        byte_fields(bytes)?
            .into_iter()
            .map(|(n, b)| (n, text(b)))
            .collect(),
    )
}

/// A message whose fields are strings (repeated ones become lists), by 1-based names.
fn string_message(bytes: &[u8], names: &[(&str, bool)]) -> Option<Value> {
    let mut out = Map::new();
    for (number, value) in strings_of(bytes)? {
        let Some((name, repeated)) = number.checked_sub(1).and_then(|i| names.get(i as usize))
        else {
            continue;
        };
        if *repeated {
            if let Some(list) = out.entry(*name).or_insert_with(|| json!([])).as_array_mut() {
                list.push(value);
            }
        } else {
            out.insert((*name).to_string(), value);
        }
    }
    Some(Value::Object(out))
}

/// LabelSelector{1: matchLabels map, 2: matchExpressions{1 key, 2 operator, 3 values}}.
fn label_selector(bytes: &[u8]) -> Option<Value> {
    let mut out = Map::new();
    for (number, part) in byte_fields(bytes)? {
        match number {
            1 => {
                let (k, v) = map_entry(part, text)?;
                if let Some(map) = out
                    .entry("matchLabels")
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    map.insert(k, v);
                }
            }
            2 => {
                let expression = string_message(
                    part,
                    &[("key", false), ("operator", false), ("values", true)],
                )?;
                if let Some(list) = out
                    .entry("matchExpressions")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    list.push(expression);
                }
            }
            _ => {}
        }
    }
    Some(Value::Object(out))
}

/// The RBAC kinds kubectl's typed client sends (`create role`, `create clusterrole`,
/// `create rolebinding`, `create clusterrolebinding`): Role/ClusterRole {1 metadata,
/// 2 rules{1 verbs, 2 apiGroups, 3 resources, 4 resourceNames, 5 nonResourceURLs},
/// 3 aggregationRule{1 clusterRoleSelectors}}, bindings {1 metadata, 2 subjects{1 kind,
/// 2 apiGroup, 3 name, 4 namespace}, 3 roleRef{1 apiGroup, 2 kind, 3 name}}.
fn decode_rbac(kind: &str, body: &[u8]) -> Option<Value> {
    let raw = unwrap_unknown(body)?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("rbac.authorization.k8s.io/v1"));
    object.insert("kind".into(), json!(kind));
    let binding = kind.ends_with("Binding");
    for (number, part) in byte_fields(raw)? {
        match (number, binding) {
            (1, _) => _ = object.insert("metadata".into(), object_meta(part)?),
            (2, false) => {
                let rule = string_message(
                    part,
                    &[
                        ("verbs", true),
                        ("apiGroups", true),
                        ("resources", true),
                        ("resourceNames", true),
                        ("nonResourceURLs", true),
                    ],
                )?;
                if let Some(list) = object
                    .entry("rules")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    list.push(rule);
                }
            }
            (3, false) => {
                let mut selectors = Vec::new();
                for (n, selector) in byte_fields(part)? {
                    if n == 1 {
                        selectors.push(label_selector(selector)?);
                    }
                }
                object.insert(
                    "aggregationRule".into(),
                    json!({"clusterRoleSelectors": selectors}),
                );
            }
            (2, true) => {
                let subject = string_message(
                    part,
                    &[
                        ("kind", false),
                        ("apiGroup", false),
                        ("name", false),
                        ("namespace", false),
                    ],
                )?;
                if let Some(list) = object
                    .entry("subjects")
                    .or_insert_with(|| json!([]))
                    .as_array_mut()
                {
                    list.push(subject);
                }
            }
            (3, true) => {
                let role_ref = string_message(
                    part,
                    &[("apiGroup", false), ("kind", false), ("name", false)],
                )?;
                object.insert("roleRef".into(), role_ref);
            }
            _ => {}
        }
    }
    Some(Value::Object(object))
}

/// A built-in object of `kind` sent as protobuf, as JSON; `None` for kinds not read
/// here or a body that does not parse.
pub fn decode_object(kind: &str, body: &[u8]) -> Option<Value> {
    if rbac_kind(kind) {
        return decode_rbac(kind, body);
    }
    if kind == "Service" {
        return decode_service(body);
    }
    let shapes = kind_fields(kind)?;
    let raw = unwrap_unknown(body)?;
    let mut object = Map::new();
    object.insert("apiVersion".into(), json!("v1"));
    object.insert("kind".into(), json!(kind));
    for (number, field) in fields(raw)? {
        if number == 1 {
            if let Field::Bytes(meta) = field {
                object.insert("metadata".into(), object_meta(meta)?);
            }
            continue;
        }
        let Some((_, name, shape)) = shapes.iter().find(|(n, _, _)| *n == number) else {
            continue;
        };
        match (shape, field) {
            (Shape::Text, Field::Bytes(b)) => _ = object.insert((*name).into(), text(b)),
            (Shape::Bool, Field::Varint(v)) => _ = object.insert((*name).into(), json!(v != 0)),
            (Shape::StringMap | Shape::BytesMap, Field::Bytes(entry)) => {
                let read = if matches!(shape, Shape::StringMap) {
                    text
                } else {
                    base64_value
                };
                let (k, v) = map_entry(entry, read)?;
                if let Some(map) = object
                    .entry(*name)
                    .or_insert_with(|| json!({}))
                    .as_object_mut()
                {
                    map.insert(k, v);
                }
            }
            _ => return None,
        }
    }
    Some(Value::Object(object))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(number: u64, wire: u64) -> u8 {
        (number << 3 | wire) as u8
    }

    fn bytes_field(number: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![tag(number, 2), payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    fn entry(key: &str, value: &[u8]) -> Vec<u8> {
        let mut out = bytes_field(1, key.as_bytes());
        out.extend(bytes_field(2, value));
        out
    }

    fn wrapped(raw: &[u8]) -> Vec<u8> {
        let mut body = b"k8s\0".to_vec();
        body.extend(bytes_field(2, raw));
        body
    }

    #[test]
    fn secret_as_kubectl_create_secret_sends_it() {
        let mut meta = bytes_field(1, b"userdata");
        meta.extend(bytes_field(3, b"default"));
        let mut raw = bytes_field(1, &meta);
        raw.extend(bytes_field(2, &entry("userdata", b"#cloud-config")));
        raw.extend(bytes_field(3, b"Opaque"));
        raw.extend([tag(5, 0), 1]);
        assert_eq!(
            decode_object("Secret", &wrapped(&raw)).unwrap(),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "userdata", "namespace": "default"},
                   "data": {"userdata": "I2Nsb3VkLWNvbmZpZw=="}, "type": "Opaque", "immutable": true})
        );
    }

    #[test]
    fn config_map_and_namespace() {
        let mut raw = bytes_field(1, &bytes_field(1, b"answers"));
        raw.extend(bytes_field(2, &entry("unattend.xml", b"<u/>")));
        raw.extend(bytes_field(2, &entry("empty", b"")));
        raw.extend(bytes_field(3, &entry("blob", &[0, 1])));
        assert_eq!(
            decode_object("ConfigMap", &wrapped(&raw)).unwrap(),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "answers"},
                   "data": {"unattend.xml": "<u/>", "empty": ""}, "binaryData": {"blob": "AAE="}})
        );
        let ns = bytes_field(1, &bytes_field(11, &entry("team", b"a")));
        assert_eq!(
            decode_object("Namespace", &wrapped(&ns)).unwrap(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"labels": {"team": "a"}}})
        );
        assert!(decode_object("Pod", &wrapped(&ns)).is_none());
        // kubectl create rolebinding alice-edit --clusterrole=edit --user=alice -n team-a
        let mut meta = bytes_field(1, b"alice-edit");
        meta.extend(bytes_field(3, b"team-a"));
        let mut raw = bytes_field(1, &meta);
        let mut subject = bytes_field(1, b"User");
        subject.extend(bytes_field(2, b"rbac.authorization.k8s.io"));
        subject.extend(bytes_field(3, b"alice"));
        raw.extend(bytes_field(2, &subject));
        let mut role_ref = bytes_field(1, b"rbac.authorization.k8s.io");
        role_ref.extend(bytes_field(2, b"ClusterRole"));
        role_ref.extend(bytes_field(3, b"edit"));
        raw.extend(bytes_field(3, &role_ref));
        assert_eq!(
            decode_object("RoleBinding", &wrapped(&raw)).unwrap(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                   "metadata": {"name": "alice-edit", "namespace": "team-a"},
                   "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"}})
        );
        let mut rule = bytes_field(1, b"get");
        rule.extend(bytes_field(1, b"list"));
        rule.extend(bytes_field(2, b""));
        rule.extend(bytes_field(3, b"configmaps"));
        let mut raw = bytes_field(1, &bytes_field(1, b"reader"));
        raw.extend(bytes_field(2, &rule));
        let selector = bytes_field(1, &entry("team", b"a"));
        raw.extend(bytes_field(3, &bytes_field(1, &selector)));
        assert_eq!(
            decode_object("ClusterRole", &wrapped(&raw)).unwrap(),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                   "metadata": {"name": "reader"},
                   "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"]}],
                   "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"team": "a"}}]}})
        );
        assert!(decode_object("Secret", b"not protobuf").is_none());
    }
}
