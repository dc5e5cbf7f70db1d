//! Scenarios for the store's contract: each test says what it proves.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::*;

/// A private scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir = std::env::temp_dir().join(format!("wakterm-store-unit-{}", uuid::Uuid::new_v4()));
        fs::create_dir(&dir).expect("create scratch dir");
        Scratch(dir)
    }
    fn db(&self) -> PathBuf {
        self.0.join("requests.sqlite")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn agent(id: &str, name: &str) -> StoreOp {
    StoreOp::PutAgent {
        agent_id: id.into(),
        name: name.into(),
        record_json: format!(r#"{{"id":"{id}"}}"#),
    }
}

fn request(id: &str, phase: &str, fingerprint: &str, updated_ms: u64) -> StoreOp {
    StoreOp::PutRequest {
        request_id: id.into(),
        agent_id: "a1".into(),
        phase: phase.into(),
        fingerprint: fingerprint.into(),
        record_json: format!(r#"{{"phase":"{phase}"}}"#),
        updated_ms,
    }
}

fn terminal(sequence: u64, request_id: &str) -> StoreOp {
    StoreOp::AppendTerminal {
        sequence,
        request_id: request_id.into(),
        event_json: format!(r#"{{"state":"completed","seq":{sequence}}}"#),
    }
}

fn open_pair(path: &Path) -> (Store, StoreWriter) {
    let writer = StoreWriter::spawn(path).expect("spawn writer");
    let store = Store::open(path).expect("open store");
    (store, writer)
}

#[test]
fn store_round_trips_every_op() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer
        .commit_blocking(vec![agent("a1", "zola"), agent("a2", "mila")])
        .unwrap();
    writer
        .commit_blocking(vec![request("r1", "registered", "fp1", 10)])
        .unwrap();
    writer
        .commit_blocking(vec![
            request("r1", "submitted", "fp1", 20),
            terminal(1, "r1"),
        ])
        .unwrap();
    writer
        .commit_blocking(vec![StoreOp::DeleteAgent {
            agent_id: "a2".into(),
        }])
        .unwrap();

    let agents = store.load_agents().unwrap();
    assert_eq!(agents.len(), 1);
    assert_eq!(
        agents[0],
        StoredAgent {
            agent_id: "a1".into(),
            name: "zola".into(),
            record_json: r#"{"id":"a1"}"#.into()
        }
    );
    let stored = store.get_request("r1").unwrap().expect("r1 stored");
    assert_eq!(stored.phase, "submitted");
    assert_eq!(stored.updated_ms, 20);
    assert_eq!(stored.record_json, r#"{"phase":"submitted"}"#);
    assert_eq!(store.load_requests().unwrap(), vec![stored]);
    assert_eq!(store.get_request("missing").unwrap(), None);
    let events = store.terminal_events_after(0, 10).unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0].sequence, events[0].request_id.as_str()),
        (1, "r1")
    );
    assert_eq!(
        store.terminal_event_for("r1").unwrap(),
        Some(events[0].clone())
    );
    assert_eq!(store.last_terminal_sequence().unwrap(), 1);
    assert!(store
        .meta("created_by")
        .unwrap()
        .unwrap()
        .starts_with("wakterm-runtime "));
}

#[test]
fn store_empty_has_terminal_sequence_zero_and_pages_are_bounded() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    assert_eq!(store.last_terminal_sequence().unwrap(), 0);
    let ops: Vec<StoreOp> = (1..=5)
        .map(|i| request(&format!("r{i}"), "done", "fp", i))
        .collect();
    writer.commit_blocking(ops).unwrap();
    let terminals: Vec<StoreOp> = (1..=5)
        .map(|i| terminal(i * 10, &format!("r{i}")))
        .collect();
    writer.commit_blocking(terminals).unwrap();
    let page: Vec<u64> = store
        .terminal_events_after(20, 2)
        .unwrap()
        .iter()
        .map(|e| e.sequence)
        .collect();
    assert_eq!(page, vec![30, 40]);
    assert!(store.terminal_events_after(50, 10).unwrap().is_empty());
    assert!(store.terminal_events_after(0, 0).unwrap().is_empty());
    assert!(store
        .terminal_events_after(u64::MAX, 10)
        .unwrap()
        .is_empty());
}

#[test]
fn store_refuses_terminal_sequence_not_greater_and_fails_whole_batch() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer
        .commit_blocking(vec![
            request("r1", "p", "f", 1),
            request("r2", "p", "f", 1),
            request("r3", "p", "f", 1),
        ])
        .unwrap();
    writer.commit_blocking(vec![terminal(5, "r1")]).unwrap();
    for stale in [5, 4] {
        let err = writer
            .commit_blocking(vec![terminal(stale, "r2")])
            .unwrap_err();
        assert!(matches!(err, StoreError::Constraint { .. }), "{err:?}");
    }
    // The batch's earlier op is rolled back with it: no renumbering, no partial batch.
    let err = writer
        .commit_blocking(vec![
            request("r2", "q", "f", 2),
            terminal(7, "r3"),
            terminal(6, "r2"),
        ])
        .unwrap_err();
    assert!(err.to_string().contains("not greater"), "{err}");
    assert_eq!(store.get_request("r2").unwrap().unwrap().phase, "p");
    assert_eq!(store.last_terminal_sequence().unwrap(), 5);
    assert!(matches!(
        writer.commit_blocking(vec![terminal(0, "r2")]),
        Err(StoreError::InvalidOp { .. })
    ));
    assert!(matches!(
        writer.commit_blocking(vec![terminal(u64::MAX, "r2")]),
        Err(StoreError::InvalidOp { .. })
    ));
}

#[test]
fn store_allows_one_terminal_event_per_request_ever() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer
        .commit_blocking(vec![request("r1", "p", "f", 1), terminal(1, "r1")])
        .unwrap();
    let err = writer.commit_blocking(vec![terminal(2, "r1")]).unwrap_err();
    assert!(
        matches!(err, StoreError::Constraint { .. }) && err.to_string().contains("already ended"),
        "{err}"
    );
    let err = writer
        .commit_blocking(vec![terminal(3, "nobody")])
        .unwrap_err();
    assert!(err.to_string().contains("unknown request"), "{err}");
    assert_eq!(store.terminal_events_after(0, 10).unwrap().len(), 1);
}

/// HIST-1: a finished request (settled, terminal) never moves to another phase: a put that
/// would reopen it is refused and changes nothing; the same phase may be written again (a
/// retried commit), and a released id may register again (IDEM-6).
#[test]
fn a_finished_request_is_never_reopened() {
    assert_eq!(op::FINISHED_FOREVER.map(|p| p.as_str()), ["settled", "terminal"], "the names put_request's statement uses");
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer.commit_blocking(vec![agent("a1", "zola"), request("r1", "terminal", "fp1", 1), request("r2", "settled", "fp1", 1), request("r3", "released", "fp1", 1)]).unwrap();
    for (id, phase) in [("r1", "bound"), ("r1", "registered"), ("r2", "registered"), ("r2", "terminal")] {
        let err = writer.commit_blocking(vec![request(id, phase, "fp1", 2)]).unwrap_err();
        assert!(matches!(err, StoreError::Constraint { .. }) && err.to_string().contains("stored finished"), "{id} -> {phase}: {err:?}");
    }
    assert_eq!(store.get_request("r1").unwrap().unwrap().phase, "terminal", "a refused put changes nothing");
    assert_eq!(store.get_request("r2").unwrap().unwrap().updated_ms, 1);
    writer.commit_blocking(vec![request("r1", "terminal", "fp1", 3)]).unwrap();
    writer.commit_blocking(vec![request("r3", "registered", "fp1", 3)]).unwrap();
    assert_eq!(store.get_request("r3").unwrap().unwrap().phase, "registered");
}

#[test]
fn store_keeps_request_identity_and_agent_names_unique() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer
        .commit_blocking(vec![agent("a1", "zola"), request("r1", "p", "fp1", 1)])
        .unwrap();
    let err = writer
        .commit_blocking(vec![request("r1", "p", "fp2", 2)])
        .unwrap_err();
    assert!(matches!(err, StoreError::Constraint { .. }), "{err:?}");
    assert!(err.to_string().contains("stored for agent a1 with fingerprint fp1"), "{err}");
    let other_agent = match request("r1", "q", "fp1", 3) {
        StoreOp::PutRequest { request_id, phase, fingerprint, record_json, updated_ms, .. } => {
            StoreOp::PutRequest { request_id, agent_id: "a9".into(), phase, fingerprint, record_json, updated_ms }
        }
        _ => unreachable!(),
    };
    let err = writer.commit_blocking(vec![other_agent]).unwrap_err();
    assert!(matches!(err, StoreError::Constraint { .. }) && err.to_string().contains("cannot change"), "{err:?}");
    let stored = store.get_request("r1").unwrap().unwrap();
    assert_eq!((stored.agent_id.as_str(), stored.phase.as_str(), stored.updated_ms), ("a1", "p", 1), "a refused put changes nothing");
    writer.commit_blocking(vec![request("r1", "q", "fp1", 4)]).unwrap();
    assert_eq!(store.get_request("r1").unwrap().unwrap().phase, "q", "the same identity updates");
    let err = writer
        .commit_blocking(vec![agent("a2", "zola")])
        .unwrap_err();
    assert!(err.to_string().contains("already belongs"), "{err}");
    writer
        .commit_blocking(vec![agent("a1", "zola-renamed"), agent("a2", "zola")])
        .unwrap();
    assert_eq!(store.load_agents().unwrap().len(), 2);
    assert_eq!(store.get_request("r1").unwrap().unwrap().fingerprint, "fp1");
}

#[test]
fn store_refuses_invalid_json_and_oversized_fields() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    let bad_json = StoreOp::PutAgent {
        agent_id: "a".into(),
        name: "n".into(),
        record_json: "{not json".into(),
    };
    assert!(matches!(
        writer.commit_blocking(vec![bad_json]),
        Err(StoreError::Constraint { .. })
    ));
    let long = "x".repeat(FIELD_BYTES_MAX + 1);
    assert!(matches!(
        writer.commit_blocking(vec![agent(&long, "n")]),
        Err(StoreError::InvalidOp { .. })
    ));
    assert!(matches!(
        writer.commit_blocking(vec![agent("", "n")]),
        Err(StoreError::InvalidOp { .. })
    ));
    let too_many = vec![
        StoreOp::DeleteAgent {
            agent_id: "a".into()
        };
        BATCH_OPS_MAX + 1
    ];
    assert!(matches!(
        writer.commit_blocking(too_many),
        Err(StoreError::InvalidOp { .. })
    ));
    assert!(store.load_agents().unwrap().is_empty());
}

/// Parks the writer thread inside a callback until the returned sender is dropped, so that
/// batches submitted meanwhile queue up and form one group.
fn park_writer(writer: &StoreWriter) -> std::sync::mpsc::Sender<()> {
    let (gate_tx, gate_rx) = std::sync::mpsc::channel::<()>();
    let (parked_tx, parked_rx) = std::sync::mpsc::channel::<()>();
    let plug = StoreOp::DeleteAgent {
        agent_id: "plug".into(),
    };
    let done = Box::new(move |_| {
        parked_tx.send(()).unwrap();
        let _ = gate_rx.recv();
    });
    writer.submit(vec![plug], done).unwrap();
    parked_rx.recv().unwrap();
    gate_tx
}

#[test]
fn store_callbacks_wait_for_commit() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    let blocker = rusqlite::Connection::open(&path).unwrap();
    blocker.execute_batch("BEGIN IMMEDIATE").unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    writer
        .submit(
            vec![agent("a1", "zola")],
            Box::new(move |r| tx.send(r).unwrap()),
        )
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(
        rx.try_recv().is_err(),
        "no callback may fire while the transaction cannot commit"
    );
    blocker.execute_batch("COMMIT").unwrap();
    rx.recv().unwrap().unwrap();
    assert_eq!(Store::open(&path).unwrap().load_agents().unwrap().len(), 1);
}

/// STORE-2: a transaction the writer's connection was left in (a ROLLBACK that failed after
/// a failed COMMIT, a group whose savepoint failed; its batches were answered failed) is
/// rolled back before the next group, which commits. Left open, every later BEGIN failed on it
/// and the writer failed every commit until a restart (found by a review).
#[test]
fn store_2_a_transaction_left_open_is_rolled_back_before_the_next_group() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let (conn, _) = schema::open_database(&path).expect("open");
    conn.execute_batch("BEGIN IMMEDIATE; INSERT INTO agents(agent_id, name, record) VALUES ('a0', 'ghost', '{}')").expect("a stray transaction");
    assert!(!conn.is_autocommit());
    let (results, commits) = writer::commit_group(&conn, &[writer::PendingBatch::unanswered(vec![agent("a1", "zola")])], 1);
    assert!(results[0].is_ok() && commits.is_some(), "{results:?}");
    let names: Vec<String> = Store::open(&path).unwrap().load_agents().unwrap().into_iter().map(|a| a.name).collect();
    assert_eq!(names, vec!["zola"], "the stray transaction's write was rolled back, the group committed");
}

/// STORE-2: a batch whose savepoint cannot be released (here an authorizer denies the
/// second batch's RELEASE; in the field an I/O error or out of memory at that statement) may
/// leave its writes in the group's transaction, though the batch is answered failed: the whole
/// group is rolled back and every batch fails, none durable. Committing the others would make
/// the failed batch's writes durable too (a terminal event stored twice, an event renumbered).
/// The next group commits.
#[test]
fn store_2_a_group_with_a_failed_savepoint_is_rolled_back_whole() {
    use rusqlite::hooks::{AuthAction, AuthContext, Authorization, TransactionOperation};
    let scratch = Scratch::new();
    let path = scratch.db();
    let (conn, _) = schema::open_database(&path).expect("open");
    let mut releases = 0;
    conn.authorizer(Some(move |context: AuthContext<'_>| match context.action {
        AuthAction::Savepoint { operation: TransactionOperation::Release, savepoint_name: "batch" } => {
            releases += 1;
            if releases == 2 { Authorization::Deny } else { Authorization::Allow }
        }
        _ => Authorization::Allow,
    }));
    let group: Vec<_> = [("a1", "zola"), ("a2", "mila"), ("a3", "nova")].iter().map(|(id, name)| writer::PendingBatch::unanswered(vec![agent(id, name)])).collect();
    let (results, commits) = writer::commit_group(&conn, &group, 1);
    assert_eq!(commits, None, "nothing committed");
    assert_eq!(results.len(), 3);
    for result in &results {
        let error = result.as_ref().expect_err("every batch of the group fails");
        assert!(error.to_string().contains("savepoint failed"), "{error}");
    }
    assert!(conn.is_autocommit(), "the group's transaction was rolled back");
    assert!(Store::open(&path).unwrap().load_agents().unwrap().is_empty(), "none of the batches is durable");
    conn.authorizer(None::<fn(AuthContext<'_>) -> Authorization>);
    let (results, commits) = writer::commit_group(&conn, &[writer::PendingBatch::unanswered(vec![agent("a4", "lena")])], 2);
    assert!(results[0].is_ok() && commits.is_some(), "the next group commits: {results:?}");
    let names: Vec<String> = Store::open(&path).unwrap().load_agents().unwrap().into_iter().map(|a| a.name).collect();
    assert_eq!(names, vec!["lena"]);
}

/// STORE-2: an error after which SQLite rolls the whole transaction back (an I/O error, a full
/// disk, out of memory; here a trigger's `RAISE(ROLLBACK)` stands in for them) fails every
/// batch of the group, and none of them is durable. A batch after it used to open a
/// transaction of its own with its savepoint and commit alone, reported failed (a review
/// found it). The writer goes on with the next group.
#[test]
fn store_2_a_group_whose_transaction_sqlite_rolled_back_fails_whole() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let (store, writer) = open_pair(&path);
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute_batch(
            "CREATE TRIGGER boom BEFORE INSERT ON agents WHEN NEW.name = 'boom' \
             BEGIN SELECT RAISE(ROLLBACK, 'injected: the transaction is rolled back'); END",
        )
        .unwrap();
    let gate = park_writer(&writer);
    let (tx, rx) = std::sync::mpsc::channel();
    let batches = vec![vec![agent("a2", "mila")], vec![agent("a3", "boom")], vec![agent("a4", "nova")]];
    for (index, ops) in batches.into_iter().enumerate() {
        let tx = tx.clone();
        writer.submit(ops, Box::new(move |result| tx.send((index, result)).unwrap())).unwrap();
    }
    drop(gate);
    let answers: Vec<_> = (0..3).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(answers.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![0, 1, 2]);
    for (index, answer) in &answers {
        let Err(StoreError::Sqlite { message, .. }) = answer else { panic!("batch {index}: {answer:?}") };
        assert!(message.contains("injected") && message.contains("none of its batches"), "batch {index}: {message}");
    }
    let names = |store: &Store| store.load_agents().unwrap().into_iter().map(|a| a.name).collect::<Vec<String>>();
    assert_eq!(names(&store), vec!["zola"], "nothing of the group is durable");
    writer.commit_blocking(vec![agent("a5", "vera")]).unwrap();
    assert_eq!(names(&store), vec!["zola", "vera"]);
}

#[test]
fn store_group_fails_bad_batch_alone() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let (store, writer) = open_pair(&path);
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    let gate = park_writer(&writer);
    let (tx, rx) = std::sync::mpsc::channel();
    let batches = vec![
        vec![agent("a2", "mila")],
        vec![agent("a3", "zola")],
        vec![agent("a4", "nova")],
    ];
    for (index, ops) in batches.into_iter().enumerate() {
        let tx = tx.clone();
        writer
            .submit(
                ops,
                Box::new(move |result| tx.send((index, result)).unwrap()),
            )
            .unwrap();
    }
    drop(gate);
    let answers: Vec<_> = (0..3).map(|_| rx.recv().unwrap()).collect();
    assert_eq!(
        answers.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![0, 1, 2]
    );
    assert!(
        matches!(answers[1].1, Err(StoreError::Constraint { .. })),
        "{:?}",
        answers[1]
    );
    let first = answers[0].1.clone().unwrap();
    let last = answers[2].1.clone().unwrap();
    assert_eq!(first.transaction_id, last.transaction_id);
    assert_eq!(
        (first.batches_in_transaction, first.position, last.position),
        (3, 0, 2)
    );
    let names: Vec<String> = store
        .load_agents()
        .unwrap()
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, vec!["zola", "mila", "nova"]);
}

/// STORE-2: a caller off the reactor (`agent start`, recovery) waits out a moment's full queue
/// instead of failing on it (a review found `agent start` failed under load, and a failed
/// start could not take its record back).
#[test]
fn store_2_commit_blocking_waits_out_a_full_queue() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let (store, writer) = {
        let writer = StoreWriter::spawn_with_capacity(&path, 2).unwrap();
        (Store::open(&path).unwrap(), writer)
    };
    let gate = park_writer(&writer);
    for i in 0..2 {
        writer.submit(vec![agent(&format!("a{i}"), &format!("n{i}"))], Box::new(|_| {})).unwrap();
    }
    assert!(matches!(writer.submit(vec![agent("x", "x")], Box::new(|_| {})), Err(StoreError::Backpressure { .. })), "full");
    let writer = std::sync::Arc::new(writer);
    let blocking = std::sync::Arc::clone(&writer);
    let committing = std::thread::spawn(move || blocking.commit_blocking(vec![agent("a9", "late")]));
    std::thread::sleep(std::time::Duration::from_millis(50)); // it waits on the full queue
    let waited = !committing.is_finished();
    drop(gate); // before any assertion: a parked writer would hang the test's teardown
    let committed = committing.join().unwrap();
    assert!(waited, "it waits rather than failing at once: {committed:?}");
    committed.expect("committed once the queue drained");
    let names: Vec<String> = store.load_agents().unwrap().into_iter().map(|a| a.name).collect();
    assert!(names.contains(&"late".to_string()), "{names:?}");
}

#[test]
fn store_writer_answers_backpressure_when_queue_full() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn_with_capacity(&path, 2).unwrap();
    let gate = park_writer(&writer);
    let (tx, rx) = std::sync::mpsc::channel();
    let mut outcomes = Vec::new();
    for i in 0..3 {
        let tx = tx.clone();
        let ops = vec![agent(&format!("a{i}"), &format!("n{i}"))];
        outcomes.push(writer.submit(ops, Box::new(move |r| tx.send(r).unwrap())));
    }
    assert_eq!(
        outcomes,
        vec![
            Ok(()),
            Ok(()),
            Err(StoreError::Backpressure { capacity: 2 })
        ]
    );
    drop(gate);
    for _ in 0..2 {
        rx.recv().unwrap().unwrap();
    }
    drop(writer);
    assert!(
        rx.try_recv().is_err(),
        "the refused batch's callback is never called"
    );
    assert!(matches!(
        StoreWriter::spawn_with_capacity(&path, 0),
        Err(StoreError::InvalidOp { .. })
    ));
}

#[test]
fn store_shutdown_commits_queued_batches_then_stops() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    for i in 0..50 {
        let tx = tx.clone();
        writer
            .submit(
                vec![agent(&format!("a{i}"), &format!("n{i}"))],
                Box::new(move |r| tx.send(r).unwrap()),
            )
            .unwrap();
    }
    writer.shutdown().unwrap();
    let results: Vec<_> = rx.try_iter().collect();
    assert_eq!(results.len(), 50);
    assert!(results.iter().all(Result::is_ok));
    assert_eq!(Store::open(&path).unwrap().load_agents().unwrap().len(), 50);
}

#[test]
fn store_creates_file_0600_and_repairs_loose_mode() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let store = Store::open(&path).unwrap();
    assert!(store.open_report().created);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
    drop(store);
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.open_report().mode_repaired_from, Some(0o644));
    assert!(!store.open_report().created);
    assert_eq!(
        fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn store_refuses_newer_schema_without_touching_the_file() {
    let scratch = Scratch::new();
    let path = scratch.db();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(&format!(
            // Rollback-journal mode: switching it to WAL would rewrite header bytes 18-19.
            "CREATE TABLE future(x); INSERT INTO future VALUES (1);
             PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = {};",
            SCHEMA_VERSION + 1
        ))
        .unwrap();
    }
    fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
    let before = fs::read(&path).unwrap();
    let err = Store::open(&path).unwrap_err();
    assert_eq!(
        err,
        StoreError::NewerSchema {
            path: path.clone(),
            found: SCHEMA_VERSION + 1,
            supported: SCHEMA_VERSION
        }
    );
    assert!(err.to_string().contains("newer wakterm"), "{err}");
    assert!(matches!(
        StoreWriter::spawn(&path),
        Err(StoreError::NewerSchema { .. })
    ));
    assert!(
        fs::read(&path).unwrap() == before,
        "refusal must leave the file byte-identical"
    );
}

#[test]
fn store_refuses_garbage_and_foreign_databases() {
    let scratch = Scratch::new();
    let garbage = scratch.0.join("garbage.sqlite");
    let bytes: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    fs::write(&garbage, &bytes).unwrap();
    let err = Store::open(&garbage).unwrap_err();
    assert!(
        matches!(err, StoreError::NotAWaktermDatabase { .. }),
        "{err:?}"
    );
    assert!(
        fs::read(&garbage).unwrap() == bytes,
        "garbage file was modified"
    );

    let foreign = scratch.0.join("foreign.sqlite");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("CREATE TABLE photos(id INTEGER)")
        .unwrap();
    let before = fs::read(&foreign).unwrap();
    let err = Store::open(&foreign).unwrap_err();
    assert!(err.to_string().contains("another application"), "{err}");
    assert!(
        fs::read(&foreign).unwrap() == before,
        "foreign database was modified"
    );

    let dir = scratch.0.join("a-directory");
    fs::create_dir(&dir).unwrap();
    assert!(Store::open(&dir).is_err());

    // SEC-3: a FIFO at the database's path (or a side file's) is refused before SQLite opens
    // it: SQLite's read-only open of a FIFO waited for a writer for good, and the daemon's
    // start with it.
    for fifo_at in ["fifo.sqlite", "side.sqlite-wal"] {
        let fifo = scratch.0.join(fifo_at);
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
        let path = scratch.0.join(fifo_at.split('-').next().unwrap());
        let (done, answer) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(Store::open(&path).map(drop));
        });
        let err = answer.recv_timeout(std::time::Duration::from_secs(10)).expect("the open waited at the FIFO").unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{fifo_at}: {err}");
    }
}

#[test]
fn store_reopen_keeps_everything_and_is_idempotent() {
    let scratch = Scratch::new();
    let path = scratch.db();
    {
        let (_, writer) = open_pair(&path);
        writer
            .commit_blocking(vec![
                agent("a1", "zola"),
                request("r1", "p", "f", 1),
                terminal(3, "r1"),
            ])
            .unwrap();
    }
    let store = Store::open(&path).unwrap();
    assert_eq!(store.open_report().migrated_from, SCHEMA_VERSION);
    assert_eq!(store.load_agents().unwrap().len(), 1);
    assert_eq!(store.load_requests().unwrap().len(), 1);
    assert_eq!(store.last_terminal_sequence().unwrap(), 3);
}

#[test]
fn store_survives_a_callback_that_panics() {
    let scratch = Scratch::new();
    let writer = StoreWriter::spawn(&scratch.db()).unwrap();
    writer
        .submit(
            vec![agent("a1", "zola")],
            Box::new(|_| panic!("caller bug")),
        )
        .unwrap();
    assert!(writer.commit_blocking(vec![agent("a2", "mila")]).is_ok());
}

#[test]
fn store_uses_wal_and_full_sync() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    let wal = path.with_file_name("requests.sqlite-wal");
    assert!(wal.exists(), "a commit in WAL mode leaves a -wal file");
    assert_eq!(
        fs::metadata(&wal).unwrap().permissions().mode() & 0o077,
        0,
        "WAL is private too"
    );
    let probe = rusqlite::Connection::open(&path).unwrap();
    let mode: String = probe
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // synchronous is per connection: check the one `configure` sets up.
    schema::configure(&probe).unwrap();
    let sync: i64 = probe
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap();
    assert_eq!(sync, 2);
}

fn event(sequence: u64, agent_id: &str, at_ms: u64) -> StoreOp {
    StoreOp::AppendEvent {
        sequence,
        agent_id: agent_id.into(),
        kind: "turn.started".into(),
        at_ms,
        event_json: format!(r#"{{"sequence":{sequence}}}"#),
    }
}

/// EV-1: an event sequence is used once, ever: a second use fails the whole batch; numbers
/// may commit out of order (a renumbered retry) and gaps are allowed; readers stop at the
/// bound they are given (the published sequence, EV-2) and filter by agent.
#[test]
fn ev_1_store_uses_each_event_sequence_once() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer.commit_blocking(vec![event(5, "a1", 10), event(2, "a2", 10)]).expect("out of order is fine");
    let err = writer.commit_blocking(vec![event(7, "a1", 10), event(5, "a1", 10)]).expect_err("5 is used");
    assert!(matches!(err, StoreError::Constraint { .. }), "{err:?}");
    assert_eq!(store.last_event_sequence().unwrap(), 5, "the failed batch left nothing");
    writer.commit_blocking(vec![event(9, "a1", 11)]).expect("a gap is fine");
    let all: Vec<u64> = store.agent_events_after(0, u64::MAX >> 1, 100, &[]).unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(all, [2, 5, 9]);
    let bounded: Vec<u64> = store.agent_events_after(2, 5, 100, &[]).unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(bounded, [5]);
    let a1: Vec<u64> = store.agent_events_after(0, 100, 100, &["a1".to_string()]).unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(a1, [5, 9]);
    assert!(writer.commit_blocking(vec![event(0, "a1", 1)]).is_err(), "0 means none");
}

/// EV-9: pruning removes a prefix only (stopping at the first event that is neither old nor
/// beyond the count), at most `max_rows` per op, and remembers the highest pruned number,
/// which is never handed out again; the last sequence survives pruning everything.
#[test]
fn ev_9_store_prunes_a_bounded_prefix_and_remembers_it() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    let ops: Vec<StoreOp> = (1..=10).map(|s| event(s, "a1", if s == 4 { 5_000 } else { 1_000 + s })).collect();
    writer.commit_blocking(ops).expect("append");
    // Old means at_ms < 2000: events 1..3 are old, 4 is not: the prefix stops there.
    let prune = |through_sequence, before_ms, max_rows, settled_through| StoreOp::PruneEvents { through_sequence, before_ms, max_rows, settled_through, excess_bytes: 0 };
    // EV-3: none past the settled mark, by age or by sequence.
    writer.commit_blocking(vec![prune(9, 2_000, 100, 2)]).expect("prune");
    assert_eq!(store.events_pruned_through().unwrap(), 2, "3 is old, but past the settled mark");
    writer.commit_blocking(vec![prune(0, 2_000, 100, 10)]).expect("prune");
    assert_eq!(store.events_pruned_through().unwrap(), 3);
    assert_eq!(store.oldest_event().unwrap(), Some((4, 5_000)));
    writer.commit_blocking(vec![prune(9, 0, 2, 10)]).expect("prune");
    assert_eq!(store.events_pruned_through().unwrap(), 5, "bounded to two rows");
    assert!(writer.commit_blocking(vec![event(5, "a1", 1)]).is_err(), "a pruned number is never used again");
    writer.commit_blocking(vec![prune(10, 0, 100, 10)]).expect("prune");
    assert_eq!(store.oldest_event().unwrap(), None);
    assert_eq!(store.last_event_sequence().unwrap(), 10, "EV-1: continued after the pruned mark");
    let retention = crate::daemon::retention::Retention { events: 5, days: 0, bytes: 0 };
    assert_eq!(retention.due(&store, 0, 20).unwrap(), None, "nothing stored, nothing due");
    writer.commit_blocking((11..=20).map(|s| event(s, "a1", 1)).collect()).expect("append");
    assert_eq!(retention.due(&store, 0, 20).unwrap(), Some(prune(15, 0, crate::daemon::retention::PRUNE_BATCH, 20)));
    assert_eq!(retention.due(&store, 0, 10).unwrap(), None, "EV-3: the oldest stored (11) lies past the settled mark");
}

/// EV-9: the store counts the bytes of event JSON it holds (each batch adds, a prune removes,
/// a failed batch adds nothing), and a prune with `excess_bytes` removes the oldest events
/// until that much went, never past the settled mark; the retention rule asks for the excess
/// over `mib` MiB. A million events of up to 2 MiB each was no bound on the disk (a review).
#[test]
fn ev_9_store_prunes_by_size() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    let sized = |sequence: u64, bytes: usize| {
        let mut op = event(sequence, "a1", 1);
        if let StoreOp::AppendEvent { event_json, .. } = &mut op {
            let pad = "p".repeat(bytes - format!(r#"{{"sequence":{sequence},"pad":""}}"#).len());
            *event_json = format!(r#"{{"sequence":{sequence},"pad":"{pad}"}}"#);
            assert_eq!(event_json.len(), bytes);
        }
        op
    };
    writer.commit_blocking((1..=4).map(|s| sized(s, 1_000)).collect()).expect("append");
    writer.commit_blocking(vec![sized(5, 300_000), sized(6, 800_000)]).expect("append");
    assert_eq!(store.stored_event_bytes().unwrap(), 1_104_000);
    assert!(writer.commit_blocking(vec![sized(7, 500), sized(6, 500)]).is_err(), "6 is used: the batch fails whole");
    assert_eq!(store.stored_event_bytes().unwrap(), 1_104_000, "a failed batch counts nothing");

    let by_size = |excess_bytes, settled_through| StoreOp::PruneEvents { through_sequence: 0, before_ms: 0, max_rows: 100, settled_through, excess_bytes };
    writer.commit_blocking(vec![by_size(2_500, 100)]).expect("prune");
    assert_eq!(store.events_pruned_through().unwrap(), 3, "1,000 + 1,000 < 2,500: the third goes too");
    assert_eq!(store.stored_event_bytes().unwrap(), 1_101_000);
    writer.commit_blocking(vec![by_size(i64::MAX as u64, 4)]).expect("prune");
    assert_eq!(store.events_pruned_through().unwrap(), 4, "EV-3: never past the settled mark");

    let one_mib = crate::daemon::retention::Retention { events: 1_000, days: 0, bytes: 1 << 20 };
    let expected = StoreOp::PruneEvents { through_sequence: 0, before_ms: 0, max_rows: crate::daemon::retention::PRUNE_BATCH, settled_through: 100, excess_bytes: 1_100_000 - 1_048_576 };
    assert_eq!(one_mib.due(&store, 0, 100).unwrap(), Some(expected));
    writer.commit_blocking(vec![one_mib.due(&store, 0, 100).unwrap().unwrap()]).expect("prune");
    assert_eq!(store.events_pruned_through().unwrap(), 5, "the 300,000-byte event goes; 800,000 bytes fit in 1 MiB");
    assert_eq!(store.stored_event_bytes().unwrap(), 800_000);
    assert_eq!(one_mib.due(&store, 0, 100).unwrap(), None, "within every bound");
    let unbounded = crate::daemon::retention::Retention { bytes: 0, ..one_mib };
    writer.commit_blocking((7..=8).map(|s| sized(s, 300_000)).collect()).expect("append");
    assert_eq!(unbounded.due(&store, 0, 100).unwrap(), None, "0: no size bound");
    assert!(one_mib.due(&store, 0, 100).unwrap().is_some());
}

/// EV-9: a database from before the size bound (schema 6) gets its stored bytes counted once,
/// by migration 7.
#[test]
fn ev_9_migration_counts_the_bytes_an_older_database_holds() {
    let scratch = Scratch::new();
    let path = scratch.db();
    {
        let (_, writer) = open_pair(&path);
        writer.commit_blocking((1..=3).map(|s| event(s, "a1", 1)).collect()).expect("append");
    }
    let expected: u64 = (1..=3).map(|s| if let StoreOp::AppendEvent { event_json, .. } = event(s, "a1", 1) { event_json.len() as u64 } else { 0 }).sum();
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch("DELETE FROM meta WHERE key = 'events_stored_bytes'; PRAGMA user_version = 6;").unwrap();
    }
    let (store, _writer) = open_pair(&path);
    assert_eq!(store.stored_event_bytes().unwrap(), expected);
}

/// EV-4: marks are replaced per agent and read back whole.
#[test]
fn ev_4_store_keeps_one_mark_per_agent() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    let mark = |agent: &str, n: u32| StoreOp::PutEventMark { agent_id: agent.into(), mark_json: format!(r#"{{"n":{n}}}"#) };
    writer.commit_blocking(vec![mark("a1", 1), mark("a2", 1), mark("a1", 2)]).expect("marks");
    assert_eq!(store.load_event_marks().unwrap(), [("a1".to_string(), r#"{"n":2}"#.to_string()), ("a2".to_string(), r#"{"n":1}"#.to_string())]);
}

/// HIST-4: retention forgets finished requests (terminal, settled, released) last updated
/// before the window, with their terminal events, a bounded number per op; open requests are
/// never touched; the highest terminal sequence removed is remembered. HIST-1: recovery reads
/// open requests only.
#[test]
fn hist_4_store_forgets_old_finished_requests_only() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    writer
        .commit_blocking(vec![
            request("r1", "terminal", "f", 100),
            terminal(1, "r1"),
            request("r2", "settled", "f", 200),
            request("r3", "submitted", "f", 50),
            request("r4", "released", "f", 300),
            request("r5", "terminal", "f", 5_000),
            terminal(2, "r5"),
        ])
        .expect("requests");
    let open: Vec<String> = store.load_open_requests().unwrap().into_iter().map(|r| r.request_id).collect();
    assert_eq!(open, ["r3"], "HIST-1: open requests only");
    assert_eq!(store.oldest_finished_request_ms().unwrap(), Some(100));
    writer.commit_blocking(vec![StoreOp::PruneRequests { before_ms: 1_000, max_rows: 2 }]).expect("prune");
    assert!(store.get_request("r1").unwrap().is_none() && store.get_request("r2").unwrap().is_none());
    assert!(store.get_request("r4").unwrap().is_some(), "bounded to two per op");
    assert_eq!(store.terminal_pruned_through().unwrap(), 1);
    writer.commit_blocking(vec![StoreOp::PruneRequests { before_ms: 1_000, max_rows: 100 }]).expect("prune");
    assert!(store.get_request("r4").unwrap().is_none());
    assert!(store.get_request("r3").unwrap().is_some(), "an open request is never forgotten, however old");
    assert!(store.get_request("r5").unwrap().is_some(), "inside the window");
    assert_eq!(store.terminal_events_after(0, 10).unwrap().iter().map(|e| e.sequence).collect::<Vec<_>>(), [2]);
    assert_eq!(store.last_terminal_sequence().unwrap(), 2);
    writer.commit_blocking(vec![StoreOp::PruneRequests { before_ms: 10_000, max_rows: 100 }]).expect("prune all");
    assert_eq!(store.last_terminal_sequence().unwrap(), 2, "TERM-3: continued after what retention removed");
    assert!(writer.commit_blocking(vec![request("r6", "terminal", "f", 1), terminal(2, "r6")]).is_err(), "2 is never reused");
    writer.commit_blocking(vec![request("r5", "terminal", "f", 5_000), terminal(3, "r5")]).expect("restore r5");
    let retention = crate::daemon::retention::Retention { events: 10, days: 1, bytes: 0 };
    assert_eq!(retention.requests_due(&store, 5_000).unwrap(), None, "r5 is inside one day");
    let day = 86_400_000;
    assert!(retention.requests_due(&store, 5_001 + day).unwrap().is_some());
}

// The WAL stays bounded under sustained writes with a reader always busy beside them (an
// off-thread checkpointer once let it grow to 13 GB: SQLite restarts the WAL only when a write
// transaction finds it fully copied).
#[test]
fn store_wal_stays_bounded_under_sustained_writes_and_reads() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let (store, writer) = open_pair(&path);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reading = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let _ = store.terminal_events_after(0, 10);
            }
        })
    };
    let pad = "x".repeat(2000);
    for n in 0..4000u64 {
        let mut op = event(n + 1, "a1", n);
        if let StoreOp::AppendEvent { event_json, .. } = &mut op {
            *event_json = format!(r#"{{"sequence":{},"pad":"{pad}"}}"#, n + 1);
        }
        writer.commit_blocking(vec![op]).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    reading.join().unwrap();
    let wal = fs::metadata(path.with_file_name("requests.sqlite-wal")).unwrap().len();
    let db = fs::metadata(&path).unwrap().len();
    assert!(db > 8 * 1024 * 1024, "the data reached the database file: {db} bytes");
    assert!(wal < 32 * 1024 * 1024, "WAL of {wal} bytes after {db} bytes of data: it is not being restarted");
}

/// The first column of every row `sql` returns (no parameters), as text.
fn texts(path: &Path, sql: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let rows: Vec<String> = stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    rows
}

/// The steps of SQLite's plan for `sql`, each parameter bound to 0.
fn query_plan(path: &Path, sql: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let zeros = rusqlite::params_from_iter(std::iter::repeat_n(0, stmt.parameter_count()));
    let plan: Vec<String> = stmt.query_map(zeros, |r| r.get::<_, String>(3)).unwrap().map(Result::unwrap).collect();
    plan
}

// Issue 10, HIST-4: the retention queries walk the partial index of finished requests by time
// (one step for the oldest), never every finished request's row: the check runs every 5 s, and
// SQLite left alone chose `requests_by_phase` (75 ms at 100,000 requests).
#[test]
fn store_retention_queries_use_the_finished_by_time_index() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    for sql in [super::op::OLDEST_FINISHED_SQL, super::op::PRUNE_FINISHED_SQL] {
        let plan = query_plan(&path, sql);
        assert!(plan.iter().all(|step| !step.contains("requests_by_phase")), "{sql}: {plan:?}");
        assert!(plan.iter().any(|step| step.contains("requests_finished_by_time")), "{sql}: {plan:?}");
        assert!(plan.iter().all(|step| !step.contains("TEMP B-TREE")), "{sql}: {plan:?}");
    }
    drop(writer);
}

// Issue 10, EV-1: agent events are read by their sequence range (the rowid), filtered or not,
// in sequence order without a sort; no index by agent exists to be kept up (migration 6).
#[test]
fn store_agent_event_reads_walk_the_sequence_range() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    for sql in [super::reader::AGENT_EVENTS_SQL, super::reader::AGENT_EVENTS_OF_SQL] {
        let plan = query_plan(&path, sql);
        let range = "SEARCH agent_events USING INTEGER PRIMARY KEY (rowid>? AND rowid<?)";
        assert!(plan.first().is_some_and(|step| step == range), "{sql}: {plan:?}");
        assert!(plan.iter().all(|step| !step.contains("TEMP B-TREE")), "{sql}: {plan:?}");
    }
    let indexes = texts(&path, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'agent_events'");
    assert!(indexes.is_empty(), "{indexes:?}");
    drop(writer);
}

// EV-1, issue 10: a filtered read scans the sequence range in windows (the shared connection
// is taken again for each), and a page still holds every event of the agent in order, up to
// its limit and its bound, whichever windows they lie in.
#[test]
fn ev_1_a_filtered_read_crosses_scan_windows() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    let window = super::reader::FILTERED_SCAN_WINDOW as u64;
    let (first, second, third) = (5, window + 3, 3 * window + 7);
    writer.commit_blocking(vec![event(first, "a1", 1), event(second, "a1", 2), event(window + 6, "a2", 3), event(third, "a1", 4)]).unwrap();
    let read = |after: u64, through: u64, limit: usize| -> Vec<u64> {
        store.agent_events_after(after, through, limit, &["a1".to_string()]).unwrap().iter().map(|e| e.sequence).collect()
    };
    assert_eq!(read(0, 10 * window, 100), [first, second, third]);
    assert_eq!(read(0, 10 * window, 2), [first, second], "the limit counts across windows");
    assert_eq!(read(first, 10 * window, 100), [second, third]);
    assert_eq!(read(0, third - 1, 100), [first, second], "the bound holds in the last window");
    assert_eq!(read(third, 10 * window, 100), Vec::<u64>::new());
}

// Issue 10: a database of version 5 drops the index by agent when opened and keeps its events;
// filtered reads answer as before.
#[test]
fn store_migration_6_drops_the_event_index_by_agent() {
    let scratch = Scratch::new();
    let path = scratch.db();
    {
        let (_, writer) = open_pair(&path);
        writer.commit_blocking(vec![event(1, "a1", 10), event(2, "a2", 10), event(3, "a1", 11)]).unwrap();
    }
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch("CREATE INDEX agent_events_by_agent ON agent_events(agent_id, sequence); PRAGMA user_version = 5;").unwrap();
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.open_report().migrated_from, 5);
    assert!(texts(&path, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'agent_events'").is_empty());
    let a1: Vec<u64> = store.agent_events_after(0, 100, 100, &["a1".to_string()]).unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(a1, [1, 3]);
    let all: Vec<u64> = store.agent_events_after(1, 100, 100, &[]).unwrap().iter().map(|e| e.sequence).collect();
    assert_eq!(all, [2, 3]);
}

// Issue 10, HIST-1: start reads the open requests from the ids `open_requests` keeps, in id
// order without a sort, and looks each row up by its id: never a scan of the history.
#[test]
fn store_open_requests_query_reads_the_open_ids_only() {
    let plan = plan_on_a_new_store(super::reader::OPEN_REQUESTS_SQL);
    assert!(plan.first().is_some_and(|step| step.starts_with("SCAN o")), "{plan:?}");
    assert!(plan.iter().any(|step| step.starts_with("SEARCH r USING INDEX")), "{plan:?}");
    assert!(plan.iter().all(|step| !step.starts_with("SCAN r") && !step.contains("TEMP B-TREE")), "{plan:?}");
}

/// SQLite's plan for `sql` on a store with its schema and one agent.
fn plan_on_a_new_store(sql: &str) -> Vec<String> {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    let plan = query_plan(&path, sql);
    drop(writer);
    plan
}

// ADM-5, issue 10: a restart reads each agent's latest few written requests finished in the
// last minute through the finished requests' time index (a range of it), never a scan of the
// history.
#[test]
fn store_latest_written_query_reads_a_range_of_the_time_index() {
    let plan = plan_on_a_new_store(super::op::LATEST_WRITTEN_SQL);
    assert!(plan.iter().any(|step| step.contains("USING INDEX requests_finished_by_time (updated_ms>?)")), "{plan:?}");
    assert!(plan.iter().all(|step| !step.contains("SCAN requests") || step.contains("USING INDEX")), "{plan:?}");
}

/// The open requests by a scan of every row: what `open_requests` must always hold.
fn open_by_scan(path: &Path) -> Vec<String> {
    texts(path, &format!("SELECT request_id FROM requests WHERE phase IN ({}) ORDER BY request_id", quoted_phases(true).join(", ")))
}

/// The engine's open (or finished) phases as SQL string literals.
fn quoted_phases(open: bool) -> Vec<String> {
    wakterm_engine::Phase::ALL.iter().filter(|p| p.is_open() == open).map(|p| format!("'{}'", p.as_str())).collect()
}

// HIST-1, migration 5: the writer keeps `open_requests` equal to the open rows through every
// change of phase (each of the 36 ordered pairs, released -> registered included: IDEM-6 frees
// an id; a settled or terminal row refuses every other phase) and through retention's deletes.
#[test]
fn store_open_requests_follow_every_phase_change_and_prune() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let (store, writer) = open_pair(&path);
    let phases = ["registered", "submitted", "bound", "terminal", "settled", "released"];
    let mut n = 0;
    for from in phases {
        for to in phases {
            n += 1;
            let id = format!("r{n:02}");
            writer.commit_blocking(vec![request(&id, from, "f", n)]).unwrap();
            let moved = writer.commit_blocking(vec![request(&id, to, "f", n + 100)]);
            let finished_forever = ["terminal", "settled"].contains(&from) && from != to;
            assert_eq!(moved.is_err(), finished_forever, "{from} -> {to}: {moved:?}");
            let loaded: Vec<String> = store.load_open_requests().unwrap().into_iter().map(|r| r.request_id).collect();
            assert_eq!(loaded, open_by_scan(&path), "after {from} -> {to}");
        }
    }
    assert_eq!(store.load_open_requests().unwrap().len(), 12, "3 open targets of the 4 sources that may move");
    writer.commit_blocking(vec![StoreOp::PruneRequests { before_ms: 1_000, max_rows: 1_000 }]).unwrap();
    assert_eq!(store.load_requests().unwrap().len(), 12, "retention removed the finished ones");
    let loaded: Vec<String> = store.load_open_requests().unwrap().into_iter().map(|r| r.request_id).collect();
    assert_eq!(loaded, open_by_scan(&path));
    let kept = texts(&path, "SELECT request_id FROM open_requests ORDER BY request_id");
    assert_eq!(kept, loaded, "the table holds exactly the open ids");
}

// Issue 10: migration 5 replaces the two whole-history indexes of requests with the ids of the
// open ones, filled from the old phase index, and a database of version 4 opens with the same
// open requests.
#[test]
fn store_migration_5_keeps_the_open_requests() {
    let scratch = Scratch::new();
    let path = scratch.db();
    {
        let (_, writer) = open_pair(&path);
        let phases = ["registered", "terminal", "submitted", "settled", "bound", "released"];
        let ops = phases.iter().enumerate().map(|(i, phase)| request(&format!("r{}", 6 - i), phase, "f", i as u64)).collect();
        writer.commit_blocking(ops).unwrap();
    }
    // Back to version 4's schema, as a database in the field has it.
    let conn = rusqlite::Connection::open(&path).unwrap();
    conn.execute_batch(super::UNDO_MIGRATION_5_FOR_TESTS).unwrap();
    drop(conn);
    let store = Store::open(&path).unwrap();
    assert_eq!(store.open_report().migrated_from, 4);
    let open: Vec<(String, String)> = store.load_open_requests().unwrap().into_iter().map(|r| (r.request_id, r.phase)).collect();
    let expected = [("r2", "bound"), ("r4", "submitted"), ("r6", "registered")];
    assert_eq!(open, expected.map(|(id, phase)| (id.to_string(), phase.to_string())));
    assert_eq!(store.load_requests().unwrap().len(), 6, "the history stays");
    let indexes = texts(&path, "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'requests' AND sql IS NOT NULL ORDER BY name");
    assert_eq!(indexes, ["requests_finished_by_time"]);
}

// HIST-1: the store's SQL lists of phases follow the engine's one partition (`Phase::is_open`):
// migration 5 filled `open_requests` from the open phases and migration 4's partial index (with
// the retention query that names it) holds the finished ones. Both migrations are frozen, so
// changing the partition needs a migration of its own.
#[test]
fn store_sql_phase_lists_follow_the_engine() {
    let fill = format!("WHERE phase IN ({});", quoted_phases(true).join(", "));
    assert!(super::schema::MIGRATION_5.contains(&fill), "{fill}");
    let mut finished = quoted_phases(false);
    let mut listed: Vec<String> = super::op::FINISHED_PHASES_SQL.trim_matches(|c| c == '(' || c == ')').split(", ").map(str::to_string).collect();
    finished.sort();
    listed.sort();
    assert_eq!(listed, finished);
    assert!(super::schema::MIGRATION_4.contains(super::op::FINISHED_PHASES_SQL));
}

/// STORE-2: exactly the ops no caller's answer waits on may wait for company.
#[test]
fn store_2_only_event_stream_and_checkpoint_ops_may_wait() {
    let mark = StoreOp::PutEventMark { agent_id: "a1".into(), mark_json: "{}".into() };
    let checkpoint = StoreOp::PutCheckpoint { agent_id: "a1".into(), checkpoint_json: "{}".into() };
    for op in [event(1, "a1", 1), mark, checkpoint] {
        assert!(op.may_wait(), "{op:?}");
    }
    let prune = StoreOp::PruneRequests { before_ms: 1, max_rows: 1 };
    let events = StoreOp::PruneEvents { through_sequence: 1, before_ms: 1, max_rows: 1, settled_through: 1, excess_bytes: 1 };
    let gone = StoreOp::DeleteAgent { agent_id: "a1".into() };
    for op in [request("r1", "registered", "f", 1), terminal(1, "r1"), agent("a1", "zola"), gone, prune, events] {
        assert!(!op.may_wait(), "{op:?}");
    }
}

/// Submits `ops` and returns the receiver of its one answer.
fn submit_watched(writer: &StoreWriter, ops: Vec<StoreOp>) -> std::sync::mpsc::Receiver<Result<CommitInfo, StoreError>> {
    submit_in_step_watched(writer, ops, false)
}

fn submit_in_step_watched(writer: &StoreWriter, ops: Vec<StoreOp>, followed: bool) -> std::sync::mpsc::Receiver<Result<CommitInfo, StoreError>> {
    let (tx, rx) = std::sync::mpsc::channel();
    writer.submit_in_step(ops, Box::new(move |r| tx.send(r).unwrap()), followed).unwrap();
    rx
}

/// STORE-2: a batch a caller waits on, submitted with another of its engine step behind it,
/// waits for that one (a completion's bound and terminal batches: one fsync, not two), and
/// both commit in one transaction, in order, each answered; a follower that never comes ends
/// the wait at its bound.
#[test]
fn store_2_a_steps_batches_share_one_transaction() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let minutes = std::time::Duration::from_secs(600);
    let writer = StoreWriter::spawn_with_waits(&path, 16, GroupWaits { linger: minutes, step_follow: minutes }).unwrap();
    let bound = submit_in_step_watched(&writer, vec![request("r1", "bound", "f", 1)], true);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(bound.try_recv().is_err(), "the first batch of the step waits for the next");
    let terminal = submit_in_step_watched(&writer, vec![request("r1", "terminal", "f", 2), terminal(1, "r1")], false);
    let (bound, terminal) = (bound.recv().unwrap().unwrap(), terminal.recv().unwrap().unwrap());
    assert_eq!(bound.transaction_id, terminal.transaction_id, "one transaction, one fsync");
    assert_eq!((bound.position, terminal.position, terminal.batches_in_transaction), (0, 1, 2), "in submission order");
    writer.shutdown().unwrap();
    let wait = std::time::Duration::from_millis(200);
    let writer = StoreWriter::spawn_with_waits(&path, 16, GroupWaits { linger: minutes, step_follow: wait }).unwrap();
    let started = std::time::Instant::now();
    let lonely = submit_in_step_watched(&writer, vec![request("r2", "registered", "f", 3)], true);
    lonely.recv().unwrap().expect("committed without its follower");
    assert!(started.elapsed() >= wait && started.elapsed() < minutes / 2, "waited {:?} for a follower that never came", started.elapsed());
}

/// STORE-2: a batch of events waits for the next batch a caller waits on and commits in its
/// transaction, first (FIFO); that batch does not wait at all, even with a linger of minutes;
/// shutdown commits a waiting batch at once.
#[test]
fn store_2_events_ride_in_the_next_urgent_transaction_which_never_waits() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let minutes = std::time::Duration::from_secs(600);
    let writer = StoreWriter::spawn_with_linger(&path, 16, minutes).unwrap();
    let events = submit_watched(&writer, vec![event(1, "a1", 1), StoreOp::PutEventMark { agent_id: "a1".into(), mark_json: "{}".into() }]);
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(events.try_recv().is_err(), "the events wait for company");
    let started = std::time::Instant::now();
    let request = submit_watched(&writer, vec![request("r1", "registered", "f", 1)]);
    let request = request.recv().unwrap().expect("request committed");
    assert!(started.elapsed() < minutes / 2, "a batch a caller waits on does not wait");
    let events = events.recv().unwrap().expect("events committed");
    assert_eq!(events.transaction_id, request.transaction_id, "one transaction, one fsync");
    assert_eq!((events.position, request.position, request.batches_in_transaction), (0, 1, 2), "in submission order");
    // Alone, a waiting batch is committed by shutdown without waiting out the linger.
    let late = submit_watched(&writer, vec![event(2, "a1", 2)]);
    let started = std::time::Instant::now();
    writer.shutdown().unwrap();
    late.recv().unwrap().expect("committed at shutdown");
    assert!(started.elapsed() < minutes / 2, "shutdown does not wait out the linger");
    assert_eq!(Store::open(&path).unwrap().last_event_sequence().unwrap(), 2);
}

/// STORE-2: a lone batch of events is committed once its linger has passed, not before.
#[test]
fn store_2_a_lone_batch_of_events_commits_when_its_linger_ends() {
    let scratch = Scratch::new();
    let linger = std::time::Duration::from_millis(300);
    let writer = StoreWriter::spawn_with_linger(&scratch.db(), 16, linger).unwrap();
    let started = std::time::Instant::now();
    let events = submit_watched(&writer, vec![event(1, "a1", 1)]);
    events.recv().unwrap().expect("committed alone");
    assert!(started.elapsed() >= linger, "committed after {:?}, before the linger ended", started.elapsed());
}

/// STORE-3: the WAL is copied beside the writer (the housekeeping thread's own connection): a
/// few hundred WAL pages (far below the writer's automatic checkpoint at 1,000) reach the
/// database file itself once `CHECKPOINT_AFTER_COMMITS` commits have passed. A copy of the
/// database file alone, without its WAL, shows what was copied.
#[test]
fn store_3_checkpoints_run_beside_the_writer() {
    let scratch = Scratch::new();
    let path = scratch.db();
    let writer = StoreWriter::spawn(&path).unwrap();
    // Counted from the open: exactly one copy falls due, so none runs while the file is copied.
    let commits = super::limits::CHECKPOINT_AFTER_COMMITS * 3 / 2;
    for n in 0..commits {
        writer.commit_blocking(vec![request(&format!("r{n}"), "registered", "f", n)]).unwrap();
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while writer.stats().checkpoints == 0 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint within 10 s of {commits} commits");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let copy = scratch.0.join("copy.sqlite");
    fs::copy(&path, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    let rows: u64 = conn.query_row("SELECT count(*) FROM requests", [], |row| row.get(0)).expect("the database file alone holds the schema and rows: they were copied");
    assert!(rows >= super::limits::CHECKPOINT_AFTER_COMMITS, "the database file alone holds {rows} of {commits} requests");
    drop(conn);
    writer.shutdown().unwrap();
}

/// STORE-4: once the database file (or its WAL) at its path is no longer the one the writer
/// opened (removed, renamed, replaced while the daemon ran), every commit fails with
/// `FileReplaced` and nothing is committed: the writer used to go on committing into the
/// unlinked file, acknowledging batches a restart would never find.
#[test]
fn store_4_a_database_removed_or_replaced_under_the_writer_commits_nothing() {
    for (what, file) in [("the database removed", ""), ("the database replaced", ""), ("the WAL removed", "-wal")] {
        let scratch = Scratch::new();
        let path = scratch.db();
        let writer = StoreWriter::spawn(&path).unwrap();
        writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
        let target = std::path::PathBuf::from(format!("{}{file}", path.display()));
        let aside = target.with_extension("aside");
        std::fs::rename(&target, &aside).unwrap();
        if what.ends_with("replaced") {
            std::fs::copy(&aside, &target).unwrap();
        }
        // The writer looks at most this often (a busy writer's files are not old).
        std::thread::sleep(writer::FILES_CHECK_EVERY + std::time::Duration::from_millis(10));
        let failed = writer.commit_blocking(vec![request("r1", "registered", "fp1", 10)]);
        assert_eq!(failed, Err(StoreError::FileReplaced { path: target.clone() }), "{what}");
        assert!(failed.unwrap_err().to_string().contains("Restart the daemon"), "{what}: the error says what to do");
        assert!(writer.commit_blocking(vec![agent("a2", "mila")]).is_err(), "{what}: and every commit after it");
        drop(writer);
        if what.ends_with("removed") {
            std::fs::rename(&aside, &target).unwrap();
        }
        let store = Store::open(&path).unwrap();
        assert!(store.load_open_requests().unwrap().is_empty(), "{what}: nothing reached the file opened first");
    }
}

/// STORE-1: what the watermark remembers is checked before anything is written. A database
/// whose WAL was lost (its main file from before its commits) was given a schema and a new
/// store id, its WAL deleted, and only then refused, naming the store id it had just made; a
/// deleted database was created again. Both are now refused with the file as it was.
#[test]
fn store_1_a_lost_database_is_refused_before_anything_is_written() {
    let scratch = Scratch::new();
    let db = scratch.db();
    let name = db.file_name().unwrap().to_string_lossy().to_string();
    let side = |suffix: &str| db.with_file_name(format!("{name}{suffix}"));
    let before_commits = {
        let (_store, writer) = open_pair(&db);
        let before = fs::read(&db).unwrap(); // the main file; the commits below stay in the WAL
        writer.commit_blocking(vec![agent("a1", "zola"), request("r1", "registered", "fp1", 1)]).unwrap();
        writer.commit_blocking(vec![request("r1", "terminal", "fp1", 2)]).unwrap();
        before
    };
    for suffix in ["-wal", "-shm"] {
        let _ = fs::remove_file(side(suffix));
    }
    fs::write(&db, &before_commits).unwrap();
    let error = StoreWriter::spawn(&db).err().expect("refused").to_string();
    assert!(error.contains("watermark"), "{error}");
    assert_eq!(fs::read(&db).unwrap(), before_commits, "nothing was written to the database");
    // (The read-only look may leave an empty WAL beside it: nothing in it.)
    assert_eq!(fs::metadata(side("-wal")).map_or(0, |m| m.len()), 0, "nothing was logged");
    fs::remove_file(&db).unwrap();
    let error = StoreWriter::spawn(&db).err().expect("refused").to_string();
    assert!(error.contains("no identity"), "{error}");
    assert!(!db.exists(), "a deleted database is not created again");
}

/// STORE-2: side files are private AND their owner's to write: a start refused for a
/// read-only database left 0400 side files (SQLite gives them the database's mode), and every
/// start after the database was made writable again failed on them. Run by a user other than
/// root (for whom nothing is read-only), the read-only database itself is refused by name.
#[test]
fn store_2_a_read_only_database_is_refused_by_name_and_its_side_files_are_repaired() {
    let scratch = Scratch::new();
    let db = scratch.db();
    drop(open_pair(&db));
    let shm = db.with_file_name(format!("{}-shm", db.file_name().unwrap().to_string_lossy()));
    fs::write(&shm, b"").unwrap();
    fs::set_permissions(&shm, fs::Permissions::from_mode(0o400)).unwrap();
    if rustix::process::geteuid().is_root() {
        eprintln!("root writes a 0400 file: the refusal part is checked by other users only");
    } else {
        fs::set_permissions(&db, fs::Permissions::from_mode(0o400)).unwrap();
        let error = StoreWriter::spawn(&db).err().expect("refused").to_string();
        assert!(error.contains(&db.display().to_string()) && error.contains("chmod 600"), "{error}");
        fs::set_permissions(&db, fs::Permissions::from_mode(0o600)).unwrap();
    }
    // The repair itself, as any user sees it (root's SQLite would also just write the file).
    schema::repair_private_mode(&db).unwrap();
    assert_eq!(fs::metadata(&shm).unwrap().permissions().mode() & 0o777, 0o600, "repaired at the open");
    let (store, writer) = open_pair(&db);
    writer.commit_blocking(vec![agent("a1", "zola")]).unwrap();
    drop((store, writer));
}

/// CONN-3: an event page is bounded by the stored JSON it holds as well as by rows: it stops
/// at the row that reaches `PAGE_MAX_BYTES` (512 events of 2 MiB made a 1 GiB page per reader,
/// a review); the next page starts after it, filtered or not, and nothing is skipped.
#[test]
fn conn_3_event_pages_are_bounded_by_bytes() {
    let scratch = Scratch::new();
    let (store, writer) = open_pair(&scratch.db());
    let big = |sequence: u64| StoreOp::AppendEvent {
        sequence,
        agent_id: "a1".into(),
        kind: "message.assistant".into(),
        at_ms: 10,
        event_json: format!(r#"{{"sequence":{sequence},"text":"{}"}}"#, "x".repeat(3 << 20)),
    };
    for sequence in 1..=4 {
        writer.commit_blocking(vec![big(sequence)]).unwrap();
    }
    for agents in [vec![], vec!["a1".to_string()]] {
        let first: Vec<u64> = store.agent_events_after(0, 100, 512, &agents).unwrap().iter().map(|e| e.sequence).collect();
        assert_eq!(first, [1, 2, 3], "the third row reaches 8 MiB: {agents:?}");
        let rest: Vec<u64> = store.agent_events_after(3, 100, 512, &agents).unwrap().iter().map(|e| e.sequence).collect();
        assert_eq!(rest, [4]);
    }
}
