//! OBS-1..OBS-3: the durable observer checkpoint a restarted daemon resumes from, so a restart
//! costs what was appended since the checkpoint, not the rollout's whole history.
//!
//! A checkpoint is the observer's own state at one rollout position: which process incarnation
//! and session it belongs to, the file (device, inode, path), the tail's cursor (offset, the
//! sha256 of the 8 KiB before it, the prompt dialect) and the turn state the one fold
//! (`wakterm_engine::fold_turn`, CORR-13) gave at that offset. It is a cache of facts the file
//! still holds, never evidence on its own:
//!
//! - OBS-1: it is used only by an observer of the same incarnation (pid and start time: a
//!   reused pid is another process), for the same session and path, and only after the file
//!   is proven to be the same one (identity, length, window hash). Otherwise it is ignored.
//! - OBS-2: a restart reads from the checkpoint; a request armed before the checkpoint is
//!   replayed from its own armed position (those records are emitted, not folded again).
//! - OBS-3: a checkpoint the file no longer matches (replaced, truncated, rewritten while the
//!   daemon was down) is evidence that records were lost: a pending resume ends in
//!   `SessionLost`, never a guess; without one, the file is read again from byte 0.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use wakterm_engine::{Incarnation, ProcessIdentity, SessionId, TurnState};

use crate::rollout_tail::TailCursor;

/// Version of the stored form; a checkpoint of another version is ignored (read from 0).
pub const CHECKPOINT_VERSION: u32 = 1;
/// The monitor saves a checkpoint at most this often per agent (and only when the offset
/// moved), so a restart reads at most about this much of the agent's writing again.
pub const CHECKPOINT_INTERVAL_MS: u64 = 500;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverCheckpoint {
    pub version: u32,
    pub incarnation: Incarnation,
    pub process: ProcessIdentity,
    pub session: SessionId,
    pub path: PathBuf,
    pub tail: TailCursor,
    /// The fold's state just after the record ending at `tail.offset`.
    pub turn: TurnState,
}

impl ObserverCheckpoint {
    /// OBS-1: only the observer of this exact process incarnation may use it.
    pub fn belongs_to(&self, incarnation: &Incarnation, process: ProcessIdentity) -> bool {
        self.version == CHECKPOINT_VERSION && &self.incarnation == incarnation && self.process == process
    }

    /// None for a rollout whose path is no UTF-8 (a CODEX_HOME that is none, kept as a path:
    /// `AgentRecord::resolved_codex_home`): JSON holds no such path, and the daemon aborted on
    /// its first checkpoint of such a rollout (it expected every checkpoint to serialize).
    /// Without one, a restart reads that rollout from its start.
    pub fn to_json(&self) -> Option<String> {
        serde_json::to_string(self).ok()
    }

    /// A stored checkpoint; None when it is unreadable (then the rollout is read from 0).
    pub fn from_json(json: &str) -> Option<ObserverCheckpoint> {
        serde_json::from_str(json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ObserverCheckpoint {
        ObserverCheckpoint {
            version: CHECKPOINT_VERSION,
            incarnation: Incarnation("42.7".into()),
            process: ProcessIdentity { pid: 42, start_time_ticks: 7 },
            session: SessionId("s".into()),
            path: PathBuf::from("/x/rollout-s.jsonl"),
            tail: TailCursor { dev: 1, ino: 2, offset: 3, checkpoint_hash: [4; 32], item_dialect: true },
            turn: TurnState::Idle { last_completed: None },
        }
    }

    // OBS-1: a reused pid (another start time) or another version never uses it.
    #[test]
    fn obs_1_a_checkpoint_belongs_to_one_incarnation() {
        let checkpoint = sample();
        assert_eq!(ObserverCheckpoint::from_json(&checkpoint.to_json().expect("a UTF-8 path")), Some(checkpoint.clone()));
        assert!(checkpoint.belongs_to(&Incarnation("42.7".into()), ProcessIdentity { pid: 42, start_time_ticks: 7 }));
        assert!(!checkpoint.belongs_to(&Incarnation("42.8".into()), ProcessIdentity { pid: 42, start_time_ticks: 8 }));
        let old = ObserverCheckpoint { version: 0, ..checkpoint };
        assert!(!old.belongs_to(&Incarnation("42.7".into()), ProcessIdentity { pid: 42, start_time_ticks: 7 }));
        assert_eq!(ObserverCheckpoint::from_json("{\"version\":1}"), None);
    }

    // OBS-1: a rollout whose path is no UTF-8 (a CODEX_HOME that is none) has no checkpoint:
    // the daemon aborted on its first one (a hostile run's finding, reasoned from it).
    #[test]
    fn obs_1_a_rollout_path_that_is_no_utf8_has_no_checkpoint() {
        use std::os::unix::ffi::OsStrExt;
        let path = PathBuf::from(std::ffi::OsStr::from_bytes(b"/x/caf\xe9/rollout-s.jsonl"));
        assert_eq!(ObserverCheckpoint { path, ..sample() }.to_json(), None);
    }
}
