//! End to end, hostile provider output (issue 8, finding 4): a rollout record over the parse
//! limit, through the real daemon and CLI over the fake Codex in a real PTY. The final of a
//! bound turn arrives in a 17 MiB record: the request ends `indeterminate` (`record_too_large`)
//! on the durable stream instead of staying bound forever, the agent is not reported busy, and
//! `agent output` reports the skipped record as a gap.

mod support;

use serde_json::Value;
use std::io::Write;
use support::World;

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";
const PROMPT: &str = "HANGME and answer at length";

/// The turn id of the `item_completed` user message carrying `prompt`.
fn turn_of_prompt(w: &World, prompt: &str) -> Option<String> {
    w.rollout_lines().iter().find_map(|l| {
        let p = &l["payload"];
        let ours = p["type"] == "item_completed" && p["item"]["type"] == "UserMessage" && p["item"]["content"][0]["text"] == prompt;
        ours.then(|| p["turn_id"].as_str().unwrap_or_default().to_string())
    })
}

/// Reads `agent output` from `cursor` until an answer is not `ok` (at most a few pages).
fn read_until_not_ok(w: &World, mut cursor: String) -> support::Out {
    for _ in 0..16 {
        let out = w.run(&["agent", "output", "zola", "--after", &cursor]);
        if out.json["state"] != "ok" {
            return out;
        }
        assert_eq!(out.json["gap"], false, "{}", out.json);
        cursor = out.json["next_cursor"].as_str().expect("next_cursor").to_string();
    }
    panic!("the output page never reported the skipped record");
}

/// CORR-12, OUT-9: a final too large to read ends its request `record_too_large`, leaves the
/// agent's state unknown (not busy), and is a gap on the output page.
#[test]
fn corr_12_out_9_a_final_too_large_to_read_ends_the_request_and_is_a_gap() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &["--hang-on", "HANGME"]);
    let base = w.ok(&["agent", "output", "zola"]);
    let base_cursor = base["next_cursor"].as_str().expect("baseline cursor").to_string();

    let sent = w.ok(&["agent", "send", "zola", "--return-final", PROMPT]);
    let id = sent["request_id"].as_str().expect("request id").to_string();
    w.wait_until("the request is bound", || w.ok(&["agent", "request", "get", &id])["state"] == "bound");
    let turn = turn_of_prompt(&w, PROMPT).expect("the prompt's turn");

    // The provider (hanging on the prompt, so it writes nothing else) completes the turn with
    // a final of 17 MiB, over the 16 MiB a rollout line is parsed up to.
    let rollout = w.rollout_files().pop().expect("the agent's rollout");
    let huge = "A".repeat(17 * 1024 * 1024);
    let payload = serde_json::json!({"type": "task_complete", "turn_id": turn, "last_agent_message": huge});
    let line = serde_json::json!({"timestamp": "2026-11-30T10:00:00.000Z", "type": "event_msg", "payload": payload});
    let mut file = std::fs::OpenOptions::new().append(true).open(&rollout).expect("open rollout");
    file.write_all(format!("{line}\n").as_bytes()).expect("append the huge final");
    drop(file);

    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "indeterminate", "{event}");
    assert_eq!(event["reason"], "record_too_large", "{event}");
    assert!(event.get("final_message").is_none(), "{event}");

    let entry = w.catalog_entry("zola").expect("catalog entry");
    assert_eq!(entry["state"], "unknown", "the turn's end is unreadable: not busy, not idle: {entry}");
    assert_eq!(entry["return_final_available"], false, "{entry}");

    let skipped = read_until_not_ok(&w, base_cursor);
    assert_eq!(skipped.code, 4, "{skipped:?}");
    let body: &Value = &skipped.json;
    assert_eq!(body["state"], "record_skipped", "{body}");
    assert_eq!(body["reason"], "record_too_large", "{body}");
    assert_eq!(body["gap"], true, "{body}");
    assert!(body.get("next_cursor").is_none(), "{body}");
    assert!(body["baseline_cursor"].as_str().is_some(), "{body}");
}
