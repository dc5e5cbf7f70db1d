//! Opening a database file safely: private mode, refusal of foreign or newer files before any
//! write, WAL + synchronous=FULL, and versioned migrations keyed by `PRAGMA user_version`.

use std::fs::{self, OpenOptions};
use std::io::ErrorKind;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::error::StoreError;
use super::limits::BUSY_TIMEOUT_MS;

/// `PRAGMA application_id` of every wakterm database ("wakt"): tells our files from any other
/// SQLite file before we touch it.
pub const APPLICATION_ID: i32 = 0x7761_6b74;

/// Migration `i` takes the schema from version `i` to `i + 1`. Append only; never edit a shipped
/// entry, because databases in the field already ran it.
const MIGRATIONS: &[&str] = &[MIGRATION_1, MIGRATION_2, MIGRATION_3, MIGRATION_4, MIGRATION_5, MIGRATION_6, MIGRATION_7];

/// The schema version this build writes and the newest it can open.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

const MIGRATION_1: &str = "
CREATE TABLE meta(
    key TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
) STRICT;
CREATE TABLE agents(
    agent_id TEXT PRIMARY KEY NOT NULL,
    name TEXT UNIQUE NOT NULL,
    record TEXT NOT NULL CHECK (json_valid(record))
) STRICT;
CREATE TABLE requests(
    request_id TEXT PRIMARY KEY NOT NULL,
    agent_id TEXT NOT NULL,
    phase TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    record TEXT NOT NULL CHECK (json_valid(record)),
    updated_ms INTEGER NOT NULL CHECK (updated_ms >= 0)
) STRICT;
CREATE INDEX requests_by_agent ON requests(agent_id);
CREATE INDEX requests_by_phase ON requests(phase);
CREATE TABLE terminal_events(
    sequence INTEGER PRIMARY KEY CHECK (sequence > 0),
    request_id TEXT NOT NULL UNIQUE REFERENCES requests(request_id),
    event TEXT NOT NULL CHECK (json_valid(event))
) STRICT;
";

/// OBS-1: one observer checkpoint per agent (the last saved), so a restart reads only what
/// followed it. A cache of facts the rollout still holds: losing it costs a longer read only.
const MIGRATION_2: &str = "
CREATE TABLE observer_checkpoints(
    agent_id TEXT PRIMARY KEY NOT NULL,
    checkpoint TEXT NOT NULL CHECK (json_valid(checkpoint))
) STRICT;
";

/// EV-1, EV-4: the durable Agent API event stream and each agent's event mark.
const MIGRATION_3: &str = "
CREATE TABLE agent_events(
    sequence INTEGER PRIMARY KEY CHECK (sequence > 0),
    agent_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    at_ms INTEGER NOT NULL CHECK (at_ms >= 0),
    event TEXT NOT NULL CHECK (json_valid(event))
) STRICT;
CREATE INDEX agent_events_by_agent ON agent_events(agent_id, sequence);
CREATE TABLE event_marks(
    agent_id TEXT PRIMARY KEY NOT NULL,
    mark TEXT NOT NULL CHECK (json_valid(mark))
) STRICT;
";

/// HIST-4: finished requests by age, for retention.
pub(crate) const MIGRATION_4: &str = "
CREATE INDEX requests_finished_by_time ON requests(updated_ms) WHERE phase IN ('terminal', 'settled', 'released');
";

/// Issue 10, HIST-1: every index a request's commit updates costs a b-tree step and, in WAL
/// mode, a page written per commit. `requests_by_agent` served no query; `requests_by_phase`
/// served one (the open requests at start) but held every request, so each phase change moved
/// an entry between two places of a tree as large as the history. Both go. The open requests'
/// ids are kept in `open_requests` by the one writer, in the transaction of the row's change
/// (`op::put_request`): an id is there while its row's phase is open, so a change between two
/// open phases (registered -> submitted -> bound) writes nothing there.
/// Not a partial index: building one scans the whole table (43 s for a 4 GiB history with a
/// cold cache, past `mux start`'s wait); this table is filled from the old phase index before
/// that is dropped (2.2 s for the same history). Not triggers either: with them a row's
/// upsert took about ten times the CPU (SQLite 3.40, measured from Python), and the daemon's
/// CPU per request rose in six of eight alternated pairs.
pub(crate) const MIGRATION_5: &str = "
CREATE TABLE open_requests(request_id TEXT PRIMARY KEY NOT NULL) STRICT, WITHOUT ROWID;
INSERT INTO open_requests(request_id)
    SELECT request_id FROM requests INDEXED BY requests_by_phase WHERE phase IN ('registered', 'submitted', 'bound');
DROP INDEX requests_by_agent;
DROP INDEX requests_by_phase;
";

/// Issue 10: the per-agent index of agent events goes. Its entries are ordered by agent, so a
/// group commit carrying events of N agents wrote N of its leaf pages (27 % of the WAL frames
/// at 10 busy agents, 6.6 of 24.8 per commit); the events table itself is appended at one end.
/// Reads filtered by agent scan the sequence range they are asked for instead (the rowid), which
/// a live subscriber keeps short, in windows (`reader::FILTERED_SCAN_WINDOW`); a catch-up of
/// one agent of 100 over 1,000,000 events took 0.25 s without the index against 0.03 s with
/// it, and an agent with no events there 0.24 s (SQLite 3.40 from Python). `IF EXISTS`: the drop must not fail on a database someone already
/// tidied by hand.
pub(crate) const MIGRATION_6: &str = "
DROP INDEX IF EXISTS agent_events_by_agent;
";

/// EV-9: the bytes of event JSON stored, kept from now on by every batch and prune
/// (`op::EVENTS_STORED_BYTES`), counted once here for what an older database holds (a scan of
/// the events table, once, at the first start of this version).
pub(crate) const MIGRATION_7: &str = "
INSERT OR REPLACE INTO meta(key, value)
    SELECT 'events_stored_bytes', CAST(COALESCE(SUM(length(CAST(event AS BLOB))), 0) AS TEXT) FROM agent_events;
";

/// Migrations 5 and 6 undone: a version-4 database, as one in the field has it, for the tests
/// of the migrations since (store and `mux start`).
#[doc(hidden)]
pub const UNDO_MIGRATION_5_FOR_TESTS: &str = "DROP TABLE open_requests; \
     CREATE INDEX requests_by_agent ON requests(agent_id); \
     CREATE INDEX requests_by_phase ON requests(phase); \
     CREATE INDEX agent_events_by_agent ON agent_events(agent_id, sequence); PRAGMA user_version = 4;";

/// What opening found and fixed, so the daemon can tell the user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenReport {
    /// The file did not exist and was created with mode 0600.
    pub created: bool,
    /// The file's previous mode when it gave group/other access; it is now 0600.
    pub mode_repaired_from: Option<u32>,
    /// The schema version found before migrating (0 for a new database).
    pub migrated_from: u32,
    /// STORE-1: the database's identity and commit count at open.
    pub mark: super::watermark::Mark,
}

/// Opens `path` read-write with the schema at [`SCHEMA_VERSION`]. The parent directory must exist.
pub(crate) fn open_database(path: &Path) -> Result<(Connection, OpenReport), StoreError> {
    refuse_links(path)?;
    // STORE-1: what the watermark remembers is checked before anything is written (the file
    // created, the schema migrated, an identity given): a lost WAL's database was given a new
    // schema and store id, its WAL deleted, and only then refused.
    let watermark = super::watermark::path_for(path);
    let remembered = super::watermark::remembered(&watermark, path)?;
    if let (Some(remembered), false) = (&remembered, path.exists()) {
        super::watermark::compare(&watermark, path, remembered, None)?;
    }
    let created = create_private_file(path)?;
    if !created {
        // Before any write, even the WAL switch (which rewrites the header), and before the
        // read-only look (which makes side files of the database's mode): refuse what we
        // must not touch.
        refuse_unwritable(path)?;
        preflight_read_only(path, remembered.as_ref())?;
    }
    let mode_repaired_from = repair_private_mode(path)?;
    let conn = connect(path)?;
    let migrated_from = migrate(path, &conn)?;
    assert!(user_version(&conn)? == SCHEMA_VERSION);
    super::watermark::ensure_identity(&conn)?;
    let mark = super::watermark::read_mark(&conn)?;
    super::watermark::check(&super::watermark::path_for(path), path, &mark)?;
    Ok((
        conn,
        OpenReport {
            created,
            mode_repaired_from,
            migrated_from,
            mark,
        },
    ))
}

/// STORE-3: one more connection to a database `open_database` has already opened, checked,
/// migrated and identified in this process (the writer's): only what may have changed since
/// is checked again (a link planted at the path; SQLite never creates the file here).
pub(crate) fn open_beside(path: &Path) -> Result<Connection, StoreError> {
    refuse_links(path)?;
    connect(path)
}

/// An existing database file, read-write (never created), with the per-connection settings.
fn connect(path: &Path) -> Result<Connection, StoreError> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
    configure(&conn)?;
    Ok(conn)
}

/// SEC-1: SQLite opens its files by path and would follow a planted link; the database, its
/// side files and its watermark must be regular files of ours (or absent) before anything
/// touches them.
fn refuse_links(path: &Path) -> Result<(), StoreError> {
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let side_files = ["", "-wal", "-shm", "-journal"].map(|suffix| path.with_file_name(format!("{name}{suffix}")));
    for file in side_files.iter().chain([&super::watermark::path_for(path)]) {
        crate::paths::verify_no_link(file).map_err(|err| StoreError::io(file, &err))?;
    }
    Ok(())
}

/// Creates the file with mode 0600 so it is never world-readable, not even for an instant.
fn create_private_file(path: &Path) -> Result<bool, StoreError> {
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(true),
        Err(err) if err.kind() == ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(StoreError::io(path, &err)),
    }
}

/// Makes the database and any WAL/SHM side files private; returns the database's previous mode
/// when it had to change.
pub(super) fn repair_private_mode(path: &Path) -> Result<Option<u32>, StoreError> {
    let meta = fs::metadata(path).map_err(|err| StoreError::io(path, &err))?;
    if !meta.is_file() {
        return Err(StoreError::NotAWaktermDatabase {
            path: path.to_path_buf(),
            reason: "it is not a regular file".into(),
        });
    }
    let mode = meta.permissions().mode() & 0o777;
    for suffix in ["-wal", "-shm"] {
        let side = path.with_file_name(format!(
            "{}{suffix}",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        if let Ok(side_meta) = fs::metadata(&side) {
            // Private, and the owner's to write: SQLite creates a side file with the
            // database's mode, so a start refused for a read-only database left 0400 ones,
            // and every start after the database was made writable again failed on them.
            if side_meta.permissions().mode() & 0o777 != 0o600 {
                set_mode_0600(&side)?;
            }
        }
    }
    if mode & 0o077 == 0 {
        return Ok(None);
    }
    set_mode_0600(path)?;
    Ok(Some(mode))
}

fn set_mode_0600(path: &Path) -> Result<(), StoreError> {
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))
        .map_err(|err| StoreError::io(path, &err))
}

/// Reads the identity and version through a read-only connection; refuses foreign and newer
/// files without writing a byte to them.
fn preflight_read_only(path: &Path, remembered: Option<&super::watermark::Mark>) -> Result<(), StoreError> {
    let not_ours = |reason: String| StoreError::NotAWaktermDatabase {
        path: path.to_path_buf(),
        reason,
    };
    let conn = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(|err| not_ours(err.to_string()))?;
    let identity = read_identity(&conn).map_err(|err| match err {
        rusqlite::Error::SqliteFailure(ffi, _) if ffi.code == rusqlite::ErrorCode::NotADatabase => {
            not_ours("the file is not a SQLite database".into())
        }
        other => StoreError::from(other),
    })?;
    let empty = identity.object_count == 0;
    check_identity(path, identity)?;
    // STORE-1, before any write: the database the watermark remembers.
    let Some(remembered) = remembered else { return Ok(()) };
    let found = if empty { None } else { Some(super::watermark::read_mark(&conn)?) };
    super::watermark::compare(&super::watermark::path_for(path), path, remembered, found.as_ref())
}

/// STORE-2: a database this user cannot write is refused by name before SQLite opens it
/// (which fell back to a read-only open and failed later with "attempt to write a readonly
/// database", naming no file, leaving side files of its mode behind).
fn refuse_unwritable(path: &Path) -> Result<(), StoreError> {
    match rustix::fs::access(path, rustix::fs::Access::READ_OK | rustix::fs::Access::WRITE_OK) {
        Ok(()) => Ok(()),
        Err(errno) => {
            let mode = fs::metadata(path).map(|m| m.permissions().mode() & 0o777).unwrap_or(0);
            let why = format!("{} (mode {mode:o}); wakterm writes its database: make it readable and writable by its owner (chmod 600 {})", std::io::Error::from(errno), path.display());
            Err(StoreError::io(path, &std::io::Error::new(std::io::ErrorKind::PermissionDenied, why)))
        }
    }
}

struct Identity {
    application_id: i32,
    user_version: u32,
    object_count: i64,
}

fn read_identity(conn: &Connection) -> rusqlite::Result<Identity> {
    Ok(Identity {
        application_id: conn.query_row("PRAGMA application_id", [], |row| row.get(0))?,
        user_version: conn.query_row("PRAGMA user_version", [], |row| row.get(0))?,
        object_count: conn.query_row("SELECT COUNT(*) FROM sqlite_master", [], |row| row.get(0))?,
    })
}

fn check_identity(path: &Path, id: Identity) -> Result<(), StoreError> {
    let not_ours = |reason: String| StoreError::NotAWaktermDatabase {
        path: path.to_path_buf(),
        reason,
    };
    let empty = id.application_id == 0 && id.user_version == 0 && id.object_count == 0;
    if empty {
        return Ok(());
    }
    if id.application_id != APPLICATION_ID {
        return Err(not_ours(format!(
            "SQLite database of another application (application_id {:#x}, {} schema objects)",
            id.application_id, id.object_count
        )));
    }
    if id.user_version == 0 {
        return Err(not_ours(
            "wakterm application id but no schema version".into(),
        ));
    }
    if id.user_version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: path.to_path_buf(),
            found: id.user_version,
            supported: SCHEMA_VERSION,
        });
    }
    Ok(())
}

/// Prepared statements each connection keeps (see `configure`).
const STATEMENT_CACHE: usize = 64;

/// Per-connection settings. WAL lets readers run beside the writer; FULL syncs the WAL on every
/// commit, so an acknowledged commit survives power loss, not only a process crash.
pub(crate) fn configure(conn: &Connection) -> Result<(), StoreError> {
    conn.busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS))?;
    let mode: String = conn.query_row("PRAGMA journal_mode=WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(StoreError::Sqlite {
            code: None,
            message: format!("could not enable WAL journal mode (SQLite kept '{mode}')"),
        });
    }
    conn.execute_batch("PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;")?;
    // Issue 10: a group commit runs about 15 distinct statements; rusqlite keeps 16 prepared
    // by default, so one more (or a prune's) would evict and prepare again on every commit.
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    let synchronous: i64 = conn.query_row("PRAGMA synchronous", [], |row| row.get(0))?;
    assert!(
        synchronous == 2,
        "synchronous must be FULL (2), SQLite reports {synchronous}"
    );
    Ok(())
}

fn user_version(conn: &Connection) -> Result<u32, StoreError> {
    Ok(conn.query_row("PRAGMA user_version", [], |row| row.get(0))?)
}

/// Runs the missing migrations in one IMMEDIATE transaction. The version is read again under the
/// write lock: another process may have migrated (or a newer build written) since preflight.
fn migrate(path: &Path, conn: &Connection) -> Result<u32, StoreError> {
    let started = std::time::Instant::now();
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = migrate_locked(path, conn);
    let end = if result.is_ok() { "COMMIT" } else { "ROLLBACK" };
    match (result, conn.execute_batch(end)) {
        (Ok(found), Ok(())) => {
            if is_migration(found) {
                let elapsed_ms = started.elapsed().as_millis() as u64;
                tracing::info!(to = SCHEMA_VERSION, elapsed_ms, "{}", crate::logging::MIGRATED_LOG);
            }
            Ok(found)
        }
        (Ok(_), Err(err)) => Err(err.into()),
        (Err(err), _) => Err(err),
    }
}

/// An existing database of an older schema (a new file is created, not migrated).
fn is_migration(found: u32) -> bool {
    found > 0 && found < SCHEMA_VERSION
}

fn migrate_locked(path: &Path, conn: &Connection) -> Result<u32, StoreError> {
    let identity = read_identity(conn)?;
    let found = identity.user_version;
    check_identity(path, identity)?;
    assert!(found <= SCHEMA_VERSION);
    if is_migration(found) {
        // Said before the work: a migration may scan every request once, and `mux start`
        // waits longer for a daemon whose log says it is migrating (`mux::still_migrating`).
        tracing::info!(from = found, to = SCHEMA_VERSION, "{}", crate::logging::MIGRATING_LOG);
    }
    for (index, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        conn.execute_batch(sql)?;
        let version = index as u32 + 1;
        conn.execute_batch(&format!("PRAGMA user_version = {version}"))?;
    }
    if found < SCHEMA_VERSION {
        conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
        let by = format!("wakterm-runtime {}", env!("CARGO_PKG_VERSION"));
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('created_by', ?1) ON CONFLICT(key) DO NOTHING",
            [&by],
        )?;
        conn.execute(
            "INSERT INTO meta(key, value) VALUES ('migrated_by', ?1) \
             ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            [&by],
        )?;
    }
    Ok(found)
}
