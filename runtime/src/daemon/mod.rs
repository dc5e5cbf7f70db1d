//! The mux daemon: one per data directory. It owns the engine (through the driver), the
//! SQLite writer thread, one monitor thread per agent, and a private Unix control socket.
//! The reactor never blocks: SQLite, holder calls, rollout scans and /proc probes run on
//! blocking threads.

pub mod agents;
pub mod effects;
pub mod faults;
pub mod server;

use crate::driver::{now_ms, run_driver, DriverMsg, DRIVER_INBOX};
use crate::paths::DataPaths;
use crate::store::{Store, StoreWriter};
use agents::{spawn_monitor, AgentRecord, AgentRuntime, AgentTable};
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, Notify};
use wakterm_engine::{DurableState, Engine, Input, RequestRecord};

/// Terminal events buffered for slow watchers before they fall back to the store.
pub const WATCH_BUFFER: usize = 1024;

/// Everything a connection handler needs.
pub struct Context {
    pub paths: DataPaths,
    pub inbox: mpsc::Sender<DriverMsg>,
    pub agents: AgentTable,
    pub store: Arc<Store>,
    pub writer: Arc<StoreWriter>,
    pub terminal: broadcast::Sender<TerminalEventAlias>,
    pub shutdown: Arc<Notify>,
    pub started_ms: u64,
}

pub type TerminalEventAlias = wakterm_engine::TerminalEvent;

/// Holds the data directory's exclusive lock for the daemon's lifetime.
pub struct DaemonLock {
    _file: File,
}

/// One daemon per data directory: an exclusive, non-blocking flock on `run/mux.lock`.
pub fn acquire_lock(paths: &DataPaths) -> Result<DaemonLock, String> {
    let path = paths.lock_file();
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a file descriptor we own.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        let holder = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(format!(
            "a wakterm daemon already runs for {} (pid {})",
            paths.root.display(),
            holder.trim()
        ));
    }
    file.set_len(0).map_err(|e| e.to_string())?;
    writeln!(file, "{}", std::process::id()).map_err(|e| e.to_string())?;
    Ok(DaemonLock { _file: file })
}

/// Runs the daemon in this process until `mux stop`. Returns an error message for the user.
pub fn run_foreground(paths: DataPaths) -> Result<(), String> {
    let fault = faults::FaultPoint::from_env()?;
    paths.prepare().map_err(|e| format!("cannot prepare {}: {e}", paths.root.display()))?;
    let _lock = acquire_lock(&paths)?;
    let store = Arc::new(Store::open(&paths.database()).map_err(|e| e.to_string())?);
    let writer = Arc::new(StoreWriter::spawn(&paths.database()).map_err(|e| e.to_string())?);
    let engine = recover_engine(&store)?;
    let records = load_agents(&store)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the reactor: {e}"))?;
    runtime.block_on(serve(paths, store, writer, engine, records, fault))
}

fn recover_engine(store: &Store) -> Result<Engine, String> {
    let mut requests = Vec::new();
    for stored in store.load_requests().map_err(|e| e.to_string())? {
        let record: RequestRecord = serde_json::from_str(&stored.record_json)
            .map_err(|e| format!("request {} in the database is unreadable: {e}", stored.request_id))?;
        requests.push(record);
    }
    let last_terminal_sequence = store.last_terminal_sequence().map_err(|e| e.to_string())?;
    Ok(Engine::recover(DurableState { requests, last_terminal_sequence }, now_ms()))
}

fn load_agents(store: &Store) -> Result<Vec<AgentRecord>, String> {
    let mut records = Vec::new();
    for stored in store.load_agents().map_err(|e| e.to_string())? {
        let record: AgentRecord = serde_json::from_str(&stored.record_json)
            .map_err(|e| format!("agent {} in the database is unreadable: {e}", stored.agent_id))?;
        records.push(record);
    }
    Ok(records)
}

async fn serve(paths: DataPaths, store: Arc<Store>, writer: Arc<StoreWriter>, engine: Engine, records: Vec<AgentRecord>, fault: Option<faults::FaultPoint>) -> Result<(), String> {
    let (inbox, inbox_rx) = mpsc::channel(DRIVER_INBOX);
    let (terminal, _) = broadcast::channel(WATCH_BUFFER);
    let agents: AgentTable = Arc::new(Mutex::new(BTreeMap::new()));
    // REC-2: reconnect every agent's holder, re-verify its process, then say startup is done.
    for record in records {
        let agent = Arc::new(AgentRuntime::new(&paths, record));
        let probe = agent.clone();
        let _ = tokio::task::spawn_blocking(move || probe.refresh_liveness()).await;
        let _ = inbox.send(DriverMsg::Input(Input::AgentUpserted(agent.facts()))).await;
        agents.lock().expect("agent table").insert(agent.record.agent_id.clone(), agent.clone());
        spawn_monitor(agent, inbox.clone());
    }
    let _ = inbox.send(DriverMsg::Input(Input::StartupComplete)).await;
    let effects = effects::RealEffects { inbox: inbox.clone(), agents: agents.clone(), writer: writer.clone(), terminal: terminal.clone(), fault };
    let driver = tokio::spawn(run_driver(engine, inbox_rx, effects));
    let listener = bind_socket(&paths)?;
    let shutdown = Arc::new(Notify::new());
    let context = Arc::new(Context { paths: paths.clone(), inbox, agents, store, writer, terminal, shutdown: shutdown.clone(), started_ms: now_ms() });
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    tokio::spawn(server::handle_connection(stream, context.clone()));
                }
            }
            _ = shutdown.notified() => break,
        }
    }
    let _ = std::fs::remove_file(paths.socket());
    for agent in context.agents.lock().expect("agent table").values() {
        agent.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    drop(context);
    driver.abort();
    Ok(())
}

/// The control socket: 0600 inside the 0700 run directory. A stale socket file (no daemon
/// holds the lock, which we now hold) is replaced.
fn bind_socket(paths: &DataPaths) -> Result<tokio::net::UnixListener, String> {
    let path = paths.socket();
    let _ = std::fs::remove_file(&path);
    let listener = tokio::net::UnixListener::bind(&path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
    Ok(listener)
}
