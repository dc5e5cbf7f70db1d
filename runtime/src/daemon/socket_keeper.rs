//! SOCK-1: the daemon keeps its control socket reachable. The socket, and the run directory
//! holding it and the lock file, can be removed under a running daemon (a cleaner of old files
//! in a temporary directory, a careless `rm`): the daemon then ran on, its agents with it, but
//! no client could reach it, `mux stop` could not stop it and `mux start` refused to start
//! another. Every second the daemon checks, off the reactor, that the socket's path still names
//! the socket it listens on; when it does not, it makes the run directory again (0700), takes
//! the lock file again if it went too (LOCK-1) and binds the socket again.

use std::fs::File;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::time::Duration;

use crate::paths::DataPaths;

/// How often the socket's path is checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A file's identity: (device, inode).
type Identity = (u64, u64);

/// The socket this daemon listens on, and what it knows of its run directory.
pub struct Bound {
    pub listener: tokio::net::UnixListener,
    socket: Identity,
    /// The lock file this daemon holds (LOCK-1): the one it started with, or the one it took
    /// again after the run directory was removed.
    lock: Identity,
    relocked: Option<File>,
}

/// Why the socket could not be kept.
enum Lost {
    /// Another process holds a new lock file: another daemon serves the directory now.
    ToAnotherDaemon(String),
    /// Nothing to do but try again on the next check (a full disk, a directory in the way).
    ForNow(String),
}

impl Bound {
    /// Binds the socket at start (the daemon holds the lock: a stale socket file is replaced).
    pub fn bind(paths: &DataPaths) -> Result<Bound, String> {
        let lock = identity(&paths.lock_file()).ok_or_else(|| format!("{} is gone", paths.lock_file().display()))?;
        let (listener, socket) = bind_std(&paths.socket())?;
        let listener = tokio::net::UnixListener::from_std(listener).map_err(|e| e.to_string())?;
        Ok(Bound { listener, socket, lock, relocked: None })
    }

    /// Checks the socket's path and binds the socket again if it is gone or replaced. Err: the
    /// lock went to another daemon, and this one must stop.
    pub async fn keep(&mut self, paths: &DataPaths) -> Result<(), String> {
        let (paths, socket, lock) = (paths.clone(), self.socket, self.lock);
        let restored = tokio::task::spawn_blocking(move || restore(&paths, socket, lock)).await.map_err(|e| e.to_string())?;
        match restored {
            Ok(None) => Ok(()),
            Ok(Some((listener, socket, relocked))) => {
                self.listener = tokio::net::UnixListener::from_std(listener).map_err(|e| e.to_string())?;
                self.socket = socket;
                if let Some((file, lock)) = relocked {
                    self.relocked = Some(file);
                    self.lock = lock;
                }
                tracing::warn!("the control socket was removed or replaced: bound again");
                Ok(())
            }
            Err(Lost::ToAnotherDaemon(message)) => Err(message),
            Err(Lost::ForNow(message)) => {
                tracing::warn!(%message, "the control socket is gone and cannot be bound again yet");
                Ok(())
            }
        }
    }
}

type Restored = (std::os::unix::net::UnixListener, Identity, Option<(File, Identity)>);

/// None: the socket is in place. Else the new listener, and the lock file when it had to be
/// taken again.
fn restore(paths: &DataPaths, socket: Identity, lock: Identity) -> Result<Option<Restored>, Lost> {
    if identity(&paths.socket()) == Some(socket) {
        return Ok(None);
    }
    paths.prepare().map_err(|e| Lost::ForNow(format!("cannot prepare {}: {e}", paths.root.display())))?;
    let relocked = match identity(&paths.lock_file()) == Some(lock) {
        true => None,
        false => {
            let file = super::lock_file(paths, Duration::ZERO).map_err(|error| match error {
                None => Lost::ToAnotherDaemon(format!("another process holds {}", paths.lock_file().display())),
                Some(message) => Lost::ForNow(message),
            })?;
            let taken = identity(&paths.lock_file()).ok_or_else(|| Lost::ForNow("the lock file went again".to_string()))?;
            Some((file, taken))
        }
    };
    let (listener, socket) = bind_std(&paths.socket()).map_err(Lost::ForNow)?;
    Ok(Some((listener, socket, relocked)))
}

/// The control socket: 0600 inside the 0700 run directory, replacing whatever is at its path
/// (the daemon holds the lock, and nobody else may write in the run directory).
fn bind_std(path: &Path) -> Result<(std::os::unix::net::UnixListener, Identity), String> {
    let _ = std::fs::remove_file(path);
    let listener = std::os::unix::net::UnixListener::bind(path).map_err(|e| format!("cannot bind {}: {e}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| e.to_string())?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let socket = identity(path).ok_or_else(|| format!("{} went as it was bound", path.display()))?;
    Ok((listener, socket))
}

/// The identity of what is at `path` (never following a link), if anything.
fn identity(path: &Path) -> Option<Identity> {
    std::fs::symlink_metadata(path).ok().map(|meta| (meta.dev(), meta.ino()))
}
