//! The `agent catalog` handler: answered from the engine's view (ADM-16), which the monitor
//! keeps current (MON-1), in one question to the engine, whatever the number of agents.

use super::agents::{AgentRecord, AgentRuntime};
use super::Context;
use crate::protocol::Reply;
use serde_json::{json, Value};
use std::sync::Arc;
use wakterm_engine::Engine;

/// ADM-16: one question to the engine for every agent: what an immediate return-final
/// admission would meet (one decision, never re-derived here). Nothing is refreshed: the
/// monitor feeds the engine's view on every rollout and process change, and an admission
/// refreshes its agent itself before deciding (ADM-3).
pub(super) async fn catalog(context: &Arc<Context>) -> Reply {
    let asked = crate::driver::ask(&context.inbox, move |engine: &Engine| {
        let views: std::collections::BTreeMap<_, _> = engine.agent_ids().filter_map(|id| Some((id.clone(), engine.catalog_view(id)?))).collect();
        (views, engine.events_through())
    });
    let Some((mut views, events_through)) = asked.await else {
        return Reply::error(crate::protocol::exit::ERROR, "internal_failure", "the engine is not running");
    };
    // EV-8: the view reflects every event up to `events_through`; answer once they are all
    // durable, so `agent events --after events_through` misses nothing and repeats nothing.
    let Some(events_through) = super::events::durable_through(context, events_through).await else {
        let message = format!("the events the catalog reflects (through {events_through}) are not durable yet; retry");
        return Reply::error(crate::protocol::exit::ERROR, "events_not_durable", message);
    };
    // EV-8: the table is read after the engine answered. An agent the engine knew then (its
    // `agent.started` may be within `events_through`) was put in the table before the engine
    // heard of it (`agent start`, a restart's re-registration), so it is listed. Read before
    // the question, an agent started in between was left out while its `agent.started` was
    // covered: a reader of `--after events_through` never learnt of it (a review found it).
    // An agent in the table the engine does not know yet is listed too, without a decision.
    if context.fault == Some(super::faults::FaultPoint::CatalogPause) {
        tokio::time::sleep(super::faults::CATALOG_PAUSE).await;
    }
    let agents: Vec<Arc<AgentRuntime>> = context.agents.lock().expect("agent table").values().cloned().collect();
    let entries: Vec<Value> = agents
        .iter()
        .map(|agent| (agent, views.remove(&agent.agent_id())))
        .map(|(agent, view)| {
            let snapshot = agent.last_snapshot().unwrap_or_else(|| Err("the monitor has not looked at the agent yet".to_string()));
            let decision = view.as_ref().map_or(Value::Null, catalog_decision);
            let decision = refresh_failure_blocks(decision, &snapshot);
            catalog_entry(agent, snapshot, decision)
        })
        .collect();
    Reply::ok(json!({"schema": "wakterm.agent-catalog.v1", "events_through": events_through, "agents": entries}))
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

fn catalog_entry(agent: &AgentRuntime, snapshot: Result<wakterm_engine::ObserverSnapshot, String>, decision: Value) -> Value {
    use wakterm_engine::ObserverStatus;
    let record: &AgentRecord = &agent.record;
    let incarnation = agent.facts().incarnation;
    // LIFE-4: why a stopped agent stopped, as far as its holder knows (null while it runs, or
    // when no holder answers: after a reboot, or its holder was killed).
    let exit_code = {
        let liveness = agent.liveness.lock().expect("liveness lock");
        liveness.exit_code.filter(|_| !liveness.alive)
    };
    let view = snapshot.as_ref().ok();
    // LIVE-1: a held agent (its holder unreachable through the daemon's start) was said to have
    // "no process" and `agent_unknown` while its process ran (a hostile run).
    let unanswered = agent.never_answered();
    let observer_detail = match (&snapshot, view.map(|v| &v.status)) {
        _ if unanswered => Some(crate::output_page::LIVENESS_UNKNOWN.to_string()),
        (Err(error), _) => Some(error.clone()),
        (_, Some(ObserverStatus::Unavailable { reason })) => Some(reason.clone()),
        _ => None,
    };
    let unavailable_reason = match unanswered {
        true => json!("liveness_unknown"),
        false => decision.get("return_final_unavailable_reason").cloned().unwrap_or(json!("agent_unknown")),
    };
    json!({
        "agent_id": record.agent_id,
        "name": record.name,
        "harness": record.harness,
        "transport": if record.managed { "app_server" } else { "pty" },
        "incarnation": incarnation,
        "state": decision.get("state").cloned().unwrap_or(json!("unknown")),
        "correlation_source": match (record.managed, record.harness.as_str()) {
            (true, _) => Some("agent_api_events"),
            (false, "codex") => Some("provider_file"),
            _ => None,
        },
        "thread_id": record.thread.as_ref().map(|t| t.thread_id.clone()),
        "session_id": record.thread.as_ref().map(|t| t.session_id.0.clone()),
        "return_final_available": decision.get("return_final_available").cloned().unwrap_or(json!(false)),
        "return_final_unavailable_reason": unavailable_reason,
        "observer_detail": observer_detail,
        "observer_session": view.and_then(|v| v.session.clone()),
        "exit_code": exit_code,
        "cwd": record.cwd,
    })
}
