//! Control-socket handlers for requests: admit, get (with the evidence trail), cancel, and the
//! `request watch` stream (TERM-3, CONN-3).

use super::server::query;
use super::Context;
use crate::driver::DriverMsg;
use crate::protocol::{exit, AdmitRequest, Reply};
use serde_json::{json, Value};
use std::sync::Arc;
use wakterm_engine::limits::echoed;
use crate::store::{Store, StoreError};
use tokio::sync::oneshot;
use wakterm_engine::{Classification, Engine, OpId, RequestId};

/// Terminal events read from the store per page while a watcher catches up.
pub const WATCH_PAGE: usize = 512;

pub(super) async fn admit_prompt(context: &Arc<Context>, admit: AdmitRequest) -> Reply {
    let generated_id = admit.request_id.is_none() || admit.generated_id;
    let request_id = admit.request_id.clone().unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    // MGD-7: the write nonce is drawn here, never taken from the caller (who could then forge
    // a refusal). The halves of a random UUID XORed: its fixed version and variant bits meet
    // random ones, so all 64 bits are random.
    let write_nonce = {
        let (high, low) = uuid::Uuid::new_v4().as_u64_pair();
        high ^ low
    };
    let command = admit.into_command(request_id.clone(), generated_id, write_nonce);
    let (reply, answer) = oneshot::channel();
    if context.inbox.send(DriverMsg::Admit { command, reply }).await.is_err() {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is shutting down");
    }
    let Ok(receipt) = answer.await else {
        // The engine had the command: the prompt may have been written (IDEM-7).
        let message = format!("the daemon stopped before answering; the prompt may have been written. Replay with request id {request_id} after the daemon restarts to learn the outcome; never retry under a new id");
        let body = json!({"schema": "wakterm.error.v1", "error": "daemon_stopping", "classification": "indeterminate", "request_id": request_id, "message": message});
        return Reply { exit_code: exit::INDETERMINATE, body };
    };
    receipt.assert_consistent();
    let exit_code = match receipt.classification {
        Classification::Accepted => exit::OK,
        Classification::Indeterminate => exit::INDETERMINATE,
        _ => exit::REJECTED,
    };
    Reply { exit_code, body: serde_json::to_value(&receipt).expect("receipts serialise") }
}

/// SUB-*: a submit call; the submission id is made here (the engine has no randomness). Exit
/// 0 acknowledged, 4 rejected (nothing written, retry-safe), 5 written without acknowledgement
/// or failed part-way (not retry-safe).
pub(super) async fn submit(context: &Arc<Context>, submit: crate::protocol::SubmitRequest) -> Reply {
    let command = wakterm_engine::SubmitCommand {
        op: OpId(0),
        submission_id: uuid::Uuid::new_v4().to_string(),
        target: submit.target,
        exact_agent_id: submit.exact_agent_id,
        text: submit.text,
        timeout_ms: submit.timeout_ms,
    };
    let (reply, answer) = oneshot::channel();
    if context.inbox.send(DriverMsg::Submit { command, reply }).await.is_err() {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is shutting down");
    }
    let Ok(receipt) = answer.await else {
        // The engine had the command: it may have been written (SUB-5).
        let message = "the daemon stopped before answering; the command may have been written. There is no submission record to replay (SUB-6): look at the agent before submitting again";
        let body = json!({"schema": "wakterm.error.v1", "error": "daemon_stopping", "write_state": "unknown", "acknowledged": false, "retry_safe": false, "message": message});
        return Reply { exit_code: exit::INDETERMINATE, body };
    };
    receipt.assert_consistent();
    let exit_code = match receipt.status {
        wakterm_engine::SubmitStatus::Acknowledged => exit::OK,
        wakterm_engine::SubmitStatus::Rejected => exit::REJECTED,
        wakterm_engine::SubmitStatus::Unacknowledged | wakterm_engine::SubmitStatus::WriteFailed => exit::INDETERMINATE,
    };
    Reply { exit_code, body: serde_json::to_value(&receipt).expect("receipts serialise") }
}

pub(super) async fn request_get(context: &Arc<Context>, request_id: &str, evidence: bool) -> Reply {
    let Ok(id) = RequestId::parse(request_id) else {
        return Reply::error(exit::USAGE, "request_id_malformed", format!("{} is not a UUID", echoed(request_id)));
    };
    let asked = id.clone();
    let view = query(context, move |engine: &Engine| {
        let view = engine.request_as_committed(&asked).map(|record| request_view(&record, engine.published_terminal(&asked).cloned(), evidence));
        (view, engine.admission_in_progress(&asked))
    })
    .await;
    let Some((view, admitting)) = view else {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is shutting down");
    };
    let view = match view {
        Some(view) => view,
        // HIST-1: a finished request is no longer in memory: the store has it, final (a
        // replay of it may be in progress, waiting for the same lookup, HIST-2).
        None => {
            let store = context.store.clone();
            let loaded = tokio::task::spawn_blocking(move || super::effects::load_stored_request(&store, &id)).await;
            match loaded {
                Ok(Ok(Some(record))) => {
                    let published = record.terminal.clone();
                    request_view(&record, published, evidence)
                }
                Ok(Ok(None)) => Value::Null,
                Ok(Err(error)) => return Reply::error(exit::ERROR, "history_unreadable", error),
                Err(error) => return Reply::error(exit::ERROR, "history_unreadable", error.to_string()),
            }
        }
    };
    match view {
        // RF-6: no committed record yet, but no unknown id either (a caller who asked right
        // after its admit, MCP calls in flight together, read `request_not_found`: a hostile run).
        Value::Null if admitting => {
            let message = format!("request {request_id} is being admitted: it has no committed record yet; ask again once its admission answered (its receipt)");
            Reply::error(exit::NOT_FOUND, ADMISSION_IN_PROGRESS, message)
        }
        Value::Null => Reply::error(exit::NOT_FOUND, "request_not_found", format!("no request has id {request_id}")),
        view => Reply::ok(view),
    }
}

/// `request get`'s view of a record. `published` is its terminal event once durable and final
/// (TERM-2); a released record is not shown.
fn request_view(record: &wakterm_engine::RequestRecord, published: Option<wakterm_engine::TerminalEvent>, evidence: bool) -> Value {
    if record.phase == wakterm_engine::Phase::Released {
        return Value::Null;
    }
    let state = match (&published, &record.terminal) {
        (Some(event), _) => serde_json::to_value(event.state).unwrap_or_default(),
        (None, Some(_)) => json!("terminal_pending"),
        (None, None) => json!(record.phase.as_str()),
    };
    let mut view = json!({
        "schema": "wakterm.agent-request.v1",
        "request_id": record.request_id,
        "agent_id": record.agent_id,
        "phase": record.phase,
        "state": state,
        "operation": record.operation,
        "return_mode": record.return_mode,
        "incarnation": record.incarnation,
        "bound_provider_turn": record.bound_turn,
        "deadline_ms": record.deadline_ms,
        "receipt": record.receipt,
        "terminal_event": published,
    });
    if evidence {
        // RF-6, TERM-2: the end is shown once its terminal event is published.
        let steps: Vec<&wakterm_engine::Evidence> =
            record.evidence.iter().filter(|e| e.step != wakterm_engine::EvidenceStep::Terminal || published.is_some()).collect();
        view["evidence"] = json!(steps);
        view["evidence_dropped"] = json!(record.evidence_dropped);
    }
    view
}

pub(super) async fn request_cancel(context: &Arc<Context>, request_id: String) -> Reply {
    // INP-2, as `request get`: an id that is no UUID is a usage error, not "not found".
    if RequestId::parse(&request_id).is_err() {
        return Reply::error(exit::USAGE, "request_id_malformed", format!("{} is not a UUID", echoed(&request_id)));
    }
    let (reply, answer) = oneshot::channel();
    let asked = request_id.clone();
    if context.inbox.send(DriverMsg::Cancel { request_id, reply }).await.is_err() {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon is shutting down");
    }
    let Ok(outcome) = answer.await else {
        return Reply::error(exit::ERROR, "daemon_stopping", "the daemon stopped before answering");
    };
    let exit_code = cancel_exit_code(&outcome);
    let mut body = serde_json::to_value(&outcome).expect("outcomes serialise");
    body["schema"] = json!(CANCEL_SCHEMA);
    // Every outcome names the request it answers (`cancelled` and `already_terminal` did not).
    if body.get("request_id").is_none() {
        body["request_id"] = json!(RequestId::parse(&asked).map(|id| id.as_str().to_string()).unwrap_or(asked));
    }
    Reply { exit_code, body }
}

/// RF-6: `request get`'s error for an id whose admission has not committed its record yet.
pub const ADMISSION_IN_PROGRESS: &str = "request_admission_in_progress";

/// RF-4: a cancel's exit code (the README's table).
fn cancel_exit_code(outcome: &wakterm_engine::CancelOutcome) -> i32 {
    use wakterm_engine::CancelOutcome;
    match outcome {
        CancelOutcome::Cancelled { .. } | CancelOutcome::AlreadyTerminal { .. } => exit::OK,
        CancelOutcome::NotFound { .. } => exit::NOT_FOUND,
        CancelOutcome::NotReturnFinal { .. } | CancelOutcome::AdmissionInProgress { .. } => exit::REJECTED,
        // HIST-3: a store error (the history could not be read), nothing changed: ask again.
        // It was exit 4, the code of a definitive rejection (a hostile run).
        CancelOutcome::Failed { .. } => exit::ERROR,
        // Not definitive: the end may still be recorded (a retry) or forgotten (a restart).
        CancelOutcome::CommitFailed { .. } => exit::ERROR,
    }
}

/// The schema of `agent request cancel`'s answer.
pub const CANCEL_SCHEMA: &str = "wakterm.agent-request-cancel.v1";

/// What `request watch` reads: every terminal event, stored and live (TERM-3).
#[derive(Clone)]
pub(super) struct TerminalEvents;

impl super::stream::Feed for TerminalEvents {
    type Event = wakterm_engine::TerminalEvent;
    const PAGE: usize = WATCH_PAGE;

    fn sequence(event: &Self::Event) -> u64 {
        event.terminal_event_sequence
    }

    fn wanted(&self, _event: &Self::Event) -> bool {
        true
    }

    fn through(&self) -> Option<u64> {
        None // terminal events are stored and published in commit order (TERM-2)
    }

    fn page(&self, store: &Store, after: u64, _through: Option<u64>) -> Result<Vec<(u64, String)>, StoreError> {
        Ok(store.terminal_events_after(after, WATCH_PAGE)?.into_iter().map(|e| (e.sequence, e.event_json)).collect())
    }

    /// HIST-4: terminal events of requests retention forgot cannot be replayed.
    fn too_old(&self, store: &Store, after: u64) -> Result<Option<Reply>, StoreError> {
        let (pruned, oldest) = (store.terminal_pruned_through()?, store.terminal_events_after(0, 1)?.first().map(|e| e.sequence));
        let rebase = json!({"take": "request get <request_id> for each request still of interest", "then": "request watch --after <pruned_through>"});
        let how = "those requests are forgotten; read the ones still of interest with `request get`, then watch --after pruned_through";
        Ok(super::events::too_old("terminal events", after, pruned, oldest, how, rebase))
    }

    fn last_durable(&self, store: &Store) -> Result<u64, StoreError> {
        store.last_terminal_sequence()
    }

    const REBASE: &'static str = "read the requests still of interest with `request get`, then watch --after last_sequence";
}

/// TERM-3, CONN-3: the `request watch` stream (`stream::serve`).
pub(super) async fn watch(peer: tokio::net::unix::OwnedReadHalf, writer: &mut tokio::net::unix::OwnedWriteHalf, context: &Arc<Context>, after: u64, once: bool) {
    let live = context.terminal.subscribe();
    super::stream::serve(peer, writer, context, TerminalEvents, live, after, once).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use wakterm_engine::{CancelOutcome, RequestId};

    /// RF-4, HIST-3: a cancel that could not read the history changed nothing and is a store
    /// error (exit 1), not a definitive rejection (exit 4: a hostile run read it as one).
    #[test]
    fn hist_3_a_cancel_the_history_could_not_answer_exits_as_an_error() {
        let request_id = RequestId::parse("8a0c2e4a-6c8e-4a0c-9e2a-4c6e8a0c2e4a").unwrap();
        let failed = CancelOutcome::Failed { request_id: request_id.clone(), error: "the request history could not be read".into() };
        assert_eq!(cancel_exit_code(&failed), exit::ERROR);
        assert_eq!(cancel_exit_code(&CancelOutcome::AdmissionInProgress { request_id: request_id.clone() }), exit::REJECTED);
        assert_eq!(cancel_exit_code(&CancelOutcome::NotFound { request_id: request_id.as_str().to_string() }), exit::NOT_FOUND);
        assert_eq!(cancel_exit_code(&CancelOutcome::CommitFailed { request_id, error: "disk full".into() }), exit::ERROR);
    }
}
