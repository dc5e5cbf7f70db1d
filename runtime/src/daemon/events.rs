//! The `agent events` stream (EV-*): durable history from the store after the caller's
//! sequence, then live events pushed by the driver, on one subscription. Same framing as
//! `request watch`: `{"event": ...}` lines, heartbeats, and `{"end": ...}` for `--once`.

use super::server::write_line;
use super::Context;
use crate::protocol::{exit, Reply};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// Events read from the store per page while a subscriber catches up.
pub const EVENTS_PAGE: usize = 512;
/// EV-8: how long `agent catalog` waits for the events its view reflects to become durable.
pub const CATALOG_EVENTS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Resolves `--agent` targets (names or ids) to agent ids. A stopped agent's events stay
/// readable by its id.
pub(super) fn resolve_agents(context: &Context, targets: &[String]) -> Result<BTreeSet<String>, Reply> {
    let table = context.agents.lock().expect("agent table");
    let mut ids = BTreeSet::new();
    for target in targets {
        let found = table.values().find(|a| &a.record.name == target || &a.record.agent_id == target);
        match found {
            Some(agent) => ids.insert(agent.record.agent_id.clone()),
            None if wakterm_engine::AgentId::parse(target).is_ok() => ids.insert(target.clone()),
            None => return Err(Reply::error(exit::NOT_FOUND, "agent_unknown", format!("no agent is named {target} (a stopped agent is reached by its id)"))),
        };
    }
    Ok(ids)
}

/// EV-9: a cursor below what retention pruned cannot be resumed: the events after it are gone.
pub(super) fn cursor_too_old(after: u64, pruned_through: u64, oldest_retained: Option<u64>) -> Option<Reply> {
    let rebase = json!({"take": "agent catalog", "then": "agent events --after <catalog.events_through>"});
    let how = "rebase: take `wakterm agent catalog`, then subscribe with --after its events_through";
    too_old("events", after, pruned_through, oldest_retained, how, rebase)
}

/// EV-9, HIST-4: the `cursor_too_old` answer (exit 4) with its recovery metadata, when `after`
/// lies below what retention removed.
pub(super) fn too_old(what: &str, after: u64, pruned_through: u64, oldest_retained: Option<u64>, how: &str, rebase: Value) -> Option<Reply> {
    if after >= pruned_through {
        return None;
    }
    let message = format!("{what} after {after} up to {pruned_through} were pruned by retention; {how}");
    let mut reply = Reply::error(exit::REJECTED, "cursor_too_old", message);
    reply.body["pruned_through"] = json!(pruned_through);
    reply.body["oldest_retained_sequence"] = json!(oldest_retained);
    reply.body["rebase"] = rebase;
    Some(reply)
}

pub(super) async fn events(mut peer: OwnedReadHalf, writer: &mut OwnedWriteHalf, context: &Arc<Context>, after: u64, once: bool, targets: Vec<String>) {
    let agents = match resolve_agents(context, &targets) {
        Ok(agents) => agents,
        Err(reply) => {
            let _ = write_line(writer, &serde_json::to_value(reply).unwrap_or_default()).await;
            return;
        }
    };
    // Subscribe before reading history: nothing published in between is lost.
    let mut live = context.events.live.subscribe();
    let store = context.store.clone();
    let bounds = tokio::task::spawn_blocking(move || Ok::<_, crate::store::StoreError>((store.events_pruned_through()?, store.oldest_event_sequence()?))).await;
    let Ok(Ok((pruned, oldest))) = bounds else {
        let _ = write_line(writer, &json!({"error": "store_unreadable"})).await;
        return;
    };
    if let Some(reply) = cursor_too_old(after, pruned, oldest) {
        let _ = write_line(writer, &serde_json::to_value(reply).unwrap_or_default()).await;
        return;
    }
    let agents: Vec<String> = agents.into_iter().collect();
    let mut last = after;
    if !send_history(writer, context, &mut last, &agents).await {
        return;
    }
    if once {
        let _ = write_line(writer, &json!({"end": true, "last_sequence": last})).await;
        return;
    }
    let mut heartbeat = tokio::time::interval(crate::protocol::WATCH_HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scratch = [0u8; 64];
    loop {
        let line = tokio::select! {
            biased;
            _ = peer.read(&mut scratch) => return,
            received = live.recv() => match received {
                Ok(event) if event.sequence > last => {
                    last = event.sequence;
                    if !agents.is_empty() && !agents.iter().any(|id| id == event.agent_id.as_str()) {
                        continue;
                    }
                    json!({"event": event})
                }
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    if !send_history(writer, context, &mut last, &agents).await {
                        return;
                    }
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            _ = heartbeat.tick() => json!({"heartbeat": true, "last_sequence": last}),
        };
        if write_line(writer, &line).await.is_err() {
            return;
        }
    }
}

/// Pages of durable events after `last`, up to what is published (EV-2: a number whose commit
/// is pending is never passed).
async fn send_history(writer: &mut OwnedWriteHalf, context: &Arc<Context>, last: &mut u64, agents: &[String]) -> bool {
    let through = context.events.published_through();
    loop {
        let store = context.store.clone();
        let (from, filter) = (*last, agents.to_vec());
        let page = tokio::task::spawn_blocking(move || store.agent_events_after(from, through, EVENTS_PAGE, &filter)).await;
        let Ok(Ok(page)) = page else {
            let _ = write_line(writer, &json!({"error": "store_unreadable"})).await;
            return false;
        };
        let full = page.len() == EVENTS_PAGE;
        for stored in page {
            let event: Value = serde_json::from_str(&stored.event_json).unwrap_or(Value::Null);
            *last = stored.sequence;
            if write_line(writer, &json!({"event": event})).await.is_err() {
                return false;
            }
        }
        if !full {
            // A filtered read may stop short of `through`: nothing of ours lies between.
            *last = (*last).max(through);
            return true;
        }
    }
}

/// EV-8: the sequence the catalog's view is consistent with, once every event up to it is
/// durable (published); None when that takes longer than [`CATALOG_EVENTS_WAIT`].
pub(super) async fn durable_through(context: &Context, through: u64) -> Option<u64> {
    let mut published = context.events.published.subscribe();
    let reached = tokio::time::timeout(CATALOG_EVENTS_WAIT, published.wait_for(|at| *at >= through)).await;
    matches!(reached, Ok(Ok(_))).then_some(through)
}
