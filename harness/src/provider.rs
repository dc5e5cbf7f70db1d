//! A loopback "Responses API" model provider that the real Codex CLI (0.169) accepts.
//!
//! Codex is pointed at it through `$CODEX_HOME/config.toml` (`base_url =
//! "http://127.0.0.1:PORT/v1"`, `wire_api = "responses"`). Every `POST .../responses` is answered
//! with a scripted server-sent-event stream (see [`sse`]); a scripted delay before
//! `response.completed` holds the Codex turn busy, which is how tests create a busy agent. Every
//! request is recorded (in memory and, optionally, as JSON lines in a log file) so a test can
//! prove which prompt reached the model and how often.
//!
//! A rule with a `plan` makes the model call Codex's `update_plan` tool: a request that offers
//! that tool and does not yet carry the call's `function_call_output` (after its last user item)
//! is answered with the rule's commentary and the `function_call`; the follow-up that carries the
//! output, and any request that does not offer the tool (Codex's task-title request), get the
//! rule's reply text.
//!
//! A rule with `calls` (see [`script`]) makes the model call a sequence of tools, MCP tools
//! included (`namespace` + bare name): each request of the turn gets the first call whose
//! `function_call_output` it does not carry yet (if the request offers that tool), and once all
//! have outputs, the reply text with the outputs filled in. The outcome recorded is
//! `call_K:NAMESPACE/NAME` for a call, `reply_after_calls` for the final text, and
//! `reply_call_K_not_offered` when call K's tool is not in the request (e.g. Codex's task-title
//! request, or an MCP server that failed to start).
//!
//! The server is synchronous (`tiny_http`: one acceptor thread, one thread per request) and binds
//! 127.0.0.1 only.

pub mod prompt;
pub mod script;
pub mod sse;

pub use prompt::extract_prompt;
pub use script::{
    FailMode, Plan, PlanStep, PlanUpdate, Reply, ReplyText, Rule, Script, ScriptError,
    ScriptedCall, StepStatus, ToolCall,
};

use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Requests kept in memory; later ones are still logged to the file but counted as dropped here.
pub const MAX_RECORDED_REQUESTS: usize = 100_000;
/// Request bodies above this are refused with 413 (Codex sends ~tens of KiB per turn).
pub const MAX_REQUEST_BODY_BYTES: usize = 32 * 1024 * 1024;
/// Requests served at once; more are answered 503 so a runaway client cannot exhaust threads.
pub const MAX_CONCURRENT_REQUESTS: usize = 64;
/// How often the acceptor and held replies look at the stop flag.
const STOP_POLL_MS: u64 = 50;
/// Answer to `GET` (model listing): an empty OpenAI-style list, plus an empty Codex `models` list.
pub const MODEL_LIST_JSON: &str = r#"{"data":[],"object":"list","models":[]}"#;

/// What to start.
#[derive(Clone, Debug, Default)]
pub struct ProviderConfig {
    /// Port on 127.0.0.1; 0 lets the OS choose (read it back with [`Provider::port`]).
    pub port: u16,
    pub script: Script,
    /// Append one JSON line per received request here.
    pub log_path: Option<PathBuf>,
}

/// One request as the provider saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceivedRequest {
    pub method: String,
    pub path: String,
    /// The new prompt (last user `input_text`), `None` for GETs and bodies without one.
    pub prompt: Option<String>,
    pub unix_ms: u64,
    /// What was sent back: `reply`, `update_plan_call`, `reply_then_failed`, `http_500`,
    /// `model_list`, `not_found`, ...
    pub outcome: String,
}

/// Why the provider could not start.
#[derive(Debug)]
pub enum ProviderError {
    Bind(String),
    Script(ScriptError),
    Log(std::io::Error),
}

impl std::fmt::Display for ProviderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ProviderError::Bind(e) => write!(f, "cannot listen on 127.0.0.1: {e}"),
            ProviderError::Script(e) => write!(f, "{e}"),
            ProviderError::Log(e) => write!(f, "cannot open request log: {e}"),
        }
    }
}

impl std::error::Error for ProviderError {}

struct Shared {
    script: Script,
    stop: AtomicBool,
    received: Mutex<Vec<ReceivedRequest>>,
    dropped: AtomicU64,
    log: Mutex<Option<File>>,
    next_reply: AtomicU64,
    active: AtomicUsize,
}

/// A running provider; stops when dropped.
pub struct Provider {
    port: u16,
    shared: Arc<Shared>,
    /// Only the acceptor and this handle own the server, so `stop` can drop it (closing the
    /// listener) while held replies are still winding down.
    server: Option<Arc<tiny_http::Server>>,
    acceptor: Option<JoinHandle<()>>,
}

impl Provider {
    /// Binds 127.0.0.1:`config.port` and starts serving.
    pub fn start(config: ProviderConfig) -> Result<Provider, ProviderError> {
        config.script.validate().map_err(ProviderError::Script)?;
        let log = match &config.log_path {
            Some(path) => Some(open_log(path).map_err(ProviderError::Log)?),
            None => None,
        };
        let server = tiny_http::Server::http(("127.0.0.1", config.port))
            .map_err(|e| ProviderError::Bind(e.to_string()))?;
        let addr = server
            .server_addr()
            .to_ip()
            .ok_or_else(|| ProviderError::Bind("not an IP listener".into()))?;
        assert!(
            addr.ip().is_loopback(),
            "the provider must never listen beyond loopback"
        );
        assert!(config.port == 0 || addr.port() == config.port);
        let server = Arc::new(server);
        let shared = Arc::new(Shared {
            script: config.script,
            stop: AtomicBool::new(false),
            received: Mutex::new(Vec::new()),
            dropped: AtomicU64::new(0),
            log: Mutex::new(log),
            next_reply: AtomicU64::new(1),
            active: AtomicUsize::new(0),
        });
        let (for_thread, server_for_thread) = (Arc::clone(&shared), Arc::clone(&server));
        let acceptor = std::thread::Builder::new()
            .name("mock-provider-accept".into())
            .spawn(move || accept_loop(&server_for_thread, for_thread))
            .map_err(|e| ProviderError::Bind(format!("cannot spawn acceptor: {e}")))?;
        Ok(Provider {
            port: addr.port(),
            shared,
            server: Some(server),
            acceptor: Some(acceptor),
        })
    }

    /// The bound port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT/v1`, the `base_url` for Codex's config.
    pub fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// Every request received so far, oldest first (at most [`MAX_RECORDED_REQUESTS`]).
    pub fn received(&self) -> Vec<ReceivedRequest> {
        lock(&self.shared.received).clone()
    }

    /// Requests not kept in memory because [`MAX_RECORDED_REQUESTS`] was reached.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Stops accepting and cuts held replies short (they end without `response.completed`).
    /// tiny_http closes the listening socket from its own thread a few milliseconds later.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(server) = &self.server {
            server.unblock();
        }
        if let Some(handle) = self.acceptor.take() {
            let _ = handle.join();
        }
        // Last owner now: dropping it tells tiny_http to close the listener.
        self.server = None;
    }
}

impl Drop for Provider {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn open_log(path: &PathBuf) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// A poisoned lock only means another request thread panicked; the data is still usable.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn now_unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn accept_loop(server: &tiny_http::Server, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::SeqCst) {
        let request = match server.recv_timeout(Duration::from_millis(STOP_POLL_MS)) {
            Ok(Some(request)) => request,
            Ok(None) => continue,
            Err(_) => continue, // one broken connection must not stop the server
        };
        if shared.active.fetch_add(1, Ordering::SeqCst) >= MAX_CONCURRENT_REQUESTS {
            shared.active.fetch_sub(1, Ordering::SeqCst);
            respond_json(
                request,
                503,
                r#"{"error":{"message":"mock provider overloaded"}}"#,
            );
            continue;
        }
        let for_thread = Arc::clone(&shared);
        let spawned = std::thread::Builder::new()
            .name("mock-provider-req".into())
            .spawn(move || {
                handle_request(&for_thread, request);
                for_thread.active.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.active.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

fn record(shared: &Shared, method: &str, path: &str, prompt: Option<String>, outcome: &str) {
    let entry = ReceivedRequest {
        method: method.to_string(),
        path: path.to_string(),
        prompt,
        unix_ms: now_unix_ms(),
        outcome: outcome.to_string(),
    };
    if let Some(file) = lock(&shared.log).as_mut() {
        if let Ok(line) = serde_json::to_string(&entry) {
            // One write per line so concurrent readers never see half a record.
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
    }
    let mut received = lock(&shared.received);
    if received.len() < MAX_RECORDED_REQUESTS {
        received.push(entry);
    } else {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
    }
}

fn handle_request(shared: &Shared, mut request: tiny_http::Request) {
    let method = request.method().as_str().to_string();
    let path = request.url().to_string();
    if method == "GET" {
        record(shared, &method, &path, None, "model_list");
        return respond_json(request, 200, MODEL_LIST_JSON);
    }
    if method != "POST" || !path.trim_end_matches('/').ends_with("/responses") {
        record(shared, &method, &path, None, "not_found");
        return respond_json(request, 404, r#"{"error":{"message":"unknown endpoint"}}"#);
    }
    let Some(body) = read_body(&mut request) else {
        record(shared, &method, &path, None, "body_too_large");
        return respond_json(
            request,
            413,
            r#"{"error":{"message":"request body too large"}}"#,
        );
    };
    let json: Option<serde_json::Value> = serde_json::from_slice(&body).ok();
    let prompt = json.as_ref().and_then(prompt::prompt_of);
    let mut plan = shared.script.plan(prompt.as_deref());
    // The scripted call is made only where a model could make it, and only once per turn.
    plan.tool_call = plan.tool_call.filter(|call| {
        json.as_ref().is_some_and(|json| {
            prompt::offers_function_tool(json, &call.name)
                && !prompt::call_answered_this_turn(json, &call.call_id)
        })
    });
    let sequence_outcome = json
        .as_ref()
        .and_then(|json| sequence_step(json, &mut plan));
    let outcome = match (plan.fail, &plan.tool_call, sequence_outcome) {
        (Some(FailMode::Http500), _, _) => "http_500".to_string(),
        (Some(FailMode::ResponseFailed), _, _) => "reply_then_failed".to_string(),
        (None, _, Some(outcome)) => outcome,
        (None, Some(_), None) => "update_plan_call".to_string(),
        (None, None, None) => "reply".to_string(),
    };
    record(shared, &method, &path, prompt.clone(), &outcome);
    if plan.fail == Some(FailMode::Http500) {
        hold(shared, plan.delay_ms);
        return respond_json(request, 500, r#"{"error":{"message":"scripted failure"}}"#);
    }
    stream_reply(shared, request, prompt.as_deref().unwrap_or(""), &plan);
}

/// For a rule with a call sequence: sets `plan.tool_call` to the next call this request should
/// get, or fills the call outputs into `plan.reply_text`. Returns the outcome to record, `None`
/// when the rule has no calls.
fn sequence_step(json: &serde_json::Value, plan: &mut Plan) -> Option<String> {
    if plan.calls.is_empty() {
        return None;
    }
    let outputs: Vec<Option<String>> = (0..plan.calls.len())
        .map(|k| prompt::call_output_this_turn(json, &ScriptedCall::call_id(k)))
        .collect();
    let next = outputs.iter().position(Option::is_none);
    let outcome = match next {
        None => "reply_after_calls".to_string(),
        Some(k) => {
            let call = &plan.calls[k];
            if prompt::offers_tool(json, call.namespace.as_deref(), &call.name) {
                plan.tool_call = Some(call.to_tool_call(k, &outputs[..k]));
                let namespace = call.namespace.as_deref().unwrap_or("");
                return Some(format!("call_{k}:{namespace}/{}", call.name));
            }
            format!("reply_call_{k}_not_offered")
        }
    };
    plan.tool_call = None;
    plan.reply_text = script::fill_outputs(&plan.reply_text, &outputs);
    Some(outcome)
}

/// Reads at most [`MAX_REQUEST_BODY_BYTES`]; `None` when the body is larger.
fn read_body(request: &mut tiny_http::Request) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    let limit = MAX_REQUEST_BODY_BYTES as u64 + 1;
    request
        .as_reader()
        .take(limit)
        .read_to_end(&mut body)
        .ok()?;
    (body.len() <= MAX_REQUEST_BODY_BYTES).then_some(body)
}

fn respond_json(request: tiny_http::Request, status: u16, body: &str) {
    let header = tiny_http::Header::from_bytes(&b"Content-Type"[..], &b"application/json"[..])
        .expect("static header is valid");
    let response = tiny_http::Response::from_string(body)
        .with_status_code(status)
        .with_header(header);
    let _ = request.respond(response); // the client may have gone; nothing to do about it
}

/// Sleeps `delay_ms`, waking early when the provider stops. Returns false if it stopped.
fn hold(shared: &Shared, delay_ms: u64) -> bool {
    let mut left_ms = delay_ms;
    while left_ms > 0 {
        if shared.stop.load(Ordering::SeqCst) {
            return false;
        }
        let step = left_ms.min(STOP_POLL_MS);
        std::thread::sleep(Duration::from_millis(step));
        left_ms -= step;
    }
    !shared.stop.load(Ordering::SeqCst)
}

/// Writes the SSE reply by hand (chunked, flushed per event): tiny_http's own response writer
/// buffers, which would hide the opening events during a held turn.
fn stream_reply(shared: &Shared, request: tiny_http::Request, prompt: &str, plan: &Plan) {
    let ids = sse::ReplyIds::new(shared.next_reply.fetch_add(1, Ordering::SeqCst));
    let mut out = request.into_writer();
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n\
                Connection: close\r\nTransfer-Encoding: chunked\r\n\r\n";
    if out.write_all(head.as_bytes()).is_err() {
        return;
    }
    if write_chunk(&mut out, sse::created_event(&ids).as_bytes()).is_err()
        || !hold(shared, plan.output_delay_ms)
    {
        return;
    }
    let (events, output_text) = match &plan.tool_call {
        Some(call) => (sse::tool_call_events(&ids, call), call.arguments.as_str()),
        None => (
            sse::output_events(&ids, &plan.reply_text),
            plan.reply_text.as_str(),
        ),
    };
    for event in events {
        if write_chunk(&mut out, event.as_bytes()).is_err() {
            return; // client went away (e.g. Codex interrupted the turn)
        }
    }
    if !hold(shared, plan.delay_ms) {
        return;
    }
    let closing = match plan.fail {
        Some(_) => sse::failed_event(&ids),
        None => sse::completed_event(&ids, prompt, output_text),
    };
    let _ = write_chunk(&mut out, closing.as_bytes()).and_then(|()| write_chunk(&mut out, b""));
}

/// One HTTP/1.1 chunk; an empty `data` writes the terminating chunk.
fn write_chunk(out: &mut dyn Write, data: &[u8]) -> std::io::Result<()> {
    write!(out, "{:x}\r\n", data.len())?;
    out.write_all(data)?;
    out.write_all(b"\r\n")?;
    out.flush()
}

#[cfg(test)]
mod tests;
