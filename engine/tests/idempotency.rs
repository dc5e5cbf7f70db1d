//! Idempotency scenarios (IDEM-*): one request id never writes twice.

mod support;
use support::*;
use wakterm_engine::*;

/// IDEM-1: the fingerprint covers the resolved agent, prompt bytes, paste mode, return mode
/// and timeout; the target's spelling, the exact-id flag and the operation are not input.
#[test]
fn idem_1_fingerprint_covers_the_seed_key() {
    let rig = &mut Rig::with_idle_zola();
    let base = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
    let print = |c: &AdmitCommand| wakterm_engine::fingerprint::fingerprint(&agent_id(ZOLA), c);
    let not_input: Vec<Box<dyn Fn(&mut AdmitCommand)>> = vec![
        Box::new(|c| c.op = OpId(999)),
        Box::new(|c| c.request_id = REQ2.to_string()),
        Box::new(|c| c.target = ZOLA.to_string()),
        Box::new(|c| c.exact_agent_id = true),
        Box::new(|c| c.operation = Operation::Send),
        Box::new(|c| c.incarnation = None), // checked beside the fingerprint
    ];
    for change in not_input {
        let mut same = base.clone();
        change(&mut same);
        assert_eq!(print(&base), print(&same));
    }
    let input: Vec<Box<dyn Fn(&mut AdmitCommand)>> = vec![
        Box::new(|c| c.prompt = "hi ".to_string()),
        Box::new(|c| c.paste_mode = PasteMode::Raw),
        Box::new(|c| c.return_mode = ReturnMode::OneWay),
        Box::new(|c| c.final_timeout_ms = 1),
    ];
    for change in input {
        let mut other = base.clone();
        change(&mut other);
        assert_ne!(print(&base), print(&other));
    }
    let other_agent = wakterm_engine::fingerprint::fingerprint(&agent_id("0b5e3c1a-1111-4222-8333-000000000002"), &base);
    assert_ne!(print(&base), other_agent, "an id reused for another agent is another input");
}

/// IDEM-1 (seed 000's retry path): admitted by name, replayed by `--exact-agent-id` and through
/// `send --return-final`: the stored receipt, nothing written. Another incarnation named, or
/// another agent, is a conflict.
#[test]
fn idem_1_replay_through_every_spelling() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "phases", ReturnMode::ReturnFinal);
    let original = rig.receipt(first).clone();
    assert_eq!(original.classification, Classification::Accepted);
    let by_id = |rig: &mut Rig| {
        let mut command = rig.command(Operation::Admit, REQ, "phases", ReturnMode::ReturnFinal);
        command.target = ZOLA.to_string();
        command.exact_agent_id = true;
        command
    };
    let by_send = rig.command(Operation::Send, REQ, "phases", ReturnMode::ReturnFinal);
    assert_eq!(by_send.incarnation, None);
    for command in [by_id(&mut rig), by_send] {
        let op = rig.submit(command);
        let replay = rig.receipt(op).clone();
        assert!(replay.replayed, "{replay:?}");
        assert_eq!(Receipt { replayed: false, ..replay }, original);
    }
    assert_eq!(rig.writes(), 1);
    let mut other_incarnation = by_id(&mut rig);
    other_incarnation.incarnation = Some("inc-2".to_string());
    let op = rig.submit(other_incarnation);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("request_id_conflict"));
    assert_eq!(rig.writes(), 1);
}

/// IDEM-1, IDEM-3 after `agent stop`: the name no longer resolves, and no record keeps the
/// name an id was admitted under, so a replay by name is a conflict, but one that says why and
/// how to replay (the gone agent's id as the target, which replays the stored receipt); it said
/// "different input" (a hostile run). Other input, and a new agent of the name, are the plain
/// conflict.
#[test]
fn idem_1_a_replay_by_name_after_the_agent_stopped_says_how_to_replay() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "phases", ReturnMode::ReturnFinal);
    let original = rig.receipt(first).clone();
    assert_eq!(original.classification, Classification::Accepted);
    rig.input(Input::AgentRemoved { agent_id: agent_id(ZOLA) });
    for name in ["zola", "zolla"] {
        let mut command = rig.command(Operation::Admit, REQ, "phases", ReturnMode::ReturnFinal);
        command.target = name.to_string();
        let op = rig.submit(command);
        let receipt = rig.receipt(op).clone();
        assert_eq!((receipt.classification, receipt.reason.as_deref()), (Classification::Invalid, Some("request_id_conflict")), "{name}");
        assert!(!receipt.retry_safe, "IDEM-7");
        let detail = receipt.detail.unwrap_or_default();
        assert!(detail.contains(&format!("admitted for agent {ZOLA}, which is gone: replay it with that agent id as the target")), "{detail}");
    }
    for exact_agent_id in [false, true] {
        // As the detail says: the id as the target (`agent send` has no `--exact-agent-id`).
        let mut by_id = rig.command(Operation::Admit, REQ, "phases", ReturnMode::ReturnFinal);
        by_id.target = ZOLA.to_string();
        by_id.exact_agent_id = exact_agent_id;
        let op = rig.submit(by_id);
        let replay = rig.receipt(op).clone();
        assert!(replay.replayed, "{replay:?}");
        assert_eq!(Receipt { replayed: false, ..replay }, original);
    }
    let other = rig.admit(REQ, "other text", ReturnMode::ReturnFinal);
    assert!(rig.receipt(other).detail.as_deref().is_some_and(|d| d.contains("different input")));
    let mut successor = zola_facts("inc-9", 200);
    successor.agent_id = agent_id("00000000-0000-4000-8000-000000000077");
    rig.input(Input::AgentUpserted(successor));
    let op = rig.admit(REQ, "phases", ReturnMode::ReturnFinal);
    assert!(rig.receipt(op).detail.as_deref().is_some_and(|d| d.contains("different input")), "a new agent of the name");
    assert_eq!(rig.writes(), 1);
}

/// IDEM-2: repeating the same id and input returns the stored receipt and writes nothing.
#[test]
fn idem_2_replay_returns_the_stored_receipt() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal);
    let original = rig.receipt(first).clone();
    assert_eq!(original.classification, Classification::Accepted);
    for _ in 0..3 {
        let again = rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal);
        let replay = rig.receipt(again).clone();
        assert!(replay.replayed);
        assert_eq!(Receipt { replayed: false, ..replay }, original);
    }
    assert_eq!(rig.writes(), 1);
    // Still one write after the request completed, too.
    rig.provider_turn("turn-1", "Complete phases 2 and 3", "done", 1000);
    let again = rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(again).classification, Classification::Accepted);
    assert_eq!(rig.writes(), 1);
}

/// IDEM-3: reusing an id with different input is `invalid` and writes nothing.
#[test]
fn idem_3_conflicting_reuse_is_rejected() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "one", ReturnMode::OneWay);
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Invalid);
    assert_eq!(receipt.reason.as_deref(), Some("request_id_conflict"));
    assert_eq!(rig.writes(), 1);
}

/// IDEM-4: one-way and return-final admissions are durable before their write.
#[test]
fn idem_4_registration_is_durable_before_the_write() {
    for mode in [ReturnMode::OneWay, ReturnMode::ReturnFinal] {
        let mut rig = Rig::with_idle_zola();
        rig.auto = Auto::Manual;
        rig.admit(REQ, "hi", mode);
        rig.refresh_next();
        assert!(rig.deliveries.is_empty(), "no write before the registration commits");
        rig.ack_next_persist(Ok(()));
        assert_eq!(rig.deliveries.len(), 1);
        let record = &rig.durable[&RequestId::parse(REQ).unwrap()];
        assert_eq!(record.phase, Phase::Registered);
        assert!(record.fingerprint.starts_with("v2:") && record.fingerprint.len() == 67);
    }
}

/// IDEM-5: the same id arriving while its admission is in flight joins it: both callers get
/// the same receipt and one write happens. The caller that joined repeated the id and wrote
/// nothing, so its copy says `replayed` (IDEM-2); the first caller's does not.
#[test]
fn idem_5_concurrent_same_id_joins() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let first = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let second = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let conflicting = rig.admit(REQ, "other", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(conflicting).reason.as_deref(), Some("request_id_conflict"));
    rig.settle();
    let (first, second) = (rig.receipt(first), rig.receipt(second));
    assert_eq!(first.classification, Classification::Accepted);
    assert!(!first.replayed, "the first caller's call wrote: {first:?}");
    assert!(second.replayed, "the joined caller wrote nothing: {second:?}");
    assert_eq!(&Receipt { replayed: false, ..second.clone() }, first, "otherwise the same receipt");
    assert_eq!(rig.writes(), 1);
}

/// IDEM-7: callers over the join cap are not served, but are never told that nothing was
/// written or that a retry is safe: the admission they could not join does write.
#[test]
fn idem_7_callers_over_the_join_cap_never_hear_not_written() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let cap = wakterm_engine::limits::MAX_JOINED_CALLERS;
    let joined: Vec<_> = (0..cap).map(|_| rig.admit(REQ, "hi", ReturnMode::ReturnFinal)).collect();
    let over: Vec<_> = (0..3).map(|_| rig.admit(REQ, "hi", ReturnMode::ReturnFinal)).collect();
    for op in &over {
        let receipt = rig.receipt(*op);
        assert_eq!(receipt.reason.as_deref(), Some("too_many_joined_callers"));
        assert!(receipt.prompt_written, "an over-cap caller was told nothing was written");
        assert!(!receipt.retry_safe, "an over-cap caller was told a retry is safe");
        assert_eq!(receipt.classification, Classification::Indeterminate);
    }
    rig.settle();
    assert_eq!(rig.writes(), 1, "the admission the over-cap callers could not join wrote");
    assert_eq!(rig.receipt(joined[0]).classification, Classification::Accepted);
    // A conflicting input on the written id is rejected, but never called retry-safe.
    let conflict_op = rig.admit(REQ, "other", ReturnMode::ReturnFinal);
    let conflict = rig.receipt(conflict_op);
    assert_eq!(conflict.reason.as_deref(), Some("request_id_conflict"));
    assert!(!conflict.prompt_written && !conflict.retry_safe);
}

/// IDEM-7: input the engine refuses (empty, a control character, a timeout without
/// return-final) under an id that was written is never called retry-safe, in memory or read
/// back from the store: a caller whose replay was mangled would resend the prompt under a new
/// id (a review saw it answered retry-safe). Under a new id the same refusal is retry-safe.
#[test]
fn idem_7_refused_input_under_a_written_id_is_never_retry_safe() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let in_flight = rig.admit(REQ, "   ", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(in_flight).reason.as_deref(), Some("prompt_empty"));
    assert!(!rig.receipt(in_flight).retry_safe, "the id is being written");
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "hi", "done", 1000);
    assert_eq!(rig.engine.requests_in_memory(), 0, "finished: only the store knows the id now");
    for prompt in ["   ", "hi \u{1b}[201~"] {
        let op = rig.admit(REQ, prompt, ReturnMode::ReturnFinal);
        let receipt = rig.receipt(op);
        assert_eq!(receipt.classification, Classification::Invalid, "{receipt:?}");
        assert!(!receipt.retry_safe && !receipt.prompt_written, "{receipt:?}");
    }
    let fresh = rig.admit(REQ2, "   ", ReturnMode::ReturnFinal);
    assert!(rig.receipt(fresh).retry_safe, "a new id's refused input is retry-safe");
    assert_eq!(rig.writes(), 1);
}

/// IDEM-6: a definitive rejection leaves the id free for a later attempt.
#[test]
fn idem_6_rejected_id_can_be_retried() {
    let mut rig = Rig::with_idle_zola();
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.turn = TurnState::Busy { turn: None };
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let busy = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(busy).classification, Classification::Busy);
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    let retry = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(retry).classification, Classification::Accepted);
    assert!(!rig.receipt(retry).replayed);
}

/// An admission of REQ that meets zola's turn between its refresh and its registration is
/// released, and the release's commit fails: a retry of it is due.
fn released_with_a_failed_release_commit() -> (Rig, OpId) {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.turn_started("turn-x", 1010);
    rig.ack_next_persist(Ok(())); // registration
    rig.ack_next_persist(Err("disk full".to_string())); // release: retried later
    (rig, op)
}

/// Zola's turn of `released_with_a_failed_release_commit` ends: the agent is idle again.
fn zola_idle_again(rig: &mut Rig) {
    let mut idle = idle_snapshot("inc-1", 100);
    idle.position = 1020;
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
    rig.turn_completed("turn-x", "x", 1020);
}

/// IDEM-6: a release whose commit fails still answers the (true) rejection, and the release is
/// re-committed until the store holds it.
#[test]
fn idem_6_failed_release_commit_is_retried() {
    let (mut rig, op) = released_with_a_failed_release_commit();
    assert_eq!(rig.receipt(op).classification, Classification::Busy);
    let id = RequestId::parse(REQ).unwrap();
    assert_eq!(rig.durable[&id].phase, Phase::Registered);
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.durable[&id].phase, Phase::Released);
    assert_eq!(rig.writes(), 0);
}

/// IDEM-6: the retry of a failed release never lands over the id's next admission. Found by
/// the simulator (seed 633367913): the retry came due while the re-admission's submitted
/// marker was committing (the record in memory still said `registered`), re-put the record
/// after that marker, and a restart then called the written request
/// `restart_in_write_window`, with a second `request.admitted`.
#[test]
fn idem_6_a_failed_release_retry_never_lands_over_a_later_admission() {
    let mut rig = released_with_a_failed_release_commit().0;
    zola_idle_again(&mut rig);
    let again = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // the new registration
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.turn_started("turn-y", 1030);
    assert_eq!(rig.persists.len(), 1, "the submitted marker is committing");
    // The release's retry comes due while it commits.
    rig.advance(limits::PERSIST_RETRY_MS);
    while !rig.persists.is_empty() {
        rig.ack_next_persist(Ok(()));
    }
    let id = RequestId::parse(REQ).unwrap();
    assert_eq!(rig.receipt(again).classification, Classification::Accepted);
    assert_eq!(rig.durable[&id].phase, Phase::Submitted, "a stale put landed over the submitted marker");
}

/// IDEM-3, IDEM-6: a released id keeps its fingerprint: the same input may try again, other
/// input is a conflict; and a failed re-registration restores the released record so its
/// pending release commit still lands.
#[test]
fn idem_6_released_id_keeps_its_fingerprint() {
    let mut rig = released_with_a_failed_release_commit().0;
    let other = rig.admit(REQ, "other input", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(other).reason.as_deref(), Some("request_id_conflict"));
    zola_idle_again(&mut rig);
    let again = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Err("disk full".to_string())); // the new registration fails
    assert_eq!(rig.receipt(again).classification, Classification::InternalFailure);
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.settle();
    let id = RequestId::parse(REQ).unwrap();
    assert_eq!(rig.durable[&id].phase, Phase::Released, "the release still reached the store");
}

/// IDEM-6: a released id whose version 1 fingerprint (no agent in it) matches the input is
/// not tried again for another agent its name now resolves to: the store keeps the row's
/// agent and refused that registration on every try (`store_commit_failed`, retry-safe, for
/// good). It is a conflict, nothing written.
#[test]
fn idem_6_a_released_version_1_id_is_not_tried_for_another_agent() {
    let (mut rig, _) = released_with_a_failed_release_commit();
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.settle();
    let id = RequestId::parse(REQ).unwrap();
    assert_eq!(rig.durable[&id].phase, Phase::Released);
    let command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
    rig.durable.get_mut(&id).unwrap().fingerprint = wakterm_engine::fingerprint::fingerprint_v1(&command);
    rig.crash_and_recover();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.input(Input::AgentRemoved { agent_id: agent_id(ZOLA) });
    let other = AgentId::parse("0b5e3c1a-1111-4222-8333-0000000000ff").unwrap();
    rig.input(Input::AgentUpserted(AgentFacts { agent_id: other.clone(), ..zola_facts("inc-1", 900) }));
    rig.snapshots.insert(other, Ok(idle_snapshot("inc-1", 900)));
    let refreshes = rig.refreshes.len();
    let again = rig.submit(command);
    assert_eq!(rig.receipt(again).reason.as_deref(), Some("request_id_conflict"), "{:?}", rig.receipt(again));
    assert_eq!((rig.writes(), rig.refreshes.len()), (0, refreshes), "nothing written or looked at");
}

/// IDEM-1: a record written before fingerprint version 2 still replays for its own input (its
/// fingerprint is compared by the version 1 rule) and stays a conflict for other input.
#[test]
fn idem_1_version_1_records_still_replay() {
    let mut rig = Rig::with_idle_zola();
    let command = rig.command(Operation::Admit, REQ, "old input", ReturnMode::OneWay);
    let v1 = wakterm_engine::fingerprint::fingerprint_v1(&command);
    let first = rig.submit(command);
    assert_eq!(rig.receipt(first).classification, Classification::Accepted);
    let id = RequestId::parse(REQ).unwrap();
    rig.durable.get_mut(&id).unwrap().fingerprint = v1;
    rig.crash_and_recover();
    let again = rig.admit(REQ, "old input", ReturnMode::OneWay);
    assert!(rig.receipt(again).replayed, "{:?}", rig.receipt(again));
    let other = rig.admit(REQ, "other input", ReturnMode::OneWay);
    assert_eq!(rig.receipt(other).reason.as_deref(), Some("request_id_conflict"));
    assert_eq!(rig.writes(), 1);
}
