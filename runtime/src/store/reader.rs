//! `Store`: opening the database and reading it. Reads use their own connection, so they never
//! wait behind the writer thread's queue (WAL gives them a consistent snapshot per statement).

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use rusqlite::{Connection, OptionalExtension, Row};

use super::error::StoreError;
use super::limits::TERMINAL_PAGE_MAX;
use super::op::{self, StoredAgent, StoredAgentEvent, StoredRequest, StoredTerminalEvent};
use super::schema::{self, OpenReport};

/// A read handle on the store. `Sync`: threads share it, reads are serialised on one connection;
/// a thread that reads a lot may open its own `Store`.
#[derive(Debug)]
pub struct Store {
    path: PathBuf,
    report: OpenReport,
    conn: Mutex<Connection>,
}

/// HIST-5: every request id, in id order (the primary key's index covers it).
pub const REQUEST_IDS: &str = "SELECT request_id FROM requests ORDER BY request_id";

impl Store {
    /// Opens (creating with mode 0600 if missing) and migrates the database at `path`. Refuses a
    /// file that is not a wakterm database or was written by a newer schema, without modifying
    /// it. A group/other-accessible file is reset to 0600 (see [`OpenReport::mode_repaired_from`]).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let (conn, report) = schema::open_database(path)?;
        // This connection only reads; make SQLite enforce that.
        conn.execute_batch("PRAGMA query_only = ON")?;
        Ok(Store {
            path: path.to_path_buf(),
            report,
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What opening created, repaired or migrated.
    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// Every agent, ordered by id. Sized by the engine's agent-table bound.
    pub fn load_agents(&self) -> Result<Vec<StoredAgent>, StoreError> {
        let conn = self.conn();
        let mut stmt =
            conn.prepare_cached("SELECT agent_id, name, record FROM agents ORDER BY agent_id")?;
        let rows = stmt.query_map([], |row| {
            Ok(StoredAgent {
                agent_id: row.get(0)?,
                name: row.get(1)?,
                record_json: row.get(2)?,
            })
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// OBS-1: every saved observer checkpoint as (agent id, JSON), ordered by agent id.
    pub fn load_checkpoints(&self) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT agent_id, checkpoint FROM observer_checkpoints ORDER BY agent_id")?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// Every request, ordered by id: the input of engine recovery. Sized by the engine's request
    /// retention bound.
    pub fn load_requests(&self) -> Result<Vec<StoredRequest>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("{REQUEST_SELECT} ORDER BY request_id"))?;
        let rows = stmt.query_map([], raw_request)?;
        rows.map(|raw| request_from_raw(raw?)).collect()
    }

    /// HIST-1: the requests that are not finished (terminal, settled, released), ordered by id:
    /// the input of engine recovery, sized by open work, not by history.
    pub fn load_open_requests(&self) -> Result<Vec<StoredRequest>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(OPEN_REQUESTS_SQL)?;
        let rows = stmt.query_map([], raw_request)?;
        let stored: Vec<StoredRequest> = rows.map(|raw| request_from_raw(raw?)).collect::<Result<_, _>>()?;
        Ok(stored.into_iter().filter(|request| wakterm_engine::Phase::is_open_name(&request.phase)).collect())
    }

    /// ADM-5 across a restart: of the finished requests updated at or after `since_ms`, each
    /// agent's latest written ones (a view recorded at its write, `written_past`; the latest
    /// registered: the rows inserted last, whatever the wall clocks said), at most
    /// `MAX_RECENT_WRITES_LOADED`, ordered by agent id, then oldest first. A restart reopens
    /// the wait for the turn of a prompt written shortly before (`Engine::recover`,
    /// `RecoveredWrite::of`); the latest write matters most, as an app-server or a TUI reads
    /// its input in order: if its prompt was taken, so were the lines before it; but a TUI may
    /// record a plain send that steered before a prompt it had queued, so the few before it
    /// are loaded too (`RecoveredWrite::considered`; a review). The latest to
    /// finish is not it (a bound request ending after a one-way prompt that steered its turn,
    /// unread, hid that prompt: a review), nor one never written (released). One index range
    /// of the finished requests' times, whatever the history holds.
    pub fn load_latest_written_since(&self, since_ms: u64) -> Result<Vec<StoredRequest>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(op::LATEST_WRITTEN_SQL)?;
        let since = i64::try_from(since_ms).unwrap_or(i64::MAX); // past every stored time: none
        let most = i64::try_from(wakterm_engine::limits::MAX_RECENT_WRITES_LOADED).expect("a few");
        let rows = stmt.query_map([since, most], raw_request)?;
        rows.map(|raw| request_from_raw(raw?)).collect()
    }

    /// HIST-5: every request id, in one read snapshot, handed to `each` in id order until it
    /// returns false. Read on a connection of its own (read-only), so lookups and pages on the
    /// shared one never wait behind a scan of the whole history; the primary key's index
    /// covers it (the records themselves are not read).
    pub fn for_each_request_id(&self, mut each: impl FnMut(&str) -> bool) -> Result<(), StoreError> {
        let conn = Connection::open_with_flags(&self.path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        let mut stmt = conn.prepare(REQUEST_IDS)?;
        let mut rows = stmt.query([])?;
        while let Some(row) = rows.next()? {
            let request_id: String = row.get(0)?;
            if !each(&request_id) {
                break;
            }
        }
        Ok(())
    }

    pub fn get_request(&self, request_id: &str) -> Result<Option<StoredRequest>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(&format!("{REQUEST_SELECT} WHERE request_id = ?1"))?;
        let raw = stmt.query_row([request_id], raw_request).optional()?;
        raw.map(request_from_raw).transpose()
    }

    /// Terminal events with `sequence > after_seq`, ascending, at most
    /// `min(limit, TERMINAL_PAGE_MAX)` of them.
    pub fn terminal_events_after(
        &self,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredTerminalEvent>, StoreError> {
        let limit = limit.min(TERMINAL_PAGE_MAX);
        let Ok(after) = i64::try_from(after_seq) else {
            return Ok(Vec::new()); // No stored sequence can exceed i64::MAX.
        };
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT sequence, request_id, event FROM terminal_events \
             WHERE sequence > ?1 ORDER BY sequence LIMIT ?2",
        )?;
        let rows = stmt.query_map(rusqlite::params![after, limit as i64], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
            ))
        })?;
        let mut events = Vec::with_capacity(limit.min(64));
        let mut bytes = 0usize;
        for row in rows {
            if bytes >= super::limits::PAGE_MAX_BYTES {
                break; // CONN-3: the page is full by size; the caller reads on from its last row
            }
            let (sequence, request_id, event_json) = row?;
            bytes += event_json.len();
            let sequence = op::from_sql_integer("terminal sequence", sequence)?;
            assert!(sequence > after_seq);
            events.push(StoredTerminalEvent {
                sequence,
                request_id,
                event_json,
            });
        }
        assert!(events.len() <= limit);
        Ok(events)
    }

    /// The terminal event of one request, if it has ended.
    pub fn terminal_event_for(
        &self,
        request_id: &str,
    ) -> Result<Option<StoredTerminalEvent>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached(
            "SELECT sequence, request_id, event FROM terminal_events WHERE request_id = ?1",
        )?;
        let raw = stmt
            .query_row([request_id], |row| {
                Ok((
                    row.get::<_, i64>(0)?,
                    row.get::<_, String>(1)?,
                    row.get::<_, String>(2)?,
                ))
            })
            .optional()?;
        raw.map(|(sequence, request_id, event_json)| {
            let sequence = op::from_sql_integer("terminal sequence", sequence)?;
            Ok(StoredTerminalEvent {
                sequence,
                request_id,
                event_json,
            })
        })
        .transpose()
    }

    /// The greatest stored terminal sequence; 0 when there is none.
    pub fn last_terminal_sequence(&self) -> Result<u64, StoreError> {
        op::last_terminal_sequence(&self.conn())
    }

    /// EV-1: agent events with `after < sequence <= through`, ascending, at most
    /// `min(limit, TERMINAL_PAGE_MAX)`; only of `agents` when it is not empty. Both read the
    /// sequence range by rowid; a filtered read skips other agents' rows in it (no index by
    /// agent since migration 6: it cost every group commit a page per agent), one window of
    /// [`FILTERED_SCAN_WINDOW`] sequences per statement, taking the shared connection again
    /// for each: a quiet agent's page may scan the whole retained history, and every other
    /// read of the store (a request named again, `request get`, other subscribers) waits only
    /// for one window. A prune between windows is caught by the caller's check after the page
    /// (`stream::checked_page`: the pruned mark only grows).
    /// `store_agent_event_reads_walk_the_sequence_range` holds the plan.
    pub fn agent_events_after(&self, after: u64, through: u64, limit: usize, agents: &[String]) -> Result<Vec<StoredAgentEvent>, StoreError> {
        let limit = limit.min(TERMINAL_PAGE_MAX);
        let (Ok(after_sql), Ok(through_sql)) = (i64::try_from(after), i64::try_from(through)) else {
            return Ok(Vec::new());
        };
        let mut events = Vec::with_capacity(limit.min(64));
        let mut bytes = 0usize;
        // CONN-3: false once the page is full by size (the caller reads on from its last row).
        let mut push = |row: &Row<'_>| -> rusqlite::Result<bool> {
            let json = row.get::<_, String>(2)?;
            bytes += json.len();
            events.push((row.get::<_, i64>(0)?, row.get::<_, String>(1)?, json));
            Ok(bytes < super::limits::PAGE_MAX_BYTES)
        };
        if agents.is_empty() {
            let conn = self.conn();
            let mut stmt = conn.prepare_cached(AGENT_EVENTS_SQL)?;
            let mut rows = stmt.query(rusqlite::params![after_sql, through_sql, limit as i64])?;
            while let Some(row) = rows.next()? {
                if !push(row)? {
                    break;
                }
            }
        } else {
            let list = serde_json::to_string(agents).expect("strings serialise");
            let (mut from, mut found, mut room) = (after_sql, 0, true);
            while room && found < limit && from < through_sql {
                let to = through_sql.min(from.saturating_add(FILTERED_SCAN_WINDOW));
                let conn = self.conn();
                let mut stmt = conn.prepare_cached(AGENT_EVENTS_OF_SQL)?;
                let mut rows = stmt.query(rusqlite::params![from, to, list, (limit - found) as i64])?;
                while let Some(row) = rows.next()? {
                    found += 1;
                    room = push(row)?;
                    if !room {
                        break;
                    }
                }
                from = to;
            }
        }
        let events = events
            .into_iter()
            .map(|(sequence, agent_id, event_json)| {
                let sequence = op::from_sql_integer("event sequence", sequence)?;
                assert!(sequence > after && sequence <= through);
                Ok(StoredAgentEvent { sequence, agent_id, event_json })
            })
            .collect::<Result<Vec<_>, StoreError>>()?;
        assert!(events.len() <= limit);
        Ok(events)
    }

    /// EV-14: what the event stream has reported of `agent_id`, from its event mark (one
    /// primary-key lookup; marks are never deleted, so this outlives retention): None when
    /// the daemon never reported an event of it, else whether its `agent.stopped` is durable.
    pub fn agent_stop_reported(&self, agent_id: &str) -> Result<Option<bool>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT json_extract(mark, '$.stopped') FROM event_marks WHERE agent_id = ?1")?;
        let stopped = stmt.query_row([agent_id], |row| row.get::<_, Option<bool>>(0)).optional()?;
        Ok(stopped.map(|stopped| stopped.unwrap_or(false)))
    }

    /// EV-1: the greatest event sequence ever stored, pruned ones included.
    pub fn last_event_sequence(&self) -> Result<u64, StoreError> {
        op::last_event_sequence(&self.conn())
    }

    /// HIST-4: the highest terminal sequence retention removed (0: none).
    pub fn terminal_pruned_through(&self) -> Result<u64, StoreError> {
        op::terminal_pruned_through(&self.conn())
    }

    /// HIST-4: when the oldest finished request was last updated (None: there is none).
    pub fn oldest_finished_request_ms(&self) -> Result<Option<u64>, StoreError> {
        let conn = self.conn();
        let min: Option<i64> = conn.prepare_cached(op::OLDEST_FINISHED_SQL)?.query_row([], |row| row.get(0))?;
        min.map(|value| op::from_sql_integer("updated_ms", value)).transpose()
    }

    /// EV-9: the oldest stored event's sequence and time (None: none is stored).
    pub fn oldest_event(&self) -> Result<Option<(u64, u64)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT sequence, at_ms FROM agent_events ORDER BY sequence LIMIT 1")?;
        let row: Option<(i64, i64)> = stmt.query_row([], |row| Ok((row.get(0)?, row.get(1)?))).optional()?;
        row.map(|(sequence, at_ms)| Ok((op::from_sql_integer("event sequence", sequence)?, op::from_sql_integer("at_ms", at_ms)?))).transpose()
    }

    /// EV-9: the oldest event still stored (None: none is).
    pub fn oldest_event_sequence(&self) -> Result<Option<u64>, StoreError> {
        let min: Option<i64> = self.conn().prepare_cached("SELECT MIN(sequence) FROM agent_events")?.query_row([], |row| row.get(0))?;
        min.map(|value| op::from_sql_integer("event sequence", value)).transpose()
    }

    /// EV-9: the bytes of event JSON stored.
    pub fn stored_event_bytes(&self) -> Result<u64, StoreError> {
        op::stored_event_bytes(&self.conn())
    }

    /// The highest sequence retention removed (0: none).
    pub fn events_pruned_through(&self) -> Result<u64, StoreError> {
        op::events_pruned_through(&self.conn())
    }

    /// EV-4: every agent's event mark as (agent id, JSON).
    pub fn load_event_marks(&self) -> Result<Vec<(String, String)>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT agent_id, mark FROM event_marks ORDER BY agent_id")?;
        let rows = stmt.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    /// TIME-2: what the store keeps of the boot's daemon runs (`RunClocksSeen` as JSON), if any
    /// daemon recorded it.
    pub fn load_run_clocks(&self) -> Result<Option<String>, StoreError> {
        self.meta(op::RUN_CLOCKS)
    }

    /// A value of the `meta` table (e.g. `created_by`).
    pub fn meta(&self, key: &str) -> Result<Option<String>, StoreError> {
        let conn = self.conn();
        let mut stmt = conn.prepare_cached("SELECT value FROM meta WHERE key = ?1")?;
        Ok(stmt.query_row([key], |row| row.get(0)).optional()?)
    }

    /// A poisoned lock only means another reader panicked mid-read; the connection holds no
    /// half-done state (reads are single statements), so keep using it.
    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

const REQUEST_SELECT: &str =
    "SELECT request_id, agent_id, phase, fingerprint, record, updated_ms FROM requests";

/// HIST-1: the open requests, in id order, from the ids `open_requests` keeps (migration 5,
/// `schema::MIGRATION_5`): start reads what is open, never the history. The phase is checked
/// again on the row itself (`Phase::is_open_name`, after the read), so an id there can never
/// bring back a finished request. `CROSS
/// JOIN` keeps `open_requests` the outer loop (SQLite never reorders it): the planner must not
/// choose to scan `requests` for the phase.
pub(crate) const OPEN_REQUESTS_SQL: &str = "SELECT r.request_id, r.agent_id, r.phase, r.fingerprint, r.record, r.updated_ms \
     FROM open_requests AS o CROSS JOIN requests AS r ON r.request_id = o.request_id ORDER BY o.request_id";

/// EV-1: the sequences one statement of a filtered read scans (about 5 ms of rows).
pub(crate) const FILTERED_SCAN_WINDOW: i64 = 16_384;

/// EV-1: a page of agent events, all agents.
pub(crate) const AGENT_EVENTS_SQL: &str =
    "SELECT sequence, agent_id, event FROM agent_events WHERE sequence > ?1 AND sequence <= ?2 ORDER BY sequence LIMIT ?3";

/// EV-1: a page of agent events of the agents in the JSON list `?3`.
pub(crate) const AGENT_EVENTS_OF_SQL: &str = "SELECT sequence, agent_id, event FROM agent_events WHERE sequence > ?1 AND sequence <= ?2 \
     AND agent_id IN (SELECT value FROM json_each(?3)) ORDER BY sequence LIMIT ?4";

type RawRequest = (String, String, String, String, String, i64);

fn raw_request(row: &Row<'_>) -> rusqlite::Result<RawRequest> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
        row.get(5)?,
    ))
}

fn request_from_raw(raw: RawRequest) -> Result<StoredRequest, StoreError> {
    let (request_id, agent_id, phase, fingerprint, record_json, updated_ms) = raw;
    let updated_ms = op::from_sql_integer("updated_ms", updated_ms)?;
    Ok(StoredRequest {
        request_id,
        agent_id,
        phase,
        fingerprint,
        record_json,
        updated_ms,
    })
}
