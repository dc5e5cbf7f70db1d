//! MGD-*: the managed agent (a Codex app-server 0.169 under its holder) as a PORT model.
//!
//! Ground truth (`AppServer`, driven by `World`): one thread for the agent's whole life
//! (thread id == session id, MGD-2); a process reads JSON-RPC lines from its stdin (a line is a
//! request only once its newline arrives; a short write leaves a fragment that spoils the next
//! line) and answers on stdout, which the holder keeps as an append-only byte stream with
//! absolute offsets, of which only the last `ring_bytes` are kept (the holder's output ring,
//! `runtime/src/holder/output_ring.rs`, at a small per-seed size so eviction happens). The
//! stream survives daemon crashes; a respawned process (`agent restart`: `thread/resume` of the
//! SAME thread) continues it, so offsets keep growing and the new process's output starts at
//! its generation start; a restarted holder starts another stream at offset 0. A `turn/start`
//! on an idle thread starts a turn (reply, `turn/started`, the `userMessage` item); on a busy
//! one it is folded into the running turn (reply naming that turn, a `userMessage` item, no
//! `turn/started`), as the real 0.169 does (fixtures/codex-0.169/app-server/README.md,
//! harness/src/fake_app_server.rs). Every line that carries turn evidence is also a truth
//! `Record` (the event a correct fold yields, at the offset one past the line) for the oracle.
//!
//! The port (`ManagedPort`): the daemon's observer of that stream is the runtime's own
//! `app_server_stream::StreamFollower` (the code `ManagedObserver` runs: pages of the holder's
//! output, eviction and over-long lines lost, the resume that re-folds up to the cursor
//! silently, a cursor in an earlier process's output), fed from the sim's ring instead of a
//! holder socket, folding with the production `app_server::Fold::line` (the fold mutants wrap
//! it: `SimFold`). The byte bounds are scaled down with the ring (pages of 1 KiB, lines over
//! 8 KiB lost, at most twice the ring per poll: the production 1 MiB, 8 MiB and 8 MiB = twice
//! its 4 MiB ring, so one poll always reaches the end of what the holder keeps), so a line
//! over the bound fits in a simulated run.
//!
//! Runtime gaps this model found were counted as `note.mgd_*` and are fixed: the oracle fails
//! them (`sim/run.sh --lenient-mgd` tolerates them again, as before the fixes):
//! `loss_unreported_after_fold_loss` (another thread's notification lost the session but the
//! observer never announced `Attached` again, so a later real loss was silent),
//! `exit_drained_without_read` (an exit reported `drained` although the last read failed;
//! `delivery_failed_after_undrained_exit` when a waiting request then ended `delivery_failed`
//! although its turn had started), `thread_not_loaded_at_end` (MGD-2: a fresh observer past an
//! evicted handshake reports the thread loaded once its `thread/resume` re-proof is answered),
//! and `steered_receipt_but_new_turn` (a `steered_running_turn` receipt whose prompt started a
//! turn). A resume cursor in an earlier process's output (once answered inside the current
//! process's output, with no gap) is now checked like any resume.

use wakterm_runtime::holder::{OutputRing, RingSlice};
use crate::mutant::Mutant;
use crate::oracle::TurnTruth;
use crate::world::{Proc, Record, Running, Session, World};
use madsim::rand::{thread_rng, Rng};
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use wakterm_engine::{prompt::prompt_hash, AgentFacts, Cursor, ObserverEvent, ObserverSnapshot, ObserverStatus, SessionId, TurnId, TurnState};
use wakterm_runtime::app_server::Fold;
use wakterm_runtime::app_server_stream::{FollowStats, LineFolder, Page as FollowPage, StreamFollower};

/// The port's page size (production `PAGE_BYTES`, 1 MiB, scaled).
pub const PAGE_BYTES: usize = 1024;
/// The longest line the port accepts (production `app_server::MAX_LINE_BYTES`, 8 MiB, scaled).
pub const MAX_LINE_BYTES: usize = 8 * 1024;

/// The managed agent's thread (== its session, MGD-2): one for its whole life.
pub fn thread_id(agent: usize) -> String {
    format!("0195f0c2-7b1a-7000-8000-{:012x}", 0xa00 + agent)
}

/// A thread someone else started on the same app-server (a raw `session action=input`).
pub const FOREIGN_THREAD: &str = "0195f0c2-7b1a-7000-8000-0000000ff0ff";

// ----- the holder's ring -----

/// The holder's output ring: the runtime's own `OutputRing` (absolute offsets that never reset,
/// the last `capacity` bytes kept), so the simulator evicts exactly as the holder does.
pub struct Ring(OutputRing);

/// One read of the ring.
pub type Page = RingSlice;

impl Ring {
    pub fn new(capacity: usize) -> Ring {
        Ring(OutputRing::new(capacity))
    }

    pub fn start(&self) -> u64 {
        self.0.start()
    }

    pub fn capacity(&self) -> usize {
        self.0.capacity()
    }

    pub fn end(&self) -> u64 {
        self.0.end()
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.0.push(chunk);
    }

    /// Up to `max` bytes from `after` (or the oldest kept byte, if later); an offset beyond the
    /// end is not from this stream (the holder answers an error).
    pub fn read(&self, after: u64, max: usize) -> Result<Page, String> {
        self.0.read(after, max).map_err(|beyond| format!("offset {after} is beyond the output's end {}", beyond.end))
    }
}

// ----- the app-server (ground truth) -----

/// The turn evidence one output line carries, as a correct fold reads it.
#[derive(Clone, Debug)]
pub enum Truth {
    Started(TurnId),
    User(TurnId, String),
    Agent(TurnId, String, Option<String>),
    Completed(TurnId, String),
    Aborted(TurnId),
    /// MGD-7: an error reply to the request with this (string) id, and its code and message.
    Refused(String, String),
    /// CORR-15: the reply to the `turn/start` with this (string) id names the turn it accepted.
    Accepted(String, TurnId),
    /// A line that carries no evidence although it looks like some: an error under an id the
    /// app-server answered already (the reply to another request sent under that id).
    NoRecord,
}

/// CORR-15: a `turn/start` reply's truth: the turn it accepted, for a string id (the fold
/// reads only those as requests of ours).
fn accepted_truth(id: &Value, turn: &TurnId) -> Option<Truth> {
    id.as_str().map(|id| Truth::Accepted(id.to_string(), turn.clone()))
}

impl Truth {
    pub fn event(self, session: SessionId, position: u64) -> ObserverEvent {
        match self {
            Truth::Started(turn) => ObserverEvent::TurnStarted { session, turn, position },
            Truth::User(turn, prompt_hash) => ObserverEvent::UserMessage { session, turn: Some(turn), prompt_hash, position },
            Truth::Agent(turn, text, phase) => ObserverEvent::AgentMessage { session, turn: Some(turn), text, phase, position },
            Truth::Completed(turn, text) => ObserverEvent::TurnCompleted { session, turn, final_message: Some(text), position },
            Truth::Aborted(turn) => ObserverEvent::TurnAborted { session, turn: Some(turn), position },
            Truth::Refused(id, error) => ObserverEvent::RequestRefused { session, id, error, position },
            Truth::Accepted(id, turn) => ObserverEvent::TurnAccepted { session, id, turn, position },
            Truth::NoRecord => unreachable!("a line without evidence makes no record"),
        }
    }
}

/// A stdin line waiting to be read by the app-server: when, the bytes, and which request's
/// write delivered it.
pub struct Pending {
    pub due_ms: u64,
    pub line: Vec<u8>,
    pub origin: Option<String>,
    /// When the line's last byte was written.
    pub written_ms: u64,
}

/// The app-server behind agent `a` and its holder's stream.
pub struct AppServer {
    pub thread: String,
    /// Holder generations: a holder restart starts another stream at offset 0.
    pub holder: u64,
    /// The holder is gone (between its death and `agent restart`): no reads, no writes.
    pub holder_down: bool,
    pub ring: Ring,
    /// Where the current process's output starts in the stream (MGD-4).
    pub generation_start: u64,
    /// The fragment of a line the process has read without its newline (a short write).
    pub stdin: Vec<u8>,
    /// The request whose write began that fragment (None: the observer's, a human's).
    pub stdin_origin: Option<String>,
    /// Whole lines read from stdin, processed in order when due.
    pub queue: VecDeque<Pending>,
    /// The daemon's connection to the holder is broken until then (`app_server.stream_dropped`).
    pub conn_down_until: Option<u64>,
    /// `agent restart` after a holder death comes then (when a daemon runs).
    pub holder_back_at: Option<u64>,
    /// Item and request counters for ids.
    pub items: u64,
    /// `app_server.mark_behind_respawn`: the agent's event-mark commits fail until then.
    pub mark_frozen: Option<MarkFreeze>,
    /// What this process's answer to a `thread/resume` does (MGD-4's re-proof).
    pub resume_quirk: ResumeQuirk,
    /// MGD-4: when the daemon wrote each re-proof since this process (its handshake) last
    /// answered one that proves the thread, with the daemon epoch they were written in.
    pub unproven_reproofs: (u64, Vec<u64>),
    /// `app_server.slow_turn_start`: the notifications of a turn accepted but not yet
    /// announced (its status change, `turn/started`, its user message, the items of input
    /// steered into it meanwhile), due then, for that process and holder.
    pub slow_start: Option<SlowStart>,
    /// `app_server.stalled_past_turn_start_timeout`: nothing written to stdin from the stall on
    /// is read before this (a wedged reader), the faults' end notwithstanding.
    pub stalled_until: Option<u64>,
}

/// A turn the app-server accepted (its reply out) whose `turn/started` comes later.
#[derive(Clone, Debug)]
pub struct SlowStart {
    pub due_ms: u64,
    pub process: Option<crate::world::Proc>,
    pub holder: u64,
    pub lines: Vec<(Vec<u8>, Option<Truth>)>,
}

/// How a process answers a re-proof (`thread/resume` of the thread it has loaded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResumeQuirk {
    /// The thread, its session and status (Codex 0.169).
    Plain,
    /// `app_server.resume_foreign_session`: the thread under another session (MGD-2: a loss),
    /// while faults run.
    ForeignSession,
    /// `app_server.resume_full_history`: a long thread, whose reply with its turns is over the
    /// line bound (a loss) unless the request asks `excludeTurns`.
    FullHistory,
}

/// `app_server.mark_behind_respawn`: the durable event mark held in one process's output while
/// the agent is restarted in the same holder and a prompt is admitted to the new process.
#[derive(Clone, Copy, Debug)]
pub struct MarkFreeze {
    pub until_ms: u64,
    /// The process whose output the mark is held in, and its holder.
    pub process: Option<crate::world::Proc>,
    pub holder: u64,
    /// Marks at or past this position fail: the end of that process's output.
    pub floor: u64,
}

impl AppServer {
    pub fn new(agent: usize, ring_bytes: usize) -> AppServer {
        AppServer {
            thread: thread_id(agent),
            holder: 1,
            holder_down: false,
            ring: Ring::new(ring_bytes),
            generation_start: 0,
            stdin: Vec::new(),
            stdin_origin: None,
            queue: VecDeque::new(),
            conn_down_until: None,
            holder_back_at: None,
            items: 0,
            mark_frozen: None,
            resume_quirk: ResumeQuirk::Plain,
            unproven_reproofs: (0, Vec::new()),
            slow_start: None,
            stalled_until: None,
        }
    }

    /// What the daemon's observer reads: the ring, unless the holder or the connection is gone.
    /// The ring as the observer of a process under holder generation `own_holder` reads it
    /// (`ManagedObserver::client`): another holder's stream is not its own.
    pub fn readable(&self, now: u64, own_holder: Option<u64>) -> Result<&Ring, String> {
        if self.holder_down {
            return Err("cannot reach the agent's holder: connection refused".to_string());
        }
        if own_holder.is_some_and(|h| h != self.holder) {
            return Err("the agent's holder was replaced: its output is another stream".to_string());
        }
        if self.conn_down_until.is_some_and(|t| now < t) {
            return Err("cannot read the app-server's output: the holder connection dropped".to_string());
        }
        Ok(&self.ring)
    }

    pub fn next_item(&mut self) -> u64 {
        self.items += 1;
        self.items
    }
}

pub fn line(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&value).expect("JSON values serialise");
    bytes.push(b'\n');
    bytes
}

/// MGD-6: the approval the turn waits for (`item/commandExecution/requestApproval`), the item
/// named after the request (`srv-N` asks about `call_N`).
fn approval_request(thread: &str, turn: &str, request: &Value) -> Vec<u8> {
    let item = request.as_str().unwrap_or_default().replace("srv-", "call_");
    let params = json!({"threadId": thread, "turnId": turn, "itemId": item, "command": "touch x", "cwd": "/w", "reason": null});
    line(json!({"id": request, "method": "item/commandExecution/requestApproval", "params": params}))
}

pub fn notification(method: &str, params: Value, now: u64) -> Vec<u8> {
    line(json!({"method": method, "params": params, "emittedAtMs": now}))
}

pub fn turn_json(turn: &str, status: &str, items: Value, view: &str) -> Value {
    json!({"id": turn, "items": items, "itemsView": view, "status": status, "error": null, "rootTurnId": turn})
}

pub fn user_item(id: u64, text: &str) -> Value {
    json!({"type": "userMessage", "id": format!("00000000-0000-4000-8000-{id:012x}"), "content": [{"type": "text", "text": text, "text_elements": []}]})
}

pub fn agent_item(id: u64, text: &str, phase: Option<&str>) -> Value {
    let mut item = json!({"type": "agentMessage", "id": format!("msg_mock_{id}"), "text": text});
    if let Some(phase) = phase {
        item["phase"] = json!(phase);
    }
    item
}

/// A `thread/start` or `thread/resume` result: the thread and what it is doing (`idle`, or
/// `active` while a turn runs).
pub fn thread_json(thread: &str, active: bool) -> Value {
    let status = if active { json!({"type": "active", "activeFlags": []}) } else { json!({"type": "idle"}) };
    json!({"thread": {"id": thread, "sessionId": thread, "status": status, "turns": [], "source": "vscode", "originator": "wakterm"}})
}

/// MGD-7: every error reply the app-server writes to a request with a string id is a refusal
/// record (whoever sent the request: the daemon, a raw writer, a forger).
fn refusal_truth(bytes: &[u8]) -> Option<Truth> {
    let value: Value = serde_json::from_slice(bytes).ok()?;
    let (id, error) = (value.get("id")?.as_str()?, value.get("error")?);
    let code = error.get("code").and_then(Value::as_i64)?;
    let message = error.get("message").and_then(Value::as_str)?;
    Some(Truth::Refused(id.to_string(), format!("{code}: {message}")))
}

/// The daemon's bytes for an app-server as they reach its stdin: mutant `bare_newline_lead`
/// sends each line after a bare newline (MGD-6's `#` lost), as the daemon once wrote them.
pub fn as_mutant_writes(mutant: Mutant, bytes: &[u8]) -> Vec<u8> {
    match bytes.strip_prefix(wakterm_engine::prompt::LINE_LEAD) {
        Some(rest) if mutant == Mutant::BareNewlineLead => [b"\n".as_slice(), rest].concat(),
        _ => bytes.to_vec(),
    }
}

/// Whether a stdin line is a `turn/start` request (a prompt).
fn is_turn_start(line: &[u8]) -> bool {
    serde_json::from_slice::<Value>(line).is_ok_and(|value| value["method"] == "turn/start")
}

/// A `turn/start` line as a raw writer (not the engine) would type it.
pub fn raw_turn_start(id: &str, thread: &str, text: &str) -> Vec<u8> {
    line(json!({"id": id, "method": "turn/start", "params": {"threadId": thread, "input": [{"type": "text", "text": text}]}}))
}

// ----- the port: the daemon's observer of the stream -----

/// The port's line fold: the production `Fold::line`, plus the planted bugs of the mutants that
/// live in a fold (never in the paging rules, which are the runtime's `StreamFollower`).
pub struct SimFold {
    session: SessionId,
    thread: String,
    mutant: Mutant,
    /// Mutant `foreign_thread_accepted`: a fold per other thread, its events taken as ours.
    foreign: BTreeMap<String, Fold>,
}

impl LineFolder for SimFold {
    fn fold_line(&mut self, fold: &mut Fold, line: &[u8], position: u64) -> Vec<ObserverEvent> {
        let busy_before = matches!(fold.turn, TurnState::Busy { .. });
        let mut folded = fold.line(line, position); // the production fold (MGD-3)
        self.mutate(fold, line, position, busy_before, &mut folded);
        folded
    }

    fn reset(&mut self) {
        self.foreign.clear();
    }
}

impl SimFold {
    /// The planted bugs (never the production fold's).
    fn mutate(&mut self, fold: &mut Fold, line: &[u8], position: u64, busy_before: bool, folded: &mut Vec<ObserverEvent>) {
        match self.mutant {
            Mutant::AnsweredIdRefusalReported => {
                // The bug: every error reply to a string id is reported as a refusal, one under
                // an id the app-server answered already too (MGD-7 before `answered_ids`).
                let Some(refusal) = refusal_truth(line) else { return };
                if !folded.iter().any(|e| matches!(e, ObserverEvent::RequestRefused { .. })) {
                    folded.push(refusal.event(self.session.clone(), position));
                }
            }
            Mutant::SteerReportedAsNewTurn => {
                // The bug: every `turn/start` result naming a turn is taken for its start, so a
                // prompt folded into the running turn looks like the start of a turn.
                let Ok(value) = serde_json::from_slice::<Value>(line) else { return };
                let named = value.pointer("/result/turn/id").and_then(Value::as_str);
                if let (Some(turn), true) = (named, busy_before) {
                    let event = ObserverEvent::TurnStarted { session: self.session.clone(), turn: TurnId(turn.to_string()), position };
                    fold.turn = wakterm_engine::fold_turn(&fold.turn, &event);
                    folded.push(event);
                }
            }
            Mutant::TurnAcceptedDropped => {
                // The bug: replies are not the stream's news, so the turn a `turn/start` reply
                // names is never reported (CORR-15 before `ObserverEvent::TurnAccepted`).
                folded.retain(|e| !matches!(e, ObserverEvent::TurnAccepted { .. }));
            }
            Mutant::ForeignThreadAccepted => {
                // The bug: a notification of another thread is folded (by that thread's own
                // fold) and reported as the agent's, instead of losing the session.
                let Ok(value) = serde_json::from_slice::<Value>(line) else { return };
                let Some(other) = value.pointer("/params/threadId").and_then(Value::as_str).filter(|t| *t != self.thread) else { return };
                // (Production answers such a line with the loss and a re-attach after it.)
                if !folded.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. })) {
                    return;
                }
                let other_fold = self.foreign.entry(other.to_string()).or_insert_with(|| Fold::new(other));
                let events = other_fold.line(line, position);
                let session = self.session.clone();
                *folded = events.into_iter().map(|e| relabel(e, &session)).collect();
                for event in folded.iter() {
                    fold.turn = wakterm_engine::fold_turn(&fold.turn, event);
                }
            }
            _ => {}
        }
    }
}

/// The daemon's observer of the stream: the runtime's `StreamFollower` (the same one
/// `ManagedObserver` runs) over the sim's ring instead of a holder socket. Daemon state: a
/// restarted daemon builds a new one.
pub struct ManagedPort {
    thread: String,
    pub process: Proc,
    /// The holder generation the process runs under (`ManagedObserver::holder`; None: not
    /// checked, the mutant `any_holder_read`).
    pub holder: Option<u64>,
    follower: StreamFollower<SimFold>,
    /// The last read's error (`ManagedObserver`'s health).
    pub health: Result<(), String>,
    mutant: Mutant,
    /// Faults this port saw since last asked (counted by the world).
    pub notes: Vec<&'static str>,
    /// The `thread/resume` line the re-proof writes through the holder (the world writes it).
    pub reprove: Option<Vec<u8>>,
    /// MGD-6: the declines of server requests to write through the holder (the world writes
    /// them, as `ManagedObserver::decline_requests` does).
    pub declines: Vec<Vec<u8>>,
    seen: FollowStats,
}

impl ManagedPort {
    pub fn new(thread: &str, process: Proc, stream: (u64, u64), mutant: Mutant) -> ManagedPort {
        let (start, holder) = stream;
        let session = SessionId(thread.to_string());
        let fold = SimFold { session: session.clone(), thread: thread.to_string(), mutant, foreign: BTreeMap::new() };
        ManagedPort {
            thread: thread.to_string(),
            process,
            holder: Some(holder).filter(|_| mutant != Mutant::AnyHolderRead),
            follower: StreamFollower::new(thread, session, start, fold, MAX_LINE_BYTES),
            health: Err("not read yet".to_string()),
            mutant,
            notes: Vec::new(),
            reprove: None,
            declines: Vec::new(),
            seen: FollowStats::default(),
        }
    }

    /// Where this process's output starts.
    pub fn start(&self) -> u64 {
        self.follower.start()
    }

    /// One past the last whole line read.
    pub fn position(&self) -> u64 {
        self.follower.position()
    }

    /// `ManagedObserver::poll`: reads what the holder appended since the last call.
    pub fn poll(&mut self, ring: Result<&Ring, String>) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        self.health = self.read(ring, &mut events).map(|()| {
            self.reprove_once();
            self.decline_requests();
        });
        self.count();
        events
    }

    /// `ManagedObserver::decline_requests` (MGD-6): every pending server request, once.
    fn decline_requests(&mut self) {
        for (id, method) in self.follower.unanswered_requests() {
            if self.mutant != Mutant::ServerRequestUnanswered {
                self.declines.push(wakterm_runtime::app_server::decline(&id, &method));
            }
            self.follower.answered(&id);
        }
    }

    /// `ManagedObserver::reprove_once` (MGD-4): the follower says when; the world writes the
    /// line through the holder (it was just read, so the write goes through).
    fn reprove_once(&mut self) {
        if self.follower.wants_reproof(wakterm_runtime::driver::now_ms()) {
            self.notes.push("app_server.thread_reproved");
            let id = format!("wakterm-reprove-{}-{}", self.process.pid, self.follower.next_offset());
            self.reprove = Some(wakterm_runtime::app_server::on_its_own_line(&wakterm_runtime::app_server::thread_resume(&id, &self.thread, "/w")));
            if self.mutant == Mutant::ReproofWriteReportedFailed {
                self.follower.reproof_failed(); // the write went through, reported failed
            }
        }
    }

    fn count(&mut self) {
        let stats = self.follower.stats;
        for _ in self.seen.evicted..stats.evicted {
            self.notes.push("app_server.notifications_evicted");
        }
        for _ in self.seen.long_lines..stats.long_lines {
            self.notes.push("app_server.line_too_long");
        }
        self.seen = stats;
    }

    /// `ManagedObserver::resume` (REC-2, MGD-4).
    pub fn resume(&mut self, from: &Cursor, ring: Result<&Ring, String>) -> Vec<ObserverEvent> {
        let mut events = Vec::new();
        if !self.follower.resume(from, &mut events) {
            return events;
        }
        events.extend(self.poll(ring));
        events
    }

    /// `ManagedObserver::snapshot`.
    pub fn snapshot(&self) -> ObserverSnapshot {
        let error = self.health.as_ref().err().map(String::as_str);
        self.follower.snapshot(self.process.incarnation(), self.process.identity(), error)
    }

    /// `ManagedObserver::read`. Production's `MAX_BYTES_PER_POLL` is twice its ring (see the
    /// module's note).
    fn read(&mut self, ring: Result<&Ring, String>, events: &mut Vec<ObserverEvent>) -> Result<(), String> {
        let ring = ring?;
        let mut budget = 2 * ring.capacity();
        loop {
            let page = ring.read(self.follower.next_offset(), PAGE_BYTES).map_err(|e| format!("cannot read the app-server's output: {e}"))?;
            let from = events.len();
            self.follower.page(FollowPage { data: &page.data, start: page.start, end: page.end, truncated: page.truncated }, events)?;
            if self.mutant == Mutant::EvictionLossUnbounded {
                unbound_eviction_losses(&mut events[from..]); // the bug
            }
            budget = budget.saturating_sub(page.data.len());
            if page.data.is_empty() || budget == 0 {
                return Ok(());
            }
        }
    }
}

/// Mutant `eviction_loss_unbounded`: an eviction's loss, bounded by its re-attach, reported
/// unbounded, as the follower did before (any loss after the durable mark: `observer.gap`
/// after a restart, and the records read afresh).
fn unbound_eviction_losses(events: &mut [ObserverEvent]) {
    for event in events {
        if let ObserverEvent::SessionLost { reason, session, before: before @ Some(_) } = event {
            if reason.starts_with("app-server notifications were evicted") {
                (*session, *before) = (None, None);
            }
        }
    }
}

/// The event as if it were about `session`.
fn relabel(event: ObserverEvent, session: &SessionId) -> ObserverEvent {
    let s = session.clone();
    match event {
        ObserverEvent::TurnStarted { turn, position, .. } => ObserverEvent::TurnStarted { session: s, turn, position },
        ObserverEvent::UserMessage { turn, prompt_hash, position, .. } => ObserverEvent::UserMessage { session: s, turn, prompt_hash, position },
        ObserverEvent::AgentMessage { turn, text, phase, position, .. } => ObserverEvent::AgentMessage { session: s, turn, text, phase, position },
        ObserverEvent::TurnCompleted { turn, final_message, position, .. } => ObserverEvent::TurnCompleted { session: s, turn, final_message, position },
        ObserverEvent::TurnAborted { turn, position, .. } => ObserverEvent::TurnAborted { session: s, turn, position },
        other => other,
    }
}

// ----- the world: the app-server's behaviour and the port's place in the daemon -----

impl World {
    /// Agent `a` is a managed app-server agent (MGD-1).
    pub fn is_managed(&self, a: usize) -> bool {
        self.agents[a].app.is_some()
    }

    pub(crate) fn app(&mut self, a: usize) -> &mut AppServer {
        self.agents[a].app.as_mut().expect("a managed agent")
    }

    /// ADM-5: whether agent `a`'s app-server holds a request's `turn/start` line that it has
    /// not read yet (`crash.finished_past_unread_line`).
    pub(crate) fn unread_turn_start(&self, a: usize) -> bool {
        let Some(app) = self.agents[a].app.as_ref() else { return false };
        app.queue.iter().any(|p| p.origin.is_some() && is_turn_start(&p.line))
    }

    /// Output lines of the app-server land in the holder's stream, in order; a line with turn
    /// evidence is also a truth record at its end. The holder's `info_changed` wakes the
    /// monitor.
    fn app_emit(&mut self, a: usize, lines: Vec<(Vec<u8>, Option<Truth>)>) {
        if lines.is_empty() || self.agents[a].process.is_none() {
            return;
        }
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        let app = agent.app.as_mut().expect("a managed agent");
        for (bytes, truth) in lines {
            let truth = truth.or_else(|| refusal_truth(&bytes));
            app.ring.push(&bytes);
            let end = app.ring.end();
            agent.session.next_position = end;
            if let Some(truth) = truth.filter(|t| !matches!(t, Truth::NoRecord)) {
                let event = truth.event(agent.session.id.clone(), end);
                agent.session.records.push(Record { position: end, visible_at_ms: now, event });
            }
        }
        self.wake_observer(now);
    }

    /// Bytes that reached the app-server's stdin (`origin`: the request whose write they are).
    /// Only a newline completes a request. A fragment left by a short write ends at the next
    /// daemon write's `LINE_LEAD` (MGD-6: every line the daemon writes starts with `#` and a
    /// newline) as a line of its own that is not JSON, ignored, even when the short write lacked
    /// only its last newline (with a bare newline as the lead, that request was served late:
    /// exploration seed 16413642). A line is the request of the write that BEGAN it, so the
    /// oracle would credit a late-served prompt to its own request, never to the write that
    /// ended it.
    pub fn app_stdin(&mut self, a: usize, bytes: &[u8], origin: Option<&str>) {
        if self.agents[a].process.is_none() {
            return; // nobody reads the pane
        }
        let now = wakterm_runtime::driver::now_ms();
        let lag = self.agents[a].lag_ms;
        let app = self.app(a);
        let mut line_origin = if app.stdin.is_empty() { origin.map(str::to_string) } else { app.stdin_origin.take() };
        app.stdin.extend_from_slice(bytes);
        let mut unread_prompt = None;
        while let Some(newline) = app.stdin.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = app.stdin.drain(..=newline).collect();
            // The app-server reads its stdin in order, a little later (much later when slow).
            let floor = app.queue.back().map_or(0, |p| p.due_ms).max(app.stalled_until.unwrap_or(0));
            let due = (now + thread_rng().gen_range(0..=lag.max(1))).max(floor);
            let pending = Pending { due_ms: due, line, origin: line_origin.take(), written_ms: now };
            if pending.origin.is_some() && is_turn_start(&pending.line) {
                // ADM-5: the turn/start lines of other requests of ours this app-server has not
                // read yet (a human's own lines are no write the engine knows of).
                let earlier = app.queue.iter().filter(|p| p.origin.is_some() && p.origin != pending.origin && p.written_ms <= now && is_turn_start(&p.line)).map(|p| (p.origin.clone(), now - p.written_ms)).next();
                unread_prompt = unread_prompt.or(earlier.map(|e| (pending.origin.clone(), e)));
            }
            app.queue.push_back(pending);
            line_origin = origin.map(str::to_string); // the lines after the first are this write's
        }
        app.stdin_origin = if app.stdin.is_empty() { None } else { line_origin };
        if let Some((origin, (earlier, age_ms))) = unread_prompt {
            self.oracle.on_prompt_over_unread(a, origin.as_deref(), earlier.as_deref(), age_ms, wakterm_engine::limits::TURN_START_TIMEOUT_MS);
        }
    }

    /// Time passes for the managed agent: stdin lines are read, turns end, the holder comes
    /// back, the process is restarted (`agent restart` is a daemon operation: only while one
    /// runs, or once faults stop).
    pub fn app_tick(&mut self, a: usize, now: u64) {
        let daemon = self.inbox.is_some() || !self.faults_on;
        if self.app(a).holder_back_at.is_some_and(|t| now >= t || !self.faults_on) && daemon {
            self.app_holder_back(a);
        }
        if let Some(at) = self.agents[a].respawn_at_ms {
            if (now >= at || !self.faults_on) && daemon && !self.app(a).holder_down {
                self.spawn_process(a, false);
            }
        }
        let healed = !self.faults_on;
        if self.app(a).slow_start.as_ref().is_some_and(|slow| slow.due_ms <= now || healed) {
            let slow = self.app(a).slow_start.take().expect("due");
            // Only into the stream of the process and holder that accepted the turn.
            if slow.process == self.agents[a].process && slow.holder == self.app(a).holder {
                self.app_emit(a, slow.lines);
            }
        }
        while self.app(a).queue.front().is_some_and(|p| p.due_ms <= now) {
            let pending = self.app(a).queue.pop_front().expect("due");
            self.app_read_line(a, pending);
        }
        if let Some(running) = self.agents[a].running.clone() {
            if now >= running.due_ms && running.awaiting.is_none() {
                self.app_end_turn(a, running, now);
            }
        }
    }

    /// One whole stdin line, read by the app-server.
    fn app_read_line(&mut self, a: usize, pending: Pending) {
        let now = wakterm_runtime::driver::now_ms();
        let body = &pending.line[..pending.line.len() - 1];
        let Ok(value) = serde_json::from_slice::<Value>(body) else {
            // The real 0.169 answers nothing to a line that is not a JSON object (an empty one,
            // a fragment a short write left, spoiling the line after it).
            if !body.is_empty() {
                self.log(format!("a{a} app-server: a line that is not JSON ({} bytes, origin {:?}): ignored", body.len(), pending.origin));
            }
            return;
        };
        let id = value.get("id").cloned().unwrap_or(Value::Null);
        if value.get("method").is_none() {
            // A response (the client's answer to a server request): the turn waiting for it goes
            // on; any other is ignored, as the real one does.
            return self.app_answered(a, &id, now);
        }
        let method = value.get("method").and_then(Value::as_str).unwrap_or_default().to_string();
        let params = value.get("params").cloned().unwrap_or(Value::Null);
        let thread = self.app(a).thread.clone();
        match method.as_str() {
            "turn/start" => {
                let text: String = params.pointer("/input").and_then(Value::as_array).into_iter().flatten().filter_map(|p| p.get("text")?.as_str()).collect();
                match params.get("threadId").and_then(Value::as_str) {
                    Some(t) if t == thread => self.app_turn_start(a, id, &text, pending.origin.as_deref()),
                    Some(FOREIGN_THREAD) => self.app_foreign_turn(a, id, &text, now),
                    other => {
                        let error = line(json!({"id": id, "error": {"code": -32600, "message": format!("thread not found: {other:?}")}}));
                        self.app_emit(a, vec![(error, None)]);
                    }
                }
            }
            "thread/resume" if params.get("threadId").and_then(Value::as_str) == Some(thread.as_str()) => {
                // Codex 0.169 answers a resume of a thread it has loaded with the thread and its
                // status (the observer's re-proof, MGD-4), then sends again every server request
                // still pending, under its original id (openai/codex#12560, merged 2026-02): one
                // the holder's ring evicted before the observer read it is answered after all.
                let active = self.agents[a].running.is_some();
                let mut result = thread_json(&thread, active);
                let exclude_turns = params.get("excludeTurns").and_then(Value::as_bool) == Some(true);
                let quirk = self.app(a).resume_quirk;
                let proves = match quirk {
                    ResumeQuirk::ForeignSession if self.faults_on => {
                        result["thread"]["sessionId"] = json!("foreign-session");
                        self.counters.fault("app_server.resume_foreign_session");
                        false
                    }
                    ResumeQuirk::FullHistory => {
                        // A thread too long to send whole: fired whether or not the request
                        // asked `excludeTurns` (the daemon's does, so its reply proves).
                        self.counters.fault("app_server.resume_full_history");
                        if !exclude_turns {
                            let text = "h".repeat(MAX_LINE_BYTES);
                            result["thread"]["turns"] = json!([{"id": "old", "items": [agent_item(0, &text, None)]}]);
                        }
                        exclude_turns
                    }
                    _ => true,
                };
                if proves {
                    self.app(a).unproven_reproofs.1.clear();
                }
                let mut lines = vec![(line(json!({"id": id, "result": result})), None)];
                if let Some(running) = self.agents[a].running.as_ref() {
                    if let Some(request) = &running.awaiting {
                        lines.push((approval_request(&thread, &running.turn.0, request), None));
                        self.counters.fault("note.app_server_request_replayed");
                    }
                }
                self.app_emit(a, lines);
            }
            "thread/start" => {
                let reply = line(json!({"id": id, "result": thread_json(FOREIGN_THREAD, false)}));
                let started = notification("thread/started", json!({"thread": {"id": FOREIGN_THREAD, "sessionId": FOREIGN_THREAD}}), now);
                self.app_emit(a, vec![(reply, None), (started, None)]);
            }
            _ => {
                let error = line(json!({"id": id, "error": {"code": -32601, "message": format!("method not found: {method}")}}));
                self.app_emit(a, vec![(error, None)]);
            }
        }
    }

    /// MGD-6: the answer to the server request the running turn waits for (accepted, declined or
    /// an error: the real one goes on either way): `serverRequest/resolved`, then the turn runs on.
    fn app_answered(&mut self, a: usize, id: &Value, now: u64) {
        let thread = self.app(a).thread.clone();
        let Some(running) = self.agents[a].running.as_mut().filter(|r| r.awaiting.as_ref() == Some(id)) else {
            let waiting = self.agents[a].running.as_ref().map(|r| (r.turn.0.clone(), r.awaiting.clone()));
            self.log(format!("a{a} app-server: an answer to {id} nobody waits for (running {waiting:?}): ignored"));
            return;
        };
        running.awaiting = None;
        running.due_ms = running.due_ms.max(now + 50);
        let resolved = notification("serverRequest/resolved", json!({"threadId": thread, "requestId": id}), now);
        self.log(format!("a{a} app-server: server request {id} answered; the turn goes on"));
        self.app_emit(a, vec![(resolved, None)]);
    }

    /// MGD-3: `turn/start` on the agent's thread: a new turn when idle, else the prompt joins
    /// the running turn (`app_server.busy_steer`).
    fn app_turn_start(&mut self, a: usize, id: Value, text: &str, origin: Option<&str>) {
        let now = wakterm_runtime::driver::now_ms();
        if self.fault_roll(0.03) {
            // MGD-7: refused before the input reaches the thread (Codex 0.169 answers every
            // failure of the request before it submits, e.g. a closed submission channel):
            // an error under the line's id and nothing else; no turn, no user message.
            self.counters.fault("app_server.turn_start_refused");
            self.log(format!("a{a} app-server: turn/start {id} by {origin:?} refused"));
            if let Some(rid) = origin.filter(|rid| self.oracle.is_prompt_of(rid, text)) {
                self.oracle.refused_lines.insert(rid.to_string());
            }
            let message = "failed to start turn: internal error; agent loop died unexpectedly";
            self.app_emit(a, vec![(line(json!({"id": id, "error": {"code": -32603, "message": message}})), None)]);
            return;
        }
        let hash = prompt_hash(text);
        let opener = origin.filter(|rid| self.oracle.is_prompt_of(rid, text)).map(str::to_string);
        if let Some(rid) = &opener {
            // The thread holds it from here (its user item follows, unless the app-server
            // exits first): the truth ADM-13's check takes, as before the PTY side's.
            self.oracle.own_prompts_recorded.insert(rid.clone());
        }
        let thread = self.app(a).thread.clone();
        self.oracle.on_prompt_taken(origin);
        let item = self.app(a).next_item();
        let user = user_item(item, text);
        if let Some(running) = self.agents[a].running.clone() {
            let t = running.turn.0.clone();
            let mut lines = vec![(line(json!({"id": id, "result": {"turn": turn_json(&t, "inProgress", json!([]), "notLoaded")}})), accepted_truth(&id, &running.turn))];
            let items = [
                (notification("item/started", json!({"item": user, "threadId": thread, "turnId": t}), now), None),
                (notification("item/completed", json!({"item": user, "threadId": thread, "turnId": t}), now), Some(Truth::User(running.turn.clone(), hash.clone()))),
            ];
            self.oracle.on_steer_recorded(&running.turn, hash);
            // A turn accepted and not started yet (`app_server.slow_turn_start`): the input's
            // items come after its start, as the real one sends them after the task starts.
            match self.app(a).slow_start.as_mut() {
                Some(slow) => slow.lines.extend(items),
                None => lines.extend(items),
            }
            self.app_emit(a, lines);
            if let Some(rid) = &opener {
                self.oracle.steered.insert(rid.clone());
                self.oracle.on_prompt_reached_thread(rid);
                self.oracle.on_steered(a, rid, &running.turn);
            }
            self.counters.fault("app_server.busy_steer");
            self.log(format!("a{a} app-server: turn/start by {origin:?} folded into running turn {t} (steer)"));
            return;
        }
        let agent = &mut self.agents[a];
        agent.turns_started += 1;
        let turn = TurnId(format!("a{a}-p{}-t{}", agent.spawned, agent.turns_started));
        if opener.is_some() && self.fault_roll(0.02) {
            return self.app_exit_after_reply(a, id, turn, opener);
        }
        if opener.is_some() && self.fault_roll(0.02) {
            return self.app_exit_before_reply(a, turn, opener);
        }
        let abort = self.faults_on && thread_rng().gen_bool(self.plan.abort.max(0.02));
        let late = self.faults_on && thread_rng().gen_bool(self.plan.late_final.max(0.02));
        let fast = !late && self.faults_on && thread_rng().gen_bool(self.plan.fast_turn);
        // ADM-5: the reply names the turn; `turn/started` follows 15-20 ms later on the real
        // 0.169, and seconds later on a loaded machine (`app_server.slow_turn_start`): a prompt
        // written between the two goes into the turn starting (RF-7). No approval request
        // then (a re-proof in the window would replay it before the start).
        let slow_start = (!fast && opener.is_some() && self.faults_on && thread_rng().gen_bool(0.1)).then(|| thread_rng().gen_range(1_000..15_000));
        let duration = slow_start.unwrap_or(0) + if late { thread_rng().gen_range(8_000..30_000) } else { thread_rng().gen_range(100..3_000) };
        if late {
            self.counters.fault("provider.late_final");
        }
        // MGD-6: the turn asks the client first (an approval) and waits for any answer.
        let awaiting = (!fast && slow_start.is_none() && self.fault_roll(self.plan.server_request)).then(|| json!(format!("srv-{item}")));
        let running = Running { turn: turn.clone(), due_ms: now + duration, abort, awaiting: awaiting.clone() };
        self.agents[a].running = Some(running.clone());
        self.agents[a].idle_since_ms = None;
        let t = turn.0.clone();
        let mut lines = vec![(line(json!({"id": id, "result": {"turn": turn_json(&t, "inProgress", json!([]), "notLoaded")}})), accepted_truth(&id, &turn))];
        if opener.is_some() && id.is_string() && self.fault_roll(0.05) {
            // MGD-7: a holder-socket client read the id from the result and sent a request
            // under it; the app-server answered that one (no such thread) before it notified
            // the turn. It refuses the other request, not this one.
            self.counters.fault("caller.replayed_turn_start_id");
            let error = json!({"id": id, "error": {"code": -32600, "message": "thread not found: bogus"}});
            lines.push((line(error), Some(Truth::NoRecord)));
        }
        let mut started = vec![
            (notification("thread/status/changed", json!({"threadId": thread, "status": {"type": "active", "activeFlags": []}}), now), None),
            (notification("turn/started", json!({"threadId": thread, "turn": turn_json(&t, "inProgress", json!([]), "notLoaded")}), now), Some(Truth::Started(turn.clone()))),
            (notification("item/started", json!({"item": user, "threadId": thread, "turnId": t}), now), None),
            (notification("item/completed", json!({"item": user, "threadId": thread, "turnId": t}), now), Some(Truth::User(turn.clone(), hash.clone()))),
        ];
        if let Some(rid) = &opener {
            self.oracle.on_prompt_reached_thread(rid);
        }
        if let Some(request) = awaiting {
            started.push((approval_request(&thread, &t, &request), None));
            self.counters.fault("app_server.server_request");
        }
        match slow_start {
            Some(delay) => {
                self.counters.fault("app_server.slow_turn_start");
                let (process, holder) = (self.agents[a].process, self.app(a).holder);
                self.app(a).slow_start = Some(SlowStart { due_ms: now + delay, process, holder, lines: started });
            }
            None => lines.extend(started),
        }
        let file = self.agents[a].session.file;
        self.oracle.turns.insert(turn.0.clone(), TurnTruth { agent: a, opened_by: opener.clone(), final_message: None, aborted: false, file, final_file: None, messages: vec![hash] });
        self.app_emit(a, lines);
        if origin.is_none() {
            self.counters.fault("provider.human_turn");
        }
        self.log(format!("a{a} app-server: turn {t} started by {opener:?} (origin {origin:?}) text={text:?}"));
        if fast {
            self.counters.fault("provider.fast_turn");
            self.app_end_turn(a, running, now);
        }
    }

    /// The running turn ends: commentary and streaming noise (sometimes a burst big enough to
    /// evict unread notifications from a small ring, sometimes a final over the line bound),
    /// then `turn/completed` (`completed` with the final, or `interrupted` / `failed`).
    fn app_end_turn(&mut self, a: usize, running: Running, now: u64) {
        self.agents[a].stop_running(now);
        let thread = self.app(a).thread.clone();
        let turn = running.turn.clone();
        let t = turn.0.clone();
        let mut lines = Vec::new();
        if thread_rng().gen_bool(0.3) {
            let text = format!("working on {t}");
            let item = agent_item(self.app(a).next_item(), &text, Some("commentary"));
            lines.push((notification("item/completed", json!({"item": item, "threadId": thread, "turnId": t}), now), Some(Truth::Agent(turn.clone(), text, Some("commentary".to_string())))));
        }
        if self.fault_roll(self.plan.burst) {
            // A long answer streamed in many deltas, all at once.
            let n = thread_rng().gen_range(6..20);
            let item = format!("msg_mock_{}", self.app(a).next_item());
            for _ in 0..n {
                let delta = "x".repeat(thread_rng().gen_range(200..600));
                lines.push((notification("item/agentMessage/delta", json!({"threadId": thread, "turnId": t, "itemId": item, "delta": delta}), now), None));
            }
            self.counters.fault("app_server.delta_burst");
        }
        let status = if running.abort {
            let failed = thread_rng().gen_bool(0.4);
            let status = if failed { "failed" } else { "interrupted" };
            if failed {
                lines.push((notification("thread/status/changed", json!({"threadId": thread, "status": {"type": "systemError"}}), now), None));
                let error = json!({"message": "stream disconnected", "codexErrorInfo": "internalServerError"});
                lines.push((notification("error", json!({"error": error, "willRetry": false, "threadId": thread, "turnId": t}), now), None));
            } else {
                lines.push((notification("thread/status/changed", json!({"threadId": thread, "status": {"type": "idle"}}), now), None));
            }
            let done = turn_json(&t, status, json!([]), "notLoaded");
            lines.push((notification("turn/completed", json!({"threadId": thread, "turn": done}), now), Some(Truth::Aborted(turn.clone()))));
            self.counters.fault("provider.aborted_turn");
            if let Some(truth) = self.oracle.turns.get_mut(&t) {
                truth.aborted = true;
            }
            status
        } else {
            let mut text = format!("final of {t}");
            if self.fault_roll(self.plan.huge_line) {
                // A final answer longer than the line bound (scaled: see MAX_LINE_BYTES).
                text.push_str(&" lorem".repeat(thread_rng().gen_range(1_500..2_200)));
                self.counters.fault("app_server.huge_final");
            }
            let phase = thread_rng().gen_bool(0.5).then(|| "final_answer".to_string());
            let item = agent_item(self.app(a).next_item(), &text, phase.as_deref());
            lines.push((notification("item/started", json!({"item": agent_item(0, "", None), "threadId": thread, "turnId": t}), now), None));
            lines.push((notification("item/agentMessage/delta", json!({"threadId": thread, "turnId": t, "delta": "final"}), now), None));
            lines.push((notification("item/completed", json!({"item": item, "threadId": thread, "turnId": t}), now), Some(Truth::Agent(turn.clone(), text.clone(), phase))));
            lines.push((notification("thread/tokenUsage/updated", json!({"threadId": thread, "turnId": t, "tokenUsage": {"total": {"totalTokens": 44}}}), now), None));
            lines.push((notification("thread/status/changed", json!({"threadId": thread, "status": {"type": "idle"}}), now), None));
            let done = turn_json(&t, "completed", json!([item]), "summary");
            lines.push((notification("turn/completed", json!({"threadId": thread, "turn": done}), now), Some(Truth::Completed(turn.clone(), text.clone()))));
            self.agents[a].last_completed = Some(turn.clone());
            let file = self.agents[a].session.file;
            if let Some(truth) = self.oracle.turns.get_mut(&t) {
                truth.final_message = Some(text);
                truth.final_file = Some(file);
            }
            "completed"
        };
        self.app_emit(a, lines);
        self.log(format!("a{a} app-server: turn {t} {status}"));
    }

    /// Someone else's raw input started another thread on this app-server and a turn in it:
    /// notifications about another thread (CORR-3: the agent's observer loses its session).
    pub fn app_foreign_thread(&mut self, a: usize) {
        if self.agents[a].process.is_none() {
            return;
        }
        self.counters.fault("app_server.foreign_thread");
        self.log(format!("a{a} raw input starts thread {FOREIGN_THREAD} and a turn in it"));
        let start = line(json!({"id": "mcp-input-thread", "method": "thread/start", "params": {"cwd": "/w"}}));
        let turn = raw_turn_start("mcp-input-turn", FOREIGN_THREAD, "what is in this repo?");
        self.pane_accept(a, "foreign", start.len() + turn.len(), true);
        self.app_stdin(a, &start, None);
        self.app_stdin(a, &turn, None);
    }

    /// A turn in the foreign thread, start to end at once.
    fn app_foreign_turn(&mut self, a: usize, id: Value, text: &str, now: u64) {
        let item = self.app(a).next_item();
        let t = format!("foreign-{item}");
        let f = FOREIGN_THREAD;
        let done = turn_json(&t, "completed", json!([agent_item(item, "it is a repo", None)]), "summary");
        let lines = vec![
            (line(json!({"id": id, "result": {"turn": turn_json(&t, "inProgress", json!([]), "notLoaded")}})), accepted_truth(&id, &TurnId(t.clone()))),
            (notification("turn/started", json!({"threadId": f, "turn": turn_json(&t, "inProgress", json!([]), "notLoaded")}), now), None),
            (notification("item/completed", json!({"item": user_item(item, text), "threadId": f, "turnId": t}), now), None),
            (notification("item/completed", json!({"item": agent_item(item, "it is a repo", None), "threadId": f, "turnId": t}), now), None),
            (notification("turn/completed", json!({"threadId": f, "turn": done}), now), None),
        ];
        self.app_emit(a, lines);
    }

    /// The process's own start in its holder: the daemon's handshake (MGD-2: `initialize`,
    /// `initialized`, then `thread/start` for a new agent or `thread/resume` of its thread),
    /// answered on stdout. Until the thread reply the observer reports nothing usable.
    pub fn app_handshake(&mut self, a: usize, resume: bool) {
        let now = wakterm_runtime::driver::now_ms();
        let quirk = match (self.fault_roll(0.03), self.fault_roll(0.03)) {
            (true, _) => ResumeQuirk::ForeignSession,
            (false, true) => ResumeQuirk::FullHistory,
            (false, false) => ResumeQuirk::Plain,
        };
        self.app(a).resume_quirk = quirk;
        self.app(a).unproven_reproofs.1.clear(); // a new process (its pid may be reused)
        let thread = self.app(a).thread.clone();
        let n = self.app(a).next_item();
        let mut lines = vec![(line(json!({"id": format!("wakterm-init-{n}"), "result": {"userAgent": "codex_cli_rs/0.169.0", "platformOs": "linux"}})), None)];
        lines.push((notification("remoteControl/status/changed", json!({"status": "disabled", "serverName": "sim"}), now), None));
        lines.push((line(json!({"id": format!("wakterm-thread-{n}"), "result": thread_json(&thread, false)})), None));
        if resume {
            lines.push((notification("thread/status/changed", json!({"threadId": thread, "status": {"type": "idle"}}), now), None));
        } else {
            lines.push((notification("thread/started", json!({"thread": {"id": thread, "sessionId": thread}}), now), None));
        }
        self.app_emit(a, lines);
    }

    /// A respawned process in the same holder (`agent restart`): the stream goes on, the new
    /// process's output starts at the ring's end, and it resumes the same thread.
    pub(crate) fn app_respawned(&mut self, a: usize) {
        let app = self.app(a);
        app.generation_start = app.ring.end();
        app.stdin.clear();
        app.queue.clear();
        // A turn the earlier process accepted and had not notified yet is never notified.
        // Left pending, the new process's steers put their items behind it and were never
        // sent (CORR-9's check found a steer no observer could read, seed 569).
        app.slow_start = None;
        app.stalled_until = None; // the stall was the earlier process's
        let incarnation = self.agents[a].process.expect("just spawned").incarnation();
        self.agents[a].session.writers.push(incarnation);
        self.app_handshake(a, true);
    }

    /// `app_server.mark_behind_respawn`, the first half. The running turn writes one more
    /// record, and the daemon's holder connection drops just long enough that the killed
    /// process's drain cannot read it. From then on, a commit that would move the agent's
    /// event mark to that record's end or past it fails (a disk error on exactly those
    /// batches). So after `agent restart` runs a new process in the same holder, the durable
    /// mark stays in the earlier process's output. The second half is the crash right after a
    /// request admitted to the new process is durable (`ports.rs`
    /// `crash_with_mark_behind_respawn`). The restarted daemon must report the record the
    /// stream never got as a gap, never skip it (the engine, which resets the mark on a new
    /// incarnation, says `observer.gap` at its start and resumes at the request's armed
    /// cursor, not in the earlier process's output: MGD-4's earlier tail is not reached).
    pub(crate) fn hold_mark_back(&mut self, a: usize) {
        let now = wakterm_runtime::driver::now_ms();
        let Some(running) = self.agents[a].running.clone() else { return };
        if self.app(a).slow_start.is_some() {
            return; // a turn accepted and not started yet emits nothing of its own (a review)
        }
        let thread = self.app(a).thread.clone();
        let t = running.turn.0.clone();
        let text = format!("still working on {t}");
        let item = agent_item(self.app(a).next_item(), &text, Some("commentary"));
        let truth = Truth::Agent(running.turn.clone(), text, Some("commentary".to_string()));
        self.app_emit(a, vec![(notification("item/completed", json!({"item": item, "threadId": thread, "turnId": t}), now), Some(truth))]);
        let process = self.agents[a].process;
        let app = self.app(a);
        let floor = app.ring.end();
        app.mark_frozen = Some(MarkFreeze { until_ms: now + 8_000, process, holder: app.holder, floor });
        app.conn_down_until = Some(now + 250);
        self.log(format!("a{a} the holder connection drops for 250 ms; event-mark commits at or past {floor} fail for 8 s"));
    }

    /// Whether a commit moving agent `a`'s event mark to `position` fails (`hold_mark_back`).
    pub(crate) fn mark_held_back(&self, a: usize, position: u64, now: u64) -> bool {
        self.agents[a].app.as_ref().and_then(|app| app.mark_frozen).is_some_and(|f| now < f.until_ms && position >= f.floor)
    }

    /// The crash half of `hold_mark_back`: agent `a`'s mark is held in a process of the same
    /// holder that is no longer the one running.
    pub(crate) fn mark_held_in_earlier_process(&self, a: usize, now: u64) -> bool {
        let Some(app) = self.agents[a].app.as_ref() else { return false };
        let process = self.agents[a].process;
        app.mark_frozen.is_some_and(|f| now < f.until_ms && f.holder == app.holder && process.is_some() && process != f.process)
    }

    /// CORR-11 fault `app_server.exit_after_reply`: the app-server answers a `turn/start`
    /// (the turn accepted, named) and dies before it notifies the turn, as Codex can: it
    /// answers the request before it sends `turn/started`. The prompt opened that turn (ground
    /// truth), so its request must never end `delivery_failed`.
    fn app_exit_after_reply(&mut self, a: usize, id: Value, turn: TurnId, opener: Option<String>) {
        self.counters.fault("app_server.exit_after_reply");
        let t = turn.0.clone();
        let file = self.agents[a].session.file;
        self.oracle.turns.insert(t.clone(), TurnTruth { agent: a, opened_by: opener.clone(), final_message: None, aborted: false, file, final_file: None, messages: Vec::new() });
        self.app_emit(a, vec![(line(json!({"id": id, "result": {"turn": turn_json(&t, "inProgress", json!([]), "notLoaded")}})), accepted_truth(&id, &turn))]);
        self.log(format!("a{a} app-server: turn {t} accepted for {opener:?}, then the process dies before notifying it"));
        if let Some(rid) = &opener {
            self.oracle.on_prompt_reached_thread(rid);
        }
        self.kill_process(a, thread_rng().gen_range(300..3_000));
    }

    /// CORR-11: the app-server hands the prompt to its thread (which records it: ground truth,
    /// the prompt opened that turn) and is killed before it writes a line about it, so its
    /// output, read to its end, says nothing. The request must never end `delivery_failed`.
    fn app_exit_before_reply(&mut self, a: usize, turn: TurnId, opener: Option<String>) {
        self.counters.fault("app_server.exit_before_reply");
        let t = turn.0.clone();
        let file = self.agents[a].session.file;
        self.oracle.turns.insert(t.clone(), TurnTruth { agent: a, opened_by: opener.clone(), final_message: None, aborted: false, file, final_file: None, messages: Vec::new() });
        self.log(format!("a{a} app-server: turn {t} taken into the thread for {opener:?}, then the process dies before writing a line"));
        if let Some(rid) = &opener {
            self.oracle.on_prompt_reached_thread(rid);
        }
        self.kill_process(a, thread_rng().gen_range(300..3_000));
    }

    /// The process died: what it had not read from stdin is gone with it.
    pub(crate) fn app_killed(&mut self, a: usize) {
        if self.agents[a].running.is_some() {
            self.counters.fault("app_server.exit_mid_turn");
        }
        let app = self.app(a);
        app.stdin.clear();
        app.queue.clear();
    }

    /// `app_server.holder_restart`: the holder dies (its app-server with it, its ring gone);
    /// `agent restart` later starts a new holder whose stream starts over at offset 0.
    pub fn app_holder_dies(&mut self, a: usize, back_after_ms: u64) {
        if self.app(a).holder_down {
            return;
        }
        let now = wakterm_runtime::driver::now_ms();
        self.counters.fault("app_server.holder_restart");
        self.kill_process(a, back_after_ms);
        self.agents[a].respawn_at_ms = None;
        let app = self.app(a);
        app.holder_down = true;
        app.holder_back_at = Some(now + back_after_ms);
        self.log(format!("a{a} the holder dies (the app-server with it); agent restart in {back_after_ms} ms"));
    }

    fn app_holder_back(&mut self, a: usize) {
        let capacity = self.plan.ring_bytes;
        let app = self.app(a);
        app.holder += 1;
        app.holder_down = false;
        app.holder_back_at = None;
        app.ring = Ring::new(capacity);
        app.generation_start = 0;
        self.oracle.forget_tolerances(a);
        let app = self.app(a);
        let holder = app.holder;
        let thread = app.thread.clone();
        // The truth of the new stream: the same session (thread), offsets from 0.
        let agent = &mut self.agents[a];
        let next = Session {
            id: SessionId(thread),
            base: 0,
            header: TurnState::Idle { last_completed: None },
            records: vec![],
            next_position: 0,
            file: holder,
            writers: vec![],
        };
        let previous = std::mem::replace(&mut agent.session, next);
        agent.archived.push(previous);
        self.log(format!("a{a} a new holder (generation {holder}) starts the stream over at 0"));
        self.spawn_process(a, false);
    }

    /// `app_server.stream_dropped`: the daemon's connection to the holder breaks; its reads
    /// fail until it reconnects (what the ring evicts meanwhile is lost).
    pub fn app_stream_dropped(&mut self, a: usize, lost_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        self.app(a).conn_down_until = Some(now + lost_ms);
        self.counters.fault("app_server.stream_dropped");
        self.log(format!("a{a} the daemon's holder connection drops for {lost_ms} ms"));
    }

    // ----- the port in the daemon -----

    /// What the port saw: faults to count, and the lines it writes through the holder (the
    /// re-proof's `thread/resume`, the declines of server requests).
    fn port_notes(&mut self, a: usize) {
        let Some(port) = self.agents[a].port.as_mut() else { return };
        let notes = std::mem::take(&mut port.notes);
        let reprove = port.reprove.take();
        let declines = std::mem::take(&mut port.declines);
        if let Some(line) = reprove {
            self.log(format!("a{a} the observer asks the app-server for its thread (thread/resume, MGD-4)"));
            self.check_reproof_rate(a);
            self.pane_accept(a, "observer", line.len(), true);
            self.app_stdin(a, &as_mutant_writes(self.mutant, &line), None);
        }
        for line in declines {
            self.log(format!("a{a} the observer declines a server request (MGD-6)"));
            self.pane_accept(a, "observer", line.len(), true);
            self.app_stdin(a, &as_mutant_writes(self.mutant, &line), None);
        }
        for note in notes {
            self.counters.fault(note);
        }
    }

    /// MGD-4: re-proofs that prove nothing are asked `MAX_UNPROVEN_REPROOFS` at once, then
    /// each at least `REPROOF_BACKOFF_MS` after the one before (a doubling backoff), within one
    /// daemon and process. Asked at once again and again (each answer a loss that asked the
    /// next), they flooded the event stream for good.
    fn check_reproof_rate(&mut self, a: usize) {
        use wakterm_runtime::app_server_stream::{MAX_UNPROVEN_REPROOFS, REPROOF_BACKOFF_MS};
        let now = wakterm_runtime::driver::now_ms();
        let epoch = self.daemon_epoch;
        let asks = &mut self.app(a).unproven_reproofs;
        if asks.0 != epoch {
            *asks = (epoch, Vec::new()); // a new daemon's observer counts afresh
        }
        asks.1.push(now);
        let times = asks.1.clone();
        // Twice the follower's: this list is cleared when a proving answer is SENT, the
        // follower's count when it READS one, and asks between the two count in both.
        let at_once = 2 * MAX_UNPROVEN_REPROOFS as usize;
        if times.len() > at_once {
            let backed_off = (times.len() - at_once) as u64;
            let since = now - times[at_once - 1];
            if since < backed_off * REPROOF_BACKOFF_MS {
                let m = format!("a{a}: {} re-proofs without a proving answer, the last {backed_off} within {since} ms of the {at_once}th (MGD-4: at most {MAX_UNPROVEN_REPROOFS} at once, then a backoff)", times.len());
                self.oracle.unfinished(m);
            }
        }
    }

    /// The monitor's poll (`ManagedObserver::poll`).
    pub(crate) fn managed_sync(&mut self, a: usize, out: &mut Vec<ObserverEvent>) {
        let now = wakterm_runtime::driver::now_ms();
        if self.agents[a].process.is_none() {
            return;
        }
        let agent = &mut self.agents[a];
        agent.observer.looked = true;
        let ring = agent.app.as_ref().expect("managed").readable(now, agent.port.as_ref().and_then(|p| p.holder));
        if let Some(port) = agent.port.as_mut() {
            out.extend(port.poll(ring));
        }
        self.port_notes(a);
    }

    /// `AgentRuntime::refresh_liveness` for a managed agent: on a process change or exit, the
    /// old observer's last read, then `ProcessExited { drained }` with `drained` true whenever
    /// there was an observer (as the runtime says it), then a new observer at the new
    /// process's output start.
    pub(crate) fn managed_liveness(&mut self, a: usize, out: &mut Vec<ObserverEvent>) -> Option<AgentFacts> {
        let now = wakterm_runtime::driver::now_ms();
        let mutant = self.mutant;
        let agent = &mut self.agents[a];
        if agent.observer.reported == agent.process {
            return None;
        }
        if agent.observer.reported.is_some() {
            let app = agent.app.as_ref().expect("managed");
            let ring = app.readable(now, agent.port.as_ref().and_then(|p| p.holder));
            let read_failed = ring.is_err();
            // A respawn in the same holder: the new process's output starts here.
            let next_start = agent.process.map(|_| app.generation_start);
            if let Some(port) = agent.port.as_mut() {
                let last = port.poll(ring);
                // The old observer's last read runs on into the next process's output (its turn
                // events then count as the old process's): a runtime imprecision, noted.
                let into_next = next_start.filter(|s| *s > port.start()).is_some_and(|s| last.iter().any(|e| e.session().is_some() && e.position().is_some_and(|p| p > s)));
                if into_next {
                    self.counters.fault("note.mgd_exit_drain_reads_next_process");
                }
                out.extend(last);
            }
            let agent = &mut self.agents[a];
            // `AgentObserver::drained` (`StreamFollower::exit_drained`, the one rule): only a
            // last read that succeeded, with no accepted turn unreported, drained the process.
            // (Mutant `accepted_turn_ignored_at_exit` was retired with CORR-11's managed rule: a
            // managed exit decides no request's end any more, so a false `drained` can no longer
            // end one `delivery_failed`.)
            let drained = agent.port.as_ref().is_some_and(|p| p.follower.exit_drained(p.health.is_ok()));
            if read_failed {
                // The last read failed: the exit says so (`agent.exited` with `drained: false`,
                // CORR-11: no waiting request ends `delivery_failed` on it), and the old
                // process's output after that read is never reported: the stream declared it
                // may be incomplete, so those records are tolerated.
                let read_to = agent.port.as_ref().map_or(0, |p| p.position());
                let end = agent.session.next_position;
                let session = agent.session.id.clone();
                let unread = agent.session.records.iter().any(|r| r.position > read_to);
                if drained {
                    self.oracle.exit_claimed_drained.insert(a);
                }
                if unread {
                    self.counters.fault("note.mgd_exit_undrained");
                    self.log(format!("a{a} exit after a failed read (drained: {drained}): records {}..={end} unread", read_to + 1));
                    if drained {
                        self.oracle.tolerate_forever(a, &session, read_to, end, "note.mgd_exit_drained_without_read");
                    } else {
                        self.oracle.tolerate_declared(a, &session, read_to, end, "note.mgd_exit_undrained");
                    }
                }
            }
            out.push(ObserverEvent::ProcessExited { drained });
            self.port_notes(a);
        }
        let agent = &mut self.agents[a];
        agent.observer.reported = agent.process;
        let app = agent.app.as_ref().expect("managed");
        agent.port = agent.process.map(|p| ManagedPort::new(&app.thread, p, (app.generation_start, app.holder), mutant));
        Some(self.agents[a].facts())
    }

    /// A refresh's snapshot (after its poll).
    pub(crate) fn managed_snapshot(&mut self, a: usize) -> Result<ObserverSnapshot, String> {
        if self.agents[a].process.is_none() {
            return Err("no process runs behind the agent".to_string());
        }
        let snapshot = self.agents[a].port.as_ref().map(ManagedPort::snapshot).ok_or_else(|| "no process runs behind the agent".to_string())?;
        if matches!(snapshot.turn, TurnState::Busy { .. }) {
            self.counters.fault("provider.busy_turn");
        }
        Ok(snapshot)
    }

    /// REC-2 (`ManagedObserver::resume` through the daemon's resume effect), and the oracle's
    /// check that an attach at the cursor replays exactly the records after it.
    pub(crate) fn managed_resume(&mut self, a: usize, from: &Cursor, out: &mut Vec<ObserverEvent>) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        if !agent.observer.resumed && agent.observer.looked && agent.process.is_some() {
            self.counters.fault("observer.poll_before_resume");
        }
        let agent = &mut self.agents[a];
        agent.observer.resumed = true;
        let ring = agent.app.as_ref().expect("managed").readable(now, agent.port.as_ref().and_then(|p| p.holder));
        let Some(port) = agent.port.as_mut() else {
            out.push(ObserverEvent::SessionLost { reason: "no process runs behind the agent".to_string(), session: None, before: None });
            return;
        };
        let events = port.resume(from, ring);
        let reached = port.position();
        // MGD-4's earlier tail (a cursor in an earlier process's output of the same holder) is
        // counted, not required: stale resumes were the only way the model ever reached it, and
        // a resume asked for another process is now dropped (REC-2). The engine resets its
        // event mark on a new incarnation, so no resume it asks for the new process starts
        // before that process's start. The unit tests of `app_server_stream` cover the path.
        if from.position < port.start() {
            self.counters.fault("note.earlier_tail_read");
        }
        self.port_notes(a);
        self.oracle.on_resume_answer(a, from.position, &events);
        let attached = events.iter().position(|e| matches!(e, ObserverEvent::Attached { position, .. } if *position == from.position));
        if let Some(i) = attached {
            let after = &events[i + 1..];
            if !after.iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. } | ObserverEvent::Attached { .. })) {
                let mut emitted: Vec<u64> = after.iter().filter_map(ObserverEvent::position).collect();
                emitted.dedup();
                let session = &self.agents[a].session;
                let expected: Vec<u64> = session.records.iter().map(|r| r.position).filter(|p| *p > from.position && *p <= reached).collect();
                self.oracle.on_resume_replayed(a, from.position, from.position, &emitted, &expected);
            }
        }
        out.extend(events);
    }

    /// MGD-2 at the end of the run: a managed agent whose process loaded its thread long ago
    /// should be usable. A daemon's fresh observer that met a stream start the holder had
    /// evicted never sees the thread reply, so it reports "not loaded" until a turn starts in
    /// the thread, and no admission can start one (a runtime gap, counted as a note).
    /// `judge`: count and fail it (unless `--lenient-mgd`); else only say whether one is still
    /// unusable (the caller waits a little: a re-proof's answer may be on its way).
    pub fn managed_usable_at_end(&mut self, judge: bool) -> bool {
        let mut usable = true;
        for a in 0..self.agents.len() {
            // MGD-6: a turn still waiting for the answer to its server request never ends.
            let waiting = self.agents[a].running.as_ref().and_then(|r| r.awaiting.clone()).filter(|_| self.agents[a].process.is_some());
            if let Some(request) = waiting {
                usable = false;
                if judge {
                    let turn = self.agents[a].running.as_ref().map(|r| r.turn.0.clone()).unwrap_or_default();
                    self.oracle.unfinished(format!("a{a}: turn {turn} still waits for the answer to server request {request} (MGD-6)"));
                }
            }
            let Some(port) = self.agents[a].port.as_ref() else { continue };
            if self.agents[a].process.is_none() {
                continue;
            }
            if let ObserverStatus::Unavailable { reason } = port.snapshot().status {
                if reason.contains("not loaded") {
                    usable = false;
                    if judge {
                        self.counters.fault("note.mgd_thread_not_loaded_at_end");
                        self.log(format!("a{a} the managed agent is unusable at the end: {reason}"));
                        if crate::oracle::strict_mgd() {
                            self.oracle.unfinished(format!("a{a}: the managed agent's thread is loaded, but its observer says: {reason} (MGD-2)"));
                        }
                    }
                }
            }
        }
        usable
    }

    /// A daemon (re)starts: its observer of the managed agent is new (for the process running
    /// now, from that process's output start), as `AgentRuntime::new`'s first liveness makes it.
    pub(crate) fn reset_managed_port(&mut self, a: usize) {
        let mutant = self.mutant;
        let agent = &mut self.agents[a];
        let app = agent.app.as_ref().expect("managed");
        agent.port = agent.process.map(|p| ManagedPort::new(&app.thread, p, (app.generation_start, app.holder), mutant));
    }
}
