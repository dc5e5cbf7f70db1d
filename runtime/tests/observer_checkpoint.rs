//! OBS-1..OBS-3: a restarted observer resumes from its durable checkpoint, costs what was
//! appended since, replays a request armed before it, and never trusts a checkpoint the file
//! or the process no longer matches. This test process plays Codex: it holds its rollout open.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use wakterm_engine::{Cursor, Incarnation, ObserverEvent, ObserverStatus, ProcessIdentity, SessionId, TurnId, TurnState};
use wakterm_runtime::observer::{probe_to_engine, CodexObserver};
use wakterm_runtime::observer_checkpoint::ObserverCheckpoint;
use wakterm_runtime::proc_probe;

fn event(payload: &str) -> String {
    format!("{{\"type\":\"event_msg\",\"payload\":{{{payload}}}}}\n")
}

fn started(turn: &str) -> String {
    event(&format!(r#""type":"task_started","turn_id":"{turn}""#))
}

fn complete(turn: &str, last: &str) -> String {
    event(&format!(r#""type":"task_complete","turn_id":"{turn}","last_agent_message":"{last}""#))
}

/// Lines Codex writes between lifecycle records (reasoning, tool calls): irrelevant, bulky.
fn filler(bytes: usize) -> String {
    let line = format!("{{\"type\":\"response_item\",\"payload\":{{\"type\":\"reasoning\",\"text\":\"{}\"}}}}\n", "x".repeat(1000));
    line.repeat(bytes / line.len() + 1)
}

struct Codex {
    home: tempfile::TempDir,
    path: PathBuf,
    file: File,
    me: ProcessIdentity,
}

impl Codex {
    fn new() -> Codex {
        let home = tempfile::tempdir().expect("tempdir");
        let day = home.path().join("sessions/2026/11/30");
        std::fs::create_dir_all(&day).expect("sessions dir");
        let path = day.join("rollout-2026-11-30T10-00-00-s1.jsonl");
        let file = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("rollout");
        let me = probe_to_engine(proc_probe::identity(std::process::id()).expect("own identity"));
        let mut codex = Codex { home, path, file, me };
        let cwd = serde_json::to_string(&codex.home.path().display().to_string()).unwrap();
        codex.write(&format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"s1\",\"cwd\":{cwd}}}}}\n"));
        codex
    }

    fn write(&mut self, text: &str) {
        self.file.write_all(text.as_bytes()).expect("append");
    }

    fn len(&self) -> u64 {
        std::fs::metadata(&self.path).unwrap().len()
    }

    fn incarnation(&self) -> Incarnation {
        Incarnation(format!("{}.{}", self.me.pid, self.me.start_time_ticks))
    }

    fn observer(&self, saved: Option<ObserverCheckpoint>) -> CodexObserver {
        CodexObserver::new(self.home.path().into(), None, self.me, self.incarnation()).with_checkpoint(saved)
    }
}

fn session() -> SessionId {
    SessionId("s1".into())
}

fn idle_after(turn: &str) -> TurnState {
    TurnState::Idle { last_completed: Some(TurnId(turn.into())) }
}

/// A daemon that read a long history and saved its checkpoint.
fn codex_with_history(history_bytes: usize) -> (Codex, ObserverCheckpoint) {
    let mut codex = Codex::new();
    codex.write(&started("t1"));
    codex.write(&filler(history_bytes));
    codex.write(&complete("t1", "first"));
    let mut first = codex.observer(None);
    let refresh = first.refresh(None);
    assert_eq!(refresh.snapshot.turn, idle_after("t1"), "{:?}", refresh.snapshot);
    let saved = first.checkpoint().expect("caught up and attached: a checkpoint");
    assert_eq!(saved.tail.offset, codex.len());
    assert_eq!(saved.turn, idle_after("t1"));
    (codex, saved)
}

// OBS-2: a restart reads what was appended after the checkpoint, not the history before it,
// and knows the turn state at once.
#[test]
fn obs_2_a_restart_reads_only_what_follows_the_checkpoint() {
    let (mut codex, saved) = codex_with_history(8 << 20);
    let checkpoint = saved.tail.offset;
    codex.write(&started("t2"));
    let mut restarted = codex.observer(Some(saved));
    let refresh = restarted.refresh(None);
    let t2_end = codex.len();
    assert_eq!(
        refresh.events,
        vec![
            ObserverEvent::Attached { session: session(), position: checkpoint },
            ObserverEvent::TurnStarted { session: session(), turn: TurnId("t2".into()), position: t2_end },
        ]
    );
    assert_eq!(refresh.snapshot.turn, TurnState::Busy { turn: Some(TurnId("t2".into())) });
    assert!(restarted.bytes_read() < 64 * 1024, "read {} bytes of an 8 MiB history", restarted.bytes_read());
}

// OBS-2: a request armed before the checkpoint is replayed from its own position; records up
// to the checkpoint are emitted but not folded twice.
#[test]
fn obs_2_a_request_armed_before_the_checkpoint_replays_from_its_position() {
    let mut codex = Codex::new();
    codex.write(&started("t0"));
    codex.write(&filler(4 << 20));
    codex.write(&complete("t0", "zero"));
    let armed = codex.len();
    codex.write(&started("t1"));
    codex.write(&filler(1 << 20));
    codex.write(&complete("t1", "its final"));
    let mut first = codex.observer(None);
    first.refresh(None);
    let saved = first.checkpoint().expect("checkpoint");
    codex.write(&started("t2"));

    let mut restarted = codex.observer(Some(saved.clone()));
    let events = restarted.resume(&Cursor { session: session(), position: armed });
    let kinds: Vec<String> = events.iter().map(|e| format!("{e:?}").split_whitespace().next().unwrap_or("").to_string()).collect();
    assert_eq!(kinds, ["Attached", "TurnStarted", "TurnCompleted", "TurnStarted"], "{events:?}");
    assert!(matches!(&events[0], ObserverEvent::Attached { position, .. } if *position == armed));
    assert!(matches!(&events[2], ObserverEvent::TurnCompleted { final_message, .. } if final_message.as_deref() == Some("its final")));
    // Pages read ahead in 64 KiB chunks and re-read their 8 KiB window: some overhead, but
    // nothing of the 4 MiB before the armed position.
    assert!(restarted.bytes_read() < 2 << 20, "read {} bytes: from the armed position, not from 0", restarted.bytes_read());
    // The snapshot sent after the resume's events is the resumed state (MON-1), no refresh.
    let resumed = restarted.current_snapshot(None);
    assert_eq!((resumed.status, resumed.turn), (ObserverStatus::Attached, TurnState::Busy { turn: Some(TurnId("t2".into())) }));
    let snapshot = restarted.refresh(None).snapshot;
    assert_eq!(snapshot.turn, TurnState::Busy { turn: Some(TurnId("t2".into())) });

    // Armed after the checkpoint: read from the checkpoint, announced there (the point OBS-2
    // proved), and every record after it emitted (EV-13 proves the ones already reported).
    let after = codex.len();
    codex.write(&complete("t2", "two"));
    let mut again = codex.observer(Some(saved.clone()));
    let events = again.resume(&Cursor { session: session(), position: after });
    assert_eq!(events.len(), 3, "{events:?}");
    assert_eq!(events[0], ObserverEvent::Attached { session: session(), position: saved.tail.offset });
    assert!(matches!(&events[1], ObserverEvent::TurnStarted { turn, position, .. } if turn.0 == "t2" && *position == after));
    assert!(matches!(&events[2], ObserverEvent::TurnCompleted { turn, .. } if turn.0 == "t2"));
    assert_eq!(again.refresh(None).snapshot.turn, idle_after("t2"));
}

// OBS-2, EV-13: a rollout cut back past the checkpoint and grown again while the daemon was
// down, a new record ending exactly at the resumed cursor (the stream's mark): the observer
// announces the session at the checkpoint and emits the new record, whose fingerprint the
// engine compares with the mark's. Announced at the cursor, as before, the new record was
// folded unseen and never reported.
#[test]
fn obs_2_a_resume_past_the_checkpoint_emits_what_lies_between() {
    let (mut codex, saved) = codex_with_history(64 * 1024);
    let checkpoint = saved.tail.offset;
    codex.write(&started("t2"));
    codex.write(&complete("t2", "two"));
    let cursor = codex.len();
    // Cut back to the checkpoint; Codex appends one record that ends exactly at the cursor.
    std::fs::OpenOptions::new().write(true).open(&codex.path).unwrap().set_len(checkpoint).unwrap();
    let bare = complete("t3", "").len() as u64;
    let pad = usize::try_from(cursor - checkpoint - bare).expect("the new record is longer than a bare one");
    codex.write(&complete("t3", &"n".repeat(pad)));
    assert_eq!(codex.len(), cursor, "the new record ends at the cursor");

    let mut restarted = codex.observer(Some(saved));
    let events = restarted.resume(&Cursor { session: session(), position: cursor });
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(events[0], ObserverEvent::Attached { session: session(), position: checkpoint });
    assert!(matches!(&events[1], ObserverEvent::TurnCompleted { turn, position, .. } if turn.0 == "t3" && *position == cursor), "{events:?}");
}

// OBS-3: a file replaced while the daemon was down fails a pending resume (never a final from
// another file). Without one it is still `SessionLost` first (the monitor's first look may come
// before the engine's resume, and a silent read from 0 would hand the resume a replaced file),
// and only the next look reads the file again from byte 0.
#[test]
fn obs_3_a_replaced_rollout_is_a_lost_session_before_it_is_read_from_zero() {
    let (mut codex, saved) = codex_with_history(64 * 1024);
    let armed = saved.tail.offset;
    // Same name, same session id, other content: a rewrite while the daemon was down.
    let forged = codex.path.with_extension("tmp");
    let body = std::fs::read_to_string(&codex.path).unwrap().replace("first", "FORGE");
    std::fs::write(&forged, body).unwrap();
    std::fs::rename(&forged, &codex.path).unwrap();
    codex.file = std::fs::OpenOptions::new().append(true).open(&codex.path).unwrap();
    codex.write(&started("t2"));
    codex.write(&complete("t2", "not ours"));
    let lost = |events: &[ObserverEvent]| matches!(events, [ObserverEvent::SessionLost { reason, .. }] if reason == wakterm_engine::REWRITTEN_WHILE_DOWN);

    let mut resumed = codex.observer(Some(saved.clone()));
    let events = resumed.resume(&Cursor { session: session(), position: armed });
    assert!(lost(&events), "{events:?}");
    // The snapshot sent after the resume's events says what the resume found (MON-1).
    assert!(matches!(resumed.current_snapshot(None).status, ObserverStatus::Unavailable { .. }), "{:?}", resumed.current_snapshot(None));

    // The monitor's first look comes before any resume: lost all the same.
    let mut monitored = codex.observer(Some(saved));
    let first = monitored.refresh(None);
    assert!(lost(&first.events), "{:?}", first.events);
    // A resume arriving after that loss never re-attaches the replaced file at the armed
    // position as if it were the checkpointed one.
    let late = monitored.resume(&Cursor { session: session(), position: armed });
    assert!(matches!(late.as_slice(), [ObserverEvent::SessionLost { .. }]), "{late:?}");
    let next = monitored.refresh(None);
    assert!(matches!(next.events.first(), Some(ObserverEvent::Attached { position: 0, .. }) | None), "{:?}", next.events);
    assert_eq!(next.snapshot.turn, idle_after("t2"));
}

// OBS-1: another incarnation (a reused pid has another start time) ignores the checkpoint.
#[test]
fn obs_1_a_checkpoint_of_another_incarnation_is_ignored() {
    let (codex, saved) = codex_with_history(64 * 1024);
    let stranger = ObserverCheckpoint {
        process: ProcessIdentity { pid: codex.me.pid, start_time_ticks: codex.me.start_time_ticks + 1 },
        incarnation: Incarnation(format!("{}.{}", codex.me.pid, codex.me.start_time_ticks + 1)),
        turn: TurnState::Busy { turn: Some(TurnId("planted".into())) },
        ..saved
    };
    let mut observer = codex.observer(Some(stranger));
    let refresh = observer.refresh(None);
    assert!(matches!(&refresh.events[0], ObserverEvent::Attached { position: 0, .. }), "{:?}", refresh.events);
    assert_eq!(refresh.snapshot.turn, idle_after("t1"), "the planted state was not used");
    assert!(Path::new(&codex.path).exists());
}

// OBS-4: after a restart the observer of the process the stream reported attached expects that
// session: a rollout removed while the daemon was down (the process still writes the deleted
// file), one of another working directory in its place, or one emptied (its checkpoint no
// longer matches) loses it, naming it, once; a process that had a session never says "no
// rollout yet" (idle) when it holds none. A file that cannot be examined and no checkpoint to
// prove it changed is no loss (unknown), and the session found again is just attached.
#[test]
fn obs_4_a_rollout_not_held_while_down_loses_the_expected_session() {
    let gone = |events: &[ObserverEvent], code: &str| {
        matches!(events, [ObserverEvent::SessionLost { reason, session: Some(s), before: None }] if reason == code && *s == session())
    };
    let unavailable = |o: &CodexObserver| matches!(o.current_snapshot(None).status, ObserverStatus::Unavailable { .. });
    let removed_code = wakterm_engine::ROLLOUT_NOT_HELD_WHILE_DOWN;

    // Removed: the first look (before the engine's expectation) finds none open and, with this
    // process's checkpoint, says unavailable, not idle; the expectation then loses the session.
    let (codex, saved) = codex_with_history(4 * 1024);
    std::fs::remove_file(&codex.path).unwrap();
    let mut observer = codex.observer(Some(saved));
    let first = observer.refresh(None);
    assert!(first.events.is_empty(), "{:?}", first.events);
    assert!(matches!(first.snapshot.status, ObserverStatus::Unavailable { .. }), "{:?}", first.snapshot);
    let events = observer.expect(session());
    assert!(gone(&events, removed_code), "{events:?}");
    assert!(unavailable(&observer));
    assert!(observer.refresh(None).events.is_empty(), "lost once");
    // Without a checkpoint, the expectation alone.
    let mut observer = codex.observer(None);
    assert!(gone(&observer.expect(session()), removed_code));
    assert!(unavailable(&observer));
    // A startup resume of that session (a request waits) loses it with the same code, in
    // whichever order the two come (the resume's reason was prose: a review).
    let mut observer = codex.observer(None);
    let resumed = observer.resume(&Cursor { session: session(), position: 0 });
    assert!(gone(&resumed, removed_code), "{resumed:?}");

    // Another working directory's rollout in its place.
    let (codex, _) = codex_with_history(4 * 1024);
    let elsewhere = CodexObserver::new(codex.home.path().into(), Some("/somewhere/else".into()), codex.me, codex.incarnation());
    let mut elsewhere = elsewhere.with_checkpoint(None);
    assert!(gone(&elsewhere.expect(session()), removed_code));

    // Emptied: the tree's file has no session record to read; the checkpoint proves it changed.
    let (codex, saved) = codex_with_history(4 * 1024);
    codex.file.set_len(0).unwrap();
    let mut observer = codex.observer(Some(saved.clone()));
    let events = observer.expect(session());
    assert!(gone(&events, wakterm_engine::REWRITTEN_WHILE_DOWN), "{events:?}");
    // Without a checkpoint nothing proves it: unknown, no loss.
    let mut observer = codex.observer(None);
    assert!(observer.expect(session()).is_empty());
    assert!(unavailable(&observer));
    // A startup resume pending meanwhile (the emptied file could not be examined) is
    // answered by that one loss: once the file holds a session again it is read afresh, with
    // no second loss from the stale resume's cursor past its end (a review).
    let mut observer = codex.observer(Some(saved.clone()));
    assert!(observer.resume(&Cursor { session: session(), position: saved.tail.offset }).is_empty(), "nothing proven yet");
    assert!(gone(&observer.expect(session()), wakterm_engine::REWRITTEN_WHILE_DOWN));
    let mut codex = codex;
    let cwd = serde_json::to_string(&codex.home.path().display().to_string()).unwrap();
    codex.write(&format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"s1\",\"cwd\":{cwd}}}}}\n"));
    codex.write(&started("t9"));
    let again = observer.refresh(None).events;
    assert!(matches!(again.first(), Some(ObserverEvent::Attached { position: 0, .. })), "{again:?}");
    assert!(!again.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. })), "{again:?}");

    // Found again: attached, nothing lost.
    let (codex, saved) = codex_with_history(4 * 1024);
    let mut observer = codex.observer(Some(saved));
    let events = observer.expect(session());
    assert!(matches!(events.as_slice(), [ObserverEvent::Attached { .. }, ..]), "{events:?}");
}
