//! `wakterm mcp` (issue 13, seed 003): a stdio MCP server on the official Rust SDK (`rmcp`)
//! that talks to the running daemon over its socket, exactly as the CLI does. It adds no rule
//! of its own: every answer is the daemon's reply (a receipt, a catalog, a request view).
//!
//! Tools:
//! - `agent_catalog`, `agent_capabilities`: the daemon's catalog and capabilities.
//! - `agent_admit`: the durable admission API (return-final or one-way, caller request id).
//! - `request_get`: a request's state, receipt and terminal event.
//! - `request_wait`: a bounded wait for a request's terminal event.
//! - `session`: `list`, `status`, `output`, `input` (raw keys into the agent's pane, write
//!   completion only: no receipt semantics, as seed 003 keeps it), `submit` (seed 003's
//!   acknowledged submission: one receipt, SUB-*).
//!
//! Errors are tool results with `isError: true` and the daemon's structured error body, so an
//! orchestrating agent reads the same `classification`/`reason` fields the CLI prints.

use crate::client;
use crate::paths::DataPaths;
use crate::protocol::{AdmitRequest, ClientRequest, Reply};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolRequestParams, CallToolResult, Implementation, ServerCapabilities, ServerInfo};
use rmcp::service::RequestContext;
use rmcp::RoleServer;
use rmcp::schemars::{self, JsonSchema};
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler, ServiceExt};
use serde::Deserialize;
use serde_json::{json, Value};
use wakterm_engine::limits::echoed;
use std::time::{Duration, Instant};
use wakterm_engine::{Operation, PasteMode, ReturnMode};

/// `request_wait`'s bound when the caller gives none.
pub const DEFAULT_WAIT_MS: u64 = 30_000;
/// The longest `request_wait` may block one MCP call (a client's own call timeout is often a
/// minute or two; a longer wait is a loop of calls).
pub const MAX_WAIT_MS: u64 = 120_000;
/// How often `request_wait` asks the daemon while it waits.
const WAIT_POLL: Duration = Duration::from_millis(100);
/// MCP-5: the least a look of `request_wait` waits for the daemon's answer.
const WAIT_LOOK_MIN: Duration = Duration::from_secs(1);

/// MCP-3: the arguments of a tool that takes none. Any argument is refused as for the other
/// tools (`agent_catalog {"x": 1}` used to be answered as if it were not there; a review).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)] // MCP-3: a misspelt argument (`requestId`) is an error, never ignored
pub struct AdmitArgs {
    /// The agent's name, or its id.
    pub agent: String,
    /// The prompt to submit (bracketed paste, one write).
    pub prompt: String,
    /// Arm a durable request for the final answer of exactly the turn this prompt starts
    /// (default true); false: a one-way send.
    #[serde(default = "yes")]
    pub return_final: bool,
    /// Caller-owned UUID: repeating it with the same input never writes twice and replays the
    /// first receipt. Generated (and returned in the receipt) when absent.
    #[serde(default)]
    pub request_id: Option<String>,
    /// The opaque incarnation from `agent_catalog`: admission is refused (`stale_incarnation`)
    /// if another process now runs behind the agent, or `busy` while a turn runs. Absent:
    /// whatever runs now, with the same idle checks (ADM-18).
    #[serde(default)]
    pub incarnation: Option<String>,
    /// With return_final false and no incarnation: allow the prompt to be written into a
    /// running turn (steering, a plain `agent send`), and to an agent whose turn state the
    /// observer cannot tell (a program that writes no Codex record). Default false: the prompt
    /// takes an agent seen idle only.
    #[serde(default)]
    pub steer: bool,
    /// Asynchronous deadline for return-final, in ms; 0 (default) disables it.
    #[serde(default)]
    pub final_timeout_ms: u64,
    /// Put the prompt's text in its `request.admitted` event (default: its hash only).
    #[serde(default)]
    pub share_prompt: bool,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)] // MCP-3: a misspelt argument (`requestId`) is an error, never ignored
pub struct RequestArgs {
    /// The request id (a UUID).
    pub request_id: String,
    /// Include the evidence trail (`request_get` only).
    #[serde(default)]
    pub evidence: bool,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)] // MCP-3: a misspelt argument (`requestId`) is an error, never ignored
pub struct WaitArgs {
    /// The request id (a UUID).
    pub request_id: String,
    /// How long to wait for the terminal event, in ms (default 30000, at most 120000; 0 asks
    /// once). On timeout the answer is `still_pending`: call again with the same id.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

#[derive(Debug, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SessionAction {
    List,
    Status,
    Output,
    Input,
    Submit,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)] // MCP-3: a misspelt argument (`requestId`) is an error, never ignored
pub struct SessionArgs {
    /// list | status | output | input | submit.
    pub action: SessionAction,
    /// The agent's name or id (status, output, input, submit).
    #[serde(default)]
    pub session_id: Option<String>,
    /// `input`: the text to write as is. `submit`: the command.
    #[serde(default)]
    pub input: Option<String>,
    /// `input`: a key written after the text: enter, escape, tab, backspace, ctrl-c, ctrl-d,
    /// ctrl-u, up, down, left, right (any case; ctrl_u and Ctrl+U spell ctrl-u).
    #[serde(default)]
    pub special_key: Option<String>,
    /// `output`: the opaque `next_cursor` of the previous page.
    #[serde(default)]
    pub after: Option<String>,
    /// `submit`: how long to wait for acknowledgement (clamped to 250..10000, default 3000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// MCP-3: an argument the action does not take is refused, nothing done: `submit` with
/// `after`, or `list` with `input`, went through as if it were not there (a review), so a
/// caller's mistake (the wrong action for its arguments) wrote to the agent unsaid.
fn inapplicable_arguments(args: &SessionArgs) -> Option<CallToolResult> {
    let given = [
        ("session_id", args.session_id.is_some()),
        ("input", args.input.is_some()),
        ("special_key", args.special_key.is_some()),
        ("after", args.after.is_some()),
        ("timeout_ms", args.timeout_ms.is_some()),
    ];
    let (action, takes): (&str, &[&str]) = match args.action {
        SessionAction::List => ("list", &[]),
        SessionAction::Status => ("status", &["session_id"]),
        SessionAction::Output => ("output", &["session_id", "after"]),
        SessionAction::Input => ("input", &["session_id", "input", "special_key"]),
        SessionAction::Submit => ("submit", &["session_id", "input", "timeout_ms"]),
    };
    let extra: Vec<&str> = given.iter().filter(|(name, set)| *set && !takes.contains(name)).map(|(name, _)| *name).collect();
    (!extra.is_empty()).then(|| {
        let why = if action == "submit" && extra.contains(&"special_key") { " (a submit types input, then Enter, itself)" } else { "" };
        let message = format!("action={action} does not take {}{why}; it takes {}: nothing was done", extra.join(", "), if takes.is_empty() { "no other argument".to_string() } else { takes.join(", ") });
        usage("invalid_arguments", message)
    })
}

/// MCP-5: the answer to a `request_wait` the client cancelled (`request`: the last look's
/// answer, null when the cancel came during a look).
fn cancelled_wait(request: Value) -> CallToolResult {
    answer(0, json!({"terminal": false, "cancelled": true, "request": request, "message": "the client cancelled this wait; the request itself goes on"}))
}

/// The keys `special_key` names and the bytes each writes: one table for the lookup and for
/// the unknown-key answer's list (each key's first name is the listed one).
const SPECIAL_KEYS: &[(&[&str], &[u8])] = &[
    (&["enter", "return"], b"\r"),
    (&["escape", "esc"], b"\x1b"),
    (&["tab"], b"\t"),
    (&["backspace"], b"\x7f"),
    (&["ctrl-c"], b"\x03"),
    (&["ctrl-d"], b"\x04"),
    (&["ctrl-u"], b"\x15"),
    (&["up"], b"\x1b[A"),
    (&["down"], b"\x1b[B"),
    (&["left"], b"\x1b[D"),
    (&["right"], b"\x1b[C"),
];

/// The keys an unknown-key answer lists.
fn special_key_names() -> String {
    SPECIAL_KEYS.iter().map(|(names, _)| names[0]).collect::<Vec<_>>().join(", ")
}

/// The bytes a named key writes into a terminal. Any case; a control key's `-` may be spelled
/// `_`, `+` (spaces around it allowed) or a space (`ctrl_u`, `Ctrl + U`: a hostile run spelled
/// it so and was told only "unknown special_key"). Nothing else is loosened: `ctrl_c_` or
/// `ctrl--u` is no key (a typo must not write a ^C, the second hostile run).
pub fn special_key_bytes(name: &str) -> Option<&'static [u8]> {
    let name = name.to_ascii_lowercase();
    let name = match name.strip_prefix("ctrl") {
        Some(rest) => format!("ctrl-{}", control_letter(rest)?),
        None => name,
    };
    SPECIAL_KEYS.iter().find(|(names, _)| names.contains(&name.as_str())).map(|(_, bytes)| *bytes)
}

/// What follows `ctrl` in a key's name: one separator (`-`, `_` or `+`, spaces around it
/// allowed, or spaces alone), then one letter.
fn control_letter(rest: &str) -> Option<char> {
    let spaced = rest.trim_start_matches(' ');
    let after = match spaced.strip_prefix(['-', '_', '+']) {
        Some(after) => after.trim_start_matches(' '),
        None if spaced.len() < rest.len() => spaced, // spaces alone
        None => return None,
    };
    let mut chars = after.chars();
    let letter = chars.next().filter(char::is_ascii_alphabetic)?;
    chars.next().is_none().then_some(letter)
}

#[derive(Clone)]
pub struct WaktermMcp {
    paths: DataPaths,
    tool_router: ToolRouter<WaktermMcp>,
}

/// The daemon's reply as a tool result: its body, an error when its exit code is not 0.
/// MCP-2: a daemon answer as a tool result. The structured content is always the answer itself
/// (the receipt of an admission, accepted or refused, as of a submit), `isError` says whether
/// the CLI would exit non-zero, and `_meta` carries that exit code (`wakterm/exit_code`): a
/// refused admission used to come wrapped as `{exit_code, reply}`, so code reading
/// `classification` broke on every refusal.
fn result_of(reply: Reply) -> CallToolResult {
    let exit_code = reply.exit_code;
    let mut result = match exit_code {
        0 => CallToolResult::structured(reply.body),
        _ => CallToolResult::structured_error(reply.body),
    };
    let mut meta = serde_json::Map::new();
    meta.insert(EXIT_CODE_META.to_string(), json!(exit_code));
    result.meta = Some(rmcp::model::Meta(meta));
    result
}

/// A tool's own answer (not a daemon reply) with its exit code, as `result_of` gives it.
fn answer(exit_code: i32, body: serde_json::Value) -> CallToolResult {
    result_of(Reply { exit_code, body })
}

/// MCP-2: the `_meta` key of a tool result's exit code (the CLI's, for the same answer).
pub const EXIT_CODE_META: &str = "wakterm/exit_code";

/// The SDK's answer to arguments that do not deserialize into the tool's (its own text).
const SDK_ARGUMENT_ERROR: &str = "failed to deserialize parameters:";

/// MCP-2: arguments that do not fit a tool's schema (an unknown field, a wrong type, a
/// negative number, an unknown `action`) are a usage error like any other bad input: a
/// `wakterm.error.v1` object, `invalid_arguments`, exit 2 in `_meta`. The SDK answers them
/// with bare text, no structured content and no exit code (found by a review).
fn argument_error_structured(tool: &str, result: CallToolResult) -> CallToolResult {
    if result.is_error != Some(true) || result.structured_content.is_some() {
        return result;
    }
    let text = result.content.first().and_then(|content| content.raw.as_text()).map(|text| text.text.clone());
    match text {
        Some(text) if text.starts_with(SDK_ARGUMENT_ERROR) => usage("invalid_arguments", format!("{tool}: {text}; nothing was sent")),
        _ => result,
    }
}

fn usage(error: &str, message: impl Into<String>) -> CallToolResult {
    let body = json!({"schema": "wakterm.error.v1", "error": error, "message": message.into()});
    result_of(Reply { exit_code: crate::protocol::exit::USAGE, body })
}

impl WaktermMcp {
    pub fn new(paths: DataPaths) -> WaktermMcp {
        WaktermMcp { paths, tool_router: Self::tool_router() }
    }

    /// One daemon call off the async reactor (the client is blocking, with bounded waits).
    async fn call(&self, request: ClientRequest) -> Reply {
        self.call_within(request, client::CALL_TIMEOUT).await
    }

    /// [`call`](Self::call) waiting at most `bound` for the answer (`daemon_unresponsive`
    /// past it).
    async fn call_within(&self, request: ClientRequest, bound: Duration) -> Reply {
        let paths = self.paths.clone();
        match tokio::task::spawn_blocking(move || client::call_within(&paths, &request, bound)).await {
            Ok(reply) => reply,
            Err(error) => Reply::error(crate::protocol::exit::ERROR, "mcp_internal", error.to_string()),
        }
    }

    async fn catalog_entry(&self, target: &str) -> Result<Value, CallToolResult> {
        let reply = self.call(ClientRequest::Catalog).await;
        if reply.exit_code != 0 {
            return Err(result_of(reply));
        }
        // The CLI's exit for an unknown agent (6), as `session output` answered already; status
        // and input said 2 (a review).
        client::catalog_agent(&reply.body, target).map_err(result_of)
    }

    async fn session_input(&self, args: &SessionArgs) -> CallToolResult {
        let Some(target) = args.session_id.as_deref() else { return usage("bad_request", "action=input needs session_id") };
        let mut bytes = args.input.clone().unwrap_or_default().into_bytes();
        if let Some(key) = args.special_key.as_deref() {
            let Some(key_bytes) = special_key_bytes(key) else {
                return usage("bad_request", format!("unknown special_key {}; known keys: {} (nothing was written)", echoed(key), special_key_names()));
            };
            bytes.extend_from_slice(key_bytes);
        }
        if bytes.is_empty() {
            return usage("bad_request", "action=input needs input or special_key");
        }
        // MCP-4: bounded like a prompt (a longer write once hit the holder client's line
        // assertion: a panic answered as `mcp_internal`).
        if bytes.len() > wakterm_engine::limits::MAX_PROMPT_BYTES {
            let message = format!("input is {} bytes; the limit is {}: nothing was written", bytes.len(), wakterm_engine::limits::MAX_PROMPT_BYTES);
            return usage("input_too_large", message);
        }
        let entry = match self.catalog_entry(target).await {
            Ok(entry) => entry,
            Err(result) => return result,
        };
        // MCP-4: a managed agent's pane is its app-server's JSON-RPC stdin: raw bytes there
        // would start turns past admission (no claim, no record, no receipt) or answer its
        // server requests. Its prompts go through agent_admit.
        if entry["transport"] != "pty" {
            return usage("input_needs_pty", "this agent is a managed app-server session: its input is JSON-RPC, not keys; use agent_admit. Nothing was written");
        }
        let agent_id = entry["agent_id"].as_str().unwrap_or_default().to_string();
        let socket = self.paths.holder_socket(&agent_id);
        let length = bytes.len() as u64;
        let written = tokio::task::spawn_blocking(move || {
            let mut pane = crate::holder::HolderClient::connect(&socket).map_err(|e| (false, e.to_string()))?;
            // A call refused before anything was sent wrote nothing.
            pane.write(&bytes).map_err(|e| (!matches!(e, crate::holder::HolderError::NotSent { .. }), e.to_string()))
        })
        .await;
        match written {
            Ok(Ok(outcome)) => input_result(&agent_id, length, outcome),
            Ok(Err((false, error))) => input_error("write_failed", "not_started", format!("{error}: nothing was written")),
            // The request reached the holder: bytes may have landed (seed 003: unknown).
            Ok(Err((true, error))) => input_error("write_result_lost", "unknown", format!("{error}: some or all of the input may have been written")),
            Err(error) => input_error("mcp_internal", "unknown", format!("{error}: some or all of the input may have been written")),
        }
    }
}

/// MCP-4: `ok: true` only when every byte was written (seed 003: "bytes were written"); a
/// refusal (nothing written) or a short write is an error result that says how far it got.
fn input_result(agent_id: &str, length: u64, outcome: crate::holder::protocol::WriteOutcome) -> CallToolResult {
    let complete = outcome.refused.is_none() && outcome.error.is_none() && outcome.bytes_written == length;
    let write_state = match (complete, outcome.bytes_written) {
        (true, _) => "complete",
        (false, 0) => "not_started",
        (false, _) => "partial",
    };
    let body = json!({"ok": complete, "agent_id": agent_id, "write_state": write_state, "bytes": length, "write": outcome});
    answer(input_exit_code(write_state), body)
}

fn input_error(error: &str, write_state: &str, message: String) -> CallToolResult {
    answer(input_exit_code(write_state), json!({"schema": "wakterm.error.v1", "ok": false, "error": error, "write_state": write_state, "message": message}))
}

/// MCP-2's exit code of a raw input: written whole 0, nothing written 4 (rejected), some or
/// unknown 5 (indeterminate).
fn input_exit_code(write_state: &str) -> i32 {
    use crate::protocol::exit;
    match write_state {
        "complete" => exit::OK,
        "not_started" => exit::REJECTED,
        _ => exit::INDETERMINATE,
    }
}

impl WaktermMcp {
    /// SUB-*: the daemon's submit, whose receipt is the tool's result (an `isError` result
    /// for anything but an acknowledgement, with the receipt as its structured content).
    async fn session_submit(&self, args: &SessionArgs) -> CallToolResult {
        let Some(target) = args.session_id.clone() else { return usage("bad_request", "action=submit needs session_id") };
        let Some(text) = args.input.clone() else { return usage("bad_request", "action=submit needs input (the command to submit)") };
        let request = crate::protocol::SubmitRequest { target, exact_agent_id: false, text, timeout_ms: args.timeout_ms };
        let paths = self.paths.clone();
        let reply = match tokio::task::spawn_blocking(move || client::call_submit(&paths, &request)).await {
            Ok(reply) => reply,
            // The call may have reached the daemon: as unknown as a lost reply (SUB-5).
            Err(error) => Reply { exit_code: crate::protocol::exit::INDETERMINATE, body: json!({"schema": "wakterm.error.v1", "error": "mcp_internal", "message": error.to_string(), "write_state": "unknown", "retry_safe": false}) },
        };
        // The receipt itself is the answer, unwrapped: `isError` unless acknowledged.
        result_of(reply)
    }
}

#[tool_router]
impl WaktermMcp {
    #[tool(description = "The agents the wakterm daemon manages: state, incarnation, whether return-final admission is available and why not, and events_through (the Agent API event sequence the view is consistent with).")]
    async fn agent_catalog(&self, Parameters(NoArgs {}): Parameters<NoArgs>) -> Result<CallToolResult, ErrorData> {
        Ok(result_of(self.call(ClientRequest::Catalog).await))
    }

    #[tool(description = "What this wakterm daemon supports: operations, limits, the event stream's schema and kinds.")]
    async fn agent_capabilities(&self, Parameters(NoArgs {}): Parameters<NoArgs>) -> Result<CallToolResult, ErrorData> {
        Ok(result_of(self.call(ClientRequest::Capabilities).await))
    }

    #[tool(description = "Submit a prompt to an agent, at most once per request_id. With return_final (default) the answer is a receipt for a durable request whose terminal event will carry the final answer of exactly the turn this prompt starts: wait for it with request_wait. The receipt never claims more than the evidence shows: read classification, prompt_written and retry_safe; never retry under a new id what was not retry_safe. A prompt is never written into a turn the observer has seen running (busy / turn_active, nothing written), nor to an agent whose turn state it cannot tell (turn_state_unknown), unless steer is true with return_final false and no incarnation: then it is a plain send, written anyway. Pass incarnation (from agent_catalog) to also refuse another process behind the agent.")]
    async fn agent_admit(&self, Parameters(args): Parameters<AdmitArgs>) -> Result<CallToolResult, ErrorData> {
        if args.steer && (args.incarnation.is_some() || args.return_final) {
            // An admission never steers, nor does a return-final prompt: the caller asked for
            // two contradicting things; nothing is sent. Refused as the daemon refuses input.
            let operation = if args.incarnation.is_some() { Operation::Admit } else { Operation::Send };
            let return_mode = if args.return_final { ReturnMode::ReturnFinal } else { ReturnMode::OneWay };
            let detail = "steer needs return_final false and no incarnation (return_final defaults to true); an admission or a return-final prompt never steers. Nothing was sent".to_string();
            return Ok(result_of(client::refused_input(operation, return_mode, args.request_id.as_deref(), args.request_id.is_some(), "steer_not_allowed", detail)));
        }
        let operation = if args.incarnation.is_some() { Operation::Admit } else { Operation::Send };
        let generated_id = args.request_id.is_none();
        let request_id = args.request_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let admit = AdmitRequest {
            request_id: Some(request_id.clone()),
            operation,
            target: args.agent,
            exact_agent_id: false,
            incarnation: args.incarnation,
            prompt: args.prompt,
            paste_mode: PasteMode::Bracketed,
            return_mode: if args.return_final { ReturnMode::ReturnFinal } else { ReturnMode::OneWay },
            final_timeout_ms: args.final_timeout_ms,
            share_prompt: args.share_prompt,
            generated_id,
            // ADM-18, seed 000: the admission API never steers an active turn unless asked (a
            // return-final prompt needs an idle agent anyway).
            no_steer: operation == Operation::Send && !args.return_final && !args.steer,
        };
        let paths = self.paths.clone();
        // IDEM-7, INP-1: as the CLI's `agent admit` (one copy): the size checked before
        // sending, a reply lost after sending `indeterminate` with the request id to replay.
        let reply = match tokio::task::spawn_blocking(move || client::call_admission(&paths, &admit)).await {
            Ok(reply) => reply,
            Err(error) => Reply { exit_code: crate::protocol::exit::INDETERMINATE, body: json!({"schema": "wakterm.error.v1", "error": "mcp_internal", "classification": "indeterminate", "request_id": request_id, "message": format!("{error}; the prompt may have been written: replay with the same request_id")}) },
        };
        Ok(result_of(reply))
    }

    #[tool(description = "A request's current state, its receipt and (once durable) its terminal event; with evidence, the evidence trail that decided it.")]
    async fn request_get(&self, Parameters(args): Parameters<RequestArgs>) -> Result<CallToolResult, ErrorData> {
        Ok(result_of(self.call(ClientRequest::RequestGet { request_id: args.request_id, evidence: args.evidence }).await))
    }

    #[tool(description = "Wait (bounded) for a return-final request's terminal event: completed with the final answer, or aborted, timed_out, cancelled, delivery_failed, indeterminate. On timeout answers still_pending: call again with the same request_id.")]
    async fn request_wait(&self, Parameters(args): Parameters<WaitArgs>, context: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        let wait = Duration::from_millis(args.timeout_ms.unwrap_or(DEFAULT_WAIT_MS).min(MAX_WAIT_MS));
        let deadline = Instant::now() + wait;
        loop {
            // MCP-5: each look waits for the daemon no longer than the wait has left (at least
            // a second): a frozen daemon made a 200 ms wait answer after 61 s (a review).
            let bound = deadline.saturating_duration_since(Instant::now()).max(WAIT_LOOK_MIN);
            let look = self.call_within(ClientRequest::RequestGet { request_id: args.request_id.clone(), evidence: false }, bound);
            // A cancel ends a look in flight too (a frozen daemon held one to the bound: a review).
            let reply = tokio::select! {
                reply = look => reply,
                () = context.ct.cancelled() => return Ok(cancelled_wait(Value::Null)),
            };
            // RF-6: an id whose admission has not committed its record yet is waited for, as a
            // pending request is (an `agent_admit` and a `request_wait` in flight together
            // answered `request_not_found` while the admission registered: a hostile run).
            let admitting = reply.body["error"] == crate::daemon::requests::ADMISSION_IN_PROGRESS;
            if reply.exit_code != 0 && !admitting {
                return Ok(result_of(reply));
            }
            if !reply.body["terminal_event"].is_null() {
                return Ok(answer(0, json!({"terminal": true, "terminal_event": reply.body["terminal_event"], "request": reply.body})));
            }
            if reply.body["return_mode"] == "one_way" {
                return Ok(answer(0, json!({"terminal": false, "one_way": true, "request": reply.body, "message": "a one-way request has no terminal event"})));
            }
            if Instant::now() >= deadline {
                let (state, request) = match admitting {
                    true => (json!("admitting"), Value::Null),
                    false => (reply.body["state"].clone(), reply.body.clone()),
                };
                let body = json!({"terminal": false, "still_pending": true, "state": state, "request": request, "message": "not terminal yet: call request_wait again with the same request_id"});
                return Ok(answer(0, body));
            }
            // MCP-5: a client's `notifications/cancelled` ends the wait (it went on to its
            // timeout); the answer, which the client may ignore, says so.
            tokio::select! {
                () = tokio::time::sleep(WAIT_POLL.min(deadline.saturating_duration_since(Instant::now()))) => {}
                () = context.ct.cancelled() => return Ok(cancelled_wait(if admitting { Value::Null } else { reply.body })),
            }
        }
    }

    #[tool(description = "Agent sessions. action=list: every agent; status: one agent's catalog entry; output: the experimental output page (after: the previous next_cursor); input: raw text and/or a special_key written into the agent's terminal, answering write completion only (no acknowledgement); submit: one command (a prompt or a slash command like /clear) into an idle agent's EMPTY composer, answered by one receipt: acknowledged only when the terminal moved after the Enter and the composer reads empty; rejected (nothing written, retry_safe: true) when the agent is busy, has a draft or a question; never retry a receipt with retry_safe: false. timeout_ms (250..10000, default 3000) bounds the acknowledgement wait. For the turn's final answer use agent_admit + request_wait.")]
    async fn session(&self, Parameters(args): Parameters<SessionArgs>) -> Result<CallToolResult, ErrorData> {
        if let Some(refused) = inapplicable_arguments(&args) {
            return Ok(refused);
        }
        // INP-4: a session id that cannot name an agent is malformed, for every action, as for
        // submit and agent_admit (status, output and input said `agent_unknown`, which reads as
        // "start it first"), before anything is sent. Submit answers it in its own receipt,
        // output in its page's schema (OUT-1).
        let malformed = args.session_id.as_deref().and_then(|id| wakterm_engine::target_malformed(id).map(|detail| (id, detail)));
        match (malformed, &args.action) {
            (Some(_), SessionAction::Submit) | (None, _) => {}
            (Some((id, detail)), SessionAction::Output) => return Ok(result_of(crate::output_page::target_malformed(id, &detail))),
            (Some((_, detail)), _) => return Ok(usage("target_malformed", format!("session_id: {detail}; nothing was sent"))),
        }
        let result = match args.action {
            SessionAction::List => result_of(self.call(ClientRequest::Catalog).await),
            SessionAction::Status => match args.session_id.as_deref() {
                None => usage("bad_request", "action=status needs session_id"),
                Some(target) => self.catalog_entry(target).await.map_or_else(|error| error, |entry| answer(0, entry)),
            },
            SessionAction::Output => match args.session_id.clone() {
                None => usage("bad_request", "action=output needs session_id"),
                Some(target) => result_of(self.call(ClientRequest::AgentOutput { target, after: args.after.clone() }).await),
            },
            SessionAction::Input => self.session_input(&args).await,
            SessionAction::Submit => self.session_submit(&args).await,
        };
        Ok(result)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for WaktermMcp {
    /// The SDK's dispatch, with MCP-2's shape for arguments that do not fit the tool.
    async fn call_tool(&self, request: CallToolRequestParams, context: RequestContext<RoleServer>) -> Result<CallToolResult, ErrorData> {
        let tool = request.name.to_string();
        let context = rmcp::handler::server::tool::ToolCallContext::new(self, request, context);
        Ok(argument_error_structured(&tool, self.tool_router.call(context).await?))
    }

    fn get_info(&self) -> ServerInfo {
        let info = Implementation::new("wakterm", env!("CARGO_PKG_VERSION"));
        ServerInfo::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(info)
            .with_instructions("Hand prompts to terminal coding agents at most once and get back the final answer of exactly the turn each prompt started. Start with agent_catalog; submit with agent_admit; wait with request_wait.")
    }
}

/// Serves MCP on stdin/stdout until the client closes it. The daemon must be running
/// (`wakterm mux start`); tools answer `daemon_not_running` otherwise.
pub fn run(paths: DataPaths) -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("wakterm mcp: {error}");
            return crate::protocol::exit::ERROR;
        }
    };
    runtime.block_on(async move {
        let (stdin, stdout) = rmcp::transport::stdio();
        let tripped = std::sync::Arc::new(std::sync::Mutex::new(None));
        // MCP-7: the screen's own answers share standard output with the SDK, a line at a time.
        let out = std::sync::Arc::new(tokio::sync::Mutex::new(stdout));
        let (answers, answering) = answer_writer(out.clone());
        let input = BoundedLines::new(stdin, MAX_MESSAGE_LINE, tripped.clone()).answering(answers);
        let transport = (input, SharedOut::new(out.clone()));
        // MCP-1: rmcp takes the read error for the end of its input and `waiting` answers Ok;
        // the bound's own record says the server stopped because of it (it exited 0, silent).
        let tripped = move || tripped.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let service = match WaktermMcp::new(paths).serve(transport).await {
            Ok(service) => service,
            Err(error) => {
                let (why, id) = initialize_failure(&error);
                // MCP-1: a request sent before `initialize` is answered under its id (its
                // client waited for nothing otherwise), then the server ends.
                if let Some(id) = id {
                    use tokio::io::AsyncWriteExt;
                    let mut answer = error_answer(id, -32600, "the server is not initialized: the first message must be `initialize`");
                    answer.push(b'\n');
                    let mut out = out.lock().await;
                    let _ = out.write_all(&answer).await;
                    let _ = out.flush().await;
                }
                eprintln!("wakterm mcp: the client did not initialize: {why}");
                return crate::protocol::exit::ERROR;
            }
        };
        let waited = service.waiting().await;
        // The transport is gone with the service, and so is the answers' sender: the writer
        // ends once it has written what the screen answered last.
        let _ = tokio::time::timeout(Duration::from_secs(1), answering).await;
        match waited {
            Ok(_) => match tripped() {
                Some(message) => {
                    eprintln!("wakterm mcp: {message}");
                    crate::protocol::exit::ERROR
                }
                None => crate::protocol::exit::OK,
            },
            Err(error) => {
                eprintln!("wakterm mcp: {error}");
                crate::protocol::exit::ERROR
            }
        }
    })
}

/// MCP-1: the longest message line the server reads (a prompt at its 64 KiB limit, each byte
/// escaped as `\uXXXX`, is well under it).
pub const MAX_MESSAGE_LINE: usize = 4 * 1024 * 1024;

/// Standard input handed to the SDK one whole line at a time, each screened first
/// ([`screen_line`]), failing once a line runs past `max` bytes without its newline: the SDK's
/// line reader buffers a line whole, so a client sending 150 MB without a newline grew the
/// server to match (a review found it). The server then ends, saying why, after the lines
/// that came whole before it (they were dropped with the chunk that tripped the bound).
struct BoundedLines<R> {
    inner: R,
    /// The line being read, without its newline.
    line: Vec<u8>,
    /// Screened lines for the SDK.
    ready: std::collections::VecDeque<u8>,
    max: usize,
    /// The input ended (what is left of a last line without its newline goes on as it is).
    ended: bool,
    /// Why the bound ended the input, once it did.
    tripped: std::sync::Arc<std::sync::Mutex<Option<String>>>,
    /// MCP-7: where the screen's own answers go (to standard output, between the SDK's lines).
    answers: Option<tokio::sync::mpsc::UnboundedSender<Vec<u8>>>,
    /// MCP-7: an `initialize` request was handed on (a second one is answered here).
    initialized: std::cell::Cell<bool>,
}

impl<R> BoundedLines<R> {
    fn new(inner: R, max: usize, tripped: std::sync::Arc<std::sync::Mutex<Option<String>>>) -> BoundedLines<R> {
        BoundedLines { inner, line: Vec::new(), ready: Default::default(), max, ended: false, tripped, answers: None, initialized: Default::default() }
    }

    /// MCP-7: answers a request the SDK would drop unanswered through `answers`.
    fn answering(self, answers: tokio::sync::mpsc::UnboundedSender<Vec<u8>>) -> BoundedLines<R> {
        BoundedLines { answers: Some(answers), ..self }
    }

    /// One whole line for the SDK (without its newline): screened, or answered here (MCP-7).
    /// Returns the line to hand on, if any.
    fn screen(&self, line: &[u8]) -> Option<Vec<u8>> {
        let unread = || match unreadable(line) {
            Some(Unreadable::Answer(answer)) => Some(Some(answer)),
            Some(Unreadable::Dropped) => Some(None),
            None => None,
        };
        let own = invalid_id_answer(line).or_else(|| own_answer(line, self.initialized.get())).map(Some).or_else(unread);
        if let Some(answer) = own {
            if let (Some(answers), Some(answer)) = (&self.answers, answer) {
                let _ = answers.send(answer); // the writer ends only after the input does
            }
            return None;
        }
        self.initialized.set(self.initialized.get() || is_initialize(line));
        screen_line(line)
    }

    /// Takes what was read: whole lines go to `ready`, screened; false once the bound tripped.
    fn take(&mut self, read: &[u8]) -> bool {
        for byte in read {
            if *byte != b'\n' {
                self.line.push(*byte);
                if self.line.len() > self.max {
                    let message = format!("a message line runs past {} bytes without its end; closing", self.max);
                    *self.tripped.lock().unwrap_or_else(|p| p.into_inner()) = Some(message);
                    return false;
                }
                continue;
            }
            let line = std::mem::take(&mut self.line);
            if let Some(screened) = self.screen(&line) {
                self.ready.extend(screened);
                self.ready.push_back(b'\n');
            }
        }
        true
    }
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for BoundedLines<R> {
    fn poll_read(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &mut tokio::io::ReadBuf<'_>) -> std::task::Poll<std::io::Result<()>> {
        use std::task::Poll;
        loop {
            if !self.ready.is_empty() {
                let n = buf.remaining().min(self.ready.len());
                let chunk: Vec<u8> = self.ready.drain(..n).collect();
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if let Some(message) = self.tripped.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                return Poll::Ready(Err(std::io::Error::new(std::io::ErrorKind::InvalidData, message)));
            }
            if self.ended {
                let rest = std::mem::take(&mut self.line);
                if rest.is_empty() {
                    return Poll::Ready(Ok(())); // the end of the input
                }
                // The SDK runs a last line without its newline too: screened like any other
                // (it went on unscreened: a review).
                match self.screen(&rest) {
                    Some(screened) => self.ready.extend(screened),
                    None => return Poll::Ready(Ok(())),
                }
                continue;
            }
            let mut bytes = [0u8; 8192];
            let mut read = tokio::io::ReadBuf::new(&mut bytes);
            match std::pin::Pin::new(&mut self.inner).poll_read(cx, &mut read) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(error)) => return Poll::Ready(Err(error)),
                Poll::Ready(Ok(())) if read.filled().is_empty() => self.ended = true,
                Poll::Ready(Ok(())) => {
                    let filled = read.filled().to_vec();
                    let _ = self.take(&filled); // a trip is said once `ready` is handed on
                }
            }
        }
    }
}

/// MCP-7: the screen's answer to a line the SDK answers against JSON-RPC 2.0 (a hostile run),
/// none for any other: a line that is not JSON (the SDK's parse error had no `id`: here under
/// id null, -32700); a request with a readable id but no `"jsonrpc": "2.0"` or no string
/// method (the SDK's id-less parse error: here Invalid Request under its id); a `tools/call`
/// without a tool name (the SDK's "method not found": here -32602 under its id); a second
/// `initialize` (the SDK answered it, naming another protocol version than the session's).
/// Nothing runs for any of them.
pub fn own_answer(line: &[u8], initialized: bool) -> Option<Vec<u8>> {
    let body = as_sdk_reads(line);
    if body.iter().all(u8::is_ascii_whitespace) {
        return None;
    }
    let Ok(message) = serde_json::from_slice::<Value>(body) else {
        return Some(error_answer(Value::Null, -32700, "parse error: the line is not one JSON value; nothing ran"));
    };
    if message.is_array() {
        return Some(error_answer(Value::Null, -32600, "invalid request: a batch (a JSON array) is not taken (MCP has none since 2025-06-18): send each message on a line of its own; nothing ran"));
    }
    let object = message.as_object()?;
    let id = object.get("id").filter(|id| id.is_string() || id.is_i64())?.clone();
    if object.contains_key("result") || object.contains_key("error") {
        return None; // a response: never answered
    }
    let method = object.get("method").and_then(Value::as_str);
    if object.get("jsonrpc") != Some(&json!("2.0")) || method.is_none() {
        return Some(error_answer(id, -32600, "invalid request: a request has \"jsonrpc\": \"2.0\" and a string method; nothing ran"));
    }
    let params = object.get("params");
    if params.is_some_and(|params| !params.is_object() && !params.is_array()) {
        return Some(error_answer(id, -32602, "invalid params: params is an object; nothing ran"));
    }
    let named = params.and_then(|params| params.get("name")).is_some_and(Value::is_string);
    let arguments_fit = params.and_then(|params| params.get("arguments")).filter(|arguments| !arguments.is_null()).is_none_or(Value::is_object);
    match method {
        Some("initialize") if initialized => Some(error_answer(id, -32600, "invalid request: the session is initialized already; nothing changed")),
        Some("initialize") if !params.is_some_and(Value::is_object) => Some(error_answer(id, -32602, "invalid params: initialize carries its params (protocolVersion, capabilities, clientInfo); nothing ran")),
        Some("tools/call") if !named => Some(error_answer(id, -32602, "invalid params: tools/call names its tool in params.name, a string; nothing ran")),
        Some("tools/call") if !arguments_fit => Some(error_answer(id, -32602, "invalid params: tools/call's params.arguments is an object; nothing ran")),
        _ => None,
    }
}

/// MCP-7: what the screen does with a line the SDK cannot read as a client's message (it
/// answered each with a parse error with no `id` member, against JSON-RPC 2.0: a hostile run
/// and a review). Left to [`own_answer`] and [`invalid_id_answer`] first (their answers say
/// more).
#[derive(Debug, PartialEq, Eq)]
pub enum Unreadable {
    /// Written to the client; nothing runs.
    Answer(Vec<u8>),
    /// Not answered: a notification never is (JSON-RPC 2.0), nor a response.
    Dropped,
}

/// MCP-7: [`Unreadable`] for a line the SDK cannot read, None for one it can (or one that is
/// not JSON: [`own_answer`]'s). A JSON value that is not an object, or an object with no id
/// that is no well-formed notification (`"jsonrpc": "2.0"`, a string method, structured
/// params if any: JSON-RPC's own example `{"jsonrpc": "2.0", "method": 1}`), is Invalid
/// Request under id null; a request with a readable id, whose `jsonrpc` and method
/// `own_answer` found well-formed, has params the SDK cannot read as its method's: Invalid
/// params under its id; a well-formed notification, or a response, is dropped.
pub fn unreadable(line: &[u8]) -> Option<Unreadable> {
    let body = as_sdk_reads(line);
    if serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(body).is_ok() {
        return None;
    }
    let message = serde_json::from_slice::<Value>(body).ok()?;
    let Some(object) = message.as_object() else {
        return Some(Unreadable::Answer(error_answer(Value::Null, -32600, "invalid request: a message is a JSON object; nothing ran")));
    };
    let response = object.contains_key("result") || object.contains_key("error");
    if response && !object.contains_key("method") {
        return Some(Unreadable::Dropped); // a response: never answered
    }
    let well_formed = object.get("jsonrpc") == Some(&json!("2.0")) && object.get("method").is_some_and(Value::is_string);
    match object.get("id") {
        Some(id) if (id.is_string() || id.is_i64()) && (response || !well_formed) => {
            let message = "invalid request: a request has \"jsonrpc\": \"2.0\", a string method and no result or error; nothing ran";
            Some(Unreadable::Answer(error_answer(id.clone(), -32600, message)))
        }
        Some(id) if id.is_string() || id.is_i64() => {
            let message = "invalid params: the server cannot read this request's params as its method's; nothing ran";
            Some(Unreadable::Answer(error_answer(id.clone(), -32602, message)))
        }
        Some(_) => None, // `invalid_id_answer`'s
        None if is_notification(object) => Some(Unreadable::Dropped),
        None => {
            let message = "invalid request: a notification has \"jsonrpc\": \"2.0\", a string method and, if any, object or array params; nothing ran";
            Some(Unreadable::Answer(error_answer(Value::Null, -32600, message)))
        }
    }
}

/// A well-formed JSON-RPC 2.0 notification (whatever its method and params say).
fn is_notification(object: &serde_json::Map<String, Value>) -> bool {
    let structured = object.get("params").is_none_or(|params| params.is_object() || params.is_array());
    object.get("jsonrpc") == Some(&json!("2.0")) && object.get("method").is_some_and(Value::is_string) && structured
}

/// An `initialize` request (the screen answers a second one).
fn is_initialize(line: &[u8]) -> bool {
    let body = as_sdk_reads(line);
    serde_json::from_slice::<Value>(body).is_ok_and(|message| message["method"] == "initialize" && message.get("id").is_some())
}

/// A line as the SDK reads it: rmcp 1.8 drops a leading UTF-8 BOM (serde takes a trailing CR
/// as white space).
fn as_sdk_reads(line: &[u8]) -> &[u8] {
    line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line)
}

fn error_answer(id: Value, code: i64, message: &str) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}}).to_string().into_bytes()
}

/// MCP-7: the answer to a request whose id the SDK cannot take (rmcp 1.8 takes a string or a
/// 64-bit signed integer, and dropped any other request unanswered: `null`, `1.5`, `1e3`, 2^64,
/// `true`, an object; the client waited for good, a hostile run): JSON-RPC's Invalid Request,
/// under id null (the id could not be read as one; MCP forbids null ids), and nothing runs.
/// None for any other line: a notification (no id), a response (no method), a line that does
/// not parse (the SDK answers it).
pub fn invalid_id_answer(line: &[u8]) -> Option<Vec<u8>> {
    let body = as_sdk_reads(line);
    let message = serde_json::from_slice::<Value>(body).ok()?;
    let id = message.as_object()?.get("id")?;
    if message.get("method").is_none() || id.is_string() || id.is_i64() {
        return None;
    }
    let error = json!({"code": -32600, "message": "invalid request: its id is not a string or a 64-bit integer (MCP ids are strings or integers); nothing ran"});
    Some(json!({"jsonrpc": "2.0", "id": null, "error": error}).to_string().into_bytes())
}

/// MCP-1: why the client did not initialize, never with what it sent (the SDK's own text is
/// the whole first message, arguments and all: a prompt on standard error, a hostile run), and
/// the id to answer when that message was a request.
fn initialize_failure(error: &rmcp::service::ServerInitializeError) -> (String, Option<Value>) {
    use rmcp::service::ServerInitializeError;
    match error {
        ServerInitializeError::ExpectedInitializeRequest(Some(message)) => {
            let json = serde_json::to_value(message).unwrap_or(Value::Null);
            let Some(method) = json["method"].as_str() else {
                return ("its first message was not a request (`initialize` comes first)".to_string(), None);
            };
            let shown: String = method.chars().take(64).collect();
            (format!("its first message was {shown:?}, not `initialize`"), json.get("id").cloned())
        }
        ServerInitializeError::ExpectedInitializeRequest(None) => ("its input ended before `initialize`".to_string(), None),
        other => (other.to_string(), None),
    }
}

/// MCP-7: writes the screen's answers to the shared output, each a whole line between the
/// SDK's; ends when the screen (the input) is gone.
fn answer_writer<W: tokio::io::AsyncWrite + Unpin + Send + 'static>(out: std::sync::Arc<tokio::sync::Mutex<W>>) -> (tokio::sync::mpsc::UnboundedSender<Vec<u8>>, tokio::task::JoinHandle<()>) {
    use tokio::io::AsyncWriteExt;
    let (answers, mut pending) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
    let writer = tokio::spawn(async move {
        while let Some(mut line) = pending.recv().await {
            line.push(b'\n');
            let mut out = out.lock().await;
            if out.write_all(&line).await.is_err() || out.flush().await.is_err() {
                return; // the client is gone
            }
        }
    });
    (answers, writer)
}

/// MCP-7: standard output as the SDK writes it, shared with the screen's answers: the SDK
/// holds it from the first byte of a message line to its newline, so an answer goes between
/// two lines, never inside one.
struct SharedOut<W: Send + 'static> {
    out: std::sync::Arc<tokio::sync::Mutex<W>>,
    held: Option<tokio::sync::OwnedMutexGuard<W>>,
    locking: Option<std::pin::Pin<Box<dyn std::future::Future<Output = tokio::sync::OwnedMutexGuard<W>> + Send>>>,
    /// The last byte written was not a newline: the line is still being written.
    mid_line: bool,
}

impl<W: Send + 'static> SharedOut<W> {
    fn new(out: std::sync::Arc<tokio::sync::Mutex<W>>) -> SharedOut<W> {
        SharedOut { out, held: None, locking: None, mid_line: false }
    }

    fn poll_hold(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.held.is_none() {
            if self.locking.is_none() {
                self.locking = Some(Box::pin(self.out.clone().lock_owned()));
            }
            let guard = std::task::ready!(self.locking.as_mut().expect("just set").as_mut().poll(cx));
            self.locking = None;
            self.held = Some(guard);
        }
        std::task::Poll::Ready(())
    }

    /// Lets the answers in at a line's end.
    fn release_between_lines(&mut self) {
        if !self.mid_line {
            self.held = None;
        }
    }
}

impl<W: tokio::io::AsyncWrite + Unpin + Send + 'static> tokio::io::AsyncWrite for SharedOut<W> {
    fn poll_write(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>, buf: &[u8]) -> std::task::Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_hold(cx));
        let out = this.held.as_mut().expect("held");
        let n = std::task::ready!(std::pin::Pin::new(&mut **out).poll_write(cx, buf))?;
        if n > 0 {
            this.mid_line = buf[n - 1] != b'\n';
            this.release_between_lines();
        }
        std::task::Poll::Ready(Ok(n))
    }

    fn poll_flush(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_hold(cx));
        let out = this.held.as_mut().expect("held");
        let flushed = std::task::ready!(std::pin::Pin::new(&mut **out).poll_flush(cx));
        this.release_between_lines();
        std::task::Poll::Ready(flushed)
    }

    fn poll_shutdown(self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<std::io::Result<()>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_hold(cx));
        let out = this.held.as_mut().expect("held");
        std::pin::Pin::new(&mut **out).poll_shutdown(cx)
    }
}

/// MCP-6: what one message line becomes before the SDK reads it. A line with a key twice in
/// one object (`{"action": "list", "action": "submit"}`) is refused: serde keeps the last
/// one, so a gateway or approval layer that reads the first showed a read-only call that
/// wrote (a review). A request is turned into a call of the method
/// [`DUPLICATE_KEY_METHOD`], which no one serves, so the SDK answers its id "method not found"
/// and nothing runs; a notification is dropped. Everything else passes as it is (the SDK
/// answers what does not parse).
pub fn screen_line(line: &[u8]) -> Option<Vec<u8>> {
    // Read as the SDK reads it (rmcp 1.8 drops a leading UTF-8 BOM; serde takes the trailing
    // CR as white space): a BOM before a line hid its duplicate keys from this check (a review).
    let body = as_sdk_reads(line);
    if !has_duplicate_keys(body) {
        return Some(line.to_vec());
    }
    // A key twice before the line breaks off: the SDK answers what does not parse; so it does
    // a batch (an array), which it does not take.
    let Ok(message) = serde_json::from_slice::<Value>(body) else { return Some(line.to_vec()) };
    if !message.is_object() {
        return Some(line.to_vec());
    }
    // A response (no method) is dropped, not answered: an error under its id would be taken as
    // the answer to one of the client's own calls. So is a request whose id is given twice:
    // whose call it is cannot be told.
    if message.get("method").is_none() || top_level_keys(body).iter().filter(|key| *key == "id").count() > 1 {
        return None;
    }
    let id = message.get("id").filter(|id| id.is_string() || id.is_number()).cloned()?;
    Some(json!({"jsonrpc": "2.0", "id": id, "method": DUPLICATE_KEY_METHOD, "params": {}}).to_string().into_bytes())
}

/// Whether a JSON value holds an object with a key twice, at any depth (false for what does
/// not parse).
pub fn has_duplicate_keys(body: &[u8]) -> bool {
    serde_json::from_slice::<NoDuplicateKeys>(body).is_err_and(|error| error.to_string().contains(DUPLICATE_KEY_MARK))
}

/// The keys of a JSON object, in order, repeats included (empty for anything else).
fn top_level_keys(body: &[u8]) -> Vec<String> {
    struct Keys(Vec<String>);
    impl<'de> serde::Deserialize<'de> for Keys {
        fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct Visitor;
            impl<'de> serde::de::Visitor<'de> for Visitor {
                type Value = Keys;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a JSON object")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Keys, A::Error> {
                    let mut keys = Vec::new();
                    while let Some(key) = map.next_key::<String>()? {
                        map.next_value::<serde::de::IgnoredAny>()?;
                        keys.push(key);
                    }
                    Ok(Keys(keys))
                }
            }
            deserializer.deserialize_map(Visitor)
        }
    }
    serde_json::from_slice::<Keys>(body).map(|keys| keys.0).unwrap_or_default()
}

/// MCP-6: the method a request with a duplicate key is turned into (the SDK's "method not
/// found" names it, so the client reads why).
pub const DUPLICATE_KEY_METHOD: &str = "wakterm/refused: a JSON object of this request has a key twice; nothing was done";
const DUPLICATE_KEY_MARK: &str = "wakterm duplicate key";

/// Any JSON value; fails on an object with a key twice (at any depth).
struct NoDuplicateKeys;

impl<'de> serde::Deserialize<'de> for NoDuplicateKeys {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NoDuplicateKeysVisitor)
    }
}

struct NoDuplicateKeysVisitor;

impl<'de> serde::de::Visitor<'de> for NoDuplicateKeysVisitor {
    type Value = NoDuplicateKeys;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_i64<E>(self, _: i64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_u64<E>(self, _: u64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_f64<E>(self, _: f64) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_str<E>(self, _: &str) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }
    fn visit_unit<E>(self) -> Result<NoDuplicateKeys, E> {
        Ok(NoDuplicateKeys)
    }

    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<NoDuplicateKeys, A::Error> {
        while seq.next_element::<NoDuplicateKeys>()?.is_some() {}
        Ok(NoDuplicateKeys)
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<NoDuplicateKeys, A::Error> {
        let mut keys = std::collections::HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key) {
                return Err(serde::de::Error::custom(DUPLICATE_KEY_MARK));
            }
            map.next_value::<NoDuplicateKeys>()?;
        }
        Ok(NoDuplicateKeys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    /// MCP-7: a request whose id the SDK cannot take is answered here, Invalid Request under id
    /// null, and not handed on; every other line is left to the screen and the SDK.
    #[test]
    fn mcp_7_a_request_whose_id_the_sdk_cannot_take_is_answered_here() {
        for id in ["null", "1.5", "1e3", "18446744073709551616", "9223372036854775808", "true", "{}", "[1]"] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#);
            let answer: Value = serde_json::from_slice(&invalid_id_answer(line.as_bytes()).unwrap_or_else(|| panic!("{id}: unanswered"))).unwrap();
            assert_eq!((&answer["id"], &answer["error"]["code"]), (&Value::Null, &json!(-32600)), "{id}: {answer}");
        }
        for taken in ["1", "-1", "0", "9223372036854775807", r#""c1""#] {
            let line = format!(r#"{{"jsonrpc":"2.0","id":{taken},"method":"tools/list"}}"#);
            assert_eq!(invalid_id_answer(line.as_bytes()), None, "{taken}: the SDK answers it");
        }
        assert_eq!(invalid_id_answer(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#), None, "a notification");
        assert_eq!(invalid_id_answer(br#"{"jsonrpc":"2.0","id":1.5,"result":{}}"#), None, "a response is never answered");
        assert_eq!(invalid_id_answer(b"{not json"), None, "the SDK answers what does not parse");
        assert!(invalid_id_answer(b"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":null,\"method\":\"x\"}").is_some(), "after a BOM, as the SDK reads it");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let lines = BoundedLines::new(tokio::io::empty(), 1_000, Default::default()).answering(tx);
        assert_eq!(lines.screen(br#"{"jsonrpc":"2.0","id":null,"method":"tools/list"}"#), None, "not handed on");
        assert!(rx.try_recv().is_ok(), "answered");
        assert!(lines.screen(br#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#).is_some());
    }

    /// MCP-7: lines the SDK answered against JSON-RPC 2.0 are answered here, under their id
    /// where it can be read, and not handed on (a hostile run); the rest is left to the SDK.
    #[test]
    fn mcp_7_lines_the_sdk_answers_wrongly_are_answered_here() {
        let answer = |line: &str, initialized: bool| own_answer(line.as_bytes(), initialized).map(|a| serde_json::from_slice::<Value>(&a).unwrap());
        let code_and_id = |line: &str, initialized: bool| answer(line, initialized).map(|a| (a["error"]["code"].clone(), a["id"].clone()));
        assert_eq!(code_and_id("{not json", false), Some((json!(-32700), Value::Null)), "a parse error, under id null");
        assert_eq!(code_and_id("\u{1}", false), Some((json!(-32700), Value::Null)));
        for line in [r#"{"jsonrpc":"1.0","id":3,"method":"tools/list"}"#, r#"{"id":3,"method":"tools/list"}"#, r#"{"jsonrpc":"2.0","id":3,"method":5}"#, r#"{"jsonrpc":"2.0","id":3}"#] {
            assert_eq!(code_and_id(line, true), Some((json!(-32600), json!(3))), "{line}");
        }
        for line in [
            r#"{"jsonrpc":"2.0","id":"c4","method":"tools/call"}"#,
            r#"{"jsonrpc":"2.0","id":"c4","method":"tools/call","params":{"name":7}}"#,
            r#"{"jsonrpc":"2.0","id":"c4","method":"tools/call","params":{"name":"session","arguments":"SECRET"}}"#,
            r#"{"jsonrpc":"2.0","id":"c4","method":"tools/list","params":"x"}"#,
            r#"{"jsonrpc":"2.0","id":"c4","method":"initialize"}"#,
        ] {
            assert_eq!(code_and_id(line, false), Some((json!(-32602), json!("c4"))), "{line}");
        }
        assert_eq!(code_and_id(r#"[{"jsonrpc":"2.0","id":11,"method":"tools/list"}]"#, true), Some((json!(-32600), Value::Null)), "a batch");
        let initialize = r#"{"jsonrpc":"2.0","id":9,"method":"initialize","params":{}}"#;
        assert_eq!(answer(initialize, false), None, "the first initialize is the SDK's");
        assert_eq!(code_and_id(initialize, true), Some((json!(-32600), json!(9))), "a second one is refused");
        for passed in ["", "  ", "5", r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"agent_catalog"}}"#] {
            assert_eq!(answer(passed, true), None, "left to the SDK: {passed}");
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let lines = BoundedLines::new(tokio::io::empty(), 1_000, Default::default()).answering(tx);
        assert!(lines.screen(initialize.as_bytes()).is_some(), "handed on");
        assert_eq!(lines.screen(initialize.as_bytes()), None, "the second is answered here");
        assert!(rx.try_recv().is_ok(), "answered");
    }

    /// MCP-7: lines the SDK cannot read (it answered each with a parse error with no `id`
    /// member): a non-object, or an id-less object that is no well-formed notification, is
    /// Invalid Request under id null; a request whose params its method cannot take is Invalid
    /// params under its id; a well-formed notification or a response the SDK cannot read is
    /// not answered. A line it reads is left to it.
    #[test]
    fn mcp_7_lines_the_sdk_cannot_read_are_answered_or_dropped_as_json_rpc_says() {
        let code_and_id = |line: &str| match unreadable(line.as_bytes()) {
            Some(Unreadable::Answer(answer)) => {
                let answer: Value = serde_json::from_slice(&answer).unwrap();
                Some((answer["error"]["code"].clone(), answer["id"].clone()))
            }
            other => panic!("{line}: answered, not {other:?}"),
        };
        for line in ["5", r#""x""#, "null", "true", "{}", r#"{"jsonrpc":"2.0"}"#, r#"{"jsonrpc":"2.0","method":7}"#, r#"{"jsonrpc":"1.0","method":"notifications/cancelled","params":{"requestId":3}}"#] {
            assert_eq!(code_and_id(line), Some((json!(-32600), Value::Null)), "{line}");
        }
        assert_eq!(code_and_id(r#"{"jsonrpc":"2.0","id":4,"method":"tools/list","params":[1]}"#), Some((json!(-32602), json!(4))));
        for dropped in [r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}"#, r#"{"jsonrpc":"2.0","result":{}}"#, r#"{"jsonrpc":"2.0","id":"r","error":5}"#] {
            assert_eq!(unreadable(dropped.as_bytes()), Some(Unreadable::Dropped), "{dropped}");
        }
        for read in [r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#, r#"{"jsonrpc":"2.0","method":"notifications/whatever","params":{"a":1}}"#, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#, "{not json"] {
            assert_eq!(unreadable(read.as_bytes()), None, "left to the SDK (or to own_answer): {read}");
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let lines = BoundedLines::new(tokio::io::empty(), 1_000, Default::default()).answering(tx);
        assert_eq!(lines.screen(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":[1]}"#), None, "not handed on");
        assert!(rx.try_recv().is_err(), "and not answered");
        assert_eq!(lines.screen(b"5"), None);
        assert!(rx.try_recv().is_ok(), "answered");
    }

    /// MCP-3: `session action=input`'s keys: any case, and `_`, `+` or spaces for a control
    /// key's `-`; an unknown key is none.
    #[test]
    fn mcp_3_special_keys_are_read_in_the_spellings_clients_use() {
        for spelling in ["ctrl-u", "ctrl_u", "Ctrl+U", "CTRL U", "Ctrl + U"] {
            assert_eq!(special_key_bytes(spelling), Some(&b"\x15"[..]), "{spelling}");
        }
        assert_eq!(special_key_bytes("Enter"), Some(&b"\r"[..]));
        for unknown in ["ctrl-z", "hyper-f13", "", "ctrlu", "ctrl_c_", "ctrl--u", " enter ", "ctrl-", "ctrl uu", "ctrl+ +u"] {
            assert_eq!(special_key_bytes(unknown), None, "{unknown}");
        }
        for listed in special_key_names().split(", ") {
            assert!(special_key_bytes(listed).is_some(), "the list names only keys that exist: {listed}");
        }
    }

    /// MCP-6: a message with a key twice in one object (at any depth) never reaches a tool:
    /// a request becomes a call of a method nobody serves (the SDK answers its id "method not
    /// found", naming why), a notification is dropped; anything else passes as it is.
    #[test]
    fn mcp_6_a_message_with_a_duplicate_key_is_refused() {
        let plain = br#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"session","arguments":{"action":"list"}}}"#;
        assert_eq!(screen_line(plain).as_deref(), Some(&plain[..]));
        let nested = br#"{"jsonrpc":"2.0","id":"c4","method":"tools/call","params":{"name":"session","arguments":{"action":"list","action":"submit","input":"x"}}}"#;
        let refused: Value = serde_json::from_slice(&screen_line(nested).expect("a request is answered")).unwrap();
        assert_eq!(refused, json!({"jsonrpc": "2.0", "id": "c4", "method": DUPLICATE_KEY_METHOD, "params": {}}));
        let escaped = br#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"session","arguments":{"action":"list","\u0061ction":"submit"}}}"#;
        assert_eq!(serde_json::from_slice::<Value>(&screen_line(escaped).unwrap()).unwrap()["method"], DUPLICATE_KEY_METHOD, "an escaped spelling is the same key");
        assert_eq!(screen_line(br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"requestId":2}}"#), None, "a notification is dropped");
        // As the SDK reads the line: after a UTF-8 BOM (it drops one), with a CR before the newline.
        let bom = [&b"\xEF\xBB\xBF"[..], nested].concat();
        assert_eq!(serde_json::from_slice::<Value>(&screen_line(&bom).unwrap()).unwrap()["method"], DUPLICATE_KEY_METHOD, "a BOM hides nothing");
        let cr = [&nested[..], b"\r"].concat();
        assert_eq!(serde_json::from_slice::<Value>(&screen_line(&cr).unwrap()).unwrap()["method"], DUPLICATE_KEY_METHOD);
        // A response is dropped (an error under its id would answer one of the client's calls),
        // and so is a request whose id is given twice (whose call it is, nobody can tell).
        assert_eq!(screen_line(br#"{"jsonrpc":"2.0","id":99,"result":{"a":1,"a":2}}"#), None);
        assert_eq!(screen_line(br#"{"jsonrpc":"2.0","id":6,"id":7,"method":"ping"}"#), None);
        // A batch passes: the SDK takes none (it answers a parse error).
        let batch = br#"[{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"a":1,"a":2}}]"#;
        assert_eq!(screen_line(batch).as_deref(), Some(&batch[..]));
        for passed in [&b"not json"[..], br#"{"a":1,"b":[{"a":1},{"a":2}]}"#, b"[1,2]"] {
            assert_eq!(screen_line(passed).as_deref(), Some(passed), "{}", String::from_utf8_lossy(passed));
        }
    }

    /// MCP-1, MCP-6: lines split across reads are screened whole; the lines that came before a
    /// line past the bound are handed on before the read fails.
    #[test]
    fn bounded_lines_screen_whole_lines_and_keep_those_before_a_trip() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            let (client, server) = tokio::io::duplex(4);
            let writer = tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                let mut client = client;
                client.write_all(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"m\",\"m\":1,\"m\":2}\n{\"jsonrpc\":\"2.0\",\"method\":\"ok\"}\n{\"jsonrpc\":\"2.0\",\"method\":\"rest\"}\n{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"m\",\"p\":{\"a\":1,\"a\":2}}").await.unwrap();
            });
            let mut read = Vec::new();
            BoundedLines::new(server, 100, Default::default()).read_to_end(&mut read).await.unwrap();
            writer.await.unwrap();
            let text = String::from_utf8(read).unwrap();
            let lines: Vec<&str> = text.split('\n').collect();
            assert_eq!(lines.len(), 4, "{text}");
            assert!(lines[0].contains("wakterm/refused"), "{text}");
            assert_eq!(&lines[1..3], [r#"{"jsonrpc":"2.0","method":"ok"}"#, r#"{"jsonrpc":"2.0","method":"rest"}"#]);
            assert!(lines[3].contains("wakterm/refused") && lines[3].contains("\"id\":3"), "a last line without its newline is screened too: {text}");
            // Lines the SDK reads (MCP-7 answers the others here): two up to the bound, then one
            // past it.
            let (a, b) = (r#"{"jsonrpc":"2.0","method":"ab"}"#, r#"{"jsonrpc":"2.0","method":"a"}"#);
            let input = format!("{a}\n{b}\n{a}123456");
            let mut read = Vec::new();
            let error = BoundedLines::new(input.as_bytes(), a.len(), Default::default()).read_to_end(&mut read).await.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidData);
            assert_eq!(read, format!("{a}\n{b}\n").into_bytes(), "the whole lines before the trip were handed on");
        });
    }

    /// MCP-1: lines up to the bound pass whole; one past it fails the read.
    #[test]
    fn mcp_1_a_message_line_past_the_bound_fails_the_read() {
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        runtime.block_on(async {
            // Lines the SDK reads (MCP-7 answers the others here), 30 bytes each.
            let line = r#"{"jsonrpc":"2.0","method":"a"}"#;
            let input = format!("{line}\n{line}\n{line} \n");
            let mut read = Vec::new();
            let mut bounded = BoundedLines::new(input.as_bytes(), line.len(), Default::default());
            let error = bounded.read_to_end(&mut read).await.unwrap_err();
            assert_eq!(error.kind(), std::io::ErrorKind::InvalidData, "{error}");
            assert!(bounded.tripped.lock().unwrap().as_deref().is_some_and(|m| m.contains("past 30 bytes")), "the reason is kept");
            let twice = format!("{line}\n{line}\n");
            let mut fine = BoundedLines::new(twice.as_bytes(), line.len(), Default::default());
            let mut read = Vec::new();
            fine.read_to_end(&mut read).await.unwrap();
            assert_eq!(read, twice.into_bytes());
        });
    }
}
