//! The real Codex CLI (0.169) behind a real `wakterm` daemon, for `conformance_real_codex.rs`.
//!
//! One private world per test, built on `support::World` (data dir, CODEX_HOME and cwd under a
//! short `/tmp/wk-<8 hex>` root, and its Drop guard that stops the mux with every agent and kills
//! leftovers): an in-process loopback model provider (`wakterm_harness::provider`, port 0, one
//! script per test), a private `CODEX_HOME/config.toml` pointing Codex at it, a trusted project
//! cwd and a private HOME. The Codex binary comes from `WAKTERM_REAL_CODEX` (set by
//! `scripts/test-real-codex.sh`); unset or broken is a hard failure, never a silent pass.
//!
//! Drop additionally ends every process that names this world's CODEX_HOME (the
//! `codex app-server --managed-daemon` a TUI without `--disable daemon_auto_start` spawns is
//! reparented to init and outlives both the TUI and the wakterm daemon).

#![allow(dead_code)]

use crate::support::{World, POLL};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use wakterm_harness::provider::{Provider, ProviderConfig, ReceivedRequest, Rule, Script};

/// The first start of Codex in a fresh CODEX_HOME is slow (it creates its SQLite state).
pub const CODEX_START_DEADLINE: Duration = Duration::from_secs(60);
/// A trivial turn takes ~100 ms; a loaded 2-core machine is far slower.
pub const TURN_DEADLINE: Duration = Duration::from_secs(30);
/// The provider's reply template: the final of a turn is this with the (trimmed) prompt.
pub const REPLY: &str = "mock reply to: {prompt}";
/// Codex 0.169 asks the model for a task title after a turn; not a prompt of ours.
pub const TITLE_REQUEST_PREFIX: &str = "Generate a concise, single-line task title";
/// The environment variable naming the Codex binary.
pub const CODEX_ENV: &str = "WAKTERM_REAL_CODEX";

/// The final the provider streams for `prompt` (Codex sends the prompt trimmed, HASH-1).
pub fn reply_for(prompt: &str) -> String {
    REPLY.replace("{prompt}", prompt.trim())
}

/// A rule that holds the turn busy: the reply text streams at once, `response.completed` comes
/// `delay_ms` later (the screen then looks idle; only the rollout knows, fixtures/README.md).
pub fn hold_rule(contains: &str, delay_ms: u64) -> Rule {
    Rule { contains: contains.into(), reply: Some("held reply to: {prompt}".into()), delay_ms, output_delay_ms: 0, fail: None }
}

/// The Codex binary named by WAKTERM_REAL_CODEX, after checking it runs; prints its version so
/// the CI log names it. Panics with instructions otherwise.
pub fn codex_bin() -> (PathBuf, String) {
    let how = "run `bash scripts/test-real-codex.sh` (it installs the pinned Codex with fixtures/install-codex.sh \
               and sets WAKTERM_REAL_CODEX to its path)";
    let Some(path) = std::env::var_os(CODEX_ENV).filter(|p| !p.is_empty()) else {
        panic!("{CODEX_ENV} is not set: this conformance test needs the real Codex CLI; {how}");
    };
    let path = PathBuf::from(path);
    let output = Command::new(&path)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{CODEX_ENV}={} cannot be run: {e}; {how}", path.display()));
    let version = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert!(
        output.status.success() && version.starts_with("codex-cli "),
        "{CODEX_ENV}={} is not a working Codex CLI (exit {:?}, stdout {version:?}, stderr {:?}); {how}",
        path.display(),
        output.status.code(),
        String::from_utf8_lossy(&output.stderr)
    );
    eprintln!("real Codex: {} ({version})", path.display());
    (path, version)
}

pub struct RealWorld {
    pub codex: PathBuf,
    pub version: String,
    /// Private HOME for the agents (Codex and npm write dot files there).
    pub home: PathBuf,
    pub provider: Provider,
    /// Last field: dropped after `RealWorld::drop` ended the Codex app-server daemons.
    pub w: World,
}

impl RealWorld {
    /// Codex check, world, provider with `script`, config.toml, and a running mux.
    pub fn new(exe: &str, script: Script) -> RealWorld {
        RealWorld::with_config(exe, script, "")
    }

    /// As `new`, with `extra` appended to config.toml (e.g. a `[tools.update_plan]` table).
    pub fn with_config(exe: &str, script: Script, extra: &str) -> RealWorld {
        let (codex, version) = codex_bin();
        let w = World::new(exe);
        let home = w.root.join("home");
        std::fs::create_dir_all(&home).expect("private HOME");
        let provider = Provider::start(ProviderConfig { port: 0, script, log_path: None }).expect("start the loopback provider");
        let config = format!(
            "model = \"mock-model\"\nmodel_provider = \"mock\"\ncheck_for_update_on_startup = false\n\
             [model_providers.mock]\nname = \"mock\"\nbase_url = \"{}\"\nwire_api = \"responses\"\nenv_key = \"MOCK_API_KEY\"\n\
             [projects.\"{}\"]\ntrust_level = \"trusted\"\n{extra}",
            provider.base_url(),
            w.work.display()
        );
        std::fs::write(w.codex_home.join("config.toml"), config).expect("write config.toml");
        let rw = RealWorld { codex, version, home, provider, w };
        rw.w.mux_start();
        rw
    }

    /// `wakterm agent start --name NAME --cwd WORK --env ... -- codex -a never -s read-only
    /// [--disable daemon_auto_start]`.
    pub fn start_codex(&self, name: &str, disable_daemon: bool) -> Value {
        let mut command = vec!["-a", "never", "-s", "read-only"];
        if disable_daemon {
            command.extend(["--disable", "daemon_auto_start"]);
        }
        self.start_with(name, &[], &command)
    }

    /// `wakterm agent start --name NAME FLAGS --cwd WORK --env ... -- codex COMMAND...` with this
    /// world's private CODEX_HOME, HOME and the provider's key.
    fn start_with(&self, name: &str, flags: &[&str], command: &[&str]) -> Value {
        let cwd = self.w.work.display().to_string();
        let envs = [
            format!("CODEX_HOME={}", self.w.codex_home.display()),
            "MOCK_API_KEY=x".to_string(),
            format!("HOME={}", self.home.display()),
            "LANG=C.UTF-8".to_string(),
        ];
        let codex = self.codex.display().to_string();
        let mut args: Vec<&str> = vec!["agent", "start", "--name", name];
        args.extend(flags);
        args.extend(["--cwd", &cwd]);
        for env in &envs {
            args.extend(["--env", env.as_str()]);
        }
        args.push("--");
        args.push(&codex);
        args.extend(command);
        self.w.ok(&args)
    }

    /// MGD-1: `wakterm agent start --name NAME --managed --cwd WORK --env ... -- codex app-server`.
    pub fn start_managed(&self, name: &str) -> Value {
        self.start_with(name, &["--managed"], &["app-server"])
    }

    /// Polls the catalog until `ready` holds (bounded by `deadline`).
    pub fn wait_entry(&self, name: &str, what: &str, deadline: Duration, mut ready: impl FnMut(&Value) -> bool) -> Value {
        let end = Instant::now() + deadline;
        let mut last = None;
        loop {
            if let Some(entry) = self.w.catalog_entry(name) {
                if ready(&entry) {
                    return entry;
                }
                last = Some(entry);
            }
            assert!(Instant::now() < end, "timed out after {deadline:?} waiting for {name}: {what}; last catalog entry {last:?}");
            std::thread::sleep(POLL * 4);
        }
    }

    /// Starts Codex and waits for the catalog to show it idle.
    pub fn start_idle(&self, name: &str) -> Value {
        self.start_codex(name, true);
        self.wait_entry(name, "idle after start", CODEX_START_DEADLINE, |z| z["state"] == "idle")
    }

    /// Start, one-way baseline turn, wait until return-final is available.
    pub fn ready(&self, name: &str, baseline: &str) -> Value {
        self.start_idle(name);
        let out = self.w.run(&["agent", "send", name, baseline]);
        assert_eq!(out.code, 0, "baseline send: {out:?}");
        self.wait_turn_completed(baseline);
        self.wait_entry(name, "return-final available", TURN_DEADLINE, |z| z["return_final_available"] == true)
    }

    /// Waits until a `task_complete` carries the provider's final for `prompt`.
    pub fn wait_turn_completed(&self, prompt: &str) {
        let want = reply_for(prompt);
        let end = Instant::now() + TURN_DEADLINE;
        while !self.w.completed_turns().iter().any(|(_, m)| m.as_deref() == Some(want.as_str())) {
            assert!(Instant::now() < end, "timed out waiting for the turn of {prompt:?} to complete; prompts {:?}", self.w.user_prompts());
            std::thread::sleep(POLL * 4);
        }
    }

    /// Polls `request watch --once` until the request's terminal event shows up.
    pub fn wait_terminal(&self, request_id: &str, deadline: Duration) -> Value {
        let end = Instant::now() + deadline;
        loop {
            if let Some(e) = self.w.events_after(0).into_iter().find(|e| e["request_id"] == request_id) {
                return e;
            }
            assert!(Instant::now() < end, "no terminal event for {request_id} within {deadline:?}");
            std::thread::sleep(POLL * 4);
        }
    }

    /// User prompts the provider received (task-title requests and GETs left out), in order.
    pub fn provider_prompts(&self) -> Vec<String> {
        self.provider
            .received()
            .into_iter()
            .filter(|r: &ReceivedRequest| r.method == "POST")
            .filter_map(|r| r.prompt)
            .filter(|p| !p.starts_with(TITLE_REQUEST_PREFIX))
            .collect()
    }

    /// The rollout turn id whose first `UserMessage` is `prompt` (trimmed, as Codex stores it).
    pub fn turn_of_prompt(&self, prompt: &str) -> Option<String> {
        let want = prompt.trim();
        self.w
            .rollout_lines()
            .iter()
            .find(|l| {
                l["payload"]["type"] == "item_completed"
                    && l["payload"]["item"]["type"] == "UserMessage"
                    && l["payload"]["item"]["content"][0]["text"] == want
            })
            .and_then(|l| l["payload"]["turn_id"].as_str().map(str::to_string))
    }

    /// Pids of every process that names our CODEX_HOME in its environment or command line
    /// (Codex TUIs, and the managed app-server daemon and its helper).
    pub fn codex_home_pids(&self) -> Vec<i32> {
        pids_naming(&self.w.codex_home)
    }

    /// Pids of `codex app-server` processes of our CODEX_HOME.
    pub fn app_server_pids(&self) -> Vec<i32> {
        self.codex_home_pids()
            .into_iter()
            .filter(|pid| {
                let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                cmdline.split(|b| *b == 0).any(|a| a == b"app-server")
            })
            .collect()
    }

    /// Ends every process naming our CODEX_HOME: SIGTERM, a bounded wait, then SIGKILL.
    pub fn kill_codex_home_processes(&self) {
        let pids = self.codex_home_pids();
        for pid in &pids {
            // SAFETY: kill on a pid whose environment or command line names our private CODEX_HOME.
            unsafe { libc::kill(*pid, libc::SIGTERM) };
        }
        let end = Instant::now() + Duration::from_secs(3);
        while !self.codex_home_pids().is_empty() && Instant::now() < end {
            std::thread::sleep(POLL);
        }
        for pid in self.codex_home_pids() {
            // SAFETY: as above.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

impl Drop for RealWorld {
    fn drop(&mut self) {
        // Stop the agents first (orderly), then whatever Codex left behind; World's Drop then
        // stops the mux again (a no-op) and removes the root.
        let _ = self.w.run(&["mux", "stop", "--all"]);
        self.kill_codex_home_processes();
    }
}

/// Every live process (not us, not a zombie) whose environment or command line mentions `dir`.
pub fn pids_naming(dir: &Path) -> Vec<i32> {
    let needle = dir.display().to_string().into_bytes();
    let me = std::process::id() as i32;
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else { return pids };
    for entry in entries.flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else { continue };
        if pid == me {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.is_empty() || stat.contains(") Z ") {
            continue;
        }
        let hit = ["environ", "cmdline"].iter().any(|f| {
            let data = std::fs::read(format!("/proc/{pid}/{f}")).unwrap_or_default();
            data.windows(needle.len()).any(|w| w == needle.as_slice())
        });
        if hit {
            pids.push(pid);
        }
    }
    pids
}

/// Rollout files a process holds open, with the open flags from `/proc/PID/fdinfo`.
pub fn held_rollouts(pid: i32) -> Vec<(PathBuf, u32)> {
    let mut held = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return held };
    for fd in fds.flatten() {
        let Ok(target) = std::fs::read_link(fd.path()) else { continue };
        let name = target.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        if !(name.starts_with("rollout-") && name.ends_with(".jsonl")) {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy())).unwrap_or_default();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .and_then(|f| u32::from_str_radix(f.trim(), 8).ok())
            .unwrap_or(0);
        held.push((target, flags));
    }
    held
}

impl RealWorld {
    /// The agent's rendered screen (from its PTY holder) and how wakterm's screen rules read it.
    pub fn screen(&self, agent_id: &str) -> String {
        let socket = self.w.data.join("h").join(format!("{agent_id}.sock"));
        let Ok(mut client) = wakterm_runtime::holder::HolderClient::connect_with_timeout(&socket, Duration::from_secs(5)) else {
            return format!("(no holder at {})", socket.display());
        };
        match client.screen() {
            Ok(screen) => {
                let text = screen.lines.join("\n");
                format!(
                    "{text}\n[composer_state {:?}, turn_hint {:?}]",
                    wakterm_runtime::screen::composer_state(&text),
                    wakterm_runtime::screen::turn_hint(&text)
                )
            }
            Err(e) => format!("(screen failed: {e})"),
        }
    }
}

impl RealWorld {
    /// Appends `extra` to this world's config.toml (Codex reads it when an agent starts, so this
    /// must come before `start_codex`). For config that needs the world's paths.
    pub fn append_config(&self, extra: &str) {
        use std::io::Write;
        let path = self.w.codex_home.join("config.toml");
        let mut file = std::fs::OpenOptions::new().append(true).open(&path).expect("open config.toml");
        file.write_all(format!("\n{extra}").as_bytes()).expect("append to config.toml");
    }

    /// Config registering `<exe> mcp` (the `wakterm mcp` server) as Codex's MCP server `wakterm`,
    /// talking to this world's daemon, with its tools pre-approved (without that, Codex under
    /// approval policy `never` refuses every call, /work/shared/REAL_CODEX.md).
    pub fn wakterm_mcp_config(&self, exe: &str) -> String {
        let quote = |s: &str| serde_json::to_string(s).expect("a string quotes");
        format!(
            "[mcp_servers.wakterm]\ncommand = {}\nargs = [\"mcp\"]\nenv = {{ WAKTERM_DATA_DIR = {} }}\n\
             default_tools_approval_mode = \"approve\"\nstartup_timeout_sec = 30\ntool_timeout_sec = 120\n",
            quote(exe),
            quote(&self.w.data.display().to_string())
        )
    }

    /// Every JSON line of the rollout file of the agent's observed session (catalog
    /// `observer_session`), empty when it has none yet.
    pub fn rollout_lines_of(&self, name: &str) -> Vec<Value> {
        let Some(session) = self.w.catalog_entry(name).and_then(|e| e["observer_session"].as_str().map(str::to_string)) else {
            return Vec::new();
        };
        let Some(file) = self.w.rollout_files().into_iter().find(|f| f.display().to_string().contains(&session)) else {
            return Vec::new();
        };
        let text = std::fs::read_to_string(&file).unwrap_or_default();
        text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
    }

    /// The user prompts (`item_completed` / `UserMessage`) of one agent's rollout, in order.
    pub fn user_prompts_of(&self, name: &str) -> Vec<String> {
        self.rollout_lines_of(name)
            .iter()
            .filter(|l| l["payload"]["type"] == "item_completed" && l["payload"]["item"]["type"] == "UserMessage")
            .filter_map(|l| l["payload"]["item"]["content"][0]["text"].as_str().map(str::to_string))
            .collect()
    }
}
