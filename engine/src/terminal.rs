//! Terminal events of return-final requests and their durable ordered stream (TERM-1..3).

use crate::ids::{AgentId, Incarnation, RequestId, TurnId};
use serde::{Deserialize, Serialize};

/// Versioned schema name carried by every terminal event.
pub const TERMINAL_SCHEMA: &str = "wakterm.agent-request.terminal.v1";

/// TERM-1: the six terminal states of seed 000, serialised as these exact words.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TerminalState {
    Completed,
    Aborted,
    TimedOut,
    Cancelled,
    DeliveryFailed,
    Indeterminate,
}

impl TerminalState {
    pub const ALL: [TerminalState; 6] = [
        TerminalState::Completed,
        TerminalState::Aborted,
        TerminalState::TimedOut,
        TerminalState::Cancelled,
        TerminalState::DeliveryFailed,
        TerminalState::Indeterminate,
    ];
}

/// One terminal request on the stream. `final_message` is present only when `completed`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalEvent {
    pub schema: String,
    pub terminal_event_sequence: u64,
    pub request_id: RequestId,
    pub agent_id: AgentId,
    pub incarnation: Incarnation,
    pub state: TerminalState,
    /// The provider turn the request was bound to, when it was bound (CORR-7).
    pub provider_turn_id: Option<TurnId>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub final_message: Option<String>,
    /// Stable snake_case reason for every state but a plain `completed`.
    pub reason: Option<String>,
    /// Engine time (milliseconds since the Unix epoch, as the runtime passed it in).
    pub at_ms: u64,
    /// CORR-9: another prompt's message came in the bound turn after ours, so its final may
    /// answer that prompt too. `completed` and `aborted` only; absent (false) otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steered: bool,
}

impl TerminalEvent {
    /// TERM-1: only `completed` carries a final message.
    pub fn assert_consistent(&self) {
        assert_eq!(self.schema, TERMINAL_SCHEMA);
        assert!(self.terminal_event_sequence > 0, "sequences start at 1");
        assert_eq!(self.final_message.is_some(), self.state == TerminalState::Completed);
        if self.state == TerminalState::Completed {
            assert!(self.provider_turn_id.is_some(), "CORR-7: a completion names its turn");
        }
    }
}
