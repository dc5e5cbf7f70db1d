//! MGD-2, MGD-3: admissions to a managed app-server agent (CORR-8) as engine transitions.

mod support;
use support::*;
use wakterm_engine::*;

// MGD-3: the one write is the JSON-RPC turn/start line for the agent's thread, the prompt its
// only input; the receipt names the event cursor.
#[test]
fn mgd_3_a_managed_admission_writes_one_turn_start_line() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "two\nlines", ReturnMode::ReturnFinal);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Accepted, "{receipt:?}");
    assert_eq!(receipt.correlation_source, Some(CorrelationSource::AgentApiEvents));
    let (_, bytes) = &rig.written[0];
    assert_eq!(bytes, &prompt::managed_turn_start(THREAD, &prompt::turn_start_id(REQ, 0x5eed), "two\nlines"));
    let line: serde_json::Value = serde_json::from_slice(bytes.strip_prefix(prompt::LINE_LEAD).unwrap()).unwrap();
    assert_eq!((line["method"].as_str(), line["params"]["threadId"].as_str()), (Some("turn/start"), Some(THREAD)));
    // The turn that prompt started completes the request with its own final (CORR-8).
    rig.provider_turn("turn-1", "two\nlines", "the final", 1_000);
    assert_eq!(rig.terminal_for(REQ)[0].final_message.as_deref(), Some("the final"));
}

// RF-7, ADM-5 for a managed agent: an app-server has no composer, so an idle thread 10 s after
// the write is no evidence that the `turn/start` line went somewhere else (an app-server slow to
// read its input has simply not read it yet). The request waits for RF-8's 60 s and the agent
// stays busy (`awaiting_turn_start`) meanwhile, so no second prompt races into the thread.
#[test]
fn rf_7_a_managed_prompt_not_yet_read_keeps_the_agent_busy_until_rf_8() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "slow reader", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    for _ in 0..5 {
        rig.advance(limits::AWAITING_TURN_GRACE_MS);
    }
    assert!(rig.terminal_for(REQ).is_empty(), "50 s: the line may still be unread");
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
    assert_eq!(rig.written.len(), 1, "nothing written on top of the unread line");
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    let ended = rig.terminal_for(REQ);
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("no_turn_started")), "RF-8");
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "the wait is over: {:?}", rig.receipt(op));
}

// MGD-3, ADM-3: without any observer view (its refresh timed out) a managed agent takes no
// plain send: the send needs the live stream for its acknowledgement and must not race a line
// the app-server has not read (a raw paste went on so, on top of an unread `turn/start`:
// exploration seed 5008042). A raw paste is `unsupported` for a managed agent with or without
// a view.
#[test]
fn mgd_3_a_managed_send_without_a_view_is_refused_before_any_write() {
    for raw in [false, true] {
        let mut rig = managed_zola(Some(THREAD));
        rig.auto = Auto::Manual;
        let mut command = rig.command(Operation::Send, REQ, "steer me", ReturnMode::OneWay);
        if raw {
            command.paste_mode = PasteMode::Raw;
        }
        let op = rig.submit(command);
        rig.advance(limits::REFRESH_TIMEOUT_MS);
        let receipt = rig.receipt(op);
        let expected = if raw { (Classification::Unsupported, "raw_paste_managed") } else { (Classification::ObserverFailure, "observer_unavailable") };
        assert_eq!((receipt.classification, receipt.reason.as_deref()), (expected.0, Some(expected.1)), "{receipt:?}");
        assert!(rig.persists.is_empty() && rig.deliveries.is_empty(), "nothing registered or written");
    }
}

// CORR-15: two prompts of the same text, the first read by a stalled app-server only after
// RF-8 ended its request: the second request must not bind the first's turn (its text
// matches) and deliver that turn's final; the app-server's answers to the two `turn/start`
// requests say which turn carries which (a review got `completed` with the other turn's final).
#[test]
fn corr_15_a_turn_accepted_for_another_request_is_not_ours_whatever_its_text() {
    let mut rig = managed_zola(Some(THREAD));
    let first = rig.admit(REQ, "same prompt", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(first).classification, Classification::Accepted);
    for _ in 0..7 {
        rig.advance(limits::AWAITING_TURN_GRACE_MS);
    }
    assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("no_turn_started"), "RF-8 ended the first");
    let second = rig.admit(REQ2, "same prompt", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(second).classification, Classification::Accepted, "{:?}", rig.receipt(second));
    let accepted = |rig: &mut Rig, request: &str, turn_id: &str, position: u64| {
        let id = prompt::turn_start_id(request, 0x5eed);
        rig.observe(ObserverEvent::TurnAccepted { session: session(), id, turn: turn(turn_id), position });
    };
    // The stalled app-server reads the first line now, then the second.
    accepted(&mut rig, REQ, "turn-a", 2_000);
    rig.provider_turn("turn-a", "same prompt", "the first prompt's final", 2_000);
    assert!(rig.terminal_for(REQ2).is_empty(), "not bound to the first request's turn: {:?}", rig.terminal_for(REQ2));
    accepted(&mut rig, REQ2, "turn-b", 3_000);
    rig.provider_turn("turn-b", "same prompt", "the second prompt's final", 3_000);
    let ended = rig.terminal_for(REQ2);
    assert_eq!((ended[0].state, ended[0].final_message.as_deref()), (TerminalState::Completed, Some("the second prompt's final")), "{ended:?}");
}

// ADM-5 for a managed agent: a turn the app-server opened for another writer's `turn/start`
// (a human's prompt through the holder: its reply names its id first) says nothing of our
// unread line, so it does not end the wait; the acceptance of our own line does (also when
// folded into a running turn, whose user message would prove nothing). Before, any turn start ended it and the next prompt was written over
// the unread one (exploration seed 5015819: raw prompts ran while the holder stalled on our
// write). A turn whose acceptance is unknown (its reply lost) no longer ends it either: only
// RF-8's grace does.
#[test]
fn adm_5_a_turn_another_writer_opened_does_not_end_the_wait() {
    let ours = || prompt::turn_start_id(REQ, 0x5eed);
    for case in ["our turn", "folded into theirs", "unattributed"] {
        let mut rig = managed_zola(Some(THREAD));
        let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        let human = "mcp-input-human 1".to_string();
        rig.observe(ObserverEvent::TurnAccepted { session: session(), id: human, turn: turn("turn-h"), position: 1_100 });
        rig.turn_started("turn-h", 1_150);
        rig.user_message("turn-h", "a human's prompt", 1_200);
        if case == "folded into theirs" {
            // Our line read while their turn runs: folded into it, the wait is over.
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id: ours(), turn: turn("turn-h"), position: 1_220 });
        }
        rig.turn_completed("turn-h", "the human's answer", 1_250);
        if case == "folded into theirs" {
            let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
            assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op));
            continue;
        }
        let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        if case == "our turn" {
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id: ours(), turn: turn("turn-o"), position: 1_300 });
            // The reply comes before the turn's start and changes no turn state: the wait
            // holds until the start (else the next prompt would race into the starting turn).
            let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "between", ReturnMode::OneWay);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
            rig.turn_started("turn-o", 1_350);
            rig.turn_completed("turn-o", "our answer", 1_380);
        } else {
            rig.turn_started("turn-unattributed", 1_400); // its reply lost: it may be ours, or not
            rig.turn_completed("turn-unattributed", "whose?", 1_450);
            let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "between", ReturnMode::OneWay);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
            rig.advance(limits::TURN_START_TIMEOUT_MS); // RF-7's probe at RF-8's grace ends it
        }
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait is over: {:?}", rig.receipt(op));
    }
}

// ADM-5 for a managed agent, live: the view may stand behind the stream at the write (a
// delayed observer), so a turn that began before the write, shown after it, lies past the
// write's floor. Here an earlier prompt of ours, read late after RF-8 had given its wait up:
// its turn, opened by one of wakterm's lines, ended the wait for the next prompt, whose line
// was still unread, and a third prompt was written on top (seed 6717's mechanism without its
// crash; a known gap until now). Only the acceptance of the line's own id ends the wait now.
#[test]
fn adm_5_a_turn_shown_after_the_write_does_not_end_the_wait_for_an_unread_line() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "read very late", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.advance(limits::TURN_START_TIMEOUT_MS); // RF-8: the wait for it is given up
    let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    assert_eq!(rig.written.len(), 2);
    // The first line's turn, read before the second line and shown only now.
    rig.managed_turn(REQ, "turn-1", "read very late", "its final", 5_000);
    let third = "fe57dc90-994e-4e73-b09c-fac483d9f05d";
    let op = rig.admit(third, "third", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "the second line is unread: {:?}", rig.receipt(op));
    assert_eq!(rig.written.len(), 2, "nothing written on top of the unread line");
    // A turn whose reply was lost (or a steer folded into a turn of ours) says no more.
    rig.provider_turn("turn-unattributed", "whose?", "its answer", 6_000);
    let op = rig.admit(third, "third", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
    // The second line's own acceptance, then its turn, end the wait.
    rig.managed_turn(REQ2, "turn-2", "second", "its final", 7_000);
    let op = rig.admit(third, "third", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "the wait is over: {:?}", rig.receipt(op));
}

// ADM-5 for a managed agent: the acceptance of the awaited line may arrive replayed (a resume
// after the stream dropped), when the view already stands past it (a snapshot). Folded into a
// turn whose start came before it, the line was read and its turn is running: the wait is
// over; the view cannot say so (it may show that turn ended), the replayed start can
// (exploration seed 596 held the agent for RF-8's minute). Into a turn yet to start, the wait
// goes on until that start, replayed or not.
#[test]
fn adm_5_a_replayed_acceptance_of_the_awaited_line_ends_the_wait_as_a_live_one() {
    let ours = || prompt::turn_start_id(REQ, 0x5eed);
    for case in ["folded", "new turn replayed", "new turn fresh"] {
        let mut rig = managed_zola(Some(THREAD));
        let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        let mut later = idle_snapshot("inc-1", 100);
        later.position = 6_000;
        later.turn = TurnState::Idle { last_completed: Some(turn("turn-2")) };
        rig.snapshots.insert(agent_id(ZOLA), Ok(later));
        let op = rig.admit(REQ2, "second", ReturnMode::OneWay); // its look moves the view on
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        let accepted = |rig: &mut Rig, id: String, t: &str, position: u64| rig.observe(ObserverEvent::TurnAccepted { session: session(), id, turn: turn(t), position });
        match case {
            "folded" => {
                accepted(&mut rig, "human-1".into(), "turn-2", 1_100);
                rig.turn_started("turn-2", 1_150);
                accepted(&mut rig, ours(), "turn-2", 1_300);
                rig.turn_completed("turn-2", "both answered", 1_400);
            }
            "new turn replayed" => {
                accepted(&mut rig, ours(), "turn-2", 1_300);
                rig.turn_started("turn-2", 1_350);
                rig.turn_completed("turn-2", "answered", 1_400);
            }
            _ => {
                accepted(&mut rig, ours(), "turn-3", 5_900);
                let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "between", ReturnMode::OneWay);
                assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: the turn starts later: {:?}", rig.receipt(op));
                rig.turn_started("turn-3", 6_100);
                rig.turn_completed("turn-3", "answered", 6_200);
            }
        }
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait is over: {:?}", rig.receipt(op));
    }
}

// ADM-5 for a managed agent, the answers to the awaited line (a review of the live rule):
// accepted into a turn another writer opened, before that turn's start was reported (Codex
// replies before `turn/started`), the wait ends at that turn's start, whoever opened it (it
// waited for RF-8's minute: the turn's opener was the human's); refused (MGD-7's error reply,
// also for a one-way prompt past its acknowledgement wait), no turn will come of it: the wait
// ends at once (it waited for the minute too).
#[test]
fn adm_5_the_awaited_lines_own_answer_ends_the_wait() {
    let ours = || prompt::turn_start_id(REQ, 0x5eed);
    for case in ["folded before the start", "refused"] {
        let mut rig = managed_zola(Some(THREAD));
        let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        rig.advance(limits::SEND_ACK_WAIT_MS + 1); // past any acknowledgement wait
        let between = "fe57dc90-994e-4e73-b09c-fac483d9f05e";
        if case == "refused" {
            rig.observe(ObserverEvent::RequestRefused { session: session(), id: ours(), error: "overloaded".into(), position: 1_100 });
        } else {
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id: "human-1".into(), turn: turn("turn-h"), position: 1_100 });
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id: ours(), turn: turn("turn-h"), position: 1_120 });
            let op = rig.admit(between, "between", ReturnMode::OneWay);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: the turn is starting: {:?}", rig.receipt(op));
            rig.turn_started("turn-h", 1_150);
            rig.turn_completed("turn-h", "both answered", 1_250);
        }
        let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait is over: {:?}", rig.receipt(op));
    }
}

// ADM-5 for a managed agent across a restart: the write's floor is the view at the write,
// which may stand behind the stream, so the mark's turn past it says nothing sure of the line
// (here an earlier prompt of ours, read late: its turn came after the floor while the later
// line was still unread, and the restart held nothing: the next prompt went over that line,
// as the live rule's review found). The mark now keeps the latest of wakterm's lines the
// app-server answered and whether its turn took it (`EventMark::answered_lines`): the restart
// holds the agent for its latest write's own line unless the mark saw it refused or taken.
#[test]
fn adm_5_a_restart_waits_for_the_latest_lines_own_answer() {
    let line = |request: &str| prompt::turn_start_id(request, 0x5eed);
    for case in ["an earlier line's turn", "its turn taken", "accepted only", "refused"] {
        let mut rig = managed_zola(Some(THREAD));
        rig.admit(REQ, "read very late", ReturnMode::OneWay);
        rig.advance(limits::TURN_START_TIMEOUT_MS); // RF-8: the wait for it is given up
        let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op));
        rig.managed_turn(REQ, "turn-1", "read very late", "its final", 5_000); // past the second's floor
        match case {
            "its turn taken" => rig.managed_turn(REQ2, "turn-2", "second", "its final", 6_000),
            "accepted only" => rig.observe(ObserverEvent::TurnAccepted { session: session(), id: line(REQ2), turn: turn("turn-2"), position: 6_000 }),
            "refused" => rig.observe(ObserverEvent::RequestRefused { session: session(), id: line(REQ2), error: "overloaded".into(), position: 6_000 }),
            _ => {}
        }
        rig.turn_completed("turn-x", "an unrelated record makes the mark durable", 6_500);
        let answered = rig.durable_marks[&agent_id(ZOLA)].answered_lines.last().cloned().expect("a line answered");
        assert_eq!(answered.id, if case == "an earlier line's turn" { line(REQ) } else { line(REQ2) }, "{case}");
        rig.advance(1_000);
        let third = "fe57dc90-994e-4e73-b09c-fac483d9f05d";
        let receipt = restart_then_admit(&mut rig, managed_facts(Some(THREAD)), third);
        match case {
            "its turn taken" | "refused" => {
                assert_eq!(receipt.classification, Classification::Accepted, "{case}: the line was read: {receipt:?}");
                continue;
            }
            _ => assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}: the line may be unread: {receipt:?}"),
        }
        if case == "accepted only" {
            rig.turn_started("turn-2", 7_000); // the accepted turn's start ends it
            rig.turn_completed("turn-2", "its final", 7_100);
        } else {
            rig.managed_turn(REQ2, "turn-2", "second", "its final", 7_000);
        }
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "fourth", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait is over: {:?}", rig.receipt(op));
    }
}

// ADM-5 across a restart: a loss of the session between our line's acceptance into a turn
// not yet started and that turn's start (the app-server's notifications evicted) keeps what the
// mark knows of the line (`EventMark::forget_turns` keeps the answered lines): the turn's start
// reported after the loss takes the line, so a restart holds nothing; with no start before the
// crash, the restart waits for that turn's start, which ends the wait. Before, the loss cleared
// the answer, and the restart waited RF-8's minute for the line's own answer, which the resume
// never replays (exploration seed 3640021).
#[test]
fn adm_5_a_loss_between_a_lines_acceptance_and_its_turns_start_keeps_the_answer() {
    for case in ["started after the loss", "not started before the crash"] {
        let mut rig = managed_zola(Some(THREAD));
        let op = rig.admit(REQ, "slow start", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op));
        rig.observe(ObserverEvent::TurnAccepted { session: session(), id: prompt::turn_start_id(REQ, 0x5eed), turn: turn("turn-1"), position: 2_000 });
        rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "an event makes the mark durable".into(), phase: None, position: 2_100 });
        rig.observe(ObserverEvent::SessionLost { reason: "app-server notifications were evicted".into(), session: Some(session()), before: None });
        rig.observe(ObserverEvent::Attached { session: session(), position: 2_500 });
        if case == "started after the loss" {
            rig.turn_started("turn-1", 2_600);
            rig.turn_completed("turn-1", "its final", 2_650);
        } else {
            rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "another event".into(), phase: None, position: 2_600 });
        }
        let answered = rig.durable_marks[&agent_id(ZOLA)].answered_lines.last().cloned();
        assert_eq!(answered.map(|a| (a.turn, a.taken)), Some((Some(turn("turn-1")), case == "started after the loss")), "{case}: the durable mark keeps the answer");
        rig.advance(1_000);
        let receipt = restart_then_admit(&mut rig, managed_facts(Some(THREAD)), REQ2);
        if case == "started after the loss" {
            assert_eq!(receipt.classification, Classification::Accepted, "{case}: the line was read: {receipt:?}");
            continue;
        }
        assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}: the accepted turn may be starting: {receipt:?}");
        // The accepted turn's start ends the wait (its completion alone would not: a wait for
        // the line's own answer outlived both).
        rig.turn_started("turn-1", 2_700);
        rig.turn_completed("turn-1", "its final", 2_750);
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "third", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait ended with the accepted turn's start: {:?}", rig.receipt(op));
    }
}

// ADM-5 across a restart: a request whose prompt was seen taken (here bound to its running
// turn) that came after the agent's other recovered write says every line before it was read:
// nothing is held for the earlier one. The restart waited for the earlier line's own answer,
// which it never saw again (the mark keeps only the latest answered line), and held the agent
// for RF-8's minute after the later turn ended (the simulator's seed 581).
#[test]
fn adm_5_a_restart_holds_nothing_for_a_line_before_one_seen_taken() {
    let mut rig = managed_zola(Some(THREAD));
    rig.admit(REQ, "first", ReturnMode::OneWay);
    rig.managed_turn(REQ, "turn-1", "first", "its final", 2_000);
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    rig.observe(ObserverEvent::TurnAccepted { session: session(), id: prompt::turn_start_id(REQ2, 0x5eed), turn: turn("turn-2"), position: 3_005 });
    rig.turn_started("turn-2", 3_010);
    rig.user_message("turn-2", "second", 3_020);
    assert_eq!(rig.durable[&RequestId::parse(REQ2).unwrap()].phase, Phase::Bound);
    rig.advance(1_000);
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
    rig.input(Input::StartupComplete);
    let cursor = rig.resumes.last().expect("REC-2: the bound request resumes").1.clone();
    rig.observe(ObserverEvent::Attached { session: cursor.session.clone(), position: cursor.position });
    rig.turn_completed("turn-2", "the second's final", 3_100);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "nothing is unread: {:?}", rig.receipt(op));
}

// ADM-5 across a restart, what the mark keeps of a line's answer (a review): two forged
// refusals under ids of wakterm's form (a raw writer guessing them) do not evict it (the mark
// kept one line, and the restart held the agent for RF-8's minute); an error under the id
// after its acceptance (a holder-socket client that read the result) does not turn it into a
// refusal (the restart held nothing while the accepted turn was starting); a line accepted
// into the turn last started (a steer) is taken at once (the restart waited for a user
// message the crash came before).
#[test]
fn adm_5_the_marks_answer_survives_forgeries_and_replayed_ids_and_counts_a_steer() {
    let ours = || prompt::turn_start_id(REQ, 0x5eed);
    let refused = |rig: &mut Rig, id: String, position: u64| {
        rig.observe(ObserverEvent::RequestRefused { session: session(), id, error: "no such thread".into(), position });
    };
    for case in ["forged refusals", "an error under the answered id", "a steer"] {
        let mut rig = managed_zola(Some(THREAD));
        rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        match case {
            "forged refusals" => {
                rig.managed_turn(REQ, "turn-1", "slow reader", "its final", 2_000);
                refused(&mut rig, format!("wakterm-{REQ}"), 2_100);
                refused(&mut rig, prompt::turn_start_id(REQ, 0), 2_110);
            }
            "an error under the answered id" => {
                rig.observe(ObserverEvent::TurnAccepted { session: session(), id: ours(), turn: turn("turn-1"), position: 2_000 });
                refused(&mut rig, ours(), 2_005);
            }
            _ => {
                rig.observe(ObserverEvent::TurnAccepted { session: session(), id: "human-1".into(), turn: turn("turn-h"), position: 2_000 });
                rig.turn_started("turn-h", 2_010);
                rig.observe(ObserverEvent::TurnAccepted { session: session(), id: ours(), turn: turn("turn-h"), position: 2_020 });
            }
        }
        rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "an event makes the mark durable".into(), phase: None, position: 2_200 });
        rig.advance(1_000);
        let receipt = restart_then_admit(&mut rig, managed_facts(Some(THREAD)), REQ2);
        match case {
            "an error under the answered id" => {
                assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}: the accepted turn may be starting: {receipt:?}")
            }
            _ => assert_eq!(receipt.classification, Classification::Accepted, "{case}: the line was read: {receipt:?}"),
        }
    }
}

// ADM-5 across a restart, which write came last: a request seen taken supersedes an earlier
// write's wait only when registered after it by the monotonic clock, not by floors: a file cut
// back under the same session id set the view lower, so the later, unread write's floor lay
// below the taken one's, and the restart took the taken one for the latest and held nothing
// (a review). A PTY agent; its floor rule then holds it.
#[test]
fn adm_5_a_taken_write_supersedes_only_a_write_registered_before_it() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    rig.provider_turn("turn-1", "first", "its final", 5_000);
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].bound_turn, Some(turn("turn-1")));
    // The file is cut back under its session id: the loss, a look that fails (the view is
    // dropped), and the next look finds it shorter.
    rig.observe(ObserverEvent::SessionLost { reason: "truncated".into(), session: None, before: None });
    rig.snapshots.insert(agent_id(ZOLA), Err("the rollout cannot be read".into()));
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "refused", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::ObserverFailure, "{:?}", rig.receipt(op));
    let cut = ObserverSnapshot { position: 800, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(cut));
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    rig.advance(1_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "fe57dc90-994e-4e73-b09c-fac483d9f05d");
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "the second prompt may be unread: {receipt:?}");
}

// CORR-11 for a managed agent: an app-server exit after the prompt's `turn/start` was
// written, with its output read to the end and no turn in it, is still `indeterminate`: Codex
// hands the input to the thread (which records it) before it writes anything, so a process
// killed in between leaves the prompt in the thread with no line about it (a review got
// `delivery_failed`, which invites a resend of a prompt the thread had run).
#[test]
fn corr_11_a_managed_exit_is_no_proof_the_prompt_never_reached_the_thread() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "reached but silent", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.observe(ObserverEvent::ProcessExited { drained: true });
    let ended = rig.terminal_for(REQ);
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("process_exited")), "{ended:?}");
}

// ADM-5 across a restart: a daemon started after a managed prompt's write (its submitted
// marker durable, its turn not seen starting) holds the agent busy as the writer did, so no
// prompt is written on top of a line the app-server may not have read. The wait runs from the
// start; it ends with a turn start, or RF-8's grace later. A daemon started after such a
// write knew nothing of it and admitted the next prompt at once (a known gap until now).
#[test]
fn adm_5_a_restart_keeps_a_written_managed_prompt_awaiting_its_turn() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "slow reader", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.crash_and_recover_open_only();
    rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
    rig.input(Input::StartupComplete);
    assert_eq!(rig.resumes.len(), 1, "REC-2: the request resumes from its armed cursor");
    let cursor = rig.resumes[0].1.clone();
    rig.observe(ObserverEvent::Attached { session: cursor.session.clone(), position: cursor.position });
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
    assert_eq!(rig.written.len(), 1, "nothing written on top of the line written before the restart");
    // The first prompt's own turn ends the wait.
    rig.managed_turn(REQ, "turn-1", "slow reader", "the final", cursor.position + 10);
    assert_eq!(rig.terminal_for(REQ)[0].final_message.as_deref(), Some("the final"));
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "the wait is over: {:?}", rig.receipt(op));
}

// ADM-5 across a restart, for a one-way prompt: its record is settled (finished) at once, so a
// daemon started after its write knew nothing of it and wrote the next prompt on top of the
// unread line (a known gap until the CI exploration's seed 16413642 led to it; the simulator's
// check fails 9 of seeds 1-20,000 without the reopen). The restart now loads each agent's
// latest settled request of the last `TURN_START_TIMEOUT_MS` and reopens the wait from the
// write: its own turn ends it, and so does the timeout counted from the write; a prompt seen
// taken (acknowledged) reopens nothing.
#[test]
fn adm_5_a_restart_keeps_a_one_way_prompt_written_shortly_before_awaiting_its_turn() {
    for (case, acknowledged, own_turn) in [("turn", false, true), ("timeout", false, false), ("acknowledged", true, false)] {
        let mut rig = managed_zola(Some(THREAD));
        let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        if acknowledged {
            let record = rig.durable.get_mut(&RequestId::parse(REQ).unwrap()).unwrap();
            record.receipt.as_mut().unwrap().acknowledged = Some(true); // as a plain send's ack
        }
        rig.advance(5_000);
        rig.crash_and_recover_as_the_daemon();
        rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
        rig.input(Input::StartupComplete);
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        if acknowledged {
            assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op));
            continue;
        }
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        assert_eq!(rig.written.len(), 1, "{case}: nothing written on top of the line written before the restart");
        if own_turn {
            rig.managed_turn(REQ, "turn-1", "slow reader", "the final", 2_000);
        } else {
            rig.advance(limits::TURN_START_TIMEOUT_MS - 5_000); // 60 s after the write, not after the restart
        }
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait is over: {:?}", rig.receipt(op));
    }
}

/// ADM-5 across a restart: the daemon crashes and starts again, the agent registers with
/// `facts`, and a return-final admission `request_id` comes: its receipt.
/// TIME-2: `record` as a daemon whose wall clock stood 30 min ahead recorded it: every time 30
/// min later, and its offset to the monotonic clock 30 min lower (`run_clock`), or none known
/// (an older daemon's record).
fn recorded_by_a_clock_ahead(record: &mut RequestRecord, run_clock: bool) {
    let ahead = 30 * 60 * 1_000;
    record.registered_ms += ahead;
    record.updated_ms += ahead;
    record.evidence.iter_mut().for_each(|e| e.at_ms += ahead);
    match run_clock {
        true => record.run_clock.as_mut().expect("stamped").offset_ms -= i64::try_from(ahead).unwrap(),
        false => record.run_clock = None,
    }
}

fn restart_then_admit(rig: &mut Rig, facts: AgentFacts, request_id: &str) -> Receipt {
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(facts));
    rig.input(Input::StartupComplete);
    let op = rig.admit(request_id, "second", ReturnMode::ReturnFinal);
    rig.receipt(op).clone()
}

// ADM-5, REC-1 across a restart (PTY): a plain send registered while the observer had no view
// (ADM-13 writes then) has no armed cursor; left unfinished by a crash, its line may still be
// unread, and the restart held nothing for it (RecoveredWrite::of needed a cursor): the next
// prompt went over it (the simulator's exploration seeds 300010150 and 4200025562, once a TUI
// could take a prompt and start its turn late). It is held for now, by its prompt alone.
#[test]
fn adm_5_an_unfinished_send_registered_with_no_view_is_held_for_after_a_restart() {
    let mut rig = Rig::with_idle_zola();
    rig.lose_the_view();
    rig.auto = Auto::Manual;
    let command = rig.command(Operation::Send, REQ, "one", ReturnMode::OneWay);
    rig.submit(command);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // registered, no armed cursor; the write is handed out
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].armed, None);
    rig.crash_and_recover_as_the_daemon();
    rig.auto = Auto::All;
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
    // A second restart within the minute finds the registration the first ended (`write_unknown`).
    assert!(rig.durable[&RequestId::parse(REQ).unwrap()].write_unknown);
    rig.advance(2_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21");
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "the second restart: {receipt:?}");
    rig.observe(ObserverEvent::Attached { session: session(), position: 1_000 });
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "one", 1_110);
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
}

// ADM-5 across a restart (PTY): the durable mark's turn past the write's floor that does not
// carry the written prompt says nothing of it. The view at the write may stand behind the
// rollout: a human's turn that began before the write was read after it, past the floor; the
// restart took it for the write's and wrote the next prompt over ours, taken by the TUI but its
// turn not started yet (the simulator's `terminal.slow_turn_start`, seed 19221 of 1-20,000).
// The reopened wait, too, ends only at the user message carrying the prompt.
#[test]
fn adm_5_a_restart_takes_only_the_written_prompts_user_message_for_its_turn() {
    let mut rig = Rig::with_idle_zola(); // the view at 1,000
    let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.provider_turn("turn-h", "a human's prompt", "its final", 1_000); // begun before the write
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]), Some(Cursor { session: session(), position: 1_020 }));
    rig.advance(2_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), REQ2);
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{receipt:?}");
    // The resume replays from the checkpoint (the mark's record proves the file, EV-13); another
    // turn past the floor does not end the reopened wait; the prompt's own does.
    rig.observe(ObserverEvent::Attached { session: session(), position: 1_000 });
    rig.provider_turn("turn-h", "a human's prompt", "its final", 1_000);
    assert!(rig.awaiting_turn_start(), "the replayed turn");
    rig.provider_turn("turn-h2", "another human's prompt", "its final", 1_100);
    assert!(rig.awaiting_turn_start(), "another prompt's turn");
    rig.turn_started("turn-1", 1_200);
    rig.user_message("turn-1", "slow reader", 1_210);
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
}

/// ADM-5: a one-way prompt (`first`) written, then a human's turn that the TUI queues it
/// behind (the view at 1,000 before).
fn a_prompt_queued_behind_a_humans_turn(first: &str) -> Rig {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, first, ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.advance(500);
    rig.turn_started("turn-h", 1_050);
    rig
}

/// ADM-5: the restart after `a_prompt_queued_behind_a_humans_turn` and a send (`steer`) that
/// joined its wait: the next prompt is held until `first` itself is recorded, the send's
/// record (replayed from the checkpoint: the mark's record proves the file, EV-13) not
/// ending the wait.
fn restart_holds_until_the_queued_prompt(rig: &mut Rig, steer: &str, first: &str) {
    rig.crash_and_recover_as_the_daemon();
    rig.auto = Auto::All;
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    let op = rig.admit("0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21", "third", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
    rig.observe(ObserverEvent::Attached { session: session(), position: 1_000 });
    rig.turn_started("turn-h", 1_050);
    rig.user_message("turn-h", steer, 1_110);
    assert!(rig.awaiting_turn_start(), "the send's record is not the first prompt's");
    rig.turn_completed("turn-h", "its final", 1_150);
    rig.turn_started("turn-1", 1_200);
    rig.user_message("turn-1", first, 1_210);
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
}

// ADM-5 across a restart (PTY): a plain send that steered, taken, is no proof that a prompt
// written before it was read: the TUI may have queued that one behind the running turn (read
// is not recorded). The restart loaded only the agent's latest finished write (the send),
// took its acknowledgement as proof (input is read in order), and the next prompt went over
// the queued one (a review). It loads the latest few now (`MAX_RECENT_WRITES_LOADED`) and
// reopens the wait for the earlier prompt, which its own user message ends.
#[test]
fn adm_5_a_restart_after_a_steering_send_still_awaits_a_prompt_queued_before_it() {
    restart_after_a_steering_send("steer", "first");
}

/// ADM-5: `a_prompt_queued_behind_a_humans_turn`, a send that steered the human's turn and
/// was acknowledged, then `restart_holds_until_the_queued_prompt`.
/// Of one text, the send's message may be the first prompt's (input order), so it does not
/// acknowledge the send (ADM-13): its receipt says `false` (unknown) after the wait.
fn restart_after_a_steering_send(steer: &str, first: &str) {
    let mut rig = a_prompt_queued_behind_a_humans_turn(first);
    let command = rig.command(Operation::Send, REQ2, steer, ReturnMode::OneWay);
    let send = rig.submit(command);
    rig.user_message("turn-h", steer, 1_110); // the send steered it
    if steer == first {
        rig.advance(limits::SEND_ACK_WAIT_MS);
        assert_eq!(rig.receipt(send).acknowledged, Some(false), "the record may be the first prompt's");
    } else {
        assert_eq!(rig.receipt(send).acknowledged, Some(true));
    }
    assert!(rig.awaiting_turn_start(), "the first prompt is queued");
    rig.advance(2_000);
    restart_holds_until_the_queued_prompt(&mut rig, steer, first);
}

// ADM-5 across a restart (PTY): the same with the two prompts of one text. The mark's one
// user message, past both floors, is one write's, not the opener's too: a record counts for
// one write (`RecoveredWrite::records_taken`); and its replay from the checkpoint takes no
// reopened prompt's place (a review found both: the restart saw the opener read and wrote
// the next prompt over it; reopened for it, the replay ended the wait). Since the
// forty-eighth session the send is not acknowledged by that message live (ADM-13), so it is
// unread too, and the message goes to the latest write.
#[test]
fn adm_5_a_restart_counts_a_record_for_one_of_two_prompts_of_one_text() {
    restart_after_a_steering_send("again", "again");
}

// ADM-5 across a restart (PTY): a record counts first for the write it bound. A return-final
// prompt bound to its turn by the mark's one user message of its text, and a same-text send
// that joined its wait, acknowledged by that same message in the record a daemon older than
// the forty-seventh session left (this one waits for the send's own message, ADM-13): the
// record is the bound prompt's, so the send's may be unread (queued), and the restart holds
// for it (a review: both seen taken, the restart reopened no wait and the next prompt went
// over the send's).
#[test]
fn adm_5_a_restart_counts_a_record_first_for_the_write_it_bound() {
    let mut rig = Rig::with_idle_zola();
    rig.same_text_send_joining_a_return_final_wait("again");
    rig.advance(limits::SEND_ACK_WAIT_MS); // not acknowledged by the request's message
    let send = rig.durable.get_mut(&RequestId::parse(REQ2).unwrap()).unwrap();
    let receipt = send.receipt.as_mut().expect("settled");
    assert_eq!(receipt.acknowledged, Some(false));
    receipt.acknowledged = Some(true); // as an older daemon acknowledged it
    rig.advance(2_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21");
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{receipt:?}");
    rig.observe(ObserverEvent::Attached { session: session(), position: 1_000 });
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "again", 1_110);
    assert!(rig.awaiting_turn_start(), "the replayed record is the bound prompt's");
    rig.turn_completed("turn-1", "its final", 1_150);
    rig.turn_started("turn-2", 1_200);
    rig.user_message("turn-2", "again", 1_210);
    assert!(!rig.awaiting_turn_start(), "the send's prompt was taken");
}

// ADM-5 across a restart (PTY): the same when the crash cut the send off before its outcome
// (a registration the restart finds unfinished): its record says at registration that it
// joined a wait (a review: said only at the write, the restart awaited the send's prompt
// alone, and its record ended the wait with the first prompt queued).
#[test]
fn adm_5_a_restart_after_an_unfinished_send_that_joined_a_wait_awaits_both_prompts() {
    let mut rig = a_prompt_queued_behind_a_humans_turn("first");
    rig.auto = Auto::Manual;
    let command = rig.command(Operation::Send, REQ2, "steer", ReturnMode::OneWay);
    rig.submit(command);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // registered; the write is handed out
    assert!(rig.durable[&RequestId::parse(REQ2).unwrap()].joined_wait);
    rig.advance(1_000);
    restart_holds_until_the_queued_prompt(&mut rig, "steer", "first");
}

// ADM-5 across a restart (PTY): a later write's prompt in the durable mark says an earlier
// write, registered before it and landed, was read (input is read in order), also when the
// earlier one's own user message is no longer among the mark's few (`MAX_PROMPTS_TAKEN_KEPT`)
// or was recorded under other text (a review: the restart then held the agent for the latest
// write, whose user message lay before the mark and was never read again).
#[test]
fn adm_5_a_restart_takes_a_later_writes_prompt_as_proof_of_an_earlier_write() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, "first", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.provider_turn("turn-1", "first", "its final", 1_000);
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_030, turn: TurnState::Idle { last_completed: Some(turn("turn-1")) }, ..idle_snapshot("inc-1", 100) }));
    rig.advance(1_000); // registered later, by the monotonic clock
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    rig.auto = Auto::Manual; // the binding's record does not commit before the crash
    rig.turn_started("turn-2", 1_110);
    rig.user_message("turn-2", "second", 1_120);
    assert_eq!(rig.durable[&RequestId::parse(REQ2).unwrap()].phase, Phase::Submitted);
    let first = prompt::prompt_hash("first");
    let mark = rig.durable_marks.get_mut(&agent_id(ZOLA)).unwrap();
    mark.prompts_taken.retain(|p| p.prompt_hash != first); // out of the mark's few
    rig.advance(2_000);
    rig.crash_and_recover_as_the_daemon();
    rig.auto = Auto::All;
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    let op = rig.admit("0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21", "third", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "both writes were read: {:?}", rig.receipt(op));
}

// ADM-5 across a restart: a one-way prompt's turn that ran before the crash, its start already
// behind the event mark (no look reads it again), ends the wait the restart would reopen: the
// mark keeps the latest user messages the stream saw, with their prompts
// (`EventMark::prompts_taken`). Before, the agent was held until RF-8's timeout after the write
// although its turn had run. A turn another writer's `turn/start` opened, or one in another
// session than the write's, is no such evidence: the hold stays.
#[test]
fn adm_5_a_restart_after_a_one_way_prompts_turn_ran_holds_nothing() {
    for (case, managed) in [("pty", false), ("managed", true)] {
        let facts = if managed { managed_facts(Some(THREAD)) } else { zola_facts("inc-1", 100) };
        let mut rig = if managed { managed_zola(Some(THREAD)) } else { Rig::with_idle_zola() };
        let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        if managed {
            let id = prompt::turn_start_id(REQ, 0x5eed);
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id, turn: turn("turn-1"), position: 2_005 });
        }
        rig.provider_turn("turn-1", "slow reader", "the final", 2_000);
        let mark = &rig.durable_marks[&agent_id(ZOLA)];
        assert_eq!(taken_at(mark), Some(Cursor { session: session(), position: 2_020 }), "{case}: the user message, durable");
        rig.advance(5_000);
        let receipt = restart_then_admit(&mut rig, facts, REQ2);
        assert_eq!(receipt.classification, Classification::Accepted, "{case}: its turn ran: {:?}", receipt);
    }
    // Another writer opened the only turn after the write: ours may still be unread.
    let mut rig = managed_zola(Some(THREAD));
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.observe(ObserverEvent::TurnAccepted { session: session(), id: "human-1".into(), turn: turn("turn-9"), position: 2_005 });
    rig.provider_turn("turn-9", "a human's prompt", "its final", 2_000);
    let ours = prompt::prompt_hash("slow reader");
    assert!(!rig.durable_marks[&agent_id(ZOLA)].prompts_taken.iter().any(|p| p.prompt_hash == ours));
    rig.advance(5_000);
    let receipt = restart_then_admit(&mut rig, managed_facts(Some(THREAD)), REQ2);
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{:?}", receipt);
    // The stream's turn lies in another session than the write's floor: the hold stays.
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.observe(ObserverEvent::SessionLost { reason: "rotated".into(), session: None, before: None });
    let other = SessionId("sess-2".to_string());
    rig.observe(ObserverEvent::Attached { session: other.clone(), position: 10 });
    rig.observe(ObserverEvent::TurnStarted { session: other.clone(), turn: turn("turn-9"), position: 20 });
    rig.observe(ObserverEvent::UserMessage { session: other.clone(), turn: Some(turn("turn-9")), prompt_hash: ours, position: 30 });
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]), Some(Cursor { session: other, position: 30 }));
    rig.advance(5_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), REQ2);
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{:?}", receipt);
}

// ADM-5, EV-13: a write made while a restart's replay zone found the file cut back (its
// turns forgotten in memory, the gap's batch not durable yet) records its floor in the new
// file; the durable mark still holds a turn of the old one. A crash before the batch: the
// next restart took that turn, past the floor by position, for the write's, and wrote the
// next prompt over the unread line (a review). A turn counts only when the stream noted it
// after the write (`PromptTaken::noted_at_event`, `RequestRecord::written_at_event`).
#[test]
fn adm_5_a_turn_the_durable_mark_kept_from_before_a_cut_does_not_end_a_later_writes_wait() {
    let mut rig = Rig::with_idle_zola();
    // The same text as the write's, typed earlier (a turn of another prompt ends no PTY wait).
    rig.provider_turn("turn-1", "slow reader", "its final", 900);
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: 1_000 });
    let stale = taken_at(&rig.durable_marks[&agent_id(ZOLA)]);
    assert_eq!(stale, Some(Cursor { session: session(), position: 920 }));
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.hold_events = true; // the gap's batch does not commit before the crash
    rig.observe(ObserverEvent::Attached { session: session(), position: 400 });
    // Cut back to 400 and grown to 600: the admission's look reads it to its end, short of the
    // mark, and the turns are forgotten (in memory).
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 600, ..idle_snapshot("inc-1", 100) }));
    let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]), stale, "the gap is not durable");
    rig.advance(5_000);
    rig.hold_events = false;
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), REQ2);
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{:?}", receipt);

    // The write's turn may reach the engine before the write's outcome does: noted after the
    // write was handed out, it counts (taken at the outcome, 29 of the simulator's seeds
    // 1-40,000 failed, `Stalled`: a restart held an agent whose turn had run).
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // registered; the write is handed out
    rig.provider_turn("turn-1", "slow reader", "the final", 2_000);
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.auto = Auto::All;
    rig.settle();
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]), Some(Cursor { session: session(), position: 2_020 }));
    rig.advance(5_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), REQ2);
    assert_eq!(receipt.classification, Classification::Accepted, "its turn ran: {:?}", receipt);
}

// ADM-5, EV-13: a restart's reopened wait is kept by the write's floor, a position in the file
// as the last daemon read it. Cut back and grown again while the daemon was down, the file's
// new copy can hold a turn past that position that began before the write (an old turn
// written again): the resume read it, the wait ended, and the next prompt went over the
// unread one (a review). A record the replay zone still holds ends no such wait, and once
// the zone finds the file changed, no position in its session does, nor, after a second
// restart, a turn of the new copy the durable mark kept.
#[test]
fn adm_5_a_turn_in_a_file_cut_back_while_down_does_not_end_a_reopened_wait() {
    // (the floor, the durable mark, the old turn the new copy holds)
    let cases = [("past the mark (the zone's verdict)", 1_000, 1_000, 1_100), ("inside the zone (no verdict yet)", 1_000, 1_500, 1_100)];
    for (case, floor, mark, old_turn) in cases {
        let mut rig = Rig::with_idle_zola();
        rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "earlier".into(), phase: None, position: 900 });
        let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        assert_eq!(rig.engine.agent(&agent_id(ZOLA)).unwrap().awaiting_prompts[0].past, Some(Cursor { session: session(), position: floor }), "{case}");
        rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: mark });
        assert_eq!((rig.durable_marks[&agent_id(ZOLA)].position, taken_at(&rig.durable_marks[&agent_id(ZOLA)])), (mark, None), "{case}");
        rig.advance(5_000);
        rig.crash_and_recover_as_the_daemon();
        rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
        rig.input(Input::StartupComplete);
        // The resume reads the new copy: an old turn, started and completed, past the floor,
        // of the same text as the write's (typed earlier: a turn of another prompt ends no PTY
        // wait, `AgentEntry::awaiting_prompts`).
        rig.observe(ObserverEvent::Attached { session: session(), position: 400 });
        rig.turn_started("turn-9", old_turn);
        rig.user_message("turn-9", "slow reader", old_turn + 10);
        rig.turn_completed("turn-9", "an old final", old_turn + 30);
        let idle = ObserverSnapshot { position: old_turn + 30, turn: TurnState::Idle { last_completed: Some(turn("turn-9")) }, ..idle_snapshot("inc-1", 100) };
        rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        if mark > old_turn + 30 {
            // The zone's verdict (a record at the mark that is not the one reported) moves the
            // floor out of reach: a later turn in the same session does not end the wait either.
            rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "other".into(), phase: None, position: mark });
            rig.turn_started("turn-10", mark + 100);
            rig.user_message("turn-10", "slow reader", mark + 110);
            rig.turn_completed("turn-10", "its final", mark + 130);
            let idle = ObserverSnapshot { position: mark + 130, turn: TurnState::Idle { last_completed: Some(turn("turn-10")) }, ..idle_snapshot("inc-1", 100) };
            rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
            let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        }
        // A second restart within the minute: the durable mark holds a turn of the new copy
        // past the floor, noted after the write; the zone's close, durable with the mark
        // (`EventMark::rewritten`), still keeps the wait out of the new copy's reach.
        let durable = &rig.durable_marks[&agent_id(ZOLA)];
        assert!(durable.rewritten.is_some() && taken_at(durable).as_ref().is_some_and(|t| t.position > floor), "{case}: {durable:?}");
        rig.advance(1_000);
        let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21");
        assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}, the second restart: {receipt:?}");
        // The wait still ends with the grace: an idle agent, its composer empty.
        rig.advance(limits::AWAITING_TURN_GRACE_MS);
        let op = rig.admit("0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e22", "fourth", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op));
        // A live write's floor is this daemon's view of the new copy: its turn ends its wait.
        let at = mark + 1_000;
        rig.provider_turn("turn-11", "fourth", "its final", at);
        let idle = ObserverSnapshot { position: at + 30, turn: TurnState::Idle { last_completed: Some(turn("turn-11")) }, ..idle_snapshot("inc-1", 100) };
        rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
        let op = rig.admit("0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e23", "fifth", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}, after a live write's turn: {:?}", rig.receipt(op));
    }
}

// ADM-5, EV-13: the same when the write's floor lies in another session than the changed file:
// a view lagging a session switch at the write left it in the older session, which any turn of
// the newer passes; the changed verdict moved only a floor in its own session (a third review).
#[test]
fn adm_5_a_changed_file_in_another_session_than_the_floor_ends_no_reopened_wait() {
    let mut rig = Rig::with_idle_zola();
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: 1_000 });
    let older = SessionId("sess-0".to_string());
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { session: Some(older.clone()), ..idle_snapshot("inc-1", 100) }));
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    assert_eq!(rig.engine.agent(&agent_id(ZOLA)).unwrap().awaiting_prompts[0].past.as_ref().map(|f| &f.session), Some(&older));
    rig.advance(2_000);
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    read_an_old_turn(&mut rig); // the stream's session, cut back and grown again: past the mark
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
}

/// The observer reads a cut or replaced file from 400: an old turn of the written prompt's
/// text, started and completed at 1,100-1,130, and the agent idle after it.
fn read_an_old_turn(rig: &mut Rig) {
    rig.observe(ObserverEvent::Attached { session: session(), position: 400 });
    rig.turn_started("turn-9", 1_100);
    // The same text as the write's, typed earlier (a turn of another prompt ends no PTY wait).
    rig.user_message("turn-9", "slow reader", 1_110);
    rig.turn_completed("turn-9", "an old final", 1_130);
    let idle = ObserverSnapshot { position: 1_130, turn: TurnState::Idle { last_completed: Some(turn("turn-9")) }, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
}

/// The turn of REQ2's prompt ("second") starts and its user message is read, durable in the
/// event mark, while the binding's record does not commit before the crash that follows: the
/// next restart loads the request `submitted` (not seen taken), beside the older write.
fn take_the_second_prompt_unbound(rig: &mut Rig) {
    rig.auto = Auto::Manual;
    rig.turn_started("turn-2", 1_110);
    rig.user_message("turn-2", "second", 1_120);
    assert_eq!(rig.durable[&RequestId::parse(REQ2).unwrap()].phase, Phase::Submitted);
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]), Some(Cursor { session: session(), position: 1_120 }));
    rig.advance(2_000);
    rig.crash_and_recover_as_the_daemon();
    rig.auto = Auto::All;
}

/// A restart whose replay zone finds the file changed: another record at the mark (1,000).
fn restart_into_a_changed_copy(rig: &mut Rig) {
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.observe(ObserverEvent::Attached { session: session(), position: 400 });
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "other".into(), phase: None, position: 1_000 });
    assert!(rig.durable_marks[&agent_id(ZOLA)].rewritten.is_some(), "the mark notes the run");
}

// ADM-5, EV-13: a write made after the restart that found the file changed reads the new copy,
// and its turn, in the durable mark, says every earlier write was read too (input is read in
// order): the next restart holds nothing although an earlier write's floor lies in the older
// copy (exploration seed 33864710 held such an agent until the grace).
#[test]
fn adm_5_a_later_writes_turn_in_the_new_copy_says_an_older_copys_write_was_read() {
    let mut rig = Rig::with_idle_zola();
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "earlier".into(), phase: None, position: 900 });
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: 1_000 });
    rig.advance(2_000);
    restart_into_a_changed_copy(&mut rig);
    rig.advance(limits::AWAITING_TURN_GRACE_MS); // the reopened wait ends with the grace
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    take_the_second_prompt_unbound(&mut rig);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21");
    assert_eq!(receipt.classification, Classification::Accepted, "both writes were read: {receipt:?}");

    // Not an older write whose bytes may land later than the later one's (a registration a
    // restart found unfinished: its holder outlives the daemon; a review): still held.
    let mut rig = Rig::with_idle_zola();
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "earlier".into(), phase: None, position: 900 });
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: 1_000 });
    rig.auto = Auto::Manual;
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // registered; the write is handed out, its outcome lost
    rig.advance(1_000);
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Registered);
    rig.auto = Auto::All;
    restart_into_a_changed_copy(&mut rig);
    rig.advance(limits::WRITE_LANDS_WITHIN_MS + limits::AWAITING_TURN_GRACE_MS); // its wait ends with the grace
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
    take_the_second_prompt_unbound(&mut rig);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21");
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "the registration's line may land late: {receipt:?}");
}

// ADM-5, EV-13: the same when the resume finds the checkpoint no longer matching the file (a
// cut below the checkpoint, or a replaced file, OBS-3): the loss closes the replay zone before
// anything proves the file, and the next look reads it from its start, an old turn past the
// floor by position alone (a review of the first fix, which left this path open). The wait
// keeps waiting for the proof the zone waited for (`FloorProof`): a record at the mark that is
// the one reported ends it with the turn the unproven records carried; another moves the floor
// out of reach; a crash before either leaves the mark's note (`EventMark::rewritten`).
#[test]
fn adm_5_a_reopened_wait_after_a_lost_resume_waits_for_the_files_proof() {
    for case in ["changed", "proven", "a crash before the proof"] {
        let mut rig = Rig::with_idle_zola();
        rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "earlier".into(), phase: None, position: 900 });
        rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        let reported = ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: 1_500 };
        rig.observe(reported.clone());
        rig.advance(5_000);
        rig.crash_and_recover_as_the_daemon();
        rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
        rig.input(Input::StartupComplete);
        rig.observe(ObserverEvent::SessionLost { reason: REWRITTEN_WHILE_DOWN.into(), session: None, before: None });
        assert!(rig.durable_marks[&agent_id(ZOLA)].rewritten.is_some(), "{case}: the note is durable with the loss");
        if case == "a crash before the proof" {
            rig.advance(1_000);
            rig.crash_and_recover_as_the_daemon();
            rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
            rig.input(Input::StartupComplete);
        }
        read_an_old_turn(&mut rig); // the file read from its start: past the floor, below the mark
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        let (record, accepted) = match case {
            "proven" => (reported.clone(), true),
            _ => (ObserverEvent::AgentMessage { session: session(), turn: None, text: "other".into(), phase: None, position: 1_500 }, false),
        };
        rig.observe(record);
        let wait = rig.engine.agent(&agent_id(ZOLA)).unwrap().awaiting_turn_after;
        assert_eq!(wait.is_none(), accepted, "{case}: proven, the old turn was the file's own and ended the wait");
        rig.turn_started("turn-10", 1_600);
        rig.user_message("turn-10", "slow reader", 1_610);
        rig.turn_completed("turn-10", "its final", 1_630);
        let idle = ObserverSnapshot { position: 1_630, turn: TurnState::Idle { last_completed: Some(turn("turn-10")) }, ..idle_snapshot("inc-1", 100) };
        rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
        let op = rig.admit("0b6e7a34-5d0c-4f0e-9a43-3c1f0a6b9e21", "third", ReturnMode::ReturnFinal);
        let expected = if accepted { None } else { Some("awaiting_turn_start") };
        assert_eq!(rig.receipt(op).reason.as_deref(), expected, "{case}: {:?}", rig.receipt(op));
        if accepted {
            assert_eq!(rig.durable_marks[&agent_id(ZOLA)].rewritten, None, "{case}: the note is put back");
        }
    }
}

/// ADM-13 after a restart that found the file changed: a prompt the restart reopened with its
/// floor out of reach (no record can be proven its) may still be read, queued, so a message
/// of its text past a later send's floor may be its, and does not acknowledge the send; the
/// next one does (a second review: the reopened write was not counted, and its message
/// acknowledged the send).
#[test]
fn adm_13_a_reopened_write_with_its_floor_out_of_reach_may_carry_a_sends_message() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    let reported = ObserverEvent::AgentMessage { session: session(), turn: None, text: "later".into(), phase: None, position: 1_500 };
    rig.observe(reported);
    rig.advance(5_000);
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.observe(ObserverEvent::SessionLost { reason: REWRITTEN_WHILE_DOWN.into(), session: None, before: None });
    rig.observe(ObserverEvent::Attached { session: session(), position: 0 });
    rig.observe(ObserverEvent::AgentMessage { session: session(), turn: None, text: "other".into(), phase: None, position: 1_500 });
    let reopened = &rig.engine.agent(&agent_id(ZOLA)).unwrap().awaiting_prompts;
    assert_eq!(reopened.iter().filter_map(|p| p.past.as_ref()).map(|f| f.position).collect::<Vec<_>>(), vec![wakterm_engine::agent::UNREACHABLE_FLOOR], "the file changed");
    let idle = ObserverSnapshot { position: 1_500, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
    let command = rig.command(Operation::Send, REQ2, "slow reader", ReturnMode::OneWay);
    let send = rig.submit(command);
    rig.turn_started("turn-10", 1_600);
    rig.user_message("turn-10", "slow reader", 1_610); // the reopened write's, queued until now
    assert!(!rig.has_receipt(send), "{:?}", rig.receipt(send));
    rig.user_message("turn-10", "slow reader", 1_630); // the send's
    assert_eq!(rig.receipt(send).acknowledged, Some(true));
}

// ADM-5 across a restart, the latest write whatever became of its request: a one-way prompt
// whose turn ran, then a return-final prompt still unread when its request ended (a cancel:
// the live engine still holds the agent for its line). The restart loaded only the one-way
// request (the latest settled one), found its turn taken, held nothing, and the next prompt
// went over the unread line (a review). It now loads each agent's latest finished request
// and holds for that one; a request bound to its turn, or ended `no_turn_started` (its wait
// over), holds nothing.
#[test]
fn adm_5_a_restart_holds_for_a_written_request_ended_before_its_turn() {
    for (case, cancel, bound) in [("cancelled", true, false), ("bound", false, true)] {
        let mut rig = managed_zola(Some(THREAD));
        rig.admit(REQ, "slow reader", ReturnMode::OneWay);
        rig.managed_turn(REQ, "turn-1", "slow reader", "the final", 2_000);
        rig.advance(1_000);
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op));
        if cancel {
            rig.input(Input::Cancel(CancelCommand { op: OpId(900), request_id: REQ2.to_string() }));
        }
        if bound {
            rig.managed_turn(REQ2, "turn-2", "second", "its final", 3_000);
        }
        assert_eq!(rig.durable[&RequestId::parse(REQ2).unwrap()].phase, Phase::Terminal, "{case}");
        rig.advance(5_000);
        rig.crash_and_recover_as_the_daemon();
        rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
        rig.input(Input::StartupComplete);
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
        let expected = if bound { None } else { Some("awaiting_turn_start") };
        assert_eq!(rig.receipt(op).reason.as_deref(), expected, "{case}: {:?}", rig.receipt(op));
    }
}

// ADM-5 across a restart, the latest write rather than the latest to finish: a plain one-way
// send steers the running turn of a bound return-final request, the app-server is slow to read
// it (no acknowledgement: it settles unacknowledged), then the bound request's turn completes,
// so it finishes last. The restart loaded only that bound request (the latest to finish), held
// nothing, and the next prompt went over the unread send (a review). It now loads each
// agent's latest written request (by registration) and holds for the send.
#[test]
fn adm_5_a_restart_holds_for_the_latest_write_not_the_latest_to_finish() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.observe(ObserverEvent::TurnAccepted { session: session(), id: prompt::turn_start_id(REQ, 0x5eed), turn: turn("turn-1"), position: 2_005 });
    rig.turn_started("turn-1", 2_010);
    rig.user_message("turn-1", "first", 2_020);
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Bound);
    let mut busy = idle_snapshot("inc-1", 100);
    (busy.position, busy.turn) = (2_020, TurnState::Busy { turn: Some(turn("turn-1")) });
    rig.snapshots.insert(agent_id(ZOLA), Ok(busy));
    let command = rig.command(Operation::Send, REQ2, "steer it", ReturnMode::OneWay);
    let op = rig.submit(command);
    rig.advance(limits::SEND_ACK_WAIT_MS + 100); // unread: no acknowledgement
    let receipt = rig.receipt(op);
    assert_eq!((receipt.classification, receipt.acknowledged), (Classification::Accepted, Some(false)), "{receipt:?}");
    rig.advance(500);
    rig.turn_completed("turn-1", "the final", 2_030);
    let idle = ObserverSnapshot { position: 2_030, turn: TurnState::Idle { last_completed: Some(turn("turn-1")) }, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
    let (first, send) = (&rig.durable[&RequestId::parse(REQ).unwrap()], &rig.durable[&RequestId::parse(REQ2).unwrap()]);
    assert_eq!((first.phase, send.phase), (Phase::Terminal, Phase::Settled));
    assert!(first.updated_ms > send.updated_ms, "the bound request finished last");
    rig.advance(1_000);
    let receipt = restart_then_admit(&mut rig, managed_facts(Some(THREAD)), "fe57dc90-994e-4e73-b09c-fac483d9f05d");
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{receipt:?}");
}

// ADM-5 across a restart, with a wall clock stepped back between two daemons: a one-way prompt
// whose turn ran, written by a daemon whose clock was 30 minutes ahead, then a later prompt,
// still unread. By their recorded registration times the first was the later write: the
// restart loaded it as the agent's latest finished write (the store by `registered_ms`), or,
// with the later one still open, took it as the latest write, whose floor the mark's turn
// lies past (`RecoveredWrite::reopen_wait`); either way nothing was held and the next prompt
// went over the unread one. The store now picks the row stored last, and the engine holds
// unless every write was read: the first write's taken prompt says nothing of the later one,
// whose registration came after it by the monotonic clock (TIME-2), or, for a record with no
// run clock, by nothing the restart can trust.
#[test]
fn adm_5_a_restart_holds_for_the_later_write_whatever_the_wall_clocks_said() {
    for (return_final, run_clock) in [(false, true), (true, true), (true, false)] {
        let case = format!("{}, the first record {} a run clock", if return_final { "the later one open (return-final)" } else { "both finished (one-way)" }, if run_clock { "with" } else { "without" });
        let mut rig = Rig::with_idle_zola();
        let op = rig.admit(REQ, "first", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        rig.provider_turn("turn-1", "first", "the final", 2_000);
        assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]).as_ref().map(|t| t.position), Some(2_020), "{case}");
        let idle = ObserverSnapshot { position: 2_030, turn: TurnState::Idle { last_completed: Some(turn("turn-1")) }, ..idle_snapshot("inc-1", 100) };
        rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
        let mode = if return_final { ReturnMode::ReturnFinal } else { ReturnMode::OneWay };
        rig.advance(1_000);
        let op = rig.admit(REQ2, "second", mode);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        rig.advance(500);
        let first = RequestId::parse(REQ).unwrap();
        let second = &rig.durable[&RequestId::parse(REQ2).unwrap()];
        assert_eq!(second.phase, if return_final { Phase::Submitted } else { Phase::Settled }, "{case}");
        assert_eq!(second.written_past.as_ref().map(|c| c.position), Some(2_030), "{case}");
        // The first write, as a daemon whose wall clock stood 30 min ahead recorded it: every
        // time 30 min later, its offset to the monotonic clock 30 min lower (or none known).
        recorded_by_a_clock_ahead(rig.durable.get_mut(&first).unwrap(), run_clock);
        let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "fe57dc90-994e-4e73-b09c-fac483d9f05d");
        assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}: {receipt:?}");
    }
}

// ADM-5: the reopened wait takes the floor of the write made last, whatever the registration
// times say: with an older write's floor, a replay of that write's own turn (its events never
// durable, so the resume reads them again) ended the wait for the later write still unread.
// The first write as a daemon whose wall clock stood 30 min ahead recorded it: with a run
// clock (its offset to the monotonic clock 30 min lower, so the monotonic clock orders the
// two), and without one (an older daemon's record: the floors order them).
#[test]
fn adm_5_the_reopened_wait_takes_the_later_writes_floor_whatever_the_wall_clocks_said() {
    for run_clock in [true, false] {
        let mut rig = Rig::with_idle_zola();
        let op = rig.admit(REQ, "first", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        let zola = agent_id(ZOLA);
        // Where the stream stood before the first prompt's turn: its events never become durable.
        let (mark_before, events_before) = (rig.durable_marks[&zola].clone(), rig.durable_events.len());
        rig.provider_turn("turn-1", "first", "the final", 2_000);
        let idle = ObserverSnapshot { position: 2_030, turn: TurnState::Idle { last_completed: Some(turn("turn-1")) }, ..idle_snapshot("inc-1", 100) };
        rig.snapshots.insert(zola.clone(), Ok(idle));
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        rig.advance(500);
        let second = &rig.durable[&RequestId::parse(REQ2).unwrap()];
        assert_eq!((second.phase, second.written_past.as_ref().map(|c| c.position)), (Phase::Submitted, Some(2_030)));
        recorded_by_a_clock_ahead(rig.durable.get_mut(&RequestId::parse(REQ).unwrap()).unwrap(), run_clock);
        rig.durable_marks.insert(zola.clone(), mark_before);
        rig.durable_events.truncate(events_before);
        rig.crash_and_recover_as_the_daemon();
        rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
        rig.input(Input::StartupComplete);
        rig.provider_turn("turn-1", "first", "the final", 2_000); // the resume reads it again
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "run clock {run_clock}: {:?}", rig.receipt(op));
    }
}

// ADM-5, CORR-6 across a restart (PTY): which write was the latest is the monotonic clock's to
// say, not the floors'. A return-final write's floor is where the rollout ended at it (the view
// lagged the file), further than the floor of a plain send written after it with no end
// reported (at the view); the restart took the furthest floor for the latest write and waited
// for the first prompt, whose user message then ended the wait with the send's line still
// unread (a review of the CORR-6 floor).
#[test]
fn adm_5_a_restart_waits_for_the_write_made_last_not_the_furthest_floor() {
    let mut rig = Rig::with_idle_zola();
    rig.record_end = Some(Cursor { session: session(), position: 5_000 });
    let op = rig.admit(REQ, "first", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    rig.record_end = None;
    rig.advance(1_000);
    let command = rig.command(Operation::Send, REQ2, "second", ReturnMode::OneWay);
    let op = rig.submit(command); // ADM-13: written whatever the wait (it may steer)
    rig.advance(limits::SEND_ACK_WAIT_MS);
    assert_eq!(rig.receipt(op).acknowledged, Some(false));
    let floors = |id: &str| rig.durable[&RequestId::parse(id).unwrap()].written_past.as_ref().map(|c| c.position);
    assert_eq!((floors(REQ), floors(REQ2)), (Some(5_000), Some(1_000)));
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    rig.input(Input::StartupComplete);
    rig.provider_turn("turn-1", "first", "the first final", 5_000); // the earlier write's turn
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "the send's line may be unread: {:?}", rig.receipt(op));
    rig.provider_turn("turn-2", "second", "the second final", 5_100);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{:?}", rig.receipt(op));
}

// ADM-5, IDEM-6: a released id registered again is the agent's latest write, not the write
// made between its two registrations. The store ordered rows by when each was first stored,
// so the retried id kept its first registration's place, an earlier write whose turn had run
// was taken for the latest, and the next prompt went over the retried one's unread line (a
// review); also when the release's commit had failed, so the store still read `registered`
// (the next review).
#[test]
fn adm_5_a_released_id_registered_again_is_the_latest_write() {
    for release_lands in [true, false] {
        let case = if release_lands { "the release stored" } else { "the release's commit failed" };
        let mut rig = Rig::with_idle_zola();
        rig.auto = Auto::Manual;
        rig.admit(REQ, "first", ReturnMode::OneWay);
        rig.refresh_next();
        rig.turn_started("turn-x", 1_010); // someone typed into the pane: the re-check fails (ADM-4)
        rig.ack_next_persist(Ok(()));
        rig.ack_next_persist(if release_lands { Ok(()) } else { Err("disk full".to_string()) }); // the release
        let stored = if release_lands { Phase::Released } else { Phase::Registered };
        assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, stored, "{case}");
        rig.turn_completed("turn-x", "x", 1_020);
        rig.auto = Auto::All;
        rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_020, ..idle_snapshot("inc-1", 100) }));
        let op = rig.admit(REQ2, "second", ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        rig.provider_turn("turn-2", "second", "its final", 2_000);
        let idle = ObserverSnapshot { position: 2_030, turn: TurnState::Idle { last_completed: Some(turn("turn-2")) }, ..idle_snapshot("inc-1", 100) };
        rig.snapshots.insert(agent_id(ZOLA), Ok(idle));
        let op = rig.admit(REQ, "first", ReturnMode::OneWay); // IDEM-6: the same input again
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}");
        assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].written_past.as_ref().map(|c| c.position), Some(2_030), "{case}");
        rig.advance(500);
        let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), "fe57dc90-994e-4e73-b09c-fac483d9f05d");
        assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{case}: {receipt:?}");
    }
}

// ADM-5: the mark's turn is forgotten when its place moves back (a rollout replaced while its
// session id stays): a position read from the new file says nothing against the old one's
// (a review: a turn noted at 2,020 skipped the wait for a write at 1,500 in the new file).
// And an unfinished registration's armed cursor is no floor the mark's turn can pass: a turn
// between the arming and the write says nothing of its line.
#[test]
fn adm_5_the_marks_turn_counts_only_past_a_write_in_the_same_file() {
    let mut rig = Rig::with_idle_zola();
    rig.provider_turn("turn-1", "slow reader", "its final", 2_000); // the later write's text
    assert!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]).is_some());
    rig.observe(ObserverEvent::SessionLost { reason: "rewritten".into(), session: None, before: None });
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]), None, "forgotten with the loss");
    rig.observe(ObserverEvent::Attached { session: session(), position: 1_500 });
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_500, ..idle_snapshot("inc-1", 100) }));
    rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.advance(5_000);
    let receipt = restart_then_admit(&mut rig, zola_facts("inc-1", 100), REQ2);
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{:?}", receipt);

    // A registration left unfinished, a turn past its armed cursor before the crash.
    let mut rig = managed_zola(Some(THREAD));
    rig.auto = Auto::Manual;
    let command = rig.command(Operation::Admit, REQ, "slow reader", ReturnMode::OneWay);
    rig.submit(command);
    rig.refresh_next();
    rig.ack_next_persist(Ok(())); // registered (armed at 1,000); the write's outcome never comes
    rig.observe(ObserverEvent::TurnStarted { session: session(), turn: turn("turn-9"), position: 1_200 });
    let prompt_hash = prompt::prompt_hash("slow reader");
    rig.observe(ObserverEvent::UserMessage { session: session(), turn: Some(turn("turn-9")), prompt_hash, position: 1_210 });
    assert_eq!(taken_at(&rig.durable_marks[&agent_id(ZOLA)]).as_ref().map(|t| t.position), Some(1_210));
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Registered);
    rig.auto = Auto::All;
    let receipt = restart_then_admit(&mut rig, managed_facts(Some(THREAD)), REQ2);
    assert_eq!(receipt.reason.as_deref(), Some("awaiting_turn_start"), "{:?}", receipt);
}

// ADM-5, REC-1: a crash between a registration's commit and its write's outcome leaves a line
// that may have been written and not yet read; the restart ends the registration
// `indeterminate` and, before, wrote the next prompt over that line (the simulator's check
// fails 17 of seeds 1-20,000 without the hold). The restart now holds the agent as after a
// write (RF-8's timeout from its start, or the app-server's acceptance of the prompt's own
// `turn/start`: a turn past the armed cursor may have begun before the write); and so does a
// later restart within RF-8's timeout from the first one's start (`write_unknown`).
#[test]
fn adm_5_a_registration_found_unfinished_holds_its_agent() {
    for (case, own_turn) in [("turn", true), ("timeout", false)] {
        let mut rig = managed_zola(Some(THREAD));
        rig.auto = Auto::Manual;
        let command = rig.command(Operation::Admit, REQ, "slow reader", ReturnMode::OneWay);
        rig.submit(command);
        rig.refresh_next();
        rig.ack_next_persist(Ok(())); // registered; the write is handed out, its outcome lost
        assert_eq!(rig.deliveries.len(), 1, "{case}");
        rig.auto = Auto::All;
        rig.crash_and_recover_as_the_daemon();
        rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
        rig.input(Input::StartupComplete);
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
        assert!(rig.written.is_empty(), "{case}: nothing written over the line that may be there");
        if own_turn {
            // A turn past the armed cursor says nothing of the line (it may have come before
            // the write; exploration seed 6717: a human's steer, replayed after the restart).
            rig.provider_turn("turn-h", "a human's prompt", "its final", 1_500);
            let op = rig.admit("fe57dc90-994e-4e73-b09c-3a7c1e5f9b02", "third", ReturnMode::ReturnFinal);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
            // Nor does another line's acceptance (the nonce is the admission's own, MGD-7).
            let other = prompt::turn_start_id(REQ, 0x0bad);
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id: other, turn: turn("turn-x"), position: 1_990 });
            let op = rig.admit("fe57dc90-994e-4e73-b09c-3a7c1e5f9b03", "third", ReturnMode::ReturnFinal);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op));
            // The app-server accepting that very line: the wait is now for the accepted turn's
            // start (the reply comes before `turn/started`: a prompt written in between would
            // go into the turn starting, RF-7; a review found it).
            let id = prompt::turn_start_id(REQ, 0x5eed);
            rig.observe(ObserverEvent::TurnAccepted { session: session(), id, turn: turn("turn-1"), position: 2_005 });
            let op = rig.admit("fe57dc90-994e-4e73-b09c-3a7c1e5f9b04", "third", ReturnMode::ReturnFinal);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: accepted, not started: {:?}", rig.receipt(op));
            rig.provider_turn("turn-1", "slow reader", "the final", 2_000);
        } else {
            // RF-8's timeout counts from when the line landed at the latest: the holder
            // outlives the daemon and may write it up to WRITE_LANDS_WITHIN_MS after the start.
            rig.advance(limits::TURN_START_TIMEOUT_MS);
            let op = rig.admit("fe57dc90-994e-4e73-b09c-3a7c1e5f9b05", "third", ReturnMode::ReturnFinal);
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: a line landed late: {:?}", rig.receipt(op));
            rig.advance(limits::WRITE_LANDS_WITHIN_MS);
        }
        let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: the wait is over: {:?}", rig.receipt(op));
    }
    // A second restart finds the registration ended by the first (`write_unknown`): within
    // RF-8's timeout from when the first restart counted the line landed at the latest (its
    // start, plus WRITE_LANDS_WITHIN_MS for a managed agent) it still holds for the line (it
    // held nothing, and the next prompt could go over the line: a listed gap until
    // 2026-12-05); later, nothing. Not from the registration: the write came after the
    // registration's commit, which may stall for seconds, so a registration a minute old may
    // have a line written moments before the first restart (a review). On the monotonic
    // clock (TIME-2): a wall clock stepped before the first restart moves nothing. For a PTY
    // agent too, whose wait RF-7's probe ends sooner when its composer is empty
    // (`AWAITING_TURN_GRACE_MS` from the same moment: a line landing late and submitted at
    // once leaves an empty composer until its turn shows, a review): "later" is within that.
    let minute = limits::TURN_START_TIMEOUT_MS;
    let lands = limits::WRITE_LANDS_WITHIN_MS;
    for managed in [true, false] {
        let later = if managed { minute + lands - 1_000 } else { lands + limits::AWAITING_TURN_GRACE_MS / 2 };
        // (case, registration to the first restart, wall step before it, first to second
        // restart, second restart to the admission, held)
        let cases = [
            ("soon", 0, 0, 1_000, 0, true),
            ("a second restart soon after the first holds from where the first counted", 0, 0, 1_000, later - 1_000, true),
            ("just before the timeout", 0, 0, later, 0, true),
            ("after the timeout", 0, 0, minute + lands, 0, false),
            ("registered long before the first restart", 50_000, 0, later, 0, true),
            ("the same, the wall clock stepped back before the first restart", 50_000, -600_000, later, 0, true),
            ("the same, stepped forward", 50_000, 600_000, later, 0, true),
            ("registered long before, after the timeout from the first restart", 50_000, -600_000, minute + lands, 0, false),
        ];
        for (case, before_ms, step_ms, between_ms, after_ms, held) in cases {
            let case = format!("{case} (managed: {managed})");
            let (mut rig, facts) = match managed {
                true => (managed_zola(Some(THREAD)), managed_facts(Some(THREAD))),
                false => (Rig::with_idle_zola(), zola_facts("inc-1", 100)),
            };
            rig.auto = Auto::Manual;
            let command = rig.command(Operation::Admit, REQ, "slow reader", ReturnMode::OneWay);
            rig.submit(command);
            rig.refresh_next();
            rig.ack_next_persist(Ok(()));
            assert_eq!(rig.deliveries.len(), 1, "{case}: the write is handed out, its outcome lost");
            rig.advance(before_ms);
            assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Registered, "{case}");
            rig.auto = Auto::All;
            rig.wall_clock_stepped_while_down(step_ms);
            rig.crash_and_recover_as_the_daemon();
            rig.settle();
            assert!(rig.durable[&RequestId::parse(REQ).unwrap()].write_unknown, "{case}: the first restart marks it");
            rig.advance(between_ms);
            rig.crash_and_recover_as_the_daemon();
            rig.input(Input::AgentUpserted(facts));
            rig.input(Input::StartupComplete);
            rig.advance(after_ms);
            let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
            match held {
                true => assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{case}: {:?}", rig.receipt(op)),
                false => assert_eq!(rig.receipt(op).classification, Classification::Accepted, "{case}: {:?}", rig.receipt(op)),
            }
        }
    }
}

// ADM-5, ADM-12: a write the engine gave up on (`write_result_lost`) may still land: the
// holder, which outlives the daemon, may finish it up to WRITE_LANDS_WITHIN_MS after its
// hand-out. A restart counts RF-8's timeout from then (`RequestRecord::written_ms`), not from
// the give-up (a review: a line landing 10 s after the give-up was held 50 s only).
#[test]
fn adm_5_a_restart_holds_a_given_up_write_from_its_latest_landing() {
    let mut rig = managed_zola(Some(THREAD));
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "slow reader", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.deliveries.len(), 1);
    rig.advance(limits::DELIVERY_TIMEOUT_MS);
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("write_result_lost"), "{:?}", rig.receipt(op));
    let gave_up = rig.now;
    rig.auto = Auto::All;
    rig.advance(5_000);
    rig.crash_and_recover_as_the_daemon();
    rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
    rig.input(Input::StartupComplete);
    rig.advance(gave_up + limits::TURN_START_TIMEOUT_MS + 5_000 - rig.now);
    let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "a line may have landed 10 s after the give-up: {:?}", rig.receipt(op));
    rig.advance(limits::WRITE_LANDS_WITHIN_MS);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "third", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "then the wait is over: {:?}", rig.receipt(op));
}

// ADM-5: a turn that started before the prompt was written is no end of the wait for the
// prompt's turn, when it comes again (a resume's replay after an observer loss or a restart).
// Exploration seed 58640897: a turn seen between the request's arming and its write, replayed
// after a restart, passed the armed cursor, ended the reopened wait, and the next prompt was
// written on top of the unread one. The wait's floor is now where the view stood at the write,
// kept in the request's record (`written_past`) for the daemon started after.
#[test]
fn adm_5_a_turn_from_before_the_write_replayed_ends_no_wait() {
    for restart in [false, true] {
        let mut rig = managed_zola(Some(THREAD));
        rig.auto = Auto::Manual;
        let command = rig.command(Operation::Admit, REQ, "slow reader", ReturnMode::ReturnFinal);
        let op = rig.submit(command);
        rig.refresh_next();
        // Armed at 1,000; while its registration commits, another prompt's turn runs and ends.
        rig.provider_turn("turn-before", "a human's prompt", "its final", 1_500);
        rig.ack_next_persist(Ok(()));
        rig.deliver_next(DeliveryOutcome::Complete);
        rig.settle();
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        if restart {
            rig.crash_and_recover_open_only();
            rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
            rig.input(Input::StartupComplete);
            let cursor = rig.resumes[0].1.clone();
            assert_eq!(cursor.position, 1_000, "REC-2 replays from the armed cursor");
            rig.observe(ObserverEvent::Attached { session: cursor.session.clone(), position: cursor.position });
        }
        // The replay (or a re-read after a loss) shows the turn from before the write again.
        rig.turn_started("turn-before", 1_510);
        rig.settle();
        rig.auto = Auto::All;
        let op = rig.admit(REQ2, "second", ReturnMode::ReturnFinal);
        if rig.receipt(op).classification != Classification::Accepted {
            assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "restart {restart}: {:?}", rig.receipt(op));
        } else {
            panic!("restart {restart}: a second prompt written on top of the unread one: {:?}", rig.receipt(op));
        }
        assert_eq!(rig.written.len(), 1, "restart {restart}: one write");
    }
}

// MGD-2 / CORR-8: only the agent's own thread and session: an observer on another one, or an
// agent whose thread is not bound yet, is refused before any write.
#[test]
fn mgd_2_another_session_or_no_thread_is_refused_before_any_write() {
    for (thread, reason) in [(Some("another-thread"), "managed_session_changed"), (None, "managed_thread_unknown")] {
        let mut rig = managed_zola(thread);
        let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some(reason));
        assert_eq!(rig.receipt(op).classification, Classification::ObserverFailure);
        assert!(rig.written.is_empty());
    }
}

// MGD-3: a running turn refuses a return-final admission, while a plain send steers it (Codex
// 0.169's turn/start adds the prompt to the running turn) and its receipt says so, acknowledged
// by the prompt's user message in that turn; a raw paste means nothing to a JSON-RPC session.
#[test]
fn mgd_3_busy_threads_refuse_return_final_and_plain_sends_steer() {
    let mut rig = managed_zola(Some(THREAD));
    let mut busy = idle_snapshot("inc-1", 100);
    busy.turn = TurnState::Busy { turn: Some(turn("turn-9")) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(busy));
    let op = rig.admit(REQ2, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("turn_active"));
    assert!(rig.written.is_empty());
    let command = rig.command(Operation::Send, REQ, "steer it", ReturnMode::OneWay);
    rig.auto = Auto::Manual;
    let op = rig.submit(command);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.user_message("turn-9", "steer it", 1_100);
    rig.settle();
    let receipt = rig.receipt(op);
    assert_eq!((receipt.classification, receipt.reason.as_deref(), receipt.acknowledged), (Classification::Accepted, Some("steered_running_turn"), Some(true)), "{receipt:?}");
    let mut rig = managed_zola(Some(THREAD));
    let mut command = rig.command(Operation::Send, REQ2, "hi", ReturnMode::OneWay);
    command.paste_mode = PasteMode::Raw;
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("raw_paste_managed"));
    assert!(rig.written.is_empty());
}

// ADM-18: a managed plain send that must not steer is refused by the running turn a plain
// send would steer, nothing written.
#[test]
fn adm_18_a_no_steer_send_leaves_a_busy_thread_alone() {
    let mut rig = managed_zola(Some(THREAD));
    let mut busy = idle_snapshot("inc-1", 100);
    busy.turn = TurnState::Busy { turn: Some(turn("turn-9")) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(busy));
    let mut command = rig.command(Operation::Send, REQ, "not into turn-9", ReturnMode::OneWay);
    command.no_steer = true;
    let op = rig.submit(command);
    let receipt = rig.receipt(op);
    assert_eq!((receipt.classification, receipt.reason.as_deref(), receipt.prompt_written), (Classification::Busy, Some("turn_active"), false), "{receipt:?}");
    assert!(rig.written.is_empty());
    // No view: a managed plain send is refused too (MGD-3), so the refusal offers no plain send.
    let mut rig = managed_zola(Some(THREAD));
    rig.snapshots.insert(agent_id(ZOLA), Err("the stream dropped".to_string()));
    let mut command = rig.command(Operation::Send, REQ, "no view", ReturnMode::OneWay);
    command.no_steer = true;
    let op = rig.submit(command);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.reason.as_deref(), Some("observer_unavailable"), "{receipt:?}");
    assert!(!receipt.detail.as_deref().unwrap_or_default().contains("a plain send"), "{receipt:?}");
    assert!(rig.written.is_empty());
}

// MGD-3: the steering claim needs the evidence: a prompt written while turn-9 ran but seen in a
// new turn (turn-9 ended between the check and the write) is accepted without the claim.
#[test]
fn mgd_3_the_steering_claim_needs_the_prompt_in_the_running_turn() {
    let mut rig = managed_zola(Some(THREAD));
    let mut busy = idle_snapshot("inc-1", 100);
    busy.turn = TurnState::Busy { turn: Some(turn("turn-9")) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(busy));
    rig.auto = Auto::Manual;
    let command = rig.command(Operation::Send, REQ, "steer it", ReturnMode::OneWay);
    let op = rig.submit(command);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.turn_completed("turn-9", "done before the prompt", 1_050);
    rig.turn_started("turn-10", 1_060);
    rig.user_message("turn-10", "steer it", 1_100);
    rig.settle();
    let receipt = rig.receipt(op);
    assert_eq!((receipt.classification, receipt.reason.as_deref(), receipt.acknowledged), (Classification::Accepted, None, Some(true)), "{receipt:?}");
}

// MGD-4: after a restart, a loss that lies wholly in an EARLIER process's output (the stream's
// mark was left there by `agent restart`; the runtime read that output from the mark to this
// process's start and found records) is a gap on the stream, and ends only the requests armed
// before that start; a request armed at or after it keeps waiting for the resume's attach and
// completes with its own final.
#[test]
fn mgd_4_a_loss_before_a_process_start_ends_only_requests_armed_before_it() {
    for (before, survives) in [(1000, true), (1001, false)] {
        let mut rig = managed_zola(Some(THREAD));
        rig.observe(ObserverEvent::Attached { session: session(), position: 900 });
        let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
        assert_eq!(rig.receipt(op).classification, Classification::Accepted);
        rig.crash_and_recover();
        rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
        rig.input(Input::StartupComplete);
        assert_eq!(rig.resumes.last().map(|(_, from)| from.position), Some(900), "resumed from the stream's mark");
        let lost = ObserverEvent::SessionLost { reason: "an earlier process's records".into(), session: Some(session()), before: Some(before) };
        let count = rig.published_events.len();
        rig.observe(lost);
        let kinds: Vec<&str> = rig.published_events[count..].iter().map(|e| e.kind()).collect();
        assert_eq!(kinds.first(), Some(&"observer.gap"), "the stream names the loss: {kinds:?}");
        if !survives {
            assert_eq!(rig.terminal_for(REQ)[0].state, TerminalState::Indeterminate);
            assert_eq!(rig.terminal_for(REQ)[0].reason.as_deref(), Some("observer_session_lost"));
            continue;
        }
        assert!(rig.terminal_for(REQ).is_empty(), "armed at 1000, after everything lost");
        rig.observe(ObserverEvent::Attached { session: session(), position: before });
        assert_eq!(rig.published_events.last().map(|e| e.kind()), Some("observer.attached"));
        rig.provider_turn("turn-1", "hi", "the final", 1000);
        let events = rig.terminal_for(REQ);
        assert_eq!((events[0].state, events[0].final_message.as_deref()), (TerminalState::Completed, Some("the final")));
    }
}

// MGD-4, EV-4: a loss bounded by a process start at or before the stream's mark (a late resume
// served by the next process's observer) takes nothing from the stream; one past it does.
#[test]
fn mgd_4_a_bounded_loss_the_stream_already_covers_is_not_reported() {
    let mut rig = managed_zola(Some(THREAD));
    rig.observe(ObserverEvent::Attached { session: session(), position: 900 });
    rig.turn_started("turn-1", 1010);
    let count = rig.published_events.len();
    rig.observe(ObserverEvent::SessionLost { reason: "late".into(), session: Some(session()), before: Some(1010) });
    assert_eq!(rig.published_events.len(), count, "{:?}", rig.published_events[count..].iter().map(|e| e.kind()).collect::<Vec<_>>());
    rig.observe(ObserverEvent::SessionLost { reason: "late".into(), session: Some(session()), before: Some(1011) });
    assert_eq!(rig.published_events.last().map(|e| e.kind()), Some("observer.lost"));
}

// MGD-4, EV-13: after a restart, a loss bounded at or before the mark (the holder's ring
// wrapped between the first look, whose replays the zone holds, and the resume that read from
// the process's start again) leaves the replay zone open: the stream that follows is the same
// append-only output, and the mark's record proves it. It closed the zone as for a changed
// file: a gap, and the held records reported again (a review).
#[test]
fn mgd_4_a_covered_loss_leaves_the_replay_zone_open() {
    let mut rig = managed_zola(Some(THREAD));
    rig.observe(ObserverEvent::Attached { session: session(), position: 900 });
    rig.provider_turn("turn-1", "hi", "the final", 1010); // records at 1020, 1030, 1040: the mark
    rig.crash_and_recover();
    rig.input(Input::AgentUpserted(managed_facts(Some(THREAD))));
    rig.input(Input::StartupComplete);
    let count = rig.published_events.len();
    rig.observe(ObserverEvent::Attached { session: session(), position: 900 });
    rig.turn_started("turn-1", 1020); // a replay, held
    rig.observe(ObserverEvent::SessionLost { reason: "evicted".into(), session: Some(session()), before: Some(1025) });
    rig.observe(ObserverEvent::Attached { session: session(), position: 1025 });
    rig.user_message("turn-1", "hi", 1030); // the same records again, to the mark
    rig.turn_completed("turn-1", "the final", 1040);
    rig.turn_started("turn-2", 1100);
    let kinds: Vec<&str> = rig.published_events[count..].iter().map(|e| e.kind()).collect();
    assert_eq!(kinds, ["turn.started"], "only the new turn: {kinds:?}");
}

fn refused(id: &str, position: u64) -> ObserverEvent {
    let error = "-32603: failed to start turn: internal error; agent loop died unexpectedly".to_string();
    ObserverEvent::RequestRefused { session: session(), id: id.to_string(), error, position }
}

// MGD-7: the app-server's error reply to the admission's own turn/start (its id carries the
// admission's random nonce) proves the prompt never reached the thread: `delivery_failed` at
// once, the error in the evidence trail, and the id is durable with the registration (a
// restarted daemon replays the reply).
#[test]
fn mgd_7_a_refusal_of_its_own_turn_start_is_delivery_failed() {
    let mut rig = managed_zola(Some(THREAD));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    let id = prompt::turn_start_id(REQ, 0x5eed);
    let line: serde_json::Value = serde_json::from_slice(rig.written[0].1.strip_prefix(prompt::LINE_LEAD).unwrap()).unwrap();
    assert_eq!(line["id"], id.as_str(), "the write carries the id the record names");
    let request_id = RequestId::parse(REQ).unwrap();
    assert_eq!(rig.durable[&request_id].turn_start_id.as_deref(), Some(id.as_str()));
    rig.observe(refused(&id, 1_010));
    let ended = rig.terminal_for(REQ);
    assert_eq!(ended.len(), 1);
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::DeliveryFailed, Some("turn_start_refused")));
    let trail = &rig.durable[&request_id].evidence;
    let last = trail.last().expect("a trail");
    assert!(last.detail.contains("MGD-7") && last.detail.contains("failed to start turn"), "{trail:?}");
}

// MGD-7: a refusal proves nothing about this request unless it names its exact turn/start
// id: not the request id alone (a holder-socket client who knows the id can send a request
// under it), not another request's id. A refusal after a turn started since the arming (a
// candidate), or after the prompt was seen to open its turn, contradicts that evidence:
// `indeterminate`, never `delivery_failed`.
#[test]
fn mgd_7_only_its_own_id_before_any_turn_is_proof() {
    let mut rig = managed_zola(Some(THREAD));
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    let own = prompt::turn_start_id(REQ, 0x5eed);
    for forged in [format!("wakterm-{REQ}"), prompt::turn_start_id(REQ, 1), prompt::turn_start_id(REQ2, 0x5eed), "mcp-input-1".to_string()] {
        rig.observe(refused(&forged, 1_005));
    }
    assert!(rig.terminal_for(REQ).is_empty(), "{:?}", rig.terminal_for(REQ));
    rig.turn_started("turn-1", 1_010);
    rig.user_message("turn-1", "hi", 1_020);
    rig.observe(refused(&own, 1_030));
    let ended = rig.terminal_for(REQ);
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("turn_start_refusal_contradicted")));

    // A candidate turn (started, its user message not seen yet) is evidence too.
    let mut rig = managed_zola(Some(THREAD));
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.turn_started("turn-1", 1_010);
    rig.observe(refused(&prompt::turn_start_id(REQ, 0x5eed), 1_020));
    let ended = rig.terminal_for(REQ);
    assert_eq!((ended[0].state, ended[0].reason.as_deref()), (TerminalState::Indeterminate, Some("turn_start_refusal_contradicted")));
}

// MGD-7, ADM-5: a refused prompt leaves nothing to wait for: the next return-final admission
// is accepted at once, not `busy` / `awaiting_turn_start` until the 10 s grace runs out.
#[test]
fn mgd_7_a_refused_prompt_leaves_the_agent_available() {
    let mut rig = managed_zola(Some(THREAD));
    rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.observe(refused(&prompt::turn_start_id(REQ, 0x5eed), 1_010));
    assert_eq!(rig.terminal_for(REQ)[0].state, TerminalState::DeliveryFailed);
    let op = rig.admit(REQ2, "again", ReturnMode::ReturnFinal);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Accepted, "{receipt:?}");
}

// MGD-7, ADM-13: a plain one-way send whose own turn/start the app-server refused is answered
// at once, `acknowledged: false` with reason `turn_start_refused` and the server's error (it
// waited out the acknowledgement window and said nothing of why), and the agent is free again.
#[test]
fn mgd_7_a_refused_one_way_send_says_so_at_once() {
    let mut rig = managed_zola(Some(THREAD));
    let command = rig.command(Operation::Send, REQ, "hi", ReturnMode::OneWay);
    let op = rig.submit(command);
    assert!(!rig.has_receipt(op), "waiting for the acknowledgement");
    rig.observe(refused(&prompt::turn_start_id(REQ, 0x5eed), 1_010));
    let receipt = rig.receipt(op).clone();
    assert_eq!((receipt.classification, receipt.acknowledged, receipt.reason.as_deref()), (Classification::Accepted, Some(false), Some("turn_start_refused")), "{receipt:?}");
    assert!(receipt.detail.as_deref().is_some_and(|d| d.contains("failed to start turn")), "{receipt:?}");
    let next = rig.admit(REQ2, "again", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(next).classification, Classification::Accepted, "{:?}", rig.receipt(next));
}

// MGD-7: a loss while the one-way prompt awaits its acknowledgement (evicted output, which may
// have held the result answering its `turn/start`) makes a later error under its id no proof:
// the wait runs out as usual, without claiming a refusal (found by the simulator's exploration,
// seed 48564688: the result evicted, an error under the id from a holder-socket client, and a
// receipt `turn_start_refused` for a prompt that opened its turn).
#[test]
fn mgd_7_no_refusal_is_proof_after_a_loss() {
    let mut rig = managed_zola(Some(THREAD));
    let command = rig.command(Operation::Send, REQ, "hi", ReturnMode::OneWay);
    let op = rig.submit(command);
    assert!(!rig.has_receipt(op), "waiting for the acknowledgement");
    rig.observe(ObserverEvent::SessionLost { reason: "notifications were evicted".into(), session: None, before: None });
    rig.observe(ObserverEvent::Attached { session: SessionId(THREAD.into()), position: 1_005 });
    rig.observe(refused(&prompt::turn_start_id(REQ, 0x5eed), 1_010));
    assert!(!rig.has_receipt(op), "no refusal claimed");
    rig.advance(limits::SEND_ACK_WAIT_MS);
    let receipt = rig.receipt(op).clone();
    assert_eq!((receipt.classification, receipt.acknowledged), (Classification::Accepted, Some(false)), "{receipt:?}");
    assert_ne!(receipt.reason.as_deref(), Some("turn_start_refused"), "{receipt:?}");
}

/// ADM-5: where the latest user message a mark kept lies (`EventMark::prompts_taken`).
fn taken_at(mark: &EventMark) -> Option<Cursor> {
    mark.prompts_taken.last().map(|p| p.at.clone())
}
