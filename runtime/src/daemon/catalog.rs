//! The `agent catalog` handler: refresh each agent, then ask the engine what an immediate
//! return-final admission would meet (ADM-16).

use super::agents::{AgentRecord, AgentRuntime};
use super::server::query;
use super::Context;
use crate::driver::DriverMsg;
use crate::protocol::Reply;
use serde_json::{json, Value};
use std::sync::Arc;
use wakterm_engine::{Engine, Input};

/// The catalog refreshes every agent's observer off the reactor (forwarding what it read to
/// the engine, in order) so the state it reports is current, then asks the engine what an
/// immediate return-final admission would meet (ADM-16): one decision, never re-derived here.
pub(super) async fn catalog(context: &Arc<Context>) -> Reply {
    let agents: Vec<Arc<AgentRuntime>> = context.agents.lock().expect("agent table").values().cloned().collect();
    let mut entries = Vec::new();
    for agent in agents {
        let inbox = context.inbox.clone();
        let worker = agent.clone();
        let snapshot = tokio::task::spawn_blocking(move || {
            let agent_id = worker.agent_id();
            // The catalog's snapshot also refreshes the engine's view (ADM-5 grace, busy/idle);
            // a failed refresh tells the engine nothing.
            let answer = |snapshot: Result<wakterm_engine::ObserverSnapshot, String>| {
                snapshot.ok().map(|snapshot| DriverMsg::Input(Input::ObserverSnapshot { agent_id: agent_id.clone(), snapshot }))
            };
            super::effects::refresh_agent(&worker, &worker.agent_id(), &inbox, answer)
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        let agent_id = agent.agent_id();
        let view = query(context, move |engine: &Engine| engine.catalog_view(&agent_id))
            .await
            .flatten()
            .map_or(Value::Null, |view| catalog_decision(&view));
        let view = refresh_failure_blocks(view, &snapshot);
        entries.push(catalog_entry(&agent.record, agent.facts().incarnation, snapshot, view));
    }
    Reply::ok(json!({"schema": "wakterm.agent-catalog.v1", "agents": entries}))
}

/// The engine's catalog decision as JSON: state, availability and the blocker's reason. An
/// admission in flight or a written prompt whose turn has not started is reported by the
/// catalog's published word for both, `turn_pending`.
fn catalog_decision(view: &wakterm_engine::CatalogView) -> Value {
    let reason = view.return_final_blocker.as_ref().map(|b| match b.reason {
        "admission_in_progress" | "awaiting_turn_start" => "turn_pending",
        other => other,
    });
    json!({
        "state": view.state.as_str(),
        "return_final_available": view.return_final_blocker.is_none(),
        "return_final_unavailable_reason": reason,
        "detail": view.return_final_blocker.as_ref().map(|b| b.detail.clone()),
    })
}

/// An admission's own refresh would fail as the catalog's did, and it is refused then
/// (`observer_unavailable`, ADM-3): the engine, which hears nothing of a failed refresh, may
/// still hold an older view.
fn refresh_failure_blocks(mut decision: Value, snapshot: &Result<wakterm_engine::ObserverSnapshot, String>) -> Value {
    if snapshot.is_err() && decision["return_final_available"] == true {
        decision["return_final_available"] = json!(false);
        decision["return_final_unavailable_reason"] = json!("observer_unavailable");
    }
    decision
}

fn catalog_entry(record: &AgentRecord, incarnation: Option<wakterm_engine::Incarnation>, snapshot: Result<wakterm_engine::ObserverSnapshot, String>, decision: Value) -> Value {
    use wakterm_engine::ObserverStatus;
    let view = snapshot.as_ref().ok();
    let observer_detail = match (&snapshot, view.map(|v| &v.status)) {
        (Err(error), _) => Some(error.clone()),
        (_, Some(ObserverStatus::Unavailable { reason })) => Some(reason.clone()),
        _ => None,
    };
    json!({
        "agent_id": record.agent_id,
        "name": record.name,
        "harness": record.harness,
        "transport": "pty",
        "incarnation": incarnation,
        "state": decision.get("state").cloned().unwrap_or(json!("unknown")),
        "correlation_source": if record.harness == "codex" { Some("provider_file") } else { None },
        "return_final_available": decision.get("return_final_available").cloned().unwrap_or(json!(false)),
        "return_final_unavailable_reason": decision.get("return_final_unavailable_reason").cloned().unwrap_or(json!("agent_unknown")),
        "observer_detail": observer_detail,
        "observer_session": view.and_then(|v| v.session.clone()),
        "cwd": record.cwd,
    })
}
