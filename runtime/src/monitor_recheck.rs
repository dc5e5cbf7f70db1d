//! MON-1's safety net, as rules the daemon's monitor and the simulator's model of it both
//! call: how long an agent may go unlooked-at when nothing wakes it, which sessions watch
//! counts as covering its directory, and how soon one that could not be set whole is tried
//! again.

use std::time::Duration;

/// The monitor's tick: it retries unset sessions watches and runs the agents whose recheck is due.
pub const TICK: Duration = Duration::from_secs(1);
/// Only a safety net: an overflowed inotify queue is reported and wakes every agent of that
/// directory at once (`Wake::Overflow`), so attached agents need no frequent recheck.
pub const ATTACHED_RECHECK: Duration = Duration::from_secs(30);
/// An agent still without a rollout, whose sessions directory is watched (a new file wakes it).
pub const UNATTACHED_RECHECK: Duration = Duration::from_secs(5);
/// An agent no sessions-watch event can wake (its directory has no watch), or one whose turn
/// only its screen can settle: the holder's pushes still wake it, but nothing wakes it for
/// records alone.
pub const UNWATCHED_RECHECK: Duration = Duration::from_secs(1);

/// MON-1: the longest a live agent goes without a run when no wake comes. An agent whose
/// sessions directory has no watch (Codex creates it on its first turn and the tick sets the
/// watch after; a watch that failed or was lost is set again by the tick) hears of no record,
/// attached or not: every second (an attached one there waited out the 30 s recheck, and
/// records appended right after a first turn went unread: an end-to-end test caught it).
pub fn recheck_interval(screen_decides: bool, attached: bool, watched: bool) -> Duration {
    match (screen_decides || !watched, attached) {
        (true, _) => UNWATCHED_RECHECK,
        (false, true) => ATTACHED_RECHECK,
        (false, false) => UNATTACHED_RECHECK,
    }
}

/// MON-3: whether only a new look at the screen can settle a snapshot's turn: unknown, or, for
/// an agent with a screen (`has_screen`: a PTY agent's), busy by the screen alone (`Busy`
/// naming no turn: a `Working` screen over an idle rollout, or a fresh Codex's). Such an
/// agent's screen is read on every run and it is rechecked every second (`recheck_interval`).
/// A busy screen used to hold until the pane's next push, and a push lost (a holder stopped,
/// then continued while the monitor's watch of it reconnected) held an idle agent `busy`,
/// `turn_active`, for good (a hostile run: 11 minutes). A managed agent's `Busy` naming no
/// turn is its app-server's word (a resumed thread said active), which no screen settles.
pub fn screen_settles(turn: &wakterm_engine::TurnState, has_screen: bool) -> bool {
    match turn {
        wakterm_engine::TurnState::Unknown => true,
        wakterm_engine::TurnState::Busy { turn: None } => has_screen,
        wakterm_engine::TurnState::Busy { turn: Some(_) } | wakterm_engine::TurnState::Idle { .. } => false,
    }
}

/// MON-1: whether a monitor run's snapshot is news to the engine, which holds what the
/// monitor's own stream (its runs, a resume) sent it last, `sent`, unless a refresh's view
/// came since (`refreshed`): the engine applies an admission's or a probe's refresh, but not
/// one answered late over a newer snapshot (ADM-3), and the monitor cannot tell which. So
/// the first run after a refresh sends (one message; `recheck_soon` runs it within a second),
/// and any other sends when it differs from `sent`. Compared with the latest view, a refresh's
/// included, a late refresh's idle view hid the news from an engine holding a busy one: the
/// catalog said `busy` for good (an exploration). The simulator's model calls this too.
pub fn snapshot_is_news(forced: bool, refreshed: bool, sent: Option<&wakterm_engine::ObserverSnapshot>, snapshot: &wakterm_engine::ObserverSnapshot) -> bool {
    forced || refreshed || sent != Some(snapshot)
}

/// The first wait before a sessions directory that could not be watched whole is tried again.
pub const WATCH_RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest such wait.
pub const WATCH_RETRY_MAX: Duration = Duration::from_secs(60);

/// MON-1: a sessions watch covers its directory (its agents may wait out the longer rechecks)
/// only when it is set and no part of it failed: notify reports a subdirectory it could not
/// watch (out of inotify watches) as an error, and records there would wake nobody.
pub fn watch_trusted(set: bool, incomplete: bool) -> bool {
    set && !incomplete
}

/// MON-1: the wait before the next try at a directory that could not be watched whole, after
/// `last` (None: the first failure). It doubles up to [`WATCH_RETRY_MAX`]: each try walks the
/// whole tree and takes inotify watches other users may need.
pub fn next_watch_retry(last: Option<Duration>) -> Duration {
    last.map_or(WATCH_RETRY_FIRST, |wait| (wait * 2).min(WATCH_RETRY_MAX))
}
