//! LOG-1: the daemon's structured log. `tracing` events go to `mux.log` in the data directory
//! (0600, never through a link), filtered by `$WAKTERM_LOG` (an `EnvFilter` directive such as
//! `info`, the default, or `wakterm_runtime=debug`). The file is bounded: past
//! `MAX_LOG_BYTES` it is renamed to `mux.log.1` (replacing the previous one) and a new one is
//! started, so the log never takes more than about twice that. Prompt text is never logged:
//! requests are named by id, prompts by their hash.

use std::fs::File;
use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Size at which `mux.log` is rotated.
pub const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;
/// The environment variable holding the filter directive.
pub const LOG_ENV: &str = "WAKTERM_LOG";

/// Lines of the daemon's log that `mux start` reads while it waits for a new daemon (its only
/// voice before the socket answers): where this daemon's part of the log begins, and a database
/// migration that started and ended (`store::schema`).
pub const STARTING_LOG: &str = "daemon starting";
pub const MIGRATING_LOG: &str = "migrating the database";
pub const MIGRATED_LOG: &str = "database migrated";

/// A size-bounded append-only log file, shared by every thread that logs.
#[derive(Clone)]
pub struct BoundedLog {
    inner: Arc<Mutex<Inner>>,
}

struct Inner {
    path: PathBuf,
    file: File,
    written: u64,
    max_bytes: u64,
    /// LOG-1: the file was renamed to the previous one but its successor could not be opened
    /// yet: the next rotation opens it (renaming again would fail: nothing is left to rename).
    renamed: bool,
    /// LOG-3: when the path was last checked to still name `file`, and how often it is.
    checked: Option<std::time::Instant>,
    check_every: std::time::Duration,
}

/// LOG-3: how often, at most, a log checks that its path still names its file.
const LOG_PATH_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

impl BoundedLog {
    pub fn open(path: PathBuf, max_bytes: u64) -> io::Result<BoundedLog> {
        assert!(max_bytes > 0);
        let file = open_log(&path)?;
        let written = file.metadata()?.len();
        let inner = Inner { path, file, written, max_bytes, renamed: false, checked: None, check_every: LOG_PATH_CHECK };
        Ok(BoundedLog { inner: Arc::new(Mutex::new(inner)) })
    }
}

fn open_log(path: &std::path::Path) -> io::Result<File> {
    crate::paths::open_private_file(path, std::fs::OpenOptions::new().create(true).append(true))
}

impl Inner {
    /// LOG-3: a log file removed (a cleaner of old files, `rm mux.log`) or replaced under the
    /// daemon is opened again, at most a second later; its lines went to the unlinked file,
    /// which nobody could read, until the daemon restarted.
    fn reopen_if_gone(&mut self) {
        let now = std::time::Instant::now();
        if self.renamed || self.checked.is_some_and(|at| now.duration_since(at) < self.check_every) {
            return;
        }
        self.checked = Some(now);
        let ours = crate::paths::fd_identity(&self.file).ok();
        let at_path = crate::paths::path_identity(&self.path).ok();
        if ours.is_some() && at_path != ours {
            if let Ok(file) = open_log(&self.path) {
                self.written = file.metadata().map(|meta| meta.len()).unwrap_or(0);
                self.file = file;
            }
        }
    }

    fn rotate_if_full(&mut self) -> io::Result<()> {
        self.rotate_if_full_with(open_log)
    }

    /// `open` makes the new file (a parameter for the test of a failed open).
    fn rotate_if_full_with(&mut self, open: impl Fn(&std::path::Path) -> io::Result<File>) -> io::Result<()> {
        if self.written < self.max_bytes {
            return Ok(());
        }
        if !self.renamed {
            std::fs::rename(&self.path, self.path.with_extension("log.1"))?;
            self.renamed = true;
        }
        self.file = open(&self.path)?;
        self.renamed = false;
        self.written = 0;
        Ok(())
    }
}

impl Write for BoundedLog {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.reopen_if_gone();
        // A log that cannot rotate keeps writing rather than losing the daemon's voice.
        let _ = inner.rotate_if_full();
        let before = inner.file.metadata().map(|meta| meta.len());
        let n = inner.file.write(buf)?;
        if n < buf.len() {
            // LOG-2: a line cut short (the disk filled in the middle of it) is taken back whole,
            // so the next line does not run into its torn end (a hostile run found 8 such lines
            // on a full disk): dropped, as a line that cannot be written at all is. Only when
            // nothing else was appended meanwhile (the daemon's own stderr, a second daemon
            // losing the start race, write to this file too): else its torn end is closed.
            let now = inner.file.metadata().map(|meta| meta.len());
            match (before, now) {
                (Ok(length), Ok(end)) if end == length + n as u64 => drop(inner.file.set_len(length)),
                _ => drop(inner.file.write(b"\n")),
            }
            return Err(io::Error::new(io::ErrorKind::StorageFull, "a log line was cut short: dropped"));
        }
        inner.written += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).file.flush()
    }
}

/// Installs the daemon's subscriber (once per process). Returns an error for a filter
/// directive that does not parse, so a typo is said rather than silently ignored.
pub fn init_daemon(paths: &crate::paths::DataPaths) -> Result<(), String> {
    let directive = std::env::var(LOG_ENV).unwrap_or_else(|_| "info".to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(&directive).map_err(|e| format!("{LOG_ENV}={directive:?}: {e}"))?;
    let log = BoundedLog::open(paths.log_file(), MAX_LOG_BYTES).map_err(|e| format!("cannot open {}: {e}", paths.log_file().display()))?;
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(false)
        .with_writer(move || log.clone())
        // LOG-2: a write that failed (a full disk) is dropped. The fallback would print the
        // failure with `eprintln!`, to a background daemon's stderr: the same full log file,
        // and `eprintln!` panics when it cannot write: the panic hook then ended the daemon.
        .log_internal_errors(false)
        .finish();
    // A second daemon in one process (tests) keeps the first subscriber.
    let _ = tracing::subscriber::set_global_default(subscriber);
    Ok(())
}

/// LOG-1 for a holder: its stderr is its own size-bounded log (`h/<id>.sock.log`, truncated
/// at start past its bound); the filter is the daemon's `$WAKTERM_LOG` (inherited), and a
/// directive that does not parse falls back to `info` (a holder has nobody to tell).
pub fn init_holder() {
    let directive = std::env::var(LOG_ENV).unwrap_or_else(|_| "info".to_string());
    let filter = tracing_subscriber::EnvFilter::try_new(&directive).unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(false)
        .with_target(false)
        .with_writer(std::io::stderr)
        // LOG-2: as the daemon's: the fallback's `eprintln!` to the same full log would panic
        // the holder's thread (a shutdown that logs, then never ends its pane).
        .log_internal_errors(false)
        .finish();
    let _ = tracing::subscriber::set_global_default(subscriber);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LOG-3: a log file removed under the daemon is opened again (here checked on every
    /// write); its lines used to go to the unlinked file until the daemon restarted.
    #[test]
    fn log_3_a_removed_log_file_is_opened_again() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mux.log");
        let mut log = BoundedLog::open(path.clone(), 1 << 20).unwrap();
        log.inner.lock().unwrap().check_every = std::time::Duration::ZERO;
        log.write_all(b"before\n").unwrap();
        std::fs::remove_file(&path).unwrap();
        log.write_all(b"after\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"after\n", "the next line went to a new file at the path");
    }

    /// LOG-1: a rotation whose new file could not be opened (out of descriptors, a full disk)
    /// opens it on the next write. It used to try the rename again, which failed (nothing was
    /// left to rename), so the log grew in its previous file without bound and `mux.log`,
    /// where `mux start` looks for the daemon's first lines, stayed missing.
    #[test]
    fn log_1_a_rotation_that_could_not_open_its_new_file_opens_it_next_time() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mux.log");
        let mut log = BoundedLog::open(path.clone(), 100).unwrap();
        log.write_all(&[b'a'; 150]).unwrap();
        let failed = log.inner.lock().unwrap().rotate_if_full_with(|_| Err(io::Error::from_raw_os_error(24)));
        assert!(failed.is_err() && !path.exists(), "renamed, its successor not opened");
        log.write_all(b"next line\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"next line\n", "the next write opened the new file");
        assert_eq!(std::fs::read(path.with_extension("log.1")).unwrap().len(), 150, "the previous file kept what it had");
    }

    // LOG-1: the log is bounded: it rotates into one previous file.
    #[test]
    fn log_1_bounded_log_rotates_into_one_previous_file() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("mux.log");
        let mut log = BoundedLog::open(path.clone(), 100).unwrap();
        for _ in 0..50 {
            log.write_all(&[b'x'; 30]).unwrap();
        }
        let current = std::fs::metadata(&path).unwrap().len();
        let previous = std::fs::metadata(path.with_extension("log.1")).unwrap().len();
        assert!(current <= 130 && previous <= 130, "{current} {previous}");
        assert!(!tmp.path().join("mux.log.2").exists());
    }
}
