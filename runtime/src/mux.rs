//! `mux start` in the background and `mux stop`.

use crate::client;
use crate::paths::DataPaths;
use crate::protocol::{exit, ClientRequest, Reply};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How long `mux start` waits for the new daemon to answer.
pub const START_DEADLINE: Duration = Duration::from_secs(15);
const POLL_INTERVAL: Duration = Duration::from_millis(20);
/// How long `mux start` waits while the new daemon's log says it is migrating the database: a
/// migration may scan every stored request once (minutes for millions with a cold cache). A
/// daemon whose log says nothing of a migration is still reported after `START_DEADLINE`.
pub const MIGRATION_DEADLINE: Duration = Duration::from_secs(600);
const MIGRATION_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// Bytes of the log's end read for the migration lines.
const LOG_TAIL_BYTES: u64 = 64 * 1024;

pub fn start_background(paths: &DataPaths, retention: crate::daemon::retention::Retention) -> Reply {
    let mut status = client::call_within(paths, &ClientRequest::Status, STATUS_BOUND);
    // LIFE-6: a daemon that holds the lock but does not serve (stopping, or still starting):
    // wait for its end, or for it to serve. A start right after `mux stop` failed on the lock.
    if status.body["error"] == "daemon_not_serving" {
        let deadline = Instant::now() + not_serving_wait();
        while status.body["error"] == "daemon_not_serving" && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            status = client::call_within(paths, &ClientRequest::Status, STATUS_BOUND);
        }
        if status.body["error"] == "daemon_not_serving" {
            return status;
        }
    }
    if status.exit_code == exit::OK {
        return already_running(paths, &status, "");
    }
    // LIFE-6: a daemon that holds the lock but answers nothing (stopped by SIGSTOP, stuck):
    // another cannot start beside it. The start used to go on anyway, wait 60 s on each of
    // three status calls, and report the new daemon's exit ("already runs") as
    // `daemon_failed` after about 3 minutes (a review).
    if status.body["error"] == "daemon_unresponsive" {
        return unresponsive(paths, "no second daemon was started (the lock is its)");
    }
    if let Err(error) = paths.check_socket_room() {
        return Reply::error(exit::USAGE, "data_dir_path_too_long", error.to_string());
    }
    if let Err(error) = paths.prepare() {
        return Reply::error(exit::ERROR, "no_data_dir", format!("cannot prepare {}: {error}", paths.root.display()));
    }
    // CLI-2: a daemon the status call could not trust (a directory open to others) may run:
    // `prepare` has just repaired the modes, so ask again before starting another one. The
    // start used to go on and report the running daemon as "started meanwhile".
    if status.body["error"] == "data_dir_not_private" {
        let again = client::call(paths, &ClientRequest::Status);
        if again.exit_code == exit::OK {
            return already_running(paths, &again, " (this call repaired its data directory's modes to 0700; nothing else changed)");
        }
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(error) => return Reply::error(exit::ERROR, "no_binary", error.to_string()),
    };
    // The daemon's only voice before its socket answers is this log: a data directory it
    // cannot write must be said here, not discovered as a silent exit.
    let log = crate::paths::open_private_file(&paths.log_file(), std::fs::OpenOptions::new().create(true).append(true));
    let (stdout, stderr) = match log.and_then(|f| Ok((f.try_clone()?, f))) {
        Ok((a, b)) => (Stdio::from(a), Stdio::from(b)),
        Err(error) => {
            let message = format!("cannot write the daemon's log {}: {error}; the data directory must be writable by its owner", paths.log_file().display());
            return Reply::error(exit::ERROR, "data_dir_not_writable", message);
        }
    };
    // What the log held before this start: its reason for exiting is what comes after.
    let log_before = std::fs::metadata(paths.log_file()).map(|m| m.len()).unwrap_or(0);
    let mut command = Command::new(exe);
    command
        .args(["mux", "start", "--foreground"])
        .args(["--retain-events", &retention.events.to_string(), "--retain-days", &retention.days.to_string(), "--retain-mib", &(retention.bytes >> 20).to_string()])
        .env("WAKTERM_DATA_DIR", &paths.root)
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr);
    // LIFE-6: a session (and process group) of its own, so the caller's terminal closing
    // (SIGHUP to its session) never reaches the daemon; it had a group of its own only.
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| rustix::process::setsid().map(drop).map_err(std::io::Error::from));
    }
    let spawned = command.spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => return Reply::error(exit::ERROR, "spawn_failed", error.to_string()),
    };
    let ours = u64::from(child.id());
    let log_file = paths.log_file();
    let waited = wait_for_start(
        &START_BOUNDS,
        || Some(client::call_within(paths, &ClientRequest::Status, PROBE_BOUND)).filter(|status| status.exit_code == exit::OK),
        || child.try_wait().ok().flatten().map(|code| code.to_string()),
        || still_migrating(&log_tail(&log_file)),
        || eprintln!("wakterm: the daemon is migrating its database; waiting up to {MIGRATION_DEADLINE:?}"),
    );
    match waited {
        StartWait::Answered(status) if status.body["pid"].as_u64() == Some(ours) => status,
        // LOCK-1: a concurrent `mux start` won the lock; ours left for it. As for a start
        // that finds a daemon running: this call's settings were not applied.
        StartWait::Answered(status) => already_running(paths, &status, " (started meanwhile by another `mux start`)"),
        StartWait::Exited(code) => {
            let logged = log_since(&log_file, log_before);
            let reason = exit_reason(&logged);
            let mut reply = Reply::error(exit::ERROR, "daemon_failed", format!("the daemon exited with {code}: {reason}"));
            // The daemon's own error object, as a field a script can read (it was only escaped
            // text inside the message: a review).
            if let Some(cause) = logged_error(&logged) {
                reply.body["cause"] = cause;
            }
            reply
        }
        StartWait::TimedOut => Reply::error(exit::ERROR, "start_timeout", format!("the daemon did not answer within {START_DEADLINE:?}")),
        StartWait::StillMigrating => {
            let message = format!(
                "the daemon was still migrating its database after {MIGRATION_DEADLINE:?}; it goes on (see {})",
                log_file.display()
            );
            Reply::error(exit::ERROR, "start_timeout", message)
        }
    }
}

/// `mux start` found a daemon it did not start serving the data directory: exit 1, with the
/// serving daemon's pid; the retention this call asked for is not applied.
fn already_running(paths: &DataPaths, status: &Reply, how: &str) -> Reply {
    let pid = status.body["pid"].clone();
    let message = format!("a wakterm daemon (pid {pid}) already runs for {}{how}; this call's settings were not applied", paths.root.display());
    let mut reply = Reply::error(exit::ERROR, "already_running", message);
    reply.body["pid"] = pid;
    reply
}

/// How long `mux start` waits, and how often it looks.
struct WaitBounds {
    usual: Duration,
    migration: Duration,
    poll: Duration,
    migration_poll: Duration,
}

const START_BOUNDS: WaitBounds =
    WaitBounds { usual: START_DEADLINE, migration: MIGRATION_DEADLINE, poll: POLL_INTERVAL, migration_poll: MIGRATION_POLL_INTERVAL };

/// What waiting for a new daemon ended with.
#[derive(Debug, PartialEq, Eq)]
enum StartWait<T> {
    Answered(T),
    /// The daemon's process ended (its exit status).
    Exited(String),
    /// Nothing answered within the usual bound, and no migration was running.
    TimedOut,
    /// A migration was still running at the migration bound.
    StillMigrating,
}

/// Polls until the daemon answers or exits. Past `usual`, only a migration that `migrating`
/// says is running earns more time, up to `migration` from the start (`on_migrating` runs
/// once when the wait is extended).
fn wait_for_start<T>(
    bounds: &WaitBounds,
    mut answered: impl FnMut() -> Option<T>,
    mut exited: impl FnMut() -> Option<String>,
    mut migrating: impl FnMut() -> bool,
    mut on_migrating: impl FnMut(),
) -> StartWait<T> {
    assert!(bounds.usual <= bounds.migration);
    let started = Instant::now();
    let mut told = false;
    loop {
        if let Some(answer) = answered() {
            return StartWait::Answered(answer);
        }
        if let Some(code) = exited() {
            // A daemon started by a concurrent `mux start` may answer now: this one then
            // exited for it (LOCK-1), and a daemon serves, which is all `mux start` promises.
            return answered().map_or(StartWait::Exited(code), StartWait::Answered);
        }
        let waited = started.elapsed();
        if waited < bounds.usual {
            std::thread::sleep(bounds.poll);
            continue;
        }
        if !migrating() {
            return StartWait::TimedOut;
        }
        if waited >= bounds.migration {
            return StartWait::StillMigrating;
        }
        if !told {
            on_migrating();
            told = true;
        }
        std::thread::sleep(bounds.migration_poll);
    }
}

/// The end of the daemon's log: enough for the lines of this start (a migration logs two, an
/// exit its last five).
fn log_tail(path: &std::path::Path) -> String {
    log_since(path, 0)
}

/// The end of the daemon's log (at most `LOG_TAIL_BYTES`), from byte `from` on: what was
/// written after it.
fn log_since(path: &std::path::Path, from: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut file) = crate::paths::open_regular_file(path) else { return String::new() }; // SEC-3
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    // Shorter than it was: rotated meanwhile (LOG-1), by the start itself when the log was at
    // its bound: all of the new file is this start's.
    let from = if from > len { 0 } else { from };
    let start = len.saturating_sub(LOG_TAIL_BYTES).max(from);
    let mut tail = Vec::new();
    let _ = file.seek(SeekFrom::Start(start)).and_then(|_| file.take(LOG_TAIL_BYTES).read_to_end(&mut tail));
    String::from_utf8_lossy(&tail).into_owned()
}

/// Why a daemon this `mux start` spawned exited: the last five lines it logged, oldest first
/// (the reason is usually the last). Lines of earlier runs are not its: they read as this
/// start's and buried the reason (found by a review).
fn exit_reason(logged: &str) -> String {
    let lines: Vec<&str> = logged.lines().filter(|line| !line.trim().is_empty()).collect();
    match lines.len() {
        0 => "it wrote no reason to its log".to_string(),
        n => lines[n.saturating_sub(5)..].join(" | "),
    }
}

/// The last `wakterm.error.v1` object the daemon wrote to its log (its reason for exiting).
fn logged_error(logged: &str) -> Option<serde_json::Value> {
    logged.lines().rev().filter_map(|line| serde_json::from_str::<serde_json::Value>(line.trim()).ok()).find(|value| value["schema"] == "wakterm.error.v1")
}

/// True when the last daemon start in `log` began a database migration that has not ended.
pub fn still_migrating(log: &str) -> bool {
    let this_start = log.rsplit(crate::logging::STARTING_LOG).next().unwrap_or(log);
    match this_start.rfind(crate::logging::MIGRATING_LOG) {
        Some(at) => !this_start[at..].contains(crate::logging::MIGRATED_LOG),
        None => false,
    }
}

pub fn stop(paths: &DataPaths, all: bool) -> Reply {
    let status = client::call_within(paths, &ClientRequest::Status, STATUS_BOUND);
    // LIFE-6: a daemon that cannot answer a status call cannot act on a stop either: a frozen
    // one reads it late and does nothing with it (CLI-4). Sending it anyway made `mux stop`
    // wait twice the call bound (about 123 s, a review) to end as unresponsive all the same.
    if status.body["error"] == "daemon_unresponsive" {
        return unresponsive(paths, "it was not asked to stop (a frozen daemon that reads a stop late does nothing with it)");
    }
    // LIFE-6: a daemon already stopping (another `mux stop`, SIGTERM) no longer serves: this
    // stop waits for its end as the first does. It answered `daemon_not_running` (exit 3)
    // while the daemon drained and held its lock (a hostile run).
    if status.body["error"] == "daemon_not_serving" {
        return already_stopping(paths, all, status);
    }
    let reply = client::call(paths, &ClientRequest::Stop { all });
    if reply.exit_code != exit::OK {
        return reply;
    }
    // Wait until the daemon has let go of its socket and ended, so a following start cannot
    // race it: longer while agent starts or restarts are under way (its end waits for them).
    let changes = reply.body["changes_under_way"].as_u64().unwrap_or(0) > 0;
    let wait = if changes { STOP_EXIT_WAIT.saturating_add(crate::daemon::CHANGES_AT_EXIT) } else { STOP_EXIT_WAIT };
    let deadline = Instant::now() + wait;
    while Instant::now() < deadline && client::connect(paths).is_ok() {
        std::thread::sleep(POLL_INTERVAL);
    }
    let pid = status.body["pid"].as_u64();
    if let Some(pid) = pid {
        while Instant::now() < deadline && still_holds_its_lock(paths, pid) {
            std::thread::sleep(POLL_INTERVAL);
        }
        // LIFE-6: never "stopped" while it runs (a hostile run: `mux stop` answered, and a
        // `mux start` right after found the lock still held).
        if still_holds_its_lock(paths, pid) {
            return still_running(pid, wait, reply);
        }
    }
    reply
}

/// LIFE-6: the daemon `pid` has not ended: a thread of it runs, and the data directory's lock
/// is not known to be free (the daemon's is released only when its last thread ends; a probe
/// that fails proves nothing, a review). The pid alone is not enough: one reused by another
/// process after the daemon's end made `mux stop` answer `daemon_still_running` for a daemon
/// long gone (a review).
fn still_holds_its_lock(paths: &DataPaths, pid: u64) -> bool {
    is_running(pid) && !paths.lock_is_free()
}

/// LIFE-6: `mux stop` found a daemon that holds the lock but no longer serves: it waits for its
/// end. Without `--all` that is the stop asked for; with it, no agent was stopped by this call
/// (the stop under way may not be `--all`): exit 1, saying so.
fn already_stopping(paths: &DataPaths, all: bool, status: Reply) -> Reply {
    let deadline = Instant::now() + not_serving_wait();
    while Instant::now() < deadline && !paths.lock_is_free() {
        std::thread::sleep(POLL_INTERVAL);
    }
    if !paths.lock_is_free() {
        let pid = paths.lock_file_pid();
        let message = format!("the daemon (pid {pid}) was stopping already, and still holds its lock after {:?}; `kill -9 {pid}` ends it at once", not_serving_wait());
        return Reply::error(exit::ERROR, "daemon_still_running", message);
    }
    if all {
        let message = "the daemon was stopping already (another `mux stop` or SIGTERM) and has ended; this call stopped no agent itself, and one stopped without --all left its agents running: `mux start`, then `mux stop --all`";
        let mut reply = Reply::error(exit::ERROR, "agents_not_stopped", message);
        reply.body["status"] = status.body;
        return reply;
    }
    Reply::ok(serde_json::json!({"schema": "wakterm.mux-stop.v1", "stopping": true, "already_stopping": true, "agents_stopped": [], "agents_not_stopped": []}))
}

/// LIFE-6: the longest a daemon that no longer serves may take to end (its drain, the starts
/// and restarts it waits for, its blocking calls), with room.
fn not_serving_wait() -> Duration {
    STOP_EXIT_WAIT.saturating_add(crate::daemon::CHANGES_AT_EXIT)
}

/// LIFE-6: how long `mux stop` waits for the daemon's end after its answer: its drain
/// (LIFE-8), the last answers and its bounded wait for blocking calls, with room to spare.
pub const STOP_EXIT_WAIT: Duration = crate::daemon::DRAIN_DEADLINE
    .saturating_add(crate::daemon::LAST_ANSWERS)
    .saturating_add(crate::daemon::BLOCKING_CALLS_AT_EXIT)
    .saturating_add(Duration::from_secs(4));

/// LIFE-6: the daemon answered the stop but still runs after its wait: exit 1, the
/// stop's answer kept (which agents it stopped), and what to do.
fn still_running(pid: u64, waited: Duration, stop: Reply) -> Reply {
    let message = format!(
        "the daemon (pid {pid}) answered the stop but still runs after {waited:?}; a `mux start` fails until it ends (it ends by itself once its last calls do; `kill -9 {pid}` ends it at once)"
    );
    let mut reply = Reply::error(exit::ERROR, "daemon_still_running", message);
    reply.body["pid"] = pid.into();
    reply.body["stop"] = stop.body;
    reply
}

/// How long `mux start` and `mux stop` wait for their first status call; a daemon that answers
/// nothing within it is not asked to stop, nor started beside.
const STATUS_BOUND: Duration = START_DEADLINE;

/// How long each of `mux start`'s looks at the daemon it started waits for an answer (a new
/// daemon answers in milliseconds once it listens; the look is repeated until the start's
/// bound).
const PROBE_BOUND: Duration = Duration::from_secs(2);

/// LIFE-6: `mux start` or `mux stop` found a daemon that does not answer: exit 7, nothing sent
/// or started (`what`), and how to end it by hand (its pid from the lock file, when readable).
fn unresponsive(paths: &DataPaths, what: &str) -> Reply {
    let pid = std::fs::read_to_string(paths.lock_file()).ok().and_then(|text| text.trim().parse::<u64>().ok());
    let named = pid.map_or("the daemon".to_string(), |pid| format!("the daemon (pid {pid}, from {})", paths.lock_file().display()));
    let by_hand = pid.map_or("with `kill` (SIGTERM stops it as `mux stop` does)".to_string(), |pid| {
        format!("with `kill {pid}` (SIGTERM stops it as `mux stop` does); one stopped by SIGSTOP resumes with `kill -CONT {pid}`")
    });
    let message = format!(
        "{named} did not answer a status call within {STATUS_BOUND:?}, so {what}; end it {by_hand}"
    );
    let mut reply = Reply::error(exit::UNRESPONSIVE, "daemon_unresponsive", message);
    if let Some(pid) = pid {
        reply.body["pid"] = pid.into();
    }
    reply
}

/// `pid` exists and one of its threads is neither a zombie nor dead. A process whose threads
/// cannot be listed counts as gone; `procfs` parses the state field after the last `)`, so a
/// `comm` holding ") Z " does not fool it. LIFE-6: any thread counts, for a process's lock is
/// released when its last thread ends; its leader shows a zombie as soon as it exits, while
/// another may still be ending (one in an fsync): `mux stop` answered while a thread of the
/// daemon ran (a test run).
fn is_running(pid: u64) -> bool {
    use procfs::process::{ProcState, Process};
    let Ok(pid) = i32::try_from(pid) else { return false };
    let Ok(tasks) = Process::new(pid).and_then(|process| process.tasks()) else { return false };
    tasks.flatten().any(|task| task.stat().is_ok_and(|stat| !matches!(stat.state(), Ok(ProcState::Zombie | ProcState::Dead))))
}

#[cfg(test)]
mod tests {
    use super::{exit_reason, is_running, log_since, still_migrating, wait_for_start, StartWait, WaitBounds};
    use std::io::Write;
    use std::time::{Duration, Instant};

    /// LOG-*: a start that failed names the lines it logged, oldest first, never an earlier
    /// run's (they read as this start's and buried its reason).
    #[test]
    fn a_failed_start_names_only_its_own_log_lines() {
        let dir = std::env::temp_dir().join(format!("wakterm-mux-unit-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        let log = dir.join("mux.log");
        std::fs::write(&log, "old run 1\nold run 2\nold run 3\nold run 4\n").unwrap();
        let before = std::fs::metadata(&log).unwrap().len();
        std::fs::OpenOptions::new().append(true).open(&log).unwrap().write_all(b"starting\nwakterm.db belongs to uid 65534\n").unwrap();
        assert_eq!(exit_reason(&log_since(&log, before)), "starting | wakterm.db belongs to uid 65534");
        assert_eq!(exit_reason(&log_since(&log, std::fs::metadata(&log).unwrap().len())), "it wrote no reason to its log");
        // The daemon's own error object is kept as a field (`cause`), the last one logged.
        let logged = "starting\n{\"schema\":\"wakterm.error.v1\",\"error\":\"schema_too_new\",\"message\":\"m\"}\nexiting\n";
        assert_eq!(super::logged_error(logged).expect("the object")["error"], "schema_too_new");
        assert_eq!(super::logged_error("starting\n{\"x\":1}\n"), None);
        // Rotated by the start (the log was at its bound): the new file is all this start's.
        std::fs::write(&log, "cannot open the database\n").unwrap();
        assert_eq!(exit_reason(&log_since(&log, before)), "cannot open the database");
        let seven: String = (1..=7).map(|n| format!("line {n}\n")).collect();
        assert_eq!(exit_reason(&seven), "line 3 | line 4 | line 5 | line 6 | line 7", "the last five, oldest first");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// LIFE-6: `mux stop` never answers success while the daemon that answered the stop runs
    /// on past its wait: `daemon_still_running`, with its pid and the stop's answer. Here a
    /// fake daemon whose pid is a sleeping child.
    #[test]
    fn life_6_a_stop_answered_by_a_daemon_that_runs_on_is_not_success() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = crate::paths::DataPaths { root: dir.path().join("d") };
        paths.prepare().expect("private dirs");
        // The daemon's lock, held here for the fake daemon.
        let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let lock = rustix::fs::open(&paths.root, flags, rustix::fs::Mode::empty()).expect("open the data directory");
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).expect("lock");
        let reply = stop_against_a_daemon_whose_pid_runs_on(&paths);
        assert_eq!((reply.exit_code, reply.body["error"].as_str()), (crate::protocol::exit::ERROR, Some("daemon_still_running")), "{:?}", reply.body);
        assert_eq!(reply.body["stop"]["agents_stopped"][0], "ada", "the stop's answer is kept: {:?}", reply.body);
        // The lock released: the pid that runs on is another process's (reused): stopped.
        drop(lock);
        let reply = stop_against_a_daemon_whose_pid_runs_on(&paths);
        assert_eq!(reply.exit_code, crate::protocol::exit::OK, "{:?}", reply.body);
        assert_eq!(reply.body["agents_stopped"][0], "ada", "{:?}", reply.body);
    }

    /// `mux stop --all` against a fake daemon that answers status (naming a `sleep` process's
    /// pid, which runs on) and the stop, then leaves its socket.
    fn stop_against_a_daemon_whose_pid_runs_on(paths: &crate::paths::DataPaths) -> crate::protocol::Reply {
        use std::io::{BufRead, BufReader};
        let mut sleeper = std::process::Command::new("sleep").arg("120").spawn().expect("sleep");
        let listener = std::os::unix::net::UnixListener::bind(paths.socket()).expect("bind");
        let (socket, pid) = (paths.socket(), sleeper.id());
        let daemon = std::thread::spawn(move || {
            let status = format!("{{\"exit_code\":0,\"body\":{{\"schema\":\"wakterm.mux-status.v1\",\"running\":true,\"pid\":{pid}}}}}\n");
            let stopping = "{\"exit_code\":0,\"body\":{\"schema\":\"wakterm.mux-stop.v1\",\"stopping\":true,\"agents_stopped\":[\"ada\"],\"agents_not_stopped\":[]}}\n".to_string();
            for reply in [status, stopping] {
                let (stream, _) = listener.accept().expect("accept");
                let mut request = String::new();
                BufReader::new(&stream).read_line(&mut request).expect("request");
                write!(&stream, "{reply}").expect("write");
            }
            drop(listener);
            std::fs::remove_file(socket).expect("unlink");
        });
        let reply = super::stop(paths, true);
        daemon.join().expect("fake daemon");
        sleeper.kill().unwrap();
        sleeper.wait().unwrap();
        if reply.exit_code != crate::protocol::exit::OK {
            assert_eq!(reply.body["pid"], pid, "{:?}", reply.body);
        }
        reply
    }

    #[test]
    fn a_zombie_or_missing_process_is_not_running() {
        assert!(is_running(u64::from(std::process::id())));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = u64::from(child.id());
        // Unreaped after it exits: a zombie, whose /proc entry still exists.
        let deadline = Instant::now() + Duration::from_secs(10);
        while is_running(pid) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(std::path::Path::new(&format!("/proc/{pid}")).exists(), "still a zombie");
        assert!(!is_running(pid));
        child.wait().unwrap();
        assert!(!is_running(u64::from(u32::MAX)), "beyond any pid");
    }

    // `mux start` waits past START_DEADLINE only while the last start's log says a migration
    // began and has not ended.
    #[test]
    fn still_migrating_reads_only_the_last_start() {
        use crate::logging::{MIGRATED_LOG, MIGRATING_LOG, STARTING_LOG};
        let start = |rest: &str| format!("t0 INFO {STARTING_LOG} pid=1\n{rest}");
        assert!(!still_migrating(""));
        assert!(!still_migrating(&start("t1 INFO event retention\n")));
        assert!(still_migrating(&start(&format!("t1 INFO {MIGRATING_LOG} from=3 to=5\n"))));
        assert!(!still_migrating(&start(&format!("t1 INFO {MIGRATING_LOG} from=3 to=5\nt2 INFO {MIGRATED_LOG} to=5\n"))));
        let crashed_then_restarted = format!("{}{}", start(&format!("t1 INFO {MIGRATING_LOG} from=3 to=5\n")), start("t3 INFO event retention\n"));
        assert!(!still_migrating(&crashed_then_restarted), "an earlier start's unfinished migration is not this one's");
    }

    // The wait past the usual bound: only while a migration runs, never past the migration
    // bound, and an answer during it ends it (small bounds stand in for 15 s and 10 min).
    #[test]
    fn mux_start_waits_longer_only_while_a_migration_runs() {
        let bounds = WaitBounds {
            usual: Duration::from_millis(40),
            migration: Duration::from_millis(400),
            poll: Duration::from_millis(2),
            migration_poll: Duration::from_millis(5),
        };
        let never = || None::<()>;
        let started = Instant::now();
        assert_eq!(wait_for_start(&bounds, never, || None, || false, || panic!("not extended")), StartWait::TimedOut);
        assert!(started.elapsed() < bounds.migration, "no migration: the usual bound ends it");
        let (started, mut told) = (Instant::now(), 0);
        assert_eq!(wait_for_start(&bounds, never, || None, || true, || told += 1), StartWait::StillMigrating);
        assert!(started.elapsed() >= bounds.migration);
        assert_eq!(told, 1, "said once");
        let answer_at = Instant::now() + Duration::from_millis(120);
        let answered = || (Instant::now() >= answer_at).then_some("status");
        assert_eq!(wait_for_start(&bounds, answered, || None, || true, || ()), StartWait::Answered("status"));
        assert_eq!(wait_for_start(&bounds, never, || Some("1".to_string()), || true, || ()), StartWait::Exited("1".to_string()));
    }
}
