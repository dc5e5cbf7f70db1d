//! Where a daemon keeps its private state: one data directory per daemon, private to its
//! user (0700), holding the database, the control socket and one directory per agent.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

#[derive(Clone, Debug)]
pub struct DataPaths {
    pub root: PathBuf,
}

impl DataPaths {
    /// `$WAKTERM_DATA_DIR`, else the platform data directory (`~/.local/share/wakterm`).
    pub fn from_env() -> io::Result<DataPaths> {
        if let Some(dir) = std::env::var_os("WAKTERM_DATA_DIR").filter(|d| !d.is_empty()) {
            return Ok(DataPaths { root: PathBuf::from(dir) });
        }
        let base = dirs::data_dir().ok_or_else(|| io::Error::other("no platform data directory; set WAKTERM_DATA_DIR"))?;
        Ok(DataPaths { root: base.join("wakterm") })
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

    /// Creates the private directories (0700) and refuses ones another user can read.
    pub fn prepare(&self) -> io::Result<()> {
        for dir in [self.root.clone(), self.run_dir(), self.holders_dir()] {
            private_dir(&dir)?;
        }
        Ok(())
    }
}

/// Creates `dir` with mode 0700 if missing; an existing one must belong to us, and loses any
/// group/other access bits (private data stays private).
pub fn private_dir(dir: &Path) -> io::Result<()> {
    match fs::DirBuilder::new().recursive(true).mode(0o700).create(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
        Err(error) => return Err(error),
    }
    let meta = fs::metadata(dir)?;
    // SAFETY: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    if meta.uid() != uid {
        return Err(io::Error::other(format!("{} belongs to uid {}, not to us ({uid})", dir.display(), meta.uid())));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}
