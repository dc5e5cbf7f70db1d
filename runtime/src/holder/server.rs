//! The holder process serving: the accept loop and one thread per connection. The start
//! (private socket directory and socket, the detach, process settings) is in `daemonize`.

use std::io::{BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::pane::Pane;
use super::protocol::{
    read_line_bounded, KillReply, LineError, Reply, Request, StreamEvent, SubscribeReply,
    WireError, WireErrorKind, MAX_COLS, MAX_LINE_BYTES, MAX_OUTPUT_PAGE_BYTES, MAX_ROWS,
    MAX_STREAM_CHUNK_BYTES, MAX_WRITE_BYTES, MAX_INFO_WAIT_MS, MAX_STEP_GAP_MS, MAX_WRITE_STEPS,
};
use super::daemonize::{bind_private_socket, detach, ignore_terminal_signals, prepare_socket_dir, Side};
use super::HolderConfig;

/// After the agent exits the holder keeps answering this long, so a daemon that restarts in
/// the meantime still learns the exit code; then it removes its socket and exits.
pub const CHILD_EXIT_LINGER: Duration = Duration::from_secs(10 * 60);
/// Concurrent connections served; more are answered `busy` and closed.
pub const MAX_CONNECTIONS: usize = 64;
/// A subscribed connection with nothing to send gets a heartbeat this often.
pub const STREAM_HEARTBEAT: Duration = Duration::from_secs(5);
/// A connection that sends no request for this long is closed, freeing its slot.
const CONNECTION_IDLE_TIMEOUT: Duration = Duration::from_secs(10 * 60);
/// A new connection must send its first request within this (CONN-2's rule for the daemon):
/// 64 sockets opened and left silent held every slot for `CONNECTION_IDLE_TIMEOUT`, and a
/// restarted daemon's probes were answered `busy` (a review reproduced it).
pub const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// A client that does not take a reply within this is dropped, so it cannot stall the holder.
const REPLY_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Runs a holder for `cfg` and returns the process exit code: 0 in the parent after a
/// successful detach (the holder lives on in a forked child), 1 on a setup failure, 2 on a
/// bad config. The detached holder itself never returns: it exits after `shutdown` or the
/// linger. Must be called before the process starts any thread, because it forks.
pub fn run_holder(cfg: HolderConfig) -> i32 {
    if let Err(e) = cfg.validate() {
        eprintln!("wakterm-holder: bad config: {e}");
        return 2;
    }
    let listener = match prepare_socket_dir(&cfg.socket_path)
        .and_then(|()| bind_private_socket(&cfg.socket_path))
    {
        Ok(listener) => listener,
        Err(e) => {
            eprintln!("wakterm-holder: {e}");
            return 1;
        }
    };
    if cfg.detach {
        match detach(&cfg.socket_path) {
            Ok(Side::Parent) => return 0,
            Ok(Side::Holder) => {}
            Err(e) => {
                eprintln!("wakterm-holder: detach: {e}");
                let _ = std::fs::remove_file(&cfg.socket_path);
                return 1;
            }
        }
    }
    ignore_terminal_signals();
    crate::logging::init_holder();
    serve(cfg, listener)
}

fn serve(cfg: HolderConfig, listener: UnixListener) -> i32 {
    let socket = SocketOwnership::take(&cfg.socket_path);
    let pane = match Pane::open(&cfg) {
        Ok(pane) => pane,
        Err(e) => {
            log(&format!("cannot open pty: {}", e.0));
            socket.remove();
            return 1;
        }
    };
    pane.start_reader();
    pane.spawn_child(0);
    log(&format!(
        "serving {} for {:?}, child pid {:?}",
        cfg.socket_path.display(),
        cfg.command,
        pane.info().pid
    ));
    let socket = Arc::new(socket);
    start_linger_watch(Arc::clone(&pane), Arc::clone(&socket));
    let open = Arc::new(AtomicUsize::new(0));
    start_socket_keeper(Arc::clone(&pane), Arc::clone(&socket), Arc::clone(&open));
    accept_loop(listener, &pane, &socket, &open)
}

/// Serves every connection `listener` accepts, for good.
fn accept_loop(listener: UnixListener, pane: &Arc<Pane>, socket: &Arc<SocketOwnership>, open: &Arc<AtomicUsize>) -> ! {
    let uid = rustix::process::geteuid().as_raw();
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => accept(stream, uid, pane, socket, open),
            // EMFILE and friends: back off briefly instead of spinning on the error.
            Err(e) => {
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    unreachable!("UnixListener::incoming never ends");
}

/// SOCK-2: how often the holder checks that its socket's path still names its socket.
const SOCKET_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// LIVE-1, SOCK-2: how long a daemon's first probes of an agent take nobody listening at the
/// holder's socket for unknown, not an exit: the holder binds a removed socket again at its
/// next check (three checks' worth).
pub const REBIND_GRACE: Duration = Duration::from_secs(3 * SOCKET_CHECK_INTERVAL.as_secs());

/// SOCK-2: a holder's socket removed under it (a cleaner of old files in a temporary
/// directory, a careless `rm`) left its agent unreachable for good: the daemon could only say
/// its liveness is unknown (LIVE-1) until `agent restart` ended the holder and the process in
/// it. This thread binds the socket again (its directory made again, 0700) and serves the new
/// listener beside the old one, whose path nobody can reach. A path taken by another live
/// holder, or by something not a socket, is left alone.
fn start_socket_keeper(pane: Arc<Pane>, socket: Arc<SocketOwnership>, open: Arc<AtomicUsize>) {
    let spawned = std::thread::Builder::new().name("holder-socket-keeper".into()).spawn(move || {
        let mut failing = false;
        while !socket.closing.load(Ordering::SeqCst) {
            std::thread::sleep(SOCKET_CHECK_INTERVAL);
            match socket.bind_again_if_gone() {
                Ok(None) => failing = false,
                Ok(Some(listener)) => {
                    failing = false;
                    log("the socket was removed or replaced: bound again");
                    let serving = (Arc::clone(&pane), Arc::clone(&socket), Arc::clone(&open));
                    let served = std::thread::Builder::new()
                        .name("holder-accept".into())
                        .spawn(move || accept_loop(listener, &serving.0, &serving.1, &serving.2));
                    if let Err(e) = served {
                        // Its listener is gone with the closure: forget it, so the next check
                        // binds again (else the path would name it, and nobody listen, for good).
                        log(&format!("cannot serve the socket bound again (tried again in a second): {e}"));
                        socket.forget_bound();
                    }
                }
                Err(e) if !std::mem::replace(&mut failing, true) => log(&format!("the socket is gone and cannot be bound again yet (tried every second): {e}")),
                Err(_) => {}
            }
        }
    });
    if let Err(e) = spawned {
        log(&format!("cannot start the socket keeper: {e}"));
    }
}

fn accept(
    stream: UnixStream,
    uid: u32,
    pane: &Arc<Pane>,
    socket: &Arc<SocketOwnership>,
    open: &Arc<AtomicUsize>,
) {
    match peer_uid(&stream) {
        Ok(peer) if peer == uid => {}
        Ok(peer) => return log(&format!("refused a peer with uid {peer}")),
        Err(e) => return log(&format!("SO_PEERCRED: {e}")),
    }
    let _ = stream.set_write_timeout(Some(REPLY_WRITE_TIMEOUT));
    if open.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        open.fetch_sub(1, Ordering::SeqCst);
        let mut stream = stream;
        let _ = send(
            &mut stream,
            &failure(
                WireErrorKind::Busy,
                format!("at most {MAX_CONNECTIONS} connections"),
            ),
        );
        return;
    }
    // The slot is given back when the guard drops: when the connection ends, when its thread
    // unwinds from a panic, or when the thread could not start (each once leaked the slot, and
    // 64 leaks made the holder answer every request, `shutdown` too, with `busy`).
    let slot = ConnectionSlot(Arc::clone(open));
    let (pane, socket) = (Arc::clone(pane), Arc::clone(socket));
    let spawned = std::thread::Builder::new()
        .name("holder-conn".into())
        .spawn(move || {
            let _slot = slot;
            serve_connection(stream, &pane, &socket);
        });
    if let Err(e) = spawned {
        log(&format!("cannot start a connection thread: {e}"));
    }
}

/// HOLD-1: the connection's reads, bounded by a deadline for the whole first request line (a
/// per-read timeout let a client trickling a byte at a time keep its slot for good).
struct LineDeadline {
    stream: UnixStream,
    deadline: Option<std::time::Instant>,
}

impl std::io::Read for LineDeadline {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "no whole first request in time"));
            }
            self.stream.set_read_timeout(Some(left))?;
        }
        std::io::Read::read(&mut self.stream, buf)
    }
}

/// One of the `MAX_CONNECTIONS` slots, held by a connection's thread.
struct ConnectionSlot(Arc<AtomicUsize>);

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn serve_connection(stream: UnixStream, pane: &Arc<Pane>, socket: &SocketOwnership) {
    let Ok(mut writer) = stream.try_clone() else {
        return;
    };
    let first_by = std::time::Instant::now() + FIRST_REQUEST_TIMEOUT;
    let mut reader = BufReader::new(LineDeadline { stream, deadline: Some(first_by) });
    loop {
        let line = match read_line_bounded(&mut reader, MAX_LINE_BYTES) {
            Ok(Some(line)) if reader.get_ref().deadline.is_some() => {
                reader.get_mut().deadline = None;
                let _ = reader.get_ref().stream.set_read_timeout(Some(CONNECTION_IDLE_TIMEOUT));
                line
            }
            Ok(Some(line)) => line,
            Ok(None) | Err(LineError::Io(_)) | Err(LineError::Truncated) => return,
            Err(LineError::TooLong) => {
                // The rest of the line is still unread, so request boundaries are lost: close.
                let _ = send(
                    &mut writer,
                    &failure(
                        WireErrorKind::TooLarge,
                        format!("line exceeds {MAX_LINE_BYTES} bytes"),
                    ),
                );
                return;
            }
        };
        pane.requests.fetch_add(1, Ordering::SeqCst);
        let request = match serde_json::from_slice::<Request>(&line) {
            Ok(request) => request,
            Err(e) => {
                if send(
                    &mut writer,
                    &failure(WireErrorKind::BadRequest, format!("not a request: {e}")),
                )
                .is_err()
                {
                    return;
                }
                continue;
            }
        };
        match request {
            Request::Subscribe { after } => return stream_output(pane, &mut writer, after),
            Request::Shutdown => shutdown(pane, &mut writer, socket),
            other => {
                if send(&mut writer, &answer(pane, other)).is_err() {
                    return;
                }
            }
        }
    }
}

/// Answers every request that keeps the connection in request/reply mode.
fn answer(pane: &Arc<Pane>, request: Request) -> Reply {
    match request {
        Request::Info => success(&pane.info()),
        Request::InfoChanged { timeout_ms, .. } if timeout_ms == 0 || timeout_ms > MAX_INFO_WAIT_MS => failure(
            WireErrorKind::BadRequest,
            format!("timeout_ms must be 1..={MAX_INFO_WAIT_MS}"),
        ),
        Request::InfoChanged { generation, alive, timeout_ms, output_end, enter_after } => {
            // LIVE-2: the pane's condition variable wakes this on every child change (and on
            // output, and on another writer's Enter, ADM-19).
            let deadline = Instant::now() + Duration::from_millis(timeout_ms);
            let state = pane.lock();
            let output_moved = |s: &super::pane::PaneState| output_end.is_some_and(|end| s.ring.end() != end);
            let entered = |s: &super::pane::PaneState| enter_after.is_some_and(|after| s.other_enter_ms.is_some_and(|at| at > after));
            // A call that does not watch the output is not woken by each chunk of it.
            let on = if output_end.is_some() { &pane.changed } else { &pane.child_or_enter };
            drop(pane.wait_on(on, state, deadline, |s| s.generation != generation || s.child.alive != alive || output_moved(s) || entered(s)));
            success(&pane.info())
        }
        Request::Write { data, .. } if data.len() > MAX_WRITE_BYTES => failure(
            WireErrorKind::TooLarge,
            format!("write payload exceeds {MAX_WRITE_BYTES} bytes"),
        ),
        Request::Write { data, expect, start_by_ms } => success(&pane.write_to(&data, expect, start_by_ms)),
        Request::WriteSteps { steps, gap_ms, .. }
            if steps.is_empty() || steps.len() > MAX_WRITE_STEPS || gap_ms > MAX_STEP_GAP_MS || steps.iter().any(Vec::is_empty) =>
        {
            failure(WireErrorKind::BadRequest, format!("write_steps needs 1..={MAX_WRITE_STEPS} non-empty steps and a gap of at most {MAX_STEP_GAP_MS} ms"))
        }
        Request::WriteSteps { steps, .. } if steps.iter().map(Vec::len).sum::<usize>() > MAX_WRITE_BYTES => {
            failure(WireErrorKind::TooLarge, format!("write_steps payload exceeds {MAX_WRITE_BYTES} bytes"))
        }
        Request::WriteSteps { steps, gap_ms, expect, start_by_ms } => success(&pane.write_steps(&steps, Duration::from_millis(gap_ms), expect, start_by_ms)),
        Request::Screen { with_info: false } => success(&pane.screen()),
        Request::Screen { with_info: true } => success(&pane.screen_with_info()),
        Request::Output { after, max } => {
            let max = max.min(MAX_OUTPUT_PAGE_BYTES as u64) as usize;
            match pane.lock().ring.read(after, max) {
                Ok(slice) => success(&super::protocol::OutputPage {
                    data: slice.data,
                    start: slice.start,
                    end: slice.end,
                    truncated: slice.truncated,
                }),
                Err(beyond) => failure(
                    WireErrorKind::BadRequest,
                    format!("after {after} is beyond the output end {}", beyond.end),
                ),
            }
        }
        Request::Resize { cols, rows }
            if !(super::protocol::MIN_COLS..=MAX_COLS).contains(&cols) || !(super::protocol::MIN_ROWS..=MAX_ROWS).contains(&rows) =>
        {
            failure(
                WireErrorKind::BadRequest,
                format!("size must be {}..={MAX_COLS} cols and {}..={MAX_ROWS} rows", super::protocol::MIN_COLS, super::protocol::MIN_ROWS),
            )
        }
        Request::Resize { cols, rows } => match pane.resize(cols, rows) {
            Ok(()) => success(&serde_json::json!({})),
            Err(e) => failure(WireErrorKind::Internal, e.0),
        },
        Request::Kill { signal } if !(1..=64).contains(&signal) => failure(
            WireErrorKind::BadRequest,
            format!("signal {signal} is not 1..=64"),
        ),
        Request::Kill { signal } => match pane.signal(signal) {
            Ok(pid) => success(&KillReply { pid, signal }),
            Err(e) => failure(WireErrorKind::NotAlive, e.0),
        },
        Request::Respawn { start_by_ms } => match pane.respawn(start_by_ms) {
            Ok(_) => success(&pane.info()),
            Err(super::pane::RespawnError::Late(message)) => failure(WireErrorKind::StartDeadlinePassed, message),
            Err(super::pane::RespawnError::Failed(e)) => failure(WireErrorKind::Internal, e.0),
        },
        Request::Subscribe { .. } | Request::Shutdown => {
            unreachable!("serve_connection handles subscribe and shutdown itself")
        }
    }
}

/// Pushes output from `after` as it arrives until the subscribed generation's child exits.
/// Waits on the pane's condition variable: no polling, a heartbeat only when idle.
fn stream_output(pane: &Arc<Pane>, writer: &mut UnixStream, after: u64) {
    let state = pane.lock();
    if after > state.ring.end() {
        let end = state.ring.end();
        drop(state);
        let _ = send(
            writer,
            &failure(
                WireErrorKind::BadRequest,
                format!("after {after} is beyond the output end {end}"),
            ),
        );
        return;
    }
    let generation = state.generation;
    drop(state);
    if send(writer, &success(&SubscribeReply { generation })).is_err() {
        return;
    }
    let mut next = after;
    loop {
        let state = pane.lock();
        let deadline = Instant::now() + STREAM_HEARTBEAT;
        let state = pane.wait_until(state, deadline, |s| {
            s.ring.end() > next || s.exit_of(generation).is_some()
        });
        // Output the subscribed child wrote before its exit goes out before `exited`; output
        // of a later generation does not belong to this stream.
        let exit = state.exit_of(generation);
        let limit = exit.map_or(state.ring.end(), |e| e.output_end.min(state.ring.end()));
        let event = if limit > next {
            let slice = state
                .ring
                .read(next, MAX_STREAM_CHUNK_BYTES.min((limit - next) as usize))
                .expect("next never passes the ring end");
            assert!(slice.end > next || slice.truncated);
            next = slice.end;
            StreamEvent::Output {
                offset: slice.start,
                data: slice.data,
                truncated: slice.truncated,
            }
        } else if let Some(exit) = exit {
            StreamEvent::Exited {
                exit_code: exit.exit_code,
            }
        } else {
            StreamEvent::Heartbeat {
                output_end: state.ring.end(),
            }
        };
        drop(state);
        let last = matches!(event, StreamEvent::Exited { .. });
        if send_line(writer, &event).is_err() || last {
            return;
        }
    }
}

fn shutdown(pane: &Arc<Pane>, writer: &mut UnixStream, socket: &SocketOwnership) -> ! {
    let result = pane.terminate_for_shutdown();
    log(&format!(
        "shutdown requested; child ended: {:?}",
        result.as_ref().map_err(|e| &e.0)
    ));
    // Remove the socket before replying, so a caller that sees the reply sees no socket.
    socket.remove();
    let reply = match result {
        Ok(()) => success(&pane.info()),
        Err(e) => failure(WireErrorKind::Internal, e.0),
    };
    let _ = send(writer, &reply);
    let _ = writer.shutdown(std::net::Shutdown::Both);
    std::process::exit(0)
}

/// Exits the holder once the child has been dead for CHILD_EXIT_LINGER.
fn start_linger_watch(pane: Arc<Pane>, socket: Arc<SocketOwnership>) {
    let spawned = std::thread::Builder::new()
        .name("holder-linger".into())
        .spawn(move || loop {
            let state = pane.lock();
            let deadline = match state.ended_at {
                Some(ended) => ended + CHILD_EXIT_LINGER,
                None => Instant::now() + CHILD_EXIT_LINGER,
            };
            if Instant::now() >= deadline {
                log("child ended and the linger elapsed; exiting");
                socket.remove();
                std::process::exit(0);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            drop(pane.child_changed.wait_timeout(state, left));
        });
    spawned.expect("spawning the linger thread");
}

fn success<T: serde::Serialize>(result: &T) -> Reply {
    let value = serde_json::to_value(result).expect("reply types serialise");
    Reply {
        ok: true,
        result: Some(value),
        error: None,
    }
}

fn failure(kind: WireErrorKind, message: String) -> Reply {
    Reply {
        ok: false,
        result: None,
        error: Some(WireError { kind, message }),
    }
}

fn send(writer: &mut UnixStream, reply: &Reply) -> std::io::Result<()> {
    send_line(writer, reply)
}

fn send_line<T: serde::Serialize>(writer: &mut UnixStream, message: &T) -> std::io::Result<()> {
    let mut line = serde_json::to_vec(message).expect("wire types serialise");
    if line.len() > MAX_LINE_BYTES {
        // Screens are bounded (`pane::MAX_SCREEN_BYTES`); should anything else outgrow the
        // line, the client gets an error it can read, never a panic that ends this thread.
        let detail = format!("the reply is {} bytes, over the line limit {MAX_LINE_BYTES}", line.len());
        line = serde_json::to_vec(&failure(WireErrorKind::TooLarge, detail)).expect("wire types serialise");
    }
    line.push(b'\n');
    writer.write_all(&line)
}

/// The socket file this holder bound, identified by device and inode so that we never remove
/// a socket a newer holder bound at the same path.
struct SocketOwnership {
    path: PathBuf,
    /// The identity of the socket bound last (SOCK-2 binds it again when it goes).
    bound: Mutex<Option<crate::paths::FileIdentity>>,
    /// Set once the holder removes its socket to exit: nothing binds it again after.
    closing: AtomicBool,
}

impl SocketOwnership {
    fn take(path: &Path) -> Self {
        let bound = crate::paths::path_identity(path).ok();
        SocketOwnership {
            path: path.to_path_buf(),
            bound: Mutex::new(bound),
            closing: AtomicBool::new(false),
        }
    }

    fn remove(&self) {
        self.closing.store(true, Ordering::SeqCst);
        self.remove_if_still(&self.bound.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// SOCK-2: the socket bound last is not served: its file goes (if still ours), and the
    /// next check binds the path again.
    fn forget_bound(&self) {
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        self.remove_if_still(&bound);
        *bound = None;
    }

    /// Removes the socket file while the path still names `bound` (never a newer holder's).
    fn remove_if_still(&self, bound: &Option<crate::paths::FileIdentity>) {
        if self.names(bound) {
            let _ = std::fs::remove_file(&self.path);
        }
    }

    /// Whether the path names `bound` (something, and that).
    fn names(&self, bound: &Option<crate::paths::FileIdentity>) -> bool {
        let current = crate::paths::path_identity(&self.path).ok();
        current.is_some() && current == *bound
    }

    /// SOCK-2: a listener at the path again when the path no longer names the socket bound
    /// last; None while it does (or the holder is closing).
    fn bind_again_if_gone(&self) -> Result<Option<UnixListener>, String> {
        let mut bound = self.bound.lock().unwrap_or_else(|p| p.into_inner());
        if self.closing.load(Ordering::SeqCst) || self.names(&bound) {
            return Ok(None);
        }
        prepare_socket_dir(&self.path)?;
        let listener = bind_private_socket(&self.path)?;
        *bound = crate::paths::path_identity(&self.path).ok();
        Ok(Some(listener))
    }
}

/// The peer's uid from SO_PEERCRED.
fn peer_uid(socket: impl AsFd) -> std::io::Result<u32> {
    Ok(rustix::net::sockopt::socket_peercred(socket)?.uid.as_raw())
}

/// LOG-1: one holder event (the subscriber stamps the time; the pid names the holder).
fn log(message: &str) {
    tracing::info!(holder_pid = std::process::id(), "{message}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_uid_is_our_uid_on_a_socketpair() {
        let (a, _b) = UnixStream::pair().unwrap();
        assert_eq!(peer_uid(&a).unwrap(), rustix::process::geteuid().as_raw());
    }
}
