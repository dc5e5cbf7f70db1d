//! MGD-2, MGD-3: admissions to a managed app-server agent (CORR-8) as engine transitions.

mod support;
use support::*;
use wakterm_engine::*;

const THREAD: &str = "sess-1"; // the rig's observer session: Codex 0.169 gives thread id == session id

fn managed_zola(thread: Option<&str>) -> Rig {
    let mut rig = Rig::new();
    let mut facts = zola_facts("inc-1", 100);
    facts.transport = Transport::AppServer;
    facts.managed = thread.map(|t| ManagedIds { thread_id: t.to_string(), session_id: SessionId(t.to_string()) });
    rig.input(Input::AgentUpserted(facts));
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    rig
}

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
    assert_eq!(bytes, &prompt::managed_turn_start(THREAD, REQ, "two\nlines"));
    let line: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    assert_eq!((line["method"].as_str(), line["params"]["threadId"].as_str()), (Some("turn/start"), Some(THREAD)));
    // The turn that prompt started completes the request with its own final (CORR-8).
    rig.provider_turn("turn-1", "two\nlines", "the final", 1_000);
    assert_eq!(rig.terminal_for(REQ)[0].final_message.as_deref(), Some("the final"));
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
