//! Conformance against the REAL Codex CLI (the pinned 0.169), not the fake: the `wakterm` daemon
//! and CLI drive `codex -a never -s read-only --disable daemon_auto_start` in a real PTY, Codex
//! talks to an in-process loopback Responses-API provider (`wakterm_harness::provider`), and the
//! tests check the receipts against Codex's own rollout under the private CODEX_HOME and against
//! what the provider received.
//!
//! Every test is `#[ignore]`d so `cargo test --workspace` (no Codex) stays green; run them with
//! `bash scripts/test-real-codex.sh`, which installs the pinned Codex (fixtures/install-codex.sh),
//! sets WAKTERM_REAL_CODEX and runs `-- --ignored --test-threads=1`. Run that way, an unset or
//! broken WAKTERM_REAL_CODEX fails every test with instructions.
//!
//! "Nothing written" is proven like e2e_admission.rs does: after the rejected call a one-way
//! sentinel is sent and its turn awaited; the PTY is ordered, so a stray earlier write would
//! reach the rollout and the provider before the sentinel.

mod support;
#[path = "support/event_schema.rs"]
mod event_schema;
#[path = "support/real_codex.rs"]
mod real_codex;
#[path = "support/mcp_client.rs"]
mod mcp_client;

use real_codex::{hold_rule, reply_for, RealWorld, REPLY, TURN_DEADLINE};
use serde_json::Value;
use std::time::{Duration, Instant};
use support::{new_id, Out, World};
use wakterm_harness::provider::Script;

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

fn script(rules: Vec<wakterm_harness::provider::Rule>) -> Script {
    Script { default_reply: REPLY.to_string(), rules }
}

/// ADM-9: exit 4, the classification, and nothing written or pending.
fn assert_definitive_rejection(out: &Out, classification: &str) {
    let r = &out.json;
    assert_eq!(out.code, 4, "exit 4 expected: {out:?}");
    assert_eq!(r["classification"], classification, "{r}");
    assert_eq!(r["prompt_written"], false, "{r}");
    assert_eq!(r["write_state"], "not_started", "{r}");
    assert_eq!(r["reply_pending"], false, "{r}");
    assert_eq!(r["retry_safe"], true, "{r}");
}

/// Sends a one-way sentinel and waits for its turn: every earlier pane write was processed.
fn sentinel(rw: &RealWorld, name: &str, text: &str) {
    let out = rw.w.run(&["agent", "send", name, text]);
    assert_eq!(out.code, 0, "sentinel send: {out:?}");
    rw.wait_turn_completed(text);
}

/// ADM-13, ADM-15, RF-1: a one-way `agent send` to an idle real Codex is accepted and
/// acknowledged, and becomes exactly one provider turn: one `task_started`, the prompt as the only
/// user message, and the provider received it exactly once.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn adm_13_real_codex_one_way_send_is_exactly_one_turn() {
    let rw = RealWorld::new(EXE, script(vec![]));
    let entry = rw.start_idle("zola");
    assert_eq!(entry["return_final_available"], false, "no baseline yet: {entry}");
    assert_eq!(entry["return_final_unavailable_reason"], "no_baseline_cursor", "{entry}");
    let prompt = "Say hello from the conformance suite";
    let out = rw.w.run(&["agent", "send", "zola", prompt]);
    let r = &out.json;
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(r["schema"], "wakterm.agent-admission.receipt.v1");
    assert_eq!(r["classification"], "accepted", "{r}");
    assert_eq!(r["prompt_written"], true, "{r}");
    assert_eq!(r["write_state"], "complete", "{r}");
    assert_eq!(r["acknowledged"], true, "the observer saw the real Codex's user message: {r}");
    assert_eq!(r["return_mode"], "one_way");
    assert_eq!(r["incarnation"], entry["incarnation"]);
    rw.wait_turn_completed(prompt);
    let started: Vec<Value> = rw.w.rollout_lines().into_iter().filter(|l| l["payload"]["type"] == "task_started").collect();
    assert_eq!(started.len(), 1, "exactly one task_started: {started:?}");
    assert_eq!(rw.w.user_prompts(), vec![prompt.to_string()]);
    assert_eq!(rw.turn_of_prompt(prompt).as_deref(), started[0]["payload"]["turn_id"].as_str());
    assert_eq!(rw.provider_prompts(), vec![prompt.to_string()], "the provider got the prompt once");
    let entry = rw.wait_entry("zola", "return-final available", TURN_DEADLINE, |z| z["return_final_available"] == true);
    assert_eq!(entry["state"], "idle");
    assert_eq!(rw.w.rollout_files().len(), 1, "one session");
    assert_eq!(entry["observer_session"].as_str().map(|s| rw.w.rollout_files()[0].display().to_string().contains(s)), Some(true));
}

/// HASH-1, RF-2, CORR-5..7, TERM-1: after a one-way baseline, `--return-final` completes with
/// exactly the final of the turn its prompt opened, for prompts Codex trims or that stress the
/// paste: leading/trailing white space, tabs, non-ASCII, several lines, and more than 4 KiB.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn hash_1_rf_2_return_final_gets_its_own_final_for_hard_prompts() {
    let rw = RealWorld::new(EXE, script(vec![]));
    let entry = rw.ready("zola", "baseline turn");
    let mut long = String::from("Long prompt start.\n");
    let mut i = 0;
    while long.len() <= 6 * 1024 {
        long.push_str(&format!("line {i}:\tsome words, ünïcødé ✓, and more words to fill the paste\n"));
        i += 1;
    }
    long.push_str("Long prompt end.");
    assert!(long.len() > 4096);
    let prompts = [
        "  \t  leading and trailing white space  \t \n".to_string(),
        "inner\ttab\tseparated\tfields".to_string(),
        "non-ASCII: grüße, 日本語, emoji 🚀, math ∑ ≤ ∞".to_string(),
        "several lines:\nline two\n    indented line three\n\nline five after a blank".to_string(),
        "\n\n  all of it:\tgrüße 🚀\n  indented\n\t".to_string(),
        long,
    ];
    let mut previous_turn = rw.turn_of_prompt("baseline turn").expect("baseline turn in the rollout");
    for prompt in &prompts {
        let shown: String = prompt.chars().take(40).collect();
        let out = rw.w.run(&["agent", "send", "zola", "--return-final", prompt]);
        let r = out.json.clone();
        assert_eq!(out.code, 0, "{shown:?}: {out:?}");
        assert_eq!(r["classification"], "accepted", "{r}");
        assert_eq!(r["reply_pending"], true, "{r}");
        assert_eq!(r["return_mode"], "return_final", "{r}");
        assert_eq!(r["correlation_source"], "provider_file", "{r}");
        assert_eq!(r["incarnation"], entry["incarnation"], "{r}");
        assert_eq!(r["baseline_provider_turn"], previous_turn.as_str(), "the baseline is the last completed turn: {r}");
        assert!(r["armed_cursor"].as_str().is_some_and(|c| !c.is_empty()), "{r}");
        let id = s(&r["request_id"]).to_string();
        let event = rw.wait_terminal(&id, TURN_DEADLINE);
        assert_eq!(event["state"], "completed", "{shown:?}: {event}");
        assert_eq!(event["final_message"], reply_for(prompt).as_str(), "{shown:?}: the final of its own turn");
        let turn = rw.turn_of_prompt(prompt).unwrap_or_else(|| panic!("{shown:?}: no UserMessage with the trimmed prompt"));
        assert_eq!(event["provider_turn_id"], turn.as_str(), "{shown:?}");
        assert_ne!(turn, previous_turn);
        let finals: Vec<_> = rw.w.completed_turns().into_iter().filter(|(t, _)| *t == turn).collect();
        assert_eq!(finals, vec![(turn.clone(), Some(reply_for(prompt)))], "{shown:?}");
        // HASH-1: Codex sent the model exactly the trimmed prompt.
        assert_eq!(rw.provider_prompts().last().map(String::as_str), Some(prompt.trim()), "{shown:?}");
        previous_turn = turn;
        rw.wait_entry("zola", "idle again", TURN_DEADLINE, |z| z["return_final_available"] == true);
    }
    let mut expected = vec!["baseline turn".to_string()];
    expected.extend(prompts.iter().map(|p| p.trim().to_string()));
    assert_eq!(rw.provider_prompts(), expected, "each prompt reached the model exactly once");
    assert_eq!(rw.w.user_prompts(), expected);
    assert_eq!(rw.w.turns_started(), prompts.len() + 1);
    assert_eq!(rw.w.rollout_files().len(), 1, "one session throughout");
}

/// IDEM-2, IDEM-4: repeating a request id with the same input returns the stored receipt with
/// `replayed: true` and writes nothing: no second turn in the rollout, no second request at the
/// provider (return-final via `send`, one-way via `admit`).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn idem_2_real_codex_replay_writes_nothing() {
    let rw = RealWorld::new(EXE, script(vec![]));
    let entry = rw.ready("zola", "baseline turn");
    let inc = s(&entry["incarnation"]).to_string();
    let id = new_id();
    let prompt = "Idempotent return final";
    let first = rw.w.run(&["agent", "send", "zola", "--return-final", "--request-id", &id, prompt]);
    assert_eq!(first.code, 0, "{first:?}");
    assert_eq!(first.json["replayed"], false);
    assert_eq!(rw.wait_terminal(&id, TURN_DEADLINE)["final_message"], reply_for(prompt).as_str());
    rw.wait_entry("zola", "idle", TURN_DEADLINE, |z| z["return_final_available"] == true);

    let id2 = new_id();
    let one_way = "Idempotent one way";
    let a1 = rw.w.run(&["agent", "admit", "zola", "--incarnation", &inc, "--request-id", &id2, one_way]);
    assert_eq!(a1.code, 0, "{a1:?}");
    rw.wait_turn_completed(one_way);
    rw.wait_entry("zola", "idle", TURN_DEADLINE, |z| z["return_final_available"] == true);
    let turns = rw.w.turns_started();

    for (args, original) in [
        (vec!["agent", "send", "zola", "--return-final", "--request-id", &id, prompt], &first),
        (vec!["agent", "admit", "zola", "--incarnation", &inc, "--request-id", &id2, one_way], &a1),
    ] {
        let again = rw.w.run(&args);
        assert_eq!(again.code, 0, "{again:?}");
        let mut expect = original.json.clone();
        expect["replayed"] = Value::Bool(true);
        assert_eq!(again.json, expect, "the replay is the original receipt");
    }
    sentinel(&rw, "zola", "sentinel after replays");
    let expected = vec!["baseline turn", prompt, one_way, "sentinel after replays"];
    assert_eq!(rw.w.user_prompts(), expected);
    assert_eq!(rw.provider_prompts(), expected, "the provider got no second request");
    assert_eq!(rw.w.turns_started(), turns + 1, "no turn for the replays");
    assert_eq!(rw.w.events_after(0).iter().filter(|e| e["request_id"] == id.as_str()).count(), 1);
}

/// ADM-5, ADM-9: while a real turn runs (the provider holds `response.completed`, so the reply
/// text is already on screen and the TUI looks idle: only the rollout knows), `admit` (one-way
/// and return-final) and `send --return-final` are `busy` / `turn_active` with nothing written.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn adm_5_real_codex_busy_turn_rejects_admissions_nothing_written() {
    let rw = RealWorld::new(EXE, script(vec![hold_rule("HOLD", 8000)]));
    let entry = rw.ready("zola", "baseline turn");
    let inc = s(&entry["incarnation"]).to_string();
    let held = "HOLD this turn busy";
    let out = rw.w.run(&["agent", "send", "zola", held]);
    assert_eq!(out.code, 0, "{out:?}");
    let started = Instant::now();
    rw.wait_entry("zola", "busy", TURN_DEADLINE, |z| z["state"] == "busy");
    // Wait until the held reply text streamed: the screen now shows the idle placeholder.
    std::thread::sleep(Duration::from_millis(1000));
    let calls: Vec<Vec<String>> = vec![
        vec!["agent".into(), "admit".into(), "zola".into(), "--incarnation".into(), inc.clone(), "--request-id".into(), new_id(), "busy admit one way".into()],
        vec!["agent".into(), "admit".into(), "zola".into(), "--incarnation".into(), inc.clone(), "--request-id".into(), new_id(), "--return-final".into(), "busy admit return final".into()],
        vec!["agent".into(), "send".into(), "zola".into(), "--return-final".into(), "busy send return final".into()],
    ];
    for call in &calls {
        let args: Vec<&str> = call.iter().map(String::as_str).collect();
        let out = rw.w.run(&args);
        assert_definitive_rejection(&out, "busy");
        assert_eq!(out.json["reason"], "turn_active", "{}", out.json);
    }
    assert!(started.elapsed() < Duration::from_millis(7000), "the checks ran while the turn was held ({:?})", started.elapsed());
    let entry = rw.w.catalog_entry("zola").expect("zola");
    assert_eq!(entry["state"], "busy", "still held: {entry}");
    assert_eq!(entry["return_final_unavailable_reason"], "turn_active", "{entry}");
    let held_reply = "held reply to: HOLD this turn busy";
    let end = Instant::now() + TURN_DEADLINE;
    while !rw.w.completed_turns().iter().any(|(_, m)| m.as_deref() == Some(held_reply)) {
        assert!(Instant::now() < end, "the held turn never completed");
        std::thread::sleep(Duration::from_millis(100));
    }
    rw.wait_entry("zola", "idle after the held turn", TURN_DEADLINE, |z| z["return_final_available"] == true);
    sentinel(&rw, "zola", "sentinel after busy");
    let expected = vec!["baseline turn", held, "sentinel after busy"];
    assert_eq!(rw.w.user_prompts(), expected, "no rejected prompt reached Codex");
    assert_eq!(rw.provider_prompts(), expected, "no rejected prompt reached the model");
    assert_eq!(rw.w.turns_started(), 3);
}

/// ADM-6, CORR-3, CORR-4: Codex TUIs started WITHOUT `--disable daemon_auto_start` on the same
/// CODEX_HOME and cwd as `zola` hand their rollouts to ONE shared `codex app-server
/// --managed-daemon`. Observed with 0.169 under wakterm: the daemon is a child of the FIRST such
/// TUI (it holds that TUI's rollout, and later every daemon-mode TUI's rollout), the second TUI's
/// tree holds none. Return-final to the second is refused before any write (`observer_failure`,
/// reason in the receipt); the first and `zola` must be refused too or complete with the final of
/// their OWN turn, even though every agent gets the same prompt text: never a wrong correlation.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn adm_6_corr_3_daemon_mode_codex_is_refused_never_miscorrelated() {
    let rw = RealWorld::new(EXE, script(vec![]));
    rw.ready("zola", "baseline of zola");
    for name in ["d1", "d2"] {
        rw.start_codex(name, false);
        rw.wait_entry(name, "composer up", real_codex::CODEX_START_DEADLINE, |z| z["state"] == "idle");
        // A one-way baseline: its turn runs inside the managed daemon.
        let base = format!("baseline of {name}");
        let out = rw.w.run(&["agent", "send", name, &base]);
        eprintln!("one-way send to daemon-mode {name}: {}", out.json);
        assert_eq!(out.code, 0, "one-way admission needs no observer (ADM-6): {out:?}");
        rw.wait_turn_completed(&base);
    }
    let managed = rw.app_server_pids();
    eprintln!("codex app-server processes of this CODEX_HOME: {managed:?}");
    for pid in rw.codex_home_pids() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat.rsplit(") ").next().and_then(|r| r.split(' ').nth(1)).unwrap_or("?").to_string();
        let cmd = String::from_utf8_lossy(&std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default()).replace('\0', " ");
        eprintln!("  pid {pid} ppid {ppid} {:.110} holds {:?}", cmd, real_codex::held_rollouts(pid));
    }
    assert!(!managed.is_empty(), "Codex without --disable daemon_auto_start started its managed app-server");

    // d2's one-way prompt started no turn its observer could see: ADM-5 keeps it `busy` /
    // `awaiting_turn_start` for AWAITING_TURN_GRACE_MS (10 s); a definitive refusal too.
    let early = rw.w.run(&["agent", "send", "d2", "--return-final", "early return final"]);
    eprintln!("return-final to d2 inside the grace: {}", early.json);
    if early.json["classification"] == "busy" {
        assert_definitive_rejection(&early, "busy");
        assert_eq!(early.json["reason"], "awaiting_turn_start", "{}", early.json);
    } else {
        assert_definitive_rejection(&early, "observer_failure");
    }
    // Past the grace (AWAITING_TURN_GRACE_MS after the write), a fresh snapshot (idle, empty
    // composer: an admission's or the catalog's) ends the wait.
    std::thread::sleep(Duration::from_millis(10_500));
    let same = "the same prompt to every agent";
    let mut accepted = 0;
    for name in ["d2", "d1", "zola"] {
        let entry = rw.w.catalog_entry(name).expect("in the catalog");
        eprintln!("catalog {name}: {entry}");
        let inc = s(&entry["incarnation"]).to_string();
        let id = new_id();
        let out = rw.w.run(&["agent", "admit", name, "--incarnation", &inc, "--request-id", &id, "--return-final", same]);
        eprintln!("admit --return-final to {name}: {}", out.json);
        if out.code == 0 {
            accepted += 1;
            // Only a correct correlation is acceptable: the final of the turn this prompt opened
            // in the agent's OWN session (the rollout holding its own baseline).
            let event = rw.wait_terminal(&id, TURN_DEADLINE);
            eprintln!("terminal event of {name}: {event}");
            assert_eq!(event["state"], "completed", "{name}: {event}");
            assert_eq!(event["final_message"], reply_for(same).as_str());
            let own = rw
                .w
                .rollout_files()
                .into_iter()
                .find(|f| std::fs::read_to_string(f).unwrap_or_default().contains(&format!("baseline of {name}")))
                .expect("the agent's own rollout");
            let text = std::fs::read_to_string(&own).unwrap();
            let turn = s(&event["provider_turn_id"]);
            let bound_here = text.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).any(|l| {
                l["payload"]["type"] == "item_completed"
                    && l["payload"]["turn_id"] == turn
                    && l["payload"]["item"]["content"][0]["text"] == same
            });
            assert!(bound_here, "{name}: the bound turn {turn} is its own turn in {}", own.display());
        } else {
            assert_definitive_rejection(&out, "observer_failure");
            let reason = s(&out.json["reason"]);
            assert!(
                ["observer_unavailable", "no_baseline_cursor", "turn_state_unknown"].contains(&reason),
                "{name}: the receipt names why: {}",
                out.json
            );
            // Same with the interactive spelling.
            let send = rw.w.run(&["agent", "send", name, "--return-final", same]);
            assert_definitive_rejection(&send, "observer_failure");
        }
        if name == "d2" {
            assert_eq!(out.code, 4, "the second daemon-mode TUI holds no rollout: refused: {}", out.json);
        }
    }
    // Nothing of the refused calls reached Codex or the model.
    let got = rw.provider_prompts().iter().filter(|p| p.as_str() == same).count();
    assert_eq!(got, accepted, "{:?}", rw.provider_prompts());
    assert_eq!(rw.w.user_prompts().iter().filter(|p| p.as_str() == same).count(), accepted);
    // Explicit end of the managed daemon (Drop does it too, for failures).
    rw.kill_codex_home_processes();
    assert!(rw.app_server_pids().is_empty(), "the managed app-server was ended");
}

/// ADM-2, ADM-9: `wakterm agent restart` replaces Codex in the same pane; an admission naming
/// the old incarnation (by name or by exact agent id, one-way or return-final) is
/// `stale_incarnation` with the current incarnation in the receipt and nothing written. The new
/// Codex then serves a fresh session.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn adm_2_real_codex_restart_gives_stale_incarnation() {
    let rw = RealWorld::new(EXE, script(vec![]));
    let entry = rw.ready("zola", "baseline turn");
    let old = s(&entry["incarnation"]).to_string();
    let agent_id = s(&entry["agent_id"]).to_string();
    let old_session = s(&entry["observer_session"]).to_string();
    let restarted = rw.w.ok(&["agent", "restart", "zola"]);
    let new = s(&restarted["incarnation"]).to_string();
    assert!(!new.is_empty() && new != old, "restart gives a new incarnation: {restarted}");

    let calls: [Vec<&str>; 3] = [
        vec!["agent", "admit", "zola", "--incarnation", &old, "--request-id", "REQ", "stale one way"],
        vec!["agent", "admit", "zola", "--incarnation", &old, "--request-id", "REQ", "--return-final", "stale return final"],
        vec!["agent", "admit", &agent_id, "--exact-agent-id", "--incarnation", &old, "--request-id", "REQ", "--return-final", "stale by id"],
    ];
    for call in calls {
        let id = new_id();
        let args: Vec<&str> = call.iter().map(|a| if *a == "REQ" { id.as_str() } else { a }).collect();
        let out = rw.w.run(&args);
        assert_definitive_rejection(&out, "stale_incarnation");
        assert_eq!(out.json["reason"], "incarnation_changed", "{}", out.json);
        assert_eq!(out.json["incarnation"], new.as_str(), "the receipt holds the current incarnation: {}", out.json);
    }
    // The new Codex must come up idle on its own (fresh) state, never on the old session.
    let fresh = rw.wait_entry("zola", "new incarnation idle", real_codex::CODEX_START_DEADLINE, |z| {
        z["incarnation"] == new.as_str() && z["state"] == "idle"
    });
    assert_ne!(fresh["observer_session"], old_session.as_str(), "the new process never adopts the old session: {fresh}");
    sentinel(&rw, "zola", "sentinel after restart");
    assert!(!rw.w.user_prompts().iter().any(|p| p.starts_with("stale")), "{:?}", rw.w.user_prompts());
    assert_eq!(rw.provider_prompts(), vec!["baseline turn", "sentinel after restart"]);
    // The new incarnation's return-final works on its new session.
    let z = rw.wait_entry("zola", "return-final on the new session", TURN_DEADLINE, |z| z["return_final_available"] == true);
    assert_ne!(z["observer_session"], old_session.as_str(), "{z}");
    let out = rw.w.run(&["agent", "send", "zola", "--return-final", "after restart"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json["incarnation"], new.as_str());
    let event = rw.wait_terminal(s(&out.json["request_id"]), TURN_DEADLINE);
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], reply_for("after restart").as_str());
    assert_eq!(rw.w.rollout_files().len(), 2, "the restarted Codex wrote a second session");
}

/// ADM-5 (catalog): an agent whose one-way prompt started no turn the observer can see must
/// not stay `busy` / `turn_pending` in the catalog forever (found against the real Codex: the
/// catalog refreshed the observer without feeding its snapshot to the engine; fixed by
/// `Input::ObserverSnapshot`). Real case: the second Codex TUI without
/// `--disable daemon_auto_start` (its turns run in the managed daemon, in another agent's tree).
/// An orchestrator polling the catalog for `idle` waits forever although its screen is idle with
/// an empty composer and an admission would be answered (`observer_failure`).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn adm_5_catalog_turn_pending_clears_after_the_grace() {
    let rw = RealWorld::new(EXE, script(vec![]));
    for name in ["d1", "d2"] {
        rw.start_codex(name, false);
        rw.wait_entry(name, "composer up", real_codex::CODEX_START_DEADLINE, |z| z["state"] == "idle");
        let base = format!("baseline of {name}");
        assert_eq!(rw.w.run(&["agent", "send", name, &base]).code, 0);
        rw.wait_turn_completed(&base);
    }
    // Bounded: AWAITING_TURN_GRACE_MS (10 s) after the write, plus slack.
    let d2 = rw.wait_entry("d2", "catalog stops reporting turn_pending after the grace", Duration::from_secs(20), |z| {
        z["return_final_unavailable_reason"] != "turn_pending"
    });
    assert_ne!(d2["state"], "busy", "{d2}\n{}", rw.screen(s(&d2["agent_id"])));
}

/// CORR-3 / discovery (proc_probe.rs `held_rollouts`, observer.rs `on_found`): a rollout file a
/// process merely READS is adopted as its session. Real Codex 0.169 does exactly this: a freshly
/// started TUI opens the most recent rollout of its CODEX_HOME read-only (fdinfo flags 0o2100000,
/// ~0.8 s after start, for a few ms), while the writer holds its own with O_RDWR|O_APPEND
/// (0o2102002). When the 50 ms monitor catches that window after `agent restart`, the new
/// incarnation adopts the OLD session: catalog shows it idle with the old baseline
/// (return-final "available", a cursor in a file this process never writes), then, once the fd
/// is closed, `unknown` / "holds no Codex rollout file open any more" until a new turn. Deterministic
/// reproduction: an agent process that holds a rollout of its cwd open read-only.
/// Fixed: discovery counts only fds opened for writing (`proc_probe::open_files_for_writing`).
/// Needs no Codex, so it runs in the normal suite.
#[test]
fn corr_3_read_only_rollout_is_not_the_agents_session() {
    let w = World::new(EXE);
    // A real 0.169 rollout (one completed turn) moved into this world's CODEX_HOME and cwd.
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169/completed-turn.jsonl");
    let text = std::fs::read_to_string(&fixture).expect("fixture");
    let cwd = w.work.display().to_string();
    let text = text.replace("/tmp/wkcap-completed/project", &cwd);
    let dir = w.codex_home.join("sessions/2000/01/01");
    std::fs::create_dir_all(&dir).unwrap();
    let rollout = dir.join("rollout-2000-01-01T00-19-28-00000000-0000-4000-8000-000000000001.jsonl");
    std::fs::write(&rollout, text).unwrap();
    w.mux_start();
    let env = format!("CODEX_HOME={}", w.codex_home.display());
    let path = rollout.display().to_string();
    // `sh` opens the rollout read-only on fd 3 and execs `sleep`, which keeps it.
    w.ok(&["agent", "start", "--name", "reader", "--cwd", &cwd, "--env", &env, "--", "/bin/sh", "-c", "exec 3<\"$0\"; exec sleep 600", &path]);
    // Discovery runs every 50 ms; 3 s is many chances for a wrong adoption to show.
    let end = std::time::Instant::now() + Duration::from_secs(3);
    let mut entry = Value::Null;
    while std::time::Instant::now() < end {
        entry = w.catalog_entry("reader").unwrap_or(Value::Null);
        if entry["observer_session"].is_string() || entry["state"] == "idle" {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("catalog of a process that only reads a rollout: {entry}");
    assert_eq!(entry["return_final_available"], false, "a read-only holder is not the session's writer: {entry}");
    assert!(entry["observer_session"].is_null(), "{entry}");
    let out = w.run(&["agent", "send", "reader", "--return-final", "must not be armed on a file this process never writes"]);
    assert_eq!(out.code, 4, "refused before any write: {out:?}");
    assert_eq!(out.json["classification"], "observer_failure", "{}", out.json);
}

// ---- REC: daemon crashes and restarts under the real Codex (real-Codex versions of
// e2e_faults.rs). The agent (its PTY holder and Codex) outlives the daemon; a SIGKILLed daemon
// is restarted with `mux start`. If a test fails while the daemon is dead, the Drop guards
// still clean up: RealWorld ends every process naming its CODEX_HOME, World's Drop starts a
// daemon to stop the orphaned holders and SIGKILLs whatever names its data dir.

/// Polls `mux status` until it says no daemon runs (exit 3), bounded. Not merely "not 0": a
/// SIGKILLed multi-threaded daemon shows as a zombie while its other threads still tear down and
/// its socket still accepts; a call then gets exit 1 (`daemon_io`, closed without answering).
/// Exit 3 (connection refused) means its file table, listening socket and lock, is released.
fn wait_daemon_gone(rw: &RealWorld) {
    let end = Instant::now() + Duration::from_secs(10);
    let mut last = rw.w.run(&["mux", "status"]);
    while last.code != 3 {
        assert!(Instant::now() < end, "the daemon did not die: {last:?}");
        std::thread::sleep(Duration::from_millis(20));
        last = rw.w.run(&["mux", "status"]);
    }
}

/// A ready agent (baseline turn done), then the daemon restarted with the crash point armed
/// (as e2e_faults.rs: `mux stop`, then `mux start` with WAKTERM_FAULT).
fn armed_real_world(fault: &str) -> (RealWorld, Value) {
    let rw = RealWorld::new(EXE, script(vec![]));
    let entry = rw.ready("zola", "baseline turn");
    rw.w.ok(&["mux", "stop"]);
    wait_daemon_gone(&rw);
    let out = rw.w.cmd(&["mux", "start"]).env("WAKTERM_FAULT", fault).output().expect("mux start");
    assert!(out.status.success(), "mux start with {fault}: {}", String::from_utf8_lossy(&out.stdout));
    // The agent outlived the daemon: same incarnation, its baseline re-attached.
    rw.wait_entry("zola", "same incarnation, return-final available", TURN_DEADLINE, |z| {
        z["incarnation"] == entry["incarnation"] && z["return_final_available"] == true
    });
    (rw, entry)
}

/// The return-final admission that hits the crash point: the CLI loses its daemon mid-call
/// (`reply_lost`, exit 5), and the daemon is gone.
fn admit_into_crash(rw: &RealWorld, entry: &Value, id: &str, prompt: &str) {
    let inc = s(&entry["incarnation"]);
    let out = rw.w.run(&["agent", "admit", "zola", "--incarnation", inc, "--request-id", id, "--return-final", prompt]);
    assert_eq!(out.code, 5, "the daemon must have died before answering: {out:?}");
    assert_eq!(out.json["error"], "reply_lost", "{out:?}");
    assert_eq!(out.json["classification"], "indeterminate", "{out:?}");
    assert_eq!(out.json["request_id"], id, "{out:?}");
    wait_daemon_gone(rw);
}

/// IDEM-2 after a crash: the same id and input replay the stored receipt and write nothing
/// (proven with a sentinel turn: the PTY is ordered).
fn replay_writes_nothing(rw: &RealWorld, entry: &Value, id: &str, prompt: &str, sentinel_text: &str) -> Value {
    let inc = s(&entry["incarnation"]);
    let out = rw.w.run(&["agent", "admit", "zola", "--incarnation", inc, "--request-id", id, "--return-final", prompt]);
    assert_eq!(out.json["replayed"], true, "{out:?}");
    assert_eq!(out.json["request_id"], id, "{out:?}");
    rw.wait_entry("zola", "idle before the sentinel", TURN_DEADLINE, |z| z["state"] == "idle");
    sentinel(rw, "zola", sentinel_text);
    out.json
}

/// TERM: every terminal event on the durable stream appears once (per request, per sequence).
fn assert_terminal_events_once(rw: &RealWorld, id: &str) -> Vec<Value> {
    let events = rw.w.events_after(0);
    assert_eq!(events.iter().filter(|e| e["request_id"] == id).count(), 1, "exactly one terminal event for {id}: {events:?}");
    let mut ids: Vec<String> = events.iter().map(|e| s(&e["request_id"]).to_string()).collect();
    let mut seqs: Vec<u64> = events.iter().map(|e| e["terminal_event_sequence"].as_u64().expect("sequence")).collect();
    ids.sort();
    ids.dedup();
    seqs.sort();
    seqs.dedup();
    assert_eq!(ids.len(), events.len(), "no request has two terminal events: {events:?}");
    assert_eq!(seqs.len(), events.len(), "no sequence repeats: {events:?}");
    events
}

/// REC-2, CORR-1, RF-5: the daemon is SIGKILLed while the real Codex runs a return-final
/// request's turn (the provider holds the reply ~5 s); after `mux start` the agent keeps its
/// incarnation, the request re-attaches its session at the armed cursor and completes with
/// exactly its own final; the stream holds its terminal event once.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn rec_2_real_codex_sigkill_mid_turn_completes_after_restart() {
    let slow = wakterm_harness::provider::Rule { contains: "SLOWTURN".into(), reply: None, delay_ms: 0, output_delay_ms: 5000, fail: None };
    let rw = RealWorld::new(EXE, script(vec![slow]));
    let entry = rw.ready("zola", "baseline turn");
    let inc = s(&entry["incarnation"]).to_string();
    let id = new_id();
    let prompt = "SLOWTURN survive a daemon crash";
    let out = rw.w.run(&["agent", "admit", "zola", "--incarnation", &inc, "--request-id", &id, "--return-final", prompt]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json["classification"], "accepted", "{}", out.json);
    assert_eq!(out.json["reply_pending"], true, "{}", out.json);
    // The turn runs: its UserMessage is in the rollout and the provider holds the reply.
    let end = Instant::now() + TURN_DEADLINE;
    while rw.turn_of_prompt(prompt).is_none() || !rw.provider_prompts().iter().any(|p| p == prompt) {
        assert!(Instant::now() < end, "the turn never started; prompts {:?}", rw.w.user_prompts());
        std::thread::sleep(Duration::from_millis(50));
    }
    let turn = rw.turn_of_prompt(prompt).expect("turn");
    let pid = rw.w.daemon_pid();
    let killed_at = Instant::now();
    support::sigkill_and_wait(pid);
    wait_daemon_gone(&rw);
    assert!(
        !rw.w.completed_turns().iter().any(|(t, _)| *t == turn),
        "the daemon died mid-turn (the turn had not completed yet)"
    );
    rw.w.mux_start();
    assert_ne!(rw.w.daemon_pid(), pid);
    let event = rw.wait_terminal(&id, TURN_DEADLINE);
    eprintln!("terminal event {:?} after the SIGKILL: {event}", killed_at.elapsed());
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], reply_for(prompt).as_str(), "its own final");
    assert_eq!(event["provider_turn_id"], turn.as_str(), "{event}");
    let z = rw.wait_entry("zola", "idle after the turn", TURN_DEADLINE, |z| z["return_final_available"] == true);
    assert_eq!(z["incarnation"], inc.as_str(), "the agent kept its incarnation: {z}");
    assert_eq!(rw.w.completed_turns().iter().filter(|(t, _)| *t == turn).count(), 1);
    let events = assert_terminal_events_once(&rw, &id);
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(rw.provider_prompts(), vec!["baseline turn", prompt], "the prompt reached the model once");
    assert_eq!(rw.w.turns_started(), 2);
    // EV-4: the stream across the SIGKILL: every event once, in order (golden).
    assert_golden_stream(&rw, "zola", &id, "real-codex-restart.jsonl");
}

/// EV-7 against the real Codex: the rollout is cut back (truncated to the end of the baseline
/// turn) while the daemon is down. The first look after the restart finds the session's
/// records gone: `observer.gap` names the session and the position after which records may
/// never be reported; the stream then reads the file afresh, and a return-final request
/// admitted after the gap completes with its own final (golden stream).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn ev_7_real_codex_rollout_cut_while_down_is_a_gap() {
    let rw = RealWorld::new(EXE, script(vec![]));
    rw.ready("zola", "baseline turn");
    sentinel(&rw, "zola", "a turn that will be cut away");
    let rollout = rw.w.rollout_files().into_iter().next().expect("zola's rollout");
    let bytes = std::fs::read(&rollout).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    // The end of the first task_complete: the baseline turn stays, the sentinel's turn goes.
    let first_complete = text.find("\"task_complete\"").expect("the baseline turn completed");
    let cut = first_complete + text[first_complete..].find('\n').unwrap() + 1;
    // The observer checkpoint is saved at most every CHECKPOINT_INTERVAL_MS (0.5 s) once the
    // file moved: after 2 s it covers the whole file, so the restart proves the cut with the
    // checkpoint itself (OBS-2) and the golden stream has one shape. (A checkpoint behind the
    // stream's mark takes the EV-13 path instead: engine and simulator tests cover it.)
    std::thread::sleep(Duration::from_secs(2));
    support::sigkill_and_wait(rw.w.daemon_pid());
    wait_daemon_gone(&rw);
    std::fs::OpenOptions::new().write(true).open(&rollout).unwrap().set_len(cut as u64).unwrap();
    rw.w.mux_start();
    let out = rw.w.run(&["agent", "send", "zola", "--return-final", "a question after the gap"]);
    let id = match out.code {
        0 => s(&out.json["request_id"]).to_string(),
        _ => {
            // The first look may still be reading the cut file: retry once it is idle again.
            rw.wait_entry("zola", "available after the gap", TURN_DEADLINE, |z| z["return_final_available"] == true);
            let out = rw.w.run(&["agent", "send", "zola", "--return-final", "a question after the gap"]);
            assert_eq!(out.code, 0, "{out:?}");
            s(&out.json["request_id"]).to_string()
        }
    };
    let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!(terminal["state"], "completed", "{terminal}");
    assert_eq!(terminal["final_message"], reply_for("a question after the gap").as_str());
    let events = assert_golden_stream(&rw, "zola", &id, "real-codex-gap.jsonl");
    let gap = events.iter().find(|e| e["kind"] == "observer.gap").unwrap_or_else(|| panic!("no observer.gap: {events:?}"));
    // What was reported before the cut reached past it; the gap names that position.
    assert!(gap["after_position"].as_u64().unwrap() > cut as u64, "the gap starts after what was reported: {gap}");
    let after_gap: Vec<&str> = events.iter().skip_while(|e| e["kind"] != "observer.gap").map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(after_gap.get(1), Some(&"observer.attached"), "read afresh after the gap: {after_gap:?}");
}

/// Raw bytes into the agent's pane, past the daemon (a human at the keyboard).
fn type_into_pane(rw: &RealWorld, agent_id: &str, bytes: &[u8]) {
    let socket = rw.w.data.join("h").join(format!("{agent_id}.sock"));
    let mut pane = wakterm_runtime::holder::HolderClient::connect(&socket).expect("the agent's holder");
    pane.write(bytes).expect("the pane takes the keys");
}

/// A human's Esc while Codex works on a turn, typed again (at most five times, a second apart)
/// while the screen still says so: under load Codex 0.169 once let one Esc pass with the
/// turn running (a CI run on 73253eb; 11 local runs took the first).
fn interrupt(rw: &RealWorld, agent_id: &str) {
    for _ in 0..5 {
        type_into_pane(rw, agent_id, b"\x1b");
        let end = Instant::now() + Duration::from_secs(1);
        while Instant::now() < end && rw.screen(agent_id).contains("esc to interrupt") {
            std::thread::sleep(Duration::from_millis(50));
        }
        if !rw.screen(agent_id).contains("esc to interrupt") {
            return;
        }
    }
}

/// Waits (bounded) until the agent's screen shows Codex working on a turn.
fn wait_working(rw: &RealWorld, agent_id: &str) {
    let end = Instant::now() + TURN_DEADLINE;
    while !rw.screen(agent_id).contains("esc to interrupt") {
        assert!(Instant::now() < end, "Codex never showed a running turn: {}", rw.screen(agent_id));
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// EV-* golden stream, CORR-10 against the real Codex: a human presses Esc while the turn of
/// a return-final request runs; the stream reports `turn.aborted` and the request ends
/// `aborted` (golden `real-codex-aborted.jsonl`).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn ev_real_codex_aborted_turn_stream() {
    let think = wakterm_harness::provider::Rule { contains: "THINK-LONG".into(), reply: None, delay_ms: 0, output_delay_ms: 8000, fail: None };
    let rw = RealWorld::new(EXE, script(vec![think]));
    let entry = rw.ready("zola", "baseline turn");
    let agent_id = s(&entry["agent_id"]).to_string();
    let out = rw.w.run(&["agent", "send", "zola", "--return-final", "THINK-LONG then be interrupted"]);
    assert_eq!(out.code, 0, "{out:?}");
    let id = s(&out.json["request_id"]).to_string();
    wait_working(&rw, &agent_id);
    interrupt(&rw, &agent_id);
    let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!((terminal["state"].as_str(), terminal["reason"].as_str()), (Some("aborted"), Some("provider_turn_aborted")), "{terminal}");
    let events = assert_golden_stream(&rw, "zola", &id, "real-codex-aborted.jsonl");
    assert!(events.iter().any(|e| e["kind"] == "turn.aborted" && e["provider_turn_id"] == terminal["provider_turn_id"]), "{events:?}");
}

/// EV-* golden stream against the real Codex: a human submits a second prompt while the turn
/// of a return-final request runs (steering). Codex records it in the same turn; the stream
/// shows two `message.user` in that turn, and the request completes with that turn's final,
/// saying `steered: true` (CORR-9) (golden `real-codex-steered.jsonl`).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn ev_real_codex_steered_turn_stream() {
    let think = wakterm_harness::provider::Rule { contains: "THINK-SHORT".into(), reply: None, delay_ms: 0, output_delay_ms: 4000, fail: None };
    let rw = RealWorld::new(EXE, script(vec![think]));
    let entry = rw.ready("zola", "baseline turn");
    let agent_id = s(&entry["agent_id"]).to_string();
    let out = rw.w.run(&["agent", "send", "zola", "--return-final", "THINK-SHORT first prompt of a steered turn"]);
    assert_eq!(out.code, 0, "{out:?}");
    let id = s(&out.json["request_id"]).to_string();
    wait_working(&rw, &agent_id);
    type_into_pane(&rw, &agent_id, b"\x15\x1b[200~steering prompt sent while busy\x1b[201~\r");
    let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!(terminal["state"], "completed", "{terminal}");
    assert_eq!(terminal["steered"], true, "CORR-9: {terminal}");
    let events = assert_golden_stream(&rw, "zola", &id, "real-codex-steered.jsonl");
    let turn = &terminal["provider_turn_id"];
    let prompts = events.iter().filter(|e| e["kind"] == "message.user" && &e["provider_turn_id"] == turn).count();
    assert_eq!(prompts, 2, "the steer joined the request's turn: {events:?}");
}

/// CORR-5, CORR-6, ADM-19 against the real Codex: a human pastes a prompt and presses Enter,
/// and an orchestrator admits a return-final request of the very same text right after (after
/// 0 ms to 10.5 s: past ADM-19's hold). Whatever the TUI makes of the two (the human's Enter
/// not recorded yet or its turn running: `busy`, nothing written; ours steered into the
/// human's turn; ours queued as a turn of its own), the request never completes with a turn
/// its prompt did not open: `completed` names the turn whose first user message is the second
/// of the two, with that turn's final, and otherwise the request is `indeterminate`. What
/// happened each round is printed. Before ADM-19, rounds at 0-15 ms completed with the human's
/// turn: Codex 0.169 clears its composer at the Enter and records the turn some 25 ms later,
/// and it queued our prompt as the next turn. Right after the human's turn (1.5 s) ended, the
/// admission is not held: the monitor reported the Enter before Codex recorded its turn (2-6 ms
/// after it, in the daemon's log), so that turn's records ended the hold, not the 10 s grace.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn corr_6_real_codex_a_humans_prompt_of_the_same_text_is_never_taken_for_ours() {
    let think = wakterm_harness::provider::Rule { contains: "THINK-SHORT".into(), reply: None, delay_ms: 0, output_delay_ms: 1500, fail: None };
    let rw = RealWorld::new(EXE, script(vec![think]));
    let entry = rw.ready("zola", "baseline turn");
    let agent_id = s(&entry["agent_id"]).to_string();
    let incarnation = s(&entry["incarnation"]).to_string();
    // AFTER_ITS_TURN: right after the human's turn ended in the rollout.
    const AFTER_ITS_TURN: u64 = u64::MAX;
    for (round, delay_ms) in [0u64, 0, 15, 60, 150, 400, AFTER_ITS_TURN, 10_500].into_iter().enumerate() {
        let text = format!("THINK-SHORT same words typed twice, round {round}");
        type_into_pane(&rw, &agent_id, format!("\x15\x1b[200~{text}\x1b[201~\r").as_bytes());
        let entered = Instant::now();
        let after_its_turn = delay_ms == AFTER_ITS_TURN;
        match delay_ms {
            AFTER_ITS_TURN => human_turn_ended(&rw, &text),
            _ => std::thread::sleep(Duration::from_millis(delay_ms)),
        }
        let delay_ms = entered.elapsed().as_millis() as u64;
        let id = new_id();
        let out = rw.w.run(&["agent", "admit", "--incarnation", &incarnation, "--request-id", &id, "--return-final", "zola", &text]);
        let outcome = if out.json["classification"] == "accepted" {
            assert_eq!(out.code, 0, "round {round}: {out:?}");
            let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
            // The human's message and ours, each recorded once, their turns ended.
            let turns = same_text_turns_ended(&rw, &text, 2);
            let ours_opened_a_turn = turns[1] != turns[0];
            match terminal["state"].as_str() {
                Some("completed") => {
                    assert!(ours_opened_a_turn, "round {round}: completed, but our prompt joined the human's turn {turns:?}: {terminal}");
                    assert_eq!(terminal["provider_turn_id"], turns[1].as_str(), "round {round}: the human's turn was taken for ours: {terminal}");
                    assert_eq!(terminal["final_message"], reply_for(&text).as_str(), "round {round}: {terminal}");
                }
                Some("indeterminate") => {}
                _ => panic!("round {round}: a written prompt ends completed or indeterminate: {terminal}"),
            }
            let shape = if ours_opened_a_turn { "a turn of its own" } else { "steered into the human's turn" };
            format!("accepted, {shape}, {} ({})", s(&terminal["state"]), terminal["reason"].as_str().unwrap_or("-"))
        } else {
            assert_definitive_rejection(&out, "busy");
            // ADM-19: after the human's turn ended, its records (recorded after the monitor
            // reported the Enter) ended the hold, not the 10 s grace.
            assert!(!after_its_turn || out.json["reason"] != "other_prompt_pending", "round {round}: held {delay_ms} ms after the human's Enter, after its turn ended: {out:?}");
            same_text_turns_ended(&rw, &text, 1); // the human's alone: the refusal wrote nothing
            sentinel(&rw, "zola", &format!("sentinel after round {round}"));
            rw.wait_entry("zola", "idle again", TURN_DEADLINE, |z| z["return_final_available"] == true);
            assert_eq!(same_text_turns(&rw, &text).len(), 1, "round {round}: a refusal wrote nothing");
            format!("refused busy ({})", out.json["reason"].as_str().unwrap_or("-"))
        };
        eprintln!("corr_6 round {round}, admitted {delay_ms} ms after the human's Enter: {outcome}");
    }
}

/// Waits (bounded) until the human's only turn of `text` ended in the rollout (not for the
/// catalog: ADM-19's hold is what the round after it checks).
fn human_turn_ended(rw: &RealWorld, text: &str) {
    let end = Instant::now() + TURN_DEADLINE;
    while !same_text_turns(rw, text).first().is_some_and(|turn| rw.w.completed_turns().iter().any(|(t, _)| t == turn)) {
        assert!(Instant::now() < end, "the human's turn of {text:?} never ended");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Waits (bounded) until the rollout holds `want` user messages of `text` and each of their
/// turns completed, then until the agent is idle again; their turns, in order.
fn same_text_turns_ended(rw: &RealWorld, text: &str, want: usize) -> Vec<String> {
    let end = Instant::now() + TURN_DEADLINE;
    loop {
        let turns = same_text_turns(rw, text);
        let completed: Vec<String> = rw.w.completed_turns().into_iter().map(|(turn, _)| turn).collect();
        if turns.len() == want && turns.iter().all(|t| completed.contains(t)) {
            rw.wait_entry("zola", "idle again", TURN_DEADLINE, |z| z["return_final_available"] == true);
            return turns;
        }
        assert!(turns.len() <= want && Instant::now() < end, "want {want} user messages of {text:?}, their turns ended; have {turns:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The turn of each user message of `text` in the agent's rollout, in the order recorded.
fn same_text_turns(rw: &RealWorld, text: &str) -> Vec<String> {
    rw.rollout_lines_of("zola")
        .iter()
        .filter(|l| l["payload"]["type"] == "item_completed" && l["payload"]["item"]["type"] == "UserMessage")
        .filter(|l| l["payload"]["item"]["content"][0]["text"] == text)
        .filter_map(|l| l["payload"]["turn_id"].as_str().map(str::to_string))
        .collect()
}

/// REC-5 after_write, REC-1, REC-4: the daemon dies after the prompt reached the real Codex and
/// before the submitted marker was durable. Codex completes the turn anyway; after a normal
/// restart the request is `indeterminate`, its final is never delivered, and replaying the id
/// writes nothing (the provider received the prompt once).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn rec_5_real_codex_after_write_is_indeterminate() {
    let (rw, entry) = armed_real_world("after_write");
    let id = new_id();
    let prompt = "crash after write";
    admit_into_crash(&rw, &entry, &id, prompt);
    rw.wait_turn_completed(prompt);
    rw.w.mux_start();
    let event = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!(event["state"], "indeterminate", "{event}");
    assert_eq!(event["reason"], "restart_in_write_window", "{event}");
    assert!(event.get("final_message").is_none_or(Value::is_null), "the final is never delivered: {event}");
    let z = rw.wait_entry("zola", "idle", TURN_DEADLINE, |z| z["state"] == "idle");
    assert_eq!(z["incarnation"], entry["incarnation"], "{z}");
    let replay = replay_writes_nothing(&rw, &entry, &id, prompt, "sentinel after write crash");
    assert_eq!(replay["classification"], "indeterminate", "{replay}");
    assert_eq!(replay["retry_safe"], false, "{replay}");
    let expected = vec!["baseline turn", prompt, "sentinel after write crash"];
    assert_eq!(rw.w.user_prompts(), expected, "written exactly once");
    assert_eq!(rw.provider_prompts(), expected, "the provider received the prompt once");
    let events = assert_terminal_events_once(&rw, &id);
    assert!(!events.iter().any(|e| e["final_message"] == reply_for(prompt).as_str()), "{events:?}");
}

/// REC-5 after_submitted, REC-2: the submitted marker is durable, the receipt never returned;
/// after a normal restart the request completes with its own final from the real Codex, and a
/// replay of the id is the stored `accepted` receipt and writes nothing.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn rec_5_real_codex_after_submitted_completes() {
    let (rw, entry) = armed_real_world("after_submitted");
    let id = new_id();
    let prompt = "crash after submitted";
    admit_into_crash(&rw, &entry, &id, prompt);
    rw.w.mux_start();
    let event = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["final_message"], reply_for(prompt).as_str(), "its own final");
    assert_eq!(event["provider_turn_id"], rw.turn_of_prompt(prompt).expect("its turn").as_str(), "{event}");
    let z = rw.wait_entry("zola", "idle", TURN_DEADLINE, |z| z["return_final_available"] == true);
    assert_eq!(z["incarnation"], entry["incarnation"], "{z}");
    let replay = replay_writes_nothing(&rw, &entry, &id, prompt, "sentinel after submitted crash");
    assert_eq!(replay["classification"], "accepted", "{replay}");
    assert_eq!(replay["reply_pending"], true, "{replay}");
    let expected = vec!["baseline turn", prompt, "sentinel after submitted crash"];
    assert_eq!(rw.w.user_prompts(), expected, "written exactly once");
    assert_eq!(rw.provider_prompts(), expected, "the provider received the prompt once");
    assert_terminal_events_once(&rw, &id);
}

/// EV-* golden fixture: the event stream of a real Codex 0.169 agent (start, one-way baseline
/// turn, one return-final turn) matches `fixtures/agent-events/v1/real-codex-return-final.jsonl`
/// after the run's own identities (agent, incarnation, session, turns, requests) are replaced
/// by symbols in order of appearance and times, positions and sequences are dropped (they are
/// checked here: sequences strictly increase, positions never go back within a session).
/// Every event also parses as the engine's `AgentEvent` and validates against its kind's JSON
/// Schema (`fixtures/agent-events/v1/schema/`).
/// `WAKTERM_UPDATE_FIXTURES=1` rewrites the fixture from this run.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn ev_real_codex_stream_matches_the_golden_fixture() {
    let rw = RealWorld::new(EXE, script(vec![]));
    rw.ready("zola", "baseline turn");
    let out = rw.w.run(&["agent", "send", "zola", "--return-final", "golden question"]);
    assert_eq!(out.code, 0, "{out:?}");
    let id = s(&out.json["request_id"]).to_string();
    let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!(terminal["state"], "completed", "{terminal}");
    assert_golden_stream(&rw, "zola", &id, "real-codex-return-final.jsonl");
}

/// The agent's stream once `request_id`'s `request.terminal` is in it: every event parses as
/// an `AgentEvent` and validates against its kind's schema, sequences strictly increase,
/// positions never go back within a session; normalised, it equals the golden file under
/// `fixtures/agent-events/v1/` (`WAKTERM_UPDATE_FIXTURES=1` rewrites it from this run).
fn assert_golden_stream(rw: &RealWorld, agent: &str, request_id: &str, golden: &str) -> Vec<Value> {
    let end = Instant::now() + TURN_DEADLINE;
    let events = loop {
        let out = rw.w.run(&["agent", "events", "--once", "--agent", agent]);
        assert_eq!(out.code, 0, "{out:?}");
        let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if events.iter().any(|e| e["kind"] == "request.terminal" && e["request_id"] == request_id) {
            break events;
        }
        assert!(Instant::now() < end, "no request.terminal in {events:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut last_sequence = 0;
    let mut positions: std::collections::BTreeMap<String, u64> = Default::default();
    for event in &events {
        serde_json::from_value::<wakterm_engine::AgentEvent>(event.clone()).unwrap_or_else(|e| panic!("{event}: {e}"));
        event_schema::assert_event_schema(event);
        let sequence = event["sequence"].as_u64().unwrap();
        assert!(sequence > last_sequence, "EV-1");
        last_sequence = sequence;
        if matches!(event["kind"].as_str(), Some("observer.gap" | "observer.lost" | "agent.incarnation_changed")) {
            positions.clear(); // EV-7: what follows is read afresh
        }
        if let (Some(session), Some(position)) = (event["session"].as_str(), event["position"].as_u64()) {
            let at = positions.entry(session.to_string()).or_default();
            assert!(position >= *at, "positions never go back in a session: {event}");
            *at = position;
        }
    }
    let normalised = normalise_events(&events);
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/agent-events/v1").join(golden);
    if std::env::var_os("WAKTERM_UPDATE_FIXTURES").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, normalised.join("\n") + "\n").unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let golden: Vec<String> = golden.lines().map(str::to_string).collect();
    // Request milestones ride on request commits (EV-6), whose timing against the observer's
    // events varies from run to run; each projection keeps its own order exactly.
    let (ours, recorded) = (milestones_apart(&normalised), milestones_apart(&golden));
    assert_eq!(ours.0, recorded.0, "the agent and provider events differ from {}", path.display());
    assert_eq!(ours.1, recorded.1, "the request milestones differ from {}", path.display());
    events
}

/// (agent and provider events, request milestones), each in stream order.
fn milestones_apart(lines: &[String]) -> (Vec<&str>, Vec<&str>) {
    lines.iter().map(String::as_str).partition(|line| !line.contains(r#""kind":"request."#))
}

/// EV-10, EV-11 against the real Codex 0.169 (its `update_plan` tool enabled, off by default):
/// a turn in which the model comments, calls `update_plan`, then answers is reported as
/// `message.assistant` (the commentary), `plan.updated` (the steps as the model sent them, in
/// order, with their turn), `message.assistant` (the final), `turn.completed`, `turn.final`;
/// the return-final request completes with the final only, never the commentary.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn ev_real_codex_reports_commentary_and_plan_updates() {
    use wakterm_harness::provider::{PlanStep, PlanUpdate, Reply, Rule, StepStatus};
    let steps = [("Read the request", StepStatus::Completed), ("Write the answer", StepStatus::InProgress), ("Review it", StepStatus::Pending)];
    let plan = PlanUpdate {
        explanation: Some("scripted plan".into()),
        steps: steps.iter().map(|(step, status)| PlanStep { step: step.to_string(), status: *status }).collect(),
    };
    let reply = Reply { text: Some("planned reply to: {prompt}".into()), commentary: Some("Let me plan first.".into()), plan: Some(plan) };
    let rule = Rule { contains: "PLAN-UPDATE".into(), reply: Some(reply), delay_ms: 0, output_delay_ms: 0, fail: None };
    let rw = RealWorld::with_config(EXE, script(vec![rule]), "[tools.update_plan]\nenabled = true\n");
    rw.ready("zola", "baseline turn");
    let prompt = "PLAN-UPDATE make a plan";
    let out = rw.w.run(&["agent", "send", "zola", "--return-final", prompt]);
    assert_eq!(out.code, 0, "{out:?}");
    let id = s(&out.json["request_id"]).to_string();
    let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!((terminal["state"].as_str(), terminal["final_message"].as_str()), (Some("completed"), Some(format!("planned reply to: {prompt}").as_str())), "{terminal}");
    let end = Instant::now() + TURN_DEADLINE;
    let events = loop {
        let out = rw.w.run(&["agent", "events", "--once", "--agent", "zola"]);
        let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if events.iter().any(|e| e["kind"] == "request.terminal" && e["request_id"] == id.as_str()) {
            break events;
        }
        assert!(Instant::now() < end, "no request.terminal in {events:?}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let turn = terminal["provider_turn_id"].clone();
    let in_turn: Vec<&Value> = events.iter().filter(|e| e["provider_turn_id"] == turn && e["kind"] != "request.bound" && e["kind"] != "request.terminal").collect();
    let kinds: Vec<&str> = in_turn.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["turn.started", "message.user", "message.assistant", "plan.updated", "message.assistant", "turn.completed", "turn.final"], "{in_turn:?}");
    assert_eq!(in_turn[2]["text"], "Let me plan first.");
    let plan: Vec<(&str, &str)> = in_turn[3]["plan"].as_array().unwrap().iter().map(|p| (p["step"].as_str().unwrap(), p["status"].as_str().unwrap())).collect();
    assert_eq!(plan, [("Read the request", "completed"), ("Write the answer", "in_progress"), ("Review it", "pending")]);
    assert_eq!(in_turn[3]["explanation"], "scripted plan");
    assert_eq!(in_turn[4]["text"], format!("planned reply to: {prompt}").as_str());
    for event in &events {
        event_schema::assert_event_schema(event);
    }
}

/// Replaces run-specific identities by symbols in order of appearance; drops times, sequences
/// and byte positions.
fn normalise_events(events: &[Value]) -> Vec<String> {
    let mut symbols: std::collections::BTreeMap<(String, String), String> = Default::default();
    let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
    let mut symbol = |class: &str, value: &Value| -> Value {
        let Some(text) = value.as_str() else { return value.clone() };
        let key = (class.to_string(), text.to_string());
        if let Some(known) = symbols.get(&key) {
            return Value::String(known.clone());
        }
        let n = counts.entry(class.to_string()).or_default();
        *n += 1;
        let name = format!("{class}{n}");
        symbols.insert(key, name.clone());
        Value::String(name)
    };
    events
        .iter()
        .map(|event| {
            let mut e = event.clone();
            let object = e.as_object_mut().unwrap();
            for dropped in ["sequence", "at_ms", "position", "after_position", "terminal_event_sequence"] {
                object.remove(dropped);
            }
            // Reasons may quote byte offsets, which depend on the run's paths.
            if let Some(Value::String(reason)) = object.get("reason").cloned() {
                let digits: String = reason.chars().map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
                object.insert("reason".to_string(), Value::String(digits));
            }
            for (field, class) in [("agent_id", "agent"), ("incarnation", "incarnation"), ("previous", "incarnation"), ("session", "session"), ("provider_turn_id", "turn"), ("request_id", "request")] {
                if let Some(value) = object.get(field).cloned() {
                    object.insert(field.to_string(), symbol(class, &value));
                }
            }
            serde_json::to_string(&e).unwrap()
        })
        .collect()
}

/// Issue 13 ("a real client drives it"): a real Codex ("boss") uses `wakterm mcp` as an MCP
/// client to hand a prompt to ANOTHER real Codex ("zola") managed by the same daemon, with
/// `agent_admit`, waits for its final with `request_wait`, and relays that final in its own.
/// The loopback provider scripts boss's model: call `mcp__wakterm` `agent_admit`, then
/// `request_wait`, then answer quoting the wait's terminal event.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn mcp_real_codex_orchestrates_another_agent_through_wakterm_mcp() {
    let zola_request = new_id();
    let question = "question from boss";
    let rule = serde_json::json!({
        "contains": "ORCHESTRATE",
        "reply": "boss relays: {output_1:/terminal_event/final_message} (admission {output_0:/classification})",
        "calls": [
            {"namespace": "mcp__wakterm", "name": "agent_admit",
             "arguments": {"agent": "zola", "prompt": question, "request_id": zola_request}},
            {"namespace": "mcp__wakterm", "name": "request_wait",
             "arguments": {"request_id": zola_request, "timeout_ms": 60000}}
        ]
    });
    let script_json = serde_json::json!({"default_reply": REPLY, "rules": [rule]}).to_string();
    let rw = RealWorld::new(EXE, Script::from_json(&script_json).expect("the orchestration script"));
    let mcp_config = rw.wakterm_mcp_config(EXE);
    eprintln!("MCP config appended to config.toml:\n{mcp_config}");
    rw.append_config(&mcp_config);
    rw.ready("zola", "zola baseline");
    rw.ready("boss", "boss baseline");

    let out = rw.w.run(&["agent", "send", "boss", "--return-final", "ORCHESTRATE ask zola through wakterm"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(out.json["classification"], "accepted", "{}", out.json);
    let boss_request = s(&out.json["request_id"]).to_string();
    let diagnose = |rw: &RealWorld| {
        let received: Vec<String> = rw.provider.received().iter().map(|r| format!("{} {:?} -> {}", r.method, r.prompt.as_deref().map(|p| p.chars().take(60).collect::<String>()), r.outcome)).collect();
        let boss_calls: Vec<String> = rw
            .rollout_lines_of("boss")
            .iter()
            .filter(|l| l["type"] == "response_item" && matches!(l["payload"]["type"].as_str(), Some("function_call" | "function_call_output")))
            .map(|l| l["payload"].to_string())
            .collect();
        format!("provider requests: {received:#?}\nboss's calls in its rollout: {boss_calls:#?}")
    };
    let end = Instant::now() + Duration::from_secs(150);
    let terminal = loop {
        if let Some(e) = rw.w.events_after(0).into_iter().find(|e| e["request_id"] == boss_request.as_str()) {
            break e;
        }
        assert!(Instant::now() < end, "boss's request {boss_request} has no terminal event\n{}", diagnose(&rw));
        std::thread::sleep(Duration::from_millis(200));
    };
    eprintln!("{}", diagnose(&rw));
    let zola_final = reply_for(question);
    assert_eq!(terminal["state"], "completed", "{terminal}\n{}", diagnose(&rw));
    assert_eq!(
        terminal["final_message"],
        format!("boss relays: {zola_final} (admission accepted)").as_str(),
        "boss's final relays zola's: {terminal}\n{}",
        diagnose(&rw)
    );

    // Zola got the question exactly once, as its own turn, and answered it.
    assert_eq!(rw.user_prompts_of("zola"), vec!["zola baseline".to_string(), question.to_string()]);
    assert_eq!(rw.user_prompts_of("boss"), vec!["boss baseline".to_string(), "ORCHESTRATE ask zola through wakterm".to_string()]);
    assert_eq!(rw.provider_prompts().iter().filter(|p| *p == question).count(), 1, "the question reached the model once");
    let got = rw.w.ok(&["agent", "request", "get", &zola_request]);
    assert_eq!(got["state"], "completed", "{got}");
    assert_eq!(got["terminal_event"]["final_message"], zola_final.as_str(), "{got}");
    let zola = rw.w.catalog_entry("zola").expect("zola");
    assert_eq!(got["terminal_event"]["agent_id"], zola["agent_id"], "{got}");

    // Boss's model saw both calls answered, in order, by our server (Codex's "Wall time" parts).
    let outcomes: Vec<String> = rw.provider.received().into_iter().map(|r| r.outcome).collect();
    let calls: Vec<&str> = outcomes.iter().map(String::as_str).filter(|o| o.starts_with("call_")).collect();
    assert_eq!(calls, ["call_0:mcp__wakterm/agent_admit", "call_1:mcp__wakterm/request_wait"], "{outcomes:?}");
    assert!(outcomes.iter().any(|o| o == "reply_after_calls"), "{outcomes:?}");
}

/// SUB-1..SUB-5 against the real Codex 0.169 TUI, through a real MCP client over stdio: a
/// submit to an idle Codex is acknowledged by post-Enter movement and becomes exactly one turn;
/// a draft in the composer is refused and left intact; a busy Codex is refused; of two
/// concurrent submits exactly one writes, whole; `/clear` is acknowledged like any command.
/// No rejected text ever reaches the model.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn sub_real_codex_submit_through_mcp() {
    let rw = RealWorld::new(EXE, script(vec![hold_rule("HOLD", 6000)]));
    let entry = rw.ready("zola", "baseline turn");
    let agent_id = s(&entry["agent_id"]).to_string();
    mcp_client::runtime().block_on(async {
        let client = mcp_client::connect(&rw.w).await;
        let submit = |text: &str| mcp_client::call(&client, "session", serde_json::json!({"action": "submit", "session_id": "zola", "input": text}));

        // SUB-1, SUB-4: acknowledged by movement after the Enter; the command became a turn.
        let (error, receipt) = submit("first submitted prompt").await;
        assert!(!error, "{receipt}");
        assert_eq!((s(&receipt["status"]), s(&receipt["write_state"])), ("acknowledged", "complete"), "{receipt}");
        assert_eq!(receipt["retry_safe"], false, "{receipt}");
        let evidence = &receipt["evidence"];
        assert!(evidence["output_offset"].as_u64() > evidence["enter_offset"].as_u64() && evidence["screen_changed"] == true, "{receipt}");
        rw.wait_turn_completed("first submitted prompt");
        rw.wait_entry("zola", "idle after the submitted turn", TURN_DEADLINE, |z| z["state"] == "idle");

        // SUB-3: a human's draft is refused before any byte and is still there afterwards.
        type_into_pane(&rw, &agent_id, b"half typed draft");
        let end = Instant::now() + TURN_DEADLINE;
        while !rw.screen(&agent_id).contains("half typed draft") {
            assert!(Instant::now() < end, "the draft never showed: {}", rw.screen(&agent_id));
            std::thread::sleep(Duration::from_millis(50));
        }
        let (error, receipt) = submit("must not replace the draft").await;
        assert!(error, "{receipt}");
        assert_eq!((s(&receipt["reason"]), s(&receipt["write_state"])), ("composer_not_empty", "not_started"), "{receipt}");
        assert_eq!(receipt["retry_safe"], true, "{receipt}");
        std::thread::sleep(Duration::from_millis(300));
        assert!(rw.screen(&agent_id).contains("half typed draft"), "the draft survived: {}", rw.screen(&agent_id));
        type_into_pane(&rw, &agent_id, b"\x15"); // the human clears it
        rw.wait_entry("zola", "the draft cleared", TURN_DEADLINE, |z| z["return_final_available"] == true);

        // SUB-3: a running turn refuses a submit before any byte.
        let held = "HOLD this turn busy";
        assert_eq!(rw.w.run(&["agent", "send", "zola", held]).code, 0);
        wait_working(&rw, &agent_id);
        let (error, receipt) = submit("must not steer the held turn").await;
        assert!(error, "{receipt}");
        assert_eq!(s(&receipt["status"]), "rejected", "{receipt}");
        assert!(["turn_active", "awaiting_turn_start"].contains(&s(&receipt["reason"])), "{receipt}");
        let end = Instant::now() + TURN_DEADLINE;
        while !rw.w.completed_turns().iter().any(|(_, m)| m.as_deref() == Some("held reply to: HOLD this turn busy")) {
            assert!(Instant::now() < end, "the held turn never completed");
            std::thread::sleep(Duration::from_millis(100));
        }
        rw.wait_entry("zola", "idle after the held turn", TURN_DEADLINE, |z| z["state"] == "idle");

        // SUB-1: two concurrent submits: exactly one writes, and what Codex got is whole.
        let (a, b) = tokio::join!(submit("racing submit alpha"), submit("racing submit beta"));
        let receipts = [a.1, b.1];
        let acknowledged: Vec<&Value> = receipts.iter().filter(|r| r["status"] == "acknowledged").collect();
        let rejected: Vec<&Value> = receipts.iter().filter(|r| r["status"] == "rejected").collect();
        assert_eq!((acknowledged.len(), rejected.len()), (1, 1), "{receipts:?}");
        assert!(["admission_in_progress", "awaiting_turn_start"].contains(&s(&rejected[0]["reason"])), "{receipts:?}");
        let winner = if receipts[0]["status"] == "acknowledged" { "racing submit alpha" } else { "racing submit beta" };
        rw.wait_turn_completed(winner);
        rw.wait_entry("zola", "idle after the race", TURN_DEADLINE, |z| z["state"] == "idle");

        // SUB-1: a slash command uses the same contract.
        let (error, receipt) = submit("/clear").await;
        assert!(!error, "{receipt}");
        assert_eq!(s(&receipt["status"]), "acknowledged", "{receipt}");

        let expected = vec!["baseline turn", "first submitted prompt", held, winner];
        assert_eq!(rw.provider_prompts(), expected, "no rejected text reached the model, the winner whole");
        client.cancel().await.expect("close the MCP session");
    });
}

/// MGD-1..MGD-4 against the real `codex app-server` 0.169: a managed agent starts bound to one
/// thread (thread id == session id), the catalog shows transport `app_server` and correlation
/// source `agent_api_events`, and a return-final admission completes with exactly the final of
/// the turn it started, twice in a row; `agent output` reads the rollout the app-server writes.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn mgd_real_codex_app_server_return_final_completes() {
    let rw = RealWorld::new(EXE, script(vec![]));
    let started = rw.start_managed("mia");
    assert_eq!(started["transport"], "app_server", "{started}");
    let thread = s(&started["thread_id"]).to_string();
    assert_eq!(started["session_id"], started["thread_id"], "Codex 0.169: thread id == session id: {started}");
    let entry = rw.wait_entry("mia", "return-final available", TURN_DEADLINE, |e| e["return_final_available"] == true);
    assert_eq!((s(&entry["transport"]), s(&entry["correlation_source"])), ("app_server", "agent_api_events"), "{entry}");
    for prompt in ["first managed prompt", "second managed prompt"] {
        let id = new_id();
        let inc = s(&entry["incarnation"]).to_string();
        let out = rw.w.run(&["agent", "admit", "mia", "--incarnation", &inc, "--request-id", &id, "--return-final", prompt]);
        assert_eq!(out.code, 0, "{out:?}");
        assert_eq!(out.json["correlation_source"], "agent_api_events", "{}", out.json);
        assert!(s(&out.json["armed_cursor"]).starts_with(&format!("ev1.{thread}.")), "{}", out.json);
        let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
        assert_eq!(terminal["state"], "completed", "{terminal}");
        assert_eq!(terminal["final_message"], reply_for(prompt), "{terminal}");
        rw.wait_entry("mia", "idle again", TURN_DEADLINE, |e| e["return_final_available"] == true);
    }
    assert_eq!(rw.provider_prompts(), ["first managed prompt", "second managed prompt"]);
    // OUT for a managed agent: the app-server writes the same rollout, held by its process tree.
    let page = rw.w.run(&["agent", "output", "mia"]);
    assert_eq!((page.code, s(&page.json["state"]), &page.json["baseline"]), (0, "ok", &Value::Bool(true)), "{page:?}");
}

/// Issue 12's must-shows against the real `codex app-server` 0.169: while a managed turn runs
/// another return-final admission is refused `busy` and nothing reaches the model; the daemon
/// SIGKILLed mid-turn and restarted still completes the request with its own final (the
/// holder kept the notifications); the app-server killed mid-turn leaves its request
/// `indeterminate`, never `completed`.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn mgd_real_codex_busy_daemon_crash_and_killed_app_server() {
    let slow = |word: &str| wakterm_harness::provider::Rule { contains: word.into(), reply: None, delay_ms: 0, output_delay_ms: 5000, fail: None };
    let rw = RealWorld::new(EXE, script(vec![slow("SLOWTURN"), slow("DOOMED")]));
    rw.start_managed("mia");
    let entry = rw.wait_entry("mia", "return-final available", TURN_DEADLINE, |e| e["return_final_available"] == true);
    let inc = s(&entry["incarnation"]).to_string();
    let admit = |id: &str, prompt: &str| rw.w.run(&["agent", "admit", "mia", "--incarnation", &inc, "--request-id", id, "--return-final", prompt]);
    let wait_provider = |prompt: &str| {
        let end = Instant::now() + TURN_DEADLINE;
        while !rw.provider_prompts().iter().any(|p| p == prompt) {
            assert!(Instant::now() < end, "the model never got {prompt:?}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };

    let slow_id = new_id();
    let slow_prompt = "SLOWTURN survive a daemon crash";
    assert_eq!(admit(&slow_id, slow_prompt).code, 0);
    wait_provider(slow_prompt);
    let busy = admit(&new_id(), "must not reach the model");
    assert_definitive_rejection(&busy, "busy");
    assert_eq!(busy.json["reason"], "turn_active", "{}", busy.json);

    let pid = rw.w.daemon_pid();
    support::sigkill_and_wait(pid);
    wait_daemon_gone(&rw);
    rw.w.mux_start();
    let event = rw.wait_terminal(&slow_id, TURN_DEADLINE);
    assert_eq!((s(&event["state"]), s(&event["final_message"])), ("completed", reply_for(slow_prompt).as_str()), "{event}");
    rw.wait_entry("mia", "available after the crash", TURN_DEADLINE, |e| e["return_final_available"] == true && e["incarnation"] == inc.as_str());

    let doomed_id = new_id();
    let doomed = "DOOMED the app-server dies mid-turn";
    assert_eq!(admit(&doomed_id, doomed).code, 0);
    wait_provider(doomed);
    rw.kill_codex_home_processes();
    let event = rw.wait_terminal(&doomed_id, TURN_DEADLINE);
    assert_eq!(event["state"], "indeterminate", "{event}");
    assert!(event["final_message"].is_null(), "{event}");
    assert_eq!(rw.provider_prompts(), [slow_prompt, doomed], "the refused prompt never reached the model");
}

/// MGD-5: one terminal stream for both transports: a PTY Codex and a managed app-server Codex
/// of one daemon each complete a return-final request, and `request watch` delivers both, each
/// with its own final.
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn mgd_real_codex_one_stream_for_pty_and_managed_agents() {
    let rw = RealWorld::new(EXE, script(vec![]));
    let zola = rw.ready("zola", "baseline turn");
    rw.start_managed("mia");
    let mia = rw.wait_entry("mia", "return-final available", TURN_DEADLINE, |e| e["return_final_available"] == true);
    let mut ids = Vec::new();
    for (name, entry, prompt) in [("zola", &zola, "pty agent prompt"), ("mia", &mia, "managed agent prompt")] {
        let id = new_id();
        let out = rw.w.run(&["agent", "admit", name, "--incarnation", s(&entry["incarnation"]), "--request-id", &id, "--return-final", prompt]);
        assert_eq!(out.code, 0, "{out:?}");
        ids.push((id, prompt));
    }
    for (id, prompt) in &ids {
        let event = rw.wait_terminal(id, TURN_DEADLINE);
        assert_eq!((s(&event["state"]), s(&event["final_message"])), ("completed", reply_for(prompt).as_str()), "{event}");
    }
    let stream = rw.w.events_after(0);
    for (id, _) in &ids {
        assert_eq!(stream.iter().filter(|e| e["request_id"] == id.as_str()).count(), 1, "{stream:?}");
    }
}

/// MGD-3 against the real `codex app-server` 0.169: a plain `agent send` to a managed agent
/// whose thread runs a turn steers it (Codex's `turn/start` adds the prompt to the running
/// turn): the receipt is accepted with reason `steered_running_turn`, acknowledged by the
/// prompt's user message, the model gets the prompt, and no second turn starts. The running
/// turn is a return-final request's: it completes saying `steered: true` (CORR-9).
#[test]
#[ignore = "needs the real Codex: run scripts/test-real-codex.sh"]
fn mgd_real_codex_plain_send_steers_a_running_turn() {
    let slow = wakterm_harness::provider::Rule { contains: "SLOWTURN".into(), reply: None, delay_ms: 0, output_delay_ms: 4000, fail: None };
    let rw = RealWorld::new(EXE, script(vec![slow]));
    rw.start_managed("mia");
    rw.wait_entry("mia", "return-final available", TURN_DEADLINE, |e| e["return_final_available"] == true);
    let id = new_id();
    let first = rw.w.run(&["agent", "send", "mia", "--return-final", "--request-id", &id, "SLOWTURN the running turn"]);
    assert_eq!(first.code, 0, "{first:?}");
    let end = Instant::now() + TURN_DEADLINE;
    while !rw.provider_prompts().iter().any(|p| p == "SLOWTURN the running turn") {
        assert!(Instant::now() < end, "the model never got the first prompt");
        std::thread::sleep(Duration::from_millis(50));
    }
    rw.wait_entry("mia", "busy", TURN_DEADLINE, |e| e["state"] == "busy");
    let steer = rw.w.run(&["agent", "send", "mia", "steering words"]);
    assert_eq!(steer.code, 0, "{steer:?}");
    assert_eq!((s(&steer.json["classification"]), s(&steer.json["reason"])), ("accepted", "steered_running_turn"), "{}", steer.json);
    assert_eq!(steer.json["acknowledged"], true, "{}", steer.json);
    rw.wait_entry("mia", "idle after the steered turn", TURN_DEADLINE, |e| e["return_final_available"] == true);
    assert!(rw.provider_prompts().iter().any(|p| p == "steering words"), "the model got the steering prompt: {:?}", rw.provider_prompts());
    let out = rw.w.run(&["agent", "events", "--once", "--agent", "mia"]);
    let events: Vec<Value> = out.stdout.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let started = events.iter().filter(|e| e["kind"] == "turn.started").count();
    let users = events.iter().filter(|e| e["kind"] == "message.user").count();
    assert_eq!((started, users), (1, 2), "two prompts, one turn: {events:?}");
    let terminal = rw.wait_terminal(&id, TURN_DEADLINE);
    assert_eq!(s(&terminal["state"]), "completed", "{terminal}");
    assert_eq!(terminal["steered"], true, "CORR-9: the steered turn's end says so: {terminal}");
}
