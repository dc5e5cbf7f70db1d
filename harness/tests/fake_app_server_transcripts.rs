//! `fake-codex-app-server` against the real `codex app-server` 0.169 transcripts in
//! `fixtures/codex-0.169/app-server/`, plus the paths the transcripts do not cover.
//!
//! Replay: each transcript's CLIENT messages are sent to the fake, in order (thread / turn / item
//! ids and the project dir substituted by the fake's own), each one only after the fake has sent as
//! many messages as the real one had sent by then. The fake's messages must then be the real
//! one's, one for one and in order, after dropping the notifications the fake does not model
//! (`NOT_MODELLED`). "The same" is strict: the same keys everywhere, the same JSON types, the same
//! values, except timestamps (same type), paths (under this test's dirs), `userAgent` and paging
//! cursors; ids must correspond one to one (a fake id stands for exactly one real id), so
//! `thread.sessionId == thread.id`, every `threadId` / `turnId` / `itemId` and the ids of a resumed
//! thread's turns are checked by the same rule.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const BIN: &str = env!("CARGO_BIN_EXE_fake-codex-app-server");
/// Upper bound of any wait; generous because several builds share two cores.
const WAIT_LIMIT: Duration = Duration::from_secs(20);
/// The mock provider's reply in the fixtures; with it the fake's `item.text` equals the real one's.
const FIXTURE_REPLY: &str = "mock reply to: {prompt}";
/// The fixtures' hold: THINK-LONG makes the provider wait 8 s before any output.
const HOLD_PREFIX: &str = "THINK-LONG";
const HOLD_MS: &str = "8000";

/// Notifications of the real app-server that the fake does not send, dropped before comparing:
/// - `configWarning`: no bubblewrap on the capture host's PATH (a host property);
/// - `remoteControl/status/changed`: the remote-control feature's state (disabled), not a thread's;
/// - `warning`: "Model metadata for `mock-model` not found", an artefact of the mock model name;
/// - `deprecationNotice`: advice to paginate on `thread/resume` (no state in it);
/// - `thread/tokenUsage/updated`: token accounting, the fake has no model to count;
/// - `account/rateLimits/updated`: the account's rate limits, from the provider's headers;
/// - `thread/goal/cleared`: the thread-goals feature, unused by wakterm, on `thread/resume`.
const NOT_MODELLED: [&str; 7] = [
    "configWarning",
    "remoteControl/status/changed",
    "warning",
    "deprecationNotice",
    "thread/tokenUsage/updated",
    "account/rateLimits/updated",
    "thread/goal/cleared",
];

/// Keys whose values are wall-clock times: only the JSON type (number or null) must match.
const TIME_KEYS: [&str; 9] = [
    "emittedAtMs",
    "createdAt",
    "updatedAt",
    "recencyAt",
    "startedAt",
    "completedAt",
    "durationMs",
    "startedAtMs",
    "completedAtMs",
];

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169/app-server")
}

/// One message of a transcript.
#[derive(Debug, Clone)]
struct Line {
    proc: u64,
    from_client: bool,
    msg: Value,
}

fn transcript(name: &str) -> Vec<Line> {
    let path = fixture_dir().join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|record| record.get("msg").is_some())
        .map(|record| Line {
            proc: record["proc"].as_u64().unwrap(),
            from_client: record["from"] == "client",
            msg: record["msg"].clone(),
        })
        .collect()
}

fn modelled(msg: &Value) -> bool {
    !msg["method"]
        .as_str()
        .is_some_and(|method| NOT_MODELLED.contains(&method))
}

/// A short name for sequences in failure messages: `result #2`, `turn/completed (completed)`.
fn label(msg: &Value) -> String {
    match msg["method"].as_str() {
        None if msg.get("error").is_some() => format!("error #{}", msg["id"]),
        None => format!("result #{}", msg["id"]),
        Some(method) => {
            let p = &msg["params"];
            let detail = p["status"]["type"]
                .as_str()
                .or(p["turn"]["status"].as_str())
                .or(p["item"]["type"].as_str());
            match detail {
                Some(detail) => format!("{method} ({detail})"),
                None => method.to_owned(),
            }
        }
    }
}

/// A running fake: its stdin, and every line it wrote, parsed, in order.
struct Fake {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Fake {
    fn spawn(home: &Path, cwd: &Path, env: &[(&str, &str)]) -> Fake {
        let mut command = Command::new(BIN);
        command
            .arg("app-server")
            .current_dir(cwd)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", home)
            .env("CODEX_HOME", home)
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        let mut child = command.spawn().expect("spawn fake-codex-app-server");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let value: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("fake wrote a line that is not JSON ({e}): {line}"));
                if tx.send(value).is_err() {
                    break;
                }
            }
        });
        Fake {
            stdin: child.stdin.take(),
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{msg}").expect("write to the fake");
        stdin.flush().unwrap();
    }

    fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        writeln!(stdin, "{line}").expect("write to the fake");
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(&json!({ "id": id, "method": method, "params": params }));
        self.wait_for(&format!("the answer to {method} #{id}"), |m| {
            m["id"] == id && m.get("method").is_none()
        })
    }

    /// Waits until the fake has sent `n` messages in all.
    fn wait_count(&mut self, n: usize, what: &str) {
        let deadline = Instant::now() + WAIT_LIMIT;
        while self.seen.len() < n {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(value) => self.seen.push(value),
                Err(_) => panic!(
                    "waiting for {what}: the fake sent {} of {n} messages: {:?}",
                    self.seen.len(),
                    self.seen.iter().map(label).collect::<Vec<_>>()
                ),
            }
        }
    }

    /// The first message (since the start) that `pred` accepts, waiting for it if needed.
    fn wait_for(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut checked = 0;
        loop {
            if let Some(found) = self.seen[checked..].iter().find(|m| pred(m)) {
                return found.clone();
            }
            checked = self.seen.len();
            self.wait_count(checked + 1, what);
        }
    }

    /// Everything sent from message `from` on, up to the first (from `from` on) that `pred`
    /// accepts, waiting for it if needed.
    fn until(&mut self, from: usize, what: &str, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        loop {
            if let Some(end) = self.seen.iter().skip(from).position(&pred) {
                return self.seen[from..=from + end].to_vec();
            }
            let n = self.seen.len();
            self.wait_count(n + 1, what);
        }
    }

    /// Closes stdin; returns how the process ended and everything it sent.
    fn close(mut self) -> (ExitStatus, Vec<Value>) {
        drop(self.stdin.take());
        let status = self.wait_exit();
        // The reader thread ends at EOF, which closes the channel.
        while let Ok(value) = self.lines.recv_timeout(WAIT_LIMIT) {
            self.seen.push(value);
        }
        (status, std::mem::take(&mut self.seen))
    }

    fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + WAIT_LIMIT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "the fake did not exit");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Per replay: the fixture's ids and paths and the fake's.
struct Mapping {
    /// Real (redacted) id -> fake id, and back.
    ids: BTreeMap<String, String>,
    back: BTreeMap<String, String>,
    real_home: String,
    real_project: String,
    home: String,
    project: String,
}

fn is_redacted_uuid(text: &str) -> bool {
    text.len() == 36 && text.starts_with("00000000-0000-4000-8000-")
}

fn is_uuid(text: &str) -> bool {
    uuid::Uuid::parse_str(text).is_ok() && text.len() == 36
}

impl Mapping {
    fn bind(&mut self, real: &str, fake: &str, at: &str) -> Result<(), String> {
        match (self.ids.get(real), self.back.get(fake)) {
            (None, None) => {
                self.ids.insert(real.to_owned(), fake.to_owned());
                self.back.insert(fake.to_owned(), real.to_owned());
                Ok(())
            }
            (Some(known), _) if known == fake => Ok(()),
            (known, back) => Err(format!(
                "{at}: real id {real} / fake id {fake} break the correspondence \
                 (real id known as {known:?}, fake id stands for {back:?})"
            )),
        }
    }

    fn local_path(&self, real: &str) -> Option<String> {
        if let Some(rest) = real.strip_prefix(&self.real_project) {
            return Some(format!("{}{rest}", self.project));
        }
        real.strip_prefix(&self.real_home)
            .map(|rest| format!("{}{rest}", self.home))
    }

    /// A client message of the transcript, in terms of the fake.
    fn client(&self, msg: &Value) -> Value {
        match msg {
            Value::String(text) if is_redacted_uuid(text) => Value::String(
                self.ids
                    .get(text)
                    .unwrap_or_else(|| {
                        panic!("client message names {text}, not seen from the fake yet")
                    })
                    .clone(),
            ),
            Value::String(text) => {
                Value::String(self.local_path(text).unwrap_or_else(|| text.clone()))
            }
            Value::Array(items) => Value::Array(items.iter().map(|v| self.client(v)).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (k.clone(), self.client(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// Compares one real message with the fake's (rules: module doc).
    fn compare(&mut self, real: &Value, fake: &Value, at: &str, key: &str) -> Result<(), String> {
        if TIME_KEYS.contains(&key) {
            return match (real, fake) {
                (Value::Null, Value::Null) | (Value::Number(_), Value::Number(_)) => Ok(()),
                _ => Err(format!(
                    "{at}: time {real} is {fake} in the fake (not the same type)"
                )),
            };
        }
        match (real, fake) {
            (Value::Object(r), Value::Object(f)) => {
                let (rk, fk): (Vec<_>, Vec<_>) = (r.keys().collect(), f.keys().collect());
                if rk != fk {
                    let missing: Vec<_> = rk.iter().filter(|k| !f.contains_key(**k)).collect();
                    let extra: Vec<_> = fk.iter().filter(|k| !r.contains_key(**k)).collect();
                    return Err(format!(
                        "{at}: keys differ: fake lacks {missing:?}, fake adds {extra:?}"
                    ));
                }
                for (k, rv) in r {
                    self.compare(rv, &f[k], &format!("{at}.{k}"), k)?;
                }
                Ok(())
            }
            (Value::Array(r), Value::Array(f)) => {
                if r.len() != f.len() {
                    return Err(format!(
                        "{at}: {} elements, {} in the fake",
                        r.len(),
                        f.len()
                    ));
                }
                for (i, (rv, fv)) in r.iter().zip(f).enumerate() {
                    self.compare(rv, fv, &format!("{at}[{i}]"), key)?;
                }
                Ok(())
            }
            (Value::String(r), Value::String(f)) if is_redacted_uuid(r) => {
                if !is_uuid(f) {
                    return Err(format!("{at}: real id {r}, fake {f:?} is not a UUID"));
                }
                self.bind(r, f, at)
            }
            (Value::String(r), Value::String(f)) if key == "userAgent" => {
                let (head, tail) = r.split_once(" (").unwrap();
                let tail = tail.rsplit_once(") ").unwrap().1;
                if f.starts_with(&format!("{head} (")) && f.ends_with(tail) {
                    Ok(())
                } else {
                    Err(format!("{at}: userAgent {f:?} is not shaped like {r:?}"))
                }
            }
            (Value::String(_), Value::String(_)) if key.ends_with("BackwardsCursor") => Ok(()),
            (Value::String(r), Value::String(f)) if key == "path" => {
                // The rollout path: same directory layout, named by the (fake) thread id.
                let real_id =
                    &r[r.len() - "00000000-0000-4000-8000-000000000000.jsonl".len()..r.len() - 6];
                let sessions = format!("{}/sessions/", self.home);
                let ok = f.starts_with(&sessions)
                    && f.ends_with(".jsonl")
                    && f.contains("/rollout-")
                    && f.len() == self.local_path(r).map_or(0, |p| p.len());
                if !ok {
                    return Err(format!("{at}: rollout path {f:?} is not shaped like {r:?}"));
                }
                let fake_id = &f[f.len() - 42..f.len() - 6];
                self.bind(real_id, fake_id, at)
            }
            (Value::String(r), Value::String(f)) => match self.local_path(r) {
                Some(local) if local == *f => Ok(()),
                _ if r == f => Ok(()),
                _ => Err(format!("{at}: {r:?} is {f:?} in the fake")),
            },
            _ if real == fake => Ok(()),
            _ => Err(format!("{at}: {real} is {fake} in the fake")),
        }
    }
}

struct Replay {
    /// Per process: the fake's messages.
    sent: Vec<Vec<Value>>,
    mapping: Mapping,
}

/// Replays a transcript's client side against the fake (one fake process per transcript process).
fn replay(name: &str) -> Replay {
    let lines = transcript(name);
    let scenario = name.trim_end_matches(".jsonl");
    let scenario = match scenario {
        "completed-turn" => "completed",
        "interrupted-turn" => "interrupted",
        "resumed-thread" => "resumed",
        other => other,
    };
    let home = tempfile::tempdir().unwrap();
    let project = tempfile::tempdir().unwrap();
    let mut mapping = Mapping {
        ids: BTreeMap::new(),
        back: BTreeMap::new(),
        real_home: format!("/tmp/wkcap-as-{scenario}/codex-home"),
        real_project: format!("/tmp/wkcap-as-{scenario}/project"),
        home: home.path().display().to_string(),
        project: project.path().display().to_string(),
    };
    let env = [
        ("WAKTERM_FAKE_APP_SERVER_REPLY", FIXTURE_REPLY),
        ("WAKTERM_FAKE_APP_SERVER_REPLY_DELAY_MS", "10"),
        ("WAKTERM_FAKE_APP_SERVER_HOLD_PREFIX", HOLD_PREFIX),
        ("WAKTERM_FAKE_APP_SERVER_HOLD_MS", HOLD_MS),
    ];
    let mut procs: Vec<u64> = lines.iter().map(|l| l.proc).collect();
    procs.dedup();
    let mut sent = Vec::new();
    for proc in procs {
        let lines: Vec<&Line> = lines.iter().filter(|l| l.proc == proc).collect();
        let expected: Vec<&Value> = lines
            .iter()
            .filter(|l| !l.from_client && modelled(&l.msg))
            .map(|l| &l.msg)
            .collect();
        let mut fake = Fake::spawn(home.path(), project.path(), &env);
        let mut compared = 0;
        let mut check = |seen: &[Value], mapping: &mut Mapping, upto: usize| {
            for i in compared..upto {
                let where_ = format!("{name} proc {proc} message {i} ({})", label(expected[i]));
                if let Err(diff) = mapping.compare(expected[i], &seen[i], &where_, "") {
                    panic!(
                        "{diff}\n real: {}\n fake: {}\n real sequence: {:?}\n fake sequence: {:?}",
                        expected[i],
                        seen[i],
                        expected.iter().map(|m| label(m)).collect::<Vec<_>>(),
                        seen.iter().map(label).collect::<Vec<_>>()
                    );
                }
            }
            compared = compared.max(upto);
        };
        let mut before = 0;
        for line in &lines {
            if !line.from_client {
                before += usize::from(modelled(&line.msg));
                continue;
            }
            fake.wait_count(
                before,
                &format!("what the real one sent before {}", line.msg),
            );
            check(&fake.seen, &mut mapping, before);
            let msg = mapping.client(&line.msg);
            fake.send(&msg);
        }
        fake.wait_count(expected.len(), "the rest of the transcript");
        let (status, seen) = fake.close();
        assert_eq!(
            status.code(),
            Some(0),
            "{name} proc {proc}: exit after stdin closed"
        );
        let fake_labels: Vec<String> = seen.iter().map(label).collect();
        let real_labels: Vec<String> = expected.iter().map(|m| label(m)).collect();
        assert_eq!(
            fake_labels, real_labels,
            "{name} proc {proc}: the message sequence"
        );
        check(&seen, &mut mapping, expected.len());
        sent.push(seen);
    }
    Replay { sent, mapping }
}

#[test]
fn completed_turn_matches_the_real_transcript() {
    let replay = replay("completed-turn.jsonl");
    let sent = &replay.sent[0];
    let result = &sent[1]["result"]["thread"];
    assert_eq!(result["id"], result["sessionId"], "thread id == session id");
    assert_eq!(result["turns"], json!([]));
    let done = sent.last().unwrap();
    assert_eq!(done["method"], "turn/completed");
    assert_eq!(done["params"]["turn"]["status"], "completed");
    assert_eq!(
        done["params"]["turn"]["items"][0]["text"],
        "mock reply to: hello app-server fixture"
    );
    assert!(
        sent.iter().all(|m| m.get("jsonrpc").is_none()),
        "no jsonrpc field"
    );
    assert!(
        sent.iter()
            .all(|m| m.get("method").is_none() || m["emittedAtMs"].is_u64()),
        "every notification carries emittedAtMs"
    );
}

#[test]
fn two_turns_match_the_real_transcript() {
    let replay = replay("two-turns.jsonl");
    let turns: Vec<&Value> = replay.sent[0]
        .iter()
        .filter(|m| m["method"] == "turn/completed")
        .collect();
    assert_eq!(turns.len(), 2);
    assert_ne!(
        turns[0]["params"]["turn"]["id"], turns[1]["params"]["turn"]["id"],
        "a new turn id per turn"
    );
    assert_eq!(
        turns[0]["params"]["threadId"], turns[1]["params"]["threadId"],
        "one thread"
    );
}

#[test]
fn interrupted_turn_matches_the_real_transcript() {
    let replay = replay("interrupted-turn.jsonl");
    let done = replay.sent[0].last().unwrap();
    assert_eq!(done["params"]["turn"]["status"], "interrupted");
    assert_eq!(done["params"]["turn"]["items"], json!([]));
    assert!(
        !replay.sent[0]
            .iter()
            .any(|m| m["params"]["item"]["type"] == "agentMessage"),
        "no agent message in an interrupted held turn"
    );
}

#[test]
fn resumed_thread_matches_the_real_transcript_across_processes() {
    let replay = replay("resumed-thread.jsonl");
    let (first, second) = (&replay.sent[0], &replay.sent[1]);
    let started = &first[1]["result"]["thread"];
    let resumed = &second
        .iter()
        .find(|m| m["id"] == 1 && m.get("result").is_some())
        .unwrap()["result"]["thread"];
    assert_eq!(resumed["id"], started["id"], "the same thread");
    assert_eq!(
        resumed["sessionId"], started["sessionId"],
        "the same session"
    );
    assert_eq!(resumed["path"], started["path"], "the same rollout path");
    let earlier = resumed["turns"].as_array().unwrap();
    assert_eq!(earlier.len(), 1);
    let first_turn = first
        .iter()
        .find(|m| m["method"] == "turn/completed")
        .unwrap();
    assert_eq!(earlier[0]["id"], first_turn["params"]["turn"]["id"]);
    assert_eq!(
        earlier[0]["items"][1]["text"],
        "mock reply to: turn before the app-server restart"
    );
    assert!(
        !second.iter().any(|m| m["method"] == "thread/started"),
        "no thread/started on resume"
    );
    assert_eq!(replay.mapping.ids.len(), replay.mapping.back.len());
}

// ---------------------------------------------------------------- beyond the transcripts

/// A fake after `initialize` + `initialized` + `thread/start`: returns it and the thread id.
fn ready(home: &Path, project: &Path, env: &[(&str, &str)]) -> (Fake, String) {
    let mut fake = Fake::spawn(home, project, env);
    fake.request(
        0,
        "initialize",
        json!({ "clientInfo": { "name": "wakterm-test", "title": null, "version": "0.1.0" } }),
    );
    fake.send(&json!({ "method": "initialized" }));
    let start = fake.request(
        1,
        "thread/start",
        json!({ "cwd": project, "approvalPolicy": "never", "sandbox": "read-only" }),
    );
    let thread_id = start["result"]["thread"]["id"].as_str().unwrap().to_owned();
    fake.wait_for("thread/started", |m| m["method"] == "thread/started");
    (fake, thread_id)
}

fn text_input(text: &str) -> Value {
    json!([{ "type": "text", "text": text }])
}

fn labels(messages: &[Value]) -> Vec<String> {
    messages.iter().map(label).collect()
}

const HELD: [(&str, &str); 3] = [
    ("WAKTERM_FAKE_APP_SERVER_REPLY", FIXTURE_REPLY),
    ("WAKTERM_FAKE_APP_SERVER_HOLD_PREFIX", HOLD_PREFIX),
    ("WAKTERM_FAKE_APP_SERVER_HOLD_MS", HOLD_MS),
];

/// Observed from the real 0.169 (not in the committed fixtures): a turn/start while a turn runs
/// is answered with the RUNNING turn's id; its user message joins that turn and the turn answers it.
#[test]
fn turn_start_while_busy_steers_the_running_turn() {
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut fake, thread) = ready(home.path(), project.path(), &HELD);
    let first = fake.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("THINK-LONG first turn") }),
    );
    let turn_id = first["result"]["turn"]["id"].clone();
    fake.wait_for("the user message", |m| m["method"] == "item/completed");
    let from = fake.seen.len();
    let steer = fake.request(
        3,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("second while busy") }),
    );
    assert_eq!(
        steer["result"]["turn"]["id"], turn_id,
        "the result names the running turn"
    );
    assert_eq!(steer["result"]["turn"]["status"], "inProgress");
    let rest = fake.until(from, "turn/completed", |m| m["method"] == "turn/completed");
    assert_eq!(
        labels(&rest),
        [
            "result #3",
            "item/started (userMessage)",
            "item/completed (userMessage)",
            "item/started (agentMessage)",
            "item/agentMessage/delta",
            "item/completed (agentMessage)",
            "thread/status/changed (idle)",
            "turn/completed (completed)",
        ]
    );
    assert!(rest[1..].iter().all(|m| m["params"]["turnId"] == turn_id
        || m["params"]["turn"]["id"] == turn_id
        || m["params"]["status"]["type"] == "idle"));
    assert_eq!(
        rest[2]["params"]["item"]["content"][0]["text"],
        "second while busy"
    );
    assert_eq!(
        rest[7]["params"]["turn"]["items"][0]["text"],
        "mock reply to: second while busy"
    );
    assert_eq!(fake.close().0.code(), Some(0));
}

#[test]
fn turn_start_while_busy_is_refused_when_asked() {
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut env = HELD.to_vec();
    env.push(("WAKTERM_FAKE_APP_SERVER_HOLD_MS", "2000"));
    env.push(("WAKTERM_FAKE_APP_SERVER_BUSY", "refuse"));
    let (mut fake, thread) = ready(home.path(), project.path(), &env);
    let first = fake.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("THINK-LONG first") }),
    );
    let refused = fake.request(
        3,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("second") }),
    );
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert!(refused.get("result").is_none());
    let done = fake.wait_for("turn/completed", |m| m["method"] == "turn/completed");
    assert_eq!(done["params"]["turn"]["id"], first["result"]["turn"]["id"]);
    assert_eq!(
        done["params"]["turn"]["items"][0]["text"], "mock reply to: THINK-LONG first",
        "the first prompt is answered"
    );
}

/// The shape of the real 0.169's failed turn (provider answering HTTP 500 until retries end).
#[test]
fn a_failing_prompt_ends_the_turn_failed_and_the_thread_goes_on() {
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env = [("WAKTERM_FAKE_APP_SERVER_FAIL_PREFIX", "FAIL")];
    let (mut fake, thread) = ready(home.path(), project.path(), &env);
    let from = fake.seen.len();
    fake.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("FAIL now") }),
    );
    let turn = fake.until(from, "turn/completed", |m| m["method"] == "turn/completed");
    assert_eq!(
        labels(&turn),
        [
            "result #2",
            "thread/status/changed (active)",
            "turn/started (inProgress)",
            "item/started (userMessage)",
            "item/completed (userMessage)",
            "thread/status/changed (systemError)",
            "error",
            "turn/completed (failed)",
        ]
    );
    let error = &turn[6]["params"];
    assert_eq!(error["willRetry"], false);
    assert_eq!(error["error"]["codexErrorInfo"], "internalServerError");
    let completed = &turn[7]["params"]["turn"];
    assert_eq!(completed["error"], error["error"]);
    assert_eq!(completed["items"], json!([]));
    let from = fake.seen.len();
    fake.request(
        3,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("and now?") }),
    );
    let next = fake.until(from, "turn/completed", |m| m["method"] == "turn/completed");
    assert_eq!(
        next.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );
    assert_eq!(
        next.last().unwrap()["params"]["turn"]["items"][0]["text"],
        "done: and now?",
        "the default reply"
    );
}

#[test]
fn an_exit_prompt_kills_the_process_mid_turn_and_resume_reports_the_turn_interrupted() {
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let env = [("WAKTERM_FAKE_APP_SERVER_EXIT_PREFIX", "DIE")];
    let (mut fake, thread) = ready(home.path(), project.path(), &env);
    let started = fake.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("DIE here") }),
    );
    let turn_id = started["result"]["turn"]["id"].clone();
    let status = fake.wait_exit();
    assert_eq!(status.signal(), Some(9), "killed by SIGKILL: {status:?}");
    let (_, seen) = fake.close();
    assert_eq!(
        labels(&seen[3..]),
        [
            "result #2",
            "thread/status/changed (active)",
            "turn/started (inProgress)",
            "item/started (userMessage)",
            "item/completed (userMessage)"
        ]
    );
    let mut again = Fake::spawn(home.path(), project.path(), &[]);
    again.request(
        0,
        "initialize",
        json!({ "clientInfo": { "name": "wakterm-test", "version": "0.1.0" } }),
    );
    let resumed = again.request(1, "thread/resume", json!({ "threadId": thread }));
    let turns = &resumed["result"]["thread"]["turns"];
    assert_eq!(turns.as_array().unwrap().len(), 1);
    assert_eq!(turns[0]["id"], turn_id);
    assert_eq!(turns[0]["status"], "interrupted");
    assert_eq!(turns[0]["items"][0]["content"][0]["text"], "DIE here");
    // The thread takes new turns after the resume.
    let from = again.seen.len();
    again.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("still there?") }),
    );
    let next = again.until(from, "turn/completed", |m| m["method"] == "turn/completed");
    assert_eq!(
        next.last().unwrap()["params"]["turn"]["status"],
        "completed"
    );
    assert_eq!(again.close().0.code(), Some(0));
}

/// Refusals, worded as the real 0.169 words them (observed against it; -32600 throughout).
#[test]
fn protocol_errors_are_answered_like_the_real_one() {
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut fake = Fake::spawn(home.path(), project.path(), &HELD);
    let early = fake.request(7, "thread/start", json!({}));
    assert_eq!(
        early["error"],
        json!({ "code": -32600, "message": "Not initialized" })
    );
    fake.request(
        0,
        "initialize",
        json!({ "clientInfo": { "name": "wakterm-test", "version": "0.1.0" } }),
    );
    let again = fake.request(
        8,
        "initialize",
        json!({ "clientInfo": { "name": "wakterm-test", "version": "0.1.0" } }),
    );
    assert_eq!(again["error"]["message"], "Already initialized");
    fake.send_raw("this is not json");
    let unknown = fake.request(9, "no/such/method", json!({}));
    assert_eq!(unknown["error"]["code"], -32600);
    assert!(unknown["error"]["message"].as_str().unwrap().starts_with(
        "Invalid request: unknown variant `no/such/method`, expected one of `initialize`"
    ));
    let no_params = fake.request(10, "thread/start", Value::Null);
    assert_eq!(
        no_params["error"]["message"],
        "Invalid request: missing field `params`"
    );
    let ghost = "00000000-0000-4000-8000-00000000dead";
    let missing = fake.request(
        11,
        "turn/start",
        json!({ "threadId": ghost, "input": text_input("x") }),
    );
    assert_eq!(
        missing["error"]["message"],
        format!("thread not found: {ghost}")
    );
    let unknown_resume = fake.request(12, "thread/resume", json!({ "threadId": ghost }));
    assert_eq!(
        unknown_resume["error"]["message"],
        format!("no rollout found for thread id {ghost}")
    );
    let start = fake.request(1, "thread/start", json!({ "cwd": project.path() }));
    let thread = start["result"]["thread"]["id"].as_str().unwrap().to_owned();
    let idle = fake.request(
        13,
        "turn/interrupt",
        json!({ "threadId": thread, "turnId": "t" }),
    );
    assert_eq!(idle["error"]["message"], "no active turn to interrupt");
    let turn = fake.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("THINK-LONG hold") }),
    );
    let turn_id = turn["result"]["turn"]["id"].as_str().unwrap();
    let wrong = fake.request(
        14,
        "turn/interrupt",
        json!({ "threadId": thread, "turnId": "wrong-turn" }),
    );
    assert_eq!(
        wrong["error"]["message"],
        format!("expected active turn id wrong-turn but found {turn_id}")
    );
    let ok = fake.request(
        3,
        "turn/interrupt",
        json!({ "threadId": thread, "turnId": turn_id }),
    );
    assert_eq!(ok["result"], json!({}));
    let (status, seen) = fake.close();
    assert_eq!(status.code(), Some(0));
    assert!(
        seen.iter()
            .all(|m| m.get("id").is_some() || m.get("method").is_some()),
        "nothing answers the non-JSON line"
    );
    assert!(seen
        .iter()
        .filter(|m| m.get("error").is_some())
        .all(|m| m.get("result").is_none()));
}

#[test]
fn a_thread_without_turns_cannot_be_resumed_by_another_process() {
    // As with the real one: its rollout (our state file) only appears at the first turn/start.
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (fake, thread) = ready(home.path(), project.path(), &[]);
    assert_eq!(fake.close().0.code(), Some(0));
    let mut again = Fake::spawn(home.path(), project.path(), &[]);
    again.request(
        0,
        "initialize",
        json!({ "clientInfo": { "name": "wakterm-test", "version": "0.1.0" } }),
    );
    let resumed = again.request(1, "thread/resume", json!({ "threadId": thread }));
    assert_eq!(
        resumed["error"]["message"],
        format!("no rollout found for thread id {thread}")
    );
}

#[test]
fn end_of_stdin_during_a_held_turn_exits_0_at_once() {
    let (home, project) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut fake, thread) = ready(home.path(), project.path(), &HELD);
    fake.request(
        2,
        "turn/start",
        json!({ "threadId": thread, "input": text_input("THINK-LONG forever") }),
    );
    let t = Instant::now();
    let (status, _) = fake.close();
    assert_eq!(status.code(), Some(0));
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "did not wait for the 8 s hold"
    );
}
