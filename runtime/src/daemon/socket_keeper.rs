//! SOCK-1: the daemon keeps its control socket reachable. The socket, and the run directory
//! holding it and the lock file, can be removed under a running daemon (a cleaner of old files
//! in a temporary directory, a careless `rm`): the daemon then ran on, its agents with it, but
//! no client could reach it, `mux stop` could not stop it and `mux start` refused to start
//! another. A task of its own checks every second, off the reactor, that the socket's path
//! still names the socket the daemon listens on and the lock file's path the file it holds;
//! when one does not, it makes the run directory again (0700), takes the lock file again
//! (LOCK-1) and binds the socket again, and hands the new listener to the accept loop.

use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::mpsc;

use super::LockError;
use crate::paths::DataPaths;

/// How often the paths are checked.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A file's identity: (device, inode).
pub use crate::paths::FileIdentity as Identity;

/// What the keeper tells the accept loop.
pub enum Kept {
    /// The socket was bound again: serve this listener (the socket's identity with it).
    Rebound(tokio::net::UnixListener, Identity),
    /// Another process holds a new lock file: another daemon serves the directory now.
    LostTo(String),
}

/// What the keeper knows: the identities it checks the paths against.
struct Keeper {
    paths: DataPaths,
    socket: Identity,
    lock: Identity,
    /// The lock file taken again after it went (LOCK-1), held by the daemon as long as its own
    /// lock (`HeldLock`), not only as long as the keeper runs.
    relocked: Arc<Mutex<Option<File>>>,
    /// Whether the last try failed (said once, not every second).
    failing: bool,
    /// Whether the last socket bound could not be served (said once too).
    unserved: bool,
}

/// Binds the socket at start (the daemon holds the lock whose file has identity `lock`: a stale
/// socket file is replaced) and starts the keeper. Returns the listener, the socket's
/// identity, and where the keeper hands over what it did.
pub fn start(paths: &DataPaths, (lock, relocked): HeldLock) -> Result<Started, String> {
    let (listener, socket) = bind_std(&paths.socket())?;
    let listener = tokio::net::UnixListener::from_std(listener).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(1);
    let keeper = Keeper { paths: paths.clone(), socket, lock, relocked, failing: false, unserved: false };
    tokio::spawn(keeper.run(tx));
    Ok((listener, Some(socket), rx))
}

/// The lock file the daemon holds (its identity), and where the keeper puts the one it takes
/// again; the daemon holds that as long as its own lock, until its runtime has ended.
pub type HeldLock = (Identity, Arc<Mutex<Option<File>>>);

/// What [`start`] returns: the listener, its socket's identity, and the keeper's messages.
pub type Started = (tokio::net::UnixListener, Option<Identity>, mpsc::Receiver<Kept>);

/// At shutdown: removes the socket at `path` only if it is still this daemon's (`socket`),
/// never another daemon's that took its place.
pub fn remove_if_ours(path: &Path, socket: Option<Identity>) {
    if socket.is_some() && identity(path) == socket {
        let _ = std::fs::remove_file(path);
    }
}

impl Keeper {
    /// Checks every `CHECK_INTERVAL` until the accept loop is gone or the lock is lost.
    async fn run(mut self, tx: mpsc::Sender<Kept>) {
        let mut ticks = tokio::time::interval(CHECK_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // The accept loop ended (shutdown): never bind a socket nobody serves.
            if tx.is_closed() {
                return;
            }
            let Ok((keeper, kept)) = tokio::task::spawn_blocking(move || self.check()).await else { return };
            self = keeper;
            let kept = match kept {
                Some(Checked::Rebound(listener, socket)) => match tokio::net::UnixListener::from_std(listener) {
                    Ok(listener) => {
                        self.unserved = false;
                        Some(Kept::Rebound(listener, socket))
                    }
                    // Not served: the next check binds it again (the identity no longer matches).
                    Err(error) => {
                        if !std::mem::replace(&mut self.unserved, true) {
                            tracing::warn!(%error, "the control socket was bound again but cannot be served: bound again every second");
                        }
                        self.socket = (0, 0);
                        None
                    }
                },
                Some(Checked::LostTo(message)) => Some(Kept::LostTo(message)),
                None => None,
            };
            let lost = matches!(kept, Some(Kept::LostTo(_)));
            if let Some(kept) = kept {
                if tx.send(kept).await.is_err() || lost {
                    return;
                }
            }
        }
    }

    /// One check, on a blocking thread.
    fn check(mut self) -> (Keeper, Option<Checked>) {
        let kept = match self.restore() {
            Ok(kept) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!("the control socket and lock file are in place again");
                }
                kept
            }
            Err(Lost::ToAnotherDaemon(message)) => Some(Checked::LostTo(message)),
            Err(Lost::ForNow(message)) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(%message, "the control socket or lock file is gone and cannot be made again yet: tried every second");
                }
                None
            }
        };
        (self, kept)
    }

    /// None: both paths are in place (or only the lock file was taken again). Else the socket
    /// bound again.
    fn restore(&mut self) -> Result<Option<Checked>, Lost> {
        let lock_in_place = identity(&self.paths.lock_file()) == Some(self.lock);
        let socket_in_place = identity(&self.paths.socket()) == Some(self.socket);
        if lock_in_place && socket_in_place {
            return Ok(None);
        }
        self.paths.prepare().map_err(|e| Lost::ForNow(format!("cannot prepare {}: {e}", self.paths.root.display())))?;
        // A lock file that cannot be taken again for now does not keep the socket away: the
        // data directory's own lock already keeps other daemons out (LOCK-1).
        let relocked = match lock_in_place {
            true => Ok(()),
            false => self.take_lock_again(),
        };
        if let Err(Lost::ToAnotherDaemon(message)) = relocked {
            return Err(Lost::ToAnotherDaemon(message));
        }
        if !socket_in_place {
            let (listener, socket) = bind_std(&self.paths.socket()).map_err(Lost::ForNow)?;
            self.socket = socket;
            tracing::warn!("the control socket was removed or replaced: bound again");
            // A bound socket is always handed over (dropped, it would stay at its path with
            // nobody behind it, and match from then on); the lock file is tried again later.
            if let Err(Lost::ForNow(message)) = relocked {
                tracing::warn!(%message, "the lock file cannot be taken again yet: tried every second");
            }
            return Ok(Some(Checked::Rebound(listener, socket)));
        }
        relocked.map(|()| None)
    }

    /// LOCK-1: takes `run/mux.lock` again (it was removed or replaced).
    fn take_lock_again(&mut self) -> Result<(), Lost> {
        let file = super::lock_file(&self.paths, Duration::ZERO).map_err(|error| match error {
            LockError::Busy | LockError::Serving => Lost::ToAnotherDaemon(format!("another process holds {}", self.paths.lock_file().display())),
            LockError::Failed(message) => Lost::ForNow(message),
        })?;
        self.lock = crate::paths::fd_identity(&file).map_err(|e| Lost::ForNow(e.to_string()))?;
        *self.relocked.lock().expect("relocked lock file") = Some(file);
        tracing::warn!("the lock file was removed or replaced: taken again");
        Ok(())
    }
}

/// What one check did, on its blocking thread.
enum Checked {
    Rebound(std::os::unix::net::UnixListener, Identity),
    LostTo(String),
}

/// Why the paths could not be kept.
enum Lost {
    ToAnotherDaemon(String),
    /// Nothing to do but try again on the next check (a full disk, a directory in the way).
    ForNow(String),
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
    crate::paths::path_identity(path).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOCK-1: at shutdown only this daemon's own socket is removed; one that took its place
    /// (another daemon's) stays.
    #[test]
    fn sock_1_shutdown_removes_only_its_own_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mux.sock");
        let (_listener, ours) = bind_std(&path).unwrap();
        let (_other, theirs) = bind_std(&path).unwrap();
        assert_ne!(ours, theirs);
        remove_if_ours(&path, Some(ours));
        assert_eq!(identity(&path), Some(theirs), "another daemon's socket stays");
        remove_if_ours(&path, None);
        assert!(path.exists(), "a daemon that lost its socket removes nothing");
        remove_if_ours(&path, Some(theirs));
        assert!(!path.exists(), "its own goes");
    }
}
