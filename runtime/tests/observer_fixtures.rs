//! The rollout parser and tail over rollouts captured from the real Codex 0.169
//! (fixtures/codex-0.169/*.jsonl, written by fixtures/capture.py). Runs without Codex.
//!
//! What it proves: every captured line parses; each turn reads as one TurnStarted, its
//! prompt(s) as exactly one UserMessage each (never the injected `response_item` context),
//! and one close (TurnComplete whose final equals the turn's last AgentMessage, or
//! TurnAborted); feeding the file to the tail in odd-sized pieces yields the same records.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use wakterm_runtime::rollout::{parse_line, RolloutRecord};
use wakterm_runtime::rollout_tail::{RolloutTail, DEFAULT_MAX_BYTES_PER_PAGE, DEFAULT_MAX_RECORDS_PER_PAGE};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169")
}

/// Captured rollouts (the provider request logs share the suffix and are left out).
fn rollout_fixtures() -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(fixture_dir())
        .expect("fixtures/codex-0.169 exists")
        .map(|e| e.expect("dir entry").path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.ends_with(".jsonl") && !name.ends_with(".requests.jsonl")
        })
        .collect();
    paths.sort();
    paths
}

#[derive(Debug, Default)]
struct Turn {
    id: String,
    prompts: Vec<String>,
    agent_texts: Vec<String>,
    plans: Vec<Vec<wakterm_engine::PlanStep>>,
    completed: Option<Option<String>>,
    aborted: Option<String>,
}

/// Folds a file's records into turns, asserting turn-id consistency on the way.
fn turns_of(name: &str, records: &[RolloutRecord]) -> Vec<Turn> {
    assert!(matches!(records.first(), Some(RolloutRecord::SessionMeta { .. })), "{name}: starts with session_meta");
    let mut turns: Vec<Turn> = Vec::new();
    for record in &records[1..] {
        let open = turns.last_mut().filter(|t| t.completed.is_none() && t.aborted.is_none());
        match record {
            RolloutRecord::SessionMeta { .. } => panic!("{name}: second session_meta"),
            RolloutRecord::TurnStarted { turn_id } => {
                assert!(open.is_none(), "{name}: turn {turn_id} starts inside another");
                assert!(turns.iter().all(|t| &t.id != turn_id), "{name}: turn id {turn_id} reused");
                turns.push(Turn { id: turn_id.clone(), ..Turn::default() });
            }
            RolloutRecord::UserMessage { turn_id, text, .. } => {
                let turn = open.unwrap_or_else(|| panic!("{name}: prompt outside a turn"));
                assert_eq!(turn_id.as_ref(), Some(&turn.id), "{name}: prompt turn id");
                turn.prompts.push(text.clone());
            }
            RolloutRecord::AgentMessage { turn_id, text, .. } => {
                let turn = open.unwrap_or_else(|| panic!("{name}: agent text outside a turn"));
                assert_eq!(turn_id.as_ref(), Some(&turn.id), "{name}: agent turn id");
                turn.agent_texts.push(text.clone());
            }
            RolloutRecord::PlanUpdated { turn_id, plan, .. } => {
                let turn = open.unwrap_or_else(|| panic!("{name}: plan outside a turn"));
                assert_eq!(turn_id.as_ref(), Some(&turn.id), "{name}: plan turn id");
                turn.plans.push(plan.clone());
            }
            RolloutRecord::TurnComplete { turn_id, last_agent_message } => {
                let turn = open.unwrap_or_else(|| panic!("{name}: completion outside a turn"));
                assert_eq!(turn_id, &turn.id, "{name}: completion turn id");
                turn.completed = Some(last_agent_message.clone());
            }
            RolloutRecord::TurnAborted { turn_id, reason } => {
                let turn = open.unwrap_or_else(|| panic!("{name}: abort outside a turn"));
                assert_eq!(turn_id.as_ref(), Some(&turn.id), "{name}: abort turn id");
                turn.aborted = Some(reason.clone());
            }
            RolloutRecord::Other { .. } => {}
        }
    }
    turns
}

fn parse_file(path: &Path) -> Vec<RolloutRecord> {
    let bytes = std::fs::read(path).expect("read fixture");
    assert!(bytes.ends_with(b"\n"), "{}: ends with a complete line", path.display());
    bytes
        .split_inclusive(|&b| b == b'\n')
        .enumerate()
        .map(|(i, line)| parse_line(line).unwrap_or_else(|e| panic!("{}:{}: {e}", path.display(), i + 1)))
        .collect()
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Prompts the provider received (title-generation requests contain the prompt, not equal it).
fn provider_prompts(rollout: &Path) -> Option<BTreeSet<String>> {
    let log = rollout.with_file_name(name(rollout).replace(".jsonl", ".requests.jsonl"));
    let text = std::fs::read_to_string(log).ok()?;
    let prompts = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("prompt").and_then(|p| p.as_str()).map(str::to_owned))
        .collect();
    Some(prompts)
}

#[test]
fn every_captured_rollout_parses_into_consistent_turns() {
    let fixtures = rollout_fixtures();
    assert!(!fixtures.is_empty(), "no rollout fixtures in {}", fixture_dir().display());
    for path in &fixtures {
        let name = name(path);
        let records = parse_file(path);
        let turns = turns_of(&name, &records);
        assert!(!turns.is_empty(), "{name}: at least one turn");
        for turn in &turns {
            assert!(!turn.prompts.is_empty(), "{name}: turn {} has its prompt", turn.id);
            if let Some(last_agent_message) = &turn.completed {
                assert_eq!(last_agent_message.as_ref(), turn.agent_texts.last(), "{name}: final = last agent text");
            }
        }
        if let Some(received) = provider_prompts(path) {
            for turn in &turns {
                for prompt in &turn.prompts {
                    assert!(received.contains(prompt), "{name}: prompt {prompt:?} was sent to the provider");
                }
            }
        }
    }
}

type ShapeCheck = fn(&[Turn]);

/// Scenario-specific shape, checked for each scenario the capture produced.
#[test]
fn captured_scenarios_have_their_expected_shape() {
    let dir = fixture_dir();
    let completed = dir.join("completed-turn.jsonl");
    assert!(completed.exists(), "the basic scenario is always captured");
    let checks: [(&str, ShapeCheck); 7] = [
        ("completed-turn.jsonl", |t| {
            assert_eq!(t.len(), 1);
            assert_eq!(t[0].prompts.len(), 1, "one prompt, one UserMessage");
            assert!(matches!(&t[0].completed, Some(Some(_))));
        }),
        ("aborted-turn.jsonl", |t| {
            let last = t.last().unwrap();
            assert!(last.aborted.is_some() && last.completed.is_none());
        }),
        ("steered-turn.jsonl", |t| assert!(t.iter().any(|turn| turn.prompts.len() == 2))),
        ("steered-after-output.jsonl", |t| assert!(t.iter().any(|turn| turn.prompts.len() == 2))),
        ("two-turns.jsonl", |t| {
            assert_eq!(t.len(), 2);
            assert!(t.iter().all(|turn| turn.prompts.len() == 1 && turn.completed.is_some()));
        }),
        // EV-11: the plan is the `update_plan` call only; commentary and final are two
        // messages of one turn, and the final is the last.
        ("plan-update.jsonl", |t| {
            use wakterm_engine::PlanStatus::*;
            assert_eq!(t.len(), 1);
            let statuses: Vec<Vec<wakterm_engine::PlanStatus>> = t[0].plans.iter().map(|p| p.iter().map(|s| s.status).collect()).collect();
            assert_eq!(statuses, [[Completed, InProgress, Pending]]);
            assert_eq!(t[0].plans[0][0].step, "Read the request");
            assert_eq!(t[0].agent_texts.len(), 2, "commentary, then the final");
            assert_eq!(t[0].completed, Some(t[0].agent_texts.last().cloned()));
        }),
        ("whitespace-prompt.jsonl", |t| {
            for prompt in t.iter().flat_map(|turn| &turn.prompts) {
                assert_eq!(prompt.trim(), prompt, "Codex trims the submitted prompt");
            }
        }),
    ];
    for (file, check) in checks {
        let path = dir.join(file);
        if !path.exists() {
            eprintln!("scenario {file} not captured; skipped");
            continue;
        }
        check(&turns_of(file, &parse_file(&path)));
    }
}

#[test]
fn tail_over_growing_fixture_matches_one_shot_parse() {
    for path in rollout_fixtures() {
        let bytes = std::fs::read(&path).unwrap();
        let expected = parse_file(&path);
        let dir = tempfile::tempdir().unwrap();
        let copy = dir.path().join(name(&path));
        let mut writer = std::fs::File::create(&copy).unwrap();
        let mut tail = RolloutTail::open(&copy).unwrap();
        let mut records = Vec::new();
        // Odd piece sizes so lines split everywhere, with small pages to exercise has_more.
        let mut written = 0;
        let mut step = 1;
        while written < bytes.len() {
            let end = (written + step * 97).min(bytes.len());
            writer.write_all(&bytes[written..end]).unwrap();
            written = end;
            step = step % 13 + 1;
            loop {
                let page = tail.read_page(3, DEFAULT_MAX_BYTES_PER_PAGE).unwrap();
                records.extend(page.entries.into_iter().map(|e| e.record.unwrap()));
                if !page.has_more {
                    break;
                }
            }
        }
        let last = tail.read_page(DEFAULT_MAX_RECORDS_PER_PAGE, DEFAULT_MAX_BYTES_PER_PAGE).unwrap();
        assert!(last.entries.is_empty());
        assert_eq!(last.next_offset, bytes.len() as u64);
        assert_eq!(records, expected, "{}", name(&path));
    }
}
