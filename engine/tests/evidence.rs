//! RF-6: every request keeps a bounded, durable evidence trail: what the admission saw, the
//! write, the submitted marker, the turn that started after the armed cursor, the user-message
//! hash comparison, the binding, and the end with the rule that decided it. Snapshots are the
//! durable trail (`agent request get ID --evidence` shows exactly this list).

mod support;
use support::*;
use wakterm_engine::*;

fn durable_trail(rig: &Rig) -> serde_json::Value {
    let record = &rig.durable[&RequestId::parse(REQ).unwrap()];
    serde_json::json!({"evidence": record.evidence, "evidence_dropped": record.evidence_dropped})
}

#[test]
fn rf_6_evidence_of_a_completed_request() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "Complete phases 2 and 3", "done", 1000);
    insta::assert_json_snapshot!("evidence_completed", durable_trail(&rig));
}

#[test]
fn rf_6_evidence_of_an_indeterminate_request_names_the_rule() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "somebody else's prompt", 1020); // CORR-6
    let trail = durable_trail(&rig);
    let last = trail["evidence"].as_array().unwrap().last().unwrap().clone();
    assert!(last["detail"].as_str().unwrap().contains("first_user_message_mismatch (CORR-6)"), "{last}");
    insta::assert_json_snapshot!("evidence_indeterminate", trail);
}

/// RF-6: the trail is bounded; its end is always kept.
#[test]
fn rf_6_evidence_is_bounded_and_keeps_the_end() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let id = RequestId::parse(REQ).unwrap();
    let mut record = rig.durable[&id].clone();
    for i in 0..100 {
        record.note(i, EvidenceStep::TurnStarted, "x".repeat(1000));
    }
    record.note(101, EvidenceStep::Terminal, "the end");
    assert_eq!(record.evidence.len(), limits::MAX_EVIDENCE_ENTRIES);
    assert!(record.evidence.iter().all(|e| e.detail.len() <= limits::MAX_EVIDENCE_DETAIL_BYTES));
    assert_eq!(record.evidence.last().unwrap().step, EvidenceStep::Terminal);
    assert!(record.evidence_dropped > 0);
}
