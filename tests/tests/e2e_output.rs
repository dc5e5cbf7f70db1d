//! End to end: `wakterm agent output` (OUT, the experimental output shadow page) through the
//! real daemon and CLI, over the fake Codex TUI in a real PTY writing a real rollout.

mod support;

use serde_json::Value;
use support::World;

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";
const SCHEMA: &str = "wakterm.agent-output-shadow.experimental.v1";

fn reply_for(prompt: &str) -> String {
    REPLY.replace("{prompt}", prompt)
}

fn texts(page: &Value) -> Vec<String> {
    page["events"].as_array().map(|a| a.iter().filter_map(|e| e["text"].as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn next_cursor(page: &Value) -> String {
    page["next_cursor"].as_str().unwrap_or_else(|| panic!("no next_cursor: {page}")).to_string()
}

/// Sends a one-way prompt and waits until its turn completed in the rollout.
fn turn(w: &World, name: &str, prompt: &str) {
    let out = w.run(&["agent", "send", name, prompt]);
    assert_eq!(out.code, 0, "send: {out:?}");
    let reply = reply_for(prompt);
    w.wait_until("the turn completes", || w.completed_turns().iter().any(|(_, m)| m.as_deref() == Some(reply.as_str())));
}

/// OUT-1, OUT-2, OUT-3, OUT-8: baseline without history, then exactly the new assistant message,
/// then nothing new; a forged cursor is cursor_invalid (exit 4) with a replacement baseline.
#[test]
fn out_1_baseline_then_new_assistant_message_then_nothing_and_forged_cursor_invalid() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);

    let base = w.run(&["cli", "agent", "output", "zola"]);
    assert_eq!(base.code, 0, "{base:?}");
    let b = &base.json;
    assert_eq!(b["schema"], SCHEMA);
    assert_eq!(b["state"], "ok");
    assert_eq!(b["agent_id"], entry["agent_id"]);
    assert_eq!(b["baseline"], true);
    assert_eq!(b["has_more"], false);
    assert!(texts(b).is_empty(), "the baseline turn is history: {b}");
    assert!(b["session_id"].as_str().is_some_and(|s| !s.is_empty()));

    let prompt = "Explain the output page";
    turn(&w, "zola", prompt);
    let page = w.run(&["agent", "output", "zola", "--after", &next_cursor(b)]);
    assert_eq!(page.code, 0, "{page:?}");
    let p = &page.json;
    assert_eq!(p["baseline"], false);
    assert_eq!(p["session_id"], b["session_id"]);
    assert_eq!(texts(p), vec![reply_for(prompt)]);
    let event = &p["events"][0];
    assert_eq!(event["kind"], "assistant_message");
    assert!(event["event_id"].as_str().is_some_and(|id| !id.is_empty()));
    assert!(event["turn_id"].as_str().is_some_and(|id| !id.is_empty()));

    // The same cursor again gives the same event id (stable); the new cursor gives nothing.
    let again = w.run(&["agent", "output", "zola", "--after", &next_cursor(b)]);
    assert_eq!(again.json["events"], p["events"]);
    let empty = w.run(&["agent", "output", "zola", "--after", &next_cursor(p)]);
    assert_eq!(empty.code, 0, "{empty:?}");
    assert!(texts(&empty.json).is_empty(), "{}", empty.json);

    // Forged: one character of the MAC changed.
    let mut forged = next_cursor(p);
    let last = forged.pop().expect("non-empty");
    forged.push(if last == 'A' { 'B' } else { 'A' });
    let out = w.run(&["agent", "output", "zola", "--after", &forged]);
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.json["schema"], SCHEMA);
    assert_eq!(out.json["state"], "cursor_invalid");
    assert_eq!(out.json["gap"], true);
    assert!(out.json.get("next_cursor").is_none(), "{}", out.json);
    assert!(out.json["baseline_cursor"].as_str().is_some(), "{}", out.json);
    let garbage = w.run(&["agent", "output", "zola", "--after", "not-a-cursor"]);
    assert_eq!(garbage.code, 4);
    assert_eq!(garbage.json["state"], "cursor_invalid");

    // OUT-8: the live observer is undisturbed: return-final still completes afterwards.
    let rf = w.run(&["agent", "send", "zola", "--return-final", "after the output reads"]);
    assert_eq!(rf.code, 0, "{rf:?}");
    let event = w.wait_terminal(rf.json["request_id"].as_str().expect("request id"));
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], reply_for("after the output reads").as_str());
}

/// OUT-3, OUT-4, OUT-7: after `agent restart` the old cursor is a gap (never continued), first
/// without a baseline (no rollout yet), then with one; other harnesses and unknown agents.
#[test]
fn out_3_restart_invalidates_cursor_and_out_7_unsupported_harness_and_unavailable() {
    let w = World::new(EXE);
    w.mux_start();
    w.start_agent("fresh", REPLY, &[]);
    w.wait_agent("fresh", "idle", |z| z["state"] == "idle");
    // A fresh Codex holds no rollout yet: observer_unavailable, exit 1.
    let out = w.run(&["agent", "output", "fresh"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.json["schema"], SCHEMA);
    assert_eq!(out.json["state"], "observer_unavailable");
    assert_eq!(out.json["reason"], "no_rollout_open");

    w.ready_agent("zola", REPLY, &[]);
    let base = w.ok(&["agent", "output", "zola"]);
    let old = next_cursor(&base);
    let restarted = w.ok(&["agent", "restart", "zola"]);
    w.wait_agent("zola", "the new incarnation", |z| z["incarnation"] == restarted["incarnation"]);

    let out = w.run(&["agent", "output", "zola", "--after", &old]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.json["state"] == "cursor_invalid" || out.json["state"] == "session_changed", "{}", out.json);
    assert_eq!(out.json["gap"], true);
    assert!(out.json.get("next_cursor").is_none());

    turn(&w, "zola", "first prompt after the restart");
    let out = w.run(&["agent", "output", "zola", "--after", &old]);
    assert_eq!(out.code, 4, "{out:?}");
    assert!(out.json["state"] == "cursor_invalid" || out.json["state"] == "session_changed", "{}", out.json);
    assert_eq!(out.json["gap"], true);
    assert_eq!(out.json["baseline"], true);
    assert_ne!(out.json["session_id"], base["session_id"], "a new provider session");
    let fresh = out.json["baseline_cursor"].as_str().expect("a new baseline cursor").to_string();
    let page = w.run(&["agent", "output", "zola", "--after", &fresh]);
    assert_eq!(page.code, 0, "{page:?}");
    assert!(texts(&page.json).is_empty(), "the baseline skips history: {}", page.json);

    // OUT-7: another harness, an unknown agent.
    let exe = EXE.to_string();
    let cwd = w.work.display().to_string();
    w.ok(&["agent", "start", "--name", "other", "--harness", "other", "--cwd", &cwd, "--", &exe, "fake-codex", "--reply", REPLY]);
    let out = w.run(&["agent", "output", "other"]);
    assert_eq!(out.code, 4, "{out:?}");
    assert_eq!(out.json["schema"], SCHEMA);
    assert_eq!(out.json["state"], "unsupported_harness");
    let out = w.run(&["agent", "output", "nobody"]);
    assert_eq!(out.code, 6, "{out:?}");
    assert_eq!(out.json["schema"], SCHEMA);
    assert_eq!(out.json["state"], "agent_unknown");
}
