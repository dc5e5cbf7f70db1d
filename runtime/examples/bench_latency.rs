//! Latency benchmark of the real `wakterm` binary with one fake Codex agent (--reply-delay-ms 0).
//! Run it with `bash scripts/bench.sh` (release build). Measures, over RUNS runs each:
//!
//! - `agent send` (one-way): wall time from spawning the CLI to its receipt line on stdout
//!   (includes the bounded wait for the observer's acknowledgement, ADM-13);
//! - `agent admit --return-final`: the same, until the request is durably armed (RF-2);
//! - task_complete -> watch: from the fake writing its `task_complete` rollout line (the line's
//!   own millisecond timestamp) to a persistent `agent request watch` subscriber printing the
//!   `completed` event (read time, wall clock). Resolution: 1 ms (the rollout timestamp is
//!   truncated to milliseconds, so this can overstate by <1 ms).
//!
//! Environment: WAKTERM_BIN overrides the binary (default: `wakterm` next to `examples/`);
//! BENCH_RUNS overrides the run count (default 50).
//!
//! `scripts/bench.sh` runs the complete benchmark, `bench_suite.rs`, which includes this file as
//! a module for its helpers; this one stays a quick single-agent look:
//! `CARGO_TARGET_DIR=target/bench cargo run --release -p wakterm-runtime --example bench_latency`.

#[path = "../../tests/tests/support/mod.rs"]
pub(crate) mod support;

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use support::World;

fn main() {
    let runs: usize = std::env::var("BENCH_RUNS").ok().and_then(|v| v.parse().ok()).unwrap_or(50);
    let exe = std::env::var("WAKTERM_BIN").unwrap_or_else(|_| {
        let me = std::env::current_exe().expect("current exe");
        me.parent().and_then(|p| p.parent()).expect("target dir").join("wakterm").display().to_string()
    });
    assert!(std::path::Path::new(&exe).exists(), "no wakterm binary at {exe}");
    let mut w = World::new(&exe);
    w.mux_start();
    let entry = w.ready_agent("zola", "bench reply: {prompt}", &["--reply-delay-ms", "0"]);
    let inc = entry["incarnation"].as_str().expect("incarnation").to_string();
    eprintln!("bench: {exe}, {runs} runs per measurement, data dir {}", w.data.display());

    // (a1) one-way send.
    let mut send_ms = Vec::new();
    for i in 0..runs {
        let completed = w.completed_turns().len();
        let prompt = format!("one-way bench prompt {i}");
        let (ms, receipt) = time_to_receipt(&w, &["agent", "send", "zola", &prompt]);
        assert_eq!(receipt["classification"], "accepted", "{receipt}");
        send_ms.push(ms);
        w.wait_until("the one-way turn completes", || w.completed_turns().len() > completed);
        w.wait_agent("zola", "idle", |z| z["return_final_available"] == true);
    }

    // (a2) admit --return-final, and (b) task_complete -> watch subscriber.
    let after = w.events_after(0).last().and_then(|e| e["terminal_event_sequence"].as_u64()).unwrap_or(0);
    let events = w.subscribe(after);
    let mut admit_ms = Vec::new();
    let mut notify_ms = Vec::new();
    for i in 0..runs {
        let id = support::new_id();
        let prompt = format!("return-final bench prompt {i}");
        let args = ["agent", "admit", "zola", "--incarnation", &inc, "--request-id", &id, "--return-final", &prompt];
        let (ms, receipt) = time_to_receipt(&w, &args);
        assert_eq!(receipt["reply_pending"], true, "{receipt}");
        admit_ms.push(ms);
        let (read_at, event) = loop {
            let (at, event) = events.recv_timeout(support::DEADLINE).expect("the watcher prints the event");
            if event["request_id"] == id.as_str() {
                break (at, event);
            }
        };
        assert_eq!(event["state"], "completed", "{event}");
        let turn = event["provider_turn_id"].as_str().expect("turn").to_string();
        let written = task_complete_time(&w, &turn).expect("the turn's task_complete line");
        let lag = read_at.duration_since(written).unwrap_or(Duration::ZERO);
        notify_ms.push(lag.as_secs_f64() * 1000.0);
        w.wait_agent("zola", "idle", |z| z["return_final_available"] == true);
    }

    println!();
    println!("wakterm latency, {runs} runs each (ms)            median      p90      min      max");
    row("agent send (one-way): invoke -> receipt", &mut send_ms);
    row("agent admit --return-final: invoke -> receipt", &mut admit_ms);
    row("task_complete written -> watch prints event", &mut notify_ms);
}

/// Spawns `wakterm ARGS` and times until its first stdout line (the receipt).
pub(crate) fn time_to_receipt(w: &World, args: &[&str]) -> (f64, Value) {
    let start = Instant::now();
    let mut child = w.cmd(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("spawn");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("receipt line");
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    let _ = child.wait();
    (ms, serde_json::from_str(&line).unwrap_or(Value::Null))
}

/// The wall-clock time stamped on the `task_complete` line of `turn`.
fn task_complete_time(w: &World, turn: &str) -> Option<SystemTime> {
    let line = w
        .rollout_lines()
        .into_iter()
        .find(|l| l["payload"]["type"] == "task_complete" && l["payload"]["turn_id"] == turn)?;
    parse_rfc3339_ms(line["timestamp"].as_str()?)
}

/// `YYYY-MM-DDTHH:MM:SS.mmmZ` -> SystemTime.
pub(crate) fn parse_rfc3339_ms(ts: &str) -> Option<SystemTime> {
    let b = ts.as_bytes();
    if b.len() != 24 || b[23] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| ts.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, s, ms) = (num(11..13)?, num(14..16)?, num(17..19)?, num(20..23)?);
    // Days from civil (Howard Hinnant).
    let y2 = if mo <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let total_ms = ((days * 86_400 + h * 3600 + mi * 60 + s) * 1000 + ms) as u64;
    Some(UNIX_EPOCH + Duration::from_millis(total_ms))
}

fn row(label: &str, samples: &mut [f64]) {
    samples.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    let pct = |p: f64| samples[((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1];
    println!(
        "{label:<48} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
        pct(0.5),
        pct(0.9),
        samples[0],
        samples[samples.len() - 1]
    );
}
