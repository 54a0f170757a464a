//! Prometheus exposition shared by the API server and the node agents. Metrics are kept
//! and encoded with `prometheus-client` (OpenMetrics); a scraper that does not ask for
//! OpenMetrics gets the classic text format (0.0.4), which differs only in how counters
//! are typed, in `# UNIT` and in the closing `# EOF`.

use prometheus_client::registry::Registry;

pub mod process;
pub mod usage;

pub use prometheus_client;

/// What `Content-Type` OpenMetrics answers carry.
pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The classic text format's `Content-Type`.
pub const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The registry's metrics as the `Accept` header asks: OpenMetrics when it names
/// `application/openmetrics-text`, the classic text format otherwise. Returns the
/// content type and the body.
pub fn render(registry: &Registry, accept: Option<&str>) -> (&'static str, String) {
    render_all(&[registry], accept)
}

/// [`render`] for the metrics of several registries (long-lived ones and those made
/// for one scrape), as one exposition.
pub fn render_all(registries: &[&Registry], accept: Option<&str>) -> (&'static str, String) {
    let mut open = String::new();
    // Writing into a String cannot fail.
    for registry in registries {
        let _ = prometheus_client::encoding::text::encode_registry(&mut open, registry);
    }
    let _ = prometheus_client::encoding::text::encode_eof(&mut open);
    if accept.is_some_and(|a| a.contains("application/openmetrics-text")) {
        (OPENMETRICS, open)
    } else {
        (TEXT, classic(&open))
    }
}

/// OpenMetrics text as the classic format: a counter family `x` is described and typed
/// as `x_total` (the name of its samples), its `x_created` samples go, and so do `# UNIT`
/// lines and `# EOF`.
pub fn classic(open: &str) -> String {
    let lines: Vec<&str> = open.lines().collect();
    let mut out = String::with_capacity(open.len());
    let mut counter: Option<&str> = None;
    for (i, line) in lines.iter().enumerate() {
        if *line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        if line.starts_with("# TYPE ") {
            counter = counter_family(line);
        }
        let described = line.strip_prefix("# HELP ").and_then(|help| {
            let name = lines.get(i + 1).and_then(|next| counter_family(next))?;
            help.strip_prefix(name)
                .filter(|rest| rest.starts_with(' '))
                .map(|rest| format!("# HELP {name}_total{rest}"))
        });
        match (described, counter) {
            (Some(help), _) => out.push_str(&help),
            (None, Some(name)) if line.starts_with("# TYPE ") => {
                out.push_str(&format!("# TYPE {name}_total counter"));
            }
            (None, Some(name)) if line.starts_with(&format!("{name}_created")) => continue,
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The family `# TYPE x counter` declares.
fn counter_family(line: &str) -> Option<&str> {
    line.strip_prefix("# TYPE ")
        .and_then(|rest| rest.strip_suffix(" counter"))
}

/// A VMI label as KubeVirt exports it: `kubernetes_vmi_label_` and the key with every
/// character a metric label may not hold (`.`, `/`, `-`...) as `_`.
pub fn vmi_label_name(key: &str) -> String {
    let mut name = String::from("kubernetes_vmi_label_");
    name.extend(key.chars().map(|c| {
        if c.is_ascii_alphanumeric() || c == '_' {
            c
        } else {
            '_'
        }
    }));
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::gauge::Gauge;

    #[test]
    fn counters_are_typed_by_their_sample_names_in_the_classic_format() {
        let mut registry = Registry::default();
        let requests: Counter = Counter::default();
        requests.inc_by(3);
        registry.register("requests", "Requests served", requests);
        let inflight: Gauge = Gauge::default();
        inflight.set(2);
        registry.register("inflight", "Requests in flight", inflight);
        let (kind, open) = render(
            &registry,
            Some("application/openmetrics-text;version=1.0.0"),
        );
        assert_eq!(kind, OPENMETRICS);
        assert!(
            open.contains("# TYPE requests counter\nrequests_total 3\n"),
            "{open}"
        );
        assert!(open.ends_with("# EOF\n"));
        let (kind, text) = render(&registry, Some("text/plain"));
        assert_eq!(kind, TEXT);
        assert_eq!(
            text,
            "# HELP requests_total Requests served.\n# TYPE requests_total counter\nrequests_total 3\n\
             # HELP inflight Requests in flight.\n# TYPE inflight gauge\ninflight 2\n"
        );
    }

    #[test]
    fn vmi_labels_take_kubevirts_names() {
        assert_eq!(
            vmi_label_name("kubevirt.io/vm-name"),
            "kubernetes_vmi_label_kubevirt_io_vm_name"
        );
    }
}
