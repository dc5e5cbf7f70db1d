//! Group commit: concurrent submitters share transactions, callbacks fire in FIFO order after
//! COMMIT, and the numbers (single-batch latency, grouped throughput) are printed for the report.
//! Run with `--nocapture` to see them.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use wakterm_runtime::store::{CommitInfo, Store, StoreError, StoreOp, StoreWriter};

const THREADS: usize = 8;
const BATCHES_PER_THREAD: usize = 25;
const LATENCY_SAMPLES: usize = 100;
const THROUGHPUT_BATCHES: usize = 2_000;

struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new() -> Scratch {
        let dir =
            std::env::temp_dir().join(format!("wakterm-store-group-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        Scratch(dir)
    }
    fn db(&self) -> std::path::PathBuf {
        self.0.join("requests.sqlite")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn small_batch(thread: usize, i: usize) -> Vec<StoreOp> {
    vec![StoreOp::PutRequest {
        request_id: format!("t{thread}-r{i}"),
        agent_id: format!("agent-{thread}"),
        phase: "registered".into(),
        fingerprint: format!("fp-{thread}-{i}"),
        record_json: format!(r#"{{"thread":{thread},"i":{i}}}"#),
        updated_ms: i as u64,
    }]
}

/// What each callback saw, in the order callbacks ran (one writer thread, so this is a total order).
type Log = Arc<Mutex<Vec<(usize, Result<CommitInfo, StoreError>)>>>;

#[test]
fn store_group_commit_200_batches_from_8_threads() {
    let scratch = Scratch::new();
    let writer = StoreWriter::spawn(&scratch.db()).unwrap();
    let log: Log = Arc::new(Mutex::new(Vec::new()));
    // Submission order is recorded under the same lock as the submit, so it is the queue order.
    let submitted: Arc<Mutex<Vec<usize>>> = Arc::new(Mutex::new(Vec::new()));
    std::thread::scope(|scope| {
        for thread in 0..THREADS {
            let (writer, log, submitted) = (&writer, Arc::clone(&log), Arc::clone(&submitted));
            scope.spawn(move || {
                for i in 0..BATCHES_PER_THREAD {
                    let ticket = thread * BATCHES_PER_THREAD + i;
                    let log = Arc::clone(&log);
                    let mut order = submitted.lock().unwrap();
                    writer
                        .submit(
                            small_batch(thread, i),
                            Box::new(move |r| log.lock().unwrap().push((ticket, r))),
                        )
                        .unwrap();
                    order.push(ticket);
                }
            });
        }
    });
    let stats_before_shutdown_wait = Instant::now();
    writer.shutdown().unwrap();
    let log = log.lock().unwrap();
    let submitted = submitted.lock().unwrap();
    let batches = THREADS * BATCHES_PER_THREAD;
    assert_eq!(log.len(), batches, "every callback fired exactly once");
    let fired: Vec<usize> = log.iter().map(|(ticket, _)| *ticket).collect();
    assert_eq!(
        &fired, &*submitted,
        "callbacks fire in FIFO submission order"
    );
    let infos: Vec<CommitInfo> = log.iter().map(|(_, r)| r.clone().unwrap()).collect();
    let transactions: std::collections::BTreeSet<u64> =
        infos.iter().map(|i| i.transaction_id).collect();
    assert!(
        transactions.len() < batches,
        "group commit must share transactions: {}",
        transactions.len()
    );
    assert!(infos
        .windows(2)
        .all(|w| (w[0].transaction_id, w[0].position) < (w[1].transaction_id, w[1].position)));
    for info in &infos {
        let size = infos
            .iter()
            .filter(|other| other.transaction_id == info.transaction_id)
            .count();
        assert_eq!(size, info.batches_in_transaction);
    }
    assert_eq!(
        Store::open(&scratch.db())
            .unwrap()
            .load_requests()
            .unwrap()
            .len(),
        batches
    );
    println!(
        "group commit: {batches} batches from {THREADS} threads in {} transactions (drain {:?})",
        transactions.len(),
        stats_before_shutdown_wait.elapsed()
    );
}

fn median(samples: &mut [Duration]) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

#[test]
fn store_commit_latency_and_throughput() {
    let scratch = Scratch::new();
    let writer = StoreWriter::spawn(&scratch.db()).unwrap();
    let mut latencies: Vec<Duration> = (0..LATENCY_SAMPLES)
        .map(|i| {
            let started = Instant::now();
            writer.commit_blocking(small_batch(0, i)).unwrap();
            started.elapsed()
        })
        .collect();
    let single = median(&mut latencies);
    let p99 = latencies[latencies.len() * 99 / 100];

    let (tx, rx) = mpsc::channel();
    let started = Instant::now();
    let mut submitted = 0;
    while submitted < THROUGHPUT_BATCHES {
        let tx = tx.clone();
        match writer.submit(
            small_batch(1, submitted),
            Box::new(move |r| tx.send(r).unwrap()),
        ) {
            Ok(()) => submitted += 1,
            Err(StoreError::Backpressure { .. }) => std::thread::sleep(Duration::from_micros(200)),
            Err(other) => panic!("{other}"),
        }
    }
    for _ in 0..THROUGHPUT_BATCHES {
        rx.recv().unwrap().unwrap();
    }
    let elapsed = started.elapsed();
    let stats = writer.stats();
    println!(
        "single small batch commit latency: median {single:?}, p99 {p99:?} over {LATENCY_SAMPLES}"
    );
    println!(
        "group commit throughput: {THROUGHPUT_BATCHES} batches in {elapsed:?} = {:.0} batches/s, \
         {} transactions in total",
        THROUGHPUT_BATCHES as f64 / elapsed.as_secs_f64(),
        stats.transactions
    );
    assert_eq!(stats.batches as usize, LATENCY_SAMPLES + THROUGHPUT_BATCHES);
    assert!(stats.transactions < stats.batches);
}
