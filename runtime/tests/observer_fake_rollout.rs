//! The observer building blocks (rollout parser, tail, discovery) read what the harness's
//! Codex-shaped rollout writer produces: one prompt yields exactly one UserMessage, the turn
//! id is stable from start to completion, and the writer's own process is found as holder.

use std::path::Path;
use std::time::SystemTime;

use wakterm_harness::fake_codex::rollout_records::{RolloutRecorder, TurnRecord};
use wakterm_harness::rollout_writer::{RolloutWriter, SessionMeta};
use wakterm_runtime::proc_probe::{discover_rollout, Discovery};
use wakterm_runtime::rollout::RolloutRecord;
use wakterm_runtime::rollout_tail::{RolloutTail, DEFAULT_MAX_BYTES_PER_PAGE, DEFAULT_MAX_RECORDS_PER_PAGE};

fn recorder(codex_home: &Path, cwd: &Path, session_id: &str) -> RolloutRecorder {
    let meta = SessionMeta {
        session_id: session_id.into(),
        cwd: cwd.to_owned(),
        cli_version: "0.169.0".into(),
        originator: "codex_cli_rs".into(),
    };
    let writer = RolloutWriter::create(codex_home, &meta, SystemTime::now()).expect("create rollout");
    RolloutRecorder::new(writer, cwd.to_owned())
}

/// Every record the tail yields, with `Other` left out; parse errors fail the test.
fn drain(tail: &mut RolloutTail) -> Vec<RolloutRecord> {
    let mut records = Vec::new();
    loop {
        let page = tail.read_page(DEFAULT_MAX_RECORDS_PER_PAGE, DEFAULT_MAX_BYTES_PER_PAGE).expect("page");
        for entry in page.entries {
            match entry.record.expect("fake rollout lines parse") {
                RolloutRecord::Other { .. } => {}
                record => records.push(record),
            }
        }
        if !page.has_more {
            return records;
        }
    }
}

fn turn(id: &str) -> TurnRecord {
    TurnRecord { turn_id: id.into(), started: SystemTime::now() }
}

#[test]
fn one_turn_reads_as_start_prompt_answer_complete() {
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().join("work");
    let mut rec = recorder(home.path(), &cwd, "11111111-2222-3333-4444-555555555555");
    let mut tail = RolloutTail::open(rec.writer().path()).unwrap();
    let t1 = turn("turn-1");
    rec.open_turn(&t1).unwrap();
    rec.user_message(&t1, "Fix the bug\n\twith tabs ü").unwrap();
    rec.complete_turn(&t1, "Fix the bug\n\twith tabs ü", "Fixed.").unwrap();
    let records = drain(&mut tail);
    let names: Vec<_> = records.iter().map(short).collect();
    assert_eq!(names, ["session_meta", "turn_started", "user_message", "agent_message", "turn_complete"]);
    assert!(matches!(&records[0], RolloutRecord::SessionMeta { session_id, cwd: c, .. }
        if session_id == "11111111-2222-3333-4444-555555555555" && *c == cwd));
    assert_eq!(records[1], RolloutRecord::TurnStarted { turn_id: "turn-1".into() });
    assert!(matches!(&records[2], RolloutRecord::UserMessage { turn_id: Some(t), text, .. }
        if t == "turn-1" && text == "Fix the bug\n\twith tabs ü"));
    assert_eq!(
        records[4],
        RolloutRecord::TurnComplete { turn_id: "turn-1".into(), last_agent_message: Some("Fixed.".into()) }
    );
}

#[test]
fn steering_and_abort_are_distinct_records() {
    let home = tempfile::tempdir().unwrap();
    let mut rec = recorder(home.path(), home.path(), "22222222-2222-3333-4444-555555555555");
    let mut tail = RolloutTail::open(rec.writer().path()).unwrap();
    tail.seek_to_end_baseline().unwrap();
    let t = turn("turn-a");
    rec.open_turn(&t).unwrap();
    rec.user_message(&t, "first").unwrap();
    rec.user_message(&t, "steer").unwrap();
    rec.abort_turn(&t, "interrupted").unwrap();
    let records = drain(&mut tail);
    let names: Vec<_> = records.iter().map(short).collect();
    // The injected `<turn_aborted>` history message is not a prompt.
    assert_eq!(names, ["turn_started", "user_message", "user_message", "turn_aborted"]);
    assert_eq!(
        records[3],
        RolloutRecord::TurnAborted { turn_id: Some("turn-a".into()), reason: "interrupted".into() }
    );
}

#[test]
fn the_writing_process_is_discovered_as_holder() {
    let home = tempfile::tempdir().unwrap();
    let cwd = home.path().canonicalize().unwrap();
    let rec = recorder(home.path(), &cwd, "33333333-2222-3333-4444-555555555555");
    let discovery = discover_rollout(std::process::id(), home.path(), Some(&cwd));
    assert_eq!(
        discovery,
        Discovery::Found {
            path: rec.writer().path().canonicalize().unwrap(),
            holder_pid: std::process::id(),
            session_id: "33333333-2222-3333-4444-555555555555".into(),
        }
    );
}

fn short(record: &RolloutRecord) -> &'static str {
    match record {
        RolloutRecord::SessionMeta { .. } => "session_meta",
        RolloutRecord::TurnStarted { .. } => "turn_started",
        RolloutRecord::UserMessage { .. } => "user_message",
        RolloutRecord::AgentMessage { .. } => "agent_message",
        RolloutRecord::PlanUpdated { .. } => "plan_updated",
        RolloutRecord::TurnComplete { .. } => "turn_complete",
        RolloutRecord::TurnAborted { .. } => "turn_aborted",
        RolloutRecord::Other { .. } => "other",
    }
}
