//! Return-final correlation and the terminal stream (RF-*, CORR-*, TERM-*).

mod support;
use support::*;
use wakterm_engine::*;

fn armed_rig(prompt: &str) -> (Rig, OpId) {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, prompt, ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    (rig, op)
}

fn only_terminal(rig: &Rig) -> TerminalEvent {
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1, "RF-5: exactly one terminal event");
    events[0].clone()
}

/// RF-1, RF-2, CORR-5, CORR-6, CORR-7: the accepted receipt carries the correlation boundary;
/// the turn our prompt opened completes with its own final.
#[test]
fn rf_1_rf_2_completed_with_the_final_of_its_turn() {
    let (mut rig, op) = armed_rig("Complete phases 2 and 3");
    let receipt = rig.receipt(op).clone();
    assert!(receipt.reply_pending);
    assert_eq!(receipt.correlation_source, Some(CorrelationSource::ProviderFile));
    assert_eq!(receipt.baseline_provider_turn, Some(turn("turn-0")));
    assert_eq!(receipt.armed_cursor.as_deref(), Some("pf1.sess-1.1000"));
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Submitted);
    rig.provider_turn("turn-1", "  Complete phases 2 and 3\n", "All done.", 1000);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Completed);
    assert_eq!(event.final_message.as_deref(), Some("All done."));
    assert_eq!(event.provider_turn_id, Some(turn("turn-1")));
    assert_eq!(event.terminal_event_sequence, 1);
}

/// CORR-5: records at or before the armed cursor (the baseline turn) are not our turn.
#[test]
fn corr_5_history_before_the_cursor_is_ignored() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_completed("turn-0", "old final", 1000);
    assert!(rig.terminal_for(REQ).is_empty());
    rig.provider_turn("turn-1", "hi", "new final", 1000);
    assert_eq!(only_terminal(&rig).final_message.as_deref(), Some("new final"));
}

/// CORR-5: our prompt arriving as a user message of a turn that started before the armed
/// cursor (the idle view was stale) is never bound to that turn: its final belongs to another
/// prompt.
#[test]
fn corr_5_user_message_without_a_turn_start_after_the_cursor() {
    let (mut rig, _) = armed_rig("hi");
    rig.user_message("turn-older", "hi", 1010);
    rig.turn_completed("turn-older", "someone else's final", 1020);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Indeterminate);
    assert_eq!(event.reason.as_deref(), Some("user_message_before_turn_start"));
}

/// A duplicate completion of an older turn does not make a running turn look idle.
#[test]
fn corr_5_late_final_of_an_older_turn_keeps_the_agent_busy() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.turn_completed("turn-0", "late duplicate", 1015);
    let view = rig.engine.agent(&agent_id(ZOLA)).unwrap().view.clone().unwrap();
    assert_eq!(view.turn, TurnState::Busy { turn: Some(turn("turn-1")) });
}

/// CORR-6: a first new turn whose first user message is not our prompt is `indeterminate`,
/// and its final is never delivered.
#[test]
fn corr_6_prompt_hash_mismatch() {
    let (mut rig, _) = armed_rig("our prompt");
    rig.provider_turn("turn-1", "someone else typed this", "their final", 1000);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Indeterminate);
    assert_eq!(event.reason.as_deref(), Some("first_user_message_mismatch"));
    assert!(event.final_message.is_none());
}

/// CORR-5, CORR-6 (PTY): two prompts of one text. A human typed "continue" and its turn ran
/// before ours was written, but the view had not read its records (the refresh came first):
/// they lie past the armed cursor and carry our hash. The runtime reports where the rollout
/// ended just before the write (`record_end`), so that turn is passed over and our own turn,
/// recorded after it, binds. Before 2026-12-06 the request bound the human's turn and
/// delivered its final as `completed` (the gap SPEC's CORR-6 row named).
#[test]
fn corr_6_a_turn_of_the_same_text_recorded_before_the_write_is_not_ours() {
    let mut rig = Rig::with_idle_zola();
    rig.record_end = Some(Cursor { session: session(), position: 1200 });
    let op = rig.admit(REQ, "continue", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    assert_eq!(rig.receipt(op).armed_cursor.as_deref(), Some("pf1.sess-1.1000"), "the registered boundary is still reported");
    rig.provider_turn("turn-human", "continue", "the human's final", 1100); // 1110..1130, within the file then
    assert!(rig.terminal_for(REQ).is_empty(), "a turn recorded before the write is not ours");
    rig.provider_turn("turn-1", "continue", "our final", 1200);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Completed);
    assert_eq!(event.provider_turn_id, Some(turn("turn-1")));
    assert_eq!(event.final_message.as_deref(), Some("our final"));
    let evidence = &rig.durable[&RequestId::parse(REQ).unwrap()].evidence;
    assert!(evidence.iter().any(|e| e.detail.contains("the rollout ended at sess-1:1200 before the write")), "{evidence:?}");
}

/// CORR-5 (PTY): the human's same-text turn was still running at the write (its start within
/// the rollout's end then), and our prompt joined it as a steer: the user message carrying our
/// hash has no turn start after the floor, so it is never bound (`indeterminate`), and the
/// human's final is never delivered. An end in another session than the view's raises nothing.
#[test]
fn corr_5_a_same_text_turn_running_at_the_write_is_never_bound() {
    let mut rig = Rig::with_idle_zola();
    rig.record_end = Some(Cursor { session: session(), position: 1200 });
    rig.admit(REQ, "continue", ReturnMode::ReturnFinal);
    rig.turn_started("turn-human", 1110);
    rig.user_message("turn-human", "continue", 1150);
    rig.user_message("turn-human", "continue", 1250); // ours, steered into the running turn
    rig.turn_completed("turn-human", "the human's final", 1300);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Indeterminate);
    assert_eq!(event.reason.as_deref(), Some("user_message_before_turn_start"));
    assert!(event.final_message.is_none());

    // Another session's end says nothing of the view's file: the armed cursor stands.
    let mut rig = Rig::with_idle_zola();
    rig.record_end = Some(Cursor { session: SessionId("sess-2".to_string()), position: 5000 });
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "hi", "our final", 1000);
    assert_eq!(only_terminal(&rig).final_message.as_deref(), Some("our final"));
}

/// CORR-7: a final from a different turn than the bound one is never substituted.
#[test]
fn corr_7_later_turn_final_is_never_substituted() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.turn_completed("turn-2", "wrong final", 1030);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Indeterminate);
    assert_eq!(event.reason.as_deref(), Some("other_turn_completed"));

    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.turn_started("turn-2", 1030);
    assert_eq!(only_terminal(&rig).reason.as_deref(), Some("later_turn_started"));
}

/// CORR-9: steering messages inside the bound turn keep correlation, and the end says the
/// turn was steered (its final may answer the other prompt too), on the terminal event, on the
/// agent event stream and in the evidence trail; a turn nobody steered says nothing.
#[test]
fn corr_9_steering_keeps_correlation_and_the_end_says_steered() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.user_message("turn-1", "also handle the edge case", 1025);
    rig.user_message("turn-1", "and the docs", 1027);
    rig.turn_completed("turn-1", "final with steering", 1030);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Completed);
    assert_eq!(event.final_message.as_deref(), Some("final with steering"));
    assert!(event.steered, "CORR-9: the end says another prompt steered the turn");
    let streamed = rig.published_events.iter().find_map(|e| match &e.body {
        EventBody::RequestTerminal { steered, .. } => Some(*steered),
        _ => None,
    });
    assert_eq!(streamed, Some(true), "the stream's request.terminal says it too");
    let record = &rig.durable[&RequestId::parse(REQ).unwrap()];
    let steers: Vec<_> = record.evidence.iter().filter(|e| e.detail.contains("steered by another prompt")).collect();
    assert_eq!(steers.len(), 1, "the trail names the first steer only: {:?}", record.evidence);
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["steered"], serde_json::json!(true));

    let (mut rig, _) = armed_rig("hi");
    rig.provider_turn("turn-1", "hi", "plain final", 1010);
    let event = only_terminal(&rig);
    assert!(!event.steered, "nobody steered this turn");
    assert!(serde_json::to_value(&event).unwrap().get("steered").is_none(), "absent when false");
}

/// CORR-6, CORR-9 (PTY): a second message of our prompt's text in the bound turn means two
/// prompts of one text went into it (a human's turn ours steered into, or that the TUI took
/// with ours as one input, not yet in the file at the write): which opened the turn is unknown,
/// so its final is never delivered. The binding message replayed (a resume after a restart
/// reads from the armed cursor again) is not a second one.
#[test]
fn corr_6_our_prompts_text_twice_in_the_bound_turn_is_indeterminate() {
    let (mut rig, _) = armed_rig("continue");
    rig.turn_started("turn-human", 1010);
    rig.user_message("turn-human", "continue", 1020); // the human's, unwritten at the write
    rig.user_message("turn-human", "continue", 1030); // ours, steered in
    rig.turn_completed("turn-human", "the human's final", 1040);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Indeterminate);
    assert_eq!(event.reason.as_deref(), Some("prompt_twice_in_turn"));
    assert!(event.final_message.is_none());

    let (mut rig, _) = armed_rig("continue");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "continue", 1020);
    rig.user_message("turn-1", "continue", 1020); // the same record again
    rig.user_message("turn-1", "and the tests", 1030); // CORR-9: a steer of other text
    rig.turn_completed("turn-1", "our final", 1040);
    assert_eq!(only_terminal(&rig).final_message.as_deref(), Some("our final"));
}

/// CORR-10: an aborted bound turn is `aborted`; aborted before binding is `indeterminate`.
#[test]
fn corr_10_aborted_turns() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.observe(ObserverEvent::TurnAborted { session: session(), turn: Some(turn("turn-1")), position: 1030 });
    assert_eq!(only_terminal(&rig).state, TerminalState::Aborted);

    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.observe(ObserverEvent::TurnAborted { session: session(), turn: Some(turn("turn-1")), position: 1030 });
    assert_eq!(only_terminal(&rig).state, TerminalState::Indeterminate);
}

/// CORR-3: an event from another observer session (file replaced) is `indeterminate`.
#[test]
fn corr_3_session_change_is_indeterminate() {
    let (mut rig, _) = armed_rig("hi");
    let other = SessionId("sess-2".to_string());
    rig.observe(ObserverEvent::TurnStarted { session: other, turn: turn("turn-1"), position: 10 });
    assert_eq!(only_terminal(&rig).reason.as_deref(), Some("observer_session_changed"));

    let (mut rig, _) = armed_rig("hi");
    rig.observe(ObserverEvent::SessionLost { reason: "rollout truncated".to_string(), session: None, before: None });
    assert_eq!(only_terminal(&rig).state, TerminalState::Indeterminate);
}

/// CORR-1, CORR-2: a new incarnation or process mid-request is `indeterminate`.
#[test]
fn corr_1_corr_2_incarnation_change() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.input(Input::AgentUpserted(zola_facts("inc-2", 101)));
    assert_eq!(only_terminal(&rig).reason.as_deref(), Some("incarnation_changed"));
    // The new process's turn never completes the old request.
    rig.provider_turn("turn-9", "hi", "late", 2000);
    assert_eq!(rig.terminal_for(REQ).len(), 1);
}

/// CORR-11: a process that exits before any new turn, with the record drained, is
/// `delivery_failed`; without that proof it is `indeterminate`.
#[test]
fn corr_11_process_exit() {
    let (mut rig, _) = armed_rig("hi");
    rig.observe(ObserverEvent::ProcessExited { drained: true });
    assert_eq!(only_terminal(&rig).state, TerminalState::DeliveryFailed);

    let (mut rig, _) = armed_rig("hi");
    rig.observe(ObserverEvent::ProcessExited { drained: false });
    assert_eq!(only_terminal(&rig).state, TerminalState::Indeterminate);

    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.observe(ObserverEvent::ProcessExited { drained: true });
    assert_eq!(only_terminal(&rig).state, TerminalState::Indeterminate);
}

/// CORR-8, seed 000: a managed app-server agent's armed cursor is the durable Agent API event
/// sequence (`ev1.<thread>.<sequence>`): the stream's published mark when the request was
/// armed, so `agent events --after` it shows everything after the boundary. It was the
/// position in the app-server's output, which no stream or catalog field names (a review).
#[test]
fn corr_8_managed_sessions_use_event_sequence() {
    let mut rig = Rig::with_idle_zola();
    let mut facts = zola_facts("inc-1", 100);
    facts.transport = Transport::AppServer;
    facts.managed = Some(ManagedIds { thread_id: "sess-1".into(), session_id: session() }); // MGD-2
    rig.input(Input::AgentUpserted(facts));
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    let through = rig.engine.events_published_through();
    assert!(through > 0, "the stream has published the agent's start");
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let receipt = rig.receipt(op).clone();
    assert_eq!(receipt.correlation_source, Some(CorrelationSource::AgentApiEvents));
    assert_eq!(receipt.armed_cursor, Some(format!("ev1.sess-1.{through}")));
    rig.turn_started("turn-1", 1010);
    let started: Vec<u64> = rig.published_events.iter().filter(|e| e.kind() == "turn.started").map(|e| e.sequence).collect();
    assert!(!started.is_empty() && started.iter().all(|s| *s > through), "after the boundary, above the cursor: {started:?} vs {through}");
    let (pty, op) = armed_rig("hi");
    let cursor = pty.receipt(op).armed_cursor.clone().expect("armed");
    assert!(cursor.starts_with("pf1."), "PTY agents keep the provider-file cursor: {cursor}");
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.status = ObserverStatus::Unavailable { reason: "event stream dropped".to_string() };
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let op = rig.admit(REQ2, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::ObserverFailure);
}

/// RF-3: a deadline times the request out; 0 disables it; a late final is ignored.
#[test]
fn rf_3_deadline() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
    command.final_timeout_ms = 60_000;
    rig.submit(command);
    rig.turn_started("turn-1", 1010); // the turn runs long
    rig.user_message("turn-1", "hi", 1020);
    rig.advance(59_999);
    assert!(rig.terminal_for(REQ).is_empty());
    assert_eq!(rig.engine.poll_timeout(), Some(T0 + 60_000));
    rig.advance(1);
    assert_eq!(only_terminal(&rig).state, TerminalState::TimedOut);
    rig.turn_completed("turn-1", "late", 1030);
    assert_eq!(rig.terminal_for(REQ).len(), 1);

    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.advance(limits::MAX_FINAL_TIMEOUT_MS);
    assert!(rig.terminal_for(REQ).is_empty(), "timeout 0 means no deadline");
}

/// RF-4: cancel ends a waiting request as `cancelled` after the commit; other states answer
/// specifically.
#[test]
fn rf_4_cancel() {
    let (mut rig, _) = armed_rig("hi");
    rig.input(Input::Cancel(CancelCommand { op: OpId(77), request_id: REQ.to_string() }));
    assert_eq!(only_terminal(&rig).state, TerminalState::Cancelled);
    assert!(matches!(rig.cancels[0], (OpId(77), CancelOutcome::Cancelled { .. })));
    rig.input(Input::Cancel(CancelCommand { op: OpId(78), request_id: REQ.to_string() }));
    assert!(matches!(rig.cancels[1].1, CancelOutcome::AlreadyTerminal { state: TerminalState::Cancelled, .. }));
    rig.input(Input::Cancel(CancelCommand { op: OpId(79), request_id: REQ2.to_string() }));
    assert!(matches!(rig.cancels[2].1, CancelOutcome::NotFound { .. }));
    rig.provider_turn("turn-1", "hi", "late", 1000);
    assert_eq!(rig.terminal_for(REQ).len(), 1);
}

/// RF-5, TERM-2: several requests end in commit order with strictly increasing sequences,
/// each exactly once, and nothing is published before its commit.
#[test]
fn term_2_sequences_follow_commits() {
    let mut rig = Rig::with_idle_zola();
    let mut position = 1000;
    for (index, id) in [REQ, REQ2].iter().enumerate() {
        let mut snapshot = idle_snapshot("inc-1", 100);
        snapshot.position = position;
        rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
        rig.admit(id, "hi", ReturnMode::ReturnFinal);
        rig.auto = Auto::Manual;
        let name = format!("turn-{index}x");
        rig.provider_turn(&name, "hi", "f", position);
        assert!(rig.terminal_for(id).is_empty(), "TERM-2: not published before commit");
        rig.settle();
        rig.auto = Auto::All;
        position += 100;
    }
    let sequences: Vec<u64> = rig.published.iter().map(|e| e.terminal_event_sequence).collect();
    assert_eq!(sequences, vec![1, 2]);
}

/// TERM-2: a terminal commit that fails is retried with a new, larger sequence; the failed
/// sequence is never published.
#[test]
fn term_2_failed_terminal_commit_is_retried() {
    let (mut rig, _) = armed_rig("hi");
    rig.auto = Auto::Manual;
    rig.provider_turn("turn-1", "hi", "f", 1000);
    rig.ack_next_persist(Ok(())); // the binding
    rig.ack_next_persist(Err("disk full".to_string()));
    assert!(rig.published.is_empty());
    assert!(!rig.engine.is_quiescent(), "a commit awaiting its retry is work in flight");
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.ack_next_persist(Ok(()));
    let event = only_terminal(&rig);
    assert_eq!(event.terminal_event_sequence, 2);
    assert_eq!(event.state, TerminalState::Completed);
}

/// TERM-1: only `completed` carries `final_message` in its JSON.
#[test]
fn term_1_final_message_only_when_completed() {
    let (mut rig, _) = armed_rig("hi");
    rig.observe(ObserverEvent::ProcessExited { drained: false });
    let json = serde_json::to_value(only_terminal(&rig)).unwrap();
    assert!(json.get("final_message").is_none());
    let (mut rig, _) = armed_rig("hi");
    rig.provider_turn("turn-1", "hi", "f", 1000);
    let json = serde_json::to_value(only_terminal(&rig)).unwrap();
    assert_eq!(json["final_message"], "f");
}

/// Events that arrive while the write is in flight are applied after its outcome, so a fast
/// provider cannot make us miss our own turn.
#[test]
fn corr_5_events_during_the_write_are_not_lost() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.provider_turn("turn-1", "hi", "fast final", 1000);
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.settle();
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    assert_eq!(only_terminal(&rig).final_message.as_deref(), Some("fast final"));
}

/// Drives a return-final admission up to an outstanding pane write.
fn writing_rig() -> (Rig, OpId) {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.deliveries.len(), 1);
    (rig, op)
}

/// CORR-1 / RF-5: the agent removed while the write is in flight: the request still ends
/// (indeterminate), never waits forever for an agent that is gone.
#[test]
fn corr_1_agent_removed_mid_write_still_ends() {
    let (mut rig, op) = writing_rig();
    rig.input(Input::AgentRemoved { agent_id: agent_id(ZOLA) });
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.settle();
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "the bytes did reach the admitted process");
    let event = only_terminal(&rig);
    assert_eq!((event.state, event.reason.as_deref()), (TerminalState::Indeterminate, Some("agent_removed")));
}

/// CORR-1, CORR-2: the process replaced while the marker commits: correlation never starts on
/// the new process.
#[test]
fn corr_1_incarnation_change_mid_write_is_indeterminate() {
    let (mut rig, _) = writing_rig();
    rig.input(Input::AgentUpserted(zola_facts("inc-2", 101)));
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.settle();
    let event = only_terminal(&rig);
    assert_eq!((event.state, event.reason.as_deref()), (TerminalState::Indeterminate, Some("incarnation_changed")));
}

/// RF-1 (seed 000: registered until submission is durably confirmed): when the submitted marker
/// fails to commit, a turn that arrived meanwhile never completes the request, and a replay
/// after a restart agrees with the receipt.
#[test]
fn rf_1_correlation_waits_for_the_submitted_marker() {
    let (mut rig, op) = writing_rig();
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.provider_turn("turn-1", "hi", "final", 1000);
    rig.ack_next_persist(Err("disk full".to_string())); // the submitted marker
    rig.settle();
    assert_eq!(rig.receipt(op).classification, Classification::Indeterminate);
    let event = only_terminal(&rig);
    assert_eq!(event.state, TerminalState::Indeterminate);
    rig.crash_and_recover();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    let replay = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(replay).classification, Classification::Indeterminate);
}

/// CORR-5: a late completion at an older position never makes a running turn (even one whose
/// id the observer does not know) look idle.
#[test]
fn corr_5_late_completion_keeps_an_unknown_running_turn_busy() {
    let mut rig = Rig::with_idle_zola();
    let mut busy = idle_snapshot("inc-1", 100);
    busy.turn = TurnState::Busy { turn: None };
    rig.input(Input::ObserverSnapshot { agent_id: agent_id(ZOLA), snapshot: busy.clone() });
    rig.turn_completed("turn-0", "late duplicate", 990);
    rig.snapshots.insert(agent_id(ZOLA), Ok(busy));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Busy);
    assert_eq!(rig.writes(), 0);
}

/// RF-4, TERM-2: a cancel that arrives while the terminal event's commit is pending is answered
/// only once the event is published, with the sequence it was published under.
#[test]
fn rf_4_cancel_during_a_pending_terminal_commit_waits_for_publication() {
    let (mut rig, _) = armed_rig("hi");
    rig.auto = Auto::Manual;
    rig.provider_turn("turn-1", "hi", "f", 1000);
    rig.ack_next_persist(Ok(())); // binding
    rig.ack_next_persist(Err("disk full".to_string())); // terminal, sequence 1 burned
    rig.input(Input::Cancel(CancelCommand { op: OpId(91), request_id: REQ.to_string() }));
    assert!(rig.cancels.is_empty(), "no answer before the event is published");
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.ack_next_persist(Ok(()));
    let published = only_terminal(&rig);
    match &rig.cancels[0] {
        (OpId(91), CancelOutcome::AlreadyTerminal { state, terminal_event_sequence }) => {
            assert_eq!((*state, *terminal_event_sequence), (published.state, published.terminal_event_sequence));
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// RF-4: a cancel whose end does not commit (a full disk) is answered at the failure,
/// `commit_failed`, not after a retry that waits as long as the disk stays full (its caller gave
/// up after a minute, calling the daemon unresponsive: a hostile run). The end is retried; a
/// cancel asked again meanwhile waits for the retry's outcome: `commit_failed` again, or the
/// published end.
#[test]
fn rf_4_a_cancel_whose_end_cannot_commit_is_answered_at_the_failure() {
    let (mut rig, _) = armed_rig("hi");
    rig.auto = Auto::Manual;
    rig.input(Input::Cancel(CancelCommand { op: OpId(81), request_id: REQ.to_string() }));
    assert!(rig.cancels.is_empty(), "answered after the commit");
    rig.ack_next_persist(Err("database or disk is full".to_string()));
    match &rig.cancels[..] {
        [(OpId(81), CancelOutcome::CommitFailed { request_id, error })] => {
            assert_eq!(request_id.as_str(), REQ);
            assert!(error.contains("database or disk is full") && error.contains("retries"), "{error}");
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(rig.terminal_for(REQ).is_empty(), "nothing published");
    rig.input(Input::Cancel(CancelCommand { op: OpId(82), request_id: REQ.to_string() }));
    assert_eq!(rig.cancels.len(), 1, "the second cancel waits for the retry");
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.ack_next_persist(Err("database or disk is full".to_string()));
    assert!(matches!(rig.cancels[1], (OpId(82), CancelOutcome::CommitFailed { .. })), "{:?}", rig.cancels);
    rig.input(Input::Cancel(CancelCommand { op: OpId(83), request_id: REQ.to_string() }));
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.ack_next_persist(Ok(()));
    assert_eq!(only_terminal(&rig).state, TerminalState::Cancelled, "the retry recorded the cancel");
    assert!(matches!(rig.cancels[2], (OpId(83), CancelOutcome::AlreadyTerminal { state: TerminalState::Cancelled, .. })), "{:?}", rig.cancels);
}

/// RF-4: cancel answers specifically for one-way requests and admissions in flight.
#[test]
fn rf_4_cancel_of_one_way_and_in_flight_requests() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "one way", ReturnMode::OneWay);
    rig.input(Input::Cancel(CancelCommand { op: OpId(1), request_id: REQ.to_string() }));
    assert!(matches!(rig.cancels[0].1, CancelOutcome::NotReturnFinal { .. }));
    rig.turn_started("turn-1", 1010);
    rig.turn_completed("turn-1", "x", 1030);
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.position = 1030;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    rig.auto = Auto::Manual;
    rig.admit(REQ2, "two", ReturnMode::ReturnFinal);
    rig.input(Input::Cancel(CancelCommand { op: OpId(2), request_id: REQ2.to_string() }));
    assert!(matches!(rig.cancels[1].1, CancelOutcome::AdmissionInProgress { .. }));
}

/// CORR-8: a managed session needs a live event stream, not a completed baseline turn.
#[test]
fn corr_8_managed_session_without_a_baseline_turn_is_admitted() {
    let mut rig = Rig::with_idle_zola();
    let mut facts = zola_facts("inc-1", 100);
    facts.transport = Transport::AppServer;
    facts.managed = Some(ManagedIds { thread_id: "sess-1".into(), session_id: session() }); // MGD-2
    rig.input(Input::AgentUpserted(facts));
    let mut fresh = idle_snapshot("inc-1", 100);
    fresh.turn = TurnState::Idle { last_completed: None };
    fresh.position = 0;
    rig.snapshots.insert(agent_id(ZOLA), Ok(fresh));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.provider_turn("turn-1", "hi", "managed final", 0);
    assert_eq!(only_terminal(&rig).final_message.as_deref(), Some("managed final"));
}

/// RF-7 / ADM-5: a return-final prompt that opened no turn (it answered a dialog that popped up
/// just before the write) does not wait forever: after the grace the engine looks again on its
/// own, and with the agent idle and the composer empty the request ends `indeterminate`.
#[test]
fn rf_7_prompt_that_never_opens_a_turn_ends_indeterminate() {
    let (mut rig, _) = armed_rig("hi");
    let mut draft = idle_snapshot("inc-1", 100);
    draft.composer = Composer::Draft;
    rig.snapshots.insert(agent_id(ZOLA), Ok(draft));
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    assert!(rig.terminal_for(REQ).is_empty(), "the prompt may still sit in the composer");
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    let event = only_terminal(&rig);
    assert_eq!((event.state, event.reason.as_deref()), (TerminalState::Indeterminate, Some("no_turn_started")));
}

/// RF-7: a turn that does start (its user message carrying the prompt, ADM-5) clears the
/// probe; the request completes normally.
#[test]
fn rf_7_started_turn_needs_no_probe() {
    let (mut rig, _) = armed_rig("hi");
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    assert_eq!(rig.engine.agent(&agent_id(ZOLA)).unwrap().probe_at_ms, None);
    rig.advance(limits::AWAITING_TURN_GRACE_MS * 3);
    rig.turn_completed("turn-1", "f", 1030);
    assert_eq!(only_terminal(&rig).state, TerminalState::Completed);
}

/// RF-7: the no-turn probe never gives up on a request whose submitted marker is still
/// committing; once it commits, the next probe ends it.
#[test]
fn rf_7_probe_waits_for_the_submitted_marker() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.deliver_next(DeliveryOutcome::Complete); // the marker commit is now outstanding (slow disk)
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    rig.refresh_next(); // the probe: idle, empty composer
    assert!(rig.awaiting_turn_start(), "still waiting");
    rig.ack_next_persist(Ok(())); // the marker lands
    rig.auto = Auto::All;
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    let event = only_terminal(&rig);
    assert_eq!(event.reason.as_deref(), Some("no_turn_started"));
}

/// RF-8: a prompt whose turn never starts, while the composer keeps text nobody submits, ends
/// `indeterminate` after TURN_START_TIMEOUT_MS: never `completed`, never forever.
#[test]
fn rf_8_turn_that_never_starts_ends_after_the_timeout() {
    let (mut rig, _) = armed_rig("hi");
    let mut draft = idle_snapshot("inc-1", 100);
    draft.composer = Composer::Draft;
    rig.snapshots.insert(agent_id(ZOLA), Ok(draft));
    rig.advance(limits::TURN_START_TIMEOUT_MS - 1);
    assert!(rig.terminal_for(REQ).is_empty());
    rig.advance(1);
    let event = only_terminal(&rig);
    assert_eq!((event.state, event.reason.as_deref()), (TerminalState::Indeterminate, Some("no_turn_started")));
}
