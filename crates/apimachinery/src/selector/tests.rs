use super::*;
use proptest::prelude::*;
use serde_json::json;

fn labels(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn matches(selector: &str, l: Value) -> bool {
    LabelSelector::parse(selector).unwrap().matches(&labels(l))
}

#[test]
fn parses_and_prints_upstream_good_strings() {
    for s in [
        "",
        "x=a",
        "y=b,z=c",
        "k=,z=",
        "x!=a,y=b",
        "x=",
        "x= ",
        "x=,z= ",
        "x= ,z= ",
        "!x",
        "x>1",
        "x>1,z<5",
        "x in (a)",
        "x notin (a)",
        "a in (b,c),d",
        "x==a",
    ] {
        let parsed = LabelSelector::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        let reparsed = LabelSelector::parse(&parsed.to_string()).unwrap();
        assert_eq!(parsed, reparsed, "{s}");
    }
    assert_eq!(
        LabelSelector::parse("x= ,z= ").unwrap().to_string(),
        "x=,z="
    );
    assert_eq!(
        LabelSelector::parse("z=a,x=b").unwrap().to_string(),
        "x=b,z=a"
    );
    assert_eq!(
        LabelSelector::parse("x in (c,a,b,a)").unwrap().to_string(),
        "x in (a,b,c)"
    );
    assert_eq!(
        LabelSelector::parse("x notin ()").unwrap().to_string(),
        "x notin ()"
    );
    assert_eq!(
        LabelSelector::parse("x in (,a)").unwrap().to_string(),
        "x in (,a)"
    );
    assert_eq!(
        LabelSelector::parse("x in (a,,b)").unwrap().requirements()[0].values(),
        ["", "a", "b"]
    );
    assert_eq!(
        LabelSelector::parse("x in (a,)").unwrap().requirements()[0].values(),
        ["", "a"]
    );
    assert_eq!(
        LabelSelector::parse("x in (,)").unwrap().requirements()[0].values(),
        [""]
    );
    assert_eq!(
        LabelSelector::parse("  x  in(a) , !y ")
            .unwrap()
            .to_string(),
        "x in (a),!y"
    );
    assert_eq!(
        LabelSelector::parse("notin=in").unwrap().to_string(),
        "notin=in"
    );
    assert_eq!(
        LabelSelector::parse("x in ( a , b )").unwrap().to_string(),
        "x in (a,b)"
    );
    assert_eq!(
        LabelSelector::parse("x = a,\ty\n!=\rb")
            .unwrap()
            .to_string(),
        "x=a,y!=b"
    );
    assert_eq!(
        LabelSelector::parse("x in (in,notin)").unwrap().to_string(),
        "x in (in,notin)"
    );
    assert_eq!(
        LabelSelector::parse("kubevirt.io/vm==vm1")
            .unwrap()
            .to_string(),
        "kubevirt.io/vm==vm1"
    );
    assert!(LabelSelector::parse("").unwrap().is_empty());
    assert!(!LabelSelector::parse("a").unwrap().is_empty());
}

#[test]
fn error_messages() {
    let cases = [
        ("x=a||y=b", "unable to parse requirement: values[0][x]: Invalid value: \"a||y\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
        ("x==a==b", "found '==', expected: ',' or 'end of string'"),
        ("!x=a", "found '=', expected: ',' or 'end of string'"),
        ("x<a", "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer"),
        ("x,,y", "found ',', expected: identifier after ','"),
        ("x,", "found '', expected: identifier after ','"),
        (",x", "found ',', expected: !, identifier, or 'end of string'"),
        ("!", "unable to parse requirement: found '', expected: identifier"),
        ("!=a", "found '!=', expected: !, identifier, or 'end of string'"),
        ("! =a", "unable to parse requirement: found '=', expected: identifier"),
        ("!!a", "unable to parse requirement: found '!', expected: identifier"),
        ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt"),
        ("x in a", "unable to parse requirement: found 'a' expected: '('"),
        ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'"),
        ("x in (a,=)", "unable to parse requirement: found '=', expected: ',', or identifier"),
        ("x in (=)", "unable to parse requirement: found '=', expected: ',', ')' or identifier"),
        ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'"),
        ("x=(a)", "unable to parse requirement: found '(', expected: identifier"),
        ("a b=c", "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"),
        ("x>-1", "unable to parse requirement: values[0][x]: Invalid value: \"-1\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"),
        ("Bad_Key_=v", "unable to parse requirement: <nil>: Invalid value: \"Bad_Key_\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
        ("/a", "unable to parse requirement: <nil>: Invalid value: \"/a\": prefix part must be non-empty"),
    ];
    for (input, want) in cases {
        assert_eq!(LabelSelector::parse(input).unwrap_err(), want, "{input}");
    }
    let two = LabelSelector::parse("x>a_").unwrap_err();
    assert!(two.starts_with("unable to parse requirement: [values[0]: Invalid value: \"a_\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][x]: Invalid value: \"a_\": a valid label"), "{two}");
    let long = format!("x={}", "a".repeat(64));
    assert_eq!(
        LabelSelector::parse(&long).unwrap_err(),
        format!(
            "unable to parse requirement: values[0][x]: Invalid value: \"{}\": must be no more than 63 characters",
            "a".repeat(64)
        )
    );
}

#[test]
fn nul_bytes_behave_like_upstream() {
    // A NUL where a token starts ends the input; inside an identifier it splits it.
    assert_eq!(LabelSelector::parse("a \0b=c").unwrap().to_string(), "a");
    assert_eq!(
        LabelSelector::parse("a\0b").unwrap_err(),
        "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"
    );
    assert_eq!(LabelSelector::parse("a=\0").unwrap().to_string(), "a=");
}

#[test]
fn matching() {
    assert!(matches("", json!({"x": "y"})));
    assert!(matches("x=y", json!({"x": "y"})));
    assert!(matches("x==y,z=w", json!({"x": "y", "z": "w"})));
    assert!(matches("x!=y,z!=w", json!({"x": "z", "z": "a"})));
    assert!(matches("x!=y", json!({})));
    assert!(matches("notin=in", json!({"notin": "in"})));
    assert!(matches("x", json!({"x": "z"})));
    assert!(matches("!x", json!({"y": "z"})));
    assert!(matches("x>1", json!({"x": "2"})));
    assert!(matches("x<1", json!({"x": "0"})));
    assert!(matches("x in (a,b)", json!({"x": "b"})));
    assert!(matches("x notin (a,b)", json!({"x": "c"})));
    assert!(matches("x notin (a,b)", json!({})));
    assert!(matches("x=", json!({"x": ""})));
    assert!(!matches("x=", json!({})));
    assert!(!matches("x=z", json!({})));
    assert!(!matches("x=y", json!({"x": "z"})));
    assert!(!matches("x=y,z=w", json!({"x": "w", "z": "w"})));
    assert!(!matches("x!=y,z!=w", json!({"x": "z", "z": "w"})));
    assert!(!matches("x", json!({"y": "z"})));
    assert!(!matches("!x", json!({"x": "z"})));
    assert!(!matches("x>1", json!({"x": "0"})));
    assert!(!matches("x>1", json!({"x": "a"})));
    assert!(!matches("x>1", json!({})));
    assert!(!matches("x<1", json!({"x": "2"})));
    assert!(!matches("x in (a,b)", json!({})));
    assert!(!matches("x notin (a,b)", json!({"x": "a"})));
    // Non-string label values count as absent.
    assert!(!matches("x", json!({"x": 1})));
    assert!(!LabelSelector::nothing().matches(&labels(json!({}))));
    assert!(!LabelSelector::nothing().is_empty());
    assert!(LabelSelector::everything().matches(&labels(json!({}))));
}

#[test]
fn structured_selector() {
    let sel = LabelSelector::from_label_selector_json(&json!({
        "matchLabels": {"kubevirt.io/vm": "vm1"},
        "matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b", "a"]},
            {"key": "gpu", "operator": "DoesNotExist"},
            {"key": "tier", "operator": "NotIn", "values": ["x"]},
            {"key": "arch", "operator": "Exists", "values": []},
        ],
    }))
    .unwrap();
    assert_eq!(
        sel.to_string(),
        "arch,!gpu,kubevirt.io/vm=vm1,tier notin (x),zone in (a,b)"
    );
    assert!(sel.matches(&labels(
        json!({"kubevirt.io/vm": "vm1", "zone": "a", "arch": "amd64"})
    )));
    assert!(!sel.matches(&labels(
        json!({"kubevirt.io/vm": "vm1", "zone": "a", "arch": "x", "gpu": ""})
    )));
    assert!(LabelSelector::from_label_selector_json(&json!({}))
        .unwrap()
        .is_empty());
    assert!(!LabelSelector::from_label_selector_json(&Value::Null)
        .unwrap()
        .matches(&Map::new()));
    assert_eq!(
        LabelSelector::from_label_selector_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Gt"}]})
        )
        .unwrap_err(),
        "\"Gt\" is not a valid label selector operator"
    );
    assert_eq!(
        LabelSelector::from_label_selector_json(&json!({"matchExpressions": [{"key": "a", "operator": "In"}]}))
            .unwrap_err(),
        "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty"
    );
    assert_eq!(
        LabelSelector::from_label_selector_json(
            &json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["v"]}]})
        )
        .unwrap_err(),
        "values: Invalid value: []string{\"v\"}: values set must be empty for exists and does not exist"
    );
    assert!(
        LabelSelector::from_label_selector_json(&json!({"matchLabels": {"a b": "c"}}))
            .unwrap_err()
            .starts_with("key: Invalid value: \"a b\": name part must consist")
    );
    assert!(LabelSelector::from_label_selector_json(&json!({"matchLabels": {"a": 1}})).is_err());
    assert!(LabelSelector::from_label_selector_json(&json!({"matchLabels": []})).is_err());
    assert!(LabelSelector::from_label_selector_json(&json!({"matchExpressions": {}})).is_err());
    assert!(
        LabelSelector::from_label_selector_json(&json!({"matchExpressions": [{"key": 1}]}))
            .is_err()
    );
    assert!(LabelSelector::from_label_selector_json(&json!(3)).is_err());
}

#[test]
fn requirement_constructor() {
    let r = Requirement::new("cpu", Operator::GreaterThan, vec!["4".into()]).unwrap();
    assert!(r.matches(&labels(json!({"cpu": "8"}))));
    assert_eq!(
        Requirement::new("cpu", Operator::LessThan, vec!["1".into(), "2".into()]).unwrap_err(),
        "values: Invalid value: []string{\"1\", \"2\"}: for 'Gt', 'Lt' operators, exactly one value is required"
    );
    assert_eq!(
        Requirement::new("a", Operator::Equals, vec![]).unwrap_err(),
        "values: Invalid value: []string(nil): exact-match compatibility requires one single value"
    );
    let sel = LabelSelector::from_requirements(vec![r]);
    assert_eq!(sel.to_string(), "cpu>4");
}

#[test]
fn field_selectors() {
    let sel = FieldSelector::parse("metadata.name=vm1,metadata.namespace!=kube-system").unwrap();
    assert_eq!(
        sel.fields().collect::<Vec<_>>(),
        ["metadata.name", "metadata.namespace"]
    );
    assert_eq!(sel.requires_exact_match("metadata.name"), Some("vm1"));
    assert_eq!(sel.requires_exact_match("metadata.namespace"), None);
    let get = |ns: &'static str| {
        move |f: &str| match f {
            "metadata.name" => Some("vm1".to_string()),
            "metadata.namespace" => Some(ns.to_string()),
            _ => None,
        }
    };
    assert!(sel.matches(get("default")));
    assert!(!sel.matches(get("kube-system")));
    assert!(FieldSelector::parse("spec.x=").unwrap().matches(|_| None));
    assert!(!FieldSelector::parse("spec.x!=").unwrap().matches(|_| None));
    assert_eq!(
        FieldSelector::parse("b==1,a=2").unwrap().to_string(),
        "a=2,b=1"
    );
    assert_eq!(
        FieldSelector::parse("a=x\\,y\\=z\\\\")
            .unwrap()
            .requirements()[0]
            .value,
        "x,y=z\\"
    );
    assert_eq!(
        FieldSelector::parse("a=x\\,y\\=z\\\\").unwrap().to_string(),
        "a=x\\,y\\=z\\\\"
    );
    assert!(FieldSelector::parse("").unwrap().is_empty());
    assert!(FieldSelector::parse(",,").unwrap().is_empty());
    assert_eq!(
        FieldSelector::parse("a=1,bad").unwrap_err(),
        "invalid selector: 'a=1,bad'; can't understand 'bad'"
    );
    assert_eq!(
        FieldSelector::parse("a=b=c").unwrap_err(),
        "invalid field selector: unescaped character in value: 61"
    );
    assert_eq!(
        FieldSelector::parse("a=b\\x").unwrap_err(),
        "invalid field selector: invalid escape sequence: \\x"
    );
    assert_eq!(
        FieldSelector::parse("a=b\\").unwrap_err(),
        "invalid field selector: invalid escape sequence: \\"
    );
    // The operator search ignores escapes, as upstream does.
    assert!(FieldSelector::parse("a\\=b=c").is_err());
    assert_eq!(
        FieldSelector::parse("=x")
            .unwrap()
            .fields()
            .collect::<Vec<_>>(),
        [""]
    );
    assert_eq!(
        field_label_not_supported("spec.x"),
        "field label not supported: spec.x"
    );
}

fn key_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z]([a-z0-9._-]{0,10}[a-z0-9])?",
        "[a-z]{1,5}(\\.[a-z]{1,5}){0,2}/[A-Za-z]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?",
    ]
}

fn value_strategy() -> impl Strategy<Value = String> {
    "([A-Za-z0-9]([A-Za-z0-9_.-]{0,8}[A-Za-z0-9])?)?"
}

fn requirement_strategy() -> impl Strategy<Value = Requirement> {
    (
        key_strategy(),
        0..9u8,
        prop::collection::vec(value_strategy(), 1..4),
        -50i64..50,
    )
        .prop_map(|(key, op, values, n)| {
            let first = values[0].clone();
            let (operator, values) = match op {
                0 => (Operator::In, values),
                1 => (Operator::NotIn, values),
                2 => (Operator::Equals, vec![first]),
                3 => (Operator::DoubleEquals, vec![first]),
                4 => (Operator::NotEquals, vec![first]),
                5 => (Operator::Exists, vec![]),
                6 => (Operator::DoesNotExist, vec![]),
                7 => (Operator::GreaterThan, vec![n.abs().to_string()]),
                _ => (Operator::LessThan, vec![n.abs().to_string()]),
            };
            Requirement::new(&key, operator, values).unwrap()
        })
}

proptest! {
    #[test]
    fn display_round_trips(reqs in prop::collection::vec(requirement_strategy(), 0..5)) {
        let selector = LabelSelector::from_requirements(reqs);
        let printed = selector.to_string();
        let parsed = LabelSelector::parse(&printed).unwrap();
        prop_assert_eq!(&parsed, &selector, "{}", printed);
    }

    #[test]
    fn label_parser_never_panics(s in "[a-z!=<>(), \t\0in0-9/._-]{0,40}") {
        if let Ok(sel) = LabelSelector::parse(&s) {
            prop_assert_eq!(LabelSelector::parse(&sel.to_string()).unwrap(), sel);
        }
    }

    #[test]
    fn label_parser_never_panics_on_any_text(s in "\\PC{0,30}") {
        let _ = LabelSelector::parse(&s);
    }

    #[test]
    fn field_selector_round_trips(
        terms in prop::collection::vec(("[a-z.]{1,8}", any::<bool>(), "[a-z,=\\\\ ]{0,6}"), 0..4)
    ) {
        let requirements: Vec<FieldRequirement> = terms.into_iter().map(|(field, eq, value)| FieldRequirement {
            field,
            operator: if eq { FieldOperator::Equals } else { FieldOperator::NotEquals },
            value,
        }).collect();
        let printed = FieldSelector { requirements }.to_string();
        let parsed = FieldSelector::parse(&printed).unwrap();
        prop_assert_eq!(FieldSelector::parse(&parsed.to_string()).unwrap(), parsed);
    }

    #[test]
    fn field_parser_never_panics(s in "\\PC{0,30}") {
        let _ = FieldSelector::parse(&s);
    }
}
