//! MGD-4: the observer of a managed session. Its evidence is the app-server's own notification
//! stream, as the agent's holder keeps it (the raw pane's output: one JSON line per message,
//! numbered by byte offset, kept across daemon restarts up to the holder's ring bound). The
//! fold of the lines is `app_server::Fold`; this adds the reading, the losses and the resume.

use crate::app_server::{Fold, MAX_LINE_BYTES};
use crate::holder::HolderClient;
use crate::observer::Health;
use std::path::PathBuf;
use std::time::Duration;
use wakterm_engine::{Composer, Cursor, Incarnation, ManagedIds, ObserverEvent, ObserverSnapshot, ObserverStatus, ProcessIdentity, SessionId, TurnState};

/// The most output one poll reads (several pages), so one busy agent cannot hold its
/// observer lock for long; the next poll goes on.
const MAX_BYTES_PER_POLL: u64 = 8 * 1024 * 1024;
const PAGE_BYTES: u64 = 1024 * 1024;
const HOLDER_TIMEOUT: Duration = Duration::from_secs(10);

pub struct ManagedObserver {
    socket: PathBuf,
    ids: ManagedIds,
    incarnation: Incarnation,
    process: ProcessIdentity,
    client: Option<HolderClient>,
    fold: Fold,
    /// Where this process's output starts.
    start: u64,
    /// The next output byte to read.
    offset: u64,
    /// One past the last whole line folded: the position of the view.
    position: u64,
    /// The bytes of an unfinished line.
    partial: Vec<u8>,
    /// A line over the bound is skipped to its end (its events are lost, and reported).
    skipping: bool,
    attached: bool,
    /// REC-2: a resume waiting for the stream to reach its cursor.
    resume_at: Option<u64>,
    /// The agent's working directory (a `thread/resume` names it).
    cwd: String,
    /// `reprove_once` asked already.
    reproved: bool,
    health: Health,
}

impl ManagedObserver {
    /// `start`: where this process's output starts in the holder's stream.
    pub fn new(socket: PathBuf, ids: ManagedIds, process: ProcessIdentity, incarnation: Incarnation, start: u64, cwd: String) -> ManagedObserver {
        let fold = Fold::new(&ids.thread_id);
        ManagedObserver {
            socket,
            ids,
            incarnation,
            process,
            client: None,
            fold,
            start,
            offset: start,
            position: start,
            partial: Vec::new(),
            skipping: false,
            attached: false,
            resume_at: None,
            cwd,
            reproved: false,
            health: Health::Unavailable("not read yet".to_string()),
        }
    }

    fn session(&self) -> SessionId {
        self.ids.session_id.clone()
    }

    /// Reads what the holder appended since the last call and folds every whole line.
    pub fn poll(&mut self) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        self.health = match self.read(&mut events).and_then(|()| self.reprove_once()) {
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

    pub fn poll_health(&mut self) -> (Vec<ObserverEvent>, Health) {
        let events = self.poll();
        (events, self.health.clone())
    }

    /// REC-2: after a restart, `Attached` at the cursor, then exactly the events after it. The
    /// lines before it are folded again silently (the turn state at the cursor), as long as
    /// the holder still has them; otherwise what happened there is unknown.
    pub fn resume(&mut self, from: &Cursor) -> Vec<ObserverEvent> {
        if from.session != self.session() {
            let reason = "the agent's app-server thread is not the one the request was armed on".to_string();
            return vec![ObserverEvent::SessionLost { reason, session: Some(from.session.clone()) }];
        }
        self.fold = Fold::new(&self.ids.thread_id);
        self.offset = self.start;
        self.position = self.start;
        self.partial.clear();
        self.skipping = false;
        self.attached = false;
        self.resume_at = Some(from.position);
        self.poll()
    }

    pub fn snapshot(&self) -> ObserverSnapshot {
        let status = match &self.health {
            Health::Attached | Health::Fresh => ObserverStatus::Attached,
            Health::Unavailable(reason) => ObserverStatus::Unavailable { reason: reason.clone() },
        };
        // MGD-2: until this process has loaded the agent's thread nothing can be admitted.
        let status = match status {
            ObserverStatus::Attached if !self.fold.loaded => ObserverStatus::Unavailable { reason: "the app-server has not loaded the agent's thread yet".to_string() },
            other => other,
        };
        let attached = self.attached && matches!(status, ObserverStatus::Attached);
        ObserverSnapshot {
            incarnation: self.incarnation.clone(),
            process: Some(self.process),
            status,
            session: attached.then(|| self.session()),
            position: self.position,
            turn: if attached { self.fold.turn.clone() } else { TurnState::Unknown },
            // No composer: a managed session takes its prompt as turn input.
            composer: Composer::Empty,
        }
    }

    /// MGD-4: a stream read to its end that never showed this process loading the thread (a
    /// daemon restart after the holder dropped the handshake's reply) asks once: `thread/resume`
    /// of the agent's own thread (Codex 0.169 answers it for a thread already loaded, with the
    /// thread's status). The reply comes in the stream like any other line; nothing waits for it.
    fn reprove_once(&mut self) -> Result<(), String> {
        if self.reproved || self.fold.loaded || !self.attached || self.ids.thread_id.is_empty() {
            return Ok(());
        }
        self.reproved = true;
        let id = format!("wakterm-reprove-{}", uuid::Uuid::new_v4());
        let line = crate::app_server::thread_resume(&id, &self.ids.thread_id, &self.cwd);
        let outcome = self.client()?.write(&line).map_err(|e| format!("cannot ask the app-server for its thread: {e}"))?;
        match outcome.error {
            None => Ok(()),
            Some(error) => Err(format!("cannot ask the app-server for its thread: {error}")),
        }
    }

    fn client(&mut self) -> Result<&mut HolderClient, String> {
        if self.client.is_none() {
            let client = HolderClient::connect_with_timeout(&self.socket, HOLDER_TIMEOUT).map_err(|e| format!("cannot reach the agent's holder: {e}"))?;
            self.client = Some(client);
        }
        Ok(self.client.as_mut().expect("just connected"))
    }

    fn read(&mut self, events: &mut Vec<ObserverEvent>) -> Result<(), String> {
        let mut budget = MAX_BYTES_PER_POLL;
        loop {
            let after = self.offset;
            let page = self.client()?.output(after, PAGE_BYTES).map_err(|e| format!("cannot read the app-server's output: {e}"))?;
            if page.truncated {
                // Also for a fresh observer (a daemon restart): the daemon before it may not have
                // made those notifications durable, so their loss is reported (the engine turns
                // it into `observer.gap` after the durable mark), never skipped silently.
                self.lost(page.start, events);
            } else if !self.attached && !self.skipping {
                self.attach(events);
            }
            self.offset = page.end;
            self.take(&page.data, page.start, events);
            budget = budget.saturating_sub(page.data.len() as u64);
            if page.data.is_empty() || budget == 0 {
                return Ok(());
            }
        }
    }

    /// The first read: the stream is whole from its start.
    fn attach(&mut self, events: &mut Vec<ObserverEvent>) {
        self.attached = true;
        if self.resume_at.is_none() {
            events.push(ObserverEvent::Attached { session: self.session(), position: self.position });
        }
    }

    /// MGD-4: the holder evicted output this observer never read: what those notifications
    /// said is unknown. Reported, then the stream is followed again from the next whole line
    /// with an unknown turn state.
    fn lost(&mut self, start: u64, events: &mut Vec<ObserverEvent>) {
        let reason = format!("app-server notifications were evicted before they were read (bytes {}..{start})", self.offset);
        let session = self.resume_at.take().map(|_| self.session());
        events.push(ObserverEvent::SessionLost { reason, session });
        self.fold = Fold { turn: TurnState::Unknown, loaded: self.fold.loaded, ..Fold::new(&self.ids.thread_id) };
        self.partial.clear();
        self.skipping = true; // the line in progress at `start` began in the evicted bytes
        self.attached = false;
    }

    fn take(&mut self, data: &[u8], start: u64, events: &mut Vec<ObserverEvent>) {
        let mut at = 0;
        while let Some(newline) = data[at..].iter().position(|&b| b == b'\n') {
            let end = at + newline;
            let position = start + end as u64 + 1;
            if self.skipping {
                self.skipping = false;
                self.position = position;
                if !self.attached {
                    self.attached = true;
                    events.push(ObserverEvent::Attached { session: self.session(), position });
                }
            } else {
                self.partial.extend_from_slice(&data[at..end]);
                let line = std::mem::take(&mut self.partial);
                self.fold_line(&line, position, events);
            }
            at = end + 1;
        }
        if !self.skipping {
            self.partial.extend_from_slice(&data[at..]);
            if self.partial.len() > MAX_LINE_BYTES {
                self.partial.clear();
                self.skipping = true;
                self.fold.turn = TurnState::Unknown;
                // Before a resume's cursor the lines are only re-folded (their events were
                // reported before): a loss there changes the turn state, not the stream.
                if self.resume_at.is_none() {
                    let reason = "an app-server message exceeded the line bound; its content is unknown".to_string();
                    events.push(ObserverEvent::SessionLost { reason, session: None });
                    self.attached = false;
                }
            }
        }
    }

    fn fold_line(&mut self, line: &[u8], position: u64, events: &mut Vec<ObserverEvent>) {
        let mut folded = self.fold.line(line, position);
        self.position = position;
        if folded.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. })) {
            // CORR-3: what the thread does now is unknown; the stream is followed again from
            // right after that line (so a later loss is reported as one).
            self.fold.turn = TurnState::Unknown;
            folded.push(ObserverEvent::Attached { session: self.session(), position });
        }
        if let Some(cursor) = self.resume_at {
            if position < cursor {
                return; // before the cursor: folded silently (REC-2)
            }
            self.resume_at = None;
            // The cursor is a line end of the same stream; an event AT it was reported before.
            events.push(ObserverEvent::Attached { session: self.session(), position: cursor });
            if position == cursor {
                return;
            }
        }
        events.extend(folded);
    }
}
