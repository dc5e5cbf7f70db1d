//! Restart and crash windows (REC-*, TERM-3).

mod support;
use support::*;
use wakterm_engine::*;

fn restart_with_zola(rig: &mut Rig, facts: AgentFacts) {
    rig.crash_and_recover();
    rig.input(Input::AgentUpserted(facts));
    rig.input(Input::StartupComplete);
}

/// REC-1, REC-4: a crash after registration, before the submitted marker (the PTY write
/// window), leaves `indeterminate`; the turn our prompt may have opened never completes it.
#[test]
fn rec_1_rec_4_crash_in_the_write_window() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.deliver_next(DeliveryOutcome::Complete); // bytes reached the pane...
    assert!(!rig.has_receipt(op)); // ...and the daemon dies before the marker commits.
    rig.auto = Auto::All;
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].state, TerminalState::Indeterminate);
    assert_eq!(events[0].reason.as_deref(), Some(RESTART_REASON));
    rig.provider_turn("turn-1", "hi", "final", 1000);
    assert_eq!(rig.terminal_for(REQ).len(), 1, "never completed after the restart");
    // A replay after the restart returns the indeterminate receipt and writes nothing.
    let writes = rig.writes();
    let replay = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(replay).classification, Classification::Indeterminate);
    assert_eq!(rig.writes(), writes);
}

/// REC-3: a one-way registration interrupted by a crash replays as `indeterminate`.
#[test]
fn rec_3_one_way_registration_becomes_indeterminate() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.auto = Auto::All;
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    let replay = rig.admit(REQ, "hi", ReturnMode::OneWay);
    let receipt = rig.receipt(replay);
    assert_eq!(receipt.classification, Classification::Indeterminate);
    assert_eq!(receipt.write_state, WriteState::Unknown);
    assert!(rig.terminal_for(REQ).is_empty(), "one-way requests have no terminal event");
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Settled);
}

/// REC-3: when the commit that settles a recovered one-way registration fails, it is retried
/// until the store holds the settled record.
#[test]
fn rec_3_failed_settle_commit_is_retried() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.crash_and_recover();
    rig.ack_next_persist(Err("disk full".to_string()));
    let id = RequestId::parse(REQ).unwrap();
    assert_eq!(rig.durable[&id].phase, Phase::Registered);
    rig.advance(limits::PERSIST_RETRY_MS);
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.durable[&id].phase, Phase::Settled);
}

/// REC-2: a submitted request survives a restart when the same process and observer session
/// come back, and completes with its own turn's final.
#[test]
fn rec_2_submitted_request_resumes_after_verification() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    assert_eq!(rig.resumes.len(), 1);
    assert_eq!(rig.resumes[0].1.position, 1000, "replay from the armed cursor");
    // The runtime re-attaches and replays from the cursor.
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.provider_turn("turn-1", "hi", "the real final", 1000);
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].state, TerminalState::Completed);
    assert_eq!(events[0].final_message.as_deref(), Some("the real final"));
}

/// CORR-9, REC-2: the resume reads the bound turn again from the armed cursor, so a steer read
/// before the crash, whose note no commit carried, is read again and the end says `steered`.
#[test]
fn corr_9_a_steer_read_before_a_crash_is_still_reported() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.user_message("turn-1", "also handle the edge case", 1025);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    assert_eq!(rig.resumes[0].1.position, 1000, "replay from the armed cursor");
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.user_message("turn-1", "also handle the edge case", 1025);
    rig.turn_completed("turn-1", "final with steering", 1030);
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].state, TerminalState::Completed);
    assert!(events[0].steered, "{:?}", events[0]);
}

/// EV-13, REC-2: a request resumed in a file cut back and grown again while the daemon was
/// down ends `indeterminate` when the record at the stream's mark says the file changed: its
/// turn's records may be gone (it waited for good) or written again (a later final, the
/// first one cut). In the same file, it completes with its own turn's final.
#[test]
fn ev_13_a_request_resumed_in_a_changed_file_ends_indeterminate() {
    let resumed = |changed: bool| {
        let mut rig = Rig::with_idle_zola();
        rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
        rig.turn_started("turn-1", 1010);
        rig.user_message("turn-1", "hi", 1020); // bound; the stream reported through 1020
        restart_with_zola(&mut rig, zola_facts("inc-1", 100));
        assert_eq!(rig.resumes[0].1.position, 1000, "replay from the armed cursor");
        rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
        rig.turn_started("turn-1", 1010); // below the cut: the same record
        match changed {
            true => rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "new".into(), phase: None, position: 1020 }),
            false => rig.user_message("turn-1", "hi", 1020),
        }
        rig.turn_completed("turn-1", "a final written again", 1040);
        rig.terminal_for(REQ).into_iter().cloned().collect::<Vec<TerminalEvent>>()
    };
    let changed = resumed(true);
    assert_eq!(changed.len(), 1, "{changed:?}");
    assert_eq!((changed[0].state, changed[0].reason.as_deref()), (TerminalState::Indeterminate, Some("observer_session_lost")));
    let same = resumed(false);
    assert_eq!(same.len(), 1, "{same:?}");
    assert_eq!((same[0].state, same[0].final_message.as_deref()), (TerminalState::Completed, Some("a final written again")));

    // A completion the new file holds below the mark is read before the record at the mark
    // says the file changed: the request's end waits for that verdict.
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: Some(TurnId("turn-1".into())), text: "working".into(), phase: None, position: 1030 });
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.turn_completed("turn-1", "written below the mark", 1025); // cut back to 1020, grown again
    assert!(rig.terminal_for(REQ).is_empty(), "its end waits for the record at the mark");
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "new".into(), phase: None, position: 1030 });
    let ended = rig.terminal_for(REQ);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("observer_session_lost")));

    // The same file: a completion below the mark (its terminal commit lost in the crash, the
    // events' durable) ends the request once the record at the mark proves the file, with
    // the completion's own evidence (RF-6).
    let working = || ObserverEvent::AgentMessage { session: session(), turn: None, text: "after the turn".into(), phase: None, position: 1040 };
    let completion_read_below_the_mark = || {
        let mut rig = Rig::with_idle_zola();
        rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
        rig.turn_started("turn-1", 1010);
        rig.user_message("turn-1", "hi", 1020);
        rig.auto = Auto::Manual; // the terminal's commit never comes back
        rig.turn_completed("turn-1", "its final", 1030);
        rig.observe(working());
        assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Bound, "its end is not durable");
        rig.auto = Auto::All;
        restart_with_zola(&mut rig, zola_facts("inc-1", 100));
        rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
        rig.turn_started("turn-1", 1010);
        rig.user_message("turn-1", "hi", 1020);
        rig.turn_completed("turn-1", "its final", 1030);
        assert!(rig.terminal_for(REQ).is_empty(), "its end waits for the record at the mark");
        rig
    };
    let mut rig = completion_read_below_the_mark();
    rig.observe(working());
    let proven = rig.terminal_for(REQ);
    assert_eq!(proven.len(), 1, "{proven:?}");
    assert_eq!((proven[0].state, proven[0].final_message.as_deref()), (TerminalState::Completed, Some("its final")));
    let trail = &rig.durable[&RequestId::parse(REQ).unwrap()].evidence;
    assert!(trail.last().is_some_and(|e| e.detail.contains("1030")), "{trail:?}");
    // No read reaches the mark (a tail error that lasts): the end waits a bounded time.
    let mut unproven = completion_read_below_the_mark();
    unproven.advance(MAX_PROOF_WAIT_MS - 1);
    assert!(unproven.terminal_for(REQ).is_empty());
    unproven.advance(1);
    let expired = unproven.terminal_for(REQ);
    assert_eq!(expired.len(), 1, "{expired:?}");
    assert_eq!((expired[0].state, expired[0].reason.as_deref()), (TerminalState::Indeterminate, Some("observer_session_lost")));

    // A request admitted after the restart while the zone is open (the cut file has no event
    // record at the mark; the look read past it) reads the file as it is now: the record past
    // the mark that says the file changed ends only the recovered request.
    let mut rig = completion_read_below_the_mark();
    let mut past_the_mark = idle_snapshot("inc-1", 100);
    past_the_mark.turn = TurnState::Idle { last_completed: Some(TurnId("turn-1".into())) };
    past_the_mark.position = 1050;
    rig.snapshots.insert(agent_id(ZOLA), Ok(past_the_mark));
    let op = rig.admit(OTHER, "later", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    rig.turn_started("turn-2", 1060); // past the mark, none at it: the file changed
    let recovered = rig.terminal_for(REQ);
    assert_eq!(recovered.len(), 1, "{recovered:?}");
    assert_eq!((recovered[0].state, recovered[0].reason.as_deref()), (TerminalState::Indeterminate, Some("observer_session_lost")));
    rig.user_message("turn-2", "later", 1070);
    rig.turn_completed("turn-2", "its own final", 1080);
    let later = rig.terminal_for(OTHER);
    assert_eq!(later.len(), 1, "{later:?}");
    assert_eq!((later[0].state, later[0].final_message.as_deref()), (TerminalState::Completed, Some("its own final")));

    // Cut back below the mark, and the process exits drained before anything reaches it: the
    // file is shorter than what the stream reported, so nothing in it says the prompt went
    // unread (it was `delivery_failed`, a review).
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1010); // the stream's mark; the bind never came
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.observe(ObserverEvent::ProcessExited { drained: true });
    let ended = rig.terminal_for(REQ);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("observer_session_lost")));
}

/// EV-13: a request bound and reported through 1030, and the daemon restarted; the file was
/// cut back to 1020 while it was down and grew again. Returns the fingerprint the stream's
/// durable mark reported at 1030.
fn bound_then_restarted() -> (Rig, Option<String>) {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: Some(TurnId("turn-1".into())), text: "working".into(), phase: None, position: 1030 });
    let reported = rig.durable_marks[&agent_id(ZOLA)].fingerprint.clone();
    assert!(reported.is_some() && rig.durable_marks[&agent_id(ZOLA)].position == 1030);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    (rig, reported)
}

/// What each daemon reads of the cut file: a completion written again below the mark, and a
/// new record at it.
fn read_the_cut_file(rig: &mut Rig) {
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "hi", 1020);
    rig.turn_completed("turn-1", "a final written again", 1025);
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "new".into(), phase: None, position: 1030 });
}

/// The durable mark's position and fingerprint.
fn durable_mark(rig: &Rig) -> (u64, Option<String>) {
    let mark = &rig.durable_marks[&agent_id(ZOLA)];
    (mark.position, mark.fingerprint.clone())
}

/// After a second crash, the cut file ends the request `indeterminate` again.
fn restart_and_read_the_cut_file_again(rig: &mut Rig) {
    rig.auto = Auto::All;
    restart_with_zola(rig, zola_facts("inc-1", 100)); // a crash before the retry
    read_the_cut_file(rig);
    let ended = rig.terminal_for(REQ);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("observer_session_lost")));
}

/// EV-13: the batch with a changed verdict's gap moves the durable mark onto the new file's
/// records, so it commits only after the ends the verdict made: with the end's commit failed
/// and the gap durable, a crash left the request resumable in a file the mark now proved, and
/// the next daemon completed it with a final written again (exploration seed 200,080,325).
#[test]
fn ev_13_the_gap_of_a_changed_file_is_durable_only_after_the_ends_it_made() {
    let (mut rig, reported) = bound_then_restarted();
    rig.auto = Auto::Manual;
    read_the_cut_file(&mut rig);
    assert_eq!(durable_mark(&rig), (1030, reported.clone()), "the gap waits for the end's commit");
    rig.ack_next_persist(Err("disk I/O error".into())); // the end's commit fails
    assert_eq!(durable_mark(&rig), (1030, reported.clone()), "the gap waits for the end's retry");
    restart_and_read_the_cut_file_again(&mut rig);
    assert_eq!(durable_mark(&rig).0, 1030);
    assert_ne!(durable_mark(&rig).1, reported, "the gap follows the durable end");

    // The end's retry commits: the gap follows it.
    let (mut rig, reported) = bound_then_restarted();
    rig.auto = Auto::Manual;
    read_the_cut_file(&mut rig);
    rig.ack_next_persist(Err("disk I/O error".into()));
    rig.auto = Auto::All;
    rig.advance(limits::PERSIST_RETRY_MS);
    assert_eq!(rig.terminal_for(REQ).len(), 1);
    assert_eq!(durable_mark(&rig).0, 1030);
    assert_ne!(durable_mark(&rig).1, reported, "the gap follows the durable end");
}

/// EV-13: a recovered request's end made before the zone's verdict (a cancel) whose commit
/// failed holds the gap's batch too: lost with a crash, it left the request open in a file the
/// durable mark proved (a review).
#[test]
fn ev_13_the_gap_also_waits_for_an_earlier_end_of_a_recovered_request() {
    let (mut rig, reported) = bound_then_restarted();
    rig.auto = Auto::Manual;
    rig.input(Input::Cancel(CancelCommand { op: OpId(900), request_id: REQ.to_string() }));
    rig.ack_next_persist(Err("disk I/O error".into())); // the cancel's commit fails
    read_the_cut_file(&mut rig);
    assert_eq!(durable_mark(&rig), (1030, reported), "the gap waits for the cancel's retry");
    restart_and_read_the_cut_file_again(&mut rig);
}

/// EV-3, ADM-17: an observer event that arrives while an admission writes is taken by the
/// stream at once, but the ends it makes are drawn only once the write's outcome is known:
/// its batch waits for them (a review: a loss's batch committed before the end it made).
#[test]
fn ev_3_a_batch_waits_while_a_write_defers_the_ends_of_its_events() {
    let mut rig = Rig::with_idle_zola();
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.auto = Auto::Manual;
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // registered; the write is in flight
    let before = rig.durable_marks.get(&agent_id(ZOLA)).cloned();
    assert!(before.as_ref().is_some_and(|mark| mark.attached.is_some()), "{before:?}");
    rig.observe(ObserverEvent::SessionLost { reason: "rollout replaced".into(), session: None, before: None });
    assert_eq!(rig.durable_marks.get(&agent_id(ZOLA)).cloned(), before, "the loss waits for the write's outcome");
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.auto = Auto::All;
    while !rig.persists.is_empty() {
        rig.ack_next_persist(Ok(()));
    }
    let ended = rig.terminal_for(REQ);
    assert_eq!(ended.len(), 1, "{ended:?}");
    assert_eq!(ended[0].state, TerminalState::Indeterminate, "{ended:?}");
    assert_ne!(rig.durable_marks.get(&agent_id(ZOLA)).cloned(), before, "the loss follows the end");
}

/// LIVE-1, EV-14: an agent the runtime still holds whose holder did not answer by the end of
/// the startup (`AgentUnreachable`) has its requests ended but is not recorded stopped: when
/// it answers, its events go on as any agent's. A hostile run saw `agent.stopped` for it, and
/// then its turn's events (a reader following the agent had ended at the stop).
#[test]
fn live_1_an_agent_unreachable_at_the_startup_bound_is_not_stopped() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.crash_and_recover();
    rig.input(Input::AgentUnreachable { agent_id: agent_id(ZOLA) });
    let before = rig.durable_events.len();
    rig.input(Input::StartupComplete);
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("agent_missing_after_restart"));
    let kinds = |rig: &Rig, from: usize| rig.durable_events[from..].iter().map(|e| e.kind()).collect::<Vec<_>>();
    assert!(!kinds(&rig, before).contains(&"agent.stopped"), "{:?}", kinds(&rig, before));
    // The holder answers: the same process goes on, nothing to announce; its turn is reported.
    let answered = rig.durable_events.len();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.provider_turn("turn-9", "later", "its final", 1000);
    let after = kinds(&rig, answered);
    assert!(!after.iter().any(|k| k.starts_with("agent.")), "{after:?}");
    assert!(after.contains(&"turn.completed"), "{after:?}");

    // Another process by then: the old one's exit, then the change, as for any agent (EV-4).
    let mut rig = Rig::with_idle_zola();
    rig.crash_and_recover();
    rig.input(Input::AgentUnreachable { agent_id: agent_id(ZOLA) });
    rig.input(Input::StartupComplete);
    let answered = rig.durable_events.len();
    rig.input(Input::AgentUpserted(zola_facts("inc-2", 200)));
    assert_eq!(kinds(&rig, answered), ["agent.exited", "agent.incarnation_changed"]);

    // No process by then: it exited while unreachable (EV-4's first registration since the start).
    let mut rig = Rig::with_idle_zola();
    rig.crash_and_recover();
    rig.input(Input::AgentUnreachable { agent_id: agent_id(ZOLA) });
    rig.input(Input::StartupComplete);
    let answered = rig.durable_events.len();
    rig.input(Input::AgentUpserted(AgentFacts { incarnation: None, process: None, ..zola_facts("inc-1", 100) }));
    assert_eq!(kinds(&rig, answered), ["agent.exited"]);

    // An agent the runtime does not hold (stopped and deleted while the daemon was down) is
    // still recorded stopped, its last event, after its announced process's exit (EV-4).
    let mut rig = Rig::with_idle_zola();
    rig.crash_and_recover();
    let before = rig.durable_events.len();
    rig.input(Input::StartupComplete);
    assert_eq!(kinds(&rig, before), ["agent.exited", "agent.stopped"]);
}

/// REC-2: a resume names the process its suspended requests were armed on, so an observer of
/// another process (the agent's holder restarted before the resume ran) drops it rather than
/// read the cursor in another stream (seeds 77782850, 77787078).
#[test]
fn rec_2_a_resume_names_the_process_it_was_asked_for() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    assert_eq!(rig.resume_incarnations, vec![Incarnation("inc-1".to_string())]);
}

/// REC-2: a different process or session after the restart makes it `indeterminate`.
#[test]
fn rec_2_changed_process_or_session_after_restart() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    restart_with_zola(&mut rig, zola_facts("inc-2", 200));
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("incarnation_changed"));

    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    rig.observe(ObserverEvent::Attached { session: SessionId("sess-9".to_string()), position: 0 });
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("observer_session_changed"));

    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.crash_and_recover();
    rig.input(Input::StartupComplete);
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("agent_missing_after_restart"));
}

/// REC-2: while suspended, live events are not interpreted (they could be out of order).
#[test]
fn rec_2_suspended_requests_ignore_events_until_attached() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    rig.provider_turn("turn-1", "other text", "x", 1000);
    assert!(rig.terminal_for(REQ).is_empty());
}

/// TERM-3: sequences continue after the last durable one across restarts; published events
/// are never renumbered.
#[test]
fn term_3_sequences_survive_restart() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "hi", "f", 1000);
    assert_eq!(rig.published[0].terminal_event_sequence, 1);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.position = 1030;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    rig.admit(REQ2, "hi", ReturnMode::ReturnFinal);
    rig.observe(ObserverEvent::Attached { session: session(), position: 1030 });
    rig.provider_turn("turn-2", "hi", "g", 1030);
    let seq: Vec<u64> = rig.published.iter().map(|e| e.terminal_event_sequence).collect();
    assert_eq!(seq, vec![1, 2]);
    assert_eq!(rig.durable_terminal.len(), 2);
}

/// REC-2 / RF-5: daemon downtime is no evidence: a submitted request resumed after a long
/// outage still completes from the replayed turn instead of timing out on the turn-start wait.
#[test]
fn rec_2_long_downtime_does_not_end_a_resumed_request() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.crash_and_recover();
    rig.now += 10 * limits::TURN_START_TIMEOUT_MS; // the daemon stayed down ten minutes
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.input(Input::Tick);
    assert!(rig.terminal_for(REQ).is_empty(), "no evidence yet: still waiting for the resume");
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.input(Input::Tick);
    rig.provider_turn("turn-1", "hi", "done during the outage", 1000);
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].state, TerminalState::Completed);
}

/// REC-2, OBS-2: after a restart another look at the agent (the monitor's first run, an
/// admission's refresh, resuming from the stored checkpoint) may attach past the armed cursor
/// before the resume the engine asked for is answered. That is not the resume: the request stays
/// suspended, and the resume's replay from the armed cursor completes it with its own final
/// (found by the simulator: seed 97 ended it `observer_resumed_past_cursor`). Without a resume
/// outstanding, an attach past the cursor still ends it `indeterminate`.
#[test]
fn rec_2_a_look_past_the_cursor_before_the_resume_waits_for_the_resume() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    assert_eq!(rig.resumes.len(), 1);
    // The checkpointed look: attached at 1427, then what followed it.
    rig.observe(ObserverEvent::Attached { session: session(), position: 1427 });
    rig.turn_completed("turn-1", "the real final", 1500);
    assert!(rig.terminal_for(REQ).is_empty(), "neither ended nor completed from a partial view");
    // The resume's answer: attached at the armed cursor, the whole turn replayed.
    rig.observe(ObserverEvent::Attached { session: session(), position: 1000 });
    rig.provider_turn("turn-1", "hi", "the real final", 1000);
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].state, TerminalState::Completed);
    assert_eq!(events[0].final_message.as_deref(), Some("the real final"));

    // The resume answered by a lost session instead: indeterminate, never completed from
    // what the look past the cursor saw.
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    restart_with_zola(&mut rig, zola_facts("inc-1", 100));
    rig.observe(ObserverEvent::Attached { session: session(), position: 1427 });
    rig.turn_completed("turn-1", "the real final", 1500);
    rig.observe(ObserverEvent::SessionLost { reason: "the rollout changed while the daemon was down".into(), session: None, before: None });
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].state, TerminalState::Indeterminate);
}
