//! Admission: validation, idempotency, resolution, the authoritative checks before the one
//! pane write, and the receipt (ADM-*, IDEM-*, INP-*).

use crate::agent::{AgentEntry, Harness};
use crate::engine::{Admission, Engine, PersistPurpose, Step};
use crate::fingerprint::{fingerprint, same_input};
use crate::ids::{canonical_uuid, AgentId, RequestId};
use crate::io::{AdmitCommand, DeliveryOutcome, Output};
use crate::limits::*;
use crate::observer::{Composer, Cursor, ObserverSnapshot, ObserverStatus, TurnState};
use crate::pane_look::PaneLook;
use crate::prompt::{admission_bytes, prompt_hash, validate_prompt, PasteMode};
use crate::receipt::{Classification, Operation, Receipt, ReceiptContext, ReturnMode, WriteState};
use crate::request::{EvidenceStep, Phase, RequestRecord};
use crate::terminal::TerminalState;

/// A reason an admission cannot go on: always a definitive rejection.
pub struct Blocker {
    pub classification: Classification,
    pub reason: &'static str,
    pub detail: String,
}

pub(crate) fn blocker(classification: Classification, reason: &'static str, detail: impl Into<String>) -> Blocker {
    Blocker { classification, reason, detail: detail.into() }
}

/// ADM-16: an agent's state as the catalog shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgentState {
    Stopped,
    Idle,
    Busy,
    Unknown,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Stopped => "stopped",
            AgentState::Idle => "idle",
            AgentState::Busy => "busy",
            AgentState::Unknown => "unknown",
        }
    }
}

/// Why an immediate return-final admission would be refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogBlocker {
    pub classification: Classification,
    pub reason: &'static str,
    pub detail: String,
}

/// ADM-16: the engine's answer for one catalog entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CatalogView {
    pub state: AgentState,
    /// None: a return-final admission would pass every check now.
    pub return_final_blocker: Option<CatalogBlocker>,
}

/// How much of the agent's state a check may look at.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Before the observer refresh: registered facts only.
    Facts,
    /// After the refresh and again after registration, immediately before the write (ADM-4).
    Authoritative,
}

impl Engine {
    /// HIST-2: an id the engine does not hold is looked up in the store first, also for input
    /// that will be refused: IDEM-7 needs to know whether the id was written.
    pub(crate) fn on_admit(&mut self, command: AdmitCommand) {
        let request_id = RequestId::parse(&command.request_id).ok();
        match request_id {
            Some(request_id) if self.park_unless_known(&request_id, crate::history::Parked::Admit(command.clone())) => {}
            _ => self.admit_known(command),
        }
    }

    /// An admission whose id is in memory, known absent, or invalid.
    pub(crate) fn admit_known(&mut self, command: AdmitCommand) {
        let op = command.op;
        let request_id = match stateless_check(&command) {
            Ok(request_id) => request_id,
            Err(mut receipt) => {
                // IDEM-7: this input was not written, but a known id's own prompt may have been:
                // a caller told "retry-safe" would resend it under a new id (a review saw an
                // empty or ESC-bearing replay of a written id answered retry-safe).
                if receipt.request_id.as_ref().is_some_and(|id| self.admissions.contains_key(id) || self.requests.contains_key(id)) {
                    receipt.retry_safe = false;
                }
                return self.reply(op, *receipt);
            }
        };
        let mut context = ReceiptContext {
            request_id: Some(request_id.clone()),
            agent_id: None,
            incarnation: None,
            operation: command.operation,
            return_mode: command.return_mode,
        };
        if self.answer_known_request(&request_id, &command, op, &context) {
            return;
        }
        let agent_id = match self.resolve(&command) {
            Ok(agent_id) => agent_id,
            Err(problem) => {
                return self.reply(op, Receipt::rejection(problem.classification, problem.reason, problem.detail, context))
            }
        };
        // IDEM-6: a released id tries again under the fingerprint it keeps (which matched).
        let fingerprint = match self.requests.get(&request_id) {
            Some(released) => released.fingerprint.clone(),
            None => fingerprint(&agent_id, &command),
        };
        context.agent_id = Some(agent_id.clone());
        context.incarnation = self.agents[&agent_id].facts.incarnation.clone();
        if self.admissions.len() >= MAX_INFLIGHT_ADMISSIONS || self.requests.len() >= MAX_REQUEST_RECORDS {
            let detail = "the engine's admission or request table is full";
            return self.reply(op, Receipt::rejection(Classification::InternalFailure, "capacity_exhausted", detail, context));
        }
        let mut admission = Admission {
            prompt_hash: prompt_hash(&command.prompt),
            command,
            request_id: request_id.clone(),
            fingerprint,
            agent_id: agent_id.clone(),
            callers: vec![op],
            step: Step::Registering,
            step_deadline_ms: None,
            pending_receipt: None,
            deferred: Vec::new(),
            replaced: None,
            steer_turn: None,
            ack_turn: None,
            refused: None,
            lost_while_awaiting: false,
            pane_writes: None,
        };
        if let Some(problem) = self.blocker_for(&admission, Stage::Facts) {
            let receipt = Receipt::rejection(problem.classification, problem.reason, problem.detail, context);
            return self.reply(op, receipt);
        }
        // ADM-12: claim the agent; ADM-3: refresh the observer off the reactor.
        let refresh_id = self.fresh_id();
        admission.step = Step::Refreshing { refresh_id };
        admission.step_deadline_ms = Some(self.now_ms + REFRESH_TIMEOUT_MS);
        self.agents.get_mut(&agent_id).expect("resolved").claim = Some(request_id.clone());
        self.refreshes.insert(refresh_id, request_id.clone());
        self.admissions.insert(request_id, admission);
        self.push(Output::RefreshObserver { refresh_id, agent_id });
    }

    /// IDEM-2, IDEM-3, IDEM-5: answers a request id that is already in flight or durable.
    /// Returns true when the call was answered.
    fn answer_known_request(&mut self, request_id: &RequestId, command: &AdmitCommand, op: crate::io::OpId, context: &ReceiptContext) -> bool {
        // IDEM-3, IDEM-7: this input was not written (a definitive rejection), but the id's own
        // prompt may have been, so retrying this input under a new id is not known to be safe.
        let conflict_because = |detail: String| {
            let mut receipt = Receipt::rejection(Classification::Invalid, "request_id_conflict", detail, context.clone());
            receipt.retry_safe = false;
            receipt
        };
        let conflict = || conflict_because("this request id was already used with different input (or for another agent or process incarnation)".to_string());
        if !self.admissions.contains_key(request_id) && !self.requests.contains_key(request_id) {
            return false; // a new id: nothing to compare, and the target is resolved once, later
        }
        let resolved = self.resolve_known(command);
        // IDEM-1: the seed's key is the input plus the process incarnation; a caller that names
        // one must name the one the id was admitted under (`send` names none).
        let same = |stored: &str, incarnation: Option<&str>| {
            same_input(stored, resolved.as_ref(), command)
                && command.incarnation.as_deref().is_none_or(|given| Some(given) == incarnation)
        };
        if let Some(admission) = self.admissions.get(request_id) {
            let incarnation = admission.command.incarnation.clone().or_else(|| {
                self.agents.get(&admission.agent_id).and_then(|a| a.facts.incarnation.as_ref().map(|i| i.0.clone()))
            });
            let matches = same(&admission.fingerprint, incarnation.as_deref());
            let full = admission.callers.len() >= MAX_JOINED_CALLERS;
            if !matches {
                self.reply(op, conflict());
            } else if full {
                // IDEM-7: the admission this caller would join may write; say so.
                let detail = "too many callers are waiting on this request id; replay the same id later to learn its outcome, never retry under a new id";
                let receipt = Receipt::outcome_unknown("too_many_joined_callers", detail, context.clone());
                self.reply(op, receipt);
            } else {
                self.admissions.get_mut(request_id).expect("present").callers.push(op);
            }
            return true;
        }
        let Some(record) = self.requests.get(request_id) else { return false };
        if !same(&record.fingerprint, Some(&record.incarnation.0)) {
            // IDEM-3, also for a released id: its fingerprint stays recorded. A target that names
            // no agent now, with input that matches under the gone agent the id was admitted for
            // (a replay by name after `agent stop`), is still a conflict: no record keeps the name
            // it was admitted under, so another agent's name, or a typo, would look the same. It
            // says so, and how to replay (it said "different input", the wrong cause: a hostile
            // run; replaying it here, a review found, answered any unknown name with the receipt).
            let gone = resolved.is_none() && !self.agents.contains_key(&record.agent_id);
            let receipt = match gone && same_input(&record.fingerprint, Some(&record.agent_id), command) {
                true => conflict_because(format!(
                    "no agent is named {} now; this request id was admitted for agent {}, which is gone: replay it with that agent id as the target for its stored receipt, or read its outcome with `agent request get {}` (MCP: request_get)",
                    echoed(&command.target), record.agent_id, request_id
                )),
                false => conflict(),
            };
            self.reply(op, receipt);
            return true;
        }
        if record.phase == Phase::Released {
            // IDEM-6: the same input may try again, for the agent its row names. A version 1
            // fingerprint leaves the agent out, so a name that now resolves to another agent
            // matched it, and the store refused the registration on every try (the row's agent
            // cannot change) as `store_commit_failed`, retry-safe (found by a review).
            if resolved.as_ref().is_some_and(|agent_id| agent_id != &record.agent_id) {
                self.reply(op, conflict());
                return true;
            }
            return false;
        }
        let mut receipt = record.receipt.clone().expect("a non-released, non-in-flight request has its receipt");
        receipt.replayed = true;
        self.reply(op, receipt);
        true
    }

    /// IDEM-1: the agent a known request's caller names, for comparing inputs: an exact id is
    /// taken as given (no catalog, seed 000); a name or id through the catalog, else an id as
    /// given (the agent may be gone). None: the target names no agent we can tell.
    fn resolve_known(&self, command: &AdmitCommand) -> Option<AgentId> {
        let as_given = || canonical_uuid(&command.target).and_then(|c| AgentId::parse(&c).ok());
        match command.exact_agent_id {
            true => as_given(),
            false => self.resolve(command).ok().or_else(as_given),
        }
    }

    /// ADM-1: by exact agent id, or by display name (then by id when the name is a UUID).
    pub(crate) fn resolve(&self, command: &AdmitCommand) -> Result<AgentId, Blocker> {
        if command.exact_agent_id {
            let Some(canonical) = canonical_uuid(&command.target) else {
                let detail = format!("an exact agent id (--exact-agent-id) must be a UUID, got {}", echoed(&command.target));
                return Err(blocker(Classification::Invalid, "agent_id_malformed", detail));
            };
            let agent_id = AgentId::parse(&canonical).expect("canonical uuid parses");
            return match self.agents.contains_key(&agent_id) {
                true => Ok(agent_id),
                false => Err(blocker(Classification::Unavailable, "agent_unknown", format!("no agent has id {agent_id}"))),
            };
        }
        if let Some(entry) = self.agents.values().find(|a| a.facts.name == command.target) {
            return Ok(entry.facts.agent_id.clone());
        }
        if let Some(agent_id) = canonical_uuid(&command.target).and_then(|c| AgentId::parse(&c).ok()) {
            if self.agents.contains_key(&agent_id) {
                return Ok(agent_id);
            }
        }
        let mut detail = no_agent_named(&command.target);
        // LIVE-1: an agent whose holder was slow to answer at the daemon's start is registered
        // once it answers (up to STARTUP_PENDING_BOUND); until then its name is unknown here.
        let unregistered = self.events.recovered_unregistered.iter().filter(|id| self.events.marks.get(*id).is_some_and(|mark| !mark.stopped)).count();
        if unregistered > 0 {
            detail.push_str(&format!(
                " yet: the daemon is still re-attaching {unregistered} agent(s) it knew before its start, whose holders have not answered; try again in a few seconds (nothing was written)"
            ));
        }
        Err(blocker(Classification::Unavailable, "agent_unknown", detail))
    }

    /// The one decision procedure for "may this admission write now?" (ADM-2, ADM-4..7,
    /// ADM-12, CORR-4, CORR-8). `Stage::Facts` skips what needs an observer refresh.
    fn blocker_for(&self, admission: &Admission, stage: Stage) -> Option<Blocker> {
        let found = self.blocker_for_command(&admission.command, &admission.agent_id, Some(&admission.request_id), stage);
        let pty = self.agents.get(&admission.agent_id).is_some_and(|agent| agent.facts.transport == crate::agent::Transport::Pty);
        found.map(|refusal| no_steer_hint(&admission.command, pty, refusal))
    }

    /// ADM-16: what the catalog reports of an agent, decided by the same procedure an
    /// immediate return-final admission would meet (with the current view, no refresh).
    pub fn catalog_view(&self, agent_id: &AgentId) -> Option<CatalogView> {
        let agent = self.agents.get(agent_id)?;
        let probe = AdmitCommand {
            op: crate::io::OpId(0),
            operation: Operation::Admit,
            target: agent_id.to_string(),
            exact_agent_id: true,
            incarnation: None,
            request_id: String::new(),
            prompt: String::new(),
            paste_mode: PasteMode::Bracketed,
            return_mode: ReturnMode::ReturnFinal,
            final_timeout_ms: 0,
            generated_id: false,
            share_prompt: false,
            write_nonce: 0, // a probe writes nothing
            no_steer: false, // an admission never steers
        };
        let pending = agent.claim.is_some() || agent.awaiting_turn_after.is_some();
        let state = match (&agent.facts.incarnation, agent.view.as_ref().map(|v| &v.turn)) {
            (None, _) => AgentState::Stopped,
            (Some(_), Some(TurnState::Idle { .. })) if !pending => AgentState::Idle,
            (Some(_), Some(TurnState::Idle { .. }) | Some(TurnState::Busy { .. })) => AgentState::Busy,
            (Some(_), Some(TurnState::Unknown) | None) => AgentState::Unknown,
        };
        let return_final_blocker = self.blocker_for_command(&probe, agent_id, None, Stage::Authoritative).map(|b| CatalogBlocker {
            classification: b.classification,
            reason: b.reason,
            detail: b.detail,
        });
        Some(CatalogView { state, return_final_blocker })
    }

    pub(crate) fn blocker_for_command(&self, command: &AdmitCommand, agent_id: &AgentId, request_id: Option<&RequestId>, stage: Stage) -> Option<Blocker> {
        let Some(agent) = self.agents.get(agent_id) else {
            return Some(blocker(Classification::Unavailable, "agent_unknown", "the agent was removed"));
        };
        let Some(current) = &agent.facts.incarnation else {
            return Some(blocker(Classification::Unavailable, "agent_not_running", "no process runs behind the agent"));
        };
        if let Some(expected) = &command.incarnation {
            if expected != &current.0 {
                let detail = format!("the agent's incarnation is now {}", current.0);
                return Some(blocker(Classification::StaleIncarnation, "incarnation_changed", detail));
            }
        }
        let return_final = command.return_mode == ReturnMode::ReturnFinal;
        if return_final && agent.facts.harness != Harness::Codex {
            let detail = "return-final needs Codex turn ids and cursors; this harness has none";
            return Some(blocker(Classification::Unsupported, "harness_not_supported", detail));
        }
        if return_final && command.paste_mode == PasteMode::Raw {
            let detail = "a raw paste cannot be proven submitted, so it cannot arm a return-final request";
            return Some(blocker(Classification::Unsupported, "raw_paste_return_final", detail));
        }
        if agent.claim.as_ref().is_some_and(|claim| Some(claim) != request_id) {
            return Some(blocker(Classification::Busy, "admission_in_progress", "another admission is writing to this agent"));
        }
        if stage == Stage::Facts {
            return None;
        }
        // ADM-5: a PTY wait's bound, for a plain send too (written whatever the wait, with or
        // without a view: a review found the bound's check below the view's, so a send with no
        // view went past it).
        if command.may_steer() && agent.awaiting_prompts.len() >= crate::agent::MAX_AWAITED_PROMPTS {
            return Some(awaiting_blocker(agent.view.as_ref().map_or(Composer::Unknown, |view| view.composer)));
        }
        let Some(view) = &agent.view else {
            return unobserved_blocker(command, agent, agent.refresh_error.as_deref());
        };
        if &view.incarnation != current || view.process != agent.facts.process {
            let detail = "the observer verified a different process than the one registered";
            return Some(blocker(Classification::StaleIncarnation, "process_changed", detail));
        }
        if let Some(problem) = managed_blocker(agent, command, view) {
            return Some(problem);
        }
        // ADM-13: plain one-way `send` keeps its interactive behaviour and may steer a running
        // turn, but never destroys a draft or answers an interactive question. ADM-18: unless it
        // asked never to steer; then it passes the idle checks below.
        if command.may_steer() && agent.facts.transport == crate::agent::Transport::Pty {
            return composer_blocker(view.composer);
        }
        // MGD-3: a managed plain send may steer a running turn, but needs the live stream (its
        // acknowledgement) and never races a written prompt whose turn has not started.
        if command.may_steer() {
            if let ObserverStatus::Unavailable { reason } = &view.status {
                return Some(blocker(Classification::ObserverFailure, "observer_unavailable", reason.clone()));
            }
            if agent.awaiting_turn_after.is_some() {
                return Some(awaiting_blocker(view.composer));
            }
            return None;
        }
        if let ObserverStatus::Unavailable { reason } = &view.status {
            return Some(blocker(Classification::ObserverFailure, "observer_unavailable", reason.clone()));
        }
        match &view.turn {
            TurnState::Busy { .. } => {
                return Some(blocker(Classification::Busy, "turn_active", "the agent is running a turn"))
            }
            TurnState::Unknown => {
                return Some(blocker(Classification::ObserverFailure, "turn_state_unknown", "the observer cannot tell whether the agent is idle"))
            }
            TurnState::Idle { .. } => {}
        }
        if agent.awaiting_turn_after.is_some() {
            return Some(awaiting_blocker(view.composer));
        }
        if let Some(problem) = other_enter_blocker(agent, self.now_ms) {
            return Some(problem);
        }
        if let Some(problem) = composer_blocker(view.composer) {
            return Some(problem);
        }
        // CORR-4 (PTY): a completed baseline turn with a cursor. CORR-8 (managed): the durable
        // event stream is live (attached, with a session); its sequence is the cursor.
        let has_baseline = match agent.facts.transport {
            crate::agent::Transport::Pty => {
                matches!(view.turn, TurnState::Idle { last_completed: Some(_) }) && view.session.is_some()
            }
            crate::agent::Transport::AppServer => view.session.is_some(),
        };
        if return_final && !has_baseline {
            let detail = "the observer has no cursor for a completed baseline turn; a one-way admission is still possible";
            return Some(blocker(Classification::ObserverFailure, "no_baseline_cursor", detail));
        }
        None
    }

    pub(crate) fn on_refreshed(&mut self, refresh_id: u64, agent_id: &AgentId, snapshot: Result<ObserverSnapshot, String>, pane: PaneLook) {
        let now_ms = self.now_ms;
        // ADM-19, whoever looked: how far a refresh that read the rollout to its end read.
        let read = snapshot.as_ref().ok().and_then(ObserverSnapshot::read_to_end);
        if let Some(agent) = self.agents.get_mut(agent_id) {
            agent.note_other_enter(now_ms, pane.other_enter, read);
        }
        let pane_writes = pane.writes;
        if let Some(probed) = self.probes.remove(&refresh_id) {
            return self.on_probe_answered(&probed, snapshot);
        }
        let request_id = self.refreshes.remove(&refresh_id);
        if let Some(admission) = request_id.as_ref().and_then(|id| self.admissions.get_mut(id)) {
            admission.pane_writes = pane_writes;
        }
        if let Some(submission) = request_id.as_ref().and_then(|id| self.submissions.get_mut(id)) {
            submission.pane_writes = pane_writes;
        }
        let Some(request_id) = request_id else {
            // Late: its admission timed out and the view was cleared (ADM-3). While nothing
            // newer came, it is the agent's view again, as a monitor snapshot would be; else
            // the catalog said `unknown` until something changed, since the monitor sent only
            // what differed from what the refresh saw (MON-1; a review found it; its first run
            // after a refresh now sends its own snapshot, MON-3's `snapshot_is_news`). Not over a
            // view that came since: the refresh read the screen before it waited for the
            // observer (a review of the fix found it), so a monitor snapshot sent meanwhile
            // is newer.
            let cleared = self.agents.get(agent_id).is_some_and(|agent| agent.view.is_none());
            if let (Ok(snapshot), true) = (snapshot, cleared) {
                self.on_snapshot(agent_id, snapshot);
            }
            return;
        };
        if self.submissions.contains_key(&request_id) {
            return self.submit_after_refresh(&request_id, Some(snapshot));
        }
        match snapshot {
            Ok(snapshot) => self.apply_snapshot(agent_id, snapshot),
            Err(reason) => {
                if let Some(agent) = self.agents.get_mut(agent_id) {
                    agent.view = None;
                    agent.refresh_error = Some(reason);
                }
            }
        }
        self.after_refresh(&request_id);
    }

    /// OBS-4: a snapshot with no session ("no rollout yet, idle") from a process the stream
    /// reported a session of (`EventMark::had_session`, durable) says nothing of that session:
    /// unavailable. The runtime's first look after a restart comes before its expectation and,
    /// without a checkpoint to say the process had a session, or at a later restart (the
    /// session lost at the first), took a Codex writing a removed rollout for one before its
    /// first turn: an admission typed into it, perhaps mid-turn (a review; the simulator).
    fn awaiting_reported_session(&self, agent_id: &AgentId, mut snapshot: ObserverSnapshot) -> ObserverSnapshot {
        let fresh = snapshot.status == ObserverStatus::Attached && snapshot.session.is_none();
        let mark = self.events.marks.get(agent_id).filter(|m| m.incarnation.as_ref() == Some(&snapshot.incarnation));
        if fresh && mark.is_some_and(|m| m.had_session && !m.exited) {
            let reason = "the agent's process wrote a rollout the stream reported, and holds none now".to_string();
            (snapshot.status, snapshot.turn) = (ObserverStatus::Unavailable { reason }, TurnState::Unknown);
        }
        snapshot
    }

    pub(crate) fn apply_snapshot(&mut self, agent_id: &AgentId, snapshot: ObserverSnapshot) {
        let snapshot = self.awaiting_reported_session(agent_id, snapshot); // OBS-4
        self.replay_check_snapshot(agent_id, &snapshot); // EV-13
        let now_ms = self.now_ms;
        // An admission that has written (its submitted marker may still be committing) must be
        // ended by the same evidence once it is armed (RF-5), so its wait is not cleared now.
        let written_in_flight = self
            .agents
            .get(agent_id)
            .and_then(|a| a.claim.as_ref())
            .and_then(|claim| self.admissions.get(claim))
            .is_some_and(|a| !matches!(a.step, Step::Refreshing { .. } | Step::Registering));
        // ADM-12: a write given up on may still land (its claim held, `LandingWrite`): an empty
        // composer says nothing of bytes not landed yet, so its wait stays (it ended at the
        // grace, and the claim's release at the late landing let the next prompt go over it).
        let landing = self.landing_writes.values().any(|l| &l.agent_id == agent_id);
        let Some(agent) = self.agents.get_mut(agent_id) else { return };
        agent.refresh_error = None;
        let mut view = crate::agent::ObserverView {
            status: snapshot.status,
            session: snapshot.session,
            position: snapshot.position,
            turn: snapshot.turn,
            composer: snapshot.composer,
            incarnation: snapshot.incarnation,
            process: snapshot.process,
        };
        // A snapshot older than events already applied must not roll the turn state back.
        // Positions compare only within one process: a new one (a managed agent's new holder
        // starts its stream over at 0, in the same thread) says where it is from scratch, and a
        // replaced process's view (its events may be replayed late, ADM-17) is no floor for it.
        if let Some(current) = &agent.view {
            if current.session == view.session && current.incarnation == view.incarnation && current.position > view.position {
                view.position = current.position;
                view.turn = current.turn.clone();
            }
        }
        // ADM-5: a written prompt that neither started a turn nor sits in the composer long
        // after the write was consumed some other way; keeping the agent busy forever would
        // only trade safety for nothing.
        // Either only for a wait of a write that is over: not one in flight, nor one given up on
        // that may still land.
        let waited = |ms: u64| !written_in_flight && !landing && agent.awaiting_turn_after.is_some_and(|since| now_ms >= since + ms);
        let settled = matches!(view.turn, TurnState::Idle { .. }) && view.composer == Composer::Empty;
        let expired = settled && waited(agent.no_turn_grace_ms());
        // RF-8 for a PTY wait on an idle agent whose composer cannot be read: a minute without
        // the prompt's own user message means it was recorded under other text (a slash
        // command Codex expands) or never will be; nothing else would end the wait (a review).
        // Not while a turn runs (a prompt the TUI queued behind it is recorded only when it
        // ends: a second review) nor over a draft or a question (the prompt may sit there).
        // The requests are RF-8's own to end.
        let unreadable = matches!(view.turn, TurnState::Idle { .. }) && view.composer == Composer::Unknown;
        let timed_out = unreadable && agent.facts.transport == crate::agent::Transport::Pty && waited(TURN_START_TIMEOUT_MS);
        if expired || timed_out {
            agent.end_wait();
        }
        agent.view = Some(view);
        if expired {
            self.end_requests_without_a_turn(agent_id);
        }
    }

    /// RF-7: a return-final prompt written a grace period ago that opened no turn, while the
    /// agent is idle with an empty composer, went somewhere else (an interactive dialog it
    /// answered, a cleared composer): its turn will never come. It was written, so the end is
    /// `indeterminate`, never `delivery_failed`.
    fn end_requests_without_a_turn(&mut self, agent_id: &AgentId) {
        let grace_ms = self.agents.get(agent_id).map_or(AWAITING_TURN_GRACE_MS, AgentEntry::no_turn_grace_ms);
        let stale: Vec<RequestId> = self
            .correlating_requests_of(agent_id, false)
            .into_iter()
            .filter(|id| self.requests[id].phase == Phase::Submitted && !self.candidates.contains_key(id))
            // TIME-2: a request an earlier daemon registered is aged on the monotonic clock (by
            // the recorded time, a wall clock stepped back between the daemons kept it here
            // until RF-8's timeout).
            .filter(|id| self.requests[id].age_ms(self.requests[id].registered_ms, self.now_ms, self.run_clock.as_ref()) >= grace_ms)
            .collect();
        for request_id in stale {
            self.finish(&request_id, TerminalState::Indeterminate, Some("no_turn_started"), None, None);
        }
    }

    /// After the refresh (or its timeout): decide, then register durably before writing.
    fn after_refresh(&mut self, request_id: &RequestId) {
        let admission = self.admissions.get(request_id).expect("refreshing admission exists");
        if let Some(problem) = self.blocker_for(admission, Stage::Authoritative) {
            let receipt = self.rejection_for(request_id, problem);
            return self.finish_admission(request_id, receipt);
        }
        let record = self.registration_record(request_id);
        // A released record of the same input is kept aside: if this registration fails to
        // commit, it comes back (with its pending release retry), so the store still converges.
        let replaced = self.requests.insert(request_id.clone(), record);
        self.admissions.get_mut(request_id).expect("exists").replaced = replaced;
        let admission = self.admissions.get_mut(request_id).expect("exists");
        admission.step = Step::Registering;
        admission.step_deadline_ms = None;
        self.persist_record(PersistPurpose::Register(request_id.clone()), request_id);
    }

    /// IDEM-4: the durable registration: fingerprint, the armed cursor and the evidence the
    /// request will be correlated against. The prompt text itself is stored only when the
    /// caller opted in (EV-12).
    fn registration_record(&self, request_id: &RequestId) -> RequestRecord {
        let admission = &self.admissions[request_id];
        let agent = &self.agents[&admission.agent_id];
        let view = agent.view.as_ref();
        let session = view.and_then(|v| v.session.clone());
        let armed = session.clone().map(|session| Cursor { session, position: view.map_or(0, |v| v.position) });
        let baseline_turn = match view.map(|v| &v.turn) {
            Some(TurnState::Idle { last_completed }) => last_completed.clone(),
            _ => None,
        };
        let command = &admission.command;
        let return_final = command.return_mode == ReturnMode::ReturnFinal;
        let deadline_ms = (return_final && command.final_timeout_ms > 0).then(|| self.now_ms + command.final_timeout_ms);
        let mut record = RequestRecord {
            request_id: request_id.clone(),
            agent_id: admission.agent_id.clone(),
            fingerprint: admission.fingerprint.clone(),
            operation: command.operation,
            return_mode: command.return_mode,
            paste_mode: command.paste_mode,
            final_timeout_ms: command.final_timeout_ms,
            incarnation: agent.facts.incarnation.clone().expect("checked running"),
            process: agent.facts.process,
            session,
            correlation_source: return_final.then(|| self.source_of(&admission.agent_id)),
            armed_event_sequence: (return_final && self.source_of(&admission.agent_id) == crate::receipt::CorrelationSource::AgentApiEvents)
                .then(|| self.events_published_through()),
            armed,
            written_past: None,
            written_at_event: None,
            write_unknown: false,
            // A restart that finds it unfinished must know it too (a review: set only at the
            // write, a send the crash cut off hid the queued prompt its wait was for).
            joined_wait: !agent.awaiting_prompts.is_empty(),
            over_unseen_composer: agent.facts.transport == crate::agent::Transport::Pty && agent.view.as_ref().is_none_or(|view| view.composer != crate::observer::Composer::Empty),
            write_unknown_since_ms: None,
            baseline_turn,
            prompt_hash: admission.prompt_hash.clone(),
            shared_prompt: command.share_prompt.then(|| command.prompt.clone()),
            turn_start_id: agent.facts.managed.as_ref().map(|_| crate::prompt::turn_start_id(request_id.as_str(), command.write_nonce)),
            phase: Phase::Registered,
            receipt: None,
            bound_turn: None,
            bound_at: None,
            steered: false,
            deadline_ms,
            terminal: None,
            registered_ms: self.now_ms,
            updated_ms: self.now_ms,
            run_clock: self.run_clock.clone(),
            evidence: Vec::new(),
            evidence_dropped: 0,
        };
        let seen = match view {
            Some(v) => format!("refresh saw the agent {}, composer {}, observer {}", v.turn, format!("{:?}", v.composer).to_lowercase(), v.status),
            None => "no observer view".to_string(),
        };
        let cursor = record.armed.as_ref().map_or("no cursor".to_string(), |c| format!("armed at {}:{}", c.session.0, c.position));
        record.note(self.now_ms, EvidenceStep::Registered, format!("{seen}; {cursor}; incarnation {}", record.incarnation.0));
        record
    }

    pub(crate) fn on_registered(&mut self, request_id: &RequestId, result: Result<(), String>) {
        if let Err(error) = result {
            // ADM-11: the registration did not commit, so nothing may be written.
            match self.admissions.get_mut(request_id).and_then(|a| a.replaced.take()) {
                Some(previous) => {
                    self.requests.insert(request_id.clone(), previous);
                    // Re-commit it: the store may hold a newer registration of this id by now.
                    self.progress_retries.insert(request_id.clone(), self.now_ms + PERSIST_RETRY_MS);
                }
                None => {
                    self.requests.remove(request_id);
                }
            }
            let problem = blocker(Classification::InternalFailure, "store_commit_failed", error);
            let receipt = self.rejection_for(request_id, problem);
            return self.finish_admission(request_id, receipt);
        }
        // IDEM-6: the store now holds this registration; a retry of the id's earlier state (a
        // failed release's) must not land over it or over the commits that follow.
        self.progress_retries.remove(request_id);
        // ADM-4: re-check incarnation and idle state immediately before the write.
        let admission = self.admissions.get(request_id).expect("registering admission exists");
        if let Some(problem) = self.blocker_for(admission, Stage::Authoritative) {
            let receipt = self.rejection_for(request_id, problem);
            return self.release(request_id, receipt);
        }
        self.start_write(request_id);
    }

    /// ADM-8: prompt text and Enter as ONE pane write.
    fn start_write(&mut self, request_id: &RequestId) {
        let delivery_id = self.fresh_id();
        let agent = self.agents.get(&self.admissions[request_id].agent_id);
        let managed = agent.and_then(|a| a.facts.managed.clone());
        let busy_turn = agent.and_then(|a| a.view.as_ref()).and_then(|v| match &v.turn {
            TurnState::Busy { turn } => turn.clone(),
            _ => None,
        });
        let admission = self.admissions.get_mut(request_id).expect("exists");
        admission.steer_turn = busy_turn.filter(|_| managed.is_some());
        let managed_line = managed.clone();
        let bytes = match managed {
            // MGD-3: checked by `blocker_for_command` just before (ADM-4).
            Some(ids) => {
                // MGD-7: the id a refusal must name, registered with the record (durable before
                // this write; an agent learned managed only since is named in it now).
                let id = crate::prompt::turn_start_id(request_id.as_str(), admission.command.write_nonce);
                let record = self.requests.get_mut(request_id).expect("registered before the write");
                assert!(record.turn_start_id.as_ref().is_none_or(|registered| registered == &id), "one turn/start id per request");
                record.turn_start_id = Some(id.clone());
                crate::prompt::managed_turn_start(&ids.thread_id, &id, &admission.command.prompt)
            }
            None => admission_bytes(&admission.command.prompt, admission.command.paste_mode),
        };
        admission.step = Step::Writing { delivery_id };
        admission.step_deadline_ms = Some(self.now_ms + DELIVERY_TIMEOUT_MS);
        let agent_id = admission.agent_id.clone();
        // ADM-4: a PTY write starts with Ctrl-U; a JSON-RPC line erases nothing.
        let expect_writes = admission.pane_writes.filter(|_| managed_line.is_none());
        // ADM-5: a turn the stream notes from here on may be this write's (the observer's
        // records can reach the engine before the write's outcome does).
        let next_event = self.events.next_sequence;
        let record = self.requests.get_mut(request_id).expect("registered before the write");
        record.written_at_event = Some(next_event);
        let incarnation = record.incarnation.clone();
        self.deliveries.insert(delivery_id, request_id.clone());
        if managed_line.is_none() {
            let hash = self.admissions[request_id].prompt_hash.clone();
            let now_ms = self.now_ms;
            if let Some(agent) = self.agents.get_mut(&agent_id) {
                agent.note_own_prompt_asked(&hash, now_ms); // ADM-19
            }
        }
        let request_id = request_id.clone();
        self.push(Output::Deliver { delivery_id, request_id, agent_id, incarnation, bytes, expect_writes });
    }

    /// IDEM-6: a registered admission is definitively rejected after all: commit the release,
    /// then hand out `receipt` (`on_released`).
    fn release(&mut self, request_id: &RequestId, receipt: Receipt) {
        let record = self.requests.get_mut(request_id).expect("registered");
        record.phase = Phase::Released;
        // EV-12: the text was shared for the request's `request.admitted`, which a released
        // request never gets: the record keeps only its hash, as an unshared prompt's does.
        record.shared_prompt = None;
        let admission = self.admissions.get_mut(request_id).expect("exists");
        admission.step = Step::Releasing;
        admission.step_deadline_ms = None;
        admission.pending_receipt = Some(receipt);
        self.persist_record(PersistPurpose::Release(request_id.clone()), request_id);
    }

    pub(crate) fn on_released(&mut self, request_id: &RequestId) {
        // Even if the release did not commit, the receipt is true: nothing was written. The
        // commit is retried; a restart before it lands finds the registration and reports it
        // indeterminate (REC-1), which claims less, never more.
        let receipt = self.admissions.get_mut(request_id).and_then(|a| a.pending_receipt.take());
        let receipt = receipt.expect("a releasing admission holds its receipt");
        self.finish_admission(request_id, receipt);
    }

    pub(crate) fn on_delivered(&mut self, delivery_id: u64, outcome: DeliveryOutcome, record_end: Option<Cursor>) {
        let Some(request_id) = self.deliveries.remove(&delivery_id) else {
            return self.landed_write(delivery_id, outcome.wrote_nothing()); // late: given up on
        };
        let written = match &outcome {
            DeliveryOutcome::Complete => "the whole prompt and Enter were written in one write".to_string(),
            DeliveryOutcome::Refused { reason } => format!("refused before the first byte: {reason}"),
            DeliveryOutcome::InputSinceLook { detail } => format!("refused before the first byte (ADM-4): {detail}"),
            DeliveryOutcome::Failed { bytes_written, error } => format!("failed after {bytes_written} bytes: {error}"),
        };
        self.note(&request_id, EvidenceStep::Written, written);
        match outcome {
            DeliveryOutcome::Complete => self.after_complete_write(&request_id, record_end),
            DeliveryOutcome::Refused { reason } => {
                let problem = blocker(Classification::Unavailable, "pane_refused_write", reason);
                let receipt = self.rejection_for(&request_id, problem);
                self.release(&request_id, receipt);
            }
            DeliveryOutcome::InputSinceLook { detail } => {
                // ADM-4: someone typed into the pane since the look: busy, as a draft seen by
                // the look would be (`composer_not_empty`); retry-safe, nothing written.
                let problem = blocker(Classification::Busy, "input_since_look", detail);
                let receipt = self.rejection_for(&request_id, problem);
                self.release(&request_id, receipt);
            }
            DeliveryOutcome::Failed { bytes_written, error } => {
                // ADM-10: any write error is indeterminate: the write may have been partial.
                let state = if bytes_written > 0 { WriteState::Partial } else { WriteState::Failed };
                self.mark_written(&request_id, record_end);
                self.confirm_indeterminate(&request_id, state, "write_error", error);
            }
        }
    }

    /// ADM-5: bytes may have reached the composer; the agent is busy until the prompt is seen
    /// taken past where the view stands now (a record at or before it, replayed after an
    /// observer loss or a restart, came before the prompt could): for a PTY agent, the user
    /// message carrying the prompt (`awaiting_prompts`). The floor goes into the request's
    /// record, so a daemon started after the write reopens the wait with it.
    ///
    /// For a PTY agent the floor is also where the rollout ended just before the write
    /// (`record_end`, the file's length), when further in the view's session: the view may
    /// lag the file (records the observer had not read yet), and a turn recorded there began
    /// before the prompt could reach the TUI. Its user message may carry the same text as
    /// ours (a human, another caller): without this floor a return-final request bound it
    /// and delivered its final as `completed` (CORR-6's gap, found 2026-12-06). The same
    /// floor bounds correlation (`RequestRecord::correlation_floor`).
    ///
    /// A managed agent's wait is for its line's own `turn/start` id (`awaiting_unplaced`):
    /// the view may stand behind the stream at the write (a delayed observer), and a turn that
    /// began before the write, shown after it, lay past that floor and ended the wait while
    /// the line was still unread (seed 6717's mechanism without its crash; so did another
    /// writer's steer folded into the running turn). Only the app-server's acceptance of that
    /// line says it was read; a PTY agent has no such id: its prompt's own user message says it.
    fn mark_written(&mut self, request_id: &RequestId, record_end: Option<Cursor>) {
        let agent_id = self.admissions[request_id].agent_id.clone();
        let own_line = self.requests.get(request_id).and_then(|r| r.turn_start_id.clone());
        let Some(agent) = self.agents.get_mut(&agent_id) else { return };
        let view = agent.view_cursor();
        let floor = match agent.facts.transport {
            crate::agent::Transport::Pty => further_in_the_views_session(view.clone(), record_end),
            crate::agent::Transport::AppServer => view.clone(), // CORR-15's ids instead
        };
        let raised = (floor != view).then(|| floor.clone()).flatten();
        let joined = !agent.awaiting_prompts.is_empty(); // a plain send's (ADM-13)
        match agent.facts.transport {
            crate::agent::Transport::AppServer => {
                agent.awaiting_turn_after = Some(self.now_ms);
                agent.awaiting_past = floor.clone();
                agent.awaiting_unplaced = own_line;
                agent.awaiting_prompts.clear(); // a managed plain send never joins a wait (MGD-3)
                agent.not_reopened();
            }
            crate::agent::Transport::Pty => agent.await_prompt(self.admissions[request_id].prompt_hash.clone(), floor.clone(), request_id, self.now_ms),
        }
        agent.awaiting_request = Some(request_id.clone());
        agent.probe_at_ms = Some(self.now_ms + AWAITING_TURN_GRACE_MS);
        agent.input_epoch += 1; // SUB-2: the turn epoch a submit receipt reports

        if let Some(record) = self.requests.get_mut(request_id) {
            record.written_past = floor;
            record.joined_wait |= joined;
        }
        if let Some(end) = raised {
            let view = view.map_or("none".to_string(), |v| v.position.to_string());
            let detail = format!("the rollout ended at {}:{} before the write (the view stood at {view}): nothing recorded up to there is this prompt's", end.session.0, end.position);
            self.note(request_id, EvidenceStep::Written, detail);
        }
    }

    /// The answer to an engine-initiated refresh: fold it in (which may end the wait, ADM-5);
    /// while the wait stays open, look again after another grace period.
    fn on_probe_answered(&mut self, agent_id: &AgentId, snapshot: Result<ObserverSnapshot, String>) {
        if let Ok(snapshot) = snapshot {
            self.on_snapshot(agent_id, snapshot);
        }
        let now_ms = self.now_ms;
        if let Some(agent) = self.agents.get_mut(agent_id) {
            if agent.awaiting_turn_after.is_some() && agent.probe_at_ms.is_none() {
                agent.probe_at_ms = Some(now_ms + AWAITING_TURN_GRACE_MS);
            }
        }
    }

    fn after_complete_write(&mut self, request_id: &RequestId, record_end: Option<Cursor>) {
        let admission = self.admissions.get(request_id).expect("writing admission exists");
        let agent_id = admission.agent_id.clone();
        let needs_ack = admission.command.paste_mode == PasteMode::Raw
            || (admission.command.operation == Operation::Send && admission.command.return_mode == ReturnMode::OneWay);
        let observed = self.agents.get(&agent_id).and_then(|a| a.view.as_ref()).is_some_and(|v| v.status == ObserverStatus::Attached);
        self.mark_written(request_id, record_end);
        if needs_ack && observed {
            let admission = self.admissions.get_mut(request_id).expect("exists");
            admission.step = Step::AwaitingAck;
            admission.step_deadline_ms = Some(self.now_ms + SEND_ACK_WAIT_MS);
            // The acknowledgement may already be among the events deferred during the write.
            return self.replay_deferred_events(request_id);
        }
        // ADM-13: nothing was waited for (a return-final send, correlated instead; or no
        // observer to look): the receipt says `null`, never "not acknowledged".
        self.confirm_after_ack(request_id, None);
    }

    /// Ends the acknowledgement wait (`Some`: what it saw) or skips it (`None`). ADM-14: a raw
    /// paste without evidence is indeterminate, never accepted.
    pub(crate) fn confirm_after_ack(&mut self, request_id: &RequestId, acknowledged: Option<bool>) {
        let admission = &self.admissions[request_id];
        if admission.command.paste_mode == PasteMode::Raw && acknowledged != Some(true) {
            let detail = "the raw paste was written but the observer never saw it submitted".to_string();
            return self.confirm_indeterminate(request_id, WriteState::Complete, "raw_paste_unacknowledged", detail);
        }
        let ack = (admission.command.operation == Operation::Send || admission.command.paste_mode == PasteMode::Raw)
            .then_some(acknowledged)
            .flatten();
        self.confirm_accepted(request_id, ack);
    }

    /// RF-1: a return-final request stays `registered` in memory until its submitted marker is
    /// durable (seed 000); only then does correlation start (`on_confirmed`). Observer events
    /// meanwhile wait in the admission's deferred queue.
    fn confirm_accepted(&mut self, request_id: &RequestId, acknowledged: Option<bool>) {
        let admission = &self.admissions[request_id];
        let steered = (admission.steer_turn.is_some() && admission.ack_turn == admission.steer_turn).then(|| {
            ("steered_running_turn", "the agent's thread was running a turn: the app-server added this prompt to it (steering)".to_string())
        });
        let refused = admission.refused.as_ref().map(|error| {
            ("turn_start_refused", format!("the app-server refused the turn/start: the prompt never reached the thread ({error})"))
        });
        let explained = refused.or(steered);
        let record = self.requests.get_mut(request_id).expect("registered");
        let (reason, detail) = explained.map_or((None, None), |(reason, detail)| (Some(reason), Some(detail)));
        let receipt = record.written_receipt(Classification::Accepted, WriteState::Complete, acknowledged, reason, detail);
        record.receipt = Some(receipt.clone());
        let durable_phase = match record.return_mode {
            ReturnMode::ReturnFinal => Phase::Submitted,
            ReturnMode::OneWay => {
                record.phase = Phase::Settled;
                Phase::Settled
            }
        };
        self.admissions.get_mut(request_id).expect("exists").pending_receipt = Some(receipt);
        self.enter_confirming(request_id);
        let mut durable = self.requests[request_id].clone();
        durable.phase = durable_phase;
        durable.updated_ms = self.now_ms;
        let purpose = PersistPurpose::Confirm { request_id: request_id.clone() };
        self.persist(purpose, vec![crate::io::PersistOp::PutRequest(durable)]);
    }

    /// ADM-10: the write may have reached the pane; say so and never claim more.
    fn confirm_indeterminate(&mut self, request_id: &RequestId, write_state: WriteState, reason: &str, detail: String) {
        let record = self.requests.get_mut(request_id).expect("registered");
        let receipt = record.written_receipt(Classification::Indeterminate, write_state, None, Some(reason), Some(detail));
        let return_final = record.return_mode == ReturnMode::ReturnFinal;
        record.receipt = Some(receipt.clone());
        self.admissions.get_mut(request_id).expect("exists").pending_receipt = Some(receipt);
        if return_final {
            // The terminal event and the receipt commit together (RF-5).
            self.finish_with_confirm(request_id, reason);
        } else {
            self.requests.get_mut(request_id).expect("registered").phase = Phase::Settled;
            self.confirm(request_id);
        }
    }

    /// A return-final request that ends at admission time: its terminal commit (record, receipt
    /// and event together) is the admission's confirmation; `on_terminal_committed` hands out
    /// the receipt once it is acknowledged.
    fn finish_with_confirm(&mut self, request_id: &RequestId, reason: &str) {
        self.enter_confirming(request_id);
        self.finish(request_id, TerminalState::Indeterminate, Some(reason), None, None);
    }

    /// The admission's outcome is decided and its receipt-bearing commit comes next (whichever
    /// commit that is), so that commit owes the request's `request.admitted` (EV-6).
    fn enter_confirming(&mut self, request_id: &RequestId) {
        let admission = self.admissions.get_mut(request_id).expect("exists");
        admission.step = Step::Confirming;
        admission.step_deadline_ms = None;
        self.events.admitted_due.insert(request_id.clone());
    }

    fn confirm(&mut self, request_id: &RequestId) {
        self.enter_confirming(request_id);
        let purpose = PersistPurpose::Confirm { request_id: request_id.clone() };
        self.persist_record(purpose, request_id);
    }

    /// The admission's confirming commit was acknowledged: the submitted marker or settled
    /// record, or (for a return-final that ended at admission) its terminal commit.
    pub(crate) fn on_confirmed(&mut self, request_id: &RequestId, result: Result<(), String>) {
        let mut receipt = self
            .admissions
            .get_mut(request_id)
            .and_then(|a| a.pending_receipt.take())
            .expect("a confirming admission holds its receipt");
        match result {
            Ok(()) => {
                if self.requests[request_id].phase == Phase::Registered {
                    self.start_correlation(request_id);
                }
            }
            Err(error) => {
                // The prompt was written but its record is not durable: claim nothing more.
                receipt.classification = Classification::Indeterminate;
                receipt.reason = Some("store_commit_failed".to_string());
                receipt.detail = Some(error);
                let record = self.requests.get_mut(request_id).expect("exists");
                record.receipt = Some(receipt.clone());
                if record.phase == Phase::Terminal {
                    // The terminal commit failed; `on_terminal_committed` already retries it.
                } else if record.return_mode == ReturnMode::ReturnFinal {
                    self.finish(request_id, TerminalState::Indeterminate, Some("store_commit_failed"), None, None);
                } else {
                    self.persist_record(PersistPurpose::Progress(request_id.clone()), request_id);
                }
            }
        }
        self.finish_admission(request_id, receipt);
    }

    /// RF-1: the submitted marker is durable: correlation starts, on the process that was
    /// admitted (CORR-1, CORR-2: the agent may have changed while the marker committed).
    fn start_correlation(&mut self, request_id: &RequestId) {
        let record = self.requests.get_mut(request_id).expect("exists");
        record.phase = Phase::Submitted;
        let armed = record.armed.as_ref().map_or("no cursor".to_string(), |c| format!("{}:{}", c.session.0, c.position));
        record.note(self.now_ms, EvidenceStep::Submitted, format!("submitted marker durable; correlating after {armed}"));
        self.correlating.insert(request_id.clone());
        self.turn_wait_since.insert(request_id.clone(), self.now_ms);
        let record = &self.requests[request_id];
        let changed = match self.agents.get(&record.agent_id) {
            None => Some("agent_removed"),
            Some(agent) => (agent.facts.incarnation.as_ref() != Some(&record.incarnation) || agent.facts.process != record.process)
                .then_some("incarnation_changed"),
        };
        if let Some(reason) = changed {
            self.finish(request_id, TerminalState::Indeterminate, Some(reason), None, None);
        }
    }

    /// Hands the receipt to every joined caller, releases the agent's claim, then applies the
    /// observer events deferred while the write and its commits were in flight, in order.
    pub(crate) fn finish_admission(&mut self, request_id: &RequestId, receipt: Receipt) {
        let mut admission = self.admissions.remove(request_id).expect("finishing a known admission");
        let deferred = std::mem::take(&mut admission.deferred);
        let agent_id = admission.agent_id.clone();
        self.release_claim(&agent_id, request_id);
        // IDEM-5, IDEM-2: the first caller's call made this admission; a caller that joined it
        // repeated the id and wrote nothing, so its copy says `replayed` (every copy said
        // `replayed: false`, and the log named each caller as the one that wrote: a review).
        for (index, op) in admission.callers.into_iter().enumerate() {
            let mut copy = receipt.clone();
            copy.replayed |= index > 0;
            self.reply(op, copy);
        }
        assert!(!self.admissions.contains_key(request_id));
        for item in deferred {
            self.on_deferred(&agent_id, item);
        }
        // HIST-1: an admission that ended finished (released, settled, or terminal at once)
        // with nothing else in flight leaves memory here; no later commit will look at it.
        self.evict_if_finished(request_id);
        self.record_deferred_stop(&agent_id);
    }

    fn rejection_for(&self, request_id: &RequestId, problem: Blocker) -> Receipt {
        let admission = &self.admissions[request_id];
        let incarnation = self.agents.get(&admission.agent_id).and_then(|a| a.facts.incarnation.clone());
        let context = ReceiptContext {
            request_id: Some(request_id.clone()),
            agent_id: Some(admission.agent_id.clone()),
            incarnation,
            operation: admission.command.operation,
            return_mode: admission.command.return_mode,
        };
        Receipt::rejection(problem.classification, problem.reason, problem.detail, context)
    }

    /// Deadlines of admission steps: refresh, write result and acknowledgement waits.
    pub(crate) fn expire_admission_steps(&mut self) {
        let due: Vec<RequestId> = self
            .admissions
            .iter()
            .filter(|(_, a)| a.step_deadline_ms.is_some_and(|d| d <= self.now_ms))
            .map(|(id, _)| id.clone())
            .collect();
        for request_id in due {
            let step = self.admissions[&request_id].step.clone();
            self.admissions.get_mut(&request_id).expect("exists").step_deadline_ms = None;
            match step {
                Step::Refreshing { refresh_id } => {
                    self.refreshes.remove(&refresh_id);
                    let agent_id = self.admissions[&request_id].agent_id.clone();
                    if let Some(agent) = self.agents.get_mut(&agent_id) {
                        agent.view = None; // ADM-3: a refresh that never answered proves nothing
                        // The receipt's detail says why (it said "the observer produced no
                        // state", which sent a review looking at the rollout, not the holder).
                        agent.refresh_error = Some(format!("the observer's refresh did not answer within {REFRESH_TIMEOUT_MS} ms (the agent's holder or its rollout read did not answer in time)"));
                    }
                    self.after_refresh(&request_id);
                }
                Step::Writing { delivery_id } => {
                    self.deliveries.remove(&delivery_id);
                    let agent_id = self.admissions[&request_id].agent_id.clone();
                    self.hold_lost_write(delivery_id, agent_id, &request_id);
                    let detail = "the pane write did not report its result in time".to_string();
                    self.mark_written(&request_id, None); // no answer: no end was reported
                    self.confirm_indeterminate(&request_id, WriteState::Unknown, "write_result_lost", detail);
                }
                Step::AwaitingAck => self.confirm_after_ack(&request_id, Some(false)),
                Step::Registering | Step::Confirming | Step::Releasing => {}
            }
        }
    }
}

/// ADM-12, SUB-1: a write (an admission's or a submit's split write) whose result was lost
/// and that may still land.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LandingWrite {
    pub agent_id: AgentId,
    /// The admission or submission that asked for it, whose claim it keeps.
    pub request_id: RequestId,
    pub until_ms: u64,
}

impl Engine {
    /// ADM-12, SUB-1: the engine gave up waiting for write `delivery_id`'s result, but the write
    /// may still run (after a stall it may even start now): the agent stays claimed by
    /// `request_id` past its receipt until the write's late outcome, at most
    /// `LOST_WRITE_HOLD_MS`.
    pub(crate) fn hold_lost_write(&mut self, delivery_id: u64, agent_id: AgentId, request_id: &RequestId) {
        let until_ms = self.now_ms + crate::limits::LOST_WRITE_HOLD_MS;
        self.landing_writes.insert(delivery_id, LandingWrite { agent_id, request_id: request_id.clone(), until_ms });
    }

    /// ADM-12: the request whose lost write still holds this agent.
    pub(crate) fn landing_claim_of(&self, agent_id: &AgentId) -> Option<RequestId> {
        self.landing_writes.values().find(|l| &l.agent_id == agent_id).map(|l| l.request_id.clone())
    }

    /// ADM-12: releases `request_id`'s claim on the agent, unless a lost write of it may still
    /// land (then the write's late outcome or its bound releases it).
    pub(crate) fn release_claim(&mut self, agent_id: &AgentId, request_id: &RequestId) {
        if self.landing_writes.values().any(|l| &l.request_id == request_id) {
            return;
        }
        if let Some(agent) = self.agents.get_mut(agent_id) {
            if agent.claim.as_ref() == Some(request_id) {
                agent.claim = None;
            }
        }
    }

    /// ADM-12: the late outcome of a write the engine gave up on (`refused`: before its first
    /// byte): the write is over, so the claim goes once its caller has been answered; bytes
    /// may have landed until now (ADM-5).
    pub(crate) fn landed_write(&mut self, delivery_id: u64, refused: bool) {
        let Some(landing) = self.landing_writes.remove(&delivery_id) else { return };
        let now_ms = self.now_ms;
        if let Some(agent) = self.agents.get_mut(&landing.agent_id) {
            agent.lost_write_ended(now_ms, refused.then_some(&landing.request_id));
        }
        self.release_landed_claim(&landing);
    }

    /// ADM-12: lost writes whose outcome never came free their agents at the bound.
    pub(crate) fn expire_landing_writes(&mut self) {
        let due: Vec<u64> = self.landing_writes.iter().filter(|(_, l)| l.until_ms <= self.now_ms).map(|(id, _)| *id).collect();
        for delivery_id in due {
            let landing = self.landing_writes.remove(&delivery_id).expect("due");
            // ADM-5: the grace may end the wait now (it could not while the write might land):
            // look at once rather than at the next probe.
            let now_ms = self.now_ms;
            if let Some(agent) = self.agents.get_mut(&landing.agent_id).filter(|a| a.awaiting_turn_after.is_some() && a.probe_at_ms.is_some()) {
                agent.probe_at_ms = Some(now_ms);
            }
            self.release_landed_claim(&landing);
        }
    }

    fn release_landed_claim(&mut self, landing: &LandingWrite) {
        if self.admissions.contains_key(&landing.request_id) {
            return; // still in flight: it releases the claim when it finishes
        }
        self.release_claim(&landing.agent_id, &landing.request_id);
    }
}

/// INP-2, then INP-1, INP-3, INP-4, INP-5: what an admission is checked for before any state is
/// read: its parsed id, or the refusal (its id is no UUID, or a check that needs no state
/// fails), as the engine answers it. The CLI asks it too before it connects, so a bad request
/// gets this answer with no daemon running (it said `daemon_not_running`); each caller adds
/// IDEM-7's rule for a known id.
pub fn stateless_check(command: &AdmitCommand) -> Result<RequestId, Box<Receipt>> {
    let mut context =
        ReceiptContext { request_id: None, agent_id: None, incarnation: None, operation: command.operation, return_mode: command.return_mode };
    // INP-2: an id we cannot parse cannot be looked up, so nothing else is checked.
    let Ok(request_id) = RequestId::parse(&command.request_id) else {
        let detail = format!("request id {} is not a UUID", echoed(&command.request_id));
        return Err(Box::new(Receipt::rejection(Classification::Invalid, "request_id_malformed", detail, context)));
    };
    context.request_id = Some(request_id.clone());
    if request_id.is_nil() {
        // INP-2: all zeros is what an id left unset looks like (`Uuid::default()`,
        // `Guid.Empty`): every prompt of such a caller would replay the first one's receipt
        // and never be written (or be a conflict). Named in the receipt, so a stored one (from
        // before this rule) is still never called retry-safe (IDEM-7, `admit_known`).
        let detail = "request id 00000000-0000-0000-0000-000000000000 is the nil UUID, what an id left unset looks like; give each request its own id (or none: the CLI and the MCP server make one)";
        return Err(Box::new(Receipt::rejection(Classification::Invalid, "request_id_malformed", detail, context)));
    }
    let Some(problem) = validate_command(command) else { return Ok(request_id) };
    Err(Box::new(Receipt::rejection(Classification::Invalid, problem.reason, problem.detail, context)))
}

/// INP-1, INP-3, INP-4, INP-5: checks that need no state.
fn validate_command(command: &AdmitCommand) -> Option<Blocker> {
    if let Err(problem) = validate_prompt(&command.prompt) {
        return Some(Blocker { classification: Classification::Invalid, reason: problem.reason(), detail: problem.detail() });
    }
    if command.final_timeout_ms > MAX_FINAL_TIMEOUT_MS {
        let detail = format!("final timeout {} ms exceeds the limit of {MAX_FINAL_TIMEOUT_MS} ms", command.final_timeout_ms);
        return Some(blocker(Classification::Invalid, "final_timeout_out_of_range", detail));
    }
    if command.final_timeout_ms > 0 && command.return_mode == ReturnMode::OneWay {
        // Named for both callers: the MCP server's fields are not the CLI's flags (a hostile run).
        let detail = "a final timeout applies only to return-final requests (CLI: --final-timeout-ms with --return-final; MCP: final_timeout_ms with return_final: true)";
        return Some(blocker(Classification::Invalid, "final_timeout_without_return_final", detail));
    }
    if let Some(problem) = target_problem(&command.target) {
        return Some(problem);
    }
    match (&command.incarnation, command.operation) {
        (None, Operation::Admit) => {
            return Some(blocker(Classification::Invalid, "incarnation_required", "agent admit needs --incarnation from the catalog"))
        }
        (Some(incarnation), _) if incarnation.is_empty() || incarnation.len() > MAX_INCARNATION_BYTES || incarnation.chars().any(char::is_control) => {
            let detail = format!("the incarnation must be 1..={MAX_INCARNATION_BYTES} bytes without control characters");
            return Some(blocker(Classification::Invalid, "incarnation_malformed", detail));
        }
        _ => {}
    }
    None
}


/// Without any observer view only a plain one-way send that may steer goes on (ADM-13,
/// ADM-18: one that must not steer needs to know the agent is idle), and only to a PTY agent:
/// a managed one takes nothing without its live stream (MGD-3: a send needs it for its
/// acknowledgement and must not race a `turn/start` line not read yet, ADM-5), and a raw paste
/// means nothing to it. A send after a refresh that timed out went on, as a raw paste, on top
/// of an unread line (exploration seed 5008042).
fn unobserved_blocker(command: &AdmitCommand, agent: &AgentEntry, refresh_error: Option<&str>) -> Option<Blocker> {
    if agent.facts.transport == crate::agent::Transport::AppServer && command.paste_mode == PasteMode::Raw {
        return Some(raw_paste_managed());
    }
    if command.may_steer() && agent.facts.transport == crate::agent::Transport::Pty {
        return None;
    }
    let detail = refresh_error.unwrap_or("the observer produced no state for this agent").to_string();
    Some(blocker(Classification::ObserverFailure, "observer_unavailable", detail))
}

/// MGD-3: a raw paste to a managed agent, with or without an observer view.
fn raw_paste_managed() -> Blocker {
    blocker(Classification::Unsupported, "raw_paste_managed", "a managed session takes the prompt as turn input; there is nothing to paste")
}

/// MGD-2, MGD-3 / CORR-8: a managed agent takes a prompt only through its own thread, while
/// the observer follows exactly that thread and session; a running turn refuses everything but
/// a plain send, which steers it; a raw paste means nothing to a JSON-RPC session.
fn managed_blocker(agent: &crate::agent::AgentEntry, command: &AdmitCommand, view: &crate::agent::ObserverView) -> Option<Blocker> {
    if agent.facts.transport != crate::agent::Transport::AppServer {
        return None;
    }
    if command.paste_mode == PasteMode::Raw {
        return Some(raw_paste_managed());
    }
    let Some(ids) = &agent.facts.managed else {
        return Some(blocker(Classification::ObserverFailure, "managed_thread_unknown", "the agent's app-server thread is not started yet"));
    };
    if let ObserverStatus::Unavailable { reason } = &view.status {
        return Some(blocker(Classification::ObserverFailure, "observer_unavailable", reason.clone()));
    }
    if view.session.as_ref() != Some(&ids.session_id) {
        let detail = format!("the event stream follows {:?}, not the agent's session {}", view.session.as_ref().map(|s| &s.0), ids.session_id.0);
        return Some(blocker(Classification::ObserverFailure, "managed_session_changed", detail));
    }
    // A plain one-way send steers a running turn (ADM-13): Codex 0.169's `turn/start` adds
    // the prompt to the turn in flight. Anything else needs an idle thread.
    if matches!(view.turn, TurnState::Busy { .. }) && !command.may_steer() {
        return Some(blocker(Classification::Busy, "turn_active", "the agent's thread is running a turn"));
    }
    None
}

/// ADM-18: a no-steer send refused for what a plain send would have written through says so,
/// so a caller who may steer knows how.
fn no_steer_hint(command: &AdmitCommand, pty: bool, mut refusal: Blocker) -> Blocker {
    // Only where a plain send would have been written: never for an admission; an unavailable
    // observer refuses a managed plain send too (MGD-3), not a terminal's (ADM-13).
    let written_plain = match refusal.reason {
        "turn_active" | "turn_state_unknown" => true,
        "observer_unavailable" => pty,
        _ => false,
    };
    if command.no_steer && command.plain_send() && written_plain {
        refusal.detail.push_str("; a no-steer send is written only into an agent seen idle (a plain send, allowed to steer, may be written now)");
    }
    refusal
}

/// ADM-5: the wait for a written prompt's turn. Text in the composer meanwhile is most likely
/// that prompt held unsent (a raw paste the TUI kept as a paste): the wait then lasts until it
/// is submitted or cleared, and the refusal says so, so a caller knows what ends it (a review
/// saw an agent refused `awaiting_turn_start` for 12 minutes with no hint of the draft).
fn awaiting_blocker(composer: Composer) -> Blocker {
    let mut detail = "a prompt was written and its turn has not started yet".to_string();
    if composer == Composer::Draft {
        detail.push_str("; the composer holds unsent text (the written prompt, if the harness kept it as a paste): nothing more is taken until it is submitted or cleared");
    }
    blocker(Classification::Busy, "awaiting_turn_start", detail)
}

impl Engine {
    /// ADM-19: the monitor's report of another writer's Enter, with the snapshot it read after
    /// the holder told it: the Enter is known before an admission's look, and the floor is
    /// taken before Codex records the Enter's turn (some 25 ms after it), so that turn's
    /// records end the hold rather than the grace. The snapshot then refreshes the view.
    pub(crate) fn on_other_enter_noted(&mut self, agent_id: &AgentId, enter: crate::pane_look::OtherEnterLook, snapshot: ObserverSnapshot) {
        let now_ms = self.now_ms;
        if let Some(agent) = self.agents.get_mut(agent_id) {
            agent.note_other_enter(now_ms, Some(enter), snapshot.read_to_end());
        }
        self.on_snapshot(agent_id, snapshot);
    }
}

/// ADM-19 (PTY): another writer pressed Enter and its prompt's turn has not shown yet.
fn other_enter_blocker(agent: &crate::agent::AgentEntry, now_ms: u64) -> Option<Blocker> {
    if agent.facts.transport != crate::agent::Transport::Pty {
        return None; // a managed agent's turns name the line that opened them (CORR-15)
    }
    let age_ms = agent.other_enter_unseen(now_ms)?;
    let wait_ms = crate::limits::OTHER_ENTER_GRACE_MS - age_ms;
    let detail = format!(
        "another writer pressed Enter in the pane {age_ms} ms ago and no turn has shown since: its prompt may start one any moment (waiting up to {wait_ms} ms more)"
    );
    Some(blocker(Classification::Busy, "other_prompt_pending", detail))
}

/// ADM-5: what the composer holds can refuse a write on its own.
fn composer_blocker(composer: Composer) -> Option<Blocker> {
    match composer {
        Composer::Draft => Some(blocker(Classification::Busy, "composer_not_empty", "the composer holds unsent text")),
        Composer::Question => Some(blocker(Classification::Busy, "interactive_question", "the agent is asking a question")),
        Composer::Empty | Composer::Unknown => None,
    }
}

/// INP-4: a target (a name or an id) is 1..=`MAX_TARGET_BYTES` bytes without control
/// characters or white space (no agent name or id holds one: a target of spaces was
/// `agent_unknown`, which reads as "start it first"); one copy for admissions and submits (SUB-1).
pub(crate) fn target_problem(target: &str) -> Option<Blocker> {
    target_malformed(target).map(|detail| blocker(Classification::Invalid, "target_malformed", detail))
}

/// INP-4's target rule alone: why `target` cannot name an agent, or None. Also for the MCP
/// session actions that name an agent without an admission (status, output, raw input).
pub fn target_malformed(target: &str) -> Option<String> {
    let malformed = target.is_empty() || target.len() > MAX_TARGET_BYTES || target.chars().any(|c| c.is_control() || c.is_whitespace());
    malformed.then(|| format!("the target must be 1..={MAX_TARGET_BYTES} bytes without control characters or white space (an agent's name or id)"))
}

/// ADM-5, CORR-5 (PTY): the write's floor: the view's cursor, or where the rollout ended just
/// before the write when that lies further in the same session (the view lags the file). An
/// end in another session says nothing of the view's file (a view lagging a session switch
/// keeps its own floor, as before); with no view, the end alone is the floor.
fn further_in_the_views_session(view: Option<Cursor>, record_end: Option<Cursor>) -> Option<Cursor> {
    match view {
        Some(view) => Some(view.or_further(record_end.as_ref())),
        None => record_end,
    }
}
