//! The durable request record: idempotency state (IDEM-*) and return-final progress (RF-1).

use crate::ids::{AgentId, Incarnation, RequestId, SessionId, TurnId};
use crate::observer::{Cursor, ProcessIdentity};
use crate::prompt::PasteMode;
use crate::receipt::{CorrelationSource, Operation, Receipt, ReturnMode};
use crate::terminal::TerminalEvent;
use serde::{Deserialize, Serialize};

/// RF-1: where a request is in its life. Every change is persisted before it is relied on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Durable before the pane write; the write may or may not have happened (REC-1).
    Registered,
    /// Definitively rejected after registration: nothing was written, the id is free again
    /// (IDEM-6).
    Released,
    /// A one-way admission with its final receipt.
    Settled,
    /// Return-final: the write completed and the submitted marker is durable.
    Submitted,
    /// Return-final: the first new provider turn carried our prompt (CORR-5, CORR-6).
    Bound,
    /// Return-final: exactly one terminal event is durable (RF-5).
    Terminal,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Registered => "registered",
            Phase::Released => "released",
            Phase::Settled => "settled",
            Phase::Submitted => "submitted",
            Phase::Bound => "bound",
            Phase::Terminal => "terminal",
        }
    }

    /// Return-final phases in which correlation is still running.
    pub fn is_correlating(self) -> bool {
        matches!(self, Phase::Submitted | Phase::Bound)
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub request_id: RequestId,
    pub agent_id: AgentId,
    /// IDEM-1: hex SHA-256 over the caller's input.
    pub fingerprint: String,
    pub operation: Operation,
    pub return_mode: ReturnMode,
    pub paste_mode: PasteMode,
    pub final_timeout_ms: u64,
    pub incarnation: Incarnation,
    pub process: Option<ProcessIdentity>,
    pub session: Option<SessionId>,
    pub correlation_source: Option<CorrelationSource>,
    pub armed: Option<Cursor>,
    pub baseline_turn: Option<TurnId>,
    /// HASH-1 hash of the prompt; the prompt text itself is never stored.
    pub prompt_hash: String,
    pub phase: Phase,
    pub receipt: Option<Receipt>,
    pub bound_turn: Option<TurnId>,
    /// Absolute engine time at which the request times out (RF-3); none when timeout is 0.
    pub deadline_ms: Option<u64>,
    pub terminal: Option<TerminalEvent>,
    pub registered_ms: u64,
    pub updated_ms: u64,
}

impl RequestRecord {
    /// The receipt of an admission whose write was attempted (accepted or indeterminate):
    /// everything but the evidence comes from this record.
    pub fn written_receipt(
        &self,
        classification: crate::receipt::Classification,
        write_state: crate::receipt::WriteState,
        acknowledged: Option<bool>,
        reason: Option<&str>,
        detail: Option<String>,
    ) -> Receipt {
        assert!(!classification.is_definitive_rejection(), "a written receipt is accepted or indeterminate");
        Receipt {
            schema: crate::receipt::RECEIPT_SCHEMA.to_string(),
            classification,
            prompt_written: true,
            write_state,
            retry_safe: false,
            reply_pending: self.return_mode == ReturnMode::ReturnFinal,
            request_id: Some(self.request_id.clone()),
            agent_id: Some(self.agent_id.clone()),
            incarnation: Some(self.incarnation.clone()),
            operation: self.operation,
            return_mode: self.return_mode,
            correlation_source: self.correlation_source,
            baseline_provider_turn: self.baseline_turn.clone(),
            armed_cursor: self.correlation_source.zip(self.armed.as_ref()).map(|(source, cursor)| cursor.render(source)),
            acknowledged,
            replayed: false,
            reason: reason.map(str::to_string),
            detail,
        }
    }

    /// Invariants that hold in every phase; checked on persist and on recovery.
    pub fn assert_consistent(&self) {
        match self.phase {
            Phase::Registered | Phase::Released => {
                assert!(self.terminal.is_none() && self.bound_turn.is_none())
            }
            Phase::Settled => {
                assert_eq!(self.return_mode, ReturnMode::OneWay);
                assert!(self.receipt.is_some() && self.terminal.is_none());
            }
            Phase::Submitted => {
                assert_eq!(self.return_mode, ReturnMode::ReturnFinal);
                assert!(self.armed.is_some() && self.receipt.is_some() && self.bound_turn.is_none());
            }
            Phase::Bound => {
                assert!(self.bound_turn.is_some() && self.terminal.is_none());
            }
            Phase::Terminal => {
                assert_eq!(self.return_mode, ReturnMode::ReturnFinal);
                let terminal = self.terminal.as_ref().expect("RF-5: terminal phase has its event");
                terminal.assert_consistent();
                assert_eq!(terminal.request_id, self.request_id);
            }
        }
        if let Some(receipt) = &self.receipt {
            receipt.assert_consistent();
        }
    }
}
