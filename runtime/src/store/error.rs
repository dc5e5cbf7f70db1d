//! The closed set of store failures. Cloneable: one failed group commit is reported to every
//! batch that shared it.

use std::fmt;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    /// The file was written by a newer wakterm. It was not modified.
    NewerSchema {
        path: PathBuf,
        found: u32,
        supported: u32,
    },
    /// The file is not a SQLite database, or is a SQLite database of another application.
    NotAWaktermDatabase { path: PathBuf, reason: String },
    /// A batch broke an integrity rule (duplicate name, second terminal event, sequence not
    /// increasing, changed fingerprint, invalid JSON...). Only that batch was rolled back.
    Constraint { what: String },
    /// An operation was refused before reaching SQLite (a bound exceeded, a value out of range).
    InvalidOp { what: String },
    /// A file-system call on the database file failed.
    Io {
        path: PathBuf,
        kind: std::io::ErrorKind,
        message: String,
    },
    /// SQLite itself failed (disk full, I/O error, lock timeout...). `code` is the extended
    /// result code when SQLite supplied one.
    Sqlite { code: Option<i32>, message: String },
    /// The writer queue is full; nothing was enqueued. Retry after some commits complete.
    Backpressure { capacity: usize },
    /// The writer thread has stopped; nothing was enqueued or committed.
    Closed,
    /// STORE-1: the database is older than its watermark says (a deleted WAL, an emptied or
    /// replaced file). Nothing was opened for writing; `detail` says how to proceed.
    WentBackwards { path: PathBuf, detail: String },
    /// STORE-4: the file the writer commits to is no longer the one at its path (removed,
    /// renamed or replaced while the daemon ran): nothing was committed, and nothing will be
    /// until the daemon opens the store again.
    FileReplaced { path: PathBuf },
}

impl StoreError {
    pub(crate) fn io(path: &Path, err: &std::io::Error) -> Self {
        StoreError::Io {
            path: path.to_path_buf(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }

    pub(crate) fn constraint(what: impl Into<String>) -> Self {
        StoreError::Constraint { what: what.into() }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Self {
        StoreError::InvalidOp { what: what.into() }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(err: rusqlite::Error) -> Self {
        match &err {
            rusqlite::Error::SqliteFailure(ffi, message) => {
                let message = message.clone().unwrap_or_else(|| err.to_string());
                if ffi.code == rusqlite::ErrorCode::ConstraintViolation {
                    StoreError::Constraint { what: message }
                } else {
                    StoreError::Sqlite {
                        code: Some(ffi.extended_code),
                        message,
                    }
                }
            }
            other => StoreError::Sqlite {
                code: None,
                message: other.to_string(),
            },
        }
    }
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NewerSchema {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: schema version {found} was written by a newer wakterm (this build knows up \
                 to {supported}); upgrade wakterm or use another data directory. The file was \
                 not modified.",
                path.display()
            ),
            StoreError::NotAWaktermDatabase { path, reason } => write!(
                f,
                "{}: not a wakterm database ({reason}); move it aside or use another data \
                 directory. The file was not modified.",
                path.display()
            ),
            StoreError::Constraint { what } => {
                write!(f, "store integrity rule refused the batch: {what}")
            }
            StoreError::InvalidOp { what } => write!(f, "invalid store operation: {what}"),
            StoreError::Io { path, message, .. } => write!(f, "{}: {message}", path.display()),
            StoreError::Sqlite {
                code: Some(code),
                message,
            } => {
                write!(f, "SQLite error {code}: {message}")
            }
            StoreError::Sqlite {
                code: None,
                message,
            } => write!(f, "SQLite error: {message}"),
            StoreError::Backpressure { capacity } => write!(
                f,
                "store writer queue is full ({capacity} batches); retry after commits complete"
            ),
            StoreError::Closed => write!(f, "store writer has stopped; reopen the store"),
            StoreError::WentBackwards { path, detail } => write!(f, "refusing to open {}: {detail}", path.display()),
            StoreError::FileReplaced { path } => write!(
                f,
                "{} was removed or replaced while the daemon ran: nothing is committed to the \
                 file it had open (a restart would lose it); nothing was written. Restart the \
                 daemon (`wakterm mux stop && wakterm mux start`); if the file was removed, what \
                 it held is gone",
                path.display()
            ),
        }
    }
}

impl std::error::Error for StoreError {}
