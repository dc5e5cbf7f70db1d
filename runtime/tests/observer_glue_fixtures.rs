//! The Codex observer over real Codex 0.169 rollouts (fixtures/codex-0.169) held open by a real
//! child process, so discovery goes through /proc exactly as it does for a live Codex.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use wakterm_engine::prompt::prompt_hash;
use wakterm_engine::{
    Composer, Cursor, Incarnation, ObserverEvent, ObserverSnapshot, ObserverStatus, SessionId, TurnId, TurnState,
};
use wakterm_runtime::observer::{probe_to_engine, CodexObserver};
use wakterm_runtime::proc_probe;

const HOLD_ONE: &str = r#"exec 3>>"$1"; exec sleep 30"#;
const HOLD_TWO: &str = r#"exec 3>>"$1" 4>>"$2"; exec sleep 30"#;
/// A Codex before its first turn: holds nothing until the rollout appears, then holds it.
const HOLD_WHEN_CREATED: &str = r#"while [ ! -e "$1" ]; do sleep 0.02; done; exec 3>>"$1"; exec sleep 30"#;
const HOLD_NOTHING: &str = "exec sleep 30";

/// A child in its own process group, killed with the group when dropped.
struct Holder(Child);

impl Holder {
    fn spawn(script: &str, args: &[&Path]) -> Holder {
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        Holder(child)
    }

    fn identity(&self) -> wakterm_engine::ProcessIdentity {
        probe_to_engine(proc_probe::identity(self.0.id()).expect("child identity"))
    }

    /// Kills the child and reaps it, so it is gone before the next observer call.
    fn kill(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        // SAFETY: signals only the process group this test created (pgid == child pid).
        unsafe { libc::kill(-(self.0.id() as libc::pid_t), libc::SIGKILL) };
        let _ = self.0.wait();
    }
}

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Home {
        Home { dir: tempfile::tempdir().expect("tempdir") }
    }

    fn codex_home(&self) -> PathBuf {
        self.dir.path().join("codex-home")
    }

    /// Where a rollout of `session` lives (the directory is created, the file is not).
    fn rollout_path(&self, session: &str) -> PathBuf {
        let day = self.codex_home().join("sessions/2000/01/01");
        std::fs::create_dir_all(&day).expect("sessions dir");
        day.join(format!("rollout-2000-01-01T00-00-00-{session}.jsonl"))
    }

    /// A fixture copied into the sessions tree under its own session id.
    fn install(&self, fixture_name: &str) -> (PathBuf, String) {
        let bytes = fixture(fixture_name);
        let session = session_of(&bytes);
        let path = self.rollout_path(&session);
        std::fs::write(&path, &bytes).expect("write rollout");
        (path, session)
    }
}

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169")
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_dir().join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn screen(name: &str) -> String {
    String::from_utf8(fixture(name)).expect("utf-8 screen")
}

fn session_of(rollout: &[u8]) -> String {
    let first = rollout.split(|&b| b == b'\n').next().expect("first line");
    let value: serde_json::Value = serde_json::from_slice(first).expect("session_meta json");
    value["payload"]["id"].as_str().expect("session id").to_owned()
}

/// Byte offsets just after each line.
fn line_ends(rollout: &[u8]) -> Vec<u64> {
    rollout.iter().enumerate().filter(|(_, &b)| b == b'\n').map(|(i, _)| i as u64 + 1).collect()
}

/// The end offset of the `n`th line (0-based) whose event_msg payload type is `kind`.
fn end_of(rollout: &[u8], kind: &str, n: usize) -> u64 {
    let ends = line_ends(rollout);
    let mut seen = 0;
    for (index, line) in rollout.split(|&b| b == b'\n').enumerate() {
        let Ok(value) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
        let payload = &value["payload"];
        let item_kind = payload["item"]["type"].as_str();
        let matches = match kind {
            "UserMessage" | "AgentMessage" => item_kind == Some(kind),
            _ => payload["type"].as_str() == Some(kind),
        };
        if value["type"] == "event_msg" && matches {
            if seen == n {
                return ends[index];
            }
            seen += 1;
        }
    }
    panic!("no {kind} #{n}");
}

fn wait_held(pid: u32, path: &Path) {
    let want = path.canonicalize().expect("canonical rollout");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !proc_probe::open_files(pid).unwrap_or_default().contains(&want) {
        assert!(Instant::now() < deadline, "child {pid} never opened {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn observer(home: &Home, holder: &Holder) -> CodexObserver {
    CodexObserver::new(home.codex_home(), None, holder.identity(), Incarnation("inc-1".into()))
}

fn sid(s: &str) -> SessionId {
    SessionId(s.to_owned())
}

fn tid(id: &str) -> TurnId {
    TurnId(format!("00000000-0000-4000-8000-0000000000{id}"))
}

/// Strictly increasing positions within the session; at most one Attached, first.
fn assert_ordered(events: &[ObserverEvent]) {
    let positions: Vec<u64> = events.iter().filter_map(ObserverEvent::position).collect();
    assert!(positions.windows(2).all(|w| w[0] < w[1]), "positions not strictly increasing: {positions:?}");
}

/// A fixture attached from scratch: events, the snapshot, and the rollout bytes.
fn observe(name: &str, screen_text: Option<&str>) -> (Vec<ObserverEvent>, ObserverSnapshot, Vec<u8>) {
    let home = Home::new();
    let (path, _) = home.install(name);
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let mut obs = observer(&home, &holder);
    let refresh = obs.refresh(screen_text);
    assert_ordered(&refresh.events);
    assert_eq!(obs.corrupt_lines(), 0, "{name}: real Codex lines all parse");
    (refresh.events, refresh.snapshot, fixture(name))
}

#[test]
fn completed_turn_reads_as_start_prompt_final_and_idle_baseline() {
    let (events, snapshot, bytes) = observe("completed-turn.jsonl", None);
    let session = sid("00000000-0000-4000-8000-000000000001");
    let turn = tid("03");
    assert_eq!(
        events,
        vec![
            ObserverEvent::Attached { session: session.clone(), position: 0 },
            ObserverEvent::TurnStarted { session: session.clone(), turn: turn.clone(), position: end_of(&bytes, "task_started", 0) },
            ObserverEvent::UserMessage {
                session: session.clone(),
                turn: Some(turn.clone()),
                prompt_hash: prompt_hash("hello fixture"),
                position: end_of(&bytes, "UserMessage", 0),
            },
            // EV-10: the assistant message, once (its `response_item` copy is not an event).
            ObserverEvent::AgentMessage {
                session: session.clone(),
                turn: Some(turn.clone()),
                text: "mock reply to: hello fixture".into(),
                phase: None,
                position: end_of(&bytes, "AgentMessage", 0),
            },
            ObserverEvent::TurnCompleted {
                session: session.clone(),
                turn: turn.clone(),
                final_message: Some("mock reply to: hello fixture".into()),
                position: end_of(&bytes, "task_complete", 0),
            },
        ]
    );
    assert_eq!(snapshot.status, ObserverStatus::Attached);
    assert_eq!(snapshot.session, Some(session));
    assert_eq!(snapshot.position, bytes.len() as u64);
    assert_eq!(snapshot.turn, TurnState::Idle { last_completed: Some(turn) });
    assert_eq!(snapshot.composer, Composer::Unknown, "no screen, no composer evidence");
    assert_eq!(snapshot.incarnation, Incarnation("inc-1".into()));
}

#[test]
fn screen_gives_the_composer_and_a_working_screen_beats_an_idle_rollout() {
    let (_, idle, _) = observe("completed-turn.jsonl", Some(&screen("screen-completed.txt")));
    assert_eq!(idle.composer, Composer::Empty);
    assert_eq!(idle.turn, TurnState::Idle { last_completed: Some(tid("03")) });
    let (_, draft, _) = observe("completed-turn.jsonl", Some(&screen("screen-draft.txt")));
    assert_eq!(draft.composer, Composer::Draft);
    let (_, busy, _) = observe("completed-turn.jsonl", Some(&screen("screen-busy.txt")));
    assert_eq!(busy.turn, TurnState::Busy { turn: None });
}

#[test]
fn two_turns_leave_the_second_as_baseline() {
    let (events, snapshot, _) = observe("two-turns.jsonl", None);
    let started: Vec<&ObserverEvent> = events.iter().filter(|e| matches!(e, ObserverEvent::TurnStarted { .. })).collect();
    let completed: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            ObserverEvent::TurnCompleted { turn, final_message, .. } => Some((turn.clone(), final_message.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(started.len(), 2);
    assert_eq!(
        completed,
        vec![
            (tid("52"), Some("mock reply to: first of two turns".into())),
            (tid("60"), Some("mock reply to: second of two turns".into())),
        ]
    );
    assert_eq!(snapshot.turn, TurnState::Idle { last_completed: Some(tid("60")) });
}

#[test]
fn aborted_turn_reads_as_turn_aborted() {
    let (events, snapshot, bytes) = observe("aborted-turn.jsonl", None);
    let last = events.last().expect("events");
    assert_eq!(
        last,
        &ObserverEvent::TurnAborted {
            session: sid("00000000-0000-4000-8000-000000000011"),
            turn: Some(tid("13")),
            position: end_of(&bytes, "turn_aborted", 0),
        }
    );
    assert!(!events.iter().any(|e| matches!(e, ObserverEvent::TurnCompleted { .. })));
    assert_eq!(snapshot.turn, TurnState::Idle { last_completed: Some(tid("13")) });
}

#[test]
fn steered_turns_have_one_start_and_two_prompts_of_the_same_turn() {
    for (name, turn) in [("steered-turn.jsonl", tid("21")), ("steered-after-output.jsonl", tid("35"))] {
        let (events, snapshot, _) = observe(name, None);
        let starts = events.iter().filter(|e| matches!(e, ObserverEvent::TurnStarted { .. })).count();
        let prompts: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                ObserverEvent::UserMessage { turn, prompt_hash, .. } => Some((turn.clone(), prompt_hash.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(starts, 1, "{name}");
        assert_eq!(prompts.len(), 2, "{name}: initial prompt and steering, each exactly once");
        assert!(prompts.iter().all(|(t, _)| t.as_ref() == Some(&turn)), "{name}");
        assert_eq!(prompts[1].1, prompt_hash("steering prompt sent while busy"), "{name}");
        assert_eq!(snapshot.turn, TurnState::Idle { last_completed: Some(turn) }, "{name}");
    }
}

#[test]
fn whitespace_prompt_hashes_as_the_sent_text_trimmed() {
    let observations: serde_json::Value =
        serde_json::from_slice(&fixture("observations.json")).expect("observations.json");
    let sent = observations["whitespace"]["sent"].as_str().expect("sent prompt");
    assert_ne!(sent, sent.trim(), "the fixture's prompt has outer white space");
    let (events, _, _) = observe("whitespace-prompt.jsonl", None);
    let hashes: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            ObserverEvent::UserMessage { prompt_hash, .. } => Some(prompt_hash),
            _ => None,
        })
        .collect();
    assert_eq!(hashes, vec![&prompt_hash(sent)]);
}

#[test]
fn appended_pieces_yield_only_complete_records_once() {
    let bytes = fixture("two-turns.jsonl");
    let home = Home::new();
    let path = home.rollout_path(&session_of(&bytes));
    let first_line = line_ends(&bytes)[0] as usize;
    // Start with the session_meta and half of the next line.
    let mut written = first_line + 40;
    std::fs::write(&path, &bytes[..written]).expect("write");
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let mut obs = observer(&home, &holder);
    let mut events = obs.refresh(None).events;
    assert_eq!(events.len(), 1, "only Attached: the half line is not a record yet: {events:?}");
    let ends = line_ends(&bytes);
    let mut file = std::fs::OpenOptions::new().append(true).open(&path).expect("append");
    let mut piece = 7usize;
    while written < bytes.len() {
        let next = (written + piece).min(bytes.len());
        file.write_all(&bytes[written..next]).expect("append piece");
        written = next;
        piece = piece * 3 % 4093 + 1; // odd sizes that cut lines anywhere
        let new = obs.poll();
        for event in &new {
            let position = event.position().expect("positioned event");
            assert!(position <= written as u64 && ends.contains(&position), "{event:?} at {written}");
        }
        events.extend(new);
    }
    assert_ordered(&events);
    let (whole, _, _) = observe("two-turns.jsonl", None);
    assert_eq!(events, whole, "piecewise reading equals reading the whole file");
}

#[test]
fn truncation_rewrite_and_replacement_lose_the_session() {
    let bytes = fixture("completed-turn.jsonl");
    let ends = line_ends(&bytes);
    type Damage = fn(&Path, &[u8], &[u64]);
    let damages: [(&str, Damage); 3] = [
        ("truncate", |path, _, ends| {
            let file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            file.set_len(ends[3]).unwrap();
        }),
        ("rewrite", |path, bytes, _| {
            let mut changed = bytes.to_vec();
            let last = changed.len() - 10;
            changed[last] = if changed[last] == b'a' { b'b' } else { b'a' };
            std::fs::write(path, changed).unwrap();
        }),
        ("replace", |path, bytes, _| {
            let other = path.with_extension("tmp");
            std::fs::write(&other, bytes).unwrap();
            std::fs::rename(&other, path).unwrap();
        }),
    ];
    for (what, damage) in damages {
        let home = Home::new();
        let path = home.rollout_path(&session_of(&bytes));
        std::fs::write(&path, &bytes).unwrap();
        let holder = Holder::spawn(HOLD_ONE, &[&path]);
        wait_held(holder.0.id(), &path);
        let mut obs = observer(&home, &holder);
        assert_eq!(obs.refresh(None).events.len(), 5, "{what}: attached, start, prompt, message, completion");
        damage(&path, &bytes, &ends);
        let events = obs.poll();
        assert_eq!(events.len(), 1, "{what}: {events:?}");
        assert!(matches!(&events[0], ObserverEvent::SessionLost { .. }), "{what}: {events:?}");
        let after = obs.refresh(None);
        assert!(after.events.is_empty(), "{what}: a broken rollout is not re-attached: {:?}", after.events);
        assert!(matches!(after.snapshot.status, ObserverStatus::Unavailable { .. }), "{what}");
        assert_eq!(after.snapshot.turn, TurnState::Unknown, "{what}");
    }
}

#[test]
fn two_rollouts_held_open_are_unavailable_not_guessed() {
    let home = Home::new();
    let (first, _) = home.install("completed-turn.jsonl");
    let (second, _) = home.install("two-turns.jsonl");
    let holder = Holder::spawn(HOLD_TWO, &[&first, &second]);
    wait_held(holder.0.id(), &first);
    wait_held(holder.0.id(), &second);
    let refresh = observer(&home, &holder).refresh(Some(&screen("screen-idle.txt")));
    assert!(refresh.events.is_empty(), "{:?}", refresh.events);
    let ObserverStatus::Unavailable { reason } = &refresh.snapshot.status else { panic!("{:?}", refresh.snapshot) };
    assert!(reason.contains("2 Codex rollout files"), "{reason}");
    assert_eq!(refresh.snapshot.turn, TurnState::Unknown);
    assert_eq!(refresh.snapshot.session, None);
}

#[test]
fn cwd_mismatch_is_unavailable() {
    let home = Home::new();
    let (path, _) = home.install("completed-turn.jsonl");
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let elsewhere = home.dir.path().to_owned();
    let mut obs = CodexObserver::new(home.codex_home(), Some(elsewhere), holder.identity(), Incarnation("i".into()));
    let refresh = obs.refresh(None);
    assert!(refresh.events.is_empty());
    assert!(matches!(&refresh.snapshot.status, ObserverStatus::Unavailable { reason } if reason.contains("working directory")));
    assert_eq!(refresh.snapshot.turn, TurnState::Unknown);
}

// REC-2, OBS-2, EV-13: with no checkpoint nothing of the file is proven, so a resume reads it
// from byte 0, announces the session there and replays every record (the engine proves those
// the stream reported by the mark's fingerprint); the cursor, a record boundary, costs nothing.
#[test]
fn resume_without_a_checkpoint_replays_every_event_from_where_it_reads() {
    let (whole, _, bytes) = observe("two-turns.jsonl", None);
    let session = sid(&session_of(&bytes));
    let cursor_at = end_of(&bytes, "task_complete", 0);
    let home = Home::new();
    let (path, _) = home.install("two-turns.jsonl");
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let mut obs = observer(&home, &holder);
    let replayed = obs.resume(&Cursor { session: session.clone(), position: cursor_at });
    assert_eq!(whole.first(), Some(&ObserverEvent::Attached { session: session.clone(), position: 0 }));
    let after_cursor = whole.iter().filter(|e| e.position().is_some_and(|p| p > cursor_at)).count();
    assert_eq!(after_cursor, 4, "the second turn: start, prompt, message, completion");
    assert_eq!(replayed, whole);
    // Then live: an appended completion-free turn start arrives once.
    let line = r#"{"timestamp":"x","ordinal":99,"type":"event_msg","payload":{"type":"task_started","turn_id":"t-live"}}"#;
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(format!("{line}\n").as_bytes()).unwrap();
    let live = obs.poll();
    assert_eq!(
        live,
        vec![ObserverEvent::TurnStarted { session, turn: TurnId("t-live".into()), position: bytes.len() as u64 + line.len() as u64 + 1 }]
    );
    assert_eq!(obs.refresh(None).snapshot.turn, TurnState::Busy { turn: Some(TurnId("t-live".into())) });
}

#[test]
fn resume_with_another_session_or_a_foreign_cursor_loses_the_session() {
    let home = Home::new();
    let (path, session) = home.install("completed-turn.jsonl");
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let len = fixture("completed-turn.jsonl").len() as u64;
    let (whole, _, _) = observe("completed-turn.jsonl", None);
    let cursors = [
        Cursor { session: sid("some-other-session"), position: 0 },
        Cursor { session: sid(&session), position: line_ends(&fixture("completed-turn.jsonl"))[2] - 3 },
        Cursor { session: sid(&session), position: len + 100 },
    ];
    for (n, cursor) in cursors.into_iter().enumerate() {
        let mut obs = observer(&home, &holder);
        let events = obs.resume(&cursor);
        let Some((ObserverEvent::SessionLost { .. }, read)) = events.split_last() else { panic!("{cursor:?}: {events:?}") };
        // Another session: nothing is read. The same session: what was read before the cursor
        // proved no boundary comes first, from the attach at 0 (EV-13 holds it while the
        // restart's replay zone is open), exactly the records ending at or before it.
        let expected: Vec<ObserverEvent> = match n {
            0 => Vec::new(),
            _ => whole.iter().filter(|e| e.position().is_none_or(|p| p <= cursor.position)).cloned().collect(),
        };
        assert_eq!(read, expected.as_slice(), "{cursor:?}");
        assert!(n == 0 || read.len() > 1, "{cursor:?}: the records before the cursor are read: {read:?}");
    }
}

#[test]
fn fresh_codex_without_rollout_is_idle_then_attaches_when_the_first_turn_starts() {
    let home = Home::new();
    let bytes = fixture("completed-turn.jsonl");
    let path = home.rollout_path(&session_of(&bytes));
    let holder = Holder::spawn(HOLD_WHEN_CREATED, &[&path]);
    let mut obs = observer(&home, &holder);
    let fresh = obs.refresh(Some(&screen("screen-idle.txt")));
    assert!(fresh.events.is_empty());
    assert_eq!(fresh.snapshot.status, ObserverStatus::Attached);
    assert_eq!(fresh.snapshot.session, None);
    assert_eq!(fresh.snapshot.position, 0);
    assert_eq!(fresh.snapshot.turn, TurnState::Idle { last_completed: None });
    assert_eq!(fresh.snapshot.composer, Composer::Empty);
    assert_eq!(obs.refresh(None).snapshot.turn, TurnState::Idle { last_completed: None });
    assert_eq!(obs.refresh(Some(&screen("screen-busy.txt"))).snapshot.turn, TurnState::Busy { turn: None });
    std::fs::write(&path, &bytes).unwrap();
    wait_held(holder.0.id(), &path);
    let attached = obs.refresh(None);
    assert!(matches!(attached.events.first(), Some(ObserverEvent::Attached { position: 0, .. })));
    assert_eq!(attached.snapshot.turn, TurnState::Idle { last_completed: Some(tid("03")) });
}

#[test]
fn fresh_codex_that_exits_is_reported_once_and_not_drained() {
    let home = Home::new();
    let mut holder = Holder::spawn(HOLD_NOTHING, &[]);
    let mut obs = observer(&home, &holder);
    assert_eq!(obs.refresh(None).snapshot.status, ObserverStatus::Attached);
    holder.kill();
    assert_eq!(obs.poll(), vec![ObserverEvent::ProcessExited { drained: false }]);
    assert!(obs.poll().is_empty());
}

#[test]
fn process_exit_drains_the_rollout_first_and_is_reported_once() {
    let bytes = fixture("completed-turn.jsonl");
    let ends = line_ends(&bytes);
    let home = Home::new();
    let path = home.rollout_path(&session_of(&bytes));
    let cut = ends[5] as usize;
    std::fs::write(&path, &bytes[..cut]).unwrap();
    let mut holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let mut obs = observer(&home, &holder);
    assert_eq!(obs.refresh(None).snapshot.turn, TurnState::Busy { turn: Some(tid("03")) });
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&bytes[cut..]).unwrap();
    holder.kill();
    let events = obs.poll();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| match e {
            ObserverEvent::UserMessage { .. } => "prompt",
            ObserverEvent::AgentMessage { .. } => "message",
            ObserverEvent::TurnCompleted { .. } => "completed",
            ObserverEvent::ProcessExited { drained: true } => "exited-drained",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds, vec!["prompt", "message", "completed", "exited-drained"]);
    let after = obs.refresh(None);
    assert!(after.events.is_empty(), "exit is reported once");
    assert!(matches!(after.snapshot.status, ObserverStatus::Unavailable { .. }));
    assert_eq!(after.snapshot.turn, TurnState::Unknown);
}

#[test]
fn corrupt_lines_are_counted_and_skipped() {
    let bytes = fixture("completed-turn.jsonl");
    let ends = line_ends(&bytes);
    let cut = ends[1] as usize; // session_meta + task_started
    let mut damaged = bytes[..cut].to_vec();
    damaged.extend_from_slice(b"{not json\n[1,2]\n\n");
    damaged.extend_from_slice(&bytes[cut..]);
    let home = Home::new();
    let path = home.rollout_path(&session_of(&bytes));
    std::fs::write(&path, &damaged).unwrap();
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let mut obs = observer(&home, &holder);
    let refresh = obs.refresh(None);
    assert_eq!(obs.corrupt_lines(), 3);
    assert_eq!(refresh.events.len(), 5, "{:?}", refresh.events);
    assert_eq!(refresh.snapshot.turn, TurnState::Idle { last_completed: Some(tid("03")) });
}

#[test]
fn a_legacy_rollout_reports_each_prompt_once() {
    // An older build writing both the item and the legacy event for the same prompt.
    let lines = [
        r#"{"type":"session_meta","payload":{"id":"legacy-s","cwd":"/p"}}"#,
        r#"{"type":"event_msg","payload":{"type":"task_started","turn_id":"t1"}}"#,
        r#"{"type":"event_msg","payload":{"type":"item_completed","turn_id":"t1","item":{"type":"UserMessage","content":[{"type":"text","text":" p "}]}}}"#,
        r#"{"type":"event_msg","payload":{"type":"user_message","message":" p "}}"#,
        r#"{"type":"event_msg","payload":{"type":"task_complete","turn_id":"t1","last_agent_message":null}}"#,
    ];
    let home = Home::new();
    let path = home.rollout_path("legacy-s");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let events = observer(&home, &holder).refresh(None).events;
    let prompts: Vec<_> = events.iter().filter(|e| matches!(e, ObserverEvent::UserMessage { .. })).collect();
    assert_eq!(prompts.len(), 1, "{events:?}");
    assert!(matches!(prompts[0], ObserverEvent::UserMessage { prompt_hash: hash, .. } if *hash == prompt_hash("p")));
    assert!(matches!(events.last(), Some(ObserverEvent::TurnCompleted { final_message: None, .. })));
}

#[test]
fn a_backlog_beyond_the_page_bound_is_unknown_not_stale() {
    use wakterm_runtime::observer::{MAX_PAGES_PER_REFRESH, PAGE_RECORDS};
    let bytes = fixture("completed-turn.jsonl");
    let ends = line_ends(&bytes);
    let cut = ends[1] as usize; // session_meta + task_started: the turn is running
    let mut big = bytes[..cut].to_vec();
    for _ in 0..MAX_PAGES_PER_REFRESH * PAGE_RECORDS + 10 {
        big.extend_from_slice(b"{\"type\":\"filler\"}\n");
    }
    big.extend_from_slice(&bytes[cut..]);
    let home = Home::new();
    let path = home.rollout_path(&session_of(&bytes));
    std::fs::write(&path, &big).unwrap();
    let holder = Holder::spawn(HOLD_ONE, &[&path]);
    wait_held(holder.0.id(), &path);
    let mut obs = observer(&home, &holder);
    let first = obs.refresh(None);
    assert_eq!(first.snapshot.turn, TurnState::Unknown, "behind the writer: not the stale Busy");
    assert!(first.snapshot.position < big.len() as u64);
    let second = obs.refresh(None);
    assert_eq!(second.snapshot.position, big.len() as u64);
    assert_eq!(second.snapshot.turn, TurnState::Idle { last_completed: Some(tid("03")) });
    assert!(matches!(second.events.last(), Some(ObserverEvent::TurnCompleted { .. })));
}
