//! End to end: managed Codex app-server sessions (SPEC.md MGD, issue 12) against the FAKE
//! app-server (`wakterm fake-codex-app-server`, `harness/src/fake_app_server.rs`), so the whole
//! path runs in a plain `cargo test` without a Codex install: the real daemon and CLI, the raw
//! holder pane, the JSON-RPC handshake, the notification observer and real SQLite. The same
//! contract against the real `codex app-server` 0.169 is `conformance_real_codex.rs` (`mgd_*`).
//!
//! What the app-server received is read from the fake's own record of each thread
//! (`$CODEX_HOME/fake-app-server/threads/<thread>.json`, written atomically when a turn starts,
//! is steered and ends): every user message of every turn, so "nothing reached the app-server"
//! is a check of that file, not of anything wakterm reports.
//!
//! Holds are short (2..5 s) and every wait is bounded by `support::DEADLINE`.

mod support;

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use support::{new_id, sigkill_and_wait, World};

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";
const HOLD: &str = "WAKTERM_FAKE_APP_SERVER_HOLD_PREFIX=HOLD";

fn reply_for(prompt: &str) -> String {
    REPLY.replace("{prompt}", prompt)
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn hold_ms(ms: u64) -> String {
    format!("WAKTERM_FAKE_APP_SERVER_HOLD_MS={ms}")
}

/// MGD-1: `agent start --name NAME --managed --cwd WORK --env CODEX_HOME=.. --env
/// WAKTERM_FAKE_APP_SERVER_REPLY=.. [--env KNOB]... -- <wakterm> fake-codex-app-server
/// app-server`. Returns the start receipt.
fn start_managed(w: &World, name: &str, extra_env: &[&str]) -> Value {
    let exe = w.exe.display().to_string();
    let cwd = w.work.display().to_string();
    let home = format!("CODEX_HOME={}", w.codex_home.display());
    let reply = format!("WAKTERM_FAKE_APP_SERVER_REPLY={REPLY}");
    let mut args = vec!["agent", "start", "--name", name, "--managed", "--cwd", &cwd, "--env", &home, "--env", &reply];
    for env in extra_env {
        args.extend(["--env", env]);
    }
    args.extend(["--", &exe, "fake-codex-app-server", "app-server"]);
    w.ok(&args)
}

/// Starts a managed agent and waits until return-final is available (no baseline turn).
/// Returns (start receipt, catalog entry).
fn ready_managed(w: &World, name: &str, extra_env: &[&str]) -> (Value, Value) {
    let started = start_managed(w, name, extra_env);
    let entry = w.wait_agent(name, "return-final available", |e| e["return_final_available"] == true);
    (started, entry)
}

/// MGD-4: writes junk requests straight into agent `agent_id`'s holder (the app-server answers
/// each with an error echoing its 100 KB id) until its output has grown by 5 MiB, past the
/// holder's 4 MiB ring: everything the app-server wrote before is evicted.
fn fill_the_ring(w: &World, agent_id: &str) {
    let socket = w.data.join("h").join(format!("{agent_id}.sock"));
    let mut pane = wakterm_runtime::holder::HolderClient::connect(&socket).unwrap();
    let junk = format!("{{\"id\":\"{}\",\"method\":\"no/such/method\",\"params\":{{}}}}\n", "j".repeat(100_000));
    let start = pane.info().unwrap().output_end;
    while pane.info().unwrap().output_end < start + 5 * 1024 * 1024 {
        assert_eq!(pane.write(junk.as_bytes()).unwrap().error, None);
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `agent admit NAME --incarnation INC --request-id ID --return-final PROMPT`.
fn admit_rf(w: &World, name: &str, incarnation: &str, id: &str, prompt: &str) -> support::Out {
    w.run(&["agent", "admit", name, "--incarnation", incarnation, "--request-id", id, "--return-final", prompt])
}

/// The fake app-server's record of the thread (None before its first turn).
fn thread_record(w: &World, thread: &str) -> Option<Value> {
    let path = w.codex_home.join("fake-app-server").join("threads").join(format!("{thread}.json"));
    let text = std::fs::read_to_string(path).ok()?;
    Some(serde_json::from_str(&text).expect("the fake's thread record is JSON"))
}

/// Every user message the app-server received on the thread, in order.
fn received_prompts(w: &World, thread: &str) -> Vec<String> {
    let Some(record) = thread_record(w, thread) else { return Vec::new() };
    record["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| t["items"].as_array().into_iter().flatten())
        .filter(|i| i["type"] == "userMessage")
        .filter_map(|i| i["content"][0]["text"].as_str().map(str::to_string))
        .collect()
}

/// `(turn id, status)` of every turn of the thread, as the app-server recorded them.
fn recorded_turns(w: &World, thread: &str) -> Vec<(String, String)> {
    let Some(record) = thread_record(w, thread) else { return Vec::new() };
    record["turns"].as_array().into_iter().flatten().map(|t| (s(&t["id"]).to_string(), s(&t["status"]).to_string())).collect()
}

/// `agent events --once --agent NAME`.
fn agent_events(w: &World, name: &str) -> Vec<Value> {
    let out = w.run(&["agent", "events", "--once", "--agent", name]);
    assert_eq!(out.code, 0, "agent events: {out:?}");
    out.stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).collect()
}

fn kinds(events: &[Value], kind: &str) -> usize {
    events.iter().filter(|e| e["kind"] == kind).count()
}

/// The terminal events of `id` in the whole `request watch` history.
fn terminal_events_of(w: &World, id: &str) -> Vec<Value> {
    w.events_after(0).into_iter().filter(|e| e["request_id"] == id).collect()
}

/// Polls `request get ID` until `ready` holds.
fn wait_request(w: &World, id: &str, what: &str, mut ready: impl FnMut(&Value) -> bool) -> Value {
    let mut last = Value::Null;
    let deadline = Instant::now() + support::DEADLINE;
    loop {
        let got = w.run(&["agent", "request", "get", id]);
        if got.code == 0 {
            if ready(&got.json) {
                return got.json;
            }
            last = got.json;
        }
        assert!(Instant::now() < deadline, "timed out waiting for request {id}: {what}; last {last}");
        std::thread::sleep(support::POLL);
    }
}

fn assert_busy_turn_active(out: &support::Out) {
    assert_eq!(out.code, 4, "exit 4 expected: {out:?}");
    let r = &out.json;
    assert_eq!((s(&r["classification"]), s(&r["reason"])), ("busy", "turn_active"), "{r}");
    assert_eq!(r["prompt_written"], false, "{r}");
    assert_eq!(r["write_state"], "not_started", "{r}");
    assert_eq!(r["reply_pending"], false, "{r}");
}

/// MGD-1, MGD-2, CORR-8, EV-*: the start receipt has transport `app_server` and the bound
/// thread (thread id == session id, as Codex 0.169 answers); the catalog shows transport
/// `app_server`, correlation source `agent_api_events`, the same ids, and becomes
/// return-final available without any turn (the fake has no record of the thread yet: it only
/// writes one at the first `turn/start`); the agent's event stream shows `agent.started` and
/// `observer.attached` on that session and no turn. Only the codex harness can be managed.
#[test]
fn mgd_1_2_start_binds_a_thread_and_is_available_without_a_baseline_turn() {
    let w = World::new(EXE);
    w.mux_start();
    let started = start_managed(&w, "mia", &[]);
    assert_eq!(started["schema"], "wakterm.agent-start.v1", "{started}");
    assert_eq!(started["transport"], "app_server", "{started}");
    let thread = s(&started["thread_id"]).to_string();
    assert!(uuid::Uuid::parse_str(&thread).is_ok(), "thread_id: {started}");
    assert_eq!(started["session_id"], started["thread_id"], "the fake mirrors 0.169: {started}");
    assert!(started["incarnation"].is_string(), "{started}");

    let entry = w.wait_agent("mia", "return-final available", |e| e["return_final_available"] == true);
    assert_eq!(entry["transport"], "app_server", "{entry}");
    assert_eq!(entry["correlation_source"], "agent_api_events", "{entry}");
    assert_eq!(entry["thread_id"], thread.as_str(), "{entry}");
    assert_eq!(entry["session_id"], thread.as_str(), "{entry}");
    assert_eq!(entry["observer_session"], thread.as_str(), "{entry}");
    assert_eq!(entry["state"], "idle", "{entry}");
    assert_eq!(entry["incarnation"], started["incarnation"], "{entry}");
    assert!(entry["return_final_unavailable_reason"].is_null(), "{entry}");
    assert!(thread_record(&w, &thread).is_none(), "no turn was ever started on the thread");

    let events = agent_events(&w, "mia");
    let attached: Vec<&Value> = events.iter().filter(|e| e["kind"] == "observer.attached").collect();
    assert_eq!(attached.len(), 1, "{events:?}");
    assert_eq!(attached[0]["session"], thread.as_str(), "{events:?}");
    assert_eq!(attached[0]["agent_id"], started["agent_id"], "{events:?}");
    assert_eq!(kinds(&events, "agent.started"), 1, "{events:?}");
    assert!(events.iter().any(|e| e["kind"] == "agent.started" && e["transport"] == "app_server"), "{events:?}");
    assert_eq!(kinds(&events, "turn.started"), 0, "{events:?}");

    // Its pane is JSON-RPC, not a terminal: `agent attach` is refused, so no keys reach the
    // app-server (a turn/start typed there started a turn past admission; found by a review).
    let attach = w.cmd(&["agent", "attach", "mia"]).stdin(std::process::Stdio::piped()).output().expect("attach");
    let refusal: Value = serde_json::from_slice(&attach.stdout).expect("a JSON refusal");
    assert_eq!((attach.status.code(), refusal["error"].as_str()), (Some(2), Some("attach_needs_pty")), "{refusal}");

    // Only the codex harness can be managed (MGD-1).
    let exe = w.exe.display().to_string();
    let cwd = w.work.display().to_string();
    let other = w.run(&["agent", "start", "--name", "other", "--harness", "other", "--managed", "--cwd", &cwd, "--", &exe, "fake-codex-app-server", "app-server"]);
    assert_ne!(other.code, 0, "{other:?}");
    assert_eq!(other.json["error"], "invalid_harness", "{other:?}");
    assert!(w.catalog_entry("other").is_none(), "nothing recorded for the refused start");
}

/// MGD-3, CORR-8, RF-2, TERM-1, IDEM-2: two return-final admissions in a row are each accepted
/// with correlation source `agent_api_events` and an armed cursor `ev1.<thread>.<n>` (n
/// growing), bind their own turn and complete with exactly the fake's final for their prompt;
/// `request get` shows each completed with its turn; the app-server got exactly the two prompts
/// (one `turn/start` each, never retried); a replay writes nothing; a raw paste is
/// `unsupported` / `raw_paste_managed`.
#[test]
fn mgd_3_return_final_admissions_complete_with_their_own_finals() {
    let w = World::new(EXE);
    w.mux_start();
    let (started, entry) = ready_managed(&w, "mia", &[]);
    let thread = s(&started["thread_id"]).to_string();
    let inc = s(&entry["incarnation"]).to_string();
    let mut last_position = 0u64;
    let mut turns = Vec::new();
    let prompts = ["first managed prompt", "second managed prompt"];
    for prompt in prompts {
        let id = new_id();
        let out = admit_rf(&w, "mia", &inc, &id, prompt);
        assert_eq!(out.code, 0, "{out:?}");
        let r = &out.json;
        assert_eq!((s(&r["classification"]), r["reply_pending"].as_bool()), ("accepted", Some(true)), "{r}");
        assert_eq!(r["correlation_source"], "agent_api_events", "{r}");
        assert_eq!(r["prompt_written"], true, "{r}");
        assert_eq!(r["write_state"], "complete", "{r}");
        assert_eq!(r["incarnation"], inc.as_str(), "{r}");
        let cursor = s(&r["armed_cursor"]);
        let position = cursor
            .strip_prefix(&format!("ev1.{thread}."))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("armed_cursor is ev1.<thread>.<n>: {r}"));
        assert!(position > last_position, "the cursor moves forward: {position} after {last_position}");
        last_position = position;

        let event = w.wait_terminal(&id);
        assert_eq!(event["state"], "completed", "{event}");
        assert_eq!(event["final_message"], reply_for(prompt).as_str(), "{event}");
        assert_eq!(event["incarnation"], inc.as_str(), "{event}");
        let turn = s(&event["provider_turn_id"]).to_string();
        assert!(!turns.contains(&turn), "a new turn for each prompt: {turns:?}");
        // Seed 000: the armed cursor is the durable Agent API event sequence: the turn the
        // prompt started is numbered above it, so `agent events --after` it shows that turn.
        let started = agent_events(&w, "mia").into_iter().find(|e| e["kind"] == "turn.started" && e["provider_turn_id"] == turn.as_str()).expect("turn.started");
        assert!(started["sequence"].as_u64().unwrap() > position, "{started} after the armed cursor {cursor}");
        let got = w.ok(&["agent", "request", "get", &id]);
        assert_eq!((s(&got["state"]), s(&got["bound_provider_turn"])), ("completed", turn.as_str()), "{got}");
        assert_eq!(got["terminal_event"], event, "{got}");
        assert_eq!(terminal_events_of(&w, &id).len(), 1);
        turns.push(turn);
        w.wait_agent("mia", "available again", |e| e["return_final_available"] == true);

        // IDEM-2: the same id and input replays the receipt and writes nothing.
        let replay = admit_rf(&w, "mia", &inc, &id, prompt);
        assert_eq!(replay.code, 0, "{replay:?}");
        assert_eq!(replay.json["replayed"], true, "{}", replay.json);
    }
    let recorded: Vec<String> = recorded_turns(&w, &thread).into_iter().map(|(t, status)| {
        assert_eq!(status, "completed");
        t
    }).collect();
    assert_eq!(recorded, turns, "the app-server's turns are the requests' turns");
    assert_eq!(received_prompts(&w, &thread), prompts, "one turn/start per admission, no replayed write");

    let raw = w.run(&["agent", "send", "mia", "--raw-paste", "raw bytes into a JSON-RPC pipe"]);
    assert_eq!(raw.code, 4, "{raw:?}");
    assert_eq!((s(&raw.json["classification"]), s(&raw.json["reason"])), ("unsupported", "raw_paste_managed"), "{}", raw.json);
    assert_eq!(raw.json["prompt_written"], false, "{}", raw.json);
    let events = agent_events(&w, "mia");
    assert_eq!((kinds(&events, "turn.started"), kinds(&events, "turn.final")), (2, 2), "{events:?}");
}

/// MGD-3, ADM-5, ADM-9, ADM-13, IDEM-6: while a held turn runs (started by a one-way send), a
/// return-final admission (`send --return-final` and `admit`) is refused `busy` /
/// `turn_active` with nothing written: the app-server's record holds only the held prompt. A
/// plain `agent send` steers the running turn instead (BUSY=steer, the real 0.169's behaviour):
/// accepted, reason `steered_running_turn`, acknowledged; the app-server records it as a
/// second user message of the SAME turn, and the event stream shows one turn, two user
/// messages.
#[test]
fn mgd_3_busy_thread_refuses_return_final_and_plain_send_steers() {
    let w = World::new(EXE);
    w.mux_start();
    let (started, entry) = ready_managed(&w, "mia", &[HOLD, &hold_ms(5000)]);
    let thread = s(&started["thread_id"]).to_string();
    let inc = s(&entry["incarnation"]).to_string();
    let held = "HOLD the running turn";
    let first = w.run(&["agent", "send", "mia", held]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.json["classification"], "accepted", "{}", first.json);
    w.wait_until("the app-server records the held prompt", || received_prompts(&w, &thread) == [held]);
    let busy_entry = w.wait_agent("mia", "busy", |e| e["state"] == "busy");
    assert_eq!(busy_entry["return_final_available"], false, "{busy_entry}");
    assert_eq!(busy_entry["return_final_unavailable_reason"], "turn_active", "{busy_entry}");

    let refused_id = new_id();
    let send_rf = w.run(&["agent", "send", "mia", "--return-final", "--request-id", &refused_id, "must not reach the app-server"]);
    assert_busy_turn_active(&send_rf);
    let admit = admit_rf(&w, "mia", &inc, &new_id(), "nor must this");
    assert_busy_turn_active(&admit);
    assert_eq!(w.run(&["agent", "request", "get", &refused_id]).code, 6, "a refused id is not stored");

    let steer = w.run(&["agent", "send", "mia", "steering words"]);
    assert_eq!(steer.code, 0, "{steer:?}");
    let r = &steer.json;
    assert_eq!((s(&r["classification"]), s(&r["reason"])), ("accepted", "steered_running_turn"), "{r}");
    assert_eq!(r["acknowledged"], true, "{r}");
    assert_eq!(r["prompt_written"], true, "{r}");
    assert_eq!(r["return_mode"], "one_way", "{r}");

    // The steering message makes the fake answer it at once (the hold was the first prompt's).
    w.wait_until("the steered turn ends", || recorded_turns(&w, &thread).iter().all(|(_, status)| status == "completed"));
    w.wait_agent("mia", "available after the steered turn", |e| e["return_final_available"] == true);
    assert_eq!(received_prompts(&w, &thread), [held, "steering words"], "the refused prompts never reached the app-server");
    assert_eq!(recorded_turns(&w, &thread).len(), 1, "steering starts no turn");
    let events = agent_events(&w, "mia");
    assert_eq!((kinds(&events, "turn.started"), kinds(&events, "message.user")), (1, 2), "{events:?}");
    assert!(
        events.iter().any(|e| e["kind"] == "turn.final" && e["final_message"] == reply_for("steering words").as_str()),
        "the steered turn answers the latest message: {events:?}"
    );
    assert!(w.events_after(0).is_empty(), "no return-final request was ever armed");
}

/// CORR-9 end to end: a return-final request whose running turn a plain send steers completes
/// with the turn's final and says `steered: true` on `request watch`, on the agent event
/// stream's `request.terminal` and in its evidence trail; a turn nobody steered says nothing.
#[test]
fn corr_9_a_steered_return_final_turn_ends_saying_steered() {
    let w = World::new(EXE);
    w.mux_start();
    let (_, entry) = ready_managed(&w, "mia", &[HOLD, &hold_ms(3000)]);
    let inc = s(&entry["incarnation"]).to_string();
    let plain_id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &plain_id, "a turn nobody steers").code, 0);
    let plain = w.wait_terminal(&plain_id);
    assert_eq!(s(&plain["state"]), "completed", "{plain}");
    assert!(plain.get("steered").is_none(), "{plain}");
    w.wait_agent("mia", "available again", |e| e["return_final_available"] == true);

    let id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &id, "HOLD a turn that gets steered").code, 0);
    w.wait_agent("mia", "busy", |e| e["state"] == "busy");
    let steer = w.run(&["agent", "send", "mia", "also these words"]);
    assert_eq!((s(&steer.json["classification"]), s(&steer.json["reason"])), ("accepted", "steered_running_turn"), "{}", steer.json);
    let event = w.wait_terminal(&id);
    assert_eq!(s(&event["state"]), "completed", "{event}");
    assert_eq!(event["steered"], true, "CORR-9: the end says another prompt steered the turn: {event}");
    assert_eq!(s(&event["final_message"]), reply_for("also these words"), "the steered turn answers the latest message");
    let streamed: Vec<Value> = agent_events(&w, "mia").into_iter().filter(|e| e["kind"] == "request.terminal").collect();
    let flags: Vec<(String, Value)> = streamed.iter().map(|e| (s(&e["request_id"]).to_string(), e.get("steered").cloned().unwrap_or(Value::Null))).collect();
    assert_eq!(flags, [(plain_id, Value::Null), (id.clone(), Value::Bool(true))], "{streamed:?}");
    let got = w.run(&["agent", "request", "get", &id, "--evidence"]);
    assert!(got.stdout.contains("steered by another prompt"), "the trail names the steer: {}", got.stdout);
}

/// OUT-1, OUT-7 for a managed agent over the fake app-server: it writes its thread's rollout
/// from the first turn on and holds it open, as the real 0.169 does (`mgd_real_codex_*` reads
/// a page too), so `agent output` pages its assistant messages; before, the fake wrote none,
/// and the page said `observer_unavailable` / `no_rollout_open` ("no turn started yet?") after
/// turns had completed (a hostile run). A resume in a new process (`agent restart`) continues
/// the same file (the harness's unit test checks the file itself); the old process's cursor is
/// refused, and a new baseline pages the next reply only.
#[test]
fn out_a_managed_agents_page_reads_its_app_servers_rollout() {
    let w = World::new(EXE);
    w.mux_start();
    let (_, entry) = ready_managed(&w, "mia", &[]);
    let texts = |page: &Value| -> Vec<String> { page["events"].as_array().into_iter().flatten().filter_map(|e| e["text"].as_str().map(str::to_string)).collect() };
    let turn = |inc: &str, prompt: &str| {
        let id = new_id();
        assert_eq!(admit_rf(&w, "mia", inc, &id, prompt).code, 0);
        assert_eq!(s(&w.wait_terminal(&id)["state"]), "completed");
    };
    let inc = s(&entry["incarnation"]).to_string();
    turn(&inc, "first page prompt");
    let base = w.run(&["agent", "output", "mia"]);
    assert_eq!((base.code, s(&base.json["state"]), &base.json["baseline"]), (0, "ok", &Value::Bool(true)), "{base:?}");
    assert!(texts(&base.json).is_empty(), "a baseline holds no history: {base:?}");
    turn(&inc, "second page prompt");
    let page = w.run(&["agent", "output", "mia", "--after", s(&base.json["next_cursor"])]);
    assert_eq!((page.code, texts(&page.json)), (0, vec![reply_for("second page prompt")]), "{page:?}");

    let restarted = w.run(&["agent", "restart", "mia"]);
    assert_eq!(restarted.code, 0, "{restarted:?}");
    let entry = w.wait_agent("mia", "available after the restart", |e| e["return_final_available"] == true && e["incarnation"] != inc.as_str());
    let inc = s(&entry["incarnation"]).to_string();
    let old = w.run(&["agent", "output", "mia", "--after", s(&page.json["next_cursor"])]);
    assert_eq!(old.code, 4, "the old process's cursor is another incarnation's: {old:?}");
    // The fake opens the resumed thread's rollout at its next turn (whether the real one holds
    // it open from the resume on is not captured).
    turn(&inc, "third page prompt");
    let fresh = w.run(&["agent", "output", "mia"]);
    assert_eq!((fresh.code, s(&fresh.json["state"])), (0, "ok"), "the resumed thread's rollout is found: {fresh:?}");
    turn(&inc, "fourth page prompt");
    let page = w.run(&["agent", "output", "mia", "--after", s(&fresh.json["next_cursor"])]);
    assert_eq!((page.code, texts(&page.json)), (0, vec![reply_for("fourth page prompt")]), "{page:?}");
}

/// CORR-10, MGD-3, RF-4, TERM-1: a turn the app-server fails (`turn/completed` `failed`) ends
/// its return-final request `aborted` with no final; a turn interrupted by a `turn/interrupt`
/// another client wrote to the app-server (`interrupted`) ends `aborted` too. A cancel ends a
/// managed request `cancelled` at once and leaves its turn running: the app-server completes
/// that turn later, and the request's only terminal event stays `cancelled`.
#[test]
fn corr_10_failed_and_interrupted_turns_abort_and_rf_4_cancel_leaves_the_turn_running() {
    let w = World::new(EXE);
    w.mux_start();
    let fail = "WAKTERM_FAKE_APP_SERVER_FAIL_PREFIX=FAIL";
    let (started, entry) = ready_managed(&w, "mia", &[HOLD, &hold_ms(2000), fail]);
    let thread = s(&started["thread_id"]).to_string();
    let inc = s(&entry["incarnation"]).to_string();

    let failed_id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &failed_id, "FAIL this turn").code, 0);
    let event = w.wait_terminal(&failed_id);
    assert_eq!((s(&event["state"]), s(&event["reason"])), ("aborted", "provider_turn_aborted"), "{event}");
    assert!(event.get("final_message").is_none(), "{event}");
    assert_eq!(recorded_turns(&w, &thread), [(s(&event["provider_turn_id"]).to_string(), "failed".to_string())]);
    w.wait_agent("mia", "available after the failed turn", |e| e["return_final_available"] == true);

    // An interrupt from elsewhere: written straight into the app-server's stdin (its raw pane).
    let interrupted_id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &interrupted_id, "HOLD until interrupted").code, 0);
    let bound = wait_request(&w, &interrupted_id, "bound", |r| r["bound_provider_turn"].is_string());
    let turn = s(&bound["bound_provider_turn"]).to_string();
    let mut pane = w.pane_of(&entry);
    let line = json!({"id": "e2e-interrupt", "method": "turn/interrupt", "params": {"threadId": thread, "turnId": turn}});
    pane.write(format!("{line}\n").as_bytes()).expect("write turn/interrupt");
    let event = w.wait_terminal(&interrupted_id);
    assert_eq!((s(&event["state"]), s(&event["provider_turn_id"])), ("aborted", turn.as_str()), "{event}");
    assert!(event.get("final_message").is_none(), "{event}");
    assert_eq!(recorded_turns(&w, &thread).last(), Some(&(turn.clone(), "interrupted".to_string())));
    w.wait_agent("mia", "available after the interrupt", |e| e["return_final_available"] == true);

    // RF-4: cancel a held turn's request.
    let cancelled_id = new_id();
    let held = "HOLD then get cancelled";
    assert_eq!(admit_rf(&w, "mia", &inc, &cancelled_id, held).code, 0);
    let bound = wait_request(&w, &cancelled_id, "bound", |r| r["bound_provider_turn"].is_string());
    let turn = s(&bound["bound_provider_turn"]).to_string();
    let cancel = w.run(&["agent", "request", "cancel", &cancelled_id]);
    assert_eq!(cancel.code, 0, "{cancel:?}");
    assert_eq!(cancel.json["outcome"], "cancelled", "{}", cancel.json);
    assert_eq!(cancel.json["event"]["state"], "cancelled", "{}", cancel.json);
    assert_eq!(w.ok(&["agent", "request", "get", &cancelled_id])["state"], "cancelled");
    // The turn keeps running (no turn/interrupt was sent) and then completes with its final.
    assert_eq!(recorded_turns(&w, &thread).last(), Some(&(turn.clone(), "inProgress".to_string())), "still running after the cancel");
    assert_eq!(w.catalog_entry("mia").expect("mia")["state"], "busy");
    w.wait_until("the cancelled request's turn completes", || recorded_turns(&w, &thread).last() == Some(&(turn.clone(), "completed".to_string())));
    w.wait_agent("mia", "available after the cancelled turn", |e| e["return_final_available"] == true);
    let events = agent_events(&w, "mia");
    assert!(
        events.iter().any(|e| e["kind"] == "turn.final" && e["provider_turn_id"] == turn.as_str() && e["final_message"] == reply_for(held).as_str()),
        "the turn finished after the cancel: {events:?}"
    );
    let terminals = terminal_events_of(&w, &cancelled_id);
    assert_eq!(terminals.len(), 1, "{terminals:?}");
    assert_eq!(terminals[0]["state"], "cancelled", "{terminals:?}");
    assert_eq!(w.ok(&["agent", "request", "get", &cancelled_id])["state"], "cancelled");
    assert_eq!(kinds(&events, "turn.aborted"), 2, "the failed and the interrupted turn: {events:?}");
}

/// MGD-4, RF-8, CORR-11, MGD-2, ADM-2: the app-server dies inside a bound turn (EXIT_PREFIX:
/// the fake SIGKILLs itself after the user message): the request ends `indeterminate`
/// (`process_exited`), exactly once, never completed; the catalog shows the agent stopped (its
/// thread kept). `agent restart` resumes THE SAME thread (`thread/resume`) in a new incarnation,
/// the old incarnation is stale, and a new return-final request completes.
#[test]
fn mgd_4_app_server_exit_mid_turn_is_indeterminate_and_restart_resumes_the_thread() {
    let w = World::new(EXE);
    w.mux_start();
    let (started, entry) = ready_managed(&w, "mia", &["WAKTERM_FAKE_APP_SERVER_EXIT_PREFIX=EXIT"]);
    let thread = s(&started["thread_id"]).to_string();
    let old_inc = s(&entry["incarnation"]).to_string();

    let id = new_id();
    assert_eq!(admit_rf(&w, "mia", &old_inc, &id, "EXIT inside the turn").code, 0);
    let event = w.wait_terminal(&id);
    assert_eq!((s(&event["state"]), s(&event["reason"])), ("indeterminate", "process_exited"), "{event}");
    assert!(event.get("final_message").is_none(), "{event}");
    let stopped = w.wait_agent("mia", "stopped", |e| e["state"] == "stopped");
    assert_eq!(stopped["return_final_available"], false, "{stopped}");
    assert_eq!(stopped["return_final_unavailable_reason"], "agent_not_running", "{stopped}");
    assert_eq!(stopped["thread_id"], thread.as_str(), "the thread stays recorded: {stopped}");
    assert_eq!(w.ok(&["agent", "request", "get", &id])["state"], "indeterminate");
    assert_eq!(received_prompts(&w, &thread), ["EXIT inside the turn"]);

    let restarted = w.ok(&["agent", "restart", "mia"]);
    let new_inc = s(&restarted["incarnation"]).to_string();
    assert!(!new_inc.is_empty() && new_inc != old_inc, "a new incarnation: {restarted}");
    let entry = w.wait_agent("mia", "available after the restart", |e| e["return_final_available"] == true);
    assert_eq!(entry["incarnation"], new_inc.as_str(), "{entry}");
    assert_eq!((s(&entry["thread_id"]), s(&entry["session_id"])), (thread.as_str(), thread.as_str()), "the same thread: {entry}");
    assert_eq!(entry["transport"], "app_server", "{entry}");

    let stale = admit_rf(&w, "mia", &old_inc, &new_id(), "to the dead process");
    assert_eq!((stale.code, s(&stale.json["classification"])), (4, "stale_incarnation"), "{stale:?}");
    let after = "after the restart";
    let id2 = new_id();
    let out = admit_rf(&w, "mia", &new_inc, &id2, after);
    assert_eq!(out.code, 0, "{out:?}");
    assert!(s(&out.json["armed_cursor"]).starts_with(&format!("ev1.{thread}.")), "{}", out.json);
    let event2 = w.wait_terminal(&id2);
    assert_eq!((s(&event2["state"]), s(&event2["final_message"])), ("completed", reply_for(after).as_str()), "{event2}");
    assert_eq!(event2["incarnation"], new_inc.as_str(), "{event2}");

    // The first request never changed its mind; the resumed thread holds both turns.
    let terminals = terminal_events_of(&w, &id);
    assert_eq!(terminals.len(), 1, "{terminals:?}");
    assert_eq!(terminals[0]["state"], "indeterminate");
    assert_eq!(received_prompts(&w, &thread), ["EXIT inside the turn", after], "the stale admission wrote nothing");
    let events = agent_events(&w, "mia");
    assert_eq!(kinds(&events, "agent.exited"), 1, "{events:?}");
    assert_eq!(kinds(&events, "agent.incarnation_changed"), 1, "{events:?}");
}

/// REC-2, MGD-4, RF-5, TERM-3: the daemon is SIGKILLed while the held turn of a return-final
/// request runs, and the turn COMPLETES while no daemon runs (the app-server's record says so
/// before the restart). The holder kept the app-server's output, so after `mux start` the
/// request completes with its own final, exactly one terminal event, same incarnation; the
/// agent is available again.
#[test]
fn rec_2_daemon_sigkill_mid_turn_completes_from_the_holders_output() {
    let w = World::new(EXE);
    w.mux_start();
    let (started, entry) = ready_managed(&w, "mia", &[HOLD, &hold_ms(2000)]);
    let thread = s(&started["thread_id"]).to_string();
    let inc = s(&entry["incarnation"]).to_string();
    let before_id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &before_id, "before the kill").code, 0);
    let before = w.wait_terminal(&before_id);
    assert_eq!(before["state"], "completed", "{before}");
    w.wait_agent("mia", "available", |e| e["return_final_available"] == true);

    let prompt = "HOLD across the daemon's death";
    let id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &id, prompt).code, 0);
    wait_request(&w, &id, "bound", |r| r["bound_provider_turn"].is_string());
    sigkill_and_wait(w.daemon_pid());
    w.wait_until("the turn completes while the daemon is down", || {
        recorded_turns(&w, &thread).last().is_some_and(|(_, status)| status == "completed")
    });
    assert_eq!(w.run(&["mux", "status"]).code, 3, "no daemon ran while the turn completed");

    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_eq!((s(&event["state"]), s(&event["final_message"])), ("completed", reply_for(prompt).as_str()), "{event}");
    assert_eq!(event["incarnation"], inc.as_str(), "{event}");
    let (turn, _) = recorded_turns(&w, &thread).pop().expect("the held turn");
    assert_eq!(event["provider_turn_id"], turn.as_str(), "{event}");
    let entry = w.wait_agent("mia", "available after the restart", |e| e["return_final_available"] == true);
    assert_eq!(entry["incarnation"], inc.as_str(), "the app-server outlived the daemon: {entry}");
    assert_eq!(entry["thread_id"], thread.as_str(), "{entry}");
    assert_eq!(w.events_after(0), vec![before, event], "every terminal event once");
    assert_eq!(w.ok(&["agent", "request", "get", &id])["state"], "completed");
}

/// MGD-5, TERM-2: one daemon, one `request watch` stream: a PTY agent (the fake Codex TUI)
/// and a managed agent (the fake app-server) each complete a return-final request, and the
/// one live watcher delivers both, each with its own final; `agent events` carries both
/// agents' request terminals too.
#[test]
fn mgd_5_one_watch_stream_for_pty_and_managed_agents() {
    let mut w = World::new(EXE);
    w.mux_start();
    let zola = w.ready_agent("zola", REPLY, &[]);
    let (_, mia) = ready_managed(&w, "mia", &[]);
    assert_eq!(zola["transport"], "pty", "{zola}");
    let live = w.subscribe(0);
    let mut want = Vec::new();
    for (name, entry, prompt) in [("zola", &zola, "pty agent prompt"), ("mia", &mia, "managed agent prompt")] {
        let id = new_id();
        let out = admit_rf(&w, name, s(&entry["incarnation"]), &id, prompt);
        assert_eq!(out.code, 0, "{out:?}");
        want.push((id, s(&entry["agent_id"]).to_string(), reply_for(prompt)));
    }
    assert_eq!(s(&mia["correlation_source"]), "agent_api_events");
    let mut got = Vec::new();
    let deadline = Instant::now() + support::DEADLINE;
    while got.len() < want.len() {
        let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
        let (_, event) = live.recv_timeout(left).unwrap_or_else(|_| panic!("the watcher got only {got:?}"));
        got.push(event);
    }
    for (id, agent, final_message) in &want {
        let event = got.iter().find(|e| e["request_id"] == id.as_str()).unwrap_or_else(|| panic!("{id} missing: {got:?}"));
        assert_eq!((s(&event["state"]), s(&event["final_message"])), ("completed", final_message.as_str()), "{event}");
        assert_eq!(event["agent_id"], agent.as_str(), "{event}");
    }
    let sequences: Vec<u64> = got.iter().filter_map(|e| e["terminal_event_sequence"].as_u64()).collect();
    assert!(sequences.len() == 2 && sequences[0] < sequences[1], "one ordered stream: {got:?}");
    assert_eq!(w.events_after(0), got, "the history is the live stream");

    let out = w.run(&["agent", "events", "--once"]);
    assert_eq!(out.code, 0, "{out:?}");
    let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    for (id, _, _) in &want {
        assert_eq!(events.iter().filter(|e| e["kind"] == "request.terminal" && e["request_id"] == id.as_str()).count(), 1, "{events:?}");
    }
}

/// MGD-1..MGD-3: `wakterm demo --managed` runs the whole flow on the built-in fake app-server
/// in a private temporary directory and exits 0; its steps end with the admission's receipt
/// (armed on `agent_api_events`), the request's `completed` terminal event with the fake's
/// final, and `mux stop --all`.
#[test]
fn demo_managed_runs_the_whole_flow() {
    let steps = World::new(EXE).run_demo(&["--managed"]);
    let names: Vec<&str> = steps.iter().map(|st| s(&st["step"])).collect();
    assert!(names.len() >= 4, "{names:?}");
    assert_eq!(names[..2], ["mux start", "agent start --managed"], "{names:?}");
    assert_eq!(names[names.len() - 3..], ["admit --return-final", "request watch", "mux stop --all"], "{names:?}");
    assert!(steps.iter().all(|st| st["exit_code"] == 0 && st["schema"] == "wakterm.demo-step.v1"), "{steps:?}");
    assert_eq!(steps[1]["result"]["transport"], "app_server", "{}", steps[1]);
    let receipt = &steps[steps.len() - 3]["result"];
    assert_eq!((s(&receipt["classification"]), s(&receipt["correlation_source"])), ("accepted", "agent_api_events"), "{receipt}");
    let terminal = &steps[steps.len() - 2]["result"];
    assert_eq!(terminal["request_id"], receipt["request_id"], "{terminal}");
    assert_eq!(terminal["state"], "completed", "{terminal}");
    assert_eq!(terminal["final_message"], "Final answer for: Complete phases 2 and 3", "{terminal}");
}

/// MGD-4: the daemon restarts after the holder's ring (4 MiB) dropped everything that proved
/// the thread loaded and what it was doing (the handshake's reply and the last turn: here
/// crowded out by the app-server's answers to junk requests): the fresh observer follows the
/// stream from the next whole line, asks the app-server once for its thread (`thread/resume` of
/// the agent's own thread, which Codex 0.169 answers for a loaded thread, with its status), and
/// the agent is available again; a new return-final request completes with its own final.
#[test]
fn mgd_4_restart_after_the_ring_dropped_the_handshake_reproves_the_thread() {
    let w = World::new(EXE);
    w.mux_start();
    let (started, entry) = ready_managed(&w, "mia", &[]);
    let first = new_id();
    assert_eq!(admit_rf(&w, "mia", entry["incarnation"].as_str().unwrap(), &first, "a first turn").code, 0);
    w.wait_agent("mia", "idle after the first turn", |e| e["return_final_available"] == true);
    let agent_id = entry["agent_id"].as_str().unwrap().to_string();
    fill_the_ring(&w, &agent_id);
    w.ok(&["mux", "stop"]);
    w.mux_start();
    let back = w.wait_agent("mia", "available after the restart", |e| e["return_final_available"] == true);
    assert_eq!((&back["incarnation"], &back["thread_id"]), (&entry["incarnation"], &started["thread_id"]), "{back}");
    let id = new_id();
    let out = admit_rf(&w, "mia", back["incarnation"].as_str().unwrap(), &id, "after the ring turned over");
    assert_eq!(out.code, 0, "{out:?}");
    let end = Instant::now() + Duration::from_secs(30);
    let event = loop {
        if let Some(event) = w.events_after(0).into_iter().find(|e| e["request_id"] == id.as_str()) {
            break event;
        }
        assert!(Instant::now() < end, "no terminal event");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], "Final answer for: after the ring turned over", "{event}");
}

/// MGD-4, EV-4, REC-2: a daemon restart that finds the head of the app-server's output
/// evicted from the holder's ring (past its 4 MiB) reports no turn again and completes a
/// request in flight. Before (a hostile run) the fresh observer reported the whole loss as an
/// `observer.gap` after the durable mark and read the ring afresh: every turn still in it was
/// reported again, `turn.final` too, at each restart, and the request in flight ended
/// `indeterminate` though every record after its cursor was kept.
#[test]
fn mgd_4_a_restart_past_the_rings_head_repeats_no_turn_and_completes_a_request_in_flight() {
    let w = World::new(EXE);
    w.mux_start();
    let (_, entry) = ready_managed(&w, "mia", &[HOLD, &hold_ms(4_000)]);
    let inc = s(&entry["incarnation"]).to_string();
    let agent_id = s(&entry["agent_id"]).to_string();
    fill_the_ring(&w, &agent_id);
    let first = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &first, "a turn in the ring").code, 0);
    assert_eq!(w.wait_terminal(&first)["state"], "completed");
    w.wait_agent("mia", "available", |e| e["return_final_available"] == true);
    let prompt = "HOLD across the restart";
    let id = new_id();
    assert_eq!(admit_rf(&w, "mia", &inc, &id, prompt).code, 0);
    wait_request(&w, &id, "bound", |r| r["bound_provider_turn"].is_string());
    w.ok(&["mux", "stop"]);
    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_eq!((s(&event["state"]), s(&event["final_message"])), ("completed", reply_for(prompt).as_str()), "{event}");
    w.wait_agent("mia", "available after the restart", |e| e["return_final_available"] == true);
    let events = agent_events(&w, "mia");
    let finals: Vec<&str> = events.iter().filter(|e| e["kind"] == "turn.final").map(|e| s(&e["provider_turn_id"])).collect();
    assert_eq!(finals.len(), 2, "one final per turn: {finals:?}");
    assert_ne!(finals[0], finals[1], "{finals:?}");
    assert_eq!(kinds(&events, "observer.gap"), 0, "the durable mark covers the evicted head: {events:?}");
}

/// MGD-6: a turn that asks the client a server request (an approval) does not wait for a human:
/// the daemon declines it (a JSON-RPC error), the app-server resolves it and the turn goes on
/// to its final. Without the answer the fake (like the real one) waits forever and the request
/// never ends.
#[test]
fn mgd_6_server_requests_are_declined_and_the_turn_goes_on() {
    let w = World::new(EXE);
    w.mux_start();
    let (_, entry) = ready_managed(&w, "ada", &["WAKTERM_FAKE_APP_SERVER_APPROVAL_PREFIX=ASK"]);
    let inc = s(&entry["incarnation"]).to_string();
    let id = new_id();
    let prompt = "ASK before you touch anything";
    let out = admit_rf(&w, "ada", &inc, &id, prompt);
    assert_eq!(out.code, 0, "{out:?}");
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], reply_for(prompt).as_str(), "{event}");
    // Declined once (the daemon's log says which request), never again once resolved.
    w.wait_agent("ada", "available again", |e| e["return_final_available"] == true);
    let log = std::fs::read_to_string(w.data.join("mux.log")).expect("the daemon's log");
    let declined: Vec<&str> = log.lines().filter(|l| l.contains("declined an app-server request")).collect();
    assert_eq!(declined.len(), 1, "{declined:?}");
    assert!(declined[0].contains("item/commandExecution/requestApproval"), "{declined:?}");
}

/// MGD-2: an `agent restart` whose app-server resumes the agent's thread under another session
/// fails (`agent_restart_failed`, as it did) and leaves the agent NOT admissible. The new
/// process used to be taken as the agent's thread: return-final available, an admission
/// accepted and completed in a conversation that was not the agent's (a review reproduced it).
/// Then it ran on, bound to nothing, until the next restart or stop (another review): LIFE-2
/// now ends it with its pane, and the agent is listed `stopped`.
#[test]
fn mgd_2_a_thread_resumed_under_another_session_is_never_admissible() {
    let w = World::new(EXE);
    w.mux_start();
    let (_, entry) = ready_managed(&w, "mia", &["WAKTERM_FAKE_APP_SERVER_RESUME_SESSION=not-the-agents-session"]);
    // A first turn, so the thread has a record to resume.
    let id = new_id();
    assert_eq!(admit_rf(&w, "mia", s(&entry["incarnation"]), &id, "the first turn").code, 0);
    assert_eq!(w.wait_terminal(&id)["state"], "completed");
    let restarted = w.run(&["agent", "restart", "mia"]);
    assert_ne!(restarted.code, 0, "{restarted:?}");
    assert!(restarted.stdout.contains("not-the-agents-session"), "the failure names the session: {restarted:?}");
    std::thread::sleep(std::time::Duration::from_millis(1_500));
    // LIFE-2: the new app-server is ended with its pane, as a start whose handshake failed
    // is; it ran on as the agent's process, bound to no thread of the agent's.
    assert!(restarted.stdout.contains("the new process was ended with its pane"), "{restarted:?}");
    let now = w.catalog_entry("mia").expect("the agent is still listed");
    assert_eq!((s(&now["state"]), &now["incarnation"]), ("stopped", &Value::Null), "no process runs: {now}");
    assert_eq!((&now["return_final_available"], s(&now["return_final_unavailable_reason"])), (&json!(false), "agent_not_running"), "{now}");
    assert!(w.holder_pids().is_empty(), "the pane was taken back: {:?}", w.holder_pids());
    let out = admit_rf(&w, "mia", s(&entry["incarnation"]), &new_id(), "into the wrong conversation");
    assert_ne!(out.json["classification"], "accepted", "{out:?}");
    assert_eq!(out.json["prompt_written"], false, "{out:?}");
    // MGD-4: the loss is not asked about again and again. Each re-proof brought the same
    // mismatch, a loss, and the next re-proof: 180 durable events a second until `agent stop`.
    let through = || w.run(&["agent", "catalog"]).json["events_through"].as_u64().expect("events_through");
    let before = through();
    std::thread::sleep(std::time::Duration::from_millis(2_000));
    let grown = through() - before;
    assert!(grown < 10, "{grown} events in 2 s of an agent that does nothing");
}

/// MGD-2: an agent whose app-server ended before its first turn has no thread record to
/// resume (Codex writes a thread's rollout from its first turn): each restart fails, and says
/// so and what to do, not "`agent restart` starts it again" (a hostile run: 3 restarts of 3).
#[test]
fn mgd_2_a_thread_without_a_turn_is_not_resumable_and_the_restart_says_so() {
    let w = World::new(EXE);
    w.mux_start();
    ready_managed(&w, "mia", &[]);
    for _ in 0..2 {
        let restarted = w.run(&["agent", "restart", "mia"]);
        assert_eq!((restarted.code, s(&restarted.json["error"])), (1, "agent_restart_failed"), "{restarted:?}");
        let message = s(&restarted.json["message"]);
        assert!(message.contains("no restart can resume its thread") && message.contains("`agent stop mia` then `agent start`"), "{restarted:?}");
    }
    assert!(w.holder_pids().is_empty(), "the pane was taken back: {:?}", w.holder_pids());
    w.ok(&["agent", "stop", "mia"]);
    ready_managed(&w, "mia", &[]);
}

/// CORR-11: an app-server that accepted a `turn/start` (its reply names the turn) and exited
/// before notifying the turn did not drain: the request is `indeterminate`, never
/// `delivery_failed`. Codex answers the request before it notifies the turn, so the exit in
/// between ended the request `delivery_failed`, and a caller told so might send the prompt
/// again into a thread that took it (a review reproduced it).
#[test]
fn corr_11_an_exit_after_the_turn_was_accepted_is_not_delivery_failed() {
    let w = World::new(EXE);
    w.mux_start();
    let (_, entry) = ready_managed(&w, "mia", &["WAKTERM_FAKE_APP_SERVER_EXIT_AFTER_REPLY_PREFIX=GONE"]);
    let id = new_id();
    let out = admit_rf(&w, "mia", s(&entry["incarnation"]), &id, "GONE right after accepting");
    assert_eq!(out.code, 0, "{out:?}");
    let event = w.wait_terminal(&id);
    assert_eq!(s(&event["state"]), "indeterminate", "{event}");
    assert_ne!(s(&event["reason"]), "process_exited_before_turn", "{event}");
}

/// MGD-7: an app-server that refuses the admission's `turn/start` (a JSON-RPC error: Codex
/// answers every failure of the request before the input reaches the thread) ends the request
/// `delivery_failed` / `turn_start_refused` at once, the server's error in its evidence, instead
/// of `indeterminate` after the 10 s no-turn grace; nothing reached the thread, and the agent
/// takes the next prompt.
#[test]
fn mgd_7_a_refused_turn_start_is_delivery_failed() {
    let w = World::new(EXE);
    w.mux_start();
    let (started, entry) = ready_managed(&w, "mia", &["WAKTERM_FAKE_APP_SERVER_REFUSE_PREFIX=NOPE"]);
    let thread = s(&started["thread_id"]).to_string();
    let id = new_id();
    let asked = std::time::Instant::now();
    let out = admit_rf(&w, "mia", s(&entry["incarnation"]), &id, "NOPE this one is refused");
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json["prompt_written"], true, "{out:?}");
    let event = w.wait_terminal(&id);
    assert_eq!((s(&event["state"]), s(&event["reason"])), ("delivery_failed", "turn_start_refused"), "{event}");
    assert!(asked.elapsed() < std::time::Duration::from_secs(8), "ended only after {:?}", asked.elapsed());
    let got = w.ok(&["agent", "request", "get", &id, "--evidence"]);
    let last = got["evidence"].as_array().and_then(|e| e.last()).cloned().unwrap_or_default();
    assert!(s(&last["detail"]).contains("MGD-7") && s(&last["detail"]).contains("failed to start turn"), "{got}");
    assert!(!received_prompts(&w, &thread).iter().any(|p| p.contains("refused")), "the refused prompt reached the thread");
    let entry = w.wait_agent("mia", "return-final available", |e| e["return_final_available"] == true);
    let next = new_id();
    assert_eq!(admit_rf(&w, "mia", s(&entry["incarnation"]), &next, "and this one is taken").code, 0);
    assert_eq!(s(&w.wait_terminal(&next)["state"]), "completed");
    // A plain send's receipt says so too, with the server's error.
    w.wait_agent("mia", "return-final available", |e| e["return_final_available"] == true);
    let send = w.run(&["agent", "send", "mia", "NOPE a plain one"]);
    assert_eq!(send.code, 0, "{send:?}");
    assert_eq!((&send.json["acknowledged"], s(&send.json["reason"])), (&serde_json::json!(false), "turn_start_refused"), "{send:?}");
    assert!(s(&send.json["detail"]).contains("failed to start turn"), "{send:?}");
}
