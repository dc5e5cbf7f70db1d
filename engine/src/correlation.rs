//! Return-final correlation: which provider turn a submitted prompt opened, and which final
//! belongs to it (CORR-*), plus deadlines (RF-3) and cancel (RF-4).

use crate::engine::{Deferred, Engine, PersistPurpose, Step};
use crate::ids::{AgentId, RequestId, SessionId, TurnId};
use crate::io::{CancelCommand, CancelOutcome, Output};
use crate::limits::MAX_PENDING_OUTPUTS;
use crate::observer::{fold_turn, Cursor, ObserverEvent, ObserverSnapshot, ObserverStatus, RECORD_TOO_LARGE};
use crate::request::{EvidenceStep, Phase};
use crate::receipt::ReturnMode;
use crate::terminal::TerminalState;

/// Deferred observer events per in-flight write; beyond it the session counts as lost.
const MAX_DEFERRED_EVENTS: usize = MAX_PENDING_OUTPUTS / 16;

impl Engine {
    /// EV-3: the stream takes an observer event when it arrives, in arrival order, under the
    /// incarnation registered then, even while a write defers its application (ADM-17): a
    /// registration that arrives meanwhile must not get ahead of the old process's records.
    pub(crate) fn on_observed(&mut self, agent_id: &AgentId, event: ObserverEvent) {
        self.record_observed(agent_id, &event); // EV-4: deduplicated against the agent's mark
        self.note_prompt_seen(agent_id, &event);
        self.apply_or_defer(agent_id, event);
    }

    /// ADM-19: a turn start or a user message, when it arrives (a write in flight may defer
    /// its application), against the floor of another writer's Enter: by position, not by
    /// when it came (an old record the monitor had not delivered, or one deferred behind a
    /// write of ours, arrives after the Enter too).
    fn note_prompt_seen(&mut self, agent_id: &AgentId, event: &ObserverEvent) {
        if matches!(event, ObserverEvent::TurnStarted { .. } | ObserverEvent::UserMessage { .. }) {
            if let Some(agent) = self.agents.get_mut(agent_id) {
                agent.note_prompt_arrived(event);
                agent.note_own_prompt_recorded(event);
            }
        }
    }

    fn apply_or_defer(&mut self, agent_id: &AgentId, event: ObserverEvent) {
        if let Some(Deferred::Event(event)) = self.defer_while_writing(agent_id, Deferred::Event(event)) {
            self.apply_event(agent_id, event);
        }
    }

    /// A snapshot the monitor (or a probe) took: deferred like the events before it while a
    /// write is in flight (ADM-17), otherwise folded into the view.
    pub(crate) fn on_snapshot(&mut self, agent_id: &AgentId, snapshot: ObserverSnapshot) {
        if let Some(Deferred::Snapshot(snapshot)) = self.defer_while_writing(agent_id, Deferred::Snapshot(snapshot)) {
            self.apply_snapshot(agent_id, snapshot);
        }
    }

    /// ADM-17: while this agent's admission is writing (or committing its outcome), what the
    /// observer says waits, in arrival order: the write's outcome must be known before the
    /// turn it may have started is interpreted, and a snapshot taken after a turn's events must
    /// not be applied before them (it would make them look stale and leave the wait for the
    /// turn open). Returns the item when nothing is in flight.
    fn defer_while_writing(&mut self, agent_id: &AgentId, item: Deferred) -> Option<Deferred> {
        let claim = self.agents.get(agent_id).and_then(|a| a.claim.clone());
        let Some(admission) = claim.and_then(|claim| self.admissions.get_mut(&claim)) else { return Some(item) };
        if !matches!(admission.step, Step::Writing { .. } | Step::Confirming | Step::Releasing) {
            return Some(item);
        }
        if admission.deferred.len() >= MAX_DEFERRED_EVENTS {
            admission.deferred.clear();
            let reason = "observer events overflowed while a write was in flight".to_string();
            admission.deferred.push(Deferred::Event(ObserverEvent::SessionLost { reason, session: None, before: None }));
        } else {
            admission.deferred.push(item);
        }
        None
    }

    /// Applies one deferred item as if it arrived now (it may be deferred again behind a newer
    /// write).
    pub(crate) fn on_deferred(&mut self, agent_id: &AgentId, item: Deferred) {
        match item {
            Deferred::Event(event) => self.apply_or_defer(agent_id, event),
            Deferred::Snapshot(snapshot) => self.on_snapshot(agent_id, snapshot),
        }
    }

    /// EV-5: the monitor's checkpoint goes to the stream right behind the events it covers,
    /// which the stream took when they arrived (EV-3), so it is never deferred.
    pub(crate) fn on_checkpoint(&mut self, agent_id: &AgentId, checkpoint_json: String) {
        if !self.replay_holds_checkpoint(agent_id, &checkpoint_json) {
            self.record_checkpoint(agent_id, checkpoint_json);
        }
    }

    pub(crate) fn replay_deferred_events(&mut self, request_id: &RequestId) {
        let Some(admission) = self.admissions.get_mut(request_id) else { return };
        assert_eq!(admission.step, Step::AwaitingAck, "replay only once the write's outcome is known");
        let items = std::mem::take(&mut admission.deferred);
        let agent_id = admission.agent_id.clone();
        for item in items {
            match item {
                Deferred::Event(event) => self.apply_event(&agent_id, event),
                Deferred::Snapshot(snapshot) => self.apply_snapshot(&agent_id, snapshot),
            }
        }
    }

    fn apply_event(&mut self, agent_id: &AgentId, event: ObserverEvent) {
        self.deciding = Some(describe(&event)); // RF-6
        self.apply_event_inner(agent_id, event);
        self.deciding = None;
    }

    fn apply_event_inner(&mut self, agent_id: &AgentId, event: ObserverEvent) {
        if let (ObserverEvent::TurnStarted { turn, .. }, Some(agent)) = (&event, self.agents.get_mut(agent_id)) {
            agent.last_turn_started = Some(turn.clone());
        }
        // Events replayed after a resume, or late, lie at or before what the view already
        // folded in: they must not move the view back, clear a wait or acknowledge a prompt.
        if self.is_fresh(agent_id, &event) {
            self.update_view(agent_id, &event);
            self.acknowledge_waiting_admission(agent_id, &event);
        } else {
            self.end_recovered_wait(agent_id, &event);
        }
        if matches!(event, ObserverEvent::SessionLost { .. }) {
            self.note_loss_while_awaiting(agent_id);
        }
        match &event {
            ObserverEvent::Attached { session, position } => self.on_attached(agent_id, session, *position),
            ObserverEvent::SessionLost { before: Some(before), .. } => {
                // MGD-4: the loss lies at or before `before` (an earlier process's output, or this
                // one's evicted output); a request armed before it (in an earlier process: CORR-1
                // ended it already, unless facts lag) loses its evidence, the others keep
                // waiting for the resume's attach that follows.
                for request_id in self.correlating_requests_of(agent_id, true) {
                    let armed = self.requests[&request_id].armed.as_ref().expect("correlating requests are armed");
                    if armed.position < *before {
                        self.finish(&request_id, TerminalState::Indeterminate, Some("observer_session_lost"), None, None);
                    }
                }
            }
            ObserverEvent::SessionLost { reason, .. } => {
                self.resuming.remove(agent_id);
                // CORR-12: an unreadable record is named as such on the stream.
                let reason = if reason == RECORD_TOO_LARGE { RECORD_TOO_LARGE } else { "observer_session_lost" };
                for request_id in self.correlating_requests_of(agent_id, true) {
                    self.finish(&request_id, TerminalState::Indeterminate, Some(reason), None, None);
                }
            }
            ObserverEvent::ProcessExited { drained } => {
                self.resuming.remove(agent_id);
                self.on_process_exited(agent_id, *drained)
            }
            // EV: reported on the stream only; correlation reads turn records (CORR-5..7).
            ObserverEvent::AgentMessage { .. } | ObserverEvent::PlanUpdated { .. } => {}
            ObserverEvent::RequestRefused { id, error, position, .. } => self.on_request_refused(agent_id, id, error, *position),
            ObserverEvent::TurnAccepted { id, turn, .. } => {
                if let Some(agent) = self.agents.get_mut(agent_id) {
                    agent.note_accepted_turn(id, turn);
                }
            }
            ObserverEvent::TurnStarted { .. }
            | ObserverEvent::UserMessage { .. }
            | ObserverEvent::TurnCompleted { .. }
            | ObserverEvent::TurnAborted { .. } => {
                for request_id in self.correlating_requests_of(agent_id, false) {
                    self.correlate(&request_id, &event);
                }
            }
        }
    }

    fn is_fresh(&self, agent_id: &AgentId, event: &ObserverEvent) -> bool {
        let Some(view) = self.agents.get(agent_id).and_then(|a| a.view.as_ref()) else { return true };
        match (event.session(), event.position()) {
            (Some(session), Some(position)) if matches!(event, ObserverEvent::Attached { .. }) => {
                view.session.as_ref() != Some(session) || position >= view.position
            }
            (Some(session), Some(position)) => view.session.as_ref() != Some(session) || position > view.position,
            _ => true,
        }
    }

    /// ADM-5 for an event the view already stands past (replayed after a resume, or late): a
    /// turn started past the wait's floor ends it (for a PTY wait, the user message carrying
    /// the last untaken prompt past its floor; a record counts once), even when the view is
    /// already past it (a first look at a checkpoint beyond the armed cursor, then the
    /// resume's replay): that turn began after the write. So does a managed line's replayed
    /// answer (`wait_ended_by`).
    fn end_recovered_wait(&mut self, agent_id: &AgentId, event: &ObserverEvent) {
        let unproven = self.floor_unproven_by(agent_id, event);
        let Some(agent) = self.agents.get_mut(agent_id) else { return };
        if wait_ended_by(agent, event, false, unproven) {
            agent.end_wait();
        }
    }

    /// Folds an event into the agent's observer view so later admissions see busy/idle
    /// without another refresh.
    fn update_view(&mut self, agent_id: &AgentId, event: &ObserverEvent) {
        let unproven = self.floor_unproven_by(agent_id, event);
        let Some(agent) = self.agents.get_mut(agent_id) else { return };
        if wait_ended_by(agent, event, true, unproven) {
            agent.end_wait(); // ADM-5: the written prompts' turns (or another) began
        }
        let Some(view) = agent.view.as_mut() else { return };
        if let Some(session) = event.session() {
            view.session = Some(session.clone());
        }
        if let Some(position) = event.position() {
            view.position = position;
        }
        match event {
            ObserverEvent::Attached { .. } => view.status = ObserverStatus::Attached,
            ObserverEvent::SessionLost { reason, .. } => view.status = ObserverStatus::Unavailable { reason: reason.clone() },
            ObserverEvent::ProcessExited { .. } => view.status = ObserverStatus::Unavailable { reason: "process_exited".to_string() },
            ObserverEvent::TurnStarted { .. }
            | ObserverEvent::UserMessage { .. }
            | ObserverEvent::AgentMessage { .. }
            | ObserverEvent::PlanUpdated { .. }
            | ObserverEvent::TurnCompleted { .. }
            | ObserverEvent::TurnAborted { .. }
            | ObserverEvent::RequestRefused { .. }
            | ObserverEvent::TurnAccepted { .. } => {}
        }
        view.turn = fold_turn(&view.turn, event);
    }

    /// CORR-9: another prompt's message steered the bound turn. Correlation holds, but the
    /// turn's final may answer that prompt too, so the request's end says so (`steered`), and
    /// the trail names the first such message.
    fn note_steered(&mut self, request_id: &RequestId, bound: &TurnId, seen: &str) {
        let Some(record) = self.requests.get_mut(request_id) else { return };
        if record.steered {
            return;
        }
        record.steered = true;
        let detail = format!("turn {} steered by another prompt's message: hash {} (CORR-9: its final may answer that prompt too)", bound.0, short(seen));
        self.note(request_id, EvidenceStep::UserMessage, detail);
    }

    /// ADM-13, ADM-14: a send waiting for evidence sees its own prompt arrive.
    fn acknowledge_waiting_admission(&mut self, agent_id: &AgentId, event: &ObserverEvent) {
        let ObserverEvent::UserMessage { prompt_hash, .. } = event else { return };
        let Some(claim) = self.agents.get(agent_id).and_then(|a| a.claim.clone()) else { return };
        let Some(admission) = self.admissions.get(&claim) else { return };
        // A user message recorded up to where the rollout ended at the write (the view lagged
        // the file) is someone else's prompt of the same text, never this one's.
        let floor = self.requests.get(&claim).and_then(|r| r.written_past.as_ref());
        if floor.is_some_and(|floor| !past_cursor(event, floor)) {
            return;
        }
        if admission.step == Step::AwaitingAck && &admission.prompt_hash == prompt_hash {
            let unread_earlier = self.agents.get(agent_id).is_some_and(|agent| earlier_write_may_carry(agent, &claim, event));
            if unread_earlier || self.earlier_request_awaits_its_text(agent_id, &claim, prompt_hash) {
                return;
            }
            let ObserverEvent::UserMessage { turn, .. } = event else { unreachable!() };
            self.admissions.get_mut(&claim).expect("exists").ack_turn = turn.clone(); // MGD-3
            self.confirm_after_ack(&claim, Some(true));
        }
    }

    /// ADM-13, CORR-6 (one user message, one write): a return-final request of ours on the
    /// agent, written before the send `claim` (claims serialize the writes) with the same
    /// text, still waits for its turn: a message of that text is the request's by input order
    /// (its first user message binds it), not the send's. Acknowledged by it, the send's
    /// receipt said its prompt was recorded while it could sit queued, and a restart took both
    /// writes for read (a review). The send is acknowledged by the next message of its text
    /// (a steer into that turn, which makes the request's turn carry our text twice, CORR-6, or
    /// a turn of its own), or not within `SEND_ACK_WAIT_MS`.
    fn earlier_request_awaits_its_text(&self, agent_id: &AgentId, claim: &RequestId, prompt_hash: &str) -> bool {
        self.correlating_requests_of(agent_id, true).iter().any(|id| id != claim && self.requests[id].phase == Phase::Submitted && self.requests[id].prompt_hash == prompt_hash)
    }

    /// CORR-3 and REC-2: the observer (re)attached to a session.
    fn on_attached(&mut self, agent_id: &AgentId, session: &SessionId, position: u64) {
        let facts = self.agents.get(agent_id).map(|a| a.facts.clone());
        for request_id in self.correlating_requests_of(agent_id, true) {
            let record = &self.requests[&request_id];
            let armed = record.armed.clone().expect("correlating requests are armed");
            let same_session = &armed.session == session;
            let same_process = facts
                .as_ref()
                .is_some_and(|f| f.incarnation.as_ref() == Some(&record.incarnation) && f.process == record.process);
            if !same_session || !same_process {
                self.finish(&request_id, TerminalState::Indeterminate, Some("observer_session_changed"), None, None);
            } else if self.suspended.contains(&request_id) {
                if position <= armed.position {
                    self.suspended.remove(&request_id); // REC-2: re-verified; replay follows
                    self.turn_wait_since.insert(request_id.clone(), self.now_ms);
                } else if !self.resuming.contains(agent_id) {
                    // Resuming past the armed cursor could skip our turn's start.
                    self.finish(&request_id, TerminalState::Indeterminate, Some("observer_resumed_past_cursor"), None, None);
                }
                // Otherwise another look came first (OBS-2's checkpoint): the resume asked for
                // still replays from the armed cursor; the request stays suspended until then.
            }
        }
        if self.correlating_requests_of(agent_id, true).iter().all(|id| !self.suspended.contains(id)) {
            self.resuming.remove(agent_id);
        }
    }

    /// CORR-11: a process exit is a delivery failure only with proof that no turn started.
    fn on_process_exited(&mut self, agent_id: &AgentId, drained: bool) {
        // CORR-11: an app-server's output is no record of its thread: Codex hands the input to
        // the thread (which records it) before it writes the reply, so a process killed in
        // between drained an output that says nothing of a prompt the thread holds (a review
        // got `delivery_failed` for a prompt the thread recorded and completed). Only a PTY
        // agent's rollout, the provider's own record, proves that no turn started.
        let managed = self.agents.get(agent_id).is_some_and(|a| a.facts.transport == crate::agent::Transport::AppServer);
        for request_id in self.correlating_requests_of(agent_id, true) {
            let record = &self.requests[&request_id];
            let unstarted = record.phase == Phase::Submitted && !self.candidates.contains_key(&request_id);
            let proven = drained && unstarted && !managed && !self.suspended.contains(&request_id);
            if proven {
                self.finish(&request_id, TerminalState::DeliveryFailed, Some("process_exited_before_turn"), None, None);
            } else {
                self.finish(&request_id, TerminalState::Indeterminate, Some("process_exited"), None, None);
            }
        }
    }

    /// MGD-7: the app-server refused a JSON-RPC request. When it is a waiting request's own
    /// `turn/start` (its id carries the admission's random nonce, so no writer sent it before
    /// the daemon did) and no turn started since the request was armed, the prompt never
    /// reached the thread: `delivery_failed`, and the agent waits for no turn of it (ADM-5).
    /// With a turn started since (a candidate, or the turn bound) the refusal contradicts that
    /// evidence (a holder-socket client that read the id from the reply could send a request
    /// under it): `indeterminate`.
    fn on_request_refused(&mut self, agent_id: &AgentId, id: &str, error: &str, position: u64) {
        self.refuse_awaiting_send(agent_id, id, error);
        let refused: Vec<RequestId> = self
            .correlating_requests_of(agent_id, false)
            .into_iter()
            .filter(|request_id| self.requests[request_id].turn_start_id.as_deref() == Some(id))
            .collect();
        for request_id in refused {
            let record = &self.requests[&request_id];
            let armed = record.armed.as_ref().expect("correlating requests are armed");
            if position <= armed.position {
                continue; // CORR-5: written after arming, so answered after it
            }
            // The terminal step's evidence is this event (`describe`), its error included.
            if record.phase == Phase::Submitted && !self.candidates.contains_key(&request_id) {
                self.finish(&request_id, TerminalState::DeliveryFailed, Some("turn_start_refused"), None, None);
                self.stop_awaiting_turn_of(agent_id, &request_id);
            } else {
                self.indeterminate(&request_id, "turn_start_refusal_contradicted");
            }
        }
    }

    /// MGD-7, ADM-13: a one-way send waiting for its acknowledgement whose own `turn/start` was
    /// refused is answered at once: `acknowledged: false`, reason `turn_start_refused` with the
    /// server's error (it waited out `SEND_ACK_WAIT_MS` and said nothing of why), and the agent
    /// waits for no turn of it.
    fn refuse_awaiting_send(&mut self, agent_id: &AgentId, id: &str, error: &str) {
        let Some(claim) = self.agents.get(agent_id).and_then(|a| a.claim.clone()) else { return };
        let awaiting = self.admissions.get(&claim).is_some_and(|a| a.step == Step::AwaitingAck && !a.lost_while_awaiting);
        if !awaiting || self.requests.get(&claim).and_then(|r| r.turn_start_id.as_deref()) != Some(id) {
            return;
        }
        self.admissions.get_mut(&claim).expect("checked").refused = Some(error.to_string());
        self.confirm_after_ack(&claim, Some(false));
        self.stop_awaiting_turn_of(agent_id, &claim);
    }

    /// MGD-7: a loss while a one-way prompt awaits its acknowledgement makes any later refusal
    /// of its id unprovable (see `Admission::lost_while_awaiting`): the wait runs out as usual.
    fn note_loss_while_awaiting(&mut self, agent_id: &AgentId) {
        let Some(claim) = self.agents.get(agent_id).and_then(|a| a.claim.clone()) else { return };
        if let Some(admission) = self.admissions.get_mut(&claim).filter(|a| a.step == Step::AwaitingAck) {
            admission.lost_while_awaiting = true;
        }
    }

    /// ADM-5: the written prompt the agent waits on a turn for was refused: nothing is pending
    /// (unless a later write took over the wait).
    fn stop_awaiting_turn_of(&mut self, agent_id: &AgentId, request_id: &RequestId) {
        let Some(agent) = self.agents.get_mut(agent_id) else { return };
        if agent.awaiting_request.as_ref() == Some(request_id) {
            agent.end_wait();
            agent.awaiting_request = None;
        }
    }

    /// The per-request correlation rules for one turn event (CORR-3, CORR-5..CORR-10).
    fn correlate(&mut self, request_id: &RequestId, event: &ObserverEvent) {
        if self.end_awaits_proof(request_id) {
            return; // EV-13: its end was read; the file's proof decides it
        }
        let record = &self.requests[request_id];
        let armed: Cursor = record.correlation_floor().expect("correlating requests are armed");
        let raised = record.armed.as_ref() != Some(&armed); // CORR-6's floor, for the evidence
        if event.session() != Some(&armed.session) {
            return self.finish(request_id, TerminalState::Indeterminate, Some("observer_session_changed"), None, None);
        }
        if event.position().is_some_and(|p| p <= armed.position) {
            // CORR-5: history up to the armed cursor (a PTY agent's: up to where its rollout
            // ended at the write, when further) is the baseline, not our turn.
            return;
        }
        let bound = record.bound_turn.clone();
        let candidate = self.candidates.get(request_id).cloned();
        let prompt_hash = record.prompt_hash.clone();
        let bound_at = record.bound_at.filter(|_| record.correlation_source == Some(crate::receipt::CorrelationSource::ProviderFile));
        // CORR-15: a turn the app-server accepted for another request (or not for this one's)
        // is not ours whatever its text: two prompts of the same text, the earlier one read
        // late, and the later request bound the earlier one's turn and delivered its final (a
        // review). Its records are passed over; this request waits for its own turn.
        let named = match event {
            ObserverEvent::TurnStarted { turn, .. } | ObserverEvent::TurnCompleted { turn, .. } => Some(turn.clone()),
            ObserverEvent::UserMessage { turn, .. } | ObserverEvent::TurnAborted { turn, .. } => turn.clone(),
            _ => None,
        };
        if let (None, None, Some(turn)) = (&bound, &candidate, &named) {
            if let Some(why) = self.turn_of_another(request_id, turn) {
                let step = if matches!(event, ObserverEvent::TurnStarted { .. }) { EvidenceStep::TurnStarted } else { EvidenceStep::UserMessage };
                return self.note(request_id, step, format!("{}: not this request's turn ({why})", describe(event)));
            }
        }
        match (event, bound) {
            (ObserverEvent::TurnStarted { turn, .. }, Some(bound)) => {
                if turn != &bound {
                    self.indeterminate(request_id, "later_turn_started");
                }
            }
            (ObserverEvent::TurnStarted { turn, position, .. }, None) => match candidate {
                None => {
                    let past = if raised { "the rollout's end at the write" } else { "the armed cursor" };
                    let detail = format!("turn {} started at {position}, after {past} {}", turn.0, armed.position);
                    self.note(request_id, EvidenceStep::TurnStarted, detail);
                    self.candidates.insert(request_id.clone(), turn.clone());
                }
                Some(candidate) if &candidate == turn => {}
                Some(_) => self.indeterminate(request_id, "unconfirmed_turn_replaced"),
            },
            (ObserverEvent::UserMessage { turn, prompt_hash: seen, position, .. }, Some(bound)) => {
                // CORR-9: steering inside the bound turn keeps correlation.
                if turn.as_ref().is_some_and(|t| t != &bound) {
                    self.indeterminate(request_id, "user_message_in_other_turn");
                } else if seen == &prompt_hash && bound_at.is_some_and(|at| *position > at) {
                    // CORR-6 (PTY): a second message of our prompt's text in the bound turn.
                    // One of the two is someone else's (a human's prompt of the same text whose
                    // turn ours steered into, or that the TUI took with ours as one input), and
                    // nothing tells which opened the turn: its final may answer another prompt.
                    self.indeterminate(request_id, "prompt_twice_in_turn");
                } else if seen != &prompt_hash {
                    self.note_steered(request_id, &bound, seen);
                }
            }
            (ObserverEvent::UserMessage { turn, prompt_hash: seen, .. }, None) => {
                // CORR-5: only a turn that started after the armed cursor can be ours. A user
                // message with no such start went into a turn already running (a stale idle
                // view): binding it would deliver another prompt's final.
                let Some(candidate) = candidate else {
                    return self.indeterminate(request_id, "user_message_before_turn_start");
                };
                let turn = turn.clone().unwrap_or_else(|| candidate.clone());
                let verdict = if seen == &prompt_hash { "matches ours" } else { "differs from ours" };
                let detail = format!("first user message in turn {}: hash {} {verdict} ({})", turn.0, short(seen), short(&prompt_hash));
                self.note(request_id, EvidenceStep::UserMessage, detail);
                if candidate != turn {
                    self.indeterminate(request_id, "user_message_in_other_turn");
                } else if seen == &prompt_hash {
                    let ObserverEvent::UserMessage { position, .. } = event else { unreachable!() };
                    match self.same_text_prompt_may_be_first(request_id, seen, *position) {
                        true => self.indeterminate(request_id, "same_text_prompt_unordered"), // CORR-6
                        false => self.bind(request_id, turn, *position),
                    }
                } else {
                    self.indeterminate(request_id, "first_user_message_mismatch"); // CORR-6
                }
            }
            (ObserverEvent::TurnCompleted { turn, final_message, .. }, Some(bound)) => {
                if turn == &bound && final_message.as_deref().and_then(crate::observer::final_too_large).is_some() {
                    // RF-9: the answer exists but no record can carry it; say so, never "".
                    self.indeterminate(request_id, "final_too_large");
                } else if turn == &bound {
                    let reason = final_message.is_none().then_some("no_final_message");
                    let text = final_message.clone().unwrap_or_default();
                    self.finish_when_proven(request_id, TerminalState::Completed, reason, Some(text)); // EV-13
                } else {
                    self.indeterminate(request_id, "other_turn_completed"); // CORR-7
                }
            }
            (ObserverEvent::TurnCompleted { .. }, None) => self.indeterminate(request_id, "turn_completed_before_binding"),
            (ObserverEvent::TurnAborted { turn, .. }, Some(bound)) => {
                if turn.as_ref().is_none_or(|t| t == &bound) {
                    self.finish_when_proven(request_id, TerminalState::Aborted, Some("provider_turn_aborted"), None); // CORR-10, EV-13
                } else {
                    self.indeterminate(request_id, "other_turn_aborted");
                }
            }
            (ObserverEvent::TurnAborted { .. }, None) => self.indeterminate(request_id, "turn_aborted_before_binding"),
            (
                ObserverEvent::Attached { .. }
                | ObserverEvent::AgentMessage { .. }
                | ObserverEvent::PlanUpdated { .. }
                | ObserverEvent::RequestRefused { .. }
                | ObserverEvent::TurnAccepted { .. }
                | ObserverEvent::SessionLost { .. }
                | ObserverEvent::ProcessExited { .. },
                _,
            ) => {
                unreachable!("handled by apply_event")
            }
        }
    }

    /// CORR-15: why `turn` cannot carry this request's prompt, from the app-server's answers
    /// to `turn/start` (a managed agent's; None when they tell nothing against it).
    fn turn_of_another(&self, request_id: &RequestId, turn: &TurnId) -> Option<String> {
        let record = &self.requests[request_id];
        let agent = self.agents.get(&record.agent_id)?;
        agent.turn_may_carry(turn, record.turn_start_id.as_deref()).err()
    }

    fn indeterminate(&mut self, request_id: &RequestId, reason: &str) {
        self.finish(request_id, TerminalState::Indeterminate, Some(reason), None, None);
    }

    /// CORR-6 (PTY): the user message at `position` carries this request's text, and another
    /// prompt of ours of that text was written after it (a plain send that joined its wait,
    /// ADM-13, before or after a restart) and not taken by an earlier record, while this
    /// request's own prompt was written over a composer the view did not see empty
    /// (`RequestRecord::over_unseen_composer`). Input is read in order, so the
    /// first message is this request's, unless its prompt never became one (written into a
    /// dialog it answered, RF-7): then it is the later prompt's, and its turn's final answers
    /// that one. Nothing tells which: the simulator found such a request bound to the turn its
    /// same-text send opened (seed 36926, a question on screen classified unknown).
    fn same_text_prompt_may_be_first(&self, request_id: &RequestId, hash: &str, position: u64) -> bool {
        let record = &self.requests[request_id];
        let Some(agent) = self.agents.get(&record.agent_id) else { return false };
        let prompts = &agent.awaiting_prompts;
        let own_unseen = record.over_unseen_composer;
        let later_same_text = |p: &&crate::agent::AwaitedPrompt| {
            p.request.as_ref().is_some_and(|other| other != request_id)
                && p.hash == hash
                && p.taken_by.as_ref().is_none_or(|at| at.position == position)
                && p.past.as_ref().is_none_or(|floor| floor.position < position)
        };
        own_unseen && prompts.iter().any(|p| later_same_text(&p))
    }

    /// CORR-6: our prompt opened this turn; from now on only its final counts (CORR-7).
    fn bind(&mut self, request_id: &RequestId, turn: TurnId, position: u64) {
        self.candidates.remove(request_id);
        self.turn_wait_since.remove(request_id);
        let record = self.requests.get_mut(request_id).expect("exists");
        assert_eq!(record.phase, Phase::Submitted);
        record.phase = Phase::Bound;
        record.note(self.now_ms, EvidenceStep::Bound, format!("bound to turn {}: only its final counts", turn.0));
        record.bound_turn = Some(turn);
        record.bound_at = Some(position);
        self.persist_record(PersistPurpose::Progress(request_id.clone()), request_id);
    }

    /// CORR-1, CORR-2, REC-2: the agent's process facts changed or were re-registered.
    pub(crate) fn verify_requests_after_agent_change(&mut self, agent_id: &AgentId) {
        let facts = self.agents[agent_id].facts.clone();
        let mut resume_from: Option<Cursor> = None;
        for request_id in self.correlating_requests_of(agent_id, true) {
            let record = &self.requests[&request_id];
            let same = facts.incarnation.as_ref() == Some(&record.incarnation) && facts.process == record.process;
            if !same {
                self.finish(&request_id, TerminalState::Indeterminate, Some("incarnation_changed"), None, None);
            } else if self.suspended.contains(&request_id) {
                let armed = record.armed.clone().expect("armed");
                let earlier = resume_from.as_ref().is_none_or(|r| armed.position < r.position);
                if earlier {
                    resume_from = Some(armed);
                }
            }
        }
        match resume_from {
            Some(mut from) => {
                // EV-4: never past what the stream reported in that session, so the records
                // between the mark and the armed cursor are appended too (CORR-5 still ignores
                // them for correlation; EV-13 proves those the stream already has).
                let mark = self.events.marks.get(agent_id).filter(|m| m.session.as_ref() == Some(&from.session));
                if let Some(mark) = mark.filter(|m| m.position < from.position) {
                    from.position = mark.position;
                }
                self.resuming.insert(agent_id.clone());
                // Suspended requests resume only on the process they were armed on (above).
                let incarnation = facts.incarnation.clone().expect("a resumed request's process runs");
                self.push(Output::ResumeObserver { agent_id: agent_id.clone(), from, incarnation });
            }
            None => {
                self.resuming.remove(agent_id);
            }
        }
    }

    /// RF-3: a request past its deadline times out, whatever the provider does later.
    pub(crate) fn expire_request_deadlines(&mut self) {
        let due: Vec<RequestId> = self
            .correlating
            .iter()
            .filter(|id| self.requests[*id].deadline_ms.is_some_and(|d| d <= self.now_ms))
            .cloned()
            .collect();
        for request_id in due {
            self.finish(&request_id, TerminalState::TimedOut, Some("final_timeout"), None, None);
        }
        // RF-8: a prompt whose turn never started (it sits in a composer nobody submits, or
        // answered a dialog) ends indeterminate rather than waiting forever.
        let stalled: Vec<RequestId> = self
            .correlating
            .iter()
            .filter(|id| self.turn_start_deadline(id).is_some_and(|at| at <= self.now_ms))
            .cloned()
            .collect();
        for request_id in stalled {
            self.finish(&request_id, TerminalState::Indeterminate, Some("no_turn_started"), None, None);
        }
    }

    /// RF-4: cancel a return-final request that is waiting for its final.
    pub(crate) fn on_cancel(&mut self, command: CancelCommand) {
        match RequestId::parse(&command.request_id) {
            Ok(request_id) if self.park_unless_known(&request_id, crate::history::Parked::Cancel(command.clone())) => {}
            _ => self.cancel_known(command),
        }
    }

    /// A cancel whose id is in memory, known absent, or malformed (HIST-2).
    pub(crate) fn cancel_known(&mut self, command: CancelCommand) {
        let op = command.op;
        let not_found = CancelOutcome::NotFound { request_id: command.request_id.clone() };
        let Ok(request_id) = RequestId::parse(&command.request_id) else {
            return self.push(Output::CancelResult { op, outcome: not_found });
        };
        if self.admissions.contains_key(&request_id) {
            let outcome = CancelOutcome::AdmissionInProgress { request_id };
            return self.push(Output::CancelResult { op, outcome });
        }
        let Some(record) = self.requests.get(&request_id) else {
            return self.push(Output::CancelResult { op, outcome: not_found });
        };
        let outcome = match (record.phase, record.return_mode) {
            (Phase::Released, _) => not_found,
            (_, ReturnMode::OneWay) => CancelOutcome::NotReturnFinal { request_id },
            (Phase::Registered, _) => CancelOutcome::AdmissionInProgress { request_id },
            (Phase::Terminal, _) => match self.published_terminal(&request_id) {
                Some(event) => {
                    CancelOutcome::AlreadyTerminal { state: event.state, terminal_event_sequence: event.terminal_event_sequence }
                }
                None => {
                    // TERM-2: answer once the event is published, with the sequence it got.
                    self.pending_cancel_answers.entry(request_id).or_default().push(op);
                    return;
                }
            },
            (Phase::Submitted | Phase::Bound, _) => {
                // The answer waits for the commit; see `on_terminal_committed`.
                return self.finish(&request_id, TerminalState::Cancelled, Some("cancelled_by_caller"), None, Some(op));
            }
            (Phase::Settled, ReturnMode::ReturnFinal) => unreachable!("settled records are one-way"),
        };
        self.push(Output::CancelResult { op, outcome });
    }
}

/// RF-6: an observer event as one line of evidence.
fn describe(event: &ObserverEvent) -> String {
    match event {
        ObserverEvent::Attached { session, position } => format!("observer attached to session {} at {position}", session.0),
        ObserverEvent::TurnStarted { turn, position, .. } => format!("turn {} started at {position}", turn.0),
        ObserverEvent::UserMessage { turn, prompt_hash, position, .. } => {
            format!("user message {} in turn {:?} at {position}", short(prompt_hash), turn.as_ref().map(|t| &t.0))
        }
        ObserverEvent::TurnCompleted { turn, final_message, position, .. } => {
            let size = final_message.as_ref().map_or("no final".to_string(), |f| format!("final of {} bytes", f.len()));
            format!("turn {} completed at {position}, {size}", turn.0)
        }
        ObserverEvent::TurnAborted { turn, position, .. } => format!("turn {:?} aborted at {position}", turn.as_ref().map(|t| &t.0)),
        ObserverEvent::AgentMessage { turn, text, position, .. } => {
            format!("assistant message of {} bytes in turn {:?} at {position}", text.len(), turn.as_ref().map(|t| &t.0))
        }
        ObserverEvent::PlanUpdated { turn, plan, position, .. } => {
            format!("plan of {} steps in turn {:?} at {position}", plan.len(), turn.as_ref().map(|t| &t.0))
        }
        ObserverEvent::RequestRefused { id, error, position, .. } => format!("the app-server refused request {id} at {position}: {error}"),
        ObserverEvent::TurnAccepted { id, turn, position, .. } => format!("the app-server accepted request {id} into turn {} at {position}", turn.0),
        ObserverEvent::SessionLost { reason, .. } => format!("observer session lost: {reason}"),
        ObserverEvent::ProcessExited { drained } => format!("process exited (record drained: {drained})"),
    }
}

/// The first 12 hex digits of a hash: enough to compare, short enough to read.
fn short(hash: &str) -> &str {
    &hash[..hash.len().min(12)]
}

/// ADM-5: whether `event` ends the agent's wait for its written prompt's turn (when past the
/// wait's floor): a turn's start or user message that may be that prompt's
/// (`AgentEntry::turn_may_be_the_awaited_prompts`), or the app-server's acceptance of one of
/// wakterm's `turn/start`s into a running turn (our line was folded into it, and its user
/// message is no proof: another writer opened that turn): the turn the view shows running, or,
/// for an acceptance replayed after a resume, when the view may stand past both, the turn
/// whose start was reported last (`AgentEntry::last_turn_started`: exploration seed 596 held
/// an agent for RF-8's minute after a restart replayed a steer). An acceptance into a
/// new turn waits for that turn's start: the reply comes first (Codex 0.169, 15-20 ms before
/// `turn/started`) and changes no turn state, so ending the wait there left the agent idle in
/// the view and the next prompt could be written into the turn starting (a review).
fn ends_the_wait(agent: &crate::agent::AgentEntry, event: &ObserverEvent) -> bool {
    match event {
        ObserverEvent::TurnAccepted { id, turn, .. } => {
            let shown = agent.view.as_ref().is_some_and(|v| v.turn == crate::observer::TurnState::Busy { turn: Some(turn.clone()) });
            crate::prompt::is_turn_start_id(id) && (shown || agent.last_turn_started.as_ref() == Some(turn))
        }
        _ => agent.turn_may_be_the_awaited_prompts(event),
    }
}

/// ADM-5: whether `event` ends the agent's wait for its written prompt's turn (`fresh`: the
/// view had not folded it in yet). By the wait's kind:
/// - a managed line accepted into a turn not yet started (`awaiting_accepted`): that turn's
///   start, or a user message in it;
/// - a managed line not yet answered (`awaiting_unplaced`): its answer (`line_answered`);
/// - a PTY wait: the user messages carrying each of its prompts past that prompt's own floor
///   (`awaited_prompt_recorded`);
/// - else a turn that may be the prompt's (`ends_the_wait`) past the wait's floor (a fresh
///   event needs none: a wait this engine opened without a view has none); for a wait a
///   restart reopened, not a record of a file not proven yet (`unproven`: one the restart's
///   replay zone still holds, or below the proof a loss left, EV-13): the file may
///   have been cut back and grown again, or replaced, while the daemon was down, its turn
///   past the floor by position alone a copy of one that began before the write (a review).
///   Such a turn ends the wait once the file is proven (`Engine::floor_proven`); once it is
///   found changed, no turn does (`AgentEntry::floor_unprovable`).
fn wait_ended_by(agent: &mut crate::agent::AgentEntry, event: &ObserverEvent, fresh: bool, unproven: bool) -> bool {
    if let Some(accepted) = &agent.awaiting_accepted {
        return match event {
            ObserverEvent::TurnStarted { turn, .. } | ObserverEvent::UserMessage { turn: Some(turn), .. } => turn == accepted,
            _ => false,
        };
    }
    if agent.awaiting_unplaced.is_some() {
        return line_answered(agent, event);
    }
    if !agent.awaiting_prompts.is_empty() {
        return awaited_prompt_recorded(agent, event, fresh, unproven);
    }
    let past = agent.awaiting_past.as_ref().map_or(fresh, |floor| past_cursor(event, floor));
    let ends = ends_the_wait(agent, event) && past;
    // In any session: a view lagging a session switch at the write leaves a floor in the
    // older session, which a replayed turn of the newer one passes, began when it may (a review).
    if ends && unproven && agent.awaiting_reopened {
        agent.reopened_end_unproven = true; // ended once the file is proven
        return false;
    }
    ends
}

/// ADM-5 (PTY, `AgentEntry::awaiting_prompts`): a wait, live or reopened, ends only when each
/// awaited prompt has come as a user message carrying it (HASH-1: Codex records the prompt
/// trimmed, as the hash is taken) past its own floor, not at any turn past a floor: the TUI
/// may take a prompt and start its turn seconds later, and a turn that began before the write
/// can lie past the floor (the view behind the rollout). Nor at the latest write's alone: a
/// plain send written while the wait was open may be recorded first (it steers, or joins a
/// turn about to start) while an earlier prompt sits queued (exploration seed 82398000). A
/// record not proven yet takes a reopened prompt only once the file is proven (EV-13, `fresh`
/// and `unproven` as for `wait_ended_by`). True when the last one came.
fn awaited_prompt_recorded(agent: &mut crate::agent::AgentEntry, event: &ObserverEvent, fresh: bool, unproven: bool) -> bool {
    let ObserverEvent::UserMessage { prompt_hash, .. } = event else { return false };
    if !ends_the_wait(agent, event) {
        return false;
    }
    // A record counts by its place: one without (none is known) takes nothing (a replay of
    // it could not be told from it), and the grace ends the wait.
    let Some(at) = event.cursor() else { return false };
    if agent.awaiting_prompts.iter().any(|p| p.taken_by.as_ref() == Some(&at) && &p.hash == prompt_hash) {
        return false; // a replay of a record already counted (of its text: a record of other text there is another)
    }
    // The latest write's first: its floor is the highest, and a record only an earlier one's
    // floor lets through (read late, replayed) still finds that one (a review).
    let past = |prompt: &crate::agent::AwaitedPrompt| prompt.past.as_ref().map_or(fresh, |floor| past_cursor(event, floor));
    let Some(prompt) = agent.awaiting_prompts.iter_mut().rev().find(|p| p.taken_by.is_none() && &p.hash == prompt_hash && past(p)) else {
        return false;
    };
    prompt.taken_by = Some(at);
    prompt.seen_unproven = unproven && prompt.reopened; // taken once the file is proven
    agent.awaiting_prompts.iter().all(crate::agent::AwaitedPrompt::taken)
}

/// ADM-13, CORR-6 (one user message, one write): `event`, a user message, may be an earlier
/// write's of its text in the agent's wait (ADM-5), not the send `claim`'s, written after them
/// (claims serialize the writes; a send joins the wait). Input is read in order, so the
/// messages of that text go to those writes first: the send's is at least the next one after
/// as many as there are earlier writes. The wait's own assignment (the latest write first)
/// says nothing of which write made which message (a review: a message taken for an earlier
/// write blocked the send's own). Counted as earlier writes: each one taken, and each untaken
/// one this message is not provably older than (`recorded_before_the_write`; a floor out of
/// reach proves nothing, a second review: such a reopened write, queued, was left out and its
/// message acknowledged the send). Counted as messages: the distinct ones the wait took for
/// good (`AwaitedPrompt::taken`) up to this one, in its session (one of another session is
/// not: unknown order, so the send is not acknowledged), this one included. Acknowledged by
/// such a message, the send's receipt said its prompt was recorded while it could sit queued
/// (the simulator's `caller.same_text_request`, seed 4690: an earlier return-final request of
/// the text, ended by a failed commit, its prompt taken and its turn not started). A wait
/// that ended (each write's message came) holds none.
fn earlier_write_may_carry(agent: &crate::agent::AgentEntry, claim: &RequestId, event: &ObserverEvent) -> bool {
    let ObserverEvent::UserMessage { prompt_hash, .. } = event else { return false };
    let same_text = || agent.awaiting_prompts.iter().filter(|p| &p.hash == prompt_hash);
    let earlier = same_text().filter(|p| p.request.as_ref() != Some(claim) && (p.taken() || !recorded_before_the_write(p, event))).count();
    if earlier == 0 {
        return false;
    }
    let at = event.cursor();
    let up_to_here = |c: &&Cursor| at.as_ref().is_some_and(|at| c.session == at.session && c.position <= at.position);
    let mut taken: Vec<&Cursor> = same_text().filter(|p| p.taken()).filter_map(|p| p.taken_by.as_ref()).filter(up_to_here).collect();
    taken.sort_by_key(|c| c.position);
    taken.dedup();
    let this_one_uncounted = !taken.iter().any(|c| Some(*c) == at.as_ref());
    taken.len() + usize::from(this_one_uncounted) <= earlier
}

/// ADM-13: `event` lies at or below `prompt`'s floor, in the floor's session: recorded before
/// that write, so never its message. A floor out of reach (`UNREACHABLE_FLOOR`) says no record
/// can be proven the write's, not that none is: it proves nothing here.
fn recorded_before_the_write(prompt: &crate::agent::AwaitedPrompt, event: &ObserverEvent) -> bool {
    let Some(floor) = prompt.past.as_ref().filter(|floor| floor.position != crate::agent::UNREACHABLE_FLOOR) else { return false };
    event.session() == Some(&floor.session) && event.position().is_some_and(|position| position <= floor.position)
}

/// ADM-5 (`AgentEntry::awaiting_unplaced`): whether `event`, the app-server's answer to the
/// awaited managed line (written live, or found unfinished by a restart), ends the wait. Only
/// an answer to that very line moves it (the line was read, and every one before it). A
/// refusal ends it (no turn will come of it; an error under the id after an answer we did
/// not see also means the line was read). An acceptance ends it when the accepted turn
/// already runs (the line steered it, `ends_the_wait`), else it becomes the wait for that
/// turn's start (`awaiting_accepted`), whoever opened it (a human's line accepted into the
/// same turn first is no reason to wait on: a review): ended at the reply, the next prompt
/// could be written into the turn starting (the reply comes 15-20 ms before `turn/started`,
/// RF-7; a review found it).
fn line_answered(agent: &mut crate::agent::AgentEntry, event: &ObserverEvent) -> bool {
    let (id, accepted) = match event {
        ObserverEvent::TurnAccepted { id, turn, session, position } => (id, Some((turn, Cursor { session: session.clone(), position: *position }))),
        ObserverEvent::RequestRefused { id, .. } => (id, None),
        _ => return false,
    };
    if agent.awaiting_unplaced.as_deref() != Some(id.as_str()) {
        return false;
    }
    agent.awaiting_unplaced = None;
    let Some((turn, at)) = accepted else { return true };
    if ends_the_wait(agent, event) {
        return true;
    }
    agent.awaiting_past = Some(at);
    agent.awaiting_accepted = Some(turn.clone());
    false
}

/// An event in another session than `floor`'s, or past its position; none past a floor out of
/// reach, in any session (`crate::agent::UNREACHABLE_FLOOR`, `AgentEntry::floor_unprovable`).
fn past_cursor(event: &ObserverEvent, floor: &Cursor) -> bool {
    if floor.position == crate::agent::UNREACHABLE_FLOOR {
        return false;
    }
    event.session() != Some(&floor.session) || event.position().is_some_and(|p| p > floor.position)
}
