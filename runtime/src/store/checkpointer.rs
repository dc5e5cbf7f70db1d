//! WAL checkpoints off the writer's path (issue 10). SQLite's automatic checkpoint runs inside
//! the commit that crosses its threshold (1,000 pages): that commit, and every admission queued
//! behind it, waited for up to 1,000 page copies and an fsync of the database file. The writer
//! connection turns it off (`wal_autocheckpoint=0`); this thread runs PASSIVE checkpoints on its
//! own connection (they never block the writer or readers) at most every [`INTERVAL`] while
//! commits happen, and parks, costing nothing, while none do.
//!
//! Durability is unchanged: a commit is durable once its WAL frames are synced (FULL), before
//! any checkpoint copies them.

use super::error::StoreError;
use rusqlite::{Connection, OpenFlags};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

/// At most one checkpoint per interval while commits happen.
pub const INTERVAL: Duration = Duration::from_millis(200);

#[derive(Default)]
struct Shared {
    commits: AtomicU64,
    parked: AtomicBool,
    closing: AtomicBool,
    lock: Mutex<()>,
    wake: Condvar,
}

pub struct Checkpointer {
    shared: Arc<Shared>,
    thread: Option<thread::JoinHandle<()>>,
}

impl Checkpointer {
    /// Opens its own connection to the database at `path` (already created and configured by
    /// the writer) and starts the thread.
    pub fn start(path: &Path) -> Result<Checkpointer, StoreError> {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX)?;
        super::schema::configure(&conn)?;
        let shared = Arc::new(Shared::default());
        let theirs = Arc::clone(&shared);
        let thread = thread::Builder::new()
            .name("wakterm-store-checkpoint".into())
            .spawn(move || run(&conn, &theirs))
            .map_err(|err| StoreError::io(path, &err))?;
        Ok(Checkpointer { shared, thread: Some(thread) })
    }

    /// The writer committed: a checkpoint is due within [`INTERVAL`]. An atomic add, and a
    /// wake only when the thread is parked (once per idle period).
    pub fn committed(&self) {
        self.shared.commits.fetch_add(1, Ordering::AcqRel);
        if self.shared.parked.load(Ordering::Acquire) {
            let _guard = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_one();
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        self.shared.closing.store(true, Ordering::Release);
        {
            let _guard = self.shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.shared.wake.notify_one();
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(conn: &Connection, shared: &Shared) {
    let mut seen = 0u64;
    loop {
        let commits = shared.commits.load(Ordering::Acquire);
        if commits == seen {
            // Nothing new: park until the writer commits again (or the store closes).
            let guard = shared.lock.lock().unwrap_or_else(|p| p.into_inner());
            shared.parked.store(true, Ordering::Release);
            // A commit counted after the load above, before `parked`, must not be slept through.
            let guard = match shared.commits.load(Ordering::Acquire) == seen && !shared.closing.load(Ordering::Acquire) {
                true => shared.wake.wait(guard).unwrap_or_else(|p| p.into_inner()),
                false => guard,
            };
            shared.parked.store(false, Ordering::Release);
            drop(guard);
            if shared.closing.load(Ordering::Acquire) {
                return;
            }
            continue;
        }
        seen = commits;
        // PASSIVE: copies what no reader still needs, waits for no lock, blocks nobody. A
        // failure (busy, I/O) only leaves the WAL longer; the next round tries again.
        if let Err(error) = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get::<_, i64>(0)) {
            tracing::warn!(%error, "WAL checkpoint failed; the next one tries again");
        }
        if shared.closing.load(Ordering::Acquire) {
            return;
        }
        thread::sleep(INTERVAL);
    }
}
