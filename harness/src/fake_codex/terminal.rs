//! The few terminal system calls the fake TUI needs: raw mode, poll, read, window size.

use std::io;
use std::os::fd::RawFd;

/// Turns bracketed paste on; the real Codex does the same at start-up.
pub const ENABLE_BRACKETED_PASTE: &[u8] = b"\x1b[?2004h";
pub const DISABLE_BRACKETED_PASTE: &[u8] = b"\x1b[?2004l";

/// Puts a tty in raw mode and restores the saved settings when dropped, so a normal exit,
/// an early return or a panic all leave the terminal usable.
pub struct RawMode {
    fd: RawFd,
    saved: libc::termios,
}

impl RawMode {
    /// Returns Ok(None) when `fd` is not a terminal (e.g. a pipe in a scripted run).
    pub fn enable(fd: RawFd) -> io::Result<Option<RawMode>> {
        // SAFETY: isatty only inspects the descriptor.
        if unsafe { libc::isatty(fd) } != 1 {
            return Ok(None);
        }
        // SAFETY: termios is plain old data; tcgetattr fills it or fails.
        let mut saved: libc::termios = unsafe { std::mem::zeroed() };
        if unsafe { libc::tcgetattr(fd, &mut saved) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut raw = saved;
        // SAFETY: cfmakeraw only edits the struct we own.
        unsafe { libc::cfmakeraw(&mut raw) };
        if unsafe { libc::tcsetattr(fd, libc::TCSANOW, &raw) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Some(RawMode { fd, saved }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: restoring settings read from the same descriptor; failure is harmless here.
        unsafe { libc::tcsetattr(self.fd, libc::TCSANOW, &self.saved) };
    }
}

/// Waits up to `timeout_ms` for `fd` to become readable (or hung up).
pub fn wait_readable(fd: RawFd, timeout_ms: u64) -> io::Result<bool> {
    let mut pollfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let timeout = i32::try_from(timeout_ms).unwrap_or(i32::MAX);
    // SAFETY: one valid pollfd for the duration of the call.
    let ready = unsafe { libc::poll(&mut pollfd, 1, timeout) };
    match ready {
        -1 => {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                Ok(false)
            } else {
                Err(error)
            }
        }
        0 => Ok(false),
        _ => Ok(true),
    }
}

/// One `read()` into `buf`; Ok(0) means end of input (the terminal went away).
pub fn read_some(fd: RawFd, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: buf is valid for buf.len() bytes.
        let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            let n = n as usize;
            assert!(n <= buf.len());
            return Ok(n);
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::Interrupted => continue,
            // A closed PTY reads as EIO on Linux: treat it as end of input.
            _ if error.raw_os_error() == Some(libc::EIO) => return Ok(0),
            _ => return Err(error),
        }
    }
}

/// (rows, cols) of the terminal on `fd`, if it is one.
pub fn window_size(fd: RawFd) -> Option<(u16, u16)> {
    // SAFETY: winsize is plain old data filled by the ioctl.
    let mut size: libc::winsize = unsafe { std::mem::zeroed() };
    let ok = unsafe { libc::ioctl(fd, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_row > 0 && size.ws_col > 0).then_some((size.ws_row, size.ws_col))
}

/// Ends this process the way a crash does: no cleanup, no exit code of our choosing.
pub fn crash_now() -> ! {
    // SAFETY: signalling ourselves; SIGKILL cannot be caught, so this does not return.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
    std::process::abort()
}
