//! The daemon's agents: their durable records, the holder process behind each pane and the
//! Codex observer. The monitor (`monitor.rs`) turns their changes into engine inputs.
//! Everything here runs on blocking threads, never on the reactor.

use wakterm_engine::pane_look::{OtherEnterLook, PaneLook};
use crate::driver::DriverMsg;
use crate::holder::{HolderClient, HolderError, HolderIdentity, InfoReply};
use crate::observer::{CodexObserver, Health};
use crate::observer_checkpoint::{ObserverCheckpoint, CHECKPOINT_INTERVAL_MS};
use crate::paths::DataPaths;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use wakterm_engine::{AgentFacts, AgentId, Harness, Incarnation, Input, ManagedIds, ObserverEvent, ObserverSnapshot, ProcessIdentity, SessionId, Transport};

pub use crate::holder::HOLDER_CALL_TIMEOUT;

/// The durable description of an agent (the `agents` table's record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRecord {
    pub agent_id: String,
    pub name: String,
    pub harness: String,
    pub cwd: String,
    pub env: Vec<(String, String)>,
    pub command: Vec<String>,
    pub created_ms: u64,
    /// MGD-1: `codex app-server` driven over JSON-RPC in a raw pane instead of a TUI.
    #[serde(default)]
    pub managed: bool,
    /// MGD-2: the thread (and session) the managed agent is bound to, once started.
    #[serde(default)]
    pub thread: Option<ManagedIds>,
    /// CORR-14: the agent's CODEX_HOME as resolved when it started (absolute), so a daemon
    /// restarted with another environment still watches where the running Codex writes.
    /// Records of older daemons have none: resolved again (`codex_home_for`) once, when the
    /// daemon loads them (`AgentRuntime::new`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub codex_home: Option<String>,
    /// The same, resolved once by `AgentRuntime::new` when `codex_home` cannot hold it (a path
    /// that is not UTF-8): never stored. Without it every `codex_home()` call (the monitor's,
    /// on the daemon's one reactor, per agent per tick) resolved it again: a `canonicalize`
    /// and maybe a password lookup (a review).
    #[serde(skip)]
    pub resolved_codex_home: Option<PathBuf>,
}

impl AgentRecord {
    pub fn transport(&self) -> Transport {
        if self.managed { Transport::AppServer } else { Transport::Pty }
    }

    pub fn managed_ids(&self) -> Option<ManagedIds> {
        self.thread.clone().filter(|_| self.managed)
    }

    pub fn harness(&self) -> Harness {
        match self.harness.as_str() {
            "codex" => Harness::Codex,
            other => Harness::Other(other.to_string()),
        }
    }

    /// The CODEX_HOME the agent's Codex writes rollouts under (CORR-14).
    pub fn codex_home(&self) -> PathBuf {
        match (&self.codex_home, &self.resolved_codex_home) {
            (Some(home), _) => PathBuf::from(home),
            (None, Some(resolved)) => resolved.clone(),
            (None, None) => codex_home_for(&self.env, Path::new(&self.cwd)),
        }
    }

    /// CORR-14: resolves the CODEX_HOME once (`codex_home_for`: a canonicalize, maybe a
    /// password lookup; blocking) into `codex_home`, or `resolved_codex_home` when it is not
    /// UTF-8.
    pub fn resolve_codex_home(&mut self) {
        match codex_home_for(&self.env, Path::new(&self.cwd)).into_os_string().into_string() {
            Ok(home) => self.codex_home = Some(home),
            Err(raw) => self.resolved_codex_home = Some(PathBuf::from(raw)),
        }
    }

    /// The directory Codex writes the agent's rollouts under (the monitor watches it).
    pub fn sessions_dir(&self) -> PathBuf {
        self.codex_home().join("sessions")
    }
}

/// CORR-14: the CODEX_HOME a Codex started with `env` added to the environment `inherited`
/// reads (the daemon's: the holder passes it on) and working directory `cwd` uses, resolved as
/// Codex resolves it: `CODEX_HOME` (the agent's own, else the inherited one), an empty value
/// counting as unset, a relative one relative to the agent's working directory; unset,
/// `.codex` under the agent's `HOME` (its own, else the inherited one; empty or unset, the
/// user's home from the password database, `passwd_home`, as `dirs::home_dir` does in Codex).
/// Resolving a relative value against the daemon's own directory instead watched and searched
/// the wrong directory: the agent's rollout was never found, and return-final never became
/// available.
pub fn resolve_codex_home(
    env: &[(String, String)],
    cwd: &Path,
    inherited: impl Fn(&str) -> Option<OsString>,
    passwd_home: impl Fn() -> Option<PathBuf>,
) -> PathBuf {
    let var = |name: &str| {
        let own = env_value(env, name).map(OsString::from);
        own.or_else(|| inherited(name)).filter(|value| !value.is_empty()).map(PathBuf::from)
    };
    let home = match var("CODEX_HOME") {
        Some(home) => home,
        None => var("HOME").or_else(passwd_home).unwrap_or_default().join(".codex"),
    };
    cwd.join(home)
}

/// The value the agent's own environment gives `name` (the last `--env` wins, as the holder
/// sets them in order), empty included.
fn env_value<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
    env.iter().rev().find(|(key, _)| key == name).map(|(_, value)| value.as_str())
}

/// CORR-14: [`resolve_codex_home`] with this daemon's environment and user, canonical when it
/// exists (Codex canonicalizes it, and the rollout paths discovery reads from `/proc` are
/// canonical: a watch set through a symlink or `..` reported paths no tail matched, so every
/// write sent every agent of that home to rediscover).
pub fn codex_home_for(env: &[(String, String)], cwd: &Path) -> PathBuf {
    let passwd_home = || nix::unistd::User::from_uid(nix::unistd::getuid()).ok().flatten().map(|user| user.dir);
    let home = resolve_codex_home(env, cwd, |name| std::env::var_os(name), passwd_home);
    std::fs::canonicalize(&home).unwrap_or(home)
}

/// CORR-14: the environment a new pane of a stored agent starts with: the agent's own, and,
/// when it names no CODEX_HOME of its own, the one resolved at its first start (created if it
/// is gone: Codex refuses a CODEX_HOME that does not exist). A daemon started again with
/// another environment would otherwise start Codex writing elsewhere than it watches.
pub fn restart_env(record: &AgentRecord) -> Result<Vec<(String, String)>, String> {
    let mut env = record.env.clone();
    let own = env_value(&env, "CODEX_HOME").is_some_and(|value| !value.is_empty());
    if let (false, Some(home)) = (own, &record.codex_home) {
        std::fs::create_dir_all(home).map_err(|error| format!("cannot prepare the agent's CODEX_HOME {home}: {error}"))?;
        env.push(("CODEX_HOME".to_string(), home.clone()));
    }
    Ok(env)
}

/// What is known about the process behind an agent right now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Liveness {
    pub process: Option<ProcessIdentity>,
    pub alive: bool,
    pub exit_code: Option<i32>,
    /// Where the current process's output starts in the holder's stream (MGD-4).
    pub output_start: u64,
    /// The holder whose stream `output_start` counts in (a new holder starts over at 0).
    pub holder: Option<HolderIdentity>,
    /// LIVE-1: the stamp of the read this came from (`AgentRuntime::kept_call_stamped`): every
    /// read of the holder, a failed one too, takes the next stamp under the kept connection's
    /// lock, so stamps order the reads as they happened. Not a fact of the process
    /// (`same_facts` ignores it).
    pub answered_at: u64,
}

impl Liveness {
    pub fn from_info(info: &InfoReply) -> Liveness {
        let process = match (info.pid, info.start_time_ticks) {
            (Some(pid), Some(start_time_ticks)) => Some(ProcessIdentity { pid, start_time_ticks }),
            _ => None,
        };
        let holder = Some(HolderIdentity::of(info));
        Liveness { process, alive: info.alive, exit_code: info.exit_code, output_start: info.generation_start, holder, answered_at: 0 }
    }

    /// No holder answers: no process.
    pub fn gone() -> Liveness {
        Liveness { process: None, alive: false, exit_code: None, output_start: 0, holder: None, answered_at: 0 }
    }

    /// The same process facts (whatever read they came from).
    pub fn same_facts(&self, other: &Liveness) -> bool {
        Liveness { answered_at: other.answered_at, ..self.clone() } == *other
    }

    /// Read before the read `current` came from: two probes crossed (the monitor's, a
    /// refresh's, `agent restart`'s), and this answer is older (of the same holder, of one that
    /// has since been replaced, or "gone" from before a new holder answered).
    pub fn is_older_than(&self, current: &Liveness) -> bool {
        self.answered_at < current.answered_at
    }

    pub fn incarnation(&self) -> Option<Incarnation> {
        let process = self.process.filter(|_| self.alive)?;
        Some(Incarnation(format!("{}.{}", process.pid, process.start_time_ticks)))
    }
}

/// What one liveness answer did (`AgentRuntime::apply_liveness`).
#[derive(Debug, PartialEq, Eq)]
enum Applied {
    /// Read before the answer applied last: ignored.
    Stale,
    /// The same process facts: nothing changed.
    Same,
    /// No facts (LIVE-1: a failure other than "nobody listens"): nothing changed, and the
    /// probe must be asked again.
    Unknown,
    /// The process changed: the old one's last events (its drain, then its exit).
    Changed(Vec<ObserverEvent>),
}

/// LIVE-1: how often, at most, the log warns that an agent's liveness stays unknown.
const UNKNOWN_WARNING_EVERY: Duration = Duration::from_secs(60);

/// What a liveness probe told the engine ([`AgentRuntime::forward_liveness_change`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forwarded {
    /// The same process facts, or an answer read before the one applied last.
    Nothing,
    /// No facts (LIVE-1): nothing changed, and whoever asked must ask again.
    Unknown,
    /// A process change, sent to the engine.
    Changed,
    /// A process change, and the engine is gone.
    EngineGone,
}

pub struct AgentRuntime {
    pub record: AgentRecord,
    pub holder_socket: PathBuf,
    pub liveness: Mutex<Liveness>,
    /// One observer per process incarnation; refresh, poll and resume serialise on it, so the
    /// events they send keep their order in the driver's inbox.
    pub observer: Mutex<Option<super::agent_observer::AgentObserver>>,
    /// The agent left the catalog (`agent stop` ended its holder) or the daemon is stopping:
    /// the monitor forgets it and a restart that comes after refuses (LIFE-3).
    pub stopping: AtomicBool,
    /// LIFE-3: `agent stop` ended the holder and takes the agent out of the catalog: nothing
    /// more about it reaches the engine (the stop's `AgentRemoved` is the last word), and a
    /// restart or stop that waited for the lifecycle lock finds nothing to do. Only
    /// `agent stop` sets it (`mark_removed`); a stopping daemon keeps its agents' records.
    pub removed: AtomicBool,
    /// LIFE-3: an `agent stop` is ending the holder: the monitor runs no look meanwhile (it
    /// keeps the looks due for after a stop that failed, when the agent stays).
    pub stop_pending: AtomicBool,
    /// LIFE-3: `agent restart`, `agent stop` and `mux stop --all` change this agent's pane one
    /// at a time (held on a blocking thread, never on the reactor).
    pub lifecycle: Mutex<()>,
    /// LIVE-1: a holder of this agent's socket path found running although nobody listens at
    /// the path (its socket file removed): its pid, and whether `/proc` was searched for one
    /// already (once per daemon: a daemon started after the removal never heard of it).
    orphan: Mutex<OrphanHolder>,
    /// LIVE-1, SOCK-2: when this daemon took the agent on (its first probe's grace).
    taken_on: Instant,
    /// LIVE-1: when the log last warned that a probe's answer was unknown (None: not since the
    /// last known answer). A link in the socket's place made it warn four times a second for
    /// as long as it stayed (a hostile run), rotating the rest of the log away.
    unknown_warned: Mutex<Option<Instant>>,
    /// One kept connection for the frequent liveness checks (a new connection costs the holder
    /// a thread each time).
    info_client: Mutex<Option<HolderClient>>,
    /// OBS-1: the checkpoint loaded at startup (handed to the first observer, which keeps it
    /// only for the same incarnation) and what was saved last.
    checkpoint: Mutex<CheckpointSlot>,
    /// MON-1: what the monitor's last run saw: the rollout tailed (routes inotify events to
    /// this agent) and the observer's snapshot (the catalog's observer detail).
    view: Mutex<MonitorView>,
    /// MON-2: the sessions directory's stamp (set by the monitor) and its value at this agent's
    /// last rediscovery.
    discovery: Mutex<DiscoveryStamp>,
    /// LIVE-1: the last stamp a read of the holder took (`kept_call_stamped`).
    reads: std::sync::atomic::AtomicU64,
    /// MON-4: asks the monitor to run this agent (set by the monitor when it adds the agent).
    read_on: std::sync::OnceLock<super::monitor::ReadOn>,
}

#[derive(Default)]
struct DiscoveryStamp {
    sessions: Option<Arc<super::monitor::SessionsStamp>>,
    last: Option<u64>,
}

#[derive(Default)]
struct MonitorView {
    rollout: Option<PathBuf>,
    snapshot: Option<Result<ObserverSnapshot, String>>,
    /// MON-1: the last snapshot the monitor's own stream sent the engine (a run's, a
    /// resume's), and whether a refresh's view was noted since (`snapshot`), which the engine
    /// may or may not have applied (`monitor_recheck::snapshot_is_news`).
    sent: Option<ObserverSnapshot>,
    refreshed: bool,
    /// The observer's health at the last snapshot the monitor sent (a change sends another).
    health: Option<Health>,
    /// MON-3: the last successful look at the screen (a refresh's or a run's).
    screen: Option<KeptLook>,
    /// MON-3: how many looks were noted (each one's `seq`).
    looks: u64,
}

/// MON-3: a look at the screen as the monitor keeps it: its text, the process it was read
/// from, which look it was, and how far the rollout reached right after it (`LookFloor`,
/// noted by whoever holds the observer then; None: not known, so its `Working` always counts).
#[derive(Clone)]
struct KeptLook {
    process: Option<ProcessIdentity>,
    text: String,
    seq: u64,
    floor: Option<crate::observer::LookFloor>,
}

/// MON-3: one look at the screen just taken: its text, and which look it was
/// ([`AgentRuntime::note_look_floor`]).
pub struct Look {
    pub text: String,
    seq: u64,
}

#[derive(Default)]
struct CheckpointSlot {
    loaded: Option<ObserverCheckpoint>,
    saved: Option<(SessionId, u64, Instant)>,
}

impl AgentRuntime {
    pub fn new(paths: &DataPaths, mut record: AgentRecord) -> AgentRuntime {
        let holder_socket = paths.holder_socket(&record.agent_id);
        // CORR-14: an older daemon's record names no home: resolved once here, not on each of
        // the monitor's many `codex_home()` calls (a canonicalize and a password lookup each).
        if record.codex_home.is_none() && record.resolved_codex_home.is_none() {
            record.resolve_codex_home();
        }
        AgentRuntime {
            record,
            holder_socket,
            liveness: Mutex::new(Liveness::gone()),
            observer: Mutex::new(None),
            stopping: AtomicBool::new(false),
            removed: AtomicBool::new(false),
            stop_pending: AtomicBool::new(false),
            lifecycle: Mutex::new(()),
            orphan: Mutex::new(OrphanHolder::default()),
            taken_on: Instant::now(),
            unknown_warned: Mutex::new(None),
            info_client: Mutex::new(None),
            checkpoint: Mutex::new(CheckpointSlot::default()),
            view: Mutex::new(MonitorView::default()),
            discovery: Mutex::new(DiscoveryStamp::default()),
            reads: std::sync::atomic::AtomicU64::new(0),
            read_on: std::sync::OnceLock::new(),
        }
    }

    /// MON-4: how this agent asks the monitor to read on (set when the monitor adds it).
    pub fn set_read_on(&self, read_on: super::monitor::ReadOn) {
        let _ = self.read_on.set(read_on); // once: one monitor adds an agent once
    }

    /// MON-4: a read outside the monitor (an admission's refresh) stopped at its step with
    /// more written: the monitor reads the rest now. Its wakes for those records may have
    /// gone to a run that ended before they were written, or been lost; without this the
    /// rest waited for the next append or the recheck.
    pub fn read_on(&self) {
        if let Some(read_on) = self.read_on.get() {
            read_on.ask();
        }
    }

    /// MON-2: the stamp of the sessions directory this agent's Codex writes under.
    pub fn set_sessions_stamp(&self, stamp: Arc<super::monitor::SessionsStamp>) {
        self.discovery.lock().expect("discovery lock").sessions = Some(stamp);
    }

    /// MON-2: runs `look(rediscover)`, where `rediscover` says whether the rollout must be
    /// rediscovered from the process tree: yes without a watch, or when a rollout no agent
    /// tails changed since the last rediscovery, which this then notes (the stamp is read
    /// before the look, so a change during it makes the next look rediscover too).
    pub fn with_discovery_scope<T>(&self, look: impl FnOnce(bool) -> T) -> T {
        let now = {
            let discovery = self.discovery.lock().expect("discovery lock");
            let now = discovery.sessions.as_ref().and_then(|s| s.current());
            (now.is_none() || now != discovery.last).then_some(now)
        };
        let answer = look(now.is_some());
        if let Some(stamp) = now {
            self.discovery.lock().expect("discovery lock").last = stamp;
        }
        answer
    }

    /// MON-1: records what a monitor run (or a refresh) saw.
    pub fn note_view(&self, rollout: Option<&std::path::Path>, snapshot: Result<ObserverSnapshot, String>) {
        let mut view = self.view.lock().expect("view lock");
        view.rollout = rollout.map(PathBuf::from);
        view.snapshot = Some(snapshot);
    }

    /// MON-1: records a refresh's view (an admission's, a submit's, a probe's), which the
    /// engine may not have applied: the monitor's next run sends its own snapshot.
    pub fn note_refreshed_view(&self, rollout: Option<&std::path::Path>, snapshot: Result<ObserverSnapshot, String>) {
        self.note_view(rollout, snapshot);
        self.view.lock().expect("view lock").refreshed = true;
    }

    /// MON-1: records the snapshot the monitor's stream (a run, a resume) sent the engine: the
    /// latest view, and what the engine holds until a refresh comes.
    pub fn note_sent(&self, rollout: Option<&std::path::Path>, snapshot: &ObserverSnapshot) {
        let mut view = self.view.lock().expect("view lock");
        view.rollout = rollout.map(PathBuf::from);
        view.snapshot = Some(Ok(snapshot.clone()));
        (view.sent, view.refreshed) = (Some(snapshot.clone()), false);
    }

    /// MON-1: the snapshot the monitor's stream last sent the engine, and whether a refresh's
    /// view was noted since.
    pub fn last_sent(&self) -> (Option<ObserverSnapshot>, bool) {
        let view = self.view.lock().expect("view lock");
        (view.sent.clone(), view.refreshed)
    }

    /// MON-1: the monitor runs this agent within a second: its screen decides (below), or a
    /// refresh's view came since its last snapshot (`monitor_recheck::snapshot_is_news`).
    pub fn recheck_soon(&self) -> bool {
        self.screen_decides() || (self.process_alive() && self.view.lock().expect("view lock").refreshed)
    }

    /// True while there is no snapshot yet, or the last one's turn only a new look at the screen
    /// can settle (`monitor_recheck::screen_settles`: unknown, or busy by the screen alone):
    /// then the monitor looks at the screen on every run, every second.
    pub fn screen_decides(&self) -> bool {
        let alive = self.process_alive(); // before the view lock: never hold both
        match &self.view.lock().expect("view lock").snapshot {
            Some(Ok(snapshot)) => alive && crate::monitor_recheck::screen_settles(&snapshot.turn, !self.record.managed),
            Some(Err(_)) => false,
            None => alive,
        }
    }

    pub fn note_health(&self, health: Health) {
        self.view.lock().expect("view lock").health = Some(health);
    }

    pub fn last_health(&self) -> Option<Health> {
        self.view.lock().expect("view lock").health.clone()
    }

    /// The rollout the observer tails, as of the last run.
    pub fn rollout_path(&self) -> Option<PathBuf> {
        self.view.lock().expect("view lock").rollout.clone()
    }

    /// The observer's snapshot as of the last run or refresh (None before the first).
    pub fn last_snapshot(&self) -> Option<Result<ObserverSnapshot, String>> {
        self.view.lock().expect("view lock").snapshot.clone()
    }

    /// True while the holder last reported a live process.
    pub fn process_alive(&self) -> bool {
        self.liveness.lock().expect("liveness lock").alive
    }

    /// OBS-1: the stored checkpoint the next observer may resume from.
    pub fn with_loaded_checkpoint(self, loaded: Option<ObserverCheckpoint>) -> Self {
        self.checkpoint.lock().expect("checkpoint lock").loaded = loaded;
        self
    }

    /// OBS-1: the observer's checkpoint to save, when its offset moved and the last save is at
    /// least [`CHECKPOINT_INTERVAL_MS`] old; the caller sends it (and it counts as saved). Not
    /// acknowledged to anyone: a lost checkpoint only costs a longer read at the next restart.
    /// The flag is true while a newer state waits to be saved (the caller wakes again for it).
    /// EV-5: it goes to the engine after the events it covers (the caller sends those first,
    /// or in the same message before it), and the engine commits it with them, so a restart
    /// never resumes past an event that was not durable.
    pub fn checkpoint_if_due(&self, observer: &super::agent_observer::AgentObserver) -> (Option<Input>, bool) {
        // The position first: building the checkpoint hashes the rollout's window, so it is
        // built only when it is sent.
        let Some((session, offset)) = observer.checkpoint_position() else { return (None, false) };
        let mut slot = self.checkpoint.lock().expect("checkpoint lock");
        let moved = slot.saved.as_ref().is_none_or(|(saved, saved_offset, _)| saved != session || *saved_offset != offset);
        if !moved {
            return (None, false);
        }
        let due = slot.saved.as_ref().is_none_or(|(_, _, at)| at.elapsed() >= Duration::from_millis(CHECKPOINT_INTERVAL_MS));
        if !due {
            return (None, true);
        }
        let checkpoint = observer.checkpoint().expect("a checkpoint exists where its position does");
        assert!(checkpoint.session == *session && checkpoint.tail.offset == offset);
        let json = checkpoint.to_json();
        slot.saved = Some((checkpoint.session, checkpoint.tail.offset, Instant::now()));
        // A rollout path that is no UTF-8 has no checkpoint (`ObserverCheckpoint::to_json`).
        (json.map(|checkpoint_json| Input::ObserverCheckpoint { agent_id: self.agent_id(), checkpoint_json }), false)
    }

    pub fn agent_id(&self) -> AgentId {
        AgentId::parse(&self.record.agent_id).expect("agent ids are UUIDs we generated")
    }

    pub fn facts(&self) -> AgentFacts {
        let liveness = self.liveness.lock().expect("liveness lock").clone();
        AgentFacts {
            agent_id: self.agent_id(),
            name: self.record.name.clone(),
            harness: self.record.harness(),
            transport: self.record.transport(),
            incarnation: liveness.incarnation(),
            process: liveness.process.filter(|_| liveness.alive),
            managed: self.record.managed_ids(),
        }
    }

    /// The observer of a new process: the rollout's (resuming from the loaded checkpoint), or
    /// the app-server stream's for a managed agent (MGD-4; one whose thread is not started yet
    /// has no evidence to follow).
    fn new_observer(&self, process: ProcessIdentity, incarnation: Incarnation, liveness: &Liveness) -> super::agent_observer::AgentObserver {
        use super::agent_observer::AgentObserver;
        if self.record.managed {
            let ids = self.record.thread.clone().unwrap_or(ManagedIds { thread_id: String::new(), session_id: SessionId(String::new()) });
            return AgentObserver::Managed(crate::managed_observer::ManagedObserver::new(
                self.holder_socket.clone(),
                ids,
                process,
                incarnation,
                crate::managed_observer::StreamStart { start: liveness.output_start, holder: liveness.holder.clone() },
                self.record.cwd.clone(),
            ));
        }
        let loaded = self.checkpoint.lock().expect("checkpoint lock").loaded.take();
        AgentObserver::Rollout(
            CodexObserver::new(self.record.codex_home(), Some(PathBuf::from(&self.record.cwd)), process, incarnation).with_checkpoint(loaded),
        )
    }

    pub fn holder(&self) -> Result<HolderClient, String> {
        self.connect_holder().map_err(|e| e.to_string())
    }

    /// Asks the agent's holder to end its process and itself (`agent stop`, `mux stop --all`);
    /// whether it did is for the caller to check (LIVE-1: `end_unreachable_holder`).
    pub fn shut_down_pane(&self) {
        if let Ok(client) = self.connect_holder() {
            let _ = client.shutdown();
        }
    }

    /// A new connection to the agent's holder, its failure as it is (LIVE-1 tells them apart).
    pub fn connect_holder(&self) -> Result<HolderClient, HolderError> {
        self.connect_holder_within(HOLDER_CALL_TIMEOUT)
    }

    /// [`AgentRuntime::connect_holder`] whose calls are bounded by `timeout` instead.
    pub fn connect_holder_within(&self, timeout: Duration) -> Result<HolderClient, HolderError> {
        HolderClient::connect_with_timeout(&self.holder_socket, timeout)
    }

    /// LIFE-3: `agent stop` ended the holder: the agent is removed. Under the observer lock,
    /// which every liveness change is applied and sent under (`apply_liveness`): one sent
    /// before this reaches the engine before the stop's `AgentRemoved` (one inbox, in order),
    /// and none is sent after it (an engine that heard of the agent after its removal would
    /// register it again).
    pub fn mark_removed(&self) {
        let _observer = self.observer.lock().expect("observer lock");
        self.removed.store(true, std::sync::atomic::Ordering::SeqCst);
        self.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// LIVE-1: after "nobody listens" at the holder's socket, ends a holder that still runs
    /// for it (`agent restart` and `agent stop`: never a second pane beside it, never one
    /// running on outside the catalog). Err when it does not end. `agent stop` also calls it
    /// after a shutdown that did not answer (LIFE-3).
    pub fn end_unreachable_holder(&self) -> Result<(), String> {
        match self.unreachable_holder() {
            Some(pid) => end_unreachable_holder(pid, &self.holder_socket),
            None => Ok(()),
        }
    }

    /// LIVE-1: the pid of a holder that still runs for this agent's socket path although
    /// nobody listens there (its socket file was removed): the one that answered last, one
    /// found before, or (once per daemon) one found in `/proc`.
    pub fn unreachable_holder(&self) -> Option<u32> {
        let last = self.liveness.lock().expect("liveness lock").holder.as_ref().map(|holder| holder.pid);
        let mut orphan = self.orphan.lock().expect("orphan holder");
        if let Some(pid) = last.into_iter().chain(orphan.pid).find(|pid| holder_serves(*pid, &self.holder_socket)) {
            orphan.pid = Some(pid);
            return Some(pid);
        }
        if !std::mem::replace(&mut orphan.searched, true) {
            orphan.pid = find_holder(&self.holder_socket);
        }
        orphan.pid.filter(|pid| holder_serves(*pid, &self.holder_socket))
    }

    /// LIVE-1: no answer of the holder was applied since the daemon took the agent on (a held
    /// agent: its process may well run).
    pub fn never_answered(&self) -> bool {
        self.liveness.lock().expect("liveness lock").answered_at == 0
    }

    /// LIVE-1, SOCK-2: no holder answer was applied yet and the agent was taken on less than
    /// [`crate::holder::REBIND_GRACE`] ago (a daemon just started: its probes at start retry an unknown
    /// answer every 250 ms).
    fn rebind_grace(&self) -> bool {
        self.never_answered() && self.taken_on.elapsed() < crate::holder::REBIND_GRACE
    }

    /// LIVE-1: "nobody listens" is no exit while a holder still runs for the socket and the
    /// agent's known process still runs too (once it is gone, it exited, holder or not: the
    /// holder lingers 10 minutes after its child). Said once, not every probe.
    fn unreachable_but_running(&self) -> bool {
        // No process known (a daemon just started): "gone" changes nothing then, and no search
        // of `/proc` is spent on it (`agent restart` and `agent stop` still search).
        let Some(known) = self.liveness.lock().expect("liveness lock").process else { return false };
        let process = crate::observer::engine_to_probe(known);
        // The agent's process must run too; a probe that failed is no evidence of its exit.
        let running = !matches!(crate::proc_probe::gone_by_stat(process), Ok(true)) && self.unreachable_holder().is_some();
        let mut orphan = self.orphan.lock().expect("orphan holder");
        if running && !std::mem::replace(&mut orphan.warned, true) {
            tracing::warn!(agent_id = %self.record.agent_id, holder_pid = ?orphan.pid, "nobody listens at the holder's socket but the holder runs (its socket was removed?): liveness unknown (LIVE-1); `agent restart` or `agent stop` ends that holder");
        }
        orphan.warned &= running;
        running
    }

    /// Reads the holder's facts. On a process change or exit, first drains the old process's
    /// observer (its last records, then `ProcessExited { drained: true }`, CORR-11), then
    /// installs a fresh observer for the new incarnation. Returns None when nothing changed.
    pub fn refresh_liveness(&self) -> Option<Vec<ObserverEvent>> {
        self.probe_liveness().ok().flatten()
    }

    /// [`AgentRuntime::refresh_liveness`] that tells an unknown answer (LIVE-1: a holder that
    /// did not answer, or answered garbage) apart: `Err(())`, nothing changed.
    pub fn probe_liveness(&self) -> Result<Option<Vec<ObserverEvent>>, ()> {
        let (stamp, answer) = self.holder_info_stamped();
        match self.apply_liveness(stamp, answer, None) {
            Applied::Changed(events) => Ok(Some(events)),
            Applied::Same | Applied::Stale => Ok(None),
            Applied::Unknown => Err(()),
        }
    }

    /// LIVE-1 at start: the engine hears of an agent whose first probe was unknown once a
    /// probe knows (the monitor's, which forwards the change, or this one's late answer), under
    /// the observer lock every liveness change is sent under. `Err` while still unknown.
    pub fn register_when_known(&self, inbox: &mpsc::Sender<DriverMsg>) -> Result<(), ()> {
        let _observer = self.observer.lock().expect("observer lock");
        let liveness = self.liveness.lock().expect("liveness lock").clone();
        if liveness.answered_at == 0 {
            return Err(()); // no answer applied yet: the liveness is still the initial "gone"
        }
        let _ = inbox.blocking_send(DriverMsg::Input(Input::AgentUpserted(self.facts())));
        Ok(())
    }

    /// LIVE-1: an unknown answer goes to the log as a warning at most once a minute while the
    /// holder stays unknown (each one at debug level), and at once after a known answer.
    fn say_unknown(&self, error: &HolderError) {
        let mut warned = self.unknown_warned.lock().expect("unknown warned");
        if warned.is_some_and(|at| at.elapsed() < UNKNOWN_WARNING_EVERY) {
            tracing::debug!(agent_id = %self.record.agent_id, %error, "liveness unknown (LIVE-1)");
            return;
        }
        *warned = Some(Instant::now());
        tracing::warn!(agent_id = %self.record.agent_id, %error, "liveness unknown (LIVE-1): nothing changes, the next probe asks again (said once a minute while it lasts)");
    }

    /// [`AgentRuntime::refresh_liveness`] with the holder's answer already read, by the read
    /// that took `stamp`. With `inbox`, a change is told to the engine before the observer
    /// lock is released ([`AgentRuntime::forward_liveness_change`]).
    fn apply_liveness(&self, stamp: u64, answer: Result<InfoReply, HolderError>, inbox: Option<&mpsc::Sender<DriverMsg>>) -> Applied {
        let mut next = match answer {
            Ok(info) => Liveness::from_info(&info),
            // LIVE-1: not while the holder that answered last still runs for this socket: its
            // socket file was removed (a cleaner of old files, a careless `rm`), and the
            // process in its pane lives on. That is "unknown", never an exit: an exit would end
            // requests as `delivery_failed` whose prompt the live agent may still take.
            Err(error) if holder_is_gone(&error) && self.unreachable_but_running() => return Applied::Unknown,
            // LIVE-1, SOCK-2: before any answer, "nobody listens" is unknown for a moment: a
            // holder whose socket was removed binds it again within a second, and a daemon
            // started meanwhile took the agent for exited, ended its request in flight
            // `indeterminate` and published `agent.exited` for a live agent (a hostile run).
            Err(error) if holder_is_gone(&error) && self.rebind_grace() => return Applied::Unknown,
            Err(error) if holder_is_gone(&error) => Liveness::gone(),
            // LIVE-1: any other failure (out of descriptors, a timeout, a garbled reply) is
            // "unknown": nothing changes, and the next probe asks again.
            Err(error) => {
                self.say_unknown(&error);
                return Applied::Unknown;
            }
        };
        *self.unknown_warned.lock().expect("unknown warned") = None;
        next.answered_at = stamp;
        // The observer lock first, over the whole change (then the liveness lock, briefly: no
        // code takes the two the other way round). Two probes that cross (the monitor, a
        // refresh, `agent restart`) then apply one after the other, so the observer always reads
        // the process the liveness names: never another's (one process's drain read the next
        // one's observer), never none for a live one.
        let mut observer = self.observer.lock().expect("observer lock");
        let (ended, new_process) = {
            let mut current = self.liveness.lock().expect("liveness lock");
            if next.is_older_than(&current) {
                tracing::debug!(agent_id = %self.record.agent_id, "a liveness answer read before the one applied last: ignored");
                return Applied::Stale;
            }
            if current.same_facts(&next) {
                current.answered_at = next.answered_at;
                return Applied::Same;
            }
            let ended = current.alive && (!next.alive || current.process != next.process);
            let new_process = current.process != next.process || (next.alive && !current.alive);
            *current = next.clone();
            (ended, new_process)
        };
        let mut events = Vec::new();
        if ended {
            if let Some(old) = observer.as_mut() {
                events.extend(old.poll());
            }
            let drained = observer.as_ref().is_some_and(|o| o.drained());
            events.push(ObserverEvent::ProcessExited { drained });
        }
        if new_process || ended {
            *observer = match (next.process, next.incarnation()) {
                (Some(process), Some(incarnation)) => Some(self.new_observer(process, incarnation, &next)),
                _ => None,
            };
            // MON-1: the engine drops its view of the agent with the old process (the facts
            // below), so the monitor's next snapshot is news, whoever told the engine of the
            // change. When `agent restart` told it, the monitor's run found no change of its
            // own, and a new process that looked as the old one did (idle, no rollout yet)
            // was never reported: the agent stayed `unknown` until something else moved.
            let mut view = self.view.lock().expect("view lock");
            (view.snapshot, view.sent, view.refreshed) = (None, None, false);
        }
        // Still under the observer lock: a refresh or the monitor that takes it next reads the
        // new observer, and its events must reach the engine after the old process's end and
        // the new facts, else the engine files them under the old process (a review found
        // the gap when this was sent after the lock was released).
        // LIFE-3: nothing about an agent `agent stop` removed (`mark_removed`).
        if let Some(inbox) = inbox.filter(|_| !self.removed.load(std::sync::atomic::Ordering::SeqCst)) {
            self.send_liveness_change(events.clone(), inbox);
        }
        Applied::Changed(events)
    }

    /// `info` over the kept connection (one reconnect when it broke: holder restarted), with the
    /// read's stamp (LIVE-1).
    fn holder_info_stamped(&self) -> (u64, Result<InfoReply, HolderError>) {
        let (stamp, answer) = self.kept_call_stamped(HolderClient::info);
        (stamp, answer.map(|(_kept, info)| info))
    }

    /// `info` over the kept connection (one reconnect when it broke: `info` changes nothing,
    /// so asking again is safe), then `then` on the same connection while it is held: the
    /// connection was just proven alive, and no other call of this agent's can come between.
    /// A new connection per call costs the holder a thread each time.
    pub fn with_holder<T>(&self, then: impl FnOnce(&mut HolderClient, InfoReply) -> T) -> Result<T, HolderError> {
        let (mut kept, info) = self.kept_call(HolderClient::info)?;
        let client = kept.as_mut().expect("kept_call leaves the connection it answered on");
        Ok(then(client, info))
    }

    /// A call that must not be repeated (a write) over the kept connection, or a new one when
    /// none is kept; never retried (a failed write leaves the connection unusable, and the next
    /// `kept_call` reconnects).
    pub fn with_kept_connection<T>(&self, then: impl FnOnce(&mut HolderClient) -> T) -> Result<T, HolderError> {
        let mut kept = self.info_client.lock().expect("info client lock");
        if kept.as_ref().is_none_or(HolderClient::unusable) {
            *kept = None;
            *kept = Some(HolderClient::connect_with_timeout(&self.holder_socket, HOLDER_CALL_TIMEOUT)?);
        }
        Ok(then(kept.as_mut().expect("just connected")))
    }

    /// `call` over the kept connection, reconnecting once when it failed there (a holder
    /// restarted). Only for calls that change nothing, so asking again is safe. Returns the
    /// held connection with the answer, so the caller can go on on it.
    fn kept_call<T>(
        &self,
        call: impl Fn(&mut HolderClient) -> Result<T, HolderError>,
    ) -> Result<(std::sync::MutexGuard<'_, Option<HolderClient>>, T), HolderError> {
        self.kept_call_stamped(call).1
    }

    /// [`kept_call`](Self::kept_call), with a stamp taken under the kept connection's lock,
    /// which every read of the holder holds through its call: stamps order the reads (LIVE-1).
    #[allow(clippy::type_complexity)]
    fn kept_call_stamped<T>(
        &self,
        call: impl Fn(&mut HolderClient) -> Result<T, HolderError>,
    ) -> (u64, Result<(std::sync::MutexGuard<'_, Option<HolderClient>>, T), HolderError>) {
        let kept = self.info_client.lock().expect("info client lock");
        let stamp = self.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        (stamp, self.call_kept(kept, call))
    }

    /// `call` on the kept connection held by `kept`, reconnecting once when it failed there.
    fn call_kept<'a, T>(
        &self,
        mut kept: std::sync::MutexGuard<'a, Option<HolderClient>>,
        call: impl Fn(&mut HolderClient) -> Result<T, HolderError>,
    ) -> Result<(std::sync::MutexGuard<'a, Option<HolderClient>>, T), HolderError> {
        if let Some(client) = kept.as_mut() {
            if let Ok(answer) = call(client) {
                return Ok((kept, answer));
            }
        }
        *kept = None;
        let mut client = HolderClient::connect_with_timeout(&self.holder_socket, HOLDER_CALL_TIMEOUT)?;
        let answer = call(&mut client)?;
        *kept = Some(client);
        Ok((kept, answer))
    }

    /// [`refresh_liveness`](Self::refresh_liveness), and on a change tells the engine: the old
    /// process's last events first, then the agent's new facts.
    pub fn forward_liveness_change(&self, inbox: &mpsc::Sender<DriverMsg>) -> Forwarded {
        let (stamp, answer) = self.holder_info_stamped();
        match self.apply_liveness(stamp, answer, Some(inbox)) {
            Applied::Changed(_) if inbox.is_closed() => Forwarded::EngineGone,
            Applied::Changed(_) => Forwarded::Changed,
            Applied::Unknown => Forwarded::Unknown,
            Applied::Same | Applied::Stale => Forwarded::Nothing,
        }
    }

    /// One step (EV-3): the old process's last events, then the new facts. (A send that
    /// fails finds the engine gone: nobody is left to tell.)
    fn send_liveness_change(&self, events: Vec<ObserverEvent>, inbox: &mpsc::Sender<DriverMsg>) {
        let agent_id = self.agent_id();
        let mut step = observed_inputs(&agent_id, events);
        step.push(Input::AgentUpserted(self.facts()));
        let _ = inbox.blocking_send(DriverMsg::Inputs(step));
    }

    /// The current screen text, for composer evidence (dialogs too), over the kept connection (a
    /// new one costs the holder a thread), and which look it was (MON-3's floor). None for a
    /// managed agent, whose raw pane shows JSON lines and whose evidence is its notification
    /// stream (MGD-4).
    pub fn screen_look(&self) -> Option<Look> {
        if self.record.managed {
            return None;
        }
        // Known before the call: a process that changed during it leaves a look filed under the
        // old one, which the next run then does not reuse.
        let process = self.liveness.lock().expect("liveness lock").process;
        let (_kept, screen) = self.kept_call(HolderClient::screen).ok()?;
        let text = text_of(&screen);
        let seq = self.note_screen(process, &text);
        Some(Look { text, seq })
    }

    /// MON-3: the text of the last look at the screen (a refresh's or a monitor run's), if it
    /// was read from the process the agent runs now, and how far the rollout reached right
    /// after it, when known.
    pub fn last_screen(&self) -> Option<(String, Option<crate::observer::LookFloor>)> {
        let process = self.liveness.lock().expect("liveness lock").process; // before the view lock: never hold both
        let view = self.view.lock().expect("view lock");
        view.screen.as_ref().filter(|look| look.process == process).map(|look| (look.text.clone(), look.floor.clone()))
    }

    /// MON-3: measures how far `observer`'s rollout reaches now, after `look` returned, and
    /// keeps it with that look (the monitor's run, a refresh and a resume call it once they
    /// hold the observer).
    pub fn floor_look(&self, look: &Look, observer: &super::agent_observer::AgentObserver) -> Option<crate::observer::LookFloor> {
        let floor = observer.look_floor();
        self.note_look_floor(look.seq, floor.clone());
        floor
    }

    /// MON-3: how far the rollout reached right after look `seq` (measured after it returned);
    /// dropped when another look was noted since (a floor measured before that one's call
    /// could end would claim too much of it).
    fn note_look_floor(&self, seq: u64, floor: Option<crate::observer::LookFloor>) {
        let mut view = self.view.lock().expect("view lock");
        if let Some(look) = view.screen.as_mut().filter(|look| look.seq == seq) {
            look.floor = floor;
        }
    }

    fn note_screen(&self, process: Option<ProcessIdentity>, text: &str) -> u64 {
        let mut view = self.view.lock().expect("view lock");
        view.looks += 1;
        let seq = view.looks;
        view.screen = Some(KeptLook { process, text: text.to_string(), seq, floor: None });
        seq
    }

    /// ADM-3's first two looks, liveness (forwarded as [`AgentRuntime::forward_liveness_change`]
    /// does) and the screen text ([`AgentRuntime::screen_look`]), from ONE holder call that
    /// reads both at the same moment (issue 10: a round trip less per admission). A holder
    /// too old for it answers the screen alone; `info` is then asked separately.
    pub fn forward_liveness_and_screen(&self, inbox: &mpsc::Sender<DriverMsg>) -> (Option<Look>, PaneLook) {
        if self.record.managed {
            let _ = self.forward_liveness_change(inbox);
            return (None, PaneLook::default());
        }
        let (stamp, looked) = self.kept_call_stamped(HolderClient::screen_with_info);
        // ADM-4: the pane's write count read with the screen, in one holder call: the
        // admission's write names it (None from a holder that sends no info with its screen).
        // ADM-19: how long ago another writer's Enter ended, on the machine's monotonic clock
        // the holder noted it on, read as the answer came.
        let (info, screen, pane) = match looked.map(|(_kept, looked)| looked) {
            Ok(looked) => {
                let now_ms = crate::holder::protocol::monotonic_ms();
                let pane = looked.info.as_ref().map_or(PaneLook::default(), |info| PaneLook {
                    writes: Some(info.writes),
                    other_enter: OtherEnterLook::from_holder(info.other_enter_ms, (info.other_enters, info.other_enters_recent), now_ms),
                });
                (looked.info.map(Ok), Some(text_of(&looked.screen)), pane)
            }
            // The same answer a failed `info` gives: gone is exit (LIVE-1), else unknown.
            Err(error) => (Some(Err(error)), None, PaneLook::default()),
        };
        let (stamp, answer) = match info {
            Some(answer) => (stamp, answer),
            None => self.holder_info_stamped(),
        };
        // A read older than the liveness applied last: its screen may be another process's, so
        // it is no evidence about the current one. A change is told to the engine inside.
        if self.apply_liveness(stamp, answer, Some(inbox)) == Applied::Stale {
            return (None, PaneLook::default());
        }
        let look = screen.map(|text| {
            // Read in one call with the liveness just applied: filed under that process.
            let process = self.liveness.lock().expect("liveness lock").process;
            let seq = self.note_screen(process, &text);
            Look { text, seq }
        });
        (look, pane)
    }
}

/// The screen as the composer evidence reads it: its rows, one per line. One copy for both
/// ways of reading the screen.
fn text_of(screen: &crate::holder::protocol::ScreenReply) -> String {
    screen.lines.join("\n")
}

/// LIVE-1: what is known of a holder that runs but cannot be reached at its socket path.
#[derive(Default)]
struct OrphanHolder {
    pid: Option<u32>,
    searched: bool,
    warned: bool,
}

/// LIVE-1: a process serving `socket` as its holder, from a search of `/proc` (only when nobody
/// listens there and no holder is known: once per agent and daemon).
pub fn find_holder(socket: &Path) -> Option<u32> {
    let entries = std::fs::read_dir("/proc").ok()?;
    entries.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok()).find(|pid| holder_serves(*pid, socket))
}

/// LIVE-1: ends a holder that runs but cannot be reached at its socket (`agent restart` and
/// `agent stop`, before a new pane or the record's removal): first each child's process group,
/// SIGHUP then SIGKILL, as the holder itself ends them (`Pane::terminate_child`: a hang-up from
/// the closed terminal alone would miss an agent that ignores it, which would then run on
/// beside the new pane); then the holder, SIGTERM then SIGKILL. Each signal only while the
/// holder's command line still names the socket. Err when the holder is still there.
pub fn end_unreachable_holder(pid: u32, socket: &Path) -> Result<(), String> {
    use nix::sys::signal::{kill, killpg, Signal};
    let still_holder = || holder_serves(pid, socket);
    for child in crate::proc_probe::children(pid) {
        let child_pid = nix::unistd::Pid::from_raw(child as i32);
        let child_runs = || still_holder() && crate::proc_probe::children(pid).contains(&child);
        signal_until_gone([(Signal::SIGHUP, Duration::from_secs(2)), (Signal::SIGKILL, Duration::from_secs(1))], child_runs, |signal| {
            if killpg(child_pid, signal) == Err(nix::errno::Errno::ESRCH) {
                let _ = kill(child_pid, signal); // not a group's leader
            }
        });
    }
    let holder = nix::unistd::Pid::from_raw(pid as i32);
    let ended = signal_until_gone([(Signal::SIGTERM, Duration::from_secs(5)), (Signal::SIGKILL, Duration::from_secs(2))], still_holder, |signal| {
        let _ = kill(holder, signal);
    });
    match ended {
        true => Ok(()),
        false => Err(format!("the agent's holder (pid {pid}) cannot be reached at {} and does not end", socket.display())),
    }
}

/// Sends each signal in turn while `runs` holds, waiting up to its bound for `runs` to stop
/// holding; true once it does not.
fn signal_until_gone<const N: usize>(steps: [(nix::sys::signal::Signal, Duration); N], runs: impl Fn() -> bool, send: impl Fn(nix::sys::signal::Signal)) -> bool {
    for (signal, wait) in steps {
        if !runs() {
            return true;
        }
        send(signal);
        let deadline = Instant::now() + wait;
        while runs() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    !runs()
}

/// LIVE-1: process `pid` is a holder (`wakterm __holder`) serving `socket`: its command line
/// names both (a pid reused by another process does not; a zombie's is empty).
pub fn holder_serves(pid: u32, socket: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // Ours only: another user's process may carry the same words in its command line.
    if !std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|meta| meta.uid() == rustix::process::geteuid().as_raw()) {
        return false;
    }
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else { return false };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let socket = socket.as_os_str().as_encoded_bytes();
    args.contains(&b"__holder".as_slice()) && args.windows(2).any(|pair| pair[0] == b"--socket" && pair[1] == socket)
}

/// LIVE-1: the only probe failure that is evidence of exit: nobody listens at the holder's
/// socket (the file is gone, or the holder that bound it is). A holder owns the agent's
/// terminal, so without it the agent's process has lost its pane.
pub fn holder_is_gone(error: &HolderError) -> bool {
    match error {
        HolderError::ConnectRefused { source, .. } => matches!(source.raw_os_error(), Some(libc::ECONNREFUSED) | Some(libc::ENOENT)),
        HolderError::Timeout { .. } | HolderError::PeerGone { .. } | HolderError::Protocol { .. } | HolderError::NotSent { .. } | HolderError::Remote { .. } | HolderError::Spawn { .. } => false,
    }
}

pub type AgentTable = Arc<Mutex<std::collections::BTreeMap<String, Arc<AgentRuntime>>>>;

pub fn observed(agent_id: &AgentId, event: ObserverEvent) -> DriverMsg {
    DriverMsg::Input(observed_input(agent_id, event))
}

/// A read's events as the inputs of one step (`DriverMsg::Inputs`), in order.
pub fn observed_inputs(agent_id: &AgentId, events: impl IntoIterator<Item = ObserverEvent>) -> Vec<Input> {
    events.into_iter().map(|event| observed_input(agent_id, event)).collect()
}

/// [`observed`] as an input, for a message that carries several (`DriverMsg::Inputs`).
fn observed_input(agent_id: &AgentId, event: ObserverEvent) -> Input {
    // Losing a session ends requests as indeterminate; say why in the daemon log.
    match &event {
        ObserverEvent::SessionLost { reason, .. } => tracing::warn!(%agent_id, %reason, "observer session lost"),
        ObserverEvent::ProcessExited { drained } => tracing::warn!(%agent_id, drained, "agent process exited"),
        ObserverEvent::Attached { session, position } => tracing::info!(%agent_id, session = %session.0, position, "observer attached"),
        _ => {}
    }
    Input::Observed { agent_id: agent_id.clone(), event }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::test_agents::{fake_holder, own_info, pty_agent};

    /// CORR-14: the agent's CODEX_HOME resolves as Codex resolves it, from the agent's own
    /// environment and working directory; the daemon's directory never enters.
    #[test]
    fn corr_14_codex_home_resolves_as_codex_resolves_it() {
        let cwd = Path::new("/work/agent");
        let env = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect::<Vec<_>>();
        let daemon = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| OsString::from(v))
        };
        let none = daemon(&[]);
        let passwd = || Some(PathBuf::from("/home/passwd"));
        let resolve = |own: &[(&str, &str)], inherited: &dyn Fn(&str) -> Option<OsString>| resolve_codex_home(&env(own), cwd, inherited, passwd);
        assert_eq!(resolve(&[("CODEX_HOME", "/abs/home")], &none), Path::new("/abs/home"));
        assert_eq!(resolve(&[("CODEX_HOME", "rel/home")], &none), Path::new("/work/agent/rel/home"), "relative to the agent's cwd");
        assert_eq!(resolve(&[("CODEX_HOME", "a"), ("CODEX_HOME", "b")], &none), Path::new("/work/agent/b"), "the last --env wins");
        let inherited = daemon(&[("CODEX_HOME", "inherited"), ("HOME", "/home/d")]);
        assert_eq!(resolve(&[], &inherited), Path::new("/work/agent/inherited"), "the daemon's value, still the agent's cwd");
        assert_eq!(resolve(&[("CODEX_HOME", "/own")], &inherited), Path::new("/own"), "the agent's own value first");
        assert_eq!(resolve(&[("CODEX_HOME", "")], &inherited), Path::new("/home/d/.codex"), "empty counts as unset");
        assert_eq!(resolve(&[("HOME", "/home/own")], &daemon(&[("HOME", "/home/d")])), Path::new("/home/own/.codex"));
        assert_eq!(resolve(&[], &daemon(&[("HOME", "/home/d")])), Path::new("/home/d/.codex"));
        assert_eq!(resolve(&[], &none), Path::new("/home/passwd/.codex"), "no HOME: the user's, from the password database");
        let daemon_home = daemon(&[("HOME", "/home/d")]);
        assert_eq!(resolve(&[("HOME", "")], &daemon_home), Path::new("/home/passwd/.codex"), "the agent's empty HOME is unset for it, not the daemon's");
        assert_eq!(resolve(&[("HOME", "h")], &none), Path::new("/work/agent/h/.codex"), "a relative HOME, as Codex joins it in its cwd");
    }

    /// CORR-14: the home kept at start is canonical when it exists (the form `/proc` fd links
    /// and a watch set on it report), and as resolved when it does not exist yet.
    #[test]
    fn corr_14_the_home_kept_at_start_is_canonical() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap();
        std::fs::create_dir_all(real.join("real/home")).unwrap();
        std::os::unix::fs::symlink(real.join("real"), real.join("link")).unwrap();
        std::fs::create_dir_all(real.join("cwd")).unwrap();
        let env = |value: &str| vec![("CODEX_HOME".to_string(), value.to_string())];
        assert_eq!(codex_home_for(&env("../link/home"), &real.join("cwd")), real.join("real/home"));
        assert_eq!(codex_home_for(&env("missing"), &real.join("cwd")), real.join("cwd/missing"), "not there yet: as resolved");
    }

    /// CORR-14: a new pane of a stored agent gets the CODEX_HOME its first start resolved
    /// (created when gone), unless the agent names one of its own.
    #[test]
    fn corr_14_a_new_pane_keeps_the_home_of_its_first_start() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _paths) = pty_agent(dir.path(), "a1");
        let mut record = agent.record.clone();
        let home = dir.path().join("gone/home").display().to_string();
        record.codex_home = Some(home.clone());
        record.env = vec![("TERM".into(), "dumb".into())];
        let env = restart_env(&record).unwrap();
        assert_eq!(env, vec![("TERM".into(), "dumb".into()), ("CODEX_HOME".into(), home.clone())]);
        assert!(Path::new(&home).is_dir(), "created: Codex refuses a CODEX_HOME that does not exist");
        record.env = vec![("CODEX_HOME".into(), "".into())];
        assert_eq!(restart_env(&record).unwrap().last().unwrap(), &("CODEX_HOME".to_string(), home.clone()), "empty is unset");
        record.env = vec![("CODEX_HOME".into(), "own".into())];
        assert_eq!(restart_env(&record).unwrap(), record.env, "its own stays");
        record.env = vec![];
        record.codex_home = None;
        assert_eq!(restart_env(&record).unwrap(), vec![], "an older record: nothing to pin");
    }

    /// CORR-14: the record keeps the home resolved at start; a record without one (an older
    /// daemon's) is resolved again from its own environment and working directory.
    #[test]
    fn corr_14_a_record_keeps_the_home_resolved_at_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _paths) = pty_agent(dir.path(), "a1");
        let mut record = agent.record.clone();
        assert!(record.codex_home.is_some(), "an agent's runtime resolves an older record's home once");
        record.codex_home = None; // an older daemon's record
        record.env = vec![("CODEX_HOME".into(), "rel".into())];
        record.cwd = "/work/agent".into();
        assert_eq!(record.codex_home(), Path::new("/work/agent/rel"));
        assert_eq!(record.sessions_dir(), Path::new("/work/agent/rel/sessions"));
        record.codex_home = Some("/resolved/at/start".into());
        assert_eq!(record.codex_home(), Path::new("/resolved/at/start"));
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(serde_json::from_str::<AgentRecord>(&json).unwrap(), record, "round trips");
        record.codex_home = None;
        let old = serde_json::to_value(&record).unwrap();
        assert!(old.get("codex_home").is_none(), "absent, as an older daemon wrote it");
    }

    /// CORR-14: a home that is no UTF-8 (here the canonical target of a link) cannot be kept
    /// in the record's text field: the runtime keeps it resolved, and every later call (the
    /// monitor's, per agent per tick, on the one reactor) returns it without resolving again
    /// (it canonicalized each time: a review). Shown by removing the link after the start: a
    /// new resolution would give the link's own path now.
    #[test]
    fn corr_14_a_home_that_is_not_utf8_is_resolved_once() {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join(std::ffi::OsStr::from_bytes(b"home-\xff"));
        std::fs::create_dir(&target).unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let (agent, paths) = pty_agent(dir.path(), "a1");
        let mut record = agent.record.clone();
        record.env = vec![("CODEX_HOME".into(), link.display().to_string())];
        (record.codex_home, record.resolved_codex_home) = (None, None);
        let agent = AgentRuntime::new(&paths, record);
        assert_eq!(agent.record.codex_home, None, "not UTF-8: not in the record");
        std::fs::remove_file(&link).unwrap();
        assert_eq!(agent.record.codex_home(), target, "resolved once, at the start");
        assert_eq!(agent.record.sessions_dir(), target.join("sessions"));
    }

    fn refused(errno: i32) -> HolderError {
        HolderError::ConnectRefused { path: PathBuf::from("/x.sock"), source: std::io::Error::from_raw_os_error(errno) }
    }

    /// LIVE-1 / EV-3: a process change reaches the engine before the observer lock is
    /// released, so whoever reads the new observer next (a refresh, the monitor) sends its
    /// events after the old process's end and the new facts, never before them (the engine
    /// would file them under the old process). Here the inbox is full, so the change's send
    /// waits: the observer lock must still be held meanwhile.
    #[test]
    fn live_1_a_process_change_is_sent_under_the_observer_lock() {
        let dir = tempfile::tempdir().unwrap();
        let id = "0b7e6a8c-3f2d-4c1e-9a5b-6d4f2e1c0a99";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 1, |_| own_info(0));
        let agent = Arc::new(agent);
        let (inbox, mut sent) = mpsc::channel(1);
        inbox.try_send(DriverMsg::Input(Input::Tick)).unwrap(); // full: the next send waits
        let probe = Arc::clone(&agent);
        let forwarding = std::thread::spawn(move || probe.forward_liveness_change(&inbox));
        let started = std::time::Instant::now();
        while agent.liveness.lock().unwrap().process.is_none() {
            assert!(started.elapsed() < Duration::from_secs(10), "the new process was never applied");
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(100)); // the send is waiting on the full inbox
        assert!(agent.observer.try_lock().is_err(), "the observer lock is released only after the change is sent");
        assert!(matches!(sent.blocking_recv(), Some(DriverMsg::Input(Input::Tick))));
        assert!(matches!(sent.blocking_recv(), Some(DriverMsg::Inputs(step)) if matches!(step.last(), Some(Input::AgentUpserted(_)))));
        assert_eq!(forwarding.join().unwrap(), Forwarded::Changed);
        assert!(agent.observer.try_lock().is_ok());
        drop(agent);
        holder.join().unwrap();
    }

    /// MON-3: a look's floor is kept only with that look: one measured after an older look may
    /// have been measured before a newer look's call ended (looks are noted as their calls
    /// return, a refresh's and a monitor run's in either order), and would claim the newer
    /// look predates records written after it.
    #[test]
    fn mon_3_a_floor_is_kept_only_with_its_own_look() {
        let dir = tempfile::tempdir().unwrap();
        let (agent, _paths) = pty_agent(dir.path(), "0e2c4a6e-8b0d-4f2a-9c4e-6a8c0e2a4c6e");
        let floor = crate::observer::LookFloor::at(crate::rollout_tail::FileIdentity { dev: 1, ino: 2 }, 300);
        let first = agent.note_screen(None, "first look");
        let second = agent.note_screen(None, "second look");
        agent.note_look_floor(first, Some(floor.clone()));
        assert_eq!(agent.last_screen(), Some(("second look".to_string(), None)), "an older look's floor is dropped");
        agent.note_look_floor(second, Some(floor.clone()));
        assert_eq!(agent.last_screen(), Some(("second look".to_string(), Some(floor))));
    }

    /// Issue 10: a holder older than `screen` with `with_info` answers the screen alone; the
    /// refresh then asks `info` on its own, so liveness is still read first-hand and forwarded.
    #[test]
    fn a_holder_without_screen_info_is_asked_info_separately() {
        let dir = tempfile::tempdir().unwrap();
        let id = "6c9c591e-087b-4c45-9001-bf796f895b55";
        let (agent, paths) = pty_agent(dir.path(), id);
        let me = crate::proc_probe::identity(std::process::id()).unwrap();
        let old_holder = fake_holder(&paths, id, 2, |line| match line.contains("screen") {
            true => r#"{"lines":["> hi"],"cursor":{"row":0,"col":4},"output_offset":9,"cols":80,"rows":24,"bracketed_paste":true,"alternate_screen":false}"#.to_string(),
            false => own_info(9),
        });
        let (inbox, mut sent) = mpsc::channel(16);
        let (screen, pane) = agent.forward_liveness_and_screen(&inbox);
        assert_eq!(screen.map(|look| look.text).as_deref(), Some("> hi"));
        assert_eq!(pane, PaneLook::default(), "an old holder's screen comes without its write count or Enter");
        assert_eq!(agent.liveness.lock().unwrap().process.map(|p| p.pid), Some(me.pid));
        drop(agent); // closes the kept connection: the fake holder's loop ends
        assert_eq!(old_holder.join().unwrap(), [r#"{"op":"screen","with_info":true}"#, r#"{"op":"info"}"#]);
        let mut upserted = false;
        while let Ok(message) = sent.try_recv() {
            // One step (EV-3): here only the new facts (no process ran before).
            upserted |= matches!(message, DriverMsg::Inputs(step) if matches!(step.last(), Some(Input::AgentUpserted(_))));
        }
        assert!(upserted, "the new process was forwarded to the engine");
    }

    /// A holder's `info` answer: process `pid` alive, in holder `holder_pid` (instance `h<pid>`).
    fn info_reply(pid: u32, holder_pid: u32) -> InfoReply {
        let json = format!(r#"{{"pid":{pid},"start_time_ticks":7,"alive":true,"exit_code":null,"cols":80,"rows":24,"generation":0,"holder_pid":{holder_pid},"output_end":0,"spawn_error":null,"holder_instance":"h{holder_pid}"}}"#);
        serde_json::from_str(&json).unwrap()
    }

    /// LIVE-1: probes that crossed apply their answers in the order they were read: an answer
    /// read before the one applied last changes nothing, whichever holder gave it and whether it
    /// says "gone" (it once could put a replaced process back and report the live one exited,
    /// and a late "gone" could hide a new holder's process).
    #[test]
    fn live_1_an_answer_read_before_the_last_applied_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let agent = pty_agent(dir.path(), "6c9c591e-087b-4c45-9001-bf796f895b56").0;
        let info = |pid: u32, holder_pid: u32| -> Result<InfoReply, HolderError> { Ok(info_reply(pid, holder_pid)) };
        let gone = || Err(refused(libc::ECONNREFUSED));
        let pid = || agent.liveness.lock().unwrap().process.map(|p| p.pid);
        assert!(matches!(agent.apply_liveness(2, info(20, 9), None), Applied::Changed(_)), "a new process is a change");
        assert_eq!(agent.apply_liveness(1, info(10, 9), None), Applied::Stale, "read before: not applied");
        assert_eq!(pid(), Some(20));
        assert_eq!(agent.apply_liveness(3, info(20, 9), None), Applied::Same);
        assert_eq!(agent.liveness.lock().unwrap().answered_at, 3);
        // The holder dies (gone), a new one answers; then the answers read before arrive late.
        assert!(matches!(agent.apply_liveness(5, gone(), None), Applied::Changed(_)), "gone ends the process");
        assert_eq!(pid(), None);
        assert!(matches!(agent.apply_liveness(7, info(40, 10), None), Applied::Changed(_)), "the new holder's process");
        assert_eq!(agent.apply_liveness(6, gone(), None), Applied::Stale, "a late gone does not hide it");
        assert_eq!(agent.apply_liveness(4, info(20, 9), None), Applied::Stale, "a late answer of the dead holder");
        assert_eq!(pid(), Some(40));
        assert_eq!(agent.apply_liveness(8, info(40, 10), None), Applied::Same, "nothing is wedged");
        // A failure that is not evidence changes nothing, whatever its stamp.
        assert_eq!(agent.apply_liveness(9, Err(refused(libc::EMFILE)), None), Applied::Unknown);
        assert_eq!(pid(), Some(40));
    }

    /// LIVE-1: a liveness change is applied whole under the observer lock, so whoever holds that
    /// lock sees the observer reading exactly the process the liveness names. Crossed probes
    /// once left them apart for a moment: the liveness swapped under its own lock, the
    /// observer replaced later under the other (a drain could read the next process's output).
    /// Two probing threads cross thousands of times while a third checks under the lock.
    #[test]
    fn live_1_crossed_probes_never_leave_the_observer_on_another_process() {
        let dir = tempfile::tempdir().unwrap();
        let agent = Arc::new(pty_agent(dir.path(), "6c9c591e-087b-4c45-9001-bf796f895b57").0);
        let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let probes: Vec<_> = (0..2)
            .map(|_| {
                let (agent, done) = (agent.clone(), done.clone());
                std::thread::spawn(move || {
                    for _ in 0..3_000 {
                        // A read takes its stamp, then its answer applies: three processes in turn.
                        let stamp = agent.reads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                        let pid = 10 + (stamp % 3) as u32;
                        agent.apply_liveness(stamp, Ok(info_reply(pid, 9)), None);
                    }
                    done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                })
            })
            .collect();
        let (mut checks, mut changes) = (0u64, std::collections::BTreeSet::new());
        while done.load(std::sync::atomic::Ordering::SeqCst) < probes.len() {
            let observer = agent.observer.lock().unwrap();
            let liveness = agent.liveness.lock().unwrap().clone();
            let reading = observer.as_ref().map(|o| o.incarnation().clone());
            assert_eq!(reading, liveness.incarnation(), "the observer reads another process than the liveness names");
            changes.extend(reading);
            checks += 1;
        }
        probes.into_iter().for_each(|probe| probe.join().unwrap());
        assert!(checks > 10 && changes.len() > 1, "the check ran while the process changed: {checks} checks, {changes:?}");
    }

    /// LIVE-1: "nobody listens" at the holder's socket is no exit while the holder that
    /// answered last still runs for that socket (its socket file was removed): unknown, nothing
    /// changes; once that process is gone, it is an exit.
    #[test]
    fn live_1_a_removed_socket_of_a_running_holder_is_no_exit() {
        let dir = tempfile::tempdir().unwrap();
        let agent = pty_agent(dir.path(), "6c9c591e-087b-4c45-9001-bf796f895b58").0;
        let socket = agent.holder_socket.display().to_string();
        // A process whose command line reads as this agent's holder.
        let mut holder = std::process::Command::new("sh")
            .args(["-c", "exec 1>&- 2>&-; sleep 30; true", "__holder", "--socket", &socket])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // `spawn` may return before the child's exec shows in /proc: a bounded wait.
        let deadline = Instant::now() + Duration::from_secs(5);
        while !holder_serves(holder.id(), &agent.holder_socket) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(holder_serves(holder.id(), &agent.holder_socket));
        assert!(!holder_serves(holder.id(), &dir.path().join("other.sock")), "another agent's socket");
        assert!(!holder_serves(std::process::id(), &agent.holder_socket), "not a holder");
        // The agent's process: this test's own (it runs), as the holder last reported it.
        let me = crate::proc_probe::identity(std::process::id()).unwrap();
        let mut info = info_reply(me.pid, holder.id());
        info.start_time_ticks = Some(me.start_time_ticks);
        assert!(matches!(agent.apply_liveness(1, Ok(info.clone()), None), Applied::Changed(_)));
        assert_eq!(agent.apply_liveness(2, Err(refused(libc::ENOENT)), None), Applied::Unknown, "its holder runs");
        assert_eq!(agent.liveness.lock().unwrap().process.map(|p| p.pid), Some(me.pid), "nothing changed");
        assert_eq!(agent.unreachable_holder(), Some(holder.id()));
        // The agent's process gone (another start time): an exit, holder or not.
        info.start_time_ticks = Some(me.start_time_ticks + 1);
        assert!(matches!(agent.apply_liveness(3, Ok(info.clone()), None), Applied::Changed(_)));
        assert!(matches!(agent.apply_liveness(4, Err(refused(libc::ENOENT)), None), Applied::Changed(_)), "its process is gone: an exit");
        info.start_time_ticks = Some(me.start_time_ticks);
        assert!(matches!(agent.apply_liveness(5, Ok(info), None), Applied::Changed(_)));
        // The holder ends (as `agent restart` / `agent stop` end it), its child first: an exit.
        // (`sh` forks `sleep` a moment after it starts: a bounded wait; under a loaded CI the
        // first look came before it.)
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut children = crate::proc_probe::children(holder.id());
        while children.is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            children = crate::proc_probe::children(holder.id());
        }
        assert_eq!(children.len(), 1, "sh runs sleep");
        end_unreachable_holder(holder.id(), &agent.holder_socket).unwrap();
        let child_ended = crate::proc_probe::standing(children[0]).map_or(true, |(_, zombie)| zombie);
        assert!(child_ended, "the holder's child ended too");
        let _ = holder.wait();
        assert!(matches!(agent.apply_liveness(6, Err(refused(libc::ENOENT)), None), Applied::Changed(_)), "its holder is gone: an exit");
        assert_eq!(agent.liveness.lock().unwrap().process, None);
    }

    // LIVE-1: only "nobody listens" is evidence of exit; running out of descriptors is not.
    #[test]
    fn live_1_only_an_absent_holder_is_evidence_of_exit() {
        assert!(holder_is_gone(&refused(libc::ECONNREFUSED)));
        assert!(holder_is_gone(&refused(libc::ENOENT)));
        for errno in [libc::EMFILE, libc::ENFILE, libc::EAGAIN, libc::ENOMEM, libc::EACCES] {
            assert!(!holder_is_gone(&refused(errno)), "errno {errno} read as an exit");
        }
        assert!(!holder_is_gone(&HolderError::Timeout { op: "info", after: Duration::from_secs(1) }));
        assert!(!holder_is_gone(&HolderError::PeerGone { op: "info", detail: "reset".into() }));
        assert!(!holder_is_gone(&HolderError::Protocol { detail: "garbled".into() }));
    }
}
