//! MON-1: one event-driven monitor for all agents. An idle agent costs nothing measurable:
//!
//! - process changes and terminal output are pushed by each agent's holder (`info_changed`,
//!   LIVE-2), read by one small task per agent on the reactor (no thread, no polling); output
//!   wakes a screen look at most every [`SCREEN_DEBOUNCE`]; another writer's Enter wakes a
//!   run at once, which reports it with what it reads after it (ADM-19);
//! - rollout appends and new rollouts arrive through one recursive inotify watch per Codex
//!   sessions directory (the `notify` crate), shared by every agent of that CODEX_HOME;
//! - the work itself (reading what was appended, forwarding events, a snapshot for the engine's
//!   view, saving the checkpoint) runs on a blocking thread, at most one run per agent at a
//!   time, with wakes during a run coalesced into one more run;
//! - MON-3: a run woken by rollout records alone builds its snapshot from the last look at the
//!   screen (records do not change the pane; the pane's own changes wake a look);
//! - MON-4: a run reads at most `MONITOR_STEP_BYTES`, ends for the dispatcher only once the
//!   driver handled its step, and a run cut at the bound is followed by another at once: one
//!   agent's burst reaches the engine one bounded step at a time;
//! - a slow tick is the safety net for lost inotify events (queue overflow, a watch that could
//!   not be set yet): attached agents are looked at every [`ATTACHED_RECHECK`], agents still
//!   without a rollout every [`UNATTACHED_RECHECK`], and every agent every [`UNWATCHED_RECHECK`]
//!   while its directory has no watch or only the screen can settle an unknown turn
//!   (`crate::monitor_recheck`); setting a watch wakes every agent of its directory.

use super::agents::{observed_inputs, AgentRuntime, Forwarded};
use crate::driver::DriverMsg;
use crate::holder::protocol::{monotonic_ms, InfoReply, Reply, Request};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use wakterm_engine::pane_look::OtherEnterLook;
use wakterm_engine::Input;

/// How long one `info_changed` call waits at the holder before answering an unchanged state.
pub const LIVENESS_WAIT: Duration = Duration::from_secs(30);
/// Pause before reconnecting to a holder that did not answer (or is gone).
pub const HOLDER_RETRY: Duration = Duration::from_secs(1);
/// A holder too old to push liveness is asked this often instead.
pub const LEGACY_HOLDER_POLL: Duration = Duration::from_secs(1);
/// After a screen wake, the next one waits at least this long (a busy TUI redraws often).
pub const SCREEN_DEBOUNCE: Duration = Duration::from_millis(250);
/// After an output wake of a managed agent (its notifications), the next one waits at least this
/// long: a streaming turn's deltas coalesce, its completion is read within this bound.
pub const MANAGED_OUTPUT_DEBOUNCE: Duration = Duration::from_millis(10);
pub use crate::monitor_recheck::{ATTACHED_RECHECK, TICK, UNATTACHED_RECHECK, UNWATCHED_RECHECK};
use crate::monitor_recheck::{next_watch_retry, watch_trusted};
/// How many times in a row a failed screen look is taken again on the tick (MON-3); after
/// that, only the pane's next push looks again.
const SCREEN_RETRIES: u8 = 3;
/// Bound of one holder reply line (an `info` reply is a few hundred bytes).
const MAX_REPLY_BYTES: u64 = 64 * 1024;

/// MON-2: what one sessions directory's watch saw of rollouts no agent tails (a new session,
/// an old one resumed): counted, so an admission's refresh rediscovers its agent's rollout only
/// when the count moved since the agent's last discovery. `None` while the directory is not
/// watched (not yet, or the watch was lost): then every refresh rediscovers, as before the
/// watch. Lost events move the count.
#[derive(Default)]
pub struct SessionsStamp {
    watching: AtomicBool,
    unclaimed: AtomicU64,
}

impl SessionsStamp {
    pub fn current(&self) -> Option<u64> {
        // The count is read first: a change counted after it makes the next refresh rediscover.
        let count = self.unclaimed.load(Ordering::SeqCst);
        self.watching.load(Ordering::SeqCst).then_some(count)
    }

    fn bump(&self) {
        self.unclaimed.fetch_add(1, Ordering::SeqCst);
    }
}

/// Why the monitor should look at something.
enum Wake {
    /// A new agent to monitor.
    Add(Arc<AgentRuntime>),
    /// The agent's holder reported a change (or could not be reached): re-read liveness.
    Liveness(String),
    /// The agent's terminal printed something: its screen (composer, dialogs) may differ.
    Screen(String),
    /// ADM-19: the agent's holder noted another writer's Enter (its `other_enter_ms`).
    OtherEnter(String, EnterNote),
    /// A file under a watched sessions directory changed.
    Path(PathBuf),
    /// A directory was created under a watched sessions directory (a new day's).
    NewDir(PathBuf),
    /// A file under a watched sessions directory was opened (MON-2).
    Opened(PathBuf),
    /// A sessions directory's watch lost events (queue overflow): what it missed is unknown.
    Overflow(PathBuf),
    /// A sessions directory itself was removed or renamed: its watch is gone until the tick
    /// sets it again.
    WatchLost(PathBuf),
    /// A sessions directory's watch reported an error (notify could not watch a new
    /// subdirectory: out of inotify watches): it no longer covers it all.
    WatchIncomplete(PathBuf),
    /// A sessions directory's watch was set (or could not be, `watcher` None; `exists`:
    /// whether the directory was there), off the reactor (`Dispatcher::watch_sessions`).
    WatchSet { dir: PathBuf, watcher: Option<notify::RecommendedWatcher>, exists: bool },
    /// A run of the agent finished.
    Done { agent_id: String, ran: RunOutcome },
    /// MON-4: a read outside the monitor (an admission's refresh) stopped at its step: run the
    /// agent to read the rest.
    ReadOn(String),
}

/// MON-4: one agent's way to ask the monitor for a run (`AgentRuntime::read_on`).
pub struct ReadOn {
    wake: mpsc::UnboundedSender<Wake>,
    agent_id: String,
}

impl ReadOn {
    pub fn ask(&self) {
        let _ = self.wake.send(Wake::ReadOn(self.agent_id.clone()));
    }
}

/// The handle the daemon adds agents through.
#[derive(Clone)]
pub struct Monitor {
    wake: mpsc::UnboundedSender<Wake>,
}

impl Monitor {
    /// Starts the dispatcher on the current runtime.
    pub fn start(inbox: mpsc::Sender<DriverMsg>) -> Monitor {
        let (wake, wakes) = mpsc::unbounded_channel();
        let dispatcher = Dispatcher::new(wake.clone(), inbox);
        tokio::spawn(dispatcher.run(wakes));
        Monitor { wake }
    }

    /// Monitors `agent` from now on (until its `stopping` flag is set).
    pub fn add(&self, agent: Arc<AgentRuntime>) {
        let _ = self.wake.send(Wake::Add(agent));
    }

    /// LIFE-3: a look at the agent's holder and screen (after a stop that failed: the monitor
    /// ran none while it was pending).
    pub fn look(&self, agent_id: &str) {
        let _ = self.wake.send(Wake::Liveness(agent_id.to_string()));
        let _ = self.wake.send(Wake::Screen(agent_id.to_string()));
    }
}

struct Watched {
    agent: Arc<AgentRuntime>,
    running: bool,
    /// Woken during a run: run once more when it ends.
    again: bool,
    /// The next run must re-read the holder's facts.
    liveness_due: bool,
    /// The next run must look at the screen.
    screen_due: bool,
    /// ADM-19: the next run reports this Enter by another writer (the holder's note) with
    /// what it reads after it.
    enter_due: Option<EnterNote>,
    checkpoint_pending: bool,
    /// MON-3: screen looks that failed in a row (retried on the tick up to [`SCREEN_RETRIES`]).
    screen_failures: u8,
    /// MON-1: a run is due once this has passed (a new subdirectory of its sessions directory:
    /// what was written in it before notify watched it woke nothing).
    look_after: Option<Instant>,
    last_run: Instant,
}

struct Dispatcher {
    wake: mpsc::UnboundedSender<Wake>,
    inbox: mpsc::Sender<DriverMsg>,
    agents: BTreeMap<String, Watched>,
    /// One recursive watch per sessions directory (None: it could not be set yet).
    watches: BTreeMap<PathBuf, Option<notify::RecommendedWatcher>>,
    /// Sessions directories whose watch is being set off the reactor (one try at a time).
    setting: std::collections::BTreeSet<PathBuf>,
    /// What a try's own watch reported before the try answered (a review found both taken
    /// for a whole watch: a directory removed meanwhile watched as if it were there).
    spoiled: BTreeMap<PathBuf, Spoiled>,
    /// Watches that reported an error (a subdirectory they could not watch): kept, since they
    /// still cover the rest, but not trusted (`due_on_tick`, the stamp) until set again whole.
    incomplete: std::collections::BTreeSet<PathBuf>,
    /// When a sessions directory that exists but could not be watched whole is tried again,
    /// and the wait after that: each failure doubles it up to `monitor_recheck::WATCH_RETRY_MAX`, since each
    /// try walks the directory and takes inotify watches other users may need.
    retry: BTreeMap<PathBuf, (Instant, Duration)>,
    /// MON-2: per sessions directory, the count its agents' refreshes compare.
    stamps: BTreeMap<PathBuf, Arc<SessionsStamp>>,
    /// Rollout path -> the agent tailing it, as of that agent's last run (inotify events are
    /// routed through it without locking every agent's view).
    tailed: BTreeMap<PathBuf, String>,
}

impl Watched {
    /// A newly added agent: its first run reads liveness and the screen.
    fn new(agent: Arc<AgentRuntime>) -> Watched {
        Watched {
            agent,
            running: false,
            again: false,
            liveness_due: true,
            screen_due: true,
            enter_due: None,
            checkpoint_pending: false,
            screen_failures: 0,
            look_after: None,
            last_run: Instant::now(),
        }
    }
}

impl Dispatcher {
    fn new(wake: mpsc::UnboundedSender<Wake>, inbox: mpsc::Sender<DriverMsg>) -> Dispatcher {
        Dispatcher {
            wake,
            inbox,
            agents: BTreeMap::new(),
            watches: BTreeMap::new(),
            setting: Default::default(),
            spoiled: BTreeMap::new(),
            incomplete: Default::default(),
            retry: BTreeMap::new(),
            stamps: BTreeMap::new(),
            tailed: BTreeMap::new(),
        }
    }

    async fn run(mut self, mut wakes: mpsc::UnboundedReceiver<Wake>) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                wake = wakes.recv() => match wake {
                    Some(wake) => self.on_wake(wake),
                    None => return,
                },
                _ = tick.tick() => self.on_tick(),
            }
            if self.inbox.is_closed() {
                return;
            }
        }
    }

    fn on_wake(&mut self, wake: Wake) {
        match wake {
            Wake::Add(agent) => {
                let agent_id = agent.record.agent_id.clone();
                let sessions = agent.record.sessions_dir();
                let stamp = self.stamps.entry(sessions.clone()).or_default().clone();
                agent.set_sessions_stamp(stamp);
                agent.set_read_on(ReadOn { wake: self.wake.clone(), agent_id: agent_id.clone() });
                self.watch_sessions(&sessions);
                tokio::spawn(watch_holder(agent.clone(), self.wake.clone()));
                self.agents.insert(agent_id.clone(), Watched::new(agent));
                self.schedule(&agent_id);
            }
            Wake::Liveness(agent_id) => {
                if let Some(watched) = self.agents.get_mut(&agent_id) {
                    watched.liveness_due = true;
                }
                self.schedule(&agent_id);
            }
            Wake::Screen(agent_id) => {
                if let Some(watched) = self.agents.get_mut(&agent_id) {
                    watched.screen_due = true;
                }
                self.schedule(&agent_id);
            }
            Wake::OtherEnter(agent_id, note) => {
                if let Some(watched) = self.agents.get_mut(&agent_id) {
                    watched.enter_due = watched.enter_due.max(Some(note));
                }
                self.schedule(&agent_id);
            }
            Wake::Path(path) => self.on_path(&path),
            Wake::ReadOn(agent_id) => self.schedule(&agent_id),
            Wake::NewDir(path) => {
                // notify watches a new subdirectory only after reporting it, so a rollout
                // created and written in it at once may wake nothing: the directory's agents
                // look now (as for any new path) and once more a tick later.
                let at = Instant::now() + TICK;
                for watched in self.agents.values_mut().filter(|w| path.starts_with(w.agent.record.codex_home())) {
                    watched.look_after = Some(at);
                }
                self.on_path(&path);
            }
            Wake::Opened(path) => self.on_opened(&path),
            Wake::Overflow(dir) => self.look_again_under(&dir),
            Wake::WatchLost(dir) => {
                if self.setting.contains(&dir) {
                    // The try's walk met it: its answer, still to come, watches nothing.
                    self.spoiled.insert(dir.clone(), Spoiled::Lost);
                }
                tracing::warn!(dir = %dir.display(), "sessions directory removed or renamed: watched again once it is back; its agents are looked at every second meanwhile");
                self.distrust_watch(&dir);
                self.watches.insert(dir.clone(), None);
                // A new directory starts over: no wait, nothing incomplete.
                self.incomplete.remove(&dir);
                self.retry.remove(&dir);
                self.look_again_under(&dir);
            }
            Wake::WatchIncomplete(dir) => match self.setting.contains(&dir) {
                // The try's walk met it (notify reports what it met before it answers): its
                // watch, still to come, is incomplete.
                true => drop(self.spoiled.entry(dir).or_insert(Spoiled::Incomplete)),
                false => self.mark_incomplete(&dir),
            },
            Wake::WatchSet { dir, watcher, exists } => self.on_watch_set(&dir, watcher, exists),
            Wake::Done { agent_id, ran } => {
                let Some(watched) = self.agents.get_mut(&agent_id) else { return };
                watched.running = false;
                self.tailed.retain(|_, tailer| *tailer != agent_id);
                if let Some(rollout) = watched.agent.rollout_path() {
                    self.tailed.insert(rollout, agent_id.clone());
                }
                watched.checkpoint_pending = ran.checkpoint_pending;
                // LIVE-1: an unknown answer changed nothing; the holder told of a change only
                // once, so the next tick asks again (a review found nothing did).
                watched.liveness_due |= ran.liveness_unknown;
                // MON-3: a screen look that failed is still due: the pane pushes its changes
                // once, so the catalog's composer stayed stale until the next output. A few
                // times only: a screen that cannot be read (a holder that answers nothing, or
                // garbage) would cost a holder call and a connection every second.
                watched.screen_failures = if ran.screen_unread { watched.screen_failures.saturating_add(1) } else { 0 };
                watched.screen_due |= ran.screen_unread && watched.screen_failures <= SCREEN_RETRIES;
                // ADM-19: a read that was no floor (cut at its step bound: the next run comes at
                // once; no rollout yet, a turn it could not tell) reports the Enter again with
                // the next run, while the Enter can still hold prompts.
                let holds = |note: &EnterNote| monotonic_ms().saturating_sub(note.noted_ms) < wakterm_engine::limits::OTHER_ENTER_GRACE_MS;
                watched.enter_due = watched.enter_due.max(ran.enter_unread.filter(holds));
                if std::mem::take(&mut watched.again) || ran.behind {
                    self.schedule(&agent_id);
                }
            }
        }
    }

    /// A change under a sessions directory: the agent tailing that file reads it; a file no
    /// agent tails may be a new (or resumed) rollout, so agents still without one look for
    /// theirs, and the directory's stamp moves (MON-2: the next admission of each of its agents
    /// rediscovers).
    fn on_path(&mut self, path: &Path) {
        if let Some(agent_id) = self.tailed.get(path).cloned() {
            // The map is as of the tailer's last run: confirm (one agent's view, not all).
            if self.agents.get(&agent_id).is_some_and(|w| w.agent.rollout_path().as_deref() == Some(path)) {
                return self.schedule(&agent_id);
            }
        }
        // Not in the map: a new file, or an agent attached by a refresh since its last run.
        let mut tailing = Vec::new();
        let mut same_home = Vec::new();
        for (agent_id, watched) in &self.agents {
            match watched.agent.rollout_path() {
                Some(rollout) if rollout == path => tailing.push(agent_id.clone()),
                _ if path.starts_with(watched.agent.record.codex_home()) => same_home.push(agent_id.clone()),
                _ => {}
            }
        }
        if tailing.is_empty() {
            self.bump_stamps_above(path);
        }
        // Nobody tails it: every agent of that CODEX_HOME looks again (rediscovering, MON-2),
        // the ones without a rollout for theirs, the others for a session they switched to.
        let targets = if tailing.is_empty() { same_home } else { tailing };
        for agent_id in targets {
            self.schedule(&agent_id);
        }
    }

    /// MON-2: a file under a sessions directory was opened. A rollout no agent tails may be
    /// an old session a Codex resumed (it may write nothing to it before its next turn), so
    /// the directory's stamp moves and the next refresh of each of its agents rediscovers;
    /// but no run is scheduled: discovery's own opens would wake them again, back to back.
    /// An open of a tailed rollout says nothing its reader does not see.
    fn on_opened(&mut self, path: &Path) {
        if self.tailed.contains_key(path) || self.agents.values().any(|w| w.agent.rollout_path().as_deref() == Some(path)) {
            return;
        }
        self.bump_stamps_above(path);
    }

    /// What happened under a sessions directory is unknown (its watch lost events, or was only
    /// just set): its stamp moves (MON-2: the next refresh of each of its agents rediscovers)
    /// and every agent of that directory looks now.
    fn look_again_under(&mut self, dir: &Path) {
        if let Some(stamp) = self.stamps.get(dir) {
            stamp.bump();
        }
        let home = dir.parent().map(Path::to_path_buf).unwrap_or_default();
        let affected: Vec<String> =
            self.agents.iter().filter(|(_, w)| w.agent.record.codex_home() == home).map(|(id, _)| id.clone()).collect();
        for agent_id in affected {
            self.schedule(&agent_id);
        }
    }

    /// MON-2: a rollout no agent tails changed under these sessions directories: the next
    /// refresh of each of their agents rediscovers.
    fn bump_stamps_above(&self, path: &Path) {
        for (dir, stamp) in &self.stamps {
            if path.starts_with(dir) {
                stamp.bump();
            }
        }
    }

    fn on_tick(&mut self) {
        self.agents.retain(|_, watched| !watched.agent.stopping.load(Ordering::SeqCst));
        self.forget_the_departed();
        let untrusted: Vec<PathBuf> =
            self.watches.iter().filter(|(dir, w)| w.is_none() || self.incomplete.contains(*dir)).map(|(dir, _)| dir.clone()).collect();
        for dir in untrusted {
            self.watch_sessions(&dir);
        }
        let due: Vec<String> = self.agents.iter().filter(|(_, watched)| self.due_on_tick(watched)).map(|(agent_id, _)| agent_id.clone()).collect();
        for agent_id in due {
            self.schedule(&agent_id);
        }
    }

    /// What only departed agents needed goes with them: their rollouts' routes, and the watch
    /// and stamp of a sessions directory no agent is left in (each watch holds an inotify
    /// instance, 128 per user by default: a long-lived daemon that saw as many CODEX_HOMEs
    /// come and go could set no more, a review found).
    fn forget_the_departed(&mut self) {
        self.tailed.retain(|_, agent_id| self.agents.contains_key(agent_id));
        let dirs: std::collections::BTreeSet<PathBuf> = self.agents.values().map(|w| w.agent.record.sessions_dir()).collect();
        self.watches.retain(|dir, _| dirs.contains(dir));
        self.incomplete.retain(|dir| dirs.contains(dir));
        self.retry.retain(|dir, _| dirs.contains(dir));
        self.stamps.retain(|dir, stamp| {
            // A departing agent may still hold it (its refreshes until it stops): untrusted.
            dirs.contains(dir) || {
                stamp.watching.store(false, Ordering::SeqCst);
                false
            }
        });
    }

    /// A sessions directory's watch no longer covers it all: refreshes of its agents
    /// rediscover (MON-2) and the tick looks at them every second (`due_on_tick`).
    fn distrust_watch(&mut self, dir: &Path) {
        if let Some(stamp) = self.stamps.get(dir) {
            stamp.watching.store(false, Ordering::SeqCst);
        }
    }

    /// Whether a sessions directory's watch covers it all.
    fn trusted_watch(&self, dir: &Path) -> bool {
        watch_trusted(self.watches.get(dir).is_some_and(Option::is_some), self.incomplete.contains(dir))
    }

    /// MON-1's safety net: a run is due when a checkpoint waits, when the last liveness probe
    /// got no facts (LIVE-1), when a live agent's screen look is still due (MON-3: the last
    /// one failed), or when a live agent was not looked at for its recheck interval
    /// (`recheck_interval`, which the simulator's model calls too).
    fn due_on_tick(&self, watched: &Watched) -> bool {
        let since = watched.last_run.elapsed();
        let watched_dir = self.trusted_watch(&watched.agent.record.sessions_dir());
        let recheck =
            crate::monitor_recheck::recheck_interval(watched.agent.recheck_soon(), watched.agent.rollout_path().is_some(), watched_dir);
        let alive = watched.agent.process_alive();
        let asked = watched.look_after.is_some_and(|at| Instant::now() >= at);
        watched.checkpoint_pending || watched.liveness_due || (alive && (watched.screen_due || asked || since >= recheck))
    }

    /// One run at a time per agent; a wake during a run asks for exactly one more.
    fn schedule(&mut self, agent_id: &str) {
        let Some(watched) = self.agents.get_mut(agent_id) else { return };
        // LIFE-3: no look while a stop ends the holder (what is due stays due, for after a
        // stop that failed); `stopping` then drops the agent, or `Monitor::look` resumes it.
        if watched.agent.stop_pending.load(Ordering::SeqCst) {
            return;
        }
        if watched.running {
            watched.again = true;
            return;
        }
        watched.running = true;
        watched.last_run = Instant::now();
        if watched.look_after.is_some_and(|at| watched.last_run >= at) {
            watched.look_after = None;
            // The second look rediscovers (MON-2): what it is for woke nothing, so nothing
            // moved the stamp since the first look used it (a review found it).
            if let Some(stamp) = self.stamps.get(&watched.agent.record.sessions_dir()) {
                stamp.bump();
            }
        }
        let liveness = std::mem::take(&mut watched.liveness_due);
        let screen = std::mem::take(&mut watched.screen_due);
        let enter = watched.enter_due.take();
        let agent = watched.agent.clone();
        let (inbox, wake) = (self.inbox.clone(), self.wake.clone());
        tokio::task::spawn_blocking(move || run_once(&agent, &inbox, Due { liveness, screen, enter }, wake));
    }

    /// Sets (or retries) the recursive watch of one sessions directory. Codex creates it on
    /// its first turn; until then (or while the watch cannot be set whole) the tick retries it
    /// and looks at the directory's agents every second (`due_on_tick`). A directory that
    /// exists but cannot be watched whole is retried after a doubling wait (`retry`). An
    /// incomplete watch is dropped before the retry: a whole one needs every inotify watch it
    /// holds again, and the limit is per user, so with both at once the retry could only fail
    /// (a review found it); its agents are on the 1 s recheck meanwhile anyway.
    fn watch_sessions(&mut self, dir: &Path) {
        if self.trusted_watch(dir) || self.setting.contains(dir) || self.retry.get(dir).is_some_and(|(at, _)| Instant::now() < *at) {
            return;
        }
        if self.incomplete.remove(dir) {
            self.watches.insert(dir.to_path_buf(), None);
        }
        // Unset until the try below answers: the tick retries it, its agents are rechecked
        // every second meanwhile (`due_on_tick`).
        self.watches.entry(dir.to_path_buf()).or_insert(None);
        self.setting.insert(dir.to_path_buf());
        // Off the reactor: notify walks the whole directory tree to watch every subdirectory
        // (seconds on a large history, a cold cache or a network file system), and the reactor
        // is the daemon's only one.
        let (wake, dir) = (self.wake.clone(), dir.to_path_buf());
        tokio::task::spawn_blocking(move || {
            let (watcher, exists) = set_watch(&dir, wake.clone());
            let _ = wake.send(Wake::WatchSet { dir, watcher, exists });
        });
    }

    /// A set watch's first error (notify may repeat one, a read error): it no longer covers
    /// the directory whole.
    fn mark_incomplete(&mut self, dir: &Path) {
        if self.watches.get(dir).is_some_and(Option::is_some) && self.incomplete.insert(dir.to_path_buf()) {
            tracing::warn!(dir = %dir.display(), "sessions watch incomplete (out of inotify watches?): set again later; its agents are looked at every second meanwhile");
            let first = next_watch_retry(None);
            self.retry.entry(dir.to_path_buf()).or_insert((Instant::now() + first, first));
            self.distrust_watch(dir);
            self.look_again_under(dir);
        }
    }

    /// The answer of a try of [`Self::watch_sessions`].
    fn on_watch_set(&mut self, dir: &Path, watcher: Option<notify::RecommendedWatcher>, exists: bool) {
        self.setting.remove(dir);
        let spoiled = self.spoiled.remove(dir);
        if !self.agents.values().any(|w| w.agent.record.sessions_dir() == dir) {
            return; // its agents departed meanwhile (`forget_the_departed`): the watch goes
        }
        // A directory removed or renamed during the try: its watch watches nothing; the tick
        // tries again (no wait: `WatchLost` started it over).
        let (watcher, exists) = match spoiled {
            Some(Spoiled::Lost) => (None, false),
            _ => (watcher, exists),
        };
        let set = watcher.is_some();
        if !set && exists {
            let wait = next_watch_retry(self.retry.get(dir).map(|(_, wait)| *wait));
            tracing::debug!(dir = %dir.display(), wait_ms = wait.as_millis() as u64, "sessions directory could not be watched whole: tried again later");
            self.retry.insert(dir.to_path_buf(), (Instant::now() + wait, wait));
        }
        let stamp = Arc::clone(self.stamps.entry(dir.to_path_buf()).or_default());
        self.watches.insert(dir.to_path_buf(), watcher);
        if set {
            self.retry.remove(dir);
            // Whatever was written before the watch was set woke nothing: every agent of the
            // directory reads what it holds now (MON-1), and rediscovers (MON-2). The stamp
            // moves there, before it counts as watched, so no refresh trusts it unmoved.
            self.look_again_under(dir);
            stamp.watching.store(true, Ordering::SeqCst);
            if spoiled == Some(Spoiled::Incomplete) {
                self.mark_incomplete(dir);
            }
        }
    }
}

/// What a try's own watch reported before the try answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spoiled {
    /// The directory was removed or renamed.
    Lost,
    /// A subdirectory could not be watched.
    Incomplete,
}

/// Sets a recursive watch of `dir` whose events wake the dispatcher (blocking: notify walks
/// the tree). None when the directory is not there (Codex creates it on its first turn) or
/// cannot be watched whole; also whether it was there.
fn set_watch(dir: &Path, wake: mpsc::UnboundedSender<Wake>) -> (Option<notify::RecommendedWatcher>, bool) {
    use notify::Watcher;
    if !dir.is_dir() {
        return (None, false);
    }
    let watched_dir = dir.to_path_buf();
    let handler = move |event: notify::Result<notify::Event>| {
        for woken in wakes_for(event, &watched_dir) {
            let _ = wake.send(woken);
        }
    };
    let watcher = notify::recommended_watcher(handler).ok().and_then(|mut watcher| {
        watcher.watch(dir, notify::RecursiveMode::Recursive).ok()?;
        Some(watcher)
    });
    let exists = watcher.is_some() || dir.is_dir();
    (watcher, exists)
}

/// What one event of a sessions directory's watch wakes (MON-1, MON-2).
/// - A change to a file (created, written, renamed, removed, its attributes): that path.
/// - A new subdirectory (a new day's): that path, and a second look a tick later, since notify
///   watches it only after reporting it: a rollout created and written in it at once woke
///   nothing until its next write, or the recheck (a review found it).
/// - An open: only the directory's stamp, no run (`Dispatcher::on_opened`). Discovery's own
///   opens (the session's first line) made a rollout no agent tails wake every agent of its
///   directory, whose runs opened it again: runs back to back for as long as it stayed open
///   (a review found it). A close: nothing (a write's own event came before it).
/// - Lost events (the kernel's queue overflowed: an event flagged for a rescan): what it
///   missed is unknown, so every agent of the directory looks now, and the stamp makes every
///   refresh of them rediscover once.
/// - A watch error (notify could not watch a new subdirectory: out of inotify watches): the
///   watch no longer covers the directory whole. It is kept (it covers the rest) but not
///   trusted: its agents are looked at every second, every one of them looks now, and the
///   tick sets a whole watch again after a doubling wait. The directory itself removed or
///   renamed: the watch is gone, and is set again once the directory is back. Counted as
///   still set, an attached agent there waited out the 30 s recheck (a review found it); a
///   watch dropped on an error was set again every second, walking the directory and taking
///   inotify watches each time (the next review found it).
fn wakes_for(event: notify::Result<notify::Event>, dir: &Path) -> Vec<Wake> {
    use notify::event::{AccessKind, CreateKind, EventKind, ModifyKind};
    match event {
        Ok(event) if event.need_rescan() => {
            tracing::debug!("sessions watch lost events (queue overflow): every agent of the directory looks");
            vec![Wake::Overflow(dir.to_path_buf())]
        }
        Ok(event) if matches!(event.kind, EventKind::Access(AccessKind::Open(_))) => event.paths.into_iter().map(Wake::Opened).collect(),
        Ok(event) if event.kind.is_access() => Vec::new(),
        Ok(event)
            if matches!(event.kind, EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))) && event.paths.iter().any(|p| p == dir) =>
        {
            vec![Wake::WatchLost(dir.to_path_buf())]
        }
        Ok(event) if matches!(event.kind, EventKind::Create(CreateKind::Folder)) => event.paths.into_iter().map(Wake::NewDir).collect(),
        Ok(event) => event.paths.into_iter().map(Wake::Path).collect(),
        Err(error) => {
            tracing::debug!(%error, "sessions watch error: the watch no longer covers the directory whole");
            vec![Wake::WatchIncomplete(dir.to_path_buf())]
        }
    }
}

/// What a run of [`run_once`] leaves for the dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunOutcome {
    /// A newer checkpoint waits to be saved (the tick runs the agent again for it).
    checkpoint_pending: bool,
    /// The liveness probe got no facts (LIVE-1): the tick asks again.
    liveness_unknown: bool,
    /// A look at the screen the run was due was not read (the holder did not answer): the
    /// screen stays due and the tick looks again (MON-3).
    screen_unread: bool,
    /// MON-4: the read stopped at its step bound: the agent runs again at once.
    behind: bool,
    /// ADM-19: the Enter the run could not report with a floor (a read cut at its step
    /// bound, no process or rollout to read, a turn it could not tell): the next run reports
    /// it again.
    enter_unread: Option<EnterNote>,
}

/// ADM-19: a holder's note of another writer's Enter (`InfoReply::other_enter_ms`, and its
/// count of such Enters, `other_enters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct EnterNote {
    noted_ms: u64,
    count: u64,
    recent: u64,
}

/// What a run must do besides reading the rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Due {
    /// Re-read the holder's facts.
    liveness: bool,
    /// Look at the screen.
    screen: bool,
    /// ADM-19: report this Enter by another writer (the holder's note), with a snapshot read
    /// after the holder told of it.
    enter: Option<EnterNote>,
}

/// One look at an agent: liveness (when due), then what its rollout appended (or, before it
/// has one, discovery), and the checkpoint. Only when something changed does it give the
/// engine a new snapshot (the catalog answers from it), and only when the screen may have
/// changed does it ask the holder for it (MON-3), so a run over an idle agent costs a few
/// local reads and no holder call, and a run over new records no holder call either.
/// The run's end reaches the dispatcher as `Wake::Done` through `wake` (see [`RunDone`]).
fn run_once(agent: &AgentRuntime, inbox: &mpsc::Sender<DriverMsg>, due: Due, wake: mpsc::UnboundedSender<Wake>) {
    let (ran, stepped) = look(agent, inbox, due);
    let done = RunDone { wake, done: Some(Wake::Done { agent_id: agent.record.agent_id.clone(), ran }) };
    if !stepped {
        return done.send();
    }
    // MON-4: the next run reads on only after the engine handled this one's step, so an
    // agent's burst reaches the engine one bounded step at a time and every other message
    // (another agent's admission, a refresh's answer) waits behind one step at most, not all
    // of them: the inbox is first come, first served, so the driver reaches this question
    // after the step, and the question tells the dispatcher. Not a wait on this thread
    // (issue 10: the answer woke it only to pass the word on, a thread hand-off per step).
    // A question the driver drops unasked (it ended) still tells it (`RunDone`'s drop).
    let _ = inbox.blocking_send(DriverMsg::Query(Box::new(move |_| done.send())));
}

/// MON-4: a run's end for the dispatcher, sent once: by [`RunDone::send`], or when dropped
/// unsent (a question the driver never reached), so no agent stays marked running.
struct RunDone {
    wake: mpsc::UnboundedSender<Wake>,
    done: Option<Wake>,
}

impl RunDone {
    fn send(self) {} // the drop sends
}

impl Drop for RunDone {
    fn drop(&mut self) {
        if let Some(done) = self.done.take() {
            let _ = self.wake.send(done);
        }
    }
}

/// One look (see [`run_once`]); also whether it sent the engine a step of events.
fn look(agent: &AgentRuntime, inbox: &mpsc::Sender<DriverMsg>, due: Due) -> (RunOutcome, bool) {
    let Due { liveness, screen: screen_due, enter } = due;
    let forwarded = if liveness { agent.forward_liveness_change(inbox) } else { Forwarded::Nothing };
    let liveness_unknown = forwarded == Forwarded::Unknown;
    let ended = RunOutcome { checkpoint_pending: false, liveness_unknown, screen_unread: false, behind: false, enter_unread: enter };
    if forwarded == Forwarded::EngineGone {
        return (ended, false);
    }
    let process_changed = forwarded == Forwarded::Changed;
    let agent_id = agent.agent_id();
    let mut guard = agent.observer.lock().expect("observer lock");
    let Some(observer) = guard.as_mut() else {
        agent.note_view(None, Err("no process runs behind the agent".to_string()));
        return (ended, false);
    };
    // MON-2: a rollout no agent tails changed since this agent's last discovery: rediscover.
    let (events, health) = agent.with_discovery_scope(|rediscover| observer.poll_health(rediscover));
    let forced = process_changed || !events.is_empty();
    let stepped = !events.is_empty();
    let behind = observer.behind();
    // Only the screen can still settle an unknown turn (a Codex still drawing its first
    // screen): such an agent's screen is read on every run. MON-3: new records alone do not
    // change the pane (its own changes wake a run with `screen_due`), so the last look holds.
    // MON-4: a cut look leaves the turn unknown for its records to settle, not the screen.
    let look_again = process_changed || screen_due || agent.last_health().as_ref() != Some(&health) || (agent.screen_decides() && !behind);
    let (sent, refreshed) = agent.last_sent();
    let changed = forced || look_again || enter.is_some() || refreshed;
    // One message, so one engine step: the read's events make one batch (EV-3).
    let mut step = observed_inputs(&agent_id, events);
    let (checkpoint, pending) = agent.checkpoint_if_due(observer);
    step.extend(checkpoint); // EV-5: after its events
    if !step.is_empty() && inbox.blocking_send(DriverMsg::Inputs(step)).is_err() {
        return (ended, false);
    }
    let mut screen_unread = false;
    let mut enter_unread = enter; // reported only by a snapshot below
    if changed {
        let (floor, screen) = match (look_again, agent.last_screen()) {
            (false, Some((text, floor))) => (floor, Some(text)),
            _ => match agent.screen_look() {
                // MON-3: the floor measured after the look (this run read the rollout before it).
                Some(look) => (agent.floor_look(&look, observer), Some(look.text)),
                None => (None, None),
            },
        };
        // A managed agent has no screen to read.
        screen_unread = screen.is_none() && !agent.record.managed;
        let snapshot = observer.monitor_snapshot(screen.as_deref(), floor.as_ref());
        let news = crate::monitor_recheck::snapshot_is_news(forced, refreshed, sent.as_ref(), &snapshot);
        agent.note_sent(observer.rollout_path(), &snapshot);
        agent.note_health(health);
        // Sent under the observer lock, after the events: never older than what the engine saw.
        // ADM-19: read after the holder told of the Enter, so what it read may all predate it
        // and anything recorded later lies past it: the Enter's floor (the engine's
        // `on_other_enter_noted`), taken before Codex records the Enter's turn.
        let floor = snapshot.read_to_end().is_some();
        enter_unread = enter.filter(|_| !floor);
        let input = match enter {
            Some(note) => {
                let enter = OtherEnterLook::noted_at(note.noted_ms, (note.count, note.recent), monotonic_ms());
                tracing::debug!(%agent_id, ago_ms = enter.ago_ms, position = snapshot.position, behind, "reporting another writer's Enter");
                Some(Input::OtherEnterNoted { agent_id, enter, snapshot })
            }
            None => news.then_some(Input::ObserverSnapshot { agent_id, snapshot }),
        };
        if let Some(input) = input {
            let _ = inbox.blocking_send(DriverMsg::Input(input));
        }
    }
    (RunOutcome { checkpoint_pending: pending, liveness_unknown, screen_unread, behind, enter_unread }, stepped)
}

/// LIVE-2: waits at the holder for a change of the agent's process and wakes the monitor on
/// each one (and whenever the holder cannot be reached: the run decides what that means,
/// LIVE-1). A holder too old for `info_changed` is asked with `info` every second instead.
async fn watch_holder(agent: Arc<AgentRuntime>, wake: mpsc::UnboundedSender<Wake>) {
    let agent_id = agent.record.agent_id.clone();
    let mut known: Option<(u64, bool)> = None;
    let mut output_end: Option<u64> = None;
    // ADM-19: the last Enter by another writer the monitor was told of (0: none; the clock
    // is the machine's, so a new holder's notes come later than an old one's). A managed
    // agent's turns name their line: its Enters are not watched.
    let mut enter_known = 0;
    let watch_enters = !agent.record.managed;
    // The screen debounce (PTY): until then output wakes nothing, but a call still waits at
    // the holder, so a process change or another writer's Enter is told at once (ADM-19: a
    // sleep here told the Enter 104-145 ms late, after Codex had recorded its turn).
    let mut quiet_until: Option<Instant> = None;
    let mut legacy = false;
    while !agent.stopping.load(Ordering::SeqCst) && !wake.is_closed() {
        if let Ok(mut connection) = HolderWatch::connect(&agent.holder_socket).await {
            loop {
                if agent.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let (answer, quiet) = match known {
                    Some((generation, alive)) if !legacy => {
                        let quiet = debounce_left(quiet_until);
                        let (wait, output_end) = match quiet {
                            Some(left) => (left, None),
                            None => (LIVENESS_WAIT, output_end),
                        };
                        let timeout_ms = u64::try_from(wait.as_micros().div_ceil(1000)).unwrap_or(u64::MAX).clamp(1, crate::holder::protocol::MAX_INFO_WAIT_MS);
                        let enter_after = watch_enters.then_some(enter_known);
                        let request = Request::InfoChanged { generation, alive, timeout_ms, output_end, enter_after };
                        (connection.call(&request, wait + HOLDER_RETRY * 5).await, quiet)
                    }
                    _ => {
                        if known.is_some() {
                            tokio::time::sleep(LEGACY_HOLDER_POLL).await;
                        }
                        (connection.call(&Request::Info, HOLDER_RETRY * 5).await, None)
                    }
                };
                match answer {
                    Ok(info) => {
                        // A note later than now is untrusted garbage (it would outrank all).
                        if let Some(noted_ms) = info.other_enter_ms.filter(|at| watch_enters && *at > enter_known && *at <= monotonic_ms()) {
                            enter_known = noted_ms;
                            let _ = wake.send(Wake::OtherEnter(agent_id.clone(), EnterNote { noted_ms, count: info.other_enters, recent: info.other_enters_recent }));
                        }
                        // A call that waited through the debounce answers at its end: output
                        // meanwhile wakes a look now, with no second call (one call per
                        // debounce, as the sleep cost; an A/B showed the watcher's p99 a little
                        // worse with two). One answered early (an Enter) keeps the debounce.
                        let quiet = quiet.filter(|_| debounce_left(quiet_until).is_some());
                        let next = Some((info.generation, info.alive));
                        if next != known {
                            known = next;
                            let _ = wake.send(Wake::Liveness(agent_id.clone()));
                        } else if quiet.is_none() && output_end.is_some_and(|end| end != info.output_end) {
                            let _ = wake.send(Wake::Screen(agent_id.clone()));
                            // A busy terminal redraws often: look at most every debounce. A
                            // managed agent's output IS its evidence (MGD-4): barely debounced,
                            // by a sleep (no Enter to watch for meanwhile).
                            match agent.record.managed {
                                true => tokio::time::sleep(MANAGED_OUTPUT_DEBOUNCE).await,
                                false => quiet_until = Some(Instant::now() + SCREEN_DEBOUNCE),
                            }
                        }
                        // During the debounce the end stays the one the last screen wake saw:
                        // output meanwhile wakes the next look as soon as it ends.
                        if quiet.is_none() {
                            output_end = Some(info.output_end);
                        }
                    }
                    // It answered (the connection is still in step): ask the old way from now on.
                    Err(HolderWatchError::Unsupported) => legacy = true,
                    Err(HolderWatchError::Failed(why)) => {
                        tracing::debug!(%agent_id, %why, "holder liveness watch broke; reconnecting");
                        break;
                    }
                }
            }
        }
        // Unreachable or broken: let the run apply LIVE-1, then try again later.
        let _ = wake.send(Wake::Liveness(agent_id.clone()));
        known = None;
        output_end = None;
        tokio::time::sleep(HOLDER_RETRY).await;
    }
}

/// The screen debounce still to run (`watch_holder`): none once less than a millisecond is
/// left, which counts as over (a 1 ms holder call would follow).
fn debounce_left(quiet_until: Option<Instant>) -> Option<Duration> {
    quiet_until.and_then(|until| until.checked_duration_since(Instant::now())).filter(|left| *left >= Duration::from_millis(1))
}

enum HolderWatchError {
    /// The holder does not know `info_changed` (an older holder still running).
    Unsupported,
    Failed(String),
}

/// One kept connection to a holder on the reactor: request line out, reply line in.
struct HolderWatch {
    reader: tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>,
    writer: tokio::net::unix::OwnedWriteHalf,
}

impl HolderWatch {
    async fn connect(socket: &Path) -> std::io::Result<HolderWatch> {
        crate::paths::verify_holder_socket(socket)?; // SEC-1: never through a link (`HolderClient`)
        let stream = tokio::time::timeout(HOLDER_RETRY * 5, tokio::net::UnixStream::connect(socket))
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out"))??;
        let (read, writer) = stream.into_split();
        Ok(HolderWatch { reader: tokio::io::BufReader::new(read), writer })
    }

    async fn call(&mut self, request: &Request, timeout: Duration) -> Result<InfoReply, HolderWatchError> {
        let failed = |what: String| HolderWatchError::Failed(what);
        let mut line = serde_json::to_vec(request).map_err(|e| failed(e.to_string()))?;
        line.push(b'\n');
        self.writer.write_all(&line).await.map_err(|e| failed(e.to_string()))?;
        let mut reply = Vec::new();
        let mut bounded = (&mut self.reader).take(MAX_REPLY_BYTES);
        match tokio::time::timeout(timeout, bounded.read_until(b'\n', &mut reply)).await {
            Ok(Ok(n)) if n > 0 && reply.ends_with(b"\n") => {}
            Ok(Ok(_)) => return Err(failed("the holder closed the connection or sent an overlong line".into())),
            Ok(Err(error)) => return Err(failed(error.to_string())),
            Err(_) => return Err(failed("no answer in time".into())),
        }
        let reply: Reply = serde_json::from_slice(&reply).map_err(|e| failed(format!("not a reply: {e}")))?;
        match (reply.ok, reply.result, reply.error) {
            (true, Some(result), _) => serde_json::from_value(result).map_err(|e| failed(e.to_string())),
            (false, _, Some(error)) if error.message.contains("not a request") => Err(HolderWatchError::Unsupported),
            (_, _, error) => Err(failed(format!("holder refused: {error:?}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::test_agents::{fake_holder, own_info, pty_agent};
    use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, EventKind, Flag, ModifyKind, RemoveKind, RenameMode};

    /// MON-2: an open of a rollout no agent tails (a Codex resuming an old session may write
    /// nothing to it before its next turn) moves its directory's stamp, so the next refresh
    /// rediscovers, but schedules no run (discovery's own opens would wake the runs again,
    /// back to back); an open of a tailed rollout moves nothing.
    #[test]
    fn mon_2_an_open_of_an_untailed_rollout_moves_the_stamp_and_runs_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let id = "3a5c7e9b-2d4f-4a6c-8e0b-1d3f5a7c9e21";
        let agent = Arc::new(pty_agent(dir.path(), id).0);
        let sessions = dir.path().join("sessions");
        let (wake, _wakes) = mpsc::unbounded_channel();
        let (inbox, _messages) = mpsc::channel(16);
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let stamp = dispatcher.stamps.entry(sessions.clone()).or_default().clone();
        stamp.watching.store(true, Ordering::SeqCst);
        dispatcher.agents.insert(id.to_string(), Watched::new(agent));
        let tailed = sessions.join("2026/12/02/rollout-tailed.jsonl");
        dispatcher.tailed.insert(tailed.clone(), id.to_string());
        let before = stamp.current();
        dispatcher.on_wake(Wake::Opened(tailed));
        assert_eq!(stamp.current(), before, "an open of a tailed rollout");
        dispatcher.on_wake(Wake::Opened(sessions.join("2026/11/30/rollout-resumed.jsonl")));
        assert_ne!(stamp.current(), before, "an open of a rollout no agent tails");
        // A scheduled run would have panicked here: no reactor to spawn it on.
        assert!(!dispatcher.agents[id].running, "no run was scheduled");
    }

    /// A dispatcher with one live PTY agent under `dir` (its sessions directory not watched),
    /// attached, nothing due, last looked at over a second ago.
    fn one_attached_agent(dir: &Path, id: &str) -> Dispatcher {
        one_attached_agent_woken(dir, id).0
    }

    /// As [`one_attached_agent`], with the dispatcher's wakes for the test to read.
    fn one_attached_agent_woken(dir: &Path, id: &str) -> (Dispatcher, mpsc::UnboundedReceiver<Wake>) {
        let agent = Arc::new(pty_agent(dir, id).0);
        agent.liveness.lock().unwrap().alive = true;
        seen_attached(&agent);
        let (wake, wakes) = mpsc::unbounded_channel();
        let (inbox, _) = mpsc::channel(16);
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let last_run = Instant::now() - UNWATCHED_RECHECK - Duration::from_millis(100);
        dispatcher.agents.insert(id.to_string(), Watched { liveness_due: false, screen_due: false, last_run, ..Watched::new(agent) });
        (dispatcher, wakes)
    }

    /// [`one_attached_agent_woken`] under a fresh directory whose sessions directory (returned)
    /// exists with a day's subdirectory; the directory lives as long as the first value.
    fn attached_with_a_sessions_dir(id: &str) -> (tempfile::TempDir, Dispatcher, mpsc::UnboundedReceiver<Wake>, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let (dispatcher, wakes) = one_attached_agent_woken(dir.path(), id);
        let sessions = dir.path().join("sessions");
        std::fs::create_dir_all(sessions.join("2026/12/05")).unwrap();
        (dir, dispatcher, wakes, sessions)
    }

    /// `watch_sessions` on a reactor, then its answer (`Wake::WatchSet`) handed back, as the
    /// dispatcher's loop does; other wakes read meanwhile are dropped. False when it tried
    /// nothing (no answer within a second).
    fn watch_sessions_now(dispatcher: &mut Dispatcher, wakes: &mut mpsc::UnboundedReceiver<Wake>, dir: &Path) -> bool {
        watch_sessions_met(dispatcher, wakes, dir, None)
    }

    /// [`watch_sessions_now`], with `met` handled before the answer: what the try's own walk
    /// reported first.
    fn watch_sessions_met(dispatcher: &mut Dispatcher, wakes: &mut mpsc::UnboundedReceiver<Wake>, dir: &Path, met: Option<Wake>) -> bool {
        let reactor = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        reactor.block_on(async {
            dispatcher.watch_sessions(dir);
            if let Some(met) = met {
                dispatcher.on_wake(met);
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
            while let Ok(Some(wake)) = tokio::time::timeout_at(deadline, wakes.recv()).await {
                if matches!(wake, Wake::WatchSet { .. }) {
                    dispatcher.on_wake(wake);
                    return true;
                }
            }
            false
        })
    }

    /// As if the agent's last run had attached it to a rollout of its sessions directory.
    fn seen_attached(agent: &AgentRuntime) {
        let rollout = agent.record.sessions_dir().join("2026/12/02/rollout-a.jsonl");
        agent.note_view(Some(&rollout), Err("not looked at".into()));
    }

    /// Runs `f` on a reactor of its own and waits for the runs it scheduled (whose `Done`
    /// goes unread: the agent stays `running` for the test to see).
    fn on_a_reactor(f: impl FnOnce()) {
        let reactor = tokio::runtime::Builder::new_current_thread().build().unwrap();
        reactor.block_on(async { f() });
    }

    /// MON-1: an agent whose sessions directory has no watch (Codex creates it on its first
    /// turn; the tick sets the watch after; or the watch was lost) is looked at every second,
    /// attached or not; the watch, once set, wakes every agent of the directory and moves its
    /// stamp (what was written before it woke nothing). Before, an attached agent there waited
    /// out the 30 s recheck: history appended right after the first turn went unread (an
    /// end-to-end test, `obs_2_a_killed_daemon_resumes_its_observer_at_the_checkpoint`, failed
    /// half its runs).
    #[test]
    fn mon_1_a_directory_without_a_watch_is_rechecked_and_its_watch_wakes_its_agents() {
        let dir = tempfile::tempdir().unwrap();
        let id = "5b7d9f1a-3c5e-4a7b-9d1f-2e4a6c8e0b13";
        let (mut dispatcher, mut wakes) = one_attached_agent_woken(dir.path(), id);
        let sessions = dir.path().join("sessions");
        assert!(watch_sessions_now(&mut dispatcher, &mut wakes, &sessions), "a watch was tried");
        assert!(dispatcher.watches[&sessions].is_none(), "no directory, no watch");
        assert!(dispatcher.retry.is_empty() && dispatcher.setting.is_empty(), "no wait before the next try: the directory is not there yet");
        assert!(dispatcher.due_on_tick(&dispatcher.agents[id]), "attached, unwatched, looked at over a second ago");

        std::fs::create_dir_all(sessions.join("2026/12/02")).unwrap();
        let stamp = dispatcher.stamps[&sessions].clone();
        let before = stamp.current();
        assert!(watch_sessions_now(&mut dispatcher, &mut wakes, &sessions), "a watch was tried");
        assert!(dispatcher.watches[&sessions].is_some(), "the directory is watched");
        assert!(dispatcher.agents[id].running, "setting the watch ran the directory's agent");
        assert_ne!(stamp.current(), before, "and moved its stamp (MON-2)");
        let watched = dispatcher.agents.get_mut(id).unwrap();
        (watched.running, watched.last_run) = (false, Instant::now() - UNWATCHED_RECHECK - Duration::from_millis(100));
        watched.agent.note_view(Some(&sessions.join("2026/12/02/rollout-a.jsonl")), Err("not looked at".into()));
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "attached and watched: the 30 s recheck");

        // A watch that reports an error (notify could not watch a new subdirectory) is kept,
        // since it covers the rest, but not trusted: the 1 s recheck, the stamp untrusted, and
        // a whole watch set again after its wait (not every second: each try walks the tree).
        on_a_reactor(|| dispatcher.on_wake(Wake::WatchIncomplete(sessions.clone())));
        assert!(dispatcher.watches[&sessions].is_some(), "the incomplete watch is kept");
        assert_eq!(stamp.current(), None, "a refresh rediscovers while the watch is not trusted");
        assert!(dispatcher.agents[id].running, "the error ran the directory's agent");
        let settle = |dispatcher: &mut Dispatcher| {
            let watched = dispatcher.agents.get_mut(id).unwrap();
            (watched.running, watched.last_run) = (false, Instant::now() - UNWATCHED_RECHECK - Duration::from_millis(100));
            seen_attached(&watched.agent);
        };
        settle(&mut dispatcher);
        assert!(dispatcher.due_on_tick(&dispatcher.agents[id]), "not trusted: the 1 s recheck");
        assert!(!watch_sessions_now(&mut dispatcher, &mut wakes, &sessions), "no try before its wait");
        assert!(dispatcher.incomplete.contains(&sessions), "not set again before its wait");
        dispatcher.on_wake(Wake::WatchIncomplete(sessions.clone())); // (again: no run, no reactor)
        assert!(!dispatcher.agents[id].running, "a repeated error wakes nothing more");
        dispatcher.retry.get_mut(&sessions).unwrap().0 = Instant::now();
        assert!(watch_sessions_now(&mut dispatcher, &mut wakes, &sessions), "tried again after its wait");
        assert!(dispatcher.incomplete.is_empty() && dispatcher.retry.is_empty(), "set whole again after it");
        assert!(stamp.current().is_some(), "trusted again");
        settle(&mut dispatcher);
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "watched whole: the 30 s recheck");

        // The directory itself removed (or renamed): the watch is gone until it is back.
        on_a_reactor(|| dispatcher.on_wake(Wake::WatchLost(sessions.clone())));
        assert!(dispatcher.watches[&sessions].is_none(), "the lost watch is unset");
        assert_eq!(stamp.current(), None, "a refresh rediscovers while unwatched");
        assert!(dispatcher.agents[id].running, "losing the watch ran the directory's agent");
        settle(&mut dispatcher);
        assert!(dispatcher.due_on_tick(&dispatcher.agents[id]), "unwatched again: the 1 s recheck");
    }

    /// MON-1: a sessions watch is set off the reactor (notify walks the whole tree; on a large
    /// history or a network file system that took seconds, and the reactor is the daemon's
    /// only one), one try per directory at a time, and the answer of a try whose agents
    /// departed meanwhile sets nothing.
    #[test]
    fn mon_1_a_watch_is_set_off_the_reactor_one_try_at_a_time() {
        let (_dir, mut dispatcher, mut wakes, sessions) = attached_with_a_sessions_dir("8c0e2a4d-6f8b-4d0f-b2d4-f6a8c0e2a457");
        let reactor = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
        let answers = reactor.block_on(async {
            dispatcher.watch_sessions(&sessions);
            assert!(dispatcher.watches[&sessions].is_none(), "not set on the reactor");
            assert!(dispatcher.setting.contains(&sessions));
            dispatcher.watch_sessions(&sessions); // a tick while the try is under way
            let mut answers = Vec::new();
            let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
            while let Ok(Some(wake)) = tokio::time::timeout_at(deadline, wakes.recv()).await {
                if let Wake::WatchSet { dir, watcher, exists } = wake {
                    answers.push((dir, watcher.is_some(), exists));
                }
            }
            answers
        });
        assert_eq!(answers, vec![(sessions.clone(), true, true)], "one try, and it set the watch");
        // Its agents departed before the answer was handled: nothing is kept.
        dispatcher.agents.clear();
        let watcher = Some(notify::recommended_watcher(|_: notify::Result<notify::Event>| {}).unwrap());
        dispatcher.on_wake(Wake::WatchSet { dir: sessions.clone(), watcher, exists: true });
        assert!(dispatcher.setting.is_empty(), "the try is over");
        assert!(dispatcher.watches.get(&sessions).is_none_or(Option::is_none), "no watch kept for a departed directory");
    }

    /// MON-1: what a try's own watch reports before the try answers (notify hands on what its
    /// walk met before it answers) decides the answer: a directory removed or renamed meanwhile
    /// is not watched (its watcher was kept as whole and trusted: nothing watched the directory
    /// Codex made again, and refreshes trusted its stamp), and an error makes the watch
    /// incomplete (it was dropped: the watch counted as whole). A review found both.
    #[test]
    fn mon_1_what_a_watch_met_before_its_try_answered_is_not_lost() {
        let id = "9d1f3b5e-7a9c-4e1a-83e5-a7b9d1f3b568";
        let (_dir, mut dispatcher, mut wakes, sessions) = attached_with_a_sessions_dir(id);
        let stamp = dispatcher.stamps.entry(sessions.clone()).or_default().clone();
        assert!(watch_sessions_met(&mut dispatcher, &mut wakes, &sessions, Some(Wake::WatchLost(sessions.clone()))));
        assert!(dispatcher.watches[&sessions].is_none(), "a lost directory is not watched");
        assert!(dispatcher.retry.is_empty() && dispatcher.setting.is_empty() && dispatcher.spoiled.is_empty(), "the tick tries again at once");
        assert_eq!(stamp.current(), None, "refreshes do not trust it");
        assert!(dispatcher.due_on_tick(&dispatcher.agents[id]) || dispatcher.agents[id].running, "its agents are looked at every second");

        assert!(watch_sessions_met(&mut dispatcher, &mut wakes, &sessions, Some(Wake::WatchIncomplete(sessions.clone()))));
        assert!(dispatcher.watches[&sessions].is_some(), "an incomplete watch is kept: it covers the rest");
        assert!(dispatcher.incomplete.contains(&sessions) && dispatcher.retry.contains_key(&sessions), "and set whole again after a wait");
        assert_eq!(stamp.current(), None, "refreshes do not trust it");

        dispatcher.retry.get_mut(&sessions).unwrap().0 = Instant::now();
        assert!(watch_sessions_now(&mut dispatcher, &mut wakes, &sessions));
        assert!(dispatcher.incomplete.is_empty() && dispatcher.spoiled.is_empty(), "a try that met nothing sets it whole");
        assert!(stamp.current().is_some(), "trusted again");
    }

    /// LIVE-1 / LIVE-2: a run whose liveness probe got no facts (here a garbled answer)
    /// changes nothing and says so; the dispatcher then keeps the probe due, and the tick
    /// runs the agent again for it, even one it would not otherwise look at for 30 s. The
    /// holder pushes a change once: without this, nothing asked again (a review found it).
    #[test]
    fn live_1_an_unknown_liveness_is_asked_again_on_the_next_tick() {
        let dir = tempfile::tempdir().unwrap();
        let id = "8e2f4a6c-1b3d-4e5f-9a7b-0c2d4e6f8a10";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 1, |_| r#""not an info answer""#.to_string());
        let agent = Arc::new(agent);
        let (inbox, _messages) = mpsc::channel(16);
        let ran = run_without_a_step(&agent, &inbox, due(true, false));
        assert_eq!(ran, RunOutcome { checkpoint_pending: false, liveness_unknown: true, screen_unread: false, behind: false, enter_unread: None });
        assert_eq!(agent.liveness.lock().unwrap().process, None, "nothing changed");
        assert_eq!(holder.join().unwrap().len(), 1);

        let (wake, _wakes) = mpsc::unbounded_channel();
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let watched = Watched { running: true, liveness_due: false, screen_due: false, ..Watched::new(Arc::clone(&agent)) }; // mid-run, its due flags taken
        dispatcher.agents.insert(id.to_string(), watched);
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "just looked at, nothing waits");
        dispatcher.on_wake(Wake::Done { agent_id: id.to_string(), ran });
        let watched = &dispatcher.agents[id];
        assert!(watched.liveness_due && !watched.running);
        assert!(dispatcher.due_on_tick(watched), "the next tick asks again");
    }

    /// MON-1: a new subdirectory of a sessions directory (a new day's) makes its agents look
    /// now and once more a tick later: notify watches it only after reporting it, so a rollout
    /// created and written in it at once woke nothing until its next write, or the recheck
    /// (30 s for an attached agent; a review found it).
    #[test]
    fn mon_1_a_new_day_directory_is_looked_at_again_a_tick_later() {
        let dir = tempfile::tempdir().unwrap();
        let id = "8c0e2a4b-6d8f-4e0a-b2c4-d6e8f0a2b457";
        let mut dispatcher = one_attached_agent(dir.path(), id);
        let sessions = dir.path().join("sessions");
        dispatcher.watches.insert(sessions.clone(), Some(notify::recommended_watcher(|_: notify::Result<notify::Event>| {}).unwrap()));
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "attached and watched: the 30 s recheck");

        on_a_reactor(|| dispatcher.on_wake(Wake::NewDir(sessions.join("2026/12/03"))));
        assert!(dispatcher.agents[id].running, "the new directory's agent looks now");
        let watched = dispatcher.agents.get_mut(id).unwrap();
        watched.running = false;
        seen_attached(&watched.agent);
        assert!(watched.look_after.is_some(), "and once more later");
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "not before a tick has passed");
        dispatcher.agents.get_mut(id).unwrap().look_after = Some(Instant::now() - Duration::from_millis(1)); // a tick later
        assert!(dispatcher.due_on_tick(&dispatcher.agents[id]), "a tick later");
        let stamp = dispatcher.stamps.entry(sessions.clone()).or_default().clone();
        let before = stamp.unclaimed.load(Ordering::SeqCst);
        on_a_reactor(|| dispatcher.schedule(id));
        assert_eq!(dispatcher.agents[id].look_after, None, "that run was the look asked for");
        assert_ne!(stamp.unclaimed.load(Ordering::SeqCst), before, "and it rediscovers (MON-2): nothing else moved the stamp");
    }

    /// MON-1: an agent's departure (it is stopping) takes what only it needed: its rollout's
    /// route, and the watch and stamp of a sessions directory no agent is left in; another
    /// agent's directory keeps its own.
    #[test]
    fn mon_1_a_departed_agent_leaves_no_watch_or_route_behind() {
        let (gone, kept) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (gone_id, kept_id) = ("6a8c0e2b-4d6f-4b8d-a0c2-e4f6a8c0e235", "7b9d1f3c-5e7a-4c9e-b1d3-f5a7b9d1f346");
        let (wake, _wakes) = mpsc::unbounded_channel();
        let (inbox, _messages) = mpsc::channel(16);
        let mut dispatcher = Dispatcher::new(wake, inbox);
        for (dir, id) in [(&gone, gone_id), (&kept, kept_id)] {
            let agent = Arc::new(pty_agent(dir.path(), id).0);
            let sessions = dir.path().join("sessions");
            dispatcher.stamps.entry(sessions.clone()).or_default();
            dispatcher.watches.insert(sessions.clone(), None);
            dispatcher.tailed.insert(sessions.join("2026/12/02/rollout.jsonl"), id.to_string());
            dispatcher.agents.insert(id.to_string(), Watched { liveness_due: false, screen_due: false, ..Watched::new(agent) });
        }
        dispatcher.agents[gone_id].agent.stopping.store(true, Ordering::SeqCst);
        // (A run is due for neither: nothing is due, no process lives; the kept directory's
        // watch is tried again off the reactor.)
        on_a_reactor(|| dispatcher.on_tick());
        assert_eq!(dispatcher.agents.keys().collect::<Vec<_>>(), vec![kept_id]);
        let kept_dir = kept.path().join("sessions");
        assert_eq!(dispatcher.watches.keys().collect::<Vec<_>>(), vec![&kept_dir], "the departed directory's watch is gone");
        assert_eq!(dispatcher.stamps.keys().collect::<Vec<_>>(), vec![&kept_dir]);
        assert_eq!(dispatcher.tailed.values().collect::<Vec<_>>(), vec![kept_id], "the departed agent's route is gone");
    }

    /// LIFE-3: while `agent stop` ends an agent's holder the monitor runs no look at it (what
    /// is due stays due) and keeps it; a stop that failed resumes its looks. The agent used to
    /// be dropped at the stop's start, so one whose stop failed (`agent_stop_failed`, the agent
    /// stays) was in the catalog with nobody watching it.
    #[test]
    fn life_3_a_pending_stop_pauses_the_agents_looks_and_a_failed_one_resumes_them() {
        let dir = tempfile::tempdir().unwrap();
        let id = "5f7b9d1e-3a5c-4e7f-a9b1-d3f5a7c9e1b4";
        let (wake, _wakes) = mpsc::unbounded_channel();
        let (inbox, _messages) = mpsc::channel(16);
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let agent = Arc::new(pty_agent(dir.path(), id).0);
        dispatcher.agents.insert(id.to_string(), Watched { liveness_due: true, screen_due: true, ..Watched::new(agent.clone()) });
        agent.stop_pending.store(true, Ordering::SeqCst);
        on_a_reactor(|| dispatcher.schedule(id));
        dispatcher.on_tick();
        let watched = &dispatcher.agents[id];
        assert!(!watched.running, "no look while the stop is pending");
        assert!(watched.liveness_due && watched.screen_due, "what was due stays due");
        agent.stop_pending.store(false, Ordering::SeqCst); // the stop failed
        on_a_reactor(|| dispatcher.on_wake(Wake::Liveness(id.to_string())));
        assert!(dispatcher.agents[id].running, "the agent is still monitored, and looked at now");
    }

    /// MON-3: a run whose screen look got no answer (here a garbled one) says so; the
    /// dispatcher keeps the look due, and the tick runs the live agent again for it. The pane
    /// pushes a change once: the catalog's composer stayed stale until the next output (a
    /// review found it).
    #[test]
    fn mon_3_a_failed_screen_look_is_taken_again_on_the_next_tick() {
        let dir = tempfile::tempdir().unwrap();
        let id = "2c4e6a8b-0d1f-4a3c-9e5b-7d9f1b3c5e24";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 2, |line| match line.contains("screen") {
            true => r#""not a screen""#.to_string(),
            false => own_info(0),
        });
        let agent = Arc::new(agent);
        let (inbox, _messages) = mpsc::channel(16);
        let ran = run_without_a_step(&agent, &inbox, due(true, true));
        assert_eq!(ran, RunOutcome { checkpoint_pending: false, liveness_unknown: false, screen_unread: true, behind: false, enter_unread: None });
        assert!(agent.process_alive(), "the process was read");
        let asked = holder.join().unwrap();
        assert!(asked.len() == 2 && asked[1].contains("screen"), "{asked:?}");

        let (wake, _wakes) = mpsc::unbounded_channel();
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let watched = Watched { running: true, liveness_due: false, screen_due: false, ..Watched::new(Arc::clone(&agent)) }; // mid-run, its due flags taken
        dispatcher.agents.insert(id.to_string(), watched);
        dispatcher.watches.insert(dir.path().join("sessions"), None); // (its recheck is 1 s: just looked at)
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "just looked at, nothing waits");
        dispatcher.on_wake(Wake::Done { agent_id: id.to_string(), ran });
        let watched = &dispatcher.agents[id];
        assert!(watched.screen_due && !watched.running);
        assert!(dispatcher.due_on_tick(watched), "the next tick looks again");
        // A screen that cannot be read is not asked for every second for ever.
        for retry in 2..=SCREEN_RETRIES + 1 {
            let watched = dispatcher.agents.get_mut(id).unwrap();
            (watched.running, watched.screen_due) = (true, false);
            dispatcher.on_wake(Wake::Done { agent_id: id.to_string(), ran });
            assert_eq!(dispatcher.agents[id].screen_due, retry <= SCREEN_RETRIES, "failure {retry}");
        }
        assert!(!dispatcher.due_on_tick(&dispatcher.agents[id]), "after the retries, only the pane's next push looks");
    }

    /// MON-1: the engine holds the snapshot the monitor sent last unless a refresh's view came
    /// since, which it may or may not have applied (not one answered late over a newer monitor
    /// snapshot, ADM-3). So the first run after a refresh comes within a second
    /// (`recheck_soon`) and sends its snapshot whatever it is; any other run sends only what
    /// differs from what was sent. Compared with the latest view, a late refresh's idle view
    /// hid the news from an engine holding a busy one (an exploration: the catalog said `busy`
    /// for good).
    #[test]
    fn mon_1_the_first_run_after_a_refresh_sends_its_snapshot() {
        use wakterm_engine::{ObserverSnapshot, TurnState};
        let dir = tempfile::tempdir().unwrap();
        let id = "0b3d5f7a-9c1e-4b2d-8f4a-6c8e0a2b4d61";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 16, screen_or_info);
        let mut rollout = session_s1(dir.path());
        for line in [event(r#""type":"task_started","turn_id":"t1""#), event(r#""type":"task_complete","turn_id":"t1","last_agent_message":"ok""#)] {
            rollout.write_all(line.as_bytes()).unwrap();
        }
        let (inbox, mut messages) = mpsc::channel(16);
        let mut snapshots_sent = |due: Due| {
            let (_, got) = run_as_driver(&agent, &inbox, &mut messages, due);
            got.into_iter().filter(|m| matches!(m, Sent::Input(Input::ObserverSnapshot { .. }))).count()
        };
        assert_eq!(snapshots_sent(due(true, true)), 1, "the first snapshot is news");
        let (seen, refreshed) = agent.last_sent();
        let seen = seen.expect("the run noted what it sent");
        assert!(!refreshed && matches!(seen.turn, TurnState::Idle { .. }), "{seen:?}");
        assert!(!agent.recheck_soon(), "an idle screen and nothing since: the long recheck");
        assert_eq!(snapshots_sent(due(false, true)), 0, "nothing new");

        // A refresh saw what was sent: the engine may hold it or something else; sent again,
        // soon, and from the last look (no screen call is due).
        agent.note_refreshed_view(None, Ok(seen.clone()));
        assert!(agent.recheck_soon(), "a refresh came since the last snapshot");
        assert_eq!(snapshots_sent(due(false, false)), 1, "the first run after a refresh");
        assert_eq!(agent.last_sent(), (Some(seen.clone()), false));
        assert!(!agent.recheck_soon());

        // What the stream sent differs from the run's: sent.
        agent.note_sent(None, &ObserverSnapshot { turn: TurnState::Busy { turn: None }, ..seen.clone() });
        assert_eq!(snapshots_sent(due(false, true)), 1, "differs from what was sent");
        drop(agent); // closes the holder connection
        let asked = holder.join().unwrap();
        assert_eq!(asked.iter().filter(|line| line.contains("screen")).count(), 3, "{asked:?}");
    }

    /// MON-3: an agent held busy by its screen alone (a `Working` screen over an idle rollout:
    /// `Busy` naming no turn) has its screen looked at on every run and is rechecked every
    /// second, as one whose turn is unknown; a turn the rollout names does not. A busy screen
    /// held until the pane's next push, and a push missed (a holder stopped and continued
    /// while its watch reconnected) held an idle agent `busy` for good (a hostile run).
    #[test]
    fn mon_3_a_turn_only_the_screen_holds_busy_is_looked_at_again() {
        use wakterm_engine::{ObserverSnapshot, TurnState};
        let dir = tempfile::tempdir().unwrap();
        let id = "6d8f0b2c-4e6a-4c8e-8a0c-2e4a6c8e0a46";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 2, |line| match line.contains("screen") {
            true => r#""not a screen""#.to_string(),
            false => own_info(0),
        });
        let (inbox, _messages) = mpsc::channel(16);
        run_without_a_step(&agent, &inbox, due(true, true));
        holder.join().unwrap();
        assert!(agent.process_alive(), "the process was read");
        let with_turn = |turn: TurnState| {
            let snapshot = ObserverSnapshot { turn, ..agent.last_snapshot().and_then(Result::ok).expect("a snapshot was noted") };
            agent.note_sent(None, &snapshot);
            (agent.screen_decides(), crate::monitor_recheck::recheck_interval(agent.screen_decides(), true, true))
        };
        assert_eq!(with_turn(TurnState::Busy { turn: None }), (true, crate::monitor_recheck::UNWATCHED_RECHECK), "busy by the screen alone");
        assert_eq!(with_turn(TurnState::Unknown), (true, crate::monitor_recheck::UNWATCHED_RECHECK));
        let named = TurnState::Busy { turn: Some(wakterm_engine::TurnId("turn-1".to_string())) };
        assert_eq!(with_turn(named), (false, ATTACHED_RECHECK), "a turn the rollout names");
        assert_eq!(with_turn(TurnState::Idle { last_completed: None }), (false, ATTACHED_RECHECK));
    }

    /// MON-3: a look kept from before a turn's end does not hold the ended turn busy: every
    /// turn running at the look has ended once a turn-end record written after it is read. A
    /// holder stopped (SIGSTOP) while its turn ended left the catalog `busy`, `turn_active`,
    /// for as long as it was stopped (a hostile run: 18 s of a 20 s stop): the run that read
    /// the end kept the look from during the turn, and its looks again got no answer. A look
    /// taken after the end was written still counts its `Working` (the TUI may have started a
    /// turn the rollout does not show yet).
    #[test]
    fn mon_3_a_look_from_before_a_turns_end_does_not_hold_it_busy() {
        use wakterm_engine::{ObserverSnapshot, TurnState};
        const WORKING: &str = r#"{"lines":["• Working (3s • esc to interrupt)","","› Ask Codex to do anything","","  mock-model default · ~/project"],"cursor":{"row":2,"col":2},"output_offset":0,"cols":80,"rows":24,"bracketed_paste":true,"alternate_screen":false}"#;
        let dir = tempfile::tempdir().unwrap();
        let id = "3e5a7c9e-1b3d-4f5a-8c7e-9a1b3c5d7e9f";
        let (agent, paths) = pty_agent(dir.path(), id);
        // Two answers (the liveness, one look), then the holder answers nothing more.
        let holder = fake_holder(&paths, id, 2, |line| match line.contains("screen") {
            true => WORKING.to_string(),
            false => own_info(0),
        });
        let mut rollout = session_s1(dir.path());
        rollout.write_all(event(r#""type":"task_started","turn_id":"t1""#).as_bytes()).unwrap();
        let (inbox, mut messages) = mpsc::channel(16);
        let mut snapshot_sent = |due: Due| -> ObserverSnapshot {
            let (_, got) = run_as_driver(&agent, &inbox, &mut messages, due);
            let mut snapshots = got.into_iter().rev().filter_map(|m| match m {
                Sent::Input(Input::ObserverSnapshot { snapshot, .. }) => Some(snapshot),
                _ => None,
            });
            snapshots.next().expect("the run sent a snapshot") // the last one
        };
        let during = snapshot_sent(due(true, true));
        assert_eq!(during.turn, TurnState::Busy { turn: Some(wakterm_engine::TurnId("t1".into())) });
        assert_eq!(holder.join().unwrap().len(), 2, "the look was taken during the turn");
        rollout.write_all(event(r#""type":"task_complete","turn_id":"t1","last_agent_message":"ok""#).as_bytes()).unwrap();
        let after = snapshot_sent(due(false, false));
        assert!(matches!(after.turn, TurnState::Idle { .. }), "the look's Working is the ended turn's: {:?}", after.turn);
        assert_eq!(during.composer, wakterm_engine::Composer::Empty);
        assert_eq!(after.composer, wakterm_engine::Composer::Unknown, "the look's composer is as stale as its Working");
        // The same look, had the rollout already held the end when it was taken: busy.
        let guard = agent.observer.lock().unwrap();
        let observer = guard.as_ref().expect("an observer");
        let floor = observer.look_floor().expect("attached");
        let text = "• Working (3s • esc to interrupt)\n\n› Ask Codex to do anything\n\n  mock-model default · ~/project"; // WORKING's lines
        assert_eq!(observer.monitor_snapshot(Some(text), Some(&floor)).turn, TurnState::Busy { turn: None });
        assert_eq!(observer.monitor_snapshot(Some(text), None).turn, TurnState::Busy { turn: None }, "no floor: the Working counts");
    }

    /// MON-1 / MON-2: what a sessions watch's events wake. An open is only an open (the
    /// dispatcher moves the stamp for it, below), a close nothing; a change wakes its path; lost
    /// events, which notify reports as an event flagged for a rescan, are an overflow of the
    /// directory (they used to wake nothing: a flagged event has no path); an error, or the
    /// directory itself removed or renamed, loses the watch (an error used to count as an
    /// overflow, the watch as still set).
    #[test]
    fn mon_2_a_watch_wakes_on_changes_and_losses_never_on_opens() {
        let dir = Path::new("/home/u/.codex/sessions");
        let file = dir.join("2026/12/02/rollout-x.jsonl");
        let event = |kind| Ok(notify::Event::new(kind).add_path(file.clone()));
        let woken = |event| -> Vec<String> {
            wakes_for(event, dir)
                .into_iter()
                .map(|wake| match wake {
                    Wake::Path(path) => format!("path {}", path.display()),
                    Wake::NewDir(path) => format!("dir {}", path.display()),
                    Wake::Opened(path) => format!("opened {}", path.display()),
                    Wake::Overflow(path) => format!("overflow {}", path.display()),
                    Wake::WatchLost(path) => format!("lost {}", path.display()),
                    Wake::WatchIncomplete(path) => format!("incomplete {}", path.display()),
                    _ => "other".to_string(),
                })
                .collect()
        };
        let path = format!("path {}", file.display());
        let overflow = format!("overflow {}", dir.display());
        assert_eq!(woken(event(EventKind::Access(AccessKind::Open(AccessMode::Any)))), vec![format!("opened {}", file.display())]);
        assert_eq!(woken(event(EventKind::Access(AccessKind::Close(AccessMode::Write)))), Vec::<String>::new());
        assert_eq!(woken(event(EventKind::Modify(ModifyKind::Data(DataChange::Any)))), vec![path.clone()]);
        assert_eq!(woken(event(EventKind::Create(CreateKind::File))), vec![path]);
        let day = dir.join("2026/12/03");
        assert_eq!(woken(Ok(notify::Event::new(EventKind::Create(CreateKind::Folder)).add_path(day.clone()))), vec![format!("dir {}", day.display())]);
        assert_eq!(woken(Ok(notify::Event::new(EventKind::Other).set_flag(Flag::Rescan))), vec![overflow]);
        assert_eq!(woken(Err(notify::Error::generic("out of inotify watches"))), vec![format!("incomplete {}", dir.display())]);
        let lost = vec![format!("lost {}", dir.display())];
        assert_eq!(woken(Ok(notify::Event::new(EventKind::Remove(RemoveKind::Folder)).add_path(dir.to_path_buf()))), lost);
        assert_eq!(woken(Ok(notify::Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::From))).add_path(dir.to_path_buf()))), lost);
        assert_eq!(woken(event(EventKind::Remove(RemoveKind::File))), vec![format!("path {}", file.display())], "a file's removal");
    }
    use std::io::Write;
    use wakterm_engine::ObserverEvent;

    const SCREEN: &str = r#"{"lines":["> "],"cursor":{"row":0,"col":2},"output_offset":0,"cols":80,"rows":24,"bracketed_paste":true,"alternate_screen":false}"#;

    /// A fake holder's answer: the empty composer [`SCREEN`] to a screen call, this process's
    /// `info` to anything else.
    fn screen_or_info(line: &str) -> String {
        match line.contains("screen") {
            true => SCREEN.to_string(),
            false => own_info(0),
        }
    }

    /// Rollout `s1` of a session in `dir` (its sessions directory and working directory), as
    /// Codex starts it: its `session_meta` line, open for appending.
    fn session_s1(dir: &Path) -> std::fs::File {
        let day = dir.join("sessions/2026/12/02");
        std::fs::create_dir_all(&day).unwrap();
        let mut rollout = std::fs::OpenOptions::new().create(true).append(true).open(day.join("rollout-2026-12-02T10-00-00-s1.jsonl")).unwrap();
        let cwd = serde_json::to_string(&dir.display().to_string()).unwrap();
        rollout.write_all(format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"s1\",\"cwd\":{cwd}}}}}\n").as_bytes()).unwrap();
        rollout
    }

    use crate::observer::test_rollouts::event;

    /// What the monitor sent: one input, or one step of several.
    #[derive(Debug)]
    #[allow(clippy::large_enum_variant)] // a test's record, as the driver's own message is
    enum Sent {
        Input(Input),
        Step(Vec<Input>),
        /// MON-4: the run asked whether the driver reached this point (answered).
        Handled,
    }

    /// Runs [`run_once`] on a thread of its own while this one plays the driver: it answers
    /// the run's questions and records every message, in order, until the run returned.
    /// The run's outcome is the one its end told the dispatcher (MON-4: only after the
    /// driver handled the run's step, when it sent one).
    fn run_as_driver(agent: &AgentRuntime, inbox: &mpsc::Sender<DriverMsg>, messages: &mut mpsc::Receiver<DriverMsg>, due: Due) -> (RunOutcome, Vec<Sent>) {
        let engine = wakterm_engine::Engine::new();
        let (wake, mut wakes) = mpsc::unbounded_channel();
        std::thread::scope(|scope| {
            let run = scope.spawn(|| run_once(agent, inbox, due, wake));
            let mut got = Vec::new();
            loop {
                match messages.try_recv() {
                    Ok(DriverMsg::Query(query)) => {
                        assert!(wakes.is_empty(), "MON-4: the run's end waits for the driver to handle its step");
                        query(&engine);
                        got.push(Sent::Handled);
                    }
                    Ok(DriverMsg::Input(input)) => got.push(Sent::Input(input)),
                    Ok(DriverMsg::Inputs(step)) => got.push(Sent::Step(step)),
                    Ok(_) => panic!("the monitor sends only observer inputs and questions"),
                    Err(_) if run.is_finished() => break,
                    Err(_) => std::thread::sleep(Duration::from_millis(1)),
                }
            }
            run.join().unwrap();
            got.extend(sent(messages));
            (the_runs_end(&mut wakes), got)
        })
    }

    /// What a run's end told the dispatcher; panics when it told nothing (yet).
    fn the_runs_end(wakes: &mut mpsc::UnboundedReceiver<Wake>) -> RunOutcome {
        match wakes.try_recv() {
            Ok(Wake::Done { ran, .. }) => ran,
            Ok(_) => panic!("the run's end is a `Done`"),
            Err(error) => panic!("the run's end reached no dispatcher: {error:?}"),
        }
    }

    /// What a run is due besides its read: liveness, the screen, no Enter to report.
    fn due(liveness: bool, screen: bool) -> Due {
        Due { liveness, screen, enter: None }
    }

    /// A run that sends the driver no step: its end reaches the dispatcher at once.
    fn run_without_a_step(agent: &AgentRuntime, inbox: &mpsc::Sender<DriverMsg>, due: Due) -> RunOutcome {
        let (wake, mut wakes) = mpsc::unbounded_channel();
        run_once(agent, inbox, due, wake);
        the_runs_end(&mut wakes)
    }

    /// Everything the monitor sent so far, in order.
    fn sent(inbox: &mut mpsc::Receiver<DriverMsg>) -> Vec<Sent> {
        std::iter::from_fn(|| inbox.try_recv().ok())
            .map(|message| match message {
                DriverMsg::Input(input) => Sent::Input(input),
                DriverMsg::Inputs(step) => Sent::Step(step),
                _ => panic!("the monitor sends only observer inputs (its questions are answered by `run_as_driver`)"),
            })
            .collect()
    }

    /// The observer events of one step, in order; panics on anything else in it.
    fn observed(step: &[Input]) -> Vec<&ObserverEvent> {
        step.iter()
            .map(|input| match input {
                Input::Observed { event, .. } => event,
                other => panic!("a step of observed events has {other:?}"),
            })
            .collect()
    }

    /// EV-3 / EV-5 / MON-3 (`run_once`): one look of the monitor reaches the engine as one
    /// step, the read's events in the rollout's order, then the checkpoint that covers them;
    /// the snapshot follows on its own. A look within the checkpoint's interval sends its
    /// events without one and says a newer checkpoint waits. This test process is the agent's
    /// "Codex": it holds the rollout open, and a fake holder names it as the pane's process.
    #[test]
    fn ev_3_a_monitor_look_is_one_step_with_its_checkpoint_last() {
        let dir = tempfile::tempdir().unwrap();
        let id = "5d1c3e7a-9b2f-4d6e-8a1c-2f4e6b8d0a13";
        let (agent, paths) = pty_agent(dir.path(), id);
        // Two holder calls only: the liveness probe and the first run's screen look.
        let holder = fake_holder(&paths, id, 2, screen_or_info);
        let mut rollout = session_s1(dir.path());
        for line in [
            event(r#""type":"task_started","turn_id":"t1""#),
            event(r#""type":"user_message","turn_id":"t1","message":"hi""#),
            event(r#""type":"task_complete","turn_id":"t1","last_agent_message":"ok""#),
        ] {
            rollout.write_all(line.as_bytes()).unwrap();
        }
        let (inbox, mut messages) = mpsc::channel(16);

        let started = Instant::now();
        let (ran, first) = run_as_driver(&agent, &inbox, &mut messages, due(true, false));
        assert_eq!(ran, RunOutcome { checkpoint_pending: false, liveness_unknown: false, screen_unread: false, behind: false, enter_unread: None }, "the first checkpoint went out at once");
        assert_eq!(first.len(), 4, "the new facts, the look's step, the snapshot, the wait for the step (MON-4): {first:?}");
        assert!(matches!(first[3], Sent::Handled), "{:?}", first[3]);
        assert!(matches!(&first[0], Sent::Step(step) if matches!(step.as_slice(), [Input::AgentUpserted(_)])), "{:?}", first[0]);
        let Sent::Step(step) = &first[1] else { panic!("the look is one step: {:?}", first[1]) };
        let (checkpoint, events) = step.split_last().unwrap();
        assert!(matches!(checkpoint, Input::ObserverCheckpoint { .. }), "the checkpoint comes last (EV-5): {step:?}");
        let events = observed(events);
        assert!(matches!(events.first(), Some(ObserverEvent::Attached { .. })), "{events:?}");
        assert!(events.iter().any(|e| matches!(e, ObserverEvent::TurnStarted { .. })), "{events:?}");
        assert!(matches!(events.last(), Some(ObserverEvent::TurnCompleted { .. })), "{events:?}");
        let positions: Vec<u64> = events.iter().filter_map(|e| e.position()).collect();
        assert!(positions.windows(2).all(|w| w[0] <= w[1]), "the rollout's order: {positions:?}");
        assert!(matches!(&first[2], Sent::Input(Input::ObserverSnapshot { .. })), "{:?}", first[2]);

        // The next turn: its events make one step, and no checkpoint is due yet (unless this
        // machine took the whole interval since the first one: then it comes last).
        rollout.write_all(event(r#""type":"task_started","turn_id":"t2""#).as_bytes()).unwrap();
        rollout.write_all(event(r#""type":"user_message","turn_id":"t2","message":"again""#).as_bytes()).unwrap();
        let (ran, second) = run_as_driver(&agent, &inbox, &mut messages, due(false, false));
        let pending = ran.checkpoint_pending;
        let within_interval = started.elapsed() < Duration::from_millis(crate::observer_checkpoint::CHECKPOINT_INTERVAL_MS);
        assert_eq!(second.len(), 3, "the look's step, the snapshot, the wait: {second:?}");
        let Sent::Step(step) = &second[0] else { panic!("the look is one step: {:?}", second[0]) };
        let step = match step.split_last() {
            Some((Input::ObserverCheckpoint { .. }, events)) if !within_interval => events,
            _ => {
                assert!(pending || !within_interval, "a newer checkpoint waits for its interval");
                step.as_slice()
            }
        };
        let events = observed(step);
        assert!(matches!(events.as_slice(), [ObserverEvent::TurnStarted { .. }, ObserverEvent::UserMessage { .. }]), "{events:?}");
        assert!(matches!(&second[1], Sent::Input(Input::ObserverSnapshot { .. })), "{:?}", second[1]);

        drop(agent); // closes the kept connection: the fake holder's loop ends
        let asked = holder.join().unwrap();
        assert_eq!(asked.len(), 2, "{asked:?}");
    }

    /// MON-4: a burst is read in steps of about `MONITOR_STEP_BYTES`: a run stops past the
    /// bound, says it is behind, and its end reaches the dispatcher only after the driver
    /// handled its step; the
    /// dispatcher then runs the agent again at once. One look used to read up to 64 pages (a
    /// review: 100 messages of 1.9 MB, one step that held every other agent's admission).
    #[test]
    fn mon_4_a_burst_is_read_in_bounded_steps_each_handled_before_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let id = "6e8a0c2e-4f6a-4b8c-9e0a-3b5d7f9a1c35";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 64, screen_or_info);
        let mut rollout = session_s1(dir.path());
        let burst = |rollout: &mut std::fs::File, turn: &str| crate::observer::test_rollouts::burst(rollout, turn, true);
        let (inbox, mut messages) = mpsc::channel(16);
        let messages_of = |sent: &[Sent]| -> usize {
            let steps = sent.iter().filter_map(|s| match s {
                Sent::Step(step) => Some(step),
                _ => None,
            });
            steps.flatten().filter(|i| matches!(i, Input::Observed { event: ObserverEvent::AgentMessage { .. }, .. })).count()
        };
        // A look that attaches is not cut (after a restart the engine's resume replays from an
        // armed cursor: what a cut first look left below it would never be reported).
        burst(&mut rollout, "t1");
        let (attaching, sent) = run_as_driver(&agent, &inbox, &mut messages, due(true, false));
        assert!(!attaching.behind && messages_of(&sent) == 3, "the attaching look reads on: {attaching:?}");

        burst(&mut rollout, "t2");
        let (first, sent) = run_as_driver(&agent, &inbox, &mut messages, due(false, false));
        assert!(first.behind, "3 MiB read, 1.5 more written: behind");
        assert_eq!(messages_of(&sent), 2, "the first step stops at the page that passes MONITOR_STEP_BYTES (2 MiB)");
        assert!(matches!(sent.last(), Some(Sent::Handled)), "the run ended after its step was handled: {sent:?}");
        let (second, sent) = run_as_driver(&agent, &inbox, &mut messages, due(false, false));
        assert!(!second.behind, "the rest read");
        assert_eq!(messages_of(&sent), 1);
        assert!(matches!(sent.last(), Some(Sent::Handled)), "{sent:?}");

        // The dispatcher runs an agent that is behind again at once.
        let (wake, _wakes) = mpsc::unbounded_channel();
        let agent = Arc::new(agent);
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let watched = Watched { running: true, liveness_due: false, screen_due: false, ..Watched::new(Arc::clone(&agent)) };
        dispatcher.agents.insert(id.to_string(), watched);
        dispatcher.on_wake(Wake::Done { agent_id: id.to_string(), ran: second });
        assert!(!dispatcher.agents[id].running, "caught up: nothing more to run");
        on_a_reactor(|| dispatcher.on_wake(Wake::Done { agent_id: id.to_string(), ran: first }));
        assert!(dispatcher.agents[id].running, "behind: run again at once");
        drop((dispatcher, agent));
        drop(holder);
    }

    /// ADM-19: a run told of another writer's Enter reports it with the snapshot it read after
    /// (`Input::OtherEnterNoted`, in place of the plain snapshot, after its step), the Enter as
    /// the holder noted it; a run cut at its step bound reports it too but its read is no
    /// floor, so the dispatcher's next run (at once) reports it again with the rest read.
    #[test]
    fn adm_19_a_run_told_of_an_enter_reports_it_with_what_it_read_after() {
        let dir = tempfile::tempdir().unwrap();
        let id = "7f9b1d3f-5a7b-4c9d-8f1b-4c6e8a0b2d46";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 64, screen_or_info);
        let mut rollout = session_s1(dir.path());
        let (inbox, mut messages) = mpsc::channel(16);
        crate::observer::test_rollouts::burst(&mut rollout, "t1", true);
        let (attaching, _) = run_as_driver(&agent, &inbox, &mut messages, due(true, false));
        assert!(!attaching.behind, "{attaching:?}");
        let noted = EnterNote { noted_ms: monotonic_ms(), count: 1, recent: 1 };
        let reported = |sent: &[Sent]| -> Vec<(OtherEnterLook, wakterm_engine::ObserverSnapshot)> {
            sent.iter()
                .filter_map(|s| match s {
                    Sent::Input(Input::OtherEnterNoted { enter, snapshot, .. }) => Some((*enter, snapshot.clone())),
                    Sent::Input(Input::ObserverSnapshot { .. }) => panic!("the report replaces the snapshot: {sent:?}"),
                    _ => None,
                })
                .collect()
        };
        crate::observer::test_rollouts::burst(&mut rollout, "t2", true);
        let with_enter = Due { enter: Some(noted), ..due(false, false) };
        let (cut, sent) = run_as_driver(&agent, &inbox, &mut messages, with_enter);
        assert!(cut.behind && cut.enter_unread == Some(noted), "cut: the next run reports it again: {cut:?}");
        let [(enter, snapshot)] = reported(&sent).try_into().expect("one report");
        assert_eq!((enter.noted_ms, enter.count, snapshot.turn.clone()), (noted.noted_ms, 1, wakterm_engine::TurnState::Unknown), "a cut read: {sent:?}");
        assert!(matches!(sent.iter().rposition(|s| matches!(s, Sent::Step(_))), Some(i) if i < sent.iter().position(|s| matches!(s, Sent::Input(_))).unwrap()), "after its step: {sent:?}");

        let agent = Arc::new(agent);
        let (wake, _wakes) = mpsc::unbounded_channel();
        let mut dispatcher = Dispatcher::new(wake, inbox.clone());
        let watched = Watched { running: true, liveness_due: false, screen_due: false, ..Watched::new(Arc::clone(&agent)) };
        dispatcher.agents.insert(id.to_string(), watched);
        // (Told it is caught up, so that it runs nothing itself: this thread runs the next.)
        dispatcher.on_wake(Wake::Done { agent_id: id.to_string(), ran: RunOutcome { behind: false, ..cut } });
        assert_eq!(dispatcher.agents[id].enter_due, Some(noted), "the next run reports it again");
        let rest = Due { enter: dispatcher.agents[id].enter_due, ..due(false, false) };
        drop(dispatcher);
        let (caught_up, sent) = run_as_driver(&agent, &inbox, &mut messages, rest);
        assert!(!caught_up.behind && caught_up.enter_unread.is_none(), "{caught_up:?}");
        let [(enter, snapshot)] = reported(&sent).try_into().expect("reported again");
        assert_eq!(enter.noted_ms, noted.noted_ms);
        assert!(snapshot.turn != wakterm_engine::TurnState::Unknown, "read to its end: a floor: {snapshot:?}");
        assert_eq!(snapshot.position, std::fs::metadata(agent.rollout_path().unwrap()).unwrap().len(), "the rollout's end");
        drop(agent);
        drop(holder);
    }

    /// MON-4: an admission's refresh reads one step of an agent in a burst too, says the turn
    /// is unknown, and asks the monitor to read the rest (its wakes for those records may
    /// have gone to a run that ended before they were written).
    #[test]
    fn mon_4_a_cut_refresh_asks_the_monitor_to_read_on() {
        let dir = tempfile::tempdir().unwrap();
        let id = "0b7c9d1e-2f3a-4b5c-8d6e-7f8091a2b3c4";
        let (agent, paths) = pty_agent(dir.path(), id);
        let holder = fake_holder(&paths, id, 64, screen_or_info);
        let mut rollout = session_s1(dir.path());
        let (inbox, mut messages) = mpsc::channel(16);
        crate::observer::test_rollouts::burst(&mut rollout, "t1", true);
        let (attaching, _) = run_as_driver(&agent, &inbox, &mut messages, due(true, false));
        assert!(!attaching.behind, "{attaching:?}");
        let (wake, mut wakes) = mpsc::unbounded_channel();
        agent.set_read_on(ReadOn { wake: wake.clone(), agent_id: id.to_string() });

        crate::observer::test_rollouts::burst(&mut rollout, "t2", true);
        let agent_id = agent.agent_id();
        let answer = |snapshot, pane| Input::ObserverRefreshed { refresh_id: 1, agent_id: agent_id.clone(), snapshot, pane };
        let snapshot = super::super::effects::refresh_agent(&agent, &agent_id, &inbox, answer).expect("a snapshot");
        assert_eq!(snapshot.turn, wakterm_engine::TurnState::Unknown, "cut at its step: {snapshot:?}");
        assert!(matches!(wakes.try_recv(), Ok(Wake::ReadOn(asked)) if asked == id), "the monitor is asked to read on");
        assert!(wakes.try_recv().is_err(), "once");
        let step: Vec<Input> = sent(&mut messages).into_iter().flat_map(|s| match s {
            Sent::Step(step) => step,
            Sent::Input(input) => vec![input],
            Sent::Handled => vec![],
        }).collect();
        let messages_read = step.iter().filter(|i| matches!(i, Input::Observed { event: ObserverEvent::AgentMessage { .. }, .. })).count();
        assert_eq!(messages_read, 2, "one step of the burst");

        let agent = Arc::new(agent);
        let mut dispatcher = Dispatcher::new(wake, inbox);
        let watched = Watched { liveness_due: false, screen_due: false, ..Watched::new(Arc::clone(&agent)) };
        dispatcher.agents.insert(id.to_string(), watched);
        on_a_reactor(|| dispatcher.on_wake(Wake::ReadOn(id.to_string())));
        assert!(dispatcher.agents[id].running, "the monitor runs the agent");
        drop((dispatcher, agent));
        drop(holder);
    }
}
