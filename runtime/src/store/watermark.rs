//! STORE-1: a small fsynced file beside the database that remembers which store this is and how
//! many transactions it has committed, so a store that went backwards is noticed.
//!
//! SQLite cannot notice that its WAL was deleted or its file emptied or replaced by an older
//! copy: it opens what it finds. Every request id admitted since would then be unknown and
//! could be written a second time. The database counts its own commits (`meta.commit_count`,
//! bumped inside every group transaction) and carries a random `meta.store_id`; after each
//! commit the writer records both here. At open, a database whose id differs from the
//! watermark's, or whose count is lower, is refused with a message that says how to proceed
//! deliberately. The watermark is written only after the commit it describes, so it can lag
//! the database (harmless: less is detected) but never lead it.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use rusqlite::Connection;
use sha2::{Digest, Sha256};

use super::error::StoreError;

/// What the database says about itself, and what the watermark remembers of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mark {
    pub store_id: String,
    pub commits: u64,
}

const MAGIC: &str = "wakterm-store-watermark v1";

/// The watermark's path: `<database>.watermark`.
pub fn path_for(database: &Path) -> PathBuf {
    let mut name = database.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".watermark");
    database.with_file_name(name)
}

/// Gives a database its identity and commit counter if it has none yet (a new database).
pub(crate) fn ensure_identity(conn: &Connection) -> Result<(), StoreError> {
    let store_id = uuid::Uuid::new_v4().to_string();
    conn.execute("INSERT INTO meta(key, value) VALUES ('store_id', ?1) ON CONFLICT(key) DO NOTHING", [&store_id])?;
    conn.execute("INSERT INTO meta(key, value) VALUES ('commit_count', '0') ON CONFLICT(key) DO NOTHING", [])?;
    Ok(())
}

/// The database's own identity and commit count.
pub(crate) fn read_mark(conn: &Connection) -> Result<Mark, StoreError> {
    let store_id: String = conn.query_row("SELECT value FROM meta WHERE key = 'store_id'", [], |row| row.get(0))?;
    let commits: String = conn.query_row("SELECT value FROM meta WHERE key = 'commit_count'", [], |row| row.get(0))?;
    let commits = commits.parse().map_err(|_| StoreError::invalid(format!("meta.commit_count is not a number: {commits:?}")))?;
    Ok(Mark { store_id, commits })
}

/// Inside a group transaction: counts it. Returns the new count.
pub(crate) fn bump(conn: &Connection) -> rusqlite::Result<u64> {
    // Cached: every group transaction runs it (parsing it each time showed in the profile).
    let value: String = conn
        .prepare_cached("UPDATE meta SET value = CAST(CAST(value AS INTEGER) + 1 AS TEXT) WHERE key = 'commit_count' RETURNING value")?
        .query_row([], |row| row.get(0))?;
    Ok(value.parse().unwrap_or(0))
}

/// The fixed-length line a watermark holds (fixed, so an overwrite in place leaves no tail).
fn encode(mark: &Mark) -> Vec<u8> {
    let body = format!("{MAGIC} store={:<36} commits={:020}", mark.store_id, mark.commits);
    let check = hex16(&Sha256::digest(body.as_bytes()));
    format!("{body} check={check}\n").into_bytes()
}

fn decode(bytes: &[u8]) -> Result<Mark, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
    let line = text.strip_suffix('\n').ok_or("no complete line")?;
    let (body, check) = line.rsplit_once(" check=").ok_or("no checksum")?;
    if hex16(&Sha256::digest(body.as_bytes())) != check {
        return Err("checksum mismatch".into());
    }
    let rest = body.strip_prefix(MAGIC).ok_or("unknown format")?;
    let (store, commits) = rest.trim_start().split_once(" commits=").ok_or("no commit count")?;
    let store_id = store.strip_prefix("store=").ok_or("no store id")?.trim_end().to_string();
    let commits = commits.parse().map_err(|_| "commit count is not a number".to_string())?;
    Ok(Mark { store_id, commits })
}

fn hex16(digest: &[u8]) -> String {
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// STORE-1: may a database with `found` be opened, given the watermark at `path`?
/// An empty watermark says no more than a missing one: it is what a crash right after the
/// file's creation left before [`Watermark::open`] created it whole (the next start refused
/// the store as "went backwards" with nothing gone; a review found it).
pub(crate) fn check(path: &Path, database: &Path, found: &Mark) -> Result<(), StoreError> {
    match remembered(path, database)? {
        Some(remembered) => compare(path, database, &remembered, Some(found)),
        None => Ok(()),
    }
}

/// What the watermark at `path` remembers: None when there is none, or it is empty.
pub(crate) fn remembered(path: &Path, database: &Path) -> Result<Option<Mark>, StoreError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) if bytes.is_empty() => {
            tracing::warn!(path = %path.display(), "the store's watermark is empty (a crash as it was created): it is written again");
            return Ok(None);
        }
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(StoreError::io(path, &error)),
    };
    let remembered = decode(&bytes).map_err(|why| went_backwards(path, database, format!("the watermark {} is unreadable ({why})", path.display())))?;
    Ok(Some(remembered))
}

fn went_backwards(path: &Path, database: &Path, detail: String) -> StoreError {
    let how = format!(
        "If you restored or reset the database on purpose, move {} aside and start again; \
         request ids admitted since the database's state will then be accepted, and written, again",
        path.display()
    );
    StoreError::WentBackwards { path: database.to_path_buf(), detail: format!("{detail}. {how}") }
}

/// STORE-1: may a database whose own mark is `found` (None: it has no identity, an empty or
/// missing file) be opened, given what the watermark at `path` remembers?
pub(crate) fn compare(path: &Path, database: &Path, remembered: &Mark, found: Option<&Mark>) -> Result<(), StoreError> {
    let went_backwards = |detail: String| went_backwards(path, database, detail);
    let Some(found) = found else {
        return Err(went_backwards(format!(
            "the database has no identity (it was emptied, deleted or replaced) but the watermark remembers store {} with {} commits",
            remembered.store_id, remembered.commits
        )));
    };
    if remembered.store_id != found.store_id {
        return Err(went_backwards(format!(
            "the database is store {} but the watermark remembers store {} with {} commits: the database was emptied, deleted or replaced",
            found.store_id, remembered.store_id, remembered.commits
        )));
    }
    if found.commits < remembered.commits {
        return Err(went_backwards(format!(
            "the database holds {} commits but {} were made: its newest commits are gone (a deleted WAL file, or an older copy restored)",
            found.commits, remembered.commits
        )));
    }
    Ok(())
}

/// Writes `mark` to a new file beside `path` and renames it over `path`, durably.
fn create_whole(path: &Path, mark: &Mark) -> std::io::Result<()> {
    let mut name = path.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".new");
    let fresh = path.with_file_name(name);
    let file = crate::paths::open_private_file(&fresh, OpenOptions::new().create(true).truncate(true).write(true))?;
    file.write_all_at(&encode(mark), 0)?;
    file.sync_all()?;
    std::fs::rename(&fresh, path)?;
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// The writer's handle on the watermark file.
pub(crate) struct Watermark {
    file: File,
    path: PathBuf,
    store_id: String,
}

impl Watermark {
    /// Opens (never through a link) and records `mark` at once. A missing (or empty) watermark
    /// is created whole: written 0600 beside it, synced, renamed into place and the directory
    /// synced, so no crash leaves it empty or half written.
    pub(crate) fn open(database: &Path, mark: &Mark) -> Result<Watermark, StoreError> {
        let path = path_for(database);
        let exists = std::fs::symlink_metadata(&path).map(|meta| meta.len() > 0 || meta.file_type().is_symlink());
        if !exists.unwrap_or(false) {
            create_whole(&path, mark).map_err(|error| StoreError::io(&path, &error))?;
        }
        let file = crate::paths::open_private_file(&path, OpenOptions::new().read(true).write(true))
            .map_err(|error| StoreError::io(&path, &error))?;
        let watermark = Watermark { file, path, store_id: mark.store_id.clone() };
        watermark.record(mark.commits).map_err(|error| StoreError::io(&watermark.path, &error))?;
        Ok(watermark)
    }

    /// Records a commit count (after its commit), durably.
    pub(crate) fn record(&self, commits: u64) -> std::io::Result<()> {
        let line = encode(&Mark { store_id: self.store_id.clone(), commits });
        self.file.write_all_at(&line, 0)?;
        self.file.set_len(line.len() as u64)?;
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mark(commits: u64) -> Mark {
        Mark { store_id: "9c1e7f9e-3b0a-4a53-8d1f-2f6f0e6d7a10".into(), commits }
    }

    #[test]
    fn store_1_encoding_round_trips_and_detects_damage() {
        let bytes = encode(&mark(42));
        assert_eq!(decode(&bytes).unwrap(), mark(42));
        assert_eq!(encode(&mark(1)).len(), encode(&mark(u64::MAX)).len(), "fixed length");
        for at in 0..bytes.len() - 1 {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x01;
            assert!(decode(&damaged).is_err(), "a flipped bit at {at} went unnoticed");
        }
    }

    #[test]
    fn store_1_check_refuses_a_store_that_went_backwards_or_was_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("wakterm.db");
        let path = path_for(&db);
        check(&path, &db, &mark(3)).unwrap(); // no watermark yet: nothing to compare
        std::fs::write(&path, encode(&mark(10))).unwrap();
        check(&path, &db, &mark(10)).unwrap();
        check(&path, &db, &mark(11)).unwrap(); // the watermark may lag
        let error = check(&path, &db, &mark(9)).unwrap_err().to_string();
        assert!(error.contains("deleted WAL") && error.contains("move"), "{error}");
        let other = Mark { store_id: "0d6a2a44-5a39-4ad4-9a8e-0c7b8f36b2aa".into(), commits: 10 };
        let error = check(&path, &db, &other).unwrap_err().to_string();
        assert!(error.contains("emptied, deleted or replaced"), "{error}");
        std::fs::write(&path, b"garbage\n").unwrap();
        assert!(check(&path, &db, &mark(10)).unwrap_err().to_string().contains("unreadable"));
    }

    /// STORE-1: a watermark left empty by a crash as it was created (the file existed before
    /// its first record was durable) says nothing, as a missing one: the store opens and the
    /// watermark is written whole. It was refused as "went backwards" with nothing gone.
    #[test]
    fn store_1_an_empty_watermark_is_no_watermark_and_is_created_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let db = tmp.path().join("wakterm.db");
        let path = path_for(&db);
        std::fs::write(&path, b"").unwrap();
        check(&path, &db, &mark(3)).expect("an empty watermark refuses nothing");
        let watermark = Watermark::open(&db, &mark(3)).expect("opens");
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), mark(3), "written whole");
        watermark.record(4).unwrap();
        assert_eq!(decode(&std::fs::read(&path).unwrap()).unwrap(), mark(4));
        let names: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("wakterm.db.watermark")], "no temporary file left");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "private");
        let error = check(&path, &db, &mark(2)).unwrap_err().to_string();
        assert!(error.contains("deleted WAL"), "the new watermark counts: {error}");
    }
}
