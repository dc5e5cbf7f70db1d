//! Shared by the holder_* tests: start a real detached holder (the `wakterm-holder` bin) and
//! make sure it, and its agent, are gone when the test ends, whatever happened.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use wakterm_runtime::holder::{
    spawn_holder, HolderClient, HolderConfig, InfoReply, StreamEvent, Subscription,
};

/// Every wait in these tests ends by this.
pub const TEST_DEADLINE: Duration = Duration::from_secs(20);

pub fn holder_exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_wakterm-holder"))
}

/// A short private path: sun_path is 108 bytes.
pub fn fresh_socket_path() -> PathBuf {
    let id = uuid::Uuid::new_v4().simple().to_string();
    std::env::temp_dir()
        .join(format!("wkh-{}", &id[..12]))
        .join("agent.sock")
}

pub fn config(socket_path: &Path, command: &[&str]) -> HolderConfig {
    HolderConfig {
        socket_path: socket_path.to_path_buf(),
        cwd: std::env::temp_dir(),
        env: vec![("WAKTERM_HOLDER_TEST".into(), "1".into())],
        command: command.iter().map(|s| s.to_string()).collect(),
        cols: 80,
        rows: 24,
        detach: true,
        raw: false,
    }
}

/// Owns one running holder; Drop shuts it down, or kills it and its agent if it will not.
pub struct HolderGuard {
    pub socket: PathBuf,
    pub first: InfoReply,
}

impl HolderGuard {
    pub fn start(command: &[&str]) -> HolderGuard {
        let socket = fresh_socket_path();
        let first = spawn_holder(holder_exe(), &config(&socket, command)).expect("holder starts");
        HolderGuard { socket, first }
    }

    /// Adopts a holder someone else started at `socket`.
    pub fn adopt(socket: PathBuf) -> HolderGuard {
        let first = HolderClient::connect(&socket).unwrap().info().unwrap();
        HolderGuard { socket, first }
    }

    pub fn client(&self) -> HolderClient {
        HolderClient::connect(&self.socket).expect("holder answers")
    }
}

impl Drop for HolderGuard {
    fn drop(&mut self) {
        let info = HolderClient::connect(&self.socket).and_then(|mut c| c.info());
        let shut = HolderClient::connect(&self.socket).and_then(|c| c.shutdown());
        if shut.is_err() {
            for pid in [
                Some(self.first.holder_pid),
                info.ok().and_then(|i| i.pid),
                self.first.pid,
            ]
            .into_iter()
            .flatten()
            {
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
        }
        if let Some(dir) = self.socket.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// Shuts down whatever holder serves `socket` when dropped, for tests that learn of a holder
/// only later (or not at all, when they fail early).
pub struct ShutdownOnDrop(pub PathBuf);

impl Drop for ShutdownOnDrop {
    fn drop(&mut self) {
        if let Ok(client) = HolderClient::connect(&self.0) {
            let _ = client.shutdown();
        }
        if let Some(dir) = self.0.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

/// True when `pid` no longer runs: absent, or a zombie nobody reaped yet.
pub fn is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

pub fn wait_gone(pid: u32) -> bool {
    let deadline = Instant::now() + TEST_DEADLINE;
    while Instant::now() < deadline {
        if is_gone(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Field 22 of /proc/PID/stat, read independently of the holder's own code.
pub fn proc_start_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_comm = stat.rsplit_once(')')?.1;
    // Fields after comm start at field 3 (state); starttime is field 22.
    after_comm.split_whitespace().nth(22 - 3)?.parse().ok()
}

/// Reads pushed output until `done(all output so far)` holds; returns the output and, if the
/// stream ended, the exit code.
pub fn collect_until(
    sub: &mut Subscription,
    done: impl Fn(&[u8]) -> bool,
) -> (Vec<u8>, Option<Option<i32>>) {
    let deadline = Instant::now() + TEST_DEADLINE;
    let mut seen = Vec::new();
    while !done(&seen) {
        assert!(
            Instant::now() < deadline,
            "output never satisfied the test: {:?}",
            String::from_utf8_lossy(&seen)
        );
        // Bounded: a live holder sends heartbeats, so a plain `next()` could wait forever.
        match sub.next_before(deadline) {
            Some(Ok(StreamEvent::Output {
                data, truncated, ..
            })) => {
                assert!(
                    !truncated,
                    "the ring is far larger than these tests' output"
                );
                seen.extend_from_slice(&data);
            }
            Some(Ok(StreamEvent::Exited { exit_code })) => return (seen, Some(exit_code)),
            Some(Ok(StreamEvent::Heartbeat { .. })) => {}
            Some(Err(e)) => panic!("subscription failed: {e}"),
            None => panic!("subscription ended without exited"),
        }
    }
    (seen, None)
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// `sh` that puts its PTY in raw mode without echo, says READY, then runs `then`.
pub fn raw_sh(then: &str) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!("stty raw -echo; printf READY; {then}"),
    ]
}
