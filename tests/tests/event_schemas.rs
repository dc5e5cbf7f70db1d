//! EV: the JSON Schemas of `fixtures/agent-events/v1/schema/`, one per kind, describe exactly
//! what the engine emits: a sample of every kind validates, one schema per kind and no other,
//! and a stray or missing field is refused (the schemas are closed, so a new field cannot slip
//! in without its schema changing).

mod support;
#[path = "support/event_schema.rs"]
mod event_schema;

use serde_json::{json, Value};
use wakterm_engine::*;

fn sample(body: EventBody) -> Value {
    let event = AgentEvent {
        schema: AGENT_EVENTS_SCHEMA.to_string(),
        sequence: 7,
        at_ms: 1_767_000_000_000,
        agent_id: AgentId::parse("0b5e3c1a-1111-4222-8333-000000000001").unwrap(),
        incarnation: Some(Incarnation("4242.99".into())),
        body,
    };
    serde_json::to_value(event).unwrap()
}

fn every_kind() -> Vec<Value> {
    let session = SessionId("019a-session".into());
    let turn = TurnId("019a-turn".into());
    let request = RequestId::parse("fe57dc90-994e-4e73-b09c-fac483d9f05b").unwrap();
    let hash = prompt::prompt_hash("hello");
    vec![
        sample(EventBody::AgentStarted { name: "zola".into(), transport: Transport::Pty }),
        sample(EventBody::IncarnationChanged { previous: Some(Incarnation("4242.98".into())) }),
        sample(EventBody::IncarnationChanged { previous: None }),
        sample(EventBody::AgentExited { drained: true }),
        sample(EventBody::AgentStopped),
        sample(EventBody::ObserverAttached { session: session.clone(), position: 0 }),
        sample(EventBody::ObserverLost { reason: "rollout replaced".into() }),
        sample(EventBody::ObserverGap { reason: "truncated".into(), session: Some(session.clone()), after_position: 812 }),
        sample(EventBody::ObserverGap { reason: "truncated".into(), session: None, after_position: 0 }),
        sample(EventBody::TurnStarted { session: session.clone(), provider_turn_id: turn.clone(), position: 900 }),
        sample(EventBody::UserMessage { session: session.clone(), provider_turn_id: Some(turn.clone()), prompt_hash: hash.clone(), position: 950 }),
        sample(EventBody::UserMessage { session: session.clone(), provider_turn_id: None, prompt_hash: hash.clone(), position: 950 }),
        sample(EventBody::AssistantMessage { session: session.clone(), provider_turn_id: Some(turn.clone()), text: Some("looking".into()), text_too_large: None, phase: Some("commentary".into()), position: 960 }),
        sample(EventBody::AssistantMessage { session: session.clone(), provider_turn_id: None, text: None, text_too_large: Some(3 << 20), phase: None, position: 970 }),
        sample(EventBody::PlanUpdated {
            session: session.clone(),
            provider_turn_id: Some(turn.clone()),
            explanation: Some("why".into()),
            plan: Some(vec![PlanStep { step: "read".into(), status: PlanStatus::InProgress }]),
            plan_too_large: None,
            position: 975,
        }),
        sample(EventBody::PlanUpdated { session: session.clone(), provider_turn_id: None, explanation: None, plan: None, plan_too_large: Some(3 << 20), position: 976 }),
        sample(EventBody::TurnCompleted { session: session.clone(), provider_turn_id: turn.clone(), position: 990, final_too_large: None }),
        sample(EventBody::TurnCompleted { session: session.clone(), provider_turn_id: turn.clone(), position: 990, final_too_large: Some(3 << 20) }),
        sample(EventBody::TurnFinal { session: session.clone(), provider_turn_id: turn.clone(), final_message: "done".into(), position: 990 }),
        sample(EventBody::TurnAborted { session: session.clone(), provider_turn_id: None, position: 995 }),
        sample(EventBody::RequestAdmitted { request_id: request.clone(), return_mode: ReturnMode::ReturnFinal, classification: Some(Classification::Accepted), prompt_hash: hash.clone(), prompt: None }),
        sample(EventBody::RequestAdmitted { request_id: request.clone(), return_mode: ReturnMode::OneWay, classification: Some(Classification::Accepted), prompt_hash: hash, prompt: Some("a shared prompt".into()) }),
        sample(EventBody::RequestBound { request_id: request.clone(), provider_turn_id: turn.clone() }),
        sample(EventBody::RequestTerminal {
            request_id: request.clone(),
            state: TerminalState::Completed,
            reason: None,
            provider_turn_id: Some(turn.clone()),
            terminal_event_sequence: 3,
            steered: false,
        }),
        sample(EventBody::RequestTerminal {
            request_id: request,
            state: TerminalState::Completed,
            reason: None,
            provider_turn_id: Some(turn),
            terminal_event_sequence: 4,
            steered: true,
        }),
    ]
}

#[test]
fn ev_every_kind_has_one_closed_schema_that_its_events_match() {
    let samples = every_kind();
    let kinds: std::collections::BTreeSet<&str> = samples.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, EventBody::KINDS.into_iter().collect(), "a sample of every kind");
    for event in &samples {
        event_schema::assert_event_schema(event);
    }
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/agent-events/v1/schema");
    let mut files: Vec<String> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().to_string()).collect();
    files.sort();
    let mut expected: Vec<String> = EventBody::KINDS.iter().map(|k| format!("{k}.json")).collect();
    expected.sort();
    assert_eq!(files, expected, "one schema per kind, no other");
}

#[test]
fn ev_schemas_refuse_stray_missing_and_mistyped_fields() {
    let event = every_kind().into_iter().find(|e| e["kind"] == "turn.final").unwrap();
    let mut extra = event.clone();
    extra["text"] = json!("a field no schema knows");
    assert!(!event_schema::event_schema_errors(&extra).is_empty(), "closed: {extra}");
    let mut missing = event.clone();
    missing.as_object_mut().unwrap().remove("final_message");
    assert!(!event_schema::event_schema_errors(&missing).is_empty());
    let mut mistyped = event.clone();
    mistyped["sequence"] = json!(0);
    assert!(!event_schema::event_schema_errors(&mistyped).is_empty(), "sequences start at 1");
    // message.assistant carries its text or its size, never both, never neither.
    let message = every_kind().into_iter().find(|e| e["kind"] == "message.assistant" && e.get("text").is_some()).unwrap();
    let mut both = message.clone();
    both["text_too_large"] = json!(5_000_000);
    assert!(!event_schema::event_schema_errors(&both).is_empty(), "{both}");
    let mut neither = message;
    neither.as_object_mut().unwrap().remove("text");
    assert!(!event_schema::event_schema_errors(&neither).is_empty(), "{neither}");
    let mut other_schema = event;
    other_schema["schema"] = json!("wakterm.agent-events.v2");
    assert!(!event_schema::event_schema_errors(&other_schema).is_empty());
}
