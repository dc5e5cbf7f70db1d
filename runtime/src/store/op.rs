//! What the engine asks the store to persist, and the rows it reads back.

use rusqlite::{params, Connection, OptionalExtension};

use super::error::StoreError;
use super::limits::{BATCH_OPS_MAX, FIELD_BYTES_MAX, RECORD_BYTES_MAX};

/// One durable mutation. A batch (`Vec<StoreOp>`) is atomic: all of it commits or none of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// Insert or replace an agent. Its name must not belong to another agent.
    PutAgent {
        agent_id: String,
        name: String,
        record_json: String,
    },
    /// Forget an agent. Absent agents are not an error: deleting is idempotent.
    DeleteAgent { agent_id: String },
    /// Insert a request, or update its phase, record and time. A request's agent and fingerprint
    /// are its idempotency identity (IDEM) and can never change once stored.
    PutRequest {
        request_id: String,
        agent_id: String,
        phase: String,
        fingerprint: String,
        record_json: String,
        updated_ms: u64,
    },
    /// Append the one terminal event of a stored request. `sequence` must exceed every stored
    /// sequence; the store never renumbers.
    AppendTerminal {
        sequence: u64,
        request_id: String,
        event_json: String,
    },
    /// OBS-1: replace the agent's observer checkpoint (deleted with the agent).
    PutCheckpoint { agent_id: String, checkpoint_json: String },
    /// EV-1: append one agent event. Its sequence must be unused; the store never renumbers.
    AppendEvent {
        sequence: u64,
        agent_id: String,
        kind: String,
        at_ms: u64,
        event_json: String,
    },
    /// EV-4: replace the agent's event mark (kept after the agent: it is tiny, and it stops a
    /// reused id from being announced twice).
    PutEventMark { agent_id: String, mark_json: String },
    /// EV-9: remove the oldest events, as a prefix of the sequence: at most `max_rows`, each
    /// with `sequence <= through_sequence` or `at_ms < before_ms`, and never one past
    /// `settled_through` (the engine's settled mark, EV-2: a number still pending lies past
    /// it, and its retry must stay above what was pruned, EV-3), stopping at the first that
    /// is not due. Records the highest removed in `meta.events_pruned_through`.
    /// EV-9: the oldest events due by sequence, by age, or while fewer than `excess_bytes` of
    /// stored JSON were removed; never past `settled_through`.
    PruneEvents { through_sequence: u64, before_ms: u64, max_rows: u64, settled_through: u64, excess_bytes: u64 },
    /// HIST-4: forget at most `max_rows` finished requests (terminal, settled, released) last
    /// updated before `before_ms`, with their terminal events; records the highest terminal
    /// sequence removed in `meta.terminal_pruned_through`.
    PruneRequests { before_ms: u64, max_rows: u64 },
    /// TIME-2: replace what the store keeps of the boot's daemon runs (`RunClocksSeen`, JSON),
    /// committed by each daemon before it records anything.
    PutRunClocks { json: String },
}

impl StoreOp {
    /// STORE-2: an op no caller's answer waits on: the agent event stream (EV-1, EV-4) and the
    /// observer's cache (OBS-1). A batch of only these may wait [`super::limits::DEFER_LINGER`]
    /// for company; requests, terminal events, agents and pruning commit at once.
    pub fn may_wait(&self) -> bool {
        matches!(self, StoreOp::AppendEvent { .. } | StoreOp::PutEventMark { .. } | StoreOp::PutCheckpoint { .. })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAgentEvent {
    pub sequence: u64,
    pub agent_id: String,
    pub event_json: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAgent {
    pub agent_id: String,
    pub name: String,
    pub record_json: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRequest {
    pub request_id: String,
    pub agent_id: String,
    pub phase: String,
    pub fingerprint: String,
    pub record_json: String,
    pub updated_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredTerminalEvent {
    pub sequence: u64,
    pub request_id: String,
    pub event_json: String,
}

/// Refuses a batch before it reaches the queue, so bad input costs no transaction.
pub(crate) fn validate_batch(ops: &[StoreOp]) -> Result<(), StoreError> {
    if ops.len() > BATCH_OPS_MAX {
        return Err(StoreError::invalid(format!(
            "batch has {} operations, the limit is {BATCH_OPS_MAX}",
            ops.len()
        )));
    }
    ops.iter().try_for_each(validate_op)
}

fn validate_op(op: &StoreOp) -> Result<(), StoreError> {
    match op {
        StoreOp::PutAgent {
            agent_id,
            name,
            record_json,
        } => {
            check_field("agent_id", agent_id)?;
            check_field("name", name)?;
            check_record("agent record", record_json)
        }
        StoreOp::DeleteAgent { agent_id } => check_field("agent_id", agent_id),
        StoreOp::AppendEvent { sequence, agent_id, kind, at_ms, event_json } => {
            if *sequence == 0 {
                return Err(StoreError::invalid("event sequence 0 is reserved for 'none'"));
            }
            to_sql_integer("sequence", *sequence)?;
            to_sql_integer("at_ms", *at_ms)?;
            check_field("agent_id", agent_id)?;
            check_field("kind", kind)?;
            check_record("agent event", event_json)
        }
        StoreOp::PutEventMark { agent_id, mark_json } => {
            check_field("agent_id", agent_id)?;
            check_record("event mark", mark_json)
        }
        StoreOp::PruneRequests { before_ms, max_rows } => {
            to_sql_integer("before_ms", *before_ms)?;
            to_sql_integer("max_rows", *max_rows).map(drop)
        }
        StoreOp::PruneEvents { through_sequence, before_ms, max_rows, settled_through, excess_bytes } => {
            to_sql_integer("through_sequence", *through_sequence)?;
            to_sql_integer("before_ms", *before_ms)?;
            to_sql_integer("settled_through", *settled_through)?;
            to_sql_integer("excess_bytes", *excess_bytes)?;
            to_sql_integer("max_rows", *max_rows).map(drop)
        }
        StoreOp::PutCheckpoint { agent_id, checkpoint_json } => {
            check_field("agent_id", agent_id)?;
            check_record("observer checkpoint", checkpoint_json)
        }
        StoreOp::PutRunClocks { json } => check_record("run clocks", json),
        StoreOp::PutRequest {
            request_id,
            agent_id,
            phase,
            fingerprint,
            record_json,
            updated_ms,
        } => {
            check_field("request_id", request_id)?;
            check_field("agent_id", agent_id)?;
            check_field("phase", phase)?;
            check_field("fingerprint", fingerprint)?;
            check_record("request record", record_json)?;
            to_sql_integer("updated_ms", *updated_ms).map(drop)
        }
        StoreOp::AppendTerminal {
            sequence,
            request_id,
            event_json,
        } => {
            if *sequence == 0 {
                return Err(StoreError::invalid(
                    "terminal sequence 0 is reserved for 'none'",
                ));
            }
            to_sql_integer("sequence", *sequence)?;
            check_field("request_id", request_id)?;
            check_record("terminal event", event_json)
        }
    }
}

fn check_field(what: &str, value: &str) -> Result<(), StoreError> {
    if value.is_empty() || value.len() > FIELD_BYTES_MAX {
        return Err(StoreError::invalid(format!(
            "{what} must be 1..={FIELD_BYTES_MAX} bytes, got {}",
            value.len()
        )));
    }
    Ok(())
}

fn check_record(what: &str, json: &str) -> Result<(), StoreError> {
    if json.len() > RECORD_BYTES_MAX {
        return Err(StoreError::invalid(format!(
            "{what} is {} bytes, the limit is {RECORD_BYTES_MAX}",
            json.len()
        )));
    }
    // Full JSON validity is checked by SQLite (CHECK json_valid) inside the batch's savepoint.
    Ok(())
}

/// SQLite integers are signed 64-bit; larger values are refused, never wrapped.
pub(crate) fn to_sql_integer(what: &str, value: u64) -> Result<i64, StoreError> {
    i64::try_from(value)
        .map_err(|_| StoreError::invalid(format!("{what} {value} exceeds {}", i64::MAX)))
}

/// Reads back a column the schema's CHECK keeps non-negative; a negative value means the file
/// was edited behind our back.
pub(crate) fn from_sql_integer(what: &str, value: i64) -> Result<u64, StoreError> {
    u64::try_from(value).map_err(|_| StoreError::Sqlite {
        code: None,
        message: format!("stored {what} {value} is negative; the database was altered"),
    })
}

/// Applies one op inside the caller's savepoint.
pub(crate) fn apply_op(conn: &Connection, op: &StoreOp) -> Result<(), StoreError> {
    match op {
        StoreOp::PutAgent {
            agent_id,
            name,
            record_json,
        } => put_agent(conn, agent_id, name, record_json),
        StoreOp::DeleteAgent { agent_id } => {
            conn.prepare_cached("DELETE FROM agents WHERE agent_id = ?1")?
                .execute([agent_id])?;
            conn.prepare_cached("DELETE FROM observer_checkpoints WHERE agent_id = ?1")?
                .execute([agent_id])?;
            Ok(())
        }
        StoreOp::PutCheckpoint { agent_id, checkpoint_json } => {
            conn.prepare_cached(
                "INSERT INTO observer_checkpoints(agent_id, checkpoint) VALUES (?1, ?2) \
                 ON CONFLICT(agent_id) DO UPDATE SET checkpoint = excluded.checkpoint",
            )?
            .execute(params![agent_id, checkpoint_json])?;
            Ok(())
        }
        StoreOp::PutRunClocks { json } => {
            conn.prepare_cached("INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?
                .execute(params![RUN_CLOCKS, json])?;
            Ok(())
        }
        StoreOp::PutRequest {
            request_id,
            agent_id,
            phase,
            fingerprint,
            record_json,
            updated_ms,
        } => put_request(
            conn,
            request_id,
            agent_id,
            phase,
            fingerprint,
            record_json,
            *updated_ms,
        ),
        StoreOp::AppendTerminal {
            sequence,
            request_id,
            event_json,
        } => append_terminal(conn, *sequence, request_id, event_json),
        StoreOp::AppendEvent { sequence, agent_id, kind, at_ms, event_json } => {
            append_event(conn, *sequence, agent_id, kind, *at_ms, event_json)
        }
        StoreOp::PruneEvents { through_sequence, before_ms, max_rows, settled_through, excess_bytes } => {
            prune_events(conn, *through_sequence, (*before_ms, *settled_through, *excess_bytes), *max_rows)
        }
        StoreOp::PruneRequests { before_ms, max_rows } => prune_requests(conn, *before_ms, *max_rows),
        StoreOp::PutEventMark { agent_id, mark_json } => {
            conn.prepare_cached(
                "INSERT INTO event_marks(agent_id, mark) VALUES (?1, ?2) \
                 ON CONFLICT(agent_id) DO UPDATE SET mark = excluded.mark",
            )?
            .execute(params![agent_id, mark_json])?;
            Ok(())
        }
    }
}

/// EV-9: deletes the oldest qualifying prefix and raises the pruned mark. An event is due by
/// sequence (`through_sequence`), by age (`before_ms`) or by size (while less than
/// `excess_bytes` of stored JSON was removed), and never past `settled_through` (the same test
/// as the simulator's store model, `retention::EventDue::prunes`).
fn prune_events(conn: &Connection, through_sequence: u64, (before_ms, settled_through, excess_bytes): (u64, u64, u64), max_rows: u64) -> Result<(), StoreError> {
    let mut last_pruned = None;
    let mut removed = 0u64;
    let due = super::retention::EventDue { through_sequence, before_ms, settled_through, excess_bytes };
    {
        let mut stmt = conn.prepare_cached("SELECT sequence, at_ms, length(CAST(event AS BLOB)) FROM agent_events ORDER BY sequence LIMIT ?1")?;
        let mut rows = stmt.query([to_sql_integer("max_rows", max_rows)?])?;
        while let Some(row) = rows.next()? {
            let sequence = from_sql_integer("event sequence", row.get(0)?)?;
            let at_ms = from_sql_integer("at_ms", row.get(1)?)?;
            let bytes = from_sql_integer("event bytes", row.get(2)?)?;
            if !due.prunes(sequence, at_ms, removed) {
                break;
            }
            last_pruned = Some(sequence);
            removed += bytes;
        }
    }
    let Some(last) = last_pruned else { return Ok(()) };
    conn.prepare_cached("DELETE FROM agent_events WHERE sequence <= ?1")?.execute([to_sql_integer("sequence", last)?])?;
    set_meta_u64(conn, EVENTS_STORED_BYTES, stored_event_bytes(conn)?.saturating_sub(removed))?;
    set_meta_u64(conn, EVENTS_PRUNED_THROUGH, events_pruned_through(conn)?.max(last))
}

/// EV-9: `appended` more bytes of event JSON are stored (one update per batch, in its
/// savepoint, so a batch undone takes its count back with it).
pub(crate) fn add_stored_event_bytes(conn: &Connection, appended: u64) -> Result<(), StoreError> {
    if appended == 0 {
        return Ok(());
    }
    set_meta_u64(conn, EVENTS_STORED_BYTES, stored_event_bytes(conn)?.saturating_add(appended))
}

/// The meta key holding the bytes of event JSON stored (EV-9's size bound; migration 7 counted
/// what an older database held).
pub(crate) const EVENTS_STORED_BYTES: &str = "events_stored_bytes";

pub(crate) fn stored_event_bytes(conn: &Connection) -> Result<u64, StoreError> {
    meta_u64(conn, EVENTS_STORED_BYTES)
}

/// The finished phases (HIST-1); the partial index of migration 4 uses the same list (its
/// `WHERE` must be implied by every query that names it).
macro_rules! finished_phases {
    () => {
        "('terminal', 'settled', 'released')"
    };
}
/// The same list, for the test that holds it to the engine's `Phase::is_open`.
#[cfg(test)]
pub(crate) const FINISHED_PHASES_SQL: &str = finished_phases!();
/// HIST-4: the oldest finished request's time. `INDEXED BY` the partial index: left to itself
/// SQLite picks `requests_by_phase` (an equality on `phase`) and reads every finished request's
/// row, so the retention check every 5 s cost time in proportion to the history (75 ms at
/// 100,000 requests) instead of one index step (issue 10).
pub(crate) const OLDEST_FINISHED_SQL: &str =
    concat!("SELECT MIN(updated_ms) FROM requests INDEXED BY requests_finished_by_time WHERE phase IN ", finished_phases!());
/// HIST-4: the oldest finished requests before a time, in age order (same index, same reason).
pub(crate) const PRUNE_FINISHED_SQL: &str = concat!(
    "SELECT request_id FROM requests INDEXED BY requests_finished_by_time WHERE phase IN ",
    finished_phases!(),
    " AND updated_ms < ?1 ORDER BY updated_ms LIMIT ?2"
);
/// ADM-5: of the finished requests updated since a time, each agent's latest written ones, at
/// most `?2` (`load_latest_written_since`), oldest first: each record holds where the view stood at the write
/// (`written_past`), or says a restart ended it unfinished (`write_unknown`), and it was
/// registered last: its row was inserted last (the greatest row
/// id: every registration inserts the row, also of an id stored before, and every later change
/// updates it in place), which no wall clock moves (by `registered_ms`, a clock stepped back
/// between two daemons made an older request the latest, and a later one's unread line went
/// unheld).
/// One range of the finished requests' time index (the phase list repeats the partial index's
/// condition, which SQLite needs to use it); the fields are read from the records in range.
pub(crate) const LATEST_WRITTEN_SQL: &str = concat!(
    "SELECT request_id, agent_id, phase, fingerprint, record, updated_ms FROM (",
    "SELECT request_id, agent_id, phase, fingerprint, record, updated_ms, ",
    "ROW_NUMBER() OVER (PARTITION BY agent_id ORDER BY rowid DESC) AS latest ",
    "FROM requests INDEXED BY requests_finished_by_time WHERE phase IN ",
    finished_phases!(),
    " AND updated_ms >= ?1 AND (json_extract(record, '$.written_past') IS NOT NULL OR json_extract(record, '$.write_unknown') = 1)) WHERE latest <= ?2 ORDER BY agent_id, latest DESC"
);

/// TIME-2: the meta key holding what the store keeps of the boot's daemon runs.
pub(crate) const RUN_CLOCKS: &str = "run_clocks";

/// The meta key holding the highest terminal sequence retention removed.
pub(crate) const TERMINAL_PRUNED_THROUGH: &str = "terminal_pruned_through";

/// HIST-4: forgets the oldest finished requests and their terminal events.
fn prune_requests(conn: &Connection, before_ms: u64, max_rows: u64) -> Result<(), StoreError> {
    let ids: Vec<String> = conn
        .prepare_cached(PRUNE_FINISHED_SQL)?
        .query_map(params![to_sql_integer("before_ms", before_ms)?, to_sql_integer("max_rows", max_rows)?], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let mut highest = meta_u64(conn, TERMINAL_PRUNED_THROUGH)?;
    for id in &ids {
        let sequence: Option<i64> = conn
            .prepare_cached("SELECT sequence FROM terminal_events WHERE request_id = ?1")?
            .query_row([id], |row| row.get(0))
            .optional()?;
        if let Some(sequence) = sequence {
            highest = highest.max(from_sql_integer("terminal sequence", sequence)?);
            conn.prepare_cached("DELETE FROM terminal_events WHERE request_id = ?1")?.execute([id])?;
        }
        conn.prepare_cached("DELETE FROM requests WHERE request_id = ?1")?.execute([id])?;
    }
    set_meta_u64(conn, TERMINAL_PRUNED_THROUGH, highest)
}

fn set_meta_u64(conn: &Connection, key: &str, value: u64) -> Result<(), StoreError> {
    conn.prepare_cached("INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value")?
        .execute(params![key, value.to_string()])?;
    Ok(())
}

fn meta_u64(conn: &Connection, key: &str) -> Result<u64, StoreError> {
    let value: Option<String> = conn.prepare_cached("SELECT value FROM meta WHERE key = ?1")?.query_row([key], |row| row.get(0)).optional()?;
    match value {
        None => Ok(0),
        Some(text) => text.parse().map_err(|_| StoreError::Sqlite {
            code: None,
            message: format!("meta {key} is {text:?}, not a number; the database was altered"),
        }),
    }
}

/// EV-1: a sequence is used once, ever: not by a stored event, and not below what retention
/// pruned (a pruned number is never handed out again).
fn append_event(conn: &Connection, sequence: u64, agent_id: &str, kind: &str, at_ms: u64, event: &str) -> Result<(), StoreError> {
    let pruned = events_pruned_through(conn)?;
    if sequence <= pruned {
        return Err(StoreError::constraint(format!(
            "event sequence {sequence} is at or below the pruned sequence {pruned}"
        )));
    }
    let taken: bool = conn
        .prepare_cached("SELECT EXISTS(SELECT 1 FROM agent_events WHERE sequence = ?1)")?
        .query_row([to_sql_integer("sequence", sequence)?], |row| row.get(0))?;
    if taken {
        return Err(StoreError::constraint(format!("event sequence {sequence} is already used")));
    }
    conn.prepare_cached("INSERT INTO agent_events(sequence, agent_id, kind, at_ms, event) VALUES (?1, ?2, ?3, ?4, ?5)")?
        .execute(params![to_sql_integer("sequence", sequence)?, agent_id, kind, to_sql_integer("at_ms", at_ms)?, event])?;
    Ok(())
}

/// The meta key holding the highest event sequence retention removed.
pub(crate) const EVENTS_PRUNED_THROUGH: &str = "events_pruned_through";

pub(crate) fn events_pruned_through(conn: &Connection) -> Result<u64, StoreError> {
    meta_u64(conn, EVENTS_PRUNED_THROUGH)
}

/// HIST-4: the highest terminal sequence retention removed (0: none).
pub(crate) fn terminal_pruned_through(conn: &Connection) -> Result<u64, StoreError> {
    meta_u64(conn, TERMINAL_PRUNED_THROUGH)
}

/// EV-1: the greatest sequence ever stored (pruned ones count); 0 when there is none.
pub(crate) fn last_event_sequence(conn: &Connection) -> Result<u64, StoreError> {
    let max: Option<i64> = conn.prepare_cached("SELECT MAX(sequence) FROM agent_events")?.query_row([], |row| row.get(0))?;
    let stored = from_sql_integer("event sequence", max.unwrap_or(0))?;
    Ok(stored.max(events_pruned_through(conn)?))
}

fn put_agent(
    conn: &Connection,
    agent_id: &str,
    name: &str,
    record: &str,
) -> Result<(), StoreError> {
    let owner: Option<String> = conn
        .prepare_cached("SELECT agent_id FROM agents WHERE name = ?1")?
        .query_row([name], |row| row.get(0))
        .optional()?;
    if let Some(owner) = owner.filter(|owner| owner != agent_id) {
        return Err(StoreError::constraint(format!(
            "agent name '{name}' already belongs to agent {owner}"
        )));
    }
    conn.prepare_cached(
        "INSERT INTO agents(agent_id, name, record) VALUES (?1, ?2, ?3) \
         ON CONFLICT(agent_id) DO UPDATE SET name = excluded.name, record = excluded.record",
    )?
    .execute(params![agent_id, name, record])?;
    Ok(())
}

fn put_request(
    conn: &Connection,
    request_id: &str,
    agent_id: &str,
    phase: &str,
    fingerprint: &str,
    record: &str,
    updated_ms: u64,
) -> Result<(), StoreError> {
    let updated_ms = to_sql_integer("updated_ms", updated_ms)?;
    // ADM-5: a registration is stored as a new row, also of an id stored before (IDEM-6: a
    // released id admitted again, or one whose release never reached the store and still
    // reads `registered`): the restart takes the row stored last as an agent's latest write
    // (`LATEST_WRITTEN_SQL`), and updated in place the row kept its first registration's place
    // (two reviews). Only a row of the same agent and input: any other is refused below. The
    // engine puts `registered` only when it registers (a restart or a retry puts other
    // phases), so no registration moves twice.
    if phase == "registered" {
        conn.prepare_cached("DELETE FROM requests WHERE request_id = ?1 AND phase IN ('released', 'registered') AND agent_id = ?2 AND fingerprint = ?3")?
            .execute(params![request_id, agent_id, fingerprint])?;
    }
    // One statement: a stored row is updated only while its agent and fingerprint match, and a
    // finished one (`settled`, `terminal`: FINISHED_FOREVER) only within its phase: nothing
    // reopens it (a socket client's `generated_id` once made the engine write a finished id
    // again, and this upsert moved its row back to `bound` under a terminal event). The
    // stored identity is read only to explain a refusal.
    let changed = conn
        .prepare_cached(
            "INSERT INTO requests(request_id, agent_id, phase, fingerprint, record, updated_ms) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(request_id) DO UPDATE SET \
             phase = excluded.phase, record = excluded.record, updated_ms = excluded.updated_ms \
             WHERE requests.agent_id = excluded.agent_id AND requests.fingerprint = excluded.fingerprint \
             AND (requests.phase NOT IN ('settled', 'terminal') OR requests.phase = excluded.phase)",
        )?
        .execute(params![request_id, agent_id, phase, fingerprint, record, updated_ms])?;
    if changed == 1 {
        return keep_open_id(conn, request_id, phase);
    }
    let (stored_agent, stored_fingerprint, stored_phase): (String, String, String) = conn
        .prepare_cached("SELECT agent_id, fingerprint, phase FROM requests WHERE request_id = ?1")?
        .query_row([request_id], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
    if (stored_agent.as_str(), stored_fingerprint.as_str()) == (agent_id, fingerprint) {
        return Err(StoreError::constraint(format!(
            "request {request_id} is stored finished ({stored_phase}); it cannot move to {phase}"
        )));
    }
    Err(StoreError::constraint(format!(
        "request {request_id} is stored for agent {stored_agent} with fingerprint \
         {stored_fingerprint}; its agent and fingerprint cannot change"
    )))
}

/// HIST-1: the phases a stored request never leaves (`released` is finished too, but IDEM-6
/// registers its id again). `put_request`'s statement names them literally.
pub const FINISHED_FOREVER: [wakterm_engine::Phase; 2] = [wakterm_engine::Phase::Settled, wakterm_engine::Phase::Terminal];

/// HIST-1, migration 5: `open_requests` holds a request's id exactly while its row's phase is
/// open, written in the same transaction as the row (every request write comes through
/// `put_request`; retention deletes finished requests only). Between two open phases the
/// insert finds the id there and writes nothing.
fn keep_open_id(conn: &Connection, request_id: &str, phase: &str) -> Result<(), StoreError> {
    let sql = if wakterm_engine::Phase::is_open_name(phase) {
        "INSERT OR IGNORE INTO open_requests(request_id) VALUES (?1)"
    } else {
        "DELETE FROM open_requests WHERE request_id = ?1"
    };
    conn.prepare_cached(sql)?.execute([request_id])?;
    Ok(())
}

fn append_terminal(
    conn: &Connection,
    sequence: u64,
    request_id: &str,
    event: &str,
) -> Result<(), StoreError> {
    let last = last_terminal_sequence(conn)?;
    if sequence <= last {
        return Err(StoreError::constraint(format!(
            "terminal sequence {sequence} is not greater than the last stored sequence {last}"
        )));
    }
    let existing: Option<i64> = conn
        .prepare_cached("SELECT sequence FROM terminal_events WHERE request_id = ?1")?
        .query_row([request_id], |row| row.get(0))
        .optional()?;
    if let Some(existing) = existing {
        return Err(StoreError::constraint(format!(
            "request {request_id} already ended with terminal event {existing}"
        )));
    }
    let known: bool = conn
        .prepare_cached("SELECT EXISTS(SELECT 1 FROM requests WHERE request_id = ?1)")?
        .query_row([request_id], |row| row.get(0))?;
    if !known {
        return Err(StoreError::constraint(format!(
            "terminal event for unknown request {request_id}; store the request first"
        )));
    }
    let sequence_sql = to_sql_integer("sequence", sequence)?;
    conn.prepare_cached(
        "INSERT INTO terminal_events(sequence, request_id, event) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![sequence_sql, request_id, event])?;
    Ok(())
}

/// TERM-3: the greatest terminal sequence ever stored; retention's removals count (HIST-4), so
/// a sequence is never handed out twice.
pub(crate) fn last_terminal_sequence(conn: &Connection) -> Result<u64, StoreError> {
    let max: Option<i64> = conn
        .prepare_cached("SELECT MAX(sequence) FROM terminal_events")?
        .query_row([], |row| row.get(0))?;
    Ok(from_sql_integer("terminal sequence", max.unwrap_or(0))?.max(terminal_pruned_through(conn)?))
}
