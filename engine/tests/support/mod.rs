//! A tiny in-memory runtime for engine tests: it performs the engine's outputs, keeps what
//! was durable, and lets a test hold back, fail or reorder any acknowledgement.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};
use wakterm_engine::*;

pub const ZOLA: &str = "0b5e3c1a-1111-4222-8333-000000000001";
pub const OTHER: &str = "0b5e3c1a-1111-4222-8333-000000000002";
pub const REQ: &str = "fe57dc90-994e-4e73-b09c-fac483d9f05b";
pub const REQ2: &str = "fe57dc90-994e-4e73-b09c-fac483d9f05c";
pub const T0: u64 = 1_767_000_000_000;
/// TIME-2: the boot every rig run shares unless a test says otherwise.
pub const RIG_BOOT: &str = "8f0c1c52-7a0e-4c43-9d0b-5b4f5b0f0001";

/// An agent event batch: nothing but events, the mark and the checkpoint (EV-3).
pub fn is_event_batch(ops: &[PersistOp]) -> bool {
    ops.iter().all(|op| matches!(op, PersistOp::AppendEvent(_) | PersistOp::PutEventMark(_) | PersistOp::PutCheckpoint { .. }))
}

pub fn agent_id(text: &str) -> AgentId {
    AgentId::parse(text).unwrap()
}

pub fn turn(text: &str) -> TurnId {
    TurnId(text.to_string())
}

pub fn session() -> SessionId {
    SessionId("sess-1".to_string())
}

pub fn zola_facts(incarnation: &str, pid: u32) -> AgentFacts {
    AgentFacts {
        agent_id: agent_id(ZOLA),
        name: "zola".to_string(),
        harness: Harness::Codex,
        transport: Transport::Pty,
        incarnation: Some(Incarnation(incarnation.to_string())),
        process: Some(ProcessIdentity { pid, start_time_ticks: 5 }),
        managed: None,
    }
}

/// An idle Codex with a completed baseline turn `turn-0`, tail at position 1000.
pub fn idle_snapshot(incarnation: &str, pid: u32) -> ObserverSnapshot {
    ObserverSnapshot {
        incarnation: Incarnation(incarnation.to_string()),
        process: Some(ProcessIdentity { pid, start_time_ticks: 5 }),
        status: ObserverStatus::Attached,
        session: Some(session()),
        position: 1000,
        turn: TurnState::Idle { last_completed: Some(turn("turn-0")) },
        composer: Composer::Empty,
    }
}

/// A managed app-server agent's thread: the rig's observer session (Codex 0.169 gives thread
/// id == session id).
pub const THREAD: &str = "sess-1";

/// Zola as a managed app-server agent on `thread`.
pub fn managed_facts(thread: Option<&str>) -> AgentFacts {
    let mut facts = zola_facts("inc-1", 100);
    facts.transport = Transport::AppServer;
    facts.managed = thread.map(|t| ManagedIds { thread_id: t.to_string(), session_id: SessionId(t.to_string()) });
    facts
}

/// A rig with zola registered as a managed agent, idle.
pub fn managed_zola(thread: Option<&str>) -> Rig {
    let mut rig = Rig::new();
    rig.input(Input::AgentUpserted(managed_facts(thread)));
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    rig
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Auto {
    /// Every persist, write and refresh is answered at once, successfully.
    All,
    /// Nothing is answered until the test says so.
    Manual,
}

pub struct Rig {
    pub engine: Engine,
    pub now: u64,
    pub auto: Auto,
    pub durable: BTreeMap<RequestId, RequestRecord>,
    /// The order the store stored each request (its row id: registration order, whatever the
    /// wall clocks said; an id registered again moves to the end).
    pub durable_order: Vec<RequestId>,
    pub durable_terminal: Vec<TerminalEvent>,
    pub persists: VecDeque<(u64, Vec<PersistOp>)>,
    pub deliveries: VecDeque<(u64, AgentId, Vec<u8>)>,
    /// ADM-4: the pane write count refreshes answer with, and what each write named.
    pub pane_writes: Option<u64>,
    /// ADM-19: another writer's last Enter as each refresh's look reports it.
    pub other_enter: Option<wakterm_engine::pane_look::OtherEnterLook>,
    pub expected_writes: Vec<Option<u64>>,
    pub refreshes: VecDeque<(u64, AgentId)>,
    pub resumes: Vec<(AgentId, Cursor)>,
    /// The process each of `resumes` was asked for.
    pub resume_incarnations: Vec<Incarnation>,
    /// OBS-4: every `ExpectSession` asked for: agent, session, process.
    pub expectations: Vec<(AgentId, wakterm_engine::SessionId, Incarnation)>,
    pub receipts: BTreeMap<OpId, Vec<Receipt>>,
    pub published: Vec<TerminalEvent>,
    pub cancels: Vec<(OpId, CancelOutcome)>,
    /// Every byte buffer that reached a pane, in order.
    pub written: Vec<(AgentId, Vec<u8>)>,
    /// What an observer refresh answers, per agent.
    pub snapshots: BTreeMap<AgentId, Result<ObserverSnapshot, String>>,
    pub delivery_outcome: DeliveryOutcome,
    /// The rollout's end the runtime reports with the next write's outcome (`Input::Delivered`).
    pub record_end: Option<Cursor>,
    next_op: u64,
    /// EV-*: the store's agent events and marks, and what was published.
    pub durable_events: Vec<AgentEvent>,
    pub durable_marks: BTreeMap<AgentId, EventMark>,
    pub published_events: Vec<AgentEvent>,
    /// Event-only batches (events, mark, checkpoint) are answered at once unless held, so
    /// tests of request commits see only those in `persists`.
    pub hold_events: bool,
    pub event_persists: VecDeque<(u64, Vec<PersistOp>)>,
    pub durable_checkpoints: BTreeMap<AgentId, String>,
    /// HIST-2: store lookups, answered at once from `durable` unless held.
    pub hold_loads: bool,
    pub loads: VecDeque<(u64, RequestId)>,
    /// SUB-*: split writes and pane watches asked for (answered by hand), and submit receipts.
    pub split_writes: VecDeque<(u64, AgentId, SplitWrite)>,
    pub watches: VecDeque<(u64, AgentId, EnterBoundary, u64)>,
    pub submit_receipts: BTreeMap<OpId, Vec<SubmitReceipt>>,
    /// TIME-2: the running engine's clock on the machine's monotonic clock, and what the
    /// store keeps of the boot's runs (`run_clocks`).
    pub run_clock: Option<RunClock>,
    pub run_clocks_seen: Option<RunClocksSeen>,
}

impl Rig {
    /// A daemon's first start on an empty store: its run clock at offset 0 (engine time is
    /// monotonic time), kept in every request it registers.
    pub fn new() -> Rig {
        let run_clock = RunClock { boot_id: RIG_BOOT.to_string(), offset_ms: 0 };
        let window = RunClocksSeen::restart_window(T0, Some(&run_clock), KeptRunClocks::Nothing);
        let mut rig = Rig::from_engine(Engine::recover(DurableState::default(), T0, Some(run_clock.clone())));
        (rig.run_clock, rig.run_clocks_seen) = (Some(run_clock), Some(window.keep));
        rig
    }

    /// TIME-1, TIME-2: the wall clock stepped by `step_ms` while the daemon is down: the next
    /// run's engine time starts that much further on, the monotonic clock does not move (call
    /// before a `crash_and_recover*`).
    pub fn wall_clock_stepped_while_down(&mut self, step_ms: i64) {
        self.now = self.now.saturating_add_signed(step_ms);
        if let Some(clock) = &mut self.run_clock {
            clock.offset_ms -= step_ms;
        }
    }

    pub fn from_engine(engine: Engine) -> Rig {
        Rig {
            engine,
            now: T0,
            auto: Auto::All,
            durable: BTreeMap::new(),
            durable_order: Vec::new(),
            durable_terminal: Vec::new(),
            persists: VecDeque::new(),
            deliveries: VecDeque::new(),
            pane_writes: None,
            other_enter: None,
            expected_writes: Vec::new(),
            refreshes: VecDeque::new(),
            resumes: Vec::new(),
            resume_incarnations: Vec::new(),
            expectations: Vec::new(),
            receipts: BTreeMap::new(),
            published: Vec::new(),
            cancels: Vec::new(),
            written: Vec::new(),
            snapshots: BTreeMap::new(),
            delivery_outcome: DeliveryOutcome::Complete,
            record_end: None,
            next_op: 1,
            durable_events: Vec::new(),
            durable_marks: BTreeMap::new(),
            published_events: Vec::new(),
            hold_events: false,
            event_persists: VecDeque::new(),
            durable_checkpoints: BTreeMap::new(),
            hold_loads: false,
            loads: VecDeque::new(),
            split_writes: VecDeque::new(),
            watches: VecDeque::new(),
            submit_receipts: BTreeMap::new(),
            run_clock: None,
            run_clocks_seen: None,
        }
    }

    /// A rig with agent zola registered and idle with a baseline turn.
    pub fn with_idle_zola() -> Rig {
        let mut rig = Rig::new();
        rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
        rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
        rig
    }

    /// An idle zola with one admission registered (its refresh answered, its registration
    /// durable) and its write not answered yet; from here everything is answered by hand.
    pub fn with_registered_zola(request_id: &str, prompt: &str, mode: ReturnMode) -> (Rig, OpId) {
        let mut rig = Rig::with_idle_zola();
        rig.auto = Auto::Manual;
        let op = rig.admit(request_id, prompt, mode);
        rig.refresh_next();
        rig.ack_next_persist(Ok(()));
        (rig, op)
    }

    pub fn input(&mut self, input: Input) {
        self.engine.handle(self.now, input);
        self.drain();
        self.engine.check_invariants();
        if self.auto == Auto::All {
            self.settle();
        }
    }

    /// Inputs that arrived together (one look of the monitor), as one step.
    pub fn input_all(&mut self, inputs: Vec<Input>) {
        self.engine.handle_all(self.now, inputs);
        self.drain();
        self.engine.check_invariants();
        if self.auto == Auto::All {
            self.settle();
        }
    }

    /// Time passes; the engine gets a `Tick` only when a timer it announced (`poll_timeout`) is
    /// due, as the driver does: a deadline the engine keeps but never announces would never
    /// fire in the daemon either.
    pub fn advance(&mut self, ms: u64) {
        self.now += ms;
        if self.engine.poll_timeout().is_some_and(|due| due <= self.now) {
            self.input(Input::Tick);
            return;
        }
        // Nothing announced is due: a tick now must find nothing to do either (else the engine
        // keeps a time it does not announce, or fires one early).
        let mut probe = self.engine.clone();
        probe.handle(self.now, Input::Tick);
        assert!(probe.poll_output().is_none(), "a tick at {} did work no announced timer was due for", self.now);
        if self.auto == Auto::All {
            self.settle();
        }
    }

    fn drain(&mut self) {
        while let Some(output) = self.engine.poll_output() {
            match output {
                Output::RefreshObserver { refresh_id, agent_id } => self.refreshes.push_back((refresh_id, agent_id)),
                Output::ResumeObserver { agent_id, from, incarnation } => {
                    self.resumes.push((agent_id, from));
                    self.resume_incarnations.push(incarnation);
                }
                Output::ExpectSession { agent_id, session, incarnation } => self.expectations.push((agent_id, session, incarnation)),
                Output::Persist { token, ops } if is_event_batch(&ops) => self.event_persists.push_back((token, ops)),
                Output::Persist { token, ops } => self.persists.push_back((token, ops)),
                Output::AgentEvent(event) => self.published_events.push(event),
                Output::LoadRequest { load_id, request_id } => self.loads.push_back((load_id, request_id)),
                Output::Deliver { delivery_id, agent_id, bytes, expect_writes, .. } => {
                    self.expected_writes.push(expect_writes);
                    self.deliveries.push_back((delivery_id, agent_id, bytes));
                }
                Output::Receipt { op, receipt } => self.receipts.entry(op).or_default().push(receipt),
                Output::CancelResult { op, outcome } => self.cancels.push((op, outcome)),
                Output::TerminalEvent(event) => self.published.push(event),
                Output::SubmitWrite { delivery_id, agent_id, write, expect_writes, .. } => {
                    self.expected_writes.push(expect_writes);
                    self.split_writes.push_back((delivery_id, agent_id, write));
                }
                Output::WatchPane { watch_id, agent_id, boundary, wait_ms } => self.watches.push_back((watch_id, agent_id, boundary, wait_ms)),
                Output::SubmitReceipt { op, receipt } => {
                    receipt.assert_consistent();
                    self.submit_receipts.entry(op).or_default().push(receipt)
                }
            }
        }
        if !self.hold_events {
            while let Some((token, ops)) = self.event_persists.pop_front() {
                self.ack_persist(token, ops, Ok(()));
            }
        }
        if !self.hold_loads {
            while !self.loads.is_empty() {
                self.answer_next_load(None);
            }
        }
    }

    /// Answers the oldest store lookup from `durable`, or with `failure`.
    pub fn answer_next_load(&mut self, failure: Option<&str>) {
        let (load_id, request_id) = self.loads.pop_front().expect("a lookup is pending");
        let record = match failure {
            Some(error) => Err(error.to_string()),
            None => Ok(self.durable.get(&request_id).cloned()),
        };
        self.engine.handle(self.now, Input::RequestLoaded { load_id, record });
        self.drain();
        self.engine.check_invariants();
    }

    /// Answers the oldest held event batch.
    pub fn ack_next_events(&mut self, result: Result<(), String>) {
        let (token, ops) = self.event_persists.pop_front().expect("an event batch is pending");
        self.ack_persist(token, ops, result);
    }

    /// Answers everything outstanding, successfully, until the engine is quiet.
    pub fn settle(&mut self) {
        loop {
            if let Some((token, ops)) = self.persists.pop_front() {
                self.ack_persist(token, ops, Ok(()));
            } else if let Some((id, agent, bytes)) = self.deliveries.pop_front() {
                self.complete_delivery(id, agent, bytes);
            } else if let Some((refresh_id, agent_id)) = self.refreshes.pop_front() {
                self.answer_refresh(refresh_id, agent_id);
            } else {
                break;
            }
        }
    }

    pub fn ack_persist(&mut self, token: u64, ops: Vec<PersistOp>, result: Result<(), String>) {
        if result.is_ok() {
            for op in ops {
                match op {
                    PersistOp::PutRequest(record) => {
                        // A registration is stored anew, of an id stored before too (`op::put_request`).
                        let anew = self.durable.get(&record.request_id).is_none_or(|r| matches!(r.phase, Phase::Released | Phase::Registered) && record.phase == Phase::Registered);
                        if anew {
                            self.durable_order.retain(|id| id != &record.request_id);
                            self.durable_order.push(record.request_id.clone());
                        }
                        self.durable.insert(record.request_id.clone(), record);
                    }
                    PersistOp::AppendTerminal(event) => {
                        let last = self.durable_terminal.last().map_or(0, |e| e.terminal_event_sequence);
                        assert!(event.terminal_event_sequence > last, "store: sequences strictly increase");
                        self.durable_terminal.push(event);
                    }
                    PersistOp::AppendEvent(event) => {
                        assert!(self.durable_events.iter().all(|e| e.sequence != event.sequence), "store: a sequence is used once");
                        self.durable_events.push(event);
                    }
                    PersistOp::PutEventMark(mark) => {
                        self.durable_marks.insert(mark.agent_id.clone(), mark);
                    }
                    PersistOp::PutCheckpoint { agent_id, checkpoint_json } => {
                        self.durable_checkpoints.insert(agent_id, checkpoint_json);
                    }
                }
            }
        }
        self.engine.handle(self.now, Input::PersistAcked { token, result });
        self.drain();
        self.engine.check_invariants();
    }

    pub fn ack_next_persist(&mut self, result: Result<(), String>) {
        let (token, ops) = self.persists.pop_front().expect("a persist is pending");
        self.ack_persist(token, ops, result);
    }

    fn complete_delivery(&mut self, delivery_id: u64, agent_id: AgentId, bytes: Vec<u8>) {
        let outcome = self.delivery_outcome.clone();
        if !outcome.wrote_nothing() {
            self.written.push((agent_id, bytes));
        }
        self.engine.handle(self.now, Input::Delivered { delivery_id, outcome, record_end: self.record_end.clone() });
        self.drain();
        self.engine.check_invariants();
    }

    pub fn deliver_next(&mut self, outcome: DeliveryOutcome) {
        let (delivery_id, agent_id, bytes) = self.deliveries.pop_front().expect("a write is pending");
        if !outcome.wrote_nothing() {
            self.written.push((agent_id, bytes));
        }
        self.engine.handle(self.now, Input::Delivered { delivery_id, outcome, record_end: self.record_end.clone() });
        self.drain();
    }

    fn answer_refresh(&mut self, refresh_id: u64, agent_id: AgentId) {
        let snapshot = self.snapshots.get(&agent_id).cloned().unwrap_or(Err("no observer".to_string()));
        let pane = wakterm_engine::pane_look::PaneLook { writes: self.pane_writes, other_enter: self.other_enter };
        self.engine.handle(self.now, Input::ObserverRefreshed { refresh_id, agent_id, snapshot, pane });
        self.drain();
        self.engine.check_invariants();
    }

    pub fn refresh_next(&mut self) {
        let (refresh_id, agent_id) = self.refreshes.pop_front().expect("a refresh is pending");
        self.answer_refresh(refresh_id, agent_id);
    }

    pub fn command(&mut self, operation: Operation, request_id: &str, prompt: &str, return_mode: ReturnMode) -> AdmitCommand {
        let op = OpId(self.next_op);
        self.next_op += 1;
        AdmitCommand {
            op,
            operation,
            target: "zola".to_string(),
            exact_agent_id: false,
            incarnation: (operation == Operation::Admit).then(|| "inc-1".to_string()),
            request_id: request_id.to_string(),
            prompt: prompt.to_string(),
            paste_mode: PasteMode::Bracketed,
            return_mode,
            final_timeout_ms: 0,
            generated_id: false,
            share_prompt: false,
            write_nonce: 0x5eed,
            no_steer: false,
        }
    }

    /// Submits a command and returns its op id.
    pub fn submit(&mut self, command: AdmitCommand) -> OpId {
        let op = command.op;
        self.input(Input::Admit(command));
        op
    }

    pub fn admit(&mut self, request_id: &str, prompt: &str, return_mode: ReturnMode) -> OpId {
        let command = self.command(Operation::Admit, request_id, prompt, return_mode);
        self.submit(command)
    }

    /// ADM-13, CORR-6, ADM-5 (one user message, one write): a return-final prompt `text`
    /// (`REQ`), then a plain send `REQ2` of the same text written into its wait (it joins the
    /// wait), then the turn's first message of that text, which binds `REQ`. Returns the
    /// send's op.
    #[allow(dead_code)] // not every suite makes two prompts of one text
    pub fn same_text_send_joining_a_return_final_wait(&mut self, text: &str) -> OpId {
        let op = self.admit(REQ, text, ReturnMode::ReturnFinal);
        assert_eq!(self.receipt(op).classification, Classification::Accepted);
        self.advance(500);
        let command = self.command(Operation::Send, REQ2, text, ReturnMode::OneWay);
        let send = self.submit(command);
        assert_eq!(self.writes(), 2, "a plain send is written whatever the wait");
        assert!(self.durable[&RequestId::parse(REQ2).unwrap()].joined_wait);
        self.turn_started("turn-1", 1_100);
        self.user_message("turn-1", text, 1_110);
        assert_eq!(self.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Bound, "the first message is the request's");
        send
    }

    pub fn receipt(&self, op: OpId) -> &Receipt {
        let receipts = self.receipts.get(&op).unwrap_or_else(|| panic!("no receipt for {op:?}"));
        assert_eq!(receipts.len(), 1, "exactly one receipt per call");
        &receipts[0]
    }

    pub fn has_receipt(&self, op: OpId) -> bool {
        self.receipts.contains_key(&op)
    }

    pub fn observe(&mut self, event: ObserverEvent) {
        self.input(Input::Observed { agent_id: agent_id(ZOLA), event });
    }

    /// ADM-5: whether zola counts as waiting for a written prompt's turn.
    pub fn awaiting_turn_start(&self) -> bool {
        self.engine.agent(&agent_id(ZOLA)).expect("zola is registered").awaiting_turn_after.is_some()
    }

    /// The observer loses zola's session (a rollout rewritten), and refreshes find no view.
    pub fn lose_the_view(&mut self) {
        self.observe(ObserverEvent::SessionLost { reason: "rewritten".into(), session: None, before: None });
        let lost = ObserverSnapshot { status: ObserverStatus::Unavailable { reason: "rewritten".into() }, session: None, turn: TurnState::Unknown, ..idle_snapshot("inc-1", 100) };
        self.snapshots.insert(agent_id(ZOLA), Ok(lost));
    }

    pub fn turn_started(&mut self, id: &str, position: u64) {
        self.observe(ObserverEvent::TurnStarted { session: session(), turn: turn(id), position });
    }

    pub fn user_message(&mut self, id: &str, prompt: &str, position: u64) {
        let prompt_hash = wakterm_engine::prompt::prompt_hash(prompt);
        self.observe(ObserverEvent::UserMessage { session: session(), turn: Some(turn(id)), prompt_hash, position });
    }

    pub fn turn_completed(&mut self, id: &str, final_message: &str, position: u64) {
        let final_message = Some(final_message.to_string());
        self.observe(ObserverEvent::TurnCompleted { session: session(), turn: turn(id), final_message, position });
    }

    /// A whole provider turn that our prompt opened and completed.
    pub fn provider_turn(&mut self, id: &str, prompt: &str, final_message: &str, start: u64) {
        self.turn_started(id, start + 10);
        self.user_message(id, prompt, start + 20);
        self.turn_completed(id, final_message, start + 30);
    }

    /// A managed app-server's turn for request `request`'s `turn/start` line (the rig's nonce),
    /// as Codex 0.169 writes it: the reply accepting the line first, then the turn.
    pub fn managed_turn(&mut self, request: &str, id: &str, prompt: &str, final_message: &str, start: u64) {
        let line = prompt::turn_start_id(request, 0x5eed);
        self.observe(ObserverEvent::TurnAccepted { session: session(), id: line, turn: turn(id), position: start + 5 });
        self.provider_turn(id, prompt, final_message, start);
    }

    /// Simulates a crash: everything not durable is gone; the engine is rebuilt.
    pub fn crash_and_recover(&mut self) {
        self.recover_from(self.durable.values().cloned().collect());
    }

    /// A crash, recovered as the daemon does (HIST-1): only open requests are loaded, finished
    /// ones stay in `durable` for lookups.
    pub fn crash_and_recover_open_only(&mut self) {
        self.recover_from(self.durable.values().filter(|r| !is_finished(r.phase)).cloned().collect());
    }

    /// A crash, recovered as the daemon does with ADM-5's addition: the open requests and, of
    /// the finished ones updated within RF-8's turn-start timeout, each agent's latest few
    /// written, oldest first (`Store::load_latest_written_since`).
    pub fn crash_and_recover_as_the_daemon(&mut self) {
        let kept = self.run_clocks_seen.take().map_or(KeptRunClocks::Nothing, KeptRunClocks::Kept);
        let window = RunClocksSeen::restart_window(self.now, self.run_clock.as_ref(), kept);
        let since = window.since_ms;
        self.run_clocks_seen = Some(window.keep);
        let mut latest: BTreeMap<AgentId, Vec<RequestRecord>> = BTreeMap::new();
        let stored = self.durable_order.iter().map(|id| &self.durable[id]); // registration order
        for record in stored.filter(|r| is_finished(r.phase) && r.updated_ms >= since && (r.written_past.is_some() || r.write_unknown)) {
            let recent = latest.entry(record.agent_id.clone()).or_default();
            recent.push(record.clone());
            if recent.len() > wakterm_engine::limits::MAX_RECENT_WRITES_LOADED {
                recent.remove(0); // the latest few
            }
        }
        let open = self.durable.values().filter(|r| !is_finished(r.phase)).cloned();
        self.recover_from(open.chain(latest.into_values().flatten()).collect());
    }

    fn recover_from(&mut self, requests: Vec<RequestRecord>) {
        let durable = DurableState {
            requests,
            last_terminal_sequence: self.durable_terminal.last().map_or(0, |e| e.terminal_event_sequence),
            last_event_sequence: self.durable_events.iter().map(|e| e.sequence).max().unwrap_or(0),
            event_marks: self.durable_marks.values().cloned().collect(),
        };
        self.persists.clear();
        self.event_persists.clear();
        self.loads.clear();
        self.deliveries.clear();
        self.refreshes.clear();
        self.engine = Engine::recover(durable, self.now, self.run_clock.clone());
        self.drain();
        if self.auto == Auto::All {
            self.settle();
        }
    }

    pub fn terminal_for(&self, request_id: &str) -> Vec<&TerminalEvent> {
        self.published.iter().filter(|e| e.request_id.as_str() == request_id).collect()
    }

    /// SUB-1: a submit call to zola.
    pub fn submit_text(&mut self, text: &str, timeout_ms: Option<u64>) -> OpId {
        let op = OpId(self.next_op);
        self.next_op += 1;
        let submission_id = format!("5b0b1e00-0000-4000-8000-{:012}", op.0);
        let command = SubmitCommand { op, submission_id, target: "zola".to_string(), exact_agent_id: false, text: text.to_string(), timeout_ms };
        self.input(Input::Submit(command));
        op
    }

    /// SUB-2: answers the oldest split write; a write that reached the pane is recorded.
    pub fn answer_split_write(&mut self, outcome: SplitOutcome) {
        let (delivery_id, agent_id, write) = self.split_writes.pop_front().expect("a split write is pending");
        if !outcome.wrote_nothing() {
            self.written.push((agent_id, write.steps.concat()));
        }
        self.input(Input::SubmitWritten { delivery_id, outcome });
    }

    /// SUB-4: answers the oldest pane watch.
    pub fn answer_watch(&mut self, sample: Result<PaneSample, String>) {
        let (watch_id, ..) = self.watches.pop_front().expect("a watch is pending");
        self.input(Input::PaneWatched { watch_id, sample });
    }

    pub fn submit_receipt(&self, op: OpId) -> &SubmitReceipt {
        let receipts = self.submit_receipts.get(&op).unwrap_or_else(|| panic!("no submit receipt for {op:?}"));
        assert_eq!(receipts.len(), 1, "exactly one receipt per call");
        &receipts[0]
    }

    pub fn writes(&self) -> usize {
        self.written.len()
    }
}
