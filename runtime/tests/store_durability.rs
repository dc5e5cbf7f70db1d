//! Durability across a process kill: a child process commits batches and prints each ack; the
//! parent SIGKILLs it mid-stream, reopens the database, and checks that every acked batch is there.
//!
//! The child is this same test binary, re-executed to run `child_writer_until_killed` (ignored
//! in normal runs; it only does something when `CHILD_DB_ENV` names a database).

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use wakterm_runtime::store::{Store, StoreOp, StoreWriter};

const CHILD_DB_ENV: &str = "WAKTERM_STORE_DURABILITY_CHILD_DB";
/// Acks the parent waits for before killing; the child keeps committing past them.
const ACKS_BEFORE_KILL: u64 = 60;
/// Batches the child keeps in flight, so the kill lands inside group commits.
const CHILD_IN_FLIGHT: u64 = 8;
/// The child stops on its own after this many batches if nobody kills it.
const CHILD_BATCHES_MAX: u64 = 100_000;
const CHILD_DEADLINE: Duration = Duration::from_secs(60);

fn batch(i: u64) -> Vec<StoreOp> {
    let request_id = format!("req-{i:06}");
    vec![
        StoreOp::PutRequest {
            request_id: request_id.clone(),
            agent_id: "agent-1".into(),
            phase: "ended".into(),
            fingerprint: format!("fp-{i}"),
            record_json: format!(r#"{{"i":{i}}}"#),
            updated_ms: i,
        },
        StoreOp::AppendTerminal {
            sequence: i,
            request_id,
            event_json: format!(r#"{{"seq":{i}}}"#),
        },
    ]
}

fn submit_numbered(writer: &StoreWriter, i: u64, acks: &std::sync::mpsc::Sender<u64>) {
    let acks = acks.clone();
    let done = Box::new(move |result: Result<_, _>| {
        result.expect("child commit");
        let _ = acks.send(i);
    });
    writer.submit(batch(i), done).expect("child submit");
}

#[test]
#[ignore = "helper process for store_acked_batches_survive_sigkill"]
fn child_writer_until_killed() {
    let Some(db) = std::env::var_os(CHILD_DB_ENV) else {
        return;
    };
    let writer = StoreWriter::spawn(&PathBuf::from(db)).expect("child opens the store");
    let (tx, rx) = std::sync::mpsc::channel::<u64>();
    let mut stdout = std::io::stdout().lock();
    for i in 1..=CHILD_IN_FLIGHT {
        submit_numbered(&writer, i, &tx);
    }
    for next in CHILD_IN_FLIGHT + 1..=CHILD_BATCHES_MAX {
        // Print only after the callback fired, i.e. after COMMIT returned.
        let acked = rx.recv().unwrap();
        writeln!(stdout, "ACK {acked}").unwrap();
        stdout.flush().unwrap();
        submit_numbered(&writer, next, &tx);
    }
}

#[test]
fn store_acked_batches_survive_sigkill() {
    let dir = std::env::temp_dir().join(format!("wakterm-store-kill-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("requests.sqlite");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_writer_until_killed",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_DB_ENV, &db)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acked: Vec<u64> = Vec::new();
    let started = Instant::now();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        if let Some(n) = line.unwrap().strip_prefix("ACK ") {
            acked.push(n.parse().unwrap());
        }
        if acked.len() as u64 >= ACKS_BEFORE_KILL || started.elapsed() > CHILD_DEADLINE {
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix: no destructors, no checkpoint, no clean close.
    let status = child.wait().unwrap();
    assert!(
        !status.success(),
        "the child must have been killed, not finished: {status:?}"
    );
    assert_eq!(
        acked.len() as u64,
        ACKS_BEFORE_KILL,
        "child did not ack in time"
    );

    let store = Store::open(&db).expect("reopen after SIGKILL");
    let last = store.last_terminal_sequence().unwrap();
    let max_acked = *acked.iter().max().unwrap();
    assert!(
        last >= max_acked,
        "acked sequence {max_acked} missing; store has up to {last}"
    );
    for i in &acked {
        assert!(
            store.get_request(&format!("req-{i:06}")).unwrap().is_some(),
            "acked request {i} lost"
        );
    }
    // What committed is whole: sequences 1..=last without gaps, each with its request.
    let events = store.terminal_events_after(0, 10_000).unwrap();
    assert_eq!(
        events.iter().map(|e| e.sequence).collect::<Vec<_>>(),
        (1..=last).collect::<Vec<_>>()
    );
    assert_eq!(store.load_requests().unwrap().len() as u64, last);
    println!(
        "acked {} batches before SIGKILL; {last} were durable after reopen",
        acked.len()
    );
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
