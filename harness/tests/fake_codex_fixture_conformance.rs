//! The fake's rollout against the real Codex 0.169 captures in `fixtures/codex-0.169/`.
//!
//! Proves that one observer can read both: the same record kinds in the same order per turn,
//! the same line-level fields, and payload fields that exist in the real records in the same
//! relative order (the fake writes a subset; bulky instruction payloads are left out).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use wakterm_harness::fake_codex::{Behaviour, FakeSession, SessionConfig};

fn fixture(name: &str) -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/codex-0.169")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{path:?}: {error}"));
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn fake_session(home: &Path, behaviour: Behaviour) -> FakeSession {
    FakeSession::new(SessionConfig {
        codex_home: home.to_owned(),
        cwd: PathBuf::from("/tmp/project"),
        session_id: uuid::Uuid::new_v4().to_string(),
        behaviour: Behaviour {
            reply_template: "mock reply to: {prompt}".into(),
            reply_delay_ms: 10,
            ..behaviour
        },
    })
}

fn records(session: &FakeSession) -> Vec<Value> {
    let text = std::fs::read_to_string(session.rollout().unwrap().path()).unwrap();
    text.lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// A name per record that captures what observers branch on.
fn kind(record: &Value) -> String {
    let payload = &record["payload"];
    match record["type"].as_str().unwrap() {
        "event_msg" => match payload["type"].as_str().unwrap() {
            "item_completed" => format!(
                "item_completed:{}",
                payload["item"]["type"].as_str().unwrap()
            ),
            other => other.to_owned(),
        },
        "response_item" => format!("message:{}", payload["role"].as_str().unwrap()),
        other => other.to_owned(),
    }
}

fn kinds(records: &[Value]) -> Vec<String> {
    records.iter().map(kind).collect()
}

fn keys(value: &Value) -> Vec<String> {
    value
        .as_object()
        .map(|object| object.keys().cloned().collect())
        .unwrap_or_default()
}

/// serde_json sorts keys when parsing without `preserve_order`, so field order is read from
/// the raw text: the positions of `"key":` after the start of the payload.
fn raw_key_order(line: &str, keys: &[String]) -> Vec<usize> {
    keys.iter()
        .map(|key| line.find(&format!("\"{key}\":")).unwrap_or(usize::MAX))
        .collect()
}

#[test]
fn two_turns_write_the_same_kinds_in_the_same_order() {
    let home = tempfile::tempdir().unwrap();
    let mut session = fake_session(home.path(), Behaviour::default());
    session.submit("first of two turns", 0).unwrap();
    session.tick(10).unwrap();
    session.submit("second of two turns", 20).unwrap();
    session.tick(30).unwrap();
    assert_eq!(
        kinds(&records(&session)),
        kinds(&fixture("two-turns.jsonl"))
    );
}

#[test]
fn a_completed_turn_writes_the_same_kinds_in_the_same_order() {
    let home = tempfile::tempdir().unwrap();
    let mut session = fake_session(home.path(), Behaviour::default());
    session.submit("hello fixture", 0).unwrap();
    session.tick(10).unwrap();
    let fake = records(&session);
    let real = fixture("completed-turn.jsonl");
    assert_eq!(kinds(&fake), kinds(&real));
    let last = |records: &[Value]| records.last().unwrap()["payload"]["last_agent_message"].clone();
    assert_eq!(
        last(&fake),
        last(&real),
        "same template as the capture's mock provider"
    );
}

#[test]
fn an_interrupted_turn_writes_the_same_kinds_in_the_same_order() {
    let home = tempfile::tempdir().unwrap();
    let mut session = fake_session(
        home.path(),
        Behaviour {
            hang_on: Some("THINK".into()),
            ..Default::default()
        },
    );
    session.submit("THINK-LONG please abort me", 0).unwrap();
    session.interrupt().unwrap();
    assert_eq!(
        kinds(&records(&session)),
        kinds(&fixture("aborted-turn.jsonl"))
    );
}

#[test]
fn a_steered_turn_writes_the_same_kinds_in_the_same_order() {
    let home = tempfile::tempdir().unwrap();
    let mut session = fake_session(home.path(), Behaviour::default());
    session
        .submit("THINK-SHORT first prompt of a steered turn", 0)
        .unwrap();
    session
        .submit("steering prompt sent while busy", 5)
        .unwrap();
    session.tick(15).unwrap();
    let fake = records(&session);
    let real = fixture("steered-turn.jsonl");
    assert_eq!(kinds(&fake), kinds(&real));
    let last = |records: &[Value]| records.last().unwrap()["payload"]["last_agent_message"].clone();
    assert_eq!(
        last(&fake),
        last(&real),
        "the final answers the steering message"
    );
}

#[test]
fn whitespace_is_trimmed_exactly_like_the_real_codex() {
    let sent = "  \t leading and trailing white space\tinner tab\nzweite Zeile: grüße, 日本語, emoji 🚀\n  third line indented  \n\n  ";
    let home = tempfile::tempdir().unwrap();
    let mut session = fake_session(home.path(), Behaviour::default());
    session.submit(sent, 0).unwrap();
    let user_text = |records: &[Value]| {
        let item = records
            .iter()
            .find(|r| r["payload"]["item"]["type"] == "UserMessage")
            .unwrap();
        item["payload"]["item"]["content"][0]["text"].clone()
    };
    assert_eq!(
        user_text(&records(&session)),
        user_text(&fixture("whitespace-prompt.jsonl"))
    );
}

#[test]
fn line_and_payload_fields_are_a_subset_in_real_order() {
    let home = tempfile::tempdir().unwrap();
    let mut session = fake_session(home.path(), Behaviour::default());
    session.submit("first of two turns", 0).unwrap();
    session.tick(10).unwrap();
    session.submit("second", 20).unwrap();
    session.interrupt().unwrap();
    let fake_path = session.rollout().unwrap().path().to_owned();
    let fake_text = std::fs::read_to_string(fake_path).unwrap();

    let mut real_by_kind: BTreeMap<String, String> = BTreeMap::new();
    for name in [
        "two-turns.jsonl",
        "aborted-turn.jsonl",
        "steered-turn.jsonl",
    ] {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../fixtures/codex-0.169")
            .join(name);
        for line in std::fs::read_to_string(path).unwrap().lines() {
            let record: Value = serde_json::from_str(line).unwrap();
            real_by_kind
                .entry(kind(&record))
                .or_insert_with(|| line.to_owned());
        }
    }
    for fake_line in fake_text.lines() {
        let fake: Value = serde_json::from_str(fake_line).unwrap();
        let Some(real_line) = real_by_kind.get(&kind(&fake)) else {
            panic!("kind {} not in fixtures", kind(&fake))
        };
        let real: Value = serde_json::from_str(real_line).unwrap();
        assert_eq!(keys(&fake), keys(&real), "line fields of {}", kind(&fake));
        let fake_keys = keys(&fake["payload"]);
        let real_keys = keys(&real["payload"]);
        for key in &fake_keys {
            assert!(
                real_keys.contains(key),
                "{}: field {key} unknown to the real Codex",
                kind(&fake)
            );
        }
        let fake_order = raw_key_order(
            &fake_line[fake_line.find("\"payload\":").unwrap()..],
            &fake_keys,
        );
        let real_order = raw_key_order(
            &real_line[real_line.find("\"payload\":").unwrap()..],
            &fake_keys,
        );
        let mut fake_sorted: Vec<&String> = fake_keys.iter().collect();
        fake_sorted
            .sort_by_key(|key| fake_order[fake_keys.iter().position(|k| k == *key).unwrap()]);
        let mut real_sorted: Vec<&String> = fake_keys.iter().collect();
        real_sorted
            .sort_by_key(|key| real_order[fake_keys.iter().position(|k| k == *key).unwrap()]);
        assert_eq!(
            fake_sorted,
            real_sorted,
            "payload field order of {}",
            kind(&fake)
        );
    }
}
