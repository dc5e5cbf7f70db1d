//! A fake `codex app-server` (Codex 0.169) on stdio, for tests, `wakterm demo --managed` and as
//! the reference of the simulator's managed-session model (`fake-codex-app-server`).
//!
//! It speaks the real one's wire format, as captured in `fixtures/codex-0.169/app-server/`: one
//! JSON object per line in both directions, no `jsonrpc` field on either side, and an extra
//! top-level `emittedAtMs` on every server notification. Supported:
//!
//! - `initialize` (result `userAgent`, `codexHome`, `platformFamily`, `platformOs`) and the
//!   `initialized` notification; any other request before `initialize` is refused
//!   `Not initialized`, a second `initialize` `Already initialized` (as the real one answers);
//! - `thread/start`: result `{thread: {id, sessionId (== id), path, turns: [], ...}, ...}`, then
//!   `thread/started` (after the result);
//! - `thread/resume {threadId}`: the same thread, `thread.turns` = its earlier turns in full
//!   (`itemsView: "full"`), after a `thread/status/changed` (`idle`); no `thread/started`; a
//!   server request the thread's turn still waits for is sent again after the result, same id
//!   and params (as the real 0.169 does). It
//!   works from a NEW process: every thread is kept in a JSON file (see "State" below);
//! - `turn/start {threadId, input: [{type: "text", text}]}`: result `{turn: {id, status:
//!   "inProgress", ...}}`, `thread/status/changed` (`active`), `turn/started`, `item/started` +
//!   `item/completed` (`userMessage`), then after the reply delay `item/started` (`agentMessage`),
//!   `item/agentMessage/delta`, `item/completed` (`item.text` = the reply),
//!   `thread/status/changed` (`idle`) and `turn/completed` (`completed`, `items` = the agent
//!   message, `itemsView: "summary"`);
//! - `turn/start` while a turn of that thread runs: STEERS it, as the real 0.169 does (observed
//!   against the installed 0.169, not in the committed fixtures): the result names the RUNNING
//!   turn, a `userMessage` item pair follows in that turn, no new `turn/started`, and the turn then
//!   answers the latest message. `WAKTERM_FAKE_APP_SERVER_BUSY=refuse` refuses it instead, with a
//!   JSON-RPC error of our own wording (the real one has no such error);
//! - `turn/interrupt {threadId, turnId}`: result `{}`, `thread/status/changed` (`idle`),
//!   `turn/completed` with `status: "interrupted"`, `items: []`, `itemsView: "notLoaded"`. No
//!   running turn: `no active turn to interrupt`; another turn id: `expected active turn id X but
//!   found Y` (both as the real one answers);
//! - anything else: `-32600 Invalid request: unknown variant ...` (the real one answers unknown
//!   methods with -32600 and serde's message, not -32601); client notifications other than
//!   `initialized`, client responses and lines that are not JSON objects are ignored (the real one
//!   answers none of them);
//! - end of stdin: exit 0 at once (the protocol has no shutdown request; the real one exits ~30 ms
//!   after stdin closes).
//!
//! Ids: thread, turn and `userMessage` item ids are fresh UUID v4 (the real ones are v7); the
//! `agentMessage` item id is `msg_mock_N`, N counting agent messages of this process (the real one
//! takes the provider's message id, which is `msg_mock_N` with the mock provider of the fixtures),
//! never below the number of agent messages a resumed thread already holds.
//!
//! # Knobs (environment)
//!
//! | variable | default | effect |
//! |---|---|---|
//! | `WAKTERM_FAKE_APP_SERVER_REPLY` | `done: {prompt}` | reply template (`{prompt}` = the trimmed prompt), as the fake TUI's `--reply` |
//! | `WAKTERM_FAKE_APP_SERVER_REPLY_DELAY_MS` | `50` | time from the user message to the reply |
//! | `WAKTERM_FAKE_APP_SERVER_HOLD_PREFIX` | unset | a prompt starting with it is held `HOLD_MS` before any agent output (the provider's THINK rule: interruptible, nothing streamed) |
//! | `WAKTERM_FAKE_APP_SERVER_HOLD_MS` | `8000` | how long a held turn waits |
//! | `WAKTERM_FAKE_APP_SERVER_FAIL_PREFIX` | unset | a prompt starting with it fails after the reply delay: `thread/status/changed` (`systemError`), `error` (`willRetry: false`), `turn/completed` (`failed`, with `turn.error`), as the real one ends after its retries |
//! | `WAKTERM_FAKE_APP_SERVER_EXIT_PREFIX` | unset | a prompt starting with it opens the turn (through the `userMessage` items, saved in the state file), then the process kills itself with SIGKILL (the fake TUI's `--crash-on`) |
//! | `WAKTERM_FAKE_APP_SERVER_APPROVAL_PREFIX` | unset | a prompt starting with it opens a turn that first asks the client `item/commandExecution/requestApproval` (a server request, id a number) and waits for the answer however long it takes (the real one has no timeout); any answer (result or error) is followed by `serverRequest/resolved` and the turn's reply |
//! | `WAKTERM_FAKE_APP_SERVER_BUSY` | `steer` | `turn/start` on a busy thread: `steer` (the real behaviour) or `refuse` |
//! | `WAKTERM_FAKE_APP_SERVER_EXIT_AFTER_REPLY_PREFIX` | unset | a prompt starting with it gets its `turn/start` answered (the turn accepted, with its id), then the process kills itself with SIGKILL before any notification of the turn (the real one answers before it notifies) |
//! | `WAKTERM_FAKE_APP_SERVER_REFUSE_PREFIX` | unset | a prompt starting with it gets its `turn/start` answered with the error the real one gives when the thread's submission channel is closed (`-32603 failed to start turn: ...`); no turn starts and the thread keeps nothing of it (MGD-7) |
//! | `WAKTERM_FAKE_APP_SERVER_RESUME_SESSION` | unset | `thread/resume` answers the thread under this `sessionId` instead of its own (a thread resumed into another session: MGD-2's refusal) |
//! | `WAKTERM_FAKE_APP_SERVER_STATE_DIR` | `$CODEX_HOME/fake-app-server` | where threads are kept |
//! | `CODEX_HOME` | `$HOME/.codex` | reported as `codexHome`; rollout paths in `thread.path` live under it |
//!
//! Prefixes are matched against the prompt without its leading white space; an empty value is the
//! same as unset. A steering message is matched too (it decides how the steered turn ends).
//!
//! # State
//!
//! Each thread is `STATE_DIR/threads/<thread-id>.json` (written atomically), created at its first
//! `turn/start` (the real rollout also appears only then, so resuming a thread that never had a
//! turn fails in a new process, as with the real one) and rewritten when a turn starts, is steered
//! and ends. A turn still `inProgress` in the file when another process resumes the thread (its
//! process died) is reported `interrupted` (our choice; not captured from the real one).
//!
//! # Known differences from the real 0.169
//!
//! - Notifications the fake does not model: `configWarning`, `remoteControl/status/changed`,
//!   `warning` (unknown model metadata), `deprecationNotice`, `thread/tokenUsage/updated`,
//!   `account/rateLimits/updated`, `thread/goal/cleared`, and the retry `error`s (`willRetry:
//!   true`) before a failed turn.
//! - The rollout at `thread.path` (created at a thread's first turn, continued by the first turn
//!   after a resume in a new process, and held open by the process from then on: whether the
//!   real one holds it from the resume is not captured) has the fake TUI's record
//!   shapes (`RolloutRecorder`): each turn's start, its user messages (steers too), its final
//!   answer and end, or an interrupt's abort; a failed turn writes no end record (the real
//!   one's is not captured). No other methods (`thread/read`, `turn/steer`, ...).
//! - Keys inside `params` and `result` come out sorted (the real one's order differs; JSON does
//!   not care); the envelope keeps the real order.
//! - `userAgent` names `wakterm-fake` instead of the host OS; `model` / `modelProvider` are the
//!   fixtures' `mock-model` / `mock`.

use std::collections::BTreeMap;
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::fake_codex::rollout_records::{RolloutRecorder, TurnRecord, ABORT_REASON_INTERRUPTED};
use crate::rollout_writer::{rollout_path, RolloutWriter, SessionMeta, CODEX_CLI_VERSION};

pub const EXIT_OK: i32 = 0;
pub const EXIT_IO_ERROR: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

pub const ENV_REPLY: &str = "WAKTERM_FAKE_APP_SERVER_REPLY";
pub const ENV_REPLY_DELAY_MS: &str = "WAKTERM_FAKE_APP_SERVER_REPLY_DELAY_MS";
pub const ENV_HOLD_PREFIX: &str = "WAKTERM_FAKE_APP_SERVER_HOLD_PREFIX";
pub const ENV_HOLD_MS: &str = "WAKTERM_FAKE_APP_SERVER_HOLD_MS";
pub const ENV_FAIL_PREFIX: &str = "WAKTERM_FAKE_APP_SERVER_FAIL_PREFIX";
pub const ENV_EXIT_PREFIX: &str = "WAKTERM_FAKE_APP_SERVER_EXIT_PREFIX";
pub const ENV_BUSY: &str = "WAKTERM_FAKE_APP_SERVER_BUSY";
pub const ENV_APPROVAL_PREFIX: &str = "WAKTERM_FAKE_APP_SERVER_APPROVAL_PREFIX";
pub const ENV_STATE_DIR: &str = "WAKTERM_FAKE_APP_SERVER_STATE_DIR";
pub const ENV_RESUME_SESSION: &str = "WAKTERM_FAKE_APP_SERVER_RESUME_SESSION";
pub const ENV_EXIT_AFTER_REPLY_PREFIX: &str = "WAKTERM_FAKE_APP_SERVER_EXIT_AFTER_REPLY_PREFIX";
pub const ENV_REFUSE_PREFIX: &str = "WAKTERM_FAKE_APP_SERVER_REFUSE_PREFIX";

/// Same default as the fake TUI's `--reply`.
pub const DEFAULT_REPLY_TEMPLATE: &str = "done: {prompt}";
pub const DEFAULT_REPLY_DELAY_MS: u64 = 50;
/// The capture's THINK-LONG hold.
pub const DEFAULT_HOLD_MS: u64 = 8000;
/// Upper bound of a delay knob: an hour is a configuration mistake, not a test.
pub const MAX_DELAY_MS: u64 = 60 * 60 * 1000;
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";

/// The JSON-RPC code the real 0.169 uses for every refusal we reproduce (unknown method, bad
/// params, not initialized, thread not found, no active turn).
pub const INVALID_REQUEST: i64 = -32600;
/// Our own failures (the state file cannot be read).
pub const INTERNAL_ERROR: i64 = -32603;

/// What the fixtures' config names (`mock-model` on provider `mock`).
pub const MODEL: &str = "mock-model";
pub const MODEL_PROVIDER: &str = "mock";
/// `thread.source` of app-server threads.
pub const THREAD_SOURCE: &str = "vscode";
/// Prefix of agent message item ids (the mock provider's message ids).
pub const AGENT_MESSAGE_ID_PREFIX: &str = "msg_mock_";
/// Message of the final `error` of a failed turn: what the real one reports when the provider
/// keeps answering HTTP 500 (`codexErrorInfo: "internalServerError"`).
pub const FAILED_TURN_MESSAGE: &str =
    "We\u{2019}re currently experiencing high demand, which may cause temporary errors.";

/// The requests this fake answers (every other method is refused as unknown).
pub const METHODS: [&str; 5] = [
    "initialize",
    "thread/start",
    "thread/resume",
    "turn/start",
    "turn/interrupt",
];

const STATE_FORMAT: u32 = 1;
const THREADS_DIR: &str = "threads";

/// What a `turn/start` on a busy thread does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyTurnStart {
    /// Join the running turn as a steering message (the real 0.169).
    Steer,
    /// Refuse with a JSON-RPC error (a stricter server; wording ours).
    Refuse,
}

/// How turns end, chosen per prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Behaviour {
    pub reply_template: String,
    pub reply_delay_ms: u64,
    pub hold_prefix: Option<String>,
    pub hold_ms: u64,
    pub fail_prefix: Option<String>,
    pub exit_prefix: Option<String>,
    pub approval_prefix: Option<String>,
    pub busy: BusyTurnStart,
    /// `thread/resume` answers under this session id instead of the thread's own.
    pub resume_session: Option<String>,
    pub exit_after_reply_prefix: Option<String>,
    /// `turn/start` of such a prompt is refused with an error (MGD-7).
    pub refuse_prefix: Option<String>,
}

impl Default for Behaviour {
    fn default() -> Self {
        Behaviour {
            reply_template: DEFAULT_REPLY_TEMPLATE.to_owned(),
            reply_delay_ms: DEFAULT_REPLY_DELAY_MS,
            hold_prefix: None,
            hold_ms: DEFAULT_HOLD_MS,
            fail_prefix: None,
            exit_prefix: None,
            approval_prefix: None,
            busy: BusyTurnStart::Steer,
            resume_session: None,
            exit_after_reply_prefix: None,
            refuse_prefix: None,
        }
    }
}

impl Behaviour {
    fn starts_with(prefix: &Option<String>, prompt: &str) -> bool {
        prefix
            .as_deref()
            .is_some_and(|p| !p.is_empty() && prompt.trim_start().starts_with(p))
    }

    fn plan(&self, prompt: &str) -> Plan {
        let delay_ms = if Self::starts_with(&self.hold_prefix, prompt) {
            self.hold_ms
        } else {
            self.reply_delay_ms
        };
        let ending = if Self::starts_with(&self.fail_prefix, prompt) {
            Ending::Fail
        } else {
            Ending::Reply
        };
        Plan {
            delay_ms,
            ending,
            exit_now: Self::starts_with(&self.exit_prefix, prompt),
            ask_approval: Self::starts_with(&self.approval_prefix, prompt),
            exit_after_reply: Self::starts_with(&self.exit_after_reply_prefix, prompt),
            refuse: Self::starts_with(&self.refuse_prefix, prompt),
        }
    }

    fn reply_for(&self, prompt: &str) -> String {
        self.reply_template
            .replace(PROMPT_PLACEHOLDER, prompt.trim())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    pub codex_home: PathBuf,
    pub state_dir: PathBuf,
    /// Default `cwd` of new threads (the process's working directory).
    pub cwd: PathBuf,
    pub behaviour: Behaviour,
}

impl ServerConfig {
    /// Reads the knobs through `var` (the process environment in `run`). `cwd` is the default
    /// working directory of threads.
    pub fn from_env(var: impl Fn(&str) -> Option<String>, cwd: PathBuf) -> Result<Self, String> {
        let set = |name: &str| var(name).filter(|value| !value.is_empty());
        let codex_home = match set("CODEX_HOME") {
            Some(dir) => PathBuf::from(dir),
            None => PathBuf::from(set("HOME").ok_or("neither $CODEX_HOME nor $HOME is set")?)
                .join(".codex"),
        };
        let millis = |name: &str, default: u64| -> Result<u64, String> {
            match set(name) {
                None => Ok(default),
                Some(text) => match text.trim().parse::<u64>() {
                    Ok(ms) if ms <= MAX_DELAY_MS => Ok(ms),
                    _ => Err(format!(
                        "{name}={text:?}: want milliseconds, 0..={MAX_DELAY_MS}"
                    )),
                },
            }
        };
        let busy = match set(ENV_BUSY).as_deref() {
            None | Some("steer") => BusyTurnStart::Steer,
            Some("refuse") => BusyTurnStart::Refuse,
            Some(other) => return Err(format!("{ENV_BUSY}={other:?}: want steer or refuse")),
        };
        let behaviour = Behaviour {
            reply_template: set(ENV_REPLY).unwrap_or_else(|| DEFAULT_REPLY_TEMPLATE.to_owned()),
            reply_delay_ms: millis(ENV_REPLY_DELAY_MS, DEFAULT_REPLY_DELAY_MS)?,
            hold_prefix: set(ENV_HOLD_PREFIX),
            hold_ms: millis(ENV_HOLD_MS, DEFAULT_HOLD_MS)?,
            fail_prefix: set(ENV_FAIL_PREFIX),
            exit_prefix: set(ENV_EXIT_PREFIX),
            approval_prefix: set(ENV_APPROVAL_PREFIX),
            busy,
            resume_session: set(ENV_RESUME_SESSION),
            exit_after_reply_prefix: set(ENV_EXIT_AFTER_REPLY_PREFIX),
            refuse_prefix: set(ENV_REFUSE_PREFIX),
        };
        let state_dir = set(ENV_STATE_DIR)
            .map(PathBuf::from)
            .unwrap_or_else(|| codex_home.join("fake-app-server"));
        Ok(ServerConfig {
            codex_home,
            state_dir,
            cwd,
            behaviour,
        })
    }
}

/// One message to the client.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    Response {
        id: Value,
        result: Value,
    },
    Error {
        id: Value,
        code: i64,
        message: String,
    },
    Notification {
        method: String,
        params: Value,
        emitted_at_ms: u64,
    },
    /// A server request: the client must answer it (`id` with `result` or `error`).
    Request {
        id: Value,
        method: String,
        params: Value,
    },
}

#[derive(Serialize)]
struct RequestLine<'a> {
    id: &'a Value,
    method: &'a str,
    params: &'a Value,
}

#[derive(Serialize)]
struct ResponseLine<'a> {
    id: &'a Value,
    result: &'a Value,
}

#[derive(Serialize)]
struct ErrorLine<'a> {
    error: ErrorBody<'a>,
    id: &'a Value,
}

#[derive(Serialize)]
struct ErrorBody<'a> {
    code: i64,
    message: &'a str,
}

#[derive(Serialize)]
struct NotificationLine<'a> {
    method: &'a str,
    params: &'a Value,
    #[serde(rename = "emittedAtMs")]
    emitted_at_ms: u64,
}

impl Outgoing {
    /// The wire form: one line of JSON, without the newline. The envelope keeps the real one's
    /// key order (`id, result` / `error, id` / `method, params, emittedAtMs`).
    pub fn to_line(&self) -> String {
        let encoded = match self {
            Outgoing::Response { id, result } => {
                serde_json::to_string(&ResponseLine { id, result })
            }
            Outgoing::Error { id, code, message } => serde_json::to_string(&ErrorLine {
                error: ErrorBody {
                    code: *code,
                    message,
                },
                id,
            }),
            Outgoing::Notification {
                method,
                params,
                emitted_at_ms,
            } => serde_json::to_string(&NotificationLine {
                method,
                params,
                emitted_at_ms: *emitted_at_ms,
            }),
            Outgoing::Request { id, method, params } => serde_json::to_string(&RequestLine { id, method, params }),
        };
        encoded.expect("JSON values always serialise")
    }

    pub fn to_value(&self) -> Value {
        serde_json::from_str(&self.to_line()).expect("our own line is JSON")
    }

    /// The notification's method, or None for a response.
    pub fn method(&self) -> Option<&str> {
        match self {
            Outgoing::Notification { method, .. } => Some(method),
            _ => None,
        }
    }
}

/// What one input (or one timer) produced.
#[derive(Debug, Default, PartialEq)]
pub struct Reaction {
    pub messages: Vec<Outgoing>,
    /// The exit prefix matched: write `messages`, then die by SIGKILL.
    pub crash: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Reply,
    Fail,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    delay_ms: u64,
    ending: Ending,
    exit_now: bool,
    exit_after_reply: bool,
    ask_approval: bool,
    refuse: bool,
}

/// A thread as kept in its state file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct StoredThread {
    format: u32,
    id: String,
    cwd: String,
    path: String,
    created_at: u64,
    updated_at: u64,
    preview: String,
    originator: String,
    approval_policy: String,
    sandbox: String,
    /// Turns in their full JSON form (`itemsView: "full"`), oldest first.
    turns: Vec<Value>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ThreadStatus {
    Idle,
    Active,
    SystemError,
}

impl ThreadStatus {
    fn to_json(self) -> Value {
        match self {
            ThreadStatus::Idle => json!({ "type": "idle" }),
            ThreadStatus::Active => json!({ "type": "active", "activeFlags": [] }),
            ThreadStatus::SystemError => json!({ "type": "systemError" }),
        }
    }
}

#[derive(Debug, Clone)]
struct ActiveTurn {
    id: String,
    started_at_secs: u64,
    started_wall_ms: u64,
    /// The latest user message of the turn: the one the reply answers.
    prompt: String,
    user_items: Vec<Value>,
    due_ms: u64,
    ending: Ending,
    /// The server request the turn waits for (its id), the reply delay after its answer, and
    /// its params (sent again unchanged on `thread/resume`).
    awaiting: Option<(Value, u64, Value)>,
}

impl ActiveTurn {
    /// The turn as its rollout records name it.
    fn record(&self) -> TurnRecord {
        TurnRecord { turn_id: self.id.clone(), started: SystemTime::UNIX_EPOCH + Duration::from_millis(self.started_wall_ms) }
    }

    /// Its state once ended now (`wall` ms) with `status`.
    fn ended(&self, status: &'static str, error: Value, wall: u64) -> TurnState {
        TurnState {
            status,
            error,
            started_at: Some(self.started_at_secs),
            completed_at: Some(wall / 1000),
            duration_ms: Some(wall.saturating_sub(self.started_wall_ms)),
        }
    }

    /// The turn with every item (`itemsView: "full"`): its user messages, then `agent`.
    fn full(&self, agent: Option<Value>, state: &TurnState) -> Value {
        let items = self.user_items.iter().cloned().chain(agent).collect();
        turn_json(&self.id, Value::Array(items), "full", state)
    }
}

#[derive(Debug)]
struct Thread {
    stored: StoredThread,
    status: ThreadStatus,
    active: Option<ActiveTurn>,
}

/// A JSON-RPC refusal.
struct Refusal {
    code: i64,
    message: String,
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal {
        code: INVALID_REQUEST,
        message: message.into(),
    }
}

fn internal(message: impl Into<String>) -> Refusal {
    Refusal {
        code: INTERNAL_ERROR,
        message: message.into(),
    }
}

fn wall_ms() -> u64 {
    let since = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The app-server state machine: clock-free (`now_ms` is a monotonic time the caller passes in;
/// only wall-clock timestamps in the messages read the system clock), so the protocol rules are
/// unit-tested without a process.
#[derive(Debug)]
pub struct FakeAppServer {
    config: ServerConfig,
    initialized: bool,
    client_name: String,
    threads: BTreeMap<String, Thread>,
    /// The last `msg_mock_N` handed out.
    agent_messages: u64,
    /// The last server request id handed out.
    server_requests: u64,
    /// Each thread's rollout at `thread.path`, open for writing from its first turn on (the
    /// real app-server's process holds it, so `agent output` finds it as for the TUI).
    rollouts: BTreeMap<String, RolloutRecorder>,
}

impl FakeAppServer {
    pub fn new(config: ServerConfig) -> Self {
        FakeAppServer {
            config,
            initialized: false,
            client_name: String::new(),
            threads: BTreeMap::new(),
            agent_messages: 0,
            server_requests: 0,
            rollouts: BTreeMap::new(),
        }
    }

    /// The client answered server request `id` (accepted, declined or an error: the real one
    /// goes on with the turn either way): `serverRequest/resolved`, then the turn's reply after
    /// its delay.
    fn answered(&mut self, id: &Value, now_ms: u64, out: &mut Reaction) {
        for (thread_id, thread) in self.threads.iter_mut() {
            let Some(turn) = thread.active.as_mut() else { continue };
            if turn.awaiting.as_ref().is_some_and(|(waited, _, _)| waited == id) {
                let (_, delay_ms, _) = turn.awaiting.take().expect("checked");
                turn.due_ms = now_ms.saturating_add(delay_ms);
                out.messages.push(notification("serverRequest/resolved", json!({ "threadId": thread_id, "requestId": id })));
            }
        }
    }

    /// When `tick` has work next (a turn's reply or failure), on the `now_ms` clock.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.threads
            .values()
            .filter_map(|thread| thread.active.as_ref().filter(|turn| turn.awaiting.is_none()).map(|turn| turn.due_ms))
            .min()
    }

    /// One line from the client. Lines that are not JSON objects, client notifications other
    /// than `initialized` and client responses produce nothing, as with the real one. `Err` is an
    /// I/O failure of the state file while a turn starts, is steered or ends.
    pub fn handle_line(&mut self, line: &str, now_ms: u64) -> io::Result<Reaction> {
        let mut reaction = Reaction::default();
        let Ok(Value::Object(message)) = serde_json::from_str::<Value>(line) else {
            if !line.trim().is_empty() {
                eprintln!("fake-codex-app-server: ignoring a line that is not a JSON object");
            }
            return Ok(reaction);
        };
        let Some(method) = message.get("method").and_then(Value::as_str) else {
            // A response: the answer to a server request a turn waits for, or nothing.
            if let Some(id) = message.get("id") {
                self.answered(id, now_ms, &mut reaction);
            }
            return Ok(reaction);
        };
        let Some(id) = message.get("id").cloned() else {
            return Ok(reaction); // `initialized` (nothing to do) or an unknown notification
        };
        let params = message.get("params").cloned().unwrap_or(Value::Null);
        match self.request(method, &id, &params, now_ms, &mut reaction) {
            Ok(()) => Ok(reaction),
            Err(Failure::Refused(refusal)) => {
                reaction.messages.push(Outgoing::Error {
                    id,
                    code: refusal.code,
                    message: refusal.message,
                });
                Ok(reaction)
            }
            Err(Failure::Io(error)) => Err(error),
        }
    }

    /// Ends every turn whose time has come (with its reply or its failure).
    pub fn tick(&mut self, now_ms: u64) -> io::Result<Reaction> {
        let mut reaction = Reaction::default();
        let due: Vec<String> = self
            .threads
            .iter()
            .filter(|(_, thread)| thread.active.as_ref().is_some_and(|t| t.awaiting.is_none() && t.due_ms <= now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for thread_id in due {
            self.finish_turn(&thread_id, &mut reaction.messages)?;
        }
        Ok(reaction)
    }

    fn request(
        &mut self,
        method: &str,
        id: &Value,
        params: &Value,
        now_ms: u64,
        out: &mut Reaction,
    ) -> Result<(), Failure> {
        if !METHODS.contains(&method) {
            // serde's message for an unknown `method` tag, as the real one sends it (its list
            // names every method of the real protocol; ours names what the fake answers).
            let expected = METHODS.map(|m| format!("`{m}`")).join(", ");
            return Err(invalid(format!(
                "Invalid request: unknown variant `{method}`, expected one of {expected}"
            ))
            .into());
        }
        let params = match params {
            Value::Object(_) => params,
            Value::Null => return Err(invalid("Invalid request: missing field `params`").into()),
            _ => return Err(invalid("Invalid request: `params` is not an object").into()),
        };
        if method == "initialize" {
            return self.initialize(id, params, out);
        }
        if !self.initialized {
            return Err(invalid("Not initialized").into());
        }
        match method {
            "thread/start" => self.thread_start(id, params, out),
            "thread/resume" => self.thread_resume(id, params, out),
            "turn/start" => self.turn_start(id, params, now_ms, out),
            "turn/interrupt" => self.turn_interrupt(id, params, out),
            _ => unreachable!("METHODS lists every handled method"),
        }
    }

    fn initialize(
        &mut self,
        id: &Value,
        params: &Value,
        out: &mut Reaction,
    ) -> Result<(), Failure> {
        if self.initialized {
            return Err(invalid("Already initialized").into());
        }
        let info = params
            .get("clientInfo")
            .ok_or_else(|| invalid("Invalid request: missing field `clientInfo`"))?;
        let name = required_str(info, "name")?.to_owned();
        let version = info.get("version").and_then(Value::as_str).unwrap_or("");
        let user_agent = format!(
            "{name}/{CODEX_CLI_VERSION} (wakterm-fake; {arch}) unknown ({name}; {version})",
            arch = std::env::consts::ARCH
        );
        out.messages.push(Outgoing::Response {
            id: id.clone(),
            result: json!({
                "userAgent": user_agent,
                "codexHome": self.config.codex_home.display().to_string(),
                "platformFamily": std::env::consts::FAMILY,
                "platformOs": std::env::consts::OS,
            }),
        });
        self.initialized = true;
        self.client_name = name;
        Ok(())
    }

    fn thread_start(
        &mut self,
        id: &Value,
        params: &Value,
        out: &mut Reaction,
    ) -> Result<(), Failure> {
        let cwd = params
            .get("cwd")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| self.config.cwd.display().to_string());
        let thread_id = new_id();
        let now = SystemTime::now();
        let created_at = unix_secs(now);
        let stored = StoredThread {
            format: STATE_FORMAT,
            id: thread_id.clone(),
            path: rollout_path(&self.config.codex_home, &thread_id, now)
                .display()
                .to_string(),
            cwd,
            created_at,
            updated_at: created_at,
            preview: String::new(),
            originator: self.client_name.clone(),
            approval_policy: string_param(params, "approvalPolicy", "never"),
            sandbox: string_param(params, "sandbox", "read-only"),
            turns: Vec::new(),
        };
        let thread = Thread {
            stored,
            status: ThreadStatus::Idle,
            active: None,
        };
        let thread_json = thread_json(&thread, json!([]));
        out.messages.push(Outgoing::Response {
            id: id.clone(),
            result: thread_result(&thread, thread_json.clone()),
        });
        out.messages.push(notification(
            "thread/started",
            json!({ "thread": thread_json }),
        ));
        self.threads.insert(thread_id, thread);
        Ok(())
    }

    fn thread_resume(
        &mut self,
        id: &Value,
        params: &Value,
        out: &mut Reaction,
    ) -> Result<(), Failure> {
        let thread_id = required_str(params, "threadId")?.to_owned();
        if !self.threads.contains_key(&thread_id) {
            let stored = self
                .load(&thread_id)?
                .ok_or_else(|| invalid(format!("no rollout found for thread id {thread_id}")))?;
            self.threads.insert(
                thread_id.clone(),
                Thread {
                    stored,
                    status: ThreadStatus::Idle,
                    active: None,
                },
            );
        }
        let thread = self.threads.get_mut(&thread_id).expect("inserted above");
        if let Some(policy) = params.get("approvalPolicy").and_then(Value::as_str) {
            thread.stored.approval_policy = policy.to_owned();
        }
        if let Some(sandbox) = params.get("sandbox").and_then(Value::as_str) {
            thread.stored.sandbox = sandbox.to_owned();
        }
        let agent_messages = thread
            .stored
            .turns
            .iter()
            .flat_map(|turn| turn["items"].as_array().into_iter().flatten())
            .filter(|item| item["type"] == "agentMessage")
            .count() as u64;
        self.agent_messages = self.agent_messages.max(agent_messages);
        let thread = &self.threads[&thread_id];
        out.messages.push(notification(
            "thread/status/changed",
            json!({ "threadId": thread_id, "status": thread.status.to_json() }),
        ));
        // The real 0.169 leaves the turns out of the reply when asked (`excludeTurns`).
        let exclude_turns = params.get("excludeTurns").and_then(Value::as_bool) == Some(true);
        let turns = Value::Array(if exclude_turns { Vec::new() } else { thread.stored.turns.clone() });
        let mut result = thread_result(thread, thread_json(thread, turns));
        if let Some(session) = &self.config.behaviour.resume_session {
            result["thread"]["sessionId"] = json!(session);
        }
        let extra = json!({
            "collaborationMode": {
                "mode": "default",
                "settings": { "model": MODEL, "reasoning_effort": null, "developer_instructions": null },
            },
            "initialTurnsPage": null,
            "turnsBackwardsCursor": cursor(&thread_id, 1, "turns"),
            "itemsBackwardsCursor": cursor(&thread_id, 1, "itemsByCreatedAtOrdinal"),
        });
        merge(&mut result, extra);
        out.messages.push(Outgoing::Response {
            id: id.clone(),
            result,
        });
        // The real 0.169 sends a server request still pending again, unchanged, after the
        // resume's answer (two notifications between; openai/codex#12560;
        // fixtures/codex-0.169/app-server/pending-request-resume.jsonl).
        if let Some((request_id, _, params)) = thread.active.as_ref().and_then(|turn| turn.awaiting.as_ref()) {
            out.messages.push(approval_request(request_id, params));
        }
        Ok(())
    }

    fn turn_start(
        &mut self,
        id: &Value,
        params: &Value,
        now_ms: u64,
        out: &mut Reaction,
    ) -> Result<(), Failure> {
        let thread_id = required_str(params, "threadId")?.to_owned();
        let input = params
            .get("input")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("Invalid request: missing field `input`"))?;
        let content = user_content(input);
        let prompt = prompt_text(&content);
        let behaviour = self.config.behaviour.clone();
        let plan = behaviour.plan(&prompt);
        let thread = self
            .threads
            .get_mut(&thread_id)
            .ok_or_else(|| invalid(format!("thread not found: {thread_id}")))?;
        if plan.refuse {
            // The real 0.169's wording when the submission could not be queued (the handler's
            // last failure, before which nothing reached the thread).
            return Err(internal("failed to start turn: internal error; agent loop died unexpectedly").into());
        }
        let wall = wall_ms();
        if let Some(turn) = thread.active.as_mut() {
            if behaviour.busy == BusyTurnStart::Refuse {
                // Our wording: the real 0.169 has no such refusal (it steers).
                return Err(invalid(format!(
                    "thread {thread_id} already has an active turn {}",
                    turn.id
                ))
                .into());
            }
            // Steer: the result names the running turn (startedAt null, like any turn/start
            // result), the message joins it, and the turn now answers this message.
            out.messages.push(Outgoing::Response {
                id: id.clone(),
                result: json!({
                    "turn": turn_json(&turn.id, json!([]), "notLoaded", &TurnState::requested()),
                }),
            });
            let turn_id = turn.id.clone();
            let record = turn.record();
            if !content.is_empty() {
                let item = user_item(&content, wall);
                push_user_item(&mut out.messages, &thread_id, &turn_id, &item, wall);
                turn.user_items.push(item);
                turn.prompt = prompt.clone();
            }
            turn.due_ms = now_ms.saturating_add(plan.delay_ms);
            turn.ending = plan.ending;
            self.save(&thread_id)?;
            if !content.is_empty() {
                self.rollout(&thread_id)?.user_message(&record, &prompt)?;
            }
            out.crash = plan.exit_now;
            return Ok(());
        }
        let turn_id = new_id();
        let started_at_secs = wall / 1000;
        out.messages.push(Outgoing::Response {
            id: id.clone(),
            result: json!({
                "turn": turn_json(&turn_id, json!([]), "notLoaded", &TurnState::requested()),
            }),
        });
        if plan.exit_after_reply {
            out.crash = true; // answered, then gone before any notification of the turn
            return Ok(());
        }
        thread.status = ThreadStatus::Active;
        out.messages.push(notification(
            "thread/status/changed",
            json!({ "threadId": thread_id, "status": thread.status.to_json() }),
        ));
        out.messages.push(notification(
            "turn/started",
            json!({
                "threadId": thread_id,
                "turn": turn_json(&turn_id, json!([]), "notLoaded", &TurnState::running(started_at_secs)),
            }),
        ));
        let mut user_items = Vec::new();
        if !content.is_empty() {
            let item = user_item(&content, wall);
            push_user_item(&mut out.messages, &thread_id, &turn_id, &item, wall);
            user_items.push(item);
            if thread.stored.preview.is_empty() {
                thread.stored.preview = prompt.clone();
            }
        }
        let awaiting = plan.ask_approval.then(|| {
            self.server_requests += 1;
            let request_id = json!(self.server_requests);
            let params = json!({
                "threadId": thread_id, "turnId": turn_id, "itemId": format!("call_{}", self.server_requests),
                "command": "touch approved", "cwd": thread.stored.cwd, "reason": null,
            });
            out.messages.push(approval_request(&request_id, &params));
            (request_id, plan.delay_ms, params)
        });
        let turn = ActiveTurn {
            id: turn_id,
            started_at_secs,
            started_wall_ms: wall,
            prompt: prompt.clone(),
            user_items,
            due_ms: now_ms.saturating_add(plan.delay_ms),
            ending: plan.ending,
            awaiting,
        };
        let record = turn.record();
        thread.active = Some(turn);
        self.save(&thread_id)?;
        let rollout = self.rollout(&thread_id)?;
        rollout.open_turn(&record)?;
        if !content.is_empty() {
            rollout.user_message(&record, &prompt)?;
        }
        out.crash = plan.exit_now;
        Ok(())
    }

    fn turn_interrupt(
        &mut self,
        id: &Value,
        params: &Value,
        out: &mut Reaction,
    ) -> Result<(), Failure> {
        let thread_id = required_str(params, "threadId")?.to_owned();
        let wanted = required_str(params, "turnId")?;
        let thread = self
            .threads
            .get_mut(&thread_id)
            .ok_or_else(|| invalid(format!("thread not found: {thread_id}")))?;
        let Some(turn) = thread.active.as_ref() else {
            return Err(invalid("no active turn to interrupt").into());
        };
        if turn.id != wanted {
            return Err(invalid(format!(
                "expected active turn id {wanted} but found {}",
                turn.id
            ))
            .into());
        }
        let turn = thread.active.take().expect("checked above");
        out.messages.push(Outgoing::Response {
            id: id.clone(),
            result: json!({}),
        });
        let wall = wall_ms();
        thread.status = ThreadStatus::Idle;
        out.messages.push(notification(
            "thread/status/changed",
            json!({ "threadId": thread_id, "status": thread.status.to_json() }),
        ));
        let state = turn.ended("interrupted", Value::Null, wall);
        out.messages.push(notification(
            "turn/completed",
            json!({
                "threadId": thread_id,
                "turn": turn_json(&turn.id, json!([]), "notLoaded", &state),
            }),
        ));
        self.record_turn(&thread_id, turn.full(None, &state), wall / 1000)?;
        self.rollout(&thread_id)?.abort_turn(&turn.record(), ABORT_REASON_INTERRUPTED)?;
        Ok(())
    }

    /// The running turn of `thread_id` ends as planned: its reply, or its failure.
    fn finish_turn(&mut self, thread_id: &str, out: &mut Vec<Outgoing>) -> io::Result<()> {
        let behaviour = self.config.behaviour.clone();
        let Some(thread) = self.threads.get_mut(thread_id) else {
            return Ok(());
        };
        let Some(turn) = thread.active.take() else {
            return Ok(());
        };
        let wall = wall_ms();
        let mut reply = None;
        let full = match turn.ending {
            Ending::Reply => {
                self.agent_messages += 1;
                let item_id = format!("{AGENT_MESSAGE_ID_PREFIX}{}", self.agent_messages);
                let text = behaviour.reply_for(&turn.prompt);
                reply = Some(text.clone());
                let open = agent_item(&item_id, "", wall, None);
                let done = agent_item(&item_id, &text, wall, Some(wall));
                out.push(notification(
                    "item/started",
                    json!({ "item": open, "threadId": thread_id, "turnId": turn.id, "startedAtMs": wall }),
                ));
                out.push(notification(
                    "item/agentMessage/delta",
                    json!({ "threadId": thread_id, "turnId": turn.id, "itemId": item_id, "delta": text }),
                ));
                out.push(notification(
                    "item/completed",
                    json!({ "item": done, "threadId": thread_id, "turnId": turn.id,
                            "contentTokenCount": null, "completedAtMs": wall }),
                ));
                thread.status = ThreadStatus::Idle;
                out.push(notification(
                    "thread/status/changed",
                    json!({ "threadId": thread_id, "status": thread.status.to_json() }),
                ));
                let state = turn.ended("completed", Value::Null, wall);
                out.push(notification(
                    "turn/completed",
                    json!({
                        "threadId": thread_id,
                        "turn": turn_json(&turn.id, json!([done.clone()]), "summary", &state),
                    }),
                ));
                turn.full(Some(done), &state)
            }
            Ending::Fail => {
                let error = json!({
                    "message": FAILED_TURN_MESSAGE,
                    "codexErrorInfo": "internalServerError",
                    "additionalDetails": null,
                    "misalignment": null,
                });
                thread.status = ThreadStatus::SystemError;
                out.push(notification(
                    "thread/status/changed",
                    json!({ "threadId": thread_id, "status": thread.status.to_json() }),
                ));
                out.push(notification(
                    "error",
                    json!({ "error": error, "willRetry": false, "threadId": thread_id, "turnId": turn.id }),
                ));
                let state = turn.ended("failed", error, wall);
                out.push(notification(
                    "turn/completed",
                    json!({
                        "threadId": thread_id,
                        "turn": turn_json(&turn.id, json!([]), "notLoaded", &state),
                    }),
                ));
                turn.full(None, &state)
            }
        };
        self.record_turn(thread_id, full, wall / 1000)?;
        // A failed turn writes no end record: the real one's is not captured (a known
        // difference); `agent output` reads assistant messages only.
        if let Some(reply) = reply {
            self.rollout(thread_id)?.complete_turn(&turn.record(), &turn.prompt, &reply)?;
        }
        Ok(())
    }

    /// The thread's rollout, opened (created at its first turn, continued on a resume in a new
    /// process) at `thread.path`.
    fn rollout(&mut self, thread_id: &str) -> io::Result<&mut RolloutRecorder> {
        if !self.rollouts.contains_key(thread_id) {
            let stored = &self.threads.get(thread_id).expect("a thread with a turn is known").stored;
            let meta = SessionMeta {
                session_id: thread_id.to_owned(),
                cwd: PathBuf::from(&stored.cwd),
                cli_version: CODEX_CLI_VERSION.to_owned(),
                originator: self.client_name.clone(),
            };
            let writer = RolloutWriter::open_at(Path::new(&stored.path), &meta, SystemTime::now())?;
            self.rollouts.insert(thread_id.to_owned(), RolloutRecorder::new(writer, meta.cwd));
        }
        Ok(self.rollouts.get_mut(thread_id).expect("inserted above"))
    }

    /// Replaces (or appends) the turn with this id in the thread's record and saves it.
    fn record_turn(&mut self, thread_id: &str, full: Value, updated_at: u64) -> io::Result<()> {
        let thread = self.threads.get_mut(thread_id).expect("a known thread");
        let turns = &mut thread.stored.turns;
        match turns.iter_mut().find(|turn| turn["id"] == full["id"]) {
            Some(slot) => *slot = full,
            None => turns.push(full),
        }
        thread.stored.updated_at = updated_at;
        self.save(thread_id)
    }

    fn state_file(&self, thread_id: &str) -> Option<PathBuf> {
        // Only UUIDs name files: a thread id from the client never becomes a path otherwise.
        let uuid = uuid::Uuid::parse_str(thread_id).ok()?;
        Some(
            self.config
                .state_dir
                .join(THREADS_DIR)
                .join(format!("{}.json", uuid.hyphenated())),
        )
    }

    /// Writes the thread's record, its running turn included (`inProgress`, user items so far).
    fn save(&self, thread_id: &str) -> io::Result<()> {
        let path = self
            .state_file(thread_id)
            .expect("our thread ids are UUIDs");
        let thread = &self.threads[thread_id];
        let mut record = thread.stored.clone();
        if let Some(turn) = &thread.active {
            let running = turn.full(None, &TurnState::running(turn.started_at_secs));
            match record.turns.iter_mut().find(|t| t["id"] == running["id"]) {
                Some(slot) => *slot = running,
                None => record.turns.push(running),
            }
        }
        write_atomically(&path, &serde_json::to_vec_pretty(&record)?)
    }

    /// The thread's record from its state file; None when there is none.
    fn load(&self, thread_id: &str) -> Result<Option<StoredThread>, Failure> {
        let Some(path) = self.state_file(thread_id) else {
            return Ok(None);
        };
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(error) => {
                return Err(internal(format!("cannot read {}: {error}", path.display())).into())
            }
        };
        let mut stored: StoredThread = serde_json::from_slice(&bytes).map_err(|error| {
            internal(format!(
                "{} is not a thread record: {error}",
                path.display()
            ))
        })?;
        if stored.format != STATE_FORMAT || stored.id != thread_id {
            return Err(internal(format!(
                "{} is not a record of thread {thread_id}",
                path.display()
            ))
            .into());
        }
        // The process that ran it is gone: report it interrupted (our choice).
        for turn in &mut stored.turns {
            if turn["status"] == "inProgress" {
                turn["status"] = json!("interrupted");
            }
        }
        Ok(Some(stored))
    }
}

enum Failure {
    Refused(Refusal),
    Io(io::Error),
}

impl From<Refusal> for Failure {
    fn from(refusal: Refusal) -> Self {
        Failure::Refused(refusal)
    }
}

impl From<io::Error> for Failure {
    fn from(error: io::Error) -> Self {
        Failure::Io(error)
    }
}

fn required_str<'a>(params: &'a Value, field: &str) -> Result<&'a str, Refusal> {
    match params.get(field) {
        Some(Value::String(text)) => Ok(text),
        Some(_) => Err(invalid(format!(
            "Invalid request: `{field}` is not a string"
        ))),
        None => Err(invalid(format!("Invalid request: missing field `{field}`"))),
    }
}

fn string_param(params: &Value, field: &str, default: &str) -> String {
    params
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or(default)
        .to_owned()
}

fn unix_secs(at: SystemTime) -> u64 {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

fn notification(method: &str, params: Value) -> Outgoing {
    Outgoing::Notification {
        method: method.to_owned(),
        params,
        emitted_at_ms: wall_ms(),
    }
}

/// Adds `extra`'s keys to the object `target`.
fn merge(target: &mut Value, extra: Value) {
    if let (Value::Object(target), Value::Object(extra)) = (target, extra) {
        target.extend(extra);
    }
}

/// An opaque paging cursor of the shape the real one returns (the fake pages nothing).
fn cursor(thread_id: &str, ordinal: u64, kind: &str) -> String {
    json!({
        "requestedThreadId": thread_id,
        "rolloutOrdinal": ordinal,
        "includeAnchor": true,
        "scope": { "kind": kind },
    })
    .to_string()
}

/// The sandbox object for a `sandbox` mode parameter.
fn sandbox_json(mode: &str) -> Value {
    match mode {
        "danger-full-access" => json!({ "type": "dangerFullAccess" }),
        "workspace-write" => json!({
            "type": "workspaceWrite",
            "writableRoots": [],
            "networkAccess": false,
            "excludeTmpdirEnvVar": false,
            "excludeSlashTmp": false,
        }),
        _ => json!({ "type": "readOnly", "networkAccess": false }),
    }
}

fn thread_json(thread: &Thread, turns: Value) -> Value {
    let stored = &thread.stored;
    json!({
        "id": stored.id,
        "environments": [{
            "environmentId": "local",
            "cwd": stored.cwd,
            "runtimeWorkspaceRoots": [stored.cwd],
        }],
        "extra": null,
        "sessionId": stored.id,
        "forkedFromId": null,
        "attachedToThreadId": null,
        "parentThreadId": null,
        "preview": stored.preview,
        "ephemeral": false,
        "section": null,
        "sectionEnteredAt": null,
        "projectId": null,
        "historyMode": "paginated",
        "modelProvider": MODEL_PROVIDER,
        "model": MODEL,
        "reasoningEffort": null,
        "createdAt": stored.created_at,
        "updatedAt": stored.updated_at,
        "recencyAt": stored.updated_at,
        "status": thread.status.to_json(),
        "path": stored.path,
        "cwd": stored.cwd,
        "cliVersion": CODEX_CLI_VERSION,
        "originator": stored.originator,
        "source": THREAD_SOURCE,
        "canAcceptDirectInput": true,
        "threadSource": null,
        "agentNickname": null,
        "agentRole": null,
        "gitInfo": null,
        "name": null,
        "daybreakEnabled": null,
        "turns": turns,
    })
}

/// MGD-6: the approval request a turn waits for.
fn approval_request(id: &Value, params: &Value) -> Outgoing {
    Outgoing::Request { id: id.clone(), method: "item/commandExecution/requestApproval".to_owned(), params: params.clone() }
}

/// The result of `thread/start` (and the base of `thread/resume`'s).
fn thread_result(thread: &Thread, thread_json: Value) -> Value {
    let stored = &thread.stored;
    json!({
        "thread": thread_json,
        "model": MODEL,
        "modelProvider": MODEL_PROVIDER,
        "serviceTier": null,
        "disabledPluginIds": [],
        "cwd": stored.cwd,
        "runtimeWorkspaceRoots": [stored.cwd],
        "instructionSources": [],
        "approvalPolicy": stored.approval_policy,
        "approvalsReviewer": "user",
        "sandbox": sandbox_json(&stored.sandbox),
        "activePermissionProfile": null,
        "reasoningEffort": null,
        "multiAgentMode": "explicitRequestOnly",
    })
}

/// A turn's status, error and times, as every Turn object carries them.
#[derive(Debug, Clone, PartialEq)]
struct TurnState {
    status: &'static str,
    error: Value,
    /// Unix seconds; null in `turn/start` results.
    started_at: Option<u64>,
    completed_at: Option<u64>,
    duration_ms: Option<u64>,
}

impl TurnState {
    /// As a `turn/start` result shows a turn (no `startedAt` yet, even for a running one).
    fn requested() -> Self {
        TurnState {
            status: "inProgress",
            error: Value::Null,
            started_at: None,
            completed_at: None,
            duration_ms: None,
        }
    }

    fn running(started_at: u64) -> Self {
        TurnState {
            started_at: Some(started_at),
            ..Self::requested()
        }
    }
}

fn turn_json(id: &str, items: Value, items_view: &str, state: &TurnState) -> Value {
    json!({
        "id": id,
        "rootTurnId": id,
        "items": items,
        "itemsView": items_view,
        "status": state.status,
        "error": state.error,
        "startedAt": state.started_at,
        "completedAt": state.completed_at,
        "durationMs": state.duration_ms,
    })
}

/// The user message content for `turn/start` input: text items get `text_elements` (as the real
/// one echoes them); other input kinds pass through unchanged.
fn user_content(input: &[Value]) -> Vec<Value> {
    input
        .iter()
        .map(|item| match (item["type"].as_str(), item["text"].as_str()) {
            (Some("text"), Some(text)) => json!({
                "type": "text",
                "text": text,
                "text_elements": item.get("text_elements").cloned().unwrap_or_else(|| json!([])),
            }),
            _ => item.clone(),
        })
        .collect()
}

/// The prompt a reply answers: the text parts of the message, joined by new lines.
fn prompt_text(content: &[Value]) -> String {
    content
        .iter()
        .filter(|item| item["type"] == "text")
        .filter_map(|item| item["text"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A completed `userMessage` item (the real one starts and completes it at the same moment).
fn user_item(content: &[Value], wall: u64) -> Value {
    json!({
        "type": "userMessage",
        "id": new_id(),
        "clientId": null,
        "content": content,
        "startedAtMs": wall,
        "completedAtMs": wall,
    })
}

fn push_user_item(
    out: &mut Vec<Outgoing>,
    thread_id: &str,
    turn_id: &str,
    done: &Value,
    wall: u64,
) {
    let mut open = done.clone();
    open["completedAtMs"] = Value::Null;
    out.push(notification(
        "item/started",
        json!({ "item": open, "threadId": thread_id, "turnId": turn_id, "startedAtMs": wall }),
    ));
    out.push(notification(
        "item/completed",
        json!({ "item": done, "threadId": thread_id, "turnId": turn_id,
                "contentTokenCount": null, "completedAtMs": wall }),
    ));
}

fn agent_item(id: &str, text: &str, started: u64, completed: Option<u64>) -> Value {
    json!({
        "type": "agentMessage",
        "moderation": null,
        "id": id,
        "text": text,
        "phase": null,
        "memoryCitation": null,
        "delivery": null,
        "questions": null,
        "startedAtMs": started,
        "completedAtMs": completed,
    })
}

fn write_atomically(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().expect("state files live in a directory");
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("json.tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Runs the fake on this process's stdin/stdout until stdin ends; returns the exit code.
/// The exit prefix does not return: the process dies by SIGKILL.
/// The whole program: configuration from the environment and the working directory, then
/// [`run`]. Exit 2 on unusable knobs, 1 on an I/O error, 0 at the end of stdin.
pub fn run_from_env() -> i32 {
    let cwd = match std::env::current_dir() {
        Ok(cwd) => cwd,
        Err(error) => {
            eprintln!("fake-codex-app-server: cannot read the working directory: {error}");
            return EXIT_IO_ERROR;
        }
    };
    match ServerConfig::from_env(|name| std::env::var(name).ok(), cwd) {
        Ok(config) => run(config),
        Err(message) => {
            eprintln!("fake-codex-app-server: {message}");
            EXIT_USAGE
        }
    }
}

pub fn run(config: ServerConfig) -> i32 {
    let (lines_tx, lines) = mpsc::channel::<Option<String>>();
    std::thread::spawn(move || {
        let mut stdin = io::stdin().lock();
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match stdin.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    if lines_tx.send(Some(line)).is_err() {
                        return;
                    }
                }
            }
        }
        let _ = lines_tx.send(None);
    });
    let started = Instant::now();
    let now_ms = || u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let mut server = FakeAppServer::new(config);
    loop {
        let due = server.next_deadline_ms();
        let reaction = if due.is_some_and(|due| due <= now_ms()) {
            // Before reading: a client that keeps writing must not starve the turns.
            server.tick(now_ms())
        } else {
            let input = match due {
                None => lines
                    .recv()
                    .map_err(|_| mpsc::RecvTimeoutError::Disconnected),
                Some(due) => {
                    lines.recv_timeout(Duration::from_millis(due.saturating_sub(now_ms())))
                }
            };
            match input {
                Ok(Some(line)) => server.handle_line(&line, now_ms()),
                Ok(None) | Err(mpsc::RecvTimeoutError::Disconnected) => return EXIT_OK,
                Err(mpsc::RecvTimeoutError::Timeout) => server.tick(now_ms()),
            }
        };
        let reaction = match reaction {
            Ok(reaction) => reaction,
            Err(error) => {
                eprintln!("fake-codex-app-server: state file: {error}");
                return EXIT_IO_ERROR;
            }
        };
        if let Err(error) = write_messages(&reaction.messages) {
            eprintln!("fake-codex-app-server: stdout: {error}");
            return EXIT_IO_ERROR;
        }
        if reaction.crash {
            crash_now();
        }
    }
}

fn write_messages(messages: &[Outgoing]) -> io::Result<()> {
    if messages.is_empty() {
        return Ok(());
    }
    let mut stdout = io::stdout().lock();
    for message in messages {
        let mut line = message.to_line();
        line.push('\n');
        stdout.write_all(line.as_bytes())?;
    }
    stdout.flush()
}

/// Dies by SIGKILL (cannot be caught), like the fake TUI's `--crash-on`.
fn crash_now() -> ! {
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    std::process::abort()
}

#[cfg(test)]
mod tests;
