//! The oracle: ground truth (bytes that reached each pane, turns the provider started and
//! which write opened them, finals, durable commits) and the checks of DESIGN.md's list, run
//! at every receipt, write and publication, and at the end of the quiet phase (liveness).

use std::collections::{BTreeMap, BTreeSet};
use wakterm_engine::{prompt::prompt_hash, Classification, ProcessIdentity, Receipt, SessionId, TerminalEvent, TerminalState, TurnId};

/// ADM-5 liveness: how long before a call the observer must have delivered a turn start for
/// the call's `awaiting_turn_start` refusal to be a stall. The driver's inbox is FIFO, so an
/// event sent before the call is applied before it; the margin only keeps the rule obviously
/// clear of any race.
pub const STALL_MARGIN_MS: u64 = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A receipt claims more (or other) than the evidence shows.
    Misclassified,
    /// One request id reached a pane twice.
    DuplicateWrite,
    /// A terminal event that is wrong: not our turn's final, out of order, twice, not durable.
    WrongFinal,
    /// Liveness: something unfinished after faults stopped.
    Unfinished,
    /// The observer reported evidence the ground truth does not hold: it started from a
    /// checkpoint saved for another process (OBS-1), or a resume did not replay every record
    /// after its armed cursor (REC-2, OBS-2).
    Evidence,
    /// Liveness (ADM-5, ADM-17): an admission was refused `busy`/`awaiting_turn_start` although
    /// the observer had delivered a turn start after the agent's last write well before the
    /// call: the engine kept waiting for a turn it had been told of.
    Stalled,
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: Kind,
    pub message: String,
}

/// One write that passed the pane's incarnation check.
#[derive(Clone, Debug)]
pub struct WriteFact {
    /// The prompt as written (framing stripped).
    pub text: String,
    pub bytes_reached: usize,
    pub bytes_total: usize,
}

#[derive(Clone, Debug)]
pub struct TurnTruth {
    /// The request whose complete write submitted the text that opened this turn.
    pub opened_by: Option<String>,
    pub final_message: Option<String>,
    pub aborted: bool,
    /// The rollout file (identity) the turn started in, and the one its final was written to.
    pub file: u64,
    pub final_file: Option<u64>,
}

/// What a caller sent.
#[derive(Clone, Debug)]
pub struct CallInput {
    pub agent: usize,
    pub request_id: String,
    pub prompt: String,
    pub return_final: bool,
}

#[derive(Default)]
pub struct Oracle {
    /// Normal form of every prompt a caller used -> its request id.
    pub prompts: BTreeMap<String, String>,
    pub writes: BTreeMap<String, Vec<WriteFact>>,
    pub turns: BTreeMap<String, TurnTruth>,
    /// (agent, hash) of every user message the provider recorded.
    pub user_messages: BTreeSet<(usize, String)>,
    pub last_sequence: u64,
    pub ended: BTreeMap<String, u64>,
    pub violations: Vec<Violation>,
    /// The classification of the last receipt each request id got.
    pub last_receipt: BTreeMap<String, Classification>,
    /// IDEM-7: ids a receipt called unwritten or retry-safe, and no call for the id has started
    /// since: a write of such an id proves the receipt claimed less than the truth.
    pub claimed_unwritten: BTreeMap<String, String>,
    /// Calls numbered in the order they started (the driver's inbox is FIFO), and the number of
    /// the latest call per id.
    pub calls_started: u64,
    pub latest_call: BTreeMap<String, u64>,
    /// TIME-1: per request with a deadline, its first call's real (simulated) time, the
    /// timeout, and the daemon's wall-clock offset then; and the current daemon's offset.
    pub deadlines: BTreeMap<String, (u64, u64, i64)>,
    pub daemon_wall_offset_ms: i64,
    /// OBS-3: return-final requests (and their agent) a restarted daemon resumes in a rollout
    /// that was replaced while it was down: nothing read from the new file may end them.
    pub replaced_while_down: BTreeMap<String, usize>,
    /// A known runtime gap, counted as `note.obs3_loss_not_durable` instead of failed: requests
    /// of `replaced_while_down` whose OBS-3 loss did not become durable before a crash, and
    /// that a later daemon resumed from a checkpoint saved on the replacement file (which then
    /// proves fine). What they end with may come from the replacement file.
    pub obs3_unprotected: BTreeSet<String>,
    /// ADM-5 liveness: per agent, where its last write that passed the pane's incarnation check
    /// went (session, and the record's end then: any turn start after it is newer), and the
    /// first turn start after it the current daemon's observer delivered to the engine (when,
    /// where, which turn).
    pub last_write: BTreeMap<usize, (SessionId, u64)>,
    pub turn_after_write: BTreeMap<usize, (u64, u64, TurnId)>,
    /// Calls still waiting for their receipt, per request id: call number -> start time. A
    /// joined caller gets the receipt of the admission an earlier call of the id started, so
    /// that receipt may have been decided as early as the earliest of them.
    pub open_calls: BTreeMap<String, BTreeMap<u64, u64>>,
}

impl Oracle {
    fn fail(&mut self, kind: Kind, message: String) {
        self.violations.push(Violation { kind, message });
    }

    pub fn request_of(&self, text: &str) -> Option<String> {
        self.prompts.get(text.trim()).cloned()
    }

    pub fn writes_of(&self, request_id: &str) -> usize {
        self.writes.get(request_id).map_or(0, Vec::len)
    }

    /// IDEM-2/IDEM-3 across restarts: one request id never reaches a pane twice.
    pub fn on_write(&mut self, request_id: &str, fact: WriteFact) {
        let writes = self.writes.entry(request_id.to_string()).or_default();
        writes.push(fact);
        if writes.len() > 1 {
            let n = writes.len();
            self.fail(Kind::DuplicateWrite, format!("request {request_id} was written to the pane {n} times"));
        }
        if let Some(reason) = self.claimed_unwritten.get(request_id).cloned() {
            let m = format!("{request_id}: a receipt ({reason}) said not written or retry-safe, then the id was written with no new call");
            self.fail(Kind::Misclassified, m);
        }
    }

    /// A caller starts a call for `request_id`: a later write may be this call's. Returns the
    /// call's number.
    pub fn on_call(&mut self, request_id: &str, timeout_ms: u64) -> u64 {
        if timeout_ms > 0 {
            let at = wakterm_runtime::driver::now_ms();
            let offset = self.daemon_wall_offset_ms;
            self.deadlines.entry(request_id.to_string()).or_insert((at, timeout_ms, offset));
        }
        self.claimed_unwritten.remove(request_id);
        self.calls_started += 1;
        self.latest_call.insert(request_id.to_string(), self.calls_started);
        let at = wakterm_runtime::driver::now_ms();
        self.open_calls.entry(request_id.to_string()).or_default().insert(self.calls_started, at);
        self.calls_started
    }

    /// A daemon starts: its engine has seen no turn yet, and the calls the dead one held will
    /// never be answered (their callers call again).
    pub fn on_daemon_start(&mut self) {
        self.turn_after_write.clear();
        self.open_calls.clear();
    }

    /// A write to agent `a`'s pane passed the incarnation check (whatever reached the pane):
    /// the engine will wait for a turn to start after it (ADM-5).
    pub fn on_pane_write(&mut self, agent: usize, session: SessionId, end: u64) {
        self.last_write.insert(agent, (session, end));
        self.turn_after_write.remove(&agent);
    }

    /// The observer port sent the engine a turn start of agent `a`.
    pub fn on_turn_delivered(&mut self, agent: usize, session: &SessionId, position: u64, turn: &TurnId) {
        let after_write = self.last_write.get(&agent).is_some_and(|(s, end)| s == session && position > *end);
        if after_write && !self.turn_after_write.contains_key(&agent) {
            let at = wakterm_runtime::driver::now_ms();
            self.turn_after_write.insert(agent, (at, position, turn.clone()));
        }
    }

    /// ADM-5, ADM-17: a wait for the written prompt's turn that the engine had been told was
    /// over before the call reached it (`since`, the earliest start among the id's open calls).
    fn check_not_stalled(&mut self, call: &CallInput, since: u64) {
        let Some((at, position, turn)) = self.turn_after_write.get(&call.agent).cloned() else { return };
        if at + STALL_MARGIN_MS <= since {
            let (session, end) = self.last_write.get(&call.agent).cloned().expect("a turn after a write");
            let m = format!(
                "{}: busy/awaiting_turn_start for a{}, but turn {} (session {} at {position}, after the last write at {end}) was delivered to the engine {} ms before the call",
                call.request_id,
                call.agent,
                turn.0,
                session.0,
                since - at
            );
            self.fail(Kind::Stalled, m);
        }
    }

    /// IDEM-7: no receipt says `prompt_written: false` or `retry_safe: true` for an id whose
    /// prompt was or may be written. A conflict's `prompt_written: false` speaks of its own
    /// (other) input, so only its `retry_safe` counts.
    /// A call that started after this one (same id) reached the engine after it, so the engine
    /// could not know of it when it answered: a write by that call does not belie this receipt.
    /// A call that started before it, and is still in flight, the engine did know of.
    fn check_unwritten_claim(&mut self, id: &str, receipt: &Receipt, call_number: u64) {
        let conflict = receipt.reason.as_deref() == Some("request_id_conflict");
        let claims = receipt.retry_safe || (!receipt.prompt_written && !conflict);
        if !claims {
            return;
        }
        let reason = format!("{:?}/{}", receipt.classification, receipt.reason.clone().unwrap_or_default());
        if self.writes_of(id) > 0 {
            self.fail(Kind::Misclassified, format!("{id}: receipt {reason} says not written or retry-safe, but the id was written"));
        }
        if self.latest_call.get(id).is_some_and(|latest| *latest > call_number) {
            return;
        }
        self.claimed_unwritten.insert(id.to_string(), reason);
    }

    /// ADM-9, ADM-10, ADM-15, IDEM-2, ADM-13 at the moment a caller gets its receipt.
    pub fn on_receipt(&mut self, call: &CallInput, receipt: &Receipt, writes_before: usize, call_number: u64) {
        let id = &call.request_id;
        let writes = self.writes.get(id).cloned().unwrap_or_default();
        let class = receipt.classification;
        self.last_receipt.insert(id.clone(), class);
        self.check_unwritten_claim(id, receipt, call_number);
        let open = self.open_calls.entry(id.clone()).or_default();
        let since = open.values().min().copied();
        open.remove(&call_number);
        if class == Classification::Busy && receipt.reason.as_deref() == Some("awaiting_turn_start") {
            if let Some(since) = since {
                self.check_not_stalled(call, since);
            }
        }
        if class.is_definitive_rejection() {
            if writes.len() != writes_before || receipt.prompt_written {
                let reason = receipt.reason.clone().unwrap_or_default();
                self.fail(Kind::Misclassified, format!("{id}: definitive rejection {class:?}/{reason} but this call wrote to the pane"));
            }
            return;
        }
        if class == Classification::Accepted {
            match writes.as_slice() {
                [] => self.fail(Kind::Misclassified, format!("{id}: accepted but nothing reached the pane")),
                [w] => {
                    if w.bytes_reached != w.bytes_total {
                        let m = format!("{id}: accepted but only {} of {} bytes reached the pane", w.bytes_reached, w.bytes_total);
                        self.fail(Kind::Misclassified, m);
                    } else if w.text != call.prompt {
                        let m = format!("{id}: accepted but the pane got {:?}, the caller sent {:?}", w.text, call.prompt);
                        self.fail(Kind::Misclassified, m);
                    }
                }
                _ => self.fail(Kind::Misclassified, format!("{id}: accepted but written {} times", writes.len())),
            }
            if receipt.acknowledged == Some(true) && !self.user_messages.contains(&(call.agent, prompt_hash(&call.prompt))) {
                self.fail(Kind::Misclassified, format!("{id}: acknowledged but the provider never recorded the prompt"));
            }
        }
        if receipt.replayed {
            if let Some(w) = writes.first() {
                if w.text != call.prompt {
                    let m = format!("{id}: replayed {class:?} for input {:?}, but {:?} was written", call.prompt, w.text);
                    self.fail(Kind::Misclassified, m);
                }
            }
        }
    }

    /// TERM-2, RF-5, CORR-6, CORR-7, CORR-10, CORR-11 at every event a watcher sees.
    /// `durable`: the event is committed in the store right now.
    pub fn on_terminal(&mut self, event: &TerminalEvent, durable: bool) {
        let id = event.request_id.as_str().to_string();
        let seq = event.terminal_event_sequence;
        // REC-2: a resume always re-attaches at the armed cursor it was given, so only another
        // look (racing the resume) can attach past it; ending the request then gave up evidence
        // the resume was about to replay (simulator seed 97 before the fix).
        if event.reason.as_deref() == Some("observer_resumed_past_cursor") {
            self.fail(Kind::Evidence, format!("{id}: ended observer_resumed_past_cursor although its resume was still to replay from the armed cursor"));
        }
        if !durable {
            self.fail(Kind::WrongFinal, format!("{id}: terminal event {seq} visible before its commit"));
        }
        if seq <= self.last_sequence {
            self.fail(Kind::WrongFinal, format!("{id}: terminal sequence {seq} after {}", self.last_sequence));
        }
        if let Some(earlier) = self.ended.get(&id) {
            self.fail(Kind::WrongFinal, format!("{id}: ended twice (sequences {earlier} and {seq})"));
        }
        self.last_sequence = self.last_sequence.max(seq);
        self.ended.insert(id.clone(), seq);
        let turn = event.provider_turn_id.as_ref().and_then(|t| self.turns.get(&t.0)).cloned();
        // OBS-3: a resume across a replaced rollout ends indeterminate (a deadline or a cancel,
        // which read nothing from the file, may come first).
        let file_free = matches!(event.state, TerminalState::Indeterminate | TerminalState::TimedOut | TerminalState::Cancelled);
        if self.replaced_while_down.contains_key(&id) && !file_free {
            let m = format!("{id}: ended {:?} (turn {:?}, final {:?}) although its rollout was replaced while the daemon was down", event.state, event.provider_turn_id, event.final_message);
            self.fail(Kind::WrongFinal, m);
        }
        match event.state {
            TerminalState::Completed => match turn {
                Some(t) if t.opened_by.as_deref() == Some(id.as_str()) => {
                    if self.obs3_unprotected.contains(&id) {
                        // The known gap: its final may be the replacement file's.
                    } else if t.final_message != event.final_message {
                        let m = format!("{id}: completed with {:?}, the turn's final was {:?}", event.final_message, t.final_message);
                        self.fail(Kind::WrongFinal, m);
                    } else if t.final_file != Some(t.file) {
                        // The final must be its own turn's, in the file the turn (and the
                        // request's armed cursor) lived in.
                        let m = format!("{id}: completed with a final written to file {:?}, not to file {} its turn began in", t.final_file, t.file);
                        self.fail(Kind::WrongFinal, m);
                    }
                }
                other => {
                    let opener = other.and_then(|t| t.opened_by);
                    let m = format!("{id}: completed with turn {:?} which was opened by {opener:?}", event.provider_turn_id);
                    self.fail(Kind::WrongFinal, m);
                }
            },
            TerminalState::Aborted => {
                if !turn.as_ref().is_some_and(|t| t.aborted && t.opened_by.as_deref() == Some(id.as_str())) {
                    self.fail(Kind::WrongFinal, format!("{id}: aborted, but turn {:?} is not our aborted turn", event.provider_turn_id));
                }
            }
            TerminalState::DeliveryFailed => {
                if self.turns.values().any(|t| t.opened_by.as_deref() == Some(id.as_str())) {
                    self.fail(Kind::WrongFinal, format!("{id}: delivery_failed, but our prompt opened a turn"));
                }
            }
            TerminalState::TimedOut => self.check_not_early(&id),
            TerminalState::Cancelled | TerminalState::Indeterminate => {}
        }
    }

    /// RF-3, TIME-1: `timed_out` only once the timeout has really passed. The one allowance is
    /// TIME-1's decision: a daemon that started with its wall clock stepped forward since the
    /// call moves durable deadlines by that step.
    fn check_not_early(&mut self, id: &str) {
        let Some(&(at, timeout_ms, offset_then)) = self.deadlines.get(id) else { return };
        let elapsed = wakterm_runtime::driver::now_ms().saturating_sub(at);
        let allowance = u64::try_from(self.daemon_wall_offset_ms - offset_then).unwrap_or(0);
        if elapsed + allowance < timeout_ms {
            self.fail(Kind::Misclassified, format!("{id}: timed out after {elapsed} ms of a {timeout_ms} ms timeout"));
        }
    }

    /// The known gap (`obs3_unprotected`): agent `agent`'s requests still protected by OBS-3
    /// lose that protection. Returns how many.
    pub fn unprotect_replaced(&mut self, agent: usize) -> usize {
        let ids: Vec<String> = self.replaced_while_down.iter().filter(|(id, a)| **a == agent && !self.ended.contains_key(*id)).map(|(id, _)| id.clone()).collect();
        for id in &ids {
            self.replaced_while_down.remove(id);
            self.obs3_unprotected.insert(id.clone());
        }
        ids.len()
    }

    /// OBS-1: an observer starts from a checkpoint only when it was saved for the process
    /// running now (ground truth), never for one that exited, even with the same pid.
    pub fn on_checkpoint_used(&mut self, agent: usize, saved_for: ProcessIdentity, running: Option<ProcessIdentity>) {
        if running != Some(saved_for) {
            let m = format!("a{agent}: the observer started from a checkpoint saved for process {saved_for:?}, but {running:?} runs");
            self.fail(Kind::Evidence, m);
        }
    }

    /// REC-2, OBS-2: a resume at `armed` replays exactly the records after it, up to where the
    /// observer read (`expected`, from the file), whatever checkpoint it started from.
    pub fn on_resume_replayed(&mut self, agent: usize, armed: u64, emitted: &[u64], expected: &[u64]) {
        if emitted != expected {
            let missing: Vec<&u64> = expected.iter().filter(|p| !emitted.contains(p)).collect();
            let m = format!("a{agent}: resumed at {armed}, replayed records at {emitted:?}, the file holds {expected:?} (missing {missing:?})");
            self.fail(Kind::Evidence, m);
        }
    }

    pub fn unfinished(&mut self, message: String) {
        self.fail(Kind::Unfinished, message);
    }
}
