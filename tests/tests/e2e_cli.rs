//! End-to-end checks of the CLI and daemon edges a demanding user hits: private agent
//! environment, lost replies, concurrent starts, dead panes, oversized prompts, usage errors.

mod support;

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};
use serde_json::json;
use support::{new_id, Out, World};

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";

/// The agent's `--env` reaches the agent but never a command line other users can read.
#[test]
fn agent_environment_is_private() {
    let w = World::new(EXE);
    w.mux_start();
    let marker = w.work.join("secret.out");
    let script = format!("printf %s \"$SECRET_TOKEN\" > {}; exec sleep 600", marker.display());
    let cwd = w.work.display().to_string();
    let started = w.ok(&["agent", "start", "--name", "env", "--harness", "other", "--cwd", &cwd, "--env", "SECRET_TOKEN=s3cr3t-value", "--", "/bin/sh", "-c", &script]);
    w.wait_until("the agent wrote its environment", || std::fs::read_to_string(&marker).is_ok_and(|t| !t.is_empty()));
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "s3cr3t-value");
    for pid in w.our_pids() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        assert!(!String::from_utf8_lossy(&cmdline).contains("s3cr3t-value"), "pid {pid} shows the secret in its command line");
    }
    assert!(started["agent_id"].is_string());
}

/// INP-1 / REC-4: when the daemon dies mid-admission, the CLI says `indeterminate` (exit 5)
/// with the request id it generated, and replaying that id later writes nothing new.
#[test]
fn lost_reply_is_indeterminate_with_the_request_id() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    w.ok(&["mux", "stop"]);
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_FAULT", "after_write").output().expect("mux start");
    assert!(out.status.success());
    // The restarted daemon re-attaches its observer first (slow on a loaded machine); a send
    // before that is refused (`turn_state_unknown`) and never reaches the crash point.
    w.wait_agent("zola", "idle after the restart", |z| z["state"] == "idle");
    let lost = w.run(&["agent", "send", "zola", "written then lost"]);
    assert_eq!(lost.code, 5, "{lost:?}");
    assert_eq!(lost.json["error"], "reply_lost");
    assert_eq!(lost.json["classification"], "indeterminate");
    let id = lost.json["request_id"].as_str().expect("request id").to_string();
    w.mux_start();
    let replay = w.run(&["agent", "send", "zola", "--request-id", &id, "written then lost"]);
    assert_eq!(replay.json["classification"], "indeterminate", "{replay:?}");
    assert_eq!(replay.json["replayed"], true);
    std::thread::sleep(Duration::from_millis(300));
    let count = w.user_prompts().iter().filter(|p| p.as_str() == "written then lost").count();
    assert_eq!(count, 1, "written exactly once");
}

/// Concurrent starts of one name: exactly one agent, and no untracked process left behind.
#[test]
fn concurrent_starts_of_one_name_make_one_agent() {
    let w = World::new(EXE);
    w.mux_start();
    let exe = w.exe.display().to_string();
    let env = format!("CODEX_HOME={}", w.codex_home.display());
    let cwd = w.work.display().to_string();
    let children: Vec<_> = (0..3)
        .map(|_| {
            w.cmd(&["agent", "start", "--name", "dup", "--cwd", &cwd, "--env", &env, "--", &exe, "fake-codex"])
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let codes: Vec<i32> = children.into_iter().map(|c| c.wait_with_output().unwrap().status.code().unwrap_or(-1)).collect();
    assert_eq!(codes.iter().filter(|c| **c == 0).count(), 1, "{codes:?}");
    assert!(codes.iter().all(|c| *c == 0 || *c == 4), "losers are told name_taken: {codes:?}");
    assert_eq!(w.fake_agents_running(), 1, "exactly one agent process runs");
}

/// An agent whose pane died while the daemon was down can be restarted under the same id.
#[test]
fn restart_brings_back_an_agent_whose_pane_died() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    w.ok(&["mux", "stop"]);
    for pid in w.holder_pids() {
        support::sigkill_and_wait(pid as u32);
    }
    w.mux_start();
    w.wait_agent("zola", "stopped", |z| z["state"] == "stopped");
    let restarted = w.ok(&["agent", "restart", "zola"]);
    assert_ne!(restarted["incarnation"], entry["incarnation"]);
    let z = w.wait_agent("zola", "running again", |z| z["state"] == "idle");
    assert_eq!(z["agent_id"], entry["agent_id"], "same agent id");
}

/// LIFE-2: a command that cannot start fails `agent start` with the reason, naming the command,
/// and leaves nothing behind (the name can be used again, no pane or its log is left);
/// `agent restart` of an agent whose working directory is gone fails the same way instead of
/// running it in `$HOME`: for a live pane without ending the process it runs, and for a new
/// pane. Both used to answer success with an agent that was `stopped` or ran elsewhere.
#[test]
fn life_2_a_command_that_cannot_start_is_an_error_not_an_agent() {
    let w = World::new(EXE);
    w.mux_start();
    let exe = w.exe.display().to_string();
    let env = format!("CODEX_HOME={}", w.codex_home.display());
    let cwd = w.work.display().to_string();
    let out = w.run(&["agent", "start", "--name", "zola", "--cwd", &cwd, "--env", &env, "--", "/nonexistent/agent-binary"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(out.json["error"], "agent_start_failed", "{out:?}");
    let message = out.json["message"].as_str().unwrap_or_default();
    assert!(message.contains("/nonexistent/agent-binary") && message.contains("could not start"), "{out:?}");
    assert!(w.catalog_entry("zola").is_none(), "nothing left in the catalog");
    assert!(w.holder_pids().is_empty(), "no pane left");
    let left: Vec<_> = std::fs::read_dir(w.data.join("h")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(left.is_empty(), "no socket or pane log left: {left:?}");
    w.ok(&["agent", "start", "--name", "zola", "--cwd", &cwd, "--env", &env, "--", &exe, "fake-codex"]);
    w.wait_agent("zola", "idle", |z| z["state"] == "idle");

    let gone = w.root.join("gone");
    std::fs::create_dir_all(&gone).unwrap();
    let gone_cwd = gone.display().to_string();
    w.ok(&["agent", "start", "--name", "mia", "--cwd", &gone_cwd, "--env", &env, "--", &exe, "fake-codex"]);
    w.wait_agent("mia", "idle", |z| z["state"] == "idle");
    let running = w.wait_agent("mia", "idle", |z| z["state"] == "idle");
    std::fs::remove_dir(&gone).unwrap();
    let restart_refused = |pane: &str| {
        let out = w.run(&["agent", "restart", "mia"]);
        assert_ne!(out.code, 0, "{pane}: {out:?}");
        assert_eq!(out.json["error"], "agent_restart_failed", "{pane}: {out:?}");
        assert!(out.json["message"].as_str().unwrap_or_default().contains(&format!("{gone_cwd} is gone")), "{pane}: {out:?}");
    };
    restart_refused("the live pane");
    let still = w.catalog_entry("mia").expect("mia");
    assert_eq!((&still["state"], &still["incarnation"]), (&running["state"], &running["incarnation"]), "the running process is left alone");
    w.ok(&["mux", "stop"]);
    for pid in w.our_pids() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        if String::from_utf8_lossy(&cmdline).contains(&gone_cwd) {
            support::sigkill_and_wait(pid as u32); // mia's holder: its pane, and the process in it, go
        }
    }
    w.mux_start();
    w.wait_agent("mia", "stopped", |z| z["state"] == "stopped");
    restart_refused("a new pane");
    w.wait_agent("mia", "still stopped", |z| z["state"] == "stopped");
    assert_eq!(w.wait_agent("zola", "still idle", |z| z["state"] == "idle")["name"], "zola");
}

/// LIFE-3: `agent restart` and `agent stop` of one agent change its pane one at a time. A
/// restart racing a stop used to find the pane the stop had just ended and start a new one for
/// an agent no longer in the catalog: a Codex running outside it (LIFE-1), with `agent stop`
/// having answered `stopped`. The window is a few milliseconds after the stop begins, so the
/// restart's delay is swept over it. Then two restarts of a pane that is gone: one pane, one
/// process (the second respawns in the first's pane).
#[test]
fn life_3_a_restart_racing_a_stop_never_leaves_a_pane_behind() {
    let w = World::new(EXE);
    w.mux_start();
    let wait_for = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !done() {
            assert!(Instant::now() < deadline, "timed out: {what}; holders {:?}, fake agents {}", w.holder_pids(), w.fake_agents_running());
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    for step in 0..16u64 {
        let name = format!("race{step}");
        w.start_agent(&name, REPLY, &[]);
        let stop = w.cmd(&["agent", "stop", &name]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(2 * step));
        let restart = w.run(&["agent", "restart", &name]);
        let stopped = stop.wait_with_output().unwrap();
        assert!(stopped.status.success(), "{name}: stop {stopped:?}");
        assert!(restart.code == 0 || restart.json["error"] == "agent_unknown", "{name}: restart {restart:?}");
        assert!(w.catalog_entry(&name).is_none(), "{name} left the catalog");
        wait_for(&format!("{name}: nothing of a stopped agent runs (restart answered {})", restart.json), &|| w.holder_pids().is_empty() && w.fake_agents_running() == 0);
    }

    w.start_agent("pair", REPLY, &[]);
    w.wait_agent("pair", "idle", |z| z["state"] == "idle");
    for pid in w.holder_pids() {
        support::sigkill_and_wait(pid as u32);
    }
    w.wait_agent("pair", "stopped", |z| z["state"] == "stopped");
    wait_for("the killed pane's process is gone", &|| w.fake_agents_running() == 0);
    let first = w.cmd(&["agent", "restart", "pair"]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap();
    let second = w.run(&["agent", "restart", "pair"]);
    let first = first.wait_with_output().unwrap();
    assert!(first.status.success() && second.code == 0, "both restarts succeed: {first:?} {second:?}");
    w.wait_agent("pair", "idle", |z| z["state"] == "idle");
    assert_eq!((w.holder_pids().len(), w.fake_agents_running()), (1, 1), "one pane and one process");
}

/// MON-1: a new process that `agent restart` told the engine of is reported by the monitor's
/// next snapshot, even when it looks as the old one did (idle, no rollout yet). Two restarts in
/// quick succession left the agent `unknown` for good: the engine had dropped its view with the
/// old process, and the monitor, whose run found no change of its own, saw nothing new to send.
#[test]
fn mon_1_a_restarted_agent_that_looks_unchanged_is_reported_again() {
    let w = World::new(EXE);
    w.mux_start();
    w.start_agent("zola", REPLY, &[]);
    w.wait_agent("zola", "idle", |z| z["state"] == "idle");
    for gap_ms in [0, 20, 40] {
        let first = w.ok(&["agent", "restart", "zola"]);
        std::thread::sleep(Duration::from_millis(gap_ms));
        let second = w.ok(&["agent", "restart", "zola"]);
        assert_ne!(first["incarnation"], second["incarnation"], "two processes");
        let what = format!("idle after two restarts {gap_ms} ms apart");
        w.wait_agent("zola", &what, |z| z["state"] == "idle" && z["incarnation"] == second["incarnation"]);
    }
}

/// LIFE-4: a stopped agent says how it ended: the catalog's `exit_code` (128 + the signal for a
/// signal death; null while it runs), and `agent attach` answers with that code and the pane's
/// last screen, where a Codex that exits at once says why. Both used to say only "no process
/// runs behind the agent" / "has no running process".
#[test]
fn life_4_a_stopped_agent_says_how_it_ended() {
    let w = World::new(EXE);
    w.mux_start();
    let env = format!("CODEX_HOME={}", w.codex_home.display());
    let cwd = w.work.display().to_string();
    w.ok(&["agent", "start", "--name", "quick", "--cwd", &cwd, "--env", &env, "--", "sh", "-c", "echo 'Not logged in. Run codex login'; exit 3"]);
    let entry = w.wait_agent("quick", "stopped with its code", |z| z["state"] == "stopped" && !z["exit_code"].is_null());
    assert_eq!(entry["exit_code"], 3, "{entry}");
    let out = w.run(&["agent", "attach", "quick"]);
    assert_eq!((out.code, &out.json["error"], &out.json["exit_code"]), (1, &serde_json::json!("agent_not_running"), &serde_json::json!(3)), "{out:?}");
    assert_eq!(out.json["last_screen"], serde_json::json!(["Not logged in. Run codex login"]), "{out:?}");
    assert!(out.json["message"].as_str().unwrap_or_default().contains("exited with code 3"), "{out:?}");
    // By its id in capitals too, as every other command takes it (it was `agent_unknown`).
    let upper = entry["agent_id"].as_str().expect("agent_id").to_uppercase();
    assert_eq!(w.run(&["agent", "attach", &upper]).json["error"], "agent_not_running", "attach {upper}");
    // Its name stays taken until `agent stop`, and the refusal says so.
    let again = w.run(&["agent", "start", "--name", "quick", "--cwd", &cwd, "--env", &env, "--", "true"]);
    assert_eq!((again.code, &again.json["error"]), (4, &serde_json::json!("name_taken")), "{again:?}");
    assert!(again.json["message"].as_str().unwrap_or_default().contains("`agent stop quick` frees the name"), "{again:?}");

    let started = w.start_agent("zola", REPLY, &[]);
    let idle = w.wait_agent("zola", "idle", |z| z["state"] == "idle");
    assert!(idle["exit_code"].is_null(), "a running agent has no exit code: {idle}");
    // Attached with input that ends (not a terminal): it detaches quietly, exit 0; the end of
    // the stream it closed itself is not "the holder went away" (a review saw that message).
    let attached = w.cmd(&["agent", "attach", "zola"]).stdin(std::process::Stdio::null()).output().expect("attach");
    let shown = String::from_utf8_lossy(&attached.stdout);
    assert!(attached.status.success() && !shown.contains("stream ended"), "{:?}: {shown}", attached.status);
    let pid = started["pid"].as_i64().expect("the start names the pid") as u32;
    support::sigkill_and_wait(pid);
    let killed = w.wait_agent("zola", "stopped by SIGKILL", |z| z["state"] == "stopped" && !z["exit_code"].is_null());
    assert_eq!(killed["exit_code"], 128 + 9, "{killed}");

    // A restart whose command could not start (its program deleted, LIFE-2): attach says so,
    // rather than a bare exit code (127, the holder's own for a failed spawn).
    let program = w.root.join("agent.sh");
    std::fs::write(&program, format!("#!/bin/sh\nexec {} fake-codex\n", w.exe.display())).unwrap();
    std::fs::set_permissions(&program, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    w.ok(&["agent", "start", "--name", "mia", "--cwd", &cwd, "--env", &env, "--", &program.display().to_string()]);
    let running = w.wait_agent("mia", "idle", |z| z["state"] == "idle");
    let pid = running["incarnation"].as_str().and_then(|inc| inc.split('.').next()).and_then(|pid| pid.parse().ok()).expect("the incarnation names the pid");
    support::sigkill_and_wait(pid);
    w.wait_agent("mia", "stopped", |z| z["state"] == "stopped");
    std::fs::remove_file(&program).unwrap();
    assert_eq!(w.run(&["agent", "restart", "mia"]).json["error"], "agent_restart_failed");
    let out = w.run(&["agent", "attach", "mia"]);
    assert_eq!(out.json["error"], "agent_not_running", "{out:?}");
    assert!(out.json["spawn_error"].as_str().is_some_and(|error| !error.is_empty()), "{out:?}");
    assert!(out.json["message"].as_str().unwrap_or_default().contains("could not start"), "{out:?}");
}

/// LIFE-5: `mux stop --all` ends every agent, those whose start is under way too: it waits for
/// them, and no agent starts once a stop began (`daemon_stopping`). An agent whose start ended
/// after `--all` took its list ran on, unnamed in `agents_stopped` (4 rounds of 5 here). The
/// delay of the stop behind the starts is swept over their window.
#[test]
fn life_5_mux_stop_all_ends_agents_whose_start_is_under_way() {
    let w = World::new(EXE);
    let exe = w.exe.display().to_string();
    let env = format!("CODEX_HOME={}", w.codex_home.display());
    let cwd = w.work.display().to_string();
    for round in 0..5u64 {
        w.mux_start();
        let starts: Vec<_> = (0..6)
            .map(|i| {
                let name = format!("r{round}s{i}");
                w.cmd(&["agent", "start", "--name", &name, "--cwd", &cwd, "--env", &env, "--", &exe, "fake-codex"]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(10 * round));
        let stopped = w.ok(&["mux", "stop", "--all"]);
        let stopped: Vec<String> = stopped["agents_stopped"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect();
        for start in starts {
            let out = start.wait_with_output().unwrap();
            let json: serde_json::Value = String::from_utf8_lossy(&out.stdout).lines().rev().find_map(|l| serde_json::from_str(l).ok()).unwrap_or_default();
            if out.status.success() {
                assert!(stopped.iter().any(|n| json["name"] == n.as_str()), "round {round}: {json} started, but the stop did not name it: {stopped:?}");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while !w.holder_pids().is_empty() {
            assert!(Instant::now() < deadline, "round {round}: {:?} holders run on after mux stop --all named {stopped:?}", w.holder_pids());
            std::thread::sleep(Duration::from_millis(25));
        }
    }
}

/// CLI-2: a data directory the CLI cannot use is refused with advice that fits: a relative
/// `WAKTERM_DATA_DIR` (it would name another directory from every working directory), an
/// empty one (a script's unset variable) or one whose path is no UTF-8 is refused outright,
/// and a regular file in its place is not told that `mux start` repairs its modes (it
/// cannot); a directory open to others still is.
#[test]
fn cli_2_an_unusable_data_dir_gets_advice_that_fits() {
    let w = World::new(EXE);
    let run = |dir: &std::ffi::OsStr| {
        let out = w.cmd(&["agent", "catalog"]).env("WAKTERM_DATA_DIR", dir).stdin(Stdio::null()).output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        (out.status.code(), json)
    };
    let (code, json) = run("relative/dir".as_ref());
    assert_eq!((code, &json["error"]), (Some(1), &serde_json::json!("no_data_dir")), "{json}");
    assert!(json["message"].as_str().unwrap_or_default().contains("absolute"), "{json}");
    // Set but empty is a script's unset variable, not a wish for the default directory (it
    // reached the user's default daemon).
    let (code, json) = run("".as_ref());
    assert_eq!((code, &json["error"]), (Some(1), &serde_json::json!("no_data_dir")), "{json}");
    assert!(json["message"].as_str().unwrap_or_default().contains("empty"), "{json}");
    let file = w.root.join("a-file");
    std::fs::write(&file, b"").unwrap();
    let (_, json) = run(file.as_os_str());
    assert_eq!(json["error"], "data_dir_not_private", "{json}");
    assert!(!json["message"].as_str().unwrap_or_default().contains("repairs its modes"), "no advice that cannot work: {json}");
    let open = w.root.join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let (_, json) = run(open.as_os_str());
    assert!(json["message"].as_str().unwrap_or_default().contains("repairs its modes"), "{json}");
    // A path that is no UTF-8: the daemon names its paths in JSON, and it aborted at its first
    // status call after making its database and socket (a hostile run). Refused before
    // anything is made, by `mux start` too.
    use std::os::unix::ffi::OsStrExt;
    let latin1 = w.root.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    let (code, json) = run(latin1.as_os_str());
    assert_eq!((code, &json["error"]), (Some(1), &serde_json::json!("no_data_dir")), "{json}");
    assert!(json["message"].as_str().unwrap_or_default().contains("not UTF-8"), "{json}");
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_DATA_DIR", &latin1).stdin(Stdio::null()).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!((out.status.code(), &json["error"]), (Some(1), &serde_json::json!("no_data_dir")), "{json}");
    assert!(!latin1.exists(), "nothing was made");
}

/// CORR-14: a working directory whose path is no UTF-8 is refused (`invalid_cwd`, exit 2),
/// whether named with `--cwd` or the caller's own: the CLI sent a lossy copy, and the agent
/// ran in a directory with U+FFFD in its name (or was refused as not a directory; a hostile
/// run).
#[test]
fn corr_14_a_working_directory_that_is_no_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt;
    let w = World::new(EXE);
    w.mux_start();
    let latin1 = w.root.join(std::ffi::OsStr::from_bytes(b"caf\xe9"));
    let look_alike = w.root.join("caf\u{fffd}");
    for dir in [&latin1, &look_alike] {
        std::fs::create_dir(dir).unwrap();
    }
    let mut named = w.cmd(&["agent", "start", "--name", "lossy", "--cwd"]);
    named.arg(&latin1).args(["--", "sleep", "30"]);
    let mut inherited = w.cmd(&["agent", "start", "--name", "lossy", "--", "sleep", "30"]);
    inherited.current_dir(&latin1);
    for mut start in [named, inherited] {
        let out = Out::of(start.stdin(Stdio::null()).output().unwrap());
        assert_eq!((out.code, out.json["error"].as_str()), (2, Some("invalid_cwd")), "{out:?}");
        assert!(out.json["message"].as_str().unwrap_or_default().contains("not UTF-8"), "{out:?}");
        assert!(w.catalog_entry("lossy").is_none(), "nothing started");
    }
}

/// INP-2, INP-4: a request id or an incarnation that is no UTF-8 gets the receipt a malformed
/// one gets (`invalid`, exit 4, nothing sent), as a prompt or a target that is no text does:
/// it was clap's usage error, exit 2 (a hostile run). A request id that is none is null in it.
#[test]
fn inp_2_a_request_id_or_incarnation_that_is_no_utf8_is_invalid() {
    use std::os::unix::ffi::OsStrExt;
    let w = World::new(EXE);
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    let id = new_id();
    let cases = [
        (vec!["agent", "send", "zola", "--request-id"], "request_id_malformed"),
        (vec!["agent", "admit", "zola", "--incarnation", "inc", "--request-id"], "request_id_malformed"),
        (vec!["agent", "admit", "zola", "--request-id", &id, "--incarnation"], "incarnation_malformed"),
    ];
    for (args, reason) in cases {
        let out = Out::of(w.cmd(&args).arg(latin1).arg("a prompt").stdin(Stdio::null()).output().unwrap());
        assert_eq!((out.code, out.json["classification"].as_str(), out.json["reason"].as_str()), (4, Some("invalid"), Some(reason)), "{args:?}: {out:?}");
        let named = if reason == "request_id_malformed" { serde_json::Value::Null } else { json!(id) };
        assert_eq!((&out.json["request_id"], &out.json["prompt_written"]), (&named, &json!(false)), "{args:?}: {out:?}");
        // An id that is no UUID was never stored (retry-safe, as for `abc`); a caller's own
        // well-formed one only the daemon can judge (IDEM-7).
        assert_eq!(out.json["retry_safe"], json!(reason == "request_id_malformed"), "{args:?}: {out:?}");
    }
    // After a malformed id nothing else is judged (INP-2), whatever else is no text: the
    // incarnation, the target, the prompt (a review found the last two judged first), and a
    // prompt on standard input is not read.
    let out = Out::of(w.cmd(&["agent", "admit", "zola", "--request-id", "abc", "--incarnation"]).arg(latin1).arg("a prompt").stdin(Stdio::null()).output().unwrap());
    assert_eq!((out.code, out.json["reason"].as_str(), out.json["retry_safe"].as_bool()), (4, Some("request_id_malformed"), Some(true)), "{out:?}");
    let target_first = Out::of(w.cmd(&["agent", "send", "--request-id", "abc"]).arg(latin1).arg("a prompt").stdin(Stdio::null()).output().unwrap());
    let prompt_first = Out::of(w.cmd(&["agent", "send", "--request-id", "abc", "zola"]).arg(latin1).stdin(Stdio::null()).output().unwrap());
    // Over the prompt limit: read, it would be `prompt_too_large`.
    let oversized = w.data.parent().unwrap().join("oversized-prompt");
    std::fs::write(&oversized, vec![b'x'; 100 * 1024]).unwrap();
    let stdin = std::fs::File::open(&oversized).unwrap();
    let stdin_first = Out::of(w.cmd(&["agent", "send", "--request-id", "abc", "zola", "-"]).stdin(stdin).output().unwrap());
    for out in [target_first, prompt_first, stdin_first] {
        assert_eq!((out.code, out.json["reason"].as_str(), out.json["retry_safe"].as_bool()), (4, Some("request_id_malformed"), Some(true)), "{out:?}");
    }
    // The nil UUID is malformed too, first (it was `incarnation_malformed` here, a review); named
    // by the caller, it may be stored from before the rule, so never retry-safe (IDEM-7).
    let nil = "00000000-0000-0000-0000-000000000000";
    let out = Out::of(w.cmd(&["agent", "admit", "zola", "--request-id", nil, "--incarnation"]).arg(latin1).arg("a prompt").stdin(Stdio::null()).output().unwrap());
    assert_eq!((out.code, out.json["reason"].as_str(), out.json["retry_safe"].as_bool()), (4, Some("request_id_malformed"), Some(false)), "{out:?}");
    assert!(!w.data.exists(), "nothing was sent: no daemon was asked for");
}

/// INP-1: a prompt over the limit on standard input is refused as `invalid` (exit 4) without
/// reading the whole stream, and nothing is written.
#[test]
fn oversized_prompt_on_stdin_is_invalid() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let id = new_id();
    let mut child = w.cmd(&["agent", "send", "zola", "--request-id", &id, "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..32 {
            if stdin.write_all(&chunk).is_err() {
                break; // the CLI stopped reading: expected
            }
        }
    });
    let out = child.wait_with_output().unwrap();
    let _ = writer.join();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(out.status.code(), Some(4), "{json}");
    assert_eq!(json["reason"], "prompt_too_large");
    assert_eq!(json["request_id"], id.as_str());
    assert_eq!(json["prompt_written"], false);
    // IDEM-7: the CLI cannot tell whether the id it was given was written: never retry-safe.
    assert_eq!(json["retry_safe"], false, "{json}");
    // Bytes that are no UTF-8 get the same kind of receipt (it was a bare error object).
    let mut child = w.cmd(&["agent", "send", "zola", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(b"caf\xe9 latin-1").unwrap();
    let out = child.wait_with_output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((out.status.code(), json["classification"].as_str(), json["reason"].as_str()), (Some(4), Some("invalid"), Some("prompt_not_utf8")), "{json}");
    assert_eq!((json["schema"].as_str(), json["retry_safe"].as_bool()), (Some("wakterm.agent-admission.receipt.v1"), Some(true)), "a generated id is new: {json}");
    // The same bytes as the argument: the same receipt (it was a usage error, exit 2).
    use std::os::unix::ffi::OsStrExt;
    let latin1 = std::ffi::OsStr::from_bytes(b"caf\xe9 latin-1");
    let out = w.cmd(&["agent", "send", "zola"]).arg(latin1).stdin(Stdio::null()).output().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((out.status.code(), json["classification"].as_str(), json["reason"].as_str()), (Some(4), Some("invalid"), Some("prompt_not_utf8")), "{json}");
    // INP-4: such bytes as the target are `target_malformed` (no name or id holds them), in
    // each command's receipt, before standard input is read (they were clap's usage error).
    let id = "7d5e3c1a-1111-4222-8333-000000000001";
    for (args, schema) in [
        (vec!["agent", "send"], "wakterm.agent-admission.receipt.v1"),
        (vec!["agent", "admit", "--incarnation", "inc", "--request-id", id], "wakterm.agent-admission.receipt.v1"),
        (vec!["agent", "submit"], "wakterm.session-submit.receipt.v1"),
    ] {
        let mut child = w.cmd(&args).arg(latin1).arg("-").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
        let _ = child.stdin.take().unwrap().write_all(b"caf\xe9"); // read first, this was prompt_not_utf8
        let out = child.wait_with_output().unwrap();
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        assert_eq!((out.status.code(), json["classification"].as_str(), json["reason"].as_str()), (Some(4), Some("invalid"), Some("target_malformed")), "{args:?}: {json}");
        assert_eq!(json["schema"].as_str(), Some(schema), "{args:?}: {json}");
    }
}

/// INP-4: a target that cannot name an agent (empty, white space) is `target_malformed`, exit 2,
/// for `agent stop`, `restart` and `output` too (they said `agent_unknown`, exit 6, which reads
/// as "start it first"); the agent of a well-formed name is untouched.
#[test]
fn inp_4_a_malformed_target_is_a_usage_error_for_every_agent_command() {
    let w = World::new(EXE);
    let malformed = |w: &World| {
        for args in [&["agent", "stop", ""][..], &["agent", "restart", " "], &["agent", "stop", "zola	"], &["agent", "attach", "zo la"], &["agent", "events", "--agent", "nobody", "--agent", " ", "--after", "0"]] {
            let out = w.run(args);
            assert_eq!((out.code, out.json["error"].as_str()), (2, Some("target_malformed")), "{args:?}: {out:?}");
        }
        // OUT-1: the output page says it in its own schema, as every answer of it.
        let output = w.run(&["agent", "output", "zo la"]);
        assert_eq!((output.code, output.json["state"].as_str()), (2, Some("target_malformed")), "{output:?}");
        assert_eq!(output.json["schema"], "wakterm.agent-output-shadow.experimental.v1");
    };
    // A usage error needs no daemon (it said daemon_not_running, exit 3, for all but attach).
    malformed(&w);
    w.mux_start();
    w.ready_agent("zola", "ok", &[]);
    malformed(&w);
    // The daemon checks too, for every other client (the CLI no longer reaches it with one).
    // (300 filters, one malformed: the CLI answers target_malformed, so the daemon does too.)
    let many: Vec<String> = (0..300).map(|i| if i == 299 { " ".to_string() } else { format!("a{i}") }).collect();
    for request in [json!({"op": "agent_stop", "target": " "}), json!({"op": "agent_output", "target": ""}), json!({"op": "events", "after": 0, "once": true, "agents": ["nobody", " "]}), json!({"op": "events", "after": 0, "once": true, "agents": many})] {
        let reply = w.raw_call(&request);
        let said = reply["body"]["error"] == "target_malformed" || reply["body"]["state"] == "target_malformed";
        assert!(reply["exit_code"] == 2 && said, "{request}: {reply}");
    }
    let nobody = w.run(&["agent", "stop", "nobody"]);
    assert_eq!((nobody.code, nobody.json["error"].as_str()), (6, Some("agent_unknown")), "{nobody:?}");
    let events = w.run(&["agent", "events", "--agent", "nobody", "--after", "0"]);
    assert_eq!((events.code, events.json["error"].as_str()), (6, Some("agent_unknown")), "{events:?}");
    assert_eq!(w.catalog_entry("zola").expect("zola still runs")["state"], "idle");
}

/// INP-1..5: `agent send`, `admit` and `submit` refuse what needs no state (a malformed
/// target, an id that is no UUID, an empty prompt) before they connect, with the receipt the
/// daemon gives the same request: with no daemon running they said `daemon_not_running`. The
/// engine's own check answers both (`stateless_check`, `submit_input_problem`), in its order
/// (the prompt before the target). IDEM-7: a caller's own well-formed id may be known to the
/// daemon, so it is asked when it runs; without one, such a refusal is never retry-safe.
#[test]
fn inp_4_send_admit_and_submit_refuse_a_bad_request_before_connecting() {
    let w = World::new(EXE);
    let id = "5d3b1f6e-8a2c-4e7d-9b1f-3c5e7a9d1b2f";
    // (arguments, reason, whether the caller named a well-formed id of its own)
    type Case<'a> = (&'a [&'a str], &'a str, bool);
    let cases: [Case; 6] = [
        (&["agent", "send", " ", "hi"], "target_malformed", false),
        (&["agent", "send", "--request-id", id, "", "hi"], "target_malformed", true),
        (&["agent", "admit", "zola", "--incarnation", "x", "--request-id", "not-a-uuid", "hi"], "request_id_malformed", false),
        (&["agent", "admit", "zo la", "--incarnation", "x", "--request-id", id, " "], "prompt_empty", true),
        (&["agent", "submit", "\tzola", "hi"], "target_malformed", false),
        (&["agent", "submit", "zo la", " "], "prompt_empty", false),
    ];
    let refused = |w: &World, daemon: bool| {
        for (args, reason, own_id) in cases {
            let out = w.run(args);
            assert_eq!((out.code, out.json["classification"].as_str(), out.json["reason"].as_str()), (4, Some("invalid"), Some(reason)), "{args:?}: {out:?}");
            // The daemon knows the id is new; without it, nobody can say.
            assert_eq!(out.json["retry_safe"], !own_id || daemon, "{args:?}: {out:?}");
            if args[1] == "submit" {
                // SUB-5: a submit receipt names its submission, refused here as by the daemon.
                let named = out.json["submission_id"].as_str().is_some_and(|id| uuid::Uuid::parse_str(id).is_ok());
                assert!(named, "{args:?}: {out:?}");
            }
        }
    };
    refused(&w, false);
    w.mux_start();
    w.ready_agent("zola", "ok", &[]);
    refused(&w, true);
    // The daemon's own answers to the same requests (the CLI no longer sends them).
    let admit = |target: &str, request_id: &str, prompt: &str| {
        json!({"op": "admit", "operation": "admit", "target": target, "exact_agent_id": false, "incarnation": "x", "request_id": request_id,
               "prompt": prompt, "paste_mode": "bracketed", "return_mode": "one_way", "final_timeout_ms": 0})
    };
    let daemon: [(serde_json::Value, &str); 4] = [
        (admit(" ", id, "hi"), "target_malformed"),
        (admit("zola", "not-a-uuid", "hi"), "request_id_malformed"),
        (admit("zo la", id, " "), "prompt_empty"),
        (json!({"op": "submit", "target": "zo la", "text": " "}), "prompt_empty"),
    ];
    for (request, reason) in daemon {
        let reply = w.raw_call(&request);
        assert_eq!((reply["exit_code"].as_i64(), reply["body"]["reason"].as_str()), (Some(4), Some(reason)), "{request}: {reply}");
    }
    assert_eq!(w.catalog_entry("zola").expect("zola still runs")["state"], "idle", "nothing was written");
}

/// CLI-4: the CLI binary names its monotonic clock as any other process of this machine and
/// namespace does (the daemon asks the same function): had the name held anything of one
/// process, no daemon would ever find it its own and every give-up would be judged on the wall
/// clock, silently (the last notes listed no test of it). What a waiting call sends, read by a
/// stand-in daemon.
#[test]
fn cli_4_the_cli_names_its_monotonic_clock_as_the_daemon_does() {
    let w = World::new(EXE);
    let received = w.silent_daemon();
    let before = wakterm_runtime::holder::protocol::monotonic_ms();
    let lost = w.run(&["agent", "send", "zola", "hello"]);
    assert_eq!((lost.code, lost.json["error"].as_str()), (5, Some("reply_lost")), "{lost:?}");
    let sent: serde_json::Value = serde_json::from_str(&received.recv_timeout(std::time::Duration::from_secs(10)).expect("the request was sent")).unwrap();
    let here = wakterm_runtime::protocol::monotonic_clock_id().expect("this machine names its monotonic clock");
    assert_eq!(sent["give_up_clock"].as_str(), Some(here.as_str()), "{sent}");
    let at = sent["give_up_at_monotonic_ms"].as_u64().expect("a monotonic give-up");
    assert!(at > before && at <= wakterm_runtime::holder::protocol::monotonic_ms() + 600_000, "{sent}");
}

/// ADM-18, IDEM-7: a no-steer send asks the daemon's capabilities first; when that question
/// fails (the daemon hangs up on it), nothing of the prompt was sent, and the answer says so
/// (a review found it answered `reply_lost`, "the prompt may have been written").
#[test]
fn adm_18_a_failed_capabilities_question_is_no_lost_prompt() {
    let w = World::new(EXE);
    let received = w.silent_daemon();
    let out = w.run(&["agent", "send", "--no-steer", "zola", "hello"]);
    assert_ne!(out.code, 5, "nothing was sent of the prompt: {out:?}");
    assert_eq!(out.json["error"], "daemon_io", "{out:?}");
    let asked: serde_json::Value = serde_json::from_str(&received.recv_timeout(std::time::Duration::from_secs(10)).unwrap()).unwrap();
    assert_eq!(asked["op"], "capabilities", "{asked}");
    assert!(received.recv_timeout(std::time::Duration::from_millis(300)).is_err(), "the admission was never sent");
}

/// Usage errors are structured JSON on stdout with exit 2, like every other answer.
#[test]
fn usage_errors_are_json() {
    let w = World::new(EXE);
    let out = w.run(&["agent", "admit", "zola", "hi"]);
    assert_eq!(out.code, 2);
    assert_eq!(out.json["error"], "usage");
    let out = w.run(&["agent", "request", "get", "nope"]);
    assert_eq!(out.code, 3, "no daemon runs: {out:?}");
    assert_eq!(out.json["error"], "daemon_not_running");
}

/// LOG-1: a daemon that migrates an existing database says so in its log before the work and once it
/// is committed: `mux start` waits past its usual bound only while the first line has no second
/// (`mux::still_migrating`). A start without a migration says neither.
#[test]
fn log_1_mux_start_logs_a_database_migration_before_and_after() {
    use wakterm_runtime::logging::{MIGRATED_LOG, MIGRATING_LOG, STARTING_LOG};
    let w = World::new(EXE);
    w.mux_start();
    w.ok(&["mux", "stop"]);
    // Back to schema version 4, as a database in the field has it.
    let conn = rusqlite::Connection::open(w.data.join("wakterm.db")).unwrap();
    conn.execute_batch(wakterm_runtime::store::UNDO_MIGRATION_5_FOR_TESTS).unwrap();
    drop(conn);
    w.mux_start();
    w.ok(&["mux", "stop"]);
    w.mux_start();
    let log = std::fs::read_to_string(w.data.join("mux.log")).unwrap();
    let starts: Vec<&str> = log.split(STARTING_LOG).skip(1).collect();
    assert_eq!(starts.len(), 3, "{log}");
    assert!(!starts[0].contains(MIGRATING_LOG) && !starts[2].contains(MIGRATING_LOG), "only the second start migrated: {log}");
    let (migrating, migrated) = (starts[1].find(MIGRATING_LOG), starts[1].find(MIGRATED_LOG));
    assert!(migrating.is_some() && migrated.is_some() && migrating < migrated, "{log}");
    assert!(starts[1].contains("from=4"), "{log}");
    assert!(!wakterm_runtime::mux::still_migrating(&log));
    w.ok(&["mux", "stop"]);
}

/// LOG-1: the daemon logs each admission decision (request id, classification, reason,
/// timing) to `mux.log`, never the prompt's text; a bad `WAKTERM_LOG` is refused by name.
#[test]
fn log_1_admissions_are_logged_without_the_prompt() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let id = support::new_id();
    let inc = entry["incarnation"].as_str().unwrap().to_string();
    let secret = "SECRET-PROMPT-TEXT-7781";
    let out = w.run(&["agent", "admit", "zola", "--incarnation", &inc, "--request-id", &id, "--return-final", secret]);
    assert_eq!(out.code, 0, "{out:?}");
    w.wait_until("the admission is logged", || {
        std::fs::read_to_string(w.data.join("mux.log")).unwrap_or_default().lines().any(|l| l.contains(&id) && l.contains("admission"))
    });
    let log = std::fs::read_to_string(w.data.join("mux.log")).unwrap();
    let line = log.lines().find(|l| l.contains(&id) && l.contains("admission")).unwrap();
    assert!(line.contains("Accepted") && line.contains("elapsed_ms"), "{line}");
    assert!(!log.contains(secret), "LOG-1: the prompt's text reached the log");
    w.ok(&["mux", "stop"]);
    let bad = w.cmd(&["mux", "start"]).env("WAKTERM_LOG", "no=such=level").output().unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stdout).contains("WAKTERM_LOG"), "{}", String::from_utf8_lossy(&bad.stdout));
}

/// CLI-3: a one-shot command whose answer cannot be printed (standard output is /dev/full)
/// exits 1 and puts the answer whole on standard error, then `stdout_failed`: a send without
/// `--request-id` keeps the only copy of its generated id. It exited 0 as if printed (a
/// review). A reader that closed standard output (`| head -c 1`) is not an error.
#[test]
fn cli_3_an_answer_that_cannot_be_printed_is_an_error_with_the_answer_on_stderr() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").expect("/dev/full");
    for args in [&["agent", "catalog"][..], &["agent", "send", "zola", "a prompt whose receipt is lost"]] {
        let out = w.cmd(args).stdin(Stdio::null()).stdout(full()).stderr(Stdio::piped()).output().expect("run");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<serde_json::Value> = stderr.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert_eq!(lines.len(), 2, "the answer, then stdout_failed: {stderr}");
        assert_eq!(lines[1]["error"], "stdout_failed", "{stderr}");
        if args[1] == "send" {
            assert_eq!(lines[0]["classification"], "accepted", "{stderr}");
            let id = lines[0]["request_id"].as_str().expect("the generated request id survives");
            assert_eq!(w.ok(&["agent", "request", "get", id])["request_id"], id);
        } else {
            assert!(lines[0]["agents"].is_array(), "{stderr}");
        }
    }
    let mut child = w.cmd(&["agent", "catalog"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    drop(child.stdout.take()); // the reader goes away before the answer
    let out = child.wait_with_output().expect("wait");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
}

/// CLI-2: bad input to `agent start` and `mux start` is refused before anything is made or
/// sent. An `--env` pair with an empty key (`=v`) is `invalid_env` (exit 2) like one without
/// `=`; it reached the holder and failed there (`agent_start_failed`). A data directory too
/// long for its sockets is refused before it is created; it was made, with its database and
/// log, and only the bind failed (a review). A request over the daemon's line limit is refused
/// unsent (`request_too_large`), and `mux start` that repairs the modes of a running daemon's
/// directory says so.
#[test]
fn cli_2_bad_env_pairs_and_a_data_dir_too_long_for_sockets_change_nothing() {
    let w = World::new(EXE);
    w.mux_start();
    for pair in ["NOEQUALS", "=v"] {
        let out = w.run(&["agent", "start", "--name", "envy", "--env", pair, "--", "true"]);
        assert_eq!((out.code, out.json["error"].as_str()), (2, Some("invalid_env")), "{pair}: {out:?}");
    }
    // A request over the daemon's line limit is refused unsent: it ended as `daemon_io`
    // ("Broken pipe") or the daemon's `bad_request`, whichever won the race.
    let value = "v".repeat(120_000);
    let pairs: Vec<String> = (0..10).map(|n| format!("BIG{n}={value}")).collect();
    let mut args = vec!["agent", "start", "--name", "envy"];
    for pair in &pairs {
        args.extend(["--env", pair.as_str()]);
    }
    args.extend(["--", "true"]);
    let out = w.run(&args);
    assert_eq!((out.code, out.json["error"].as_str()), (2, Some("request_too_large")), "{}", out.stdout.chars().take(400).collect::<String>());
    assert!(out.json["message"].as_str().unwrap_or_default().contains("nothing was sent"), "{}", out.json);
    assert!(w.catalog_entry("envy").is_none(), "nothing started");
    // A directory opened to others while its daemon runs: the status call refuses it, `mux
    // start` repairs the modes and then says the daemon runs (it said "started meanwhile").
    std::fs::set_permissions(&w.data, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = w.run(&["mux", "start"]);
    assert_eq!((out.code, out.json["error"].as_str()), (1, Some("already_running")), "{out:?}");
    let message = out.json["message"].as_str().unwrap_or_default();
    assert!(message.contains("repaired") && !message.contains("meanwhile"), "{message}");
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&w.data).unwrap().permissions()) & 0o777, 0o700);
    assert_eq!(out.json["pid"], w.daemon_pid(), "the same daemon");
    let long = w.root.join("d".repeat(80));
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_DATA_DIR", &long).output().expect("mux start");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!((out.status.code(), body["error"].as_str()), (Some(2), Some("data_dir_path_too_long")), "{body}");
    assert!(!long.exists(), "nothing was created");
    // And the other commands do not send the caller to `mux start` for it.
    let out = w.cmd(&["mux", "status"]).env("WAKTERM_DATA_DIR", &long).output().expect("mux status");
    let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    assert_eq!(body["error"], "daemon_not_running", "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.contains("no daemon can serve it") && !message.contains("run `wakterm mux start`"), "{message}");
}

/// INP-6: an error that names a caller's input quotes a bounded part of it: a 120 KB name came
/// back whole from `agent stop` and `restart`, and twice from `agent output`.
#[test]
fn inp_6_errors_quote_a_bounded_part_of_the_input() {
    let w = World::new(EXE);
    w.mux_start();
    let name = "n".repeat(120_000);
    let id = "i".repeat(120_000);
    let calls: [&[&str]; 5] = [
        &["agent", "stop", &name],
        &["agent", "restart", &name],
        &["agent", "output", &name],
        &["agent", "request", "get", &id],
        &["agent", "request", "cancel", &id],
    ];
    for args in calls {
        let out = w.run(args);
        assert!(out.code != 0, "{:?}: {}", &args[..2], out.stdout.len());
        assert!(out.stdout.len() + out.stderr.len() < 2_000, "{:?}: {} + {} bytes", &args[..3], out.stdout.len(), out.stderr.len());
        // A name over INP-4's 256 bytes is `target_malformed`, which quotes none of it.
        let quoted = out.stdout.contains("(120000 bytes)") || out.stdout.contains("…");
        let malformed = out.json["error"] == "target_malformed" || out.json["state"] == "target_malformed";
        assert!(quoted || (args[1] != "request" && malformed), "{:?}: {}", &args[..3], out.stdout);
    }
    // A well-formed name no agent has (INP-4 takes up to 256 bytes) is quoted cut, with `…`.
    let long = "n".repeat(200);
    for verb in ["stop", "restart", "output"] {
        let out = w.run(&["agent", verb, &long]);
        assert_eq!(out.code, 6, "{verb}: {out:?}");
        assert!(out.stdout.contains('…') && !out.stdout.contains(&long[..65]), "{verb}: {}", out.stdout);
    }
}
