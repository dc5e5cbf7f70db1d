//! Facts the runtime's provider observer reports: snapshots taken on refresh (ADM-3) and the
//! turn lifecycle events correlation is built from (CORR-*). Positions are cursors: for a
//! rollout file, the byte offset just after a complete record; for the app-server, the durable
//! event sequence. Events arrive in position order for one observer session.

use crate::ids::{Incarnation, SessionId, TurnId};
use crate::receipt::CorrelationSource;
use serde::{Deserialize, Serialize};

/// Process identity of the adopted process (CORR-2): a pid alone can be reused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ProcessIdentity {
    pub pid: u32,
    pub start_time_ticks: u64,
}

/// A point in one observer session after which correlation looks for a new turn.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Cursor {
    pub session: SessionId,
    pub position: u64,
}

impl Cursor {
    /// `other` when it lies further in this cursor's session, else this one: a cursor of
    /// another session says nothing of this one's file (CORR-6's floor: the rollout's end at
    /// a write against the view or the armed cursor).
    pub fn or_further(self, other: Option<&Cursor>) -> Cursor {
        match other {
            Some(other) if other.session == self.session && other.position > self.position => other.clone(),
            _ => self,
        }
    }

    /// The opaque text form given to callers as `armed_cursor`.
    pub fn render(&self, source: CorrelationSource) -> String {
        let prefix = match source {
            CorrelationSource::ProviderFile => "pf",
            CorrelationSource::AgentApiEvents => "ev",
        };
        format!("{prefix}1.{}.{}", self.session.0, self.position)
    }
}

/// The provider's turn state as last observed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum TurnState {
    /// No turn running. `last_completed` is the completed baseline turn, when there is one.
    Idle { last_completed: Option<TurnId> },
    /// A turn is running (its id, when the observer knows it).
    Busy { turn: Option<TurnId> },
    /// The observer cannot tell.
    Unknown,
}

/// RF-6's evidence trail says these in words, not in Rust's debug syntax.
impl std::fmt::Display for TurnState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TurnState::Idle { last_completed: Some(turn) } => write!(f, "idle after turn {}", turn.0),
            TurnState::Idle { last_completed: None } => write!(f, "idle, no completed turn"),
            TurnState::Busy { turn: Some(turn) } => write!(f, "busy in turn {}", turn.0),
            TurnState::Busy { turn: None } => write!(f, "busy"),
            TurnState::Unknown => write!(f, "unknown"),
        }
    }
}

impl std::fmt::Display for ObserverStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ObserverStatus::Attached => write!(f, "attached"),
            ObserverStatus::Unavailable { reason } => write!(f, "unavailable ({reason})"),
        }
    }
}

/// CORR-13: the one turn-state fold. The engine's view, the runtime's observer and the
/// simulator's observer model all call this function, so the three cannot drift.
///
/// - a turn start makes that turn run; a user message while idle means a turn is starting;
/// - a completion or abort ends the running turn, unless another turn is running (a late or
///   duplicate completion of an older turn never ends the running one, CORR-5); an abort
///   without a turn id keeps the running (or last completed) turn as the baseline;
/// - a lost session or an exited process leaves nothing known;
/// - attaching changes nothing by itself (what follows is read and folded), nor does an
///   assistant message or a plan update.
pub fn fold_turn(state: &TurnState, event: &ObserverEvent) -> TurnState {
    match event {
        // Only turn records move the state; an assistant message is not one.
        ObserverEvent::Attached { .. }
        | ObserverEvent::AgentMessage { .. }
        | ObserverEvent::PlanUpdated { .. }
        | ObserverEvent::RequestRefused { .. }
        | ObserverEvent::TurnAccepted { .. } => state.clone(),
        ObserverEvent::TurnStarted { turn, .. } => TurnState::Busy { turn: Some(turn.clone()) },
        ObserverEvent::UserMessage { turn, .. } => match state {
            TurnState::Idle { .. } => TurnState::Busy { turn: turn.clone() },
            TurnState::Busy { .. } | TurnState::Unknown => state.clone(),
        },
        ObserverEvent::TurnCompleted { turn, .. } if running_other_turn(state, Some(turn)) => state.clone(),
        ObserverEvent::TurnCompleted { turn, .. } => TurnState::Idle { last_completed: Some(turn.clone()) },
        ObserverEvent::TurnAborted { turn, .. } if running_other_turn(state, turn.as_ref()) => state.clone(),
        ObserverEvent::TurnAborted { turn, .. } => {
            let previous = match state {
                TurnState::Idle { last_completed } => last_completed.clone(),
                TurnState::Busy { turn } => turn.clone(),
                TurnState::Unknown => None,
            };
            TurnState::Idle { last_completed: turn.clone().or(previous) }
        }
        ObserverEvent::SessionLost { .. } | ObserverEvent::ProcessExited { .. } => TurnState::Unknown,
    }
}

/// True when `state` shows a running turn other than `turn`.
pub fn running_other_turn(state: &TurnState, turn: Option<&TurnId>) -> bool {
    matches!((state, turn), (TurnState::Busy { turn: Some(running) }, Some(turn)) if running != turn)
}

/// What the harness's input composer holds (from the terminal screen, for PTYs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Composer {
    Empty,
    /// Text the user typed and did not submit: Ctrl-U would destroy it (ADM-5).
    Draft,
    /// The harness asks an interactive question: input would answer it (ADM-5).
    Question,
    /// No screen evidence (SPEC ADM-5 decides this does not block on its own).
    Unknown,
}

/// The observer's health for one agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ObserverStatus {
    Attached,
    Unavailable { reason: String },
}

/// The result of one observer refresh, taken off the reactor by the runtime.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ObserverSnapshot {
    /// The incarnation the observer verified while refreshing.
    pub incarnation: Incarnation,
    pub process: Option<ProcessIdentity>,
    pub status: ObserverStatus,
    /// The observed session, once the provider has one (none before Codex's first turn).
    pub session: Option<SessionId>,
    /// The position the snapshot reflects: every event up to it is folded in; events delivered
    /// after the snapshot lie beyond it.
    pub position: u64,
    pub turn: TurnState,
    pub composer: Composer,
}

impl ObserverSnapshot {
    /// How far the snapshot's read went, when it read a rollout to its end (attached, with a
    /// known turn: a read cut at its step bound leaves the turn unknown): ADM-19's floor of an
    /// Enter looked at before that read.
    pub fn read_to_end(&self) -> Option<Cursor> {
        if self.status != ObserverStatus::Attached || self.turn == TurnState::Unknown {
            return None;
        }
        Some(Cursor { session: self.session.clone()?, position: self.position })
    }
}

/// The `SessionLost` reason of a provider record the observer could not read in full
/// (CORR-12). Requests it ends carry it as their terminal reason; any other reason is free
/// text and ends them as `observer_session_lost`.
pub const RECORD_TOO_LARGE: &str = "record_too_large";

/// RF-9: the JSON size of a final too large to store and deliver, or None when it fits.
/// JSON escaping can grow text up to sixfold, so the encoded size is what counts.
pub fn final_too_large(text: &str) -> Option<usize> {
    json_too_large(text)
}

/// RF-9's limit for any provider text an event carries (a message, a plan): its JSON size
/// when over `MAX_FINAL_JSON_BYTES`.
pub fn json_too_large<T: Serialize + ?Sized>(value: &T) -> Option<usize> {
    // Counted, not built: a final of megabytes is checked on every completion.
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    let encoded = serde_json::to_writer(&mut counter, value).map_or(usize::MAX, |()| counter.0);
    (encoded > crate::limits::MAX_FINAL_JSON_BYTES).then_some(encoded)
}

/// EV-11: one step of a plan the model recorded with Codex's `update_plan` tool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanStep {
    pub step: String,
    pub status: PlanStatus,
}

/// The step statuses Codex's `update_plan` accepts (any other fails the call, so no plan).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlanStatus {
    Pending,
    InProgress,
    Completed,
}

/// A turn lifecycle fact read from the provider, in position order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ObserverEvent {
    /// The observer is (again) tailing `session`; later events follow `position`. After a
    /// restart it is the runtime's answer to `Output::ResumeObserver` (REC-2).
    Attached { session: SessionId, position: u64 },
    TurnStarted { session: SessionId, turn: TurnId, position: u64 },
    /// A user message of a turn, hashed with `prompt::prompt_hash` (HASH-1). Older Codex
    /// records carry no turn id.
    UserMessage { session: SessionId, turn: Option<TurnId>, prompt_hash: String, position: u64 },
    /// An assistant message as the provider recorded it inside a turn: commentary, and the
    /// final answer too (which `TurnCompleted` repeats). It changes neither the turn state nor
    /// correlation; the event stream reports it (`message.assistant`).
    AgentMessage {
        session: SessionId,
        turn: Option<TurnId>,
        text: String,
        /// Codex's label when the model gave one (`commentary`, `final_answer`).
        #[serde(default)]
        phase: Option<String>,
        position: u64,
    },
    /// EV-11: the model replaced its plan (Codex's `update_plan` tool call). Like a message, it
    /// changes neither the turn state nor correlation.
    PlanUpdated { session: SessionId, turn: Option<TurnId>, explanation: Option<String>, plan: Vec<PlanStep>, position: u64 },
    TurnCompleted { session: SessionId, turn: TurnId, final_message: Option<String>, position: u64 },
    TurnAborted { session: SessionId, turn: Option<TurnId>, position: u64 },
    /// MGD-7: a managed session's app-server answered the JSON-RPC request `id` with an error
    /// (`error`: its code and message, bounded). For a `turn/start` this is proof the input was
    /// never handed to the thread: Codex 0.169 answers every failure of the request before it
    /// submits the input, and nothing after. No turn state changes.
    RequestRefused { session: SessionId, id: String, error: String, position: u64 },
    /// CORR-15: a managed session's app-server answered the JSON-RPC request `id` (a
    /// `turn/start`) with the turn it handed the input to (`result.turn.id`; Codex answers
    /// before it notifies the turn). It says whose prompt a turn carries: a turn accepted for
    /// another request is not ours, whatever its text. No turn state changes.
    TurnAccepted { session: SessionId, id: String, turn: TurnId, position: u64 },
    /// The session file was replaced, truncated or rewritten, a record could not be read in
    /// full ([`RECORD_TOO_LARGE`]), or the event stream dropped.
    SessionLost {
        reason: String,
        /// The session a resume could not re-attach (REC-2), when the loss is about it rather
        /// than about whatever the observer tails now (EV-7). None: the tailed session.
        #[serde(default)]
        session: Option<SessionId>,
        /// MGD-4: Some(p) when every lost record lies at or before position p of a managed
        /// agent's stream (in an EARLIER process's output of the same session, after `agent
        /// restart`, or output of this process the holder evicted before it was read); the
        /// stream from p on is followed whole, so only requests armed before
        /// p are affected, and a mark at or past p lost nothing. None: the loss may reach
        /// anything after the stream's mark.
        #[serde(default)]
        before: Option<u64>,
    },
    /// The adopted process exited. `drained`: the observer read the provider's record to its
    /// end after the exit, so what it reported is everything the provider wrote (CORR-11).
    ProcessExited { drained: bool },
}

impl ObserverEvent {
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            ObserverEvent::Attached { session, .. }
            | ObserverEvent::TurnStarted { session, .. }
            | ObserverEvent::UserMessage { session, .. }
            | ObserverEvent::AgentMessage { session, .. }
            | ObserverEvent::PlanUpdated { session, .. }
            | ObserverEvent::TurnCompleted { session, .. }
            | ObserverEvent::TurnAborted { session, .. }
            | ObserverEvent::RequestRefused { session, .. }
            | ObserverEvent::TurnAccepted { session, .. } => Some(session),
            ObserverEvent::SessionLost { .. } | ObserverEvent::ProcessExited { .. } => None,
        }
    }

    pub fn position(&self) -> Option<u64> {
        match self {
            ObserverEvent::Attached { position, .. }
            | ObserverEvent::TurnStarted { position, .. }
            | ObserverEvent::UserMessage { position, .. }
            | ObserverEvent::AgentMessage { position, .. }
            | ObserverEvent::PlanUpdated { position, .. }
            | ObserverEvent::TurnCompleted { position, .. }
            | ObserverEvent::TurnAborted { position, .. }
            | ObserverEvent::RequestRefused { position, .. }
            | ObserverEvent::TurnAccepted { position, .. } => Some(*position),
            ObserverEvent::SessionLost { .. } | ObserverEvent::ProcessExited { .. } => None,
        }
    }

    /// Where the event's record lies (None: it has no place in a session).
    pub fn cursor(&self) -> Option<Cursor> {
        Some(Cursor { session: self.session()?.clone(), position: self.position()? })
    }
}
