//! # wakterm-engine
//!
//! The pure, sans-IO rules of wakterm agent admission. Every rule has an id in `SPEC.md`
//! (ADM-*, INP-*, IDEM-*, RF-*, TERM-*, CORR-*, REC-*, HASH-*); the code cites them.
//!
//! Shape (as quinn-proto and str0m): the runtime calls [`Engine::handle`] with the current
//! time and one [`Input`], then drains [`Engine::poll_output`] and performs each [`Output`],
//! reporting back (`PersistAcked`, `Delivered`, `ObserverRefreshed`). [`Engine::poll_timeout`]
//! says when to send the next `Tick`. [`Engine::recover`] rebuilds state after a crash. The
//! engine never reads a clock, a file, a socket, the environment or a random source.

pub mod agent;
mod admission;
mod correlation;
mod engine;
mod event_replay;
mod event_stream;
pub mod events;
pub mod fingerprint;
mod history;
pub mod ids;
pub mod io;
pub mod limits;
pub mod observer;
pub mod pane_look;
pub mod prompt;
pub mod receipt;
mod recovery;
pub mod request;
pub mod run_clock;
pub mod stored_ids;
pub mod submit;
pub mod terminal;

pub use agent::{AgentEntry, AgentFacts, Harness, ManagedIds, ObserverView, Transport};
pub use admission::{stateless_check, target_malformed, AgentState, Blocker, CatalogBlocker, CatalogView};
pub use engine::Engine;
pub use history::is_finished;
pub use event_replay::{record_fingerprint, MAX_HELD_REPLAYS, MAX_PROOF_WAIT_MS, REWRITTEN_WHILE_DOWN};
pub use event_stream::{observed_events, registration_events, MAX_EVENT_BATCH_BYTES, ROLLOUT_NOT_HELD_WHILE_DOWN, SESSION_CHANGED_WHILE_DOWN};
pub use events::{AgentEvent, EventBody, EventMark, PromptTaken, AGENT_EVENTS_SCHEMA};
pub use ids::{AgentId, Incarnation, RequestId, SessionId, TurnId};
pub use io::{AdmitCommand, CancelCommand, CancelOutcome, DeliveryOutcome, DurableState, Input, OpId, Output, PersistOp};
pub use observer::{fold_turn, Composer, Cursor, ObserverEvent, ObserverSnapshot, ObserverStatus, PlanStatus, PlanStep, ProcessIdentity, TurnState};
pub use prompt::PasteMode;
pub use receipt::{Classification, CorrelationSource, Operation, Receipt, ReturnMode, WriteState};
pub use recovery::RESTART_REASON;
pub use request::{Evidence, EvidenceStep, Phase, RequestRecord};
pub use run_clock::{KeptRunClocks, RunClock, RunClocksSeen, RunWindow};
pub use stored_ids::StoredIds;
pub use submit::{judge, submit_input_problem, AckEvidence, EnterBoundary, Judgement, PaneSample, SplitOutcome, SplitWrite, SubmitCommand, SubmitReceipt, SubmitStatus};
pub use terminal::{TerminalEvent, TerminalState};
