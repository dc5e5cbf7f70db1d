//! The mux daemon: one per data directory. It owns the engine (through the driver), the
//! SQLite writer thread, the event-driven monitor of all agents (MON-1), and a private Unix
//! control socket.
//! The reactor never blocks: SQLite, holder calls, rollout scans and /proc probes run on
//! blocking threads.

pub mod agent_handlers;
pub mod agent_observer;
pub mod agents;
pub mod catalog;
pub mod effects;
pub mod events;
pub mod faults;
pub mod heap_trim;
pub mod history_seed;
pub mod managed;
pub mod monitor;
pub mod requests;
pub mod retention;
pub mod server;
mod socket_keeper;
pub mod stream;
pub mod submit;
#[cfg(test)]
mod test_agents;

use crate::observer_checkpoint::ObserverCheckpoint;
use crate::driver::{now_ms, run_driver, Clock, DriverMsg, EngineClock, DRIVER_INBOX};
use crate::paths::DataPaths;
use crate::store::{Store, StoreOp, StoreWriter};
use agents::{AgentRecord, AgentRuntime, AgentTable};
use monitor::Monitor;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc, Notify};
use tokio::signal::unix::SignalKind;
use wakterm_engine::{DurableState, Engine, Input, KeptRunClocks, RequestRecord, RunClock, RunClocksSeen, RunWindow};

/// Terminal events buffered for slow watchers before they fall back to the store.
pub const WATCH_BUFFER: usize = 1024;
/// How long `mux stop` lets in-flight admissions and submits finish before the daemon exits
/// (LIFE-8): a submit's watch lasts up to its 10 s timeout, so the drain outlasts it (at 5 s,
/// a submit still watching lost its receipt and its caller got `reply_lost`). `mux stop`'s
/// caller waits up to `mux::STOP_EXIT_WAIT` (18.2 s) for the daemon to end.
pub const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_millis(wakterm_engine::submit::SUBMIT_MAX_TIMEOUT_MS + 1_000);
/// LIFE-8: after the drain, how long the connection tasks get to write the answers the
/// driver's end just gave them (`daemon_stopping`) before the runtime ends them.
pub const LAST_ANSWERS: std::time::Duration = std::time::Duration::from_millis(200);
/// CONN-1: the most control connections served at once, whatever the descriptor limit.
pub const MAX_CONNECTIONS: usize = 1024;
/// Connections over the cap that are still told why; past this they are closed unanswered.
pub const MAX_REFUSALS_IN_FLIGHT: usize = 64;
/// Pause after a failed accept (e.g. EMFILE) so the loop does not spin.
pub const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(100);

/// Everything a connection handler needs.
pub struct Context {
    pub paths: DataPaths,
    pub inbox: mpsc::Sender<DriverMsg>,
    pub agents: AgentTable,
    pub store: Arc<Store>,
    pub writer: Arc<StoreWriter>,
    pub monitor: Monitor,
    pub terminal: broadcast::Sender<Arc<stream::Live<TerminalEventAlias>>>,
    /// EV-2: published agent events, and the sequence published through.
    pub events: effects::EventFeed,
    pub shutdown: Arc<Notify>,
    pub started_ms: u64,
    /// Names of agents whose start is in progress (reserved against concurrent starts).
    pub starting: Mutex<std::collections::BTreeSet<String>>,
    /// LIFE-5: a `mux stop` is under way: no agent starts any more (set under `starting`'s
    /// lock, so a start either reserved its name before or is refused).
    pub closing: std::sync::atomic::AtomicBool,
    /// LIFE-6: agent restarts under way (`UnderWay`): the daemon's end waits for them as for
    /// starts, for one cut off mid-handshake left a new app-server bound to no thread.
    pub restarting: std::sync::atomic::AtomicUsize,
    /// LIFE-5: `mux stop --all` is under way: a start that ends after it took its list (one
    /// slower than its wait: a managed start's handshake takes up to 60 s) ends its agent too.
    pub stopping_all: std::sync::atomic::AtomicBool,
    /// The test-only crash point (REC-5), if one is selected.
    pub fault: Option<faults::FaultPoint>,
    /// EV-9: what the stream keeps (`mux status` shows it beside what the store holds).
    pub retention: retention::Retention,
    /// HIST-4, TIME-2: the clock retention counts ages from (`mux status` says whether pruning
    /// by age comes late or not at all in this boot).
    pub retention_clock: retention::RetentionClock,
    /// EV-9: the bytes of event JSON the store held at the retention task's last check.
    pub stored_event_bytes: Arc<std::sync::atomic::AtomicU64>,
}

impl Context {
    /// LIFE-5: no agent starts from now on (`mux stop`, a stopping signal); with `all`, a
    /// start that ends after `--all` took its list ends its agent itself. Set under the lock
    /// starts reserve their names under, so each start reserved its name before or is refused.
    pub fn close_to_starts(&self, all: bool) {
        let _starting = self.starting.lock().expect("starting names");
        self.closing.store(true, std::sync::atomic::Ordering::SeqCst);
        self.stopping_all.fetch_or(all, std::sync::atomic::Ordering::SeqCst);
    }

    /// LIFE-6: agent starts and restarts under way (the daemon's end waits for them).
    pub fn changes_under_way(&self) -> usize {
        self.starting.lock().expect("starting names").len() + self.restarting.load(std::sync::atomic::Ordering::SeqCst)
    }
}

pub type TerminalEventAlias = wakterm_engine::TerminalEvent;

/// How long a starting daemon waits for the data directory's lock.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Holds the data directory's exclusive locks for the daemon's lifetime.
pub struct DaemonLock {
    _root: rustix::fd::OwnedFd,
    file: File,
}

impl DaemonLock {
    /// The (device, inode) of the lock file this daemon holds (SOCK-1 checks the path against
    /// it: the file at the path may have been removed or replaced since).
    pub fn file_identity(&self) -> Result<(u64, u64), String> {
        crate::paths::fd_identity(&self.file).map_err(|e| e.to_string())
    }
}

/// Why a lock was not taken.
pub(crate) enum LockError {
    /// Another process holds it.
    Busy,
    /// Another process holds it and a daemon answers at the socket.
    Serving,
    /// Anything else (the error says what).
    Failed(String),
}

/// One daemon per data directory (LOCK-1): an exclusive, non-blocking flock on the data
/// directory itself, then on `run/mux.lock` (which also names the pid, and which daemons before
/// LOCK-1 took alone), both opened without following a link (SEC-1: a planted symlink must not
/// get its target truncated). The run directory can be removed under a running daemon (a
/// cleaner of old files, a careless `rm`), taking its lock file along: a second daemon then
/// started beside the first, on the same database and agents. The data directory's own lock
/// cannot be removed that way.
pub fn acquire_lock(paths: &DataPaths) -> Result<DaemonLock, String> {
    let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
    let root = rustix::fs::open(&paths.root, flags, rustix::fs::Mode::empty())
        .map_err(|e| format!("cannot open {}: {}", paths.root.display(), std::io::Error::from(e)))?;
    let holder = || paths.lock_file_pid();
    let why = |error: LockError| match error {
        LockError::Busy => format!("a wakterm daemon already runs for {} (pid {}, still holding its lock after {LOCK_WAIT:?})", paths.root.display(), holder()),
        LockError::Serving => format!("a wakterm daemon already runs for {} (pid {}, serving at its socket)", paths.root.display(), holder()),
        LockError::Failed(message) => format!("cannot lock {}: {message}", paths.root.display()),
    };
    // LOCK-1: the wait rides out a daemon that is stopping or was just killed, whose socket
    // no longer answers; one that answers serves, and this start is not needed. Two starts
    // that raced (`mux start` run by many callers at once) used to wait out the whole bound:
    // a `mux stop` within it ended the first daemon, and a loser took the lock and served on.
    let serving = || crate::client::connect_bounded(&paths.socket(), SERVING_PROBE).is_ok();
    flock_within(&root, LOCK_WAIT, serving).map_err(why)?;
    let file = lock_file(paths, LOCK_WAIT).map_err(why)?;
    Ok(DaemonLock { _root: root, file })
}

/// Takes `run/mux.lock` (created if missing) within `wait` and writes this daemon's pid in it.
pub(crate) fn lock_file(paths: &DataPaths, wait: std::time::Duration) -> Result<File, LockError> {
    let path = paths.lock_file();
    let failed = |e: std::io::Error| LockError::Failed(format!("{}: {e}", path.display()));
    let mut file = crate::paths::open_private_file(&path, std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true)).map_err(failed)?;
    flock_within(&file, wait, || false)?;
    file.set_len(0).map_err(failed)?;
    writeln!(file, "{}", std::process::id()).map_err(failed)?;
    Ok(file)
}

/// How long the lock wait's look at the socket may take (a connect to a full backlog waits).
const SERVING_PROBE: std::time::Duration = std::time::Duration::from_millis(100);

/// An exclusive flock within `wait`; only "another holds it" is waited out (a daemon that was
/// just SIGKILLed may still hold its lock for a moment after its socket stopped answering, seen
/// in CI: `mux start` right after a crash lost this race), and only while `serving` says no
/// daemon serves; any other error is said at once.
fn flock_within(fd: impl rustix::fd::AsFd, wait: std::time::Duration, serving: impl Fn() -> bool) -> Result<(), LockError> {
    let deadline = std::time::Instant::now() + wait;
    loop {
        match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => return Ok(()),
            Err(rustix::io::Errno::WOULDBLOCK) if serving() => return Err(LockError::Serving),
            Err(rustix::io::Errno::WOULDBLOCK) if std::time::Instant::now() < deadline => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(rustix::io::Errno::WOULDBLOCK) => return Err(LockError::Busy),
            Err(errno) => return Err(LockError::Failed(std::io::Error::from(errno).to_string())),
        }
    }
}

/// CONN-1: raises the soft descriptor limit to the hard one (a 1024 default soft limit is
/// common) and returns the limit now in force.
pub fn raise_descriptor_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(error) = setrlimit(Resource::Nofile, raised) {
            tracing::warn!(%error, "cannot raise the descriptor limit");
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// CONN-1: how many control connections may be open at once: half the descriptor limit (the
/// other half stays for holders, rollouts, watches of files and SQLite), at most
/// `MAX_CONNECTIONS`.
pub fn connection_cap(descriptor_limit: u64) -> usize {
    let half = usize::try_from(descriptor_limit / 2).unwrap_or(usize::MAX);
    half.clamp(1, MAX_CONNECTIONS)
}

/// Runs the daemon in this process until `mux stop`. Returns an error message for the user.
pub fn run_foreground(paths: DataPaths, retention: retention::Retention) -> Result<(), String> {
    let fault = faults::FaultPoint::from_env()?;
    // An assertion that fails anywhere in the daemon ends the process at once: a restart then
    // recovers from durable state (REC-*), instead of a half-dead daemon that answers status
    // but nothing else, or a poisoned observer lock.
    std::panic::set_hook(Box::new(|info| {
        tracing::error!("fatal: {info}");
        eprintln!("wakterm daemon: fatal: {info}");
        std::process::abort();
    }));
    paths.prepare().map_err(|e| format!("cannot prepare {}: {e}", paths.root.display()))?;
    let lock = acquire_lock(&paths)?;
    let lock_identity = lock.file_identity()?;
    // SOCK-1: the lock file the keeper may take again, held here as long as `lock` is.
    let relocked = Arc::new(Mutex::new(None));
    crate::logging::init_daemon(&paths)?;
    tracing::info!(pid = std::process::id(), data_dir = %paths.root.display(), version = env!("CARGO_PKG_VERSION"), "{}", crate::logging::STARTING_LOG);
    let descriptor_limit = raise_descriptor_limit();
    let store = Arc::new(Store::open(&paths.database()).map_err(|e| e.to_string())?);
    let writer = Arc::new(StoreWriter::spawn(&paths.database()).map_err(|e| e.to_string())?);
    let (clock, run_clock) = EngineClock::start_on_this_boot(now_ms(), crate::driver::boot_id());
    let (engine, retention_clock) = recover_engine(&store, &writer, &clock, run_clock)?;
    if retention.days > 0 {
        warn_of_late_retention(&retention_clock);
    }
    let records = load_agents(&store)?;
    // One reactor thread (issue 10): the daemon's tasks only hand work on (holder calls, file
    // reads and commits run on the blocking pool and the store writer), and a hand-off between
    // tasks on one thread needs no wake-up of another. Measured against two workers (paired
    // `scripts/ab-load.sh` runs): daemon CPU per admission+completion 8 % lower at 1 and 10
    // agents and 4 % at 100, throughput 1-7 % higher, voluntary switches per request 40 -> 28
    // at one agent. Nothing on it may block: a stall would now stop every task, not half.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the reactor: {e}"))?;
    tracing::info!(retain_events = retention.events, retain_days = retention.days, retain_bytes = retention.bytes, "event retention (EV-9)");
    let served = runtime.block_on(serve(paths, store, writer, (engine, clock), records, fault, (connection_cap(descriptor_limit), (retention, retention_clock), (lock_identity, relocked.clone()))));
    // The runtime first (its tasks and blocking calls end, and with the last of them the
    // store writer, which drains), then the lock: no other daemon may start while this one can
    // still write. A call left behind (below) keeps the writer too: what it queued is cut off
    // with the process, as by a crash (SQLite's commits are atomic). LIFE-6: the wait for
    // blocking calls is bounded; one may be a holder call to a stopped holder (15 s, a probe
    // chain longer), and a hostile run saw `mux stop` run out of its wait for the daemon's
    // end and a `mux start` right after find the lock held. A call left behind ends with the
    // process, so the lock is never released before it: the process's end closes its
    // descriptors after every thread has ended (the daemon runs in the CLI's process, which
    // exits when this returns).
    runtime.shutdown_timeout(BLOCKING_CALLS_AT_EXIT);
    std::mem::forget((relocked, lock));
    served
}

/// LIFE-6: how long the daemon's end waits for its blocking calls (holder calls, file reads)
/// once its tasks and the drain (LIFE-8) are done; `mux stop` waits for the daemon's end
/// ([`crate::mux::STOP_EXIT_WAIT`]) longer than the drain and this together.
pub const BLOCKING_CALLS_AT_EXIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Also returns the clock retention counts ages from: this run's engine clock, less how far
/// behind it another run of the boot may have recorded the same moment (`RunWindow::behind_ms`).
fn recover_engine(store: &Store, writer: &StoreWriter, clock: &EngineClock, run_clock: Option<RunClock>) -> Result<(Engine, retention::RetentionClock), String> {
    let now_ms = clock.now_ms();
    let mut requests = Vec::new();
    // HIST-1: open requests only; finished ones are read back when named again. ADM-5: and
    // each agent's latest few written requests (oldest first) finished within `RESTART_LOOKBACK_MS` (RF-8's
    // turn-start timeout from the latest its line may land), whose prompt may still be unread (`RecoveredWrite::of`), in the time of the run that wrote it
    // (TIME-2: `RunClocksSeen::restart_window`).
    let window = restart_window(store, now_ms, run_clock.as_ref());
    let recent = store.load_latest_written_since(window.since_ms).map_err(|e| e.to_string())?;
    for stored in store.load_open_requests().map_err(|e| e.to_string())?.into_iter().chain(recent) {
        let record: RequestRecord = serde_json::from_str(&stored.record_json)
            .map_err(|e| format!("request {} in the database is unreadable: {e}", stored.request_id))?;
        requests.push(record);
    }
    let last_terminal_sequence = store.last_terminal_sequence().map_err(|e| e.to_string())?;
    let last_event_sequence = store.last_event_sequence().map_err(|e| e.to_string())?;
    let mut event_marks = Vec::new();
    for (agent_id, json) in store.load_event_marks().map_err(|e| e.to_string())? {
        // EV-4: an unreadable mark would re-announce what was reported: refuse to guess.
        let mark = serde_json::from_str(&json).map_err(|e| format!("the event mark of agent {agent_id} in the database is unreadable: {e}"))?;
        event_marks.push(mark);
    }
    let durable = DurableState { requests, last_terminal_sequence, last_event_sequence, event_marks };
    // TIME-2: durable before this run records anything, so the next start finds its clock.
    let json = serde_json::to_string(&window.keep).expect("run clocks serialize");
    writer.commit_blocking(vec![StoreOp::PutRunClocks { json }]).map_err(|e| format!("cannot record this run's clock in the database: {e}"))?;
    let retention_clock = retention::RetentionClock { engine: *clock, behind_ms: window.behind_ms };
    Ok((Engine::recover(durable, now_ms, run_clock), retention_clock))
}

/// HIST-4, TIME-2: says when retention by age will wait longer than `--retain-days`: by how far
/// behind another daemon run of this boot stood, or for good while the runs' times are unknown.
fn warn_of_late_retention(clock: &retention::RetentionClock) {
    match clock.age_pruning() {
        retention::AgePruning::Off => tracing::warn!("where this boot's daemons' times stood is unknown (no boot id, or what was kept is unreadable): finished requests and events are not pruned by age in this boot (event retention by count and size goes on)"),
        retention::AgePruning::Late { hours } => tracing::warn!(hours, "an earlier daemon of this boot started with its clock behind (or the machine was suspended between starts): finished requests and events are pruned by age up to this many hours later than --retain-days says"),
        retention::AgePruning::OnTime => {}
    }
}

/// TIME-2: the restart's window of recent writes (`RunClocksSeen::restart_window`) and what to
/// keep of the boot's runs. What the store kept, unreadable, widens the window to the whole
/// history (slower, never a write missed), now and at every later start of this boot.
fn restart_window(store: &Store, now_ms: u64, run_clock: Option<&RunClock>) -> RunWindow {
    let read = store.load_run_clocks();
    if let Err(error) = &read {
        tracing::warn!(%error, "the runs' clocks kept in the database cannot be read: every finished request is looked at");
    }
    let kept = KeptRunClocks::from_read(read);
    if kept == KeptRunClocks::Unreadable {
        tracing::warn!("the runs' clocks kept in the database are unreadable: every start of this boot looks at every finished request");
    }
    RunClocksSeen::restart_window(now_ms, run_clock, kept)
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

/// OBS-1: the saved observer checkpoints by agent id. An unreadable table or entry costs only
/// a longer first read (from byte 0), so it is logged, not fatal.
fn load_checkpoints(store: &Store) -> BTreeMap<String, ObserverCheckpoint> {
    let stored = store.load_checkpoints().unwrap_or_else(|error| {
        tracing::warn!(%error, "observer checkpoints unreadable: rollouts are read from the start");
        Vec::new()
    });
    let mut checkpoints = BTreeMap::new();
    for (agent_id, json) in stored {
        match ObserverCheckpoint::from_json(&json) {
            Some(checkpoint) => {
                checkpoints.insert(agent_id, checkpoint);
            }
            None => tracing::warn!(%agent_id, "observer checkpoint unreadable: its rollout is read from the start"),
        }
    }
    checkpoints
}

async fn serve(paths: DataPaths, store: Arc<Store>, writer: Arc<StoreWriter>, (engine, clock): (Engine, EngineClock), records: Vec<AgentRecord>, fault: Option<faults::FaultPoint>, (cap, (retention, retention_clock), lock): (usize, (retention::Retention, retention::RetentionClock), socket_keeper::HeldLock)) -> Result<(), String> {
    let (inbox, inbox_rx) = mpsc::channel(DRIVER_INBOX);
    let (terminal, _) = broadcast::channel(WATCH_BUFFER);
    let events = effects::EventFeed::new(engine.events_published_through());
    let agents: AgentTable = Arc::new(Mutex::new(BTreeMap::new()));
    // The driver runs before anything can fill its inbox, so startup never waits on itself.
    let effects = effects::RealEffects { inbox: inbox.clone(), agents: agents.clone(), writer: writer.clone(), terminal: terminal.clone(), events: events.clone(), store: store.clone(), fault };
    let mut driver = tokio::spawn(run_driver(engine, inbox_rx, effects, clock));
    history_seed::spawn(store.clone(), inbox.clone());
    let checkpoints = load_checkpoints(&store);
    let monitor = Monitor::start(inbox.clone());
    reattach_agents(&paths, &agents, &inbox, &monitor, (records, checkpoints)).await;
    let stored_event_bytes = Arc::new(std::sync::atomic::AtomicU64::new(retention::UNKNOWN_BYTES));
    let pruning = tokio::spawn(retention::run(store.clone(), writer.clone(), (retention, retention_clock), events.published.subscribe(), stored_event_bytes.clone()));
    let trimming = tokio::spawn(heap_trim::run());
    let (mut listener, mut socket, mut kept) = socket_keeper::start(&paths, lock)?;
    say_ready(&paths);
    let shutdown = Arc::new(Notify::new());
    let context = Arc::new(Context { paths: paths.clone(), inbox, agents, store, writer, monitor, terminal, events, shutdown: shutdown.clone(), started_ms: now_ms(), starting: Mutex::new(Default::default()), closing: Default::default(), restarting: Default::default(), stopping_all: Default::default(), fault, retention, retention_clock, stored_event_bytes });
    let open = Arc::new(AtomicUsize::new(0));
    let refusing = Arc::new(AtomicUsize::new(0));
    // LIFE-6: SIGTERM (a service manager, a container's end, `kill`) and SIGINT (Ctrl-C of a
    // foreground daemon) stop the daemon as `mux stop` does; their default action killed it
    // at once, mid-commit, its socket left behind.
    let signal = |kind| tokio::signal::unix::signal(kind).map_err(|e| format!("cannot handle signals: {e}"));
    let (mut terminate, mut interrupt) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
    // LIFE-6: SIGHUP (a foreground daemon's terminal closed) stops it cleanly too; its default
    // action killed it as a crash, its socket left behind (a review).
    let mut hangup = signal(SignalKind::hangup())?;
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => serve_or_refuse(stream, &context, &open, &refusing, cap),
                // Out of descriptors or similar: back off instead of spinning.
                Err(_) => tokio::time::sleep(ACCEPT_BACKOFF).await,
            },
            // SOCK-1: the keeper bound the socket again (its path was removed or replaced).
            Some(kept_now) = kept.recv() => match kept_now {
                socket_keeper::Kept::Rebound(new, identity) => (listener, socket) = (new, Some(identity)),
                // LOCK-1: another daemon took the run directory's lock meanwhile (one from
                // before LOCK-1); two must never serve one data directory. The socket at the
                // path is that daemon's: it stays.
                socket_keeper::Kept::LostTo(message) => {
                    tracing::error!(%message, "another daemon serves this data directory now: stopping");
                    socket = None;
                    break;
                }
            },
            _ = shutdown.notified() => break,
            _ = terminate.recv() => break stopping_on(&context, "SIGTERM"),
            _ = interrupt.recv() => break stopping_on(&context, "SIGINT"),
            _ = hangup.recv() => break stopping_on(&context, "SIGHUP"),
            ended = &mut driver => return Err(format!("the engine driver stopped unexpectedly: {ended:?}")),
        }
    }
    drop(kept); // the keeper binds nothing from now on
    socket_keeper::remove_if_ours(&paths.socket(), socket);
    let settled = drain_admissions(&context).await;
    wait_for_changes(&context).await;
    for agent in context.agents.lock().expect("agent table").values() {
        agent.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }
    drop(context);
    pruning.abort();
    trimming.abort();
    driver.abort();
    // LIFE-8: the driver's end drops the answers it still owed (an admission or a submit past
    // the drain); each waiting handler then answers `daemon_stopping` (indeterminate, with
    // its request id). Its connection task needs a moment to write that, or its caller
    // only sees the connection close (`reply_lost`, without the id).
    let _ = driver.await;
    if !settled {
        tokio::time::sleep(LAST_ANSWERS).await;
    }
    Ok(())
}

/// LIFE-7: `mux start --foreground` says on standard output, in one JSON line, that the daemon
/// serves (its socket answers from now on), so a supervisor or a script that started it can
/// wait for that line instead of polling `mux status`. Skipped when standard output is the
/// daemon's own log (`mux start` in the background sends it there; the log says "serving"
/// itself). A reader that went away costs nothing: the daemon serves on.
fn say_ready(paths: &DataPaths) {
    tracing::info!(socket = %paths.socket().display(), "serving");
    let stdout = std::io::stdout();
    let is_log = crate::paths::fd_identity(&stdout).ok().is_some_and(|out| crate::paths::path_identity(&paths.log_file()).ok() == Some(out));
    if is_log {
        return;
    }
    let line = serde_json::json!({
        "schema": READY_SCHEMA,
        "pid": std::process::id(),
        "socket": paths.socket().display().to_string(), // UTF-8 (CLI-2): never a panic here
        "data_dir": paths.root.display().to_string(),
        "version": env!("CARGO_PKG_VERSION"),
    });
    let mut out = stdout.lock();
    let _ = writeln!(out, "{line}").and_then(|()| out.flush());
}

/// LIFE-7: the schema of the line `mux start --foreground` prints once it serves.
pub const READY_SCHEMA: &str = "wakterm.mux-ready.v1";

/// LIFE-6: a stopping signal: no agent starts from now on (LIFE-5), said in the log. A second
/// one ends the daemon at once, as a second Ctrl-C is expected to (nobody reads the first
/// one's stream any more, so it would be caught and ignored for the whole drain).
fn stopping_on(context: &Context, signal: &str) {
    context.close_to_starts(false);
    tracing::info!("{signal}: stopping as `mux stop` does (agents keep running); a second SIGTERM or SIGINT ends it at once");
    for again in [nix::sys::signal::Signal::SIGTERM, nix::sys::signal::Signal::SIGINT, nix::sys::signal::Signal::SIGHUP] {
        // SAFETY: restores the default action; no handler of ours runs from now on, and tokio's
        // own stays registered but is never asked to deliver again.
        let _ = unsafe { nix::sys::signal::signal(again, nix::sys::signal::SigHandler::SigDfl) };
    }
}

/// CONN-1: serves the connection when fewer than `cap` are open; otherwise tells the peer the
/// daemon is full (bounded too), so a flood of clients can never starve the daemon's own probes
/// of descriptors.
fn serve_or_refuse(stream: tokio::net::UnixStream, context: &Arc<Context>, open: &Arc<AtomicUsize>, refusing: &Arc<AtomicUsize>, cap: usize) {
    if let Some(slot) = Slot::take(open, cap) {
        let context = context.clone();
        tokio::spawn(async move {
            server::handle_connection(stream, context).await;
            drop(slot);
        });
    } else if let Some(slot) = Slot::take(refusing, MAX_REFUSALS_IN_FLIGHT) {
        tokio::spawn(async move {
            server::refuse_over_cap(stream, cap).await;
            drop(slot);
        });
    }
}

/// One counted place among at most `cap`; given back on drop.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(counter: &Arc<AtomicUsize>, cap: usize) -> Option<Slot> {
        counter.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < cap).then_some(n + 1)).ok()?;
        Some(Slot(counter.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let before = self.0.fetch_sub(1, Ordering::AcqRel);
        assert!(before > 0, "a slot was given back twice");
    }
}

/// REC-2: reconnect every agent's holder (concurrently: one slow holder must not delay the
/// rest), re-register each whose probe answered within `STARTUP_PROBE_BOUND` with its verified
/// process and add it to the monitor at once; the others (LIVE-1: unknown) are registered and
/// monitored by a spawned task once a probe knows, which says startup is done after the last
/// of them (or `STARTUP_PENDING_BOUND`).
async fn reattach_agents(paths: &DataPaths, agents: &AgentTable, inbox: &mpsc::Sender<DriverMsg>, monitor: &Monitor, (records, mut checkpoints): (Vec<AgentRecord>, BTreeMap<String, ObserverCheckpoint>)) {
    let known: std::collections::BTreeSet<String> = records.iter().map(|r| r.agent_id.clone()).collect();
    let sweep_paths = paths.clone();
    let _ = tokio::task::spawn_blocking(move || stop_unknown_holders(&sweep_paths, &known)).await;
    let mut probes = Vec::new();
    for record in records {
        let loaded = checkpoints.remove(&record.agent_id);
        let agent = Arc::new(AgentRuntime::new(paths, record).with_loaded_checkpoint(loaded));
        let probe = agent.clone();
        probes.push((agent, tokio::task::spawn_blocking(move || probe.probe_liveness())));
    }
    let mut pending = Vec::new();
    let answer_by = tokio::time::Instant::now() + STARTUP_PROBE_BOUND;
    for (agent, probe) in probes {
        // In the table before the engine hears of it: the engine may at once ask the effects
        // to resume this agent's observer (REC-2).
        agents.lock().expect("agent table").insert(agent.record.agent_id.clone(), agent.clone());
        match tokio::time::timeout_at(answer_by, probe).await {
            Ok(Ok(Ok(_))) => {
                let _ = inbox.send(DriverMsg::Input(Input::AgentUpserted(agent.facts()))).await;
                monitor.add(agent);
            }
            // LIVE-1: unknown (a holder that did not answer in time: stopped, or its connection
            // slots full) is not "no process": the engine hears of this agent once a probe
            // knows. Registered as gone, its bound requests ended `incarnation_changed` while
            // its process ran on and finished the turn (a review reproduced it with SIGSTOP).
            _ => {
                tracing::warn!(agent_id = %agent.record.agent_id, "its holder did not answer at start (LIVE-1): registered once a probe knows");
                pending.push(agent);
            }
        }
    }
    let (inbox, monitor) = (inbox.clone(), monitor.clone());
    tokio::spawn(async move {
        // REC-2: the requests of an agent not registered yet stay suspended until then; past
        // the bound, `StartupComplete` ends them (`agent_missing_after_restart`).
        let give_up = std::time::Instant::now() + STARTUP_PENDING_BOUND;
        let asks: Vec<_> = pending
            .into_iter()
            .map(|agent| {
                let sender = inbox.clone();
                tokio::task::spawn_blocking(move || {
                    let mut registered = agent.register_when_known(&sender).is_ok();
                    while !registered && std::time::Instant::now() < give_up {
                        if agent.probe_liveness().is_err() {
                            std::thread::sleep(std::time::Duration::from_millis(250));
                        }
                        registered = agent.register_when_known(&sender).is_ok();
                    }
                    (agent, registered)
                })
            })
            .collect();
        for ask in asks {
            if let Ok((agent, registered)) = ask.await {
                // LIVE-1, EV-14: still unknown, it is held, not stopped: registered when its
                // holder answers (the monitor forwards that as any change).
                if !registered {
                    let agent_id = wakterm_engine::AgentId::parse(&agent.record.agent_id);
                    if let Ok(agent_id) = agent_id {
                        let _ = inbox.send(DriverMsg::Input(Input::AgentUnreachable { agent_id })).await;
                    }
                }
                monitor.add(agent); // from now on its changes are forwarded as any agent's
            }
        }
        let _ = inbox.send(DriverMsg::Input(Input::StartupComplete)).await;
    });
}

/// LIVE-1 at start: how long the daemon waits for its agents' holders to answer before it
/// serves (well under `mux start`'s 15 s: one stopped holder made every start time out).
const STARTUP_PROBE_BOUND: std::time::Duration = std::time::Duration::from_secs(3);

/// REC-2, LIVE-1: how long an agent whose holder did not answer at start keeps its requests
/// suspended, waiting for a probe that knows, before `StartupComplete` ends them.
const STARTUP_PENDING_BOUND: std::time::Duration = std::time::Duration::from_secs(30);

/// LIFE-1: a holder socket in the holder directory whose agent is not in the catalog belongs to
/// a start that never reached the store (a daemon of an older version that crashed mid-start).
/// Nobody was ever told its agent id, so nobody can reach it: stop it, so no agent process runs
/// outside the catalog.
fn stop_unknown_holders(paths: &DataPaths, known: &std::collections::BTreeSet<String>) {
    let Ok(entries) = std::fs::read_dir(paths.holders_dir()) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(agent_id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".sock")) else { continue };
        if known.contains(agent_id) {
            continue;
        }
        tracing::warn!(holder = %path.display(), "stopping the holder of an agent the catalog does not know (LIFE-1)");
        if let Ok(client) = crate::holder::HolderClient::connect(&path) {
            let _ = client.shutdown();
        }
        let _ = std::fs::remove_file(&path);
        let _ = std::fs::remove_file(path.with_extension("sock.log"));
    }
}

/// `mux stop`: no new connections are accepted; admissions and submits already in flight
/// finish (bounded) so their callers get receipts instead of a lost connection. True when
/// the engine settled; false when the drain ran out (or the driver is gone) with answers
/// still owed.
async fn drain_admissions(context: &Context) -> bool {
    let deadline = tokio::time::Instant::now() + DRAIN_DEADLINE;
    while tokio::time::Instant::now() < deadline {
        let Some(settled) = crate::driver::ask(&context.inbox, |engine: &Engine| engine.is_settled()).await else {
            return false;
        };
        if settled {
            // Let the connection tasks write the receipts they were just handed.
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            return true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    tracing::warn!(?DRAIN_DEADLINE, "stopping with admissions or submits still under way: their callers get daemon_stopping (LIFE-8)");
    false
}

/// LIFE-5, LIFE-6: the daemon ends once the agent starts and restarts under way are done, up
/// to `CHANGES_AT_EXIT`: a start ends its agent itself after `mux stop --all`, and one cut off
/// would leave its holder running, unnamed; a managed restart cut off mid-handshake left a new
/// app-server bound to no thread of the agent's (a review). No other blocking call is waited
/// for past `BLOCKING_CALLS_AT_EXIT` (an `agent stop` of a SIGSTOPped holder, a probe).
async fn wait_for_changes(context: &Context) {
    let deadline = tokio::time::Instant::now() + CHANGES_AT_EXIT;
    while context.changes_under_way() > 0 {
        if tokio::time::Instant::now() >= deadline {
            tracing::warn!(?CHANGES_AT_EXIT, "stopping with agent starts or restarts still under way: they are cut off");
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// LIFE-5, LIFE-6: how long the daemon's end waits for agent starts and restarts under way: a
/// managed restart's start (`RESTART_START_BOUND`, 15 s), its respawn's work and its handshake
/// (60 s), with room. `mux stop` waits this much longer when its answer names changes under way.
pub const CHANGES_AT_EXIT: std::time::Duration = managed::HANDSHAKE_TIMEOUT.saturating_add(std::time::Duration::from_secs(25));

/// LIFE-6: counts an agent restart under way for as long as it lives.
pub struct UnderWay<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> UnderWay<'a> {
    pub fn enter(count: &'a std::sync::atomic::AtomicUsize) -> UnderWay<'a> {
        count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        UnderWay(count)
    }
}

impl Drop for UnderWay<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[cfg(test)]
mod run_clock_tests {
    use super::*;

    fn scratch_store() -> (std::path::PathBuf, Store, StoreWriter) {
        let dir = std::env::temp_dir().join(format!("wakterm-run-clock-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).expect("scratch dir");
        let db = dir.join("requests.sqlite");
        let writer = StoreWriter::spawn(&db).expect("writer");
        let store = Store::open(&db).expect("store");
        (dir, store, writer)
    }

    // TIME-2: each start keeps the boot's largest offset before it records anything, and the
    // next start's window reaches back by how far an earlier run's wall clock stood behind
    // (a step forward while down); what is kept, unreadable, widens the window to everything.
    #[test]
    fn time_2_each_start_keeps_the_boots_runs_and_widens_the_next_window() {
        let (dir, store, writer) = scratch_store();
        let timeout = wakterm_engine::limits::RESTART_LOOKBACK_MS;
        let first = RunClock { boot_id: "b".into(), offset_ms: 5_000_000 };
        let clock = EngineClock::start(1_000_000_000);
        let (_, retention_clock) = recover_engine(&store, &writer, &clock, Some(first)).expect("first start");
        assert_eq!((retention_clock.behind_ms, retention_clock.age_pruning()), (0, retention::AgePruning::OnTime));
        let kept: RunClocksSeen = serde_json::from_str(&store.load_run_clocks().unwrap().expect("kept")).unwrap();
        assert_eq!(kept, RunClocksSeen { boot_id: "b".into(), max_offset_ms: 5_000_000 });
        // The wall clock stepped forward 10 min while down: the offset is 10 min lower.
        let second = RunClock { boot_id: "b".into(), offset_ms: 5_000_000 - 600_000 };
        let window = restart_window(&store, 2_000_000_000, Some(&second));
        assert_eq!((window.since_ms, window.behind_ms, window.keep.max_offset_ms), (2_000_000_000 - timeout - 600_000, 600_000, 5_000_000));
        // Stepped forward 3 days and a half: retention by age comes 84 hours late, and says so.
        let days_ahead = RunClock { boot_id: "b".into(), offset_ms: 5_000_000 - 302_400_000 };
        let (_, retention_clock) = recover_engine(&store, &writer, &clock, Some(days_ahead)).expect("a start 3.5 days ahead");
        assert_eq!(retention_clock.age_pruning(), retention::AgePruning::Late { hours: 84 });
        // Unreadable: the whole history, at this start and every later one of the boot.
        writer.commit_blocking(vec![StoreOp::PutRunClocks { json: "not json".into() }]).unwrap();
        let (_, retention_clock) = recover_engine(&store, &writer, &clock, Some(second.clone())).expect("a start all the same");
        assert_eq!(retention_clock.behind_ms, u64::try_from(i128::from(i64::MAX) - i128::from(second.offset_ms)).unwrap());
        assert_eq!(retention_clock.now_ms(), 0, "no age is due");
        assert_eq!(retention_clock.age_pruning(), retention::AgePruning::Off);
        let window = restart_window(&store, 3_000_000_000, Some(&second));
        assert_eq!((window.since_ms, window.keep.max_offset_ms), (0, i64::MAX));
        // A start without a run clock: the next start with one reads the whole history too.
        let (_, retention_clock) = recover_engine(&store, &writer, &clock, None).expect("a start without a boot id");
        assert_eq!(retention_clock.behind_ms, u64::MAX);
        assert_eq!(retention_clock.age_pruning(), retention::AgePruning::Off);
        let third = RunClock { boot_id: "c".into(), offset_ms: 0 };
        assert_eq!(restart_window(&store, 3_000_000_000, Some(&third)).since_ms, 0);
        drop((store, writer));
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Waits until `done` or `limit_ms` passed.
    async fn wait_until(limit_ms: u64, done: impl Fn() -> bool) {
        let started = std::time::Instant::now();
        while !done() && started.elapsed() < std::time::Duration::from_millis(limit_ms) {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    // HIST-4, TIME-2: retention counts a finished request's age from the engine's time, less how
    // far behind another run of the boot stood. It read the wall clock: a daemon started
    // with its clock two weeks behind (set right by NTP after its start) pruned a request it
    // had just finished, and a retry of the id was taken for a new request (a review).
    #[test]
    fn hist_4_retention_counts_ages_in_engine_time_not_by_the_wall_clock() {
        let (dir, _, writer) = scratch_store();
        let store = Store::open(&dir.join("requests.sqlite")).expect("store");
        let days = 7;
        let behind_the_wall = 14 * 86_400_000;
        let clock = EngineClock::start(now_ms() - behind_the_wall);
        let finished_now = StoreOp::PutRequest {
            request_id: "fe57dc90-994e-4e73-b09c-fac483d9f05b".into(),
            agent_id: "a1".into(),
            phase: "settled".into(),
            fingerprint: "f".into(),
            record_json: "{}".into(),
            updated_ms: clock.now_ms(),
        };
        writer.commit_blocking(vec![finished_now]).expect("stored");
        let policy = retention::Retention { days, ..retention::Retention::default() };
        let in_engine_time = retention::RetentionClock { engine: clock, behind_ms: 0 };
        assert_eq!(policy.requests_due(&store, in_engine_time.now_ms()).unwrap(), None, "finished a moment ago");
        assert!(policy.requests_due(&store, now_ms()).unwrap().is_some(), "by the wall clock it looked two weeks old");
        // The task itself: once its first check is done (it writes the stored bytes), a prune
        // it found due commits within a moment; the row stays.
        let (store, writer) = (Arc::new(store), Arc::new(writer));
        let reactor = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        reactor.block_on(async {
            let (_settled_tx, settled) = tokio::sync::watch::channel(0);
            const UNCHECKED: u64 = u64::MAX - 1;
            let checked = Arc::new(std::sync::atomic::AtomicU64::new(UNCHECKED));
            let task = tokio::spawn(retention::run(store.clone(), writer.clone(), (policy, in_engine_time), settled, checked.clone()));
            wait_until(10_000, || checked.load(std::sync::atomic::Ordering::Relaxed) != UNCHECKED).await;
            assert_ne!(checked.load(std::sync::atomic::Ordering::Relaxed), UNCHECKED, "the task checked");
            wait_until(1_000, || store.load_requests().unwrap().is_empty()).await;
            task.abort();
        });
        assert_eq!(store.load_requests().unwrap().len(), 1, "the request finished a moment ago is kept");
        // A run of the boot whose clock stood 10 days behind this one's recorded the same
        // moment 10 days earlier: retention allows for it.
        let old_run_row = StoreOp::PutRequest {
            request_id: "fe57dc90-994e-4e73-b09c-fac483d9f05c".into(),
            agent_id: "a1".into(),
            phase: "settled".into(),
            fingerprint: "f".into(),
            record_json: "{}".into(),
            updated_ms: clock.now_ms() - 10 * 86_400_000,
        };
        writer.commit_blocking(vec![old_run_row]).expect("stored");
        assert!(policy.requests_due(&*store, in_engine_time.now_ms()).unwrap().is_some());
        let allowing = retention::RetentionClock { engine: clock, behind_ms: 10 * 86_400_000 };
        assert_eq!(policy.requests_due(&*store, allowing.now_ms()).unwrap(), None);
        let unknown = retention::RetentionClock { engine: clock, behind_ms: u64::MAX };
        assert_eq!(policy.requests_due(&*store, unknown.now_ms()).unwrap(), None, "no age is due when the runs' times are unknown");
        drop((reactor, store, writer));
        std::fs::remove_dir_all(dir).unwrap();
    }

    // TIME-2: this machine names its boot, and the engine clock's offset is the monotonic clock
    // less the wall clock it started from.
    #[test]
    fn time_2_the_run_clock_stands_on_the_machines_monotonic_clock() {
        let boot = crate::driver::boot_id().expect("Linux names its boot");
        assert_eq!(boot.len(), 36, "{boot}");
        let before = crate::holder::protocol::monotonic_ms();
        let (clock, run) = EngineClock::start_on_this_boot(1_000_000_000, Some(boot.clone()));
        let run = run.expect("a run clock");
        assert_eq!(run.boot_id, boot);
        let monotonic_now = run.monotonic_ms(clock.now_ms());
        let after = crate::holder::protocol::monotonic_ms();
        assert!(i128::from(before) <= monotonic_now && monotonic_now <= i128::from(after) + 1, "{before} <= {monotonic_now} <= {after}");
        assert_eq!(EngineClock::start_on_this_boot(1, None).1, None, "no boot, no run clock");
    }
}
