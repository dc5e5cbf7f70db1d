//! Control-socket handlers for agents: start (record first, then the holder: LIFE-1), stop,
//! restart, and the experimental output page.

use super::agents::{AgentRecord, AgentRuntime};
use super::Context;
use crate::driver::{now_ms, DriverMsg};
use crate::holder::{spawn_holder_with_args, HolderConfig};
use crate::protocol::{exit, Reply};
use crate::store::StoreOp;
use serde_json::json;
use std::sync::Arc;
use wakterm_engine::limits::no_agent_named;
use wakterm_engine::{AgentId, Input};

/// Longest agent display name.
pub const MAX_AGENT_NAME_BYTES: usize = 64;

/// Names start with a letter or digit (so they never read as a flag or a path like `..`), then
/// letters, digits, `-`, `_`, `.`; a UUID is reserved for agent ids.
fn valid_name(name: &str) -> bool {
    name.len() <= MAX_AGENT_NAME_BYTES
        && name.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && wakterm_engine::ids::canonical_uuid(name).is_none()
}

/// What `agent start` asked for.
pub struct StartSpec {
    pub name: String,
    pub harness: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub command: Vec<String>,
    pub managed: bool,
}

pub(super) async fn start_agent(context: &Arc<Context>, spec: StartSpec) -> Reply {
    let name = spec.name.clone();
    if !valid_name(&name) {
        return Reply::error(exit::USAGE, "invalid_name", format!("agent names are 1..={MAX_AGENT_NAME_BYTES} of [A-Za-z0-9._-], start with a letter or digit, and are not a UUID"));
    }
    if spec.command.is_empty() {
        return Reply::error(exit::USAGE, "invalid_command", "give the agent's command after --");
    }
    // CORR-14: the agent's relative paths (its CODEX_HOME) resolve against it, never against
    // the daemon's own directory; the CLI sends it canonical.
    if !std::path::Path::new(&spec.cwd).is_absolute() {
        return Reply::error(exit::USAGE, "invalid_cwd", format!("{} is not an absolute path", spec.cwd));
    }
    // Off the reactor (the daemon's only one): a stat of the caller's path may hang on a
    // network file system.
    let cwd = spec.cwd.clone();
    if !tokio::task::spawn_blocking(move || std::path::Path::new(&cwd).is_dir()).await.unwrap_or(false) {
        return Reply::error(exit::USAGE, "invalid_cwd", format!("{} is not a directory", spec.cwd));
    }
    // The vocabulary's harnesses (SPEC): a misspelt one (`Codex`) quietly turned return-final off.
    if !HARNESSES.contains(&spec.harness.as_str()) {
        let shown: String = spec.harness.chars().take(64).collect();
        return Reply::error(exit::USAGE, "invalid_harness", format!("unknown harness {shown:?}: it is one of {}", HARNESSES.join(", ")));
    }
    if spec.managed && spec.harness != "codex" {
        return Reply::error(exit::USAGE, "invalid_harness", "--managed drives a Codex app-server; the harness must be codex");
    }
    // Reserve the name before the (slow) holder spawn, so two concurrent starts of one name
    // cannot both spawn a process.
    {
        let agents = context.agents.lock().expect("agent table");
        let mut starting = context.starting.lock().expect("starting names");
        if context.closing.load(std::sync::atomic::Ordering::SeqCst) {
            return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is stopping (`mux stop`): no agent starts now; start it again after `wakterm mux start`");
        }
        if let Some(holder) = agents.values().find(|a| a.record.name == name) {
            // Its process may have ended: the agent (its pane, its record) stays until
            // `agent stop`, which frees the name (a review read "unique among running agents"
            // and found a stopped one holding it, unsaid).
            let how = match holder.process_alive() {
                true => "; `agent stop` it first to reuse the name, or choose another".to_string(),
                false => format!(" (its process has ended: `agent restart {name}` runs it again, `agent stop {name}` frees the name)"),
            };
            return Reply::error(exit::REJECTED, "name_taken", format!("an agent named {name} already exists{how}"));
        }
        if !starting.insert(name.clone()) {
            return Reply::error(exit::REJECTED, "name_taken", format!("an agent named {name} is being started"));
        }
    }
    let reply = start_reserved_agent(context, spec).await;
    context.starting.lock().expect("starting names").remove(&name);
    reply
}

async fn start_reserved_agent(context: &Arc<Context>, spec: StartSpec) -> Reply {
    let paths = context.paths.clone();
    let writer = context.writer.clone();
    let fault = context.fault;
    let stopping = context.clone();
    let spawned = tokio::task::spawn_blocking(move || {
        let mut record = AgentRecord {
            agent_id: uuid::Uuid::new_v4().to_string(),
            name: spec.name,
            harness: spec.harness,
            cwd: spec.cwd,
            env: spec.env,
            command: spec.command,
            created_ms: now_ms(),
            managed: spec.managed,
            thread: None,
            codex_home: None,
            resolved_codex_home: None,
        };
        record.resolve_codex_home(); // here, not on the reactor: it may block
        let agent = spawn_agent(&paths, &writer, record, fault).map_err(|failed| (Reply::error(exit::ERROR, "agent_start_failed", failed.message), failed.kept))?;
        // LIFE-5: a start that ended after `mux stop --all` took its list (one slower than its
        // wait) ends its agent itself; the record stays, as for the agents `--all` stopped.
        // The daemon's end waits for it (`wait_for_changes`: its name is reserved till then).
        if stopping.stopping_all.load(std::sync::atomic::Ordering::SeqCst) {
            agent.shut_down_pane();
            let message = format!("{} started while `mux stop --all` ran, and was ended with the others", agent.record.name);
            return Err((Reply::error(exit::ERROR, "daemon_stopping", message), None));
        }
        Ok(agent)
    })
    .await;
    let agent = match spawned {
        Ok(Ok(agent)) => agent,
        Ok(Err((refused, kept))) => {
            // LIFE-1: a record whose take-back did not commit is the catalog's, stopped.
            if let Some(kept) = kept {
                list_agent(context, &kept).await;
            }
            return refused;
        }
        Err(error) => return Reply::error(exit::ERROR, "agent_start_failed", error.to_string()),
    };
    let facts = list_agent(context, &agent).await;
    Reply::ok(json!({
        "schema": "wakterm.agent-start.v1",
        "agent_id": agent.record.agent_id,
        "name": agent.record.name,
        "harness": agent.record.harness,
        "incarnation": facts.incarnation,
        "pid": facts.process.map(|p| p.pid),
        "transport": if agent.record.managed { "app_server" } else { "pty" },
        "thread_id": agent.record.thread.as_ref().map(|t| t.thread_id.clone()),
        "session_id": agent.record.thread.as_ref().map(|t| t.session_id.0.clone()),
    }))
}

/// Puts a started agent in the agent table, tells the engine, and has the monitor watch it;
/// its facts.
async fn list_agent(context: &Arc<Context>, agent: &Arc<AgentRuntime>) -> wakterm_engine::AgentFacts {
    let facts = agent.facts();
    context.agents.lock().expect("agent table").insert(agent.record.agent_id.clone(), agent.clone());
    let _ = context.inbox.send(DriverMsg::Input(Input::AgentUpserted(facts.clone()))).await;
    context.monitor.add(agent.clone());
    facts
}

/// Why `agent start` failed after its record was durable: the message, and the agent when the
/// record's take-back did not commit either (a full disk, a database locked past its busy
/// timeout): the store keeps it, so the catalog must list it, stopped, for `agent stop` to
/// remove (it was dropped: its name stayed taken in the store, unknown to the catalog and to
/// `agent stop`, until a restart brought it back; a review, as the hostile run's `agent stop`).
struct StartFailed {
    message: String,
    kept: Option<Arc<AgentRuntime>>,
}

impl StartFailed {
    fn refused(message: String) -> StartFailed {
        StartFailed { message, kept: None }
    }
}

/// LIFE-1: takes back the record of an agent whose start failed (its pane already ended); when
/// that does not commit, the agent stays, stopped, and the message says so.
fn take_back_record(paths: &crate::paths::DataPaths, writer: &crate::store::StoreWriter, record: AgentRecord, message: String) -> StartFailed {
    match writer.commit_blocking(vec![StoreOp::DeleteAgent { agent_id: record.agent_id.clone() }]) {
        Ok(_) => StartFailed::refused(message),
        Err(error) => {
            let name = record.name.clone();
            let message = format!("{message}; its record could not be taken back ({error}): {name} stays in the catalog, stopped: `agent stop {name}` removes it");
            let agent = Arc::new(AgentRuntime::new(paths, record));
            agent.refresh_liveness();
            StartFailed { message, kept: Some(agent) }
        }
    }
}

/// LIFE-1: persists the agent, then spawns its holder (`wakterm __holder`) and waits for its
/// first `info`. The record is durable before any process exists, so a daemon that dies at any
/// point of a start leaves no process outside the catalog: after a restart the agent is listed
/// (running, or stopped if the spawn never happened) and `agent stop` / `mux stop --all` reach it.
fn spawn_agent(paths: &crate::paths::DataPaths, writer: &crate::store::StoreWriter, record: AgentRecord, fault: Option<super::faults::FaultPoint>) -> Result<Arc<AgentRuntime>, StartFailed> {
    let dir = paths.holders_dir();
    crate::paths::private_dir(&dir).map_err(|e| StartFailed::refused(format!("cannot create {}: {e}", dir.display())))?;
    let record_json = serde_json::to_string(&record).map_err(|e| StartFailed::refused(e.to_string()))?;
    let op = StoreOp::PutAgent { agent_id: record.agent_id.clone(), name: record.name.clone(), record_json };
    writer.commit_blocking(vec![op]).map_err(|error| StartFailed::refused(format!("cannot record the agent: {error}")))?;
    let config = holder_config(paths, &record);
    // A holder that started but never answered in time must not outlive the record; one whose
    // command did not start (LIFE-2) goes too, so the same name can be used again. The record
    // is taken back either way (if that fails too, the agent stays, stopped).
    let started = spawn_pane(&config).inspect(|_| super::faults::crash_if(fault, super::faults::FaultPoint::AfterHolderSpawn));
    if let Err(message) = started.and_then(|info| spawn_failure(&info, &record)) {
        take_back_pane(&config);
        return Err(take_back_record(paths, writer, record, message));
    }
    let record = if record.managed { bind_thread(paths, writer, &config, record)? } else { record };
    let agent = Arc::new(AgentRuntime::new(paths, record));
    agent.refresh_liveness();
    Ok(agent)
}

/// MGD-2: a new managed agent gets its thread (handshake through the holder), recorded before
/// the agent is usable. A failed handshake ends the pane and takes the record back.
fn bind_thread(paths: &crate::paths::DataPaths, writer: &crate::store::StoreWriter, config: &HolderConfig, record: AgentRecord) -> Result<AgentRecord, StartFailed> {
    let bound = crate::holder::HolderClient::connect(&config.socket_path)
        .map_err(|e| e.to_string())
        .and_then(|mut client| super::managed::handshake(&mut client, &record.cwd, None));
    let stored = bound.and_then(|ids| {
        let threaded = AgentRecord { thread: Some(ids), ..record.clone() };
        let record_json = serde_json::to_string(&threaded).map_err(|e| e.to_string())?;
        let op = StoreOp::PutAgent { agent_id: threaded.agent_id.clone(), name: threaded.name.clone(), record_json };
        writer.commit_blocking(vec![op]).map_err(|error| format!("cannot record the agent's thread: {error}"))?;
        Ok(threaded)
    });
    match stored {
        Ok(threaded) => Ok(threaded),
        Err(message) => {
            if let Ok(client) = crate::holder::HolderClient::connect(&config.socket_path) {
                let _ = client.shutdown();
            }
            // The record as the store holds it: the one without the thread.
            Err(take_back_record(paths, writer, record, format!("the managed session did not start: {message}")))
        }
    }
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
        raw: record.managed,
    }
}

/// Why a restart failed, and whether its holder is worth asking about the process now.
struct RestartFailed {
    message: String,
    /// Nothing reached the holder, or it stopped answering: a liveness probe now tells nothing
    /// new or waits out the same silence (two more call bounds: a SIGSTOPped holder's restart
    /// answered after 55-59 s; one refused for its deadline waited until the holder went on).
    no_probe: bool,
    /// LIFE-9: the holder may have begun the respawn before it stopped answering: whether the
    /// process is replaced is unknown (`agent_restart_unknown`, indeterminate), not failed.
    unknown: bool,
}

impl From<String> for RestartFailed {
    fn from(message: String) -> Self {
        RestartFailed { message, no_probe: false, unknown: false }
    }
}

/// LIFE-9: how long after it was asked a restart may begin: past it, the restart is refused
/// with nothing sent (one that waited behind another restart or a stop of the same agent, or
/// whose holder did not answer).
pub const RESTART_START_BOUND: std::time::Duration = crate::holder::HOLDER_CALL_TIMEOUT;

/// LIFE-9: a holder-call failure of a restart, a timeout told apart: nothing was sent before
/// the respawn (`sent: false`); a respawn that got no answer may have begun (a hostile run
/// stopped the holder 20 ms into one: the old process ended, and the new one started when the
/// holder went on, after the restart had answered `agent_restart_failed`).
fn restart_call_failed(error: crate::holder::HolderError, sent: bool) -> RestartFailed {
    match error {
        crate::holder::HolderError::Timeout { .. } if !sent => RestartFailed {
            message: format!("{error}: the agent's holder is not answering (stopped or overloaded); nothing was sent to it, so the process it runs is the same"),
            no_probe: true,
            unknown: false,
        },
        crate::holder::HolderError::Timeout { .. } => RestartFailed {
            message: format!("{error}: the agent's holder stopped answering during the respawn; whether it began it is unknown: if it did, the old process may have ended and the new one starts when the holder goes on; if not, it never begins it after the restart's deadline (a holder started by a wakterm older than the deadline ignores it). Check `agent catalog` (the incarnation) before you restart again"),
            no_probe: true,
            unknown: true,
        },
        // A structured refusal did nothing (`StartDeadlinePassed`, a working directory gone),
        // nor did a call refused before it was sent.
        error @ (crate::holder::HolderError::Remote { .. } | crate::holder::HolderError::NotSent { .. }) => RestartFailed::from(error.to_string()),
        // A garbled answer or the holder gone during the respawn: it may have begun it; the
        // probe after tells the engine what runs now.
        error if sent => RestartFailed { message: format!("{error}: whether the respawn began is unknown; check `agent catalog` (the incarnation) before you restart again"), no_probe: false, unknown: true },
        error => RestartFailed::from(error.to_string()),
    }
}

/// LIFE-9: the restart begins, by `start_by_ms`, or is refused with nothing sent: restarts of
/// one agent asked together against a stopped holder waited their turns, each sending a
/// respawn with a deadline of its own (answered after 20, 40, 60 s, the last as
/// `daemon_unresponsive`), and one the holder read after its continuation restarted the agent
/// after its caller had been told it failed (a hostile run).
fn time_left(start_by_ms: u64) -> Result<std::time::Duration, RestartFailed> {
    let left = start_by_ms.saturating_sub(crate::holder::protocol::monotonic_ms());
    if left < 1_000 {
        let bound = RESTART_START_BOUND.as_secs();
        let message = format!("the restart could not begin within {bound} s of being asked (another restart or stop of the agent held its pane, or its holder did not answer); nothing was done: ask again");
        return Err(RestartFailed { message, no_probe: true, unknown: false });
    }
    Ok(std::time::Duration::from_millis(left))
}

/// Starts the agent's command again: in its pane if that lives, else in a new pane; the
/// respawn of a live pane begins by `start_by_ms` (LIFE-9).
fn restart_pane(worker: &AgentRuntime, paths: &crate::paths::DataPaths, start_by_ms: u64) -> Result<(), RestartFailed> {
    match worker.connect_holder_within(time_left(start_by_ms)?) {
        // The pane lives: start the command again in it (a new incarnation). LIFE-9: only a
        // holder that answers now is sent the respawn: a stopped one would read it when it goes
        // on, and one started by a wakterm older than the deadline would perform it then.
        Ok(mut client) => {
            client.info().map_err(|error| restart_call_failed(error, false))?;
            let info = client.respawn_by(start_by_ms).map_err(|error| restart_call_failed(error, true))?;
            spawn_failure(&info, &worker.record)?;
        }
        // Not known to be gone (a timeout, out of descriptors): nothing is started beside it.
        Err(error) if !super::agents::holder_is_gone(&error) => return Err(format!("cannot reach the agent's pane: {error}").into()),
        // The pane is gone (its holder exited or was killed while the daemon was down):
        // start a new one from the agent's stored record; same agent id, new incarnation.
        // CORR-14: with the CODEX_HOME its first start resolved, which the daemon watches.
        Err(_) => {
            // LIVE-1: a holder that runs although nobody listens at its socket (removed) ends
            // first: never a second pane and a second process beside it.
            worker.end_unreachable_holder()?;
            let config = HolderConfig { env: super::agents::restart_env(&worker.record)?, ..holder_config(paths, &worker.record) };
            spawn_failure(&spawn_pane(&config)?, &worker.record)?;
        }
    }
    // MGD-2: the new process resumes the agent's own thread before anything is admitted
    // (until then its observer has no loaded thread to report).
    if let Some(ids) = worker.record.managed_ids() {
        let resumed = worker.holder().and_then(|mut client| super::managed::handshake(&mut client, &worker.record.cwd, Some(&ids)));
        if let Err(error) = resumed {
            return Err(take_back_unresumed(worker, &error).into());
        }
    }
    Ok(())
}

/// LIFE-2, MGD-2: a restarted app-server that did not resume the agent's thread is ended with
/// its pane, as a start whose handshake failed is: it ran on as the agent's process, bound to
/// no thread of the agent's, until the next restart or stop (a review found it). The agent
/// stays listed, its holder gone; `agent restart` starts a new pane. Returns the error to
/// answer, saying what became of the process.
fn take_back_unresumed(worker: &AgentRuntime, error: &str) -> String {
    worker.shut_down_pane();
    // MGD-2: Codex records a thread only from its first turn; an agent whose app-server ended
    // before any has nothing to resume, and every restart fails alike. It said "`agent
    // restart` starts it again" (a hostile run: 3 restarts of 3, 4 runs of 4).
    let again = match error.contains(NO_ROLLOUT) {
        true => format!(
            "the agent has no process now, and no restart can resume its thread: Codex holds no record of it (it records a thread only from its first turn, so an app-server that ended before any leaves none; or the record was removed); `agent stop {name}` then `agent start` gives it a new thread",
            name = worker.record.name
        ),
        false => "the agent has no process now: `agent restart` starts it again".to_string(),
    };
    match worker.end_unreachable_holder() {
        Ok(()) => format!("{error}; the new process was ended with its pane ({again})"),
        Err(ended) => format!("{error}; ending the new process failed too: {ended}"),
    }
}

/// MGD-2: how Codex refuses `thread/resume` of a thread it holds no rollout of
/// (`codex-rs` thread store: "no rollout found for thread id {id}", code -32600).
const NO_ROLLOUT: &str = "no rollout found for thread id";

/// LIFE-2: the error of a spawn that failed (the holder's `spawn_error`: no such program, not
/// executable, its working directory gone), naming the command and where it was to run.
fn spawn_failure(info: &crate::holder::InfoReply, record: &AgentRecord) -> Result<(), String> {
    match &info.spawn_error {
        None => Ok(()),
        Some(error) => {
            let command = record.command.first().map(String::as_str).unwrap_or_default();
            Err(format!("the agent's command {command:?} could not start in {}: {error}", record.cwd))
        }
    }
}

/// LIFE-2: takes back a pane whose command did not start, with its log.
fn take_back_pane(config: &HolderConfig) {
    if let Ok(client) = crate::holder::HolderClient::connect(&config.socket_path) {
        let _ = client.shutdown();
    }
    let _ = std::fs::remove_file(config.socket_path.with_extension("sock.log"));
}

/// Starts the agent's pane: a holder process (`wakterm __holder`) that outlives the daemon.
/// Its first `info` tells whether the command started (LIFE-2): the holder answers only after
/// its first spawn.
fn spawn_pane(config: &HolderConfig) -> Result<crate::holder::InfoReply, String> {
    let exe = holder_binary()?;
    spawn_holder_with_args(&exe, &["__holder".into()], config).map_err(|e| format!("cannot start the agent's pane: {e}"))
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

/// A running agent by name, or by its id in any spelling (canonicalised).
pub(super) fn resolve(context: &Context, target: &str) -> Option<Arc<AgentRuntime>> {
    let agents = context.agents.lock().expect("agent table");
    let canonical = wakterm_engine::ids::canonical_uuid(target);
    agents.values().find(|a| a.record.name == target || Some(&a.record.agent_id) == canonical.as_ref()).cloned()
}

/// Why `agent stop` failed: the agent's holder did not end, or the record's removal did not
/// commit (the agent stays either way), or another stop ended the agent first (LIFE-3).
enum StopFailed {
    Holder(String),
    Store(crate::store::StoreError),
    Gone,
}

/// LIFE-3: what a restart or stop that waited for the agent's lifecycle lock says when a stop
/// ended the agent meanwhile.
fn stopped_meanwhile(target: &str) -> Reply {
    Reply::error(exit::NOT_FOUND, "agent_unknown", format!("{}: it was stopped meanwhile", no_agent_named(target)))
}

/// The harnesses an agent may name: `codex` (return-final capable) or `other`.
pub const HARNESSES: [&str; 2] = ["codex", "other"];

pub(super) async fn stop_agent(context: &Arc<Context>, target: &str) -> Reply {
    use std::sync::atomic::Ordering::SeqCst;
    let Some(agent) = resolve(context, target) else {
        return Reply::error(exit::NOT_FOUND, "agent_unknown", no_agent_named(target));
    };
    let agent_id = agent.record.agent_id.clone();
    let writer = context.writer.clone();
    let worker = agent.clone();
    let log = context.paths.holder_socket(&agent_id).with_extension("sock.log");
    let result = tokio::task::spawn_blocking(move || {
        // LIFE-3: one pane change at a time; a restart waiting behind this stop finds the
        // agent `removed` and starts nothing.
        let _one_at_a_time = worker.lifecycle.lock().expect("lifecycle lock");
        if worker.removed.load(SeqCst) {
            return Err(StopFailed::Gone);
        }
        worker.stop_pending.store(true, SeqCst);
        worker.shut_down_pane();
        // LIVE-1, LIFE-3: a holder that still runs for the agent's socket ends now, or the
        // agent stays: one nobody can reach there (its socket removed), one that did not answer
        // the connect or the shutdown (stalled: a timeout), whatever the shutdown answered.
        // It must not run on outside the catalog (LIFE-1).
        if let Err(message) = worker.end_unreachable_holder() {
            worker.stop_pending.store(false, SeqCst);
            return Err(StopFailed::Holder(message));
        }
        // LIFE-3: the removal is durable before the agent leaves. A commit that fails (a full
        // disk, a database locked past its busy timeout) keeps the agent, its process ended:
        // it was removed from memory whatever the commit said, so the name stayed taken in the
        // store, the catalog had lost it, and a restart brought it back (a hostile run).
        if let Err(error) = writer.commit_blocking(vec![StoreOp::DeleteAgent { agent_id: worker.record.agent_id.clone() }]) {
            worker.stop_pending.store(false, SeqCst);
            return Err(StopFailed::Store(error));
        }
        worker.mark_removed();
        let _ = std::fs::remove_file(&log); // the pane's own log goes with the agent
        Ok(())
    })
    .await;
    match result {
        Ok(Ok(())) => {}
        Ok(Err(StopFailed::Holder(message))) => {
            // LIFE-3: the agent stays, so the monitor looks again (it ran no look meanwhile).
            context.monitor.look(&agent_id);
            return Reply::error(exit::ERROR, "agent_stop_failed", message);
        }
        Ok(Err(StopFailed::Store(error))) => {
            context.monitor.look(&agent_id); // as above: it stays, and its process has ended
            let message = format!(
                "{target}: its process was ended, but its removal could not be recorded ({error}); the agent stays in the catalog, stopped: run `agent stop` again to remove it, or `agent restart` to run it again"
            );
            return Reply::error(exit::ERROR, "agent_stop_failed", message);
        }
        Ok(Err(StopFailed::Gone)) => return stopped_meanwhile(target),
        Err(error) => return Reply::error(exit::ERROR, "internal", error.to_string()),
    }
    context.agents.lock().expect("agent table").remove(&agent_id);
    if let Ok(id) = AgentId::parse(&agent_id) {
        let _ = context.inbox.send(DriverMsg::Input(Input::AgentRemoved { agent_id: id })).await;
    }
    Reply::ok(json!({"schema": "wakterm.agent-stop.v1", "agent_id": agent_id, "stopped": true}))
}

/// Replaces the agent's process in the same pane (a new incarnation), e.g. after a crash.
pub(super) async fn restart_agent(context: &Arc<Context>, target: &str) -> Reply {
    let Some(agent) = resolve(context, target) else {
        return Reply::error(exit::NOT_FOUND, "agent_unknown", no_agent_named(target));
    };
    let _under_way = super::UnderWay::enter(&context.restarting); // LIFE-6: the daemon's end waits
    let worker = agent.clone();
    let inbox = context.inbox.clone();
    let paths = context.paths.clone();
    let target = target.to_string();
    let start_by_ms = crate::holder::protocol::monotonic_ms() + RESTART_START_BOUND.as_millis() as u64;
    let result = tokio::task::spawn_blocking(move || {
        // LIFE-3: one pane change at a time. A stop that ended the agent while this restart
        // waited leaves nothing to restart: a new pane now would run outside the catalog.
        let _one_at_a_time = worker.lifecycle.lock().expect("lifecycle lock");
        if worker.removed.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(stopped_meanwhile(&target));
        }
        if worker.stopping.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(Reply::error(exit::ERROR, "daemon_stopping", "the daemon is stopping its agents; start it again, then restart the agent"));
        }
        let restarted = restart_pane(&worker, &paths, start_by_ms);
        // A respawn ended the old process even when the new one did not start (LIFE-2): the
        // engine hears of the change now, not at the monitor's next look (which tells of a
        // silent holder's change, if any, when it answers).
        if !restarted.as_ref().is_err_and(|failed| failed.no_probe) {
            let _ = worker.forward_liveness_change(&inbox);
        }
        Ok(restarted.map(|()| worker.facts()))
    })
    .await;
    match result {
        Ok(Ok(Ok(facts))) => Reply::ok(json!({"schema": "wakterm.agent-restart.v1", "agent_id": agent.record.agent_id, "incarnation": facts.incarnation})),
        Ok(Ok(Err(failed))) if failed.unknown => Reply::error(exit::INDETERMINATE, "agent_restart_unknown", failed.message),
        Ok(Ok(Err(failed))) => Reply::error(exit::ERROR, "agent_restart_failed", failed.message),
        Ok(Err(refused)) => refused,
        Err(error) => Reply::error(exit::ERROR, "internal", error.to_string()),
    }
}

/// OUT-8: the experimental output page reads the rollout with its own tail on a blocking
/// thread; it never touches the agent's observer (nothing the engine is fed changes).
pub(super) async fn agent_output(context: &Arc<Context>, target: &str, after: Option<String>) -> Reply {
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
            liveness_unknown: agent.never_answered(),
        };
        crate::output_page::read_output(&root, &view, after.as_deref())
    })
    .await;
    answer.unwrap_or_else(|error| Reply::error(exit::ERROR, "internal", error.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timeout() -> crate::holder::HolderError {
        crate::holder::HolderError::Timeout { op: "respawn", after: std::time::Duration::from_secs(21) }
    }

    /// LIFE-9: a holder that stopped answering after the respawn was sent may have begun it
    /// (a hostile run stopped it 20 ms in: the old process ended, and the new one started when
    /// the holder went on, after the restart had answered `agent_restart_failed`): unknown, not
    /// failed; one that stopped before anything was sent leaves the process as it was. Neither
    /// is followed by a probe of the silent holder (it waited until the holder went on).
    #[test]
    fn life_9_a_respawn_without_an_answer_is_unknown_not_failed() {
        let sent = restart_call_failed(timeout(), true);
        assert!(sent.unknown && sent.no_probe, "{}", sent.message);
        assert!(sent.message.contains("whether it began it is unknown"), "{}", sent.message);
        let unsent = restart_call_failed(timeout(), false);
        assert!(!unsent.unknown && unsent.no_probe, "{}", unsent.message);
        assert!(unsent.message.contains("nothing was sent to it"), "{}", unsent.message);
        let garbled = restart_call_failed(crate::holder::HolderError::Protocol { detail: "garbled".into() }, true);
        assert!(garbled.unknown && !garbled.no_probe, "{}", garbled.message);
        let refused = crate::holder::HolderError::Remote { kind: crate::holder::WireErrorKind::StartDeadlinePassed, message: "late".into() };
        let refused = restart_call_failed(refused, true);
        assert!(!refused.unknown && !refused.no_probe, "{}", refused.message);
        let unsent = restart_call_failed(crate::holder::HolderError::NotSent { detail: "desynchronised".into() }, true);
        assert!(!unsent.unknown, "{}", unsent.message);
        let late = time_left(crate::holder::protocol::monotonic_ms()).expect_err("no time left");
        assert!(!late.unknown && late.no_probe, "{}", late.message);
    }
}
