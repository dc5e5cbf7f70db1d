//! ADM-15 / TERM-1: insta JSON snapshots of one receipt per classification and one terminal
//! event per state, produced by driving the engine (not by constructing the JSON by hand).

mod support;
use support::*;
use wakterm_engine::*;

fn receipt_json(rig: &Rig, op: OpId) -> serde_json::Value {
    serde_json::to_value(rig.receipt(op)).unwrap()
}

fn snapshot_for(classification: Classification) -> serde_json::Value {
    let mut rig = Rig::with_idle_zola();
    let op = match classification {
        Classification::Accepted => rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal),
        Classification::Busy => {
            let mut snapshot = idle_snapshot("inc-1", 100);
            snapshot.turn = TurnState::Busy { turn: Some(turn("turn-7")) };
            rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
            rig.admit(REQ, "hi", ReturnMode::ReturnFinal)
        }
        Classification::Unsupported => {
            let mut facts = zola_facts("inc-1", 100);
            facts.harness = Harness::Other("aider".to_string());
            rig.input(Input::AgentUpserted(facts));
            rig.admit(REQ, "hi", ReturnMode::ReturnFinal)
        }
        Classification::Unavailable => {
            let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
            command.target = OTHER.to_string();
            command.exact_agent_id = true;
            rig.submit(command)
        }
        Classification::StaleIncarnation => {
            let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
            command.incarnation = Some("inc-0".to_string());
            rig.submit(command)
        }
        Classification::Invalid => rig.admit(REQ, "hi \x1b[201~ there", ReturnMode::ReturnFinal),
        Classification::ObserverFailure => {
            let mut snapshot = idle_snapshot("inc-1", 100);
            snapshot.turn = TurnState::Idle { last_completed: None };
            rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
            rig.admit(REQ, "hi", ReturnMode::ReturnFinal)
        }
        Classification::InternalFailure => {
            rig.auto = Auto::Manual;
            let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
            rig.refresh_next();
            rig.ack_next_persist(Err("database is locked".to_string()));
            op
        }
        Classification::Indeterminate => {
            rig.delivery_outcome = DeliveryOutcome::Failed { bytes_written: 9, error: "EIO".to_string() };
            rig.admit(REQ, "hi", ReturnMode::ReturnFinal)
        }
    };
    let json = receipt_json(&rig, op);
    assert_eq!(json["classification"], serde_json::to_value(classification).unwrap());
    json
}

/// ADM-15: one snapshot per classification; the field names are the seed's.
#[test]
fn adm_15_receipt_snapshots() {
    for classification in Classification::ALL {
        let json = snapshot_for(classification);
        for field in ["classification", "prompt_written", "reply_pending", "request_id", "incarnation", "correlation_source", "baseline_provider_turn", "armed_cursor"] {
            assert!(json.get(field).is_some(), "{field} missing for {classification:?}");
        }
        let name = serde_json::to_value(classification).unwrap().as_str().unwrap().to_string();
        insta::assert_json_snapshot!(format!("receipt_{name}"), json);
    }
}

fn terminal_for(state: TerminalState) -> serde_json::Value {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "Complete phases 2 and 3", ReturnMode::ReturnFinal);
    command.final_timeout_ms = 3_600_000;
    rig.submit(command);
    match state {
        TerminalState::Completed => rig.provider_turn("turn-1", "Complete phases 2 and 3", "Phases 2 and 3 are done.", 1000),
        TerminalState::Aborted => {
            rig.turn_started("turn-1", 1010);
            rig.user_message("turn-1", "Complete phases 2 and 3", 1020);
            rig.observe(ObserverEvent::TurnAborted { session: session(), turn: Some(turn("turn-1")), position: 1030 });
        }
        TerminalState::TimedOut => rig.advance(3_600_000),
        TerminalState::Cancelled => rig.input(Input::Cancel(CancelCommand { op: OpId(50), request_id: REQ.to_string() })),
        TerminalState::DeliveryFailed => rig.observe(ObserverEvent::ProcessExited { drained: true }),
        TerminalState::Indeterminate => rig.provider_turn("turn-1", "not our prompt", "x", 1000),
    }
    let events = rig.terminal_for(REQ);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].state, state);
    serde_json::to_value(events[0]).unwrap()
}

/// TERM-1: one snapshot per terminal state; `final_message` only on `completed`.
#[test]
fn term_1_terminal_event_snapshots() {
    for state in TerminalState::ALL {
        let json = terminal_for(state);
        for field in ["state", "terminal_event_sequence", "request_id"] {
            assert!(json.get(field).is_some());
        }
        assert_eq!(json.get("final_message").is_some(), state == TerminalState::Completed);
        let name = serde_json::to_value(state).unwrap().as_str().unwrap().to_string();
        insta::assert_json_snapshot!(format!("terminal_{name}"), json);
    }
}
