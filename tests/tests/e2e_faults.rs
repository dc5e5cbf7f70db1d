//! REC-5: the crash windows of seed 000 on the real daemon with real SQLite. The daemon is
//! started with `WAKTERM_FAULT=<point>` and SIGKILLs itself there; the test restarts it and
//! checks what the window left (REC-1, REC-4, REC-2), and that no request id writes twice.

mod support;

use serde_json::Value;
use std::time::{Duration, Instant};
use support::{new_id, World};

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";

/// A world with a ready agent, then the daemon restarted with the crash point armed.
fn armed_world(fault: &str) -> (World, Value) {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    w.ok(&["mux", "stop"]);
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_FAULT", fault).output().expect("mux start");
    assert!(out.status.success(), "mux start with {fault}: {}", String::from_utf8_lossy(&out.stdout));
    (w, entry)
}

/// The admission that hits the crash point: the CLI loses its daemon mid-call.
fn admit_into_crash(w: &World, entry: &Value, id: &str, prompt: &str) {
    let incarnation = entry["incarnation"].as_str().expect("incarnation");
    let out = w.run(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", id, "--return-final", prompt]);
    assert_ne!(out.code, 0, "the daemon must have died before answering: {out:?}");
    wait_daemon_gone(w);
}

fn wait_daemon_gone(w: &World) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while w.run(&["mux", "status"]).code == 0 {
        assert!(Instant::now() < deadline, "the daemon did not die at its crash point");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn count_prompt(w: &World, prompt: &str) -> usize {
    w.user_prompts().iter().filter(|p| p.as_str() == prompt).count()
}

fn replay_writes_nothing(w: &World, entry: &Value, id: &str, prompt: &str) -> Value {
    let before = count_prompt(w, prompt);
    let incarnation = entry["incarnation"].as_str().expect("incarnation");
    let out = w.run(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", id, "--return-final", prompt]);
    assert_eq!(out.json["replayed"], true, "{out:?}");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(count_prompt(w, prompt), before, "IDEM-2: a replay after the crash wrote again");
    out.json
}

/// REC-5 after_register, REC-1: registration durable, nothing written -> `indeterminate` after
/// the restart, and no turn for the prompt in the rollout.
#[test]
fn rec_5_after_register_leaves_indeterminate_and_no_turn() {
    let (w, entry) = armed_world("after_register");
    let id = new_id();
    let prompt = "crash after register";
    admit_into_crash(&w, &entry, &id, prompt);
    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "indeterminate", "{event}");
    assert_eq!(event["reason"], "restart_in_write_window");
    assert_eq!(count_prompt(&w, prompt), 0, "nothing was written before the crash");
    let replay = replay_writes_nothing(&w, &entry, &id, prompt);
    assert_eq!(replay["classification"], "indeterminate");
    assert_eq!(count_prompt(&w, prompt), 0);
}

/// REC-5 after_write, REC-4: the prompt was written and its turn completes, but the submitted
/// marker never became durable: `indeterminate`, and its final is never delivered as completed.
#[test]
fn rec_5_after_write_is_indeterminate_even_though_the_turn_completes() {
    let (w, entry) = armed_world("after_write");
    let id = new_id();
    let prompt = "crash after write";
    admit_into_crash(&w, &entry, &id, prompt);
    let expected_final = REPLY.replace("{prompt}", prompt);
    w.wait_until("the written prompt's turn completes", || {
        w.completed_turns().iter().any(|(_, m)| m.as_deref() == Some(expected_final.as_str()))
    });
    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "indeterminate", "{event}");
    assert!(event.get("final_message").is_none(), "the final is never delivered: {event}");
    assert_eq!(count_prompt(&w, prompt), 1, "written exactly once");
    replay_writes_nothing(&w, &entry, &id, prompt);
    assert_eq!(w.events_after(0).iter().filter(|e| e["request_id"] == id.as_str()).count(), 1);
    // RF-6: the durable trail says what is known: registered, then the rule that ended it (the
    // write's result died with the daemon, so it is not in the trail).
    let got = w.ok(&["agent", "request", "get", &id, "--evidence"]);
    let steps: Vec<&str> = got["evidence"].as_array().expect("evidence").iter().filter_map(|e| e["step"].as_str()).collect();
    assert_eq!(steps, vec!["registered", "terminal"], "{got}");
    let end = got["evidence"][1]["detail"].as_str().unwrap_or_default();
    assert!(end.contains("restart_in_write_window (REC-1)"), "{got}");
}

/// REC-5 after_submitted, REC-2: the submitted marker is durable; after the restart the
/// request completes normally with its own final.
#[test]
fn rec_5_after_submitted_completes_normally() {
    let (w, entry) = armed_world("after_submitted");
    let id = new_id();
    let prompt = "crash after submitted";
    admit_into_crash(&w, &entry, &id, prompt);
    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], REPLY.replace("{prompt}", prompt).as_str());
    assert_eq!(count_prompt(&w, prompt), 1, "written exactly once");
    let replay = replay_writes_nothing(&w, &entry, &id, prompt);
    assert_eq!(replay["classification"], "accepted");
}

/// REC-5: an unknown crash point is refused at startup, never silently ignored.
#[test]
fn rec_5_unknown_fault_point_is_refused() {
    let w = World::new(EXE);
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_FAULT", "after_lunch").output().expect("mux start");
    assert!(!out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("after_lunch"), "{text}");
}

/// The offset of the agent's saved observer checkpoint (OBS-1), read from the daemon's store.
fn checkpoint_offset(w: &World) -> Option<u64> {
    let db = rusqlite::Connection::open_with_flags(w.data.join("wakterm.db"), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
    let json: String = db.query_row("SELECT checkpoint FROM observer_checkpoints", [], |row| row.get(0)).ok()?;
    serde_json::from_str::<Value>(&json).ok()?["tail"]["offset"].as_u64()
}

/// OBS-2 on the real daemon: a SIGKILLed daemon's successor resumes the agent's observer at the
/// saved checkpoint (its attach position is the checkpoint, not byte 0, with a long history
/// before it), and return-final still completes with exactly its own final.
#[test]
fn obs_2_a_killed_daemon_resumes_its_observer_at_the_checkpoint() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let rollout = w.rollout_files().pop().expect("the baseline turn wrote a rollout");
    // Irrelevant records (as Codex writes for reasoning and tools): 16 MiB of history.
    let line = format!("{{\"type\":\"response_item\",\"payload\":{{\"type\":\"reasoning\",\"text\":\"{}\"}}}}\n", "x".repeat(4000));
    let mut file = std::fs::OpenOptions::new().append(true).open(&rollout).expect("rollout");
    std::io::Write::write_all(&mut file, line.repeat((16 << 20) / line.len()).as_bytes()).expect("append");
    let end = std::fs::metadata(&rollout).expect("rollout").len();
    w.wait_until("the checkpoint reaches the end of the history", || checkpoint_offset(&w) == Some(end));

    support::sigkill_and_wait(w.daemon_pid());
    w.mux_start();
    w.wait_agent("zola", "return-final available after the restart", |z| z["return_final_available"] == true);
    let log = std::fs::read_to_string(w.data.join("mux.log")).expect("daemon log");
    let restarted = log.rsplit("daemon starting").next().expect("a second start");
    assert!(
        restarted.lines().any(|l| l.contains("observer attached") && l.contains(&format!("position={end}"))),
        "the restarted observer attached at the checkpoint {end}: {restarted}"
    );

    let incarnation = w.catalog_entry("zola").expect("agent")["incarnation"].as_str().expect("incarnation").to_string();
    let id = new_id();
    let prompt = "after the checkpointed restart";
    let out = w.run(&["agent", "admit", "zola", "--incarnation", &incarnation, "--request-id", &id, "--return-final", prompt]);
    assert_eq!(out.json["reply_pending"], true, "{out:?}");
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], REPLY.replace("{prompt}", prompt).as_str());
}

/// A connection of the test's own to the agent's holder, and the holder's `info` once the
/// monitor's runs after the baseline turn have settled: its `requests` counts the daemon's
/// calls from then on (and this connection's).
fn settled_holder(w: &World, agent_id: &str) -> (wakterm_runtime::holder::HolderClient, wakterm_runtime::holder::InfoReply) {
    let socket = w.data.join("h").join(format!("{agent_id}.sock"));
    let mut holder = wakterm_runtime::holder::HolderClient::connect(&socket).expect("holder");
    std::thread::sleep(Duration::from_secs(1)); // the runs after the baseline turn settle
    let before = holder.info().expect("info");
    (holder, before)
}

/// MON-3: new rollout records alone do not make the monitor read the screen again (the pane's
/// own changes are pushed by the holder and wake a look of their own). Turns typed elsewhere,
/// their records appended straight to the rollout with the pane untouched, move the catalog
/// from idle to busy and back while the holder is asked nothing.
#[test]
fn mon_3_records_alone_do_not_make_the_monitor_read_the_screen() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let agent_id = entry["agent_id"].as_str().expect("agent id");
    let rollout = w.rollout_files().pop().expect("the baseline turn wrote a rollout");
    let of_kind = |kind: &str| {
        let line = w.rollout_lines().into_iter().find(|l| l["payload"]["type"] == kind);
        line.unwrap_or_else(|| panic!("the baseline turn wrote no {kind}"))
    };
    let (started, complete) = (of_kind("task_started"), of_kind("task_complete"));
    let (mut holder, before) = settled_holder(&w, agent_id);
    let append = |record: &Value, turn: &str| {
        let mut record = record.clone();
        record["payload"]["turn_id"] = Value::from(turn);
        let mut file = std::fs::OpenOptions::new().append(true).open(&rollout).expect("rollout");
        std::io::Write::write_all(&mut file, format!("{record}\n").as_bytes()).expect("append");
    };
    let turns = 5;
    for _ in 0..turns {
        let turn = new_id();
        append(&started, &turn);
        w.wait_agent("zola", "busy with the appended turn", |z| z["state"] == "busy");
        append(&complete, &turn);
        w.wait_agent("zola", "idle after the appended turn", |z| z["state"] == "idle");
    }
    let after = holder.info().expect("info");
    // Ours is one; the open liveness call may have been renewed once (every 30 s).
    let asked = after.requests - before.requests;
    assert!(asked <= 2, "the daemon asked the holder {} times over {} appended turns (runs woken by records looked at the screen)", asked - 1, turns);
    assert_eq!(after.output_end, before.output_end, "the pane stayed untouched");
}

/// MON-1, LIVE-2: an idle agent costs its holder nothing periodic (the daemon's liveness call
/// stays open at the holder; the observer re-reads only local files), and its process's exit is
/// still pushed to the daemon at once.
#[test]
fn mon_1_an_idle_agent_is_not_polled_and_its_exit_is_pushed() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let agent_id = entry["agent_id"].as_str().expect("agent id");
    let (mut holder, before) = settled_holder(&w, agent_id);
    std::thread::sleep(Duration::from_secs(3));
    let after = holder.info().expect("info");
    // Ours is one; the open liveness call may have been renewed once (every 30 s).
    let asked = after.requests - before.requests;
    assert!(asked <= 2, "the daemon asked an idle agent's holder {} times in 3 s", asked - 1);

    let pid = before.pid.expect("agent pid");
    // SAFETY: the agent's own process, started by this test's daemon.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let gone = w.wait_agent("zola", "the exit is seen", |z| z["state"] == "stopped");
    assert_eq!(gone["return_final_available"], false, "{gone}");
}
