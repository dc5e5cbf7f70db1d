//! The holder's start: a private socket directory and socket, the detach (fork, setsid, stdio
//! to the bounded log beside the socket), and the process-wide settings a holder needs before
//! it serves (`server`).

use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};

/// The log beside the socket is cut to empty at start once it grows past this.
pub(super) const MAX_LOG_BYTES: u64 = 1024 * 1024;

/// Creates the socket's directory 0700, or checks that an existing one is ours and private.
pub(super) fn prepare_socket_dir(socket_path: &Path) -> Result<(), String> {
    let dir = socket_path
        .parent()
        .expect("validate() requires a directory part");
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    let meta =
        std::fs::symlink_metadata(dir).map_err(|e| format!("stat {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a directory", dir.display()));
    }
    let uid = rustix::process::geteuid().as_raw();
    if meta.uid() != uid || meta.mode() & 0o077 != 0 {
        return Err(format!(
            "{} must be owned by uid {uid} with mode 0700 (found uid {}, mode {:o})",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// Binds `path` 0600. A stale socket (nobody answering) is replaced; a live one is refused.
pub(super) fn bind_private_socket(path: &Path) -> Result<UnixListener, String> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        use std::os::unix::fs::FileTypeExt;
        if !meta.file_type().is_socket() {
            return Err(format!("{} exists and is not a socket", path.display()));
        }
        // Bounded: a live holder whose listen queue is full would block a plain connect for
        // good (SOCK-2's keeper asks under its socket's lock, which the holder's exit takes).
        if crate::client::connect_bounded(path, std::time::Duration::from_secs(1)).is_ok() {
            return Err(format!("another holder is serving {}", path.display()));
        }
        std::fs::remove_file(path).map_err(|e| format!("remove stale {}: {e}", path.display()))?;
    }
    let listener = UnixListener::bind(path).map_err(|e| format!("bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| format!("chmod {}: {e}", path.display()))?;
    Ok(listener)
}

pub(super) enum Side {
    Parent,
    Holder,
}

/// Forks; the child starts a new session (so the caller's process-group signals and terminal
/// hang-ups miss it) and sends stdio to the log beside the socket. The parent returns at once,
/// so the holder is reparented away from whoever started it.
pub(super) fn detach(socket_path: &Path) -> Result<Side, String> {
    let threads = thread_count().map_err(|e| format!("read /proc/self/status: {e}"))?;
    if threads != 1 {
        return Err(format!(
            "detaching needs a single-threaded process, found {threads} threads"
        ));
    }
    let log_file = open_log(socket_path)?;
    let dev_null = std::fs::File::open("/dev/null").map_err(|e| format!("open /dev/null: {e}"))?;
    // SAFETY: fork is unsound only when another thread could hold a lock (allocator, stdio)
    // the child then needs; this process was just checked to have a single thread, so the
    // child inherits no lock held mid-update and may run ordinary Rust code.
    match unsafe { nix::unistd::fork() } {
        Err(errno) => Err(format!("fork: {}", std::io::Error::from(errno))),
        Ok(nix::unistd::ForkResult::Child) => {
            // Failures leave the holder in the caller's session or with its stdio, as before:
            // neither stops it from serving.
            let _ = rustix::process::setsid();
            let _ = rustix::stdio::dup2_stdin(&dev_null);
            let _ = rustix::stdio::dup2_stdout(&log_file);
            let _ = rustix::stdio::dup2_stderr(&log_file);
            Ok(Side::Holder)
        }
        Ok(nix::unistd::ForkResult::Parent { .. }) => Ok(Side::Parent),
    }
}

/// SEC-1, SEC-3: the log is a private regular file of ours: a symbolic link or a FIFO put at
/// its path is refused at once (a plain open followed a link, and waited at a FIFO until the
/// daemon's bound killed the launcher: `agent restart` failed after 10 s).
pub(super) fn open_log(socket_path: &Path) -> Result<std::fs::File, String> {
    let path = log_path(socket_path);
    let too_big = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file() && m.len() > MAX_LOG_BYTES);
    let mut options = std::fs::OpenOptions::new();
    options.create(true).append(!too_big).write(true).truncate(too_big);
    crate::paths::open_private_file(&path, &mut options).map_err(|e| format!("open log {}: {e}", path.display()))
}

/// `<socket>.log`, beside the socket in the private directory.
pub fn log_path(socket_path: &Path) -> PathBuf {
    let mut name = socket_path.as_os_str().to_owned();
    name.push(".log");
    PathBuf::from(name)
}

/// The `Threads:` count of /proc/self/status.
pub(super) fn thread_count() -> procfs::ProcResult<u64> {
    Ok(procfs::process::Process::myself()?.status()?.threads)
}

/// The holder has no terminal; a stray SIGHUP (e.g. from the PTY it opens) must not end it.
/// Children get default dispositions back: portable-pty resets them before exec.
pub(super) fn ignore_terminal_signals() {
    use nix::sys::signal::{signal, SigHandler, Signal};
    for sig in [Signal::SIGHUP, Signal::SIGPIPE] {
        // SAFETY: nix marks `signal` as needing care because an installed handler must be
        // async-signal-safe and must not break the code it interrupts; SIG_IGN runs no code. Failure (not expected for
        // these two signals) leaves the default disposition, as before.
        let _ = unsafe { signal(sig, SigHandler::SigIgn) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_dir_is_created_private_and_open_dirs_are_refused() {
        let base = std::env::temp_dir().join(format!("holder-dir-{}", uuid::Uuid::new_v4()));
        let socket = base.join("inner").join("a.sock");
        prepare_socket_dir(&socket).unwrap();
        let mode = std::fs::metadata(socket.parent().unwrap()).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(
            socket.parent().unwrap(),
            std::fs::Permissions::from_mode(0o750),
        )
        .unwrap();
        assert!(prepare_socket_dir(&socket)
            .unwrap_err()
            .contains("mode 0700"));
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn live_socket_is_refused_and_stale_one_replaced() {
        let base = std::env::temp_dir().join(format!("holder-bind-{}", uuid::Uuid::new_v4()));
        let socket = base.join("a.sock");
        prepare_socket_dir(&socket).unwrap();
        let live = bind_private_socket(&socket).unwrap();
        assert_eq!(std::fs::metadata(&socket).unwrap().mode() & 0o777, 0o600);
        assert!(bind_private_socket(&socket)
            .unwrap_err()
            .contains("another holder"));
        drop(live);
        let again = bind_private_socket(&socket);
        assert!(
            again.is_ok(),
            "a socket nobody answers is stale: {:?}",
            again.err()
        );
        std::fs::remove_dir_all(&base).unwrap();
    }
}
