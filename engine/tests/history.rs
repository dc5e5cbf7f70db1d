//! Bounded request history (HIST-*): finished requests leave the engine's memory and are read
//! back from the store when named again.

mod support;
use support::*;
use wakterm_engine::*;

fn id(text: &str) -> RequestId {
    RequestId::parse(text).unwrap()
}

/// HIST-1: a completed return-final request and a settled one-way request leave memory once
/// durable; the store keeps them.
#[test]
fn hist_1_finished_requests_leave_memory() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    assert_eq!(rig.engine.requests_in_memory(), 1, "an open request stays");
    rig.provider_turn("turn-1", "first", "done", 1000);
    assert_eq!(rig.terminal_for(REQ).len(), 1);
    rig.admit(REQ2, "second", ReturnMode::OneWay);
    rig.user_message("turn-2", "second", 2010);
    assert_eq!(rig.engine.requests_in_memory(), 0, "HIST-1: nothing finished stays in memory");
    assert!(rig.engine.request(&id(REQ)).is_none());
    assert_eq!(rig.durable[&id(REQ)].phase, Phase::Terminal);
    assert_eq!(rig.durable[&id(REQ2)].phase, Phase::Settled);
}

/// HIST-1 / IDEM-2 / IDEM-3: a finished id named again is read back: the same input replays
/// the stored receipt and writes nothing, other input is a conflict; memory stays empty.
#[test]
fn hist_1_idem_2_replays_of_finished_requests_come_from_the_store() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    let original = rig.receipt(first).clone();
    rig.provider_turn("turn-1", "first", "done", 1000);
    assert_eq!(rig.engine.requests_in_memory(), 0);
    let again = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    let replay = rig.receipt(again).clone();
    assert!(replay.replayed);
    assert_eq!(Receipt { replayed: false, ..replay }, original);
    let other = rig.admit(REQ, "changed", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(other).reason.as_deref(), Some("request_id_conflict"));
    assert_eq!(rig.writes(), 1);
    assert_eq!(rig.engine.requests_in_memory(), 0, "the record read back left again");
}

/// HIST-2: calls naming an id the engine does not hold wait behind ONE store lookup, so two
/// of them can never both miss and write twice; the first registers, the second joins it.
#[test]
fn hist_2_calls_for_one_id_share_one_lookup() {
    let mut rig = Rig::with_idle_zola();
    rig.hold_loads = true;
    let first = rig.admit(REQ, "hi", ReturnMode::OneWay);
    let second = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert_eq!(rig.loads.len(), 1, "one lookup for both");
    assert!(!rig.has_receipt(first) && !rig.has_receipt(second), "parked, nothing decided");
    assert_eq!(rig.writes(), 0);
    rig.answer_next_load(None);
    rig.user_message("turn-1", "hi", 1010);
    assert_eq!(rig.receipt(first).classification, Classification::Accepted);
    assert_joined(rig.receipt(first), rig.receipt(second));
    assert_eq!(rig.writes(), 1);
}

/// HIST-2: a caller's `generated_id` skips no lookup. A socket client that reused a finished
/// request's id with the flag set had the prompt written a second time, the stored row moved
/// back to `bound` and its second terminal event refused for good (a review reproduced it).
/// A fresh id skips the lookup by HIST-5's filter, flag or not.
#[test]
fn hist_2_a_generated_flag_never_skips_the_lookup_of_a_stored_id() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    let original = rig.receipt(first).clone();
    rig.provider_turn("turn-1", "first", "done", 1000);
    assert_eq!(rig.engine.requests_in_memory(), 0, "finished, it left memory");
    let mut again = rig.command(Operation::Send, REQ, "first", ReturnMode::ReturnFinal);
    again.generated_id = true;
    let op = rig.submit(again);
    let replay = rig.receipt(op).clone();
    assert!(replay.replayed, "{replay:?}");
    assert_eq!(Receipt { replayed: false, ..replay }, original);
    assert_eq!(rig.writes(), 1, "never written twice");
    // With the seed complete, a fresh id needs no lookup whatever the flag says.
    let mut rig = Rig::with_idle_zola();
    rig.hold_loads = true;
    seed(&mut rig, &[OTHER], true);
    let mut fresh = rig.command(Operation::Send, REQ, "hi", ReturnMode::OneWay);
    fresh.generated_id = true;
    rig.submit(fresh);
    assert!(rig.loads.is_empty());
    assert_eq!(rig.writes(), 1);
}

/// HIST-3: a lookup that fails writes nothing and answers `indeterminate`: the id may be a
/// written one that left memory (IDEM-7), so the receipt is never retry-safe.
#[test]
fn hist_3_a_failed_lookup_writes_nothing_and_claims_nothing() {
    let mut rig = Rig::with_idle_zola();
    rig.hold_loads = true;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.answer_next_load(Some("disk I/O error"));
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Indeterminate);
    assert_eq!(receipt.reason.as_deref(), Some("history_unreadable"));
    assert!(!receipt.retry_safe, "IDEM-7: the id may have been written before it left memory");
    assert_eq!(receipt.write_state, WriteState::Unknown);
    assert_eq!(rig.writes(), 0);
    assert_eq!(rig.engine.requests_in_memory(), 0);
}

/// HIST-2: a cancel of a finished, evicted request reads it back and answers its state.
#[test]
fn hist_2_cancel_of_a_finished_request_answers_from_the_store() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "first", "done", 1000);
    let sequence = rig.terminal_for(REQ)[0].terminal_event_sequence;
    rig.input(Input::Cancel(CancelCommand { op: OpId(900), request_id: REQ.to_string() }));
    let (_, outcome) = rig.cancels.last().unwrap();
    assert_eq!(*outcome, CancelOutcome::AlreadyTerminal { state: TerminalState::Completed, terminal_event_sequence: sequence });
    rig.input(Input::Cancel(CancelCommand { op: OpId(901), request_id: OTHER.to_string() }));
    assert!(matches!(rig.cancels.last().unwrap().1, CancelOutcome::NotFound { .. }));
}

/// HIST-1: memory follows open work, not history: thousands of finished admissions leave
/// nothing behind, so `capacity_exhausted` is unreachable in steady state.
#[test]
fn hist_1_memory_does_not_grow_with_history() {
    let mut rig = Rig::with_idle_zola();
    for n in 0..2_000u64 {
        let request_id = format!("fe57dc90-994e-4e73-b09c-{:012x}", n);
        let prompt = format!("p{n}");
        let op = rig.admit(&request_id, &prompt, ReturnMode::OneWay);
        rig.user_message(&format!("turn-{n}"), &prompt, 2_000 + n * 10);
        rig.turn_completed(&format!("turn-{n}"), "ok", 2_005 + n * 10);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "admission {n}");
        assert_eq!(rig.engine.requests_in_memory(), 0, "after {n} admissions");
    }
    assert_eq!(rig.durable.len(), 2_000);
}

fn seed(rig: &mut Rig, ids: &[&str], complete: bool) {
    rig.input(Input::HistorySeed { ids: ids.iter().map(|text| id(text)).collect(), complete });
}

/// HIST-5: once the seed of the stored ids is complete, an id it does not hold is new: no
/// lookup, the admission goes straight on.
#[test]
fn hist_5_a_seeded_engine_admits_a_new_id_without_a_lookup() {
    let mut rig = Rig::with_idle_zola();
    rig.hold_loads = true;
    seed(&mut rig, &[OTHER], true);
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert!(rig.loads.is_empty(), "HIST-5: a new id needs no lookup");
    rig.user_message("turn-1", "hi", 1010);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    assert_eq!(rig.writes(), 1);
}

/// HIST-5: until the last chunk says `complete`, the seed proves nothing: ids are looked up.
#[test]
fn hist_5_an_incomplete_seed_still_looks_ids_up() {
    let mut rig = Rig::with_idle_zola();
    rig.hold_loads = true;
    seed(&mut rig, &[OTHER], false);
    rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert_eq!(rig.loads.len(), 1, "a seed still arriving (or one that failed) skips nothing");
}

/// HIST-5: after a restart, a stored id in the seed is looked up, so naming an id the previous
/// daemon finished still answers from the store and writes nothing; the seed is what stands
/// between that id and a second write (without it in the seed, the same call is taken for new).
#[test]
fn hist_5_a_seeded_id_is_looked_up_after_a_restart_and_replays() {
    for seeded in [true, false] {
        let mut rig = Rig::with_idle_zola();
        let first = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
        let original = rig.receipt(first).clone();
        rig.provider_turn("turn-1", "first", "done", 1000);
        rig.crash_and_recover_open_only();
        rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
        rig.input(Input::StartupComplete);
        assert!(!rig.engine.stored_ids().may_contain(&id(REQ)), "the new engine never saw REQ");
        rig.hold_loads = true;
        let ids: &[&str] = if seeded { &[OTHER, REQ] } else { &[OTHER] };
        seed(&mut rig, ids, true);
        let again = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
        if !seeded {
            assert!(rig.loads.is_empty(), "an id missing from the seed is taken for new: the seed must hold every stored id");
            continue;
        }
        assert_eq!(rig.loads.len(), 1, "a seeded id is looked up");
        rig.answer_next_load(None);
        assert!(rig.receipt(again).replayed);
        assert_eq!(Receipt { replayed: false, ..rig.receipt(again).clone() }, original);
        assert_eq!(rig.writes(), 1, "the replay wrote nothing");
    }
}

/// HIST-5: an id this engine wrote after the seed is in the filter from its first commit
/// request on: once it finished and left memory, naming it again is looked up and replays.
#[test]
fn hist_5_an_id_written_after_the_seed_is_looked_up_once_it_left_memory() {
    let mut rig = Rig::with_idle_zola();
    seed(&mut rig, &[], true);
    let first = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "first", "done", 1000);
    assert_eq!(rig.engine.requests_in_memory(), 0);
    rig.hold_loads = true;
    let again = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    assert_eq!(rig.loads.len(), 1, "HIST-5: the engine's own write put the id in the filter");
    rig.answer_next_load(None);
    assert!(rig.receipt(again).replayed);
    assert_eq!(rig.receipt(again).request_id, rig.receipt(first).request_id);
    assert_eq!(rig.writes(), 1);
}

/// HIST-2 before HIST-5: a call for an id whose lookup is in flight waits behind it, even if
/// the seed completed meanwhile and does not hold the id.
#[test]
fn hist_5_a_call_behind_a_lookup_in_flight_waits_for_it() {
    let mut rig = Rig::with_idle_zola();
    rig.hold_loads = true;
    let first = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert_eq!(rig.loads.len(), 1);
    seed(&mut rig, &[], true);
    let second = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert_eq!(rig.loads.len(), 1, "still one lookup");
    assert!(!rig.has_receipt(first) && !rig.has_receipt(second), "both parked behind it");
    rig.answer_next_load(None);
    rig.user_message("turn-1", "hi", 1010);
    assert_joined(rig.receipt(first), rig.receipt(second));
    assert_eq!(rig.writes(), 1);
}

/// IDEM-5: the caller that joined gets the first caller's receipt, saying `replayed` (it wrote
/// nothing).
fn assert_joined(first: &Receipt, joined: &Receipt) {
    assert!(!first.replayed && joined.replayed, "{first:?} / {joined:?}");
    assert_eq!(&Receipt { replayed: false, ..joined.clone() }, first);
}
