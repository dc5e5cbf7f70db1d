//! Ground truth and simulated devices: the Codex TUI (composer, bracketed paste, turns), the
//! provider's record (rollout file or app-server event stream) and the observer that tails it,
//! the processes behind the panes, and the durable store model. The holder processes (panes,
//! Codex) survive a daemon crash; the observer's read state belongs to the daemon and is reset.

use crate::mutant::Mutant;
use crate::oracle::{Oracle, TurnTruth};
use crate::store_model::StoreTables;
use madsim::rand::{thread_rng, Rng};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use wakterm_engine::{
    prompt::prompt_hash, AgentFacts, AgentId, Composer, Harness, Incarnation, ObserverEvent, ObserverSnapshot, ObserverStatus,
    ProcessIdentity, SessionId, Transport, TurnId, TurnState,
};
use wakterm_runtime::driver::DriverMsg;

pub type Shared = Arc<Mutex<World>>;

/// Every fault class the run must see fire at least once over many seeds.
pub const FAULT_CLASSES: &[&str] = &[
    "pane.partial_write",
    "pane.write_error",
    "pane.error_after_complete",
    "pane.result_late",
    "pane.refused_stale",
    "process.exit",
    "process.replaced",
    "process.pid_reuse",
    "provider.bracketed_paste",
    "provider.raw_paste_kept",
    "provider.whitespace_trimmed",
    "provider.busy_turn",
    "provider.steering",
    "provider.aborted_turn",
    "provider.late_final",
    "provider.duplicate_final",
    "provider.human_turn",
    "provider.human_draft",
    "provider.question",
    "observer.file_lost",
    "observer.truncated",
    "observer.replaced",
    "observer.rewritten",
    "observer.record_too_large",
    "observer.delayed",
    "observer.refresh_slow",
    "app_server.stream_dropped",
    "store.commit_failed",
    "store.slow_commit",
    "crash.random",
    "crash.after_commit",
    "crash.after_pane_write",
    "clock.jump",
    "clock.wall_step",
    "clock.deadline",
    "caller.retry_same_id",
    "caller.changed_input",
    "caller.cancel",
    "caller.join_burst",
    "caller.other_spelling",
];

#[derive(Default)]
pub struct Counters {
    pub faults: BTreeMap<&'static str, u64>,
    pub receipts: BTreeMap<String, u64>,
    pub terminals: BTreeMap<String, u64>,
    pub requests: u64,
}

impl Counters {
    pub fn fault(&mut self, name: &'static str) {
        debug_assert!(FAULT_CLASSES.contains(&name) || name.starts_with("note."), "{name}");
        *self.faults.entry(name).or_default() += 1;
    }
}

/// The per-seed trace: one line per step; its hash proves determinism.
#[derive(Default)]
pub struct Trace {
    pub lines: Vec<String>,
    pub hash: u64,
    pub t0_ms: u64,
}

impl Trace {
    pub fn push(&mut self, line: String) {
        let t = wakterm_runtime::driver::now_ms().saturating_sub(self.t0_ms);
        let line = format!("{t:>7} {line}");
        let mut h = if self.hash == 0 { 0xcbf2_9ce4_8422_2325 } else { self.hash };
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.hash = h;
        self.lines.push(line);
    }
}

/// Fault rates chosen by the seed (0 disables a class for this seed).
#[derive(Clone, Debug)]
pub struct FaultPlan {
    pub pane_error: f64,
    pub pane_late: f64,
    pub commit_fail: f64,
    pub commit_slow: f64,
    pub refresh_slow: f64,
    pub crash_point: f64,
    pub abort: f64,
    pub late_final: f64,
    pub duplicate_final: f64,
    pub max_crashes: u32,
}

impl FaultPlan {
    pub fn draw() -> FaultPlan {
        let mut rng = thread_rng();
        let mut rate = |p_on: f64, hi: f64| if rng.gen_bool(p_on) { rng.gen_range(0.0..hi) } else { 0.0 };
        FaultPlan {
            pane_error: rate(0.6, 0.35),
            pane_late: rate(0.4, 0.12),
            commit_fail: rate(0.5, 0.15),
            commit_slow: rate(0.5, 0.2),
            refresh_slow: rate(0.4, 0.15),
            crash_point: rate(0.6, 0.08),
            abort: rate(0.6, 0.35),
            late_final: rate(0.5, 0.3),
            duplicate_final: rate(0.5, 0.4),
            max_crashes: thread_rng().gen_range(0..5),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ticks: u64,
}

impl Proc {
    pub fn incarnation(self) -> Incarnation {
        Incarnation(format!("inc-{}-{}", self.pid, self.ticks))
    }
    pub fn identity(self) -> ProcessIdentity {
        ProcessIdentity { pid: self.pid, start_time_ticks: self.ticks }
    }
}

#[derive(Clone, Debug)]
pub struct Record {
    pub position: u64,
    pub visible_at_ms: u64,
    pub event: ObserverEvent,
}

/// One provider record: a rollout file (byte positions) or an app-server stream (sequences).
#[derive(Clone, Debug)]
pub struct Session {
    pub id: SessionId,
    pub base: u64,
    /// The turn state the record starts with (history copied into a new file).
    pub header: TurnState,
    pub records: Vec<Record>,
    pub next_position: u64,
}

#[derive(Clone, Debug)]
pub struct Running {
    pub turn: TurnId,
    pub due_ms: u64,
    pub abort: bool,
}

/// The daemon's observer for one agent; reset when the daemon restarts.
#[derive(Clone, Debug)]
pub struct Observer {
    pub attached: Option<SessionId>,
    pub read: usize,
    pub position: u64,
    pub turn: TurnState,
    pub lost_reported: bool,
    /// What this daemon last registered with the engine for the agent.
    pub reported: Option<Proc>,
    /// StaleTurnLabel mutant: the tracked turn id.
    pub label: Option<TurnId>,
}

pub struct Agent {
    pub index: usize,
    pub agent_id: AgentId,
    pub name: String,
    pub transport: Transport,
    pub process: Option<Proc>,
    pub respawn_at_ms: Option<u64>,
    pub spawned: u64,
    pub composer: String,
    pub question: bool,
    pub running: Option<Running>,
    pub last_completed: Option<TurnId>,
    pub turns_started: u64,
    pub session: Session,
    pub sessions_made: u64,
    pub lost_until_ms: Option<u64>,
    pub lost_reason: String,
    /// CORR-12: the next turn final the observer reads will be too large to read in full
    /// (a final is where Codex puts long text); the value is how long the observer is then
    /// blind. Reaching it loses the session (evidence lost); the record is never folded.
    pub unreadable_record: Option<u64>,
    pub lag_ms: u64,
    pub pending_finals: Vec<(u64, TurnId, String)>,
    pub observer: Observer,
    /// SkipHashCheck mutant: the last prompt our pane port typed.
    pub last_typed: Option<String>,
}

impl Agent {
    pub fn new(index: usize, transport: Transport) -> Agent {
        let agent_id = AgentId::parse(&format!("0b5e3c1a-1111-4222-8333-00000000000{index}")).expect("uuid");
        let name = ["zola", "apex"][index].to_string();
        let proc0 = Proc { pid: 100 + index as u32, ticks: 5 };
        let mut agent = Agent {
            index,
            agent_id,
            name,
            transport,
            process: Some(proc0),
            respawn_at_ms: None,
            spawned: 1,
            composer: String::new(),
            question: false,
            running: None,
            last_completed: None,
            turns_started: 0,
            session: Session { id: SessionId(String::new()), base: 0, header: TurnState::Idle { last_completed: None }, records: vec![], next_position: 0 },
            sessions_made: 0,
            lost_until_ms: None,
            lost_reason: String::new(),
            unreadable_record: None,
            lag_ms: 20,
            pending_finals: vec![],
            observer: Observer {
                attached: None,
                read: 0,
                position: 0,
                turn: TurnState::Unknown,
                lost_reported: false,
                reported: None,
                label: None,
            },
            last_typed: None,
        };
        // A completed baseline turn, as the tests' idle Codex has.
        let baseline = TurnId(format!("a{index}-baseline"));
        agent.new_session(TurnState::Idle { last_completed: Some(baseline.clone()) });
        agent.last_completed = Some(baseline);
        agent
    }

    fn new_session(&mut self, header: TurnState) {
        self.sessions_made += 1;
        let base = match self.transport {
            Transport::Pty => 1000 * self.sessions_made,
            Transport::AppServer => 0,
        };
        self.session = Session {
            id: SessionId(format!("s{}-{}", self.index, self.sessions_made)),
            base,
            header,
            records: vec![],
            next_position: base,
        };
    }

    pub fn facts(&self) -> AgentFacts {
        AgentFacts {
            agent_id: self.agent_id.clone(),
            name: self.name.clone(),
            harness: Harness::Codex,
            transport: self.transport,
            incarnation: self.process.map(Proc::incarnation),
            process: self.process.map(Proc::identity),
        }
    }

    fn true_turn(&self) -> TurnState {
        match &self.running {
            Some(r) => TurnState::Busy { turn: Some(r.turn.clone()) },
            None => TurnState::Idle { last_completed: self.last_completed.clone() },
        }
    }

    fn append(&mut self, now: u64, make: impl FnOnce(SessionId, u64) -> ObserverEvent) {
        let step = match self.transport {
            Transport::Pty => thread_rng().gen_range(60..400),
            Transport::AppServer => 1,
        };
        self.session.next_position += step;
        let position = self.session.next_position;
        let event = make(self.session.id.clone(), position);
        let floor = self.session.records.last().map_or(0, |r| r.visible_at_ms);
        let visible_at_ms = (now + thread_rng().gen_range(0..=self.lag_ms)).max(floor);
        self.session.records.push(Record { position, visible_at_ms, event });
    }
}

/// The whole simulated system of one seed.
pub struct World {
    pub mutant: Mutant,
    pub plan: FaultPlan,
    pub faults_on: bool,
    /// TIME-1: how far the daemon's wall clock is stepped from true (simulated) time, both
    /// directions; a daemon reads it when it starts.
    pub wall_offset_ms: i64,
    pub agents: Vec<Agent>,
    pub store: StoreTables,
    pub inbox: Option<mpsc::Sender<DriverMsg>>,
    pub crash: Option<mpsc::UnboundedSender<&'static str>>,
    pub crashes: u32,
    pub oracle: Oracle,
    pub counters: Counters,
    pub trace: Trace,
    /// PublishBeforeCommit mutant: sequences already pushed to watchers.
    pub early_published: Vec<u64>,
}

impl World {
    /// The daemon's wall clock: simulated time stepped by `wall_offset_ms`.
    pub fn wall_ms(&self) -> u64 {
        wakterm_runtime::driver::now_ms().saturating_add_signed(self.wall_offset_ms)
    }

    pub fn new(mutant: Mutant) -> World {
        let mut trace = Trace::default();
        trace.t0_ms = wakterm_runtime::driver::now_ms();
        World {
            mutant,
            plan: FaultPlan::draw(),
            faults_on: true,
            wall_offset_ms: 0,
            agents: vec![Agent::new(0, Transport::Pty), Agent::new(1, Transport::AppServer)],
            store: StoreTables::default(),
            inbox: None,
            crash: None,
            crashes: 0,
            oracle: Oracle::default(),
            counters: Counters::default(),
            trace,
            early_published: vec![],
        }
    }

    pub fn log(&mut self, line: String) {
        self.trace.push(line);
    }

    /// A chance, only while faults are on.
    pub fn fault_roll(&self, p: f64) -> bool {
        self.faults_on && p > 0.0 && thread_rng().gen_bool(p.min(1.0))
    }

    /// Asks the crash task to kill the daemon now (a crash point inside an effect).
    pub fn crash_point(&mut self, name: &'static str) {
        if self.fault_roll(self.plan.crash_point) && self.crashes < self.plan.max_crashes {
            if let Some(crash) = &self.crash {
                if crash.send(name).is_ok() {
                    self.crashes += 1;
                }
            }
        }
    }

    // ----- the TUI and the provider (ground truth) -----

    /// Bytes that reached agent `a`'s pane. `origin`: the request whose write this is.
    pub fn feed(&mut self, a: usize, bytes: &[u8], origin: Option<&str>) {
        let raw_burst = bytes.len() > 1 && !bytes.starts_with(b"\x15\x1b[200~");
        let mut in_paste = false;
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            if rest.starts_with(b"\x1b[200~") {
                in_paste = true;
                i += 6;
            } else if rest.starts_with(b"\x1b[201~") {
                in_paste = false;
                i += 6;
            } else if rest[0] == 0x15 && !in_paste {
                self.agents[a].composer.clear();
                i += 1;
            } else if rest[0] == b'\r' && !in_paste {
                if raw_burst {
                    // A fast unbracketed burst: Codex keeps it in the composer, CR as newline.
                    self.agents[a].composer.push('\n');
                    self.counters.fault("provider.raw_paste_kept");
                } else {
                    self.submit(a, origin);
                }
                i += 1;
            } else {
                let ch_len = utf8_len(rest[0]).min(rest.len());
                let text = String::from_utf8_lossy(&rest[..ch_len]).to_string();
                self.agents[a].composer.push_str(&text);
                i += ch_len;
            }
        }
        // An unterminated paste (a partial write) ends with the write: its text stays a draft.
    }

    /// Enter: Codex trims the composer and starts a turn, or steers the running one.
    fn submit(&mut self, a: usize, origin: Option<&str>) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        if agent.process.is_none() || agent.question {
            agent.question = false;
            agent.composer.clear();
            return;
        }
        let raw = std::mem::take(&mut agent.composer);
        let text = raw.trim().to_string();
        if text.is_empty() {
            return;
        }
        if text != raw {
            self.counters.fault("provider.whitespace_trimmed");
        }
        let hash = prompt_hash(&text);
        self.oracle.user_messages.insert((a, hash.clone()));
        let opener = origin.filter(|rid| self.oracle.request_of(&text).as_deref() == Some(*rid)).map(str::to_string);
        let agent = &mut self.agents[a];
        if let Some(running) = agent.running.clone() {
            agent.append(now, |session, position| ObserverEvent::UserMessage { session, turn: Some(running.turn.clone()), prompt_hash: hash, position });
            self.counters.fault("provider.steering");
            self.log(format!("a{a} steer {} by {:?}", running.turn.0, origin));
            return;
        }
        agent.turns_started += 1;
        let turn = TurnId(format!("a{a}-p{}-t{}", agent.spawned, agent.turns_started));
        let abort = self.faults_on && thread_rng().gen_bool(self.plan.abort.max(0.02));
        let late = self.faults_on && thread_rng().gen_bool(self.plan.late_final.max(0.02));
        let duration = if late { thread_rng().gen_range(8_000..30_000) } else { thread_rng().gen_range(100..3_000) };
        if late {
            self.counters.fault("provider.late_final");
        }
        let agent = &mut self.agents[a];
        agent.running = Some(Running { turn: turn.clone(), due_ms: now + duration, abort });
        let t = turn.clone();
        agent.append(now, |session, position| ObserverEvent::TurnStarted { session, turn: t.clone(), position });
        agent.append(now, |session, position| ObserverEvent::UserMessage { session, turn: Some(t), prompt_hash: hash, position });
        if origin.is_none() {
            self.counters.fault("provider.human_turn");
        }
        self.oracle.turns.insert(turn.0.clone(), TurnTruth { opened_by: opener.clone(), final_message: None, aborted: false });
        self.log(format!("a{a} turn {} started by {:?} text={:?}", turn.0, opener, text));
    }

    /// Time passes for the provider: turns end, duplicate finals arrive, processes respawn.
    pub fn provider_tick(&mut self, a: usize) {
        let now = wakterm_runtime::driver::now_ms();
        if let Some(at) = self.agents[a].respawn_at_ms {
            if now >= at || !self.faults_on {
                self.spawn_process(a, false);
            }
        }
        if let Some(running) = self.agents[a].running.clone() {
            if now >= running.due_ms {
                let agent = &mut self.agents[a];
                agent.running = None;
                let t = running.turn.clone();
                if running.abort {
                    let labelled = thread_rng().gen_bool(0.8).then(|| t.clone());
                    agent.append(now, |session, position| ObserverEvent::TurnAborted { session, turn: labelled, position });
                    self.counters.fault("provider.aborted_turn");
                    if let Some(truth) = self.oracle.turns.get_mut(&t.0) {
                        truth.aborted = true;
                    }
                    self.log(format!("a{a} turn {} aborted", t.0));
                } else {
                    let text = format!("final of {}", t.0);
                    agent.last_completed = Some(t.clone());
                    let m = Some(text.clone());
                    agent.append(now, |session, position| ObserverEvent::TurnCompleted { session, turn: t.clone(), final_message: m, position });
                    if self.faults_on && thread_rng().gen_bool(self.plan.duplicate_final) {
                        let due = now + thread_rng().gen_range(0..3000);
                        self.agents[a].pending_finals.push((due, t.clone(), format!("{text} (again)")));
                    }
                    if let Some(truth) = self.oracle.turns.get_mut(&t.0) {
                        truth.final_message = Some(text);
                    }
                    self.log(format!("a{a} turn {} completed", t.0));
                }
            }
        }
        let due: Vec<_> = self.agents[a].pending_finals.iter().filter(|f| f.0 <= now).cloned().collect();
        self.agents[a].pending_finals.retain(|f| f.0 > now);
        for (_, t, text) in due {
            let m = Some(text);
            let t2 = t.clone();
            self.agents[a].append(now, |session, position| ObserverEvent::TurnCompleted { session, turn: t2, final_message: m, position });
            self.counters.fault("provider.duplicate_final");
            self.log(format!("a{a} duplicate final of {}", t.0));
        }
    }

    /// The process exits (its turn and composer die with it).
    pub fn kill_process(&mut self, a: usize, respawn_after_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        if agent.process.is_none() {
            return;
        }
        agent.process = None;
        agent.running = None;
        agent.pending_finals.clear();
        agent.composer.clear();
        agent.question = false;
        agent.respawn_at_ms = Some(now + respawn_after_ms);
        self.log(format!("a{a} process exited"));
    }

    /// A new Codex process: new incarnation, sometimes the same pid, a fresh session.
    pub fn spawn_process(&mut self, a: usize, reuse_pid: bool) {
        let agent = &mut self.agents[a];
        let old_pid = agent.process.map_or(100 + a as u32, |p| p.pid);
        agent.process = None;
        agent.running = None;
        agent.pending_finals.clear();
        agent.composer.clear();
        agent.respawn_at_ms = None;
        agent.spawned += 1;
        let pid = if reuse_pid { old_pid } else { 200 + (agent.spawned as u32) * 7 + a as u32 };
        agent.process = Some(Proc { pid, ticks: 5 + agent.spawned * 1000 });
        agent.last_completed = None;
        agent.turns_started = 0;
        agent.new_session(TurnState::Idle { last_completed: None });
        if reuse_pid {
            self.counters.fault("process.pid_reuse");
        }
        self.log(format!("a{a} process started pid {pid} (reuse={reuse_pid})"));
    }

    /// The provider's record is lost, truncated, replaced or rewritten, or the event stream
    /// drops: its identity changes and the observer needs `lost_ms` to find it again.
    pub fn break_record(&mut self, a: usize, kind: &'static str, lost_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        let header = agent.true_turn();
        agent.new_session(header);
        agent.lost_until_ms = Some(now + lost_ms);
        agent.lost_reason = kind.to_string();
        self.counters.fault(kind);
        self.log(format!("a{a} record fault {kind}, observer blind for {lost_ms} ms"));
    }

    // ----- the observer (daemon side) -----

    /// The daemon (re)starts: the observer finds the record and folds what is visible.
    pub fn reset_observer(&mut self, a: usize) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        agent.observer = Observer {
            attached: None,
            read: 0,
            position: agent.session.base,
            turn: agent.session.header.clone(),
            lost_reported: true,
            reported: agent.process,
            label: None,
        };
        let blind = agent.lost_until_ms.is_some_and(|t| now < t);
        if agent.process.is_some() && !blind {
            agent.observer.attached = Some(agent.session.id.clone());
            agent.observer.lost_reported = false;
            let mut sink = Vec::new();
            self.read_records(a, now, &mut sink); // folded, not sent: the engine starts blind
        }
    }

    fn transform(&mut self, a: usize, event: ObserverEvent) -> ObserverEvent {
        let agent = &mut self.agents[a];
        match self.mutant {
            Mutant::SkipHashCheck => match event {
                ObserverEvent::UserMessage { session, turn, position, prompt_hash: recorded } => {
                    let hash = agent.last_typed.as_deref().map(prompt_hash).unwrap_or(recorded);
                    ObserverEvent::UserMessage { session, turn, prompt_hash: hash, position }
                }
                other => other,
            },
            Mutant::StaleTurnLabel => match event {
                ObserverEvent::TurnStarted { session, turn, position } => {
                    let label = agent.observer.label.get_or_insert(turn).clone();
                    ObserverEvent::TurnStarted { session, turn: label, position }
                }
                ObserverEvent::UserMessage { session, turn, prompt_hash, position } => {
                    let turn = agent.observer.label.clone().or(turn);
                    ObserverEvent::UserMessage { session, turn, prompt_hash, position }
                }
                ObserverEvent::TurnCompleted { session, turn, final_message, position } => {
                    let turn = agent.observer.label.take().unwrap_or(turn);
                    ObserverEvent::TurnCompleted { session, turn, final_message, position }
                }
                ObserverEvent::TurnAborted { session, turn, position } => {
                    // The bug: an abort does not reset the tracker.
                    let turn = agent.observer.label.clone().or(turn);
                    ObserverEvent::TurnAborted { session, turn, position }
                }
                other => other,
            },
            _ => event,
        }
    }

    /// CORR-12: the next final the observer reads (present or still to come) will be too
    /// large to read; the observer then loses the session and is blind for `lost_ms`.
    pub fn make_record_unreadable(&mut self, a: usize, lost_ms: u64) {
        let agent = &mut self.agents[a];
        agent.unreadable_record = Some(lost_ms);
        self.counters.fault("observer.record_too_large");
        self.log(format!("a{a} the next final will be too large to read"));
    }

    fn read_records(&mut self, a: usize, now: u64, out: &mut Vec<ObserverEvent>) {
        loop {
            let agent = &self.agents[a];
            let Some(record) = agent.session.records.get(agent.observer.read) else { break };
            if record.visible_at_ms > now {
                break;
            }
            let is_final = matches!(record.event, ObserverEvent::TurnCompleted { .. });
            if let Some(lost_ms) = agent.unreadable_record.filter(|_| is_final) {
                // Skipped, never folded: the turn state stays what it was, the session is lost.
                let agent = &mut self.agents[a];
                agent.unreadable_record = None;
                agent.observer.read += 1;
                agent.observer.attached = None;
                agent.observer.lost_reported = true;
                agent.lost_until_ms = Some(now + lost_ms);
                agent.lost_reason = "record_too_large".to_string();
                out.push(ObserverEvent::SessionLost { reason: "record_too_large".to_string() });
                break;
            }
            let record = record.clone();
            let event = self.transform(a, record.event);
            let obs = &mut self.agents[a].observer;
            obs.read += 1;
            obs.position = record.position;
            obs.turn = wakterm_engine::fold_turn(&obs.turn, &event); // CORR-13: the engine's one fold
            out.push(event);
        }
    }

    /// Tail: detect a lost or replaced record, re-attach, read what became visible.
    pub fn sync_observer(&mut self, a: usize, out: &mut Vec<ObserverEvent>) {
        let now = wakterm_runtime::driver::now_ms();
        if self.agents[a].process.is_none() {
            return;
        }
        let agent = &mut self.agents[a];
        if let Some(until) = agent.lost_until_ms {
            if now < until {
                if !agent.observer.lost_reported {
                    agent.observer.lost_reported = true;
                    agent.observer.attached = None;
                    out.push(ObserverEvent::SessionLost { reason: agent.lost_reason.clone() });
                }
                return;
            }
            agent.lost_until_ms = None;
        }
        if agent.observer.attached.as_ref() != Some(&agent.session.id) {
            if !agent.observer.lost_reported {
                out.push(ObserverEvent::SessionLost { reason: "the record was replaced".to_string() });
            }
            let session = agent.session.id.clone();
            agent.observer.attached = Some(session.clone());
            agent.observer.lost_reported = false;
            agent.observer.read = 0;
            agent.observer.position = agent.session.base;
            agent.observer.turn = agent.session.header.clone();
            agent.observer.label = None;
            out.push(ObserverEvent::Attached { session, position: agent.session.base });
        }
        self.read_records(a, now, out);
    }

    /// Liveness probe: a changed process is reported before anything else (as
    /// `refresh_agent` does). Returns the events and the new facts to register.
    pub fn liveness(&mut self, a: usize, out: &mut Vec<ObserverEvent>) -> Option<AgentFacts> {
        let agent = &self.agents[a];
        if agent.observer.reported == agent.process {
            return None;
        }
        if agent.observer.reported.is_some() {
            let now = wakterm_runtime::driver::now_ms();
            let same_session = agent.observer.attached.as_ref() == Some(&agent.session.id) && agent.process.is_none();
            let mut drained = false;
            if same_session {
                self.read_records(a, now, out);
                let agent = &self.agents[a];
                drained = agent.observer.read == agent.session.records.len();
            }
            out.push(ObserverEvent::ProcessExited { drained });
        }
        let agent = &mut self.agents[a];
        agent.observer.reported = agent.process;
        agent.observer.lost_reported = true; // the new process's record is attached, not "lost"
        if agent.process.is_none() {
            agent.observer.attached = None;
        }
        Some(agent.facts())
    }

    pub fn snapshot(&mut self, a: usize) -> Result<ObserverSnapshot, String> {
        let agent = &self.agents[a];
        let Some(process) = agent.process else { return Err("no process runs behind the agent".to_string()) };
        let attached = agent.observer.attached.clone();
        let (status, turn) = match &attached {
            Some(_) => (ObserverStatus::Attached, agent.observer.turn.clone()),
            None => (ObserverStatus::Unavailable { reason: agent.lost_reason.clone() }, TurnState::Unknown),
        };
        // The runtime's `with_screen`: a visible `Working` indicator beats an idle record. The
        // screen is not always readable (the sim reads it 70% of the time).
        let working = self.agents[a].running.is_some() && thread_rng().gen_bool(0.7);
        let turn = match turn {
            TurnState::Idle { .. } if working => TurnState::Busy { turn: None },
            other => other,
        };
        if matches!(turn, TurnState::Busy { .. }) {
            self.counters.fault("provider.busy_turn");
        }
        let agent = &self.agents[a];
        let composer = if agent.question {
            Composer::Question
        } else if agent.composer.is_empty() {
            Composer::Empty
        } else {
            Composer::Draft
        };
        Ok(ObserverSnapshot {
            incarnation: process.incarnation(),
            process: Some(process.identity()),
            status,
            session: attached,
            position: agent.observer.position,
            turn,
            composer,
        })
    }

    /// REC-2: re-attach at `from` and replay everything after it, or report the loss.
    pub fn resume(&mut self, a: usize, from: &wakterm_engine::Cursor, out: &mut Vec<ObserverEvent>) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &self.agents[a];
        let blind = agent.lost_until_ms.is_some_and(|t| now < t);
        if agent.process.is_none() {
            out.push(ObserverEvent::SessionLost { reason: "no process runs behind the agent".to_string() });
            return;
        }
        if blind || agent.session.id != from.session {
            out.push(ObserverEvent::SessionLost { reason: "the armed session is gone".to_string() });
            return;
        }
        let agent = &mut self.agents[a];
        agent.observer.attached = Some(from.session.clone());
        agent.observer.lost_reported = false;
        agent.observer.read = 0;
        agent.observer.position = agent.session.base;
        agent.observer.turn = agent.session.header.clone();
        agent.observer.label = None;
        out.push(ObserverEvent::Attached { session: from.session.clone(), position: from.position });
        let mut replay = Vec::new();
        self.read_records(a, now, &mut replay);
        out.extend(replay.into_iter().filter(|e| e.position().is_some_and(|p| p > from.position)));
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}
