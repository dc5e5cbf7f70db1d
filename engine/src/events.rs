//! EV-*: the durable Agent API event stream (`wakterm.agent-events.v1`).
//!
//! Every fact the engine learns about an agent (lifecycle, observer health, provider turns and
//! messages) and every request milestone becomes one [`AgentEvent`] with a sequence number:
//!
//! - EV-1: sequences are assigned by the engine when the event is made, strictly increasing,
//!   continued after the last durable one on restart, never reused. A number whose commit
//!   failed is skipped (never carries another event); readers see only committed events.
//! - EV-2: events are published to subscribers only after their commit, in sequence order:
//!   nothing is published while an earlier sequence is still uncommitted.
//! - EV-3: an agent's observer events are committed in the order the provider recorded them,
//!   one batch in flight per agent; a failed batch is re-sequenced (with everything queued
//!   behind it) and retried, so per-agent order never inverts.
//! - EV-4: a provider record maps to its events once: each batch carries the agent's durable
//!   mark (session and position appended through); a record at or before the mark, replayed
//!   after a restart or a resume, is folded but not appended again.
//! - EV-5: the observer checkpoint (OBS-1) travels in the same batch as the events before it,
//!   so a restart never resumes past an event that was not durable.
//! - EV-6: request milestones (`request.admitted`, `request.bound`, `request.terminal`) are
//!   committed in the same transaction as the request record that makes them true: no
//!   commit is added to the admission path.
//! - EV-7: a session found lost by the first look after a restart is `observer.gap`: the
//!   provider's records after the mark may never be reported. A loss seen live is
//!   `observer.lost`.

use crate::ids::{AgentId, Incarnation, RequestId, SessionId, TurnId};
use crate::receipt::{Classification, ReturnMode};
use crate::terminal::TerminalState;
use serde::{Deserialize, Serialize};

/// Versioned schema name carried by every agent event.
pub const AGENT_EVENTS_SCHEMA: &str = "wakterm.agent-events.v1";

/// One event of the durable stream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentEvent {
    pub schema: String,
    pub sequence: u64,
    /// Engine time (milliseconds since the Unix epoch) when the engine learned the fact.
    pub at_ms: u64,
    pub agent_id: AgentId,
    /// The agent's process incarnation the fact belongs to, where one applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<Incarnation>,
    #[serde(flatten)]
    pub body: EventBody,
}

impl AgentEvent {
    pub fn kind(&self) -> &'static str {
        self.body.kind()
    }

    /// EV-3: about how many bytes the event adds to a batch: its strings (free texts and the
    /// ids the provider chose, which a rollout may make long) plus a fixed allowance for the
    /// rest. JSON escaping is not counted: RF-9 bounds a message's encoded size already.
    pub fn bulk_bytes(&self) -> usize {
        const FIXED: usize = 256;
        let text = |t: &Option<String>| t.as_ref().map_or(0, String::len);
        let turn = |t: &Option<TurnId>| t.as_ref().map_or(0, |t| t.0.len());
        let strings: usize = match &self.body {
            EventBody::AgentStarted { name, .. } => name.len(),
            EventBody::IncarnationChanged { previous } => previous.as_ref().map_or(0, |i| i.0.len()),
            EventBody::AgentExited { .. } | EventBody::AgentStopped => 0,
            EventBody::ObserverAttached { session, .. } => session.0.len(),
            EventBody::ObserverLost { reason } => reason.len(),
            EventBody::ObserverGap { reason, session, .. } => reason.len() + session.as_ref().map_or(0, |s| s.0.len()),
            EventBody::TurnStarted { session, provider_turn_id, .. } => session.0.len() + provider_turn_id.0.len(),
            EventBody::UserMessage { session, provider_turn_id, prompt_hash, .. } => session.0.len() + turn(provider_turn_id) + prompt_hash.len(),
            EventBody::AssistantMessage { session, provider_turn_id, text: body, phase, .. } => session.0.len() + turn(provider_turn_id) + text(body) + text(phase),
            EventBody::PlanUpdated { session, provider_turn_id, explanation, plan, .. } => {
                session.0.len() + turn(provider_turn_id) + text(explanation) + plan.iter().flatten().map(|step| step.step.len() + 16).sum::<usize>()
            }
            EventBody::TurnCompleted { session, provider_turn_id, .. } | EventBody::TurnAborted { session, provider_turn_id: Some(provider_turn_id), .. } => {
                session.0.len() + provider_turn_id.0.len()
            }
            EventBody::TurnAborted { session, provider_turn_id: None, .. } => session.0.len(),
            EventBody::TurnFinal { session, provider_turn_id, final_message, .. } => session.0.len() + provider_turn_id.0.len() + final_message.len(),
            EventBody::RequestAdmitted { prompt, prompt_hash, .. } => text(prompt) + prompt_hash.len(),
            EventBody::RequestBound { provider_turn_id, .. } => provider_turn_id.0.len(),
            EventBody::RequestTerminal { reason, provider_turn_id, .. } => text(reason) + turn(provider_turn_id),
        };
        FIXED + self.incarnation.as_ref().map_or(0, |i| i.0.len()) + strings
    }

    pub fn assert_consistent(&self) {
        assert_eq!(self.schema, AGENT_EVENTS_SCHEMA);
        assert!(self.sequence > 0, "EV-1: sequences start at 1");
    }
}

/// The kind-specific part of an event; `kind` is its tag.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind")]
pub enum EventBody {
    /// The daemon registered an agent it had never reported.
    #[serde(rename = "agent.started")]
    AgentStarted { name: String, transport: crate::agent::Transport },
    /// Another process now runs behind the agent (`agent restart`, a respawn).
    #[serde(rename = "agent.incarnation_changed")]
    IncarnationChanged { previous: Option<Incarnation> },
    /// The agent's process exited. `drained`: the observer read the provider's record to its
    /// end after the exit.
    #[serde(rename = "agent.exited")]
    AgentExited { drained: bool },
    /// The agent was stopped and forgotten.
    #[serde(rename = "agent.stopped")]
    AgentStopped,
    /// The observer tails `session`; what follows lies after `position`.
    #[serde(rename = "observer.attached")]
    ObserverAttached { session: SessionId, position: u64 },
    /// The observer lost its session while the daemon watched (EV-7).
    #[serde(rename = "observer.lost")]
    ObserverLost { reason: String },
    /// EV-7: the first look after a restart found the session lost: the provider's records
    /// after `after_position` of `session` may never be reported.
    #[serde(rename = "observer.gap")]
    ObserverGap { reason: String, session: Option<SessionId>, after_position: u64 },
    #[serde(rename = "turn.started")]
    TurnStarted { session: SessionId, provider_turn_id: TurnId, position: u64 },
    /// A user message of a turn: its HASH-1 hash only (prompts may be private).
    #[serde(rename = "message.user")]
    UserMessage { session: SessionId, provider_turn_id: Option<TurnId>, prompt_hash: String, position: u64 },
    /// EV-10: an assistant message the provider recorded inside a turn (commentary, and the
    /// final answer too, which `turn.final` repeats once the turn completes). `text` is absent
    /// and `text_too_large` holds its JSON size when it is over RF-9's limit.
    #[serde(rename = "message.assistant")]
    AssistantMessage {
        session: SessionId,
        provider_turn_id: Option<TurnId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text_too_large: Option<u64>,
        /// Codex's label when the model gave one (`commentary`, `final_answer`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        phase: Option<String>,
        position: u64,
    },
    /// EV-11: the model replaced its plan (Codex's `update_plan`): the whole plan, in order.
    /// `plan` (and `explanation`) are absent and `plan_too_large` holds their JSON size when
    /// over RF-9's limit.
    #[serde(rename = "plan.updated")]
    PlanUpdated {
        session: SessionId,
        provider_turn_id: Option<TurnId>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        explanation: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan: Option<Vec<crate::observer::PlanStep>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        plan_too_large: Option<u64>,
        position: u64,
    },
    /// `final_too_large`: the JSON size of a final over RF-9's limit, which no `turn.final`
    /// follows (absent otherwise).
    #[serde(rename = "turn.completed")]
    TurnCompleted {
        session: SessionId,
        provider_turn_id: TurnId,
        position: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        final_too_large: Option<u64>,
    },
    /// The completed turn's final assistant message, right after its `turn.completed`.
    #[serde(rename = "turn.final")]
    TurnFinal { session: SessionId, provider_turn_id: TurnId, final_message: String, position: u64 },
    #[serde(rename = "turn.aborted")]
    TurnAborted { session: SessionId, provider_turn_id: Option<TurnId>, position: u64 },
    /// The request's receipt-bearing record is durable (it was written, or settled).
    #[serde(rename = "request.admitted")]
    RequestAdmitted {
        request_id: RequestId,
        return_mode: ReturnMode,
        classification: Option<Classification>,
        prompt_hash: String,
        /// EV-12: the prompt's text, only when the caller opted in (`--share-prompt`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        prompt: Option<String>,
    },
    /// CORR-7: the request is bound to the provider turn its prompt started.
    #[serde(rename = "request.bound")]
    RequestBound { request_id: RequestId, provider_turn_id: TurnId },
    /// The request's terminal event (TERM-*), by its own stream's sequence.
    #[serde(rename = "request.terminal")]
    RequestTerminal {
        request_id: RequestId,
        state: TerminalState,
        reason: Option<String>,
        provider_turn_id: Option<TurnId>,
        terminal_event_sequence: u64,
        /// CORR-9: as the terminal event's (`TerminalEvent::steered`).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        steered: bool,
    },
}

impl EventBody {
    /// Every kind, in the order SPEC.md lists them.
    pub const KINDS: [&'static str; 17] = [
        "agent.started",
        "agent.incarnation_changed",
        "agent.exited",
        "agent.stopped",
        "observer.attached",
        "observer.lost",
        "observer.gap",
        "turn.started",
        "message.user",
        "message.assistant",
        "plan.updated",
        "turn.completed",
        "turn.final",
        "turn.aborted",
        "request.admitted",
        "request.bound",
        "request.terminal",
    ];

    pub fn kind(&self) -> &'static str {
        match self {
            EventBody::AgentStarted { .. } => "agent.started",
            EventBody::IncarnationChanged { .. } => "agent.incarnation_changed",
            EventBody::AgentExited { .. } => "agent.exited",
            EventBody::AgentStopped => "agent.stopped",
            EventBody::ObserverAttached { .. } => "observer.attached",
            EventBody::ObserverLost { .. } => "observer.lost",
            EventBody::ObserverGap { .. } => "observer.gap",
            EventBody::TurnStarted { .. } => "turn.started",
            EventBody::UserMessage { .. } => "message.user",
            EventBody::AssistantMessage { .. } => "message.assistant",
            EventBody::PlanUpdated { .. } => "plan.updated",
            EventBody::TurnCompleted { .. } => "turn.completed",
            EventBody::TurnFinal { .. } => "turn.final",
            EventBody::TurnAborted { .. } => "turn.aborted",
            EventBody::RequestAdmitted { .. } => "request.admitted",
            EventBody::RequestBound { .. } => "request.bound",
            EventBody::RequestTerminal { .. } => "request.terminal",
        }
    }
}

/// EV-4: what the stream has durably reported for one agent, committed with each of its
/// batches. A restart continues from it, so nothing is reported twice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventMark {
    pub agent_id: AgentId,
    /// The incarnation `agent.started` / `agent.incarnation_changed` last reported.
    pub incarnation: Option<Incarnation>,
    /// `agent.exited` was reported for `incarnation`.
    pub exited: bool,
    /// `agent.stopped` was reported.
    pub stopped: bool,
    /// The session the observer was last reported attached to (None: lost or never).
    pub attached: Option<SessionId>,
    /// The provider position appended through, in `session`.
    pub session: Option<SessionId>,
    pub position: u64,
    /// EV-13: `record_fingerprint` of the record ending at `position` (None when the position
    /// came from an attach, or from a mark written before fingerprints).
    #[serde(default)]
    pub fingerprint: Option<String>,
    /// ADM-5 across a restart: the latest user messages the stream reported, newest last, at
    /// most `MAX_PROMPTS_TAKEN_KEPT` (`EventMark::note_prompts_and_lines`). A daemon started after a
    /// write to a PTY agent holds it unless the user message carrying that write's prompt lies
    /// past the write's floor (`RecoveredWrite::floor_wait`; a managed agent's restart goes by
    /// its line's answer, `answered_lines`): the records before the mark are not read again,
    /// so before, a one-way prompt whose turn had run held its agent until RF-8's timeout.
    /// The prompt, not any turn past the floor (as until 2026-12-06): the view at the write may
    /// stand behind the rollout, so a human's turn that began before the write lay past the
    /// floor, and the restart wrote the next prompt over ours, taken by the TUI but its turn
    /// not started yet (the simulator's `terminal.slow_turn_start`, seed 19221). Forgotten
    /// whenever the mark's place moves back or its session is lost (`EventMark::forget_turns`):
    /// a position compares only within one copy of the file.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub prompts_taken: Vec<PromptTaken>,
    /// ADM-5 (managed) across a restart: the latest of wakterm's `turn/start` lines the stream
    /// saw the app-server answer, newest last, at most `MAX_ANSWERED_LINES_KEPT`, and whether
    /// the turn each went into was seen taking it (`AnsweredLine`). A restart holds a managed
    /// agent for its latest write unless its line is among them, refused or taken
    /// (`RecoveredWrite::managed_wait`): the write's floor is the view at the write, which may
    /// stand behind the stream, so a turn past it says nothing sure of the line (the live
    /// rule's reason, ADM-5). Several, not one: an id of wakterm's form anyone can send (a
    /// raw writer's forged refusal) evicted the one kept (a review).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub answered_lines: Vec<AnsweredLine>,
    /// ADM-5 (managed): the turn the stream last reported starting: a line then accepted into
    /// it was folded into a running turn, taken at once (`AnsweredLine::taken`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_started: Option<TurnId>,
    /// ADM-5, EV-13: the latest run that found one of the agent's files changed while the
    /// daemon was down (a replay zone's verdict, `Engine::floor_unprovable`), or could not
    /// prove it yet (a loss closed its zone; restored once a later read proves the file,
    /// `FloorProof`, by the same run: a crash first leaves it). A write registered before that
    /// run started may have taken its floor in an older
    /// copy, which no position read since compares with: a later restart keeps its wait out of
    /// the new copy's reach (`RecoveredWrite::floor_wait`). Not a turn: `forget_turns` keeps
    /// it. None in a mark written before 2026-12-06.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rewritten: Option<RewriteRun>,
    /// OBS-4: the stream reported a session of `incarnation` (an attach, or records of one),
    /// lost since or not: that process writes a rollout, so a look that finds none open is no
    /// "no rollout yet, idle" (`Engine::awaiting_reported_session`). Reset with a new process.
    /// False in a mark written before 2026-12-07.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub had_session: bool,
}

/// ADM-5, EV-13 (`EventMark::rewritten`): a run, by its boot and its start on the machine's
/// monotonic clock (TIME-2; `UNKNOWN_BOOT` when the run had no run clock: no record is known to
/// follow it).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RewriteRun {
    pub boot_id: String,
    pub started_monotonic_ms: i64,
}

impl RewriteRun {
    /// Whether a record registered at `registered_monotonic_ms` (on the boot `boot_id`; None:
    /// another boot than the current run's, or unknown) was registered after this run started.
    pub fn followed_by(&self, current_boot: Option<&str>, registered_monotonic_ms: Option<i128>) -> bool {
        let unknown = crate::run_clock::UNKNOWN_BOOT;
        let (Some(boot), Some(registered)) = (current_boot.filter(|b| *b != unknown), registered_monotonic_ms) else { return false };
        match boot == self.boot_id {
            true => registered >= i128::from(self.started_monotonic_ms),
            false => self.boot_id != unknown, // registered in a later boot than the note's
        }
    }
}

/// ADM-5 (PTY): a user message the stream reported (`EventMark::prompts_taken`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptTaken {
    /// Its prompt's hash (HASH-1).
    pub prompt_hash: String,
    /// Where the record lies.
    pub at: crate::observer::Cursor,
    /// The stream's next event number when it noted the record (its own event is numbered
    /// from it): it counts for a write only when noted at or after the write's
    /// `RequestRecord::written_at_event`. Positions alone could not tell two copies of a file
    /// apart when the mark's forgetting was not durable yet (a review: a write made while a
    /// restart's replay zone found the file cut back recorded its floor in the new copy, a
    /// crash kept the old copy's turn in the durable mark, and the next restart took it for
    /// the write's). Set by the stream (`Engine::record_observed`); None until then.
    pub noted_at_event: Option<u64>,
}

impl PromptTaken {
    /// ADM-5 across a restart: whether this user message may be the record of a prompt
    /// `prompt_hash` written at the stream's event number `written_at_event` (None: a record of
    /// an older daemon, by position alone): its prompt, noted at or after the write, and past
    /// `floor` in its session (None: anywhere, `RecoveredWrite::records_taken`).
    pub fn may_carry(&self, prompt_hash: &str, floor: Option<&crate::observer::Cursor>, written_at_event: Option<u64>) -> bool {
        let noted_after = written_at_event.is_none_or(|written| self.noted_at_event.is_some_and(|noted| noted >= written));
        let past = floor.is_none_or(|floor| self.at.session == floor.session && self.at.position > floor.position);
        self.prompt_hash == prompt_hash && noted_after && past
    }
}

/// ADM-5 (managed): one of wakterm's `turn/start` lines the app-server answered
/// (`EventMark::answered_lines`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AnsweredLine {
    /// The line's JSON-RPC id (`prompt::turn_start_id`).
    pub id: String,
    /// Where the answer lay.
    pub at: crate::observer::Cursor,
    /// The turn it was accepted into; None: refused (MGD-7: no turn comes of it).
    pub turn: Option<TurnId>,
    /// That turn's start, or a user message in it, was reported after the answer: the
    /// line's turn runs (or ran), as the live wait ends (`correlation::wait_ended_by`).
    #[serde(default)]
    pub taken: bool,
}

impl EventMark {
    pub fn new(agent_id: AgentId) -> EventMark {
        EventMark {
            agent_id,
            incarnation: None,
            exited: false,
            stopped: false,
            attached: None,
            session: None,
            position: 0,
            fingerprint: None,
            prompts_taken: Vec::new(),
            answered_lines: Vec::new(),
            last_started: None,
            rewritten: None,
            had_session: false,
        }
    }

    /// ADM-5: a provider record the stream reports for the first time. A user message is kept
    /// with its prompt (`prompts_taken`); an answer to one of wakterm's lines, with its turn
    /// (`answered_lines`).
    pub fn note_prompts_and_lines(&mut self, event: &crate::observer::ObserverEvent) {
        use crate::observer::{Cursor, ObserverEvent};
        let (session, turn, position) = match event {
            ObserverEvent::TurnAccepted { id, turn, session, position } => {
                self.note_answered_line(id, Some(turn), Cursor { session: session.clone(), position: *position });
                return;
            }
            ObserverEvent::RequestRefused { id, session, position, .. } => {
                return self.note_answered_line(id, None, Cursor { session: session.clone(), position: *position });
            }
            ObserverEvent::TurnStarted { session, turn, position } => (session, Some(turn), *position),
            ObserverEvent::UserMessage { session, turn, position, .. } => (session, turn.as_ref(), *position),
            _ => return,
        };
        for line in self.answered_lines.iter_mut().filter(|line| line.turn.is_some() && line.turn.as_ref() == turn) {
            line.taken = true;
        }
        if let ObserverEvent::TurnStarted { turn, .. } = event {
            self.last_started = Some(turn.clone());
        }
        if let ObserverEvent::UserMessage { prompt_hash, .. } = event {
            if self.prompts_taken.len() >= crate::limits::MAX_PROMPTS_TAKEN_KEPT {
                self.prompts_taken.remove(0);
            }
            let at = Cursor { session: session.clone(), position };
            self.prompts_taken.push(PromptTaken { prompt_hash: prompt_hash.clone(), at, noted_at_event: None });
            assert!(self.prompts_taken.len() <= crate::limits::MAX_PROMPTS_TAKEN_KEPT);
        }
    }

    /// ADM-5: the app-server answered `id`; kept when it is one of wakterm's lines (its id
    /// has the daemon's form and size: a raw writer's id, of any size, is not kept). A line
    /// accepted into the turn last started was folded into it: taken. An acceptance is never
    /// replaced by a later error under the same id (a holder-socket client may send one
    /// under an id it read from the result): the line's turn may still be starting.
    fn note_answered_line(&mut self, id: &str, turn: Option<&TurnId>, at: crate::observer::Cursor) {
        if !crate::prompt::is_turn_start_id(id) || id.len() > crate::prompt::MAX_TURN_START_ID_BYTES {
            return;
        }
        if let Some(kept) = self.answered_lines.iter().position(|line| line.id == id) {
            if turn.is_none() && self.answered_lines[kept].turn.is_some() {
                return;
            }
            self.answered_lines.remove(kept);
        }
        if self.answered_lines.len() >= crate::limits::MAX_ANSWERED_LINES_KEPT {
            self.answered_lines.remove(0);
        }
        let taken = turn.is_some() && self.last_started.as_ref() == turn;
        self.answered_lines.push(AnsweredLine { id: id.to_string(), at, turn: turn.cloned(), taken });
        assert!(self.answered_lines.len() <= crate::limits::MAX_ANSWERED_LINES_KEPT);
    }

    /// ADM-5: the mark's place moved back or its session was lost (a rollout replaced or cut
    /// back keeps its session id while its positions start again lower): what it noted of
    /// turns no longer compares with positions read from now on (a review). The answered
    /// lines stay: that the app-server refused a line, or accepted it into a turn (and that
    /// the turn then ran), is no place in a file but a fact about the line, and the ids name
    /// one line and one turn of this process (a new process resets the whole mark). Only
    /// `AnsweredLine::at` is a place, and a wait for an accepted turn's start ends by that
    /// turn alone (`correlation::wait_ended_by`). Cleared here, a loss between a line's
    /// acceptance and its turn's start made a restart wait for the line's own answer, which
    /// the resume never replays: RF-8's minute for a line long read (exploration seed
    /// 3640021).
    pub fn forget_turns(&mut self) {
        self.prompts_taken.clear();
        self.last_started = None;
    }

    /// EV-7: the session the stream reports: the one it reported attached, else the one whose
    /// records it reported since its last loss. A resume's loss of a disproved earlier file of
    /// the session the tail still reads is reported `observer.lost`, and the tail's records of
    /// that session go on without a new attach; their session's next loss must still be
    /// reported and clear the mark, or a replacement file's records at positions the mark
    /// covers would never be reported (seed 2500006902).
    pub fn reported_session(&self) -> Option<&SessionId> {
        self.attached.as_ref().or(self.session.as_ref())
    }

    /// EV-4: a provider record at (`session`, `position`) was already appended.
    pub fn covers(&self, session: &SessionId, position: u64) -> bool {
        self.session.as_ref() == Some(session) && position <= self.position
    }
}
