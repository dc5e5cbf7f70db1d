//! A model of the durable request store (`wakterm_runtime::store`): the committed tables and
//! the same batch rules the SQLite store enforces. The simulator keeps only what a commit made
//! durable; a crash drops everything still queued. `contract.rs` runs one suite against this
//! model and against real SQLite so the model stays honest.

use std::collections::BTreeMap;
use wakterm_runtime::store::{
    StoreOp, StoredAgent, StoredAgentEvent, StoredRequest, StoredTerminalEvent, BATCH_OPS_MAX, FIELD_BYTES_MAX,
    RECORD_BYTES_MAX,
};

/// One row of `agent_events` (EV-1): the stored event and the columns retention reads.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EventRow {
    stored: StoredAgentEvent,
    kind: String,
    at_ms: u64,
}

/// The committed tables. A batch is atomic: it applies to a copy that replaces the tables
/// only when every op succeeded (as the SQLite writer's one SAVEPOINT per batch does).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreTables {
    agents: BTreeMap<String, StoredAgent>,
    requests: BTreeMap<String, StoredRequest>,
    /// Each stored request's place in the order the rows were stored (SQLite's row id, which
    /// every registration takes anew and later changes keep): ADM-5's registration order.
    inserted: BTreeMap<String, u64>,
    /// The next such place (row ids only grow past every stored one).
    next_insert: u64,
    terminal: BTreeMap<u64, StoredTerminalEvent>,
    /// OBS-1: the last observer checkpoint per agent.
    checkpoints: BTreeMap<String, String>,
    /// EV-1: the durable Agent API event stream, by sequence.
    events: BTreeMap<u64, EventRow>,
    /// EV-4: each agent's event mark (kept after the agent is deleted).
    event_marks: BTreeMap<String, String>,
    /// EV-9: the highest sequence retention removed (`meta.events_pruned_through`).
    events_pruned_through: u64,
    /// TIME-2: what the store keeps of the boot's daemon runs (`meta.run_clocks`).
    run_clocks: Option<String>,
    /// EV-9: what retention removed (not in the store: the oracle's memory of it, so an event
    /// published after its commit and pruned since still counts as having been durable).
    pruned_events: BTreeMap<u64, String>,
    /// HIST-4: the highest terminal sequence retention removed (`meta.terminal_pruned_through`).
    terminal_pruned_through: u64,
}

/// HIST-1: the phases after which a request never changes (`FINISHED_PHASES`).
pub(crate) fn is_finished_phase(phase: &str) -> bool {
    matches!(phase, "terminal" | "settled" | "released")
}

impl StoreTables {
    /// Commits one batch, or nothing with the reason.
    pub fn commit(&mut self, ops: &[StoreOp]) -> Result<(), String> {
        validate_batch(ops)?;
        let mut next = self.clone();
        for op in ops {
            next.apply(op)?;
        }
        *self = next;
        Ok(())
    }

    fn apply(&mut self, op: &StoreOp) -> Result<(), String> {
        match op {
            StoreOp::PutAgent { agent_id, name, record_json } => {
                json_valid(record_json)?;
                if let Some(owner) = self.agents.values().find(|a| &a.name == name && &a.agent_id != agent_id) {
                    return Err(format!("agent name '{name}' already belongs to agent {}", owner.agent_id));
                }
                let agent = StoredAgent { agent_id: agent_id.clone(), name: name.clone(), record_json: record_json.clone() };
                self.agents.insert(agent_id.clone(), agent);
            }
            StoreOp::DeleteAgent { agent_id } => {
                self.agents.remove(agent_id);
                self.checkpoints.remove(agent_id);
            }
            StoreOp::PutCheckpoint { agent_id, checkpoint_json } => {
                json_valid(checkpoint_json)?;
                self.checkpoints.insert(agent_id.clone(), checkpoint_json.clone());
            }
            // A `meta` value: SQLite checks no JSON there.
            StoreOp::PutRunClocks { json } => self.run_clocks = Some(json.clone()),
            StoreOp::PutRequest { request_id, agent_id, phase, fingerprint, record_json, updated_ms } => {
                json_valid(record_json)?;
                if *updated_ms > i64::MAX as u64 {
                    return Err(format!("updated_ms {updated_ms} exceeds {}", i64::MAX));
                }
                if let Some(stored) = self.requests.get(request_id) {
                    if &stored.agent_id != agent_id || &stored.fingerprint != fingerprint {
                        return Err(format!("request {request_id}: its agent and fingerprint cannot change"));
                    }
                    // HIST-1, as `op::put_request`: a settled or terminal row keeps its phase.
                    let finished_forever = wakterm_runtime::store::FINISHED_FOREVER.iter().any(|p| p.as_str() == stored.phase);
                    if finished_forever && &stored.phase != phase {
                        return Err(format!("request {request_id} is stored finished ({}); it cannot move to {phase}", stored.phase));
                    }
                }
                // As `op::put_request`: a registration over a released or registered row of
                // the same agent and input stores it anew (its place moves to the end); the
                // terminal events' foreign key refuses to drop a row one of them names.
                let stored_anew = self.requests.get(request_id).is_some_and(|stored| matches!(stored.phase.as_str(), "released" | "registered") && phase == "registered");
                if stored_anew && self.terminal.values().any(|e| &e.request_id == request_id) {
                    return Err(format!("request {request_id}: FOREIGN KEY constraint failed (a terminal event names it)"));
                }
                if stored_anew || !self.requests.contains_key(request_id) {
                    self.inserted.insert(request_id.clone(), self.next_insert);
                    self.next_insert += 1;
                }
                let stored = self.requests.entry(request_id.clone()).or_insert_with(|| StoredRequest {
                    request_id: request_id.clone(),
                    agent_id: agent_id.clone(),
                    phase: String::new(),
                    fingerprint: fingerprint.clone(),
                    record_json: String::new(),
                    updated_ms: 0,
                });
                stored.phase = phase.clone();
                stored.record_json = record_json.clone();
                stored.updated_ms = *updated_ms;
            }
            StoreOp::AppendEvent { sequence, agent_id, kind, at_ms, event_json } => {
                json_valid(event_json)?;
                // EV-1: a sequence is used once, ever, and never at or below what was pruned.
                if *sequence <= self.events_pruned_through {
                    return Err(format!("event sequence {sequence} is at or below the pruned sequence {}", self.events_pruned_through));
                }
                if self.events.contains_key(sequence) {
                    return Err(format!("event sequence {sequence} is already used"));
                }
                let stored = StoredAgentEvent { sequence: *sequence, agent_id: agent_id.clone(), event_json: event_json.clone() };
                self.events.insert(*sequence, EventRow { stored, kind: kind.clone(), at_ms: *at_ms });
            }
            StoreOp::PutEventMark { agent_id, mark_json } => {
                json_valid(mark_json)?;
                self.event_marks.insert(agent_id.clone(), mark_json.clone());
            }
            StoreOp::PruneEvents { through_sequence, before_ms, max_rows, settled_through, excess_bytes } => {
                // EV-9: the oldest prefix, at most `max_rows`, each due by sequence, age or size
                // (the store's test, `EventDue::prunes`), none past the settled mark.
                let due = wakterm_runtime::store::retention::EventDue { through_sequence: *through_sequence, before_ms: *before_ms, settled_through: *settled_through, excess_bytes: *excess_bytes };
                let (mut last, mut removed) = (None, 0u64);
                for (sequence, row) in self.events.iter().take(usize::try_from(*max_rows).unwrap_or(usize::MAX)) {
                    if !due.prunes(*sequence, row.at_ms, removed) {
                        break;
                    }
                    last = Some(*sequence);
                    removed += row.stored.event_json.len() as u64;
                }
                if let Some(last) = last {
                    let kept = self.events.split_off(&(last + 1));
                    let pruned = std::mem::replace(&mut self.events, kept);
                    self.pruned_events.extend(pruned.into_iter().map(|(sequence, row)| (sequence, row.stored.event_json)));
                    self.events_pruned_through = self.events_pruned_through.max(last);
                }
            }
            StoreOp::PruneRequests { before_ms, max_rows } => {
                // HIST-4: the oldest finished requests, with their terminal events. (SQLite
                // orders equal `updated_ms` by row; the model by id: the contract never
                // relies on the order of ties.)
                let mut finished: Vec<(u64, String)> = self
                    .requests
                    .values()
                    .filter(|r| is_finished_phase(&r.phase) && r.updated_ms < *before_ms)
                    .map(|r| (r.updated_ms, r.request_id.clone()))
                    .collect();
                finished.sort();
                for (_, request_id) in finished.into_iter().take(usize::try_from(*max_rows).unwrap_or(usize::MAX)) {
                    if let Some(sequence) = self.terminal_for(&request_id).map(|e| e.sequence) {
                        self.terminal_pruned_through = self.terminal_pruned_through.max(sequence);
                        self.terminal.remove(&sequence);
                    }
                    self.requests.remove(&request_id);
                    self.inserted.remove(&request_id);
                }
            }
            StoreOp::AppendTerminal { sequence, request_id, event_json } => {
                json_valid(event_json)?;
                let last = self.last_terminal_sequence();
                if *sequence <= last {
                    return Err(format!("terminal sequence {sequence} is not greater than the last stored sequence {last}"));
                }
                if self.terminal.values().any(|e| &e.request_id == request_id) {
                    return Err(format!("request {request_id} already ended"));
                }
                if !self.requests.contains_key(request_id) {
                    return Err(format!("terminal event for unknown request {request_id}"));
                }
                let event = StoredTerminalEvent { sequence: *sequence, request_id: request_id.clone(), event_json: event_json.clone() };
                self.terminal.insert(*sequence, event);
            }
        }
        Ok(())
    }

    /// Every request, ordered by id (as `Store::load_requests`).
    pub fn requests(&self) -> Vec<StoredRequest> {
        self.requests.values().cloned().collect()
    }

    /// HIST-1: the requests not finished, ordered by id (as `Store::load_open_requests`).
    pub fn open_requests(&self) -> Vec<StoredRequest> {
        self.requests.values().filter(|r| !is_finished_phase(&r.phase)).cloned().collect()
    }

    /// ADM-5: of the finished requests updated at or after `since_ms`, each agent's latest
    /// written ones (each record holds `written_past`; those stored last), at most
    /// `MAX_RECENT_WRITES_LOADED`, ordered by agent id, then oldest first (as
    /// `Store::load_latest_written_since`).
    pub fn latest_written_since(&self, since_ms: u64) -> Vec<StoredRequest> {
        // Whether the record holds a written floor (`written_past`), or a write nobody knows of
        // (`write_unknown`: a registration a restart ended).
        let written = |r: &StoredRequest| {
            serde_json::from_str::<serde_json::Value>(&r.record_json).is_ok_and(|record| !record["written_past"].is_null() || record["write_unknown"] == true)
        };
        let mut latest: BTreeMap<String, Vec<(u64, &StoredRequest)>> = BTreeMap::new();
        for request in self.requests.values().filter(|r| is_finished_phase(&r.phase) && r.updated_ms >= since_ms && written(r)) {
            latest.entry(request.agent_id.clone()).or_default().push((self.inserted[&request.request_id], request));
        }
        let most = wakterm_engine::limits::MAX_RECENT_WRITES_LOADED;
        let recent = |mut writes: Vec<(u64, &StoredRequest)>| {
            writes.sort_by_key(|(order, _)| *order);
            let skip = writes.len().saturating_sub(most);
            writes.into_iter().skip(skip).map(|(_, request)| request.clone()).collect::<Vec<_>>()
        };
        latest.into_values().flat_map(recent).collect()
    }

    pub fn request(&self, request_id: &str) -> Option<&StoredRequest> {
        self.requests.get(request_id)
    }

    /// TIME-2: as `Store::load_run_clocks`.
    pub fn run_clocks(&self) -> Option<String> {
        self.run_clocks.clone()
    }

    /// Every agent, ordered by id (as `Store::load_agents`).
    pub fn agents(&self) -> Vec<StoredAgent> {
        self.agents.values().cloned().collect()
    }

    /// Terminal events after `after`, ascending (as `Store::terminal_events_after`).
    pub fn terminal_after(&self, after: u64) -> Vec<StoredTerminalEvent> {
        self.terminal.range(after.saturating_add(1)..).map(|(_, e)| e.clone()).collect()
    }

    pub fn terminal_for(&self, request_id: &str) -> Option<&StoredTerminalEvent> {
        self.terminal.values().find(|e| e.request_id == request_id)
    }

    /// OBS-1: every agent's last observer checkpoint, ordered by agent id (as
    /// `Store::load_checkpoints`).
    pub fn checkpoints(&self) -> Vec<(String, String)> {
        self.checkpoints.iter().map(|(agent, json)| (agent.clone(), json.clone())).collect()
    }

    /// TERM-3: the greatest terminal sequence ever stored, retention's removals included
    /// (as `Store::last_terminal_sequence`).
    pub fn last_terminal_sequence(&self) -> u64 {
        self.terminal.keys().next_back().copied().unwrap_or(0).max(self.terminal_pruned_through)
    }

    /// HIST-4: the highest terminal sequence retention removed (as
    /// `Store::terminal_pruned_through`).
    pub fn terminal_pruned_through(&self) -> u64 {
        self.terminal_pruned_through
    }

    /// EV-1: agent events after `after`, ascending (as `Store::agent_events_after` with no
    /// upper bound and no agent filter).
    pub fn agent_events_after(&self, after: u64) -> Vec<StoredAgentEvent> {
        self.events.range(after.saturating_add(1)..).map(|(_, row)| row.stored.clone()).collect()
    }

    /// The stored events of one kind, ascending.
    pub fn agent_events_of_kind(&self, kind: &str) -> Vec<StoredAgentEvent> {
        self.events.values().filter(|row| row.kind == kind).map(|row| row.stored.clone()).collect()
    }

    /// EV-9: the JSON of an event retention removed (the oracle's memory, not the store's).
    pub fn pruned_event(&self, sequence: u64) -> Option<&str> {
        self.pruned_events.get(&sequence).map(String::as_str)
    }

    /// EV-9: the JSON of the events retention removed after `after`, in sequence order.
    pub fn pruned_events_after(&self, after: u64) -> impl Iterator<Item = &str> {
        self.pruned_events.range(after + 1..).map(|(_, json)| json.as_str())
    }

    /// The stored event with this sequence.
    pub fn agent_event(&self, sequence: u64) -> Option<&StoredAgentEvent> {
        self.events.get(&sequence).map(|row| &row.stored)
    }

    /// EV-1: the greatest event sequence ever stored, pruned ones included (as
    /// `Store::last_event_sequence`).
    pub fn last_event_sequence(&self) -> u64 {
        self.events.keys().next_back().copied().unwrap_or(0).max(self.events_pruned_through)
    }

    /// EV-9: the oldest stored event's sequence and time (as `Store::oldest_event`).
    pub fn oldest_event(&self) -> Option<(u64, u64)> {
        self.events.iter().next().map(|(sequence, row)| (*sequence, row.at_ms))
    }

    /// EV-9: the highest sequence retention removed (as `Store::events_pruned_through`).
    /// EV-9: the bytes of the stored events at or below `settled_through` (what retention may
    /// prune), and the largest stored event's.
    pub fn settled_event_bytes(&self, settled_through: u64) -> (u64, u64) {
        let sizes = self.events.range(..=settled_through).map(|(_, row)| row.stored.event_json.len() as u64);
        sizes.fold((0, 0), |(sum, largest), bytes| (sum + bytes, largest.max(bytes)))
    }

    pub fn events_pruned_through(&self) -> u64 {
        self.events_pruned_through
    }

    /// EV-4: every agent's event mark (agent id, JSON), ordered by agent id (as
    /// `Store::load_event_marks`).
    pub fn event_marks(&self) -> Vec<(String, String)> {
        self.event_marks.iter().map(|(agent, json)| (agent.clone(), json.clone())).collect()
    }
}

fn json_valid(text: &str) -> Result<(), String> {
    serde_json::from_str::<serde_json::Value>(text).map(drop).map_err(|e| format!("CHECK json_valid failed: {e}"))
}

/// The same refusals as the store's `validate_batch`, before any op applies.
fn validate_batch(ops: &[StoreOp]) -> Result<(), String> {
    if ops.len() > BATCH_OPS_MAX {
        return Err(format!("batch has {} operations, the limit is {BATCH_OPS_MAX}", ops.len()));
    }
    for op in ops {
        match op {
            StoreOp::PutAgent { agent_id, name, record_json } => {
                field(agent_id)?;
                field(name)?;
                record(record_json)?;
            }
            StoreOp::DeleteAgent { agent_id } => field(agent_id)?,
            StoreOp::PutCheckpoint { agent_id, checkpoint_json } => {
                field(agent_id)?;
                record(checkpoint_json)?;
            }
            StoreOp::PutRunClocks { json } => record(json)?,
            StoreOp::PutRequest { request_id, agent_id, phase, fingerprint, record_json, updated_ms } => {
                field(request_id)?;
                field(agent_id)?;
                field(phase)?;
                field(fingerprint)?;
                record(record_json)?;
                if *updated_ms > i64::MAX as u64 {
                    return Err("updated_ms too large".to_string());
                }
            }
            StoreOp::AppendEvent { sequence, agent_id, kind, at_ms, event_json } => {
                if *sequence == 0 || *sequence > i64::MAX as u64 {
                    return Err(format!("event sequence {sequence} is out of range"));
                }
                if *at_ms > i64::MAX as u64 {
                    return Err("at_ms too large".to_string());
                }
                field(agent_id)?;
                field(kind)?;
                record(event_json)?;
            }
            StoreOp::PutEventMark { agent_id, mark_json } => {
                field(agent_id)?;
                record(mark_json)?;
            }
            StoreOp::PruneEvents { through_sequence, before_ms, max_rows, settled_through, excess_bytes } => {
                if [*through_sequence, *before_ms, *max_rows, *settled_through, *excess_bytes].iter().any(|v| *v > i64::MAX as u64) {
                    return Err("a prune bound exceeds i64::MAX".to_string());
                }
            }
            StoreOp::PruneRequests { before_ms, max_rows } => {
                if [*before_ms, *max_rows].iter().any(|v| *v > i64::MAX as u64) {
                    return Err("a prune bound exceeds i64::MAX".to_string());
                }
            }
            StoreOp::AppendTerminal { sequence, request_id, event_json } => {
                if *sequence == 0 || *sequence > i64::MAX as u64 {
                    return Err(format!("terminal sequence {sequence} is out of range"));
                }
                field(request_id)?;
                record(event_json)?;
            }
        }
    }
    Ok(())
}

fn field(value: &str) -> Result<(), String> {
    if value.is_empty() || value.len() > FIELD_BYTES_MAX {
        return Err(format!("a field must be 1..={FIELD_BYTES_MAX} bytes, got {}", value.len()));
    }
    Ok(())
}

fn record(json: &str) -> Result<(), String> {
    if json.len() > RECORD_BYTES_MAX {
        return Err(format!("a record is {} bytes, the limit is {RECORD_BYTES_MAX}", json.len()));
    }
    Ok(())
}

/// EV-9: the production retention rule (`Retention::due`) reads the model as it reads the store.
impl wakterm_runtime::store::retention::RetentionView for StoreTables {
    fn oldest_event(&self) -> Result<Option<(u64, u64)>, wakterm_runtime::store::StoreError> {
        Ok(StoreTables::oldest_event(self))
    }
    fn last_event_sequence(&self) -> Result<u64, wakterm_runtime::store::StoreError> {
        Ok(StoreTables::last_event_sequence(self))
    }
    fn oldest_finished_request_ms(&self) -> Result<Option<u64>, wakterm_runtime::store::StoreError> {
        Ok(self.requests.values().filter(|r| is_finished_phase(&r.phase)).map(|r| r.updated_ms).min())
    }
    fn stored_event_bytes(&self) -> Result<u64, wakterm_runtime::store::StoreError> {
        Ok(self.settled_event_bytes(u64::MAX).0)
    }
}
