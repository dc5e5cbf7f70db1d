//! The complete benchmark of issue 10 (item 6), run by `bash scripts/bench.sh`: the real
//! `wakterm` binary and fake Codex agents (`fake-codex --reply-delay-ms 0`). Every row is printed
//! beside a floor measured on this machine in the same run, with the ratio, as a Markdown table;
//! the table is also written (with the date and the machine) to `target/bench/results.md`.
//!
//! Floors: fsync of a small append; one SQLite commit (WAL, synchronous=FULL; wall and CPU);
//! spawn of `wakterm --version`; one socket round trip to the daemon (`capabilities`); `mux
//! start` on an empty data directory; the daemon's idle CPU with no agent.
//!
//! Rows: `agent admit --return-final` and plain `agent send` receipts, through the CLI and
//! straight on the socket (p50/p99); the same admit with K unrelated `sleep` processes on the
//! machine and without; `agent catalog` and return-final throughput (one socket caller per
//! agent) at each agent count, with the daemon's CPU per admission+completion (utime+stime of
//! its pid); the idle daemon's CPU with the most agents; task_complete written -> persistent
//! `request watch` subscriber prints it, with B agents busy; restart (SIGKILL of the daemon, its
//! agents' holders live on) -> return-final available again with a rollout grown to R MiB.
//!
//! Environment (default, [with BENCH_QUICK=1]): BENCH_RUNS samples per latency row 50 [15];
//! BENCH_AGENTS agent counts, ascending, 1,10,100 [1,3,5]; BENCH_BUSY 50 [5]; BENCH_ROLLOUT_MIB
//! 1024 [64]; BENCH_SLEEPS 1000 [100]; BENCH_LOAD_SECS 10 [3] per throughput run;
//! BENCH_IDLE_SECS 10 [3]; BENCH_RESULTS the results file; BENCH_COMMIT the code's description
//! for the header; WAKTERM_BIN the binary (default: `wakterm` next to `examples/`).
//!
//! Every wait is bounded; a failure fails the rows of its phase with the reason (printed in the
//! table) and the run goes on. Whatever the run started (daemons, agents' holders and fakes,
//! `sleep`s, watchers) is killed and its temp root removed at the end, on a panic (Drop guards)
//! and on SIGINT/SIGTERM (a flag every wait checks). Exit: 0, 1 when a row failed, 130 when
//! interrupted.

#[path = "bench_latency.rs"]
#[allow(dead_code)]
mod latency;

use latency::support::{self, World};
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

/// The fake's reply template and options (no think time: the daemon's cost shows).
const REPLY: &str = "bench reply: {prompt}";
const FAKE_OPTIONS: [&str; 2] = ["--reply-delay-ms", "0"];
/// Bound of one socket call (the CLI's own bound is 60 s too).
const CALL_LIMIT: Duration = Duration::from_secs(60);
/// Bound of one admission's terminal event.
const EVENT_LIMIT: Duration = Duration::from_secs(60);
/// Bound of agents becoming idle / available (a batch of ten at a time).
const AGENT_LIMIT: Duration = Duration::from_secs(180);
/// Bound of the daemon catching up with, and restarting over, the grown rollout.
const ROLLOUT_LIMIT: Duration = Duration::from_secs(900);
/// Agents are started this many at a time, each batch made ready before the next.
const START_BATCH: usize = 10;
/// How long a started agent may stay `unknown` in the catalog before its baseline turn is sent.
const UNKNOWN_GRACE: Duration = Duration::from_secs(5);
const POLL: Duration = Duration::from_millis(20);
/// A throughput caller gives up when its admissions have been refused for this long in a row.
const REFUSAL_LIMIT: Duration = Duration::from_secs(30);
/// MON-4: the size of each assistant message of the burst row's loud agent (under RF-9's 2 MiB).
const BURST_MESSAGE_BYTES: usize = 1_900_000;
/// Issue 10's measured peak (10 agents); the 100-agent target is 5x it.
const TODAYS_PEAK_PER_SEC: f64 = 254.0;

// ---------------------------------------------------------------------------------------------
// Configuration, interruption, bounded waits

struct Config {
    quick: bool,
    runs: usize,
    agents: Vec<usize>,
    busy: usize,
    rollout_mib: u64,
    burst_messages: usize,
    sleeps: usize,
    load_secs: f64,
    idle_secs: f64,
    results: PathBuf,
    exe: String,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v.trim().parse().unwrap_or_else(|_| panic!("{name}={v} is not a valid value")),
        _ => default,
    }
}

impl Config {
    fn from_env() -> Config {
        let quick = std::env::var("BENCH_QUICK").is_ok_and(|v| v == "1");
        let here = std::env::current_exe().expect("current exe");
        let release = here.parent().and_then(Path::parent).expect("the target profile directory");
        let exe = std::env::var("WAKTERM_BIN").unwrap_or_else(|_| release.join("wakterm").display().to_string());
        assert!(Path::new(&exe).exists(), "no wakterm binary at {exe}");
        let default_results = release.parent().unwrap_or(release).join("results.md");
        let counts = env_or("BENCH_AGENTS", if quick { "1,3,5" } else { "1,10,100" }.to_string());
        let agents: Vec<usize> = counts.split(',').map(|n| n.trim().parse().unwrap_or_else(|_| panic!("BENCH_AGENTS={counts}: not a list of numbers"))).collect();
        assert!(!agents.is_empty() && agents[0] >= 1 && agents.windows(2).all(|w| w[0] < w[1]), "BENCH_AGENTS={counts}: give ascending counts >= 1");
        Config {
            quick,
            runs: env_or("BENCH_RUNS", if quick { 15 } else { 50 }).max(2),
            busy: env_or("BENCH_BUSY", if quick { 5 } else { 50 }),
            rollout_mib: env_or("BENCH_ROLLOUT_MIB", if quick { 64 } else { 1024 }),
            burst_messages: env_or("BENCH_BURST_MESSAGES", if quick { 20 } else { 100 }),
            sleeps: env_or("BENCH_SLEEPS", if quick { 100 } else { 1000 }),
            load_secs: env_or("BENCH_LOAD_SECS", if quick { 3.0 } else { 10.0 }),
            idle_secs: env_or("BENCH_IDLE_SECS", if quick { 3.0 } else { 10.0 }),
            results: std::env::var_os("BENCH_RESULTS").map(PathBuf::from).unwrap_or(default_results),
            agents,
            exe,
        }
    }

    fn most_agents(&self) -> usize {
        *self.agents.last().expect("at least one count")
    }
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// SIGINT/SIGTERM only raise a flag; every wait checks it and unwinds, so the Drop guards run.
fn install_signal_flag() {
    let handler = on_signal as extern "C" fn(libc::c_int);
    for signal in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { libc::signal(signal, handler as libc::sighandler_t) };
    }
}

fn check_interrupt() {
    if INTERRUPTED.load(Ordering::SeqCst) {
        panic!("interrupted by a signal");
    }
}

/// Sleeps in short steps, checking for an interruption.
fn pause(total: Duration) {
    let end = Instant::now() + total;
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        check_interrupt();
        std::thread::sleep(left.min(Duration::from_millis(100)));
    }
}

/// Polls `probe` until it answers `Ok`; panics with `what` and the last answer after `limit`.
fn wait_for<T>(what: &str, limit: Duration, mut probe: impl FnMut() -> Result<T, String>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        check_interrupt();
        let last = match probe() {
            Ok(value) => return value,
            Err(why) => why,
        };
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}; last: {last}");
        std::thread::sleep(POLL);
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".to_string())
}

// ---------------------------------------------------------------------------------------------
// The daemon's socket (one JSON line each way per connection; `watch` streams lines)

#[derive(Clone)]
struct Sock(PathBuf);

impl Sock {
    /// The socket and pid `mux status` names.
    fn of(w: &World) -> (Sock, u32) {
        let status = w.ok(&["mux", "status"]);
        let socket = status["socket"].as_str().unwrap_or_else(|| panic!("mux status names no socket: {status}"));
        let pid = status["pid"].as_u64().unwrap_or_else(|| panic!("mux status names no pid: {status}"));
        (Sock(PathBuf::from(socket)), pid as u32)
    }

    fn open(&self, request: &Value) -> Result<UnixStream, String> {
        let mut stream = UnixStream::connect(&self.0).map_err(|e| format!("connect {}: {e}", self.0.display()))?;
        stream.set_read_timeout(Some(CALL_LIMIT)).map_err(|e| e.to_string())?;
        stream.set_write_timeout(Some(CALL_LIMIT)).map_err(|e| e.to_string())?;
        let mut line = serde_json::to_vec(request).expect("requests serialise");
        line.push(b'\n');
        stream.write_all(&line).map_err(|e| format!("send: {e}"))?;
        Ok(stream)
    }

    /// One request, its reply line `{"exit_code", "body"}`, and the wall time of both.
    fn timed(&self, request: &Value) -> (f64, Result<Value, String>) {
        let start = Instant::now();
        let reply = self.open(request).and_then(|stream| {
            let mut line = String::new();
            match BufReader::new(stream).read_line(&mut line) {
                Ok(0) => Err("the daemon closed the connection without answering".to_string()),
                Ok(_) => Ok(line),
                Err(e) => Err(format!("no reply within {CALL_LIMIT:?}: {e}")),
            }
        });
        let ms = start.elapsed().as_secs_f64() * 1000.0;
        (ms, reply.and_then(|line| serde_json::from_str(&line).map_err(|e| format!("unreadable reply {line:?}: {e}"))))
    }

    fn call(&self, request: &Value) -> Result<Value, String> {
        self.timed(request).1
    }

    fn catalog(&self) -> Result<Vec<Value>, String> {
        let reply = self.call(&json!({"op": "catalog"}))?;
        reply["body"]["agents"].as_array().cloned().ok_or_else(|| format!("not a catalog: {reply}"))
    }

    /// The sequence of the last terminal event (`watch --once` ends with it).
    fn last_sequence(&self) -> u64 {
        let stream = self.open(&json!({"op": "watch", "after": 0, "once": true})).unwrap_or_else(|e| panic!("watch --once: {e}"));
        for line in BufReader::new(stream).lines() {
            let line = line.unwrap_or_else(|e| panic!("watch --once: {e}"));
            let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if value["end"] == true {
                return value["last_sequence"].as_u64().unwrap_or(0);
            }
        }
        panic!("watch --once ended without its end line")
    }
}

/// An admission request line, as `agent send` / `agent admit` build it.
fn admission(target: &str, incarnation: Option<&str>, request_id: &str, prompt: &str, return_final: bool) -> Value {
    json!({
        "op": "admit",
        "operation": if incarnation.is_some() { "admit" } else { "send" },
        "target": target,
        "exact_agent_id": false,
        "incarnation": incarnation,
        "request_id": request_id,
        "prompt": prompt,
        "paste_mode": "bracketed",
        "return_mode": if return_final { "return_final" } else { "one_way" },
        "final_timeout_ms": 0,
    })
}

/// `Ok` for an accepted receipt (armed, when return-final); else `classification/reason`.
fn accepted(receipt: &Value, return_final: bool) -> Result<(), String> {
    if receipt["classification"] == "accepted" && (!return_final || receipt["reply_pending"] == true) {
        return Ok(());
    }
    let reason = receipt["reason"].as_str().or(receipt["error"].as_str()).unwrap_or("no reason");
    Err(format!("{}/{reason}", receipt["classification"].as_str().unwrap_or("error")))
}

/// One persistent `watch` on the socket, handing each terminal event to whoever expects its
/// request id (registered before the admission is sent, so a fast completion is never missed).
/// When the watcher read an event, and the event.
type Arrival = (SystemTime, Value);
type Waiters = Arc<Mutex<HashMap<String, mpsc::Sender<Arrival>>>>;

struct Watcher {
    waiting: Waiters,
    failure: Arc<Mutex<Option<String>>>,
    stream: UnixStream,
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(sock: &Sock) -> Watcher {
        let after = sock.last_sequence();
        let stream = sock.open(&json!({"op": "watch", "after": after, "once": false})).unwrap_or_else(|e| panic!("watch: {e}"));
        let waiting: Waiters = Arc::default();
        let failure: Arc<Mutex<Option<String>>> = Arc::default();
        let read = stream.try_clone().expect("clone the watch stream");
        let (waiting2, failure2) = (waiting.clone(), failure.clone());
        let reader = std::thread::spawn(move || {
            let mut read = BufReader::new(read);
            let why = loop {
                let mut line = String::new();
                match read.read_line(&mut line) {
                    Ok(0) => break "the daemon closed the watch stream".to_string(),
                    Err(e) => break format!("watch stream: {e}"),
                    Ok(_) => {}
                }
                let at = SystemTime::now();
                let value: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
                if let Some(id) = value["event"]["request_id"].as_str() {
                    if let Some(tx) = waiting2.lock().expect("waiters").remove(id) {
                        let _ = tx.send((at, value["event"].clone()));
                    }
                } else if value.get("error").is_some() {
                    break format!("watch stream error: {value}");
                }
            };
            *failure2.lock().expect("failure") = Some(why);
        });
        Watcher { waiting, failure, stream, reader: Some(reader) }
    }

    fn expect(&self, request_id: &str) -> mpsc::Receiver<Arrival> {
        let (tx, rx) = mpsc::channel();
        self.waiting.lock().expect("waiters").insert(request_id.to_string(), tx);
        rx
    }

    fn forget(&self, request_id: &str) {
        self.waiting.lock().expect("waiters").remove(request_id);
    }

    /// The request's terminal event, within `limit`.
    fn event(&self, rx: &mpsc::Receiver<Arrival>, request_id: &str, limit: Duration) -> Arrival {
        self.try_event(rx, request_id, limit).unwrap_or_else(|| {
            let failure = self.failure.lock().expect("failure").clone().unwrap_or_else(|| "the watch stream is open".into());
            panic!("no terminal event for request {request_id} within {limit:?} ({failure})")
        })
    }

    fn try_event(&self, rx: &mpsc::Receiver<Arrival>, request_id: &str, limit: Duration) -> Option<Arrival> {
        let deadline = Instant::now() + limit;
        loop {
            check_interrupt();
            if let Ok(arrival) = rx.recv_timeout(Duration::from_millis(100)) {
                return Some(arrival);
            }
            if Instant::now() >= deadline {
                self.forget(request_id);
                return None;
            }
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Agents

#[derive(Clone, Debug)]
struct Agent {
    name: String,
    incarnation: String,
}

/// Polls the socket catalog until every named agent's entry satisfies `ready`; returns them.
fn wait_catalog(sock: &Sock, names: &[String], what: &str, limit: Duration, ready: impl Fn(&Value) -> bool) -> Vec<Value> {
    wait_for(what, limit, || {
        let catalog = sock.catalog()?;
        let mut entries = Vec::new();
        let mut behind = Vec::new();
        for name in names {
            match catalog.iter().find(|e| e["name"] == name.as_str()) {
                Some(e) if ready(e) => entries.push(e.clone()),
                Some(e) => behind.push(format!("{name}: state {} reason {} detail {}", e["state"], e["return_final_unavailable_reason"], e["observer_detail"])),
                None => behind.push(format!("{name}: not in the catalog")),
            }
        }
        if behind.is_empty() {
            Ok(entries)
        } else {
            Err(format!("{} of {} not there yet, e.g. {}", behind.len(), names.len(), behind[0]))
        }
    })
}

fn available(entry: &Value) -> bool {
    entry["state"] == "idle" && entry["return_final_available"] == true
}

/// The agents of a world: every name started, and those made ready (baseline turn done,
/// return-final available), in start order.
#[derive(Default)]
struct Fleet {
    started: Vec<String>,
    baselined: HashSet<String>,
    ready: Vec<Agent>,
    /// Agents given their baseline turn while the catalog still said `unknown`, UNKNOWN_GRACE
    /// after their start (see add_agents).
    sent_while_unknown: usize,
}

/// Makes `total` agents `PREFIX<i>` ready, ten at a time: start, wait idle, one baseline turn
/// each, wait return-final available (World::ready_agent, batched). Agents an earlier, failed
/// call started but did not make ready are taken up first. An agent the catalog still calls
/// `unknown` UNKNOWN_GRACE after its start gets its baseline turn anyway (the fake is up by
/// then; the turn makes the daemon look again), and is counted.
fn add_agents(w: &World, sock: &Sock, fleet: &mut Fleet, total: usize, prefix: &str) {
    while fleet.ready.len() < total {
        let is_ready = |name: &str, fleet: &Fleet| fleet.ready.iter().any(|a| a.name == name);
        let mut batch: Vec<String> = fleet.started.iter().filter(|n| !is_ready(n, fleet)).take(START_BATCH).cloned().collect();
        while batch.len() < START_BATCH && fleet.started.len() < total {
            check_interrupt();
            let name = format!("{prefix}{}", fleet.started.len());
            w.start_agent(&name, REPLY, &FAKE_OPTIONS);
            fleet.started.push(name.clone());
            batch.push(name);
        }
        let fresh: Vec<String> = batch.iter().filter(|n| !fleet.baselined.contains(*n)).cloned().collect();
        let since = Instant::now();
        let entries = wait_catalog(sock, &fresh, "the started agents to be idle", AGENT_LIMIT, |e| {
            e["state"] == "idle" || (e["state"] == "unknown" && since.elapsed() >= UNKNOWN_GRACE)
        });
        fleet.sent_while_unknown += entries.iter().filter(|e| e["state"] == "unknown").count();
        for name in &fresh {
            let out = w.run(&["agent", "send", name, "baseline turn"]);
            assert_eq!(out.code, 0, "baseline send to {name}: {out:?}");
            fleet.baselined.insert(name.clone());
        }
        let entries = wait_catalog(sock, &batch, "the baseline turns to complete", AGENT_LIMIT, available);
        for (name, entry) in batch.iter().zip(entries) {
            let incarnation = entry["incarnation"].as_str().unwrap_or_else(|| panic!("{name} has no incarnation: {entry}")).to_string();
            fleet.ready.push(Agent { name: name.clone(), incarnation });
        }
        eprintln!("bench: {} agents ready", fleet.ready.len());
    }
}

// ---------------------------------------------------------------------------------------------
// Measurements

fn percentile(samples: &[f64], q: f64) -> f64 {
    assert!(!samples.is_empty(), "no samples");
    let mut sorted = samples.to_vec();
    sorted.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    sorted[((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1]
}

/// utime+stime of a process, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    stat_parent_and_cpu(pid).unwrap_or_else(|| panic!("daemon pid {pid} is gone")).1
}

/// CPU seconds by who spent them: the daemon, the agents' holders, the fake Codex processes
/// under them, this benchmark (its socket callers and watcher), and the machine's busy time
/// over all cores (`/proc/stat`), to show where a throughput row's cores went.
#[derive(Clone, Copy, Default)]
struct CpuSplit {
    daemon: f64,
    holders: f64,
    agents: f64,
    bench: f64,
    machine_busy: f64,
}

impl CpuSplit {
    /// A holder is a process running `__holder` with a socket under this world's data
    /// directory; an agent is a child of one.
    fn now(daemon: u32, data: &Path) -> CpuSplit {
        let data = data.to_string_lossy().into_owned();
        let mut holders = HashSet::new();
        let mut parents = Vec::new();
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else { continue };
            let Some((ppid, cpu)) = stat_parent_and_cpu(pid) else { continue };
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains("__holder") && cmdline.contains(&data) {
                holders.insert(pid);
            }
            parents.push((pid, ppid, cpu));
        }
        let mut split = CpuSplit { machine_busy: machine_busy_seconds(), ..CpuSplit::default() };
        for (pid, ppid, cpu) in parents {
            if pid == daemon {
                split.daemon += cpu;
            } else if holders.contains(&pid) {
                split.holders += cpu;
            } else if holders.contains(&ppid) {
                split.agents += cpu;
            } else if pid == std::process::id() {
                split.bench += cpu;
            }
        }
        split
    }

    /// `self` - `before`, each part per completion, as a note.
    fn per_completion(&self, before: &CpuSplit, completions: usize, secs: f64) -> String {
        let n = completions.max(1) as f64;
        let ms = |after: f64, before: f64| (after - before) * 1000.0 / n;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        format!(
            "CPU per admission+completion by process: daemon {:.2} ms, holders {:.2} ms, fake Codex {:.2} ms, this benchmark's callers {:.2} ms; the machine was busy {:.0} % of its {cores} cores",
            ms(self.daemon, before.daemon),
            ms(self.holders, before.holders),
            ms(self.agents, before.agents),
            ms(self.bench, before.bench),
            (self.machine_busy - before.machine_busy) * 100.0 / (secs.max(1e-9) * cores)
        )
    }
}

/// The parent pid and utime+stime (seconds) of a live process; None when it is gone.
fn stat_parent_and_cpu(pid: u32) -> Option<(u32, f64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((fields.get(1)?.parse().ok()?, ticks as f64 / clock_ticks_per_second()))
}

/// Busy time of all cores together, in seconds: user, nice, system, irq and softirq (not idle,
/// iowait, the time the hypervisor stole, nor guest time, which user already counts).
fn machine_busy_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let cpu = stat.lines().next().unwrap_or_default();
    let ticks: Vec<u64> = cpu.split_whitespace().skip(1).filter_map(|t| t.parse().ok()).collect();
    let busy: u64 = [0, 1, 2, 5, 6].iter().filter_map(|&i| ticks.get(i)).sum();
    busy as f64 / clock_ticks_per_second()
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// CPU time of the calling thread, in seconds.
fn thread_cpu_seconds() -> f64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// The daemon's CPU as % of one core over `secs` of doing nothing.
fn idle_cpu(pid: u32, secs: f64) -> f64 {
    let (cpu, start) = (cpu_seconds(pid), Instant::now());
    pause(Duration::from_secs_f64(secs));
    (cpu_seconds(pid) - cpu) / start.elapsed().as_secs_f64() * 100.0
}

fn processes_on_machine() -> usize {
    std::fs::read_dir("/proc").map(|d| d.flatten().filter(|e| e.file_name().to_str().is_some_and(|n| n.parse::<u32>().is_ok())).count()).unwrap_or(0)
}

#[derive(Clone, Copy, Debug)]
enum Via {
    Cli,
    Socket,
}

/// `runs` serial admissions to one idle agent, timed invoke -> receipt; each turn is let
/// complete (the terminal event, or for one-way its task_complete line) and the agent is
/// available again before the next. Returns the receipt times and, for each turn, the time from
/// seeing its completion to the catalog saying return-final is available again.
fn serial(w: &World, sock: &Sock, watcher: &Watcher, agent: &Agent, via: Via, return_final: bool, runs: usize) -> (Vec<f64>, Vec<f64>) {
    serial_from(w, sock, watcher, agent, via, return_final, 0..runs)
}

/// `serial` over the samples numbered `numbers` (each prompt names its number).
fn serial_from(w: &World, sock: &Sock, watcher: &Watcher, agent: &Agent, via: Via, return_final: bool, numbers: std::ops::Range<usize>) -> (Vec<f64>, Vec<f64>) {
    let mut samples = Vec::with_capacity(numbers.len());
    let mut again = Vec::with_capacity(numbers.len());
    for i in numbers {
        check_interrupt();
        let id = support::new_id();
        let prompt = format!("bench prompt {i} {via:?}");
        let inc = return_final.then_some(agent.incarnation.as_str());
        let events = return_final.then(|| watcher.expect(&id));
        let turns = if return_final { 0 } else { w.completed_turns().len() };
        let (ms, receipt) = match via {
            Via::Socket => {
                let (ms, reply) = sock.timed(&admission(&agent.name, inc, &id, &prompt, return_final));
                (ms, reply.unwrap_or_else(|e| panic!("admission on the socket: {e}"))["body"].clone())
            }
            Via::Cli if return_final => {
                let inc = &agent.incarnation;
                latency::time_to_receipt(w, &["agent", "admit", &agent.name, "--incarnation", inc, "--request-id", &id, "--return-final", &prompt])
            }
            Via::Cli => latency::time_to_receipt(w, &["agent", "send", &agent.name, &prompt]),
        };
        if let Err(why) = accepted(&receipt, return_final) {
            panic!("admission {i} via {via:?} to {} was not accepted ({why}): {receipt}", agent.name);
        }
        samples.push(ms);
        match events {
            Some(rx) => {
                let (_, event) = watcher.event(&rx, &id, EVENT_LIMIT);
                assert_eq!(event["state"], "completed", "terminal event of {id}: {event}");
            }
            None => wait_for("the one-way turn to complete", EVENT_LIMIT, || {
                let now = w.completed_turns().len();
                if now > turns { Ok(()) } else { Err(format!("{now} task_complete lines")) }
            }),
        }
        let completed = Instant::now();
        wait_catalog(sock, std::slice::from_ref(&agent.name), "the agent to be available again", AGENT_LIMIT, available);
        again.push(completed.elapsed().as_secs_f64() * 1000.0);
    }
    (samples, again)
}

/// "WHAT p50 X ms, max Y ms" of the catalog's lag after each completion.
fn lag_text(what: &str, again: &[f64]) -> String {
    let max = again.iter().copied().fold(0.0, f64::max);
    format!("{what} p50 {:.0} ms, max {max:.0} ms", percentile(again, 0.5))
}

/// What a throughput run measured.
#[derive(Default)]
struct Load {
    completions: usize,
    secs: f64,
    daemon_cpu_secs: f64,
    receipt_ms: Vec<f64>,
    rejected: BTreeMap<String, usize>,
    /// Request id -> when the socket watcher read its terminal event.
    completed: HashMap<String, SystemTime>,
}

impl Load {
    fn per_sec(&self) -> f64 {
        self.completions as f64 / self.secs.max(1e-9)
    }
    fn cpu_ms_per_request(&self) -> f64 {
        assert!(self.completions > 0, "no admission completed");
        self.daemon_cpu_secs * 1000.0 / self.completions as f64
    }
    fn summary(&self) -> String {
        let receipts = if self.receipt_ms.is_empty() {
            "no receipts".to_string()
        } else {
            format!("receipt p50 {:.2} ms, p99 {:.2} ms", percentile(&self.receipt_ms, 0.5), percentile(&self.receipt_ms, 0.99))
        };
        let rejected = if self.rejected.is_empty() { "none".to_string() } else { format!("{:?}", self.rejected) };
        format!("{} admissions+completions in {:.2} s; {receipts}; refused and retried: {rejected}", self.completions, self.secs)
    }
}

/// One socket caller per agent, each looping admit --return-final -> terminal event until
/// `secs` have passed (the turns in flight are let complete, and counted in the time). A refused
/// admission is retried after a backoff (2 ms doubling to 50 ms); the daemon's CPU includes
/// the refusals.
fn load(sock: &Sock, watcher: &Watcher, pid: u32, agents: &[Agent], secs: f64) -> Load {
    load_paced(sock, watcher, pid, agents, secs, Pace::Looping)
}

/// How the callers of a load run space their turns.
#[derive(Clone, Copy)]
enum Pace {
    /// Each caller admits again as soon as its completion arrived.
    Looping,
    /// Each caller pauses this long after a completion; all start at the same instant, so
    /// their turns finish in bursts (every agent's completion within the same few ms).
    Together(Duration),
    /// As `Together`, but caller i of n starts `i/n` of the pause late: independent agents,
    /// whose turns do not finish in lockstep.
    Spread(Duration),
}

impl Pace {
    /// The pause after each completion (None: none).
    fn pause(self) -> Option<Duration> {
        match self {
            Pace::Looping => None,
            Pace::Together(pause) | Pace::Spread(pause) => Some(pause),
        }
    }

    /// How late caller `index` of `callers` starts.
    fn offset(self, index: usize, callers: usize) -> Duration {
        match self {
            Pace::Spread(pause) => pause.mul_f64(index as f64 / callers.max(1) as f64),
            Pace::Looping | Pace::Together(_) => Duration::ZERO,
        }
    }

    fn text(self) -> String {
        match self {
            Pace::Looping => "each looping as fast as it can".to_string(),
            Pace::Together(p) => format!("each pausing {} ms after a completion, all starting together", p.as_millis()),
            Pace::Spread(p) => format!("each pausing {} ms after a completion, starts spread over that pause", p.as_millis()),
        }
    }
}

/// [`load`], the callers spacing their turns as `pace` says.
fn load_paced(sock: &Sock, watcher: &Watcher, pid: u32, agents: &[Agent], secs: f64, pace: Pace) -> Load {
    let cpu_before = cpu_seconds(pid);
    let start = Instant::now();
    let end = start + Duration::from_secs_f64(secs);
    let callers: Vec<std::thread::Result<Load>> = std::thread::scope(|scope| {
        let handles: Vec<_> = agents
            .iter()
            .enumerate()
            .map(|(i, agent)| {
                let first = start + pace.offset(i, agents.len());
                scope.spawn(move || caller(sock, watcher, agent, (first, end), pace.pause()))
            })
            .collect();
        handles.into_iter().map(|h| h.join()).collect()
    });
    let cpu_after = cpu_seconds(pid);
    let mut total = Load { daemon_cpu_secs: cpu_after - cpu_before, ..Load::default() };
    total.secs = start.elapsed().as_secs_f64();
    for result in callers {
        let one = result.unwrap_or_else(|payload| std::panic::resume_unwind(payload));
        total.completions += one.completions;
        total.receipt_ms.extend(one.receipt_ms);
        total.completed.extend(one.completed);
        for (reason, n) in one.rejected {
            *total.rejected.entry(reason).or_default() += n;
        }
    }
    total
}

fn caller(sock: &Sock, watcher: &Watcher, agent: &Agent, (first, end): (Instant, Instant), pace: Option<Duration>) -> Load {
    let mut mine = Load::default();
    std::thread::sleep(first.min(end).saturating_duration_since(Instant::now()));
    let mut refused_since: Option<Instant> = None;
    let mut backoff = Duration::from_millis(2);
    let mut i = 0u64;
    while Instant::now() < end {
        check_interrupt();
        i += 1;
        let id = support::new_id();
        let events = watcher.expect(&id);
        let prompt = format!("load prompt {i}");
        let (ms, reply) = sock.timed(&admission(&agent.name, Some(&agent.incarnation), &id, &prompt, true));
        let receipt = reply.unwrap_or_else(|e| panic!("admission to {} on the socket: {e}", agent.name))["body"].clone();
        if let Err(why) = accepted(&receipt, true) {
            watcher.forget(&id);
            *mine.rejected.entry(why.clone()).or_default() += 1;
            let since = *refused_since.get_or_insert_with(Instant::now);
            assert!(since.elapsed() < REFUSAL_LIMIT, "{}: every admission refused for {REFUSAL_LIMIT:?}, the last {why}: {receipt}", agent.name);
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(50));
            continue;
        }
        refused_since = None;
        backoff = Duration::from_millis(2);
        mine.receipt_ms.push(ms);
        let (read_at, event) = watcher.event(&events, &id, EVENT_LIMIT);
        assert_eq!(event["state"], "completed", "terminal event of {id} ({}): {event}", agent.name);
        mine.completions += 1;
        mine.completed.insert(id, read_at);
        if let Some(pace) = pace {
            std::thread::sleep(pace.min(end.saturating_duration_since(Instant::now())));
        }
    }
    mine
}

/// Receipt samples of serial return-final admissions on both ways in (the unrelated-processes rows).
#[derive(Default)]
struct Samples {
    socket: Vec<f64>,
    cli: Vec<f64>,
}

impl Samples {
    fn take(&mut self, w: &World, sock: &Sock, watcher: &Watcher, agent: &Agent, runs: usize) {
        self.socket.extend(serial(w, sock, watcher, agent, Via::Socket, true, runs).0);
        self.cli.extend(serial(w, sock, watcher, agent, Via::Cli, true, runs).0);
    }
}

/// `sleep` processes that die with us (PDEATHSIG) and are killed on drop.
struct Sleeps(Vec<Child>);

impl Sleeps {
    fn spawn(n: usize) -> Sleeps {
        let mut sleeps = Sleeps(Vec::with_capacity(n));
        for _ in 0..n {
            check_interrupt();
            let mut cmd = Command::new("sleep");
            cmd.arg("900").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
            // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                cmd.pre_exec(|| {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                })
            };
            sleeps.0.push(cmd.spawn().expect("spawn sleep"));
        }
        sleeps
    }
}

impl Drop for Sleeps {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
        }
        for child in &mut self.0 {
            let _ = child.wait();
        }
    }
}

/// task_complete line timestamps by turn id, from every rollout of the world.
fn completion_times(w: &World) -> HashMap<String, SystemTime> {
    let mut times = HashMap::new();
    for file in w.rollout_files() {
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains("\"task_complete\"")) {
            let Ok(v) = serde_json::from_str::<Value>(line) else { continue };
            if let (Some(turn), Some(at)) = (v["payload"]["turn_id"].as_str(), v["timestamp"].as_str().and_then(latency::parse_rfc3339_ms)) {
                times.insert(turn.to_string(), at);
            }
        }
    }
    times
}

/// Appends copies of a `response_item` line (valid, irrelevant to turns) until `path` holds
/// `target` bytes. Returns the bytes appended.
fn grow_rollout(path: &Path, target: u64) -> u64 {
    let text = std::fs::read_to_string(path).expect("read the rollout");
    let template = text
        .lines()
        .rev()
        .find(|l| l.contains("\"type\":\"response_item\""))
        .unwrap_or_else(|| panic!("no response_item line to copy in {}", path.display()))
        .to_string();
    let mut chunk = Vec::with_capacity(8 << 20);
    while chunk.len() < 8 << 20 {
        chunk.extend_from_slice(template.as_bytes());
        chunk.push(b'\n');
    }
    let mut file = std::fs::OpenOptions::new().append(true).open(path).expect("open the rollout for append");
    let before = file.metadata().expect("rollout metadata").len();
    let mut len = before;
    while len < target {
        check_interrupt();
        file.write_all(&chunk).expect("append to the rollout");
        len += chunk.len() as u64;
    }
    len - before
}

// ---------------------------------------------------------------------------------------------
// The report

#[derive(Clone, Copy)]
enum Unit {
    Ms,
    PerSec,
    CpuMs,
    PctCore,
}

fn fmt_value(v: f64, unit: Unit) -> String {
    match unit {
        Unit::Ms if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Unit::Ms if v >= 100.0 => format!("{v:.0} ms"),
        Unit::Ms => format!("{v:.2} ms"),
        Unit::PerSec => format!("{v:.0}/s"),
        Unit::CpuMs => format!("{v:.2} ms CPU"),
        Unit::PctCore => format!("{v:.2} % of a core"),
    }
}

struct Row {
    key: String,
    label: String,
    /// How the row is named where it serves as another row's floor.
    short: String,
    unit: Unit,
    floor: Option<String>,
    is_floor: bool,
    value: Option<Result<f64, String>>,
    target: String,
    met: Option<bool>,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
    floors: Vec<Floors>,
    /// The load average at the start and at the end.
    load: Vec<String>,
}

impl Report {
    fn plan(&mut self, key: &str, label: String, unit: Unit, floor: Option<&str>) {
        let row = Row { key: key.into(), short: label.clone(), label, unit, floor: floor.map(Into::into), is_floor: false, value: None, target: "—".into(), met: None };
        self.rows.push(row);
    }
    fn plan_floor(&mut self, key: &str, label: &str, short: &str, unit: Unit) {
        self.plan(key, label.to_string(), unit, None);
        let row = self.rows.last_mut().expect("just pushed");
        row.is_floor = true;
        row.short = short.to_string();
    }
    fn row_mut(&mut self, key: &str) -> &mut Row {
        self.rows.iter_mut().find(|r| r.key == key).unwrap_or_else(|| panic!("no row {key}"))
    }
    fn set(&mut self, key: &str, value: f64) {
        eprintln!("bench: {key} = {value:.3}");
        self.row_mut(key).value = Some(Ok(value));
    }
    fn get(&self, key: &str) -> Option<f64> {
        self.rows.iter().find(|r| r.key == key).and_then(|r| r.value.as_ref()).and_then(|v| v.as_ref().ok().copied())
    }
    fn note(&mut self, note: String) {
        eprintln!("bench: note: {note}");
        self.notes.push(note);
    }
    fn target(&mut self, key: &str, text: String, met: Option<bool>) {
        let has_value = self.get(key).is_some();
        let row = self.row_mut(key);
        row.target = text;
        row.met = if has_value { met } else { None };
    }
    /// Fails the still-empty rows named by `keys` (`KEY`, or `PREFIX*`) with `why`.
    fn fail_unset(&mut self, keys: &[String], why: &str) {
        let named = |key: &str| keys.iter().any(|k| k.strip_suffix('*').map_or(k == key, |prefix| key.starts_with(prefix)));
        for row in self.rows.iter_mut().filter(|r| r.value.is_none() && named(&r.key)) {
            row.value = Some(Err(why.to_string()));
        }
    }
    fn failed(&self) -> usize {
        self.rows.iter().filter(|r| !matches!(r.value, Some(Ok(_)))).count()
    }
}

/// Runs one phase; a panic (failed wait, refused admission, interruption) fails the phase's
/// still-empty rows (`keys`: `KEY` or `PREFIX*`) with its message, and the run goes on.
fn phase(report: &mut Report, name: &str, keys: &[&str], body: impl FnOnce(&mut Report)) {
    let prefixes: Vec<String> = keys.iter().map(|p| p.to_string()).collect();
    if INTERRUPTED.load(Ordering::SeqCst) {
        report.fail_unset(&prefixes, "not measured: the run was interrupted");
        return;
    }
    eprintln!("bench: phase: {name}");
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(report)));
    if let Err(payload) = outcome {
        let why = format!("{name} failed: {}", panic_text(payload.as_ref()).replace('\n', " "));
        report.note(why.clone());
        report.fail_unset(&prefixes, &why);
    }
}

fn plan(report: &mut Report, cfg: &Config) {
    report.plan_floor("f.fsync", "fsync of a 100-byte append, p50", "fsync", Unit::Ms);
    report.plan_floor("f.commit", "SQLite commit of one small row, WAL + synchronous=FULL, p50", "commit", Unit::Ms);
    report.plan_floor("f.commit_cpu", "CPU of that commit, mean", "commit CPU", Unit::CpuMs);
    report.plan_floor("f.spawn", "spawn of `wakterm --version` to its exit, p50", "spawn", Unit::Ms);
    report.plan_floor("f.spawn_paired", "spawn of `wakterm --version` to its exit, p50, each right after a CLI admission", "spawn beside the CLI", Unit::Ms);
    report.plan_floor("f.rtt", "socket round trip to the daemon (`capabilities`), p50", "socket round trip", Unit::Ms);
    report.plan_floor("f.idle0", &format!("idle daemon CPU with no agent, over {} s", cfg.idle_secs), "no agent", Unit::PctCore);
    report.plan_floor("f.mux_start", "`mux start` on an empty data directory (one run)", "`mux start`, empty", Unit::Ms);
    report.plan_floor("f.2commit", "two commits (2 × commit)", "2 commits", Unit::Ms);
    report.plan_floor("f.2commit_spawn", "two commits + spawn", "2 commits + spawn", Unit::Ms);
    report.plan_floor("f.2commit_cpu", "CPU of two commits", "CPU of 2 commits", Unit::CpuMs);
    report.plan_floor("f.ceiling", "serial two-commit ceiling (1 / two commits)", "serial 2-commit ceiling", Unit::PerSec);

    let n = cfg.runs;
    for (via, floor) in [("socket", "f.2commit"), ("CLI", "f.2commit_spawn")] {
        let v = via.to_lowercase();
        report.plan(&format!("admit.{v}.p50"), format!("`agent admit --return-final` receipt, {via}, p50 (n={n})"), Unit::Ms, Some(floor));
        report.plan(&format!("admit.{v}.p99"), format!("`agent admit --return-final` receipt, {via}, p99"), Unit::Ms, Some(floor));
    }
    for (via, floor) in [("socket", "f.2commit"), ("CLI", "f.2commit_spawn")] {
        let v = via.to_lowercase();
        report.plan(&format!("send.{v}.p50"), format!("plain `agent send` receipt, {via}, p50 (n={n})"), Unit::Ms, Some(floor));
        report.plan(&format!("send.{v}.p99"), format!("plain `agent send` receipt, {via}, p99"), Unit::Ms, Some(floor));
    }
    for &a in &cfg.agents {
        report.plan(&format!("catalog.{a}"), format!("`agent catalog`, {}, socket, p50", agents_text(a)), Unit::Ms, Some("f.rtt"));
    }
    for &a in &cfg.agents {
        report.plan(&format!("tput.{a}"), format!("throughput, {}: admit --return-final + completion per s, one socket caller each", agents_text(a)), Unit::PerSec, Some("f.ceiling"));
    }
    for &a in &cfg.agents {
        report.plan(&format!("cpu.{a}"), format!("daemon CPU per admission+completion, {}", agents_text(a)), Unit::CpuMs, Some("f.2commit_cpu"));
    }
    let most = cfg.most_agents();
    report.plan(&format!("idle.{most}"), format!("idle daemon CPU, {most} idle agents, over {} s", cfg.idle_secs), Unit::PctCore, Some("f.idle0"));
    let busy = cfg.busy;
    report.plan("watch.p50", format!("task_complete written -> `request watch` prints it, {busy} busy agents looping (machine saturated), p50"), Unit::Ms, Some("f.rtt"));
    report.plan("watch.p99", format!("task_complete written -> `request watch` prints it, {busy} busy agents looping (machine saturated), p99"), Unit::Ms, Some("f.rtt"));
    let paced = WATCH_PACE.as_millis();
    for (key, how) in [("watch.paced", "all starting together"), ("watch.spread", "starts spread")] {
        for q in ["p50", "p99"] {
            let label = format!("task_complete written -> `request watch` prints it, {busy} busy agents, one turn each per {paced} ms, {how}, {q}");
            report.plan(&format!("{key}.{q}"), label, Unit::Ms, Some("f.rtt"));
        }
    }
    let burst = format!("{} assistant messages of 1.9 MB", cfg.burst_messages);
    report.plan("burst.p50", format!("plain `agent send` receipt to one agent while another's rollout takes {burst}, socket, p50"), Unit::Ms, Some("f.2commit"));
    report.plan("burst.max", "the same, the slowest receipt".to_string(), Unit::Ms, Some("f.2commit"));
    let retried = "the same, while another caller retries return-final admissions to the agent taking the burst every 5 ms (refused while the burst is read, accepted once its turn ended), socket".to_string();
    report.plan("burst.retried.p50", format!("{retried}, p50"), Unit::Ms, Some("f.2commit"));
    report.plan("burst.retried.max", "the same, the slowest receipt".to_string(), Unit::Ms, Some("f.2commit"));
    report.plan("restart", format!("restart (SIGKILL) -> return-final available and admit accepted, {} MiB rollout", cfg.rollout_mib), Unit::Ms, Some("f.mux_start"));
    let k = cfg.sleeps;
    report.plan("procs.socket.without", format!("admit --return-final, socket, p50, without the {k} `sleep`s"), Unit::Ms, Some("f.2commit"));
    report.row_mut("procs.socket.without").short = "same, without".into();
    report.plan("procs.socket.with", format!("admit --return-final, socket, p50, with {k} `sleep` processes"), Unit::Ms, Some("procs.socket.without"));
    report.plan("procs.cli.without", format!("admit --return-final, CLI, p50, without the {k} `sleep`s"), Unit::Ms, Some("f.2commit_spawn"));
    report.row_mut("procs.cli.without").short = "same, without".into();
    report.plan("procs.cli.with", format!("admit --return-final, CLI, p50, with {k} `sleep` processes"), Unit::Ms, Some("procs.cli.without"));
}

/// Issue 10's targets, beside their rows.
fn judge(report: &mut Report, cfg: &Config) {
    let get = |r: &Report, k: &str| r.get(k);
    let ratio_ok = |r: &Report, k: &str, f: &str, max: f64| Some(get(r, k)? <= max * get(r, f)?);
    let met = ratio_ok(report, "admit.socket.p50", "f.2commit", 2.0);
    report.target("admit.socket.p50", "≤ 2× floor".into(), met);
    // Both terms taken beside the CLI samples (paired); the start/end spawn floor is an idle
    // machine's, minutes away from them.
    let cli_bound = get(report, "admit.socket.p50").zip(get(report, "f.spawn_paired")).map(|(a, b)| a + b);
    let met = get(report, "admit.cli.p50").zip(cli_bound).map(|(v, b)| v <= b);
    let text = cli_bound.map_or("≤ socket admit p50 + spawn p50 beside it".to_string(), |b| format!("≤ socket admit p50 + spawn p50 beside it = {}", fmt_value(b, Unit::Ms)));
    report.target("admit.cli.p50", text, met);
    let most = cfg.most_agents();
    let met = get(report, &format!("catalog.{most}")).map(|v| v <= 5.0);
    report.target(&format!("catalog.{most}"), "≤ 5 ms (at 100 agents)".to_string(), met);
    let goal = 5.0 * TODAYS_PEAK_PER_SEC;
    let key = format!("tput.{most}");
    let second = cfg.agents.len().checked_sub(2).map(|i| cfg.agents[i]);
    let not_lower = match second {
        Some(s) => get(report, &key).zip(get(report, &format!("tput.{s}"))).map(|(a, b)| a >= b),
        None => Some(true),
    };
    let met = get(report, &key).map(|v| v >= goal).zip(not_lower).map(|(a, b)| a && b);
    let vs = second.map_or(String::new(), |s| format!(" and ≥ the {s}-agent row"));
    report.target(&key, format!("≥ {goal:.0}/s (5× the 254/s peak, at 100 agents){vs}"), met);
    for &a in &cfg.agents {
        let key = format!("cpu.{a}");
        let met = get(report, &key).map(|v| v <= 0.5);
        report.target(&key, "≤ 0.5 ms".into(), met);
    }
    let key = format!("idle.{most}");
    let met = get(report, &key).map(|v| v <= 1.0);
    report.target(&key, "≤ 1 % of a core (at 100 agents)".into(), met);
    let met = get(report, "watch.p99").map(|v| v <= 5.0);
    report.target("watch.p99", "≤ 5 ms (with 50 busy agents)".into(), met);
    for key in ["watch.paced.p99", "watch.spread.p99"] {
        let met = get(report, key).map(|v| v <= 5.0);
        report.target(key, "≤ 5 ms (with 50 busy agents)".into(), met);
    }
    let met = get(report, "restart").map(|v| v <= 1000.0);
    report.target("restart", "≤ 1 s (with a 1 GiB rollout)".into(), met);
    for via in ["socket", "cli"] {
        let key = format!("procs.{via}.with");
        let met = ratio_ok(report, &key, &format!("procs.{via}.without"), 1.10);
        report.target(&key, "≤ 1.10× floor (within 10 % of without; 1,000 processes)".into(), met);
    }
}

/// `text` cut to about `max` bytes (at a char boundary), marked when cut.
fn clip(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

fn agents_text(n: usize) -> String {
    if n == 1 { "1 agent".into() } else { format!("{n} agents") }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name").map(|r| r.trim_start_matches([' ', '\t', ':']).to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    let nproc = Command::new("nproc").output().ok().map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string()).unwrap_or_default();
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().to_string();
    format!("`nproc` {nproc}, {cpu}, Linux {kernel}")
}

fn load_average() -> String {
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
}

fn utc_now() -> String {
    Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown date".into())
}

fn render(report: &Report, cfg: &Config, date: &str, machine: &str) -> String {
    let mut md = String::new();
    let commit = std::env::var("BENCH_COMMIT").unwrap_or_else(|_| "unknown".into());
    let mode = if cfg.quick { "BENCH_QUICK=1 (smoke run, scaled-down counts)" } else { "full run" };
    md.push_str(&format!("### wakterm benchmark, {date}\n\n"));
    md.push_str(&format!("- Machine: {machine}; load average {}.\n", report.load.join(", then ")));
    md.push_str(&format!("- Code: {commit}; release build in `target/bench`; fake Codex with `--reply-delay-ms 0`.\n"));
    let agents: Vec<String> = cfg.agents.iter().map(|a| a.to_string()).collect();
    md.push_str(&format!(
        "- {mode}: {} samples per latency row; agents {}; {} busy agents; {} MiB rollout; {} `sleep`s; {} s per throughput run; {} s idle windows.\n\n",
        cfg.runs,
        agents.join(" / "),
        cfg.busy,
        cfg.rollout_mib,
        cfg.sleeps,
        cfg.load_secs,
        cfg.idle_secs
    ));
    md.push_str("| floor (this machine, this run) | value |\n|---|---|\n");
    for row in report.rows.iter().filter(|r| r.is_floor) {
        let value = match &row.value {
            Some(Ok(v)) => fmt_value(*v, row.unit),
            Some(Err(why)) => format!("not measured: {why}"),
            None => "not measured".into(),
        };
        md.push_str(&format!("| {} | {value} |\n", row.label));
    }
    md.push_str("\n| measurement | value | floor | × floor | target (issue 10) | met |\n|---|---|---|---|---|---|\n");
    for row in report.rows.iter().filter(|r| !r.is_floor) {
        let floor = row.floor.as_deref().and_then(|f| report.rows.iter().find(|r| r.key == f));
        let floor_value = floor.and_then(|f| report.get(&f.key));
        let floor_text = match (floor, floor_value) {
            (Some(f), Some(v)) => format!("{}: {}", f.short, fmt_value(v, f.unit)),
            (Some(f), None) => format!("{}: not measured", f.short),
            (None, _) => "—".into(),
        };
        let (value, ratio) = match &row.value {
            Some(Ok(v)) => {
                let ratio = floor_value.filter(|f| *f > 0.0).map_or("—".to_string(), |f| format!("{:.2}×", v / f));
                (fmt_value(*v, row.unit), ratio)
            }
            Some(Err(why)) => (format!("**not measured**: {}", clip(why, 240).replace('|', "/")), "—".into()),
            None => ("**not measured**".into(), "—".into()),
        };
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "**no**",
            None => "—",
        };
        md.push_str(&format!("| {} | {value} | {floor_text} | {ratio} | {} | {met} |\n", row.label, row.target));
    }
    if !report.notes.is_empty() {
        md.push_str("\nNotes:\n\n");
        for note in &report.notes {
            md.push_str(&format!("- {}\n", clip(note, 900).replace('\n', " ")));
        }
    }
    md
}

// ---------------------------------------------------------------------------------------------
// The phases

/// The machine's floors, measured at the start (scaling world) and again at the end (restart
/// world): a busy machine only adds, so each floor is the lower p50 of the two.
#[derive(Clone, Copy, Debug)]
struct Floors {
    fsync: f64,
    commit: f64,
    commit_cpu: f64,
    spawn: f64,
    rtt: f64,
}

/// One spawn of `wakterm --version` to its exit (ms): the CLI's own floor.
fn spawn_sample(exe: &str) -> f64 {
    check_interrupt();
    let start = Instant::now();
    let out = Command::new(exe).arg("--version").stdin(Stdio::null()).output().expect("spawn wakterm --version");
    let ms = start.elapsed().as_secs_f64() * 1000.0;
    assert!(out.status.success(), "wakterm --version failed: {out:?}");
    ms
}

fn measure_floors(w: &World, sock: &Sock, cfg: &Config) -> Floors {
    let runs = cfg.runs.max(20);
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(w.root.join("fsync-floor")).expect("floor file");
    let mut fsync = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        file.write_all(&[b'x'; 100]).expect("write");
        file.sync_all().expect("fsync");
        fsync.push(start.elapsed().as_secs_f64() * 1000.0);
    }

    let mut db = rusqlite::Connection::open(w.root.join("floor.db")).expect("floor database");
    db.pragma_update(None, "journal_mode", "WAL").expect("WAL");
    db.pragma_update(None, "synchronous", "FULL").expect("synchronous=FULL");
    db.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, v BLOB NOT NULL)", []).expect("table");
    let (mut commit, cpu_start) = (Vec::new(), thread_cpu_seconds());
    for _ in 0..runs {
        let start = Instant::now();
        let tx = db.transaction().expect("begin");
        tx.execute("INSERT INTO t (v) VALUES (?1)", [vec![7u8; 200]]).expect("insert");
        tx.commit().expect("commit");
        commit.push(start.elapsed().as_secs_f64() * 1000.0);
    }
    let commit_cpu = (thread_cpu_seconds() - cpu_start) * 1000.0 / runs as f64;

    let spawn: Vec<f64> = (0..runs).map(|_| spawn_sample(&cfg.exe)).collect();

    let mut rtt = Vec::new();
    for _ in 0..runs {
        let (ms, reply) = sock.timed(&json!({"op": "capabilities"}));
        let reply = reply.unwrap_or_else(|e| panic!("capabilities: {e}"));
        assert_eq!(reply["exit_code"], 0, "capabilities: {reply}");
        rtt.push(ms);
    }
    let p50 = |samples: &[f64]| percentile(samples, 0.5);
    Floors { fsync: p50(&fsync), commit: p50(&commit), commit_cpu, spawn: p50(&spawn), rtt: p50(&rtt) }
}

/// Measures the floors once more and sets each to the lowest measurement so far.
fn floors(w: &World, sock: &Sock, cfg: &Config, report: &mut Report, when: &str) {
    let now = measure_floors(w, sock, cfg);
    report.note(format!(
        "floors at the {when}: fsync {:.2} ms, commit {:.2} ms ({:.3} ms CPU), spawn {:.2} ms, socket round trip {:.3} ms",
        now.fsync, now.commit, now.commit_cpu, now.spawn, now.rtt
    ));
    report.floors.push(now);
    let low = |f: fn(&Floors) -> f64| report.floors.iter().map(f).fold(f64::INFINITY, f64::min);
    let best = Floors { fsync: low(|f| f.fsync), commit: low(|f| f.commit), commit_cpu: low(|f| f.commit_cpu), spawn: low(|f| f.spawn), rtt: low(|f| f.rtt) };
    report.set("f.fsync", best.fsync);
    report.set("f.commit", best.commit);
    report.set("f.commit_cpu", best.commit_cpu);
    report.set("f.spawn", best.spawn);
    report.set("f.rtt", best.rtt);
    report.set("f.2commit", 2.0 * best.commit);
    report.set("f.2commit_spawn", 2.0 * best.commit + best.spawn);
    report.set("f.2commit_cpu", 2.0 * best.commit_cpu);
    report.set("f.ceiling", 1000.0 / (2.0 * best.commit));
}

/// The world of the latency, process-count and scaling rows: one daemon, agents added up to
/// the largest count.
fn scaling_world(cfg: &Config, report: &mut Report) {
    let mut w = World::new(&cfg.exe);
    let start = Instant::now();
    w.mux_start();
    report.note(format!("`mux start` of the scaling world's daemon took {:.0} ms", start.elapsed().as_secs_f64() * 1000.0));
    let (sock, pid) = Sock::of(&w);
    eprintln!("bench: scaling world {} (daemon pid {pid})", w.root.display());
    let floor_keys = ["f.fsync", "f.commit*", "f.spawn", "f.rtt", "f.2commit*", "f.ceiling"];
    phase(report, "floors", &floor_keys, |r| floors(&w, &sock, cfg, r, "start"));
    phase(report, "idle daemon, no agent", &["f.idle0"], |r| r.set("f.idle0", idle_cpu(pid, cfg.idle_secs)));
    let watcher = Watcher::start(&sock);
    let mut agents = Fleet::default();
    phase(report, "latency (one agent)", &["admit.*", "send.*", "f.spawn_paired"], |r| {
        add_agents(&w, &sock, &mut agents, 1, "agent");
        let a = agents.ready[0].clone();
        let mut lags = Vec::new();
        let mut spawns = Vec::with_capacity(cfg.runs);
        for (name, return_final) in [("admit", true), ("send", false)] {
            // Paired: the socket and the CLI sample alternate, and for the admissions a spawn of
            // `wakterm --version` follows each CLI sample, so the CLI target compares quantities
            // taken in the same minutes of this host, whose speed drifts (issue 10).
            let (mut by_via, mut lag) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
            for i in 0..cfg.runs {
                for (k, via) in [Via::Socket, Via::Cli].into_iter().enumerate() {
                    let (samples, again) = serial_from(&w, &sock, &watcher, &a, via, return_final, i..i + 1);
                    by_via[k].extend(samples);
                    lag[k].extend(again);
                }
                if return_final {
                    spawns.push(spawn_sample(&cfg.exe));
                }
            }
            for (k, v) in ["socket", "cli"].into_iter().enumerate() {
                r.set(&format!("{name}.{v}.p50"), percentile(&by_via[k], 0.5));
                r.set(&format!("{name}.{v}.p99"), percentile(&by_via[k], 0.99));
                lags.push(lag_text(&format!("{name} {v}"), &lag[k]));
            }
        }
        r.set("f.spawn_paired", percentile(&spawns, 0.5));
        r.note(format!("completion -> the catalog says return-final available again (not a target; it paces the serial rows): {}", lags.join("; ")));
    });
    phase(report, "unrelated processes", &["procs.*"], |r| {
        add_agents(&w, &sock, &mut agents, 1, "agent");
        let a = agents.ready[0].clone();
        // A-B-B-A: half the samples without the `sleep`s, all of them with, the other half
        // without again, so a host whose speed drifts during the phase (this one's does) weighs
        // both sides alike instead of deciding the ratio.
        let half = cfg.runs.div_ceil(2);
        let (mut without, mut with) = (Samples::default(), Samples::default());
        // Every block starts after the same 1 s pause: the first one used to start right after
        // the latency phase's last turn, whose tail (its completion, the monitor's screen look)
        // could land in the first "without" samples only (in the sixth session's two runs the
        // side with the `sleep`s came out faster: 0.71x and 0.73x).
        pause(Duration::from_secs(1));
        let before = processes_on_machine();
        without.take(&w, &sock, &watcher, &a, half);
        let sleeps = Sleeps::spawn(cfg.sleeps);
        pause(Duration::from_secs(1));
        let during = processes_on_machine();
        with.take(&w, &sock, &watcher, &a, cfg.runs);
        drop(sleeps);
        pause(Duration::from_secs(1));
        let after = processes_on_machine();
        without.take(&w, &sock, &watcher, &a, half);
        r.set("procs.socket.without", percentile(&without.socket, 0.5));
        r.set("procs.cli.without", percentile(&without.cli, 0.5));
        r.set("procs.socket.with", percentile(&with.socket, 0.5));
        r.set("procs.cli.with", percentile(&with.cli, 0.5));
        r.note(format!(
            "processes on the machine: {before} without the `sleep`s, {during} with them, {after} after; samples taken without / with / without ({half} / {} / {half} per via)",
            cfg.runs
        ));
    });
    for &count in &cfg.agents {
        let prefixes = [format!("catalog.{count}"), format!("tput.{count}"), format!("cpu.{count}")];
        let prefixes: Vec<&str> = prefixes.iter().map(String::as_str).collect();
        phase(report, &format!("{count} agents"), &prefixes, |r| {
            add_agents(&w, &sock, &mut agents, count, "agent");
            let mut samples = Vec::new();
            for _ in 0..cfg.runs {
                check_interrupt();
                let (ms, reply) = sock.timed(&json!({"op": "catalog"}));
                let reply = reply.unwrap_or_else(|e| panic!("catalog: {e}"));
                let listed = reply["body"]["agents"].as_array().map_or(0, Vec::len);
                assert_eq!(listed, count, "the catalog lists {listed} agents, not {count}: {reply}");
                samples.push(ms);
            }
            r.set(&format!("catalog.{count}"), percentile(&samples, 0.5));
            r.note(format!("`agent catalog` with {}: p99 {:.2} ms", agents_text(count), percentile(&samples, 0.99)));
            let before = CpuSplit::now(pid, &w.data);
            let run = load(&sock, &watcher, pid, &agents.ready[..count], cfg.load_secs);
            let split = CpuSplit::now(pid, &w.data).per_completion(&before, run.completions, run.secs);
            r.note(format!("throughput with {}: {}; {split}", agents_text(count), run.summary()));
            r.set(&format!("tput.{count}"), run.per_sec());
            r.set(&format!("cpu.{count}"), run.cpu_ms_per_request());
        });
    }
    let most = cfg.most_agents();
    phase(report, "idle daemon", &["idle.*"], |r| {
        assert!(agents.ready.len() >= most, "only {} agents are ready, not {most}", agents.ready.len());
        let names: Vec<String> = agents.ready.iter().map(|a| a.name.clone()).collect();
        wait_catalog(&sock, &names, "every agent to be idle", AGENT_LIMIT, available);
        pause(Duration::from_secs(2));
        r.set(&format!("idle.{most}"), idle_cpu(pid, cfg.idle_secs));
    });
    phase(report, "completion -> watcher", &["watch.*"], |r| {
        assert!(agents.ready.len() >= cfg.busy, "only {} agents are ready, not the {} to keep busy", agents.ready.len(), cfg.busy);
        let busy = &agents.ready[..cfg.busy];
        watcher_row(r, &mut w, &sock, &watcher, pid, busy, cfg.load_secs, Pace::Looping, "watch");
        watcher_row(r, &mut w, &sock, &watcher, pid, busy, cfg.load_secs, Pace::Together(WATCH_PACE), "watch.paced");
        watcher_row(r, &mut w, &sock, &watcher, pid, busy, cfg.load_secs, Pace::Spread(WATCH_PACE), "watch.spread");
    });
    drop(watcher);
    if agents.sent_while_unknown > 0 {
        let started = agents.started.len();
        report.note(format!("{} of {started} started agents were still `unknown` in the catalog {UNKNOWN_GRACE:?} after their start; their baseline turn was sent anyway", agents.sent_while_unknown));
    }
    eprintln!("bench: stopping the scaling world");
}

/// The restart row: one agent whose rollout is grown, the daemon SIGKILLed and started again.
fn restart_world(cfg: &Config, report: &mut Report) {
    let w = World::new(&cfg.exe);
    let start = Instant::now();
    w.mux_start();
    report.set("f.mux_start", start.elapsed().as_secs_f64() * 1000.0);
    let (sock, pid) = Sock::of(&w);
    eprintln!("bench: restart world {} (daemon pid {pid})", w.root.display());
    phase(report, "restart", &["restart"], |r| restart(&w, &sock, pid, cfg, r));
    // The restarted daemon answers on the same socket.
    phase(report, "floors at the end", &[], |r| floors(&w, &sock, cfg, r, "end"));
    eprintln!("bench: stopping the restart world");
}

/// MON-4: one agent's burst of output against another agent's sends, in a world of its own.
fn burst_world(cfg: &Config, report: &mut Report) {
    let w = World::new(&cfg.exe);
    w.mux_start();
    let (sock, _pid) = Sock::of(&w);
    eprintln!("bench: burst world {}", w.root.display());
    phase(report, "burst", &["burst.*"], |r| burst(&w, &sock, cfg, r));
    eprintln!("bench: stopping the burst world");
}

/// Two bursts, the second with a caller retrying sends to the loud agent (an orchestrator
/// waiting for it to be free: each send refreshes that agent, MON-4).
fn burst(w: &World, sock: &Sock, cfg: &Config, report: &mut Report) {
    let mut loud = Fleet::default();
    add_agents(w, sock, &mut loud, 1, "loud");
    let files = w.rollout_files();
    assert_eq!(files.len(), 1, "expected the loud agent's rollout alone, found {files:?}");
    let mut quiet = Fleet::default();
    add_agents(w, sock, &mut quiet, 1, "quiet");
    let (loud, quiet) = (loud.ready[0].clone(), quiet.ready[0].clone());
    burst_once(sock, cfg, report, (&loud, &quiet), &files[0], "burst", false);
    burst_once(sock, cfg, report, (&loud, &quiet), &files[0], "burst.retried", true);
}

/// Plain sends to the quiet agent, one after another on the socket, from the moment the loud
/// agent's rollout starts taking `cfg.burst_messages` assistant messages of 1.9 MB in one turn
/// until a subscriber to the loud agent's events has its `turn.final` (the daemon read and
/// committed the whole burst); with `retry`, another caller retries return-final admissions to
/// the loud agent every 5 ms meanwhile (from 100 ms after the burst's first byte, when its turn
/// has started), each refreshing that agent before it is refused.
fn burst_once(sock: &Sock, cfg: &Config, report: &mut Report, (loud, quiet): (&Agent, &Agent), rollout: &Path, key: &str, retry: bool) {
    let after = sock.call(&json!({"op": "catalog"})).ok().and_then(|r| r["body"]["events_through"].as_u64()).expect("the catalog's events_through");
    let subscriber = sock.open(&json!({"op": "events", "after": after, "once": false, "agents": [loud.name]})).expect("subscribe to the loud agent's events");
    let (done_tx, done) = mpsc::channel();
    let follow = std::thread::spawn(move || {
        for line in BufReader::new(subscriber).lines() {
            let Ok(line) = line else { break };
            if line.contains("\"turn.final\"") && line.contains("burst end") {
                let _ = done_tx.send(Instant::now());
                break;
            }
        }
    });
    let (rollout, messages) = (rollout.to_path_buf(), cfg.burst_messages);
    let start = Instant::now();
    let writer = std::thread::spawn(move || append_burst(&rollout, messages));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let retrier = retry.then(|| {
        let (sock, loud_name, stop) = (Sock(sock.0.clone()), loud.name.clone(), stop.clone());
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut answers = BTreeMap::<String, usize>::new();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let (_, reply) = sock.timed(&admission(&loud_name, None, &support::new_id(), "retried while the burst is read", true));
                let answer = reply.and_then(|r| accepted(&r["body"], true)).map_or_else(|why| why, |_| "accepted".to_string());
                *answers.entry(answer).or_default() += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
            answers
        })
    });
    let (mut samples, mut refused) = (Vec::new(), BTreeMap::<String, usize>::new());
    let drained = loop {
        check_interrupt();
        let id = support::new_id();
        let (ms, reply) = sock.timed(&admission(&quiet.name, None, &id, &format!("burst prompt {}", samples.len()), false));
        samples.push(ms);
        if let Err(why) = reply.and_then(|r| accepted(&r["body"], false)) {
            *refused.entry(why).or_default() += 1;
        }
        if let Ok(at) = done.try_recv() {
            break at.duration_since(start);
        }
        assert!(start.elapsed() < ROLLOUT_LIMIT, "the burst's turn.final did not reach its subscriber within {ROLLOUT_LIMIT:?}");
    };
    let written = writer.join().expect("the burst writer");
    let _ = follow.join();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let retried = retrier.map(|handle| {
        format!("; the loud agent's sends meanwhile: {:?}", handle.join().expect("the retrier"))
    });
    let mut sorted = samples.clone();
    sorted.sort_by(f64::total_cmp);
    report.set(&format!("{key}.p50"), percentile(&sorted, 0.5));
    report.set(&format!("{key}.max"), *sorted.last().expect("at least one send"));
    let refused = if refused.is_empty() { "none refused".to_string() } else { format!("refused: {refused:?}") };
    report.note(format!(
        "{key}: {messages} messages ({:.0} MB) appended to the loud agent's rollout in {:.1} s; its subscriber had the turn's final {:.1} s after the first byte; {} sends to the quiet agent meanwhile, {refused}{}",
        written.0 as f64 / 1e6,
        written.1.as_secs_f64(),
        drained.as_secs_f64(),
        samples.len(),
        retried.unwrap_or_default()
    ));
}

/// Appends one turn of `messages` assistant messages of [`BURST_MESSAGE_BYTES`] to a rollout
/// (Codex's `item_completed` records), its final "burst end"; the bytes and the time it took.
fn append_burst(path: &Path, messages: usize) -> (u64, Duration) {
    let start = Instant::now();
    let turn = support::new_id();
    let record = |payload: Value| format!("{}\n", json!({"timestamp": "2026-12-04T00:00:00.000Z", "type": "event_msg", "payload": payload}));
    let big = "x".repeat(BURST_MESSAGE_BYTES);
    let mut file = std::fs::OpenOptions::new().append(true).open(path).expect("open the rollout for append");
    let mut written = 0u64;
    let mut put = |line: String| {
        file.write_all(line.as_bytes()).expect("append to the rollout");
        written += line.len() as u64;
    };
    put(record(json!({"type": "task_started", "turn_id": turn})));
    for n in 0..messages {
        let item = json!({"type": "AgentMessage", "id": format!("burst-{n}"), "content": [{"type": "Text", "text": big}]});
        put(record(json!({"type": "item_completed", "turn_id": turn, "item": item})));
    }
    put(record(json!({"type": "task_complete", "turn_id": turn, "last_agent_message": "burst end"})));
    (written, start.elapsed())
}

/// One return-final admission, its terminal event expected on `watcher`; `Err` is the refusal.
fn admit_once(sock: &Sock, watcher: &Watcher, agent: &Agent, prompt: &str) -> Result<(String, mpsc::Receiver<Arrival>), String> {
    let id = support::new_id();
    let events = watcher.expect(&id);
    let answer = sock.call(&admission(&agent.name, Some(&agent.incarnation), &id, prompt, true)).and_then(|reply| accepted(&reply["body"], true));
    match answer {
        Ok(()) => Ok((id, events)),
        Err(why) => {
            watcher.forget(&id);
            Err(why)
        }
    }
}

fn restart(w: &World, sock: &Sock, pid: u32, cfg: &Config, report: &mut Report) {
    let mut agents = Fleet::default();
    add_agents(w, sock, &mut agents, 1, "big");
    let agent = agents.ready[0].clone();
    let files = w.rollout_files();
    assert_eq!(files.len(), 1, "expected one rollout, found {files:?}");
    let grow_start = Instant::now();
    let appended = grow_rollout(&files[0], cfg.rollout_mib << 20);
    let grow_secs = grow_start.elapsed().as_secs_f64();
    // Caught up: a turn admitted after the growth completes (its lines follow the grown bytes)
    // and the catalog says available again.
    let catch_up = Instant::now();
    let watcher = Watcher::start(sock);
    let (id, events) = wait_for("an admission after the growth", ROLLOUT_LIMIT, || admit_once(sock, &watcher, &agent, "after the growth"));
    watcher.event(&events, &id, ROLLOUT_LIMIT);
    wait_catalog(sock, std::slice::from_ref(&agent.name), "the daemon to catch up with the grown rollout", ROLLOUT_LIMIT, available);
    let catch_up_secs = catch_up.elapsed().as_secs_f64();
    drop(watcher);
    pause(Duration::from_secs(2));
    let daemon_cpu = cpu_seconds(pid);
    support::sigkill_and_wait(pid);

    let restart = Instant::now();
    w.mux_start();
    let started_ms = restart.elapsed().as_secs_f64() * 1000.0;
    let watcher = Watcher::start(sock);
    let mut catalog_ms = None;
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    let (id, events) = wait_for("return-final to be available again after the restart", ROLLOUT_LIMIT, || {
        let catalog = sock.catalog()?;
        let entry = catalog.iter().find(|e| e["name"] == agent.name.as_str()).ok_or("the agent is not in the catalog")?;
        if entry["return_final_available"] != true {
            return Err(format!("catalog: state {} reason {}", entry["state"], entry["return_final_unavailable_reason"]));
        }
        catalog_ms.get_or_insert(restart.elapsed().as_secs_f64() * 1000.0);
        admit_once(sock, &watcher, &agent, "after the restart").inspect_err(|why| *refusals.entry(why.clone()).or_default() += 1)
    });
    let total_ms = restart.elapsed().as_secs_f64() * 1000.0;
    report.set("restart", total_ms);
    // Not part of the row: whether that turn's final answer then arrives, and when.
    let completed = match watcher.try_event(&events, &id, ROLLOUT_LIMIT) {
        Some((_, event)) => format!("its turn ended `{}` at {:.0} ms", event["state"].as_str().unwrap_or("?"), restart.elapsed().as_secs_f64() * 1000.0),
        None => format!("its turn's terminal event did not arrive within {ROLLOUT_LIMIT:?}"),
    };
    let catalog = catalog_ms.map_or("?".into(), |ms| format!("{ms:.0} ms"));
    let refusals = if refusals.is_empty() { "none".to_string() } else { format!("{refusals:?}") };
    report.note(format!(
        "restart: rollout grown by {:.0} MiB in {grow_secs:.1} s; a turn admitted after the growth completed and the catalog said available {catch_up_secs:.1} s later (the daemon's CPU until the kill: {daemon_cpu:.1} s); after the SIGKILL `mux start` returned in {started_ms:.0} ms, the catalog said available at {catalog}, an admit was accepted at {total_ms:.0} ms (refusals before: {refusals}), {completed}",
        appended as f64 / 1048576.0
    ));
}

fn main() {
    install_signal_flag();
    let cfg = Config::from_env();
    let date = utc_now();
    let machine = machine();
    eprintln!("bench: {} ({}), results to {}", cfg.exe, if cfg.quick { "quick" } else { "full" }, cfg.results.display());
    let mut report = Report::default();
    report.load.push(format!("{} at the start", load_average()));
    plan(&mut report, &cfg);
    let scaling_rows = ["f.fsync", "f.commit*", "f.spawn*", "f.rtt", "f.2commit*", "f.ceiling", "f.idle0", "admit.*", "send.*", "catalog.*", "tput.*", "cpu.*", "idle.*", "watch.*", "procs.*"];
    // BENCH_WORLDS=burst (or scaling, restart, comma-separated) runs only those worlds; the
    // others' rows say "not measured" (the default runs all three).
    let worlds = std::env::var("BENCH_WORLDS").unwrap_or_else(|_| "scaling,burst,restart".to_string());
    let runs = |world: &str| worlds.split(',').any(|w| w.trim() == world);
    if runs("scaling") {
        phase(&mut report, "scaling world", &scaling_rows, |r| scaling_world(&cfg, r));
    }
    if runs("burst") {
        phase(&mut report, "burst world", &["burst.*"], |r| burst_world(&cfg, r));
    }
    if runs("restart") {
        phase(&mut report, "restart world", &["restart", "f.mux_start"], |r| restart_world(&cfg, r));
    }
    report.load.push(format!("{} at the end", load_average()));
    report.fail_unset(&["*".to_string()], "not measured");
    judge(&mut report, &cfg);
    let md = render(&report, &cfg, &date, &machine);
    println!("\n{md}");
    if let Some(dir) = cfg.results.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    match std::fs::write(&cfg.results, &md) {
        Ok(()) => eprintln!("bench: table written to {}", cfg.results.display()),
        Err(e) => eprintln!("bench: could not write {}: {e}", cfg.results.display()),
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        std::process::exit(130);
    }
    if report.failed() > 0 {
        eprintln!("bench: {} rows were not measured", report.failed());
        std::process::exit(1);
    }
}

/// Each caller's pause after a completion in the paced watcher rows: 50 agents each running
/// one turn every half second (about 100 turns/s, a fraction of the daemon's capacity) measure
/// the completion path itself, where the unpaced rows measure it with the machine saturated.
/// Started together, the 50 turns finish in bursts and the p99 is the time to drain a burst
/// of 50 completions; spread, they measure one completion among independent agents.
const WATCH_PACE: Duration = Duration::from_millis(500);

/// task_complete's own timestamp -> a persistent `request watch` printing the event, over the
/// completions of one load run on `busy`.
#[allow(clippy::too_many_arguments)]
fn watcher_row(r: &mut Report, w: &mut World, sock: &Sock, watcher: &Watcher, pid: u32, busy: &[Agent], secs: f64, pace: Pace, key: &str) {
    let events = w.subscribe(sock.last_sequence());
    pause(Duration::from_millis(500));
    let run = load_paced(sock, watcher, pid, busy, secs, pace);
    r.note(format!("the {} busy agents of the `{key}` rows ({}): {}", busy.len(), pace.text(), run.summary()));
    let mut printed: HashMap<String, (SystemTime, String)> = HashMap::new();
    let deadline = Instant::now() + EVENT_LIMIT;
    while printed.len() < run.completed.len() && Instant::now() < deadline {
        check_interrupt();
        let Ok((at, event)) = events.recv_timeout(Duration::from_millis(200)) else { continue };
        if let (Some(id), Some(turn)) = (event["request_id"].as_str(), event["provider_turn_id"].as_str()) {
            if run.completed.contains_key(id) {
                printed.insert(id.to_string(), (at, turn.to_string()));
            }
        }
    }
    assert_eq!(printed.len(), run.completed.len(), "the `request watch` subscriber printed {} of {} completions", printed.len(), run.completed.len());
    let written = completion_times(&w);
    let mut lags = Vec::new();
    let mut missing = HashSet::new();
    for (id, (at, turn)) in &printed {
        match written.get(turn) {
            Some(t) => lags.push(at.duration_since(*t).unwrap_or(Duration::ZERO).as_secs_f64() * 1000.0),
            None => drop(missing.insert(id.clone())),
        }
    }
    assert!(missing.is_empty(), "no task_complete line for {} turns", missing.len());
    r.set(&format!("{key}.p50"), percentile(&lags, 0.5));
    r.set(&format!("{key}.p99"), percentile(&lags, 0.99));
    r.note(format!("task_complete -> watcher (`{key}`): {} events; the rollout timestamp has 1 ms resolution", lags.len()));
}
