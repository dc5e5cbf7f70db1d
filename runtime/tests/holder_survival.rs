//! The point of the holder: the agent outlives whoever started it.

mod holder_support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use holder_support::*;
use wakterm_runtime::holder::spawn_holder;

const SPAWNER_SOCKET_ENV: &str = "WAKTERM_HOLDER_TEST_SPAWNER_SOCKET";

/// Not a test by itself: the child process `holder_survives_its_spawner_being_killed` runs,
/// playing a daemon that starts a holder and is then killed.
#[test]
#[ignore = "helper role, started by holder_survives_its_spawner_being_killed"]
fn spawner_role() {
    let Some(socket) = std::env::var_os(SPAWNER_SOCKET_ENV) else {
        return;
    };
    let info = spawn_holder(
        holder_exe(),
        &config(Path::new(&socket), &["sleep", "1000"]),
    )
    .unwrap();
    println!("SPAWNED {} {}", info.holder_pid, info.pid.unwrap());
    std::io::stdout().flush().unwrap();
    std::thread::sleep(TEST_DEADLINE * 3);
}

#[test]
fn holder_survives_its_spawner_being_killed() {
    let socket = fresh_socket_path();
    let _cleanup = ShutdownOnDrop(socket.clone());
    let mut spawner = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "spawner_role",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SPAWNER_SOCKET_ENV, &socket)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        // Its own group, so killing the group is what a daemon's stop or crash looks like.
        .process_group(0)
        .spawn()
        .unwrap();
    let spawner_pid = spawner.id() as i32;
    let (tx, rx) = mpsc::channel();
    let stdout = spawner.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((_, rest)) = line.split_once("SPAWNED ") {
                let _ = tx.send(rest.to_string());
            }
        }
    });
    let spawned = rx.recv_timeout(TEST_DEADLINE);
    let Ok(spawned) = spawned else {
        unsafe { libc::kill(-spawner_pid, libc::SIGKILL) };
        let _ = spawner.wait();
        panic!("the spawner never reported a holder");
    };
    let guard = HolderGuard::adopt(socket.clone());
    let pids: Vec<u32> = spawned.split(' ').map(|p| p.parse().unwrap()).collect();
    let (holder_pid, child_pid) = (pids[0], pids[1]);

    unsafe { libc::kill(-spawner_pid, libc::SIGKILL) };
    spawner.wait().unwrap();
    std::thread::sleep(Duration::from_millis(200));

    let info = guard.client().info().unwrap();
    assert_eq!(
        (info.holder_pid, info.pid, info.alive),
        (holder_pid, Some(child_pid), true)
    );
    assert_eq!(info.start_time_ticks, proc_start_ticks(child_pid));
    let holder_session = unsafe { libc::getsid(holder_pid as i32) };
    assert_eq!(
        holder_session, holder_pid as i32,
        "the holder leads its own session"
    );
    assert_ne!(unsafe { libc::getpgid(holder_pid as i32) }, spawner_pid);
    assert_ne!(parent_of(holder_pid), Some(spawner_pid as u32));
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
