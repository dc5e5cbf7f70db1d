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

    rig.observe(ObserverEvent::SessionLost { reason: RECORD_TOO_LARGE.to_string() });
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1, "RF-5: exactly one terminal event");
    assert_eq!(events[0].state, TerminalState::Indeterminate);
    assert_eq!(events[0].reason.as_deref(), Some("record_too_large"));
    let view = rig.engine.agent(&agent_id(ZOLA)).and_then(|a| a.view.clone()).expect("view");
    assert_eq!(view.turn, TurnState::Unknown, "neither busy forever nor falsely idle");

    // Any other lost-session reason is free text and keeps the generic terminal reason.
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.observe(ObserverEvent::SessionLost { reason: "the rollout was truncated".to_string() });
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("observer_session_lost"));
}
