//! SUB-1..SUB-6: `session action=submit` (seed 003) as engine transitions, and insta
//! snapshots of every receipt shape, produced by driving the engine.

mod support;
use proptest::prelude::*;
use support::*;
use wakterm_engine::submit::{clamp_timeout_ms, submit_steps};
use wakterm_engine::*;

fn boundary() -> EnterBoundary {
    EnterBoundary { output_offset: 5_000, screen_digest: "screen-at-enter".to_string(), generation: 0, writes: 3, holder: "9.h1".to_string() }
}

/// A sample that moved after the boundary: new output and another screen.
fn moved() -> PaneSample {
    PaneSample {
        output_end: 5_240,
        screen_digest: "screen-after".to_string(),
        generation: 0,
        alive: true,
        writes: 3,
        holder: "9.h1".to_string(),
        composer: Composer::Empty,
        elapsed_ms: 120,
    }
}

fn quiet() -> PaneSample {
    PaneSample { output_end: 5_000, screen_digest: "screen-at-enter".to_string(), elapsed_ms: 3_000, ..moved() }
}

/// Drives a submit to an idle zola through its refresh and its write, up to the watch.
fn watching(text: &str) -> (Rig, OpId) {
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text(text, None);
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    assert_eq!(rig.watches.len(), 1, "a complete write is watched");
    (rig, op)
}

fn receipt_json(rig: &Rig, op: OpId) -> serde_json::Value {
    serde_json::to_value(rig.submit_receipt(op)).unwrap()
}

// SUB-2: the split sequence is Ctrl-U, the bracketed paste, CR, with 50 ms gaps.
#[test]
fn sub_2_the_write_is_ctrl_u_then_the_paste_then_cr() {
    let write = submit_steps("/clear");
    assert_eq!(write.steps, vec![b"\x15".to_vec(), b"\x1b[200~/clear\x1b[201~".to_vec(), b"\r".to_vec()]);
    assert_eq!(write.gap_ms, 50);
    let mut rig = Rig::with_idle_zola();
    rig.submit_text("hello there", None);
    let (_, _, asked) = rig.split_writes.front().expect("the engine asks for the split write");
    assert_eq!(asked, &submit_steps("hello there"));
}

// SUB-1, SUB-4, SUB-5: an idle agent, a complete write and movement after the Enter: one
// acknowledged receipt with its evidence; the turn epoch advanced.
#[test]
fn sub_1_acknowledged_after_post_enter_movement() {
    let (mut rig, op) = watching("fix the tests");
    assert!(!rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_some(), "SUB-2: the claim ends with the write's outcome");
    rig.answer_watch(Ok(moved()));
    let receipt = rig.submit_receipt(op);
    assert_eq!(receipt.status, SubmitStatus::Acknowledged);
    assert!(receipt.acknowledged && !receipt.retry_safe);
    assert_eq!(receipt.write_state, WriteState::Complete);
    let evidence = receipt.evidence.as_ref().unwrap();
    assert_eq!((evidence.enter_offset, evidence.output_offset, evidence.bytes_after_enter), (5_000, 5_240, 240));
    assert_eq!(receipt.turn_epoch, Some(1));
    assert_eq!(rig.engine.submissions_in_flight(), 0);
}

// SUB-4: the acknowledgement rule: new output AND a changed screen, same process, no later
// write. A reaction before the boundary is in the boundary's screen: only a timeout.
#[test]
fn sub_4_judge_needs_new_output_and_a_changed_screen() {
    let b = boundary();
    assert_eq!(judge(&b, &moved()), Judgement::Acknowledged);
    assert_eq!(judge(&b, &quiet()), Judgement::Pending);
    let output_only = PaneSample { screen_digest: b.screen_digest.clone(), ..moved() };
    assert_eq!(judge(&b, &output_only), Judgement::Pending, "output that changes nothing visible is no evidence");
    let screen_only = PaneSample { output_end: b.output_offset, ..moved() };
    assert_eq!(judge(&b, &screen_only), Judgement::Pending, "a screen without output after the boundary is the boundary's own");
    let redrawn = PaneSample { composer: Composer::Draft, ..moved() };
    assert_eq!(judge(&b, &redrawn), Judgement::Pending, "text still in the composer after the Enter is no submission");
    // A composer the screen adapter cannot read proves nothing either: a 30-line command whose
    // Enter a stalled TUI lost was redrawn late as such a composer and acknowledged (a review).
    assert_eq!(judge(&b, &PaneSample { composer: Composer::Unknown, ..moved() }), Judgement::Pending, "no evidence the composer was left");
    // Nor does a question: a draft whose first line reads `1. ...` or holds `(y/n)` reads as one.
    assert_eq!(judge(&b, &PaneSample { composer: Composer::Question, ..moved() }), Judgement::Pending, "a draft the adapter reads as a question");
    assert_eq!(judge(&b, &PaneSample { alive: false, ..moved() }), Judgement::Exited);
    assert_eq!(judge(&b, &PaneSample { generation: 1, ..moved() }), Judgement::Exited);
    // A holder started later at the same socket counts from 0 again: its generation and writes
    // may match the boundary's, and its output pass it, without any reaction to our Enter.
    assert_eq!(judge(&b, &PaneSample { holder: "12.h2".to_string(), ..moved() }), Judgement::Exited);
    assert_eq!(judge(&b, &PaneSample { writes: 4, ..moved() }), Judgement::Superseded);
}

// SUB-4: the timeout is clamped to 250..=10000, default 3000, and reaches the watch.
#[test]
fn sub_4_timeout_is_clamped() {
    assert_eq!(clamp_timeout_ms(None), 3_000);
    assert_eq!(clamp_timeout_ms(Some(1)), 250);
    assert_eq!(clamp_timeout_ms(Some(99_999)), 10_000);
    assert_eq!(clamp_timeout_ms(Some(700)), 700);
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("hi", Some(1));
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    assert_eq!(rig.watches.front().unwrap().3, 250);
    rig.answer_watch(Ok(quiet()));
    assert_eq!(rig.submit_receipt(op).timeout_ms, 250);
}

// SUB-4, SUB-5: no movement by the deadline: written, not acknowledged, not retry-safe.
#[test]
fn sub_5_timeout_is_complete_unacknowledged_and_not_retry_safe() {
    let (mut rig, op) = watching("hi");
    rig.answer_watch(Ok(quiet()));
    let receipt = rig.submit_receipt(op);
    assert_eq!(receipt.status, SubmitStatus::Unacknowledged);
    assert_eq!((receipt.write_state, receipt.acknowledged, receipt.retry_safe), (WriteState::Complete, false, false));
    assert_eq!(receipt.reason.as_deref(), Some("no_post_enter_movement"));
}

// SUB-4, SUB-5: a terminal that moved after the Enter while the composer did not read empty is
// unacknowledged for that reason, not "did not move" (a review read a false statement there).
#[test]
fn sub_5_movement_with_the_composer_not_left_says_so() {
    for composer in [Composer::Unknown, Composer::Question, Composer::Draft] {
        let (mut rig, op) = watching("hi");
        rig.answer_watch(Ok(PaneSample { composer, ..moved() }));
        let receipt = rig.submit_receipt(op);
        assert_eq!((receipt.status, receipt.retry_safe), (SubmitStatus::Unacknowledged, false), "{composer:?}");
        assert_eq!(receipt.reason.as_deref(), Some("composer_not_left"), "{composer:?}");
        assert_eq!(receipt.composer_state, Some(composer));
    }
}

// SUB-4: a watch that never answers ends at the engine's own bound, never as evidence.
#[test]
fn sub_4_an_unanswered_watch_ends_at_the_engine_bound() {
    let (mut rig, op) = watching("hi");
    rig.advance(3_000 + 1_999);
    assert!(!rig.submit_receipts.contains_key(&op), "the runtime still has time");
    rig.advance(1);
    let receipt = rig.submit_receipt(op);
    assert_eq!(receipt.reason.as_deref(), Some("observation_lost"));
    assert!(!receipt.retry_safe && !receipt.acknowledged);
    rig.answer_watch(Ok(moved())); // late: ignored, still one receipt
    assert_eq!(rig.submit_receipts[&op].len(), 1);
}

// SUB-3: every state that rejects, rejects before the first byte: no write is asked for,
// retry-safe, and a draft is never touched (no Ctrl-U went out).
#[test]
fn sub_3_rejections_happen_before_the_first_byte() {
    let cases: Vec<(&str, Box<dyn Fn(&mut ObserverSnapshot)>)> = vec![
        ("composer_not_empty", Box::new(|s| s.composer = Composer::Draft)),
        ("interactive_question", Box::new(|s| s.composer = Composer::Question)),
        ("composer_unconfirmed", Box::new(|s| s.composer = Composer::Unknown)),
        ("turn_active", Box::new(|s| s.turn = TurnState::Busy { turn: Some(turn("turn-9")) })),
        ("turn_state_unknown", Box::new(|s| s.turn = TurnState::Unknown)),
        ("observer_unavailable", Box::new(|s| s.status = ObserverStatus::Unavailable { reason: "two rollouts".into() })),
    ];
    for (reason, change) in cases {
        let mut rig = Rig::with_idle_zola();
        let mut snapshot = idle_snapshot("inc-1", 100);
        change(&mut snapshot);
        rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
        let op = rig.submit_text("hi", None);
        let receipt = rig.submit_receipt(op);
        assert_eq!(receipt.reason.as_deref(), Some(reason));
        assert_eq!((receipt.status, receipt.write_state, receipt.retry_safe), (SubmitStatus::Rejected, WriteState::NotStarted, true));
        assert!(rig.split_writes.is_empty() && rig.written.is_empty(), "{reason}: nothing was written");
    }
}

// SUB-1, ADM-4: the split write names the pane's write count read with the screen the check
// decided on, so the holder refuses it (nothing written) when input reached the pane since: a
// draft typed after the look, or raw `session input`, would be erased by its Ctrl-U (MCP-4's
// gap until 2026-12-05: the submit named no count). The refusal is `busy` / `input_since_look`,
// retry-safe, says nothing of the composer, and frees the agent.
#[test]
fn sub_1_the_split_write_names_the_looks_write_count_and_a_refusal_writes_nothing() {
    let mut rig = Rig::with_idle_zola();
    rig.pane_writes = Some(11);
    let op = rig.submit_text("hi", None);
    assert_eq!(rig.expected_writes, vec![Some(11)]);
    rig.answer_split_write(SplitOutcome::InputSinceLook { detail: "input reached the pane since the writer's look".to_string() });
    let receipt = rig.submit_receipt(op);
    assert_eq!((receipt.classification, receipt.reason.as_deref()), (Some(Classification::Busy), Some("input_since_look")), "someone typed: busy, as a draft seen by the look is");
    assert_eq!((receipt.status, receipt.write_state, receipt.retry_safe), (SubmitStatus::Rejected, WriteState::NotStarted, true));
    assert_eq!(receipt.composer_state, None, "the composer is no longer known to be empty: {receipt:?}");
    assert!(rig.written.is_empty(), "nothing was written");
    let again = rig.submit_text("hi", None);
    assert_eq!(rig.expected_writes, vec![Some(11), Some(11)], "the claim was released: a retry writes");
    assert!(!rig.submit_receipts.contains_key(&again), "the retry is writing, not refused");
}

// SUB-3: bad text and an unknown agent are answered at once, without a refresh.
#[test]
fn sub_3_bad_text_and_unknown_agents_change_nothing() {
    let mut rig = Rig::with_idle_zola();
    for (text, reason) in [("", "prompt_empty"), ("a\x1b[201~b", "prompt_control_character"), ("a\rb", "prompt_control_character")] {
        let op = rig.submit_text(text, None);
        assert_eq!(rig.submit_receipt(op).reason.as_deref(), Some(reason));
        assert_eq!(rig.submit_receipt(op).classification, Some(Classification::Invalid));
    }
    let op = OpId(900);
    let command = SubmitCommand { op, submission_id: "5b0b1e00-0000-4000-8000-000000000900".into(), target: "nobody".into(), exact_agent_id: false, text: "hi".into(), timeout_ms: None };
    rig.input(Input::Submit(command));
    assert_eq!(rig.submit_receipt(op).reason.as_deref(), Some("agent_unknown"));
    assert!(rig.refreshes.is_empty() && rig.split_writes.is_empty() && rig.written.is_empty());
}

// SUB-1 / ADM-12: a submit takes the admission claim: a second submit, or an admission, is
// refused before any byte while it checks and writes; a peer after the write meets
// `awaiting_turn_start` (the agent is busy until its turn starts).
#[test]
fn sub_1_submits_and_admissions_share_one_claim() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let first = rig.submit_text("first", None);
    let second = rig.submit_text("second", None);
    assert_eq!(rig.submit_receipt(second).reason.as_deref(), Some("admission_in_progress"));
    let admission = rig.admit(REQ, "an admission", ReturnMode::OneWay);
    assert_eq!(rig.receipt(admission).reason.as_deref(), Some("admission_in_progress"));
    rig.refresh_next();
    assert_eq!(rig.split_writes.len(), 1);
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    let third = rig.submit_text("third", None);
    rig.refresh_next();
    assert_eq!(rig.submit_receipt(third).reason.as_deref(), Some("awaiting_turn_start"));
    rig.answer_watch(Ok(moved()));
    assert!(rig.submit_receipt(first).acknowledged);
    // The turn the submit started ends the wait: the agent takes the next one.
    rig.turn_started("turn-1", 1_010);
    rig.user_message("turn-1", "first", 1_020);
    rig.turn_completed("turn-1", "done", 1_030);
    let fourth = rig.submit_text("fourth", None);
    rig.refresh_next();
    assert_eq!(rig.split_writes.len(), 1, "{:?}", rig.submit_receipts.get(&fourth));
    assert_eq!(rig.written.len(), 1, "exactly one of the racing calls wrote");
}

// SUB-2: a turn the submit starts may be observed before the writer answers; it still ends
// the wait for that turn (the wait opened before the first byte).
#[test]
fn sub_2_a_turn_seen_during_the_write_ends_the_wait() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("hi", None);
    rig.turn_started("turn-1", 1_010);
    rig.user_message("turn-1", "hi", 1_020);
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    rig.answer_watch(Ok(moved()));
    assert!(rig.submit_receipt(op).acknowledged);
    rig.turn_completed("turn-1", "done", 1_030);
    let view = rig.engine.catalog_view(&agent_id(ZOLA)).unwrap();
    assert_eq!(view.state, AgentState::Idle, "no stale awaiting_turn_start: {view:?}");
}

// SUB-2, ADM-5 (PTY): the wait a submit's write opens ends at the user message carrying its
// text, not at another prompt's turn past the floor (`AgentEntry::awaiting_prompts`; the
// admissions' rule: `adm_5_a_turn_that_does_not_carry_the_written_prompt_ends_no_pty_wait`).
#[test]
fn sub_2_only_the_submits_own_prompt_ends_its_wait() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("hi", None);
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    rig.answer_watch(Ok(moved()));
    assert!(rig.submit_receipt(op).acknowledged);
    rig.turn_started("turn-h", 1_010);
    rig.user_message("turn-h", "a human's prompt", 1_020);
    assert!(rig.awaiting_turn_start(), "another prompt's turn");
    rig.user_message("turn-h", "hi", 1_040); // steered into it
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
}

// ADM-5, SUB-1, SUB-2: a write whose result was lost may still run, and after a stall it may
// even start as the engine gives up on it (every deadline fires at once; found by the
// simulator). So the caller is answered at its bound, but the claim stays until the write's
// late outcome, and the wait for its turn runs from that outcome: an idle-looking refresh a
// grace period after the write began does not end it.
#[test]
fn sub_2_a_lost_write_holds_the_agent_until_its_outcome() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("hi", None);
    rig.advance(limits::AWAITING_TURN_GRACE_MS + 5_000); // one step: the stall
    assert_eq!(rig.submit_receipt(op).reason.as_deref(), Some("write_result_lost"));
    // Until the outcome, even a plain send (which may steer a running turn) meets the claim.
    let send = rig.command(Operation::Send, "5e1d7f3a-2b4c-4d5e-8f60-718293a4b5c6", "steer", ReturnMode::OneWay);
    let send = rig.submit(send);
    assert_eq!(rig.receipt(send).reason.as_deref(), Some("admission_in_progress"), "{:?}", rig.receipt(send));
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    assert_eq!(rig.submit_receipts[&op].len(), 1, "the caller was answered once");
    assert!(rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_none(), "the outcome ends the hold");
    let admission = rig.admit(REQ, "an admission", ReturnMode::OneWay);
    assert_eq!(rig.receipt(admission).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(admission));
    assert!(rig.deliveries.is_empty(), "nothing written after the lost write");
    // A grace period after the write's end, an idle agent with an empty composer ends the wait.
    rig.advance(limits::AWAITING_TURN_GRACE_MS + 1);
    let later = rig.admit("7d9c4a51-7d53-4c9e-8f43-6f9d1a2b3c4d", "later", ReturnMode::OneWay);
    assert!(rig.receipt(later).reason.as_deref() != Some("awaiting_turn_start"), "{:?}", rig.receipt(later));
}

// SUB-1: a lost write whose outcome never comes holds the claim only for its bound.
#[test]
fn sub_1_a_lost_write_without_an_outcome_frees_the_agent_at_its_bound() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("hi", None);
    rig.advance(limits::DELIVERY_TIMEOUT_MS + 1_000);
    assert_eq!(rig.submit_receipt(op).reason.as_deref(), Some("write_result_lost"));
    assert!(rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_some(), "held while the write may run");
    rig.advance(limits::LOST_WRITE_HOLD_MS + 1);
    assert!(rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_none(), "released at the bound");
    assert_eq!(rig.engine.submissions_in_flight(), 0);
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() }); // too late: ignored
    assert_eq!(rig.submit_receipts[&op].len(), 1);
}

// SUB-5: how a write that did not complete is reported.
#[test]
fn sub_5_write_failures_are_never_retry_safe_and_refusals_always_are() {
    let cases = [
        (SplitOutcome::Failed { bytes_written: 7, error: "EIO".into() }, WriteState::Partial, false),
        (SplitOutcome::Failed { bytes_written: 0, error: "EIO".into() }, WriteState::Failed, false),
        (SplitOutcome::Refused { reason: "process changed".into() }, WriteState::NotStarted, true),
    ];
    for (outcome, state, retry_safe) in cases {
        let mut rig = Rig::with_idle_zola();
        let op = rig.submit_text("hi", None);
        rig.answer_split_write(outcome);
        let receipt = rig.submit_receipt(op);
        assert_eq!((receipt.write_state, receipt.retry_safe), (state, retry_safe));
        assert!(rig.watches.is_empty(), "only a complete write is watched");
        let awaiting = rig.awaiting_turn_start();
        assert_eq!(awaiting, !retry_safe, "ADM-5: bytes that may be in the composer keep the agent busy");
    }
    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("hi", None);
    rig.advance(10_000 + 100);
    let receipt = rig.submit_receipt(op);
    assert_eq!((receipt.write_state, receipt.reason.as_deref()), (WriteState::Unknown, Some("write_result_lost")));
}

// SUB-6: no durable registry: a submit commits nothing and leaves nothing in memory.
#[test]
fn sub_6_a_submit_commits_nothing() {
    let mut rig = Rig::with_idle_zola();
    rig.hold_events = true;
    let op = rig.submit_text("hi", None);
    rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
    rig.answer_watch(Ok(moved()));
    assert!(rig.submit_receipt(op).acknowledged);
    assert!(rig.persists.is_empty() && rig.event_persists.is_empty() && rig.durable.is_empty());
    assert_eq!(rig.engine.requests_in_memory(), 0);
    assert!(rig.engine.is_quiescent());
}

proptest! {
    // SUB-4, SUB-5: whatever the writer and the watch answer, the receipt is consistent
    // (assert_consistent runs on every receipt in the rig), acknowledged exactly when `judge`
    // says so, and retry-safe exactly when nothing was written.
    #[test]
    fn sub_5_receipts_follow_the_evidence(
        outcome in 0u8..3, bytes in 0u64..40, moved_output in any::<bool>(), changed_screen in any::<bool>(),
        alive in any::<bool>(), respawned in any::<bool>(), foreign in any::<bool>(), timeout in proptest::option::of(0u64..20_000),
        other_holder in any::<bool>(),
    ) {
        let mut rig = Rig::with_idle_zola();
        let op = rig.submit_text("hi", timeout);
        let sample = PaneSample {
            output_end: if moved_output { 5_100 } else { 5_000 },
            screen_digest: if changed_screen { "other".into() } else { boundary().screen_digest },
            generation: u64::from(respawned),
            alive,
            writes: 3 + u64::from(foreign),
            holder: if other_holder { "12.h2".into() } else { boundary().holder },
            composer: Composer::Empty,
            elapsed_ms: 10,
        };
        match outcome {
            0 => {
                rig.answer_split_write(SplitOutcome::Complete { boundary: boundary() });
                rig.answer_watch(Ok(sample.clone()));
                let receipt = rig.submit_receipt(op);
                prop_assert_eq!(receipt.acknowledged, judge(&boundary(), &sample) == Judgement::Acknowledged);
                prop_assert!(!receipt.retry_safe);
            }
            1 => {
                rig.answer_split_write(SplitOutcome::Failed { bytes_written: bytes, error: "EIO".into() });
                prop_assert!(!rig.submit_receipt(op).retry_safe);
            }
            _ => {
                rig.answer_split_write(SplitOutcome::Refused { reason: "gone".into() });
                prop_assert!(rig.submit_receipt(op).retry_safe);
            }
        }
        prop_assert_eq!(rig.submit_receipt(op).timeout_ms, clamp_timeout_ms(timeout));
        prop_assert!(rig.engine.is_quiescent() || !rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_some());
    }
}

// SUB-5: one insta snapshot per receipt shape.
#[test]
fn sub_5_receipt_snapshots() {
    let (mut rig, op) = watching("fix the tests");
    rig.answer_watch(Ok(moved()));
    insta::assert_json_snapshot!("submit_acknowledged", receipt_json(&rig, op));

    let (mut rig, op) = watching("fix the tests");
    rig.answer_watch(Ok(quiet()));
    insta::assert_json_snapshot!("submit_timeout", receipt_json(&rig, op));

    let (mut rig, op) = watching("fix the tests");
    rig.answer_watch(Ok(PaneSample { alive: false, ..moved() }));
    insta::assert_json_snapshot!("submit_session_exited", receipt_json(&rig, op));

    let (mut rig, op) = watching("fix the tests");
    rig.answer_watch(Ok(PaneSample { writes: 4, ..moved() }));
    insta::assert_json_snapshot!("submit_superseded", receipt_json(&rig, op));

    let (mut rig, op) = watching("fix the tests");
    rig.answer_watch(Err("the pane could not be read: holder gone".into()));
    insta::assert_json_snapshot!("submit_observation_lost", receipt_json(&rig, op));

    let mut rig = Rig::with_idle_zola();
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.composer = Composer::Draft;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let op = rig.submit_text("fix the tests", None);
    insta::assert_json_snapshot!("submit_rejected_draft", receipt_json(&rig, op));

    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("", Some(50));
    insta::assert_json_snapshot!("submit_rejected_invalid", receipt_json(&rig, op));

    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("fix the tests", None);
    rig.answer_split_write(SplitOutcome::Refused { reason: "the pane runs a different process than the one checked".into() });
    insta::assert_json_snapshot!("submit_rejected_refused", receipt_json(&rig, op));

    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("fix the tests", None);
    rig.answer_split_write(SplitOutcome::InputSinceLook { detail: "input reached the pane since the writer's look (its writes went from 3 to 4): a draft typed since would be erased; nothing was written".into() });
    insta::assert_json_snapshot!("submit_rejected_input_since_look", receipt_json(&rig, op));

    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("fix the tests", None);
    rig.answer_split_write(SplitOutcome::Failed { bytes_written: 7, error: "write to pty master: EIO".into() });
    insta::assert_json_snapshot!("submit_write_partial", receipt_json(&rig, op));

    let mut rig = Rig::with_idle_zola();
    let op = rig.submit_text("fix the tests", None);
    rig.advance(10_100);
    insta::assert_json_snapshot!("submit_write_result_lost", receipt_json(&rig, op));
}

// INP-4 for a submit (SUB-1): a target that cannot be a name or an id (empty, over the limit,
// with a control character) is `invalid` / `target_malformed`, as for an admission; it was
// `unavailable` / `agent_unknown`, which invites a retry. Nothing is written.
#[test]
fn sub_1_a_malformed_target_is_invalid_as_for_an_admission() {
    let mut rig = Rig::with_idle_zola();
    for (n, target) in ["".to_string(), "z".repeat(300), "zola\u{0}".to_string()].into_iter().enumerate() {
        let op = OpId(700 + n as u64);
        let submission_id = format!("5b0b1e00-0000-4000-8000-{:012}", op.0);
        rig.input(Input::Submit(SubmitCommand { op, submission_id, target, exact_agent_id: false, text: "hi".to_string(), timeout_ms: None }));
        let receipt = rig.submit_receipt(op);
        assert_eq!((receipt.classification, receipt.reason.as_deref()), (Some(Classification::Invalid), Some("target_malformed")), "{receipt:?}");
        assert!(receipt.retry_safe && receipt.write_state == WriteState::NotStarted);
    }
    assert!(rig.split_writes.is_empty(), "nothing written");
}
