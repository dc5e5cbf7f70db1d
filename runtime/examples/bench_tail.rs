//! The observer's cost per byte of rollout (issue 10): a rollout made of the real-Codex fixture
//! lines is read to its end by one `RolloutTail`, as the observer reads it (no line hashes) and
//! as the output page does (with them), three times each; prints MB/s.
//!
//! Usage: cargo run --release --locked -p wakterm-runtime --example bench_tail [MIB]
//!   MIB: the rollout's size (default 64). The lines are those of
//!   fixtures/codex-0.169/{completed-turn,plan-update,two-turns}.jsonl without `session_meta`
//!   (one per session, not per turn), repeated.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;
use wakterm_runtime::rollout_tail::{RolloutTail, DEFAULT_MAX_BYTES_PER_PAGE, MAX_RECORDS_PER_PAGE};

const FIXTURES: [&str; 3] = ["completed-turn.jsonl", "plan-update.jsonl", "two-turns.jsonl"];

fn main() {
    let mib: u64 = std::env::args().nth(1).map(|a| a.parse().expect("MIB: a whole number")).unwrap_or(64);
    assert!((1..=4096).contains(&mib), "MIB: 1..=4096");
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169");
    let mut lines = Vec::new();
    for name in FIXTURES {
        let text = std::fs::read_to_string(fixtures.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        lines.extend(text.lines().filter(|l| !l.contains("\"type\":\"session_meta\"")).map(str::to_owned));
    }
    assert!(!lines.is_empty(), "no fixture lines");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("rollout-2026-12-01T00-00-00-bench.jsonl");
    let bytes = write_rollout(&path, &lines, mib << 20);
    println!("bench_tail: {} MiB of {} real-Codex fixture lines, repeated", bytes >> 20, lines.len());
    for (label, hashes) in [("observer (no line hashes)", false), ("output page (line hashes)", true)] {
        let rates: Vec<String> = (0..3).map(|_| format!("{:.0}", read_all(&path, hashes) / 1e6)).collect();
        println!("  {label}: {} MB/s", rates.join(" / "));
    }
}

fn write_rollout(path: &PathBuf, lines: &[String], target: u64) -> u64 {
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create the rollout"));
    let mut written = 0u64;
    while written < target {
        for line in lines {
            file.write_all(line.as_bytes()).and_then(|()| file.write_all(b"\n")).expect("write the rollout");
            written += line.len() as u64 + 1;
        }
    }
    file.flush().expect("flush the rollout");
    written
}

/// Bytes per second of one tail reading the whole file.
fn read_all(path: &Path, hashes: bool) -> f64 {
    let started = Instant::now();
    let mut tail = RolloutTail::open(path).expect("open the rollout");
    if hashes {
        tail = tail.with_line_hashes();
    }
    let mut records = 0usize;
    loop {
        let page = tail.read_page(MAX_RECORDS_PER_PAGE, DEFAULT_MAX_BYTES_PER_PAGE).expect("an intact rollout reads");
        records += page.entries.iter().filter(|e| e.record.is_ok()).count();
        if !page.has_more && page.entries.is_empty() {
            break;
        }
    }
    assert!(records > 0);
    tail.offset() as f64 / started.elapsed().as_secs_f64()
}
