//! One contract suite for the durable store, run against the simulator's model
//! (`StoreTables`) and against the real SQLite store (`tests/store_contract.rs`). It pins what
//! the simulator relies on: atomic batches, immutable request identity, strictly growing
//! terminal sequences, one terminal event per request, and that a reopen (crash) keeps exactly
//! what was committed.

use crate::store_model::StoreTables;
use wakterm_runtime::store::{StoreOp, StoredAgent, StoredRequest, StoredTerminalEvent};

/// The store surface the simulator uses.
pub trait ContractStore {
    fn commit(&mut self, ops: Vec<StoreOp>) -> Result<(), String>;
    fn requests(&mut self) -> Vec<StoredRequest>;
    fn agents(&mut self) -> Vec<StoredAgent>;
    fn terminal_after(&mut self, after: u64) -> Vec<StoredTerminalEvent>;
    fn last_terminal_sequence(&mut self) -> u64;
    /// OBS-1: the stored observer checkpoints (agent id, JSON), ordered by agent id.
    fn checkpoints(&mut self) -> Vec<(String, String)>;
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

pub fn terminal(sequence: u64, request: &str) -> StoreOp {
    StoreOp::AppendTerminal { sequence, request_id: request.to_string(), event_json: format!("{{\"seq\":{sequence}}}") }
}

pub fn checkpoint(agent_id: &str, json: &str) -> StoreOp {
    StoreOp::PutCheckpoint { agent_id: agent_id.to_string(), checkpoint_json: json.to_string() }
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
    // REC: a crash keeps exactly what was committed.
    let before = (store.requests(), store.terminal_after(0), store.agents(), store.checkpoints());
    store.reopen();
    assert_eq!((store.requests(), store.terminal_after(0), store.agents(), store.checkpoints()), before);
    assert_eq!(store.last_terminal_sequence(), 5);
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
            match rng.below(7) {
                6 => checkpoint(&format!("a{}", rng.below(3)), ["{\"offset\":1}", "{\"offset\":2}", "[]"][rng.below(3) as usize]),
                0 | 1 | 2 => put(&request, &format!("a{}", rng.below(2)), &format!("f{}", rng.below(2)), ["registered", "submitted", "terminal"][rng.below(3) as usize]),
                3 | 4 => terminal(1 + rng.below(12), &request),
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
