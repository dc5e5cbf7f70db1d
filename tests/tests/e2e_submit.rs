//! Seed 003 end to end: MCP `session action=submit` (through the official SDK's client
//! spawning `wakterm mcp` over stdio) and `wakterm agent submit`, against the fake Codex in a
//! real PTY. Rules SUB-1..SUB-6 of SPEC.md.
//!
//! "Nothing written" is proven by the pane's own count of accepted writes (the holder's
//! `info.writes`, which every write and split write bumps) staying put, by the screen (a draft
//! is still there), and by the rollout: a prompt that reached the fake becomes a user message.
//! Every receipt is also checked with the engine's own `SubmitReceipt::assert_consistent`.

mod support;
#[path = "support/mcp_client.rs"]
mod mcp_client;

use mcp_client::{call, connect, runtime, Client};

use serde_json::{json, Value};
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{World, DEADLINE};
use wakterm_engine::SubmitReceipt;
use wakterm_runtime::holder::HolderClient;

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";
const SCHEMA: &str = "wakterm.session-submit.receipt.v1";




/// `session action=submit` of `text` to `agent` (timeout_ms only when given).
async fn submit(client: &Client, agent: &str, text: &str, timeout_ms: Option<u64>) -> (bool, Value) {
    let mut args = json!({"action": "submit", "session_id": agent, "input": text});
    if let Some(ms) = timeout_ms {
        args["timeout_ms"] = json!(ms);
    }
    call(client, "session", args).await
}


/// SUB-5: a receipt, checked by the engine's own consistency rules; `isError` exactly when
/// not acknowledged (MCP answers the receipt itself).
fn receipt(error: bool, body: &Value) -> SubmitReceipt {
    assert_eq!(body["schema"], SCHEMA, "a submit receipt: {body}");
    let parsed: SubmitReceipt = serde_json::from_value(body.clone()).unwrap_or_else(|e| panic!("receipt {body}: {e}"));
    parsed.assert_consistent();
    assert_eq!(error, body["status"] != "acknowledged", "isError unless acknowledged: {body}");
    parsed
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// The agent's pane, read straight from its holder.
struct Pane {
    socket: std::path::PathBuf,
}

impl Pane {
    fn of(w: &World, entry: &Value) -> Pane {
        let agent_id = s(&entry["agent_id"]);
        assert!(!agent_id.is_empty(), "catalog entry with an id: {entry}");
        Pane { socket: w.data.join("h").join(format!("{agent_id}.sock")) }
    }

    fn client(&self) -> HolderClient {
        HolderClient::connect_with_timeout(&self.socket, Duration::from_secs(5)).expect("the agent's holder")
    }

    /// Writes the pane has accepted so far (every write and split write counts one).
    fn writes(&self) -> u64 {
        self.client().info().expect("holder info").writes
    }

    fn screen(&self) -> String {
        self.client().screen().expect("holder screen").lines.join("\n")
    }

    /// The composer row (the last `›` line) of the screen.
    fn composer(&self) -> String {
        let screen = self.screen();
        screen.lines().rev().find(|l| l.trim_start().starts_with('›')).unwrap_or_default().to_string()
    }

    fn type_keys(&self, bytes: &[u8]) {
        self.client().write(bytes).expect("the pane takes the keys");
    }
}

/// Polls (bounded) until the rollout shows a completed turn answering `prompt`.
fn wait_turn_answered(w: &World, prompt: &str) {
    let reply = REPLY.replace("{prompt}", prompt);
    w.wait_until(&format!("the turn for {prompt:?} completed"), || w.completed_turns().iter().any(|(_, last)| last.as_deref() == Some(reply.as_str())));
}

/// Ready: idle, empty composer, nothing awaiting a turn (return-final available says all three).
fn wait_ready(w: &World, name: &str) -> Value {
    w.wait_agent(name, "ready for the next command", |z| z["state"] == "idle" && z["return_final_available"] == true)
}

/// SUB-1, SUB-2, SUB-4, SUB-5, SUB-6: a submit to an idle agent is acknowledged by post-Enter
/// terminal movement, in one call; the receipt carries the evidence, the advanced turn epoch
/// and retry_safe false; the fake really ran one turn for exactly that text; and the submit
/// left no durable record (no request, no request event).
#[test]
fn sub_1_submit_to_an_idle_agent_is_acknowledged_and_runs_one_turn() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let pane = Pane::of(&w, &entry);
    let events_before = w.run(&["agent", "events", "--once"]).stdout;
    let writes_before = pane.writes();
    let text = "the first submitted prompt";
    let (error, body) = runtime().block_on(async {
        let client = connect(&w).await;
        let answer = submit(&client, "zola", text, None).await;
        client.cancel().await.expect("close");
        answer
    });
    let r = receipt(error, &body);
    assert!(!error, "{body}");
    assert_eq!((s(&body["status"]), s(&body["write_state"]), body["acknowledged"].as_bool()), ("acknowledged", "complete", Some(true)), "{body}");
    assert_eq!(body["retry_safe"], false, "SUB-5: the command may be active: {body}");
    assert!(body["classification"].is_null() && body["reason"].is_null(), "{body}");
    let evidence = &body["evidence"];
    let (enter, output) = (evidence["enter_offset"].as_u64().unwrap(), evidence["output_offset"].as_u64().unwrap());
    assert!(output > enter, "SUB-4: output after the Enter boundary: {body}");
    assert_eq!(evidence["screen_changed"], true, "{body}");
    assert_eq!(evidence["bytes_after_enter"].as_u64(), Some(output - enter), "{body}");
    assert_eq!(body["output_offset"].as_u64(), Some(output), "{body}");
    assert!(body["turn_epoch"].as_u64().is_some_and(|e| e >= 1), "SUB-2: the epoch advanced: {body}");
    assert_eq!(body["timeout_ms"], 3000, "SUB-4: absent timeout_ms is the default 3000: {body}");
    assert_eq!(s(&body["agent_id"]), s(&entry["agent_id"]), "{body}");
    assert_eq!(s(&body["incarnation"]), s(&entry["incarnation"]), "{body}");
    let submission_id = r.submission_id.clone().expect("a submission id");
    assert!(uuid::Uuid::parse_str(&submission_id).is_ok(), "a UUID: {submission_id}");
    assert_eq!(pane.writes(), writes_before + 1, "SUB-2: one split write, in one holder call");

    // The fake ran a turn for exactly that text, once.
    wait_turn_answered(&w, text);
    assert_eq!(w.user_prompts(), ["baseline turn", text], "one new prompt, whole");
    wait_ready(&w, "zola");

    // SUB-6: no durable registry: the submission id is not a request, and no request event
    // (nor any event naming the submission) was recorded for it.
    let get = w.run(&["agent", "request", "get", &submission_id]);
    assert_ne!(get.code, 0, "a submission is not a request: {get:?}");
    let events_after = w.run(&["agent", "events", "--once"]).stdout;
    assert!(!events_after.contains(&submission_id), "no event names the submission");
    let requests = |stream: &str| stream.lines().filter(|l| l.contains("\"request.")).count();
    assert_eq!(requests(&events_after), requests(&events_before), "no request event for a submit");
}

/// SUB-1, SUB-3, SUB-5: a human's draft in the composer (typed with `session action=input`,
/// no Enter) makes submit reject before the first byte: busy / composer_not_empty,
/// not_started, retry_safe; the draft is still there afterwards. Once the human clears it, the
/// same submit goes through.
#[test]
fn sub_3_a_draft_in_the_composer_is_rejected_and_left_intact() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let pane = Pane::of(&w, &entry);
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, typed) = call(&client, "session", json!({"action": "input", "session_id": "zola", "input": "an unsent draft"})).await;
        assert!(!error && typed["ok"] == true, "{typed}");
        w.wait_agent("zola", "the draft is seen", |z| z["return_final_unavailable_reason"] == "composer_not_empty");
        let writes_before = pane.writes();

        let (error, body) = submit(&client, "zola", "must not replace the draft", None).await;
        receipt(error, &body);
        assert_eq!((s(&body["status"]), s(&body["classification"]), s(&body["reason"])), ("rejected", "busy", "composer_not_empty"), "{body}");
        assert_eq!((s(&body["write_state"]), body["retry_safe"].as_bool()), ("not_started", Some(true)), "{body}");
        assert_eq!(body["composer_state"], "draft", "{body}");
        assert!(body["evidence"].is_null() && body["acknowledged"] == false, "{body}");
        assert_eq!(pane.writes(), writes_before, "SUB-3: not one byte (no Ctrl-U either)");
        // Still there a moment later: nothing was queued to land afterwards.
        std::thread::sleep(Duration::from_millis(200));
        assert_eq!(pane.composer(), "› an unsent draft", "the draft survived:\n{}", pane.screen());
        assert_eq!(pane.writes(), writes_before);

        // The human clears it; the same command now goes through.
        let (error, cleared) = call(&client, "session", json!({"action": "input", "session_id": "zola", "special_key": "ctrl-u"})).await;
        assert!(!error, "{cleared}");
        wait_ready(&w, "zola");
        let (error, body) = submit(&client, "zola", "submitted after the draft", None).await;
        receipt(error, &body);
        assert_eq!(body["status"], "acknowledged", "{body}");
        client.cancel().await.expect("close");
    });
    wait_turn_answered(&w, "submitted after the draft");
    assert_eq!(w.user_prompts(), ["baseline turn", "submitted after the draft"], "the rejected text never reached the fake");
}

/// SUB-1, ADM-4: keys that reach the pane after the submit's look and before its write (a
/// human typing a draft then, or raw `session input`) make the holder refuse the split write
/// before its first byte: rejected / busy / `input_since_look`, not_started, retry_safe, and the
/// draft is still there (the write's Ctrl-U erased it until 2026-12-05). The daemon pauses
/// between the engine's ask and the holder call (`WAKTERM_FAULT=write_pause`), and the
/// test types once the daemon's log says the pause began.
#[test]
fn sub_1_a_draft_typed_after_the_look_survives_and_the_submit_is_refused() {
    let w = World::new(EXE);
    w.mux_start_pausing_writes();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let pane = Pane::of(&w, &entry);
    let log = w.data.join("mux.log");
    let before = w.write_pauses(); // the baseline turn's write paused too
    let (error, body) = runtime().block_on(async {
        let client = connect(&w).await;
        let typist = tokio::task::spawn_blocking({
            let (socket, log) = (pane.socket.clone(), log.clone());
            move || {
                let deadline = Instant::now() + DEADLINE;
                while support::write_pauses_logged(&log) == before {
                    assert!(Instant::now() < deadline, "the daemon never paused before the split write");
                    std::thread::sleep(Duration::from_millis(10));
                }
                Pane { socket }.type_keys(b"a draft typed after the look");
            }
        });
        let answer = submit(&client, "zola", "must not erase the late draft", None).await;
        typist.await.expect("the typist");
        client.cancel().await.expect("close");
        answer
    });
    receipt(error, &body);
    assert_eq!((s(&body["status"]), s(&body["classification"]), s(&body["reason"])), ("rejected", "busy", "input_since_look"), "{body}");
    assert_eq!((s(&body["write_state"]), body["retry_safe"].as_bool()), ("not_started", Some(true)), "{body}");
    assert!(s(&body["detail"]).contains("input reached the pane since"), "{body}");
    assert!(body["composer_state"].is_null(), "no longer known to be empty: {body}");
    w.wait_until("the late draft is drawn", || pane.composer().contains("a draft typed after the look"));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(pane.composer(), "› a draft typed after the look", "the draft survived:\n{}", pane.screen());
    assert_eq!(w.user_prompts(), ["baseline turn"], "the refused text never reached the fake");
}

/// SUB-1, SUB-3: while a turn runs (the fake holds prompts containing HOLD), submit is
/// rejected busy before the first byte (never steers the running turn); after the human
/// interrupts it, the rejected text is nowhere.
#[test]
fn sub_3_a_busy_agent_is_rejected_and_nothing_is_written() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &["--hang-on", "HOLD"]);
    let pane = Pane::of(&w, &entry);
    let out = w.run(&["agent", "send", "zola", "HOLD this turn open"]);
    assert_eq!(out.code, 0, "{out:?}");
    w.wait_agent("zola", "busy with the held turn", |z| z["state"] == "busy");
    let writes_before = pane.writes();
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, body) = submit(&client, "zola", "must not steer the held turn", Some(500)).await;
        receipt(error, &body);
        assert_eq!((s(&body["status"]), s(&body["classification"])), ("rejected", "busy"), "{body}");
        assert!(["turn_active", "awaiting_turn_start"].contains(&s(&body["reason"])), "{body}");
        assert_eq!((s(&body["write_state"]), body["retry_safe"].as_bool()), ("not_started", Some(true)), "{body}");
        assert_eq!(body["timeout_ms"], 500, "{body}");
        assert_eq!(pane.writes(), writes_before, "SUB-3: nothing written");

        // The human interrupts the held turn with Esc.
        let (error, esc) = call(&client, "session", json!({"action": "input", "session_id": "zola", "special_key": "escape"})).await;
        assert!(!error, "{esc}");
        client.cancel().await.expect("close");
    });
    w.wait_until("the held turn aborted", || w.rollout_lines().iter().any(|l| l["payload"]["type"] == "turn_aborted"));
    wait_ready(&w, "zola");
    assert_eq!(w.user_prompts(), ["baseline turn", "HOLD this turn open"], "the rejected text never reached the fake");
    assert!(!pane.screen().contains("must not steer"), "nor the screen:\n{}", pane.screen());
}

/// SUB-1, SUB-2, SUB-3, SUB-5: two concurrent submits to one idle agent, first as two MCP
/// calls in parallel, then as two CLI processes: exactly one writes (one split write), the
/// other is rejected busy before its first byte, retry-safe; what the fake received is exactly
/// the winner's text, whole: the payloads never splice.
#[test]
fn sub_1_concurrent_submits_exactly_one_writes_whole() {
    let w = World::new(EXE);
    w.mux_start();
    // A slower reply keeps the first turn running while the loser arrives.
    let entry = w.ready_agent("zola", REPLY, &["--reply-delay-ms", "800"]);
    let pane = Pane::of(&w, &entry);
    let losing_reasons = ["admission_in_progress", "awaiting_turn_start", "turn_active"];

    // Two MCP clients, one call each, at once.
    let writes_before = pane.writes();
    let (alpha, beta) = ("racing submit alpha one two three", "racing submit beta four five six");
    let receipts = runtime().block_on(async {
        let (a, b) = tokio::join!(connect(&w), connect(&w));
        let (ra, rb) = tokio::join!(submit(&a, "zola", alpha, None), submit(&b, "zola", beta, None));
        a.cancel().await.expect("close");
        b.cancel().await.expect("close");
        [(alpha, ra), (beta, rb)]
    });
    for (_, (error, body)) in &receipts {
        receipt(*error, body);
    }
    let winners: Vec<&str> = receipts.iter().filter(|(_, (_, b))| b["status"] == "acknowledged").map(|(t, _)| *t).collect();
    let losers: Vec<&Value> = receipts.iter().map(|(_, (_, b))| b).filter(|b| b["status"] == "rejected").collect();
    assert_eq!((winners.len(), losers.len()), (1, 1), "{receipts:?}");
    let loser = losers[0];
    assert_eq!((s(&loser["classification"]), s(&loser["write_state"]), loser["retry_safe"].as_bool()), ("busy", "not_started", Some(true)), "{loser}");
    assert!(losing_reasons.contains(&s(&loser["reason"])), "{loser}");
    eprintln!("MCP race: {} won, the other was refused {}", winners[0], loser["reason"]);
    assert_eq!(pane.writes(), writes_before + 1, "exactly one split write");
    wait_turn_answered(&w, winners[0]);
    wait_ready(&w, "zola");
    assert_eq!(w.user_prompts(), ["baseline turn", winners[0]], "exactly the winner's text, whole");

    // Two CLI processes at once.
    let writes_before = pane.writes();
    let (gamma, delta) = ("racing cli gamma seven eight", "racing cli delta nine ten");
    let spawn = |text: &str| w.cmd(&["agent", "submit", "zola", text]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn submit");
    let (g, d) = (spawn(gamma), spawn(delta));
    let outs = [(gamma, g.wait_with_output().expect("wait")), (delta, d.wait_with_output().expect("wait"))];
    let codes: Vec<i32> = outs.iter().map(|(_, o)| o.status.code().unwrap_or(-1)).collect();
    let bodies: Vec<Value> = outs.iter().map(|(_, o)| serde_json::from_slice(&o.stdout).unwrap_or(Value::Null)).collect();
    let mut sorted = codes.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, [0, 4], "one acknowledged (0), one rejected (4): {bodies:?}");
    let winner = if codes[0] == 0 { gamma } else { delta };
    let loser = &bodies[if codes[0] == 0 { 1 } else { 0 }];
    receipt(true, loser);
    assert!(losing_reasons.contains(&s(&loser["reason"])) && loser["retry_safe"] == true, "{loser}");
    eprintln!("CLI race: {winner} won, the other was refused {}", loser["reason"]);
    assert_eq!(pane.writes(), writes_before + 1, "exactly one split write");
    wait_turn_answered(&w, winner);
    assert_eq!(w.user_prompts(), ["baseline turn", winners[0], winner], "exactly the winner's text, whole");
}

/// SUB-4, SUB-5: a harness that never reacts to Enter (`fake-codex --ignore-enter`): the
/// whole sequence is written, nothing moves after the Enter, and the answer comes at the
/// clamped deadline (timeout_ms 1 -> 250): unacknowledged / no_post_enter_movement,
/// write_state complete, retry_safe false, never acceptance. The pasted text sits in the
/// composer, unsubmitted. timeout_ms is reported as clamped: 99999 -> 10000, absent -> 3000.
#[test]
fn sub_4_a_harness_that_never_reacts_to_enter_is_unacknowledged_at_the_clamped_deadline() {
    let w = World::new(EXE);
    w.mux_start();
    w.start_agent("mute", REPLY, &["--ignore-enter"]);
    let entry = w.wait_agent("mute", "idle", |z| z["state"] == "idle");
    let pane = Pane::of(&w, &entry);
    w.wait_until("the fake drew its empty composer", || pane.composer() == "› Ask Codex to do anything");
    let writes_before = pane.writes();
    runtime().block_on(async {
        let client = connect(&w).await;
        let started = Instant::now();
        let (error, body) = submit(&client, "mute", "typed but never entered", Some(1)).await;
        let took = started.elapsed();
        receipt(error, &body);
        assert_eq!((s(&body["status"]), s(&body["reason"])), ("unacknowledged", "no_post_enter_movement"), "{body}");
        assert_eq!((s(&body["write_state"]), body["acknowledged"].as_bool()), ("complete", Some(false)), "{body}");
        assert_eq!(body["retry_safe"], false, "SUB-5: written, maybe active: never replay: {body}");
        assert!(body["evidence"].is_null() && body["classification"].is_null(), "{body}");
        assert_eq!(body["timeout_ms"], 250, "SUB-4: 1 is clamped to 250: {body}");
        assert!(body["turn_epoch"].as_u64().is_some_and(|e| e >= 1), "{body}");
        assert!(body["output_offset"].as_u64().is_some(), "{body}");
        assert!(took >= Duration::from_millis(250), "waited the clamped 250 ms: {took:?}");
        assert!(took < Duration::from_secs(5), "and not much longer: {took:?}");
        assert_eq!(pane.writes(), writes_before + 1, "the whole sequence, one split write");
        assert_eq!(pane.composer(), "› typed but never entered", "pasted, never submitted:\n{}", pane.screen());

        // SUB-4: the clamp as reported, on refusals (the draft now blocks the composer).
        for (asked, reported) in [(Some(99_999), 10_000), (None, 3_000), (Some(250), 250)] {
            let (error, body) = submit(&client, "mute", "refused", asked).await;
            receipt(error, &body);
            assert_eq!(body["status"], "rejected", "{body}");
            assert_eq!(body["timeout_ms"], reported, "{asked:?}: {body}");
        }
        assert_eq!(pane.writes(), writes_before + 1, "the refusals wrote nothing");
        client.cancel().await.expect("close");
    });
    assert!(w.user_prompts().is_empty(), "no turn ever started: {:?}", w.user_prompts());
}

/// SUB-1, SUB-4: `/clear` uses the same contract: acknowledged by movement (the fake clears
/// its transcript and redraws), no turn, no prompt. Afterwards the agent counts as awaiting a
/// turn that a slash command never starts (ADM-5), so a submit is refused, retry-safe, until
/// the awaiting grace has passed; then it goes through again.
#[test]
fn sub_1_slash_clear_is_acknowledged_like_any_command() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let pane = Pane::of(&w, &entry);
    assert!(pane.screen().contains("• Final answer for: baseline turn"), "{}", pane.screen());
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, body) = submit(&client, "zola", "/clear", None).await;
        receipt(error, &body);
        assert_eq!((s(&body["status"]), s(&body["write_state"])), ("acknowledged", "complete"), "{body}");
        assert_eq!(body["retry_safe"], false, "{body}");
        w.wait_until("the transcript is cleared", || !pane.screen().contains("baseline turn"));
        assert_eq!(pane.composer(), "› Ask Codex to do anything", "{}", pane.screen());

        // Until the ADM-5 grace ends the agent is "awaiting its turn": refused, never queued.
        let started = Instant::now();
        let mut refusals = 0;
        loop {
            let (error, body) = submit(&client, "zola", "after the clear", None).await;
            receipt(error, &body);
            if body["status"] == "acknowledged" {
                break;
            }
            assert_eq!((s(&body["status"]), s(&body["reason"]), body["retry_safe"].as_bool()), ("rejected", "awaiting_turn_start", Some(true)), "{body}");
            refusals += 1;
            assert!(started.elapsed() < DEADLINE, "never submittable again after /clear");
            std::thread::sleep(Duration::from_millis(500));
        }
        eprintln!("after /clear: {refusals} refusals over {:?} before a submit went through", started.elapsed());
        client.cancel().await.expect("close");
    });
    wait_turn_answered(&w, "after the clear");
    assert_eq!(w.user_prompts(), ["baseline turn", "after the clear"], "/clear was no prompt; the refusals wrote nothing");
}

/// SUB-3, MCP-3: bad arguments change nothing: no session_id, no input, a special_key
/// (usage errors, no receipt); an unknown agent (rejected unavailable / agent_unknown);
/// empty or blank text (invalid / prompt_empty); text with ESC or CR (invalid /
/// prompt_control_character). No byte reaches the pane, no prompt the fake.
#[test]
fn sub_3_bad_arguments_and_unknown_agents_change_nothing() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let pane = Pane::of(&w, &entry);
    let writes_before = pane.writes();
    let screen_before = pane.screen();
    runtime().block_on(async {
        let client = connect(&w).await;
        for (args, what, code) in [
            (json!({"action": "submit", "input": "no target"}), "session_id", "bad_request"),
            (json!({"action": "submit", "session_id": "zola"}), "input", "bad_request"),
            // MCP-3: an argument the action does not take.
            (json!({"action": "submit", "session_id": "zola", "input": "x", "special_key": "enter"}), "Enter, itself", "invalid_arguments"),
        ] {
            let (error, body) = call(&client, "session", args).await;
            assert!(error, "{body}");
            assert_eq!(body["error"], code, "{body}");
            assert!(s(&body["message"]).contains(what), "{body}");
        }

        let (error, body) = submit(&client, "nobody", "to nobody", Some(99_999)).await;
        receipt(error, &body);
        assert_eq!((s(&body["status"]), s(&body["classification"]), s(&body["reason"])), ("rejected", "unavailable", "agent_unknown"), "{body}");
        assert_eq!((s(&body["write_state"]), body["retry_safe"].as_bool()), ("not_started", Some(true)), "{body}");
        assert_eq!(body["timeout_ms"], 10_000, "{body}");

        for (text, reason) in [("", "prompt_empty"), (" \n\t ", "prompt_empty"), ("hello \x1b[201~ rm -rf", "prompt_control_character"), ("line\rbreak", "prompt_control_character")] {
            let (error, body) = submit(&client, "zola", text, Some(1)).await;
            receipt(error, &body);
            assert_eq!((s(&body["status"]), s(&body["classification"]), s(&body["reason"])), ("rejected", "invalid", reason), "{text:?}: {body}");
            assert_eq!((s(&body["write_state"]), body["retry_safe"].as_bool()), ("not_started", Some(true)), "{body}");
            assert_eq!(body["timeout_ms"], 250, "{body}");
        }
        client.cancel().await.expect("close");
    });
    assert_eq!(pane.writes(), writes_before, "not one byte");
    assert_eq!(pane.screen(), screen_before, "the screen never moved");
    assert_eq!(w.user_prompts(), ["baseline turn"], "no prompt reached the fake");
    wait_ready(&w, "zola");
}

/// SUB-5 on the CLI: `wakterm agent submit` exits 0 acknowledged, 4 rejected (nothing
/// written), 5 written but unacknowledged, printing the receipt; `--exact-agent-id` takes the
/// agent id; `--timeout-ms` is clamped; `--help` explains retry_safe.
#[test]
fn sub_5_cli_submit_exit_codes_follow_the_receipt() {
    let w = World::new(EXE);
    let help = w.run(&["agent", "submit", "--help"]);
    assert_eq!(help.code, 0, "{help:?}");
    assert!(help.stdout.contains("retry_safe"), "--help explains retry_safe: {}", help.stdout);
    let usage = w.run(&["agent", "submit", "zola"]);
    assert_eq!(usage.code, 2, "no TEXT is a usage error: {usage:?}");

    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    w.start_agent("mute", REPLY, &["--ignore-enter"]);
    let mute = w.wait_agent("mute", "idle", |z| z["state"] == "idle");
    let (pane, mute_pane) = (Pane::of(&w, &entry), Pane::of(&w, &mute));
    w.wait_until("the mute fake drew its empty composer", || mute_pane.composer() == "› Ask Codex to do anything");

    // 0: acknowledged.
    let ok = w.run(&["agent", "submit", "zola", "submitted from the cli"]);
    assert_eq!(ok.code, 0, "{ok:?}");
    receipt(false, &ok.json);
    assert_eq!((s(&ok.json["status"]), ok.json["retry_safe"].as_bool()), ("acknowledged", Some(false)), "{ok:?}");
    wait_turn_answered(&w, "submitted from the cli");
    wait_ready(&w, "zola");

    // 0 again, by agent id.
    let agent_id = s(&entry["agent_id"]);
    let by_id = w.run(&["agent", "submit", "--exact-agent-id", agent_id, "submitted by id"]);
    assert_eq!(by_id.code, 0, "{by_id:?}");
    assert_eq!(s(&by_id.json["agent_id"]), agent_id, "{by_id:?}");
    wait_turn_answered(&w, "submitted by id");
    wait_ready(&w, "zola");

    // 4: rejected, nothing written.
    let writes_before = pane.writes();
    for (args, reason) in [
        (vec!["agent", "submit", "nobody", "to nobody"], "agent_unknown"),
        (vec!["agent", "submit", "--timeout-ms", "1", "zola", "esc \x1b inside"], "prompt_control_character"),
    ] {
        let out = w.run(&args);
        assert_eq!(out.code, 4, "{out:?}");
        receipt(true, &out.json);
        assert_eq!((s(&out.json["reason"]), out.json["retry_safe"].as_bool()), (reason, Some(true)), "{out:?}");
    }
    // INP-1: bytes that are no text, as the argument or on standard input: one receipt shape.
    for from_stdin in [false, true] {
        use std::os::unix::ffi::OsStrExt;
        let mut cmd = w.cmd(&["agent", "submit", "zola"]);
        let bytes: &[u8] = b"not \xff utf-8";
        cmd.arg(if from_stdin { std::ffi::OsStr::new("-") } else { std::ffi::OsStr::from_bytes(bytes) });
        let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn submit");
        let mut stdin = child.stdin.take().expect("stdin");
        if from_stdin {
            std::io::Write::write_all(&mut stdin, bytes).expect("write stdin");
        }
        drop(stdin);
        let out = child.wait_with_output().expect("wait");
        let body: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        assert_eq!(out.status.code(), Some(4), "stdin {from_stdin}: {body}");
        receipt(true, &body);
        assert_eq!((s(&body["classification"]), s(&body["reason"]), body["retry_safe"].as_bool()), ("invalid", "prompt_not_utf8", Some(true)), "{body}");
    }
    assert_eq!(pane.writes(), writes_before, "the refusals wrote nothing");
    pane.type_keys(b"a human draft");
    w.wait_agent("zola", "the draft is seen", |z| z["return_final_unavailable_reason"] == "composer_not_empty");
    let writes_with_draft = pane.writes();
    let busy = w.run(&["agent", "submit", "zola", "must not replace the draft"]);
    assert_eq!(busy.code, 4, "{busy:?}");
    assert_eq!((s(&busy.json["classification"]), s(&busy.json["reason"])), ("busy", "composer_not_empty"), "{busy:?}");
    assert_eq!(pane.writes(), writes_with_draft, "the rejection wrote nothing");
    assert_eq!(writes_with_draft, writes_before + 1, "only the human's keys");
    assert_eq!(pane.composer(), "› a human draft", "{}", pane.screen());

    // 5: written, never acknowledged; --timeout-ms clamped up to 250.
    let started = Instant::now();
    let unack = w.run(&["agent", "submit", "--timeout-ms", "1", "mute", "never entered"]);
    assert_eq!(unack.code, 5, "{unack:?}");
    assert!(started.elapsed() >= Duration::from_millis(250), "{:?}", started.elapsed());
    receipt(true, &unack.json);
    assert_eq!((s(&unack.json["status"]), s(&unack.json["write_state"]), s(&unack.json["reason"])), ("unacknowledged", "complete", "no_post_enter_movement"), "{unack:?}");
    assert_eq!((unack.json["retry_safe"].as_bool(), unack.json["timeout_ms"].as_u64()), (Some(false), Some(250)), "{unack:?}");

    assert_eq!(w.user_prompts(), ["baseline turn", "submitted from the cli", "submitted by id"], "nothing else reached a fake");
}

/// A daemon with an agent that never reacts to Enter (`--ignore-enter`), and a CLI submit of
/// `text` to it whose split write is done and pasted: the daemon is in its watch of
/// `timeout_ms`. Returns the daemon's pid and the submit's process.
fn submit_into_a_watch(w: &World, timeout_ms: &str, text: &str) -> (u32, std::process::Child) {
    w.mux_start();
    w.start_agent("mute", REPLY, &["--ignore-enter"]);
    let entry = w.wait_agent("mute", "idle", |z| z["state"] == "idle");
    let pane = Pane::of(w, &entry);
    w.wait_until("the fake drew its empty composer", || pane.composer() == "› Ask Codex to do anything");
    let writes_before = pane.writes();
    let child = w
        .cmd(&["agent", "submit", "--timeout-ms", timeout_ms, "mute", text])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn submit");
    w.wait_until("the split write reached the pane", || pane.writes() > writes_before);
    w.wait_until("the paste is in the composer", || pane.composer() == format!("› {text}"));
    (w.daemon_pid(), child)
}

/// SUB-5 (seed 003, Failure Semantics: only what provably never started is retry-safe): when
/// the daemon dies after the split write but before answering, `agent submit` must not look
/// like an ordinary error a caller may retry: like `agent send`'s `reply_lost`, it should exit
/// 5 (indeterminate) and say the command may have been written (retry_safe false).
#[test]
fn sub_5_a_lost_reply_after_the_write_is_not_retry_safe() {
    let w = World::new(EXE);
    let (daemon, child) = submit_into_a_watch(&w, "5000", "written before the daemon died");
    support::sigkill_and_wait(daemon);
    let out = child.wait_with_output().expect("wait");
    let body: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    assert_eq!(out.status.code(), Some(5), "the command may be active: indeterminate, never a plain error: {body}");
    assert_eq!((body["error"].as_str(), body["retry_safe"].as_bool(), body["write_state"].as_str()), (Some("reply_lost"), Some(false), Some("unknown")), "{body}");
}

/// LIFE-8: `mux stop` while a submit watches for its acknowledgement (10 s, the longest
/// timeout) lets the watch end and answers the submit's own receipt before the daemon exits.
/// The drain used to end at 5 s and the runtime with it: the caller saw the connection close
/// (`reply_lost`, no receipt, no `submission_id`).
#[test]
fn life_8_mux_stop_lets_a_watching_submit_answer_its_receipt() {
    let w = World::new(EXE);
    let started = Instant::now();
    let (daemon, child) = submit_into_a_watch(&w, "10000", "written before mux stop");
    // LIFE-6: a second stop during the drain (the daemon holds its lock, its socket gone)
    // waits for the daemon's end too: it answered `daemon_not_running` (exit 3) at once, and a
    // `mux start` right after failed on the lock (a hostile run).
    let (stop, second) = std::thread::scope(|scope| {
        let first = scope.spawn(|| w.run(&["mux", "stop"]));
        std::thread::sleep(Duration::from_secs(1));
        let second = w.run(&["mux", "stop"]);
        assert!(support::all_threads_dead(daemon), "the second stop answered while the daemon ran: {second:?}");
        (first.join().unwrap(), second)
    });
    assert_eq!(stop.code, 0, "mux stop: {:?}", stop.json);
    assert_eq!((second.code, &second.json["already_stopping"]), (0, &json!(true)), "{second:?}");
    let status = w.run(&["mux", "status"]);
    assert_eq!(status.json["error"], "daemon_not_running", "{status:?}");
    let out = child.wait_with_output().expect("wait");
    let took = started.elapsed();
    let body: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    receipt(true, &body);
    assert_eq!(out.status.code(), Some(5), "written, not acknowledged: {body}");
    assert_eq!((s(&body["status"]), s(&body["reason"]), s(&body["write_state"])), ("unacknowledged", "no_post_enter_movement", "complete"), "{body}");
    assert!(body["submission_id"].as_str().is_some_and(|id| !id.is_empty()), "{body}");
    assert!(took >= Duration::from_secs(10), "the watch ran its whole timeout: {took:?}");
    w.wait_until("the daemon ended", || support::all_threads_dead(daemon));
}

/// SUB-4: a resize that changes the pane's size counts as a write at the holder. The child
/// redraws on SIGWINCH (new output, another screen) that no Enter caused; counted, a submit
/// waiting for its acknowledgement answers `superseded` (`judge` compares the writes) instead
/// of taking the redraw for a reaction, as it could when `agent attach` resized the pane (a
/// review found it). A resize to the same size sends no SIGWINCH and counts nothing.
#[test]
fn sub_4_a_resize_counts_as_a_write_so_a_redraw_is_never_an_acknowledgement() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let pane = Pane::of(&w, &entry);
    let before = pane.writes();
    let size = pane.client().info().expect("holder info");
    pane.client().resize(size.cols + 7, size.rows).expect("resize");
    assert_eq!(pane.writes(), before + 1, "a new size is a write");
    pane.client().resize(size.cols + 7, size.rows).expect("resize");
    assert_eq!(pane.writes(), before + 1, "the same size again is none");
    // HOLD: one column is refused (vt100's panic there ended the holder's reader thread).
    assert!(pane.client().resize(1, size.rows).is_err(), "a one-column pane");
    assert_eq!(pane.writes(), before + 1, "a refused resize is none");
    let boundary = wakterm_engine::EnterBoundary { output_offset: 0, screen_digest: String::new(), generation: 1, writes: before, holder: String::new() };
    let sample = wakterm_engine::PaneSample { output_end: 1, screen_digest: "redrawn".into(), generation: 1, alive: true, writes: before + 1, holder: String::new(), composer: wakterm_engine::Composer::Empty, elapsed_ms: 5 };
    assert_eq!(wakterm_engine::judge(&boundary, &sample), wakterm_engine::Judgement::Superseded, "the redraw after it is no acknowledgement");
}
