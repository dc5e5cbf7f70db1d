//! TIME-2: a restart ages the writes of earlier daemons, and orders them, on the machine's
//! monotonic clock, whatever their wall clocks said (ADM-5's hold after a restart).

mod support;

use support::*;
use wakterm_engine::*;

/// A write to a managed agent 5 s before the crash (its hold lasts RF-8's timeout, no probe
/// ends it sooner), then a restart whose wall clock was stepped by `step_ms` while the daemon
/// was down (in `boot`); a return-final admission then: its receipt.
fn restart_after_a_recent_write(step_ms: i64, boot: &str) -> (Rig, Receipt) {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.advance(5_000);
    rig.wall_clock_stepped_while_down(step_ms);
    rig.run_clock.as_mut().unwrap().boot_id = boot.to_string();
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
    rig.input(Input::StartupComplete);
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    let receipt = rig.receipt(op).clone();
    (rig, receipt)
}

// TIME-2, ADM-5: a wall clock stepped forward while the daemon was down made a write of 5 s
// ago look ten minutes old by the times its record holds: the restart neither loaded it (its
// update lay before the window) nor held for it, and the next prompt went over its unread
// line. Stepped back, the write looked to lie in the future, and the agent was held RF-8's
// timeout from the restart instead of from the write (a managed agent: a PTY agent's probe
// ends the wait sooner). Both are now counted on the monotonic clock: the hold, and its end
// 60 s after the write.
#[test]
fn time_2_a_restart_holds_for_a_recent_write_whatever_the_wall_clock_did_while_down() {
    for (case, step_ms) in [("stepped back 10 min", -600_000), ("stepped forward 10 min", 600_000), ("not stepped", 0)] {
        let (mut rig, receipt) = restart_after_a_recent_write(step_ms, RIG_BOOT);
        assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}: {receipt:?}");
        assert_eq!(rig.written.len(), 1, "{case}: nothing written over the line");
        rig.advance(limits::TURN_START_TIMEOUT_MS - 5_000); // 60 s after the write
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait ends 60 s after the write: {:?}", rig.receipt(op));
    }
}

// TIME-2: monotonic times of two boots do not compare. A record of another boot is aged by
// the wall clocks, as before there were run clocks (no process of an earlier boot runs, so
// such a hold is rare; it is never dropped for it).
#[test]
fn time_2_a_write_of_another_boot_is_aged_by_the_wall_clock() {
    let (_, receipt) = restart_after_a_recent_write(0, "another boot");
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{receipt:?}");
    let (_, receipt) = restart_after_a_recent_write(600_000, "another boot");
    assert_eq!(receipt.classification, Classification::Accepted, "by the wall clock, ten minutes old: {receipt:?}");
}

// TIME-2, ADM-5: two writes into one process whose floors lie in two sessions (the rollout
// replaced between them), the earlier by a daemon whose wall clock stood 30 min ahead. By
// recorded registration times the earlier write looked the latest, and the reopened wait took
// its floor, in the first session: a turn the resume replays in the second session, before the
// later write's floor, counted as past it and ended the wait for the later write still unread
// (a review's gap, SPEC RF-7). The monotonic clock orders them.
#[test]
fn time_2_the_reopened_wait_takes_the_later_write_when_the_floors_lie_in_two_sessions() {
    let mut rig = Rig::with_idle_zola();
    let zola = agent_id(ZOLA);
    let op = rig.admit(REQ, "first", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.provider_turn("turn-1", "first", "the final", 2_000);
    rig.advance(1_000);
    // The rollout is replaced: a new session, where a human's turn runs before the next write.
    let replaced = SessionId("sess-2".to_string());
    rig.observe(ObserverEvent::SessionLost { reason: "replaced".into(), session: None, before: None });
    rig.observe(ObserverEvent::Attached { session: replaced.clone(), position: 100 });
    let (mark_before, events_before) = (rig.durable_marks[&zola].clone(), rig.durable_events.len());
    rig.observe(ObserverEvent::TurnStarted { session: replaced.clone(), turn: turn("turn-h"), position: 300 });
    rig.observe(ObserverEvent::TurnCompleted { session: replaced.clone(), turn: turn("turn-h"), final_message: None, position: 400 });
    let idle = ObserverSnapshot { session: Some(replaced.clone()), position: 500, turn: TurnState::Idle { last_completed: Some(turn("turn-h")) }, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(zola.clone(), Ok(idle));
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.advance(500);
    let second = &rig.durable[&RequestId::parse(REQ2).unwrap()];
    assert_eq!((second.phase, second.written_past.clone()), (Phase::Submitted, Some(Cursor { session: replaced.clone(), position: 500 })));
    // The first write, as a daemon whose wall clock stood 30 min ahead recorded it: every
    // time 30 min later, its offset to the monotonic clock 30 min lower.
    let first = rig.durable.get_mut(&RequestId::parse(REQ).unwrap()).unwrap();
    let ahead = 30 * 60 * 1_000;
    first.registered_ms += ahead;
    first.updated_ms += ahead;
    first.evidence.iter_mut().for_each(|e| e.at_ms += ahead);
    first.run_clock.as_mut().expect("stamped").offset_ms -= i64::try_from(ahead).unwrap();
    assert!(first.registered_ms > rig.durable[&RequestId::parse(REQ2).unwrap()].registered_ms, "by the wall clocks, the first looks later");
    // Its turn's events never became durable: the resume reads the human's turn again.
    rig.durable_marks.insert(zola.clone(), mark_before);
    rig.durable_events.truncate(events_before);
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.observe(ObserverEvent::TurnStarted { session: replaced.clone(), turn: turn("turn-h"), position: 300 });
    rig.observe(ObserverEvent::TurnCompleted { session: replaced, turn: turn("turn-h"), final_message: None, position: 400 });
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
}

// TIME-2, RF-7: a return-final prompt an earlier daemon wrote to a PTY agent that opened no
// turn ends `no_turn_started` at the restart's first probe that finds the agent idle with an
// empty composer, its age counted on the monotonic clock. By its recorded registration time, a
// wall clock stepped back 10 min while the daemon was down made it look registered in the
// future: the probe freed the agent and left the request waiting for RF-8's timeout.
#[test]
fn time_2_a_recovered_request_that_opened_no_turn_ends_at_the_probe_whatever_the_wall_clock() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, "went elsewhere", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Submitted);
    rig.advance(1_000);
    rig.wall_clock_stepped_while_down(-600_000);
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    let cursor = rig.resumes.last().expect("REC-2: the request resumes from its armed cursor").1.clone();
    rig.observe(ObserverEvent::Attached { session: cursor.session.clone(), position: cursor.position });
    rig.advance(limits::AWAITING_TURN_GRACE_MS + 1_000);
    let ended: Vec<_> = rig.terminal_for(REQ).iter().map(|e| (e.state, e.reason.clone())).collect();
    assert_eq!(ended, [(TerminalState::Indeterminate, Some("no_turn_started".to_string()))], "ended at the probe, not at RF-8's timeout");
}

// TIME-2, ADM-5: a restart places its own time on the clock of the run that registered a
// record (`RequestRecord::own_time`, for `write_unknown_since_ms`) through the monotonic clock;
// where the two frames do not meet (a restart without a clock for a record with one, another
// boot, a time before the registration), it places nothing and the record is aged from its registration, as a record
// of an older daemon: a restart's raw engine time read in the registering run's frame made a
// line look older by as far as the two wall clocks stood apart (a review).
#[test]
fn time_2_a_restarts_time_is_placed_on_the_registering_runs_clock() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, "first", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    let mut record = rig.durable[&RequestId::parse(REQ).unwrap()].clone();
    let registered = record.registered_ms;
    let clock = |boot: &str, offset_ms: i64| RunClock { boot_id: boot.to_string(), offset_ms };
    record.run_clock = Some(clock("b", 1_000));
    // The restart's wall clock stood 10 min behind: its engine time 600,000 lower for the
    // same moment, its offset 600,000 higher.
    let restart = clock("b", 601_000);
    assert_eq!(record.own_time(registered + 5_000 - 600_000, Some(&restart)), Some(registered + 5_000));
    assert_eq!(record.own_time(registered + 5_000, Some(&clock("other boot", 1_000))), None, "another boot");
    assert_eq!(record.own_time(registered + 5_000, None), None, "a restart without a clock");
    assert_eq!(record.own_time(registered - 1 - 600_000, Some(&restart)), None, "before the registration");
    record.run_clock = None;
    assert_eq!(record.own_time(registered + 5_000, Some(&restart)), Some(registered + 5_000), "a record without a clock is aged by the wall clocks");
    assert_eq!(record.own_time(registered + 5_000, None), Some(registered + 5_000), "neither has one: the wall clocks'");
}
