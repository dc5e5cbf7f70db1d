//! The fake Codex in a real PTY: the scenarios admission and correlation depend on.
//!
//! Each test starts `wakterm-fake-codex` under portable-pty with a private CODEX_HOME and
//! working directory, drives it with the exact byte sequences wakterm writes, and checks the
//! screen (parsed with vt100, the way a screen observer sees it) and the rollout file. Every
//! wait polls against a deadline; no test sleeps longer than the behaviour it checks.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_wakterm-fake-codex");
const ROWS: u16 = 30;
const COLS: u16 = 120;
/// Upper bound of any wait; generous because several builds share two cores.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
const POLL_INTERVAL: Duration = Duration::from_millis(10);
const IDLE_MARKER: &str = "› Ask Codex to do anything";
/// The bullet in front alternates (`◦`/`•`) like the real spinner, so it is not part of it.
const BUSY_MARKER: &str = "Working (";
/// The one-write admission sequence: Ctrl-U, bracketed paste, CR.
fn admission_bytes(prompt: &str) -> Vec<u8> {
    format!("\x15\x1b[200~{prompt}\x1b[201~\r").into_bytes()
}

struct FakeCodex {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    screen: Arc<Mutex<vt100::Parser>>,
    home: tempfile::TempDir,
    project: tempfile::TempDir,
    _master: Box<dyn MasterPty + Send>,
}

impl FakeCodex {
    fn spawn(args: &[&str]) -> FakeCodex {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("openpty");
        let home = tempfile::tempdir().unwrap();
        let project = tempfile::tempdir().unwrap();
        let mut command = CommandBuilder::new(BIN);
        command.args(args);
        command.cwd(project.path());
        command.env("CODEX_HOME", home.path());
        let child = pair.slave.spawn_command(command).expect("spawn fake codex");
        drop(pair.slave);
        let screen = Arc::new(Mutex::new(vt100::Parser::new(ROWS, COLS, 0)));
        let mut reader = pair.master.try_clone_reader().unwrap();
        let sink = Arc::clone(&screen);
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().process(&buf[..n]);
            }
        });
        let writer = pair.master.take_writer().unwrap();
        let fake = FakeCodex {
            child,
            writer,
            screen,
            home,
            project,
            _master: pair.master,
        };
        fake.wait_screen("the idle composer", |screen| screen.contains(IDLE_MARKER));
        fake
    }

    /// One write() of all bytes, like wakterm's pane write.
    fn send(&mut self, bytes: &[u8]) {
        self.writer.write_all(bytes).unwrap();
        self.writer.flush().unwrap();
    }

    fn screen(&self) -> String {
        self.screen.lock().unwrap().screen().contents()
    }

    fn wait_screen(&self, what: &str, done: impl Fn(&str) -> bool) -> String {
        let screen = wait_for(what, || Some(self.screen()).filter(|screen| done(screen)));
        screen.unwrap_or_else(|| panic!("timed out waiting for {what}; screen:\n{}", self.screen()))
    }

    fn rollout_paths(&self) -> Vec<PathBuf> {
        let mut found = Vec::new();
        collect_files(&self.home.path().join("sessions"), &mut found);
        found.sort();
        found
    }

    /// The single rollout file's records once `done` accepts them.
    fn wait_rollout(&self, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let records = wait_for(what, || {
            let paths = self.rollout_paths();
            let [path] = paths.as_slice() else {
                return None;
            };
            Some(read_records(path)).filter(|records| done(records))
        });
        records.unwrap_or_else(|| {
            panic!(
                "timed out waiting for {what}; files: {:?}",
                self.rollout_paths()
            )
        })
    }

    fn pid(&self) -> u32 {
        self.child.process_id().expect("child pid")
    }

    fn wait_exit(&mut self) -> portable_pty::ExitStatus {
        let status = wait_for("the process to exit", || self.child.try_wait().unwrap());
        status.expect("fake codex did not exit")
    }
}

impl Drop for FakeCodex {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn wait_for<T>(_what: &str, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + WAIT_LIMIT;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(POLL_INTERVAL);
    }
}

fn collect_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(&path, found);
        } else {
            found.push(path);
        }
    }
}

/// Complete lines only: a line still being written is not a record yet.
fn read_records(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let complete = &text[..text.rfind('\n').map_or(0, |end| end + 1)];
    complete
        .lines()
        .map(|line| serde_json::from_str(line).expect("rollout line is JSON"))
        .collect()
}

fn events<'a>(records: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    records
        .iter()
        .filter(move |r| r["type"] == "event_msg" && r["payload"]["type"] == kind)
        .map(|r| &r["payload"])
}

fn user_items(records: &[Value]) -> Vec<&Value> {
    events(records, "item_completed")
        .filter(|p| p["item"]["type"] == "UserMessage")
        .collect()
}

fn has_event(records: &[Value], kind: &str) -> bool {
    events(records, kind).next().is_some()
}

#[test]
fn one_write_admission_submits_the_trimmed_prompt_and_reports_the_final() {
    let mut codex = FakeCodex::spawn(&[]);
    assert!(
        codex.rollout_paths().is_empty(),
        "no rollout before the first turn"
    );
    codex.send(&admission_bytes("  fix\tthe bug\n  in ünïcode  \n"));
    codex.wait_screen("the reply", |screen| {
        screen.contains("• done: fix\tthe bug".replace('\t', "    ").as_str())
    });
    let records = codex.wait_rollout("task_complete", |records| {
        has_event(records, "task_complete")
    });

    let prompt = "fix\tthe bug\n  in ünïcode";
    assert_eq!(events(&records, "task_started").count(), 1);
    assert_eq!(events(&records, "task_complete").count(), 1);
    let turn_id = events(&records, "task_started").next().unwrap()["turn_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let users = user_items(&records);
    assert_eq!(users.len(), 1);
    assert_eq!(users[0]["item"]["content"][0]["text"], prompt);
    assert_eq!(users[0]["turn_id"], turn_id.as_str());
    let complete = events(&records, "task_complete").next().unwrap();
    assert_eq!(complete["turn_id"], turn_id.as_str());
    assert_eq!(complete["last_agent_message"], format!("done: {prompt}"));

    let meta = &records[0];
    assert_eq!(meta["type"], "session_meta");
    let cwd = codex.project.path().canonicalize().unwrap();
    assert_eq!(meta["payload"]["cwd"], cwd.to_str().unwrap());
    let path = &codex.rollout_paths()[0];
    let session_id = meta["payload"]["id"].as_str().unwrap();
    assert!(path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .ends_with(&format!("-{session_id}.jsonl")));
    for (ordinal, record) in records.iter().enumerate() {
        assert_eq!(record["ordinal"], ordinal as u64);
    }
    // Session discovery reads /proc/PID/fd: the process holds its rollout open.
    let held: Vec<PathBuf> = std::fs::read_dir(format!("/proc/{}/fd", codex.pid()))
        .unwrap()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .collect();
    assert!(
        held.contains(path),
        "{path:?} not among open files {held:?}"
    );
    codex.wait_screen("idle again", |screen| {
        screen.contains(IDLE_MARKER) && !screen.contains(BUSY_MARKER)
    });
}

#[test]
fn raw_text_and_cr_in_one_write_stays_in_the_composer() {
    let mut codex = FakeCodex::spawn(&[]);
    codex.send(b"hello raw\r");
    codex.wait_screen("the draft", |screen| screen.contains("› hello raw"));
    // Longer than the reply delay and the burst window: a submit would have shown by now.
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        codex.rollout_paths().is_empty(),
        "raw write must not start a turn"
    );
    assert!(!codex.screen().contains("• done:"));
    // A separate, later Enter submits the draft (trailing new line trimmed).
    codex.send(b"\r");
    let records = codex.wait_rollout("task_complete", |records| {
        has_event(records, "task_complete")
    });
    assert_eq!(
        user_items(&records)[0]["item"]["content"][0]["text"],
        "hello raw"
    );
}

#[test]
fn steering_while_busy_stays_in_the_same_turn() {
    let mut codex = FakeCodex::spawn(&["--reply-delay-ms", "700"]);
    codex.send(&admission_bytes("first prompt"));
    codex.wait_screen("the busy status", |screen| screen.contains(BUSY_MARKER));
    codex.send(&admission_bytes("steer this way"));
    let records = codex.wait_rollout("task_complete", |records| {
        has_event(records, "task_complete")
    });
    assert_eq!(events(&records, "task_started").count(), 1);
    let turn_id = &events(&records, "task_started").next().unwrap()["turn_id"];
    let users = user_items(&records);
    let texts: Vec<&Value> = users
        .iter()
        .map(|u| &u["item"]["content"][0]["text"])
        .collect();
    assert_eq!(texts, ["first prompt", "steer this way"]);
    assert!(users.iter().all(|u| &u["turn_id"] == turn_id));
    let complete = events(&records, "task_complete").next().unwrap();
    assert_eq!(&complete["turn_id"], turn_id);
    assert_eq!(complete["last_agent_message"], "done: steer this way");
}

#[test]
fn abort_on_ends_the_turn_with_turn_aborted_and_no_final() {
    let mut codex = FakeCodex::spawn(&["--abort-on", "ABORT"]);
    codex.send(&admission_bytes("please ABORT now"));
    let records = codex.wait_rollout("turn_aborted", |records| has_event(records, "turn_aborted"));
    assert!(!has_event(&records, "task_complete"));
    let started = events(&records, "task_started").next().unwrap();
    assert_eq!(
        events(&records, "turn_aborted").next().unwrap()["turn_id"],
        started["turn_id"]
    );
    codex.wait_screen("the interrupt notice", |screen| {
        screen.contains("■ Conversation interrupted")
    });
}

#[test]
fn esc_interrupts_a_hanging_turn() {
    let mut codex = FakeCodex::spawn(&["--hang-on", "HANG"]);
    codex.send(&admission_bytes("HANG here"));
    codex.wait_screen("the busy status", |screen| screen.contains(BUSY_MARKER));
    codex.send(b"\x1b");
    let records = codex.wait_rollout("turn_aborted", |records| has_event(records, "turn_aborted"));
    assert_eq!(
        events(&records, "turn_aborted").next().unwrap()["reason"],
        "interrupted"
    );
    codex.wait_screen("idle again", |screen| !screen.contains(BUSY_MARKER));
}

#[test]
fn crash_on_kills_the_process_after_the_turn_opened() {
    let mut codex = FakeCodex::spawn(&["--crash-on", "CRASH"]);
    codex.send(&admission_bytes("CRASH please"));
    let status = codex.wait_exit();
    assert!(!status.success());
    let records = read_records(&codex.rollout_paths()[0]);
    assert_eq!(events(&records, "task_started").count(), 1);
    assert_eq!(
        records.last().unwrap()["payload"]["item"]["type"],
        "UserMessage"
    );
    assert!(!has_event(&records, "task_complete") && !has_event(&records, "turn_aborted"));
}

#[test]
fn replace_rollout_on_moves_the_next_turn_to_a_new_session_file() {
    let mut codex = FakeCodex::spawn(&["--replace-rollout-on", "REPLACE"]);
    codex.send(&admission_bytes("one"));
    codex.wait_rollout("first turn", |records| has_event(records, "task_complete"));
    codex.send(&admission_bytes("REPLACE two"));
    // Each with its first complete line: a file just created may still be empty (this read an
    // empty one once, under a CI run's load).
    let two_files = wait_for("a second file", || {
        Some(codex.rollout_paths()).filter(|paths| paths.len() == 2 && paths.iter().all(|path| !read_records(path).is_empty()))
    });
    let paths = two_files.expect("no replacement rollout");
    let ids: Vec<Value> = paths
        .iter()
        .map(|path| read_records(path)[0]["payload"]["id"].clone())
        .collect();
    assert_ne!(ids[0], ids[1]);
}

#[test]
fn ctrl_d_on_an_empty_composer_exits_cleanly() {
    let mut codex = FakeCodex::spawn(&[]);
    codex.send(b"\x04");
    let status = codex.wait_exit();
    assert!(status.success(), "{status:?}");
}
