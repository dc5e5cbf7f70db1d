//! The per-agent Codex observer: turns the rollout file an adopted Codex process holds open, and
//! its rendered screen, into the engine's facts ([`ObserverEvent`], [`ObserverSnapshot`]).
//!
//! It runs on a blocking worker thread (it scans /proc and reads files), never on the reactor.
//!
//! Rules (correlation safety in the seeds):
//! - The rollout is the one file the exact process incarnation holds open
//!   ([`proc_probe::discover_rollout_exact`]); anything but exactly one is Unavailable with the
//!   reason, and the turn is Unknown, never guessed.
//! - Every event's position is the byte offset just after its record (`TailEntry::end`), so
//!   events of one session come out in strictly increasing position order.
//! - A truncated, rewritten, replaced or removed rollout ends the session (`SessionLost`); the
//!   next refresh rediscovers and a new session announces itself with `Attached`.
//! - A record too long to read in full is evidence lost (CORR-12): the session ends with
//!   `SessionLost { reason: RECORD_TOO_LARGE, .. }` and its rollout is never re-attached by this
//!   observer (one process incarnation), so the turn stays Unknown instead of a guess.
//! - The turn state is derived from lifecycle records only; the screen can only make it more
//!   cautious (a visible `Working` turns Idle into Busy).

use std::path::{Path, PathBuf};

use wakterm_engine::observer::RECORD_TOO_LARGE;
use wakterm_engine::REWRITTEN_WHILE_DOWN;
use wakterm_engine::prompt::prompt_hash;
use wakterm_engine::{
    Composer, Cursor, Incarnation, ObserverEvent, ObserverSnapshot, ObserverStatus, ProcessIdentity, SessionId,
    TurnId, TurnState,
};

use crate::observer_checkpoint::{ObserverCheckpoint, CHECKPOINT_VERSION};
use crate::proc_probe::{self, Discovery};
use crate::rollout::{RecordError, RolloutRecord};
use crate::rollout_tail::{
    RolloutTail, TailEntry, TailError, DEFAULT_MAX_BYTES_PER_PAGE, DEFAULT_MAX_RECORDS_PER_PAGE, MAX_PARSED_LINE_BYTES,
};
use crate::screen::{composer_state, turn_hint, ScreenTurn};

/// Pages read by one refresh or poll: with the default page budgets, at most 64 MiB or 16 384
/// records, so one call cannot run forever behind a fast writer. The rest is read next time.
pub const MAX_PAGES_PER_REFRESH: usize = 64;
/// MON-4: the rollout bytes one monitor run reads (one engine step). The engine and the store
/// each serve every agent in turn, so one agent's burst (a review: 100 messages of 1.9 MB)
/// read as one step held every other agent's admissions behind it; read in steps of this size,
/// with the monitor waiting for each to be handled, another agent waits for one step at most.
/// A page is read whole, so a step may pass this by one page (one record up to 16 MiB). With
/// 8 MiB steps that burst held another agent's send 0.27 s at most, with 2 MiB 0.14 s (1.1 s
/// in one step); reading the burst took as long either way.
pub const MONITOR_STEP_BYTES: u64 = 2 * 1024 * 1024;
/// Records per page (the tail's default).
pub const PAGE_RECORDS: usize = DEFAULT_MAX_RECORDS_PER_PAGE;
/// Bytes per page (the tail's default).
pub const PAGE_BYTES: usize = DEFAULT_MAX_BYTES_PER_PAGE;

/// One refresh: the new events (in order) and the state they leave.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refresh {
    pub events: Vec<ObserverEvent>,
    pub snapshot: ObserverSnapshot,
}

/// The rollout currently tailed.
#[derive(Debug)]
struct Attachment {
    tail: RolloutTail,
    session: SessionId,
    /// Position of the last emitted event of this session (strict ordering check).
    last_event: Option<u64>,
    /// MON-3: where the record that last ended a turn (the fold went idle) begins in this
    /// file: a look whose [`LookFloor`] lies at or before it was taken before that turn ended.
    idle_from: Option<u64>,
}

/// MON-3: how far the tailed rollout reached right after a look at the screen (its file and
/// length, measured after the look): a record that begins at or past `offset` in that file was
/// written after the look.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LookFloor {
    file: crate::rollout_tail::FileIdentity,
    offset: u64,
}

impl LookFloor {
    /// A floor at `offset` of `file` (tests).
    #[cfg(test)]
    pub(crate) fn at(file: crate::rollout_tail::FileIdentity, offset: u64) -> LookFloor {
        LookFloor { file, offset }
    }
}

/// How far discovery and reading got in this call (MON-1 compares it between runs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// Attached and read as far as the page bound allowed.
    Attached,
    /// The process runs and holds no rollout yet, and never did: a fresh Codex.
    Fresh,
    Unavailable(String),
}

/// Why a rollout could not be opened for reading.
enum Opening {
    /// Transient: the next call tries again.
    Retry(String),
    /// OBS-3: the evidence a resume needs is gone.
    Lost(String),
}

/// A resume request waiting for its session to be found.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Resume {
    session: SessionId,
    position: u64,
}

/// Observer of one adopted Codex process (one incarnation).
#[derive(Debug)]
pub struct CodexObserver {
    codex_home: PathBuf,
    expected_cwd: Option<PathBuf>,
    process: ProcessIdentity,
    incarnation: Incarnation,
    attached: Option<Attachment>,
    ever_attached: bool,
    /// This process had a session: one this observer attached, the one the stream reported
    /// for it before a restart, or its loaded checkpoint's (OBS-4). A look that finds no
    /// rollout open then says the session is gone, never "no rollout yet" (Codex writes none
    /// before its first turn).
    had_session: bool,
    /// OBS-4: the session the stream reported for this process before a restart, until a look
    /// attaches (the engine judges that attach, EV-7) or proves it gone (`SessionLost`).
    expected: Option<SessionId>,
    /// Set after `ProcessExited` was emitted: nothing more will be reported.
    exited: bool,
    /// A resume whose Attached was not yet emitted.
    pending_resume: Option<Resume>,
    /// Events at or before this position are folded into state but not emitted (resume).
    replay_floor: Option<u64>,
    /// Turn state derived from the current session's lifecycle records.
    turn: TurnState,
    /// The last read stopped at the page bound (or failed): the state may be stale.
    behind: bool,
    /// The rollout bytes one read may consume besides the page bound (MON-4: the step of a
    /// monitor run or a refresh); `u64::MAX` otherwise (a resume, an exit's drain).
    read_budget: u64,
    /// MON-4: the last read stopped at a bound (the step's bytes or the page count) with more
    /// written after it. Not set by a read that failed: that one waits for the recheck.
    cut: bool,
    /// Why the last session was lost (the snapshot's reason until a new attach).
    lost_reason: Option<String>,
    /// A rollout whose tail failed for good (truncated, rewritten, ...) and why: its records
    /// can no longer be tied to the positions already reported, so it is never re-attached.
    broken_rollout: Option<(PathBuf, String)>,
    corrupt_lines: u64,
    /// OBS-1: a saved checkpoint of this incarnation, used once by the first attach that
    /// matches it.
    saved: Option<ObserverCheckpoint>,
    /// OBS-2: records ending at or before this position are already folded into `turn` (the
    /// checkpoint's state): they are replayed to the engine but not folded again.
    fold_from: Option<u64>,
    /// LIVE-1: a pidfd on `process`, opened at the first check (None until then, or while it
    /// cannot be opened).
    exit_watch: Option<proc_probe::ExitWatch>,
    /// How far the last call got (MON-1's snapshot without another discovery).
    last_health: Health,
    /// OBS-3: the session whose checkpoint the file failed to prove. A resume into it, in
    /// whatever order it comes, is `SessionLost`: the records it would replay are another
    /// file's.
    disproved: Option<SessionId>,
    /// MON-2: the last discovery found exactly one rollout. Anything else (two open, none, a
    /// probe that failed) is rediscovered on every refresh, whatever the sessions watch says.
    discovery_clean: bool,
}

impl CodexObserver {
    pub fn new(
        codex_home: PathBuf,
        expected_cwd: Option<PathBuf>,
        process: ProcessIdentity,
        incarnation: Incarnation,
    ) -> Self {
        CodexObserver {
            codex_home,
            expected_cwd,
            process,
            incarnation,
            attached: None,
            ever_attached: false,
            had_session: false,
            expected: None,
            exited: false,
            pending_resume: None,
            replay_floor: None,
            turn: TurnState::Unknown,
            behind: false,
            read_budget: u64::MAX,
            cut: false,
            lost_reason: None,
            broken_rollout: None,
            corrupt_lines: 0,
            saved: None,
            fold_from: None,
            exit_watch: None,
            last_health: Health::Unavailable("not looked at yet".into()),
            disproved: None,
            discovery_clean: false,
        }
    }

    /// OBS-1: gives the observer a stored checkpoint; kept only when it belongs to this exact
    /// process incarnation.
    pub fn with_checkpoint(mut self, saved: Option<ObserverCheckpoint>) -> Self {
        self.saved = saved.filter(|c| c.belongs_to(&self.incarnation, self.process));
        self.had_session = self.saved.is_some(); // OBS-4: this process wrote a rollout
        self
    }

    /// The state to save now: attached, caught up past any replay, and the fold's state at
    /// the tail's offset. None while that is not known.
    pub fn checkpoint(&self) -> Option<ObserverCheckpoint> {
        self.checkpoint_position()?;
        let attachment = self.attached.as_ref()?;
        Some(ObserverCheckpoint {
            version: CHECKPOINT_VERSION,
            incarnation: self.incarnation.clone(),
            process: self.process,
            session: attachment.session.clone(),
            path: attachment.tail.path().to_owned(),
            tail: attachment.tail.cursor(),
            turn: self.turn.clone(),
        })
    }

    /// CORR-5, ADM-5: where the attached rollout ends now, read from the file (its length),
    /// not from what was read of it: asked just before a prompt's write, no record ending at
    /// or before it can carry that prompt (the view may lag the file). None when nothing is
    /// attached, the process exited, or the file cannot say (an error is no evidence).
    pub fn record_end(&self) -> Option<Cursor> {
        let attachment = self.attached.as_ref().filter(|_| !self.exited)?;
        let position = attachment.tail.length_now()?;
        Some(Cursor { session: attachment.session.clone(), position })
    }

    /// Where [`checkpoint`](Self::checkpoint) would be (session, offset), without building it
    /// (that hashes the rollout's checkpoint window). None while no checkpoint may be saved.
    pub fn checkpoint_position(&self) -> Option<(&SessionId, u64)> {
        let attachment = self.attached.as_ref()?;
        if self.behind || self.exited || self.fold_from.is_some() || self.pending_resume.is_some() {
            return None;
        }
        Some((&attachment.session, attachment.tail.offset()))
    }

    /// Rediscovers the rollout (a process may switch sessions), reads everything new, and
    /// takes a snapshot combining it with the screen.
    pub fn refresh(&mut self, screen: Option<&str>) -> Refresh {
        self.refresh_scoped(screen, true)
    }

    /// [`refresh`](Self::refresh), rediscovering only when `rediscover` says the agent's
    /// sessions directory saw a rollout no agent tails since the last discovery (MON-2); else
    /// the attached rollout is re-verified cheaply: the process's start time, then the tail's
    /// own identity checks on reading.
    /// MON-4: an attached rollout is read one step at a time here too ([`behind`](Self::behind)
    /// says more is waiting; the snapshot then says the turn is unknown): an admission to an
    /// agent in a burst read up to 64 pages in one engine step, and every other agent's
    /// admission waited behind it.
    pub fn refresh_scoped(&mut self, screen: Option<&str>, rediscover: bool) -> Refresh {
        let mut events = Vec::new();
        let health = self.sync_one_step(&mut events, rediscover || !self.discovery_clean);
        let snapshot = self.snapshot(&health, screen);
        self.last_health = health;
        Refresh { events, snapshot }
    }

    /// The incremental read of the live tail loop: only a liveness check of the process once
    /// attached (no /proc scan), then the new records.
    pub fn poll(&mut self) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        self.sync(&mut events, false);
        events
    }

    /// MON-1: the monitor's run: [`poll`](Self::poll) (discovery only while no rollout is
    /// attached); the snapshot is taken apart, only when the run changed something.
    /// `rediscover`: a rollout no agent tails changed since the last discovery (MON-2).
    /// MON-4: reads at most about [`MONITOR_STEP_BYTES`] of a rollout it was already reading;
    /// [`behind`](Self::behind) says whether more is waiting. A look that attaches reads as a
    /// refresh does (up to 64 pages): after a daemon restart the engine's resume (REC-2)
    /// replays from a request's armed cursor, and what a cut first look left unread below that
    /// cursor was folded by the resume without being reported (the simulator found the gap in
    /// the event stream, seeds 5017797 and 5018811).
    pub fn poll_health(&mut self, rediscover: bool) -> (Vec<ObserverEvent>, Health) {
        let mut events = Vec::new();
        // MON-2 as for a refresh: a discovery that found anything but one rollout is repeated
        // on every run, so the tail it keeps reading never makes the agent look attached (a
        // review found the monitor's runs reported it attached after one append).
        let health = self.sync_one_step(&mut events, rediscover || !self.discovery_clean);
        self.last_health = health.clone();
        (events, health)
    }

    /// MON-4: [`sync`](Self::sync) for a monitor run or a refresh: one step of a rollout already
    /// attached; a look that attaches reads on (up to 64 pages, see
    /// [`poll_health`](Self::poll_health)).
    fn sync_one_step(&mut self, events: &mut Vec<ObserverEvent>, full_discovery: bool) -> Health {
        self.read_budget = if self.attached.is_some() { MONITOR_STEP_BYTES } else { u64::MAX };
        let health = self.sync(events, full_discovery);
        self.read_budget = u64::MAX;
        health
    }

    /// MON-4: the last read stopped at a bound before the end of what was written: the
    /// monitor reads on at once. A read that failed is not "behind" here: a lasting error (a
    /// stat failing with ELOOP or EACCES) re-ran the agent in a tight loop, 67 % of a core (a
    /// review); the recheck looks again.
    pub fn behind(&self) -> bool {
        self.attached.is_some() && self.behind && self.cut
    }

    /// The snapshot the last call left, combined with the screen (no discovery, no read).
    pub fn current_snapshot(&self, screen: Option<&str>) -> ObserverSnapshot {
        self.snapshot(&self.last_health, screen)
    }

    /// MON-3: the monitor's snapshot from a look at the screen taken when the rollout reached
    /// `floor` (a look kept from an earlier run, or this run's). A `Working` indicator that
    /// look showed does not hold an idle rollout busy when the turn that ended last ended
    /// after the look ([`turn_ended_after`](Self::turn_ended_after)): every turn running when
    /// it was taken has ended since (Codex runs one at a time); the look's composer is then
    /// `Unknown` (stale too). Before (a hostile run), a holder stopped while its turn ended
    /// left the catalog `busy`, `turn_active`, until it answered again: the run that read the
    /// end held the look from during the turn, and the look again got no answer. Only the
    /// monitor's snapshots: an admission's refresh counts its own look's `Working` (ADM-3).
    /// Sound as long as the tailed file is only appended to while its identity holds (a file
    /// rewritten in place is a lost session, OBS-3). Such a look counts as none: its composer
    /// is stale too (read as `Empty`, an idle view with an empty composer would end ADM-5's
    /// wait, and RF-7 a request whose prompt the TUI had queued behind the turn and was about
    /// to send: a review).
    pub fn monitor_snapshot(&self, screen: Option<&str>, floor: Option<&LookFloor>) -> ObserverSnapshot {
        self.snapshot(&self.last_health, screen.filter(|_| !self.turn_ended_after(floor)))
    }

    /// MON-3: how far the tailed rollout reaches now (a look just taken: see [`LookFloor`]);
    /// None when nothing is attached or the file's length cannot be read (an error is never
    /// evidence).
    pub fn look_floor(&self) -> Option<LookFloor> {
        let attachment = self.attached.as_ref()?;
        Some(LookFloor { file: attachment.tail.identity(), offset: attachment.tail.length_now()? })
    }

    /// MON-3: whether the fold is idle and the record that last ended a turn begins at or past
    /// `floor` in the tailed file: written after the look, so any turn running at the look
    /// (whose `Working` it showed) had ended by then.
    pub fn turn_ended_after(&self, floor: Option<&LookFloor>) -> bool {
        let (Some(floor), Some(attachment)) = (floor, self.attached.as_ref()) else { return false };
        let idle = matches!(self.turn, TurnState::Idle { .. }) && !self.behind;
        idle && attachment.tail.identity() == floor.file && attachment.idle_from.is_some_and(|from| from >= floor.offset)
    }

    /// The process this observer reads (one incarnation).
    pub fn incarnation(&self) -> &Incarnation {
        &self.incarnation
    }

    /// After a daemon restart: reattaches to `from.session` and replays the events after where
    /// it begins reading, at or before `from.position` (`from.position` itself, or the checkpoint
    /// when the cursor lies past it: OBS-2, EV-13), preceded by `Attached` there; the cursor
    /// must be a record boundary of the file. A different session
    /// yields `SessionLost`; a transiently unreadable tree leaves the resume pending for the next
    /// poll or refresh.
    pub fn resume(&mut self, from: &Cursor) -> Vec<ObserverEvent> {
        if self.disproved.as_ref() == Some(&from.session) {
            // OBS-3: the first look found the checkpoint disproved (and logged why).
            return vec![ObserverEvent::SessionLost { reason: REWRITTEN_WHILE_DOWN.to_string(), session: None, before: None }];
        }
        // OBS-2: the state reached so far serves the re-attach as a checkpoint would.
        if let Some(current) = self.checkpoint() {
            self.saved = Some(current);
        }
        self.attached = None;
        self.fold_from = None;
        self.replay_floor = None;
        self.turn = TurnState::Unknown;
        self.pending_resume = Some(Resume { session: from.session.clone(), position: from.position });
        let mut events = Vec::new();
        // Kept, so the snapshot sent after the resume's events says what the resume found.
        self.last_health = self.sync(&mut events, true);
        events
    }

    /// OBS-4: after a restart, the stream reported `session` for this process and nothing was
    /// observed since (`Output::ExpectSession`): a look now that proves the tree no longer
    /// holds it loses it (`SessionLost` naming it), and later looks that find no rollout say
    /// unavailable. Ignored once this observer attached (the engine judges that attach).
    pub fn expect(&mut self, session: SessionId) -> Vec<ObserverEvent> {
        if self.ever_attached || self.exited {
            return Vec::new();
        }
        self.expected = Some(session);
        self.had_session = true;
        let mut events = Vec::new();
        self.last_health = self.sync(&mut events, true);
        events
    }

    /// Lines of the current and earlier sessions that were not records (skipped, counted).
    pub fn corrupt_lines(&self) -> u64 {
        self.corrupt_lines
    }

    /// Bytes the current tail read from its file (window re-reads included): proves what a
    /// restart or a poll cost.
    pub fn bytes_read(&self) -> u64 {
        self.attached.as_ref().map_or(0, |a| a.tail.bytes_read())
    }

    /// The rollout being tailed, if any.
    pub fn rollout_path(&self) -> Option<&Path> {
        self.attached.as_ref().map(|a| a.tail.path())
    }

    /// Discovery (or a liveness check) then reading; returns how far it got.
    fn sync(&mut self, events: &mut Vec<ObserverEvent>, full_discovery: bool) -> Health {
        if self.exited {
            return Health::Unavailable("the agent process exited".into());
        }
        let discovery = if full_discovery || self.attached.is_none() {
            let discovery = proc_probe::discover_rollout_exact(engine_to_probe(self.process), &self.codex_home, self.expected_cwd.as_deref());
            self.discovery_clean = matches!(discovery, Discovery::Found { .. });
            discovery
        } else if self.process_gone() {
            Discovery::ProcessGone
        } else {
            return self.read_new(events);
        };
        self.apply_discovery(discovery, events)
    }

    fn apply_discovery(&mut self, discovery: Discovery, events: &mut Vec<ObserverEvent>) -> Health {
        match discovery {
            Discovery::Found { path, session_id, .. } => self.on_found(&path, SessionId(session_id), events),
            Discovery::ProcessGone => self.on_process_gone(events),
            Discovery::NoneOpen => self.on_none_open(events),
            Discovery::Ambiguous { paths } => self.unavailable_keep_reading(
                format!(
                    "the agent's process tree holds {} Codex rollout files open; refusing to guess which one is its session",
                    paths.len()
                ),
                events,
            ),
            Discovery::CwdMismatch { path, session_cwd } => {
                let reason = format!(
                    "the rollout {} belongs to a session in {}, not the agent's working directory",
                    path.display(),
                    session_cwd.display()
                );
                self.fail_awaited(&reason, events);
                self.unavailable_keep_reading(reason, events)
            }
            Discovery::Mislabelled { path, session_id } => {
                let reason = format!(
                    "the rollout {} starts as session {session_id}, which is not the session its name says: it was rewritten, and is no session's record",
                    path.display()
                );
                self.fail_awaited(&reason, events);
                self.unavailable_keep_reading(reason, events)
            }
            Discovery::Incomplete { reason } => {
                self.disprove_expected(events);
                self.unavailable_keep_reading(format!("the agent's open files could not be fully examined: {reason}"), events)
            }
        }
    }

    fn on_found(&mut self, path: &Path, session: SessionId, events: &mut Vec<ObserverEvent>) -> Health {
        if let Some(current) = &self.attached {
            if current.tail.path() == path && current.session == session {
                return self.read_new(events);
            }
            let reason = format!(
                "the agent process now writes session {} instead of {}",
                session.0, current.session.0
            );
            self.lose_session(reason, events);
        }
        if let Some((broken, why)) = &self.broken_rollout {
            if broken == path {
                return Health::Unavailable(format!(
                    "the agent's rollout {} failed earlier ({why}); its session is not trusted again",
                    path.display()
                ));
            }
        }
        if let Some(resume) = self.pending_resume.take() {
            if resume.session != session {
                let reason = format!(
                    "the agent's rollout is session {}, not the resumed cursor's session {}",
                    session.0, resume.session.0
                );
                tracing::warn!(%reason, "a startup resume finds another session (REC-2)");
                // EV-7: the code a reader matches; the detail is logged.
                let code = wakterm_engine::SESSION_CHANGED_WHILE_DOWN.to_string();
                events.push(ObserverEvent::SessionLost { reason: code, session: Some(resume.session.clone()), before: None });
                return Health::Unavailable(reason);
            }
            self.replay_floor = Some(resume.position);
        }
        self.attach(path, session, events)
    }

    /// Opens the tail (at the saved checkpoint when it still matches, OBS-2; otherwise at
    /// offset 0) and announces the session.
    fn attach(&mut self, path: &Path, session: SessionId, events: &mut Vec<ObserverEvent>) -> Health {
        let (tail, turn, fold_from) = match self.open_tail(path, &session) {
            Ok(opened) => opened,
            Err(Opening::Lost(reason)) => {
                // OBS-3: records a resumed request may depend on are gone.
                self.replay_floor = None;
                events.push(ObserverEvent::SessionLost { reason: reason.clone(), session: None, before: None });
                return Health::Unavailable(reason);
            }
            Err(Opening::Retry(error)) => {
                // A resume stays pending: the next call retries it rather than dropping it.
                if let Some(position) = self.replay_floor.take() {
                    self.pending_resume = Some(Resume { session, position });
                }
                return Health::Unavailable(format!("the rollout {} could not be opened: {error}", path.display()));
            }
        };
        // OBS-2, EV-13: announced where reading begins, the furthest point the checkpoint's
        // proof covers, never a resumed cursor past it: every record after it is emitted, so
        // the engine proves those it already reported by the mark's fingerprint. Announced at
        // the cursor, the records between were folded unseen, and a file cut back and grown
        // again while the daemon was down, a new record ending exactly at the cursor, hid its
        // new records there (REC-2 takes an attach at or before the armed cursor).
        let position = tail.offset();
        debug_assert!(self.replay_floor.is_none_or(|floor| position <= floor), "attached past the resumed cursor");
        events.push(ObserverEvent::Attached { session: session.clone(), position });
        self.attached = Some(Attachment { tail, session, last_event: Some(position), idle_from: None });
        (self.ever_attached, self.had_session) = (true, true);
        self.expected = None; // found again, or another session: EV-7 judges the attach
        self.lost_reason = None;
        self.turn = turn;
        self.fold_from = fold_from;
        // MON-4: a look that attaches is not cut, whatever the call began with (a run that
        // began on the session this one replaced took that one's step budget).
        self.read_budget = u64::MAX;
        self.read_new(events)
    }

    /// OBS-1..OBS-3: where reading starts, the fold's state there, and up to where records are
    /// already folded.
    fn open_tail(&mut self, path: &Path, session: &SessionId) -> Result<(RolloutTail, TurnState, Option<u64>), Opening> {
        let from_zero = |error: TailError| Opening::Retry(error.to_string());
        let Some(saved) = self.saved.take().filter(|c| &c.session == session && c.path == path) else {
            return RolloutTail::open(path).map(|tail| (tail, TurnState::Unknown, None)).map_err(from_zero);
        };
        let verified = match RolloutTail::resume(path, &saved.tail) {
            Ok(tail) => tail,
            Err(error) if error.is_terminal() => {
                // EV-7, EV-13: the reason is the code a reader matches (`observer.gap` carries
                // it, and the position the stream reported through); the detail is logged. The
                // file no longer holds what was read up to the checkpoint: what it holds now is
                // read again from its start.
                let reason = REWRITTEN_WHILE_DOWN.to_string();
                let detail = format!("the rollout was replaced or rewritten while the daemon was down ({error}): it no longer holds the records read up to the checkpoint at byte {}", saved.tail.offset);
                tracing::warn!(path = %path.display(), %detail, "observer checkpoint no longer matches (OBS-3)");
                // Lost whoever opens first: the engine's startup resume and the monitor's first
                // look race, and a silent read from 0 here would announce the replaced file as
                // the session a suspended request waits for. The next look reads it from 0.
                self.disproved = Some(session.clone());
                return Err(Opening::Lost(reason));
            }
            Err(error) => {
                self.saved = Some(saved); // transient: try the checkpoint again next time
                return Err(Opening::Retry(error.to_string()));
            }
        };
        match self.replay_floor {
            // A request armed before the checkpoint: replay its records from its own position;
            // the dialect there is not known, so start in the legacy one (a duplicate prompt
            // event is cautious, a dropped one would not be; Codex writes a prompt's item
            // before its legacy copy, so our own prompt is never doubled: a same-text pair in
            // a bound turn is CORR-6's `prompt_twice_in_turn`, indeterminate).
            Some(armed) if armed < saved.tail.offset => {
                let tail = RolloutTail::open_at(path, verified.identity(), armed, false).map_err(|error| {
                    if error.is_terminal() {
                        tracing::warn!(path = %path.display(), %error, armed, "the rollout cannot be resumed at the armed position (OBS-3)");
                        Opening::Lost(REWRITTEN_WHILE_DOWN.to_string())
                    } else {
                        Opening::Retry(error.to_string())
                    }
                })?;
                Ok((tail, saved.turn, Some(saved.tail.offset)))
            }
            _ => Ok((verified, saved.turn, None)),
        }
    }

    fn on_process_gone(&mut self, events: &mut Vec<ObserverEvent>) -> Health {
        // The process can write no more: reading to the end now sees everything it wrote (not
        // cut at a monitor step: an exit's verdict needs the end).
        self.read_budget = u64::MAX;
        let drained = self.attached.is_some() && self.read_new(events) == Health::Attached && !self.behind;
        if let Some(resume) = self.pending_resume.take() {
            let reason = "the agent process exited before its session was resumed".into();
            events.push(ObserverEvent::SessionLost { reason, session: Some(resume.session), before: None });
        }
        events.push(ObserverEvent::ProcessExited { drained });
        self.exited = true;
        self.attached = None;
        self.turn = TurnState::Unknown;
        Health::Unavailable("the agent process exited".into())
    }

    fn on_none_open(&mut self, events: &mut Vec<ObserverEvent>) -> Health {
        let reason = "the agent process holds no Codex rollout file open any more";
        self.fail_awaited(reason, events);
        if self.had_session {
            return self.unavailable_keep_reading(reason.into(), events);
        }
        // No rollout exists until Codex's first turn starts (REAL_CODEX.md).
        self.turn = TurnState::Idle { last_completed: None };
        Health::Fresh
    }

    /// A startup resume cannot succeed (REC-2), nor an expected session be found again
    /// (OBS-4), when the tree provably no longer holds its session: one loss per session, the
    /// reason a code (`observer.gap` carries it; the detail is logged). The resume's said
    /// "cannot resume session ...: ..." in prose, and when both awaited the session the
    /// stream's reason depended on which thread came first (a review).
    fn fail_awaited(&mut self, reason: &str, events: &mut Vec<ObserverEvent>) {
        let resumed = self.pending_resume.take().map(|resume| resume.session);
        let expected = self.expected.take().filter(|session| resumed.as_ref() != Some(session));
        for session in resumed.into_iter().chain(expected) {
            tracing::warn!(session = %session.0, %reason, "the process holds no rollout of the session it had before the restart (OBS-4, REC-2)");
            let code = wakterm_engine::ROLLOUT_NOT_HELD_WHILE_DOWN.to_string();
            events.push(ObserverEvent::SessionLost { reason: code, session: Some(session), before: None });
        }
    }

    /// OBS-4: the tree's rollout cannot be examined (no session record to read: emptied, or
    /// not written yet), which proves nothing; but the checkpoint of the expected session
    /// this process loaded can still be checked against its own file: a file that no longer
    /// holds what was read up to it (cut back, replaced) loses the session, as OBS-3 does.
    fn disprove_expected(&mut self, events: &mut Vec<ObserverEvent>) {
        let Some(session) = self.expected.clone() else { return };
        let Some(saved) = self.saved.as_ref().filter(|c| c.session == session) else { return };
        let Err(error) = RolloutTail::resume(&saved.path, &saved.tail) else { return };
        if !error.is_terminal() {
            return; // transient: an error while gathering evidence is no evidence
        }
        tracing::warn!(path = %saved.path.display(), %error, "the expected session's checkpoint no longer matches its file (OBS-4, OBS-3)");
        self.expected = None;
        self.saved = None;
        // A resume of the same session waits for nothing more: one loss answers both.
        self.pending_resume.take_if(|resume| resume.session == session);
        self.disproved = Some(session.clone());
        events.push(ObserverEvent::SessionLost { reason: REWRITTEN_WHILE_DOWN.to_string(), session: Some(session), before: None });
    }

    /// Discovery cannot vouch for the session now, but the tailed file's records stay facts.
    fn unavailable_keep_reading(&mut self, reason: String, events: &mut Vec<ObserverEvent>) -> Health {
        if self.attached.is_some() {
            if let Health::Unavailable(read_reason) = self.read_new(events) {
                return Health::Unavailable(read_reason);
            }
        }
        Health::Unavailable(reason)
    }

    fn lose_session(&mut self, reason: String, events: &mut Vec<ObserverEvent>) {
        self.lose_session_as(reason.clone(), reason, events);
    }

    /// Ends the session with `event_reason` for the engine and `detail` for snapshots.
    fn lose_session_as(&mut self, event_reason: String, detail: String, events: &mut Vec<ObserverEvent>) {
        events.push(ObserverEvent::SessionLost { reason: event_reason, session: None, before: None });
        self.lost_reason = Some(detail);
        self.attached = None;
        self.replay_floor = None;
        self.fold_from = None;
        self.turn = TurnState::Unknown;
        self.behind = false;
    }

    /// Reads pages until caught up, [`MAX_PAGES_PER_REFRESH`] or past the read budget
    /// (MON-4); converts records to events.
    fn read_new(&mut self, events: &mut Vec<ObserverEvent>) -> Health {
        self.behind = true;
        self.cut = false;
        let Some(start) = self.attached.as_ref().map(|a| a.tail.offset()) else { return Health::Unavailable("not attached".into()) };
        for _ in 0..MAX_PAGES_PER_REFRESH {
            let Some(attachment) = self.attached.as_mut() else { return Health::Unavailable("not attached".into()) };
            let page = match attachment.tail.read_page(PAGE_RECORDS, PAGE_BYTES) {
                Ok(page) => page,
                Err(error) => return self.on_tail_error(error, events),
            };
            for entry in page.entries {
                self.consume(entry, events);
                if self.attached.is_none() {
                    return Health::Unavailable(self.lost_reason.clone().unwrap_or_default());
                }
            }
            // OBS-2: past the checkpoint, the fold is ours again (even when no record ended there).
            let offset = self.attached.as_ref().map_or(0, |a| a.tail.offset());
            if self.fold_from.is_some_and(|checkpoint| offset >= checkpoint) {
                self.fold_from = None;
            }
            if !page.has_more {
                self.behind = false;
                break;
            }
            if offset.saturating_sub(start) >= self.read_budget {
                break;
            }
        }
        self.cut = self.behind; // stopped at a bound, not by an error (those returned above)
        self.check_replay_reached(events)
    }

    fn on_tail_error(&mut self, error: TailError, events: &mut Vec<ObserverEvent>) -> Health {
        let path = self.rollout_path().map(|p| p.display().to_string()).unwrap_or_default();
        let reason = format!("{error} ({path})");
        if error.is_terminal() {
            self.mark_broken(error.to_string());
            self.lose_session(reason.clone(), events);
        }
        // A transient I/O error keeps the tail; the state is stale until the next read.
        Health::Unavailable(reason)
    }

    /// The tailed rollout is not trusted again by this observer (see `broken_rollout`).
    fn mark_broken(&mut self, why: String) {
        if let Some(path) = self.rollout_path() {
            self.broken_rollout = Some((path.to_owned(), why));
        }
    }

    /// CORR-12: a record we could not read in full may have been anything (a turn's start, its
    /// final, the next prompt), so nothing after it can be folded honestly: the session is
    /// lost, the requests correlated on it end `record_too_large`, and the turn stays Unknown
    /// for this incarnation rather than Busy forever or falsely Idle.
    fn lose_on_unreadable_record(&mut self, offset: u64, len_bytes: u64, events: &mut Vec<ObserverEvent>) {
        self.corrupt_lines += 1;
        let detail = format!(
            "{RECORD_TOO_LARGE}: the rollout record at byte {offset} is {len_bytes} bytes, over the {MAX_PARSED_LINE_BYTES}-byte limit of what the observer reads"
        );
        self.mark_broken(detail.clone());
        self.lose_session_as(RECORD_TOO_LARGE.into(), detail, events);
    }

    /// A resumed cursor must lie on a record boundary of the file: once the tail caught up
    /// without passing it, the file is shorter than the cursor says.
    fn check_replay_reached(&mut self, events: &mut Vec<ObserverEvent>) -> Health {
        let offset = self.attached.as_ref().map_or(0, |a| a.tail.offset());
        match self.replay_floor {
            Some(floor) if !self.behind && offset < floor => {
                let reason = format!("the rollout ends at {offset}, before the resumed cursor {floor}");
                self.lose_session(reason.clone(), events);
                Health::Unavailable(reason)
            }
            _ => Health::Attached,
        }
    }

    /// One rollout line: updates the turn state and emits its event.
    fn consume(&mut self, entry: TailEntry, events: &mut Vec<ObserverEvent>) {
        if let Some(floor) = self.replay_floor {
            if entry.offset < floor && entry.end > floor {
                // The cursor cuts a record: the file is not the one the cursor was taken in.
                let reason = format!("the resumed cursor {floor} is not a record boundary of the rollout");
                self.lose_session(reason, events);
                return;
            }
        }
        let Some(session) = self.attached.as_ref().map(|a| a.session.clone()) else { return };
        let record = match entry.record {
            Ok(record) => record,
            Err(RecordError::LineTooLong { len_bytes }) => return self.lose_on_unreadable_record(entry.offset, len_bytes, events),
            Err(
                RecordError::EmptyLine
                | RecordError::InvalidJson { .. }
                | RecordError::NotARecord
                | RecordError::MissingField { .. }
                | RecordError::WrongType { .. },
            ) => {
                self.corrupt_lines += 1;
                return;
            }
        };
        let was_idle = matches!(self.turn, TurnState::Idle { .. });
        if let Some(event) = self.apply_record(record, session, entry.end) {
            self.emit(event, entry.end, events);
        }
        if !was_idle && matches!(self.turn, TurnState::Idle { .. }) {
            if let Some(attachment) = self.attached.as_mut() {
                attachment.idle_from = Some(entry.offset);
            }
        }
    }

    /// The event a record yields, if any, folded into the turn state by the engine's one fold
    /// (CORR-13).
    fn apply_record(&mut self, record: RolloutRecord, session: SessionId, position: u64) -> Option<ObserverEvent> {
        // OBS-2: up to the checkpoint, the fold's result is already known.
        let fold = match self.fold_from {
            Some(checkpoint) if position <= checkpoint => false,
            Some(_) => {
                self.fold_from = None;
                true
            }
            None => true,
        };
        let event = match record {
            RolloutRecord::TurnStarted { turn_id } => ObserverEvent::TurnStarted { session, turn: TurnId(turn_id), position },
            RolloutRecord::UserMessage { turn_id, text, .. } => {
                ObserverEvent::UserMessage { session, turn: turn_id.map(TurnId), prompt_hash: prompt_hash(&text), position }
            }
            RolloutRecord::TurnComplete { turn_id, last_agent_message } => {
                ObserverEvent::TurnCompleted { session, turn: TurnId(turn_id), final_message: last_agent_message, position }
            }
            RolloutRecord::TurnAborted { turn_id, .. } => ObserverEvent::TurnAborted { session, turn: turn_id.map(TurnId), position },
            RolloutRecord::SessionMeta { .. } => {
                // A rollout with no turn record yet is a first turn being set up.
                if fold {
                    self.turn = TurnState::Unknown;
                }
                return None;
            }
            RolloutRecord::AgentMessage { turn_id, text, phase, .. } => ObserverEvent::AgentMessage { session, turn: turn_id.map(TurnId), text, phase, position },
            RolloutRecord::PlanUpdated { turn_id, explanation, plan } => {
                ObserverEvent::PlanUpdated { session, turn: turn_id.map(TurnId), explanation, plan, position }
            }
            RolloutRecord::Other { .. } => return None,
        };
        if fold {
            self.turn = wakterm_engine::fold_turn(&self.turn, &event);
        }
        Some(event)
    }

    /// Emits, checking strict position order within the session.
    fn emit(&mut self, event: ObserverEvent, position: u64, events: &mut Vec<ObserverEvent>) {
        let Some(attachment) = self.attached.as_mut() else { return };
        assert!(
            attachment.last_event.is_none_or(|last| position > last),
            "observer events must advance: {position} after {:?}",
            attachment.last_event
        );
        attachment.last_event = Some(position);
        events.push(event);
    }

    /// LIVE-1: only evidence says the adopted process is gone: /proc has no such pid, the pid
    /// now names another process, or it is a zombie; once a pidfd on it is open, that the
    /// pidfd reports its exit ([`proc_probe::ExitWatch`]: one `poll`, no /proc read). A probe
    /// that fails otherwise (out of descriptors, a read error) is "unknown": keep reading; the
    /// next check asks again (and tries the pidfd again).
    fn process_gone(&mut self) -> bool {
        let identity = engine_to_probe(self.process);
        if self.exit_watch.is_none() {
            match proc_probe::ExitWatch::open(identity) {
                Ok(Some(watch)) => self.exit_watch = Some(watch),
                Ok(None) => return true,
                // No pidfd (out of descriptors, ...): the stat alone, as before.
                Err(_) => return proc_probe::gone_by_stat(identity).unwrap_or(false),
            }
        }
        let watch = self.exit_watch.as_ref().expect("opened above");
        watch.exited().unwrap_or(false)
    }

    fn snapshot(&self, health: &Health, screen: Option<&str>) -> ObserverSnapshot {
        let (status, turn) = match health {
            Health::Unavailable(reason) => (ObserverStatus::Unavailable { reason: reason.clone() }, TurnState::Unknown),
            Health::Fresh => (ObserverStatus::Attached, fresh_turn(screen)),
            Health::Attached if self.behind => (ObserverStatus::Attached, TurnState::Unknown),
            Health::Attached => (ObserverStatus::Attached, with_screen(self.turn.clone(), screen)),
        };
        ObserverSnapshot {
            incarnation: self.incarnation.clone(),
            process: Some(self.process),
            status,
            session: self.attached.as_ref().map(|a| a.session.clone()),
            position: self.attached.as_ref().map_or(0, |a| a.tail.offset()),
            turn,
            composer: screen.map_or(Composer::Unknown, composer_state),
        }
    }
}

/// A fresh Codex (no rollout yet) is idle unless its screen says otherwise.
fn fresh_turn(screen: Option<&str>) -> TurnState {
    match screen.map(turn_hint) {
        None | Some(ScreenTurn::Idle) => TurnState::Idle { last_completed: None },
        Some(ScreenTurn::Working) => TurnState::Busy { turn: None },
        Some(ScreenTurn::Unknown) => TurnState::Unknown,
    }
}

/// Safety over liveness: a `Working` screen beats an idle rollout (the TUI started a turn the
/// rollout does not show yet).
fn with_screen(turn: TurnState, screen: Option<&str>) -> TurnState {
    let working = screen.map(turn_hint) == Some(ScreenTurn::Working);
    match turn {
        TurnState::Idle { .. } if working => TurnState::Busy { turn: None },
        other => other,
    }
}

/// The engine's process identity as proc_probe's (same two fields).
pub fn engine_to_probe(identity: ProcessIdentity) -> proc_probe::ProcessIdentity {
    proc_probe::ProcessIdentity { pid: identity.pid, start_time_ticks: identity.start_time_ticks }
}

/// proc_probe's process identity as the engine's.
pub fn probe_to_engine(identity: proc_probe::ProcessIdentity) -> ProcessIdentity {
    ProcessIdentity { pid: identity.pid, start_time_ticks: identity.start_time_ticks }
}

/// Test support shared with the monitor's tests: rollout records as Codex writes them.
#[cfg(test)]
pub(crate) mod test_rollouts {
    use std::io::Write;

    /// One `event_msg` record line with `payload`'s fields.
    pub fn event(payload: &str) -> String {
        format!("{{\"type\":\"event_msg\",\"payload\":{{{payload}}}}}\n")
    }

    /// MON-4: turn `turn` with three assistant messages of 1.5 MiB each (past one monitor
    /// step of 2 MiB), and its completion when `complete`.
    pub fn burst(rollout: &mut std::fs::File, turn: &str, complete: bool) {
        let big = "x".repeat(3 * 512 * 1024);
        rollout.write_all(event(&format!(r#""type":"task_started","turn_id":"{turn}""#)).as_bytes()).unwrap();
        for n in 0..3 {
            let message = format!(r#""type":"item_completed","turn_id":"{turn}","item":{{"type":"AgentMessage","id":"a{n}","content":[{{"type":"Text","text":"{big}"}}]}}"#);
            rollout.write_all(event(&message).as_bytes()).unwrap();
        }
        if complete {
            rollout.write_all(event(&format!(r#""type":"task_complete","turn_id":"{turn}","last_agent_message":"end""#)).as_bytes()).unwrap();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(name: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169").join(name);
        std::fs::read_to_string(path).expect("screen fixture")
    }

    #[test]
    fn a_working_screen_makes_an_idle_rollout_busy_and_nothing_else() {
        let idle = TurnState::Idle { last_completed: Some(TurnId("t".into())) };
        let busy = screen("screen-busy.txt");
        assert_eq!(with_screen(idle.clone(), Some(&busy)), TurnState::Busy { turn: None });
        assert_eq!(with_screen(idle.clone(), Some(&screen("screen-completed.txt"))), idle);
        // An idle screen never overrides a busy or unknown rollout.
        let running = TurnState::Busy { turn: Some(TurnId("t".into())) };
        assert_eq!(with_screen(running.clone(), Some(&screen("screen-idle.txt"))), running);
        assert_eq!(with_screen(TurnState::Unknown, Some(&screen("screen-idle.txt"))), TurnState::Unknown);
        assert_eq!(with_screen(idle.clone(), None), idle);
    }

    #[test]
    fn a_fresh_codex_is_idle_only_without_contrary_screen_evidence() {
        assert_eq!(fresh_turn(None), TurnState::Idle { last_completed: None });
        assert_eq!(fresh_turn(Some(&screen("screen-idle.txt"))), TurnState::Idle { last_completed: None });
        assert_eq!(fresh_turn(Some(&screen("screen-busy.txt"))), TurnState::Busy { turn: None });
        assert_eq!(fresh_turn(Some("garbage")), TurnState::Unknown);
    }

    #[test]
    fn process_identity_maps_both_ways() {
        let engine = ProcessIdentity { pid: 42, start_time_ticks: 777 };
        assert_eq!(probe_to_engine(engine_to_probe(engine)), engine);
    }

    use super::test_rollouts::event;

    /// CORR-12: a turn whose final is in a record over the parse limit never ends in the
    /// rollout we can read. The session is lost at once (correlated requests end
    /// `record_too_large`), the turn is Unknown (neither Busy forever nor falsely Idle), and
    /// the rollout is not trusted again by this observer, even when readable turns follow.
    #[test]
    fn corr_12_an_unreadable_final_loses_the_session_for_good_and_the_turn_stays_unknown() {
        use std::io::Write;
        let home = tempfile::tempdir().expect("tempdir");
        let day = home.path().join("sessions/2026/11/30");
        std::fs::create_dir_all(&day).expect("sessions dir");
        let path = day.join("rollout-2026-11-30T10-00-00-s1.jsonl");
        // This test process is the "Codex": it holds its rollout open for writing.
        let mut rollout = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("rollout");
        let meta = format!(
            "{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"s1\",\"cwd\":{}}}}}\n",
            serde_json::to_string(&home.path().display().to_string()).unwrap()
        );
        rollout.write_all(meta.as_bytes()).unwrap();
        for line in [
            event(r#""type":"task_started","turn_id":"t1""#),
            event(r#""type":"task_complete","turn_id":"t1","last_agent_message":"ok""#),
            event(r#""type":"task_started","turn_id":"t2""#),
            event(r#""type":"user_message","turn_id":"t2","message":"hi""#),
        ] {
            rollout.write_all(line.as_bytes()).unwrap();
        }
        let me = probe_to_engine(proc_probe::identity(std::process::id()).expect("own identity"));
        let mut observer = CodexObserver::new(home.path().into(), None, me, Incarnation("i".into()));
        let first = observer.refresh(None);
        assert_eq!(first.snapshot.turn, TurnState::Busy { turn: Some(TurnId("t2".into())) }, "{first:?}");

        let huge = "A".repeat(MAX_PARSED_LINE_BYTES + 1024 * 1024);
        let last = format!(r#""type":"task_complete","turn_id":"t2","last_agent_message":"{huge}""#);
        rollout.write_all(event(&last).as_bytes()).unwrap();
        assert_eq!(observer.poll(), vec![ObserverEvent::SessionLost { reason: RECORD_TOO_LARGE.into(), session: None, before: None }]);

        let after = observer.refresh(None);
        assert!(after.events.is_empty(), "{:?}", after.events);
        assert_eq!(after.snapshot.turn, TurnState::Unknown);
        assert_eq!(after.snapshot.session, None);
        assert!(
            matches!(&after.snapshot.status, ObserverStatus::Unavailable { reason } if reason.contains(RECORD_TOO_LARGE)),
            "{:?}",
            after.snapshot.status
        );

        // Readable turns afterwards do not re-establish a session whose history has a hole.
        rollout.write_all(event(r#""type":"task_started","turn_id":"t3""#).as_bytes()).unwrap();
        rollout.write_all(event(r#""type":"task_complete","turn_id":"t3","last_agent_message":"ok""#).as_bytes()).unwrap();
        assert!(observer.poll().is_empty());
        let later = observer.refresh(None);
        assert!(later.events.is_empty(), "{:?}", later.events);
        assert_eq!(later.snapshot.turn, TurnState::Unknown);
        assert!(matches!(later.snapshot.status, ObserverStatus::Unavailable { .. }));
    }

    /// A rollout of session s1 (its `session_meta` only) under a temporary CODEX_HOME, held open
    /// by this test process (discovery finds it among the process's open files), and an observer
    /// of this process over that home, not attached yet.
    fn session_s1_held_open() -> (tempfile::TempDir, PathBuf, std::fs::File, CodexObserver) {
        use std::io::Write;
        let home = tempfile::tempdir().expect("tempdir");
        let day = home.path().join("sessions/2026/12/04");
        std::fs::create_dir_all(&day).expect("sessions dir");
        let path = day.join("rollout-2026-12-04T10-00-00-s1.jsonl");
        let mut rollout = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("rollout");
        let cwd = serde_json::to_string(&home.path().display().to_string()).unwrap();
        rollout.write_all(format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"s1\",\"cwd\":{cwd}}}}}\n").as_bytes()).unwrap();
        let me = probe_to_engine(proc_probe::identity(std::process::id()).expect("own identity"));
        let observer = CodexObserver::new(home.path().into(), None, me, Incarnation("i".into()));
        (home, path, rollout, observer)
    }

    /// CORR-6's floor: `record_end` is the held file's length now, not what was read of it: a
    /// record Codex wrote after the last read (the view not there yet) lies within it. None
    /// before the observer attached, and after the file was cut below what was read.
    #[test]
    fn corr_6_the_record_end_is_the_files_length_not_the_read_position() {
        use std::io::Write;
        let (_home, path, mut rollout, mut observer) = session_s1_held_open();
        assert_eq!(observer.record_end(), None, "nothing attached yet");
        observer.refresh(None);
        let read = observer.current_snapshot(None).position;
        assert_eq!(observer.record_end(), Some(Cursor { session: SessionId("s1".into()), position: read }));
        rollout.write_all(super::test_rollouts::event(r#""type":"task_started","turn_id":"t1""#).as_bytes()).unwrap();
        let len = std::fs::metadata(&path).unwrap().len();
        assert!(len > read);
        assert_eq!(observer.current_snapshot(None).position, read, "not read yet");
        assert_eq!(observer.record_end(), Some(Cursor { session: SessionId("s1".into()), position: len }));
        rollout.set_len(1).unwrap(); // cut below what was read: the offsets mean nothing now
        assert_eq!(observer.record_end(), None);
        rollout.set_len(len).unwrap();
        assert!(observer.record_end().is_some());
        // Replaced at its path (the observer has not read since): the held file's length would
        // be compared with the new file's positions.
        let aside = path.with_extension("old");
        std::fs::rename(&path, &aside).unwrap();
        std::fs::write(&path, b"{}\n").unwrap();
        assert_eq!(observer.record_end(), None);
    }

    /// MON-4: `behind` is a read cut at its step bound (the monitor reads on at once), never a
    /// read that failed: a rollout whose stat fails for good (here a symbolic link loop put in
    /// its place, ELOOP: a non-fatal error, the tail kept) made the monitor re-run the agent in
    /// a tight loop, 67 % of a core (a review).
    #[test]
    fn mon_4_behind_is_a_read_cut_at_its_bound_never_a_failed_one() {
        let (_home, path, mut rollout, mut observer) = session_s1_held_open();
        observer.refresh(None);
        let burst = |rollout: &mut std::fs::File, turn: &str| super::test_rollouts::burst(rollout, turn, false);
        burst(&mut rollout, "t1");
        let (_, health) = observer.poll_health(false);
        assert!(health == Health::Attached && observer.behind(), "cut at the step bound: {health:?}");
        observer.poll_health(false);
        assert!(!observer.behind(), "read to the end");

        burst(&mut rollout, "t2");
        let link = path.with_file_name("loop");
        std::os::unix::fs::symlink(path.file_name().unwrap(), &link).unwrap();
        std::fs::rename(&link, &path).unwrap();
        let (_, health) = observer.poll_health(false);
        assert!(matches!(&health, Health::Unavailable(why) if why.contains("stat")), "{health:?}");
        assert!(!observer.behind(), "a failed read waits for the recheck");
        assert_eq!(observer.current_snapshot(None).turn, TurnState::Unknown, "and the turn is unknown meanwhile");
    }

    /// MON-4: a look that attaches is not cut, also when the run began on another session (the
    /// agent's Codex switched to a new rollout): the budget was the old session's step.
    #[test]
    fn mon_4_a_look_that_attaches_a_new_session_reads_on() {
        use std::io::Write;
        let (home, path, rollout, mut observer) = session_s1_held_open();
        assert!(observer.refresh(None).events.iter().any(|e| matches!(e, ObserverEvent::Attached { .. })));
        drop(rollout); // s1 closed: the process holds s2 alone
        let mut s2 = std::fs::OpenOptions::new().create(true).append(true).open(path.with_file_name("rollout-2026-12-04T11-00-00-s2.jsonl")).expect("s2");
        let cwd = serde_json::to_string(&home.path().display().to_string()).unwrap();
        s2.write_all(format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"s2\",\"cwd\":{cwd}}}}}\n").as_bytes()).unwrap();
        super::test_rollouts::burst(&mut s2, "t1", true);
        let (events, health) = observer.poll_health(true);
        assert_eq!(health, Health::Attached);
        let attached = events.iter().any(|e| matches!(e, ObserverEvent::Attached { session, .. } if session.0 == "s2"));
        let messages = events.iter().filter(|e| matches!(e, ObserverEvent::AgentMessage { .. })).count();
        assert!(attached && messages == 3 && !observer.behind(), "the attaching look read the whole burst: {messages} messages, behind {}", observer.behind());
    }

    /// MON-4: an admission's refresh of an attached rollout reads one step too: an agent in a
    /// burst (a review: 100 messages of 1.9 MB) was read up to 64 pages in one engine step,
    /// which every other agent's admission waited behind. A cut refresh says the turn is
    /// unknown; the next read goes on from where it stopped.
    #[test]
    fn mon_4_a_refresh_reads_one_step_of_an_attached_rollout() {
        let (_home, _, mut rollout, mut observer) = session_s1_held_open();
        let messages = |events: &[ObserverEvent]| events.iter().filter(|e| matches!(e, ObserverEvent::AgentMessage { .. })).count();
        // The look that attaches is not cut (the engine's resume may replay from below).
        super::test_rollouts::burst(&mut rollout, "t1", true);
        let attaching = observer.refresh(None);
        assert!(!observer.behind() && messages(&attaching.events) == 3, "the attaching refresh reads on");

        super::test_rollouts::burst(&mut rollout, "t2", true);
        let cut = observer.refresh(None);
        assert!(observer.behind(), "3 MiB read of 4.5 MiB: behind");
        assert_eq!(messages(&cut.events), 2, "the refresh stops at the page that passes MONITOR_STEP_BYTES (2 MiB)");
        assert_eq!(cut.snapshot.turn, TurnState::Unknown, "a cut read leaves the turn unknown: {:?}", cut.snapshot);
        let rest = observer.refresh(None);
        assert!(!observer.behind());
        assert_eq!(messages(&rest.events), 1, "the rest, from where the cut read stopped");
        assert!(rest.events.iter().any(|e| matches!(e, ObserverEvent::TurnCompleted { .. })), "{:?}", rest.events);
        assert!(matches!(rest.snapshot.turn, TurnState::Idle { .. }), "{:?}", rest.snapshot);
    }

    /// MON-2: a refresh told nothing changed in the sessions directory skips rediscovery once
    /// one rollout was found; a discovery that found anything else (here: two rollouts open) is
    /// repeated on every refresh whatever the watch says, so ambiguity is never forgotten.
    #[test]
    fn mon_2_only_a_clean_discovery_is_trusted_without_rediscovery() {
        use std::io::Write;
        let home = tempfile::tempdir().expect("tempdir");
        let day = home.path().join("sessions/2026/11/30");
        std::fs::create_dir_all(&day).expect("sessions dir");
        let open_rollout = |name: &str, id: &str| {
            let mut file = std::fs::OpenOptions::new().create(true).append(true).open(day.join(name)).expect("rollout");
            let cwd = serde_json::to_string(&home.path().display().to_string()).unwrap();
            file.write_all(format!("{{\"type\":\"session_meta\",\"payload\":{{\"id\":\"{id}\",\"cwd\":{cwd}}}}}\n").as_bytes()).unwrap();
            for line in [event(r#""type":"task_started","turn_id":"t1""#), event(r#""type":"task_complete","turn_id":"t1","last_agent_message":"ok""#)] {
                file.write_all(line.as_bytes()).unwrap();
            }
            file
        };
        let _first = open_rollout("rollout-2026-11-30T10-00-00-s1.jsonl", "s1");
        let me = probe_to_engine(proc_probe::identity(std::process::id()).expect("own identity"));
        let mut observer = CodexObserver::new(home.path().into(), None, me, Incarnation("i".into()));
        let attached = observer.refresh_scoped(None, false);
        assert_eq!(attached.snapshot.status, ObserverStatus::Attached, "the first look always discovers");
        let second = open_rollout("rollout-2026-11-30T10-00-01-s2.jsonl", "s2");
        // Without word of a new rollout, the adopted one is re-verified, not rediscovered.
        assert_eq!(observer.refresh_scoped(None, false).snapshot.status, ObserverStatus::Attached);
        // Word of it: rediscovered, and two open rollouts are refused.
        let ambiguous = observer.refresh_scoped(None, true);
        assert!(matches!(&ambiguous.snapshot.status, ObserverStatus::Unavailable { reason } if reason.contains("2 Codex rollout files")), "{:?}", ambiguous.snapshot.status);
        // The ambiguity is rediscovered on every refresh after, even one told nothing changed.
        let again = observer.refresh_scoped(None, false);
        assert!(matches!(again.snapshot.status, ObserverStatus::Unavailable { .. }), "{:?}", again.snapshot.status);
        // And on every monitor run (MON-1), even one woken by an append to the tailed file.
        for _ in 0..2 {
            let (_, health) = observer.poll_health(false);
            assert!(matches!(health, Health::Unavailable(_)), "{health:?}");
            assert!(matches!(observer.current_snapshot(None).status, ObserverStatus::Unavailable { .. }));
        }
        drop(second);
        assert_eq!(observer.refresh_scoped(None, false).snapshot.status, ObserverStatus::Attached, "one rollout again");
    }

    #[test]
    fn a_vanished_process_is_unavailable_with_no_events_but_exit() {
        // pid 0 is never a process: discovery reports it gone, exactly once.
        let gone = ProcessIdentity { pid: 0, start_time_ticks: 1 };
        let mut observer = CodexObserver::new("/nonexistent".into(), None, gone, Incarnation("i".into()));
        let first = observer.refresh(None);
        assert_eq!(first.events, vec![ObserverEvent::ProcessExited { drained: false }]);
        assert!(matches!(first.snapshot.status, ObserverStatus::Unavailable { .. }));
        assert_eq!(first.snapshot.turn, TurnState::Unknown);
        assert!(observer.poll().is_empty());
    }
}
