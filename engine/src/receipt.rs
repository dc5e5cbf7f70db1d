//! The admission receipt (ADM-15) and its closed classification set.

use crate::ids::{AgentId, Incarnation, RequestId, TurnId};
use serde::{Deserialize, Serialize};

/// Versioned schema name carried by every receipt.
pub const RECEIPT_SCHEMA: &str = "wakterm.agent-admission.receipt.v1";

/// ADM-15: the nine receipt classifications of seed 000, serialised as these exact words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Classification {
    Accepted,
    Busy,
    Unsupported,
    Unavailable,
    StaleIncarnation,
    Invalid,
    ObserverFailure,
    InternalFailure,
    Indeterminate,
}

impl Classification {
    pub const ALL: [Classification; 9] = [
        Classification::Accepted,
        Classification::Busy,
        Classification::Unsupported,
        Classification::Unavailable,
        Classification::StaleIncarnation,
        Classification::Invalid,
        Classification::ObserverFailure,
        Classification::InternalFailure,
        Classification::Indeterminate,
    ];

    /// ADM-9: a definitive rejection proves nothing was written; the caller may retry it.
    pub fn is_definitive_rejection(self) -> bool {
        match self {
            Classification::Accepted | Classification::Indeterminate => false,
            Classification::Busy
            | Classification::Unsupported
            | Classification::Unavailable
            | Classification::StaleIncarnation
            | Classification::Invalid
            | Classification::ObserverFailure
            | Classification::InternalFailure => true,
        }
    }
}

/// What is known about the pane write, as evidence rather than intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteState {
    /// No write was attempted: nothing reached the pane.
    NotStarted,
    /// Every byte of the one admission write was written.
    Complete,
    /// Some bytes were written, then the write failed.
    Partial,
    /// The write failed and the writer cannot say how much was written.
    Failed,
    /// A crash or lost result: whether any byte was written is unknown.
    Unknown,
}

/// Which caller surface asked for the admission (part of the fingerprint, IDEM-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    /// `wakterm agent send`: the interactive command (ADM-13).
    Send,
    /// `wakterm agent admit`: the authoritative admission API.
    Admit,
}

/// Whether the caller asked for the final answer back (RF-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReturnMode {
    OneWay,
    ReturnFinal,
}

/// Where correlation evidence comes from (seed 000: provider-file cursor or durable events).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CorrelationSource {
    /// An observer-backed PTY: the Codex rollout file and a byte cursor in it.
    ProviderFile,
    /// A managed app-server session: the durable Agent API event sequence.
    AgentApiEvents,
}

/// ADM-15: the structured answer to one admission. Field names follow seed 000.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Receipt {
    pub schema: String,
    pub classification: Classification,
    /// False only when Wakterm proves no byte reached the pane (ADM-9); a write that was
    /// attempted, even one that failed, reports true (ADM-10).
    pub prompt_written: bool,
    pub write_state: WriteState,
    /// True when replaying this request under the same id cannot duplicate a prompt and a
    /// retry may be useful; false for `accepted` and `indeterminate` (never retry those under a
    /// new id, seed 000).
    pub retry_safe: bool,
    /// True when a terminal event for this request will appear on the terminal stream.
    pub reply_pending: bool,
    pub request_id: Option<RequestId>,
    pub agent_id: Option<AgentId>,
    pub incarnation: Option<Incarnation>,
    pub operation: Operation,
    pub return_mode: ReturnMode,
    pub correlation_source: Option<CorrelationSource>,
    pub baseline_provider_turn: Option<TurnId>,
    /// Opaque; callers store it and never decode it.
    pub armed_cursor: Option<String>,
    /// Plain `agent send` only: whether the observer saw the prompt arrive (ADM-13).
    pub acknowledged: Option<bool>,
    /// True when this receipt is the stored answer to an earlier call with the same id and
    /// input (IDEM-2).
    pub replayed: bool,
    /// Stable snake_case reason for anything other than a plain `accepted`.
    pub reason: Option<String>,
    pub detail: Option<String>,
}

impl Receipt {
    /// A definitive rejection: nothing written, nothing pending (ADM-9).
    pub fn rejection(
        classification: Classification,
        reason: &str,
        detail: impl Into<String>,
        context: ReceiptContext,
    ) -> Receipt {
        assert!(classification.is_definitive_rejection(), "{classification:?} is not a rejection");
        Receipt::unanswered(classification, false, WriteState::NotStarted, reason, detail.into(), context)
    }

    /// IDEM-7: this call was not served, and the id's prompt was or may be written by another
    /// call (an admission already in flight). Never `prompt_written: false` or `retry_safe:
    /// true`: a caller who trusted either and retried under a new id could double-submit.
    /// Replaying the same id later returns the admission's own receipt.
    pub fn outcome_unknown(reason: &str, detail: impl Into<String>, context: ReceiptContext) -> Receipt {
        Receipt::unanswered(Classification::Indeterminate, true, WriteState::Unknown, reason, detail.into(), context)
    }

    /// A receipt for a call that did not itself write: only the context is known. Retry-safe
    /// exactly when nothing was or may be written.
    fn unanswered(
        classification: Classification,
        prompt_written: bool,
        write_state: WriteState,
        reason: &str,
        detail: String,
        context: ReceiptContext,
    ) -> Receipt {
        Receipt {
            schema: RECEIPT_SCHEMA.to_string(),
            classification,
            prompt_written,
            write_state,
            retry_safe: !prompt_written,
            reply_pending: false,
            request_id: context.request_id,
            agent_id: context.agent_id,
            incarnation: context.incarnation,
            operation: context.operation,
            return_mode: context.return_mode,
            correlation_source: None,
            baseline_provider_turn: None,
            armed_cursor: None,
            acknowledged: None,
            replayed: false,
            reason: Some(reason.to_string()),
            detail: Some(detail),
        }
    }

    /// Checks the receipt's own invariants; called on both sides of every boundary.
    pub fn assert_consistent(&self) {
        assert_eq!(self.schema, RECEIPT_SCHEMA);
        if self.classification.is_definitive_rejection() {
            assert!(!self.prompt_written, "ADM-9: a rejection never claims a write");
            assert_eq!(self.write_state, WriteState::NotStarted);
            assert!(!self.reply_pending);
        }
        if self.classification == Classification::Accepted {
            assert!(self.prompt_written && self.write_state == WriteState::Complete);
        }
        if self.prompt_written {
            assert!(!self.retry_safe, "a written prompt is never retry-safe");
        }
        if self.reply_pending {
            assert_eq!(self.return_mode, ReturnMode::ReturnFinal);
        }
    }
}

/// The fields of a receipt that are known before the admission gets anywhere.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiptContext {
    pub request_id: Option<RequestId>,
    pub agent_id: Option<AgentId>,
    pub incarnation: Option<Incarnation>,
    pub operation: Operation,
    pub return_mode: ReturnMode,
}
