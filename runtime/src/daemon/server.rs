//! The control socket's connections: bounded reading of the one request line (CONN-2), the
//! cap's refusal (CONN-1), dispatch to the handler modules (`agent_handlers`, `catalog`,
//! `requests`), and the daemon-wide answers (status, stop, capabilities).

use super::agents::AgentRuntime;
use super::{agent_handlers, catalog, requests, Context};
use crate::protocol::{exit, ClientRequest, Reply, MAX_REQUEST_LINE_BYTES, PROTOCOL_VERSION};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use wakterm_engine::Engine;


/// CONN-2: a client must send its whole request line within this, or it is dropped (an idle
/// connection holds a descriptor the daemon's own probes may need).
pub const REQUEST_LINE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
pub use crate::protocol::REPLY_WRITE_TIMEOUT;

pub async fn handle_connection(stream: UnixStream, context: Arc<Context>) {
    let peer_ok = stream.peer_cred().map(|cred| cred.uid() == crate::paths::current_uid()).unwrap_or(false);
    let (read_half, mut write_half) = stream.into_split();
    if !peer_ok {
        tracing::warn!("refused a control connection from another user");
        let reply = Reply::error(exit::ERROR, "permission_denied", "peers of another user are refused");
        let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
        return;
    }
    // One bounded read of the first line; `parse_request_line` (fuzzed) judges it.
    let mut line = Vec::new();
    let mut reader = BufReader::new(read_half.take(MAX_REQUEST_LINE_BYTES as u64));
    let parsed = match tokio::time::timeout(REQUEST_LINE_TIMEOUT, reader.read_until(b'\n', &mut line)).await {
        Err(_) => Err(Reply::error(exit::USAGE, "request_timeout", format!("no complete request line within {REQUEST_LINE_TIMEOUT:?}"))),
        Ok(Err(error)) => Err(Reply::error(exit::USAGE, "bad_request", format!("the request could not be read: {error}"))),
        Ok(Ok(_)) => crate::protocol::parse_request_envelope(&line).and_then(|(request, give_up)| caller_still_waits(request, give_up)),
    };
    // A stream lives as long as its subscriber: the request line (up to 1 MiB) is not kept
    // with it (300 subscribers with padded lines held 300 MB; a review measured it).
    drop(line);
    let request = match parsed {
        Ok(request) => request,
        Err(reply) => {
            tracing::debug!(error = %reply.body["error"], "control connection without a usable request");
            let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
            return;
        }
    };
    if let ClientRequest::Watch { after, once } = request {
        return requests::watch(reader.into_inner().into_inner(), &mut write_half, &context, after, once).await;
    }
    if let ClientRequest::Events { after, once, agents } = request {
        return super::events::events(reader.into_inner().into_inner(), &mut write_half, &context, after, once, agents).await;
    }
    let stop = matches!(request, ClientRequest::Stop { .. });
    let reply = dispatch(request, &context).await;
    let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
    if stop {
        context.shutdown.notify_one();
    }
}

/// CLI-4: a request read after its caller's wait ended is not done: the caller was told the
/// outcome is unknown (`reply_lost`) or that nothing answered, and may have acted on it. A
/// daemon frozen for minutes typed a submit and stopped itself on a `mux stop` whose callers
/// had long gone (a review).
fn caller_still_waits(request: ClientRequest, give_up_at_ms: Option<u64>) -> Result<ClientRequest, Reply> {
    let now = crate::driver::now_ms();
    match give_up_at_ms {
        Some(at) if now > at => {
            tracing::warn!(late_ms = now - at, "a request read after its caller gave up: not done (CLI-4)");
            Err(Reply::error(exit::ERROR, "caller_gone", format!("the request was read {} ms after its caller stopped waiting; nothing was done", now - at)))
        }
        _ => Ok(request),
    }
}

/// CONN-1: the answer to a connection over the daemon's cap: one clear error line, then close.
pub async fn refuse_over_cap(stream: UnixStream, cap: usize) {
    // LOG-1: one line a second at most, with how many were refused: a line per refusal let a
    // client churning connections (16,000 a second) rotate the admissions out of the log in
    // about 100 s (a review measured the rate).
    static REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static LAST_LOGGED_S: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let refused = REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let now_s = crate::driver::now_ms() / 1_000;
    if LAST_LOGGED_S.swap(now_s, std::sync::atomic::Ordering::Relaxed) != now_s {
        tracing::warn!(cap, refused_so_far = refused, "control connection over the cap refused (CONN-1)");
    }
    let (_, mut write_half) = stream.into_split();
    let message = format!("the daemon already serves {cap} connections; retry shortly (nothing was done)");
    let reply = Reply::error(exit::ERROR, "too_many_connections", message);
    let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
}

pub(super) async fn write_line(writer: &mut tokio::net::unix::OwnedWriteHalf, value: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    let write = async {
        writer.write_all(&bytes).await?;
        writer.flush().await
    };
    match tokio::time::timeout(REPLY_WRITE_TIMEOUT, write).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the peer stopped reading")),
    }
}

async fn dispatch(request: ClientRequest, context: &Arc<Context>) -> Reply {
    match request {
        ClientRequest::Status => status(context).await,
        ClientRequest::Stop { all } => stop(context, all).await,
        ClientRequest::AgentStart { name, harness, cwd, env, command, managed } => agent_handlers::start_agent(context, agent_handlers::StartSpec { name, harness, cwd, env, command, managed }).await,
        ClientRequest::AgentStop { target } => agent_handlers::stop_agent(context, &target).await,
        ClientRequest::AgentRestart { target } => agent_handlers::restart_agent(context, &target).await,
        ClientRequest::AgentList | ClientRequest::Catalog => catalog::catalog(context).await,
        ClientRequest::Capabilities => Reply::ok(capabilities()),
        ClientRequest::Admit(admit) => requests::admit_prompt(context, admit).await,
        ClientRequest::RequestGet { request_id, evidence } => requests::request_get(context, &request_id, evidence).await,
        ClientRequest::RequestCancel { request_id } => requests::request_cancel(context, request_id).await,
        ClientRequest::AgentOutput { target, after } => agent_handlers::agent_output(context, &target, after).await,
        ClientRequest::Submit(submit) => requests::submit(context, submit).await,
        ClientRequest::Watch { .. } | ClientRequest::Events { .. } => unreachable!("handled before dispatch"),
    }
}

pub(super) async fn query<T: Send + 'static>(context: &Context, f: impl FnOnce(&Engine) -> T + Send + 'static) -> Option<T> {
    crate::driver::ask(&context.inbox, f).await
}

async fn status(context: &Arc<Context>) -> Reply {
    let agents = context.agents.lock().expect("agent table").len();
    Reply::ok(json!({
        "schema": "wakterm.mux-status.v1",
        "running": true,
        "pid": std::process::id(),
        "data_dir": context.paths.root,
        "socket": context.paths.socket(),
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "agents": agents,
        "started_ms": context.started_ms,
    }))
}

/// LIFE-5: how long `mux stop --all` waits for agent starts under way before it answers (its
/// caller waits 60 s for the answer). A start slower than this (a managed start's handshake
/// takes up to 60 s) ends its agent itself when it is done (`Context::stopping_all`).
const STARTS_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

async fn stop(context: &Arc<Context>, all: bool) -> Reply {
    let mut stopped = Vec::new();
    // LIFE-5: no agent starts from now on, and `--all` waits for the starts under way, so each
    // agent is stopped or never started. Before, an agent whose start ended after the list was
    // taken ran on, unnamed in `agents_stopped`.
    context.close_to_starts(all);
    let waited = std::time::Instant::now();
    while all && !context.starting.lock().expect("starting names").is_empty() {
        if waited.elapsed() > STARTS_WAIT {
            tracing::warn!("mux stop --all: agent starts still under way after {STARTS_WAIT:?}; each ends its agent when it is done");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    if all {
        let agents: Vec<Arc<AgentRuntime>> = context.agents.lock().expect("agent table").values().cloned().collect();
        for agent in agents {
            let name = agent.record.name.clone();
            // LIFE-3: after a restart in progress (whose new pane this then ends), before any
            // that waits (which then starts nothing).
            let _ = tokio::task::spawn_blocking(move || {
                let _one_at_a_time = agent.lifecycle.lock().expect("lifecycle lock");
                agent.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
                agent.shut_down_pane();
            })
            .await;
            stopped.push(name);
        }
    }
    Reply::ok(json!({"schema": "wakterm.mux-stop.v1", "stopping": true, "agents_stopped": stopped}))
}

pub fn capabilities() -> Value {
    json!({
        "schema": "wakterm.agent-capabilities.v1",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "operations": {
            "agent.send": {"version": 1, "receipt_schema": wakterm_engine::receipt::RECEIPT_SCHEMA, "options": [crate::client::NO_STEER_OPTION]},
            "agent.admit": {"version": 1, "receipt_schema": wakterm_engine::receipt::RECEIPT_SCHEMA, "requires": ["incarnation", "request_id"]},
            "agent.catalog": {"version": 1, "schema": "wakterm.agent-catalog.v1"},
            "agent.request.get": {"version": 1, "schema": "wakterm.agent-request.v1"},
            "agent.request.cancel": {"version": 1, "schema": super::requests::CANCEL_SCHEMA},
            "agent.submit": {"version": 1, "receipt_schema": wakterm_engine::submit::SUBMIT_RECEIPT_SCHEMA},
            "agent.request.watch": {"version": 1, "event_schema": wakterm_engine::terminal::TERMINAL_SCHEMA},
            "agent.output": {"version": 1, "schema": "wakterm.agent-output-shadow.experimental.v1", "experimental": true},
            "agent.events": {"version": 1, "event_schema": wakterm_engine::AGENT_EVENTS_SCHEMA, "kinds": wakterm_engine::EventBody::KINDS, "catalog_field": "events_through"},
        },
        "classifications": ["accepted", "busy", "unsupported", "unavailable", "stale_incarnation", "invalid", "observer_failure", "internal_failure", "indeterminate"],
        "terminal_states": ["completed", "aborted", "timed_out", "cancelled", "delivery_failed", "indeterminate"],
        "return_final_harnesses": ["codex"],
        "limits": {
            "max_prompt_bytes": wakterm_engine::limits::MAX_PROMPT_BYTES,
            "max_final_timeout_ms": wakterm_engine::limits::MAX_FINAL_TIMEOUT_MS,
        },
    })
}

