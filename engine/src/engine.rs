//! The engine: state, the `handle` / `poll_output` loop, and the helpers every transition
//! shares. Admission lives in `admission.rs`, correlation in `correlation.rs`, restart in
//! `recovery.rs`. Nothing here reads a clock, a file or a random source: time is an input.

use crate::agent::{AgentEntry, AgentFacts};
use crate::ids::{AgentId, RequestId, TurnId};
use crate::io::{AdmitCommand, Input, OpId, Output, PersistOp};
use crate::limits::{MAX_AGENTS, MAX_PENDING_OUTPUTS, PERSIST_RETRY_MS};
use crate::observer::{ObserverEvent, ObserverSnapshot};
use crate::receipt::{CorrelationSource, Receipt};
use crate::request::{EvidenceStep, Phase, RequestRecord};
use crate::terminal::{TerminalEvent, TerminalState, TERMINAL_SCHEMA};
use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Why a durable commit was asked for; decides what its acknowledgement unblocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum PersistPurpose {
    /// IDEM-4: the registration that must be durable before the pane write.
    Register(RequestId),
    /// IDEM-6: a registered admission was rejected after all; deliver its receipt.
    Release(RequestId),
    /// The receipt-bearing record after the write (submitted marker or settled one-way).
    Confirm { request_id: RequestId },
    /// A progress record (binding) that unblocks nothing.
    Progress(RequestId),
    /// A terminal event; publish it once durable (TERM-2).
    Terminal { request_id: RequestId, sequence: u64, cancel_op: Option<OpId> },
    /// EV-3: one agent's event batch (events, mark, checkpoint).
    Events(AgentId),
}

impl PersistPurpose {
    /// The request a commit is about, if any.
    pub(crate) fn request_id(&self) -> Option<&RequestId> {
        match self {
            PersistPurpose::Register(id) | PersistPurpose::Release(id) | PersistPurpose::Progress(id) => Some(id),
            PersistPurpose::Confirm { request_id } | PersistPurpose::Terminal { request_id, .. } => Some(request_id),
            PersistPurpose::Events(_) => None,
        }
    }
}

/// Where one in-flight admission is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    Refreshing { refresh_id: u64 },
    Registering,
    Writing { delivery_id: u64 },
    /// Plain send and raw paste: waiting for the observer to see the prompt (ADM-13, ADM-14).
    AwaitingAck,
    Confirming,
    Releasing,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Admission {
    pub command: AdmitCommand,
    pub request_id: RequestId,
    pub fingerprint: String,
    pub prompt_hash: String,
    pub agent_id: AgentId,
    pub callers: Vec<OpId>,
    pub step: Step,
    pub step_deadline_ms: Option<u64>,
    /// The receipt to hand out once the current commit is acknowledged.
    pub pending_receipt: Option<Receipt>,
    /// Observer events and snapshots for this agent that arrived while the write was in
    /// flight; replayed in arrival order after its outcome, so the write and the turn it
    /// starts are seen in order (ADM-17).
    pub deferred: Vec<Deferred>,
    /// The released record this admission's registration replaced (same id, same input).
    pub replaced: Option<crate::request::RequestRecord>,
    /// MGD-3: the turn a managed thread was running when a plain send was written into it:
    /// Codex 0.169's `turn/start` then adds the prompt to that turn (steering)...
    pub steer_turn: Option<crate::ids::TurnId>,
    /// ...which the receipt claims only when the prompt's user message was seen in that very
    /// turn (the turn may have ended between the check and the write).
    pub ack_turn: Option<crate::ids::TurnId>,
    /// MGD-7: the app-server's refusal of this one-way prompt's `turn/start` (its code and
    /// message), which ends the acknowledgement wait: the receipt says so.
    pub refused: Option<String>,
    /// MGD-7: the observer lost the session while this one-way prompt waited for its
    /// acknowledgement: the lost output may have answered its `turn/start` with a result, so a
    /// later error under its id is no proof of a refusal (another request may have been sent
    /// under it: found by the simulator's exploration, seed 48564688).
    pub lost_while_awaiting: bool,
    /// ADM-4: the pane's write count at the refresh's look (PTY; None when unknown). The write
    /// names it, and the holder refuses it, before its first byte, when input reached the pane
    /// since: the Ctrl-U that starts it would erase a draft typed after the look.
    pub pane_writes: Option<u64>,
}

/// ADM-17: what the observer said while an admission's write was in flight, kept in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Deferred {
    Event(ObserverEvent),
    Snapshot(ObserverSnapshot),
}

/// A terminal event whose commit failed; it is retried with a fresh sequence. A cancel that
/// waited for it was answered at the failure (RF-4, `CancelOutcome::CommitFailed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TerminalRetry {
    pub due_ms: u64,
}

/// The pure admission engine. `Clone + PartialEq + Debug` so the simulator can compare runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Engine {
    pub(crate) now_ms: u64,
    pub(crate) agents: BTreeMap<AgentId, AgentEntry>,
    pub(crate) requests: BTreeMap<RequestId, RequestRecord>,
    pub(crate) admissions: BTreeMap<RequestId, Admission>,
    /// CORR-5: the first new turn after the armed cursor, before its user message matched.
    pub(crate) candidates: BTreeMap<RequestId, TurnId>,
    /// Requests in a correlating phase (submitted or bound): the index every observer event,
    /// deadline check and timeout computation walks, so their cost does not grow with history.
    pub(crate) correlating: BTreeSet<RequestId>,
    /// RF-8: since when each submitted request has been watched for its turn to start (its
    /// confirmation, or its re-attachment after a restart: downtime is no evidence).
    pub(crate) turn_wait_since: BTreeMap<RequestId, u64>,
    /// REC-2: recovered requests waiting for their agent and observer to be re-verified.
    pub(crate) suspended: BTreeSet<RequestId>,
    /// ADM-5 across a restart: per agent, the process and earliest armed cursor of the
    /// return-final prompts recovered `submitted` (written, no turn bound), taken when the
    /// agent registers (the wait is reopened then, whatever became of the requests meanwhile:
    /// a deadline passed while down ends the request, not the unread line). Emptied at
    /// `StartupComplete`.
    pub(crate) recovered_writes: BTreeMap<AgentId, Vec<crate::recovery::RecoveredWrite>>,
    /// TIME-2: this run's engine time on the machine's monotonic clock (given at
    /// `Engine::recover`), kept in every request it registers.
    pub(crate) run_clock: Option<crate::run_clock::RunClock>,
    /// ADM-5, EV-13: this run's start, in engine time (`Engine::recover`): a file found changed
    /// while the daemon was down was read in its new copy by every write this run made
    /// (`EventMark::rewritten`).
    pub(crate) run_started_ms: u64,
    /// REC-2: agents whose `ResumeObserver` was asked for and not yet answered (by an attach at
    /// or before the armed cursor, or a lost session). Until then an attach past the cursor is
    /// another look racing the resume (the monitor's first run, an admission's refresh), not
    /// the resume's answer.
    pub(crate) resuming: BTreeSet<AgentId>,
    /// EV-14: agents removed while an admission of theirs was in flight, with their last
    /// incarnation: `agent.stopped` waits for those admissions' ends (`record_deferred_stop`).
    pub(crate) stops_deferred: BTreeMap<AgentId, Option<crate::ids::Incarnation>>,
    pub(crate) persists: BTreeMap<u64, PersistPurpose>,
    pub(crate) deliveries: BTreeMap<u64, RequestId>,
    pub(crate) refreshes: BTreeMap<u64, RequestId>,
    /// Engine-initiated refreshes (probes) outstanding, by refresh id.
    pub(crate) probes: BTreeMap<u64, AgentId>,
    pub(crate) terminal_retries: BTreeMap<RequestId, TerminalRetry>,
    /// Progress records (binding, settled one-way) whose commit failed, with the time to
    /// re-commit the request's current record, so the store converges.
    pub(crate) progress_retries: BTreeMap<RequestId, u64>,
    /// RF-4 / TERM-2: cancels of requests whose terminal event is not published yet; answered
    /// once it is, so no caller ever sees a sequence that might not be the one published.
    pub(crate) pending_cancel_answers: BTreeMap<RequestId, Vec<OpId>>,
    pub(crate) next_id: u64,
    /// TERM-2: the next terminal sequence to assign; assigned in commit order.
    pub(crate) next_sequence: u64,
    pub(crate) last_published_sequence: u64,
    pub(crate) outputs: VecDeque<Output>,
    /// RF-6: the observer event being applied, as evidence for any request it ends.
    pub(crate) deciding: Option<String>,
    /// EV-*: the durable Agent API event stream.
    pub(crate) events: crate::event_stream::EventStream,
    /// HIST-2: calls parked behind a store lookup of their id, and the lookups by load id.
    pub(crate) lookups: BTreeMap<RequestId, (u64, Vec<crate::history::Parked>)>,
    pub(crate) loads: BTreeMap<u64, RequestId>,
    /// HIST-5: every id this engine asked the store to write, and the runtime's seed of the
    /// ids stored before: a new id absent from it needs no lookup.
    pub(crate) stored_ids: crate::stored_ids::StoredIds,
    /// SUB-*: submit calls in flight (never durable, SUB-6), keyed by submission id, and
    /// their outstanding split writes and pane watches.
    pub(crate) submissions: BTreeMap<RequestId, crate::submit::Submission>,
    pub(crate) submit_writes: BTreeMap<u64, RequestId>,
    pub(crate) submit_watches: BTreeMap<u64, RequestId>,
    /// ADM-12: admission writes whose result was lost, by delivery id: each may still land, so
    /// its agent stays claimed until its late outcome or the bound.
    pub(crate) landing_writes: BTreeMap<u64, crate::admission::LandingWrite>,
}

impl Default for Engine {
    fn default() -> Self {
        Engine::new()
    }
}

impl Engine {
    /// HIST-5: the ids that may have a row in the store (for the runtime's log and the tests).
    pub fn stored_ids(&self) -> &crate::stored_ids::StoredIds {
        &self.stored_ids
    }

    /// A fresh engine with an empty durable state.
    pub fn new() -> Engine {
        Engine {
            now_ms: 0,
            agents: BTreeMap::new(),
            requests: BTreeMap::new(),
            admissions: BTreeMap::new(),
            candidates: BTreeMap::new(),
            correlating: BTreeSet::new(),
            turn_wait_since: BTreeMap::new(),
            suspended: BTreeSet::new(),
            recovered_writes: BTreeMap::new(),
            run_clock: None,
            run_started_ms: 0,
            resuming: BTreeSet::new(),
            stops_deferred: BTreeMap::new(),
            persists: BTreeMap::new(),
            deliveries: BTreeMap::new(),
            refreshes: BTreeMap::new(),
            probes: BTreeMap::new(),
            terminal_retries: BTreeMap::new(),
            progress_retries: BTreeMap::new(),
            pending_cancel_answers: BTreeMap::new(),
            next_id: 1,
            next_sequence: 1,
            last_published_sequence: 0,
            outputs: VecDeque::new(),
            deciding: None,
            events: crate::event_stream::EventStream::default(),
            lookups: BTreeMap::new(),
            loads: BTreeMap::new(),
            stored_ids: crate::stored_ids::StoredIds::default(),
            submissions: BTreeMap::new(),
            submit_writes: BTreeMap::new(),
            landing_writes: BTreeMap::new(),
            submit_watches: BTreeMap::new(),
        }
    }

    /// Feed one input at engine time `now_ms`, then drain `poll_output`. Time never goes
    /// backwards inside the engine: an earlier `now_ms` (a wall-clock step back) is clamped.
    pub fn handle(&mut self, now_ms: u64, input: Input) {
        self.apply(now_ms, input);
        self.flush_events(); // EV-3: whatever this input taught, batched per agent
    }

    /// EV-3: inputs that arrived together (a monitor read's events and the checkpoint after
    /// them; a refresh's events and its answer; a resume's replay and its snapshot; a changed
    /// process's last events and the new facts) as one step, so their events make one batch
    /// per agent instead of one per input (the next had to wait for the first's commit). The
    /// same as feeding them one by one, but for the batching.
    pub fn handle_all(&mut self, now_ms: u64, inputs: Vec<Input>) {
        for input in inputs {
            self.apply(now_ms, input);
        }
        self.flush_events();
    }

    fn apply(&mut self, now_ms: u64, input: Input) {
        self.now_ms = self.now_ms.max(now_ms);
        match input {
            Input::Tick => self.on_tick(),
            Input::AgentUpserted(facts) => self.on_agent_upserted(facts),
            Input::AgentRemoved { agent_id } => self.on_agent_removed(&agent_id),
            Input::Admit(command) => self.on_admit(command),
            Input::Cancel(command) => self.on_cancel(command),
            Input::ObserverRefreshed { refresh_id, agent_id, snapshot, pane } => self.on_refreshed(refresh_id, &agent_id, snapshot, pane),
            Input::ObserverSnapshot { agent_id, snapshot } => self.on_snapshot(&agent_id, snapshot),
            Input::OtherEnterNoted { agent_id, enter, snapshot } => self.on_other_enter_noted(&agent_id, enter, snapshot),
            Input::Observed { agent_id, event } => self.on_observed(&agent_id, event),
            Input::PersistAcked { token, result } => self.on_persist_acked(token, result),
            Input::Delivered { delivery_id, outcome, record_end } => self.on_delivered(delivery_id, outcome, record_end),
            Input::StartupComplete => self.on_startup_complete(),
            Input::AgentUnreachable { agent_id } => self.on_agent_unreachable(agent_id),
            Input::ObserverCheckpoint { agent_id, checkpoint_json } => self.on_checkpoint(&agent_id, checkpoint_json),
            Input::RequestLoaded { load_id, record } => self.on_request_loaded(load_id, record),
            Input::HistorySeed { ids, complete } => self.on_history_seed(ids, complete),
            Input::Submit(command) => self.on_submit(command),
            Input::SubmitWritten { delivery_id, outcome } => self.on_submit_written(delivery_id, outcome),
            Input::PaneWatched { watch_id, sample } => self.on_pane_watched(watch_id, sample),
        }
    }

    /// The next side effect to perform, or `None` when the engine is idle.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The earliest engine time at which `handle(now, Input::Tick)` has work to do.
    pub fn poll_timeout(&self) -> Option<u64> {
        let admissions = self.admissions.values().filter_map(|a| a.step_deadline_ms);
        let deadlines = self.correlating.iter().filter_map(|id| self.requests[id].deadline_ms);
        let turn_starts = self.correlating.iter().filter_map(|id| self.turn_start_deadline(id));
        let retries = self.terminal_retries.values().map(|r| r.due_ms);
        let progress = self.progress_retries.values().copied();
        let probes = self.agents.values().filter_map(|a| a.probe_at_ms);
        let event_retries = self.events.retry_at.values().copied();
        let submissions = self.submissions.values().map(|s| s.deadline_ms);
        let holds = self.landing_writes.values().map(|l| l.until_ms); // ADM-12's bound
        let proofs = self.unproven_ends_due(); // EV-13's bound
        // ADM-19: a hold's end changes what the catalog says, with nothing else due then.
        let other_enters = self.agents.values().filter_map(|a| a.other_enter_hold_ends(self.now_ms));
        admissions.chain(submissions).chain(deadlines).chain(turn_starts).chain(retries).chain(progress).chain(probes).chain(event_retries).chain(holds).chain(proofs).chain(other_enters).min()
    }

    /// RF-8: when a submitted request still waiting for its turn to start gives up.
    pub(crate) fn turn_start_deadline(&self, request_id: &RequestId) -> Option<u64> {
        let record = &self.requests[request_id];
        let waiting = record.phase == Phase::Submitted && !self.candidates.contains_key(request_id);
        let since = self.turn_wait_since.get(request_id)?;
        waiting.then(|| since + crate::limits::TURN_START_TIMEOUT_MS)
    }

    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// A request's durable-or-pending record, for `request get`: a released one too (its
    /// release commit may still be pending, and the store would show it registered), which the
    /// caller shows as not found.
    pub fn request(&self, request_id: &RequestId) -> Option<&RequestRecord> {
        self.requests.get(request_id)
    }

    /// RF-6: request `request_id` as the store holds it, for a reader (`agent request get`).
    /// While the commit that registers, confirms or releases it is in flight, memory is ahead
    /// of the store: an `accepted` receipt the confirmation may fail to make durable (then it
    /// is `indeterminate`, `store_commit_failed`; a crash makes it `restart_in_write_window`),
    /// a registration that may not commit. The reader sees what the store holds then: no
    /// record (or the released one the registration replaced) while registering; the
    /// registration, with no receipt, while confirming or releasing. A review found the
    /// `accepted` receipt shown before its commit.
    pub fn request_as_committed(&self, request_id: &RequestId) -> Option<std::borrow::Cow<'_, RequestRecord>> {
        use std::borrow::Cow;
        let record = self.requests.get(request_id)?;
        let Some(admission) = self.admissions.get(request_id) else { return Some(Cow::Borrowed(record)) };
        match admission.step {
            Step::Registering => admission.replaced.as_ref().map(Cow::Borrowed),
            Step::Confirming | Step::Releasing => {
                let mut registered = record.clone();
                registered.phase = Phase::Registered;
                registered.receipt = None;
                registered.terminal = None;
                Some(Cow::Owned(registered))
            }
            Step::Refreshing { .. } | Step::Writing { .. } | Step::AwaitingAck => Some(Cow::Borrowed(record)),
        }
    }

    /// RF-6: whether an admission of `request_id` is still deciding, registering, writing or
    /// confirming: a reader finds no committed record of it yet, but it is no unknown id.
    pub fn admission_in_progress(&self, request_id: &RequestId) -> bool {
        self.admissions.contains_key(request_id)
    }

    /// HIST-1: how many request records the engine holds (open ones and those in flight).
    pub fn requests_in_memory(&self) -> usize {
        self.requests.len()
    }

    /// HIST-1: finished requests still in memory; 0 whenever the engine is quiescent.
    pub fn finished_in_memory(&self) -> usize {
        self.requests.values().filter(|r| crate::history::is_finished(r.phase)).count()
    }

    pub fn agent(&self, agent_id: &AgentId) -> Option<&AgentEntry> {
        self.agents.get(agent_id)
    }

    /// Every agent the engine knows (registered, not removed).
    pub fn agent_ids(&self) -> impl Iterator<Item = &AgentId> {
        self.agents.keys()
    }

    pub fn last_published_sequence(&self) -> u64 {
        self.last_published_sequence
    }

    /// The terminal event of a request once it is published (durable and final), else None.
    pub fn published_terminal(&self, request_id: &RequestId) -> Option<&TerminalEvent> {
        let record = self.requests.get(request_id)?;
        let event = record.terminal.as_ref()?;
        let published = event.terminal_event_sequence <= self.last_published_sequence
            && !self.terminal_retries.contains_key(request_id)
            && !self.persists.values().any(|p| matches!(p, PersistPurpose::Terminal { request_id: r, .. } if r == request_id));
        published.then_some(event)
    }

    /// Requests still waiting for a terminal state (for status and for the simulator's oracle).
    pub fn open_return_requests(&self) -> impl Iterator<Item = &RequestRecord> {
        self.requests.values().filter(|r| r.phase.is_correlating() || r.phase == Phase::Registered)
    }

    /// True when nothing is in flight: [`Engine::is_settled`], and no lost write's hold left
    /// (ADM-12: the engine still waits for its outcome or its bound).
    pub fn is_quiescent(&self) -> bool {
        self.is_settled() && self.landing_writes.is_empty()
    }

    /// True when nothing a caller or the store waits on is outstanding: no admission, submit,
    /// commit, write or refresh, and no failed commit waiting to be retried. `mux stop` drains
    /// to this; a lost write's hold lives in memory only and ends with the daemon.
    pub fn is_settled(&self) -> bool {
        self.admissions.is_empty()
            && self.submissions.is_empty()
            && self.persists.is_empty()
            && self.deliveries.is_empty()
            && self.outputs.is_empty()
            && self.terminal_retries.is_empty()
            && self.progress_retries.is_empty()
            && self.events.in_flight.is_empty()
            && self.events.backlog.values().all(Vec::is_empty)
            && self.events.retry_at.is_empty()
            && self.lookups.is_empty()
    }

    // ----- helpers shared by the transitions -----

    pub(crate) fn push(&mut self, output: Output) {
        assert!(self.outputs.len() < MAX_PENDING_OUTPUTS, "runtime stopped draining outputs");
        self.outputs.push_back(output);
    }

    pub(crate) fn fresh_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// RF-6: a step of a request's evidence trail (persisted with the record's next commit).
    pub(crate) fn note(&mut self, request_id: &RequestId, step: EvidenceStep, detail: String) {
        let now_ms = self.now_ms;
        if let Some(record) = self.requests.get_mut(request_id) {
            record.note(now_ms, step, detail);
        }
    }

    pub(crate) fn reply(&mut self, op: OpId, receipt: Receipt) {
        receipt.assert_consistent();
        self.push(Output::Receipt { op, receipt });
    }

    pub(crate) fn persist(&mut self, purpose: PersistPurpose, ops: Vec<PersistOp>) {
        self.persist_token(purpose, ops);
    }

    /// Asks for one commit; request milestones ride along in the same transaction (EV-6).
    pub(crate) fn persist_token(&mut self, purpose: PersistPurpose, mut ops: Vec<PersistOp>) -> u64 {
        assert!(!ops.is_empty());
        for op in &ops {
            if let PersistOp::PutRequest(record) = op {
                record.assert_consistent();
                // HIST-5: before the row can exist, so no later call skips its lookup.
                self.stored_ids.insert(&record.request_id);
            }
        }
        let riding = self.ride_request_events(&purpose, &mut ops);
        let token = self.fresh_id();
        if !riding.is_empty() {
            self.events.riding.insert(token, riding);
        }
        self.persists.insert(token, purpose);
        self.push(Output::Persist { token, ops });
        token
    }

    pub(crate) fn persist_record(&mut self, purpose: PersistPurpose, request_id: &RequestId) {
        let record = self.requests.get_mut(request_id).expect("persisting a known request");
        record.updated_ms = self.now_ms;
        let record = record.clone();
        self.persist(purpose, vec![PersistOp::PutRequest(record)]);
    }

    pub(crate) fn source_of(&self, agent_id: &AgentId) -> CorrelationSource {
        match self.agents.get(agent_id).map(|a| a.facts.transport) {
            Some(crate::agent::Transport::AppServer) => CorrelationSource::AgentApiEvents,
            Some(crate::agent::Transport::Pty) | None => CorrelationSource::ProviderFile,
        }
    }

    /// RF-5: ends a return-final request with exactly one terminal state. The event gets its
    /// sequence now, in commit order, and is published only after the commit (TERM-2). A
    /// request that already ended keeps its first state.
    pub(crate) fn finish(
        &mut self,
        request_id: &RequestId,
        state: TerminalState,
        reason: Option<&str>,
        final_message: Option<String>,
        cancel_op: Option<OpId>,
    ) {
        let Some(record) = self.requests.get(request_id) else { return };
        if record.phase == Phase::Terminal || record.phase == Phase::Released || record.phase == Phase::Settled {
            return;
        }
        assert_eq!(final_message.is_some(), state == TerminalState::Completed, "TERM-1");
        let event = TerminalEvent {
            schema: TERMINAL_SCHEMA.to_string(),
            terminal_event_sequence: 0,
            request_id: request_id.clone(),
            agent_id: record.agent_id.clone(),
            incarnation: record.incarnation.clone(),
            state,
            provider_turn_id: record.bound_turn.clone(),
            final_message,
            reason: reason.map(str::to_string),
            at_ms: self.now_ms,
            // CORR-9: a turn outcome only; an `indeterminate` end may rest on unproven records.
            steered: record.steered && matches!(state, TerminalState::Completed | TerminalState::Aborted),
        };
        let record = self.requests.get_mut(request_id).expect("checked above");
        let why = match reason {
            Some(reason) => format!(" {reason} ({})", rule_of(reason)),
            None => " (CORR-7: the bound turn's own final)".to_string(),
        };
        let seen = self.deciding.as_ref().map_or(String::new(), |e| format!("; evidence: {e}"));
        record.note(self.now_ms, EvidenceStep::Terminal, format!("{state:?}{why}{seen}"));
        record.phase = Phase::Terminal;
        record.terminal = Some(event);
        self.correlating.remove(request_id);
        self.candidates.remove(request_id);
        self.suspended.remove(request_id);
        self.turn_wait_since.remove(request_id);
        self.persist_terminal(request_id, cancel_op);
        if state == TerminalState::Indeterminate {
            self.batches_follow_the_end(request_id);
        }
    }

    /// Assigns the next sequence to a terminal record and commits record and event together.
    pub(crate) fn persist_terminal(&mut self, request_id: &RequestId, cancel_op: Option<OpId>) {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        assert!(sequence > self.last_published_sequence, "TERM-2: sequences only grow");
        let now_ms = self.now_ms;
        let record = self.requests.get_mut(request_id).expect("terminal request exists");
        assert_eq!(record.phase, Phase::Terminal);
        record.updated_ms = now_ms;
        let event = record.terminal.as_mut().expect("terminal phase has its event");
        event.terminal_event_sequence = sequence;
        let event = event.clone();
        let record = record.clone();
        let purpose = PersistPurpose::Terminal { request_id: request_id.clone(), sequence, cancel_op };
        self.persist(purpose, vec![PersistOp::PutRequest(record), PersistOp::AppendTerminal(event)]);
    }

    /// TERM-2: a terminal event becomes visible only here, after its commit.
    pub(crate) fn publish_terminal(&mut self, request_id: &RequestId, sequence: u64) -> Option<TerminalEvent> {
        let event = self.requests.get(request_id)?.terminal.clone()?;
        assert_eq!(event.terminal_event_sequence, sequence, "the committed event is the one published");
        assert!(sequence > self.last_published_sequence, "TERM-2: published sequences strictly increase");
        self.last_published_sequence = sequence;
        event.assert_consistent();
        self.push(Output::TerminalEvent(event.clone()));
        for op in self.pending_cancel_answers.remove(request_id).unwrap_or_default() {
            let outcome = crate::io::CancelOutcome::AlreadyTerminal { state: event.state, terminal_event_sequence: sequence };
            self.push(Output::CancelResult { op, outcome });
        }
        Some(event)
    }

    fn on_persist_acked(&mut self, token: u64, result: Result<(), String>) {
        // A duplicate or unknown acknowledgement is a runtime fault; it must not take the
        // daemon down, and it can unblock nothing.
        let Some(purpose) = self.persists.remove(&token) else { return };
        self.on_riding_committed(token, result.is_ok());
        let about = purpose.request_id().cloned();
        self.on_purpose_committed(token, purpose, result);
        if let Some(request_id) = about {
            self.evict_if_finished(&request_id); // HIST-1
        }
    }

    fn on_purpose_committed(&mut self, token: u64, purpose: PersistPurpose, result: Result<(), String>) {
        match purpose {
            PersistPurpose::Events(agent_id) => self.on_events_committed(&agent_id, token, result),
            PersistPurpose::Register(request_id) => self.on_registered(&request_id, result),
            PersistPurpose::Release(request_id) => {
                if result.is_err() {
                    // The receipt stays true (nothing was written); the store must still learn
                    // the release, or a restart would call the free id indeterminate.
                    self.progress_retries.insert(request_id.clone(), self.now_ms + PERSIST_RETRY_MS);
                }
                self.on_released(&request_id)
            }
            PersistPurpose::Confirm { request_id } => self.on_confirmed(&request_id, result),
            PersistPurpose::Progress(request_id) => {
                if result.is_err() {
                    self.progress_retries.insert(request_id, self.now_ms + PERSIST_RETRY_MS);
                }
            }
            PersistPurpose::Terminal { request_id, sequence, cancel_op } => {
                self.on_terminal_committed(&request_id, sequence, cancel_op, result)
            }
        }
    }

    fn on_terminal_committed(&mut self, request_id: &RequestId, sequence: u64, cancel_op: Option<OpId>, result: Result<(), String>) {
        // A return-final that ended at admission time: this commit is also its confirmation.
        let confirms_admission = self.admissions.get(request_id).is_some_and(|a| a.step == Step::Confirming);
        match result.clone() {
            Ok(()) => {
                self.end_made_durable(request_id); // EV-3, EV-13
                let event = self.publish_terminal(request_id, sequence);
                if let (Some(op), Some(event)) = (cancel_op, event) {
                    let outcome = crate::io::CancelOutcome::Cancelled { event };
                    self.push(Output::CancelResult { op, outcome });
                }
            }
            Err(error) => {
                // RF-4: a cancel waiting for this end is answered now: the retry may wait as long
                // as the disk stays full, and its caller gave up after a minute, saying the
                // daemon was unresponsive (a hostile run). A cancel asked again meanwhile waits
                // for the retry's outcome.
                let waiting = cancel_op.into_iter().chain(self.pending_cancel_answers.remove(request_id).unwrap_or_default());
                let detail = format!(
                    "the request's end could not be recorded ({error}); the daemon retries it, and a daemon stopped first forgets it: `agent request get` says which"
                );
                for op in waiting.collect::<Vec<_>>() {
                    let outcome = crate::io::CancelOutcome::CommitFailed { request_id: request_id.clone(), error: detail.clone() };
                    self.push(Output::CancelResult { op, outcome });
                }
                let retry = TerminalRetry { due_ms: self.now_ms + PERSIST_RETRY_MS };
                self.terminal_retries.insert(request_id.clone(), retry);
            }
        }
        if confirms_admission {
            self.on_confirmed(request_id, result);
        }
    }

    fn on_tick(&mut self) {
        self.release_event_retries();
        self.expire_admission_steps();
        self.expire_submissions();
        self.expire_landing_writes();
        self.expire_request_deadlines();
        self.expire_unproven_ends();
        self.send_due_probes();
        let due: Vec<RequestId> =
            self.terminal_retries.iter().filter(|(_, retry)| retry.due_ms <= self.now_ms).map(|(id, _)| id.clone()).collect();
        for request_id in due {
            self.terminal_retries.remove(&request_id);
            self.persist_terminal(&request_id, None);
        }
        let due: Vec<RequestId> =
            self.progress_retries.iter().filter(|(_, due_ms)| **due_ms <= self.now_ms).map(|(id, _)| id.clone()).collect();
        for request_id in due {
            if self.admissions.contains_key(&request_id) {
                // An admission of this id runs: its own commits carry the record's durable state
                // (a confirming record still says `registered` in memory while its submitted
                // marker commits), so a re-put now could land over them. Later.
                self.progress_retries.insert(request_id, self.now_ms + PERSIST_RETRY_MS);
                continue;
            }
            self.progress_retries.remove(&request_id);
            // A terminal record is committed with its event by the terminal path; re-putting
            // it alone would store a terminal phase without its event.
            let phase = self.requests.get(&request_id).map(|r| r.phase);
            if phase.is_some_and(|p| p != Phase::Terminal) {
                self.persist_record(PersistPurpose::Progress(request_id.clone()), &request_id);
            } else {
                self.evict_if_finished(&request_id); // HIST-1: the retry was the last holder
            }
        }
    }

    /// ADM-5 / RF-7: a written prompt whose turn was not seen within the grace gets a fresh
    /// look; `apply_snapshot` decides from it.
    fn send_due_probes(&mut self) {
        let due: Vec<AgentId> = self
            .agents
            .iter()
            .filter(|(_, a)| a.probe_at_ms.is_some_and(|at| at <= self.now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for agent_id in due {
            self.agents.get_mut(&agent_id).expect("listed").probe_at_ms = None;
            let refresh_id = self.fresh_id();
            self.probes.insert(refresh_id, agent_id.clone());
            self.push(Output::RefreshObserver { refresh_id, agent_id });
        }
    }

    fn on_agent_upserted(&mut self, facts: AgentFacts) {
        let agent_id = facts.agent_id.clone();
        // EV-14: registered again before its deferred stop was reported: it did not stop.
        self.stops_deferred.remove(&agent_id);
        if self.agents.contains_key(&agent_id) || self.agents.len() < MAX_AGENTS {
            self.record_registration(&facts);
        }
        let changed = match self.agents.get_mut(&agent_id) {
            Some(entry) => {
                let changed = entry.facts.incarnation != facts.incarnation || entry.facts.process != facts.process;
                if changed {
                    // The process behind the agent changed: what the observer knew is void.
                    entry.view = None;
                    entry.end_wait();
                    entry.own_unrecorded.clear(); // ADM-19: what it took dies with it
                }
                entry.facts = facts;
                changed
            }
            None => {
                if self.agents.len() >= MAX_AGENTS {
                    return;
                }
                let mut entry = AgentEntry::new(facts);
                if let Some(writes) = self.recovered_writes.remove(&agent_id) {
                    let boot = self.run_clock.as_ref().map(|clock| clock.boot_id.as_str());
                    crate::recovery::RecoveredWrite::reopen_wait(writes, &mut entry, self.events.marks.get(&agent_id), self.now_ms, boot);
                }
                // ADM-12: an agent removed and re-added mid-admission keeps that admission's claim,
                // so a second admission cannot write while the first one's bytes are in flight.
                entry.claim = self.admissions.iter().find(|(_, a)| a.agent_id == agent_id).map(|(id, _)| id.clone());
                entry.claim = entry.claim.or_else(|| self.submission_claim_of(&agent_id));
                entry.claim = entry.claim.or_else(|| self.landing_claim_of(&agent_id));
                self.agents.insert(agent_id.clone(), entry);
                true
            }
        };
        if changed {
            self.verify_requests_after_agent_change(&agent_id);
            self.expect_reported_session(&agent_id);
        }
    }

    /// OBS-4: after a restart, the session the stream reports for this very process (its
    /// durable mark) is what the observer must find again or lose on the stream: without a
    /// resume to answer (no request waits), a rollout gone while the daemon was down left the
    /// stream's last word `observer.attached` for good (a hostile run, 2026-12-07).
    fn expect_reported_session(&mut self, agent_id: &AgentId) {
        if !self.events.recovered_unattached.contains(agent_id) {
            return; // nothing reported before the restart, or observed since
        }
        let Some(incarnation) = self.agents.get(agent_id).and_then(|a| a.facts.incarnation.clone()) else { return };
        let Some(mark) = self.events.marks.get(agent_id) else { return };
        if mark.incarnation.as_ref() != Some(&incarnation) || mark.exited {
            return; // another process: its registration reset what the stream reports
        }
        if let Some(session) = mark.reported_session().cloned() {
            self.push(Output::ExpectSession { agent_id: agent_id.clone(), session, incarnation });
        }
    }

    fn on_agent_removed(&mut self, agent_id: &AgentId) {
        let removed = self.agents.remove(agent_id);
        self.resuming.remove(agent_id);
        let affected = self.correlating_requests_of(agent_id, true);
        for request_id in affected {
            self.finish(&request_id, TerminalState::Indeterminate, Some("agent_removed"), None, None);
        }
        // EV-14: after its requests' ends, so `agent.stopped` is the agent's last event. An
        // admission still in flight (writing, confirming) ends later, its request too (then
        // `agent_removed`, `start_correlation`): the stop waits for it, or a stream that ends
        // at the stop lost its `request.admitted` and `request.terminal`. Bounded by the
        // admission's own step deadlines.
        self.stops_deferred.insert(agent_id.clone(), removed.and_then(|entry| entry.facts.incarnation));
        self.record_deferred_stop(agent_id);
    }

    /// EV-14: a removed agent's stop is reported once no admission of it is in flight (at the
    /// removal, or when its last admission ends), after that admission's request events.
    pub(crate) fn record_deferred_stop(&mut self, agent_id: &AgentId) {
        if self.has_admission_in_flight(agent_id) {
            return;
        }
        if let Some(incarnation) = self.stops_deferred.remove(agent_id) {
            self.record_removal(agent_id, incarnation);
        }
    }

    fn has_admission_in_flight(&self, agent_id: &AgentId) -> bool {
        self.admissions.values().any(|admission| &admission.agent_id == agent_id)
    }

    /// Correlating requests of one agent, optionally including suspended ones.
    pub(crate) fn correlating_requests_of(&self, agent_id: &AgentId, include_suspended: bool) -> Vec<RequestId> {
        self.correlating
            .iter()
            .filter(|id| &self.requests[*id].agent_id == agent_id)
            .filter(|id| include_suspended || !self.suspended.contains(*id))
            .cloned()
            .collect()
    }

    /// Checks the engine-wide invariants. Cheap enough for tests and the simulator after every
    /// step; the hot path asserts locally instead.
    pub fn check_invariants(&self) {
        let mut sequences = BTreeSet::new();
        let correlating: BTreeSet<RequestId> =
            self.requests.values().filter(|r| r.phase.is_correlating()).map(|r| r.request_id.clone()).collect();
        assert_eq!(correlating, self.correlating, "the correlating index matches the records");
        for record in self.requests.values() {
            record.assert_consistent();
            if let Some(event) = &record.terminal {
                if !self.terminal_retries.contains_key(&record.request_id) {
                    assert!(sequences.insert(event.terminal_event_sequence), "TERM-2: one sequence per event");
                }
                assert!(event.terminal_event_sequence < self.next_sequence);
            }
        }
        for (request_id, admission) in &self.admissions {
            let agent = self.agents.get(&admission.agent_id);
            if let Some(agent) = agent {
                if matches!(admission.step, Step::Writing { .. }) {
                    assert_eq!(agent.claim.as_ref(), Some(request_id), "ADM-12: a write holds its agent's claim");
                }
            }
        }
        for agent in self.agents.values() {
            if let Some(claim) = &agent.claim {
                let agent_id = &agent.facts.agent_id;
                assert!(
                    self.admissions.contains_key(claim)
                        || self.submission_claim_of(agent_id).as_ref() == Some(claim)
                        || self.landing_claim_of(agent_id).as_ref() == Some(claim),
                    "a claim belongs to an in-flight admission, a submission before its write's outcome, or a lost write still landing"
                );
            }
        }
        self.events.assert_numbers_accounted();
        for agent_id in self.stops_deferred.keys() {
            assert!(!self.agents.contains_key(agent_id), "EV-14: a deferred stop is a removed agent's");
            assert!(self.has_admission_in_flight(agent_id), "EV-14: a stop waits only for an admission in flight");
        }
    }
}

/// RF-6: the rule that decides a terminal reason, for the evidence trail.
pub fn rule_of(reason: &str) -> &'static str {
    match reason {
        "first_user_message_mismatch" | "prompt_twice_in_turn" | "same_text_prompt_unordered" => "CORR-6",
        "later_turn_started" | "other_turn_completed" | "other_turn_aborted" | "user_message_in_other_turn" | "unconfirmed_turn_replaced" => "CORR-7",
        "user_message_before_turn_start" | "turn_completed_before_binding" | "turn_aborted_before_binding" => "CORR-5",
        "observer_session_changed" | "observer_session_lost" => "CORR-3",
        "record_too_large" => "CORR-12",
        "incarnation_changed" | "agent_removed" | "agent_missing_after_restart" => "CORR-1",
        "observer_resumed_past_cursor" => "REC-2",
        "process_exited" | "process_exited_before_turn" => "CORR-11",
        "provider_turn_aborted" => "CORR-10",
        "no_turn_started" => "RF-7/RF-8",
        "turn_start_refused" | "turn_start_refusal_contradicted" => "MGD-7",
        "final_timeout" => "RF-3",
        "cancelled_by_caller" => "RF-4",
        "restart_in_write_window" => "REC-1",
        "store_commit_failed" => "IDEM-6",
        "no_final_message" => "RF-2",
        "final_too_large" => "RF-9",
        _ => "RF-5",
    }
}
