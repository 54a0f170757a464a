//! Metrics of parts of the process that the server's `/metrics` shows but does not own
//! (the store's writer, the controllers' work queues, leader election): each part adds its
//! families once, and every scrape registers them all into the registry it encodes.

use std::sync::Mutex;

use prometheus_client::registry::Registry;

type Part = Box<dyn Fn(&mut Registry) + Send + Sync>;

static PARTS: Mutex<Vec<Part>> = Mutex::new(Vec::new());

/// Adds a part: `register` registers (clones of) its families into a scrape's registry.
pub fn add_part(register: impl Fn(&mut Registry) + Send + Sync + 'static) {
    PARTS
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(Box::new(register));
}

/// Registers every part's families into `registry`.
pub fn register_parts(registry: &mut Registry) {
    for part in PARTS.lock().unwrap_or_else(|p| p.into_inner()).iter() {
        part(registry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;

    #[test]
    fn a_part_shows_in_every_scrape() {
        let commits: Counter = Counter::default();
        commits.inc_by(7);
        let shown = commits.clone();
        add_part(move |registry| {
            registry.register("test_part_commits", "Commits", shown.clone());
        });
        for _ in 0..2 {
            let mut registry = Registry::default();
            register_parts(&mut registry);
            let (_, text) = crate::render(&registry, Some("application/openmetrics-text"));
            assert!(text.contains("test_part_commits_total 7"), "{text}");
        }
    }
}
