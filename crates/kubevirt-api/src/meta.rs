//! metav1 pieces the controllers and the node agent write into status: times as
//! Kubernetes prints `metav1.Time`, and conditions with `SetStatusCondition`'s rule for
//! `lastTransitionTime`.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

/// `t` as `metav1.Time` marshals: RFC 3339 in UTC, whole seconds (`2026-01-02T03:04:05Z`).
pub fn format_time(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The current time as [`format_time`] writes it.
pub fn now() -> String {
    format_time(Utc::now())
}

/// A condition with no transition time yet ([`set_condition`] gives it one) and a null
/// `lastProbeTime`, as KubeVirt writes them.
pub fn condition(kind: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastProbeTime": null})
}

/// Replaces the condition of `condition["type"]` in `conditions`, or appends it, moving
/// `lastTransitionTime` only when the status changes (metav1 `SetStatusCondition`): an
/// unchanged status keeps the old condition's time; otherwise the condition's own
/// `lastTransitionTime` is used, or now when it has none.
pub fn set_condition(conditions: &mut Vec<Value>, condition: Value) {
    set_condition_at(conditions, condition, &now());
}

/// [`set_condition`] with `now` as the current time.
pub fn set_condition_at(conditions: &mut Vec<Value>, mut condition: Value, now: &str) {
    let existing = conditions
        .iter()
        .position(|c| c["type"] == condition["type"]);
    let kept = existing
        .map(|i| &conditions[i])
        .filter(|old| old["status"] == condition["status"])
        .map(|old| old["lastTransitionTime"].clone())
        .filter(|t| !t.is_null());
    let since = match kept {
        Some(t) => t,
        None => match condition.get("lastTransitionTime") {
            Some(t) if !t.is_null() => t.clone(),
            _ => json!(now),
        },
    };
    if let Some(c) = condition.as_object_mut() {
        c.insert("lastTransitionTime".into(), since);
    }
    match existing {
        Some(i) => conditions[i] = condition,
        None => conditions.push(condition),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_whole_seconds_in_utc() {
        let t = DateTime::parse_from_rfc3339("2026-01-02T04:04:05.678+01:00")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(format_time(t), "2026-01-02T03:04:05Z");
        let now = now();
        assert_eq!(now.len(), "2026-01-02T03:04:05Z".len(), "{now}");
        assert!(DateTime::parse_from_rfc3339(&now).is_ok(), "{now}");
    }

    #[test]
    fn transition_time_moves_only_with_the_status() {
        let mut list = vec![json!({"type": "Other", "status": "True"})];
        // New: now, unless the condition says when.
        set_condition_at(&mut list, condition("Ready", "False", "A", "a"), "T1");
        assert_eq!(
            list[1],
            json!({"type": "Ready", "status": "False", "reason": "A", "message": "a",
                   "lastProbeTime": null, "lastTransitionTime": "T1"})
        );
        // Same status, other reason: replaced, time kept.
        set_condition_at(&mut list, condition("Ready", "False", "B", "b"), "T2");
        assert_eq!(list.len(), 2);
        assert_eq!(list[1]["reason"], "B");
        assert_eq!(list[1]["lastTransitionTime"], "T1");
        // Even when the new one carries a time of its own.
        let mut c = condition("Ready", "False", "C", "c");
        c["lastTransitionTime"] = json!("T9");
        set_condition_at(&mut list, c, "T3");
        assert_eq!(list[1]["lastTransitionTime"], "T1");
        // Status changes: the condition's own time, else now.
        let mut c = condition("Ready", "True", "", "");
        c["lastTransitionTime"] = json!("T4");
        set_condition_at(&mut list, c, "T5");
        assert_eq!(list[1]["lastTransitionTime"], "T4");
        set_condition_at(&mut list, condition("Ready", "False", "", ""), "T6");
        assert_eq!(list[1]["lastTransitionTime"], "T6");
        // A kept status whose old condition had no time gets one.
        set_condition_at(&mut list, condition("Other", "True", "", ""), "T7");
        assert_eq!(list[0]["lastTransitionTime"], "T7");
        // Other fields are the new condition's.
        let node = json!({"type": "Other", "status": "True", "lastHeartbeatTime": "H"});
        set_condition_at(&mut list, node, "T8");
        assert_eq!(
            list[0],
            json!({"type": "Other", "status": "True", "lastHeartbeatTime": "H",
                   "lastTransitionTime": "T7"})
        );
        assert_eq!(list.len(), 2);
    }
}
