//! The PTY pane a holder owns: the master, the child in it, the output ring and the emulated
//! screen, with the I/O threads that keep them current.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use portable_pty::{CommandBuilder, MasterPty, PtySize, SlavePty};
use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{Pid, Signal, WaitId, WaitIdOptions};

use super::output_ring::OutputRing;
use super::protocol::{Cursor, InfoReply, ScreenReply, WriteOutcome, MAX_COLS, MAX_ROWS};
use wakterm_engine::pane_look::{undrawn_input_deadline, LastInput};
use super::HolderConfig;

/// Bytes one read from the master takes at most.
const READ_CHUNK_BYTES: usize = 64 * 1024;
/// A write that the child does not drain within this is reported as partial.
pub const WRITE_DEADLINE: Duration = Duration::from_secs(10);
// ADM-5, REC-1: a restart counts on every write landing within `WRITE_LANDS_WITHIN_MS` of
// its hand-out (started by `DELIVERY_TIMEOUT_MS`, finished or stopped by this deadline).
const _: () = assert!(wakterm_engine::limits::DELIVERY_TIMEOUT_MS + WRITE_DEADLINE.as_secs() * 1_000 <= wakterm_engine::limits::WRITE_LANDS_WITHIN_MS);
/// Time a child gets after SIGHUP before it is sent SIGKILL.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// After the child exits, the reader gets this long to take the output still in the PTY, so
/// that `exited` follows the last output byte rather than racing it.
const EXIT_DRAIN_DEADLINE: Duration = Duration::from_millis(500);
/// Quiet time after the PTY queue is empty before the exit is published.
const EXIT_DRAIN_SETTLE: Duration = Duration::from_millis(20);
/// Exit codes remembered per generation, so a late subscriber of an old generation still
/// learns its end.
const EXIT_HISTORY_LEN: usize = 16;

/// Facts about the current child process.
#[derive(Debug, Clone, Default)]
pub struct ChildFacts {
    pub pid: Option<u32>,
    pub start_time_ticks: Option<u64>,
    pub alive: bool,
    pub exit_code: Option<i32>,
    pub spawn_error: Option<String>,
}

/// Everything guarded by the pane's state lock.
pub struct PaneState {
    pub ring: OutputRing,
    pub screen: vt100::Parser,
    pub child: ChildFacts,
    pub generation: u64,
    /// The output offset at which the current generation's child started: its bytes are
    /// those after it (MGD-4: a managed observer reads one process's protocol stream).
    pub generation_start: u64,
    pub cols: u16,
    pub rows: u16,
    /// When the current child ended (or failed to start); drives the linger limit.
    pub ended_at: Option<Instant>,
    /// How recent generations ended, oldest first, at most EXIT_HISTORY_LEN.
    pub exits: Vec<(u64, ExitRecord)>,
    /// ADM-4: the last input write (bytes, not a resize): a look waits for its redraw.
    pub last_input: Option<LastInput>,
    /// ADM-19: when (monotonic ms) the last write carrying an Enter that no admission or
    /// submit made ended: a human's or another program's prompt may be on its way to the
    /// provider's records.
    pub other_enter_ms: Option<u64>,
    /// ADM-19: how many carriage returns such writes carried (each may submit a prompt).
    pub other_enters: u64,
    /// ADM-19: when each of the latest of them came (at most `MAX_ENTER_TIMES` kept).
    pub other_enter_times: std::collections::VecDeque<u64>,
}

/// ADM-19: Enters of other writers whose times a pane keeps (those within the grace count).
const MAX_ENTER_TIMES: usize = 256;

/// How one generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitRecord {
    pub exit_code: Option<i32>,
    /// Output end offset when the exit was published: later bytes belong to a later child.
    pub output_end: u64,
}

impl PaneState {
    /// How `generation` ended, `None` while it runs.
    pub fn exit_of(&self, generation: u64) -> Option<ExitRecord> {
        assert!(generation <= self.generation);
        if let Some((_, record)) = self.exits.iter().find(|(g, _)| *g == generation) {
            return Some(*record);
        }
        if generation == self.generation {
            assert!(self.child.alive, "a dead current child has an exit record");
            return None;
        }
        // An old generation whose record fell out of the bounded history.
        Some(ExitRecord {
            exit_code: None,
            output_end: self.ring.end(),
        })
    }

    fn record_exit(&mut self, generation: u64, exit_code: Option<i32>) {
        if self.exits.len() == EXIT_HISTORY_LEN {
            self.exits.remove(0);
        }
        let output_end = self.ring.end();
        self.exits.push((
            generation,
            ExitRecord {
                exit_code,
                output_end,
            },
        ));
        assert!(self.exits.len() <= EXIT_HISTORY_LEN);
    }
}

/// The PTY handles. The slave stays open so a respawn can start a new child in the same pane.
struct PtyHandles {
    master: Box<dyn MasterPty + Send>,
    slave: Box<dyn SlavePty + Send>,
}

pub struct Pane {
    command: Vec<String>,
    cwd: std::path::PathBuf,
    env: Vec<(String, String)>,
    state: Mutex<PaneState>,
    /// Signalled on new output, child exit, respawn and resize.
    pub changed: Condvar,
    /// Signalled only when a child starts or ends (with `changed`): the linger watch waits on
    /// it, so each output chunk does not wake it (it did: 12 % of a busy holder's CPU samples).
    pub child_changed: Condvar,
    /// Signalled when a child starts or ends and on another writer's Enter (ADM-19): an
    /// `info_changed` call that does not watch the output (the monitor's through its screen
    /// debounce) waits on it, so each output chunk does not wake it (an A/B showed the
    /// watcher's p99 a little worse while it waited on `changed`).
    pub child_or_enter: Condvar,
    /// Serialises writers: two payloads never interleave on the master.
    write_lock: Mutex<()>,
    /// `InfoReply::holder_instance`: drawn once, when the holder opens its pane.
    instance: String,
    /// Serialises spawn/resize, which touch the PTY handles.
    pty: Mutex<PtyHandles>,
    /// Serialises respawn and shutdown: one generation is replaced by exactly one successor.
    lifecycle: Mutex<()>,
    /// Requests this holder has received (every connection): proves what a client costs it.
    pub requests: std::sync::atomic::AtomicU64,
    /// Writes accepted (SUB-4: a later write voids a submit's acknowledgement).
    writes: std::sync::atomic::AtomicU64,
    /// Set by shutdown under `lifecycle`; a later respawn refuses rather than start a child
    /// the exiting holder would orphan.
    shutting_down: std::sync::atomic::AtomicBool,
    /// True from the reader's read(2) until its bytes are in the ring: bytes in that window are
    /// neither queued in the PTY nor visible, and the exit must wait for them.
    reading: std::sync::atomic::AtomicBool,
    /// A close-on-exec duplicate of the master descriptor (same open file description, so the
    /// same O_NONBLOCK flag and the same queue), owned here so that reads, writes and polls
    /// borrow it safely without locking `pty`.
    master_fd: OwnedFd,
}

#[derive(Debug)]
pub struct PaneError(pub String);

impl Pane {
    /// Opens the PTY; the child is started by [`Pane::spawn_child`].
    pub fn open(cfg: &HolderConfig) -> Result<Arc<Pane>, PaneError> {
        let size = PtySize {
            rows: cfg.rows,
            cols: cfg.cols,
            pixel_width: 0,
            pixel_height: 0,
        };
        let pair = portable_pty::native_pty_system()
            .openpty(size)
            .map_err(|e| PaneError(format!("openpty: {e}")))?;
        let master_raw = pair
            .master
            .as_raw_fd()
            .ok_or_else(|| PaneError("master has no fd".into()))?;
        // SAFETY: `master_raw` is the descriptor of `pair.master`, which is alive for this
        // whole statement (it is moved into the pane only below), and the borrow ends with the
        // statement: only the duplicate outlives it.
        let master_fd = rustix::io::fcntl_dupfd_cloexec(unsafe { BorrowedFd::borrow_raw(master_raw) }, 0)
            .map_err(|e| PaneError(format!("dup master: {e}")))?;
        set_nonblocking(master_fd.as_fd()).map_err(|e| PaneError(format!("O_NONBLOCK on master: {e}")))?;
        if cfg.raw {
            make_raw(master_fd.as_fd()).map_err(|e| PaneError(format!("raw mode: {e}")))?;
        }
        let state = PaneState {
            ring: OutputRing::new(super::output_ring::OUTPUT_RING_BYTES),
            screen: vt100::Parser::new(cfg.rows, cfg.cols, 0),
            child: ChildFacts::default(),
            generation: 0,
            generation_start: 0,
            cols: cfg.cols,
            rows: cfg.rows,
            ended_at: None,
            exits: Vec::new(),
            last_input: None,
            other_enter_ms: None,
            other_enters: 0,
            other_enter_times: Default::default(),
        };
        Ok(Arc::new(Pane {
            command: cfg.command.clone(),
            cwd: cfg.cwd.clone(),
            env: cfg.env.clone(),
            state: Mutex::new(state),
            changed: Condvar::new(),
            child_changed: Condvar::new(),
            child_or_enter: Condvar::new(),
            write_lock: Mutex::new(()),
            instance: uuid::Uuid::new_v4().simple().to_string(),
            pty: Mutex::new(PtyHandles {
                master: pair.master,
                slave: pair.slave,
            }),
            lifecycle: Mutex::new(()),
            requests: std::sync::atomic::AtomicU64::new(0),
            writes: std::sync::atomic::AtomicU64::new(0),
            shutting_down: std::sync::atomic::AtomicBool::new(false),
            reading: std::sync::atomic::AtomicBool::new(false),
            master_fd,
        }))
    }

    pub fn lock(&self) -> MutexGuard<'_, PaneState> {
        // A panicking thread cannot leave the state half-updated in a way later readers trip
        // on (every update is a few assignments), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts the reader thread; call once.
    pub fn start_reader(self: &Arc<Self>) {
        let pane = Arc::clone(self);
        std::thread::Builder::new()
            .name("holder-reader".into())
            .spawn(move || pane.read_loop())
            .expect("spawning the reader thread");
    }

    /// Starts the configured command as generation `generation` and a thread that waits for it.
    /// On failure the pane records a dead child with `spawn_error` and exit code 127.
    pub fn spawn_child(self: &Arc<Self>, generation: u64) {
        let pty = self.pty.lock().unwrap_or_else(|p| p.into_inner());
        // LIFE-2: portable-pty starts the child in $HOME when its directory is gone; an agent
        // running elsewhere than it was started for is a failed start, said as such.
        let spawned = match self.cwd_problem() {
            None => pty.slave.spawn_command(self.command_builder()).map_err(|e| format!("{e:#}")),
            Some(problem) => Err(problem),
        };
        drop(pty);
        let mut state = self.lock();
        state.generation = generation;
        state.generation_start = state.ring.end();
        match spawned {
            Ok(child) => {
                let pid = child.process_id();
                state.child = ChildFacts {
                    pid,
                    start_time_ticks: pid.and_then(start_time_ticks),
                    alive: true,
                    exit_code: None,
                    spawn_error: None,
                };
                state.ended_at = None;
                drop(state);
                let pane = Arc::clone(self);
                std::thread::Builder::new()
                    .name("holder-waiter".into())
                    .spawn(move || pane.wait_child(child, generation))
                    .expect("spawning the waiter thread");
            }
            Err(e) => {
                state.child = ChildFacts {
                    spawn_error: Some(e),
                    exit_code: Some(127),
                    ..ChildFacts::default()
                };
                state.ended_at = Some(Instant::now());
                state.record_exit(generation, Some(127));
            }
        }
        self.changed.notify_all();
        self.child_changed.notify_all();
        self.child_or_enter.notify_all();
    }

    /// LIFE-2: why the command cannot run in its working directory, if it cannot.
    fn cwd_problem(&self) -> Option<String> {
        let cwd = self.cwd.display();
        match std::fs::metadata(&self.cwd) {
            Ok(meta) if meta.is_dir() => None,
            Ok(_) => Some(format!("the working directory {cwd} is not a directory")),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Some(format!("the working directory {cwd} is gone")),
            Err(error) => Some(format!("the working directory {cwd} cannot be used: {error}")),
        }
    }

    fn command_builder(&self) -> CommandBuilder {
        assert!(!self.command.is_empty());
        let mut cmd = CommandBuilder::from_argv(self.command.iter().map(Into::into).collect());
        cmd.cwd(&self.cwd);
        // The screen is emulated by vt100, an xterm subset; the daemon's TERM describes
        // another terminal.
        cmd.env("TERM", "xterm-256color");
        for (key, value) in &self.env {
            cmd.env(key, value);
        }
        cmd
    }

    /// Blocks until `generation`'s child exits, publishes the exit, then reaps it.
    fn wait_child(
        self: Arc<Self>,
        mut child: Box<dyn portable_pty::Child + Send + Sync>,
        generation: u64,
    ) {
        let pid = child.process_id().expect("a spawned child has a pid");
        // WNOWAIT keeps the zombie, so its pid cannot be reused while `alive` is still true and
        // `kill` may still signal it.
        let code = wait_exit_without_reaping(pid);
        end_session_members(pid);
        self.drain_output_after_exit();
        {
            let mut state = self.lock();
            assert_eq!(
                state.generation, generation,
                "respawn waits for the old child's exit"
            );
            state.child.alive = false;
            state.child.exit_code = code;
            state.ended_at = Some(Instant::now());
            state.record_exit(generation, code);
        }
        self.changed.notify_all();
        self.child_changed.notify_all();
        self.child_or_enter.notify_all();
        let _ = child.wait();
    }

    /// Waits (bounded) until the child's last output is in the ring: nothing queued in the
    /// PTY, no read in flight, and still so after a settle time for bytes the kernel has not
    /// yet moved into the queue.
    fn drain_output_after_exit(&self) {
        let deadline = Instant::now() + EXIT_DRAIN_DEADLINE;
        let idle =
            || pending_input_bytes(self.master_fd.as_fd()) == 0 && !self.reading.load(Ordering::SeqCst);
        while Instant::now() < deadline {
            if idle() {
                std::thread::sleep(EXIT_DRAIN_SETTLE);
                if idle() {
                    return;
                }
            } else {
                std::thread::sleep(EXIT_DRAIN_SETTLE / 4);
            }
        }
    }

    fn read_loop(&self) {
        let mut buf = vec![0u8; READ_CHUNK_BYTES];
        loop {
            match wait_fd(self.master_fd.as_fd(), PollFlags::IN, None) {
                Ok(revents) if !revents.contains(PollFlags::IN) => {
                    // Hang-up without data (no slave open): nothing to read until a respawn.
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
                Ok(_) => {}
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(50));
                    continue;
                }
            }
            self.reading.store(true, Ordering::SeqCst);
            let read = rustix::io::read(&self.master_fd, &mut buf);
            if let Ok(n @ 1..) = read {
                self.append_output(&buf[..n]);
            }
            self.reading.store(false, Ordering::SeqCst);
            if read == Ok(0) {
                std::thread::sleep(Duration::from_millis(50));
            }
            // Err: EAGAIN after a spurious wake-up, EINTR or EIO between children; poll again.
        }
    }

    fn append_output(&self, chunk: &[u8]) {
        assert!(!chunk.is_empty() && chunk.len() <= READ_CHUNK_BYTES);
        let mut state = self.lock();
        state.ring.push(chunk);
        // The screen model is a dependency fed with whatever the child prints: a panic in it
        // must not end the reader thread (the pane would stop reading its PTY for good). The
        // screen starts over, blank, at its size; the ring keeps every byte.
        let processed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| state.screen.process(chunk)));
        if processed.is_err() {
            tracing::warn!("the screen model failed on the pane's output; it starts over blank");
            let (rows, cols) = (state.rows, state.cols);
            state.screen = vt100::Parser::new(rows, cols, 0);
        }
        drop(state);
        self.changed.notify_all();
    }

    /// Writes all of `data` to the master unless an error or WRITE_DEADLINE stops it, and says
    /// exactly how many bytes went in, holding the write lock for the whole payload. Only if
    /// the pane still runs `expect` (when given; the lifecycle lock makes the check and the
    /// write atomic with respect to a respawn) and, with `start_by_ms`, only if the write
    /// begins by then (ADM-12: checked under the write lock, right before the first byte).
    pub fn write_to(&self, data: &[u8], expect: Option<super::protocol::ExpectedProcess>, start_by_ms: Option<u64>) -> WriteOutcome {
        let _lifecycle = expect.map(|_| self.lifecycle.lock().unwrap_or_else(|p| p.into_inner()));
        if let Some(refusal) = expect.and_then(|expect| self.refuse_unless_running(expect)) {
            return refusal;
        }
        // ADM-19: only the daemon's prompt writes name the process they must reach.
        self.write_starting_by(data, start_by_ms, expect.and_then(|expect| expect.writes), expect.is_some())
    }

    /// The refusal of a write whose start deadline passed (the caller holds the write lock).
    fn refuse_if_late(start_by_ms: Option<u64>) -> Option<WriteOutcome> {
        let (late, now_ms) = past_start_by(start_by_ms)?;
        let error = format!("the write was to start by {late} ms, and the holder came to it at {now_ms} ms");
        Some(WriteOutcome::refusal(super::protocol::WriteRefusal::StartDeadlinePassed, error))
    }

    /// The refusal of a write that names another process than the pane runs.
    fn refuse_unless_running(&self, expect: super::protocol::ExpectedProcess) -> Option<WriteOutcome> {
        let (pid, start, alive) = {
            let state = self.lock();
            (state.child.pid, state.child.start_time_ticks, state.child.alive)
        };
        if !alive || pid != Some(expect.pid) || start != Some(expect.start_time_ticks) {
            let running = match (alive, pid, start) {
                (true, Some(pid), Some(start)) => format!("process {pid} (started at tick {start})"),
                _ => "no process".to_string(),
            };
            let error = format!("the pane runs {running}, not the agent's process {} (started at tick {}): it was replaced or ended", expect.pid, expect.start_time_ticks);
            return Some(WriteOutcome::refusal(super::protocol::WriteRefusal::ProcessChanged, error));
        }
        None
    }

    /// `own`: an admission's or a submit's write (ADM-19: its Enter is no other writer's).
    fn write_starting_by(&self, data: &[u8], start_by_ms: Option<u64>, expect_writes: Option<u64>, own: bool) -> WriteOutcome {
        let _serial = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        if !self.lock().child.alive {
            return WriteOutcome::refusal(super::protocol::WriteRefusal::NotAlive, "child is not alive".into());
        }
        if let Some(refusal) = Self::refuse_if_late(start_by_ms) {
            return refusal;
        }
        if let Some(refusal) = self.refuse_if_written_since(expect_writes) {
            return refusal;
        }
        self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let (written, error, before) = self.write_all_locked(data);
        self.note_input(&data[..written], before, own);
        outcome(written, error)
    }

    /// ADM-4: the refusal of a write whose writer looked at the pane when its write count was
    /// `expect_writes`, when any write came since: a draft typed since would be erased by the
    /// write's leading Ctrl-U. The caller holds the write lock, so no write slips in between
    /// this check and its own.
    fn refuse_if_written_since(&self, expect_writes: Option<u64>) -> Option<WriteOutcome> {
        let now = self.writes.load(std::sync::atomic::Ordering::SeqCst);
        let seen = expect_writes.filter(|seen| *seen != now)?;
        let error = format!("input reached the pane since the writer's look (its writes went from {seen} to {now}: keys, raw input or a resize): a draft typed since would be erased; nothing was written");
        Some(WriteOutcome::refusal(super::protocol::WriteRefusal::InputSinceLook, error))
    }

    /// ADM-4: input reached the pane (the caller holds the write lock): a look waits for the
    /// child to draw it ([`undrawn_input_deadline`]), that is for output past `before`, the
    /// output end read before the write(2) call that put the last bytes in (before the write
    /// began, the output of a child that printed while the write waited on a full PTY counted
    /// as the keys' draw, a review). Read after the write, it counted a redraw the
    /// child made while the holder was not scheduled yet as older than the input, and the next
    /// look waited the whole bound for output that had come already (receipt p99 250 ms in the
    /// benchmark's 10-agent throughput run).
    ///
    /// ADM-19: an Enter among the bytes the pane took, from a writer that is not an admission
    /// or a submit (`own`), is noted as another writer's.
    fn note_input(&self, written: &[u8], before: u64, own: bool) {
        if written.is_empty() {
            return;
        }
        let now_ms = super::protocol::monotonic_ms();
        let mut state = self.lock();
        state.last_input = Some(LastInput { written_ms: now_ms, output_end: before });
        let enters = wakterm_engine::pane_look::count_enters(written);
        if !own && enters > 0 {
            // Strictly later than the last one, so a watcher that knows that one wakes.
            state.other_enter_ms = Some(state.other_enter_ms.map_or(now_ms, |last| now_ms.max(last + 1)));
            state.other_enters += enters;
            for _ in 0..enters.min(MAX_ENTER_TIMES as u64) {
                if state.other_enter_times.len() == MAX_ENTER_TIMES {
                    state.other_enter_times.pop_front();
                }
                state.other_enter_times.push_back(now_ms);
            }
            drop(state);
            self.changed.notify_all(); // `info_changed` callers watching for it (ADM-19)
            self.child_or_enter.notify_all();
        }
    }

    fn output_end(&self) -> u64 {
        self.lock().ring.end()
    }

    /// SUB-2: `steps` in order with `gap` between them, under the write lock throughout (and
    /// the lifecycle lock when `expect` names the process), then the Enter boundary read under
    /// one state lock: the output end, the screen at that end, the generation and the writes.
    pub fn write_steps(&self, steps: &[Vec<u8>], gap: Duration, expect: Option<super::protocol::ExpectedProcess>, start_by_ms: Option<u64>) -> super::protocol::StepsOutcome {
        let _lifecycle = expect.map(|_| self.lifecycle.lock().unwrap_or_else(|p| p.into_inner()));
        let refused = |outcome: WriteOutcome| super::protocol::StepsOutcome {
            steps_written: 0,
            bytes_written: 0,
            error: outcome.error,
            refused: outcome.refused,
            boundary: None,
        };
        if let Some(refusal) = expect.and_then(|expect| self.refuse_unless_running(expect)) {
            return refused(refusal);
        }
        let _serial = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        if !self.lock().child.alive {
            return refused(WriteOutcome::refusal(super::protocol::WriteRefusal::NotAlive, "child is not alive".into()));
        }
        if let Some(refusal) = Self::refuse_if_late(start_by_ms) {
            return refused(refusal);
        }
        // ADM-4, SUB-1: the submit's look named the write count it saw.
        if let Some(refusal) = self.refuse_if_written_since(expect.and_then(|expect| expect.writes)) {
            return refused(refusal);
        }
        let writes = self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        let mut bytes_written = 0u64;
        for (index, step) in steps.iter().enumerate() {
            if index > 0 {
                std::thread::sleep(gap);
            }
            let (written, error, before) = self.write_all_locked(step);
            bytes_written += written as u64;
            self.note_input(&step[..written], before, expect.is_some());
            if error.is_some() {
                return super::protocol::StepsOutcome { steps_written: index as u64, bytes_written, error, refused: None, boundary: None };
            }
        }
        let boundary = {
            let state = self.lock();
            super::protocol::StepsBoundary { screen: screen_of(&state), generation: state.generation, writes }
        };
        assert_eq!(bytes_written, steps.iter().map(|s| s.len() as u64).sum::<u64>());
        super::protocol::StepsOutcome { steps_written: steps.len() as u64, bytes_written, error: None, refused: None, boundary: Some(boundary) }
    }

    /// The write loop; the caller holds `write_lock`. Returns the bytes written, the error
    /// that stopped it, and the output end read just before the write(2) call that put the
    /// last bytes in (ADM-4's `note_input`): output the child printed while the write waited
    /// on a full PTY came before the keys landed, so it is no draw of them.
    fn write_all_locked(&self, data: &[u8]) -> (usize, Option<String>, u64) {
        let deadline = Instant::now() + WRITE_DEADLINE;
        let mut written = 0usize;
        let mut before_last = self.output_end();
        while written < data.len() {
            let rest = &data[written..];
            let before = self.output_end();
            let err = match rustix::io::write(&self.master_fd, rest) {
                Ok(n @ 1..) => {
                    written += n;
                    before_last = before;
                    continue;
                }
                // write(2) of a non-empty buffer accepting nothing: not expected of a PTY.
                Ok(_) => return (written, Some("write to pty master: wrote 0 bytes".into()), before_last),
                Err(err) => err,
            };
            if err != Errno::AGAIN && err != Errno::INTR {
                let err = std::io::Error::from(err);
                return (written, Some(format!("write to pty master: {err}")), before_last);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return (written, Some("write deadline exceeded: the child stopped reading".into()), before_last);
            }
            if let Err(e) = wait_fd(self.master_fd.as_fd(), PollFlags::OUT, Some(left)) {
                return (written, Some(format!("poll pty master: {e}")), before_last);
            }
        }
        assert_eq!(written, data.len());
        (written, None, before_last)
    }

    pub fn info(&self) -> InfoReply {
        self.info_of(&self.lock())
    }

    /// The screen and `info` under one state lock: the same moment of the pane. ADM-4: an
    /// admission's look; input written just before it is drawn first (up to
    /// `INPUT_DRAW_WAIT_MS` after the write): a human's draft typed a moment before was read as
    /// an empty composer, and the admission's Ctrl-U erased it.
    ///
    /// The reply's `info.writes` is the count of writes whose bytes had all reached the pane
    /// before the screen was read: taken under the write lock, where no write is under way. A
    /// write counts itself before its first byte (SUB-4's boundary needs that), so read with
    /// the screen, a human's write counted but still writing (preempted, or blocked on a full
    /// PTY) was taken for one the screen showed, its draw not awaited (`last_input` is set
    /// after the bytes), and the admission's or submit's write naming that count erased the
    /// draft (a review of SUB-1's check). A write begun after this count is refused by it.
    pub fn screen_with_info(&self) -> super::protocol::ScreenWithInfo {
        let landed = {
            let _quiet = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
            self.writes.load(std::sync::atomic::Ordering::SeqCst)
        };
        let mut state = self.lock();
        while let Some(deadline_ms) = undrawn_input_deadline(state.last_input, state.ring.end(), super::protocol::monotonic_ms()) {
            let end = state.ring.end();
            let left = Duration::from_millis(deadline_ms.saturating_sub(super::protocol::monotonic_ms()).max(1));
            state = self.wait_until(state, Instant::now() + left, |state| state.ring.end() != end);
        }
        let info = InfoReply { writes: landed, ..self.info_of(&state) };
        assert!(info.writes <= self.writes.load(std::sync::atomic::Ordering::SeqCst), "the count only grows");
        super::protocol::ScreenWithInfo { screen: screen_of(&state), info: Some(info) }
    }

    fn info_of(&self, state: &PaneState) -> InfoReply {
        InfoReply {
            pid: state.child.pid,
            start_time_ticks: state.child.start_time_ticks,
            alive: state.child.alive,
            exit_code: state.child.exit_code,
            cols: state.cols,
            rows: state.rows,
            generation: state.generation,
            holder_pid: std::process::id(),
            holder_instance: self.instance.clone(),
            requests: self.requests.load(std::sync::atomic::Ordering::SeqCst),
            other_enter_ms: state.other_enter_ms,
            other_enters: state.other_enters,
            other_enters_recent: wakterm_engine::pane_look::OtherEnterLook::recent_among(state.other_enter_times.iter().copied(), super::protocol::monotonic_ms()),
            writes: self.writes.load(std::sync::atomic::Ordering::SeqCst),
            generation_start: state.generation_start,
            output_end: state.ring.end(),
            spawn_error: state.child.spawn_error.clone(),
        }
    }

    pub fn screen(&self) -> ScreenReply {
        screen_of(&self.lock())
    }

    pub fn resize(&self, cols: u16, rows: u16) -> Result<(), PaneError> {
        assert!((super::protocol::MIN_COLS..=MAX_COLS).contains(&cols) && (super::protocol::MIN_ROWS..=MAX_ROWS).contains(&rows));
        let pty = self.pty.lock().unwrap_or_else(|p| p.into_inner());
        let size = PtySize {
            rows,
            cols,
            pixel_width: 0,
            pixel_height: 0,
        };
        // SUB-4: a new size makes the child redraw (SIGWINCH): new output and another screen
        // that no Enter caused. Counted as a write, a submit waiting for its acknowledgement
        // then answers `superseded` rather than take the redraw for a reaction (a review
        // found `agent attach` resizing the pane could so acknowledge a swallowed Enter).
        // Counted BEFORE the resize sends the signal: counted after, a redraw read in between
        // was a change with no write (a review found the window). A failed resize over-counts,
        // which only makes a waiting submit say `superseded`.
        let current = {
            let state = self.lock();
            (state.cols, state.rows)
        };
        if current != (cols, rows) {
            self.writes.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        pty.master
            .resize(size)
            .map_err(|e| PaneError(format!("resize: {e}")))?;
        let mut state = self.lock();
        state.screen.set_size(rows, cols);
        state.cols = cols;
        state.rows = rows;
        drop(state);
        self.changed.notify_all();
        Ok(())
    }

    /// Sends `signal` to the current child. The state lock is held across the check and the
    /// kill, and the waiter marks the child dead before reaping it, so the pid is never a
    /// recycled one.
    pub fn signal(&self, signal: i32) -> Result<u32, PaneError> {
        let state = self.lock();
        let pid = match (state.child.alive, state.child.pid) {
            (true, Some(pid)) => pid,
            _ => return Err(PaneError("child is not alive".into())),
        };
        // The signal is any number 1..=64 the caller chose (the server checks the range),
        // including real-time ones rustix's safe `Signal` does not name, so this stays libc.
        // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is the
        // live, unreaped child (see above), so no other process is signalled.
        if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
            return Err(PaneError(format!(
                "kill({pid}, {signal}): {}",
                std::io::Error::last_os_error()
            )));
        }
        Ok(pid)
    }

    /// Ends the child for good, for `shutdown`; waits out a concurrent respawn first.
    pub fn terminate_for_shutdown(&self) -> Result<(), PaneError> {
        let _serial = self.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        self.shutting_down
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.terminate_child()
    }

    /// Ends the current child's process group: SIGHUP, then SIGKILL after KILL_GRACE. Returns
    /// once the child is marked dead, or an error if it outlives two grace periods.
    pub fn terminate_child(&self) -> Result<(), PaneError> {
        for (signal, grace) in [(Signal::HUP, KILL_GRACE), (Signal::KILL, KILL_GRACE)] {
            let state = self.lock();
            if !state.child.alive {
                break;
            }
            let pid = state.child.pid.expect("a live child has a pid");
            // The child is a session leader (portable-pty calls setsid), so its pid is its
            // group. An error (the group already gone) is seen as the child's death below.
            if let Some(group) = Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process_group(group, signal);
            }
            let deadline = Instant::now() + grace;
            let state = self.wait_until(state, deadline, |s| !s.child.alive);
            if !state.child.alive {
                break;
            }
        }
        if self.lock().child.alive {
            return Err(PaneError("child survived SIGKILL".into()));
        }
        // LIVE-1: the session's other members ended with the leader (`wait_child`, before the
        // leader is marked dead).
        Ok(())
    }

    /// Waits on `changed` until `done` holds or `deadline` passes.
    pub fn wait_until<'a>(
        &self,
        state: MutexGuard<'a, PaneState>,
        deadline: Instant,
        done: impl Fn(&PaneState) -> bool,
    ) -> MutexGuard<'a, PaneState> {
        self.wait_on(&self.changed, state, deadline, done)
    }

    /// Waits on `condvar` (one of the pane's) until `done` holds or `deadline` passes.
    pub fn wait_on<'a>(
        &self,
        condvar: &Condvar,
        mut state: MutexGuard<'a, PaneState>,
        deadline: Instant,
        done: impl Fn(&PaneState) -> bool,
    ) -> MutexGuard<'a, PaneState> {
        while !done(&state) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            state = condvar
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        state
    }

    /// Kills the current child if alive and starts the command again in the same PTY.
    /// ADM-8: input the ended process never read (a prompt a hung Codex left in the tty, a
    /// partial JSON-RPC line) is discarded before the next process starts: it reached the new
    /// incarnation first, unadmitted (a review reproduced it with `agent restart`). The slave
    /// side's input queue is flushed through its device (the pane keeps the slave open).
    fn flush_unread_input(&self) {
        let pty = self.pty.lock().unwrap_or_else(|p| p.into_inner());
        let Some(name) = pty.master.tty_name() else { return };
        let flags = libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC;
        match std::os::unix::fs::OpenOptionsExt::custom_flags(std::fs::OpenOptions::new().read(true).write(true), flags).open(&name) {
            // SAFETY: tcflush on a descriptor this function owns for the call.
            Ok(slave) => {
                if unsafe { libc::tcflush(std::os::fd::AsRawFd::as_raw_fd(&slave), libc::TCIFLUSH) } != 0 {
                    tracing::warn!(error = %std::io::Error::last_os_error(), "cannot discard the pane's unread input before a respawn");
                }
            }
            Err(error) => tracing::warn!(%error, "cannot open the pane's tty to discard its unread input"),
        }
    }

    /// LIFE-9: with `start_by_ms`, only if the holder comes to it by then (checked under the
    /// lifecycle lock, before anything is ended): a holder stalled past it (SIGSTOPped, or
    /// behind another respawn or a shutdown) refuses, the running process left alone. The
    /// daemon answers `agent_restart_failed` once its call's bound passed; a holder that went
    /// on later and replaced the process anyway made a caller's retry restart it twice (a
    /// hostile run).
    pub fn respawn(self: &Arc<Self>, start_by_ms: Option<u64>) -> Result<u64, RespawnError> {
        let _serial = self.lifecycle.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((late, now_ms)) = past_start_by(start_by_ms) {
            return Err(RespawnError::Late(format!("the respawn was to start by {late} ms, and the holder came to it at {now_ms} ms; the running process is left alone")));
        }
        if self.shutting_down.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(PaneError("holder is shutting down".into()).into());
        }
        // LIFE-2: a respawn that could not start the command must not end the running one.
        if let Some(problem) = self.cwd_problem() {
            return Err(PaneError(format!("{problem}; the running process is left alone")).into());
        }
        self.terminate_child()?;
        self.flush_unread_input();
        let next = {
            let mut state = self.lock();
            // The screen is evidence about the process that drew it: the new incarnation
            // starts on a blank one, never on its predecessor's idle composer.
            state.screen = vt100::Parser::new(state.rows, state.cols, 0);
            state.generation + 1
        };
        self.spawn_child(next);
        Ok(next)
    }
}

/// ADM-17, LIFE-9: a write's or a respawn's `start_by_ms` (the machine's monotonic clock)
/// that passed: the deadline and now.
fn past_start_by(start_by_ms: Option<u64>) -> Option<(u64, u64)> {
    let now_ms = super::protocol::monotonic_ms();
    start_by_ms.filter(|start_by| now_ms > *start_by).map(|start_by| (start_by, now_ms))
}

/// Why a respawn did not happen.
#[derive(Debug)]
pub enum RespawnError {
    /// LIFE-9: the holder came to it after its `start_by_ms`; nothing was ended or started.
    Late(String),
    Failed(PaneError),
}

impl From<PaneError> for RespawnError {
    fn from(error: PaneError) -> Self {
        RespawnError::Failed(error)
    }
}

/// The most bytes of screen text one reply carries, well within the holder's line limit: a
/// 1000x500 pane of characters with five combining marks each made a 12 MB screen, whose reply
/// panicked the connection's thread (and leaked its slot). Each row is cut to its share.
pub const MAX_SCREEN_BYTES: usize = super::protocol::MAX_LINE_BYTES / 2;

/// The emulated screen after exactly the ring's bytes, read under the caller's state lock.
fn screen_of(state: &PaneState) -> ScreenReply {
    let screen = state.screen.screen();
    let (row, col) = screen.cursor_position();
    let row_bytes = MAX_SCREEN_BYTES / usize::from(state.rows.max(1));
    ScreenReply {
        lines: screen.rows(0, state.cols).map(|line| cut_at_char(line, row_bytes)).collect(),
        cursor: Cursor { row, col },
        output_offset: state.ring.end(),
        cols: state.cols,
        rows: state.rows,
        bracketed_paste: screen.bracketed_paste(),
        alternate_screen: screen.alternate_screen(),
    }
}

/// `line` cut to at most `max` bytes, at a character boundary.
fn cut_at_char(mut line: String, max: usize) -> String {
    if line.len() > max {
        let end = (0..=max).rev().find(|at| line.is_char_boundary(*at)).unwrap_or(0);
        line.truncate(end);
    }
    line
}

fn outcome(written: usize, error: Option<String>) -> WriteOutcome {
    WriteOutcome {
        bytes_written: written as u64,
        error,
        refused: None,
    }
}

/// Field 22 (starttime, clock ticks after boot) of /proc/PID/stat.
pub fn start_time_ticks(pid: u32) -> Option<u64> {
    let process = procfs::process::Process::new(pid as i32).ok()?;
    Some(process.stat().ok()?.starttime)
}

/// LIVE-1: ends what is left of a pane process's session once its leader has exited, however
/// it ended (`agent stop`, `agent restart`, or on its own), while the leader is an unreaped
/// zombie: its pid, and so the session id, cannot belong to another process yet. The leader's
/// death does not end what ignores the hang-up (a background job, a daemonised tool): those
/// ran on after `agent stop`, and one holding the terminal read the next incarnation's input
/// (a review saw half of six `session input` lines go to a job of the process before). A
/// hang-up first, then SIGKILL for what is left after `MEMBER_GRACE`; a member forked while
/// we looked is found by the next look (a bounded few).
fn end_session_members(leader: u32) {
    for signal in [libc::SIGHUP, libc::SIGKILL, libc::SIGKILL] {
        let members = crate::proc_probe::session_members(leader);
        if members.is_empty() {
            return;
        }
        for member in members {
            // SAFETY: kill has no memory-safety preconditions; every member's session is the
            // unreaped leader's, so none is another session's process.
            unsafe { libc::kill(member as i32, signal) };
        }
        std::thread::sleep(MEMBER_GRACE);
    }
}

/// How long the members of an ended session get between the hang-up and SIGKILL.
const MEMBER_GRACE: Duration = Duration::from_millis(100);

/// Waits for `pid` to exit without reaping it; the exit code is 128 + signal for a signal death.
fn wait_exit_without_reaping(pid: u32) -> Option<i32> {
    let pid = Pid::from_raw(i32::try_from(pid).ok()?)?;
    loop {
        match rustix::process::waitid(WaitId::Pid(pid), WaitIdOptions::EXITED | WaitIdOptions::NOWAIT) {
            Ok(Some(status)) => {
                return status
                    .exit_status()
                    .or_else(|| status.terminating_signal().map(|signal| 128 + signal));
            }
            // Without WNOHANG waitid reports a state change; nothing to report is not expected.
            Ok(None) => return None,
            Err(Errno::INTR) => continue,
            Err(_) => return None,
        }
    }
}

/// MGD-1: the terminal pair in raw mode (set through the master, which Linux applies to the
/// pair): the child's JSON lines come out byte for byte, and ours go in without echo or the
/// canonical mode's line-length limit.
fn make_raw(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let mut termios = rustix::termios::tcgetattr(fd)?;
    termios.make_raw();
    rustix::termios::tcsetattr(fd, rustix::termios::OptionalActions::Now, &termios)?;
    Ok(())
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> std::io::Result<()> {
    let flags = rustix::fs::fcntl_getfl(fd)?;
    rustix::fs::fcntl_setfl(fd, flags | rustix::fs::OFlags::NONBLOCK)?;
    Ok(())
}

/// Bytes the child wrote that the reader has not taken yet.
fn pending_input_bytes(fd: BorrowedFd<'_>) -> u64 {
    rustix::io::ioctl_fionread(fd).unwrap_or(0)
}

/// poll(2) on one fd; `None` waits forever. Returns the revents (empty on timeout).
fn wait_fd(fd: BorrowedFd<'_>, events: PollFlags, timeout: Option<Duration>) -> std::io::Result<PollFlags> {
    // At least a millisecond, as before; a deadline beyond a timespec's range waits forever.
    let timeout = timeout.and_then(|t| Timespec::try_from(t.max(Duration::from_millis(1))).ok());
    let mut pfd = [PollFd::from_borrowed_fd(fd, events)];
    loop {
        match rustix::event::poll(&mut pfd, timeout.as_ref()) {
            Ok(_) => return Ok(pfd[0].revents()),
            Err(Errno::INTR) => continue,
            Err(err) => return Err(err.into()),
        }
    }
}
