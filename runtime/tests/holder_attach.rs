//! `attach` driven through a real terminal: a PTY this test owns stands in for a person's.

mod holder_support;

use std::io::Read;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use holder_support::*;
use portable_pty::{CommandBuilder, PtySize};

const ATTACH_SOCKET_ENV: &str = "WAKTERM_HOLDER_TEST_ATTACH_SOCKET";

/// Not a test by itself: the process that `attach_shows_the_screen_forwards_keys_and_detaches`
/// runs inside its PTY.
#[test]
#[ignore = "helper role, started by attach_shows_the_screen_forwards_keys_and_detaches"]
fn attach_role() {
    let Some(socket) = std::env::var_os(ATTACH_SOCKET_ENV) else {
        return;
    };
    std::process::exit(wakterm_runtime::holder::attach(Path::new(&socket), "wakterm: attached; detach with Ctrl-]"));
}

struct Terminal {
    seen: Vec<u8>,
    rx: mpsc::Receiver<Vec<u8>>,
}

impl Terminal {
    fn wait_for(&mut self, needle: &[u8]) {
        let deadline = Instant::now() + TEST_DEADLINE;
        while !contains(&self.seen, needle) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(chunk) => self.seen.extend_from_slice(&chunk),
                Err(_) => panic!(
                    "terminal never showed {:?}: {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.seen)
                ),
            }
        }
    }
}

fn local_flags(fd: i32) -> libc::tcflag_t {
    let mut termios: libc::termios = unsafe { std::mem::zeroed() };
    assert_eq!(unsafe { libc::tcgetattr(fd, &mut termios) }, 0);
    termios.c_lflag
}

#[test]
fn attach_shows_the_screen_forwards_keys_and_detaches() {
    let argv = raw_sh("exec cat");
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let holder = HolderGuard::start(&argv);
    let mut watch = holder.client().subscribe(0).unwrap();
    collect_until(&mut watch, |seen| contains(seen, b"READY"));
    holder.client().write(b"visible-1").unwrap();
    collect_until(&mut watch, |seen| contains(seen, b"visible-1"));

    let pty = portable_pty::native_pty_system()
        .openpty(PtySize {
            rows: 30,
            cols: 100,
            pixel_width: 0,
            pixel_height: 0,
        })
        .unwrap();
    let mut cmd = CommandBuilder::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "attach_role",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ]);
    cmd.env(ATTACH_SOCKET_ENV, &holder.socket);
    let mut person = pty.slave.spawn_command(cmd).unwrap();
    let mut reader = pty.master.try_clone_reader().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    let mut terminal = Terminal {
        seen: Vec::new(),
        rx,
    };
    let master_fd = pty.master.as_raw_fd().unwrap();
    assert_ne!(
        local_flags(master_fd) & libc::ICANON,
        0,
        "a fresh PTY starts canonical"
    );

    terminal.wait_for(b"READYvisible-1");
    assert_eq!(
        local_flags(master_fd) & (libc::ICANON | libc::ECHO),
        0,
        "attach puts the terminal in raw mode"
    );
    let info = holder.client().info().unwrap();
    assert_eq!(
        (info.cols, info.rows),
        (100, 30),
        "the window size was forwarded"
    );

    let mut keys = pty.master.take_writer().unwrap();
    keys.write_all(b"typed-2").unwrap();
    collect_until(&mut watch, |seen| contains(seen, b"typed-2"));
    terminal.wait_for(b"typed-2");

    keys.write_all(&[wakterm_runtime::holder::DETACH_KEY])
        .unwrap();
    let deadline = Instant::now() + TEST_DEADLINE;
    let status = loop {
        if let Some(status) = person.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = person.kill();
            panic!("attach did not detach on Ctrl-]");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}");
    assert_ne!(
        local_flags(master_fd) & libc::ICANON,
        0,
        "the terminal mode is restored"
    );
    let after = holder.client().info().unwrap();
    assert!(
        after.alive && after.pid == holder.first.pid,
        "detaching leaves the agent running"
    );
}

use std::io::Write as _;
