//! Where a daemon keeps its private state: one data directory per daemon, private to its
//! user (0700), holding the database, the control socket and one directory per agent.
//!
//! SEC-1: nothing here follows a symbolic link. The daemon creates or repairs its directories
//! through a descriptor opened with `O_NOFOLLOW` (so a planted link is refused, never chmodded
//! through); the CLI checks the same directories with `lstat` before it trusts a socket in them.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

#[derive(Clone, Debug)]
pub struct DataPaths {
    pub root: PathBuf,
}

impl DataPaths {
    /// `$WAKTERM_DATA_DIR` (absolute, not empty), else, when it is unset, the platform data
    /// directory (`~/.local/share/wakterm`).
    pub fn from_env() -> io::Result<DataPaths> {
        if let Some(dir) = std::env::var_os("WAKTERM_DATA_DIR") {
            // CLI-2: set but empty is most often a script's unset variable
            // (`WAKTERM_DATA_DIR=$DIR`); taken as unset, it reached the user's default daemon
            // and its agents (a review).
            if dir.is_empty() {
                let message = "WAKTERM_DATA_DIR is set but empty: unset it for the default data directory, or set an absolute path";
                return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
            }
            // CLI-2: a relative one names another directory from every working directory, so
            // a client run elsewhere would miss the daemon (or start a second one).
            if !Path::new(&dir).is_absolute() {
                let message = format!("WAKTERM_DATA_DIR must be an absolute path, not {:?}: a relative one names another directory from every working directory", Path::new(&dir));
                return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
            }
            return Self::text_only(PathBuf::from(dir), "WAKTERM_DATA_DIR");
        }
        let base = dirs::data_dir().ok_or_else(|| io::Error::other("no platform data directory; set WAKTERM_DATA_DIR"))?;
        Self::text_only(base.join("wakterm"), "the platform data directory")
    }

    /// CLI-2: a data directory whose path is no UTF-8 is refused: the daemon names its paths in
    /// JSON (its status, its ready line), and such a one made it abort at its first status
    /// call, after it had made its database and socket (a hostile run).
    fn text_only(root: PathBuf, whose: &str) -> io::Result<DataPaths> {
        if root.to_str().is_none() {
            let message = format!("{whose} {} is not UTF-8: wakterm names its paths in JSON; point WAKTERM_DATA_DIR at a directory whose path is UTF-8", root.display());
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        Ok(DataPaths { root })
    }

    pub fn database(&self) -> PathBuf {
        self.root.join("wakterm.db")
    }
    pub fn run_dir(&self) -> PathBuf {
        self.root.join("run")
    }
    pub fn socket(&self) -> PathBuf {
        self.run_dir().join("mux.sock")
    }
    /// The pid the lock file names (SEC-3: a FIFO at its path must not hold this answer up).
    pub fn lock_file_pid(&self) -> String {
        let mut holder = String::new();
        let _ = open_regular_file(&self.lock_file()).and_then(|file| std::io::Read::read_to_string(&mut std::io::Read::take(file, 64), &mut holder));
        Some(holder.trim().to_string()).filter(|pid| !pid.is_empty()).unwrap_or_else(|| "unknown: its run directory was removed".to_string())
    }

    /// LOCK-1, LIFE-6: whether a daemon holds the data directory's lock (the pid its lock file
    /// names), asked without waiting: a daemon that no longer serves at its socket (stopping:
    /// its drain and its end) or not yet (starting: recovery, a migration) still holds it. A
    /// shared lock taken for a moment: a daemon starting meanwhile retries its own for
    /// `daemon::LOCK_WAIT`.
    pub fn lock_holder(&self) -> Option<String> {
        let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let root = rustix::fs::open(&self.root, flags, rustix::fs::Mode::empty()).ok()?;
        match rustix::fs::flock(&root, rustix::fs::FlockOperation::NonBlockingLockShared) {
            Err(rustix::io::Errno::WOULDBLOCK) => Some(self.lock_file_pid()),
            _ => None, // free (released with `root`), or unknown: no daemon is named
        }
    }

    /// LIFE-6: the data directory's lock was taken here for a moment, so no daemon holds it
    /// (released with the descriptor). False when it is held, and when that cannot be told
    /// (the directory cannot be opened, a lock call fails): an error is no evidence of an end.
    pub fn lock_is_free(&self) -> bool {
        let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let Ok(root) = rustix::fs::open(&self.root, flags, rustix::fs::Mode::empty()) else { return false };
        rustix::fs::flock(&root, rustix::fs::FlockOperation::NonBlockingLockShared).is_ok()
    }

    pub fn lock_file(&self) -> PathBuf {
        self.run_dir().join("mux.lock")
    }
    pub fn log_file(&self) -> PathBuf {
        self.root.join("mux.log")
    }
    /// The private directory of the agents' holder sockets. Kept short: a Unix socket path
    /// has at most 107 bytes.
    pub fn holders_dir(&self) -> PathBuf {
        self.root.join("h")
    }
    pub fn holder_socket(&self, agent_id: &str) -> PathBuf {
        self.holders_dir().join(format!("{agent_id}.sock"))
    }

    /// Creates the private directories (0700) and refuses ones another user owns or that are
    /// symbolic links (SEC-1).
    pub fn prepare(&self) -> io::Result<()> {
        self.check_socket_room()?;
        for dir in [self.root.clone(), self.run_dir(), self.holders_dir()] {
            private_dir(&dir)?;
        }
        Ok(())
    }

    /// CLI-2: every socket the data directory will hold (the daemon's, an agent holder's, the
    /// longest) fits a Unix socket's path (107 bytes), checked before anything is created: a
    /// long directory was made, with its database and log, and only the bind failed (a review).
    pub fn check_socket_room(&self) -> io::Result<()> {
        let longest = self.holder_socket(&"0".repeat(36));
        let bytes = longest.as_os_str().len();
        if bytes > MAX_SOCKET_PATH_BYTES {
            let message = format!("the data directory {} is too long: its agents' sockets (such as {}) would be {bytes} bytes, over the {MAX_SOCKET_PATH_BYTES} a Unix socket's path may have; point WAKTERM_DATA_DIR at a shorter path", self.root.display(), longest.display());
            return Err(io::Error::new(io::ErrorKind::InvalidInput, message));
        }
        Ok(())
    }

    /// SEC-2, the client's side: the data and run directories exist, are real directories (not
    /// links), belong to us and give nobody else access. Changes nothing.
    pub fn verify_private(&self) -> io::Result<()> {
        for dir in [self.root.clone(), self.run_dir()] {
            verify_private_dir(&dir)?;
        }
        Ok(())
    }
}

/// The longest path a Unix socket may have on Linux (`sun_path` holds 108 bytes with its NUL).
pub const MAX_SOCKET_PATH_BYTES: usize = 107;

/// The uid this process runs as.
pub fn current_uid() -> u32 {
    rustix::process::getuid().as_raw()
}

/// Creates `dir` with mode 0700 if missing (its parents as needed). The directory itself is
/// then opened without following a link: a symlink, a non-directory or another user's
/// directory is refused; group/other access bits are removed through the descriptor.
pub fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let flags = OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::RDONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty()).map_err(|errno| {
        let error = io::Error::from(errno);
        match errno {
            rustix::io::Errno::LOOP | rustix::io::Errno::NOTDIR => refused(dir, "is a symbolic link or not a directory"),
            _ => error,
        }
    })?;
    let stat = rustix::fs::fstat(&fd)?;
    check_owner(dir, stat.st_uid)?;
    if stat.st_mode & 0o077 != 0 {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(0o700))?;
    }
    Ok(())
}

/// Checks, without following links or changing anything, that `dir` is a directory of ours
/// with no group/other access.
pub fn verify_private_dir(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(refused(dir, "is a symbolic link"));
    }
    if !meta.is_dir() {
        return Err(refused(dir, "is not a directory"));
    }
    check_owner(dir, meta.uid())?;
    if meta.mode() & 0o077 != 0 {
        return Err(refused(dir, &format!("{OPEN_TO_OTHERS} (mode {:o})", meta.mode() & 0o777)));
    }
    Ok(())
}

/// Opens (creating 0600 if missing) a private regular file of ours without following a link:
/// a planted symlink is refused rather than written through (SEC-1), and anything that is not
/// a regular file is refused without waiting (SEC-3). One of ours found open to others is made
/// 0600 again (SEC-1): a log chmodded 0644 stayed so across restarts (a review).
pub fn open_private_file(path: &Path, options: &mut OpenOptions) -> io::Result<File> {
    let file = options
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => refused(path, "is a symbolic link"),
            // SEC-3: a FIFO with no reader, opened for writing without blocking.
            Some(libc::ENXIO) => refused(path, "is not a regular file"),
            _ => error,
        })?;
    let stat = rustix::fs::fstat(file.as_fd())?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(refused(path, "is not a regular file"));
    }
    check_owner(path, stat.st_uid)?;
    if stat.st_mode & 0o077 != 0 {
        rustix::fs::fchmod(file.as_fd(), rustix::fs::Mode::from_raw_mode(0o600))?;
    }
    Ok(file)
}

/// SEC-3: opens `path` for reading only if it is a regular file, never waiting at the open.
/// A FIFO put where a file is expected (a rollout, our log) blocked a plain `open` until a
/// writer came: for good, with the daemon's log lock held, every thread that logged waited
/// behind it. `O_NONBLOCK` makes such an open return at once (it changes nothing for a
/// regular file: reads of one never block), and anything not a regular file is refused.
pub fn open_regular_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new().read(true).custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK).open(path)?;
    let stat = rustix::fs::fstat(file.as_fd())?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{} is not a regular file", path.display())));
    }
    Ok(file)
}

/// Checks with `lstat` that `path`, if it exists, is a regular file of ours, not a link, nor
/// anything else an open could wait at (SEC-3: SQLite's read-only open of a FIFO at the
/// database's path waited for a writer for good).
pub fn verify_no_link(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => Err(refused(path, "is a symbolic link")),
        Ok(meta) if !meta.file_type().is_file() => Err(refused(path, "is not a regular file")),
        Ok(meta) => check_owner(path, meta.uid()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error),
    }
}

/// SEC-2: the daemon's socket, as a client finds it: a socket of ours, never a link. Through
/// a link to another data directory's socket the CLI talked to, and `mux stop` stopped, that
/// directory's daemon (a review). NotFound when nothing is there.
pub fn verify_socket(path: &Path) -> io::Result<()> {
    socket_of_ours(path, || io::Error::new(io::ErrorKind::NotFound, format!("{} is not a socket", path.display())))
}

/// SEC-1, LIVE-1: an agent's holder socket is connected to only when it is a socket of ours,
/// never through a link (the daemon wrote prompts into another data directory's agent through
/// one: a hostile run), which says nothing of the holder's exit. Anything else in its place
/// (a file in the way) is answered as a connect there is, `ECONNREFUSED`: nobody listens at
/// the path; a missing path is `ENOENT`, as before.
pub fn verify_holder_socket(path: &Path) -> io::Result<()> {
    socket_of_ours(path, || io::Error::from_raw_os_error(libc::ECONNREFUSED))
}

/// With `lstat`: `path` is a socket of ours and no link; anything else there answers
/// `not_a_socket` (each caller says what that means to it).
fn socket_of_ours(path: &Path, not_a_socket: impl FnOnce() -> io::Error) -> io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return Err(refused(path, "is a symbolic link"));
    }
    if !meta.file_type().is_socket() {
        return Err(not_a_socket());
    }
    check_owner(path, meta.uid())
}

fn check_owner(path: &Path, owner: u32) -> io::Result<()> {
    let uid = current_uid();
    if owner != uid {
        return Err(refused(path, &format!("belongs to uid {owner}, not to us ({uid})")));
    }
    Ok(())
}

/// A file's identity: (device, inode). Code that must tell whether a path still names the
/// file it opened (SOCK-1's lock and socket, SOCK-2's holder socket, STORE-4's database, LOG-3's
/// log) compares these.
pub type FileIdentity = (u64, u64);

/// The identity of what is at `path`, never following a link.
pub fn path_identity(path: &Path) -> io::Result<FileIdentity> {
    fs::symlink_metadata(path).map(|meta| (meta.dev(), meta.ino()))
}

/// The identity of an open file.
pub fn fd_identity(fd: impl AsFd) -> io::Result<FileIdentity> {
    let stat = rustix::fs::fstat(fd)?;
    Ok((stat.st_dev, stat.st_ino))
}

/// The words [`verify_private_dir`] says of a directory open to others: the one refusal
/// `mux start` repairs (CLI-2 advises it only then).
pub const OPEN_TO_OTHERS: &str = "is accessible to other users";

fn refused(path: &Path, why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, format!("{} {why}; refusing to use it", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    // LIFE-6: the lock is free only when it could be taken: held, or a directory that cannot
    // be opened (an error proves no daemon's end, a review), is not free.
    #[test]
    fn life_6_the_lock_is_free_only_when_it_could_be_taken() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = DataPaths { root: tmp.path().join("d") };
        assert!(!paths.lock_is_free(), "no directory: unknown, not free");
        fs::create_dir(&paths.root).unwrap();
        assert!(paths.lock_is_free());
        let held = rustix::fs::open(&paths.root, rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY, rustix::fs::Mode::empty()).unwrap();
        rustix::fs::flock(&held, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
        assert!(!paths.lock_is_free(), "held");
        drop(held);
        assert!(paths.lock_is_free());
    }

    // SEC-1: a symlinked data directory is refused and its target is left as it was.
    #[test]
    fn sec_1_private_dir_refuses_a_symlink_and_leaves_its_target_alone() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("elsewhere");
        fs::create_dir(&target).unwrap();
        fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let link = tmp.path().join("data");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = private_dir(&link).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert_eq!(fs::metadata(&target).unwrap().mode() & 0o777, 0o755, "the link's target was chmodded");
        let error = DataPaths { root: link }.verify_private().unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
    }

    // SEC-1: a symlinked lock or log file is refused; its target keeps its bytes.
    #[test]
    fn sec_1_private_files_are_opened_without_following_links() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("precious");
        fs::write(&target, b"keep me").unwrap();
        let link = tmp.path().join("mux.lock");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let error = open_private_file(&link, OpenOptions::new().create(true).write(true)).unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
        assert_eq!(fs::read(&target).unwrap(), b"keep me");
        assert!(verify_no_link(&link).is_err());
    }

    /// SEC-3: a FIFO where one of our files or a rollout should be is refused at once by every
    /// open that reads or writes such a path. A plain open waited for a peer for good: a FIFO
    /// at `mux.log` stalled the daemon's every logging thread, one at `wakterm.db` its start.
    #[test]
    fn sec_3_a_fifo_is_refused_without_waiting_at_the_open() {
        let tmp = tempfile::tempdir().unwrap();
        let fifo = tmp.path().join("mux.log");
        let name = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0, "mkfifo");
        let (done, answers) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || {
            let append = open_private_file(&path, OpenOptions::new().create(true).append(true)).map(drop);
            let read_write = open_private_file(&path, OpenOptions::new().read(true).write(true)).map(drop);
            let read = open_regular_file(&path).map(drop);
            let _ = done.send([append, read_write, read, verify_no_link(&path)]);
        });
        let answers = answers.recv_timeout(std::time::Duration::from_secs(10)).expect("an open waited at the FIFO");
        for answer in answers {
            let error = answer.expect_err("a FIFO is not one of our files");
            assert!(error.to_string().contains("not a regular file"), "{error}");
        }
        // A regular file still opens, for reading as for appending.
        let file = tmp.path().join("rollout.jsonl");
        fs::write(&file, b"line\n").unwrap();
        let mut text = String::new();
        std::io::Read::read_to_string(&mut open_regular_file(&file).unwrap(), &mut text).unwrap();
        assert_eq!(text, "line\n");
        std::io::Write::write_all(&mut open_private_file(&file, OpenOptions::new().append(true)).unwrap(), b"more\n").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"line\nmore\n");
    }

    // SEC-1: a file of ours found open to others (a log chmodded 0644) is made 0600 again.
    #[test]
    fn sec_1_a_private_file_open_to_others_is_made_private_again() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("mux.log");
        fs::write(&file, b"line\n").unwrap();
        fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
        drop(open_private_file(&file, OpenOptions::new().append(true)).unwrap());
        assert_eq!(fs::metadata(&file).unwrap().mode() & 0o777, 0o600);
    }

    // SEC-2: the client refuses a data directory other users can enter.
    #[test]
    fn sec_2_verify_private_refuses_open_modes_and_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = DataPaths { root: tmp.path().join("data") };
        paths.prepare().unwrap();
        paths.verify_private().unwrap();
        fs::set_permissions(&paths.run_dir(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
        let error = paths.verify_private().unwrap_err();
        assert!(error.to_string().contains("other users"), "{error}");
        assert_eq!(fs::metadata(paths.run_dir()).unwrap().mode() & 0o777, 0o777);
    }
}
