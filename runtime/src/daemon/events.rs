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
use wakterm_engine::limits::no_agent_named;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};

/// Events read from the store per page while a subscriber catches up.
pub const EVENTS_PAGE: usize = 512;
/// EV-8: how long `agent catalog` waits for the events its view reflects to become durable.
pub const CATALOG_EVENTS_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// `--agent` targets resolved: the ids of live agents, and ids no live agent has (a stopped
/// agent's, or none's), which `unknown_ids` checks against the store.
#[derive(Debug, Default)]
pub(super) struct Targets {
    pub ids: BTreeSet<String>,
    pub not_live: BTreeSet<String>,
}

/// Resolves `--agent` targets (names or ids) to agent ids. A stopped agent's events stay
/// readable by its id.
pub(super) fn resolve_agents(context: &Context, targets: &[String]) -> Result<Targets, Reply> {
    let mut resolved = Targets::default();
    for target in targets {
        // An id in upper case means its canonical form, as everywhere.
        match (super::agent_handlers::resolve(context, target), wakterm_engine::AgentId::parse(target).ok()) {
            (Some(agent), _) => resolved.ids.insert(agent.record.agent_id.clone()),
            (None, Some(id)) => {
                resolved.not_live.insert(id.as_str().to_string());
                resolved.ids.insert(id.as_str().to_string())
            }
            (None, None) => return Err(Reply::error(exit::NOT_FOUND, "agent_unknown", format!("{} (a stopped agent is reached by its id)", no_agent_named(target)))),
        };
    }
    Ok(resolved)
}

/// EV-14: the agents a filtered stream follows to their stops (None: no filter): the live
/// ones and those whose stop is not durable yet (`pending`); not those stopped durably.
fn followed(targets: &Targets, pending: BTreeSet<String>) -> Option<BTreeSet<String>> {
    if targets.ids.is_empty() {
        return None;
    }
    let mut following: BTreeSet<String> = targets.ids.difference(&targets.not_live).cloned().collect();
    following.extend(pending);
    Some(following)
}

/// EV-14: of the ids no live agent has, those whose `agent.stopped` is not durable yet (an
/// agent stopped a moment ago: the stream follows it to its stop). An id the daemon never
/// reported an event of can never have one (ids are the daemon's to give, and a stopped
/// agent's id is never given again): refused, where a live stream on it waited forever. Read
/// off the reactor, one event-mark lookup per id (marks outlive retention). `Err`: the refusal.
async fn stops_pending(context: &Context, not_live: BTreeSet<String>) -> Result<BTreeSet<String>, Reply> {
    if not_live.is_empty() {
        return Ok(BTreeSet::new());
    }
    let store = context.store.clone();
    let checked = tokio::task::spawn_blocking(move || -> Result<Result<(BTreeSet<String>, Option<u64>), String>, String> {
        let mut pending = BTreeSet::new();
        let mut stopped = false;
        for id in not_live {
            match store.agent_stop_reported(&id).map_err(|e| e.to_string())? {
                None => return Ok(Err(id)),
                Some(false) => {
                    pending.insert(id);
                }
                Some(true) => stopped = true,
            }
        }
        // A stop durable in the mark may not be published yet: the stream's history, read up
        // to the published sequence, must reach it (below: wait for it).
        let durable = stopped.then(|| store.last_event_sequence()).transpose().map_err(|e| e.to_string())?;
        Ok(Ok((pending, durable)))
    })
    .await
    .map_err(|e| e.to_string())
    .and_then(|checked| checked);
    match checked {
        Ok(Ok((pending, durable))) => {
            if let Some(through) = durable {
                // Bounded (EV-8's wait); past it the stream reads what is published, as ever.
                let _ = durable_through(context, through).await;
            }
            Ok(pending)
        }
        Ok(Err(id)) => Err(Reply::error(exit::NOT_FOUND, "agent_unknown", format!("no agent has the id {id:?}, and this daemon never reported an event of it: nothing would ever match"))),
        // An error while gathering evidence is no evidence: refuse rather than wait on a guess.
        Err(error) => Err(Reply::error(exit::ERROR, "store_unreadable", format!("cannot check whether the --agent ids have events: {error}; nothing was streamed"))),
    }
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
    if !crate::store::retention::cursor_too_old(after, pruned_through) {
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
    /// EV-14: with `--agent`, the agents that were live when the stream began and whose
    /// `agent.stopped` it has not sent yet (None: no filter). Ids are never given again, so
    /// once it is empty nothing the stream selects can come: it ends, at the last stop. A live
    /// stream bound to a name otherwise printed bookmarks past the events of another agent
    /// started later under that name, which a reader resuming by name then skipped.
    following: Option<BTreeSet<String>>,
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

    fn last_durable(&self, store: &Store) -> Result<u64, StoreError> {
        store.last_event_sequence()
    }

    const REBASE: &'static str = "take `agent catalog` and pass its events_through to --after";

    fn exhausted_by(&mut self, event: &Value) -> bool {
        let Some(following) = &mut self.following else { return false };
        let agent = event["agent_id"].as_str().unwrap_or_default();
        event["kind"] == "agent.stopped" && following.remove(agent) && following.is_empty()
    }

    fn exhausted(&self) -> bool {
        self.following.as_ref().is_some_and(BTreeSet::is_empty)
    }
}

/// EV-*: the most `--agent` filters one stream takes. Without a bound a 1 MiB request named
/// 26,000 agents, each stream kept them (4.7 MB) for its whole life and scanned them for every
/// event, on the reactor (a review measured admissions slowed to a second).
pub const MAX_EVENT_FILTER_AGENTS: usize = 256;

pub(super) async fn events(peer: OwnedReadHalf, writer: &mut OwnedWriteHalf, context: &Arc<Context>, after: u64, once: bool, targets: Vec<String>) {
    // INP-4: a target that cannot name an agent is a usage error, as for every command, and
    // first, as the CLI checks it before it connects.
    if let Some(refused) = crate::protocol::malformed_agents(&targets) {
        let _ = write_line(writer, &serde_json::to_value(refused).unwrap_or_default()).await;
        return;
    }
    if targets.len() > MAX_EVENT_FILTER_AGENTS {
        let message = format!("{} agents named; a stream follows at most {MAX_EVENT_FILTER_AGENTS} (or all, naming none)", targets.len());
        let _ = write_line(writer, &serde_json::to_value(Reply::error(exit::USAGE, "too_many_agents", message)).unwrap_or_default()).await;
        return;
    }
    let resolved = resolve_agents(context, &targets);
    drop(targets); // not kept for the stream's life
    let checked = match resolved {
        Ok(targets) => stops_pending(context, targets.not_live.clone()).await.map(|pending| (targets, pending)),
        Err(reply) => Err(reply),
    };
    let (agents, following) = match checked {
        Ok((targets, pending)) => {
            let following = followed(&targets, pending);
            (targets.ids.into_iter().collect(), following)
        }
        Err(reply) => {
            let _ = write_line(writer, &serde_json::to_value(reply).unwrap_or_default()).await;
            return;
        }
    };
    let live = context.events.live.subscribe();
    let feed = AgentEvents { agents, events: context.events.clone(), following };
    super::stream::serve(peer, writer, context, feed, live, after, once).await
}

/// EV-8: the sequence the catalog's view is consistent with, once every event up to it is
/// durable (published); None when that takes longer than [`CATALOG_EVENTS_WAIT`].
pub(super) async fn durable_through(context: &Context, through: u64) -> Option<u64> {
    let mut published = context.events.published.subscribe();
    let reached = tokio::time::timeout(CATALOG_EVENTS_WAIT, published.wait_for(|at| *at >= through)).await;
    matches!(reached, Ok(Ok(_))).then_some(through)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreOp, StoreWriter};

    fn stored_events(dir: &std::path::Path, count: u64) -> (Store, StoreWriter) {
        let path = dir.join("requests.sqlite");
        let writer = StoreWriter::spawn(&path).expect("writer");
        let ops = (1..=count)
            .map(|sequence| StoreOp::AppendEvent { sequence, agent_id: "a1".into(), kind: "turn.started".into(), at_ms: 1, event_json: format!(r#"{{"sequence":{sequence}}}"#) })
            .collect();
        writer.commit_blocking(ops).expect("append");
        (Store::open(&path).expect("store"), writer)
    }

    /// EV-14: what the event marks say of an id no live agent has: never reported (None: the
    /// stream refuses it), stopped a moment ago with the stop not durable (Some(false): the
    /// stream follows it to its stop; a review found a stream started in that window ended
    /// at once, before the stop), or stopped durably (Some(true)). Marks outlive retention.
    #[test]
    fn ev_14_the_event_mark_says_whether_a_stop_is_durable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, writer) = stored_events(dir.path(), 3);
        let mark = |agent: &str, stopped: bool| {
            let mut mark = wakterm_engine::EventMark::new(wakterm_engine::AgentId::parse(agent).unwrap());
            mark.stopped = stopped;
            StoreOp::PutEventMark { agent_id: agent.into(), mark_json: serde_json::to_string(&mark).unwrap() }
        };
        let (running, stopped) = ("0195f2a4-3b1c-7d2e-8f3a-4b5c6d7e8f91", "0195f2a4-3b1c-7d2e-8f3a-4b5c6d7e8f92");
        writer.commit_blocking(vec![mark(running, false), mark(stopped, true)]).expect("marks");
        writer.commit_blocking(vec![StoreOp::PruneEvents { through_sequence: 3, before_ms: 0, max_rows: 100, settled_through: u64::from(u32::MAX), excess_bytes: 0 }]).expect("prune");
        assert_eq!(store.agent_stop_reported(running).unwrap(), Some(false));
        assert_eq!(store.agent_stop_reported(stopped).unwrap(), Some(true));
        assert_eq!(store.agent_stop_reported("0195f2a4-3b1c-7d2e-8f3a-4b5c6d7e8f93").unwrap(), None);
    }

    /// EV-14: a filtered stream follows its live agents and those whose stop is not durable
    /// yet, not those stopped durably; no filter follows nothing to a stop.
    #[test]
    fn ev_14_a_stream_follows_live_agents_and_pending_stops() {
        let set = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<BTreeSet<String>>();
        let targets = Targets { ids: set(&["live", "stopping", "stopped"]), not_live: set(&["stopping", "stopped"]) };
        assert_eq!(followed(&targets, set(&["stopping"])), Some(set(&["live", "stopping"])));
        assert_eq!(followed(&targets, set(&[])), Some(set(&["live"])));
        assert_eq!(followed(&Targets::default(), set(&[])), None);
    }

    /// EV-14: a filtered stream is exhausted by the stop of the last agent it follows that was
    /// live at its start, not before, and not by anything else (another agent's stop, its own
    /// agent's other events, a stop it does not follow); an unfiltered one never; one that
    /// follows only stopped agents from the start.
    #[test]
    fn ev_14_a_filtered_stream_ends_at_its_last_agents_stop() {
        use super::super::stream::Feed;
        let feed = |following: Option<&[&str]>| AgentEvents {
            agents: Vec::new(),
            events: super::super::effects::EventFeed::new(0),
            following: following.map(|ids| ids.iter().map(|id| id.to_string()).collect()),
        };
        let event = |agent: &str, kind: &str| json!({"agent_id": agent, "kind": kind, "sequence": 1});
        let mut two = feed(Some(&["a1", "a2"]));
        assert!(!two.exhausted());
        for (agent, kind) in [("a1", "turn.final"), ("a3", "agent.stopped"), ("a1", "agent.stopped"), ("a1", "agent.stopped"), ("a2", "agent.exited")] {
            assert!(!two.exhausted_by(&event(agent, kind)), "{agent} {kind}");
        }
        assert!(two.exhausted_by(&event("a2", "agent.stopped")));
        assert!(two.exhausted());
        let mut all = feed(None);
        assert!(!all.exhausted_by(&event("a1", "agent.stopped")) && !all.exhausted());
        assert!(feed(Some(&[])).exhausted(), "only stopped agents from the start");
    }

    /// EV-9: every history page, not only the first, is checked against retention: a reader
    /// whose cursor retention passed while it was subscribed (a slow or lagged one) gets
    /// `cursor_too_old` with its metadata instead of a page that silently starts later.
    #[test]
    fn ev_9_every_page_is_checked_against_retention() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (store, writer) = stored_events(dir.path(), 10);
        let feed = AgentEvents { agents: Vec::new(), events: super::super::effects::EventFeed::new(10), following: None };
        let page = super::super::stream::checked_page(&feed, &store, 3, Some(10)).unwrap().expect("nothing pruned yet");
        assert_eq!(page.first().map(|e| e.0), Some(4));
        writer.commit_blocking(vec![StoreOp::PruneEvents { through_sequence: 5, before_ms: 0, max_rows: 100, settled_through: u64::from(u32::MAX), excess_bytes: 0 }]).expect("prune");
        let refused = super::super::stream::checked_page(&feed, &store, 3, Some(10)).unwrap().expect_err("4 and 5 are gone");
        assert_eq!(refused.body["error"], "cursor_too_old", "{:?}", refused.body);
        assert_eq!(refused.body["pruned_through"], 5);
        assert_eq!(refused.body["oldest_retained_sequence"], 6);
        let page = super::super::stream::checked_page(&feed, &store, 5, Some(10)).unwrap().expect("at the mark is fine");
        assert_eq!(page.iter().map(|e| e.0).collect::<Vec<_>>(), [6, 7, 8, 9, 10]);
    }
}
