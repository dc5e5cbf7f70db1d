//! The `agent events` stream (EV-*): durable history from the store after the caller's
//! sequence, then live events pushed by the driver, on one subscription. Same framing as
//! `request watch`: `{"event": ...}` lines, heartbeats, and `{"end": ...}` for `--once`.

use super::server::write_line;
use super::Context;
use crate::protocol::{exit, Reply};
use crate::store::{Store, StoreError};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Arc;
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

/// What `agent events` reads: the agent event store up to the published sequence, live
/// events of the agents asked for (all when none).
#[derive(Clone)]
struct AgentEvents {
    agents: Vec<String>,
    events: super::effects::EventFeed,
}

impl super::stream::Feed for AgentEvents {
    type Event = wakterm_engine::AgentEvent;
    const PAGE: usize = EVENTS_PAGE;

    fn sequence(event: &Self::Event) -> u64 {
        event.sequence
    }

    fn wanted(&self, event: &Self::Event) -> bool {
        self.agents.is_empty() || self.agents.iter().any(|id| id == event.agent_id.as_str())
    }

    fn through(&self) -> Option<u64> {
        Some(self.events.published_through())
    }

    fn page(&self, store: &Store, after: u64, through: Option<u64>) -> Result<Vec<(u64, String)>, StoreError> {
        let page = store.agent_events_after(after, through.expect("agent events are read up to the published sequence"), EVENTS_PAGE, &self.agents)?;
        Ok(page.into_iter().map(|e| (e.sequence, e.event_json)).collect())
    }

    fn too_old(&self, store: &Store, after: u64) -> Result<Option<Reply>, StoreError> {
        Ok(cursor_too_old(after, store.events_pruned_through()?, store.oldest_event_sequence()?))
    }
}

pub(super) async fn events(peer: OwnedReadHalf, writer: &mut OwnedWriteHalf, context: &Arc<Context>, after: u64, once: bool, targets: Vec<String>) {
    let agents = match resolve_agents(context, &targets) {
        Ok(agents) => agents.into_iter().collect(),
        Err(reply) => {
            let _ = write_line(writer, &serde_json::to_value(reply).unwrap_or_default()).await;
            return;
        }
    };
    let live = context.events.live.subscribe();
    let feed = AgentEvents { agents, events: context.events.clone() };
    super::stream::serve(peer, writer, context, feed, live, after, once).await
}

/// EV-8: the sequence the catalog's view is consistent with, once every event up to it is
/// durable (published); None when that takes longer than [`CATALOG_EVENTS_WAIT`].
pub(super) async fn durable_through(context: &Context, through: u64) -> Option<u64> {
    let mut published = context.events.published.subscribe();
    let reached = tokio::time::timeout(CATALOG_EVENTS_WAIT, published.wait_for(|at| *at >= through)).await;
    matches!(reached, Ok(Ok(_))).then_some(through)
}
