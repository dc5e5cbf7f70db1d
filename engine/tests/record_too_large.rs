//! CORR-12: a provider record the observer could not read in full ends every correlated request
//! `indeterminate` with the reason `record_too_large`, and leaves the agent's turn unknown.

mod support;
use support::*;
use wakterm_engine::observer::RECORD_TOO_LARGE;
use wakterm_engine::*;

/// CORR-12: a bound request whose final sits in an unreadable record ends at once, named.
#[test]
fn corr_12_unreadable_record_ends_a_bound_request_as_record_too_large() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Bound);

    rig.observe(ObserverEvent::SessionLost { reason: RECORD_TOO_LARGE.to_string(), session: None, before: None });
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1, "RF-5: exactly one terminal event");
    assert_eq!(events[0].state, TerminalState::Indeterminate);
    assert_eq!(events[0].reason.as_deref(), Some("record_too_large"));
    let view = rig.engine.agent(&agent_id(ZOLA)).and_then(|a| a.view.clone()).expect("view");
    assert_eq!(view.turn, TurnState::Unknown, "neither busy forever nor falsely idle");

    // Any other lost-session reason is free text and keeps the generic terminal reason.
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.observe(ObserverEvent::SessionLost { reason: "the rollout was truncated".to_string(), session: None, before: None });
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("observer_session_lost"));
}

/// RF-9: a final too large to store ends its request `indeterminate` / `final_too_large`
/// (never `completed` with a cut or empty answer), and the stream announces its size on
/// `turn.completed` instead of carrying it in a `turn.final` that could never commit. The size
/// that counts is the JSON encoding: 1.1 M quote characters encode to over 2.2 MB.
#[test]
fn rf_9_a_final_over_the_limit_is_indeterminate_and_not_carried() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let huge = "\"".repeat(1_100_000);
    rig.provider_turn("turn-1", "hi", &huge, 1000);
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1, "RF-5: exactly one terminal event");
    assert_eq!(events[0].state, TerminalState::Indeterminate);
    assert_eq!(events[0].reason.as_deref(), Some("final_too_large"));
    assert_eq!(events[0].final_message, None);
    let kinds: Vec<&EventBody> = rig.durable_events.iter().map(|e| &e.body).collect();
    assert!(!kinds.iter().any(|b| matches!(b, EventBody::TurnFinal { .. })), "no turn.final: it could never commit");
    let announced = kinds.iter().find_map(|b| match b {
        EventBody::TurnCompleted { final_too_large, .. } => Some(*final_too_large),
        _ => None,
    });
    assert_eq!(announced, Some(Some(2_200_002)), "the encoded size: 2 bytes per quote plus the two delimiters");

    // Just under the limit, the final is delivered whole.
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let fits = "a".repeat(limits::MAX_FINAL_JSON_BYTES - 2);
    rig.provider_turn("turn-1", "hi", &fits, 1000);
    let events = rig.terminal_for(REQ);
    assert_eq!(events[0].state, TerminalState::Completed);
    assert_eq!(events[0].final_message.as_deref(), Some(fits.as_str()));
    assert!(rig.durable_events.iter().any(|e| matches!(&e.body, EventBody::TurnFinal { final_message, .. } if final_message.len() == fits.len())));
}
