//! The store contract suite against the real SQLite store, and a differential run of random
//! batches against the simulator's model: the model the simulator crashes is the store we ship.
#![cfg(not(madsim))]

use wakterm_runtime::store::{Store, StoreOp, StoreWriter, StoredAgent, StoredAgentEvent, StoredRequest, StoredTerminalEvent, TERMINAL_PAGE_MAX};
use wakterm_sim::contract::{run_contract_suite, run_differential, ContractStore, ModelStore};

struct SqliteStore {
    dir: tempfile::TempDir,
    store: Store,
    writer: Option<StoreWriter>,
    /// Each reopen runs `VACUUM` first, as a user might by hand between two daemons.
    vacuum_on_reopen: bool,
}

impl SqliteStore {
    fn new() -> SqliteStore {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("requests.sqlite3");
        let store = Store::open(&path).expect("open");
        let writer = StoreWriter::spawn(&path).expect("writer");
        SqliteStore { dir, store, writer: Some(writer), vacuum_on_reopen: false }
    }
}

impl ContractStore for SqliteStore {
    fn commit(&mut self, ops: Vec<StoreOp>) -> Result<(), String> {
        self.writer.as_ref().expect("writer").commit_blocking(ops).map(drop).map_err(|e| e.to_string())
    }
    fn requests(&mut self) -> Vec<StoredRequest> {
        self.store.load_requests().expect("load")
    }
    fn open_requests(&mut self) -> Vec<StoredRequest> {
        self.store.load_open_requests().expect("load")
    }
    fn latest_written_since(&mut self, since_ms: u64) -> Vec<StoredRequest> {
        self.store.load_latest_written_since(since_ms).expect("load")
    }
    fn agents(&mut self) -> Vec<StoredAgent> {
        self.store.load_agents().expect("load")
    }
    fn terminal_after(&mut self, after: u64) -> Vec<StoredTerminalEvent> {
        self.store.terminal_events_after(after, 10_000).expect("load")
    }
    fn last_terminal_sequence(&mut self) -> u64 {
        self.store.last_terminal_sequence().expect("load")
    }
    fn checkpoints(&mut self) -> Vec<(String, String)> {
        self.store.load_checkpoints().expect("load")
    }
    fn agent_events_after(&mut self, after: u64) -> Vec<StoredAgentEvent> {
        self.store.agent_events_after(after, i64::MAX as u64, TERMINAL_PAGE_MAX, &[]).expect("load")
    }
    fn last_event_sequence(&mut self) -> u64 {
        self.store.last_event_sequence().expect("load")
    }
    fn event_marks(&mut self) -> Vec<(String, String)> {
        self.store.load_event_marks().expect("load")
    }
    fn stored_event_bytes(&mut self) -> u64 {
        self.store.stored_event_bytes().expect("load")
    }
    fn run_clocks(&mut self) -> Option<String> {
        self.store.load_run_clocks().expect("load")
    }
    fn reopen(&mut self) {
        drop(self.writer.take()); // the writer thread stops; what it committed is on disk
        let path = self.dir.path().join("requests.sqlite3");
        if self.vacuum_on_reopen {
            rusqlite::Connection::open(&path).and_then(|conn| conn.execute_batch("VACUUM")).expect("vacuum");
        }
        self.store = Store::open(&path).expect("reopen");
        self.writer = Some(StoreWriter::spawn(&path).expect("writer"));
    }
}

/// The real SQLite store passes the same contract suite as the simulator's model.
#[test]
fn sqlite_passes_the_store_contract() {
    run_contract_suite(&mut SqliteStore::new());
}

/// The model the simulator uses agrees with SQLite on random batches (outcomes and tables).
#[test]
fn model_matches_sqlite_on_random_batches() {
    for seed in 1..=40u64 {
        run_differential(&mut SqliteStore::new(), &mut ModelStore::default(), seed * 7919, 120);
    }
}

/// ADM-5, STORE-1: a `VACUUM` run by hand between two daemons changes no answer of the store.
/// SQLite may renumber the row ids of a table without an INTEGER PRIMARY KEY (`requests`),
/// and a restart takes an agent's latest written request by row id (`LATEST_WRITTEN_SQL`); the
/// bundled SQLite keeps them (the last notes listed this as unchecked). The same differential,
/// with a `VACUUM` before every reopen.
#[test]
fn a_vacuum_between_daemons_changes_no_answer() {
    for seed in 1..=20u64 {
        let mut vacuumed = SqliteStore::new();
        vacuumed.vacuum_on_reopen = true;
        run_differential(&mut vacuumed, &mut ModelStore::default(), seed * 104_729, 120);
    }
}
