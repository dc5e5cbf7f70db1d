//! MGD-4: following one app-server process's notification stream, page by page. Pure (no I/O):
//! the daemon's `ManagedObserver` feeds it the holder's `output` pages, the simulator feeds it
//! its ring's pages, so both run this one copy of the rules (paging, eviction, over-long lines,
//! the resume that re-folds silently up to its cursor, the thread re-proof).
//!
//! Positions are byte offsets one past each line in the holder's output stream (absolute, never
//! reset while the holder lives). The stream of THIS process starts at `start` (the holder's
//! `generation_start`); what lies before it is an earlier process's output.

use crate::app_server::Fold;
use wakterm_engine::{Composer, Cursor, Incarnation, ObserverEvent, ObserverSnapshot, ObserverStatus, ProcessIdentity, SessionId, TurnState};

/// One read of the holder's output: `data` runs from `start` to `end`; `truncated` says that
/// bytes between the offset asked for and `start` were evicted.
#[derive(Clone, Copy, Debug)]
pub struct Page<'a> {
    pub data: &'a [u8],
    pub start: u64,
    pub end: u64,
    pub truncated: bool,
}

/// How one whole line becomes events. Production folds with `Fold::line`; the simulator plants
/// its mutants here (never in the paging rules).
pub trait LineFolder {
    fn fold_line(&mut self, fold: &mut Fold, line: &[u8], position: u64) -> Vec<ObserverEvent>;
    /// A resume starts the fold over.
    fn reset(&mut self) {}
}

/// `Fold::line`, as is.
#[derive(Clone, Copy, Debug, Default)]
pub struct PlainFold;

impl LineFolder for PlainFold {
    fn fold_line(&mut self, fold: &mut Fold, line: &[u8], position: u64) -> Vec<ObserverEvent> {
        fold.line(line, position)
    }
}

/// What the follower met, for counters and logs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FollowStats {
    /// Pages the holder answered with evicted bytes before them.
    pub evicted: u64,
    /// Lines over the bound (skipped, their content unknown).
    pub long_lines: u64,
}

/// A resume whose cursor lies in an EARLIER process's output (a daemon restart after
/// `agent restart` whose stream mark was left there): that output, from the cursor to this
/// process's start, is read to learn whether it holds records the stream never got.
#[derive(Debug)]
struct EarlierTail {
    cursor: u64,
    /// A fold of the earlier output (its thread is the same), only to see whether a line
    /// carries a record; its turn state is never used.
    fold: Fold,
    partial: Vec<u8>,
    /// A record, an unfinished line or evicted bytes: something the stream may lack.
    missing: bool,
}

pub struct StreamFollower<L: LineFolder = PlainFold> {
    session: SessionId,
    thread_id: String,
    folder: L,
    pub fold: Fold,
    line_bound: usize,
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
    /// MGD-4: output this follower never read was evicted: the loss is reported at the
    /// re-attach, which says where it ends (`reattach`).
    pending_loss: Option<String>,
    earlier: Option<EarlierTail>,
    reproved: bool,
    /// MGD-6: a loss may have taken a server request with it: one `thread/resume` (Codex then
    /// sends every request still pending again), once attached again.
    replay_due: bool,
    /// MGD-6: server requests this follower's owner answered (by their id's JSON text).
    answered: std::collections::BTreeSet<String>,
    /// MGD-4: re-proofs asked since a reply last proved the thread (`Fold::proofs` moved),
    /// and when the next may be asked once they reach `MAX_UNPROVEN_REPROOFS`.
    unproven_reproofs: u32,
    proofs_seen: u64,
    next_reproof_at_ms: u64,
    pub stats: FollowStats,
}

/// MGD-4: the most re-proofs asked at once in a row without a reply that proves the thread;
/// after them each waits `REPROOF_BACKOFF_MS`, doubled each time up to `MAX_REPROOF_BACKOFF_MS`.
/// A loss the re-proof's own reply causes (the thread under another session, a reply over the
/// line bound) otherwise asked again at once, forever: a review saw 180 durable events a
/// second, and as many `thread/resume` writes, until `agent stop`. Asked again later rather
/// than never: what made the reply a loss may pass.
pub const MAX_UNPROVEN_REPROOFS: u32 = 3;
pub const REPROOF_BACKOFF_MS: u64 = 1_000;
pub const MAX_REPROOF_BACKOFF_MS: u64 = 16_000;

impl<L: LineFolder> StreamFollower<L> {
    /// `start`: where this process's output starts; `line_bound`: the longest line folded
    /// (production: `app_server::MAX_LINE_BYTES`).
    pub fn new(thread_id: &str, session: SessionId, start: u64, folder: L, line_bound: usize) -> StreamFollower<L> {
        assert!(line_bound > 0, "a line bound of zero loses every line");
        StreamFollower {
            fold: Fold::expecting(thread_id, &session),
            session,
            thread_id: thread_id.to_string(),
            folder,
            line_bound,
            start,
            offset: start,
            position: start,
            partial: Vec::new(),
            skipping: false,
            attached: false,
            resume_at: None,
            pending_loss: None,
            earlier: None,
            reproved: false,
            replay_due: false,
            answered: Default::default(),
            unproven_reproofs: 0,
            proofs_seen: 0,
            next_reproof_at_ms: 0,
            stats: FollowStats::default(),
        }
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    /// The offset the next page is read from.
    pub fn next_offset(&self) -> u64 {
        self.offset
    }

    /// One past the last whole line read.
    pub fn position(&self) -> u64 {
        self.position
    }

    /// REC-2: after a restart, `Attached` at the cursor, then exactly the events after it. The
    /// lines of this process before the cursor are folded again silently (the turn state at
    /// the cursor), as long as the holder still has them; otherwise what happened there is
    /// unknown. False: answered already (another session), nothing to read for it.
    pub fn resume(&mut self, from: &Cursor, events: &mut Vec<ObserverEvent>) -> bool {
        if from.session != self.session {
            let reason = "the agent's app-server thread is not the one the request was armed on".to_string();
            events.push(ObserverEvent::SessionLost { reason, session: Some(from.session.clone()), before: None });
            return false;
        }
        self.fold = Fold::expecting(&self.thread_id, &self.session);
        self.folder.reset();
        self.offset = self.start;
        self.position = self.start;
        self.partial.clear();
        self.skipping = false;
        self.attached = false;
        self.resume_at = Some(from.position);
        self.pending_loss = None;
        self.earlier = None;
        if from.position < self.start {
            // MGD-4: the cursor lies in an earlier process's output; read it from there.
            self.offset = from.position;
            self.earlier = Some(EarlierTail { cursor: from.position, fold: Fold::expecting(&self.thread_id, &self.session), partial: Vec::new(), missing: false });
        }
        true
    }

    /// Folds one page read from `next_offset()`. A page that does not fit (bounds that do not
    /// match its bytes, or bytes before the offset asked for) is refused and changes nothing; one
    /// that starts later than asked is a loss whatever its `truncated` flag says.
    pub fn page(&mut self, page: Page<'_>, events: &mut Vec<ObserverEvent>) -> Result<(), String> {
        if page.start > page.end || page.end - page.start != page.data.len() as u64 || page.start < self.offset {
            return Err(format!("the holder's page {}..{} ({} bytes) does not continue the stream at {}", page.start, page.end, page.data.len(), self.offset));
        }
        let page = Page { truncated: page.truncated || page.start > self.offset, ..page };
        if page.truncated {
            self.stats.evicted += 1;
        }
        let page = match self.earlier.is_some() {
            true => match self.earlier_page(page, events) {
                Some(rest) => rest,
                None => return Ok(()),
            },
            false => page,
        };
        if page.truncated {
            // Also for a fresh observer (a daemon restart): the daemon before it may not have
            // made those notifications durable, so their loss is reported, never skipped
            // silently: at the re-attach, bounded (`reattach`), so the engine reports it only
            // past its durable mark.
            self.lost(page.start);
        } else if !self.attached && !self.skipping {
            self.attach(events);
        }
        self.offset = page.end;
        self.take(page.data, page.start, events);
        Ok(())
    }

    /// The part of a page before this process's start goes to the earlier tail; the rest (from
    /// `start` on) is returned, once the tail is judged.
    fn earlier_page<'a>(&mut self, page: Page<'a>, events: &mut Vec<ObserverEvent>) -> Option<Page<'a>> {
        let tail = self.earlier.as_mut().expect("checked");
        if page.truncated && page.start > self.start {
            // This process's own output after the cursor is gone too: a plain resume loss.
            self.earlier = None;
            return Some(page);
        }
        tail.missing |= page.truncated;
        let split = (self.start.saturating_sub(page.start) as usize).min(page.data.len());
        let (before, after) = page.data.split_at(split);
        let mut at = 0;
        while let Some(newline) = before[at..].iter().position(|&b| b == b'\n') {
            let end = at + newline;
            tail.partial.extend_from_slice(&before[at..end]);
            let line = std::mem::take(&mut tail.partial);
            let position = page.start + end as u64 + 1;
            tail.missing |= tail.fold.line(&line, position).iter().any(|e| e.position().is_some());
            at = end + 1;
        }
        tail.partial.extend_from_slice(&before[at..]);
        if tail.partial.len() > self.line_bound {
            // An over-long line: its content is unknown (what follows it up to its newline is
            // read as one more line and means nothing).
            tail.missing = true;
            tail.partial.clear();
        }
        self.offset = page.start + split as u64;
        if self.offset < self.start {
            return None; // the tail goes on in the next page
        }
        let tail = self.earlier.take().expect("checked");
        if tail.missing || !tail.partial.is_empty() {
            // The earlier process wrote records after the cursor that this observer can only
            // name as lost: the stream gets its gap, and this process's stream follows whole
            // from its start (the engine ends only requests armed before it).
            let reason = format!("an earlier app-server process's notifications after the stream's mark ({}..{}) were never reported", tail.cursor, self.start);
            events.push(ObserverEvent::SessionLost { reason, session: Some(self.session.clone()), before: Some(self.start) });
            self.resume_at = Some(self.start);
        }
        Some(Page { data: after, start: self.start, end: page.end, truncated: false })
    }

    /// MGD-4: a stream read to its end that never showed this process loading the thread (a
    /// daemon restart after the holder dropped the handshake's reply) asks once; MGD-6: so does
    /// each loss of output, loaded or not, since Codex answers a `thread/resume` by sending every
    /// server request still pending again (one the loss took would wait forever). True when the
    /// caller should write a `thread/resume` of the agent's own thread now (`now_ms`: the
    /// caller's monotonic clock, for the backoff after re-proofs that proved nothing: a wall
    /// clock stepped back would stretch the backoff by the step).
    pub fn wants_reproof(&mut self, now_ms: u64) -> bool {
        if !self.attached || self.thread_id.is_empty() {
            return false;
        }
        let unproven = !self.reproved && !self.fold.loaded;
        if !unproven && !self.replay_due {
            return false;
        }
        if self.fold.proofs != self.proofs_seen {
            self.proofs_seen = self.fold.proofs; // a reply proved the thread since the last ask
            self.unproven_reproofs = 0;
        }
        if self.unproven_reproofs >= MAX_UNPROVEN_REPROOFS && now_ms < self.next_reproof_at_ms {
            return false; // still due (`replay_due` stays): asked once the backoff ends
        }
        self.unproven_reproofs += 1;
        if self.unproven_reproofs >= MAX_UNPROVEN_REPROOFS {
            let doublings = (self.unproven_reproofs - MAX_UNPROVEN_REPROOFS).min(4);
            self.next_reproof_at_ms = now_ms.saturating_add((REPROOF_BACKOFF_MS << doublings).min(MAX_REPROOF_BACKOFF_MS));
        }
        self.reproved = true;
        self.replay_due = false;
        true
    }

    /// CORR-11: whether an exit after a read that went `read_ok` drained the process: its
    /// stream was read whole AND no `turn/start` it accepted is still unreported (Codex answers
    /// the request before it notifies the turn; an exit in between ended a request
    /// `delivery_failed` whose prompt had been taken, and a caller told so may send it again).
    /// One rule for the runtime's `AgentObserver::drained` and the simulator.
    /// An unfinished last line is no drained stream either: it may be a record the process
    /// was writing when it died (a review: an exit mid-way through `{"method":"turn/started"`
    /// was reported `drained: true`).
    pub fn exit_drained(&self, read_ok: bool) -> bool {
        // A loss not reported yet (its line not ended) is no drained stream either.
        read_ok && self.partial.is_empty() && self.pending_loss.is_none() && self.fold.accepted_turns.is_empty() && !self.fold.accepted_overflow
    }

    /// MGD-4, MGD-6: the re-proof `wants_reproof` asked for could not be written (the holder
    /// timed out, the app-server does not read): asked again at the next read. It was spent:
    /// after a failed write the thread stayed unproven, and a request a loss took never came
    /// again (a review found it).
    pub fn reproof_failed(&mut self) {
        self.replay_due = true;
        self.unproven_reproofs = self.unproven_reproofs.saturating_sub(1); // not an answer
    }

    /// MGD-6: the server requests of this process still pending (no `serverRequest/resolved`,
    /// no end of their turn) that were not answered through this follower yet: (id, method).
    /// A restarted daemon's follower answers them again (the server ignores an answer to a
    /// request it resolved), so a crash between reading a request and answering it cannot
    /// leave a turn waiting forever.
    pub fn unanswered_requests(&self) -> Vec<(serde_json::Value, String)> {
        self.fold.pending_requests.iter().filter(|(key, _)| !self.answered.contains(*key)).map(|(_, request)| request.clone()).collect()
    }

    /// The answer to server request `id` was written.
    pub fn answered(&mut self, id: &serde_json::Value) {
        self.answered.insert(id.to_string());
    }

    /// The view, given the last read's error (None: it read fine).
    pub fn snapshot(&self, incarnation: Incarnation, process: ProcessIdentity, read_error: Option<&str>) -> ObserverSnapshot {
        let status = match read_error {
            None => ObserverStatus::Attached,
            Some(reason) => ObserverStatus::Unavailable { reason: reason.to_string() },
        };
        // MGD-2: until this process has loaded the agent's thread nothing can be admitted.
        let status = match status {
            ObserverStatus::Attached if !self.fold.loaded => ObserverStatus::Unavailable { reason: "the app-server has not loaded the agent's thread yet".to_string() },
            other => other,
        };
        let attached = self.attached && matches!(status, ObserverStatus::Attached);
        ObserverSnapshot {
            incarnation,
            process: Some(process),
            status,
            session: attached.then(|| self.session.clone()),
            position: self.position,
            turn: if attached { self.fold.turn.clone() } else { TurnState::Unknown },
            // No composer: a managed session takes its prompt as turn input.
            composer: Composer::Empty,
        }
    }

    /// The first read: the stream is whole from its start.
    fn attach(&mut self, events: &mut Vec<ObserverEvent>) {
        self.attached = true;
        if self.resume_at.is_none() {
            events.push(ObserverEvent::Attached { session: self.session.clone(), position: self.position });
        }
    }

    /// MGD-4: the holder evicted output this observer never read: what those notifications
    /// said is unknown. Reported at the re-attach (`reattach`), bounded by it; the stream is
    /// followed again from the next whole line with an unknown turn state.
    fn lost(&mut self, start: u64) {
        let reason = format!("app-server notifications were evicted before they were read (bytes {}..{start})", self.offset);
        self.pending_loss.get_or_insert(reason); // the first loss names where it began
        // What a loss cannot undo is kept: the pending requests, the proofs counted, and the
        // turns the app-server accepted (CORR-11: the evicted bytes may have held their
        // `turn/started` or not; dropping them made an exit right after count as drained).
        let kept = std::mem::replace(&mut self.fold, Fold::expecting(&self.thread_id, &self.session));
        self.fold = Fold {
            turn: TurnState::Unknown,
            loaded: kept.loaded,
            pending_requests: kept.pending_requests,
            proofs: kept.proofs,
            accepted_turns: kept.accepted_turns,
            accepted_overflow: kept.accepted_overflow,
            answered_ids: kept.answered_ids,
            answered_overflow: kept.answered_overflow,
            ..Fold::expecting(&self.thread_id, &self.session)
        };
        self.partial.clear();
        self.skipping = true; // the line in progress at `start` began in the evicted bytes
        self.attached = false;
        // MGD-4: the answer to a re-proof already asked may have been in the evicted bytes;
        // MGD-6: so may a server request. One more ask, once attached again (one per loss:
        // losses are bounded by the output).
        self.replay_due = true;
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
                    self.reattach(position, events);
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
            if self.partial.len() > self.line_bound {
                self.stats.long_lines += 1;
                self.partial.clear();
                self.skipping = true;
                self.fold.turn = TurnState::Unknown;
                // Before a resume's cursor the lines are only re-folded (their events were
                // reported before): a loss there changes the turn state, not the stream.
                if self.resume_at.is_none() {
                    let reason = "an app-server message exceeded the line bound; its content is unknown".to_string();
                    events.push(ObserverEvent::SessionLost { reason, session: None, before: None });
                    self.attached = false;
                }
                // MGD-4, MGD-6: as any loss: the long line may have been a server request, and
                // only a re-proof's reply says what the thread does now (the agent stayed
                // `unknown` for good without one; a review reproduced it).
                self.replay_due = true;
            }
        }
    }

    /// The stream is followed again from `position`, one past the line a loss cut. An
    /// eviction (`pending_loss`) took only records at or before `position`, in this process's
    /// output or an earlier one's: reported so (`before`), so the engine ends only the
    /// requests armed before it and reports nothing the stream already holds (EV-4: the
    /// durable mark covers it). A fresh observer read from the start of a stream whose head
    /// the holder had evicted, and its whole loss was an `observer.gap` after the mark: every
    /// turn still in the ring was reported again, `turn.final` too, at each restart (a hostile
    /// run; a review: so did an eviction between two pages of the catch-up that follows). A
    /// resume whose cursor lies at or past `position` re-folds the lines up to it silently and
    /// attaches there (REC-2); before it, what followed its cursor is lost.
    fn reattach(&mut self, position: u64, events: &mut Vec<ObserverEvent>) {
        if let Some(reason) = self.pending_loss.take() {
            events.push(ObserverEvent::SessionLost { reason, session: Some(self.session.clone()), before: Some(position) });
            match self.resume_at {
                Some(cursor) if cursor >= position => return,
                _ => self.resume_at = None,
            }
        }
        events.push(ObserverEvent::Attached { session: self.session.clone(), position });
    }

    fn fold_line(&mut self, line: &[u8], position: u64, events: &mut Vec<ObserverEvent>) {
        let mut folded = self.folder.fold_line(&mut self.fold, line, position);
        self.position = position;
        if folded.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. })) {
            // CORR-3: what the thread does now is unknown; the stream is followed again from
            // right after that line (so a later loss is reported as one). MGD-4: a re-proof's
            // reply says what the thread does now (without one the agent stayed `unknown`).
            self.fold.turn = TurnState::Unknown;
            self.replay_due = true;
            folded.push(ObserverEvent::Attached { session: self.session.clone(), position });
        }
        if let Some(cursor) = self.resume_at {
            if position < cursor {
                return; // before the cursor: folded silently (REC-2)
            }
            self.resume_at = None;
            // The cursor is a line end of the same stream; an event AT it was reported before.
            events.push(ObserverEvent::Attached { session: self.session.clone(), position: cursor });
            if position == cursor {
                return;
            }
        }
        events.extend(folded);
        // MGD-6: an answered request that is no longer pending (resolved, or its turn ended)
        // is forgotten, so a server that uses its id again is answered again (the set only
        // grew, and a reused id was never declined: its turn waited for good). Not while a
        // resume re-folds the lines before its cursor: the pending set is whole only after.
        let pending = &self.fold.pending_requests;
        self.answered.retain(|id| pending.contains_key(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::OutputRing;
    use serde_json::json;

    const THREAD: &str = "thread-a";

    fn line(value: serde_json::Value) -> Vec<u8> {
        let mut bytes = serde_json::to_vec(&value).unwrap();
        bytes.push(b'\n');
        bytes
    }

    fn thread_reply() -> Vec<u8> {
        line(json!({"id": "h", "result": {"thread": {"id": THREAD, "sessionId": THREAD, "status": {"type": "idle"}}}}))
    }

    fn started(turn: &str) -> Vec<u8> {
        line(json!({"method": "turn/started", "params": {"threadId": THREAD, "turn": {"id": turn}}}))
    }

    fn cursor(position: u64) -> Cursor {
        Cursor { session: SessionId(THREAD.to_string()), position }
    }

    fn new_follower(start: u64) -> StreamFollower {
        StreamFollower::new(THREAD, SessionId(THREAD.to_string()), start, PlainFold, 4096)
    }

    /// Reads the ring to its end in pages of `page` bytes.
    fn read_all(follower: &mut StreamFollower, ring: &OutputRing, page: usize) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        loop {
            let slice = ring.read(follower.next_offset(), page).unwrap();
            let view = Page { data: &slice.data, start: slice.start, end: slice.end, truncated: slice.truncated };
            follower.page(view, &mut events).unwrap();
            if slice.data.is_empty() {
                return events;
            }
        }
    }

    fn kinds(events: &[ObserverEvent]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                ObserverEvent::Attached { position, .. } => format!("attached@{position}"),
                ObserverEvent::SessionLost { before: Some(b), .. } => format!("lost_before@{b}"),
                ObserverEvent::SessionLost { .. } => "lost".to_string(),
                ObserverEvent::TurnStarted { turn, .. } => format!("started:{}", turn.0),
                other => format!("{other:?}"),
            })
            .collect()
    }

    /// An earlier process wrote its handshake reply, then `after_cursor`; the current process
    /// (from `start`) wrote its own reply and started turn t2.
    fn two_processes(after_cursor: &[u8], capacity: usize) -> (OutputRing, u64, u64) {
        let mut ring = OutputRing::new(capacity);
        ring.push(&thread_reply());
        let cursor = ring.end();
        ring.push(after_cursor);
        let start = ring.end();
        ring.push(&thread_reply());
        ring.push(&started("t2"));
        (ring, cursor, start)
    }

    // MGD-4: records of the earlier process after the cursor were never reported: a loss
    // bounded by this process's start, then this process's stream whole from that start.
    #[test]
    fn mgd_4_earlier_process_tail_with_a_record_is_a_bounded_loss() {
        for page in [7, 64, 4096] {
            let (ring, at, start) = two_processes(&started("t1"), 1 << 16);
            let mut follower = new_follower(start);
            let mut events = Vec::new();
            assert!(follower.resume(&cursor(at), &mut events));
            events.extend(read_all(&mut follower, &ring, page));
            assert_eq!(kinds(&events), [format!("lost_before@{start}"), format!("attached@{start}"), "started:t2".to_string()], "page {page}");
            assert_eq!(follower.position(), ring.end());
        }
        // An unfinished line of the earlier process is a record it may have been.
        let (ring, at, start) = two_processes(b"{\"method\":\"turn/sta", 1 << 16);
        let mut follower = new_follower(start);
        let mut events = Vec::new();
        follower.resume(&cursor(at), &mut events);
        events.extend(read_all(&mut follower, &ring, 4096));
        assert_eq!(kinds(&events)[0], format!("lost_before@{start}"));
    }

    // MGD-4: nothing but replies after the cursor in the earlier process: nothing is lost; the
    // answer is `Attached` at the cursor, then this process's events.
    #[test]
    fn mgd_4_earlier_process_tail_without_records_attaches_at_the_cursor() {
        let reply = line(json!({"id": "x", "result": {}}));
        for page in [5, 4096] {
            let (ring, at, start) = two_processes(&reply, 1 << 16);
            let mut follower = new_follower(start);
            let mut events = Vec::new();
            follower.resume(&cursor(at), &mut events);
            events.extend(read_all(&mut follower, &ring, page));
            assert_eq!(kinds(&events), [format!("attached@{at}"), "started:t2".to_string()], "page {page}");
            assert!(follower.snapshot(Incarnation("i".into()), ProcessIdentity { pid: 1, start_time_ticks: 1 }, None).status == ObserverStatus::Attached);
        }
    }

    // MGD-4: evicted bytes of the earlier process are a bounded loss too; evicted bytes of the
    // current process after the cursor are a plain resume loss (anything after the mark).
    #[test]
    fn mgd_4_evictions_across_a_process_start() {
        let filler = line(json!({"id": "pad", "result": {"pad": "x".repeat(200)}}));
        let mut tail = started("t1");
        tail.extend_from_slice(&filler);
        let (ring, at, start) = two_processes(&tail, thread_reply().len() + started("t2").len() + 50);
        assert!(ring.start() > at && ring.start() <= start, "the cursor's bytes are gone, this process's are kept");
        let mut follower = new_follower(start);
        let mut events = Vec::new();
        follower.resume(&cursor(at), &mut events);
        events.extend(read_all(&mut follower, &ring, 4096));
        assert_eq!(kinds(&events), [format!("lost_before@{start}"), format!("attached@{start}"), "started:t2".to_string()]);

        let mut ring = OutputRing::new(300);
        ring.push(&thread_reply());
        let at = ring.end();
        let start = ring.end();
        ring.push(&filler);
        ring.push(&started("t2"));
        assert!(ring.start() > start);
        let mut follower = new_follower(start - 1);
        let mut events = Vec::new();
        follower.resume(&cursor(at - 1), &mut events);
        events.extend(read_all(&mut follower, &ring, 4096));
        // Nothing of this process was read yet: the loss is bounded by the re-attach, and it
        // lies after the cursor (a request armed there loses its evidence).
        let attach = start + filler.len() as u64;
        assert_eq!(kinds(&events), [format!("lost_before@{attach}"), format!("attached@{attach}"), "started:t2".to_string()]);
        assert!(matches!(&events[0], ObserverEvent::SessionLost { session: Some(_), .. }));
    }

    /// MGD-4, EV-4: a fresh follower (a daemon restart) or a resume reading a stream whose
    /// head the holder evicted reports the loss bounded by where it re-attaches: the engine
    /// then reports nothing its durable mark covers again. The whole loss was an
    /// `observer.gap` after the mark, and every turn still in the ring was reported again,
    /// `turn.final` too, at each restart (a hostile run: 14 turns, one more copy per restart),
    /// and a request in flight ended `indeterminate` though its records were all kept.
    #[test]
    fn mgd_4_an_evicted_head_is_a_loss_bounded_by_the_reattach() {
        let filler = line(json!({"id": "pad", "result": {"pad": "x".repeat(200)}}));
        // Kept: the filler but its first 10 bytes, and what follows it.
        let mut ring = OutputRing::new(filler.len() - 10 + started("t2").len() + started("t3").len());
        ring.push(&thread_reply());
        ring.push(&started("t1"));
        ring.push(&filler);
        let t1 = ring.end();
        ring.push(&started("t2"));
        let t2 = ring.end();
        ring.push(&started("t3"));
        assert_eq!(ring.start(), t1 - filler.len() as u64 + 10, "the head and part of the filler are evicted");

        let mut fresh = new_follower(0);
        let events = read_all(&mut fresh, &ring, 4096);
        assert_eq!(kinds(&events), [format!("lost_before@{t1}"), format!("attached@{t1}"), "started:t2".to_string(), "started:t3".to_string()]);
        assert!(matches!(&events[0], ObserverEvent::SessionLost { session: Some(_), before: Some(_), .. }));

        // A resume whose cursor lies past the loss re-folds up to it and attaches there.
        let mut resumed = new_follower(0);
        let mut events = Vec::new();
        assert!(resumed.resume(&cursor(t2), &mut events));
        events.extend(read_all(&mut resumed, &ring, 4096));
        assert_eq!(kinds(&events), [format!("lost_before@{t1}"), format!("attached@{t2}"), "started:t3".to_string()]);
        assert_eq!(resumed.snapshot(Incarnation("i".into()), ProcessIdentity { pid: 1, start_time_ticks: 1 }, None).turn, TurnState::Busy { turn: Some(wakterm_engine::TurnId("t3".into())) }, "followed to the end");
    }

    // MGD-6: a server request of the thread is pending until resolved (or its turn ends); it is
    // answered once per follower, and a new follower (a restarted daemon) answers a request
    // still pending again; another thread's request is not ours to answer.
    #[test]
    fn mgd_6_a_reused_request_id_is_answered_again_and_a_loss_asks_for_a_reproof() {
        let approval = |id: u64| line(json!({"id": id, "method": "item/commandExecution/requestApproval", "params": {"threadId": THREAD, "turnId": "t1"}}));
        let mut ring = OutputRing::new(1 << 16);
        ring.push(&thread_reply());
        ring.push(&started("t1"));
        ring.push(&approval(7));
        let mut follower = new_follower(0);
        read_all(&mut follower, &ring, 4096);
        assert_eq!(follower.unanswered_requests().len(), 1);
        follower.answered(&json!(7));
        ring.push(&line(json!({"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": "t1", "status": "completed"}}})));
        ring.push(&started("t2"));
        ring.push(&approval(7));
        read_all(&mut follower, &ring, 4096);
        assert_eq!(follower.unanswered_requests(), [(json!(7), "item/commandExecution/requestApproval".to_string())], "id 7 again, in another turn: answered again");
        while follower.wants_reproof(0) {}
        // CORR-3: a notification about another thread loses the evidence; a re-proof's reply
        // says what the thread does now (without one the agent stayed `unknown`).
        ring.push(&line(json!({"method": "thread/tokenUsage/updated", "params": {"threadId": "another-thread"}})));
        read_all(&mut follower, &ring, 4096);
        assert!(follower.wants_reproof(0), "a loss asks for one re-proof");
        assert!(!follower.wants_reproof(0), "once");
    }

    /// MGD-4: a re-proof whose write failed is asked for again at the next read.
    #[test]
    fn mgd_4_a_reproof_that_could_not_be_written_is_asked_again() {
        let mut ring = OutputRing::new(1 << 16);
        ring.push(&line(json!({"method": "thread/status/changed", "params": {"threadId": THREAD, "status": {"type": "idle"}}})));
        let mut follower = new_follower(0);
        read_all(&mut follower, &ring, 4096);
        assert!(follower.wants_reproof(0), "never shown loading the thread: one re-proof");
        assert!(!follower.wants_reproof(0));
        follower.reproof_failed();
        assert!(follower.wants_reproof(0), "its write failed: asked again");
        assert!(!follower.wants_reproof(0));
    }

    /// MGD-4: a re-proof whose own reply is a loss (the thread under another session) is not
    /// asked again and again: `MAX_UNPROVEN_REPROOFS` at once, then with a doubling backoff,
    /// until a reply proves the thread. Without the bound each reply asked the next at once,
    /// forever.
    #[test]
    fn mgd_4_reproofs_that_prove_nothing_are_not_asked_forever() {
        let mut ring = OutputRing::new(1 << 20);
        let mut follower = new_follower(0);
        let mismatch = line(json!({"id": "r", "result": {"thread": {"id": THREAD, "sessionId": "another-session", "status": {"type": "idle"}}}}));
        let mut asked = Vec::new();
        for now in (0..40_000).step_by(100) {
            read_all(&mut follower, &ring, 4096);
            if follower.wants_reproof(now) {
                asked.push(now);
                ring.push(&mismatch); // what the app-server answers every time
            }
        }
        // Three at once, then after 1, 2, 4, 8, 16, 16 s.
        assert_eq!(asked, [0, 100, 200, 1_200, 3_200, 7_200, 15_200, 31_200], "asked at {asked:?}");
        // A reply that proves the thread (the process took it back under its own session)
        // lets the next loss ask again.
        ring.push(&thread_reply());
        ring.push(&mismatch);
        read_all(&mut follower, &ring, 4096);
        assert!(follower.wants_reproof(31_300), "a proof since: asked again at once");
    }

    /// CORR-11: an accepted turn whose `turn/started` a loss may have taken is kept: an exit
    /// right after is not drained.
    #[test]
    fn corr_11_accepted_turns_outlive_a_loss() {
        let mut ring = OutputRing::new(2048);
        ring.push(&thread_reply());
        ring.push(&line(json!({"id": "wakterm-r1", "result": {"turn": {"id": "t9", "status": "inProgress"}}})));
        let mut follower = new_follower(0);
        read_all(&mut follower, &ring, 4096);
        assert!(!follower.exit_drained(true), "accepted, not notified yet");
        let delta = line(json!({"method": "item/agentMessage/delta", "params": {"threadId": THREAD, "delta": "x".repeat(900)}}));
        for _ in 0..4 {
            ring.push(&delta); // evicted from the 2 KiB ring before they are read: a loss
        }
        let events = read_all(&mut follower, &ring, 4096);
        assert!(events.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. })), "{events:?}");
        assert!(!follower.exit_drained(true), "the loss took no accepted turn with it");
        ring.push(&started("t9"));
        read_all(&mut follower, &ring, 4096);
        assert!(follower.exit_drained(true));
        // The process died writing a line: not drained until it ends (or the stream is lost).
        ring.push(br#"{"method":"turn/started","params":{"threadId":""#);
        read_all(&mut follower, &ring, 4096);
        assert!(!follower.exit_drained(true), "an unfinished line may be a record");
    }

    #[test]
    fn mgd_6_pending_server_requests_are_answered_once_per_follower() {
        let approval = |id: u64, thread: &str| line(json!({"id": id, "method": "item/commandExecution/requestApproval", "params": {"threadId": thread, "turnId": "t1"}}));
        let mut ring = OutputRing::new(1 << 16);
        ring.push(&thread_reply());
        ring.push(&started("t1"));
        ring.push(&approval(7, THREAD));
        ring.push(&approval(8, "thread-b"));
        let mut first = new_follower(0);
        read_all(&mut first, &ring, 4096);
        let pending = first.unanswered_requests();
        assert_eq!(pending, [(json!(7), "item/commandExecution/requestApproval".to_string())]);
        first.answered(&json!(7));
        assert!(first.unanswered_requests().is_empty(), "answered once");
        let mut events = Vec::new();
        first.resume(&cursor(ring.end()), &mut events);
        read_all(&mut first, &ring, 4096);
        assert!(first.unanswered_requests().is_empty(), "a resume re-folds but does not answer again");
        let mut restarted = new_follower(0);
        read_all(&mut restarted, &ring, 4096);
        assert_eq!(restarted.unanswered_requests().len(), 1, "still pending: a new daemon answers it");
        ring.push(&line(json!({"method": "serverRequest/resolved", "params": {"threadId": THREAD, "requestId": 7}})));
        read_all(&mut restarted, &ring, 4096);
        assert!(restarted.unanswered_requests().is_empty(), "resolved");
        ring.push(&approval(9, THREAD));
        ring.push(&line(json!({"method": "turn/completed", "params": {"threadId": THREAD, "turn": {"id": "t1", "status": "interrupted"}}})));
        read_all(&mut restarted, &ring, 4096);
        assert!(restarted.unanswered_requests().is_empty(), "the turn's end resolves what it left pending");
        let bytes = crate::app_server::decline(&json!(7), "item/commandExecution/requestApproval");
        assert!(bytes.starts_with(b"#\n{") && bytes.ends_with(b"}\n"), "on a line of its own");
        let declined: serde_json::Value = serde_json::from_slice(&bytes[2..]).unwrap();
        assert_eq!((declined["id"].clone(), declined["error"]["code"].clone(), declined.get("result")), (json!(7), json!(-32000), None));
        assert!(declined["error"].get("data").is_none(), "no turnTransition data: Codex would drop the answer");
    }

    // MGD-4: the thread re-proof is asked once; a loss that may have eaten its answer allows one
    // more ask (found by the simulator: the answer evicted with a burst, the agent unusable for
    // good); once the thread is proven loaded, never again.
    #[test]
    fn mgd_4_a_loss_before_the_reproof_answer_asks_again() {
        let filler = line(json!({"method": "item/agentMessage/delta", "params": {"threadId": THREAD, "delta": "x".repeat(300)}}));
        let mut ring = OutputRing::new(400);
        ring.push(&thread_reply());
        ring.push(&filler); // evicts the handshake's reply
        let mut follower = new_follower(0);
        read_all(&mut follower, &ring, 4096);
        assert!(follower.wants_reproof(0), "nothing retained proves the thread loaded");
        assert!(!follower.wants_reproof(0), "asked once");
        ring.push(&thread_reply()); // the answer...
        ring.push(&filler); // ...evicted before it was read
        ring.push(&filler);
        let events = read_all(&mut follower, &ring, 4096);
        assert!(events.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. })), "{events:?}");
        assert!(follower.wants_reproof(0), "the answer may have been lost: ask again");
        ring.push(&thread_reply());
        read_all(&mut follower, &ring, 4096);
        assert!(follower.fold.loaded);
        assert!(!follower.wants_reproof(0), "proven loaded, nothing lost since: nothing to ask");
        ring.push(&filler);
        ring.push(&filler);
        read_all(&mut follower, &ring, 4096);
        assert!(follower.wants_reproof(0), "MGD-6: the loss may have taken a server request: ask once more");
        assert!(!follower.wants_reproof(0), "once per loss");
    }

    // A page that does not continue the stream is refused and changes nothing; one that starts
    // later than asked is a loss whatever its flag says.
    #[test]
    fn pages_must_continue_the_stream() {
        let mut follower = new_follower(100);
        let mut events = Vec::new();
        let early = Page { data: b"x\n", start: 98, end: 100, truncated: false };
        assert!(follower.page(early, &mut events).is_err());
        let wrong = Page { data: b"x\n", start: 100, end: 105, truncated: false };
        assert!(follower.page(wrong, &mut events).is_err());
        assert!(events.is_empty() && follower.next_offset() == 100);
        let reply = thread_reply();
        let mut data = b"tail of a lost line\n".to_vec();
        data.extend_from_slice(&reply);
        let late = Page { data: &data, start: 150, end: 150 + data.len() as u64, truncated: false };
        follower.page(late, &mut events).unwrap();
        assert_eq!(kinds(&events), ["lost_before@170".to_string(), "attached@170".to_string()]);
        assert_eq!(follower.stats.evicted, 1);
        // A loss once attached is bounded by its re-attach too (the engine reports it past its
        // mark: a live stream's loss, a restart's catch-up interrupted by an eviction).
        let later = Page { data: b"tail\n", start: 300, end: 305, truncated: false };
        follower.page(later, &mut events).unwrap();
        assert_eq!(kinds(&events)[2..], ["lost_before@305".to_string(), "attached@305".to_string()]);
    }
}
