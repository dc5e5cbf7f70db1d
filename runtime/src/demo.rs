//! `wakterm demo`: the whole flow on the built-in fake Codex, in a private temporary data
//! directory, with each step's JSON printed. Runs the real daemon and CLI paths as child
//! processes of this binary, so it exercises exactly what a user runs.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Bound for each wait in the demo (agent ready, baseline observed, final delivered).
pub const STEP_DEADLINE: Duration = Duration::from_secs(30);

struct Demo {
    exe: PathBuf,
    root: PathBuf,
}

impl Demo {
    fn wakterm(&self, args: &[&str]) -> (i32, Value) {
        let output = Command::new(&self.exe).args(args).env("WAKTERM_DATA_DIR", self.root.join("data")).output();
        match output {
            Ok(output) => {
                let text = String::from_utf8_lossy(&output.stdout);
                let value = text.lines().last().and_then(|l| serde_json::from_str(l).ok()).unwrap_or(Value::Null);
                (output.status.code().unwrap_or(1), value)
            }
            Err(error) => (1, json!({"error": error.to_string()})),
        }
    }

    fn step(&self, name: &str, args: &[&str]) -> Result<Value, String> {
        let (code, value) = self.wakterm(args);
        print_step(name, code, &value);
        if code != 0 {
            return Err(format!("step {name} exited {code}"));
        }
        Ok(value)
    }

    fn wait_for(&self, what: &str, ready: impl FnMut(&Value) -> bool) -> Result<Value, String> {
        self.wait_for_agent("zola", what, ready)
    }

    fn wait_for_agent(&self, name: &str, what: &str, mut ready: impl FnMut(&Value) -> bool) -> Result<Value, String> {
        let deadline = Instant::now() + STEP_DEADLINE;
        loop {
            let (_, catalog) = self.wakterm(&["agent", "catalog"]);
            let zola = catalog["agents"].as_array().and_then(|a| a.iter().find(|x| x["name"] == name)).cloned();
            if let Some(zola) = zola.filter(|z| ready(z)) {
                print_step(what, 0, &zola);
                return Ok(zola);
            }
            if Instant::now() > deadline {
                return Err(format!("timed out waiting for: {what}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub fn run(managed: bool) -> i32 {
    let root = std::env::temp_dir().join(format!("wakterm-demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => {
            eprintln!("wakterm demo: cannot find its own binary: {error}");
            return 1;
        }
    };
    let demo = Demo { exe, root: root.clone() };
    let result = if managed { run_managed_steps(&demo) } else { run_steps(&demo) };
    let _ = demo.wakterm(&["mux", "stop", "--all"]);
    let _ = std::fs::remove_dir_all(&root);
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("wakterm demo failed: {message}");
            1
        }
    }
}

/// The schema of a demo line (CLI contract: every JSON line names its versioned schema).
pub const DEMO_STEP_SCHEMA: &str = "wakterm.demo-step.v1";

/// One step's line: its name, the command's exit code and its answer.
fn print_step(name: &str, exit_code: i32, result: &Value) {
    println!("{}", json!({"schema": DEMO_STEP_SCHEMA, "step": name, "exit_code": exit_code, "result": result}));
}

/// The private directories (work dir, CODEX_HOME) and a started daemon.
fn prepare(demo: &Demo) -> Result<(PathBuf, PathBuf), String> {
    let work = demo.root.join("work");
    let codex_home = demo.root.join("codex-home");
    for dir in [&work, &codex_home] {
        std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    }
    crate::paths::private_dir(&demo.root).map_err(|e| e.to_string())?;
    demo.step("mux start", &["mux", "start"])?;
    Ok((work, codex_home))
}

fn run_steps(demo: &Demo) -> Result<(), String> {
    let (work, codex_home) = prepare(demo)?;
    let exe = demo.exe.display().to_string();
    let env = format!("CODEX_HOME={}", codex_home.display());
    let cwd = path_text(&work);
    let reply = "Final answer for: {prompt}";
    demo.step("agent start", &["agent", "start", "--name", "zola", "--cwd", &cwd, "--env", &env, "--", &exe, "fake-codex", "--reply", reply])?;
    demo.wait_for("agent idle", |z| z["state"] == "idle")?;
    demo.step("one-way send (baseline turn)", &["agent", "send", "zola", "Create the baseline turn"])?;
    let zola = demo.wait_for("return-final available", |z| z["return_final_available"] == true)?;
    let request_id = uuid::Uuid::new_v4().to_string();
    let incarnation = zola["incarnation"].as_str().unwrap_or_default().to_string();
    let receipt = demo.step("admit --return-final", &["agent", "admit", "zola", "--incarnation", &incarnation, "--request-id", &request_id, "--return-final", "Complete phases 2 and 3"])?;
    if receipt["reply_pending"] != true {
        return Err("the receipt did not arm a return-final request".to_string());
    }
    let event = wait_for_terminal(demo, &request_id)?;
    print_step("request watch", 0, &event);
    if event["state"] != "completed" {
        return Err(format!("the request ended {}", event["state"]));
    }
    demo.step("mux stop --all", &["mux", "stop", "--all"])?;
    Ok(())
}

/// `demo --managed`: the same flow on the built-in fake `codex app-server` (MGD-*): no baseline
/// turn is needed, the cursor is the app-server's event stream.
fn run_managed_steps(demo: &Demo) -> Result<(), String> {
    let (work, codex_home) = prepare(demo)?;
    let exe = demo.exe.display().to_string();
    let home = format!("CODEX_HOME={}", codex_home.display());
    let reply = "WAKTERM_FAKE_APP_SERVER_REPLY=Final answer for: {prompt}";
    let cwd = path_text(&work);
    let args = ["agent", "start", "--name", "mia", "--managed", "--cwd", &cwd, "--env", &home, "--env", reply, "--", &exe, "fake-codex-app-server", "app-server"];
    demo.step("agent start --managed", &args)?;
    let mia = demo.wait_for_agent("mia", "return-final available", |m| m["return_final_available"] == true)?;
    let request_id = uuid::Uuid::new_v4().to_string();
    let incarnation = mia["incarnation"].as_str().unwrap_or_default().to_string();
    let receipt = demo.step("admit --return-final", &["agent", "admit", "mia", "--incarnation", &incarnation, "--request-id", &request_id, "--return-final", "Complete phases 2 and 3"])?;
    if receipt["reply_pending"] != true || receipt["correlation_source"] != "agent_api_events" {
        return Err("the receipt did not arm a managed return-final request".to_string());
    }
    let event = wait_for_terminal(demo, &request_id)?;
    print_step("request watch", 0, &event);
    if event["state"] != "completed" {
        return Err(format!("the request ended {}", event["state"]));
    }
    demo.step("mux stop --all", &["mux", "stop", "--all"])?;
    Ok(())
}

fn wait_for_terminal(demo: &Demo, request_id: &str) -> Result<Value, String> {
    let deadline = Instant::now() + STEP_DEADLINE;
    while Instant::now() < deadline {
        let output = Command::new(&demo.exe)
            .args(["agent", "request", "watch", "--once"])
            .env("WAKTERM_DATA_DIR", demo.root.join("data"))
            .output()
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8_lossy(&output.stdout).to_string();
        for line in text.lines() {
            let event: Value = serde_json::from_str(line).unwrap_or(Value::Null);
            if event["request_id"] == request_id {
                return Ok(event);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Err("no terminal event arrived".to_string())
}

fn path_text(path: &Path) -> String {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf()).display().to_string()
}
