//! EV: validation of emitted agent events against `fixtures/agent-events/v1/schema/` (kept out
//! of `support/mod.rs`, which `runtime/examples/bench_latency.rs` also includes without the
//! `jsonschema` dev-dependency).

#![allow(dead_code)]

use serde_json::Value;
use std::path::Path;

/// EV: the JSON Schema of an agent event's kind, from `fixtures/agent-events/v1/schema/`.
pub fn event_schema(kind: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("../fixtures/agent-events/v1/schema/{kind}.json"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("no schema for kind {kind:?} ({}): {e}", path.display()));
    serde_json::from_str(&text).expect("schemas are JSON")
}

/// EV: the schema errors of one emitted event (empty when it validates).
pub fn event_schema_errors(event: &Value) -> Vec<String> {
    let kind = event["kind"].as_str().unwrap_or_else(|| panic!("an event without a kind: {event}"));
    let validator = jsonschema::validator_for(&event_schema(kind)).expect("the schema compiles");
    validator.iter_errors(event).map(|e| format!("{} at {}", e, e.instance_path)).collect()
}

/// EV: panics unless the event validates against its kind's schema.
pub fn assert_event_schema(event: &Value) {
    let errors = event_schema_errors(event);
    assert!(errors.is_empty(), "{event} does not match its schema: {errors:?}");
}
