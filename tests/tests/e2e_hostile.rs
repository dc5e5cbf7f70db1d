//! Issue 8, hostile conditions: what a hostile or careless local user did to break a promise,
//! each replayed against the real binary. Each test failed on the code before its fix.

mod support;

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{new_id, World};

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";
/// An unprivileged uid for the "other user" of the SEC tests (they need root to use it).
const OTHER_UID: u32 = 65534;

fn is_root() -> bool {
    rustix::process::getuid().is_root()
}

/// `mux start` with a low descriptor limit the daemon inherits (soft `soft`, hard `hard`).
fn mux_start_with_nofile(w: &World, soft: u64, hard: u64) {
    let mut cmd = w.cmd(&["mux", "start"]);
    // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = rustix::process::Rlimit { current: Some(soft), maximum: Some(hard) };
            rustix::process::setrlimit(rustix::process::Resource::Nofile, limit).map_err(std::io::Error::from)
        });
    }
    let out = cmd.stdin(Stdio::null()).output().expect("mux start");
    assert!(out.status.success(), "mux start: {}", String::from_utf8_lossy(&out.stdout));
}

fn soft_nofile_of(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits.lines().find(|l| l.starts_with("Max open files")).expect("nofile line");
    line.split_whitespace().nth(3).expect("soft").parse().expect("number")
}

/// Reads what the daemon said on a held connection, if anything, within a short bound.
fn said(stream: &mut UnixStream) -> Option<Value> {
    stream.set_read_timeout(Some(Duration::from_millis(50))).ok()?;
    let mut line = String::new();
    BufReader::new(stream).read_line(&mut line).ok()?;
    serde_json::from_str(&line).ok()
}

/// CONN-1, CONN-2, CONN-3, LIVE-1: far more idle connections and abandoned watchers than the
/// daemon has descriptors. The daemon raises its soft limit, answers connections over its cap
/// with a clear error, drops idle ones, notices hung-up watchers, and keeps serving: the agent
/// stays alive in the catalog and a return-final request completes.
#[test]
fn conn_1_descriptor_pressure_never_wedges_the_daemon_or_kills_an_agent() {
    let w = World::new(EXE);
    mux_start_with_nofile(&w, 96, 160);
    let pid = w.daemon_pid();
    assert_eq!(soft_nofile_of(pid), 160, "CONN-1: the daemon raises its soft limit to the hard one");
    let entry = w.ready_agent("zola", REPLY, &[]);
    let socket = w.data.join("run/mux.sock");
    // Abandoned watchers: subscribe, then hang up without reading.
    for _ in 0..40 {
        let mut watcher = UnixStream::connect(&socket).expect("connect");
        watcher.write_all(b"{\"op\":\"watch\",\"after\":0,\"once\":false}\n").expect("watch");
    }
    // Idle connections that never send a request, held for the rest of the test.
    let mut idle: Vec<UnixStream> = (0..300).filter_map(|_| UnixStream::connect(&socket).ok()).collect();
    assert!(idle.len() > 200, "the kernel queued our connections");
    // Within the idle timeout plus slack the daemon serves again, although we still hold them.
    let deadline = Instant::now() + Duration::from_secs(30);
    let catalog = loop {
        let out = w.run(&["agent", "catalog"]);
        if out.code == 0 {
            break out.json;
        }
        assert!(Instant::now() < deadline, "the daemon never served again under descriptor pressure: {out:?}");
        std::thread::sleep(Duration::from_millis(200));
    };
    let zola = catalog["agents"].as_array().unwrap().iter().find(|a| a["name"] == "zola").cloned().unwrap();
    assert_ne!(zola["state"], "stopped", "LIVE-1: descriptor pressure made a live agent look exited: {zola}");
    assert_eq!(zola["incarnation"], entry["incarnation"]);
    let answers: Vec<Value> = idle.iter_mut().filter_map(said).collect();
    let kinds: Vec<&str> = answers.iter().filter_map(|a| a["body"]["error"].as_str()).collect();
    assert!(kinds.contains(&"too_many_connections"), "CONN-1: over the cap, a clear error: {kinds:?}");
    assert!(kinds.contains(&"request_timeout"), "CONN-2: idle connections are dropped: {kinds:?}");
    drop(idle);
    let id = new_id();
    let incarnation = entry["incarnation"].as_str().unwrap();
    let out = w.run(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", &id, "--return-final", "still here?"]);
    assert_eq!(out.code, 0, "{out:?}");
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "completed", "{event}");
}

/// CLI-1: `request watch --once` and a persistent watch against a stopped (SIGSTOP) daemon end
/// with `daemon_unresponsive` (exit 7) instead of waiting forever; so do `mux stop` and
/// `mux start`, within their status call's bound, without asking the daemon to stop or
/// starting another beside it (LIFE-6; a start waited about 3 minutes and named the new
/// daemon's exit, `daemon_failed`: a review).
#[test]
fn cli_1_watch_against_a_stopped_daemon_is_bounded() {
    let w = World::new(EXE);
    w.mux_start();
    let pid = w.daemon_pid();
    // SAFETY: a signal to our own daemon's pid.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    let spawn = |args: &[&str]| w.cmd(args).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("spawn");
    let mut children =
        [spawn(&["agent", "request", "watch", "--once"]), spawn(&["agent", "request", "watch"]), spawn(&["mux", "stop"]), spawn(&["mux", "start"])];
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut codes = Vec::new();
    for child in &mut children {
        let code = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status.code();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                break None;
            }
            std::thread::sleep(Duration::from_millis(100));
        };
        let mut stdout = String::new();
        let _ = child.stdout.take().unwrap().read_to_string(&mut stdout);
        codes.push((code, stdout));
    }
    // SAFETY: as above.
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    for (code, stdout) in &codes {
        assert_eq!(*code, Some(7), "a watch or stop of a stopped daemon must end with exit 7: {stdout}");
        assert!(stdout.contains("daemon_unresponsive"), "{stdout}");
    }
    // LIFE-6: `mux stop` asked nothing of a daemon that did not answer its status call (it
    // waited about 123 s for a stop the thawed daemon would not act on), and says how to end it.
    let stop: serde_json::Value = serde_json::from_str(codes[2].1.trim()).expect("one JSON line");
    assert_eq!(stop["pid"], pid, "{stop}");
    assert!(stop["message"].as_str().unwrap_or_default().contains(&format!("kill -CONT {pid}")), "{stop}");
    let start: serde_json::Value = serde_json::from_str(codes[3].1.trim()).expect("one JSON line");
    assert_eq!(start["pid"], pid, "{start}");
    assert!(start["message"].as_str().unwrap_or_default().contains("no second daemon was started"), "{start}");
    assert_eq!(w.run(&["mux", "status"]).code, 0, "the daemon was not asked to stop and runs on");
    assert_eq!(w.daemon_pid(), pid, "and it is the same daemon");
}

/// SEC-2: a data directory another user created (as in a world-writable /tmp) is refused
/// before a byte of the prompt is sent: its forged `accepted` never reaches the caller.
#[test]
fn sec_2_cli_refuses_a_data_dir_another_user_owns() {
    if !is_root() {
        eprintln!("skipped: needs root to act as another user");
        return;
    }
    let w = World::new(EXE);
    let run = w.data.join("run");
    std::fs::create_dir_all(&run).unwrap();
    for dir in [&w.data, &run] {
        std::os::unix::fs::chown(dir, Some(OTHER_UID), Some(OTHER_UID)).unwrap();
    }
    let heard = serve_forged_receipt_as_other_user(&run.join("mux.sock"), false);
    let out = w.run(&["agent", "send", "zola", "my private prompt"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.json["error"], "data_dir_not_private", "{out:?}");
    assert!(!heard().contains("private prompt"), "the prompt reached another user's server");
}

/// SEC-2: a socket in our own private directory served by a process of another user (it
/// called listen() as that user) is refused by its peer credentials.
#[test]
fn sec_2_cli_refuses_a_socket_served_by_another_user() {
    if !is_root() {
        eprintln!("skipped: needs root to act as another user");
        return;
    }
    let w = World::new(EXE);
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    paths.prepare().unwrap();
    let heard = serve_forged_receipt_as_other_user(&paths.socket(), true);
    let out = w.run(&["agent", "send", "zola", "my private prompt"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert_eq!(out.json["error"], "daemon_not_trusted", "{out:?}");
    assert!(!heard().contains("private prompt"), "the prompt reached another user's server");
}

/// CLI-4: a request the daemon reads after its caller's wait ended (`give_up_at_monotonic_ms`
/// and `give_up_at_ms`, which every waiting CLI call sends) is answered `caller_gone` and not
/// done. A daemon frozen for
/// minutes (SIGSTOP) stopped an agent and itself for callers told long before that it did
/// not answer (a review). A request whose caller still waits is done as ever.
#[test]
fn cli_4_a_request_read_after_its_caller_gave_up_is_not_done() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", "ok", &[]);
    let socket = w.data.join("run").join("mux.sock");
    let ask = |line: String| {
        let mut stream = UnixStream::connect(&socket).expect("connect");
        stream.write_all(format!("{line}\n").as_bytes()).expect("send");
        stream.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).expect("answer");
        serde_json::from_str::<Value>(&answer).expect("a JSON answer")
    };
    let past = wakterm_runtime::driver::now_ms() - 1_000;
    for line in [json!({"op": "agent_stop", "target": "zola", "give_up_at_ms": past}), json!({"op": "stop", "all": true, "give_up_at_ms": past})] {
        let answer = ask(line.to_string());
        assert_eq!(answer["body"]["error"], "caller_gone", "{line}: {answer}");
    }
    assert!(w.catalog_entry("zola").is_some(), "the agent was not stopped");
    assert_eq!(w.run(&["mux", "status"]).code, 0, "the daemon still runs");
    let bad = ask(json!({"op": "status", "give_up_at_ms": "soon"}).to_string());
    assert_eq!(bad["body"]["error"], "bad_request", "{bad}");
    // The monotonic field decides when a client sent it (as the CLI does): a wall clock stepped
    // back between the send and the read (the wall field still ahead) let a late request
    // through, and one stepped forward refused a request in time.
    let (wall, monotonic) = (wakterm_runtime::driver::now_ms(), wakterm_runtime::holder::protocol::monotonic_ms());
    let clock = wakterm_runtime::protocol::monotonic_clock_id().expect("this machine names its monotonic clock (boot id, time namespace)");
    let late = json!({"op": "agent_stop", "target": "zola", "give_up_at_ms": wall + 60_000, "give_up_at_monotonic_ms": monotonic.saturating_sub(1_000), "give_up_clock": &clock});
    let answer = ask(late.to_string());
    assert_eq!(answer["body"]["error"], "caller_gone", "{late}: {answer}");
    assert!(w.catalog_entry("zola").is_some(), "the agent was not stopped");
    for bad in [json!({"op": "status", "give_up_at_monotonic_ms": -5}), json!({"op": "status", "give_up_clock": 7})] {
        let answer = ask(bad.to_string());
        assert_eq!(answer["body"]["error"], "bad_request", "{bad}: {answer}");
    }
    // Another clock's monotonic time (another boot, a client in another time namespace, a
    // socket forwarded from another machine) means nothing here: the wall field decides.
    let foreign = json!({"op": "agent_stop", "target": "zola", "give_up_at_ms": wall - 1_000, "give_up_at_monotonic_ms": monotonic + 60_000, "give_up_clock": "another-boot time:[1]"});
    let answer = ask(foreign.to_string());
    assert_eq!(answer["body"]["error"], "caller_gone", "{foreign}: {answer}");
    let in_time = json!({"op": "agent_stop", "target": "zola", "give_up_at_ms": wall - 1_000, "give_up_at_monotonic_ms": monotonic + 60_000, "give_up_clock": &clock});
    let answer = ask(in_time.to_string());
    assert!(answer["exit_code"] == 0 && answer["body"].get("error").is_none(), "a caller that still waits is served: {answer}");
    assert!(w.catalog_entry("zola").is_none(), "stopped");
    // An older client's wall field alone is judged by the wall clock, as before.
    w.ready_agent("zola", "ok", &[]);
    let future = wakterm_runtime::driver::now_ms() + 60_000;
    let answer = ask(json!({"op": "agent_stop", "target": "zola", "give_up_at_ms": future}).to_string());
    assert!(answer["exit_code"] == 0 && answer["body"].get("error").is_none(), "a caller that still waits is served: {answer}");
    assert!(w.catalog_entry("zola").is_none(), "stopped");
}

/// SEC-2: a symbolic link in our run directory where the socket belongs, to another data
/// directory's socket, is refused before anything is sent: the CLI followed it, so `mux stop`
/// stopped the other directory's daemon and `mux start` said one "already runs" here (a
/// review). `mux start` puts this directory's own socket in its place.
#[test]
fn sec_2_cli_refuses_a_socket_that_is_a_link() {
    let (here, there) = (World::new(EXE), World::new(EXE));
    there.mux_start();
    let paths = wakterm_runtime::paths::DataPaths { root: here.data.clone() };
    paths.prepare().unwrap();
    std::os::unix::fs::symlink(there.data.join("run").join("mux.sock"), paths.socket()).unwrap();
    for args in [&["mux", "status"][..], &["mux", "stop"], &["agent", "catalog"]] {
        let out = here.run(args);
        assert_eq!((out.code, out.json["error"].as_str()), (1, Some("data_dir_not_private")), "{args:?}: {out:?}");
        assert!(out.stdout.contains("is a symbolic link") && out.stdout.contains("mux start"), "{out:?}");
    }
    assert_eq!(there.run(&["mux", "status"]).code, 0, "the other directory's daemon still runs");
    here.mux_start();
    let status = here.ok(&["mux", "status"]);
    assert_eq!(status["data_dir"].as_str(), here.data.to_str(), "{status}");
    assert_ne!(status["pid"], there.ok(&["mux", "status"])["pid"], "{status}");
}

/// Binds `socket`, then forks a child that becomes OTHER_UID, calls listen(), answers one
/// connection with a forged `accepted` receipt and writes what it heard to a file. Returns a
/// reader of that file, which also removes it (it lives in the shared temporary directory, where
/// the other user can write). With `bind_as_root`, the parent binds (in a directory only root
/// may write); otherwise the child binds too.
fn serve_forged_receipt_as_other_user(socket: &std::path::Path, bind_as_root: bool) -> impl FnOnce() -> String {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketType};
    let heard_path = std::env::temp_dir().join(format!("wk-heard-{}", new_id()));
    std::fs::write(&heard_path, b"").unwrap();
    std::os::unix::fs::chown(&heard_path, Some(OTHER_UID), None).unwrap();
    let addr = SocketAddrUnix::new(socket).unwrap();
    let fd = rustix::net::socket(AddressFamily::UNIX, SocketType::STREAM, None).unwrap();
    if bind_as_root {
        rustix::net::bind(&fd, &addr).unwrap();
    }
    let forged = b"{\"exit_code\":0,\"body\":{\"schema\":\"wakterm.agent-admission.receipt.v1\",\"classification\":\"accepted\",\"forged\":true}}\n";
    // SAFETY: the child only makes system calls and exits; it never returns into the test.
    let child = unsafe { libc::fork() };
    if child == 0 {
        let serve = || -> Option<()> {
            // SAFETY: plain system calls in the single-threaded child.
            if unsafe { libc::setgid(OTHER_UID) } != 0 || unsafe { libc::setuid(OTHER_UID) } != 0 {
                return None;
            }
            if !bind_as_root {
                rustix::net::bind(&fd, &addr).ok()?;
            }
            rustix::net::listen(&fd, 8).ok()?;
            let conn = rustix::net::accept(&fd).ok()?;
            let mut stream = UnixStream::from(conn);
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            let mut line = String::new();
            let _ = BufReader::new(&stream).read_line(&mut line);
            let _ = std::fs::write(&heard_path, line.as_bytes());
            let _ = stream.write_all(forged);
            Some(())
        };
        let _ = serve();
        // SAFETY: leave the forked child without running the parent's destructors.
        unsafe { libc::_exit(0) };
    }
    assert!(child > 0, "fork");
    // Give the child time to listen.
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::fs::symlink_metadata(socket).is_err() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(200));
    move || {
        // SAFETY: reap or end our own child.
        unsafe {
            libc::kill(child, libc::SIGKILL);
            libc::waitpid(child, std::ptr::null_mut(), 0);
        }
        let heard = std::fs::read_to_string(&heard_path).unwrap_or_default();
        std::fs::remove_file(&heard_path).expect("the heard file is ours to remove");
        heard
    }
}

/// SEC-1: a symlinked data directory and a symlinked lock file are refused by the daemon; the
/// link targets keep their mode and bytes.
#[test]
fn sec_1_daemon_refuses_symlinked_data_dir_and_lock_file() {
    let w = World::new(EXE);
    let target = w.root.join("elsewhere");
    std::fs::create_dir(&target).unwrap();
    std::fs::set_permissions(&target, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink(&target, &w.data).unwrap();
    let out = w.run(&["mux", "start"]);
    assert_ne!(out.code, 0, "a symlinked data directory was accepted: {out:?}");
    assert!(out.stdout.contains("symbolic link"), "{out:?}");
    assert_eq!(std::fs::metadata(&target).unwrap().mode() & 0o777, 0o755, "the link's target was chmodded");
    std::fs::remove_file(&w.data).unwrap();

    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    paths.prepare().unwrap();
    let precious = w.root.join("precious");
    std::fs::write(&precious, b"keep me").unwrap();
    std::os::unix::fs::symlink(&precious, paths.lock_file()).unwrap();
    let out = w.run(&["mux", "start"]);
    assert_ne!(out.code, 0, "a symlinked lock file was accepted: {out:?}");
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me", "the lock's link target was truncated");
    std::fs::remove_file(paths.lock_file()).unwrap();

    std::os::unix::fs::symlink(&precious, paths.database()).unwrap();
    let out = w.run(&["mux", "start"]);
    assert_ne!(out.code, 0, "a symlinked database was accepted: {out:?}");
    assert!(out.stdout.contains("symbolic link"), "{out:?}");
    assert_eq!(std::fs::read(&precious).unwrap(), b"keep me", "the database's link target was touched");
}

/// The pids of the daemons (`mux start --foreground`) serving `w`'s data directory.
fn daemons_of(w: &World) -> Vec<i32> {
    w.our_pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let ours = format!("WAKTERM_DATA_DIR={}", w.data.display());
            cmdline.windows(12).any(|x| x == b"--foreground") && environ.split(|b| *b == 0).any(|v| v == ours.as_bytes())
        })
        .collect()
}

/// LOCK-1: `mux start` run by many callers at once starts one daemon; the others' daemons,
/// which lost the lock, exit as soon as it serves; its caller gets its status, every other one
/// `already_running` with its pid. They used
/// to wait out the whole 3 s lock wait, so a `mux stop` within it ended the first daemon and a
/// loser took the lock and served on: a daemon ran after `mux stop` had answered.
#[test]
fn lock_1_concurrent_starts_leave_one_daemon_and_mux_stop_ends_it() {
    let w = World::new(EXE);
    let starts: Vec<_> = (0..6).map(|_| w.cmd(&["mux", "start"]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("mux start")).collect();
    let mut pids = std::collections::BTreeSet::new();
    let mut started = 0;
    for start in starts {
        let out = start.wait_with_output().unwrap();
        let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
        // One start's own daemon serves; every other is told a daemon already runs (exit 1,
        // its settings not applied), as a start after it is.
        match out.status.success() {
            true => started += 1,
            false => assert_eq!((out.status.code(), answer["error"].as_str()), (Some(1), Some("already_running")), "{answer}"),
        }
        pids.insert(answer["pid"].as_u64().unwrap());
    }
    assert_eq!(started, 1, "exactly one start started the daemon");
    assert_eq!(pids.len(), 1, "one daemon answered them all: {pids:?}");
    // Well within the 3 s lock wait: the losers saw the winner serve and left.
    std::thread::sleep(Duration::from_millis(500));
    let daemons = daemons_of(&w);
    assert_eq!(daemons.len(), 1, "only the serving daemon is left: {daemons:?}");
    w.ok(&["mux", "stop"]);
    w.wait_until("the daemon exited", || daemons_of(&w).is_empty());
    std::thread::sleep(LOCK_WAIT_AND_MORE);
    assert!(daemons_of(&w).is_empty(), "no daemon serves after mux stop");
    assert_eq!(w.run(&["mux", "status"]).code, 3, "nothing answers");
}

/// Past the daemon's 3 s lock wait.
const LOCK_WAIT_AND_MORE: Duration = Duration::from_millis(3_500);

/// SOCK-1, LOCK-1: the control socket, then the lock file, then the whole run directory (both),
/// removed under a running daemon, as a cleaner of old files does. The daemon binds its
/// socket again (the same pid answers, and `agent`, `request watch` and `mux stop` reach it),
/// and no second daemon starts on the same data directory meanwhile. Before, the daemon ran on
/// unreachable, and with the run directory gone a second `mux start` started a second daemon
/// on the same database and agents.
#[test]
fn sock_1_lock_1_a_removed_socket_or_run_directory_is_restored_and_never_doubles_the_daemon() {
    let w = World::new(EXE);
    w.mux_start();
    let pid = w.daemon_pid();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    let answered_by = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let out = w.run(&["mux", "status"]);
            if out.code == 0 {
                return out.json["pid"].as_u64().expect("pid") as u32;
            }
            assert!(Instant::now() < deadline, "no daemon answers after {what}: {out:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    std::fs::remove_file(paths.socket()).unwrap();
    assert_eq!(answered_by("removing the socket"), pid, "the same daemon binds its socket again");
    std::fs::remove_file(paths.lock_file()).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::fs::read_to_string(paths.lock_file()).map(|pid| pid.trim().to_string()).ok() != Some(pid.to_string()) {
        assert!(Instant::now() < deadline, "the removed lock file is not taken again");
        std::thread::sleep(Duration::from_millis(100));
    }

    // The keeper may put a file back between the removal's unlinks and its rmdir (ENOTEMPTY).
    while let Err(error) = std::fs::remove_dir_all(paths.run_dir()) {
        assert_eq!(error.raw_os_error(), Some(libc::ENOTEMPTY), "{error}");
    }
    // A second daemon in the foreground: it must give up within its lock wait (3 s), not run.
    let mut second = w.cmd(&["mux", "start", "--foreground"]).stdin(Stdio::null()).stdout(Stdio::piped()).spawn().expect("a second daemon");
    let deadline = Instant::now() + Duration::from_secs(15);
    let exited = loop {
        match second.try_wait().expect("wait") {
            Some(status) => break Some(status),
            None if Instant::now() >= deadline => break None,
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    };
    if exited.is_none() {
        let _ = second.kill();
        let _ = second.wait();
    }
    let mut said = String::new();
    second.stdout.take().expect("stdout").read_to_string(&mut said).ok();
    assert!(exited.is_some_and(|status| !status.success()), "a second daemon started on the same data directory: {said}");
    assert!(said.contains("already runs"), "{said}");
    assert_eq!(answered_by("removing the run directory"), pid, "the same daemon, reachable again");
    assert_eq!(daemons_of(&w), vec![pid as i32], "exactly one daemon serves the data directory");
    let lock = std::fs::read_to_string(paths.lock_file()).expect("the lock file is back");
    assert_eq!(lock.trim(), pid.to_string(), "it names the daemon");
    let mode = std::fs::metadata(paths.run_dir()).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "the run directory is private again");
    let out = w.cmd(&["mux", "start"]).stdin(Stdio::null()).output().expect("mux start");
    assert!(String::from_utf8_lossy(&out.stdout).contains("already_running"), "{out:?}");

    let id = new_id();
    let incarnation = entry["incarnation"].as_str().unwrap();
    let out = w.run(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", &id, "--return-final", "still here?"]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(w.wait_terminal(&id)["state"], "completed");
    w.ok(&["mux", "stop"]);
    assert!(daemons_of(&w).is_empty(), "mux stop reached it");
}

/// A daemon with agent `zola` (turns of 3 s) running a return-final request just admitted: its
/// catalog entry, the request's id and the agent's holder socket.
fn a_request_in_flight(w: &World) -> (Value, String, std::path::PathBuf) {
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &["--reply-delay-ms", "3000"]);
    let id = new_id();
    let incarnation = entry["incarnation"].as_str().unwrap();
    let out = w.run(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", &id, "--return-final", "slow one"]);
    assert_eq!(out.code, 0, "{out:?}");
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    let socket = paths.holder_socket(entry["agent_id"].as_str().unwrap());
    (entry, id, socket)
}

/// LIVE-1: an agent whose holder's socket file was removed (the holder and its process run on,
/// a daemon started after the removal cannot reach it) never has a waiting request ended as
/// `delivery_failed` (which invites a second submission to an agent that may still take the
/// first), and `agent restart` ends that holder before it starts a new pane: exactly one agent
/// process runs after it, where a second pane used to run beside the first.
#[test]
fn live_1_a_holder_whose_socket_was_removed_never_doubles_the_agent() {
    let w = World::new(EXE);
    let (entry, id, socket) = a_request_in_flight(&w);
    std::fs::remove_file(&socket).unwrap();
    // A file in the socket's way: the holder cannot bind it again (SOCK-2), so nobody listens.
    std::fs::write(&socket, b"in the way").unwrap();
    w.ok(&["mux", "stop"]);
    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_ne!(event["state"], "delivery_failed", "a request of a live agent was failed: {event}");
    assert_eq!(w.fake_agents_running(), 1, "the agent's process runs on");
    // Out of the way again: the restart meets the old holder bound again, or ends it first.
    std::fs::remove_file(&socket).unwrap();
    let restarted = w.ok(&["agent", "restart", "zola"]);
    assert_ne!(restarted["incarnation"], entry["incarnation"]);
    w.wait_agent("zola", "idle again", |z| z["state"] == "idle");
    assert_eq!(w.fake_agents_running(), 1, "the old holder and its process ended: one agent process");
}

/// LIVE-1, SOCK-2: a holder's socket removed while the daemon is down is bound again by the
/// holder within a second; a daemon started meanwhile takes "nobody listens" at its first
/// probes for unknown for a moment (`REBIND_GRACE`), not for an exit. It published
/// `agent.exited` for the live agent and ended its request in flight `indeterminate`
/// (`incarnation_changed`), whose turn then completed (a hostile run, 2 of 2).
#[test]
fn live_1_a_socket_bound_again_after_a_daemon_start_is_no_exit() {
    let w = World::new(EXE);
    let (entry, id, socket) = a_request_in_flight(&w);
    w.ok(&["mux", "stop"]);
    std::fs::remove_file(socket).unwrap();
    w.mux_start();
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "completed", "the live agent's turn completed: {event}");
    let out = w.run(&["agent", "events", "--once", "--agent", "zola"]);
    assert!(!out.stdout.contains("\"agent.exited\""), "no exit of a live agent: {}", out.stdout);
    assert_eq!(w.catalog_entry("zola").expect("zola")["incarnation"], entry["incarnation"]);
}

/// SEC-1: a daemon with a ready agent `zola` whose holder socket was moved aside (the holder
/// keeps running) and a link planted in its place, which the daemon never follows.
fn a_ready_agent_behind_a_link() -> World {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    let socket = paths.holder_socket(entry["agent_id"].as_str().unwrap());
    std::fs::rename(&socket, socket.with_extension("aside")).unwrap();
    std::os::unix::fs::symlink(w.data.join("nowhere.sock"), &socket).unwrap();
    w
}

/// LIVE-1, OUT-7: an agent held through a daemon's start (its holder unreachable: a link in
/// its socket's place) is not said to have no process while it runs: the catalog said
/// `agent_unknown`, "no process runs behind the agent", and `agent output` said
/// `agent_not_running` (a hostile run's low). Now `liveness_unknown` in both.
#[test]
fn live_1_a_held_agent_is_not_said_to_have_no_process() {
    let w = a_ready_agent_behind_a_link();
    w.ok(&["mux", "stop"]);
    w.mux_start();
    let entry = w.catalog_entry("zola").expect("listed");
    assert_eq!((entry["state"].as_str(), entry["return_final_unavailable_reason"].as_str()), (Some("unknown"), Some("liveness_unknown")), "{entry}");
    assert!(entry["observer_detail"].as_str().unwrap_or_default().contains("whether its process runs is unknown"), "{entry}");
    let out = w.run(&["agent", "output", "zola"]);
    assert_eq!((out.code, out.json["reason"].as_str()), (1, Some("liveness_unknown")), "{out:?}");
    assert_eq!(w.fake_agents_running(), 1, "its process runs");
}

/// LIFE-5, LIVE-1, SEC-1: `mux stop --all` ends an agent whose holder cannot be reached at its
/// socket (a link planted in its place, which the daemon never follows) as `agent stop` does:
/// the holder still running for that socket, and its process. It named the agent in
/// `agents_stopped` while both ran on (a hostile run).
#[test]
fn life_5_stop_all_ends_a_holder_behind_a_link() {
    let w = a_ready_agent_behind_a_link();
    let out = w.ok(&["mux", "stop", "--all"]);
    assert_eq!((out["agents_stopped"].clone(), out["agents_not_stopped"].clone()), (json!(["zola"]), json!([])), "{out}");
    let deadline = Instant::now() + Duration::from_secs(15);
    while !w.holder_pids().is_empty() || w.fake_agents_running() > 0 {
        assert!(Instant::now() < deadline, "the holder or its process runs on: {:?}", w.our_pids());
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// SEC-1, CLI: `agent attach` through a link at the holder's socket is refused, and says so
/// only: it printed "attached" before the connect was refused (a hostile run).
#[test]
fn sec_1_an_attach_refused_at_a_link_never_says_attached() {
    let w = a_ready_agent_behind_a_link();
    let out = w.run(&["agent", "attach", "zola"]);
    assert_eq!(out.code, 1, "{out:?}");
    assert!(out.stderr.contains("wakterm attach:") && !out.stderr.contains("attached to"), "{out:?}");
}

/// LIVE-1: while a holder stays unknown (a link in its socket's place, which the daemon never
/// follows), the log warns once a minute, not at every probe: a hostile run saw four warnings
/// a second for as long as the link stayed, which rotated the rest of the log away.
#[test]
fn live_1_an_unknown_holder_is_warned_of_once_not_at_every_probe() {
    let w = a_ready_agent_behind_a_link();
    // The running daemon's kept connections still reach the holder: a new daemon meets the link.
    w.ok(&["mux", "stop"]);
    w.mux_start();
    let warnings = || std::fs::read_to_string(w.data.join("mux.log")).unwrap_or_default().matches("liveness unknown (LIVE-1)").count();
    let deadline = Instant::now() + Duration::from_secs(15);
    while warnings() == 0 {
        assert!(Instant::now() < deadline, "no probe met the link in 15 s");
        w.run(&["agent", "catalog"]);
        std::thread::sleep(Duration::from_millis(100));
    }
    // Probes go on (the monitor's, each catalog's, each admission's) and each is unknown.
    for _ in 0..30 {
        w.run(&["agent", "catalog"]);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(warnings(), 1, "warned at every probe");
}

/// LIFE-3: `agent stop` of an agent whose holder does not answer (stopped with SIGSTOP: the
/// connect succeeds, the shutdown times out) ends that holder and its process, or fails and
/// keeps the agent. It used to ignore the timeout and delete the record, leaving the holder and
/// the Codex in it running outside the catalog until the next daemon start. Slow by nature:
/// the shutdown's own timeout (19 s), then the holder's TERM grace (5 s).
#[test]
fn life_3_a_stop_whose_shutdown_gets_no_answer_still_ends_the_holder() {
    let w = World::new(EXE);
    w.mux_start();
    w.start_agent("zola", REPLY, &[]);
    w.wait_agent("zola", "idle", |z| z["state"] == "idle");
    let holders = w.holder_pids();
    assert_eq!(holders.len(), 1, "one holder: {holders:?}");
    // SAFETY: a signal to our own test world's holder.
    assert_eq!(unsafe { libc::kill(holders[0], libc::SIGSTOP) }, 0);
    let out = w.run(&["agent", "stop", "zola"]);
    assert_eq!(out.code, 0, "the stop ends the stalled holder: {out:?}");
    assert!(w.catalog_entry("zola").is_none(), "zola left the catalog");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.holder_pids().is_empty() || w.fake_agents_running() > 0 {
        assert!(Instant::now() < deadline, "the stalled holder or its process runs on outside the catalog: {:?}", w.our_pids());
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// LIFE-9: restarts asked together of an agent whose holder is stopped each fail within the
/// restart's bound, and none acts after it failed, though the holder goes on the moment the
/// first one answered. They used to wait their turns, each sending a respawn with a deadline
/// of its own (answered after 20, 40, 60 s, the last as `daemon_unresponsive`), and the one
/// the holder read after its continuation replaced the process after its caller had been
/// told it failed (a hostile run). Slow by nature: the restart's bound (15 s).
#[test]
fn life_9_restarts_asked_together_of_a_stopped_holder_never_act_after_they_failed() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let holders = w.holder_pids();
    assert_eq!(holders.len(), 1, "one holder: {holders:?}");
    // SAFETY: signals to our own test world's holder.
    assert_eq!(unsafe { libc::kill(holders[0], libc::SIGSTOP) }, 0);
    let answers = std::thread::scope(|scope| {
        let (done, answered) = std::sync::mpsc::channel();
        for _ in 0..2 {
            let (done, w) = (done.clone(), &w);
            scope.spawn(move || drop(done.send(w.run(&["agent", "restart", "zola"]))));
        }
        let first = answered.recv().unwrap();
        assert_eq!(unsafe { libc::kill(holders[0], libc::SIGCONT) }, 0);
        [first, answered.recv().unwrap()]
    });
    for out in &answers {
        assert_eq!((out.code, &out.json["error"]), (1, &json!("agent_restart_failed")), "{out:?}");
    }
    std::thread::sleep(Duration::from_secs(2));
    let now = w.catalog_entry("zola").expect("zola");
    assert_eq!(now["incarnation"], entry["incarnation"], "a restart replaced the process after it failed: {answers:?}");
}

/// LIFE-6 (a hostile run): `mux stop` answers once the daemon has ended, whatever blocking
/// call is still under way in it: here an `agent stop` of an agent whose holder was SIGSTOPped
/// (its shutdown call waits 15 s, then the signals). The daemon's end waited for that call,
/// `mux stop`'s own wait ran out first and answered success, and a `mux start` right after
/// found the lock still held.
#[test]
fn life_6_mux_stop_ends_the_daemon_though_a_holder_call_hangs() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let (agent_stop, holder) = mux_stop_during_a_call_to_a_stopped_holder(&w, &["agent", "stop", "zola"]);
    let again = w.run(&["mux", "start"]);
    assert_eq!(again.code, 0, "a start right after the stop: {again:?}");
    // The call the daemon's end left behind is not said to have failed, nor to have done it.
    assert_eq!((agent_stop.code, &agent_stop.json["error"]), (5, &json!("agent_stop_unknown")), "{agent_stop:?}");
    assert_eq!(unsafe { libc::kill(holder, libc::SIGCONT) }, 0);
}

/// LIFE-6 (a review): the daemon's end waits for an `agent restart` under way (as for a start)
/// and `mux stop` waits for that end: a restart cut off at the 3 s bound for other calls could
/// leave a managed agent's new app-server bound to no thread. Here the restart of a SIGSTOPped
/// holder, refused once its 15 s bound passes with nothing sent, answers so, not `unknown`.
#[test]
fn life_6_mux_stop_waits_for_a_restart_under_way() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let (restart, holder) = mux_stop_during_a_call_to_a_stopped_holder(&w, &["agent", "restart", "zola"]);
    assert_eq!((restart.code, &restart.json["error"]), (1, &json!("agent_restart_failed")), "its own answer: {restart:?}");
    assert_eq!(unsafe { libc::kill(holder, libc::SIGCONT) }, 0);
    w.mux_start();
    let now = w.wait_agent("zola", "idle again", |z| z["state"] == "idle");
    assert_eq!(now["incarnation"], entry["incarnation"], "nothing was sent: the same process");
}

/// LIFE-6: with zola's holder SIGSTOPped, runs `args` (a call that waits on the holder) and, a
/// second into it, `mux stop`, which must answer success only once the daemon has ended.
/// Returns the call's answer and the holder (still stopped).
fn mux_stop_during_a_call_to_a_stopped_holder(w: &World, args: &[&str]) -> (support::Out, i32) {
    let holders = w.holder_pids();
    assert_eq!(holders.len(), 1, "one holder: {holders:?}");
    let daemon = w.daemon_pid();
    // SAFETY: signals to our own test world's holder.
    assert_eq!(unsafe { libc::kill(holders[0], libc::SIGSTOP) }, 0);
    let call = std::thread::scope(|scope| {
        let call = scope.spawn(|| w.run(args));
        std::thread::sleep(Duration::from_secs(1)); // under way: its call waits on the holder
        let out = w.run(&["mux", "stop"]);
        assert_eq!(out.code, 0, "{out:?}");
        assert!(support::all_threads_dead(daemon), "`mux stop` answered while the daemon ran: {out:?}");
        call.join().unwrap()
    });
    (call, holders[0])
}

/// LIFE-5 (a hostile run): `mux stop --all` stops its agents together, not one after another:
/// three agents whose holders were SIGSTOPped (each about 20 s: the unanswered shutdown, then
/// the signals) outlasted its caller's 60 s wait, which answered `daemon_unresponsive` while
/// the daemon ran on.
#[test]
fn life_5_mux_stop_all_stops_agents_with_stopped_holders_together() {
    let w = World::new(EXE);
    w.mux_start();
    for name in ["ada", "bo", "cy"] {
        w.ready_agent(name, REPLY, &[]);
    }
    let holders = w.holder_pids();
    assert_eq!(holders.len(), 3, "three holders: {holders:?}");
    for holder in &holders {
        // SAFETY: signals to our own test world's holders.
        assert_eq!(unsafe { libc::kill(*holder, libc::SIGSTOP) }, 0);
    }
    let out = w.run(&["mux", "stop", "--all"]);
    assert_eq!(out.code, 0, "{out:?}");
    let mut stopped: Vec<&str> = out.json["agents_stopped"].as_array().unwrap().iter().map(|name| name.as_str().unwrap()).collect();
    stopped.sort_unstable();
    assert_eq!(stopped, ["ada", "bo", "cy"], "{out:?}");
    assert!(w.holder_pids().is_empty(), "no holder runs on: {:?}", w.our_pids());
    assert_eq!(w.fake_agents_running(), 0, "no agent process runs on");
}

/// LIFE-3: a stop whose removal cannot commit (here the database is locked by another
/// connection past the store's busy timeout; a full disk does the same) keeps the agent, its
/// process ended, and says so; a second stop removes it and the name is free again. The agent
/// used to leave memory whatever the commit said: the stop answered `store_failed`, the catalog
/// had lost the agent, the store still held its name (a new `agent start` of it was refused),
/// and a daemon restart brought it back (a hostile run, on a full disk).
#[test]
fn life_3_a_stop_whose_removal_cannot_commit_keeps_the_agent() {
    let w = World::new(EXE);
    w.mux_start();
    w.start_agent("zola", REPLY, &[]);
    w.wait_agent("zola", "idle", |z| z["state"] == "idle");
    let lock = rusqlite::Connection::open(w.data.join("wakterm.db")).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    let out = w.run(&["agent", "stop", "zola"]);
    assert_eq!((out.code, &out.json["error"]), (1, &json!("agent_stop_failed")), "{out:?}");
    assert!(out.json["message"].as_str().unwrap().contains("its removal could not be recorded"), "{out:?}");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !w.holder_pids().is_empty() || w.fake_agents_running() > 0 {
        assert!(Instant::now() < deadline, "its process was ended: {:?}", w.our_pids());
        std::thread::sleep(Duration::from_millis(25));
    }
    lock.execute_batch("ROLLBACK").unwrap();
    drop(lock);
    // (The catalog waits for its events to be durable, so it is read once the lock is gone.)
    let zola = w.catalog_entry("zola").expect("the agent stays in the catalog");
    assert_ne!(zola["state"], "idle", "its process was ended: {zola}");
    let out = w.run(&["agent", "stop", "zola"]);
    assert_eq!(out.code, 0, "the second stop removes it: {out:?}");
    assert!(w.catalog_entry("zola").is_none(), "zola left the catalog");
    w.start_agent("zola", REPLY, &[]);
    w.wait_agent("zola", "idle again", |z| z["state"] == "idle");
}

/// LIFE-1, LIFE-3: an `agent start` whose command cannot start, and whose record's take-back
/// cannot commit either (the database locked by another connection, taken the moment the
/// record is durable: the window is the holder's spawn), lists the agent, stopped, and says so;
/// `agent stop` removes it and the name is free again. The agent was dropped from memory: its
/// name stayed taken in the store, unknown to the catalog and to `agent stop` (a review).
#[test]
fn life_1_a_start_whose_take_back_cannot_commit_lists_the_agent_stopped() {
    let w = World::new(EXE);
    w.mux_start();
    let db = w.data.join("wakterm.db");
    // The window is a holder's spawn (tens of milliseconds): a few tries find it.
    let name = (0..5)
        .find_map(|attempt| {
            let name = format!("late{attempt}");
            let (watched, db) = (name.clone(), db.clone());
            let locker = std::thread::spawn(move || {
                let conn = rusqlite::Connection::open(db).unwrap();
                let deadline = Instant::now() + Duration::from_secs(20);
                while Instant::now() < deadline {
                    let rows: i64 = conn.query_row("SELECT count(*) FROM agents WHERE name = ?1", [&watched], |row| row.get(0)).unwrap_or(0);
                    if rows > 0 {
                        conn.execute_batch("BEGIN IMMEDIATE").unwrap();
                        std::thread::sleep(Duration::from_secs(8)); // past the store's busy timeout
                        conn.execute_batch("ROLLBACK").unwrap();
                        return;
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            });
            let out = w.run(&["agent", "start", "--name", &name, "--cwd", w.data.to_str().unwrap(), "--", "/nonexistent/command"]);
            locker.join().unwrap();
            assert_eq!((out.code, &out.json["error"]), (1, &json!("agent_start_failed")), "{out:?}");
            let kept = out.json["message"].as_str().unwrap().contains("could not be taken back");
            match kept {
                true => Some(name),
                false => {
                    assert!(w.catalog_entry(&name).is_none(), "taken back: not listed");
                    None
                }
            }
        })
        .expect("one of five tries locks the database between the record and its take-back");
    let entry = w.catalog_entry(&name).expect("the agent the store keeps is listed");
    assert_eq!(entry["state"], "stopped", "{entry}");
    assert_eq!(w.run(&["agent", "stop", &name]).code, 0, "a stop removes it");
    assert!(w.catalog_entry(&name).is_none());
    w.start_agent(&name, REPLY, &[]);
}

/// Unmounts (lazily: the daemon may still hold files there) when dropped.
struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// LOG-2: a full disk under the data directory never kills the daemon. Admissions are refused
/// (nothing written, retry-safe) while it is full, and accepted again once there is room. A
/// background daemon's log line that could not be written used to end it: tracing's fallback
/// printed the failure with `eprintln!` to its stderr, the same full log file, and `eprintln!`
/// panics when it cannot write (the panic hook then aborts). Needs root, for a small tmpfs.
#[test]
fn log_2_a_full_disk_never_kills_the_daemon() {
    if !is_root() {
        eprintln!("skipped: needs root to mount a small file system");
        return;
    }
    let w = World::new(EXE);
    std::fs::create_dir_all(&w.data).unwrap();
    let mounted = std::process::Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m,mode=0700", "tmpfs"]).arg(&w.data).status();
    if !mounted.is_ok_and(|status| status.success()) {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    let _unmount = Unmount(w.data.clone());
    w.mux_start();
    w.start_agent("zola", REPLY, &[]);
    w.wait_agent("zola", "idle", |z| z["state"] == "idle");
    let daemon = w.daemon_pid();
    let filler = w.data.join("filler");
    let mut file = std::fs::File::create(&filler).unwrap();
    for size in [64 * 1024, 1024, 1] {
        let chunk = vec![0u8; size];
        while file.write_all(&chunk).is_ok() {}
    }
    drop(file);
    // Each refused admission logs a line or two: well past a page of the log's last block.
    for i in 0..40 {
        let out = w.run(&["agent", "send", "zola", &format!("prompt {i} on a full disk")]);
        assert_eq!((out.code, &out.json["reason"], &out.json["prompt_written"]), (4, &serde_json::json!("store_commit_failed"), &serde_json::json!(false)), "{out:?}");
    }
    // SAFETY: signal 0 only asks whether our own daemon still runs.
    assert_eq!(unsafe { libc::kill(daemon as i32, 0) }, 0, "the daemon died of its full disk");
    assert_eq!(w.ok(&["mux", "status"])["pid"], daemon, "the same daemon answers");
    std::fs::remove_file(&filler).unwrap();
    let out = w.run(&["agent", "send", "zola", "room again"]);
    assert_eq!((out.code, &out.json["classification"]), (0, &serde_json::json!("accepted")), "{out:?}");
    assert_eq!(w.fake_agents_running(), 1, "the agent ran on throughout");
    // A line the disk filled in the middle of is dropped whole, never left torn for the next
    // line to run into (a hostile run found 8 such lines).
    let log = std::fs::read_to_string(w.data.join("mux.log")).unwrap();
    for line in log.lines() {
        assert!(timestamps(line.get(..19).unwrap_or_default()) == 1 && timestamps(line) == 1, "a torn log line: {line:?}");
    }
}

/// How many tracing timestamps (`2026-12-07T06:51:15`) `line` holds: a log line starts with one,
/// whatever its level's width, and a torn line that the next ran into holds two.
fn timestamps(line: &str) -> usize {
    const SHAPE: &[u8] = b"dddd-dd-ddTdd:dd:dd";
    let fits = |window: &[u8]| window.iter().zip(SHAPE).all(|(c, shape)| if *shape == b'd' { c.is_ascii_digit() } else { c == shape });
    line.as_bytes().windows(SHAPE.len()).filter(|window| fits(window)).count()
}

/// `wakterm ARGS` with a bound: None when it did not exit within `bound` (it is then killed).
fn run_within(w: &World, args: &[&str], bound: Duration) -> Option<support::Out> {
    let child = w.cmd(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn wakterm");
    let pid = child.id();
    let (done, answer) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match answer.recv_timeout(bound) {
        Ok(output) => {
            Some(support::Out::of(output.expect("wait for wakterm")))
        }
        Err(_) => {
            // SAFETY: our own child, still unreaped (its waiting thread holds it).
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            None
        }
    }
}

fn mkfifo(path: &std::path::Path) {
    let status = std::process::Command::new("mkfifo").arg("-m").arg("600").arg(path).status().expect("mkfifo");
    assert!(status.success(), "mkfifo {}", path.display());
}

/// Opens a FIFO for reading and drops it: a writer waiting at its open goes on (and the test
/// can end after a failure without leaving a stalled daemon behind).
fn release_fifo(path: &std::path::Path) {
    let _ = std::os::unix::fs::OpenOptionsExt::custom_flags(std::fs::OpenOptions::new().read(true), libc::O_NONBLOCK).open(path);
}

/// SEC-3: a FIFO put where the daemon's log file is (a careless `mkfifo`, a tool that pipes
/// logs) never stalls the daemon. LOG-3 opened it again with a plain open, which waited for a
/// reader for good while holding the log's lock: every thread that logged, so every admission,
/// waited behind it. A daemon started with one there refuses to start, and says why, instead
/// of waiting at it (and `mux start`, which reads the log's end, returns).
#[test]
fn sec_3_a_fifo_at_the_log_path_never_stalls_the_daemon() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let log = w.data.join("mux.log");
    std::fs::remove_file(&log).unwrap();
    mkfifo(&log);
    // LOG-3 looks at the path at most once a second, on a line logged.
    std::thread::sleep(Duration::from_millis(1_500));
    for i in 0..3 {
        let out = run_within(&w, &["agent", "send", "zola", &format!("prompt {i} beside a FIFO")], Duration::from_secs(20));
        let Some(out) = out else {
            release_fifo(&log);
            panic!("the daemon stalled at the FIFO at its log path");
        };
        assert_eq!((out.code, &out.json["classification"]), (0, &serde_json::json!("accepted")), "{out:?}");
        std::thread::sleep(Duration::from_millis(600));
    }
    let daemon = w.daemon_pid();
    w.ok(&["mux", "stop"]);
    w.wait_until("the daemon exited", || support::all_threads_dead(daemon));
    let out = run_within(&w, &["mux", "start"], Duration::from_secs(40));
    release_fifo(&log);
    let out = out.expect("mux start waited at the FIFO");
    assert_ne!(out.code, 0, "a daemon cannot log to a FIFO: {out:?}");
    assert!(out.stdout.contains("not a regular file"), "the refusal says why: {out:?}");
    std::fs::remove_file(&log).unwrap();
    w.mux_start();
    assert_eq!(w.fake_agents_running(), 1, "the agent ran on throughout");
    // The same for a holder's log: a new holder refuses a FIFO at its log's path at once (its
    // launcher waited at the open until the daemon's bound killed it, and the restart said
    // only "launcher did not exit in time").
    let entry = w.catalog_entry("zola").expect("listed");
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    let holder_log = wakterm_runtime::holder::log_path(&paths.holder_socket(entry["agent_id"].as_str().unwrap()));
    for pid in w.holder_pids() {
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    w.wait_until("the holder is gone", || w.holder_pids().is_empty());
    let _ = std::fs::remove_file(&holder_log);
    mkfifo(&holder_log);
    let out = run_within(&w, &["agent", "restart", "zola"], Duration::from_secs(40));
    release_fifo(&holder_log);
    let out = out.expect("agent restart waited at the FIFO");
    assert_ne!(out.code, 0, "a holder cannot log to a FIFO: {out:?}");
    assert!(out.stdout.contains("not a regular file"), "the refusal says why: {out:?}");
}

/// SOCK-2: a holder's socket removed under it (or its whole directory) is bound again by the
/// holder within about a second, so its agent is reachable again without a restart and the
/// process in it (and its conversation) lives on. It used to stay unreachable until
/// `agent restart` ended that process (LIVE-1).
#[test]
fn sock_2_a_removed_holder_socket_is_bound_again() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    let socket = paths.holder_socket(entry["agent_id"].as_str().unwrap());
    let bound_again = |what: &str| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !UnixStream::connect(&socket).is_ok() {
            assert!(Instant::now() < deadline, "{what}: the holder's socket was not bound again");
            std::thread::sleep(Duration::from_millis(25));
        }
    };
    std::fs::remove_file(&socket).unwrap();
    bound_again("the socket removed");
    std::fs::remove_dir_all(socket.parent().unwrap()).unwrap();
    bound_again("its directory removed");
    let mode = std::fs::metadata(socket.parent().unwrap()).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "the directory is made again private");
    let entry = w.wait_agent("zola", "return-final available", |z| z["return_final_available"] == true);
    let id = new_id();
    let incarnation = entry["incarnation"].as_str().unwrap();
    w.ok(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", &id, "--return-final", "after the socket came back"]);
    let event = w.wait_terminal(&id);
    assert_eq!(event["state"], "completed", "{event}");
    assert_eq!(event["incarnation"], entry["incarnation"], "the same process answered: nothing was restarted");
    assert_eq!(w.fake_agents_running(), 1);
}

/// LIFE-6: SIGTERM (a service manager, a container's end, `kill`) stops the daemon as `mux stop`
/// does: it says so in its log, removes its socket, and its agents and their requests live on
/// (a request in flight completes after the next start). SIGTERM's default action killed it at
/// once, mid-commit, its socket left behind.
#[test]
fn life_6_sigterm_stops_the_daemon_as_mux_stop_does() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &["--reply-delay-ms", "1500"]);
    let id = new_id();
    let incarnation = entry["incarnation"].as_str().unwrap();
    w.ok(&["agent", "admit", "zola", "--incarnation", incarnation, "--request-id", &id, "--return-final", "slow one"]);
    let socket = w.data.join("run/mux.sock");
    // Gone, as `mux stop` waits for: its lock is released only after the drain; the agent runs on.
    let stops_on = |signal: libc::c_int, name: &str| {
        let daemon = w.daemon_pid();
        // SAFETY: a signal to our own test world's daemon.
        assert_eq!(unsafe { libc::kill(daemon as i32, signal) }, 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while socket.exists() || !support::all_threads_dead(daemon) {
            assert!(Instant::now() < deadline, "{name} did not stop the daemon as mux stop does (its socket still there: {})", socket.exists());
            std::thread::sleep(Duration::from_millis(25));
        }
        let log = std::fs::read_to_string(w.data.join("mux.log")).unwrap();
        assert!(log.contains(&format!("{name}: stopping as `mux stop` does")), "said in the log");
        assert_eq!(w.fake_agents_running(), 1, "the agent runs on");
    };
    stops_on(libc::SIGTERM, "SIGTERM");
    w.mux_start();
    assert_eq!(w.wait_terminal(&id)["state"], "completed", "the request in flight completes");
    // SIGHUP (a foreground daemon's terminal closed) stops it the same way; it killed it as a
    // crash. A background daemon leads a session of its own, so no terminal's hangup reaches it.
    let daemon = w.daemon_pid();
    let stat = std::fs::read_to_string(format!("/proc/{daemon}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(')').unwrap().1.split_whitespace().collect();
    assert_eq!(fields[3], daemon.to_string(), "the daemon leads its own session: {stat}");
    stops_on(libc::SIGHUP, "SIGHUP");
}

/// LIFE-7: `mux start --foreground` prints one JSON line once its socket answers, so a
/// supervisor waits for it instead of polling `mux status`; a daemon `mux start` runs in the
/// background, whose standard output is its log, prints no such line there.
#[test]
fn life_7_a_foreground_daemon_says_when_it_serves() {
    let w = World::new(EXE);
    let mut child = w.cmd(&["mux", "start", "--foreground"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("mux start --foreground");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    let line = rx.recv_timeout(Duration::from_secs(30)).expect("the ready line within 30 s");
    let ready: Value = serde_json::from_str(line.trim_end()).unwrap_or_else(|e| panic!("a JSON line: {e}: {line:?}"));
    assert_eq!(ready["schema"], "wakterm.mux-ready.v1", "{ready}");
    assert_eq!(ready["pid"].as_u64(), Some(u64::from(child.id())), "{ready}");
    assert_eq!(ready["socket"].as_str().map(std::path::PathBuf::from), Some(w.data.join("run/mux.sock")), "{ready}");
    // Said once the socket answers: no wait, no retry.
    assert_eq!(w.run(&["mux", "status"]).code, 0, "the daemon answers as soon as it says it serves");
    // SAFETY: a signal to the daemon this test started.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let status = support::wait_exit(&mut child, Duration::from_secs(10)).expect("the foreground daemon stops on SIGTERM");
    assert!(status.success(), "{status:?}");
    w.mux_start();
    w.ok(&["mux", "stop"]);
    let log = std::fs::read_to_string(w.data.join("mux.log")).unwrap();
    assert!(!log.contains("wakterm.mux-ready"), "no ready line in the log of a background daemon");
    assert_eq!(log.matches(" serving socket=").count(), 2, "each start says in the log that it serves");
}

/// LIFE-1: a daemon that dies right after spawning an agent's holder leaves no process outside
/// the catalog: after a restart the agent is listed and `mux stop --all` ends it.
#[test]
fn life_1_crash_during_agent_start_leaves_no_orphan() {
    let w = World::new(EXE);
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_FAULT", "after_holder_spawn").output().expect("mux start");
    assert!(out.status.success());
    let exe = w.exe.display().to_string();
    let env = format!("CODEX_HOME={}", w.codex_home.display());
    let out = w.run(&["agent", "start", "--name", "orphan", "--env", &env, "--", &exe, "fake-codex", "--reply", REPLY]);
    assert_ne!(out.code, 0, "the daemon must have died mid-start: {out:?}");
    w.wait_until("the daemon is gone", || w.run(&["mux", "status"]).code == 3);
    w.mux_start();
    let entry = w.wait_agent("orphan", "listed after the restart", |_| true);
    assert_ne!(entry["state"], "stopped", "the spawned holder was re-attached: {entry}");
    w.ok(&["mux", "stop", "--all"]);
    w.wait_until("no process of ours survives mux stop --all", || w.our_pids().is_empty());
}

/// A daemon whose binary was replaced on disk (an upgrade in place) still starts agents: its
/// holders run the daemon's own image.
#[test]
fn a_daemon_whose_binary_was_deleted_still_starts_agents() {
    let w0 = World::new(EXE);
    let copy = w0.root.join("wakterm-copy");
    std::fs::copy(EXE, &copy).unwrap();
    let mut w = World::new(copy.to_str().unwrap());
    // A binary just written may still be open for writing in a child another test thread
    // forked meanwhile (ETXTBSY until that child execs): retry the start, bounded.
    let mut attempts = 0;
    let started = loop {
        match w.cmd(&["mux", "start"]).stdin(Stdio::null()).output() {
            Err(error) if error.raw_os_error() == Some(libc::ETXTBSY) && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(20));
            }
            other => break other.expect("run the copied wakterm"),
        }
    };
    assert!(started.status.success(), "mux start: {}", String::from_utf8_lossy(&started.stdout));
    std::fs::remove_file(&copy).unwrap();
    w.exe = std::path::PathBuf::from(EXE); // the CLI from here on is the installed one
    w.start_agent("zola", REPLY, &[]);
    w.wait_agent("zola", "running", |z| z["state"] == "idle");
}

/// INP-1: a valid UTF-8 prompt over the limit on standard input is `prompt_too_large` (exit
/// 4) with its real size, even when the cut at the limit splits a character.
#[test]
fn inp_1_oversized_utf8_prompt_on_stdin_is_too_large_with_its_size() {
    let w = World::new(EXE);
    let prompt = "é".repeat(35_000); // 70,000 bytes; byte 65,537 is inside a character
    let mut child = w.cmd(&["agent", "send", "zola", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(prompt.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let body: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(output.status.code(), Some(4), "{body}");
    assert_eq!(body["reason"], "prompt_too_large", "{body}");
    assert!(body["detail"].as_str().unwrap().contains("70000 bytes"), "{body}");
}

/// A data directory the daemon cannot write fails `mux start` with a reason, never an empty one.
#[test]
fn mux_start_says_why_when_the_data_dir_is_not_writable() {
    let w = World::new(EXE);
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    paths.prepare().unwrap();
    std::fs::create_dir(paths.log_file()).unwrap(); // the log cannot be opened for writing
    let out = w.run(&["mux", "start"]);
    assert_ne!(out.code, 0, "{out:?}");
    assert_eq!(out.json["error"], "data_dir_not_writable", "{out:?}");
    assert!(out.json["message"].as_str().unwrap().contains("mux.log"), "{out:?}");
}

/// LIFE-1: a holder in the holder directory whose agent the catalog does not know (left by an
/// older daemon that died mid-start) is stopped when the daemon starts; known agents' holders
/// are left running.
#[test]
fn life_1_daemon_start_stops_holders_the_catalog_does_not_know() {
    let w = World::new(EXE);
    w.mux_start();
    let known = w.start_agent("known", REPLY, &[]);
    w.ok(&["mux", "stop"]);
    let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
    let stray_id = new_id();
    let config = wakterm_runtime::holder::HolderConfig {
        socket_path: paths.holder_socket(&stray_id),
        cwd: w.work.clone(),
        env: vec![],
        command: vec!["sleep".into(), "300".into()],
        cols: 80,
        rows: 24,
        detach: true,
        raw: false,
    };
    let info = wakterm_runtime::holder::spawn_holder_with_args(std::path::Path::new(EXE), &["__holder".into()], &config).expect("stray holder");
    let stray_pid = info.pid.expect("stray child pid");
    w.mux_start();
    w.wait_until("the stray holder and its child are gone", || {
        !paths.holder_socket(&stray_id).exists() && !std::path::Path::new(&format!("/proc/{stray_pid}")).exists()
    });
    let entry = w.wait_agent("known", "still running", |z| z["state"] != "stopped");
    assert_eq!(entry["incarnation"], known["incarnation"], "the known agent's process was left alone");
}

/// HOLD: a screen too large for one reply line is cut, row by row, to fit: a 1000x250 pane of
/// characters with five combining marks each (2.75 MB of text) made every `screen` reply
/// panic its connection's thread, each leaking a connection slot, and after 64 of them the
/// holder answered everything, `shutdown` too, with `busy`.
#[test]
fn hold_1_a_screen_too_large_for_a_reply_is_cut_and_costs_no_slot() {
    let w = World::new(EXE);
    let fill = "import sys; sys.stdout.write(('a' + '\\u0301' * 5) * 1000 * 250); sys.stdout.flush()";
    let holder = LoneHolder::start(&w, format!("python3 -c \"{fill}\"; exec sleep 300"), (1000, 250));
    let client = || holder.client();
    let deadline = Instant::now() + Duration::from_secs(120);
    while client().info().expect("info").output_end < 250 * 1000 * 11 {
        assert!(Instant::now() < deadline, "the pane did not take its output");
        std::thread::sleep(Duration::from_millis(200));
    }
    for _ in 0..70 {
        let screen = client().screen().expect("a screen reply, however large the pane's text");
        let bytes: usize = screen.lines.iter().map(String::len).sum();
        assert!(bytes > 0 && bytes <= wakterm_runtime::holder::protocol::MAX_LINE_BYTES / 2, "{bytes}");
    }
    client().info().expect("no slot was lost: info still answers");
    client().shutdown().expect("shutdown still answers");
}

/// CONN-2 for a holder: a connection whose first request is not whole within
/// `FIRST_REQUEST_TIMEOUT` is closed, freeing its slot, however it trickles. 70 silent sockets
/// held every one of the 64 slots for 10 minutes, and every new connection (a restarted
/// daemon's probe, `agent restart`) was answered `busy` (a review reproduced it); a byte a
/// second kept a per-read timeout from ever firing.
#[test]
fn hold_1_silent_connections_give_their_slots_back() {
    let w = World::new(EXE);
    let holder = LoneHolder::start(&w, "exec sleep 300".to_string(), (80, 24));
    holder.client().info().expect("the holder answers");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tricklers: Vec<_> = (0..70)
        .map(|_| {
            let mut stream = UnixStream::connect(&holder.socket).expect("connect");
            let stop = stop.clone();
            std::thread::spawn(move || {
                // `{"op":` a byte a second, never the newline.
                for byte in br#"{"op":"info","pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"#.iter().cycle() {
                    if stop.load(std::sync::atomic::Ordering::SeqCst) || stream.write_all(&[*byte]).is_err() {
                        return;
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let busy = wakterm_runtime::holder::HolderClient::connect_with_timeout(&holder.socket, Duration::from_secs(5)).and_then(|mut c| c.info());
    assert!(busy.is_err(), "every slot is held: {busy:?}");
    std::thread::sleep(wakterm_runtime::holder::FIRST_REQUEST_TIMEOUT + Duration::from_secs(3));
    let freed = holder.client().info();
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    freed.expect("the connections with no whole request were closed: a slot is free again");
    for trickler in tricklers {
        trickler.join().unwrap();
    }
}

/// A holder started outside any daemon, running `sh -c SCRIPT` in its own pane; it and its
/// child are ended when this drops (a failed test too).
struct LoneHolder {
    socket: std::path::PathBuf,
    _ends: EndsProcessesOf,
}

impl LoneHolder {
    fn start(w: &World, script: String, (cols, rows): (u16, u16)) -> LoneHolder {
        let paths = wakterm_runtime::paths::DataPaths { root: w.data.clone() };
        paths.prepare().unwrap();
        let socket = paths.holder_socket(&new_id());
        let config = wakterm_runtime::holder::HolderConfig {
            socket_path: socket.clone(),
            cwd: w.work.clone(),
            env: vec![],
            command: vec!["sh".into(), "-c".into(), script],
            cols,
            rows,
            detach: true,
            raw: false,
        };
        let info = wakterm_runtime::holder::spawn_holder_with_args(std::path::Path::new(EXE), &["__holder".into()], &config).expect("holder");
        LoneHolder { _ends: EndsProcessesOf { socket: socket.clone(), child: info.pid }, socket }
    }

    fn client(&self) -> wakterm_runtime::holder::HolderClient {
        wakterm_runtime::holder::HolderClient::connect_with_timeout(&self.socket, Duration::from_secs(20)).expect("the holder")
    }
}

/// Ends, when dropped (a failed test too), a holder started outside any daemon: the processes
/// whose command line names its socket, and its child.
struct EndsProcessesOf {
    socket: std::path::PathBuf,
    child: Option<u32>,
}

impl Drop for EndsProcessesOf {
    fn drop(&mut self) {
        let name = self.socket.display().to_string();
        let holders = std::fs::read_dir("/proc").into_iter().flatten().flatten().filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok());
        for pid in holders {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            if cmdline.windows(name.len()).any(|w| w == name.as_bytes()) {
                // SAFETY: a signal to a process this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
        if let Some(child) = self.child {
            // SAFETY: as above.
            unsafe { libc::kill(child as i32, libc::SIGKILL) };
        }
    }
}

/// ADM-8: input the ended process never read is discarded at a respawn (`agent restart`'s
/// path): the next process never gets it. The pane keeps its tty, and a prompt left unread by a
/// hung process reached the new incarnation first, unadmitted (a review reproduced it).
#[test]
fn adm_8_a_respawn_discards_what_the_ended_process_never_read() {
    let w = World::new(EXE);
    let flag = w.work.join("second-run");
    let script = format!("if [ -e {0} ]; then read x; echo \"got:[$x]\"; exec sleep 300; else touch {0}; exec sleep 1; fi", flag.display());
    let holder = LoneHolder::start(&w, script, (80, 24));
    let client = || holder.client();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !flag.exists() {
        assert!(Instant::now() < deadline, "the first process did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let written = client().write(b"meant-for-the-first\n").expect("write");
    assert_eq!(written.bytes_written, 20);
    // The first process ends on its own, its input unread; then `agent restart`'s respawn.
    while client().info().expect("info").alive {
        assert!(Instant::now() < deadline, "the first process did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
    client().respawn().expect("respawn");
    // The second process reads the first line it finds: ours, sent now, unless the first
    // process's line was still waiting.
    client().write(b"for-the-second\n").expect("write");
    let deadline = Instant::now() + Duration::from_secs(20);
    let said = loop {
        let text = client().screen().expect("screen").lines.join("\n");
        if let Some(at) = text.find("got:[") {
            break text[at..].lines().next().unwrap().to_string();
        }
        assert!(Instant::now() < deadline, "the second process never answered:\n{text}");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(said, "got:[for-the-second]", "the second process read nothing left for the first");
}

/// LIVE-1: ending a pane ends what its process started that ignores the hang-up: a holder's
/// shutdown sent SIGHUP to the group and, once the leader died, left a member that ignored it
/// running, reparented to init (a review reproduced it).
#[test]
fn live_1_a_shutdown_ends_members_that_ignore_the_hang_up() {
    live_1_members_end_with_their_leader(true);
}

/// LIVE-1: a leader that exits on its own takes its session's members with it, so none runs on
/// holding the terminal the next incarnation reads (a review saw a job of the process before
/// read half of the next one's input).
#[test]
fn live_1_members_of_a_leader_that_exited_on_its_own_end_with_it() {
    live_1_members_end_with_their_leader(false);
}

fn live_1_members_end_with_their_leader(stop: bool) {
    let w = World::new(EXE);
    let marker = format!("{}.{}", 4000 + std::process::id() % 1000, if stop { 25 } else { 75 });
    let leader = if stop { "exec sleep 300" } else { "sleep 1; exit 0" };
    let holder = LoneHolder::start(&w, format!("(trap '' HUP; exec sleep {marker}) & {leader}"), (80, 24));
    let stubborn = || {
        std::fs::read_dir("/proc").unwrap().flatten().filter(|entry| {
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).replace('\0', " ").trim() == format!("sleep {marker}")
        }).count()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while stubborn() == 0 {
        assert!(Instant::now() < deadline, "the background job did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    if stop {
        holder.client().shutdown().expect("shutdown");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while stubborn() > 0 {
        assert!(Instant::now() < deadline, "the member that ignored SIGHUP runs on");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// LIVE-1, REC-2: a holder that does not answer when the daemon starts (stopped here; its 64
/// connection slots full does the same) is "unknown", not "no process". The start no longer
/// waits out its 15 s probe (every `mux start` timed out), and the return-final request bound
/// to its turn is not ended `incarnation_changed`: it completes once the holder answers. It was
/// registered as gone, and the request ended although its process ran on and finished the turn
/// (a review reproduced it).
#[test]
fn live_1_a_holder_silent_at_start_keeps_its_requests() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &["--reply-delay-ms", "6000"]);
    let warm = w.ok(&["agent", "send", "zola", "--return-final", "a first turn"]);
    assert_eq!(w.wait_terminal(warm["request_id"].as_str().unwrap())["state"], "completed");
    w.wait_agent("zola", "idle again", |z| z["return_final_available"] == true);
    let prompt = "running while the holder is stopped";
    let admitted = w.ok(&["agent", "send", "zola", "--return-final", prompt]);
    let id = admitted["request_id"].as_str().unwrap().to_string();
    w.wait_until("bound to its turn", || w.ok(&["agent", "request", "get", &id])["state"] == "bound");
    let daemon = w.daemon_pid();
    w.ok(&["mux", "stop"]);
    w.wait_until("the daemon exited", || support::all_threads_dead(daemon));
    let holders = w.holder_pids();
    assert_eq!(holders.len(), 1, "{holders:?}");
    unsafe { libc::kill(holders[0], libc::SIGSTOP) };
    let started = w.run(&["mux", "start"]);
    unsafe { libc::kill(holders[0], libc::SIGCONT) };
    assert_eq!(started.code, 0, "a silent holder must not fail the start: {started:?}");
    let event = w.wait_terminal(&id);
    assert_eq!((event["state"].as_str(), event["reason"].as_str()), (Some("completed"), None), "{event}");
    assert_eq!(event["incarnation"], entry["incarnation"], "{event}");
}
