//! Every bound the store enforces, in one place.

/// Batches the writer queue holds before `submit` answers `Backpressure`. The daemon's reactor
/// must never block on SQLite, so a full queue is an answer, not a wait.
pub const WRITE_QUEUE_CAPACITY: usize = 1024;

/// Batches committed in one group transaction. Equal to the queue capacity: a group is "all that
/// was queued when the writer woke", and the queue can never hold more.
pub const GROUP_BATCHES_MAX: usize = WRITE_QUEUE_CAPACITY;

/// STORE-2: how long a batch no caller waits on (agent events, event marks, observer
/// checkpoints only) may wait for company before it commits alone. Anything else commits at
/// once and takes the waiting batches along, in order: an admission's turn-start events ride in
/// its completion's transaction instead of paying an fsync of their own (issue 10).
pub const DEFER_LINGER: std::time::Duration = std::time::Duration::from_millis(2);

/// STORE-3: commits between two WAL copies beside the writer (at most one per watermark
/// interval, 100 ms). At 10 busy agents a group commit writes about 25 WAL pages: about 800
/// pages per copy, ahead of the writer's own checkpoint at 1,000.
pub const CHECKPOINT_AFTER_COMMITS: u64 = 32;

/// STORE-2: how long the writer waits for the next batch of an engine step once it holds one
/// that says another follows (`StoreWriter::submit_in_step`). The driver queues them back to
/// back, so this only bounds a follower that could not be queued (backpressure).
pub const STEP_FOLLOW_WAIT: std::time::Duration = std::time::Duration::from_millis(1);

/// How long `StoreWriter::commit_blocking` (callers off the reactor: `agent start`, recovery)
/// waits out a full queue before it answers `Backpressure`. The queue drains at commit speed
/// (about a millisecond per group), so only a stalled disk makes it last.
pub const BLOCKING_BACKPRESSURE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Operations in one batch (one atomic unit for the engine).
pub const BATCH_OPS_MAX: usize = 4096;

/// Bytes of one JSON record or event. A record may carry a prompt; prompts are bounded far below
/// this by the engine, so hitting it means a bug, not a big prompt.
pub const RECORD_BYTES_MAX: usize = 4 * 1024 * 1024;

/// Bytes of one indexed text column (ids, names, phase, fingerprint).
pub const FIELD_BYTES_MAX: usize = 256;

/// Rows one `terminal_events_after` page may return.
pub const TERMINAL_PAGE_MAX: usize = 10_000;

/// CONN-3: the stored JSON one event page may hold. A page stops at the row that reaches it
/// (always at least one row): pages bounded only by rows held up to 512 events of 2 MiB each,
/// per reader (a review saw one catch-up reader take 190 MB and six 1.45 GB).
pub const PAGE_MAX_BYTES: usize = 8 * 1024 * 1024;

/// How long a connection waits for another connection's lock before failing with `Sqlite`.
pub const BUSY_TIMEOUT_MS: u64 = 5_000;
