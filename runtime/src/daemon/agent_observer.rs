//! The observer behind one agent: the Codex rollout for a PTY agent (OBS, CORR), or the
//! app-server's notification stream for a managed one (MGD-4). The daemon calls both the same
//! way.

use crate::managed_observer::ManagedObserver;
use crate::observer::{CodexObserver, Health, Refresh};
use crate::observer_checkpoint::ObserverCheckpoint;
use std::path::Path;
use wakterm_engine::{Cursor, ObserverEvent, ObserverSnapshot, SessionId};

pub enum AgentObserver {
    Rollout(CodexObserver),
    Managed(ManagedObserver),
}

impl AgentObserver {
    pub fn poll(&mut self) -> Vec<ObserverEvent> {
        match self {
            AgentObserver::Rollout(o) => o.poll(),
            AgentObserver::Managed(o) => o.poll(),
        }
    }

    /// `rediscover` (MON-2) only concerns rollouts.
    pub fn poll_health(&mut self, rediscover: bool) -> (Vec<ObserverEvent>, Health) {
        match self {
            AgentObserver::Rollout(o) => o.poll_health(rediscover),
            AgentObserver::Managed(o) => o.poll_health(),
        }
    }

    /// MON-4: the last monitor read stopped at its step bound with more written after it (a
    /// managed agent's read is bounded by its holder's ring instead).
    pub fn behind(&self) -> bool {
        match self {
            AgentObserver::Rollout(o) => o.behind(),
            AgentObserver::Managed(_) => false,
        }
    }

    /// The screen only matters to a TUI's composer.
    pub fn current_snapshot(&self, screen: Option<&str>) -> ObserverSnapshot {
        match self {
            AgentObserver::Rollout(o) => o.current_snapshot(screen),
            AgentObserver::Managed(o) => o.snapshot(),
        }
    }

    /// MON-3: the monitor's snapshot from a look taken when the rollout reached `floor`
    /// ([`CodexObserver::monitor_snapshot`]).
    pub fn monitor_snapshot(&self, screen: Option<&str>, floor: Option<&crate::observer::LookFloor>) -> ObserverSnapshot {
        match self {
            AgentObserver::Rollout(o) => o.monitor_snapshot(screen, floor),
            AgentObserver::Managed(o) => o.snapshot(),
        }
    }

    /// MON-3: how far the rollout reaches now, right after a look (a managed agent has none).
    pub fn look_floor(&self) -> Option<crate::observer::LookFloor> {
        match self {
            AgentObserver::Rollout(o) => o.look_floor(),
            AgentObserver::Managed(_) => None,
        }
    }

    pub fn refresh_scoped(&mut self, screen: Option<&str>, rediscover: bool) -> Refresh {
        match self {
            AgentObserver::Rollout(o) => o.refresh_scoped(screen, rediscover),
            AgentObserver::Managed(o) => {
                let events = o.poll();
                Refresh { events, snapshot: o.snapshot() }
            }
        }
    }

    pub fn resume(&mut self, from: &Cursor) -> Vec<ObserverEvent> {
        match self {
            AgentObserver::Rollout(o) => o.resume(from),
            AgentObserver::Managed(o) => o.resume(from),
        }
    }

    /// OBS-4: the session the stream reported for this process before a restart. A managed
    /// agent's session is its holder's output, which outlives the daemon: its losses are
    /// MGD-4's (a follower's eviction, a replaced holder), so nothing is expected of it here.
    pub fn expect(&mut self, session: wakterm_engine::SessionId) -> Vec<ObserverEvent> {
        match self {
            AgentObserver::Rollout(o) => o.expect(session),
            AgentObserver::Managed(_) => Vec::new(),
        }
    }

    /// The process this observer reads (one incarnation).
    pub fn incarnation(&self) -> &wakterm_engine::Incarnation {
        match self {
            AgentObserver::Rollout(o) => o.incarnation(),
            AgentObserver::Managed(o) => o.incarnation(),
        }
    }

    /// CORR-11: whether the last poll read everything (a managed observer whose holder could
    /// not be read, or whose app-server accepted a turn it has not notified yet, did not drain;
    /// a rollout observer keeps its own rule).
    pub fn drained(&self) -> bool {
        match self {
            AgentObserver::Rollout(_) => true,
            AgentObserver::Managed(o) => o.drained(),
        }
    }

    pub fn rollout_path(&self) -> Option<&Path> {
        match self {
            AgentObserver::Rollout(o) => o.rollout_path(),
            AgentObserver::Managed(_) => None,
        }
    }

    /// CORR-5, ADM-5: where the attached rollout ends now (`CodexObserver::record_end`); a
    /// managed agent's turns are told apart by CORR-15's ids instead.
    pub fn record_end(&self) -> Option<Cursor> {
        match self {
            AgentObserver::Rollout(o) => o.record_end(),
            AgentObserver::Managed(_) => None,
        }
    }

    /// OBS-1: where the checkpoint would be (session, offset), without building it.
    pub fn checkpoint_position(&self) -> Option<(&SessionId, u64)> {
        match self {
            AgentObserver::Rollout(o) => o.checkpoint_position(),
            AgentObserver::Managed(_) => None,
        }
    }

    /// OBS-1: only rollout observers checkpoint (a managed one re-reads the holder's stream).
    pub fn checkpoint(&self) -> Option<ObserverCheckpoint> {
        match self {
            AgentObserver::Rollout(o) => o.checkpoint(),
            AgentObserver::Managed(_) => None,
        }
    }
}
