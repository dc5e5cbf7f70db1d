//! The durable request store: SQLite (bundled) in WAL mode with `synchronous=FULL`.
//!
//! The store is deliberately generic. The engine serialises its records as JSON and owns every
//! rule about them; the store owns durability and only enforces what its indexed columns can
//! prove on their own: ids are unique, a request's agent and fingerprint never change, each
//! request has at most one terminal event, terminal sequences strictly grow.
//!
//! * [`Store`] opens (creating, migrating, refusing foreign or newer files) and reads.
//! * [`StoreWriter`] owns the single write connection on a dedicated OS thread and group-commits
//!   every queued batch in one transaction, one SAVEPOINT per batch so a bad batch fails alone.

mod error;
mod limits;
mod op;
mod reader;
pub mod retention;
mod schema;
pub mod watermark;
mod writer;

pub use error::StoreError;
pub use limits::{PAGE_MAX_BYTES, 
    BATCH_OPS_MAX, BUSY_TIMEOUT_MS, FIELD_BYTES_MAX, GROUP_BATCHES_MAX, RECORD_BYTES_MAX,
    TERMINAL_PAGE_MAX, WRITE_QUEUE_CAPACITY,
};
pub use op::{StoreOp, StoredAgent, StoredAgentEvent, StoredRequest, StoredTerminalEvent, FINISHED_FOREVER};
pub use reader::{Store, REQUEST_IDS};
pub use schema::{OpenReport, APPLICATION_ID, SCHEMA_VERSION, UNDO_MIGRATION_5_FOR_TESTS};
pub use writer::{CommitCallback, CommitInfo, GroupWaits, StoreWriter, WriterStats};

/// The store form of an engine persist op: the indexed columns plus the record as JSON. One
/// mapping, used by the daemon and by the simulator's store model alike.
pub fn op_for(op: &wakterm_engine::PersistOp) -> StoreOp {
    match op {
        wakterm_engine::PersistOp::PutRequest(record) => StoreOp::PutRequest {
            request_id: record.request_id.to_string(),
            agent_id: record.agent_id.to_string(),
            phase: record.phase.as_str().to_string(),
            fingerprint: record.fingerprint.clone(),
            record_json: serde_json::to_string(record).expect("records serialise"),
            updated_ms: record.updated_ms,
        },
        wakterm_engine::PersistOp::AppendTerminal(event) => StoreOp::AppendTerminal {
            sequence: event.terminal_event_sequence,
            request_id: event.request_id.to_string(),
            event_json: serde_json::to_string(event).expect("events serialise"),
        },
        wakterm_engine::PersistOp::AppendEvent(event) => StoreOp::AppendEvent {
            sequence: event.sequence,
            agent_id: event.agent_id.to_string(),
            kind: event.kind().to_string(),
            at_ms: event.at_ms,
            event_json: serde_json::to_string(event).expect("events serialise"),
        },
        wakterm_engine::PersistOp::PutEventMark(mark) => StoreOp::PutEventMark {
            agent_id: mark.agent_id.to_string(),
            mark_json: serde_json::to_string(mark).expect("marks serialise"),
        },
        wakterm_engine::PersistOp::PutCheckpoint { agent_id, checkpoint_json } => StoreOp::PutCheckpoint {
            agent_id: agent_id.to_string(),
            checkpoint_json: checkpoint_json.clone(),
        },
    }
}

#[cfg(test)]
mod tests;
