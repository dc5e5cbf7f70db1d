//! The blocking client a daemon (or a test) uses to talk to one holder, and [`spawn_holder`].

use std::ffi::OsString;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;

use super::pane::{KILL_GRACE, WRITE_DEADLINE};
use super::protocol::{
    read_line_bounded, InfoReply, KillReply, LineError, OutputPage, Reply, Request, ScreenReply,
    StreamEvent, SubscribeReply, WireErrorKind, WriteOutcome, MAX_LINE_BYTES,
};
use super::server::STREAM_HEARTBEAT;
use super::HolderConfig;

/// Every call but `write`, `respawn` and `shutdown` must be answered within this.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// Timeout of one holder call from the daemon (its connections are made with this).
pub const HOLDER_CALL_TIMEOUT: Duration = Duration::from_secs(15);

/// The bound of a `write` call on a connection made with `timeout`: the holder's own write
/// deadline comes on top. Past it the call fails with `Timeout`, and the write's fate is
/// unknown: a stalled holder may still run it (ADM-12; the simulator's pane port uses this).
pub fn write_call_bound(timeout: Duration) -> Duration {
    timeout + WRITE_DEADLINE
}

/// ADM-12: the `start_by_ms` of a write asked for at `asked_ms` (the machine's monotonic
/// clock) whose result the engine waits `result_wait_ms` for: a holder that comes to the write
/// later refuses it, so it never starts after the engine gave up on it (the simulator's holder
/// uses this too).
pub fn write_start_by(asked_ms: u64, result_wait_ms: u64) -> u64 {
    asked_ms + result_wait_ms
}

/// The bound of a `write_steps` call of `steps` steps `gap` apart (see [`write_call_bound`]).
pub fn write_steps_call_bound(timeout: Duration, gap: Duration, steps: usize) -> Duration {
    timeout + (WRITE_DEADLINE + gap) * u32::try_from(steps).unwrap_or(u32::MAX)
}
/// LIFE-9: the longest a respawn the holder began takes: the old child's end (a hang-up, then
/// SIGKILL, each with its grace), its session's members (100 ms), the new child's spawn.
pub const RESPAWN_WORK_BOUND: Duration = Duration::from_secs(2 * KILL_GRACE.as_secs() + 2);
/// [`spawn_holder`] gives the new holder this long to answer `info`.
pub const SPAWN_READY_DEADLINE: Duration = Duration::from_secs(10);
/// A subscription that hears nothing (not even a heartbeat) for this long reports a timeout.
const SUBSCRIPTION_IDLE_TIMEOUT: Duration = Duration::from_secs(3 * STREAM_HEARTBEAT.as_secs());
/// Stderr kept from a holder that failed to start.
const MAX_SPAWN_STDERR_BYTES: u64 = 16 * 1024;

/// Why a call to a holder failed.
#[derive(Debug)]
pub enum HolderError {
    /// Nobody listens at the socket (absent, stale, or the holder is gone).
    ConnectRefused {
        path: PathBuf,
        source: std::io::Error,
    },
    /// No answer within the call's timeout. The connection is then unusable: a late reply
    /// could be mistaken for the next one, so later calls on it fail with `Protocol`.
    Timeout { op: &'static str, after: Duration },
    /// The holder closed the connection (it exited, or dropped us) before answering.
    PeerGone { op: &'static str, detail: String },
    /// The holder sent something that is not the protocol.
    Protocol { detail: String },
    /// The call was refused before anything was sent (the connection is desynchronised by an
    /// earlier failure, or the request is over the holder's line limit): nothing reached the
    /// holder, so nothing was written (MCP-4's `not_started`).
    NotSent { detail: String },
    /// The holder answered with a structured error.
    Remote {
        kind: WireErrorKind,
        message: String,
    },
    /// The holder process could not be started or never became ready.
    Spawn { detail: String },
}

impl std::fmt::Display for HolderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HolderError::ConnectRefused { path, source } => {
                write!(f, "no holder at {}: {source}", path.display())
            }
            HolderError::Timeout { op, after } => {
                write!(f, "holder did not answer {op} within {after:?}")
            }
            HolderError::PeerGone { op, detail } => {
                write!(f, "holder went away during {op}: {detail}")
            }
            HolderError::Protocol { detail } => write!(f, "holder protocol error: {detail}"),
            HolderError::NotSent { detail } => write!(f, "holder call not sent: {detail}"),
            HolderError::Remote { kind, message } => {
                write!(f, "holder refused ({kind:?}): {message}")
            }
            HolderError::Spawn { detail } => write!(f, "cannot start holder: {detail}"),
        }
    }
}

impl std::error::Error for HolderError {}

/// One connection to a holder, in request/reply mode. Not thread-safe by design: each thread
/// that talks to a holder opens its own connection (the holder serialises writes itself).
pub struct HolderClient {
    reader: BufReader<UnixStream>,
    timeout: Duration,
    desynchronised: bool,
    /// The read and write timeouts the socket has now (set only when a call needs others).
    socket_timeout: Option<Duration>,
}

impl HolderClient {
    pub fn connect(path: &Path) -> Result<Self, HolderError> {
        Self::connect_with_timeout(path, DEFAULT_CALL_TIMEOUT)
    }

    /// `timeout` bounds every call except the extra time `write`, `respawn` and `shutdown`
    /// are allowed for the holder's own deadlines.
    pub fn connect_with_timeout(path: &Path, timeout: Duration) -> Result<Self, HolderError> {
        assert!(!timeout.is_zero());
        // SEC-1: never through a link (or anything but a socket of ours): the daemon talked
        // through a link planted at an agent's holder socket to another agent's holder, even
        // another data directory's: it wrote prompts there and `agent restart` replaced that
        // agent's process (a hostile run). A link is no evidence of exit (LIVE-1: unknown).
        // Bounded: a holder that stopped accepting (full listen queue) must not block a
        // daemon thread forever; a timeout is not evidence of exit (LIVE-1).
        let stream = crate::paths::verify_holder_socket(path).and_then(|()| crate::client::connect_bounded(path, timeout)).map_err(|source| HolderError::ConnectRefused {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(HolderClient {
            reader: BufReader::new(stream),
            timeout,
            desynchronised: false,
            socket_timeout: None,
        })
    }

    /// True when this connection cannot carry a call: an earlier call left it desynchronised,
    /// bytes nobody asked for are waiting, or the holder closed it (a holder that restarted).
    /// One non-blocking peek, no round trip.
    pub fn unusable(&self) -> bool {
        if self.desynchronised || !self.reader.buffer().is_empty() {
            return true;
        }
        let mut byte = [0u8; 1];
        match rustix::net::recv(self.reader.get_ref(), &mut byte, rustix::net::RecvFlags::PEEK | rustix::net::RecvFlags::DONTWAIT) {
            Err(rustix::io::Errno::AGAIN) => false, // open, nothing pending: usable
            Err(rustix::io::Errno::INTR) => false,
            _ => true, // end of stream, unexpected bytes, or an error
        }
    }

    pub fn info(&mut self) -> Result<InfoReply, HolderError> {
        self.call("info", &Request::Info, self.timeout)
    }

    /// LIVE-2: `info` once the child differs from `generation`/`alive`, or after `timeout`.
    pub fn info_changed(&mut self, generation: u64, alive: bool, timeout: Duration) -> Result<InfoReply, HolderError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        self.call("info_changed", &Request::InfoChanged { generation, alive, timeout_ms, output_end: None, enter_after: None }, self.timeout + timeout)
    }

    /// SUB-4: `info` once the child differs, or the output end differs from `output_end`, or
    /// after `timeout`.
    pub fn info_changed_or_output(&mut self, generation: u64, alive: bool, output_end: u64, timeout: Duration) -> Result<InfoReply, HolderError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).clamp(1, super::protocol::MAX_INFO_WAIT_MS);
        let request = Request::InfoChanged { generation, alive, timeout_ms, output_end: Some(output_end), enter_after: None };
        self.call("info_changed", &request, self.timeout + timeout)
    }

    /// ADM-19: `info` once the child differs, or another writer's Enter is noted later than
    /// `enter_after` (0: none known), or after `timeout`.
    pub fn info_changed_or_enter(&mut self, generation: u64, alive: bool, enter_after: u64, timeout: Duration) -> Result<InfoReply, HolderError> {
        let timeout_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX).clamp(1, super::protocol::MAX_INFO_WAIT_MS);
        let request = Request::InfoChanged { generation, alive, timeout_ms, output_end: None, enter_after: Some(enter_after) };
        self.call("info_changed", &request, self.timeout + timeout)
    }

    /// Writes `data` to the agent's PTY as one uninterrupted payload. `bytes_written` is what
    /// the PTY accepted; on `Err` nothing is known about how much was written.
    pub fn write(&mut self, data: &[u8]) -> Result<WriteOutcome, HolderError> {
        self.write_expecting(data, None, None)
    }

    /// A write that happens only if the pane still runs `expect` (see `Request::Write`).
    /// With `start_by_ms` (see `Request::Write`), only if the holder begins it by then.
    pub fn write_expecting(&mut self, data: &[u8], expect: Option<super::protocol::ExpectedProcess>, start_by_ms: Option<u64>) -> Result<WriteOutcome, HolderError> {
        let outcome: WriteOutcome = self.call(
            "write",
            &Request::Write {
                data: data.to_vec(),
                expect,
                start_by_ms,
            },
            write_call_bound(self.timeout),
        )?;
        if outcome.bytes_written > data.len() as u64 {
            return Err(HolderError::Protocol {
                detail: format!(
                    "holder claims {} of {} bytes",
                    outcome.bytes_written,
                    data.len()
                ),
            });
        }
        Ok(outcome)
    }

    /// SUB-2: `steps` in order with `gap` between them under the pane's write lock (see
    /// `Request::WriteSteps`); the outcome's counts are checked against what was sent.
    pub fn write_steps(&mut self, steps: &[Vec<u8>], gap: Duration, expect: Option<super::protocol::ExpectedProcess>, start_by_ms: Option<u64>) -> Result<super::protocol::StepsOutcome, HolderError> {
        let gap_ms = u64::try_from(gap.as_millis()).unwrap_or(u64::MAX);
        let request = Request::WriteSteps { steps: steps.to_vec(), gap_ms, expect, start_by_ms };
        let budget = write_steps_call_bound(self.timeout, gap, steps.len());
        let outcome: super::protocol::StepsOutcome = self.call("write_steps", &request, budget)?;
        let total: u64 = steps.iter().map(|s| s.len() as u64).sum();
        let whole: u64 = steps.iter().take(outcome.steps_written as usize).map(|s| s.len() as u64).sum();
        let consistent = outcome.steps_written <= steps.len() as u64
            && outcome.bytes_written <= total
            && outcome.bytes_written >= whole
            && outcome.boundary.is_some() == (outcome.steps_written == steps.len() as u64 && outcome.error.is_none())
            && (outcome.refused.is_none() || outcome.bytes_written == 0);
        if !consistent {
            let detail = format!("holder claims {} steps / {} bytes of {} / {total}", outcome.steps_written, outcome.bytes_written, steps.len());
            return Err(HolderError::Protocol { detail });
        }
        Ok(outcome)
    }

    pub fn screen(&mut self) -> Result<ScreenReply, HolderError> {
        self.call("screen", &Request::Screen { with_info: false }, self.timeout)
    }

    /// The screen and the `info` of the same moment, in one round trip; `info` is None when
    /// the holder predates the call (ask `info` separately then).
    pub fn screen_with_info(&mut self) -> Result<super::protocol::ScreenWithInfo, HolderError> {
        self.call("screen", &Request::Screen { with_info: true }, self.timeout)
    }

    /// Up to `max` raw output bytes from absolute offset `after`.
    pub fn output(&mut self, after: u64, max: u64) -> Result<OutputPage, HolderError> {
        self.call("output", &Request::Output { after, max }, self.timeout)
    }

    pub fn resize(&mut self, cols: u16, rows: u16) -> Result<(), HolderError> {
        self.call::<serde_json::Value>("resize", &Request::Resize { cols, rows }, self.timeout)
            .map(drop)
    }

    pub fn kill(&mut self, signal: i32) -> Result<KillReply, HolderError> {
        self.call("kill", &Request::Kill { signal }, self.timeout)
    }

    /// Replaces the child with a fresh run of the same command; returns the new facts. The
    /// holder must begin it within this connection's call timeout ([`HolderClient::respawn_by`]).
    pub fn respawn(&mut self) -> Result<InfoReply, HolderError> {
        let timeout_ms = u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX);
        self.respawn_by(super::protocol::monotonic_ms().saturating_add(timeout_ms))
    }

    /// LIFE-9: a respawn the holder must begin by `start_by_ms` (the machine's monotonic
    /// clock), or it refuses (`StartDeadlinePassed`, nothing changed). The call waits until
    /// then plus [`RESPAWN_WORK_BOUND`], what a begun respawn takes at most, so once it timed
    /// out, a holder of this version never begins the respawn later.
    pub fn respawn_by(&mut self, start_by_ms: u64) -> Result<InfoReply, HolderError> {
        let left = Duration::from_millis(start_by_ms.saturating_sub(super::protocol::monotonic_ms()));
        self.call("respawn", &Request::Respawn { start_by_ms: Some(start_by_ms) }, left + RESPAWN_WORK_BOUND)
    }

    /// Ends the child and the holder; returns the last facts the holder had.
    pub fn shutdown(mut self) -> Result<InfoReply, HolderError> {
        self.call(
            "shutdown",
            &Request::Shutdown,
            self.timeout + 2 * KILL_GRACE,
        )
    }

    /// Turns this connection into a push stream of output from `after` until the current
    /// child exits.
    pub fn subscribe(mut self, after: u64) -> Result<Subscription, HolderError> {
        let reply: SubscribeReply =
            self.call("subscribe", &Request::Subscribe { after }, self.timeout)?;
        let stream = self.reader.get_ref();
        stream
            .set_read_timeout(Some(SUBSCRIPTION_IDLE_TIMEOUT))
            .map_err(|e| io_failure("subscribe", e))?;
        Ok(Subscription {
            reader: self.reader,
            generation: reply.generation,
            ended: false,
        })
    }

    fn call<T: DeserializeOwned>(
        &mut self,
        op: &'static str,
        request: &Request,
        timeout: Duration,
    ) -> Result<T, HolderError> {
        if self.desynchronised {
            return Err(HolderError::NotSent {
                detail: "connection unusable after an earlier timeout or error".into(),
            });
        }
        let mut line = serde_json::to_vec(request).expect("requests serialise");
        // Callers bound what they send (prompts, input), but a line built from what an agent
        // wrote (an app-server request's id, echoed in its answer) once was not: an assertion
        // here ended the daemon. A request the holder would not read is refused, unsent.
        if line.len() > MAX_LINE_BYTES {
            return Err(HolderError::NotSent { detail: format!("a {op} request of {} bytes is over the holder's line limit ({MAX_LINE_BYTES}); nothing was sent", line.len()) });
        }
        // Until a reply is parsed, a failure leaves an unknown amount in flight.
        self.desynchronised = true;
        line.push(b'\n');
        let stream = self.reader.get_mut();
        // Two syscalls per call otherwise (a kept connection makes many calls of one kind).
        if self.socket_timeout != Some(timeout) {
            self.socket_timeout = None; // unknown until both are set
            stream
                .set_write_timeout(Some(timeout))
                .map_err(|e| io_failure(op, e))?;
            stream
                .set_read_timeout(Some(timeout))
                .map_err(|e| io_failure(op, e))?;
            self.socket_timeout = Some(timeout);
        }
        stream
            .write_all(&line)
            .map_err(|e| classify_io(op, timeout, e))?;
        let reply = read_message::<Reply>(&mut self.reader, op, timeout)?;
        self.desynchronised = false;
        into_result(reply)
    }
}

/// A subscribed connection. Yields `Output` events, then one `Exited`, then ends. Heartbeats
/// are consumed silently; a holder that sends nothing for three heartbeats yields `Timeout`.
pub struct Subscription {
    reader: BufReader<UnixStream>,
    generation: u64,
    ended: bool,
}

impl Subscription {
    /// The child generation whose exit ends this stream.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// A handle whose `shutdown(Both)` ends a blocked `next()` from another thread.
    pub fn stream_handle(&self) -> std::io::Result<UnixStream> {
        self.reader.get_ref().try_clone()
    }

    fn next_event(&mut self, deadline: Option<std::time::Instant>) -> Result<StreamEvent, HolderError> {
        let started = std::time::Instant::now();
        loop {
            let event = read_message::<StreamEvent>(
                &mut self.reader,
                "subscribe",
                SUBSCRIPTION_IDLE_TIMEOUT,
            )?;
            if !matches!(event, StreamEvent::Heartbeat { .. }) {
                return Ok(event);
            }
            // Heartbeats keep the read timeout from firing on a live, silent stream: the
            // caller's own bound is checked between them.
            if deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                return Err(HolderError::Timeout { op: "subscribe", after: started.elapsed() });
            }
        }
    }

    /// The next output or exit, or a `Timeout` error once `deadline` has passed with only
    /// heartbeats (checked at every heartbeat, 5 s apart at the
    /// latest). `next()` waits as long as the holder lives, which suits `attach`, not a caller
    /// with a bound.
    pub fn next_before(&mut self, deadline: std::time::Instant) -> Option<Result<StreamEvent, HolderError>> {
        if self.ended {
            return None;
        }
        let event = self.next_event(Some(deadline));
        self.ended = !matches!(event, Ok(StreamEvent::Output { .. }));
        Some(event)
    }
}

impl Iterator for Subscription {
    type Item = Result<StreamEvent, HolderError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.ended {
            return None;
        }
        let event = self.next_event(None);
        // After an error or `exited` nothing more can be trusted on this stream.
        self.ended = !matches!(event, Ok(StreamEvent::Output { .. }));
        Some(event)
    }
}

fn read_message<T: DeserializeOwned>(
    reader: &mut BufReader<UnixStream>,
    op: &'static str,
    timeout: Duration,
) -> Result<T, HolderError> {
    let line = match read_line_bounded(reader, MAX_LINE_BYTES) {
        Ok(Some(line)) => line,
        Ok(None) => {
            return Err(HolderError::PeerGone {
                op,
                detail: "connection closed".into(),
            })
        }
        Err(LineError::Truncated) => {
            return Err(HolderError::PeerGone {
                op,
                detail: "connection closed mid-line".into(),
            })
        }
        Err(LineError::TooLong) => {
            return Err(HolderError::Protocol {
                detail: format!("line exceeds {MAX_LINE_BYTES} bytes"),
            })
        }
        Err(LineError::Io(e)) => return Err(classify_io(op, timeout, e)),
    };
    serde_json::from_slice(&line).map_err(|e| HolderError::Protocol {
        detail: format!("{op}: {e}"),
    })
}

fn into_result<T: DeserializeOwned>(reply: Reply) -> Result<T, HolderError> {
    match (reply.ok, reply.result, reply.error) {
        (true, Some(value), None) => {
            serde_json::from_value(value).map_err(|e| HolderError::Protocol {
                detail: format!("result: {e}"),
            })
        }
        (false, None, Some(error)) => Err(HolderError::Remote {
            kind: error.kind,
            message: error.message,
        }),
        _ => Err(HolderError::Protocol {
            detail: "reply is neither a result nor an error".into(),
        }),
    }
}

fn classify_io(op: &'static str, timeout: Duration, e: std::io::Error) -> HolderError {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => HolderError::Timeout { op, after: timeout },
        ErrorKind::BrokenPipe
        | ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::UnexpectedEof => HolderError::PeerGone {
            op,
            detail: e.to_string(),
        },
        _ => io_failure(op, e),
    }
}

fn io_failure(op: &'static str, e: std::io::Error) -> HolderError {
    HolderError::PeerGone {
        op,
        detail: format!("i/o error: {e}"),
    }
}

/// Starts `exe` (whose entry point calls `run_holder`) for `cfg` and waits, bounded by
/// SPAWN_READY_DEADLINE, until the detached holder answers `info`.
pub fn spawn_holder(exe: &Path, cfg: &HolderConfig) -> Result<InfoReply, HolderError> {
    spawn_holder_with_args(exe, &[], cfg)
}

/// As [`spawn_holder`], with `leading_args` before the holder's own (e.g. `["__holder"]`).
pub fn spawn_holder_with_args(
    exe: &Path,
    leading_args: &[OsString],
    cfg: &HolderConfig,
) -> Result<InfoReply, HolderError> {
    assert!(
        cfg.detach,
        "spawn_holder starts a detached holder; its launcher exits at once"
    );
    cfg.validate()
        .map_err(|detail| HolderError::Spawn { detail })?;
    let deadline = Instant::now() + SPAWN_READY_DEADLINE;
    let mut launcher = Command::new(exe)
        .args(leading_args)
        .args(cfg.to_args())
        .envs(cfg.env.iter().map(|(key, value)| (key, value)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        // Out of the caller's process group even before the holder's own setsid.
        .process_group(0)
        .spawn()
        .map_err(|e| HolderError::Spawn {
            detail: format!("exec {}: {e}", exe.display()),
        })?;
    let status = wait_with_deadline(&mut launcher, deadline)?;
    if !status.success() {
        let mut stderr = String::new();
        if let Some(pipe) = launcher.stderr.take() {
            let _ = pipe
                .take(MAX_SPAWN_STDERR_BYTES)
                .read_to_string(&mut stderr);
        }
        return Err(HolderError::Spawn {
            detail: format!("launcher {status}: {}", stderr.trim()),
        });
    }
    // The launcher bound the socket before it forked, so connecting succeeds at once; the
    // holder answers as soon as its child is started.
    let left = deadline
        .saturating_duration_since(Instant::now())
        .max(Duration::from_millis(100));
    HolderClient::connect_with_timeout(&cfg.socket_path, left)?.info()
}

fn wait_with_deadline(
    child: &mut std::process::Child,
    deadline: Instant,
) -> Result<std::process::ExitStatus, HolderError> {
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ok(status),
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(HolderError::Spawn {
                    detail: "launcher did not exit in time".into(),
                });
            }
            // The launcher only binds and forks; a few ms is typical.
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => {
                return Err(HolderError::Spawn {
                    detail: format!("wait for launcher: {e}"),
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::unix::net::UnixListener;

    /// A request over the holder's line limit is refused unsent, an error and not a panic: a
    /// line built from what an agent wrote (an app-server request's id, echoed in its decline)
    /// hit the assertion this was and ended the daemon.
    #[test]
    fn a_request_over_the_line_limit_is_refused_unsent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let mut client = HolderClient::connect(&path).unwrap();
        let (server, _) = listener.accept().unwrap();
        let error = client.write(&vec![b'x'; MAX_LINE_BYTES]).unwrap_err();
        assert!(matches!(error, HolderError::NotSent { .. }), "{error}");
        server.set_nonblocking(true).unwrap();
        let mut byte = [0u8; 1];
        assert!(matches!(std::io::Read::read(&mut &server, &mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "nothing was sent");
        assert!(!client.unusable(), "the connection stays usable");
    }

    // Issue 10: a kept connection is checked with one non-blocking peek before a write reuses
    // it (no `info` round trip): open and quiet is usable; bytes nobody asked for, or a holder
    // that closed it, are not.
    #[test]
    fn a_closed_or_dirty_connection_is_unusable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let client = HolderClient::connect(&path).unwrap();
        let (mut server, _) = listener.accept().unwrap();
        assert!(!client.unusable(), "open and quiet");
        server.write_all(b"{").unwrap();
        assert!(client.unusable(), "bytes nobody asked for");
        let other = HolderClient::connect(&path).unwrap();
        let (server, _) = listener.accept().unwrap();
        assert!(!other.unusable());
        drop(server);
        assert!(other.unusable(), "the holder closed it");
    }

    /// SEC-1: a link planted at an agent's holder socket is never connected through (the
    /// daemon wrote prompts into, and restarted, another data directory's agent through one:
    /// a hostile run), and the refusal is no evidence of exit (LIVE-1); a file in the socket's
    /// way is what a connect there says, nobody listens (`live_1_a_holder_whose_socket_was_
    /// removed_never_doubles_the_agent` counts on it).
    #[test]
    fn sec_1_a_link_at_a_holder_socket_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let other = dir.path().join("other-agent.sock");
        let listener = UnixListener::bind(&other).unwrap();
        listener.set_nonblocking(true).unwrap();
        let planted = dir.path().join("h.sock");
        std::os::unix::fs::symlink(&other, &planted).unwrap();
        let error = HolderClient::connect(&planted).err().expect("a link is refused");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert!(!crate::daemon::agents::holder_is_gone(&error), "a link says nothing of the holder's exit");
        assert!(matches!(listener.accept(), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock), "nothing connected to the other agent's holder");
        let file = dir.path().join("f.sock");
        std::fs::write(&file, b"").unwrap();
        let error = HolderClient::connect(&file).err().expect("a regular file is refused");
        assert!(crate::daemon::agents::holder_is_gone(&error), "nobody listens there: {error}");
        assert!(HolderClient::connect(&other).is_ok(), "the socket itself is ours");
    }
}
