//! Process facts from /proc and discovery of the Codex rollout an adopted process tree holds.
//!
//! Reads go through the `procfs` crate: it parses `/proc/PID/stat` correctly (the `comm`
//! field may hold spaces and parentheses), and a `procfs::process::Process` keeps a directory
//! fd on `/proc/PID`, so later reads (cwd, exe, fd/) cannot silently switch to a process that
//! reused the pid after the first exited: they fail with "not found" instead.
//!
//! Discovery never guesses (correlation safety in the seeds): it reports the one rollout file
//! held open by the tree, or says why there is not exactly one, or that it could not see
//! everything ([`Discovery::Incomplete`]).

use crate::rollout::{parse_line, RolloutRecord};
use procfs::process::{FDTarget, Process};
use procfs::ProcError;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

/// Entries of /proc examined by one descendants scan.
pub const MAX_PROCESSES_SCANNED: usize = 65_536;
/// Processes in one adopted tree, root excluded; larger trees are refused, not truncated.
pub const MAX_DESCENDANTS: usize = 1024;
/// Open file descriptors examined per process.
pub const MAX_OPEN_FILES_PER_PROCESS: usize = 16_384;
/// Longest first line read to find a rollout's `session_meta` (it embeds instructions).
pub const MAX_SESSION_META_LINE_BYTES: usize = 4 * 1024 * 1024;

/// A process incarnation: the pid plus its start time, so a reused pid is a different value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProcessIdentity {
    pub pid: u32,
    /// Field 22 of /proc/PID/stat: start time after boot, in clock ticks.
    pub start_time_ticks: u64,
}

/// What /proc says about one process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessFacts {
    pub identity: ProcessIdentity,
    pub ppid: u32,
    /// None when unreadable (another user's process, or a zombie).
    pub cwd: Option<PathBuf>,
    pub exe: Option<PathBuf>,
    /// Exited but not yet reaped: it holds no files any more.
    pub zombie: bool,
}

/// Why a probe failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeError {
    /// Zero or beyond the kernel's pid range.
    InvalidPid { pid: u32 },
    /// No such process (exited, or never existed).
    Gone { pid: u32 },
    PermissionDenied { pid: u32 },
    TooManyProcesses { limit: usize },
    TooManyOpenFiles { pid: u32, limit: usize },
    /// Anything else /proc reported (I/O error, malformed content).
    Proc { pid: u32, message: String },
}

impl ProbeError {
    /// LIVE-1: whether this failure is evidence that the process is gone (no such pid). Any
    /// other failure (out of descriptors, permissions, a read error) says nothing about it.
    pub fn is_gone(&self) -> bool {
        match self {
            ProbeError::Gone { .. } | ProbeError::InvalidPid { .. } => true,
            ProbeError::PermissionDenied { .. } | ProbeError::TooManyProcesses { .. } | ProbeError::TooManyOpenFiles { .. } | ProbeError::Proc { .. } => false,
        }
    }
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeError::InvalidPid { pid } => write!(f, "invalid pid {pid}"),
            ProbeError::Gone { pid } => write!(f, "process {pid} is gone"),
            ProbeError::PermissionDenied { pid } => write!(f, "permission denied reading process {pid}"),
            ProbeError::TooManyProcesses { limit } => write!(f, "more than {limit} processes"),
            ProbeError::TooManyOpenFiles { pid, limit } => write!(f, "process {pid} has more than {limit} open files"),
            ProbeError::Proc { pid, message } => write!(f, "/proc/{pid}: {message}"),
        }
    }
}

impl std::error::Error for ProbeError {}

fn proc_error(pid: u32, error: ProcError) -> ProbeError {
    match error {
        ProcError::NotFound(_) => ProbeError::Gone { pid },
        ProcError::PermissionDenied(_) => ProbeError::PermissionDenied { pid },
        other => ProbeError::Proc { pid, message: other.to_string() },
    }
}

fn open_process(pid: u32) -> Result<Process, ProbeError> {
    let raw = i32::try_from(pid).map_err(|_| ProbeError::InvalidPid { pid })?;
    if raw <= 0 {
        return Err(ProbeError::InvalidPid { pid });
    }
    Process::new(raw).map_err(|e| proc_error(pid, e))
}

/// The facts of one process.
pub fn probe(pid: u32) -> Result<ProcessFacts, ProbeError> {
    let process = open_process(pid)?;
    let (identity, ppid, zombie) = read_stat(&process, pid)?;
    Ok(ProcessFacts { identity, ppid, cwd: process.cwd().ok(), exe: process.exe().ok(), zombie })
}

/// What one read of `/proc/PID/stat` says: the identity, the parent, and whether it is a
/// zombie (exited or dying, not yet reaped). One copy for `probe` and `standing`.
fn read_stat(process: &Process, pid: u32) -> Result<(ProcessIdentity, u32, bool), ProbeError> {
    let stat = process.stat().map_err(|e| proc_error(pid, e))?;
    let ppid = u32::try_from(stat.ppid).unwrap_or(0);
    Ok((ProcessIdentity { pid, start_time_ticks: stat.starttime }, ppid, matches!(stat.state, 'Z' | 'X' | 'x')))
}

/// The identity of `pid` now.
pub fn identity(pid: u32) -> Result<ProcessIdentity, ProbeError> {
    standing(pid).map(|(identity, _)| identity)
}

/// The identity of `pid` now and whether it is a zombie, from its stat alone: what telling
/// an adopted process gone needs (LIVE-1), without the cwd and exe links `probe` reads too
/// (two syscalls less on every admission's refresh, issue 10).
pub fn standing(pid: u32) -> Result<(ProcessIdentity, bool), ProbeError> {
    let (identity, _, zombie) = read_stat(&open_process(pid)?, pid)?;
    Ok((identity, zombie))
}

/// LIVE-1 from the stat alone: Ok(true) when the evidence says `identity` is gone (no such
/// pid, the pid names another process, or a zombie), Ok(false) while it runs, and the error
/// when the probe failed otherwise ("unknown", never evidence).
pub fn gone_by_stat(identity: ProcessIdentity) -> Result<bool, ProbeError> {
    match standing(identity.pid) {
        Ok((now, zombie)) => Ok(now != identity || zombie),
        Err(error) if error.is_gone() => Ok(true),
        Err(error) => Err(error),
    }
}

/// LIVE-1 for an adopted process without reading `/proc` on every look (issue 10: the
/// stat read and parse were 4 % of the daemon's CPU at 10 busy agents): a pidfd names one
/// process for its whole life, so a reused pid can never be mistaken for it, and it becomes
/// readable once that process has exited (a zombie included).
#[derive(Debug)]
pub struct ExitWatch {
    pidfd: std::os::fd::OwnedFd,
}

impl ExitWatch {
    /// A watch on `identity`: Ok(None) when the evidence already says it is gone (no such
    /// pid, the pid names another process, or a zombie). The stat is read after the pidfd is
    /// open: a process seen alive then was alive when the pidfd was opened (it existed before,
    /// as `identity` says), so the pidfd names it and no process that reused its pid.
    pub fn open(identity: ProcessIdentity) -> Result<Option<ExitWatch>, ProbeError> {
        let pid = identity.pid;
        let raw = i32::try_from(pid).ok().and_then(rustix::process::Pid::from_raw).ok_or(ProbeError::InvalidPid { pid })?;
        let pidfd = match rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) {
            Ok(pidfd) => pidfd,
            Err(rustix::io::Errno::SRCH) => return Ok(None),
            Err(error) => return Err(ProbeError::Proc { pid, message: format!("pidfd_open: {error}") }),
        };
        Ok((!gone_by_stat(identity)?).then_some(ExitWatch { pidfd }))
    }

    /// Whether the process has exited: one `poll` of the pidfd, no wait. An error is "unknown"
    /// (LIVE-1), never evidence.
    pub fn exited(&self) -> Result<bool, ProbeError> {
        use rustix::event::{poll, PollFd, PollFlags};
        let mut fds = [PollFd::new(&self.pidfd, PollFlags::IN)];
        let zero = rustix::event::Timespec { tv_sec: 0, tv_nsec: 0 };
        match poll(&mut fds, Some(&zero)) {
            Ok(_) => Ok(!fds[0].revents().is_empty()),
            Err(error) => Err(ProbeError::Proc { pid: 0, message: format!("poll of a pidfd: {error}") }),
        }
    }
}

/// All transitive children of `pid` (not `pid` itself), nearest first. Cost follows the
/// agent's own tree, not the machine: each process's children come from the kernel's
/// `/proc/PID/task/TID/children` lists; only a kernel without them (CONFIG_PROC_CHILDREN)
/// falls back to scanning the parent link of every process. Refuses trees above
/// [`MAX_DESCENDANTS`].
pub fn descendants(pid: u32) -> Result<Vec<u32>, ProbeError> {
    match children_of(pid) {
        Err(ChildrenError::Unsupported) => descendants_by_scan(pid),
        Err(ChildrenError::Probe(error)) if error.is_gone() => Ok(Vec::new()),
        Err(ChildrenError::Probe(error)) => Err(error),
        Ok(_) => walk_tree(pid, |parent| match children_of(parent) {
            Ok(children) => Ok(children),
            // A child that exited during the walk is simply not part of the tree any more.
            Err(ChildrenError::Probe(error)) if error.is_gone() => Ok(Vec::new()),
            Err(ChildrenError::Probe(error)) => Err(error),
            Err(ChildrenError::Unsupported) => Ok(Vec::new()),
        }),
    }
}

/// The direct children of `pid`, from every thread's `children` list (a child spawned by
/// another thread than the main one is listed under that thread); by the parent links of every
/// process on a kernel without those lists; none when `pid` is gone or cannot be read.
pub fn children(pid: u32) -> Vec<u32> {
    match children_of(pid) {
        Ok(children) => children,
        Err(ChildrenError::Unsupported) => children_by_parent().ok().and_then(|all| all.get(&pid).cloned()).unwrap_or_default(),
        Err(ChildrenError::Probe(_)) => Vec::new(),
    }
}

enum ChildrenError {
    /// This kernel has no `/proc/PID/task/TID/children`.
    Unsupported,
    Probe(ProbeError),
}

/// The direct children of `pid`, from each of its threads' `children` list.
fn children_of(pid: u32) -> Result<Vec<u32>, ChildrenError> {
    let process = open_process(pid).map_err(ChildrenError::Probe)?;
    let tasks = process.tasks().map_err(|e| ChildrenError::Probe(proc_error(pid, e)))?;
    let mut children = Vec::new();
    for task in tasks {
        let Ok(task) = task else { continue }; // a thread that exited meanwhile
        match task.children() {
            Ok(list) => children.extend(list),
            // Either the thread just exited (skip it) or the kernel keeps no children lists.
            Err(procfs::ProcError::NotFound(_)) => {
                if std::path::Path::new(&format!("/proc/{pid}/task/{}", task.tid)).exists() {
                    return Err(ChildrenError::Unsupported);
                }
            }
            Err(error) => return Err(ChildrenError::Probe(proc_error(pid, error))),
        }
    }
    Ok(children)
}

/// [`descendants`] by scanning every process's parent link (kernels without children lists).
fn descendants_by_scan(pid: u32) -> Result<Vec<u32>, ProbeError> {
    let children = children_by_parent()?;
    walk_tree(pid, |parent| Ok(children.get(&parent).cloned().unwrap_or_default()))
}

/// Breadth-first over `children_of`, bounded by [`MAX_DESCENDANTS`].
fn walk_tree(pid: u32, mut children_of: impl FnMut(u32) -> Result<Vec<u32>, ProbeError>) -> Result<Vec<u32>, ProbeError> {
    let mut found = Vec::new();
    let mut queue = VecDeque::from([pid]);
    while let Some(parent) = queue.pop_front() {
        for child in children_of(parent)? {
            let child = &child;
            // Parent links form a tree, but a pid reused mid-scan could close a loop.
            if *child == pid || found.contains(child) {
                continue;
            }
            if found.len() == MAX_DESCENDANTS {
                return Err(ProbeError::TooManyProcesses { limit: MAX_DESCENDANTS });
            }
            found.push(*child);
            queue.push_back(*child);
        }
    }
    assert!(found.len() <= MAX_DESCENDANTS);
    Ok(found)
}

/// parent pid -> child pids, for every process visible in /proc.
fn children_by_parent() -> Result<BTreeMap<u32, Vec<u32>>, ProbeError> {
    let all = procfs::process::all_processes().map_err(|e| proc_error(0, e))?;
    let mut children: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for (scanned, process) in all.enumerate() {
        if scanned == MAX_PROCESSES_SCANNED {
            return Err(ProbeError::TooManyProcesses { limit: MAX_PROCESSES_SCANNED });
        }
        // A process that exits during the scan is simply not part of the tree any more.
        let Ok(process) = process else { continue };
        let Ok(stat) = process.stat() else { continue };
        let (Ok(child), Ok(parent)) = (u32::try_from(stat.pid), u32::try_from(stat.ppid)) else { continue };
        children.entry(parent).or_default().push(child);
    }
    Ok(children)
}

/// Paths of the regular files (and devices) `pid` holds open, sorted, without duplicates.
/// Sockets, pipes and anonymous inodes are left out. A deleted file keeps the kernel's
/// " (deleted)" suffix, so it never matches a live path.
pub fn open_files(pid: u32) -> Result<Vec<PathBuf>, ProbeError> {
    open_files_where(pid, |_| true)
}

/// [`open_files`] limited to files opened for writing. The kernel gives each
/// `/proc/PID/fd/N` link the owner write bit exactly when the file was opened writable.
/// Codex 0.169 briefly opens the newest rollout of its CODEX_HOME read-only at startup; only
/// the rollout it writes is its session.
pub fn open_files_for_writing(pid: u32) -> Result<Vec<PathBuf>, ProbeError> {
    open_files_where(pid, |info| info.mode().contains(procfs::process::FDPermissions::WRITE))
}

fn open_files_where(pid: u32, keep: impl Fn(&procfs::process::FDInfo) -> bool) -> Result<Vec<PathBuf>, ProbeError> {
    let process = open_process(pid)?;
    let fds = process.fd().map_err(|e| proc_error(pid, e))?;
    let mut paths = Vec::new();
    for (seen, fd) in fds.enumerate() {
        if seen == MAX_OPEN_FILES_PER_PROCESS {
            return Err(ProbeError::TooManyOpenFiles { pid, limit: MAX_OPEN_FILES_PER_PROCESS });
        }
        match fd {
            Ok(info) => {
                if !keep(&info) {
                    continue;
                }
                if let FDTarget::Path(path) = info.target {
                    paths.push(path);
                }
            }
            // The fd was closed between listing and reading its link.
            Err(ProcError::NotFound(_)) => continue,
            Err(e) => return Err(proc_error(pid, e)),
        }
    }
    paths.sort();
    paths.dedup();
    Ok(paths)
}

/// Which rollout file an adopted process tree is writing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// Exactly one rollout is open in the tree, and its session_meta agrees with the cwd.
    Found { path: PathBuf, holder_pid: u32, session_id: String },
    /// The tree holds no rollout (e.g. before the first turn, or a shared app-server holds it).
    NoneOpen,
    /// Several distinct rollouts are open: never pick one.
    Ambiguous { paths: Vec<PathBuf> },
    /// The one open rollout belongs to a session started in another directory.
    CwdMismatch { path: PathBuf, session_cwd: PathBuf },
    /// The one open rollout's first record names another session than its file name (Codex
    /// names a rollout after its session): the file was rewritten (another session's copied
    /// over it), and is no session's record.
    Mislabelled { path: PathBuf, session_id: String },
    /// The root process has exited (or its pid now names another process).
    ProcessGone,
    /// Part of the evidence could not be read (permissions, limits, a rollout without its
    /// session_meta yet); the caller retries later instead of concluding anything.
    Incomplete { reason: String },
}

/// Finds the rollout held open by `root_pid` or its descendants. Only files named
/// `rollout-*.jsonl` under `codex_home/sessions/` count.
pub fn discover_rollout(root_pid: u32, codex_home: &Path, expected_cwd: Option<&Path>) -> Discovery {
    match probe(root_pid) {
        Ok(facts) if facts.zombie => return Discovery::ProcessGone,
        Ok(_) => {}
        Err(ProbeError::Gone { .. }) => return Discovery::ProcessGone,
        Err(e) => return Discovery::Incomplete { reason: e.to_string() },
    }
    let held = match held_rollouts(root_pid, codex_home) {
        Ok(held) => held,
        Err(ProbeError::Gone { .. }) => return Discovery::ProcessGone,
        Err(e) => return Discovery::Incomplete { reason: e.to_string() },
    };
    let (path, holder_pid) = match held.len() {
        0 => return Discovery::NoneOpen,
        1 => held.into_iter().next().expect("one entry"),
        _ => return Discovery::Ambiguous { paths: held.into_keys().collect() },
    };
    let (session_id, session_cwd) = match read_session_meta(&path) {
        Ok(meta) => meta,
        Err(reason) => return Discovery::Incomplete { reason },
    };
    if !named_for(&path, &session_id) {
        return Discovery::Mislabelled { path, session_id };
    }
    match expected_cwd {
        Some(expected) if !same_directory(expected, &session_cwd) => {
            Discovery::CwdMismatch { path, session_cwd }
        }
        Some(_) | None => Discovery::Found { path, holder_pid, session_id },
    }
}

/// [`discover_rollout`] for one exact incarnation: the identity is checked before and after
/// the scan, so a pid reused meanwhile yields `ProcessGone`, not another process's files.
pub fn discover_rollout_exact(
    root: ProcessIdentity,
    codex_home: &Path,
    expected_cwd: Option<&Path>,
) -> Discovery {
    // LIVE-1: only evidence says gone; a probe that fails otherwise leaves discovery incomplete.
    let check = || match identity(root.pid) {
        Ok(now) if now == root => None,
        Ok(_) => Some(Discovery::ProcessGone),
        Err(error) if error.is_gone() => Some(Discovery::ProcessGone),
        Err(error) => Some(Discovery::Incomplete { reason: error.to_string() }),
    };
    if let Some(answer) = check() {
        return answer;
    }
    let discovery = discover_rollout(root.pid, codex_home, expected_cwd);
    check().unwrap_or(discovery)
}

/// Rollout path -> first holder (nearest the root, then lowest fd path order).
fn held_rollouts(root_pid: u32, codex_home: &Path) -> Result<BTreeMap<PathBuf, u32>, ProbeError> {
    let sessions = codex_home.join("sessions");
    // fd links are canonical; the configured home may go through a symlink.
    let canonical = sessions.canonicalize().unwrap_or_else(|_| sessions.clone());
    let mut held = BTreeMap::new();
    let tree = std::iter::once(root_pid).chain(descendants(root_pid)?);
    for pid in tree {
        let files = match open_files_for_writing(pid) {
            Ok(files) => files,
            // A descendant that exited since the scan holds nothing; the root is checked by the caller.
            Err(ProbeError::Gone { .. }) if pid != root_pid => continue,
            Err(e) => return Err(e),
        };
        for path in files {
            if is_rollout_path(&path, &canonical) || is_rollout_path(&path, &sessions) {
                held.entry(path).or_insert(pid);
            }
        }
    }
    Ok(held)
}

/// LIVE-1: the processes of session `leader` other than the leader itself (`/proc/*/stat`:
/// session id == `leader`, pid != `leader`). Processes that cannot be read are skipped.
pub fn session_members(leader: u32) -> Vec<u32> {
    let Ok(all) = procfs::process::all_processes() else { return Vec::new() };
    all.flatten()
        .filter_map(|process| process.stat().ok())
        .filter(|stat| stat.session == leader as i32 && stat.pid != leader as i32)
        .map(|stat| stat.pid as u32)
        .collect()
}

/// `sessions_dir/**/rollout-*.jsonl`.
pub fn is_rollout_path(path: &Path, sessions_dir: &Path) -> bool {
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else { return false };
    path.starts_with(sessions_dir) && name.starts_with("rollout-") && name.ends_with(".jsonl")
}

/// Whether the rollout's file name ends with its session id, as Codex names every rollout
/// (`rollout-<time>-<session id>.jsonl`, REAL_CODEX.md).
fn named_for(path: &Path, session_id: &str) -> bool {
    path.file_name().and_then(|name| name.to_str()).is_some_and(|name| name.ends_with(&format!("-{session_id}.jsonl")))
}

/// (session id, cwd) from the first line of a rollout.
fn read_session_meta(path: &Path) -> Result<(String, PathBuf), String> {
    let file = crate::paths::open_regular_file(path).map_err(|e| format!("open {}: {e}", path.display()))?;
    let mut reader = BufReader::new(file).take(MAX_SESSION_META_LINE_BYTES as u64);
    let mut line = Vec::new();
    reader.read_until(b'\n', &mut line).map_err(|e| format!("read {}: {e}", path.display()))?;
    if line.last() != Some(&b'\n') {
        return Err(format!("{} has no complete session_meta line yet", path.display()));
    }
    match parse_line(&line) {
        Ok(RolloutRecord::SessionMeta { session_id, cwd, .. }) => Ok((session_id, cwd)),
        Ok(other) => Err(format!("{} starts with {}, not session_meta", path.display(), other.kind_label())),
        Err(e) => Err(format!("{}: first line: {e}", path.display())),
    }
}

/// Equal as written, or equal after resolving symlinks (Codex records a canonical cwd;
/// the caller may have declared it through a symlink).
fn same_directory(a: &Path, b: &Path) -> bool {
    if a == b {
        return true;
    }
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// LIVE-1: a child spawned by another thread than the main one (as a holder's respawn does,
    /// from a connection's thread) is one of the process's children: `end_unreachable_holder`
    /// once read only the main thread's list and missed it.
    #[test]
    fn live_1_children_spawned_by_any_thread_are_listed() {
        // The spawning thread lives on while the list is read (a thread's children pass to
        // another thread of the process when it exits).
        let (spawned, checked) = (std::sync::mpsc::channel(), std::sync::mpsc::channel::<()>());
        let spawner = std::thread::spawn(move || {
            let child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
            spawned.0.send(child.id()).unwrap();
            checked.1.recv().unwrap();
            child
        });
        let id = spawned.1.recv().unwrap();
        let main_only = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", std::process::id())).unwrap_or_default();
        let listed = children(std::process::id()).contains(&id);
        checked.0.send(()).unwrap();
        let mut child = spawner.join().unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!main_only.split_whitespace().any(|pid| pid == id.to_string()), "not in the main thread's own list");
        assert!(listed, "a child of another thread is a child of the process");
        assert!(children(u32::MAX).is_empty(), "no such process: none");
    }
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};
    use std::time::{Duration, Instant};

    /// A child in its own process group, killed with its whole group when dropped.
    struct Spawned(Child);

    impl Drop for Spawned {
        fn drop(&mut self) {
            // Only the process group this test created (its id is the child's pid).
            let pgid = rustix::process::Pid::from_child(&self.0);
            let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            let _ = self.0.wait();
        }
    }

    fn spawn_sh(script: &str, args: &[&Path], cwd: &Path) -> Spawned {
        let child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("sh")
            .args(args)
            .current_dir(cwd)
            .process_group(0)
            .spawn()
            .expect("spawn sh");
        Spawned(child)
    }

    /// Waits until the tree under `root` holds every path in `paths`.
    fn wait_until_held(root: u32, paths: &[&Path]) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let tree: Vec<u32> = std::iter::once(root).chain(descendants(root).unwrap_or_default()).collect();
            let held: Vec<PathBuf> = tree.iter().flat_map(|&pid| open_files(pid).unwrap_or_default()).collect();
            if paths.iter().all(|p| held.iter().any(|h| h == &p.canonicalize().unwrap())) {
                return;
            }
            assert!(Instant::now() < deadline, "child never opened {paths:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    struct Home {
        dir: tempfile::TempDir,
    }

    impl Home {
        fn new() -> Self {
            Home { dir: tempfile::tempdir().unwrap() }
        }
        fn codex_home(&self) -> PathBuf {
            self.dir.path().join("codex-home")
        }
        fn workdir(&self) -> PathBuf {
            let dir = self.dir.path().join("work");
            std::fs::create_dir_all(&dir).unwrap();
            dir.canonicalize().unwrap()
        }
        /// A rollout whose session_meta declares `cwd`.
        fn rollout(&self, session: &str, cwd: &Path) -> PathBuf {
            let day = self.codex_home().join("sessions/2026/11/30");
            std::fs::create_dir_all(&day).unwrap();
            let path = day.join(format!("rollout-2026-11-30T10-00-00-{session}.jsonl"));
            let meta = serde_json::json!({
                "timestamp": "2026-11-30T10:00:00.000Z", "ordinal": 0, "type": "session_meta",
                "payload": {"id": session, "cwd": cwd, "cli_version": "0.169.0", "originator": "codex_cli_rs"}
            });
            std::fs::write(&path, format!("{meta}\n")).unwrap();
            path.canonicalize().unwrap()
        }
    }

    const HOLD_ONE: &str = r#"exec 3>>"$1"; exec sleep 30"#;
    const HOLD_TWO: &str = r#"exec 3>>"$1" 4>>"$2"; exec sleep 30"#;
    /// The holder is a grandchild of the root: the root shell waits for a subshell.
    const HOLD_IN_GRANDCHILD: &str = r#"(exec 3>>"$1"; exec sleep 30) & wait"#;

    #[test]
    fn identity_is_stable_and_distinguishes_processes() {
        let me = std::process::id();
        let first = identity(me).unwrap();
        let second = identity(me).unwrap();
        assert_eq!(first, second);
        assert!(first.start_time_ticks > 0);
        let home = Home::new();
        let child = spawn_sh("exec sleep 30", &[], &home.workdir());
        let other = identity(child.0.id()).unwrap();
        assert_ne!(other, first);
        assert!(other.start_time_ticks >= first.start_time_ticks, "child started after us");
    }

    #[test]
    fn probe_reports_cwd_exe_and_parent() {
        let home = Home::new();
        let work = home.workdir();
        let child = spawn_sh("exec sleep 30", &[], &work);
        let pid = child.0.id();
        // Wait for the exec so exe names sleep rather than sh.
        let deadline = Instant::now() + Duration::from_secs(10);
        let facts = loop {
            let facts = probe(pid).unwrap();
            if facts.exe.as_ref().is_some_and(|e| e.to_string_lossy().contains("sleep")) {
                break facts;
            }
            assert!(Instant::now() < deadline, "child never exec'd sleep: {facts:?}");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(facts.identity.pid, pid);
        assert_eq!(facts.ppid, std::process::id());
        assert_eq!(facts.cwd.as_deref(), Some(work.as_path()));
        assert!(!facts.zombie);
    }

    /// LIVE-1's cheap check: the identity `probe` gives, and a zombie (exited, not yet reaped)
    /// told from a live process, from the stat alone.
    #[test]
    fn standing_tells_a_zombie_from_a_live_process() {
        let home = Home::new();
        let live = spawn_sh("exec sleep 30", &[], &home.workdir());
        let pid = live.0.id();
        assert_eq!(standing(pid).unwrap(), (probe(pid).unwrap().identity, false));
        let mut exited = Command::new("true").spawn().unwrap();
        let zombie = exited.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !standing(zombie).unwrap().1 {
            assert!(Instant::now() < deadline, "the unreaped child never showed as a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(standing(zombie).unwrap().0.pid, zombie);
        exited.wait().unwrap();
    }

    /// LIVE-1 through a pidfd: a live process is not exited; its exit shows at once, as a
    /// zombie and after it is reaped; a watch is never opened for another identity (a reused
    /// pid), a zombie or a pid that does not exist.
    #[test]
    fn live_1_the_exit_watch_sees_the_exit_and_never_another_process() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let identity = standing(child.id()).unwrap().0;
        let watch = ExitWatch::open(identity).unwrap().expect("a live process is watched");
        assert_eq!(watch.exited(), Ok(false));
        let other = ProcessIdentity { start_time_ticks: identity.start_time_ticks + 1, ..identity };
        assert!(ExitWatch::open(other).unwrap().is_none(), "another incarnation of the pid is gone, not watched");
        child.kill().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while !standing(child.id()).unwrap().1 {
            assert!(Instant::now() < deadline, "the killed child never showed as a zombie");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(watch.exited(), Ok(true), "a zombie has exited");
        assert!(ExitWatch::open(identity).unwrap().is_none(), "a zombie is gone");
        child.wait().unwrap();
        assert_eq!(watch.exited(), Ok(true), "reaped: still exited");
        assert!(ExitWatch::open(identity).unwrap().is_none(), "no such pid: gone");
        assert_eq!(ExitWatch::open(ProcessIdentity { pid: 0, start_time_ticks: 1 }).unwrap_err(), ProbeError::InvalidPid { pid: 0 });
    }

    #[test]
    fn gone_and_invalid_pids_are_structured_errors() {
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert_eq!(probe(pid), Err(ProbeError::Gone { pid }));
        assert_eq!(probe(0), Err(ProbeError::InvalidPid { pid: 0 }));
        assert_eq!(probe(u32::MAX), Err(ProbeError::InvalidPid { pid: u32::MAX }));
        assert_eq!(discover_rollout(pid, Path::new("/nonexistent"), None), Discovery::ProcessGone);
    }

    #[test]
    fn descendants_are_found_transitively() {
        let home = Home::new();
        let root = spawn_sh("(sleep 30 & wait) & sleep 30 & wait", &[], &home.workdir());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let tree = descendants(root.0.id()).unwrap();
            // subshell, its sleep, and the direct sleep.
            if tree.len() == 3 {
                assert!(!tree.contains(&root.0.id()));
                // The kernel's children lists and the full parent-link scan agree.
                let mut by_lists = tree.clone();
                let mut by_scan = descendants_by_scan(root.0.id()).unwrap();
                by_lists.sort_unstable();
                by_scan.sort_unstable();
                assert_eq!(by_lists, by_scan);
                break;
            }
            assert!(Instant::now() < deadline, "tree never formed: {tree:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn one_held_rollout_is_found_with_its_session() {
        let home = Home::new();
        let work = home.workdir();
        let rollout = home.rollout("sess-1", &work);
        let child = spawn_sh(HOLD_ONE, &[&rollout], &work);
        let pid = child.0.id();
        wait_until_held(pid, &[&rollout]);
        assert_eq!(open_files(pid).unwrap().iter().filter(|p| **p == rollout).count(), 1);
        let found = discover_rollout(pid, &home.codex_home(), Some(&work));
        assert_eq!(found, Discovery::Found { path: rollout.clone(), holder_pid: pid, session_id: "sess-1".into() });
        let exact = discover_rollout_exact(identity(pid).unwrap(), &home.codex_home(), None);
        assert_eq!(exact, found);
        let stale = ProcessIdentity { pid, start_time_ticks: identity(pid).unwrap().start_time_ticks + 1 };
        assert_eq!(discover_rollout_exact(stale, &home.codex_home(), None), Discovery::ProcessGone);
    }

    #[test]
    fn rollout_held_by_a_grandchild_is_found() {
        let home = Home::new();
        let work = home.workdir();
        let rollout = home.rollout("sess-g", &work);
        let root = spawn_sh(HOLD_IN_GRANDCHILD, &[&rollout], &work);
        wait_until_held(root.0.id(), &[&rollout]);
        match discover_rollout(root.0.id(), &home.codex_home(), Some(&work)) {
            Discovery::Found { path, holder_pid, session_id } => {
                assert_eq!(path, rollout);
                assert_ne!(holder_pid, root.0.id());
                assert!(descendants(root.0.id()).unwrap().contains(&holder_pid));
                assert_eq!(session_id, "sess-g");
            }
            other => panic!("expected Found, got {other:?}"),
        }
    }

    #[test]
    fn two_held_rollouts_are_ambiguous() {
        let home = Home::new();
        let work = home.workdir();
        let a = home.rollout("sess-a", &work);
        let b = home.rollout("sess-b", &work);
        let child = spawn_sh(HOLD_TWO, &[&a, &b], &work);
        wait_until_held(child.0.id(), &[&a, &b]);
        let mut expected = vec![a, b];
        expected.sort();
        assert_eq!(
            discover_rollout(child.0.id(), &home.codex_home(), Some(&work)),
            Discovery::Ambiguous { paths: expected }
        );
    }

    /// CORR-3: Codex 0.169 opens the newest rollout of its CODEX_HOME read-only at startup;
    /// a rollout the tree only reads is not its session (found against the real Codex).
    #[test]
    fn corr_3_a_rollout_held_read_only_is_not_the_session() {
        let home = Home::new();
        let work = home.workdir();
        let rollout = home.rollout("sess-r", &work);
        let child = spawn_sh(r#"exec 3<"$1"; exec sleep 30"#, &[&rollout], &work);
        wait_until_held(child.0.id(), &[&rollout]);
        assert_eq!(discover_rollout(child.0.id(), &home.codex_home(), Some(&work)), Discovery::NoneOpen);
    }

    #[test]
    fn files_that_are_not_rollouts_do_not_count() {
        let home = Home::new();
        let work = home.workdir();
        // Right name, wrong place; right place, wrong name.
        let outside = work.join("rollout-2026-11-30T10-00-00-x.jsonl");
        std::fs::write(&outside, "{}\n").unwrap();
        let sessions = home.codex_home().join("sessions");
        std::fs::create_dir_all(&sessions).unwrap();
        let notes = sessions.join("notes.jsonl");
        std::fs::write(&notes, "{}\n").unwrap();
        let child = spawn_sh(HOLD_TWO, &[&outside, &notes], &work);
        wait_until_held(child.0.id(), &[&outside, &notes]);
        assert_eq!(discover_rollout(child.0.id(), &home.codex_home(), Some(&work)), Discovery::NoneOpen);
    }

    #[test]
    fn session_from_another_directory_is_a_cwd_mismatch() {
        let home = Home::new();
        let work = home.workdir();
        let rollout = home.rollout("sess-c", Path::new("/somewhere/else"));
        let child = spawn_sh(HOLD_ONE, &[&rollout], &work);
        wait_until_held(child.0.id(), &[&rollout]);
        assert_eq!(
            discover_rollout(child.0.id(), &home.codex_home(), Some(&work)),
            Discovery::CwdMismatch { path: rollout.clone(), session_cwd: "/somewhere/else".into() }
        );
        // Without a declared cwd there is nothing to mismatch.
        assert!(matches!(discover_rollout(child.0.id(), &home.codex_home(), None), Discovery::Found { .. }));
    }

    /// CORR-3 (a hostile run's D1): another agent's rollout copied over this one's keeps the
    /// file (its name, its inode) but names the other session: never adopted as a session
    /// (the daemon replayed the other agent's turns as this agent's, and two agents showed one
    /// session).
    #[test]
    fn corr_3_a_rollout_whose_record_names_another_session_than_its_name_is_not_adopted() {
        let home = Home::new();
        let work = home.workdir();
        let rollout = home.rollout("sess-m", &work);
        let other = home.rollout("sess-o", &work);
        std::fs::copy(&other, &rollout).unwrap();
        let child = spawn_sh(HOLD_ONE, &[&rollout], &work);
        wait_until_held(child.0.id(), &[&rollout]);
        assert_eq!(
            discover_rollout(child.0.id(), &home.codex_home(), Some(&work)),
            Discovery::Mislabelled { path: rollout.clone(), session_id: "sess-o".into() }
        );
    }

    #[test]
    fn rollout_without_session_meta_yet_is_incomplete_not_found() {
        let home = Home::new();
        let work = home.workdir();
        let rollout = home.rollout("sess-e", &work);
        std::fs::write(&rollout, "").unwrap();
        let child = spawn_sh(HOLD_ONE, &[&rollout], &work);
        wait_until_held(child.0.id(), &[&rollout]);
        assert!(matches!(
            discover_rollout(child.0.id(), &home.codex_home(), Some(&work)),
            Discovery::Incomplete { .. }
        ));
        // A file that starts with a prompt (rewritten in place) says what kind of record it
        // starts with, never its text: the reason reaches the catalog and receipts (a hostile
        // run found the prompt there).
        let prompt = r#"{"type":"event_msg","payload":{"type":"user_message","message":"SECRET-PROMPT hunter2"}}"#;
        std::fs::write(&rollout, format!("{prompt}\n")).unwrap();
        match discover_rollout(child.0.id(), &home.codex_home(), Some(&work)) {
            Discovery::Incomplete { reason } => assert!(reason.contains("starts with a user message") && !reason.contains("SECRET"), "{reason}"),
            other => panic!("expected Incomplete, got {other:?}"),
        }
    }

    #[test]
    fn rollout_path_filter() {
        let sessions = Path::new("/h/sessions");
        assert!(is_rollout_path(Path::new("/h/sessions/2026/11/30/rollout-x.jsonl"), sessions));
        assert!(!is_rollout_path(Path::new("/h/sessions/2026/rollout-x.jsonl (deleted)"), sessions));
        assert!(!is_rollout_path(Path::new("/h/other/rollout-x.jsonl"), sessions));
        assert!(!is_rollout_path(Path::new("/h/sessions/x.jsonl"), sessions));
    }
}
