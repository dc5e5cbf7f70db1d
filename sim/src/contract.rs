//! One contract suite for the durable store, run against the simulator's model
//! (`StoreTables`) and against the real SQLite store (`tests/store_contract.rs`). It pins what
//! the simulator relies on: atomic batches, immutable request identity, strictly growing
//! terminal sequences, one terminal event per request, agent event sequences used once and
//! never at or below the pruned one (EV-1, EV-9), one event mark per agent (EV-4), and that a
//! reopen (crash) keeps exactly what was committed.

use crate::store_model::StoreTables;
use wakterm_runtime::store::{StoreOp, StoredAgent, StoredAgentEvent, StoredRequest, StoredTerminalEvent};

/// The store surface the simulator uses.
pub trait ContractStore {
    fn commit(&mut self, ops: Vec<StoreOp>) -> Result<(), String>;
    fn requests(&mut self) -> Vec<StoredRequest>;
    /// HIST-1: the open requests (registered, submitted, bound), ordered by id: what a restart
    /// recovers (SQLite's store keeps their ids in `open_requests`, migration 5).
    fn open_requests(&mut self) -> Vec<StoredRequest>;
    /// ADM-5: of the finished requests updated at or after `since_ms`, each agent's latest
    /// written one, ordered by agent id: what a restart reopens the wait for a written
    /// prompt's turn with.
    fn latest_written_since(&mut self, since_ms: u64) -> Vec<StoredRequest>;
    fn agents(&mut self) -> Vec<StoredAgent>;
    fn terminal_after(&mut self, after: u64) -> Vec<StoredTerminalEvent>;
    fn last_terminal_sequence(&mut self) -> u64;
    /// OBS-1: the stored observer checkpoints (agent id, JSON), ordered by agent id.
    fn checkpoints(&mut self) -> Vec<(String, String)>;
    /// EV-1: every stored agent event after `after`, ascending.
    fn agent_events_after(&mut self, after: u64) -> Vec<StoredAgentEvent>;
    /// EV-1: the greatest event sequence ever stored, pruned ones included.
    fn last_event_sequence(&mut self) -> u64;
    /// EV-4: every agent's event mark (agent id, JSON), ordered by agent id.
    fn event_marks(&mut self) -> Vec<(String, String)>;
    /// EV-9: the bytes of event JSON stored.
    fn stored_event_bytes(&mut self) -> u64;
    /// TIME-2: what the store keeps of the boot's daemon runs (JSON), if any.
    fn run_clocks(&mut self) -> Option<String>;
    /// Simulates a crash and a restart: only committed batches survive.
    fn reopen(&mut self);
}

/// The model, as a contract store.
#[derive(Default)]
pub struct ModelStore {
    pub tables: StoreTables,
}

impl ContractStore for ModelStore {
    fn commit(&mut self, ops: Vec<StoreOp>) -> Result<(), String> {
        self.tables.commit(&ops)
    }
    fn requests(&mut self) -> Vec<StoredRequest> {
        self.tables.requests()
    }
    fn open_requests(&mut self) -> Vec<StoredRequest> {
        self.tables.open_requests()
    }
    fn latest_written_since(&mut self, since_ms: u64) -> Vec<StoredRequest> {
        self.tables.latest_written_since(since_ms)
    }
    fn agents(&mut self) -> Vec<StoredAgent> {
        self.tables.agents()
    }
    fn terminal_after(&mut self, after: u64) -> Vec<StoredTerminalEvent> {
        self.tables.terminal_after(after)
    }
    fn last_terminal_sequence(&mut self) -> u64 {
        self.tables.last_terminal_sequence()
    }
    fn checkpoints(&mut self) -> Vec<(String, String)> {
        self.tables.checkpoints()
    }
    fn agent_events_after(&mut self, after: u64) -> Vec<StoredAgentEvent> {
        self.tables.agent_events_after(after)
    }
    fn last_event_sequence(&mut self) -> u64 {
        self.tables.last_event_sequence()
    }
    fn event_marks(&mut self) -> Vec<(String, String)> {
        self.tables.event_marks()
    }
    fn stored_event_bytes(&mut self) -> u64 {
        wakterm_runtime::store::retention::RetentionView::stored_event_bytes(&self.tables).expect("the model answers")
    }
    fn run_clocks(&mut self) -> Option<String> {
        self.tables.run_clocks()
    }
    fn reopen(&mut self) {}
}

pub fn put(request: &str, agent: &str, fingerprint: &str, phase: &str) -> StoreOp {
    StoreOp::PutRequest {
        request_id: request.to_string(),
        agent_id: agent.to_string(),
        phase: phase.to_string(),
        fingerprint: fingerprint.to_string(),
        record_json: format!("{{\"phase\":\"{phase}\"}}"),
        updated_ms: 7,
    }
}

pub fn put_at(request: &str, agent: &str, fingerprint: &str, phase: &str, updated_ms: u64) -> StoreOp {
    match put(request, agent, fingerprint, phase) {
        StoreOp::PutRequest { request_id, agent_id, phase, fingerprint, record_json, .. } => {
            StoreOp::PutRequest { request_id, agent_id, phase, fingerprint, record_json, updated_ms }
        }
        _ => unreachable!(),
    }
}

/// A request whose record says when it was registered and, if `written`, where the view stood
/// at its write (the two fields `latest_written_since` reads).
pub fn put_written(request: &str, agent: &str, phase: &str, updated_ms: u64, registered_ms: u64, written: bool) -> StoreOp {
    let past = if written { r#","written_past":{"session":"s","position":1}"# } else { "" };
    let record_json = format!(r#"{{"phase":"{phase}","registered_ms":{registered_ms}{past}}}"#);
    StoreOp::PutRequest { request_id: request.to_string(), agent_id: agent.to_string(), phase: phase.to_string(), fingerprint: "f".to_string(), record_json, updated_ms }
}

/// A request a restart found as an unfinished registration and ended: its record says its
/// write may have happened (`write_unknown`), with no floor at a write.
pub fn put_write_unknown(request: &str, agent: &str, phase: &str, updated_ms: u64, registered_ms: u64) -> StoreOp {
    let record_json = format!(r#"{{"phase":"{phase}","registered_ms":{registered_ms},"write_unknown":true}}"#);
    StoreOp::PutRequest { request_id: request.to_string(), agent_id: agent.to_string(), phase: phase.to_string(), fingerprint: "f".to_string(), record_json, updated_ms }
}

pub fn terminal(sequence: u64, request: &str) -> StoreOp {
    StoreOp::AppendTerminal { sequence, request_id: request.to_string(), event_json: format!("{{\"seq\":{sequence}}}") }
}

pub fn checkpoint(agent_id: &str, json: &str) -> StoreOp {
    StoreOp::PutCheckpoint { agent_id: agent_id.to_string(), checkpoint_json: json.to_string() }
}

pub fn event(sequence: u64, agent_id: &str, at_ms: u64) -> StoreOp {
    StoreOp::AppendEvent {
        sequence,
        agent_id: agent_id.to_string(),
        kind: "turn.started".to_string(),
        at_ms,
        event_json: format!("{{\"sequence\":{sequence}}}"),
    }
}

pub fn mark(agent_id: &str, json: &str) -> StoreOp {
    StoreOp::PutEventMark { agent_id: agent_id.to_string(), mark_json: json.to_string() }
}

/// A prune with no settled mark in the way.
pub fn prune(through_sequence: u64, before_ms: u64, max_rows: u64) -> StoreOp {
    prune_settled(through_sequence, before_ms, max_rows, i64::MAX as u64)
}

pub fn prune_settled(through_sequence: u64, before_ms: u64, max_rows: u64, settled_through: u64) -> StoreOp {
    StoreOp::PruneEvents { through_sequence, before_ms, max_rows, settled_through, excess_bytes: 0 }
}

/// EV-9: a prune by size alone (the oldest go while less than `excess_bytes` went).
pub fn prune_bytes(excess_bytes: u64, settled_through: u64) -> StoreOp {
    StoreOp::PruneEvents { through_sequence: 0, before_ms: 0, max_rows: 100, settled_through, excess_bytes }
}

fn sequences(events: &[StoredAgentEvent]) -> Vec<u64> {
    events.iter().map(|e| e.sequence).collect()
}

pub fn agent(agent_id: &str, name: &str) -> StoreOp {
    StoreOp::PutAgent { agent_id: agent_id.to_string(), name: name.to_string(), record_json: "{}".to_string() }
}

/// The scenario suite: each step states the rule it pins.
pub fn run_contract_suite(store: &mut dyn ContractStore) {
    // A request round-trips; a later put updates phase and record but not identity.
    assert!(store.commit(vec![put("r1", "a1", "f1", "registered")]).is_ok());
    assert!(store.commit(vec![put("r1", "a1", "f1", "submitted")]).is_ok());
    let requests = store.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].phase, "submitted");
    // IDEM: a request's agent and fingerprint never change.
    assert!(store.commit(vec![put("r1", "a1", "f2", "submitted")]).is_err());
    assert!(store.commit(vec![put("r1", "a2", "f1", "submitted")]).is_err());
    // A batch is atomic: a failing op undoes the ops before it.
    assert!(store.commit(vec![put("r2", "a1", "f1", "registered"), put("r1", "a9", "f1", "x")]).is_err());
    assert!(store.requests().iter().all(|r| r.request_id != "r2"), "a failed batch leaves nothing behind");
    // TERM-2: a terminal event with its record in one batch; sequences strictly grow.
    assert!(store.commit(vec![put("r1", "a1", "f1", "terminal"), terminal(3, "r1")]).is_ok());
    assert_eq!(store.last_terminal_sequence(), 3);
    assert!(store.commit(vec![put("r3", "a1", "f3", "registered")]).is_ok());
    assert!(store.commit(vec![terminal(3, "r3")]).is_err(), "a repeated sequence is refused");
    assert!(store.commit(vec![terminal(2, "r3")]).is_err(), "a smaller sequence is refused");
    // RF-5: one terminal event per request.
    assert!(store.commit(vec![terminal(9, "r1")]).is_err());
    // A terminal event needs its request.
    assert!(store.commit(vec![terminal(10, "nobody")]).is_err());
    assert!(store.commit(vec![terminal(0, "r3")]).is_err(), "sequence 0 means none");
    assert!(store.commit(vec![terminal(5, "r3")]).is_ok());
    let after = store.terminal_after(3);
    assert_eq!(after.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![5]);
    assert_eq!(store.terminal_after(0).len(), 2);
    // Bad fields are refused before anything applies.
    assert!(store.commit(vec![put("", "a1", "f", "registered")]).is_err());
    assert!(store.commit(vec![StoreOp::PutRequest {
        request_id: "r4".into(),
        agent_id: "a1".into(),
        phase: "registered".into(),
        fingerprint: "f4".into(),
        record_json: "not json".into(),
        updated_ms: 1,
    }])
    .is_err());
    // Agents: a name belongs to one agent; deleting is idempotent.
    assert!(store.commit(vec![agent("a1", "zola")]).is_ok());
    assert!(store.commit(vec![agent("a2", "zola")]).is_err());
    assert!(store.commit(vec![StoreOp::DeleteAgent { agent_id: "a9".into() }]).is_ok());
    assert_eq!(store.agents().len(), 1);
    // OBS-1: one checkpoint per agent, replaced by the next; JSON only; deleted with its agent.
    assert!(store.commit(vec![checkpoint("a1", "{\"offset\":1}")]).is_ok());
    assert!(store.commit(vec![checkpoint("a1", "{\"offset\":2}"), checkpoint("a2", "{\"offset\":9}")]).is_ok());
    assert!(store.commit(vec![checkpoint("a2", "not json")]).is_err());
    assert!(store.commit(vec![checkpoint("", "{}")]).is_err());
    assert_eq!(store.checkpoints(), vec![("a1".to_string(), "{\"offset\":2}".to_string()), ("a2".to_string(), "{\"offset\":9}".to_string())]);
    assert!(store.commit(vec![StoreOp::DeleteAgent { agent_id: "a2".into() }]).is_ok());
    assert_eq!(store.checkpoints().len(), 1, "a deleted agent's checkpoint goes with it");
    // EV-1: an agent event sequence is used once; gaps are fine (a failed batch skips its
    // numbers), and the store refuses only reuse, not a smaller unused number.
    assert_eq!(store.last_event_sequence(), 0);
    assert!(store.commit(vec![event(1, "a1", 1_000), event(2, "a1", 1_000), mark("a1", "{\"position\":2}")]).is_ok());
    assert!(store.commit(vec![event(2, "a1", 1_000)]).is_err(), "a used sequence is refused");
    assert!(store.commit(vec![event(0, "a1", 1_000)]).is_err(), "sequence 0 means none");
    assert!(store.commit(vec![event(5, "a2", 5_000), event(3, "a1", 3_000)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![1, 2, 3, 5]);
    assert_eq!(sequences(&store.agent_events_after(2)), vec![3, 5]);
    assert_eq!(store.last_event_sequence(), 5);
    // A batch is atomic: a reused sequence undoes the event and the mark before it.
    assert!(store.commit(vec![event(4, "a1", 4_000), mark("a1", "{\"position\":4}"), event(5, "a1", 4_000)]).is_err());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![1, 2, 3, 5]);
    assert!(store.commit(vec![StoreOp::AppendEvent {
        sequence: 9,
        agent_id: "a1".into(),
        kind: "turn.started".into(),
        at_ms: 1,
        event_json: "not json".into(),
    }])
    .is_err());
    // EV-4: one mark per agent, replaced by the next; JSON only; kept after the agent.
    assert!(store.commit(vec![mark("a1", "{\"position\":3}"), mark("a2", "{\"position\":5}")]).is_ok());
    assert!(store.commit(vec![mark("a2", "not json")]).is_err());
    assert!(store.commit(vec![mark("", "{}")]).is_err());
    assert!(store.commit(vec![StoreOp::DeleteAgent { agent_id: "a1".into() }]).is_ok());
    assert_eq!(store.event_marks(), vec![("a1".to_string(), "{\"position\":3}".to_string()), ("a2".to_string(), "{\"position\":5}".to_string())]);
    assert!(store.commit(vec![agent("a1", "zola")]).is_ok());
    // EV-9: retention removes a prefix (by sequence or age, stopping at the first row that is
    // neither); a number at or below the highest pruned is never used again, and the last
    // sequence counts pruned ones.
    assert!(store.commit(vec![prune(0, 2_000, 100)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![3, 5], "1 and 2 are older than 2000 ms");
    assert!(store.commit(vec![prune(3, 0, 0)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![3, 5], "max_rows 0 removes nothing");
    assert!(store.commit(vec![event(2, "a1", 9_000)]).is_err(), "a pruned number is never used again");
    assert!(store.commit(vec![event(4, "a1", 9_000)]).is_ok(), "an unused number above the pruned one is");
    // EV-3: never past the settled mark, by sequence or by age: a number still pending
    // behind it must stay above what was pruned.
    assert!(store.commit(vec![prune_settled(100, 10_000, 100, 3)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![4, 5], "3 goes; 4 and 5 lie past the settled mark");
    assert!(store.commit(vec![prune(100, 0, 1)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![5], "at most max_rows rows go");
    assert!(store.commit(vec![prune(100, 0, 100)]).is_ok());
    assert!(store.agent_events_after(0).is_empty());
    assert_eq!(store.last_event_sequence(), 5, "pruned sequences still count");
    assert!(store.commit(vec![event(5, "a1", 9_000)]).is_err());
    assert!(store.commit(vec![event(7, "a1", 9_000)]).is_ok());
    // EV-9 by size: the oldest go while less than the excess went (each `{"sequence":N}` is
    // 14 bytes), never past the settled mark; the stored bytes follow.
    assert!(store.commit(vec![event(8, "a1", 9_000), event(9, "a1", 9_000)]).is_ok());
    assert_eq!(store.stored_event_bytes(), 42);
    assert!(store.commit(vec![event(9, "a1", 9_000)]).is_err());
    assert_eq!(store.stored_event_bytes(), 42, "a failed batch counts nothing");
    assert!(store.commit(vec![prune_bytes(15, i64::MAX as u64)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![9], "7 (14 bytes < 15) and 8 go");
    assert_eq!(store.stored_event_bytes(), 14);
    assert!(store.commit(vec![prune_bytes(100, 8)]).is_ok());
    assert_eq!(sequences(&store.agent_events_after(0)), vec![9], "9 lies past the settled mark");
    // HIST-4: retention forgets finished requests (terminal, settled, released) last updated
    // before the bound, with their terminal events; open ones stay; a removed terminal
    // sequence still counts, so it is never handed out again.
    assert!(store.commit(vec![put_at("r5", "a1", "f5", "terminal", 20), terminal(9, "r5"), put_at("r6", "a1", "f6", "settled", 30)]).is_ok());
    assert!(store.commit(vec![put_at("r7", "a1", "f7", "submitted", 1)]).is_ok());
    assert!(store.commit(vec![StoreOp::PruneRequests { before_ms: 25, max_rows: 100 }]).is_ok());
    let ids: Vec<String> = store.requests().into_iter().map(|r| r.request_id).collect();
    assert_eq!(ids, vec!["r3", "r6", "r7"], "r1 (updated at 7) and r5 (20) are finished and older than 25");
    assert_eq!(store.terminal_after(0).iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![5]);
    assert_eq!(store.last_terminal_sequence(), 9, "a pruned terminal sequence still counts");
    assert!(store.commit(vec![put("r8", "a1", "f8", "terminal"), terminal(8, "r8")]).is_err());
    assert!(store.commit(vec![StoreOp::PruneRequests { before_ms: 100, max_rows: 0 }]).is_ok());
    assert_eq!(store.requests().len(), 3, "max_rows 0 removes nothing");
    assert!(store.commit(vec![put("r8", "a1", "f8", "terminal"), terminal(10, "r8")]).is_ok());
    // REC: a crash keeps exactly what was committed.
    let before = (store.requests(), store.terminal_after(0), store.agents(), store.checkpoints());
    let events_before = (store.agent_events_after(0), store.event_marks(), store.last_event_sequence());
    store.reopen();
    assert_eq!((store.requests(), store.terminal_after(0), store.agents(), store.checkpoints()), before);
    assert_eq!((store.agent_events_after(0), store.event_marks(), store.last_event_sequence()), events_before);
    assert_eq!(store.last_terminal_sequence(), 10);
    assert!(store.commit(vec![event(4, "a1", 9_000)]).is_err(), "the pruned mark survives a reopen");
    // ADM-5: of the finished requests updated since a time, each agent's latest written ones:
    // the last, the one whose row was stored first last (registration inserts it), not the one updated
    // last (b1: s2 was registered after s3 and finished before it), nor the one whose record
    // says it was registered last (s3's `registered_ms`: a wall clock stepped back between two
    // daemons); equal registrations likewise (b2); one never written (released, s5) or open
    // (s7) or updated before the time is not it.
    let registered = vec![put_written("s1", "b1", "settled", 100, 10, true), put_written("s3", "b1", "submitted", 110, 40, true)];
    assert!(store.commit(registered).is_ok());
    let finished = vec![
        put_written("s2", "b1", "settled", 300, 30, true),
        put_written("s3", "b1", "terminal", 400, 40, true),
        put_written("s4", "b2", "settled", 200, 10, true),
        put_written("s4b", "b2", "terminal", 150, 10, true),
        put_written("s5", "b2", "released", 250, 40, false),
        put_written("s6", "b3", "settled", 50, 5, true),
        put_written("s7", "b3", "submitted", 500, 50, true),
    ];
    assert!(store.commit(finished).is_ok());
    let latest = |store: &mut dyn ContractStore, since| store.latest_written_since(since).into_iter().map(|r| r.request_id).collect::<Vec<_>>();
    // A released id registered again (IDEM-6) is a new registration, later than one made
    // between its two (b4: x1 released, y1 written, x1 registered again and written).
    let x1 = |phase: &str, updated_ms: u64, written: bool| put_written("x1", "b4", phase, updated_ms, 1, written);
    assert!(store.commit(vec![x1("registered", 1, false)]).is_ok());
    assert!(store.commit(vec![x1("released", 2, false), put_written("y1", "b4", "settled", 3, 2, true)]).is_ok());
    assert!(store.commit(vec![x1("registered", 4, false)]).is_ok());
    assert!(store.commit(vec![x1("settled", 5, true)]).is_ok());
    assert_eq!(latest(store, 0).last().map(String::as_str), Some("x1"));
    // Also an id whose release never reached the store (still `registered`): b5's x2.
    let x2 = |phase: &str, updated_ms: u64, written: bool| put_written("x2", "b5", phase, updated_ms, 1, written);
    assert!(store.commit(vec![x2("registered", 1, false), put_written("y2", "b5", "settled", 3, 2, true)]).is_ok());
    assert!(store.commit(vec![x2("registered", 4, false)]).is_ok());
    assert!(store.commit(vec![x2("settled", 5, true)]).is_ok());
    assert_eq!(latest(store, 0).last().map(String::as_str), Some("x2"));
    // A registration over another agent's row is refused and moves nothing; one over a row a
    // terminal event names is refused too (its foreign key).
    assert!(store.commit(vec![put_written("x2", "b6", "registered", 6, 1, false)]).is_err());
    assert_eq!(latest(store, 0).last().map(String::as_str), Some("x2"));
    let next = store.last_terminal_sequence() + 1;
    assert!(store.commit(vec![put_written("x3", "b6", "released", 6, 1, false), terminal(next, "x3")]).is_ok());
    assert!(store.commit(vec![put_written("x3", "b6", "registered", 7, 1, false)]).is_err());
    // A registration a restart ended (its write unknown) is a write too (b7: z2 after z1).
    assert!(store.commit(vec![put_written("z1", "b7", "settled", 8, 1, true)]).is_ok());
    assert!(store.commit(vec![put_write_unknown("z2", "b7", "terminal", 9, 2)]).is_ok());
    assert_eq!(latest(store, 0).last().map(String::as_str), Some("z2"));
    // The latest few of each agent, oldest first (a prompt the TUI queued may be older than
    // the latest write: `MAX_RECENT_WRITES_LOADED`).
    assert_eq!(latest(store, 100), ["s1", "s3", "s2", "s4", "s4b"]);
    assert_eq!(latest(store, 301), ["s3"]);
    assert_eq!(latest(store, 401), Vec::<String>::new());
    assert!(latest(store, 0).contains(&"s6".to_string()));
    // No more than the few: b8's five writes give their last four.
    let five: Vec<_> = (1..=5).map(|i| put_written(&format!("w{i}"), "b8", "settled", 600 + i, i, true)).collect();
    assert!(store.commit(five).is_ok());
    assert_eq!(latest(store, 600), ["w2", "w3", "w4", "w5"]);

    // TIME-2: the run clocks are one value, replaced, kept across a reopen, and untouched by a
    // batch that fails.
    assert_eq!(store.run_clocks(), None);
    let clocks = |json: &str| StoreOp::PutRunClocks { json: json.to_string() };
    store.commit(vec![clocks("{\"boot_id\":\"b\",\"max_offset_ms\":1}")]).expect("stored");
    store.commit(vec![clocks("{\"boot_id\":\"b\",\"max_offset_ms\":2}")]).expect("replaced");
    assert!(store.commit(vec![clocks("{\"boot_id\":\"b\",\"max_offset_ms\":3}"), terminal(1, "no such request")]).is_err());
    store.reopen();
    assert_eq!(store.run_clocks().as_deref(), Some("{\"boot_id\":\"b\",\"max_offset_ms\":2}"));
}

/// A tiny deterministic generator (no global state) for the differential test.
pub struct XorShift(pub u64);

impl XorShift {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One random batch over small id spaces, so conflicts are frequent.
pub fn random_batch(rng: &mut XorShift) -> Vec<StoreOp> {
    let len = 1 + rng.below(3);
    (0..len)
        .map(|_| {
            let request = format!("r{}", rng.below(4));
            match rng.below(12) {
                // (Every candidate goes: SQLite orders equal `updated_ms` by row, the model by id.)
                11 => StoreOp::PruneRequests { before_ms: rng.below(2) * 10, max_rows: 100 },
                7 | 8 => event(1 + rng.below(12), &format!("a{}", rng.below(3)), rng.below(5) * 1_000),
                9 => mark(&format!("a{}", rng.below(3)), ["{\"position\":1}", "{\"position\":2}", "[]"][rng.below(3) as usize]),
                10 if rng.below(3) == 0 => prune_bytes(rng.below(50), rng.below(14)),
                10 => prune_settled(rng.below(12), rng.below(5) * 1_000, rng.below(4), rng.below(14)),
                6 => checkpoint(&format!("a{}", rng.below(3)), ["{\"offset\":1}", "{\"offset\":2}", "[]"][rng.below(3) as usize]),
                0 | 1 | 2 => {
                    let phases = ["registered", "submitted", "bound", "terminal", "settled", "released"];
                    let (agent, fingerprint, phase) = (format!("a{}", rng.below(2)), format!("f{}", rng.below(2)), phases[rng.below(6) as usize]);
                    match rng.below(3) {
                        0 => put_at(&request, &agent, &fingerprint, phase, [7, 10, 25][rng.below(3) as usize]),
                        1 => put_written(&request, &agent, phase, [7, 10, 25][rng.below(3) as usize], rng.below(4), rng.below(2) == 0),
                        _ => put_write_unknown(&request, &agent, phase, [7, 10, 25][rng.below(3) as usize], rng.below(4)),
                    }
                }
                3 | 4 => terminal(1 + rng.below(12), &request),
                5 if rng.below(4) == 0 => StoreOp::PutRunClocks { json: format!("{{\"max_offset_ms\":{}}}", rng.below(3)) },
                _ => agent(&format!("a{}", rng.below(3)), &format!("n{}", rng.below(2))),
            }
        })
        .collect()
}

/// Differential: the same random batches give the same outcomes and the same tables.
pub fn run_differential(reference: &mut dyn ContractStore, model: &mut dyn ContractStore, seed: u64, batches: usize) {
    let mut rng = XorShift(seed | 1);
    for step in 0..batches {
        let batch = random_batch(&mut rng);
        let a = reference.commit(batch.clone()).is_ok();
        let b = model.commit(batch.clone()).is_ok();
        assert_eq!(a, b, "seed {seed} step {step}: the model and the store disagree on {batch:?}");
        // HIST-1: what a restart would recover, after every batch (the ids `put_request` keeps).
        assert_eq!(reference.open_requests(), model.open_requests(), "seed {seed} step {step}: open requests differ after {batch:?}");
        let since = rng.below(3) * 10;
        assert_eq!(reference.latest_written_since(since), model.latest_written_since(since), "seed {seed} step {step}: latest written since {since} differ after {batch:?}");
        assert_eq!(reference.stored_event_bytes(), model.stored_event_bytes(), "seed {seed} step {step}: stored event bytes differ after {batch:?}");
        if rng.below(8) == 0 {
            reference.reopen();
            model.reopen();
        }
    }
    assert_eq!(reference.requests(), model.requests(), "seed {seed}: requests differ");
    assert_eq!(reference.terminal_after(0), model.terminal_after(0), "seed {seed}: terminal events differ");
    assert_eq!(reference.agents(), model.agents(), "seed {seed}: agents differ");
    assert_eq!(reference.checkpoints(), model.checkpoints(), "seed {seed}: checkpoints differ");
    assert_eq!(reference.last_terminal_sequence(), model.last_terminal_sequence());
    assert_eq!(reference.agent_events_after(0), model.agent_events_after(0), "seed {seed}: agent events differ");
    assert_eq!(reference.event_marks(), model.event_marks(), "seed {seed}: event marks differ");
    assert_eq!(reference.last_event_sequence(), model.last_event_sequence(), "seed {seed}: last event sequences differ");
    assert_eq!(reference.stored_event_bytes(), model.stored_event_bytes(), "seed {seed}: stored event bytes differ");
    assert_eq!(reference.run_clocks(), model.run_clocks(), "seed {seed}: run clocks differ");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The model passes the store contract (the same suite runs on SQLite in tests/).
    #[test]
    fn model_passes_the_store_contract() {
        run_contract_suite(&mut ModelStore::default());
    }
}
