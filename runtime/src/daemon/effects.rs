//! The real adapters behind the driver's `Effects` port: SQLite writer thread, holder panes
//! and Codex observers. Every blocking call runs on a blocking thread; results return through
//! the driver's inbox.

use super::agents::{observed, observed_inputs, AgentRuntime, AgentTable};
use super::faults::{crash_if, FaultPoint};
use crate::driver::{DriverMsg, Effects};
use crate::holder::HolderError;
use crate::store::{StoreOp, StoreWriter};
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};
use wakterm_engine::{
    AgentEvent, AgentId, Cursor, DeliveryOutcome, Incarnation, Input, ObserverEvent, PersistOp, RequestId, SessionId, TerminalEvent,
};

/// EV-2: where published agent events go: live subscribers, and the sequence published
/// through (store reads for catch-up stop there, so a reader never passes a number whose
/// commit is still pending).
#[derive(Clone)]
pub struct EventFeed {
    pub live: broadcast::Sender<Arc<super::stream::Live<AgentEvent>>>,
    pub published: tokio::sync::watch::Sender<u64>,
}

impl EventFeed {
    pub fn new(published_through: u64) -> EventFeed {
        let (live, _) = broadcast::channel(super::WATCH_BUFFER);
        EventFeed { live, published: tokio::sync::watch::Sender::new(published_through) }
    }

    pub fn published_through(&self) -> u64 {
        *self.published.borrow()
    }
}

pub struct RealEffects {
    pub inbox: mpsc::Sender<DriverMsg>,
    pub agents: AgentTable,
    pub writer: Arc<StoreWriter>,
    pub terminal: broadcast::Sender<Arc<super::stream::Live<TerminalEvent>>>,
    pub events: EventFeed,
    /// HIST-2: the read side of the store, for finished requests named again.
    pub store: Arc<crate::store::Store>,
    /// REC-5: the test-only crash point selected by `WAKTERM_FAULT`, if any.
    pub fault: Option<FaultPoint>,
}

impl RealEffects {
    fn agent(&self, agent_id: &AgentId) -> Option<Arc<AgentRuntime>> {
        self.agents.lock().expect("agent table").get(agent_id.as_str()).cloned()
    }
}

/// MON-1: a resume or an expectation (OBS-4) changed the engine's view (attached, or lost);
/// the snapshot after its events keeps the catalog in step, where the monitor, which compares
/// with what it sent last, might see nothing new to send. Sent under the observer lock, in one
/// step with the events (a resume's replay makes one batch, EV-3).
fn send_with_snapshot(
    agent: &AgentRuntime,
    observer: &super::agent_observer::AgentObserver,
    agent_id: AgentId,
    events: Vec<ObserverEvent>,
    screen: Option<&str>,
    inbox: &mpsc::Sender<DriverMsg>,
) {
    let mut step = observed_inputs(&agent_id, events);
    let snapshot = observer.current_snapshot(screen);
    agent.note_sent(observer.rollout_path(), &snapshot);
    step.push(Input::ObserverSnapshot { agent_id, snapshot });
    let _ = inbox.blocking_send(DriverMsg::Inputs(step));
}

impl Effects for RealEffects {
    fn refresh(&mut self, refresh_id: u64, agent_id: AgentId) {
        let agent = self.agent(&agent_id);
        let inbox = self.inbox.clone();
        tokio::task::spawn_blocking(move || {
            let answer = |snapshot, pane| Input::ObserverRefreshed { refresh_id, agent_id: agent_id.clone(), snapshot, pane };
            match agent {
                None => {
                    let _ = inbox.blocking_send(DriverMsg::Input(answer(Err("the agent is not known to the daemon".to_string()), Default::default())));
                }
                Some(agent) => {
                    let _ = refresh_agent(&agent, &agent_id, &inbox, answer);
                }
            }
        });
    }

    fn resume(&mut self, agent_id: AgentId, from: Cursor, incarnation: Incarnation) {
        let agent = self.agent(&agent_id);
        let inbox = self.inbox.clone();
        tokio::task::spawn_blocking(move || {
            let Some(agent) = agent else {
                let lost = ObserverEvent::SessionLost { reason: "the agent is not known to the daemon".to_string(), session: None, before: None };
                let _ = inbox.blocking_send(observed(&agent_id, lost));
                return;
            };
            let look = agent.screen_look(); // before the observer lock, as a refresh does
            let screen = look.as_ref().map(|look| look.text.clone());
            let mut guard = agent.observer.lock().expect("observer lock");
            let Some(observer) = guard.as_mut() else {
                let lost = ObserverEvent::SessionLost { reason: "no process runs behind the agent".to_string(), session: None, before: None };
                let _ = inbox.blocking_send(observed(&agent_id, lost));
                return;
            };
            if observer.incarnation() != &incarnation {
                // REC-2: the agent's process changed before the resume ran; the cursor says
                // nothing about this process's output. A new observer is installed before the
                // agent's new facts are sent, so the engine is about to hear of the change and
                // end the requests armed on the old process (CORR-1); it expects no answer.
                if agent.facts().incarnation.as_ref() == Some(&incarnation) {
                    // Cannot happen (the observer follows the liveness the facts come from);
                    // should it, the engine still waits for this answer: a loss, never silence.
                    tracing::warn!(%agent_id, "the observer reads another process than the agent's facts name");
                    let reason = "the agent's observer reads another process".to_string();
                    let lost = ObserverEvent::SessionLost { reason, session: Some(from.session.clone()), before: None };
                    let _ = inbox.blocking_send(observed(&agent_id, lost));
                } else {
                    tracing::info!(%agent_id, "a resume for a process the agent no longer runs is dropped");
                }
                return;
            }
            // MON-3: the look's floor, measured after it (the tail the resume re-reads, if any).
            if let Some(look) = &look {
                agent.floor_look(look, observer);
            }
            let events = observer.resume(&from);
            send_with_snapshot(&agent, observer, agent_id, events, screen.as_deref(), &inbox);
        });
    }

    fn expect_session(&mut self, agent_id: AgentId, session: SessionId, incarnation: Incarnation) {
        let Some(agent) = self.agent(&agent_id) else { return }; // stopped: nothing to expect
        let inbox = self.inbox.clone();
        tokio::task::spawn_blocking(move || {
            let look = agent.screen_look(); // before the observer lock, as a refresh does
            let screen = look.as_ref().map(|look| look.text.clone());
            let mut guard = agent.observer.lock().expect("observer lock");
            // Another process's observer (or none): its registration reset the stream's mark.
            let Some(observer) = guard.as_mut().filter(|o| o.incarnation() == &incarnation) else { return };
            if let Some(look) = &look {
                agent.floor_look(look, observer); // MON-3: the look's floor, as for a resume
            }
            let events = observer.expect(session);
            if events.is_empty() {
                return; // attached already, or nothing proven yet: the next looks go on
            }
            send_with_snapshot(&agent, observer, agent_id, events, screen.as_deref(), &inbox);
        });
    }

    fn persist(&mut self, token: u64, ops: Vec<PersistOp>, more_follow: bool) {
        let inbox = self.inbox.clone();
        let store_ops: Vec<StoreOp> = ops.iter().map(crate::store::op_for).collect();
        let marks_submitted = ops.iter().any(|op| matches!(op, PersistOp::PutRequest(r) if r.phase == wakterm_engine::Phase::Submitted));
        let fault = self.fault;
        let done = Box::new(move |result: Result<crate::store::CommitInfo, crate::store::StoreError>| {
            if marks_submitted && result.is_ok() {
                crash_if(fault, FaultPoint::AfterSubmitted);
            }
            let result = result.map(|_| ()).map_err(|e| e.to_string());
            if let Err(error) = &result {
                tracing::warn!(token, %error, "commit failed; the engine retries it");
            }
            let _ = inbox.blocking_send(DriverMsg::Input(Input::PersistAcked { token, result }));
        });
        if let Err(error) = self.writer.submit_in_step(store_ops, done, more_follow) {
            // The callback is never called when submit fails: answer here, off the reactor.
            let inbox = self.inbox.clone();
            tracing::warn!(token, %error, "commit not queued; the engine retries it");
            tokio::spawn(async move {
                let result = Err(error.to_string());
                let _ = inbox.send(DriverMsg::Input(Input::PersistAcked { token, result })).await;
            });
        }
    }

    fn deliver(&mut self, delivery_id: u64, request_id: RequestId, agent_id: AgentId, incarnation: Incarnation, bytes: Vec<u8>, expect_writes: Option<u64>) {
        // Deliver is only asked for after the registration commit was acknowledged.
        crash_if(self.fault, FaultPoint::AfterRegister);
        let agent = self.agent(&agent_id);
        let inbox = self.inbox.clone();
        let fault = self.fault;
        let start_by_ms = write_start_deadline(wakterm_engine::limits::DELIVERY_TIMEOUT_MS);
        tokio::task::spawn_blocking(move || {
            super::faults::pause_write_if(fault); // a test types meanwhile
            // CORR-5, ADM-5: where the rollout ends before the first byte can reach the pane
            // (a PTY agent's; a managed one's turns have ids). The observer's lock may be held
            // by a look asking the same holder for the screen: the write would queue behind
            // that call anyway. A poisoned lock gives no end, never a failed write.
            let record_end = agent.as_ref().filter(|agent| !agent.record.managed).and_then(|agent| agent.observer.lock().ok()?.as_ref()?.record_end());
            let outcome = match agent {
                None => Some(DeliveryOutcome::Refused { reason: "the agent is not known to the daemon".to_string() }),
                Some(agent) => write_once(&agent, &incarnation, &bytes, start_by_ms, expect_writes),
            };
            if outcome == Some(DeliveryOutcome::Complete) {
                crash_if(fault, FaultPoint::AfterWrite);
            }
            // LOG-1: the write's outcome, never its bytes.
            tracing::debug!(%request_id, %agent_id, bytes = bytes.len(), ?outcome, "pane write");
            // ADM-12: no outcome is not an outcome; the engine's deadline and its lost-write
            // hold decide.
            if let Some(outcome) = outcome {
                let _ = inbox.blocking_send(DriverMsg::Input(Input::Delivered { delivery_id, outcome, record_end }));
            }
        });
    }

    fn submit_write(&mut self, delivery_id: u64, agent_id: AgentId, incarnation: Incarnation, write: wakterm_engine::SplitWrite, expect_writes: Option<u64>) {
        let agent = self.agent(&agent_id);
        let inbox = self.inbox.clone();
        let start_by_ms = write_start_deadline(wakterm_engine::submit::SPLIT_WRITE_TIMEOUT_MS);
        let fault = self.fault;
        tokio::task::spawn_blocking(move || {
            super::faults::pause_write_if(fault); // a test types meanwhile
            let outcome = match agent {
                None => Some(wakterm_engine::SplitOutcome::Refused { reason: "the agent is not known to the daemon".to_string() }),
                Some(agent) => super::submit::split_write(&agent, &incarnation, &write, (start_by_ms, expect_writes)),
            };
            // SUB-1: as for `deliver`, a call that timed out reports nothing.
            if let Some(outcome) = outcome {
                let _ = inbox.blocking_send(DriverMsg::Input(Input::SubmitWritten { delivery_id, outcome }));
            }
        });
    }

    fn watch_pane(&mut self, watch_id: u64, agent_id: AgentId, boundary: wakterm_engine::EnterBoundary, wait_ms: u64) {
        let agent = self.agent(&agent_id);
        let inbox = self.inbox.clone();
        let started = std::time::Instant::now();
        tokio::task::spawn_blocking(move || {
            let sample = match agent {
                None => Err("the agent is not known to the daemon".to_string()),
                Some(agent) => super::submit::watch(&agent, &boundary, wait_ms, started),
            };
            let _ = inbox.blocking_send(DriverMsg::Input(Input::PaneWatched { watch_id, sample }));
        });
    }

    fn publish(&mut self, event: TerminalEvent) {
        let _ = self.terminal.send(super::stream::Live::shared(event)); // no subscriber is fine: the store has it
    }

    fn load_request(&mut self, load_id: u64, request_id: wakterm_engine::RequestId) {
        let store = self.store.clone();
        let inbox = self.inbox.clone();
        tokio::task::spawn_blocking(move || {
            let record = load_stored_request(&store, &request_id);
            let _ = inbox.blocking_send(DriverMsg::Input(Input::RequestLoaded { load_id, record }));
        });
    }

    fn publish_event(&mut self, event: AgentEvent) {
        let sequence = event.sequence;
        assert!(sequence > self.events.published_through(), "EV-2: published in sequence order");
        self.events.published.send_replace(sequence);
        let _ = self.events.live.send(super::stream::Live::shared(event)); // no subscriber is fine: the store has it
    }

    fn events_settled(&mut self, through: u64) {
        assert!(through >= self.events.published_through(), "EV-2: every published sequence is settled");
        self.events.published.send_if_modified(|at| std::mem::replace(at, through) != through);
    }
}

/// HIST-2: a stored request record; an unreadable one is an error (never "absent").
pub fn load_stored_request(store: &crate::store::Store, request_id: &wakterm_engine::RequestId) -> Result<Option<wakterm_engine::RequestRecord>, String> {
    let stored = store.get_request(request_id.as_str()).map_err(|e| e.to_string())?;
    stored
        .map(|stored| serde_json::from_str(&stored.record_json).map_err(|e| format!("request {request_id} in the database is unreadable: {e}")))
        .transpose()
}

/// ADM-3: liveness first (a changed process is reported before the snapshot), then the
/// observer's rollout (one step at most, MON-4) and the screen. The events and
/// `answer(snapshot)` go in one message (one engine step, so the events make one batch, EV-3)
/// sent while the observer lock is held, so no monitor event can slip between them and the snapshot never arrives older than
/// an event the engine already applied.
pub fn refresh_agent(
    agent: &AgentRuntime,
    agent_id: &AgentId,
    inbox: &mpsc::Sender<DriverMsg>,
    answer: impl FnOnce(Result<wakterm_engine::ObserverSnapshot, String>, wakterm_engine::pane_look::PaneLook) -> Input,
) -> Result<wakterm_engine::ObserverSnapshot, String> {
    let (look, pane) = agent.forward_liveness_and_screen(inbox);
    let screen = look.as_ref().map(|look| look.text.as_str());
    let mut guard = agent.observer.lock().expect("observer lock");
    let mut step = Vec::new(); // the read's events, then the answer
    let mut behind = false;
    let snapshot = match guard.as_mut() {
        None => Err("no process runs behind the agent".to_string()),
        Some(observer) => {
            // MON-3: the look came before this lock: the rollout's length now is past it. Kept
            // for the monitor's runs, which may reuse the look; this refresh decides on its look
            // as it is (a `Working` indicator always counts for an admission).
            if let Some(look) = &look {
                agent.floor_look(look, observer);
            }
            // MON-2: rediscovery only when a rollout no agent tails changed since the last one.
            let refresh = agent.with_discovery_scope(|rediscover| observer.refresh_scoped(screen, rediscover));
            agent.note_refreshed_view(observer.rollout_path(), Ok(refresh.snapshot.clone()));
            step = observed_inputs(agent_id, refresh.events);
            behind = observer.behind();
            Ok(refresh.snapshot)
        }
    };
    step.push(answer(snapshot.clone(), pane));
    let _ = inbox.blocking_send(DriverMsg::Inputs(step));
    drop(guard);
    // MON-4: the read stopped at its step (its snapshot says the turn is unknown): the monitor
    // reads the rest, one step at a time, as for its own cut runs.
    if behind {
        agent.read_on();
    }
    snapshot
}

/// ADM-8 / ADM-10: one write through the holder. Refused only when provably nothing was
/// written (no connection, or the pane runs another process than the one admitted).
///
/// The process is the daemon's last known liveness (the admission's refresh read it moments
/// ago, and every change the holder pushes lands there before the engine hears of it), not a
/// new `info` call: the holder checks the process atomically with the write, so a liveness
/// that is already stale only turns into a refusal with nothing written (issue 10: one holder
/// round trip less per admission).
///
/// ADM-12: None when the holder did not answer within the call's bound. That is no outcome:
/// the holder took the request and, stalled, may still write it. Reporting it as a failed
/// write would end the engine's lost-write hold while the write can still land.
fn write_once(agent: &AgentRuntime, incarnation: &Incarnation, bytes: &[u8], start_by_ms: u64, expect_writes: Option<u64>) -> Option<DeliveryOutcome> {
    let liveness = agent.liveness.lock().expect("liveness lock").clone();
    let (Some(process), true) = (liveness.process, liveness.incarnation().as_ref() == Some(incarnation)) else {
        return Some(DeliveryOutcome::Refused { reason: "the pane runs a different process than the one admitted".to_string() });
    };
    let written = agent.with_kept_connection(|client| {
        // The holder re-checks the process atomically with the write, so a concurrent
        // `agent restart` can never receive a prompt admitted for the process it replaced.
        // ADM-4: and that no input reached the pane since the look the admission decided on.
        let expect = crate::holder::protocol::ExpectedProcess { writes: expect_writes, ..process.into() };
        delivery_outcome(client.write_expecting(bytes, Some(expect), Some(start_by_ms)), bytes.len())
    });
    // No connection: the write was never sent.
    written.unwrap_or_else(|error| Some(DeliveryOutcome::Refused { reason: format!("cannot reach the pane: {error}") }))
}

/// ADM-12: the holder begins a write by the engine's deadline for its result
/// (`result_wait_ms` from now) or never. Taken as the driver hands the write out, right after
/// the engine asked for it (the deadline may trail the engine's by that moment; the hold covers
/// it), so a stalled holder cannot start a write the engine has given up on.
fn write_start_deadline(result_wait_ms: u64) -> u64 {
    crate::holder::write_start_by(crate::holder::protocol::monotonic_ms(), result_wait_ms)
}

/// The outcome of a write's call of `len` bytes; None when the holder did not answer within the
/// call's bound (see [`write_once`]).
fn delivery_outcome(result: Result<crate::holder::WriteOutcome, HolderError>, len: usize) -> Option<DeliveryOutcome> {
    Some(match result {
        Ok(outcome) if outcome.refused.is_some() => {
            assert_eq!(outcome.bytes_written, 0, "a refused write wrote nothing");
            let reason = outcome.error.unwrap_or_default();
            match outcome.refused {
                Some(crate::holder::protocol::WriteRefusal::InputSinceLook) => DeliveryOutcome::InputSinceLook { detail: reason },
                _ => DeliveryOutcome::Refused { reason },
            }
        }
        Ok(outcome) if outcome.error.is_none() && outcome.bytes_written == len as u64 => DeliveryOutcome::Complete,
        Ok(outcome) => DeliveryOutcome::Failed {
            bytes_written: outcome.bytes_written,
            error: outcome.error.unwrap_or_else(|| "short write".to_string()),
        },
        Err(error) if left_unknown(&error, "a pane write") => return None,
        // Refused before anything was sent: nothing can have been written.
        Err(error @ HolderError::NotSent { .. }) => DeliveryOutcome::Refused { reason: error.to_string() },
        Err(error) => DeliveryOutcome::Failed { bytes_written: 0, error: error.to_string() },
    })
}

/// ADM-12, SUB-1: whether a write call's failure leaves the write's fate unknown (no outcome):
/// the holder did not answer within the call's bound, but it holds the request and, stalled,
/// may still run it. Said in the log.
pub(super) fn left_unknown(error: &HolderError, what: &str) -> bool {
    let unknown = matches!(error, HolderError::Timeout { .. });
    if unknown {
        tracing::warn!(%error, "{what} has no outcome: the holder may still write it (ADM-12)");
    }
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::holder::WriteOutcome;
    use std::time::Duration;

    /// ADM-12: a write call the holder did not answer within its bound has no outcome (the
    /// holder may still write it, so the engine's hold must not end); every answer, and a
    /// holder that went away, gives one.
    #[test]
    fn adm_12_a_write_call_that_timed_out_has_no_outcome() {
        let timeout = HolderError::Timeout { op: "write", after: Duration::from_secs(25) };
        assert_eq!(delivery_outcome(Err(timeout), 5), None);
        let gone = HolderError::PeerGone { op: "write", detail: "closed".into() };
        assert!(matches!(delivery_outcome(Err(gone), 5), Some(DeliveryOutcome::Failed { bytes_written: 0, .. })));
        let whole = WriteOutcome { bytes_written: 5, error: None, refused: None };
        assert_eq!(delivery_outcome(Ok(whole), 5), Some(DeliveryOutcome::Complete));
        let short = WriteOutcome { bytes_written: 2, error: Some("eio".into()), refused: None };
        assert!(matches!(delivery_outcome(Ok(short), 5), Some(DeliveryOutcome::Failed { bytes_written: 2, .. })));
        let unsent = HolderError::NotSent { detail: "connection unusable".into() };
        assert!(matches!(delivery_outcome(Err(unsent), 5), Some(DeliveryOutcome::Refused { .. })), "nothing was sent");
    }

    /// ADM-12 relies on the engine giving up on a write before the daemon's call to the
    /// holder does: the write is then already held as lost when the call times out.
    #[test]
    fn adm_12_the_engine_gives_up_on_a_write_before_the_holder_call_does() {
        let bound = crate::holder::write_call_bound(crate::holder::HOLDER_CALL_TIMEOUT);
        assert!(u128::from(wakterm_engine::limits::DELIVERY_TIMEOUT_MS) < bound.as_millis());
        let steps = crate::holder::write_steps_call_bound(crate::holder::HOLDER_CALL_TIMEOUT, Duration::from_millis(wakterm_engine::submit::SUBMIT_GAP_MS), 3);
        assert!(u128::from(wakterm_engine::submit::SPLIT_WRITE_TIMEOUT_MS) < steps.as_millis());
    }
}
