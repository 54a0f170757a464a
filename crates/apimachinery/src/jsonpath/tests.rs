use super::*;
use crate::gonum::{go_float_json, go_float_v};
use proptest::prelude::*;
use serde_json::json;

fn vmi() -> Value {
    json!({
        "metadata": {"name": "vmi1", "annotations": {"kubevirt.io/latest-observed-api-version": "v1"},
                     "labels": {"kubevirt.io/nodeName": "node1"}},
        "status": {
            "phase": "Running",
            "interfaces": [{"ipAddress": "10.0.0.5", "name": "default"}, {"ipAddress": "10.0.0.6"}],
            "conditions": [
                {"type": "Ready", "status": "True", "n": 2},
                {"type": "Paused", "status": "False", "n": 1.5},
                {"type": "LiveMigratable", "status": "False", "n": null},
            ],
            "nodeName": "node1",
            "empty": [],
            "nothing": null,
        }
    })
}

fn ev(path: &str) -> Result<Vec<Value>, String> {
    eval(path, &vmi())
}

#[test]
fn fields_and_indexes() {
    assert_eq!(ev(".status.phase").unwrap(), vec![json!("Running")]);
    assert_eq!(ev("{.status.phase}").unwrap(), vec![json!("Running")]);
    assert_eq!(ev("{$.status.phase}").unwrap(), vec![json!("Running")]);
    assert_eq!(ev(" { .status.nodeName } ").unwrap(), vec![json!("node1")]);
    assert_eq!(
        ev(".status.interfaces[0].ipAddress").unwrap(),
        vec![json!("10.0.0.5")]
    );
    assert_eq!(
        ev(".status.interfaces[-1].ipAddress").unwrap(),
        vec![json!("10.0.0.6")]
    );
    assert_eq!(
        ev(".status.interfaces[*].ipAddress").unwrap(),
        vec![json!("10.0.0.5"), json!("10.0.0.6")]
    );
    assert_eq!(
        ev(".status.interfaces[*].name").unwrap(),
        vec![json!("default")]
    );
    assert_eq!(
        ev(".status.conditions[0:2].type").unwrap(),
        vec![json!("Ready"), json!("Paused")]
    );
    assert_eq!(
        ev(".status.conditions[::2].type").unwrap(),
        vec![json!("Ready"), json!("LiveMigratable")]
    );
    assert_eq!(
        ev(".status.conditions[1:].type").unwrap(),
        vec![json!("Paused"), json!("LiveMigratable")]
    );
    assert_eq!(
        ev(".metadata.labels.kubevirt\\.io/nodeName").unwrap(),
        vec![json!("node1")]
    );
    assert_eq!(ev(".metadata.*").unwrap().len(), 3);
    assert_eq!(ev(".status.nothing").unwrap(), vec![Value::Null]);
    assert_eq!(ev(".status.missing").unwrap(), Vec::<Value>::new());
    assert_eq!(
        ev(".status.missing.deeper[0]").unwrap(),
        Vec::<Value>::new()
    );
    assert_eq!(ev(".status.nothing[0]").unwrap(), Vec::<Value>::new());
    assert_eq!(ev(".status.empty[*]").unwrap(), Vec::<Value>::new());
    assert_eq!(ev(".status.phase.x").unwrap(), Vec::<Value>::new());
    assert_eq!(ev("['status']['phase']").unwrap(), vec![json!("Running")]);
    // Dots inside bracket keys still split fields, as upstream does.
    assert_eq!(
        ev(".metadata.labels['kubevirt.io/nodeName']").unwrap(),
        Vec::<Value>::new()
    );
    assert_eq!(ev("").unwrap(), vec![vmi()]);
}

#[test]
fn index_errors_match_upstream() {
    assert_eq!(
        ev(".status.empty[0]").unwrap_err(),
        "array index out of bounds: index 0, length 0"
    );
    assert_eq!(
        ev(".status.interfaces[5]").unwrap_err(),
        "array index out of bounds: index 5, length 2"
    );
    assert_eq!(
        ev(".status.interfaces[0:5]").unwrap_err(),
        "array index out of bounds: index 4, length 2"
    );
    assert_eq!(
        ev(".status.interfaces[1:0]").unwrap_err(),
        "starting index 1 is greater than ending index 0"
    );
    assert_eq!(
        ev(".status.interfaces[::0]").unwrap_err(),
        "step must be > 0"
    );
    assert_eq!(
        ev(".status[0]").unwrap_err(),
        "map[string]interface {} is not array or slice"
    );
    assert_eq!(
        ev(".status.phase[0]").unwrap_err(),
        "string is not array or slice"
    );
    assert_eq!(ev(".status.interfaces[1:1]").unwrap(), Vec::<Value>::new());
    assert_eq!(
        ev(".status.interfaces[x]").unwrap_err(),
        "invalid array index x"
    );
    assert_eq!(
        ev(".status.interfaces[-]").unwrap_err(),
        "array index - is not a number"
    );
    assert_eq!(
        ev(".status.interfaces[99999999999999999999]").unwrap_err(),
        "array index 99999999999999999999 is not a number"
    );
    assert!(ev(&format!(".status.interfaces[{}]", i64::MAX)).is_err());
    assert!(ev(&format!(".status.interfaces[{}]", i64::MIN)).is_err());
}

#[test]
fn filters() {
    assert_eq!(
        ev(".status.conditions[?(@.type=='Ready')].status").unwrap(),
        vec![json!("True")]
    );
    assert_eq!(
        ev("{.status.conditions[?(@.type==\"Ready\")].status}").unwrap(),
        vec![json!("True")]
    );
    assert_eq!(
        ev(".status.conditions[?(@.type == 'Paused')].status").unwrap(),
        vec![json!("False")]
    );
    assert_eq!(
        ev(".status.conditions[?(@.status!='True')].type").unwrap(),
        vec![json!("Paused"), json!("LiveMigratable")]
    );
    assert_eq!(
        ev(".status.conditions[?(@.type=='a)b')].type").unwrap(),
        Vec::<Value>::new()
    );
    assert_eq!(
        ev(".status.interfaces[?(@.name)].ipAddress").unwrap(),
        vec![json!("10.0.0.5")]
    );
    assert_eq!(ev(".status.conditions[?(@.n)].type").unwrap().len(), 3);
    assert_eq!(
        ev(".status.conditions[?(@.missing=='x')].type").unwrap(),
        Vec::<Value>::new()
    );
    assert_eq!(
        ev(".status.interfaces[?(@.name=='default')]")
            .unwrap()
            .len(),
        1
    );
    let numbers = json!({"a": [1, 5, 10], "f": [1.5, 2.5], "b": [true, false], "s": ["a", "b"]});
    let f = |p: &str| eval(p, &numbers);
    assert_eq!(f(".a[?(@>4)]").unwrap(), vec![json!(5), json!(10)]);
    assert_eq!(f(".a[?(@<=5)]").unwrap(), vec![json!(1), json!(5)]);
    assert_eq!(f(".a[?(@>=5)]").unwrap(), vec![json!(5), json!(10)]);
    assert_eq!(f(".a[?(@<5)]").unwrap(), vec![json!(1)]);
    assert_eq!(f(".a[?(@==-1)]").unwrap(), Vec::<Value>::new());
    assert_eq!(f(".f[?(@==2.5)]").unwrap(), vec![json!(2.5)]);
    assert_eq!(f(".b[?(@==true)]").unwrap(), vec![json!(true)]);
    assert_eq!(f(".s[?(@>'a')]").unwrap(), vec![json!("b")]);
    assert_eq!(
        f(".a[?(@==1.0)]").unwrap_err(),
        "incompatible types for comparison"
    );
    assert_eq!(
        f(".a[?(@=='1')]").unwrap_err(),
        "incompatible types for comparison"
    );
    assert_eq!(
        f(".b[?(@<true)]").unwrap_err(),
        "invalid type for comparison"
    );
    assert_eq!(
        f(".a[?(@<>1)]").unwrap_err(),
        "unrecognized filter operator <>"
    );
    assert_eq!(
        f(".a[?(@==)]").unwrap_err(),
        "unrecognized character in action: U+003D '='"
    );
    assert_eq!(
        ev(".status.conditions[?(@.n==2)].type").unwrap_err(),
        "incompatible types for comparison",
        "1.5 is a float64 in Go"
    );
    assert_eq!(
        ev(".status.conditions[?(@.n==@.n)].type").unwrap_err(),
        "invalid type for comparison"
    );
    assert_eq!(
        ev(".status.nothing[?(@.a=='b')]").unwrap_err(),
        "<nil> is not array or slice and cannot be filtered"
    );
    assert_eq!(
        eval(".m[?(@.a=='b')]", &json!({"m": {"x": [1, "y"]}})).unwrap_err(),
        "map[x:[1 y]] is not array or slice and cannot be filtered"
    );
    assert_eq!(
        eval(".m[?(@.*=='b')]", &json!({"m": [{"x": 1, "y": 2}]})).unwrap_err(),
        "can only compare one element at a time"
    );
}

#[test]
fn parse_errors() {
    assert_eq!(JsonPath::parse("{.a").unwrap_err(), "unclosed action");
    assert_eq!(JsonPath::parse(".a[0").unwrap_err(), "unterminated array");
    assert_eq!(
        JsonPath::parse(".a[?(@.x=='y'").unwrap_err(),
        "unterminated filter"
    );
    assert_eq!(
        JsonPath::parse(".a[?(@.x=='y')").unwrap_err(),
        "unclosed array expect ]"
    );
    assert_eq!(
        JsonPath::parse(".a[?(@.x=='y)]").unwrap_err(),
        "unterminated filter"
    );
    assert_eq!(
        JsonPath::parse(".a[0]#").unwrap_err(),
        "unrecognized character in action: U+0023 '#'"
    );
    assert_eq!(
        JsonPath::parse(".a[?(@.x==1.2.3)]").unwrap_err(),
        "cannot parse number 1.2.3"
    );
    assert_eq!(
        JsonPath::parse(".a[?(@.x=='\\q')]").unwrap_err(),
        "unquote string '\\q' error invalid syntax"
    );
    assert_eq!(
        JsonPath::parse(".a[?(@.x=='\\\"')]").unwrap_err(),
        "unquote string '\\\"' error invalid syntax"
    );
    assert_eq!(
        eval("[?(@=='\\u00e9\\x41\\n')]", &json!(["éA\n"])).unwrap(),
        vec![json!("éA\n")]
    );
    assert_eq!(
        eval("[?(@==\"'\")]", &json!(["'"])).unwrap(),
        vec![json!("'")]
    );
    assert!(JsonPath::parse("..a").is_err());
    assert!(JsonPath::parse(".a[0,1]").is_err());
    assert!(JsonPath::parse("{.a}{.b}").is_err());
    assert!(JsonPath::parse(".a 'x'").is_err());
    assert_eq!(
        eval("range", &json!({})).unwrap_err(),
        "unrecognized identifier range"
    );
    assert_eq!(
        JsonPath::parse(".a[?(@.x=='it\\'s')]").unwrap(),
        JsonPath {
            steps: vec![
                Step::Field("a".into()),
                Step::Filter(Box::new(Filter {
                    left: Operand::Path(vec![Step::Field("x".into())]),
                    comparison: Some(("==".into(), Operand::Literal(Literal::Str("it's".into())))),
                })),
            ]
        }
    );
}

#[test]
fn go_number_printing() {
    let cases = [
        (0.0, "0", "0"),
        (1.0, "1", "1"),
        (1.5, "1.5", "1.5"),
        (-2.25, "-2.25", "-2.25"),
        (100000.0, "100000", "100000"),
        (1e6, "1e+06", "1000000"),
        (1234567.0, "1.234567e+06", "1234567"),
        (123456789.0, "1.23456789e+08", "123456789"),
        (0.0001, "0.0001", "0.0001"),
        (0.00001, "1e-05", "0.00001"),
        (0.000001, "1e-06", "0.000001"),
        (0.0000001, "1e-07", "1e-7"),
        (1e20, "1e+20", "100000000000000000000"),
        (1e21, "1e+21", "1e+21"),
        (1.5e300, "1.5e+300", "1.5e+300"),
        (1e-100, "1e-100", "1e-100"),
        (0.1 + 0.2, "0.30000000000000004", "0.30000000000000004"),
    ];
    for (f, v, json) in cases {
        assert_eq!(go_float_v(f), v, "%v of {f}");
        assert_eq!(go_float_json(f), json, "json of {f}");
    }
    assert_eq!(print_value(&json!(5)), "5");
    assert_eq!(print_value(&json!(2.0)), "2");
    assert_eq!(print_value(&json!(u64::MAX)), "1.8446744073709552e+19");
    assert_eq!(print_value(&json!("x")), "x");
    assert_eq!(print_value(&json!(true)), "true");
    assert_eq!(print_value(&Value::Null), "null");
}

#[test]
fn go_json_output() {
    let v =
        json!({"b": [1, 2.5, null, true], "a": "<&>\u{2028}\u{8}\u{c}\u{1}\"\\\n\u{7f}é", "c": {}});
    assert_eq!(
        gojson::marshal(&v, Escaping::EncodingJson),
        r#"{"a":"\u003c\u0026\u003e\u2028\b\f\u0001\"\\\n"#.to_string()
            + "\u{7f}é\",\"b\":[1,2.5,null,true],\"c\":{}}"
    );
    assert_eq!(print_value(&json!([{"x": 1e21}])), "[{\"x\":1e+21}]");
}

proptest! {
    #[test]
    fn go_float_formats_round_trip(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
        prop_assert_eq!(go_float_v(f).parse::<f64>().unwrap(), f);
        prop_assert_eq!(go_float_json(f).parse::<f64>().unwrap(), f);
    }

    #[test]
    fn parser_never_panics(s in "[.\\[\\]?()@$'\"=!<>*:a-z0-9 {}\\\\,-]{0,30}") {
        if let Ok(path) = JsonPath::parse(&s) {
            let _ = path.find(&vmi());
        }
    }

    #[test]
    fn parser_never_panics_on_any_text(s in "\\PC{0,30}") {
        let _ = eval(&s, &vmi());
    }
}
