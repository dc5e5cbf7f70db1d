//! Control-socket request handlers. Each connection carries one request.

use super::agents::{spawn_monitor, AgentRecord, AgentRuntime};
use super::Context;
use crate::driver::{now_ms, DriverMsg};
use crate::holder::{spawn_holder_with_args, HolderConfig};
use crate::protocol::{exit, AdmitRequest, ClientRequest, Reply, MAX_REQUEST_LINE_BYTES, PROTOCOL_VERSION};
use crate::store::StoreOp;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::oneshot;
use wakterm_engine::{AdmitCommand, AgentId, Classification, Engine, Input, OpId, RequestId};

/// Longest agent display name.
pub const MAX_AGENT_NAME_BYTES: usize = 64;
/// Terminal events read from the store per page while a watcher catches up.
pub const WATCH_PAGE: usize = 512;

/// CONN-2: a client must send its whole request line within this, or it is dropped (an idle
/// connection holds a descriptor the daemon's own probes may need).
pub const REQUEST_LINE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// Bound of one reply write: a peer that stops reading cannot hold a task and a descriptor.
pub const REPLY_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

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
        Ok(Ok(_)) => crate::protocol::parse_request_line(&line),
    };
    let request = match parsed {
        Ok(request) => request,
        Err(reply) => {
            tracing::debug!(error = %reply.body["error"], "control connection without a usable request");
            let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
            return;
        }
    };
    if let ClientRequest::Watch { after, once } = request {
        return watch(reader.into_inner().into_inner(), &mut write_half, &context, after, once).await;
    }
    let stop = matches!(request, ClientRequest::Stop { .. });
    let reply = dispatch(request, &context).await;
    let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
    if stop {
        context.shutdown.notify_one();
    }
}

/// CONN-1: the answer to a connection over the daemon's cap: one clear error line, then close.
pub async fn refuse_over_cap(stream: UnixStream, cap: usize) {
    tracing::warn!(cap, "control connection over the cap refused (CONN-1)");
    let (_, mut write_half) = stream.into_split();
    let message = format!("the daemon already serves {cap} connections; retry shortly (nothing was done)");
    let reply = Reply::error(exit::ERROR, "too_many_connections", message);
    let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
}

async fn write_line(writer: &mut tokio::net::unix::OwnedWriteHalf, value: &Value) -> std::io::Result<()> {
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
        ClientRequest::AgentStart { name, harness, cwd, env, command } => start_agent(context, name, harness, cwd, env, command).await,
        ClientRequest::AgentStop { target } => stop_agent(context, &target).await,
        ClientRequest::AgentRestart { target } => restart_agent(context, &target).await,
        ClientRequest::AgentList | ClientRequest::Catalog => catalog(context).await,
        ClientRequest::Capabilities => Reply::ok(capabilities()),
        ClientRequest::Admit(admit) => admit_prompt(context, admit).await,
        ClientRequest::RequestGet { request_id, evidence } => request_get(context, &request_id, evidence).await,
        ClientRequest::RequestCancel { request_id } => request_cancel(context, request_id).await,
        ClientRequest::AgentOutput { target, after } => agent_output(context, &target, after).await,
        ClientRequest::Watch { .. } => unreachable!("handled before dispatch"),
    }
}

async fn query<T: Send + 'static>(context: &Context, f: impl FnOnce(&Engine) -> T + Send + 'static) -> Option<T> {
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

async fn stop(context: &Arc<Context>, all: bool) -> Reply {
    let mut stopped = Vec::new();
    if all {
        let agents: Vec<Arc<AgentRuntime>> = context.agents.lock().expect("agent table").values().cloned().collect();
        for agent in agents {
            agent.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
            let name = agent.record.name.clone();
            let _ = tokio::task::spawn_blocking(move || agent.holder().map(|client| client.shutdown())).await;
            stopped.push(name);
        }
    }
    Reply::ok(json!({"schema": "wakterm.mux-stop.v1", "stopping": true, "agents_stopped": stopped}))
}

/// Names start with a letter or digit (so they never read as a flag or a path like `..`), then
/// letters, digits, `-`, `_`, `.`; a UUID is reserved for agent ids.
fn valid_name(name: &str) -> bool {
    name.len() <= MAX_AGENT_NAME_BYTES
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && wakterm_engine::ids::canonical_uuid(name).is_none()
}

async fn start_agent(context: &Arc<Context>, name: String, harness: String, cwd: String, env: Vec<(String, String)>, command: Vec<String>) -> Reply {
    if !valid_name(&name) {
        return Reply::error(exit::USAGE, "invalid_name", format!("agent names are 1..={MAX_AGENT_NAME_BYTES} of [A-Za-z0-9._-], start with a letter or digit, and are not a UUID"));
    }
    if command.is_empty() {
        return Reply::error(exit::USAGE, "invalid_command", "give the agent's command after --");
    }
    if !std::path::Path::new(&cwd).is_dir() {
        return Reply::error(exit::USAGE, "invalid_cwd", format!("{cwd} is not a directory"));
    }
    // Reserve the name before the (slow) holder spawn, so two concurrent starts of one name
    // cannot both spawn a process.
    {
        let agents = context.agents.lock().expect("agent table");
        let mut starting = context.starting.lock().expect("starting names");
        if agents.values().any(|a| a.record.name == name) || !starting.insert(name.clone()) {
            return Reply::error(exit::REJECTED, "name_taken", format!("an agent named {name} already exists"));
        }
    }
    let reply = start_reserved_agent(context, name.clone(), harness, cwd, env, command).await;
    context.starting.lock().expect("starting names").remove(&name);
    reply
}

async fn start_reserved_agent(context: &Arc<Context>, name: String, harness: String, cwd: String, env: Vec<(String, String)>, command: Vec<String>) -> Reply {
    let record = AgentRecord {
        agent_id: uuid::Uuid::new_v4().to_string(),
        name,
        harness,
        cwd,
        env,
        command,
        created_ms: now_ms(),
    };
    let paths = context.paths.clone();
    let writer = context.writer.clone();
    let fault = context.fault;
    let spawned = tokio::task::spawn_blocking(move || spawn_agent(&paths, &writer, record, fault)).await;
    let agent = match spawned {
        Ok(Ok(agent)) => agent,
        Ok(Err(message)) => return Reply::error(exit::ERROR, "agent_start_failed", message),
        Err(error) => return Reply::error(exit::ERROR, "agent_start_failed", error.to_string()),
    };
    let facts = agent.facts();
    context.agents.lock().expect("agent table").insert(agent.record.agent_id.clone(), agent.clone());
    let _ = context.inbox.send(DriverMsg::Input(Input::AgentUpserted(facts.clone()))).await;
    spawn_monitor(agent.clone(), context.inbox.clone());
    Reply::ok(json!({
        "schema": "wakterm.agent-start.v1",
        "agent_id": agent.record.agent_id,
        "name": agent.record.name,
        "harness": agent.record.harness,
        "incarnation": facts.incarnation,
        "pid": facts.process.map(|p| p.pid),
    }))
}

/// LIFE-1: persists the agent, then spawns its holder (`wakterm __holder`) and waits for its
/// first `info`. The record is durable before any process exists, so a daemon that dies at any
/// point of a start leaves no process outside the catalog: after a restart the agent is listed
/// (running, or stopped if the spawn never happened) and `agent stop` / `mux stop --all` reach it.
fn spawn_agent(paths: &crate::paths::DataPaths, writer: &crate::store::StoreWriter, record: AgentRecord, fault: Option<super::faults::FaultPoint>) -> Result<Arc<AgentRuntime>, String> {
    let dir = paths.holders_dir();
    crate::paths::private_dir(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let record_json = serde_json::to_string(&record).map_err(|e| e.to_string())?;
    let op = StoreOp::PutAgent { agent_id: record.agent_id.clone(), name: record.name.clone(), record_json };
    writer.commit_blocking(vec![op]).map_err(|error| format!("cannot record the agent: {error}"))?;
    let config = holder_config(paths, &record);
    if let Err(message) = spawn_pane(&config) {
        // A holder that started but never answered in time must not outlive the record.
        if let Ok(client) = crate::holder::HolderClient::connect(&config.socket_path) {
            let _ = client.shutdown();
        }
        // Take the record back (if that fails too, the agent shows as stopped).
        let _ = writer.commit_blocking(vec![StoreOp::DeleteAgent { agent_id: record.agent_id.clone() }]);
        return Err(message);
    }
    super::faults::crash_if(fault, super::faults::FaultPoint::AfterHolderSpawn);
    let agent = Arc::new(AgentRuntime::new(paths, record));
    agent.refresh_liveness();
    Ok(agent)
}

/// The holder configuration of an agent record.
fn holder_config(paths: &crate::paths::DataPaths, record: &AgentRecord) -> HolderConfig {
    HolderConfig {
        socket_path: paths.holder_socket(&record.agent_id),
        cwd: record.cwd.clone().into(),
        env: record.env.clone(),
        command: record.command.clone(),
        cols: 120,
        rows: 40,
        detach: true,
    }
}

/// Starts the agent's pane: a holder process (`wakterm __holder`) that outlives the daemon.
fn spawn_pane(config: &HolderConfig) -> Result<(), String> {
    let exe = holder_binary()?;
    spawn_holder_with_args(&exe, &["__holder".into()], config).map_err(|e| format!("cannot start the agent's pane: {e}"))?;
    Ok(())
}

/// The binary holders run: this daemon's own. When it was replaced or deleted on disk (an
/// upgrade in place), Linux still executes the running image through `/proc/self/exe`, so the
/// holder is always the daemon's own version.
fn holder_binary() -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the wakterm binary: {e}"))?;
    if exe.exists() && !exe.to_string_lossy().ends_with(" (deleted)") {
        return Ok(exe);
    }
    let running = std::path::PathBuf::from("/proc/self/exe");
    if running.exists() {
        tracing::warn!(binary = %exe.display(), "the wakterm binary was replaced or deleted; holders run this daemon's own image");
        return Ok(running);
    }
    Err(format!("the wakterm binary this daemon runs from ({}) was deleted; restart the daemon (`wakterm mux stop && wakterm mux start`)", exe.display()))
}

fn resolve(context: &Context, target: &str) -> Option<Arc<AgentRuntime>> {
    let agents = context.agents.lock().expect("agent table");
    let canonical = wakterm_engine::ids::canonical_uuid(target);
    agents.values().find(|a| a.record.name == target || Some(&a.record.agent_id) == canonical.as_ref()).cloned()
}

async fn stop_agent(context: &Arc<Context>, target: &str) -> Reply {
    let Some(agent) = resolve(context, target) else {
        return Reply::error(exit::NOT_FOUND, "agent_unknown", format!("no agent is named {target}"));
    };
    agent.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    let agent_id = agent.record.agent_id.clone();
    let writer = context.writer.clone();
    let worker = agent.clone();
    let log = context.paths.holder_socket(&agent_id).with_extension("sock.log");
    let result = tokio::task::spawn_blocking(move || {
        let _ = worker.holder().map(|client| client.shutdown());
        let _ = std::fs::remove_file(&log); // the pane's own log goes with the agent
        writer.commit_blocking(vec![StoreOp::DeleteAgent { agent_id: worker.record.agent_id.clone() }])
    })
    .await;
    context.agents.lock().expect("agent table").remove(&agent_id);
    if let Ok(id) = AgentId::parse(&agent_id) {
        let _ = context.inbox.send(DriverMsg::Input(Input::AgentRemoved { agent_id: id })).await;
    }
    match result {
        Ok(Ok(_)) => Reply::ok(json!({"schema": "wakterm.agent-stop.v1", "agent_id": agent_id, "stopped": true})),
        Ok(Err(error)) => Reply::error(exit::ERROR, "store_failed", error.to_string()),
        Err(error) => Reply::error(exit::ERROR, "internal", error.to_string()),
    }
}

/// Replaces the agent's process in the same pane (a new incarnation), e.g. after a crash.
async fn restart_agent(context: &Arc<Context>, target: &str) -> Reply {
    let Some(agent) = resolve(context, target) else {
        return Reply::error(exit::NOT_FOUND, "agent_unknown", format!("no agent is named {target}"));
    };
    let worker = agent.clone();
    let inbox = context.inbox.clone();
    let paths = context.paths.clone();
    let result = tokio::task::spawn_blocking(move || {
        match worker.holder() {
            // The pane lives: start the command again in it (a new incarnation).
            Ok(mut client) => {
                client.respawn().map_err(|e| e.to_string())?;
            }
            // The pane is gone (its holder exited or was killed while the daemon was down):
            // start a new one from the agent's stored record; same agent id, new incarnation.
            Err(_) => spawn_pane(&holder_config(&paths, &worker.record))?,
        }
        let _ = worker.forward_liveness_change(&inbox);
        Ok::<_, String>(worker.facts())
    })
    .await;
    match result {
        Ok(Ok(facts)) => Reply::ok(json!({"schema": "wakterm.agent-restart.v1", "agent_id": agent.record.agent_id, "incarnation": facts.incarnation})),
        Ok(Err(message)) => Reply::error(exit::ERROR, "agent_restart_failed", message),
        Err(error) => Reply::error(exit::ERROR, "internal", error.to_string()),
    }
}

/// The catalog refreshes every agent's observer off the reactor (forwarding what it read to
/// the engine, in order) so the state it reports is current, then asks the engine what an
/// immediate return-final admission would meet (ADM-16): one decision, never re-derived here.
async fn catalog(context: &Arc<Context>) -> Reply {
    let agents: Vec<Arc<AgentRuntime>> = context.agents.lock().expect("agent table").values().cloned().collect();
    let mut entries = Vec::new();
    for agent in agents {
        let inbox = context.inbox.clone();
        let worker = agent.clone();
        let snapshot = tokio::task::spawn_blocking(move || {
            let agent_id = worker.agent_id();
            // The catalog's snapshot also refreshes the engine's view (ADM-5 grace, busy/idle);
            // a failed refresh tells the engine nothing.
            let answer = |snapshot: Result<wakterm_engine::ObserverSnapshot, String>| {
                snapshot.ok().map(|snapshot| DriverMsg::Input(Input::ObserverSnapshot { agent_id: agent_id.clone(), snapshot }))
            };
            super::effects::refresh_agent(&worker, &worker.agent_id(), &inbox, answer)
        })
        .await
        .unwrap_or_else(|e| Err(e.to_string()));
        let agent_id = agent.agent_id();
        let view = query(context, move |engine: &Engine| engine.catalog_view(&agent_id))
            .await
            .flatten()
            .map_or(Value::Null, |view| catalog_decision(&view));
        let view = refresh_failure_blocks(view, &snapshot);
        entries.push(catalog_entry(&agent.record, agent.facts().incarnation, snapshot, view));
    }
    Reply::ok(json!({"schema": "wakterm.agent-catalog.v1", "agents": entries}))
}

/// The engine's catalog decision as JSON: state, availability and the blocker's reason. An
/// admission in flight or a written prompt whose turn has not started is reported by the
/// catalog's published word for both, `turn_pending`.
fn catalog_decision(view: &wakterm_engine::CatalogView) -> Value {
    let reason = view.return_final_blocker.as_ref().map(|b| match b.reason {
        "admission_in_progress" | "awaiting_turn_start" => "turn_pending",
        other => other,
    });
    json!({
        "state": view.state.as_str(),
        "return_final_available": view.return_final_blocker.is_none(),
        "return_final_unavailable_reason": reason,
        "detail": view.return_final_blocker.as_ref().map(|b| b.detail.clone()),
    })
}

/// An admission's own refresh would fail as the catalog's did, and it is refused then
/// (`observer_unavailable`, ADM-3): the engine, which hears nothing of a failed refresh, may
/// still hold an older view.
fn refresh_failure_blocks(mut decision: Value, snapshot: &Result<wakterm_engine::ObserverSnapshot, String>) -> Value {
    if snapshot.is_err() && decision["return_final_available"] == true {
        decision["return_final_available"] = json!(false);
        decision["return_final_unavailable_reason"] = json!("observer_unavailable");
    }
    decision
}

fn catalog_entry(record: &AgentRecord, incarnation: Option<wakterm_engine::Incarnation>, snapshot: Result<wakterm_engine::ObserverSnapshot, String>, decision: Value) -> Value {
    use wakterm_engine::ObserverStatus;
    let view = snapshot.as_ref().ok();
    let observer_detail = match (&snapshot, view.map(|v| &v.status)) {
        (Err(error), _) => Some(error.clone()),
        (_, Some(ObserverStatus::Unavailable { reason })) => Some(reason.clone()),
        _ => None,
    };
    json!({
        "agent_id": record.agent_id,
        "name": record.name,
        "harness": record.harness,
        "transport": "pty",
        "incarnation": incarnation,
        "state": decision.get("state").cloned().unwrap_or(json!("unknown")),
        "correlation_source": if record.harness == "codex" { Some("provider_file") } else { None },
        "return_final_available": decision.get("return_final_available").cloned().unwrap_or(json!(false)),
        "return_final_unavailable_reason": decision.get("return_final_unavailable_reason").cloned().unwrap_or(json!("agent_unknown")),
        "observer_detail": observer_detail,
        "observer_session": view.and_then(|v| v.session.clone()),
        "cwd": record.cwd,
    })
}

pub fn capabilities() -> Value {
    json!({
        "schema": "wakterm.agent-capabilities.v1",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "operations": {
            "agent.send": {"version": 1, "receipt_schema": wakterm_engine::receipt::RECEIPT_SCHEMA},
            "agent.admit": {"version": 1, "receipt_schema": wakterm_engine::receipt::RECEIPT_SCHEMA, "requires": ["incarnation", "request_id"]},
            "agent.catalog": {"version": 1, "schema": "wakterm.agent-catalog.v1"},
            "agent.request.get": {"version": 1, "schema": "wakterm.agent-request.v1"},
            "agent.request.cancel": {"version": 1},
            "agent.request.watch": {"version": 1, "event_schema": wakterm_engine::terminal::TERMINAL_SCHEMA},
            "agent.output": {"version": 1, "schema": "wakterm.agent-output-shadow.experimental.v1", "experimental": true},
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

async fn admit_prompt(context: &Arc<Context>, admit: AdmitRequest) -> Reply {
    let request_id = admit.request_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let command = AdmitCommand {
        op: OpId(0),
        operation: admit.operation,
        target: admit.target,
        exact_agent_id: admit.exact_agent_id,
        incarnation: admit.incarnation,
        request_id,
        prompt: admit.prompt,
        paste_mode: admit.paste_mode,
        return_mode: admit.return_mode,
        final_timeout_ms: admit.final_timeout_ms,
    };
    let (reply, answer) = oneshot::channel();
    if context.inbox.send(DriverMsg::Admit { command, reply }).await.is_err() {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is shutting down");
    }
    let Ok(receipt) = answer.await else {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon stopped before answering");
    };
    receipt.assert_consistent();
    let exit_code = match receipt.classification {
        Classification::Accepted => exit::OK,
        Classification::Indeterminate => exit::INDETERMINATE,
        _ => exit::REJECTED,
    };
    Reply { exit_code, body: serde_json::to_value(&receipt).expect("receipts serialise") }
}

async fn request_get(context: &Arc<Context>, request_id: &str, evidence: bool) -> Reply {
    let Ok(id) = RequestId::parse(request_id) else {
        return Reply::error(exit::USAGE, "request_id_malformed", format!("{request_id:?} is not a UUID"));
    };
    let view = query(context, move |engine: &Engine| match engine.request(&id) {
        None => Value::Null,
        Some(record) => {
            // TERM-2: a terminal event is shown only once published (durable, final sequence).
            let published = engine.published_terminal(&id).cloned();
            let state = match (&published, &record.terminal) {
                (Some(event), _) => serde_json::to_value(event.state).unwrap_or_default(),
                (None, Some(_)) => json!("terminal_pending"),
                (None, None) => json!(record.phase.as_str()),
            };
            let mut view = json!({
            "schema": "wakterm.agent-request.v1",
            "request_id": record.request_id,
            "agent_id": record.agent_id,
            "phase": record.phase,
            "state": state,
            "operation": record.operation,
            "return_mode": record.return_mode,
            "incarnation": record.incarnation,
            "bound_provider_turn": record.bound_turn,
            "deadline_ms": record.deadline_ms,
            "receipt": record.receipt,
            "terminal_event": published,
            });
            if evidence {
                // RF-6, TERM-2: the end is shown once its terminal event is published.
                let steps: Vec<&wakterm_engine::Evidence> = record
                    .evidence
                    .iter()
                    .filter(|e| e.step != wakterm_engine::EvidenceStep::Terminal || published.is_some())
                    .collect();
                view["evidence"] = json!(steps);
                view["evidence_dropped"] = json!(record.evidence_dropped);
            }
            view
        }
    })
    .await;
    match view {
        Some(Value::Null) | None => Reply::error(exit::NOT_FOUND, "request_not_found", format!("no request has id {request_id}")),
        Some(view) => Reply::ok(view),
    }
}

/// OUT-8: the experimental output page reads the rollout with its own tail on a blocking
/// thread; it never touches the agent's observer (nothing the engine is fed changes).
async fn agent_output(context: &Arc<Context>, target: &str, after: Option<String>) -> Reply {
    let Some(agent) = resolve(context, target) else {
        return crate::output_page::agent_unknown(target);
    };
    let root = context.paths.root.clone();
    let answer = tokio::task::spawn_blocking(move || {
        let facts = agent.facts();
        let view = crate::output_page::AgentView {
            agent_id: agent.record.agent_id.clone(),
            harness: agent.record.harness.clone(),
            incarnation: facts.incarnation.map(|i| i.0),
            process: facts.process.map(crate::observer::engine_to_probe),
            codex_home: agent.record.codex_home(),
            cwd: std::path::PathBuf::from(&agent.record.cwd),
        };
        crate::output_page::read_output(&root, &view, after.as_deref())
    })
    .await;
    answer.unwrap_or_else(|error| Reply::error(exit::ERROR, "internal", error.to_string()))
}

async fn request_cancel(context: &Arc<Context>, request_id: String) -> Reply {
    let (reply, answer) = oneshot::channel();
    if context.inbox.send(DriverMsg::Cancel { request_id, reply }).await.is_err() {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is shutting down");
    }
    let Ok(outcome) = answer.await else {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon stopped before answering");
    };
    use wakterm_engine::CancelOutcome;
    let exit_code = match &outcome {
        CancelOutcome::Cancelled { .. } | CancelOutcome::AlreadyTerminal { .. } => exit::OK,
        CancelOutcome::NotFound { .. } => exit::NOT_FOUND,
        CancelOutcome::NotReturnFinal { .. } | CancelOutcome::AdmissionInProgress { .. } | CancelOutcome::Failed { .. } => exit::REJECTED,
    };
    let mut body = serde_json::to_value(&outcome).expect("outcomes serialise");
    body["schema"] = json!("wakterm.agent-request-cancel.v1");
    Reply { exit_code, body }
}

/// TERM-3: history from the store after `after`, then live events pushed by the driver (no
/// polling). Subscribing before reading history means nothing committed in between is lost;
/// sequences at or below the last one sent are skipped, so nothing repeats.
/// CONN-3: a watcher that hangs up is noticed at once (its read half reaches EOF), and a
/// heartbeat every `WATCH_HEARTBEAT` lets both ends notice a dead peer without an event.
async fn watch(mut peer: tokio::net::unix::OwnedReadHalf, writer: &mut tokio::net::unix::OwnedWriteHalf, context: &Arc<Context>, after: u64, once: bool) {
    let mut live = context.terminal.subscribe();
    let mut last = after;
    if !send_history(writer, context, &mut last).await {
        return;
    }
    if once {
        let _ = write_line(writer, &json!({"end": true, "last_sequence": last})).await;
        return;
    }
    let mut heartbeat = tokio::time::interval(crate::protocol::WATCH_HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scratch = [0u8; 64];
    loop {
        let line = tokio::select! {
            biased;
            // The client sends nothing after its request: EOF, an error or stray bytes all
            // mean the subscription is over.
            _ = peer.read(&mut scratch) => return,
            received = live.recv() => match received {
                Ok(event) if event.terminal_event_sequence > last => {
                    last = event.terminal_event_sequence;
                    json!({"event": event})
                }
                Ok(_) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    if !send_history(writer, context, &mut last).await {
                        return;
                    }
                    continue;
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            _ = heartbeat.tick() => json!({"heartbeat": true, "last_sequence": last}),
        };
        if write_line(writer, &line).await.is_err() {
            return;
        }
    }
}

async fn send_history(writer: &mut tokio::net::unix::OwnedWriteHalf, context: &Arc<Context>, last: &mut u64) -> bool {
    loop {
        let store = context.store.clone();
        let from = *last;
        let page = tokio::task::spawn_blocking(move || store.terminal_events_after(from, WATCH_PAGE)).await;
        let Ok(Ok(page)) = page else {
            let _ = write_line(writer, &json!({"error": "store_unreadable"})).await;
            return false;
        };
        let full = page.len() == WATCH_PAGE;
        for stored in page {
            let event: Value = serde_json::from_str(&stored.event_json).unwrap_or(Value::Null);
            *last = stored.sequence;
            if write_line(writer, &json!({"event": event})).await.is_err() {
                return false;
            }
        }
        if !full {
            return true;
        }
    }
}
