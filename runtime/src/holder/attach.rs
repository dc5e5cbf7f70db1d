//! `attach`: a person watches an agent's pane and types into it.

use std::io::Write;
use std::os::fd::BorrowedFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::termios::{self, OptionalActions, Termios};

use super::client::HolderClient;
use super::protocol::{ScreenReply, StreamEvent};

/// Ctrl-]: typing it detaches and leaves the agent running, as in telnet.
pub const DETACH_KEY: u8 = 0x1d;
/// Keyboard bytes forwarded per write.
const STDIN_CHUNK_BYTES: usize = 4096;
/// How often the keyboard loop looks up to notice that the agent exited.
const STDIN_POLL_INTERVAL: Duration = Duration::from_millis(200);

/// Attaches the current terminal to the holder at `socket_path` and returns an exit code
/// (0 after a detach or the agent's exit, 1 if the holder cannot be reached).
///
/// The local terminal goes into raw mode (restored on return, also when unwinding from a
/// panic), the current screen is drawn, then the agent's output streams to stdout and every
/// key goes to the agent. Press Ctrl-] ([`DETACH_KEY`]) to detach; the agent keeps running.
/// The local window size is sent to the agent once, at start. `attached` goes to stderr once
/// the holder answered and the stream is set up, never before (it was printed before the
/// connect, so an attach refused at once said "attached" first: a hostile run).
pub fn attach(socket_path: &Path, attached: &str) -> i32 {
    match attach_inner(socket_path, attached) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("wakterm attach: {e}");
            1
        }
    }
}

fn attach_inner(socket_path: &Path, attached: &str) -> Result<(), super::HolderError> {
    let mut control = HolderClient::connect(socket_path)?;
    if let Some((cols, rows)) = local_window_size() {
        // A size the holder refuses only leaves the old one in place: not worth aborting.
        let _ = control.resize(cols.max(super::protocol::MIN_COLS), rows.max(super::protocol::MIN_ROWS));
    }
    let screen = control.screen()?;
    let subscription = HolderClient::connect(socket_path)?.subscribe(screen.output_offset)?;
    let stream = subscription.stream_handle().ok();
    eprintln!("{attached}");
    let _raw = RawMode::enter(rustix::stdio::stdin());
    draw_screen(&screen);
    let ended = Arc::new(AtomicBool::new(false));
    let ended_by_output = Arc::clone(&ended);
    // Set before we close the stream ourselves (Ctrl-], or the end of our input): its end is
    // then ours, not news. It was reported as "holder went away during subscribe".
    let detaching = Arc::new(AtomicBool::new(false));
    let detached = Arc::clone(&detaching);
    let printer = std::thread::spawn(move || {
        print_stream(subscription, &detached);
        ended_by_output.store(true, Ordering::SeqCst);
    });
    let typed = forward_keys(&mut control, &ended);
    detaching.store(true, Ordering::SeqCst);
    if let Some(stream) = stream {
        let _ = stream.shutdown(std::net::Shutdown::Both);
    }
    let _ = printer.join();
    typed
}

fn draw_screen(screen: &ScreenReply) {
    let mut out = std::io::stdout().lock();
    let _ = write!(out, "\x1b[H\x1b[2J{}", screen.lines.join("\r\n"));
    let _ = write!(
        out,
        "\x1b[{};{}H",
        screen.cursor.row + 1,
        screen.cursor.col + 1
    );
    let _ = out.flush();
}

fn print_stream(subscription: super::Subscription, detaching: &AtomicBool) {
    for event in subscription {
        let mut out = std::io::stdout().lock();
        match event {
            Ok(StreamEvent::Output { data, .. }) => {
                let _ = out.write_all(&data);
            }
            Ok(StreamEvent::Exited { exit_code }) => {
                let _ = write!(out, "\r\n[wakterm: agent exited, code {exit_code:?}]\r\n");
            }
            Ok(StreamEvent::Heartbeat { .. }) => {}
            Err(_) if detaching.load(Ordering::SeqCst) => {}
            Err(e) => {
                let _ = write!(out, "\r\n[wakterm: stream ended: {e}]\r\n");
            }
        }
        let _ = out.flush();
    }
}

/// Sends keyboard bytes until Ctrl-], end of input, or the agent's exit.
fn forward_keys(control: &mut HolderClient, ended: &AtomicBool) -> Result<(), super::HolderError> {
    let stdin = rustix::stdio::stdin();
    let interval =
        Timespec::try_from(STDIN_POLL_INTERVAL).expect("a short interval fits a timespec");
    let mut buf = [0u8; STDIN_CHUNK_BYTES];
    while !ended.load(Ordering::SeqCst) {
        let mut pfd = [PollFd::from_borrowed_fd(stdin, PollFlags::IN)];
        // Timeout or an error such as EINTR: look at `ended` again.
        if !matches!(rustix::event::poll(&mut pfd, Some(&interval)), Ok(ready) if ready > 0) {
            continue;
        }
        // End of input or a read error ends the session, as before.
        let n = match rustix::io::read(stdin, &mut buf) {
            Ok(n) if n > 0 => n,
            _ => return Ok(()),
        };
        let keys = &buf[..n];
        let (send, detach) = match keys.iter().position(|b| *b == DETACH_KEY) {
            Some(i) => (&keys[..i], true),
            None => (keys, false),
        };
        if !send.is_empty() {
            let outcome = control.write(send)?;
            if let Some(error) = outcome.error {
                eprint!(
                    "\r\n[wakterm: write failed after {} bytes: {error}]\r\n",
                    outcome.bytes_written
                );
                return Ok(());
            }
        }
        if detach {
            eprint!("\r\n[wakterm: detached]\r\n");
            return Ok(());
        }
    }
    Ok(())
}

fn local_window_size() -> Option<(u16, u16)> {
    let size = termios::tcgetwinsize(rustix::stdio::stdout()).ok()?;
    (size.ws_col > 0 && size.ws_row > 0).then_some((size.ws_col, size.ws_row))
}

/// Raw mode on a terminal fd for as long as this lives; a no-op when the fd is no terminal.
struct RawMode {
    fd: BorrowedFd<'static>,
    saved: Option<Termios>,
}

impl RawMode {
    fn enter(fd: BorrowedFd<'static>) -> RawMode {
        let Some(saved) = termios::isatty(fd)
            .then(|| termios::tcgetattr(fd).ok())
            .flatten()
        else {
            return RawMode { fd, saved: None };
        };
        let mut raw = saved.clone();
        raw.make_raw();
        if termios::tcsetattr(fd, OptionalActions::Now, &raw).is_err() {
            return RawMode { fd, saved: None };
        }
        RawMode {
            fd,
            saved: Some(saved),
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = &self.saved {
            let _ = termios::tcsetattr(self.fd, OptionalActions::Now, saved);
        }
    }
}
