//! The private control protocol between the `wakterm` CLI and its daemon: one JSON request
//! line per connection; the daemon answers with one JSON line `{"exit_code", "body"}`, or for
//! `watch` with `{"event": ...}` lines.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use wakterm_engine::{Operation, PasteMode, ReturnMode};

pub const PROTOCOL_VERSION: u32 = 1;
/// Largest request line the daemon reads (a 64 KiB prompt, JSON-escaped, fits).
pub const MAX_REQUEST_LINE_BYTES: usize = 1024 * 1024;

/// Documented, stable exit codes of the CLI (README "Exit codes").
pub mod exit {
    pub const OK: i32 = 0;
    pub const ERROR: i32 = 1;
    pub const USAGE: i32 = 2;
    pub const DAEMON_NOT_RUNNING: i32 = 3;
    pub const REJECTED: i32 = 4;
    pub const INDETERMINATE: i32 = 5;
    pub const NOT_FOUND: i32 = 6;
    /// CLI-1: the daemon accepted the connection but did not answer within the call's bound
    /// (stopped, wedged, or a watch stream fell silent past its heartbeats).
    pub const UNRESPONSIVE: i32 = 7;
}

/// CLI-1: a `watch` stream carries a heartbeat at least this often, so both ends notice a dead
/// peer without waiting for an event.
pub const WATCH_HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(5);
/// Bound of one daemon reply write: a peer that stops reading cannot hold a task and a
/// descriptor (a stream reader that falls this far behind is dropped, EV-14).
pub const REPLY_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// A watcher that hears nothing (not even a heartbeat) for this long gives up with
/// `daemon_unresponsive` (exit 7).
pub const WATCH_SILENCE: std::time::Duration = std::time::Duration::from_secs(15);

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum ClientRequest {
    Status,
    Stop { all: bool },
    AgentStart {
        name: String,
        harness: String,
        cwd: String,
        env: Vec<(String, String)>,
        command: Vec<String>,
        /// MGD-1: the command is a Codex app-server.
        #[serde(default)]
        managed: bool,
    },
    AgentStop { target: String },
    AgentRestart { target: String },
    AgentList,
    Catalog,
    Capabilities,
    Admit(AdmitRequest),
    RequestGet {
        request_id: String,
        /// RF-6: include the evidence trail.
        #[serde(default)]
        evidence: bool,
    },
    RequestCancel { request_id: String },
    Watch { after: u64, once: bool },
    /// EV-*: the durable Agent API event stream, optionally of some agents only.
    Events {
        after: u64,
        once: bool,
        #[serde(default)]
        agents: Vec<String>,
    },
    /// OUT: the experimental output shadow page (seed 002).
    AgentOutput { target: String, after: Option<String> },
    /// SUB-*: seed 003's acknowledged submission (`session action=submit`).
    Submit(SubmitRequest),
}

/// SUB-1: one submit call. `timeout_ms` is the acknowledgement wait (clamped 250..=10000,
/// default 3000, SUB-4).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SubmitRequest {
    pub target: String,
    #[serde(default)]
    pub exact_agent_id: bool,
    pub text: String,
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct AdmitRequest {
    pub operation: Operation,
    pub target: String,
    pub exact_agent_id: bool,
    pub incarnation: Option<String>,
    pub request_id: Option<String>,
    pub prompt: String,
    pub paste_mode: PasteMode,
    pub return_mode: ReturnMode,
    pub final_timeout_ms: u64,
    /// EV-12: put the prompt's text in its `request.admitted` event.
    #[serde(default)]
    pub share_prompt: bool,
    /// The client generated `request_id` itself just now (a fresh random UUID for a plain
    /// `send`). Informational: the daemon does not trust it to skip the id's store lookup
    /// (HIST-2); a socket client that sent it with a reused id had its prompt written twice.
    #[serde(default)]
    pub generated_id: bool,
    /// ADM-18: a one-way `send` that takes an idle agent only (never steers a running turn).
    #[serde(default)]
    pub no_steer: bool,
}

impl AdmitRequest {
    /// The engine's command for this request, under `request_id` (the caller's, or one the
    /// client or daemon made: `generated_id`); `write_nonce` is MGD-7's, drawn by the daemon.
    pub fn into_command(self, request_id: String, generated_id: bool, write_nonce: u64) -> wakterm_engine::AdmitCommand {
        wakterm_engine::AdmitCommand {
            op: wakterm_engine::OpId(0),
            operation: self.operation,
            target: self.target,
            exact_agent_id: self.exact_agent_id,
            incarnation: self.incarnation,
            request_id,
            prompt: self.prompt,
            paste_mode: self.paste_mode,
            return_mode: self.return_mode,
            final_timeout_ms: self.final_timeout_ms,
            generated_id,
            share_prompt: self.share_prompt,
            write_nonce,
            no_steer: self.no_steer,
        }
    }
}

impl ClientRequest {
    /// INP-4: a target that cannot name an agent is a usage error (exit 2, nothing done) for
    /// the requests that name one outside an admission (stop, restart, output, events'
    /// `--agent`), as admissions and submits refuse it in their receipts; it was
    /// `agent_unknown` (exit 6), which reads as "start it first". The output page answers in
    /// its own schema (OUT-1: every answer has a `state`). The CLI asks before it connects (a
    /// usage error needs no daemon) and the daemon again for every other client.
    pub fn malformed_target(&self) -> Option<Reply> {
        match self {
            ClientRequest::AgentStop { target } | ClientRequest::AgentRestart { target } => {
                let detail = wakterm_engine::target_malformed(target)?;
                Some(Reply::error(exit::USAGE, "target_malformed", format!("{detail}; nothing was done")))
            }
            ClientRequest::AgentOutput { target, .. } => wakterm_engine::target_malformed(target).map(|detail| crate::output_page::target_malformed(target, &detail)),
            ClientRequest::Events { agents, .. } => malformed_agents(agents),
            _ => None,
        }
    }

    /// A streaming request's cursor (`--after`) and the field its events number themselves
    /// by; None for any other request.
    pub fn stream_cursor(&self) -> Option<(u64, &'static str)> {
        match self {
            ClientRequest::Watch { after, .. } => Some((*after, "terminal_event_sequence")),
            ClientRequest::Events { after, .. } => Some((*after, "sequence")),
            _ => None,
        }
    }
}

/// INP-4 for `agent events --agent`: the first filter that cannot name an agent, checked over
/// all of them before any is resolved (so the answer does not hang on their order).
pub fn malformed_agents(agents: &[String]) -> Option<Reply> {
    let detail = agents.iter().find_map(|target| wakterm_engine::target_malformed(target))?;
    Some(Reply::error(exit::USAGE, "target_malformed", format!("--agent: {detail}; nothing was streamed")))
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Reply {
    pub exit_code: i32,
    pub body: Value,
}

impl Reply {
    pub fn ok(body: Value) -> Reply {
        Reply { exit_code: exit::OK, body }
    }
    pub fn error(exit_code: i32, kind: &str, message: impl Into<String>) -> Reply {
        let body = serde_json::json!({"schema": "wakterm.error.v1", "error": kind, "message": message.into()});
        Reply { exit_code, body }
    }
}

/// The daemon's framing of a connection: the request is its first line, newline included,
/// within its first [`MAX_REQUEST_LINE_BYTES`] bytes (what one bounded `read_until(b'\n')`
/// returns); the bytes after it are not part of the request.
pub fn frame_request_line(received: &[u8]) -> &[u8] {
    let bounded = &received[..received.len().min(MAX_REQUEST_LINE_BYTES)];
    match bounded.iter().position(|&b| b == b'\n') {
        Some(newline) => &bounded[..=newline],
        None => bounded,
    }
}

/// Reads one framed request line ([`frame_request_line`]): UTF-8, newline-terminated, one JSON
/// [`ClientRequest`]. Pure and total, so it can be fuzzed (runtime/tests/fuzz_parsers.rs); a
/// refusal is the `bad_request` reply to send (exit 2), whose message never exceeds the line
/// by more than [`MAX_REQUEST_ERROR_OVERHEAD_BYTES`].
pub fn parse_request_line(line: &[u8]) -> Result<ClientRequest, Reply> {
    parse_request_envelope(line).map(|(request, _)| request)
}

/// CLI-4: the fields a client adds to a request it waits for: when its wait ends, on its own
/// monotonic clock ([`GIVE_UP_MONOTONIC_FIELD`], named by [`GIVE_UP_CLOCK_FIELD`]; this daemon
/// judges by it when the clock is its own) and on the wall clock ([`GIVE_UP_FIELD`], for a
/// caller on another clock and for daemons older than the monotonic field). A daemon that
/// reads the line later (it was stopped, frozen or swamped) does nothing with it: its caller
/// has gone, told the outcome is unknown or that nothing answered.
pub const GIVE_UP_FIELD: &str = "give_up_at_ms";
pub const GIVE_UP_MONOTONIC_FIELD: &str = "give_up_at_monotonic_ms";
/// Which monotonic clock [`GIVE_UP_MONOTONIC_FIELD`] is on ([`monotonic_clock_id`]).
pub const GIVE_UP_CLOCK_FIELD: &str = "give_up_clock";
/// Longest [`GIVE_UP_CLOCK_FIELD`] taken (a boot id and a namespace name are far shorter).
const MAX_CLOCK_ID_BYTES: usize = 128;

/// CLI-4: when the caller's wait ends, as it sent it (none: a client older than CLI-4).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GiveUp {
    /// Wall-clock milliseconds (`driver::now_ms`).
    pub wall_ms: Option<u64>,
    /// Milliseconds on the caller's monotonic clock (`holder::protocol::monotonic_ms`).
    pub monotonic_ms: Option<u64>,
    /// The caller's [`monotonic_clock_id`]: its monotonic time means ours only when they match.
    pub clock: Option<String>,
}

impl GiveUp {
    /// The caller's give-up time on this process's monotonic clock, when it sent one on the
    /// same clock (the same boot and time namespace); None otherwise (the wall field decides).
    pub fn monotonic_here(&self) -> Option<u64> {
        let (sent, clock) = (self.monotonic_ms?, self.clock.as_deref()?);
        (monotonic_clock_id()?.as_str() == clock).then_some(sent)
    }
}

/// CLI-4: this process's monotonic clock, named by the machine's boot and the process's time
/// namespace (`/proc/self/ns/time`, which can offset the monotonic clock): two processes
/// compare monotonic times only when both match. None where either cannot be read (a kernel
/// without time namespaces): then the give-up is judged by the wall clock, as before. The boot
/// id is read once; the namespace on every call (one readlink), because a long-lived process
/// (the daemon, `wakterm mcp`) restored by CRIU into a new time namespace keeps its boot.
/// Clones of one VM snapshot share a boot id and the root namespace's name, so a socket
/// forwarded between two such clones is not told apart (their wall clocks decide nothing
/// either: both rules assume one machine).
pub fn monotonic_clock_id() -> Option<String> {
    static BOOT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let boot = BOOT.get_or_init(crate::driver::boot_id).as_deref()?;
    let namespace = std::fs::read_link("/proc/self/ns/time").ok()?;
    Some(format!("{boot} {}", namespace.to_str()?))
}

/// [`parse_request_line`], with the caller's give-up fields when it sent them.
pub fn parse_request_envelope(line: &[u8]) -> Result<(ClientRequest, GiveUp), Reply> {
    let refuse = |message: String| Reply::error(exit::USAGE, "bad_request", message);
    let Ok(text) = std::str::from_utf8(line) else {
        return Err(refuse("the request line is not UTF-8".to_string()));
    };
    let framed = text.len() <= MAX_REQUEST_LINE_BYTES && text.find('\n').is_some_and(|at| at + 1 == text.len());
    if !framed {
        return Err(refuse("the request line is missing or too long".to_string()));
    }
    let mut value: serde_json::Value = serde_json::from_str(text).map_err(|error| refuse(format!("unreadable request: {error}")))?;
    let mut take = |field: &str| match value.as_object_mut().and_then(|fields| fields.remove(field)) {
        None => Ok(None),
        Some(at) => at.as_u64().map(Some).ok_or_else(|| refuse(format!("{field} is not a whole number of milliseconds"))),
    };
    let (wall_ms, monotonic_ms) = (take(GIVE_UP_FIELD)?, take(GIVE_UP_MONOTONIC_FIELD)?);
    let clock = match value.as_object_mut().and_then(|fields| fields.remove(GIVE_UP_CLOCK_FIELD)) {
        None => None,
        Some(serde_json::Value::String(clock)) if clock.len() <= MAX_CLOCK_ID_BYTES => Some(clock),
        Some(_) => return Err(refuse(format!("{GIVE_UP_CLOCK_FIELD} is not a string of at most {MAX_CLOCK_ID_BYTES} bytes"))),
    };
    let give_up = GiveUp { wall_ms, monotonic_ms, clock };
    let request = serde_json::from_value(value).map_err(|error| refuse(format!("unreadable request: {error}")))?;
    Ok((request, give_up))
}

/// Bound on what a refusal adds to the line it quotes (serde_json names at most one offending
/// token of the line, plus its position).
pub const MAX_REQUEST_ERROR_OVERHEAD_BYTES: usize = 512;
