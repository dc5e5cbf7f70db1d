//! `StoreWriter`: the only connection that writes rows, on a dedicated OS thread, with group
//! commit (STORE-3's second connection only copies the WAL into the database file).
//!
//! Each wake-up drains every queued batch (FIFO, at most `GROUP_BATCHES_MAX`) into one
//! `BEGIN IMMEDIATE ... COMMIT`. Each batch runs inside its own SAVEPOINT, so a batch that breaks
//! a rule is rolled back alone while the rest of the group commits. Callbacks run on the writer
//! thread, in submission order, only after COMMIT has returned: an ack always means "on disk".
//!
//! STORE-2: a group made only of batches no caller waits on ([`StoreOp::may_wait`]) first waits
//! up to `DEFER_LINGER` from its oldest batch's submission for company; the first batch that
//! may not wait (or shutdown, or a full group) ends the wait at once. A batch submitted with
//! another of the same engine step right behind it ([`StoreWriter::submit_in_step`]) waits up to
//! `STEP_FOLLOW_WAIT` for it, so one step's batches share a transaction.
//!
//! STORE-3: the WAL is copied into the database file beside the writer, on the thread that
//! records STORE-1's watermark, through a connection of its own, so the writer's own automatic
//! checkpoint (which also starts the WAL over) finds less left to copy and sync.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::error::StoreError;
use super::limits::{BLOCKING_BACKPRESSURE_WAIT, CHECKPOINT_AFTER_COMMITS, DEFER_LINGER, GROUP_BATCHES_MAX, STEP_FOLLOW_WAIT, WRITE_QUEUE_CAPACITY};
use super::op::{self, StoreOp};
use super::schema::{self, OpenReport};
use super::watermark::{self, Watermark};

/// Called exactly once, on the writer thread, for every batch `submit` accepted. Keep it short:
/// the next group waits for it. A panicking callback is contained and does not stop the writer,
/// where unwinding is on (the store's tests); in the daemon, whose panic hook aborts the process
/// on any panic (`daemon::run_foreground`: a restart recovers from durable state), it ends the daemon.
pub type CommitCallback = Box<dyn FnOnce(Result<CommitInfo, StoreError>) + Send + 'static>;

/// How a successful batch was committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CommitInfo {
    /// Counts group transactions of this writer from 1; batches with equal ids shared one COMMIT.
    pub transaction_id: u64,
    /// Batches (succeeded or failed) that shared the transaction.
    pub batches_in_transaction: usize,
    /// This batch's FIFO position within the transaction, from 0.
    pub position: usize,
}

/// Counters since spawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriterStats {
    pub transactions: u64,
    pub batches: u64,
    /// STORE-3: checkpoints the housekeeping thread ran that were not refused as busy (a reader
    /// may still have held some frames back).
    pub checkpoints: u64,
}

#[derive(Default)]
struct Counters {
    transactions: AtomicU64,
    batches: AtomicU64,
    checkpoints: AtomicU64,
}

/// A queued batch. If it is dropped without being answered (the writer stopped), its callback
/// still hears `Closed`, so no caller waits forever.
pub(super) struct PendingBatch {
    ops: Vec<StoreOp>,
    done: Option<CommitCallback>,
    /// STORE-2: every op may wait for company, and since when.
    may_wait: bool,
    queued_at: Instant,
    /// STORE-2: another batch of the same engine step is being queued right behind this one.
    followed: bool,
}

impl PendingBatch {
    fn answer(&mut self, result: Result<CommitInfo, StoreError>) {
        if let Some(done) = self.done.take() {
            // A caller's panic must not kill the thread every other caller depends on (where
            // panics unwind: the daemon's hook aborts first, `CommitCallback`).
            let _ = catch_unwind(AssertUnwindSafe(move || done(result)));
        }
    }
}

#[cfg(test)]
impl PendingBatch {
    /// A batch nobody waits for (tests of [`commit_group`]).
    pub(super) fn unanswered(ops: Vec<StoreOp>) -> PendingBatch {
        PendingBatch { ops, done: None, may_wait: false, queued_at: Instant::now(), followed: false }
    }
}

impl Drop for PendingBatch {
    fn drop(&mut self) {
        self.answer(Err(StoreError::Closed));
    }
}

/// The single writer. `Sync`: share it (e.g. in an `Arc`) and submit from any thread.
pub struct StoreWriter {
    sender: Option<SyncSender<PendingBatch>>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<Counters>,
    capacity: usize,
    report: OpenReport,
}

impl StoreWriter {
    /// Opens (and migrates) the database like [`super::Store::open`] and starts the writer thread
    /// with a queue of [`WRITE_QUEUE_CAPACITY`] batches.
    pub fn spawn(path: &Path) -> Result<StoreWriter, StoreError> {
        Self::spawn_with_capacity(path, WRITE_QUEUE_CAPACITY)
    }

    /// As [`StoreWriter::spawn`] with a smaller queue (tests, memory-tight callers).
    pub fn spawn_with_capacity(path: &Path, capacity: usize) -> Result<StoreWriter, StoreError> {
        Self::spawn_with_linger(path, capacity, DEFER_LINGER)
    }

    /// As [`StoreWriter::spawn_with_capacity`], with STORE-2's wait for company set to `linger`
    /// (tests make it long, so what shares a transaction does not depend on scheduling).
    pub fn spawn_with_linger(path: &Path, capacity: usize, linger: Duration) -> Result<StoreWriter, StoreError> {
        Self::spawn_with_waits(path, capacity, GroupWaits { linger, step_follow: STEP_FOLLOW_WAIT })
    }

    /// As [`StoreWriter::spawn_with_capacity`], with both of STORE-2's waits set (tests).
    pub fn spawn_with_waits(path: &Path, capacity: usize, waits: GroupWaits) -> Result<StoreWriter, StoreError> {
        if capacity == 0 || capacity > WRITE_QUEUE_CAPACITY {
            return Err(StoreError::invalid(format!(
                "writer queue capacity must be 1..={WRITE_QUEUE_CAPACITY}, got {capacity}"
            )));
        }
        let (conn, report) = schema::open_database(path)?;
        let files = OpenFiles::of(path)?;
        let watermark = Watermark::open(path, &report.mark)?;
        let checkpoints = open_checkpoint_connection(path);
        let (sender, receiver) = mpsc::sync_channel(capacity);
        let counters = Arc::new(Counters::default());
        let thread_counters = Arc::clone(&counters);
        let housekeeping = Housekeeping { watermark, checkpoints, counters: Arc::clone(&counters), opened_at: report.mark.commits };
        let thread = thread::Builder::new()
            .name("wakterm-store-writer".into())
            .spawn(move || run((conn, files), receiver, thread_counters, housekeeping, waits))
            .map_err(|err| StoreError::io(path, &err))?;
        Ok(StoreWriter {
            sender: Some(sender),
            thread: Some(thread),
            counters,
            capacity,
            report,
        })
    }

    /// Enqueues one atomic batch without blocking. On `Ok`, `done` will be called exactly once,
    /// after the batch's transaction ended. On `Err` nothing was enqueued and `done` is dropped
    /// uncalled: `InvalidOp` (a bound broken), `Backpressure` (queue full: retry later; the
    /// daemon's reactor must never block on SQLite, so a full queue is an answer, not a wait),
    /// or `Closed`.
    pub fn submit(&self, ops: Vec<StoreOp>, done: CommitCallback) -> Result<(), StoreError> {
        self.submit_in_step(ops, done, false)
    }

    /// As [`StoreWriter::submit`]; `followed`: the caller submits another batch of the same step
    /// right after this one, and the writer waits up to `STEP_FOLLOW_WAIT` for it before it
    /// commits, so both share a transaction (one fsync; a completion's bound and terminal
    /// batches were often split, the writer waking on the first). Each keeps its own savepoint
    /// and callback.
    pub fn submit_in_step(&self, ops: Vec<StoreOp>, done: CommitCallback, followed: bool) -> Result<(), StoreError> {
        op::validate_batch(&ops)?;
        let sender = self.sender.as_ref().ok_or(StoreError::Closed)?;
        let may_wait = !ops.is_empty() && ops.iter().all(StoreOp::may_wait);
        let batch = PendingBatch {
            ops,
            done: Some(done),
            may_wait,
            queued_at: Instant::now(),
            followed,
        };
        match sender.try_send(batch) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(mut batch)) => {
                batch.done = None; // The caller learns from the Err, not the callback.
                Err(StoreError::Backpressure {
                    capacity: self.capacity,
                })
            }
            Err(TrySendError::Disconnected(mut batch)) => {
                batch.done = None;
                Err(StoreError::Closed)
            }
        }
    }

    /// Submits and waits for the commit. For callers off the reactor (CLI, tests, recovery,
    /// `agent start`): a full queue is waited out for up to [`BLOCKING_BACKPRESSURE_WAIT`]
    /// (the queue drains at commit speed), so starting an agent under load does not fail on
    /// a moment's backpressure, nor leave behind a record it meant to take back (a review
    /// found both). Never call it from a commit callback: the writer thread would wait for
    /// itself.
    pub fn commit_blocking(&self, ops: Vec<StoreOp>) -> Result<CommitInfo, StoreError> {
        let started = Instant::now();
        let rx = loop {
            let (tx, rx) = mpsc::sync_channel(1);
            match self.submit(ops.clone(), Box::new(move |result| drop(tx.send(result)))) {
                Ok(()) => break rx,
                Err(StoreError::Backpressure { .. }) if started.elapsed() < BLOCKING_BACKPRESSURE_WAIT => thread::sleep(Duration::from_millis(2)),
                Err(error) => return Err(error),
            }
        };
        rx.recv().unwrap_or(Err(StoreError::Closed))
    }

    pub fn stats(&self) -> WriterStats {
        WriterStats {
            transactions: self.counters.transactions.load(Ordering::Acquire),
            batches: self.counters.batches.load(Ordering::Acquire),
            checkpoints: self.counters.checkpoints.load(Ordering::Acquire),
        }
    }

    pub fn open_report(&self) -> &OpenReport {
        &self.report
    }

    /// Commits everything already queued, answers every callback, then stops the thread.
    pub fn shutdown(mut self) -> Result<(), StoreError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<(), StoreError> {
        // Dropping the sender lets the thread drain what is queued, then see the disconnect.
        drop(self.sender.take());
        let Some(thread) = self.thread.take() else {
            return Ok(());
        };
        if thread.thread().id() == thread::current().id() {
            // A callback dropped the last handle; the thread ends on its own once drained.
            return Ok(());
        }
        thread.join().map_err(|_| StoreError::Sqlite {
            code: None,
            message: "store writer thread panicked".into(),
        })
    }
}

impl Drop for StoreWriter {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

fn run((conn, files): (Connection, OpenFiles), receiver: Receiver<PendingBatch>, counters: Arc<Counters>, housekeeping: Housekeeping, waits: GroupWaits) {
    let recorder = WatermarkRecorder::start(housekeeping);
    let mut group: Vec<PendingBatch> = Vec::with_capacity(GROUP_BATCHES_MAX);
    let mut transaction_id = 0u64;
    let mut said_replaced = false;
    let mut files_checked: Option<Instant> = None;
    let mut replaced: Option<StoreError> = None;
    // `recv` returns queued batches before reporting that every sender is gone: shutdown drains.
    while let Ok(first) = receiver.recv() {
        group.push(first);
        gather(&receiver, &mut group, waits);
        assert!(!group.is_empty() && group.len() <= GROUP_BATCHES_MAX);
        transaction_id += 1;
        let started = Instant::now();
        // At most every FILES_CHECK_EVERY: the first group after a quiet spell (when a cleaner
        // of old files strikes) is always checked; a busy writer's files are not old.
        if replaced.is_none() && files_checked.is_none_or(|at| started.duration_since(at) >= FILES_CHECK_EVERY) {
            replaced = files.replaced();
            files_checked = Some(started);
        }
        let (results, commits) = match replaced.clone() {
            // STORE-4: a commit to a file nobody will find again is no commit.
            Some(error) => {
                if !std::mem::replace(&mut said_replaced, true) {
                    tracing::error!(%error, "the database file was removed or replaced: every commit fails until the daemon restarts (STORE-4)");
                }
                (group.iter().map(|_| Err(error.clone())).collect(), None)
            }
            None => commit_group(&conn, &group, transaction_id),
        };
        // `WAKTERM_LOG=wakterm_runtime::store=debug`: each group's size and time (issue 10).
        tracing::debug!(batches = group.len(), elapsed_us = started.elapsed().as_micros() as u64, "group committed");
        assert!(results.len() == group.len());
        counters
            .batches
            .fetch_add(group.len() as u64, Ordering::AcqRel);
        counters.transactions.fetch_add(1, Ordering::AcqRel);
        // Only now, with the transaction ended, are callers told: FIFO order.
        for (mut batch, result) in group.drain(..).zip(results) {
            batch.answer(result);
        }
        // STORE-1: after the callers, off their path; it may lag the database, never lead it.
        if let Some(commits) = commits {
            recorder.record(commits);
        }
    }
    // Dropping the recorder records the last count and joins its thread.
}

/// STORE-4: how often, at most, the writer checks its files (four system calls each time).
pub(crate) const FILES_CHECK_EVERY: Duration = Duration::from_millis(50);

/// STORE-4: the database file and its WAL as the writer opened them, to tell before a group
/// whether the paths still name them. A cleaner of old files (the data directory under `/tmp`,
/// a daemon idle for days) could remove `wakterm.db`: the writer went on committing into the
/// unlinked file, receipts said durable, and a restart found an empty store, so every request
/// id admitted before could be written a second time (the watermark, as old, went with it).
/// Identities only, no descriptor of our own: closing one would release every POSIX lock the
/// process holds on the file, SQLite's own included (a review reproduced the WAL deleted by
/// another process then).
struct OpenFiles {
    /// (path, its (device, inode) at open). SQLite's own descriptors keep an unlinked file's
    /// inode from being reused, so a path naming the same identity names the same file.
    files: Vec<(PathBuf, crate::paths::FileIdentity)>,
}

impl OpenFiles {
    fn of(database: &Path) -> Result<OpenFiles, StoreError> {
        let mut wal = database.as_os_str().to_os_string();
        wal.push("-wal");
        let mut files = Vec::new();
        for path in [database.to_path_buf(), PathBuf::from(wal)] {
            match crate::paths::path_identity(&path) {
                Ok(identity) => files.push((path, identity)),
                // No WAL (not created yet): nothing to compare.
                Err(error) if error.kind() == std::io::ErrorKind::NotFound && !files.is_empty() => {}
                Err(error) => return Err(StoreError::io(&path, &error)),
            }
        }
        Ok(OpenFiles { files })
    }

    /// The error for the first file whose path is gone or names another file. Any other
    /// failure to look (a permission, an I/O error) is no evidence: the next check looks again.
    fn replaced(&self) -> Option<StoreError> {
        self.files.iter().find_map(|(path, opened)| {
            let gone = match crate::paths::path_identity(path) {
                Ok(now) => now != *opened,
                Err(error) => error.kind() == std::io::ErrorKind::NotFound,
            };
            gone.then(|| StoreError::FileReplaced { path: path.clone() })
        })
    }
}

/// STORE-2's two waits of a group for more batches.
#[derive(Debug, Clone, Copy)]
pub struct GroupWaits {
    /// How long a group made only of batches that may wait waits for company.
    pub linger: Duration,
    /// How long a group whose last batch is `followed` waits for the next one.
    pub step_follow: Duration,
}

/// Takes every queued batch into `group` (FIFO, up to `GROUP_BATCHES_MAX`). STORE-2: while the
/// last batch says another of its step follows, waits up to `step_follow` for it; while every
/// batch in it may wait, waits for more until `linger` after the oldest one's submission; a
/// batch that may not wait (and is not followed), a full group, a closed queue, or a follower
/// that did not come in time ends the wait (then also a linger that had time left: a follower
/// that could not be queued is rare, and the batches commit at once instead).
fn gather(receiver: &Receiver<PendingBatch>, group: &mut Vec<PendingBatch>, waits: GroupWaits) {
    let take_queued = |group: &mut Vec<PendingBatch>| {
        while group.len() < GROUP_BATCHES_MAX {
            match receiver.try_recv() {
                Ok(batch) => group.push(batch),
                Err(_) => break,
            }
        }
    };
    take_queued(group);
    // Whatever arrives later was submitted later: the deadline is the queued batches' to set.
    let oldest = group.iter().map(|batch| batch.queued_at).min().expect("a group has a batch");
    while group.len() < GROUP_BATCHES_MAX {
        let until = match group.last().is_some_and(|batch| batch.followed) {
            // The follower is being queued by the same call site right now: microseconds.
            true => Instant::now() + waits.step_follow,
            false if group.iter().all(|batch| batch.may_wait) => oldest + waits.linger,
            false => return,
        };
        let Some(wait) = until.checked_duration_since(Instant::now()).filter(|w| !w.is_zero()) else { return };
        match receiver.recv_timeout(wait) {
            Ok(batch) => {
                group.push(batch);
                take_queued(group);
            }
            Err(_) => return, // the wait passed, or shutdown: commit what waits
        }
    }
}

/// How often, at most, the watermark thread syncs a new count.
const WATERMARK_INTERVAL: Duration = Duration::from_millis(100);

/// STORE-3: the connection the copies run on, beside the writer's (whose open checked,
/// migrated and identified the file moments before). When it cannot be opened, the writer's
/// own automatic checkpoint does all of it, as before.
fn open_checkpoint_connection(path: &Path) -> Option<Connection> {
    // It copies pages and writes no row: SQLite enforces the second (checkpoints stay allowed).
    match schema::open_beside(path).and_then(|conn| conn.execute_batch("PRAGMA query_only = ON").map(|()| conn).map_err(StoreError::from)) {
        Ok(conn) => Some(conn),
        Err(error) => {
            tracing::warn!(%error, "no connection for WAL checkpoints beside the writer; it checkpoints alone (STORE-3)");
            None
        }
    }
}

/// What the thread beside the writer does after commits.
struct Housekeeping {
    watermark: Watermark,
    checkpoints: Option<Connection>,
    counters: Arc<Counters>,
    /// STORE-1's commit count at open: the commits between copies count from it.
    opened_at: u64,
}

impl Housekeeping {
    /// STORE-3: a passive checkpoint: it waits for no reader and no writer, and copies what no
    /// reader still needs into the database file and syncs it. The writer keeps SQLite's
    /// automatic checkpoint (after each commit while the WAL holds 1,000 pages or more, so in
    /// practice once per time the WAL starts over): under load the WAL grows during a copy
    /// here, so only a checkpoint the writer runs between its own transactions can end with all
    /// of the WAL copied, which lets its next transaction start the WAL over (without it, it
    /// grew to 16 MiB at 10 busy agents). What this thread copied first, the writer's own
    /// checkpoint neither copies nor syncs again (how much that is depends on where the copies
    /// here fell in the WAL's cycle): alone, copying 1,000 pages held its commit (and every
    /// caller of its group) for up to 18 ms.
    fn checkpoint(&self) {
        let Some(conn) = &self.checkpoints else { return };
        match conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| row.get::<_, i64>(0)) {
            Ok(0) => drop(self.counters.checkpoints.fetch_add(1, Ordering::AcqRel)),
            Ok(_) => tracing::debug!("WAL checkpoint beside the writer found it busy (STORE-3)"),
            // Nothing is lost: the frames stay in the WAL for the next copy or the writer's own.
            Err(error) => tracing::warn!(%error, "WAL checkpoint failed; the next one retries (STORE-3)"),
        }
    }
}

/// STORE-1's watermark and STORE-3's checkpoints on a thread of their own: the watermark's
/// `fdatasync` kept the writer from starting the next group for up to a millisecond (an
/// admission's second commit waited for the first one's watermark), and a checkpoint the
/// writer ran alone held its commit for milliseconds. The writer hands over the newest commit count;
/// the thread records the newest it has, so it may skip counts and lag, but it never records a
/// count before its commit; every [`CHECKPOINT_AFTER_COMMITS`] commits it checkpoints.
struct WatermarkRecorder {
    slot: Arc<(Mutex<WatermarkSlot>, Condvar)>,
    thread: Option<thread::JoinHandle<()>>,
}

#[derive(Default)]
struct WatermarkSlot {
    newest: Option<u64>,
    closing: bool,
    /// The thread waits out its interval and takes `newest` when it ends: a new count needs
    /// no wake-up (one per commit was ~7 context switches per admission, issue 10).
    pacing: bool,
}

impl WatermarkRecorder {
    fn start(housekeeping: Housekeeping) -> WatermarkRecorder {
        let slot: Arc<(Mutex<WatermarkSlot>, Condvar)> = Arc::default();
        let shared = Arc::clone(&slot);
        let thread = thread::Builder::new()
            .name("wakterm-store-watermark".into())
            .spawn(move || {
                let (lock, changed) = &*shared;
                let mut last_record: Option<Instant> = None;
                let mut checkpointed_at = housekeeping.opened_at;
                loop {
                    let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
                    while state.newest.is_none() && !state.closing {
                        state = changed.wait(state).unwrap_or_else(|p| p.into_inner());
                    }
                    // At most one sync per interval (its fdatasync cost 11 % of a core at 240
                    // admissions/s): the newest count waits, unless the writer is closing.
                    while let Some(wait) = last_record.map(|at| WATERMARK_INTERVAL.saturating_sub(at.elapsed())) {
                        if wait.is_zero() || state.closing {
                            break;
                        }
                        state.pacing = true;
                        state = changed.wait_timeout(state, wait).unwrap_or_else(|p| p.into_inner()).0;
                        state.pacing = false;
                    }
                    let (next, closing) = (state.newest.take(), state.closing);
                    drop(state);
                    if let Some(commits) = next {
                        if let Err(error) = housekeeping.watermark.record(commits) {
                            tracing::error!(%error, "cannot update the store watermark (STORE-1)");
                        }
                        last_record = Some(Instant::now());
                        if commits.saturating_sub(checkpointed_at) >= CHECKPOINT_AFTER_COMMITS {
                            housekeeping.checkpoint();
                            checkpointed_at = commits;
                        }
                    }
                    if closing && next.is_none() {
                        return;
                    }
                }
            })
            .ok();
        if thread.is_none() {
            tracing::error!("cannot start the store watermark thread; the watermark is not updated (STORE-1)");
        }
        WatermarkRecorder { slot, thread }
    }

    fn record(&self, commits: u64) {
        let (lock, changed) = &*self.slot;
        let mut state = lock.lock().unwrap_or_else(|p| p.into_inner());
        assert!(state.newest.is_none_or(|older| older < commits), "commit counts only grow");
        state.newest = Some(commits);
        if !state.pacing {
            changed.notify_one();
        }
    }
}

impl Drop for WatermarkRecorder {
    fn drop(&mut self) {
        let (lock, changed) = &*self.slot;
        lock.lock().unwrap_or_else(|p| p.into_inner()).closing = true;
        changed.notify_one();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Runs the group in one transaction and returns each batch's result, in order, and the
/// store's commit count when the transaction committed (STORE-1).
pub(super) fn commit_group(
    conn: &Connection,
    group: &[PendingBatch],
    transaction_id: u64,
) -> (Vec<Result<CommitInfo, StoreError>>, Option<u64>) {
    assert!(!group.is_empty() && group.len() <= GROUP_BATCHES_MAX);
    let batches_in_transaction = group.len();
    if let Err(err) = roll_back_left_open(conn) {
        return (group.iter().map(|_| Err(err.clone())).collect(), None);
    }
    if let Err(err) = conn.execute_batch("BEGIN IMMEDIATE") {
        let err = StoreError::from(err);
        return (group.iter().map(|_| Err(err.clone())).collect(), None);
    }
    let mut results: Vec<Result<CommitInfo, StoreError>> = Vec::with_capacity(group.len());
    for (position, batch) in group.iter().enumerate() {
        let info = CommitInfo {
            transaction_id,
            batches_in_transaction,
            position,
        };
        let result = match apply_batch(conn, &batch.ops) {
            Ok(applied) => applied.map(|()| info),
            Err(savepoint) => {
                // The batch's savepoint could not be set, undone or released: what the batch
                // wrote may stay in the transaction, and a COMMIT would make a batch answered
                // failed durable (a terminal event stored twice, an event renumbered and
                // stored again). The whole group is rolled back and fails.
                let lost = StoreError::Sqlite { code: None, message: format!("a batch's savepoint failed ({savepoint}); the group's transaction was rolled back and none of its batches was committed") };
                if let Err(error) = roll_back_left_open(conn) {
                    tracing::error!(%error, "cannot roll back a group whose savepoint failed; the next group tries again");
                }
                return (group.iter().map(|_| Err(lost.clone())).collect(), None);
            }
        };
        if conn.is_autocommit() {
            // SQLite rolled the whole transaction back (an I/O error, a full disk, out of
            // memory: not a statement's error, which the batch's savepoint undoes alone). The
            // batches before this one are gone with it, and the ones after must not run: each
            // would open a transaction of its own and commit alone, out of the group's order,
            // while reported failed (a review found it did).
            let lost = transaction_lost(&result);
            return (group.iter().map(|_| Err(lost.clone())).collect(), None);
        }
        results.push(result);
    }
    let committed = watermark::bump(conn).and_then(|commits| conn.execute_batch("COMMIT").map(|()| commits));
    match committed {
        Ok(commits) => (results, Some(commits)),
        Err(err) => {
            // The whole group is lost; every batch that had succeeded learns why.
            if let Err(rollback) = conn.execute_batch("ROLLBACK") {
                if !conn.is_autocommit() {
                    // Every later BEGIN would fail on the open transaction: say why.
                    tracing::error!(error = %rollback, "cannot roll back a failed group commit; the store writer's transaction is still open");
                }
            }
            let err = StoreError::from(err);
            for result in results.iter_mut().filter(|result| result.is_ok()) {
                *result = Err(err.clone());
            }
            (results, None)
        }
    }
}

/// A transaction the connection was left in (a ROLLBACK that failed after a failed COMMIT, a
/// group whose savepoint failed): its batches were answered failed, so it is rolled back;
/// left open, every later BEGIN failed on it and the writer failed every commit until a
/// restart (a review found it).
fn roll_back_left_open(conn: &Connection) -> Result<(), StoreError> {
    if conn.is_autocommit() {
        return Ok(());
    }
    tracing::warn!("the store writer's connection was left in a transaction; rolling it back (its batches were answered failed)");
    conn.execute_batch("ROLLBACK").map_err(StoreError::from)
}

/// One batch inside its own savepoint: all of its ops or none. The inner result is the ops';
/// the outer error says the savepoint itself failed (set, undone or released), so what the
/// batch wrote may still be in the transaction: [`commit_group`] then rolls the group back.
fn apply_batch(conn: &Connection, ops: &[StoreOp]) -> Result<Result<(), StoreError>, StoreError> {
    conn.execute_batch("SAVEPOINT batch")?;
    let appended: u64 = ops.iter().map(|op| if let StoreOp::AppendEvent { event_json, .. } = op { event_json.len() as u64 } else { 0 }).sum();
    // Counted first: a prune later in the batch may remove an event the batch appended.
    let applied = op::add_stored_event_bytes(conn, appended).and_then(|()| ops.iter().try_for_each(|op| op::apply_op(conn, op)));
    if applied.is_err() && conn.is_autocommit() {
        // The error took the whole transaction with it: no savepoint is left to undo or
        // release, and the op's error is the cause [`commit_group`] reports.
        return Ok(applied);
    }
    if applied.is_err() {
        conn.execute_batch("ROLLBACK TO batch")?;
    }
    conn.execute_batch("RELEASE batch")?;
    Ok(applied)
}

/// Every batch's answer when SQLite rolled the group's whole transaction back, with the
/// error that did it (`cause`: the answer of the batch it happened in).
fn transaction_lost(cause: &Result<CommitInfo, StoreError>) -> StoreError {
    let (code, cause) = match cause {
        Err(StoreError::Sqlite { code, message }) => (*code, message.clone()),
        Err(other) => (None, other.to_string()),
        Ok(_) => (None, "no statement reported an error".to_string()),
    };
    StoreError::Sqlite { code, message: format!("SQLite rolled the group's whole transaction back ({cause}); none of its batches was committed") }
}
