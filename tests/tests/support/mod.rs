//! Shared by the e2e_* tests (and `examples/bench_latency.rs`): one private world per test —
//! a short temp root `/tmp/wk-<8 hex>` holding the daemon's data dir, a CODEX_HOME and a
//! working directory — driving the real `wakterm` binary as a subprocess. Drop stops the mux
//! and every agent, kills whatever of ours survived, and removes the root.

#![allow(dead_code)]

use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

/// Every wait in these tests ends by this.
pub const DEADLINE: Duration = Duration::from_secs(30);
pub const POLL: Duration = Duration::from_millis(25);

/// One CLI invocation's result: exit code, stdout's last JSON line, raw streams.
#[derive(Debug, Clone)]
pub struct Out {
    pub code: i32,
    pub json: Value,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    /// A finished `wakterm` process: its exit code, its output, and the last stdout line that
    /// is JSON (Null when none is).
    pub fn of(output: std::process::Output) -> Out {
        let stdout = String::from_utf8_lossy(&output.stdout).to_string();
        let json = stdout.lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
        Out { code: output.status.code().unwrap_or(-1), json, stdout, stderr: String::from_utf8_lossy(&output.stderr).to_string() }
    }
}

pub struct World {
    pub exe: PathBuf,
    pub root: PathBuf,
    pub data: PathBuf,
    pub codex_home: PathBuf,
    pub work: PathBuf,
    /// Persistent `request watch` subscribers to kill on drop.
    children: Vec<Child>,
}

impl World {
    /// One request line on the daemon's socket, as a client other than the CLI sends it; the
    /// reply line ({exit_code, body}).
    pub fn raw_call(&self, request: &Value) -> Value {
        let mut stream = std::os::unix::net::UnixStream::connect(self.data.join("run/mux.sock")).expect("connect");
        std::io::Write::write_all(&mut stream, format!("{request}\n").as_bytes()).expect("send");
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stream), &mut line).expect("answer");
        serde_json::from_str(&line).expect("json")
    }

    /// A stand-in daemon at the world's socket that reads each request line and hangs up
    /// without an answer (a daemon that crashed or stopped mid-call). Returns the lines it read.
    #[allow(dead_code)] // not every suite uses it
    pub fn silent_daemon(&self) -> std::sync::mpsc::Receiver<String> {
        let paths = wakterm_runtime::paths::DataPaths { root: self.data.clone() };
        paths.prepare().expect("a private data directory");
        let listener = std::os::unix::net::UnixListener::bind(paths.socket()).expect("bind the stand-in socket");
        let (lines, read) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut line = String::new();
                let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(&stream), &mut line);
                let _ = lines.send(line);
            }
        });
        read
    }

    pub fn new(exe: &str) -> World {
        let id = uuid::Uuid::new_v4().simple().to_string();
        let root = PathBuf::from(format!("/tmp/wk-{}", &id[..8]));
        std::fs::create_dir_all(&root).expect("temp root");
        let root = std::fs::canonicalize(&root).expect("canonical root");
        let data = root.join("data");
        let codex_home = root.join("codex");
        let work = root.join("work");
        for dir in [&codex_home, &work] {
            std::fs::create_dir_all(dir).expect("temp dirs");
        }
        World { exe: PathBuf::from(exe), root, data, codex_home, work, children: Vec::new() }
    }

    /// Runs `wakterm demo ARGS` (its own data directory under TMPDIR, kept inside this world)
    /// to its exit: every stdout line as JSON (a line that is not fails the test). Exit 0 is
    /// asserted, with both outputs in the message.
    #[allow(dead_code)] // not every suite runs the demo
    pub fn run_demo(&self, args: &[&str]) -> Vec<Value> {
        let out = Command::new(&self.exe)
            .arg("demo")
            .args(args)
            .env("TMPDIR", &self.root)
            .env_remove("WAKTERM_DATA_DIR")
            .current_dir(&self.work)
            .stdin(Stdio::null())
            .output()
            .expect("run the demo");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "demo {args:?} failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
        let steps = stdout.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
        let left: Vec<_> = std::fs::read_dir(&self.root).expect("root").flatten().filter(|e| e.file_name().to_string_lossy().starts_with("wakterm-demo-")).collect();
        assert!(left.is_empty(), "the demo removed its directory: {left:?}");
        steps
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args).env("WAKTERM_DATA_DIR", &self.data).current_dir(&self.work);
        cmd
    }

    /// Runs `wakterm ARGS` to completion (bounded by the CLI's own timeouts).
    pub fn run(&self, args: &[&str]) -> Out {
        Out::of(self.cmd(args).stdin(Stdio::null()).output().expect("run wakterm"))
    }

    /// Runs and asserts exit 0.
    pub fn ok(&self, args: &[&str]) -> Value {
        let out = self.run(args);
        assert_eq!(out.code, 0, "wakterm {args:?} failed: {out:?}");
        out.json
    }

    pub fn mux_start(&self) -> Value {
        self.ok(&["mux", "start"])
    }

    /// ADM-4, SUB-1: a daemon whose pane writes pause before the holder call
    /// (`WAKTERM_FAULT=write_pause`), logging at info so the pause's line is seen.
    pub fn mux_start_pausing_writes(&self) {
        let out = self.cmd(&["mux", "start"]).env("WAKTERM_FAULT", "write_pause").env("WAKTERM_LOG", "info").output().expect("mux start");
        assert!(out.status.success(), "mux start: {}", String::from_utf8_lossy(&out.stderr));
    }

    /// How many pane writes have paused so far (see `mux_start_pausing_writes`).
    pub fn write_pauses(&self) -> usize {
        write_pauses_logged(&self.data.join("mux.log"))
    }

    pub fn daemon_pid(&self) -> u32 {
        let status = self.ok(&["mux", "status"]);
        status["pid"].as_u64().expect("status pid") as u32
    }

    /// The fake-codex agent command: `<wakterm> fake-codex --reply TEMPLATE EXTRA...`.
    pub fn start_agent(&self, name: &str, reply: &str, extra: &[&str]) -> Value {
        let exe = self.exe.display().to_string();
        let env = format!("CODEX_HOME={}", self.codex_home.display());
        let cwd = self.work.display().to_string();
        let mut args = vec!["agent", "start", "--name", name, "--cwd", &cwd, "--env", &env, "--", &exe, "fake-codex", "--reply", reply];
        args.extend_from_slice(extra);
        self.ok(&args)
    }

    pub fn catalog_entry(&self, name: &str) -> Option<Value> {
        let catalog = self.run(&["agent", "catalog"]).json;
        catalog["agents"].as_array().and_then(|a| a.iter().find(|x| x["name"] == name)).cloned()
    }

    /// Polls the catalog until `ready` holds for the agent; panics after DEADLINE.
    pub fn wait_agent(&self, name: &str, what: &str, mut ready: impl FnMut(&Value) -> bool) -> Value {
        let deadline = Instant::now() + DEADLINE;
        let mut last = None;
        loop {
            if let Some(entry) = self.catalog_entry(name) {
                if ready(&entry) {
                    return entry;
                }
                last = Some(entry);
            }
            assert!(Instant::now() < deadline, "timed out waiting for {name}: {what}; last catalog entry {last:?}");
            std::thread::sleep(POLL);
        }
    }

    /// Starts the mux and a fake agent, makes a one-way baseline turn and waits until
    /// return-final is available. Returns the catalog entry.
    pub fn ready_agent(&self, name: &str, reply: &str, extra: &[&str]) -> Value {
        self.start_agent(name, reply, extra);
        self.wait_agent(name, "idle", |z| z["state"] == "idle");
        let out = self.run(&["agent", "send", name, "baseline turn"]);
        assert_eq!(out.code, 0, "baseline send: {out:?}");
        self.wait_agent(name, "return-final available", |z| z["return_final_available"] == true)
    }

    /// `request watch --once --after N`: the events now available.
    pub fn events_after(&self, after: u64) -> Vec<Value> {
        let a = after.to_string();
        let out = self.run(&["agent", "request", "watch", "--once", "--after", &a]);
        assert_eq!(out.code, 0, "watch --once: {out:?}");
        out.stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
    }

    /// Polls `request watch --once` until the request's terminal event shows up.
    pub fn wait_terminal(&self, request_id: &str) -> Value {
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(e) = self.events_after(0).into_iter().find(|e| e["request_id"] == request_id) {
                return e;
            }
            assert!(Instant::now() < deadline, "no terminal event for {request_id}");
            std::thread::sleep(POLL);
        }
    }

    /// A persistent `agent request watch --after N`: lines arrive on the receiver, each with
    /// the wall-clock time it was read.
    pub fn subscribe(&mut self, after: u64) -> mpsc::Receiver<(SystemTime, Value)> {
        let a = after.to_string();
        let mut child = self
            .cmd(&["agent", "request", "watch", "--after", &a])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn watch");
        let stdout = child.stdout.take().expect("watch stdout");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                let at = SystemTime::now();
                if let Ok(v) = serde_json::from_str::<Value>(&line) {
                    if tx.send((at, v)).is_err() {
                        return;
                    }
                }
            }
        });
        self.children.push(child);
        rx
    }

    /// Every JSON line of every rollout file under CODEX_HOME/sessions, in file then line order.
    pub fn rollout_lines(&self) -> Vec<Value> {
        let mut lines = Vec::new();
        for file in self.rollout_files() {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            lines.extend(text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()));
        }
        lines
    }

    /// Rollout files, oldest session first (by the first line's ms timestamp, then path: file
    /// names only have second resolution, so a name sort can misorder a restart).
    pub fn rollout_files(&self) -> Vec<PathBuf> {
        let mut files = Vec::new();
        collect_jsonl(&self.codex_home.join("sessions"), &mut files);
        let first_ts = |f: &PathBuf| {
            let text = std::fs::read_to_string(f).unwrap_or_default();
            let first: Value = text.lines().next().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
            first["timestamp"].as_str().unwrap_or_default().to_string()
        };
        files.sort_by_key(|f| (first_ts(f), f.clone()));
        files
    }

    /// Number of `task_started` records.
    pub fn turns_started(&self) -> usize {
        self.rollout_lines().iter().filter(|l| l["payload"]["type"] == "task_started").count()
    }

    /// The text of every user prompt (`item_completed` / `UserMessage`), in order.
    pub fn user_prompts(&self) -> Vec<String> {
        self.rollout_lines()
            .iter()
            .filter(|l| l["payload"]["type"] == "item_completed" && l["payload"]["item"]["type"] == "UserMessage")
            .filter_map(|l| l["payload"]["item"]["content"][0]["text"].as_str().map(str::to_string))
            .collect()
    }

    /// `(turn_id, last_agent_message)` of every `task_complete`.
    pub fn completed_turns(&self) -> Vec<(String, Option<String>)> {
        self.rollout_lines()
            .iter()
            .filter(|l| l["payload"]["type"] == "task_complete")
            .map(|l| {
                let p = &l["payload"];
                (p["turn_id"].as_str().unwrap_or_default().to_string(), p["last_agent_message"].as_str().map(str::to_string))
            })
            .collect()
    }

    /// Polls until `f` holds; panics with `what` after DEADLINE.
    pub fn wait_until(&self, what: &str, mut f: impl FnMut() -> bool) {
        let deadline = Instant::now() + DEADLINE;
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(POLL);
        }
    }

    /// How many of [`World::our_pids`] are agent processes themselves (argv[1] == fake-codex),
    /// not their holders.
    pub fn fake_agents_running(&self) -> usize {
        self.our_pids_running(b"fake-codex").len()
    }

    /// A connection to the holder of `entry`'s agent (a catalog entry): writes into its pane as
    /// a human or another program would, not through the daemon.
    pub fn pane_of(&self, entry: &Value) -> wakterm_runtime::holder::HolderClient {
        let agent_id = entry["agent_id"].as_str().expect("a catalog entry names its agent");
        let holder = self.data.join("h").join(format!("{agent_id}.sock"));
        wakterm_runtime::holder::HolderClient::connect(&holder).expect("the agent's holder")
    }

    /// Pids of the agents' holders among [`World::our_pids`] (argv[1] == __holder).
    pub fn holder_pids(&self) -> Vec<i32> {
        self.our_pids_running(b"__holder")
    }

    /// Pids among [`World::our_pids`] whose argv[1] is `subcommand`.
    fn our_pids_running(&self, subcommand: &[u8]) -> Vec<i32> {
        let runs = |pid: &i32| std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default().split(|b| *b == 0).nth(1) == Some(subcommand);
        self.our_pids().into_iter().filter(runs).collect()
    }

    /// Pids of every process whose environment names our data dir (daemon, holders, fakes).
    pub fn our_pids(&self) -> Vec<i32> {
        let needle = format!("WAKTERM_DATA_DIR={}", self.data.display());
        let mut pids = Vec::new();
        let me = std::process::id() as i32;
        let Ok(dir) = std::fs::read_dir("/proc") else { return pids };
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
            if pid == me {
                continue;
            }
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else { continue };
            if environ.split(|b| *b == 0).any(|kv| kv == needle.as_bytes()) {
                pids.push(pid);
            }
        }
        pids
    }
}

fn collect_jsonl(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_jsonl(&path, out);
        } else if path.extension().is_some_and(|e| e == "jsonl") {
            out.push(path);
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        // A killed daemon leaves its agents' holders running: start one to stop them all.
        let stop = self.run(&["mux", "stop", "--all"]);
        if stop.code == 3 && !self.our_pids().is_empty() {
            let _ = self.run(&["mux", "start"]);
            let _ = self.run(&["mux", "stop", "--all"]);
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.our_pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(POLL);
        }
        for pid in self.our_pids() {
            // SAFETY: kill on a pid whose environment names our private data dir.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = std::io::stderr().flush();
        // WAKTERM_TEST_KEEP=1 keeps the world's files (data directory, rollouts) to read after.
        if std::env::var_os("WAKTERM_TEST_KEEP").is_some() {
            eprintln!("kept the test world in {}", self.root.display());
            return;
        }
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Waits up to `within` for `child` to exit; past it the child is killed and None returned.
pub fn wait_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait for a child") {
            return Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
}

pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Kills with SIGKILL and waits until the pid is gone (or a zombie).
pub fn sigkill_and_wait(pid: u32) {
    // SAFETY: kill on a pid we read from our own daemon's status.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let deadline = Instant::now() + DEADLINE;
    // Gone means every thread is gone or a zombie: a zombie main thread alone can still have
    // threads shutting down that hold the daemon's lock and socket.
    while Instant::now() < deadline {
        if all_threads_dead(pid) {
            return;
        }
        std::thread::sleep(POLL);
    }
    panic!("pid {pid} survived SIGKILL");
}

pub fn all_threads_dead(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.flatten().all(|task| {
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        stat.is_empty() || stat.contains(") Z ") || stat.contains(") X ")
    })
}

/// How many `write_pause` pauses the daemon log at `log` records (usable off the test thread).
pub fn write_pauses_logged(log: &Path) -> usize {
    std::fs::read_to_string(log).unwrap_or_default().matches(wakterm_runtime::daemon::faults::WRITE_PAUSED_LOG).count()
}
