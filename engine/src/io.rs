//! The engine's boundary: every `Input` the runtime feeds in and every `Output` (side effect)
//! the runtime must perform and, where it says so, acknowledge.

use crate::agent::AgentFacts;
use crate::events::{AgentEvent, EventMark};
use crate::ids::{AgentId, Incarnation, RequestId, SessionId};
use crate::observer::{Cursor, ObserverEvent, ObserverSnapshot};
use crate::prompt::PasteMode;
use crate::receipt::{Operation, Receipt, ReturnMode};
use crate::request::RequestRecord;
use crate::submit::{EnterBoundary, PaneSample, SplitOutcome, SplitWrite, SubmitCommand, SubmitReceipt};
use crate::terminal::{TerminalEvent, TerminalState};
use serde::{Deserialize, Serialize};

/// The runtime's token for one caller waiting on an answer (a CLI connection, an MCP call).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OpId(pub u64);

/// One `agent send` or `agent admit` call, as the caller spelled it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdmitCommand {
    pub op: OpId,
    pub operation: Operation,
    /// Display name, or agent id when `exact_agent_id` (ADM-1).
    pub target: String,
    pub exact_agent_id: bool,
    /// Required for `admit` (ADM-2); `send` uses the current incarnation.
    pub incarnation: Option<String>,
    /// The caller's request id, or one the runtime generated for a plain `send`.
    pub request_id: String,
    pub prompt: String,
    pub paste_mode: PasteMode,
    pub return_mode: ReturnMode,
    /// RF-3: 0 disables the deadline.
    pub final_timeout_ms: u64,
    /// The caller generated `request_id` just now (a fresh random UUID for a plain `send`).
    /// Informational only (HIST-2): it skips no lookup, since a caller may say so of a reused id.
    #[serde(default)]
    pub generated_id: bool,
    /// EV-12: the caller opts in to this prompt's text in its `request.admitted` event (stored
    /// with the record); without it the stream and the store keep its hash only.
    #[serde(default)]
    pub share_prompt: bool,
    /// MGD-7: a random number the runtime draws for this admission (the engine draws none). A
    /// managed agent's `turn/start` id carries it, so nothing else that writes to the
    /// app-server's stdin (a holder-socket client, a caller who knows the request id) can send
    /// a request under that id before the daemon does: an error reply to it is then the
    /// refusal of OUR request.
    #[serde(default)]
    pub write_nonce: u64,
    /// ADM-18: a plain one-way `send` that must not steer: it takes an idle agent only, as an
    /// admission does (a running turn refuses it `busy` / `turn_active`, an unknown turn state
    /// `turn_state_unknown`), with the current incarnation and a send's acknowledgement.
    #[serde(default)]
    pub no_steer: bool,
}

impl AdmitCommand {
    /// ADM-13, ADM-18: the one kind of admission that may be written into a running turn (or
    /// without an observer's view): a plain one-way send that did not ask never to steer.
    pub fn may_steer(&self) -> bool {
        self.plain_send() && !self.no_steer
    }

    /// A plain one-way `send`: the only admission `no_steer` means anything for.
    pub fn plain_send(&self) -> bool {
        self.operation == crate::receipt::Operation::Send && self.return_mode == crate::receipt::ReturnMode::OneWay
    }
}

/// How one pane write (or app-server turn start) ended, as the writer can prove it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum DeliveryOutcome {
    /// Every byte was written.
    Complete,
    /// The writer refused before writing any byte (pane closed, process gone): provably
    /// nothing reached the pane.
    Refused { reason: String },
    /// ADM-4: refused before the first byte because a write reached the pane since the look
    /// the write named (a human's draft, raw input): nothing of ours reached the pane.
    InputSinceLook { detail: String },
    /// The write failed after `bytes_written` bytes (possibly 0: a failed write may still
    /// have been partial, ADM-10).
    Failed { bytes_written: u64, error: String },
}

impl DeliveryOutcome {
    /// Refused before the first byte, for whatever reason: nothing reached the pane.
    pub fn wrote_nothing(&self) -> bool {
        matches!(self, DeliveryOutcome::Refused { .. } | DeliveryOutcome::InputSinceLook { .. })
    }
}

/// One caller's request to cancel a return-final request (RF-4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CancelCommand {
    pub op: OpId,
    pub request_id: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Input {
    /// Time passed; fire due deadlines and timers.
    Tick,
    AgentUpserted(AgentFacts),
    AgentRemoved { agent_id: AgentId },
    Admit(AdmitCommand),
    Cancel(CancelCommand),
    /// Answer to `Output::RefreshObserver` (ADM-3). `Err` carries why the refresh failed.
    /// `pane`: what the look at a PTY pane read besides the screen (ADM-4's write count,
    /// ADM-19's Enter by another writer).
    ObserverRefreshed { refresh_id: u64, agent_id: AgentId, snapshot: Result<ObserverSnapshot, String>, pane: crate::pane_look::PaneLook },
    /// A snapshot taken outside any admission (e.g. for the catalog): refreshes the view.
    ObserverSnapshot { agent_id: AgentId, snapshot: ObserverSnapshot },
    /// ADM-19: the monitor learnt of another writer's Enter (the holder pushed it) and then
    /// read the rollout: `snapshot` is taken after that look, so its read is the Enter's floor
    /// when it read to the end. Refreshes the view as `ObserverSnapshot` does.
    OtherEnterNoted { agent_id: AgentId, enter: crate::pane_look::OtherEnterLook, snapshot: ObserverSnapshot },
    /// A live observer event for an agent, in position order.
    Observed { agent_id: AgentId, event: ObserverEvent },
    /// Answer to `Output::Persist`. `Err` means the transaction did not commit.
    PersistAcked { token: u64, result: Result<(), String> },
    /// Answer to `Output::Deliver`. `record_end`: where the provider's record the observer
    /// reads (a PTY agent's rollout) ended just before the write's first byte, read from the
    /// file itself (its length), not from the observer's view, which may lag it; None when
    /// unknown (no file attached, a file that cannot be read or no longer stands at its path,
    /// a managed agent). CORR-5, ADM-5: no record ending at or before it can carry this
    /// write's prompt.
    Delivered { delivery_id: u64, outcome: DeliveryOutcome, record_end: Option<Cursor> },
    /// The runtime has re-registered every agent it found after a restart (REC-2).
    StartupComplete,
    /// LIVE-1, EV-14: sent before `StartupComplete` for each agent the runtime still holds
    /// whose holder never answered since the start (a link or a file in its socket's way):
    /// `StartupComplete` ends its requests but does not record it stopped; it is registered
    /// when its holder answers. The stream used to say `agent.stopped` for it, and its events
    /// followed once it answered again (a hostile run).
    AgentUnreachable { agent_id: AgentId },
    /// HIST-2: the answer to `Output::LoadRequest`: the stored (finished) record, None when
    /// the store has no such request, Err when it could not be read.
    RequestLoaded { load_id: u64, record: Result<Option<RequestRecord>, String> },
    /// HIST-5: request ids the store holds, read by the runtime once after start, in chunks;
    /// `complete` on the last one says every id of one read snapshot was sent (a failed read
    /// never sends it, and ids stay looked up).
    HistorySeed { ids: Vec<RequestId>, complete: bool },
    /// EV-5 / OBS-1: the observer's checkpoint, sent after the events it covers; the engine
    /// commits it with them (opaque to the engine).
    ObserverCheckpoint { agent_id: AgentId, checkpoint_json: String },
    /// SUB-1: a `session action=submit` call.
    Submit(SubmitCommand),
    /// SUB-2: answer to `Output::SubmitWrite`.
    SubmitWritten { delivery_id: u64, outcome: SplitOutcome },
    /// SUB-4: answer to `Output::WatchPane`: the last sample taken (`judge` decided the wait
    /// was over, or the wait ran out), or why the pane could not be read.
    PaneWatched { watch_id: u64, sample: Result<PaneSample, String> },
}

/// A durable store operation; a `Persist` holds the ops of one transaction.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PersistOp {
    PutRequest(RequestRecord),
    AppendTerminal(TerminalEvent),
    /// EV-1: one event of the durable Agent API stream.
    AppendEvent(AgentEvent),
    /// EV-4: the agent's event mark after the batch's events.
    PutEventMark(EventMark),
    /// EV-5 / OBS-1: the agent's observer checkpoint (opaque JSON).
    PutCheckpoint { agent_id: AgentId, checkpoint_json: String },
}

/// The answer to a cancel (RF-4).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum CancelOutcome {
    Cancelled { event: TerminalEvent },
    AlreadyTerminal { state: TerminalState, terminal_event_sequence: u64 },
    NotFound { request_id: String },
    /// One-way admissions have nothing to cancel.
    NotReturnFinal { request_id: RequestId },
    /// The admission is still deciding or writing; cancel after its receipt.
    AdmissionInProgress { request_id: RequestId },
    /// The cancel could not be made durable.
    Failed { request_id: RequestId, error: String },
    /// RF-4: the request's end (this cancel's, or one decided before it) did not commit (a full
    /// disk): the engine retries it, and a daemon stopped first forgets it. Answered at the
    /// failure, not after a retry that may wait as long as the disk stays full.
    CommitFailed { request_id: RequestId, error: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Output {
    /// Refresh the agent's observer off the reactor and answer `ObserverRefreshed` (ADM-3).
    RefreshObserver { refresh_id: u64, agent_id: AgentId },
    /// After a restart: re-open the agent's observer session at `from`, answer `Attached`,
    /// then replay every event after it (REC-2). `from` lies in the output of `incarnation`:
    /// an observer of another process (the agent's process changed before the resume ran)
    /// drops it, since a cursor says nothing about another process's stream (a managed
    /// agent's new holder starts its stream over at 0).
    ResumeObserver { agent_id: AgentId, from: Cursor, incarnation: Incarnation },
    /// OBS-4: after a restart, the stream reports `session` attached for this agent's process
    /// (`incarnation`) and nothing was observed since: the observer of that process answers
    /// `SessionLost` naming `session` when a look proves the process tree no longer holds
    /// its rollout (none open, one of another working directory, or one whose first record
    /// names another session than its file name), and says unavailable
    /// rather than "no rollout yet". An observer that attached since, or of another process,
    /// ignores it.
    ExpectSession { agent_id: AgentId, session: SessionId, incarnation: Incarnation },
    /// HIST-2: read this request from the store off the reactor; answer `RequestLoaded`.
    LoadRequest { load_id: u64, request_id: RequestId },
    /// Commit these ops in one transaction and answer `PersistAcked` (only after COMMIT).
    Persist { token: u64, ops: Vec<PersistOp> },
    /// ADM-8: write `bytes` to the agent's pane as ONE write and answer `Delivered`. The
    /// runtime refuses (`Refused`) if the pane's incarnation is no longer `incarnation`.
    /// `expect_writes`: ADM-4, the pane's write count at the look the admission decided on; the
    /// holder refuses the write, before its first byte, when it moved (input since the look).
    /// `request_id`: whose prompt the write carries (the runtime's log names it; the
    /// simulator's ground truth knows a write by it, not by its text: two prompts of ours may
    /// have one text, CORR-6).
    Deliver { delivery_id: u64, request_id: RequestId, agent_id: AgentId, incarnation: Incarnation, bytes: Vec<u8>, expect_writes: Option<u64> },
    /// The answer to an `Admit`.
    Receipt { op: OpId, receipt: Receipt },
    /// The answer to a `Cancel`.
    CancelResult { op: OpId, outcome: CancelOutcome },
    /// A terminal event that is now durable (TERM-2): push it to stream subscribers.
    TerminalEvent(TerminalEvent),
    /// EV-2: an agent event that is now durable, in sequence order: push it to subscribers.
    AgentEvent(AgentEvent),
    /// SUB-2: the split write as ONE writer call holding the pane's write lock; refuse
    /// (`Refused`) if the pane no longer runs `incarnation` or has no observation buffer;
    /// answer `SubmitWritten` with the Enter boundary captured right after the CR.
    /// `expect_writes`: the pane's write count at the refresh the check decided on (ADM-4);
    /// the holder refuses the write, before its first byte, when any write came since.
    SubmitWrite { delivery_id: u64, agent_id: AgentId, incarnation: Incarnation, write: SplitWrite, expect_writes: Option<u64> },
    /// SUB-4: sample the pane until `judge` is no longer `Pending` or `wait_ms` passed since the
    /// boundary; answer `PaneWatched` with the last sample.
    WatchPane { watch_id: u64, agent_id: AgentId, boundary: EnterBoundary, wait_ms: u64 },
    /// The answer to a `Submit`.
    SubmitReceipt { op: OpId, receipt: SubmitReceipt },
}

/// What `Engine::recover` rebuilds from (REC-*).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DurableState {
    /// The open requests, then each agent's latest written finished ones, oldest first
    /// (`Store::load_latest_written_since`): a restart orders the finished ones by the
    /// monotonic clock when every one has it, else takes this order (ADM-5,
    /// `RecoveredWrite::considered`; wall-clock registration times are no order across
    /// daemons).
    pub requests: Vec<RequestRecord>,
    pub last_terminal_sequence: u64,
    /// EV-1: the last durable agent event sequence (pruned ones included).
    #[serde(default)]
    pub last_event_sequence: u64,
    /// EV-4: every agent's durable event mark.
    #[serde(default)]
    pub event_marks: Vec<EventMark>,
}
