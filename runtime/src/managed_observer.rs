//! MGD-4: the observer of a managed session. Its evidence is the app-server's own notification
//! stream, as the agent's holder keeps it (the raw pane's output: one JSON line per message,
//! numbered by byte offset, kept across daemon restarts up to the holder's ring bound). The
//! rules of following it (losses, the resume) are `app_server_stream::StreamFollower`, shared
//! with the simulator; this adds the holder reads and the re-proof write.

use crate::app_server::MAX_LINE_BYTES;
use crate::app_server_stream::{Page, PlainFold, StreamFollower};
use crate::holder::{HolderClient, HolderIdentity};
use crate::observer::Health;
use std::path::PathBuf;
use std::time::Duration;
use wakterm_engine::{Cursor, Incarnation, ManagedIds, ObserverEvent, ObserverSnapshot, ProcessIdentity};

/// The most output one poll reads (several pages), so one busy agent cannot hold its
/// observer lock for long; the next poll goes on. Twice the holder's ring: one poll always
/// reaches the end of what the holder keeps.
const MAX_BYTES_PER_POLL: u64 = 8 * 1024 * 1024;
const PAGE_BYTES: u64 = 1024 * 1024;
const HOLDER_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a process's output starts: the offset, in the stream of which holder (None: not
/// known, so not checked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamStart {
    pub start: u64,
    pub holder: Option<HolderIdentity>,
}

pub struct ManagedObserver {
    socket: PathBuf,
    /// The holder this process runs under, when known: a connection that reaches another one
    /// (the holder died and `agent restart` started a new one at the same socket) reads
    /// nothing, since that stream's offsets are not this process's.
    holder: Option<HolderIdentity>,
    ids: ManagedIds,
    incarnation: Incarnation,
    process: ProcessIdentity,
    client: Option<HolderClient>,
    follower: StreamFollower<PlainFold>,
    /// The agent's working directory (a `thread/resume` names it).
    cwd: String,
    health: Health,
}

impl ManagedObserver {
    pub fn new(socket: PathBuf, ids: ManagedIds, process: ProcessIdentity, incarnation: Incarnation, stream: StreamStart, cwd: String) -> ManagedObserver {
        let StreamStart { start, holder } = stream;
        let follower = StreamFollower::new(&ids.thread_id, ids.session_id.clone(), start, PlainFold, MAX_LINE_BYTES);
        let health = Health::Unavailable("not read yet".to_string());
        ManagedObserver { socket, holder, ids, incarnation, process, client: None, follower, cwd, health }
    }

    /// Reads what the holder appended since the last call and folds every whole line.
    pub fn poll(&mut self) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        self.health = match self.read(&mut events).and_then(|()| self.reprove_once()).and_then(|()| self.decline_requests()) {
            Ok(()) => Health::Attached,
            Err(error) => {
                self.client = None; // reconnect next time
                Health::Unavailable(error)
            }
        };
        events
    }

    /// CORR-11: the last poll read the stream without an error (what it reported is all the
    /// process wrote, as far as the holder kept it).
    pub fn read_ok(&self) -> bool {
        matches!(self.health, Health::Attached)
    }

    /// CORR-11: an exit now drained the process (`StreamFollower::exit_drained`).
    pub fn drained(&self) -> bool {
        self.follower.exit_drained(self.read_ok())
    }

    pub fn poll_health(&mut self) -> (Vec<ObserverEvent>, Health) {
        let events = self.poll();
        (events, self.health.clone())
    }

    /// REC-2 (`StreamFollower::resume`), then the read that answers it.
    pub fn resume(&mut self, from: &Cursor) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        if !self.follower.resume(from, &mut events) {
            return events;
        }
        events.extend(self.poll());
        events
    }

    pub fn incarnation(&self) -> &Incarnation {
        &self.incarnation
    }

    pub fn snapshot(&self) -> ObserverSnapshot {
        let error = match &self.health {
            Health::Attached | Health::Fresh => None,
            Health::Unavailable(reason) => Some(reason.as_str()),
        };
        self.follower.snapshot(self.incarnation.clone(), self.process, error)
    }

    /// MGD-4: a stream read to its end that never showed this process loading the thread asks
    /// once with `thread/resume` of the agent's own thread (Codex 0.169 answers it for a thread
    /// already loaded, with the thread's status). The reply comes in the stream like any other
    /// line; nothing waits for it.
    fn reprove_once(&mut self) -> Result<(), String> {
        // The backoff counts on the monotonic clock: a wall clock stepped back by hours during
        // it delayed the next re-proof by as much (TIME-2's review).
        if !self.follower.wants_reproof(crate::holder::protocol::monotonic_ms()) {
            return Ok(());
        }
        let id = format!("wakterm-reprove-{}", uuid::Uuid::new_v4());
        let line = crate::app_server::on_its_own_line(&crate::app_server::thread_resume(&id, &self.ids.thread_id, &self.cwd));
        // Its own writes reach only its process: after a respawn in the same holder, the old
        // process's last read must not send its `thread/resume` or declines to the next.
        let expect = self.process.into();
        let written = self.client().and_then(|client| client.write_expecting(&line, Some(expect), None).map_err(|e| e.to_string()));
        let failed = match written {
            Ok(outcome) => outcome.error,
            Err(error) => Some(error),
        };
        match failed {
            None => Ok(()),
            Some(error) => {
                self.follower.reproof_failed(); // asked again at the next read
                Err(format!("cannot ask the app-server for its thread: {error}"))
            }
        }
    }

    /// MGD-6: every server request of the thread still pending is declined (a JSON-RPC error:
    /// Codex refuses the approval or answers the question with nothing, and the turn goes on),
    /// so a turn never waits for a human who is not there.
    fn decline_requests(&mut self) -> Result<(), String> {
        for (id, method) in self.follower.unanswered_requests() {
            let expect = self.process.into();
            let line = crate::app_server::decline(&id, &method);
            let outcome = self.client()?.write_expecting(&line, Some(expect), None).map_err(|e| format!("cannot answer the app-server's {method}: {e}"))?;
            if let Some(error) = outcome.error {
                return Err(format!("cannot answer the app-server's {method}: {error}"));
            }
            tracing::info!(%id, %method, "declined an app-server request (MGD-6)");
            self.follower.answered(&id);
        }
        Ok(())
    }

    /// The connection to this process's holder: a new one is first proven to reach it.
    fn client(&mut self) -> Result<&mut HolderClient, String> {
        if self.client.is_none() {
            let mut client = HolderClient::connect_with_timeout(&self.socket, HOLDER_TIMEOUT).map_err(|e| format!("cannot reach the agent's holder: {e}"))?;
            if let Some(expected) = &self.holder {
                let info = client.info().map_err(|e| format!("cannot reach the agent's holder: {e}"))?;
                let reached = HolderIdentity::of(&info);
                if &reached != expected {
                    return Err(format!("the agent's holder was replaced (pid {} -> {}): its output is another stream", expected.pid, reached.pid));
                }
            }
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    fn read(&mut self, events: &mut Vec<ObserverEvent>) -> Result<(), String> {
        let mut budget = MAX_BYTES_PER_POLL;
        loop {
            let after = self.follower.next_offset();
            let page = self.client()?.output(after, PAGE_BYTES).map_err(|e| format!("cannot read the app-server's output: {e}"))?;
            let view = Page { data: &page.data, start: page.start, end: page.end, truncated: page.truncated };
            self.follower.page(view, events)?;
            budget = budget.saturating_sub(page.data.len() as u64);
            if page.data.is_empty() || budget == 0 {
                return Ok(());
            }
        }
    }
}
