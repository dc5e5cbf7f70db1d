//! The few terminal system calls the fake TUI needs: raw mode, poll, read, window size.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::termios::{self, OptionalActions, Termios};

/// Turns bracketed paste on; the real Codex does the same at start-up.
pub const ENABLE_BRACKETED_PASTE: &[u8] = b"\x1b[?2004h";
pub const DISABLE_BRACKETED_PASTE: &[u8] = b"\x1b[?2004l";

/// Puts a tty in raw mode and restores the saved settings when dropped, so a normal exit,
/// an early return or a panic all leave the terminal usable.
pub struct RawMode {
    fd: BorrowedFd<'static>,
    saved: Termios,
}

impl RawMode {
    /// Returns Ok(None) when `fd` is not a terminal (e.g. a pipe in a scripted run).
    pub fn enable(fd: BorrowedFd<'static>) -> io::Result<Option<RawMode>> {
        if !termios::isatty(fd) {
            return Ok(None);
        }
        let saved = termios::tcgetattr(fd)?;
        let mut raw = saved.clone();
        raw.make_raw();
        termios::tcsetattr(fd, OptionalActions::Now, &raw)?;
        Ok(Some(RawMode { fd, saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // Restoring settings read from the same descriptor; failure is harmless here.
        let _ = termios::tcsetattr(self.fd, OptionalActions::Now, &self.saved);
    }
}

/// Waits up to `timeout_ms` for `fd` to become readable (or hung up).
pub fn wait_readable(fd: BorrowedFd<'_>, timeout_ms: u64) -> io::Result<bool> {
    let timeout = Timespec::try_from(Duration::from_millis(timeout_ms.min(i32::MAX as u64)))
        .expect("at most i32::MAX milliseconds fits a timespec");
    let mut pollfd = [PollFd::from_borrowed_fd(fd, PollFlags::IN)];
    match rustix::event::poll(&mut pollfd, Some(&timeout)) {
        Ok(ready) => Ok(ready > 0),
        Err(Errno::INTR) => Ok(false),
        Err(error) => Err(error.into()),
    }
}

/// One `read()` into `buf`; Ok(0) means end of input (the terminal went away).
pub fn read_some(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        match rustix::io::read(fd, &mut *buf) {
            Ok(n) => {
                assert!(n <= buf.len());
                return Ok(n);
            }
            Err(Errno::INTR) => continue,
            // A closed PTY reads as EIO on Linux: treat it as end of input.
            Err(Errno::IO) => return Ok(0),
            Err(error) => return Err(error.into()),
        }
    }
}

/// (rows, cols) of the terminal on `fd`, if it is one.
pub fn window_size(fd: BorrowedFd<'_>) -> Option<(u16, u16)> {
    let size = termios::tcgetwinsize(fd).ok()?;
    (size.ws_row > 0 && size.ws_col > 0).then_some((size.ws_row, size.ws_col))
}

/// Ends this process the way a crash does: no cleanup, no exit code of our choosing.
pub fn crash_now() -> ! {
    // SIGKILL cannot be caught, so this does not return.
    let _ = rustix::process::kill_process(rustix::process::getpid(), rustix::process::Signal::KILL);
    std::process::abort()
}
