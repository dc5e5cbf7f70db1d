//! The holder's protocol over a real PTY and a real detached holder process.

mod holder_support;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;

use holder_support::*;
use wakterm_runtime::holder::protocol::MAX_WRITE_BYTES;
use wakterm_runtime::holder::{HolderClient, HolderError, WireErrorKind};

/// An `info` without its request counter: the facts that name the process.
#[derive(Debug, PartialEq)]
struct InfoReplyKey(Option<u32>, Option<u64>, bool, Option<i32>, u64, u32);

impl InfoReplyKey {
    fn of(info: &wakterm_runtime::holder::InfoReply) -> InfoReplyKey {
        InfoReplyKey(info.pid, info.start_time_ticks, info.alive, info.exit_code, info.generation, info.holder_pid)
    }
}

fn start_raw(then: &str) -> (HolderGuard, wakterm_runtime::holder::Subscription) {
    let argv = raw_sh(then);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let holder = HolderGuard::start(&argv);
    let mut sub = holder.client().subscribe(0).unwrap();
    collect_until(&mut sub, |seen| contains(seen, b"READY"));
    (holder, sub)
}

#[test]
fn written_bytes_come_back_through_output_and_subscribe() {
    let (holder, mut sub) = start_raw("exec cat");
    let mut client = holder.client();
    let outcome = client.write(b"ping-123\n").unwrap();
    assert_eq!((outcome.bytes_written, outcome.error), (9, None));
    let (pushed, exit) = collect_until(&mut sub, |seen| contains(seen, b"ping-123\n"));
    assert_eq!(exit, None);
    assert_eq!(pushed, b"ping-123\n", "raw cat echoes exactly the payload");
    let page = client.output(0, 1 << 20).unwrap();
    assert_eq!(page.data, b"READYping-123\n");
    assert_eq!((page.start, page.end, page.truncated), (0, 14, false));
    let tail = client.output(5, 4).unwrap();
    assert_eq!(
        (tail.data.as_slice(), tail.start, tail.end),
        (&b"ping"[..], 5, 9)
    );
}

#[test]
fn screen_shows_what_the_shell_printed() {
    let holder = HolderGuard::start(&["sh"]);
    let mut sub = holder.client().subscribe(0).unwrap();
    let mut client = holder.client();
    // Wait for the shell's first prompt: typed before it, the command's output can land on the
    // prompt's line ("# marker-42"), which made this test flaky.
    collect_until(&mut sub, |seen| contains(seen, b"# ") || contains(seen, b"$ "));
    assert_eq!(client.write(b"echo marker-$((6*7))\n").unwrap().error, None);
    let (seen, _) = collect_until(&mut sub, |seen| contains(seen, b"marker-42\r\n"));
    let screen = client.screen().unwrap();
    assert!(screen.output_offset >= seen.len() as u64);
    assert!(
        screen.lines.iter().any(|l| l == "marker-42"),
        "screen: {:#?}",
        screen.lines
    );
    assert_eq!((screen.cols, screen.rows, screen.lines.len()), (80, 24, 24));
    // Issue 10: the screen and `info` of one moment in one call (an admission's refresh).
    let info = client.info().unwrap();
    let both = client.screen_with_info().unwrap();
    assert_eq!(both.screen, client.screen().unwrap(), "nothing was printed meanwhile");
    let with = both.info.expect("this holder answers info with the screen");
    assert_eq!((with.pid, with.start_time_ticks, with.generation, with.alive), (info.pid, info.start_time_ticks, info.generation, info.alive));
    assert_eq!(with.output_end, both.screen.output_offset, "read under one lock");
    assert!(with.requests > info.requests, "the holder counted the call");
}

/// Payloads larger than the PTY's input queue force the holder into several write(2) calls per
/// payload, so without its write lock two writers' payloads would splice.
#[test]
fn concurrent_writers_never_interleave_payloads() {
    const PAYLOADS_PER_WRITER: usize = 200;
    let (holder, mut sub) = start_raw("exec cat");
    fn payload(tag: char, i: usize) -> Vec<u8> {
        let fill: String = std::iter::repeat_n(tag, 8000 + i % 7).collect();
        format!("<{tag}{i:04}:{fill}>\n").into_bytes()
    }
    let total: usize = ['a', 'b']
        .iter()
        .flat_map(|t| (0..PAYLOADS_PER_WRITER).map(move |i| payload(*t, i).len()))
        .sum();
    // Collect while writing: the output stream is larger than nothing but the ring bound.
    let collector =
        std::thread::spawn(move || collect_until(&mut sub, |seen| seen.len() >= total).0);
    let writers: Vec<_> = ['a', 'b']
        .into_iter()
        .map(|tag| {
            let mut client = holder.client();
            std::thread::spawn(move || {
                for i in 0..PAYLOADS_PER_WRITER {
                    let bytes = payload(tag, i);
                    let outcome = client.write(&bytes).unwrap();
                    assert_eq!(
                        (outcome.bytes_written, outcome.error),
                        (bytes.len() as u64, None)
                    );
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let seen = collector.join().unwrap();
    assert_eq!(seen.len(), total);
    // The output must be a merge of the two sequences at whole-payload granularity.
    let (mut next_a, mut next_b, mut at) = (0, 0, 0);
    while at < seen.len() {
        let a = (next_a < PAYLOADS_PER_WRITER).then(|| payload('a', next_a));
        let b = (next_b < PAYLOADS_PER_WRITER).then(|| payload('b', next_b));
        if let Some(a) = a.filter(|a| seen[at..].starts_with(a)) {
            at += a.len();
            next_a += 1;
        } else if let Some(b) = b.filter(|b| seen[at..].starts_with(b)) {
            at += b.len();
            next_b += 1;
        } else {
            panic!(
                "payloads interleaved at byte {at}: {:?}",
                String::from_utf8_lossy(&seen[at..at + 80.min(seen.len() - at)])
            );
        }
    }
    assert_eq!((next_a, next_b), (PAYLOADS_PER_WRITER, PAYLOADS_PER_WRITER));
}

#[test]
fn info_names_one_stable_process_incarnation() {
    let holder = HolderGuard::start(&["cat"]);
    let mut client = holder.client();
    let first = client.info().unwrap();
    let second = client.info().unwrap();
    assert_eq!(second.requests, first.requests + 1, "each request is counted");
    assert_eq!(InfoReplyKey::of(&first), InfoReplyKey::of(&second));
    let pid = first.pid.unwrap();
    assert!(first.alive && first.exit_code.is_none() && first.spawn_error.is_none());
    assert_eq!(first.generation, 0);
    assert_eq!(first.start_time_ticks, proc_start_ticks(pid));
    assert_ne!(first.holder_pid, std::process::id());
}

#[test]
fn respawn_starts_a_new_incarnation_in_the_same_pane() {
    let (holder, mut old_stream) = start_raw("exec cat");
    let mut client = holder.client();
    let before = client.info().unwrap();
    let after = client.respawn().unwrap();
    assert_eq!(after.generation, before.generation + 1);
    assert!(after.alive);
    assert_ne!(
        (after.pid, after.start_time_ticks),
        (before.pid, before.start_time_ticks)
    );
    assert_eq!(after.start_time_ticks, proc_start_ticks(after.pid.unwrap()));
    assert!(wait_gone(before.pid.unwrap()), "the replaced child is gone");
    // The old generation's stream ends with its exit (SIGHUP: 128 + 1).
    let (_, exit) = collect_until(&mut old_stream, |_| false);
    assert_eq!(exit, Some(Some(129)));
    // Output offsets continue across the respawn: the pane is the same.
    let mut sub = HolderClient::connect(&holder.socket)
        .unwrap()
        .subscribe(before.output_end)
        .unwrap();
    let (seen, _) = collect_until(&mut sub, |seen| contains(seen, b"READY"));
    assert!(seen.ends_with(b"READY"));
    assert_eq!(client.write(b"again\n").unwrap().error, None);
    collect_until(&mut sub, |seen| contains(seen, b"again\n"));
}

/// LIFE-9: a respawn the holder comes to after its deadline (it was SIGSTOPped past the
/// caller's call bound) is refused when it goes on: the process it runs stays. A hostile run
/// saw `agent restart` answer `agent_restart_failed` for a stopped holder that, once
/// continued, performed the respawn anyway: a caller who retried restarted the agent twice.
#[test]
fn life_9_a_respawn_the_holder_comes_to_late_is_refused() {
    let (holder, _sub) = start_raw("exec cat");
    let before = holder.client().info().unwrap();
    let holder_pid = nix::unistd::Pid::from_raw(before.holder_pid as i32);
    let mut hasty = HolderClient::connect_with_timeout(&holder.socket, std::time::Duration::from_millis(200)).unwrap();
    nix::sys::signal::kill(holder_pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
    let unanswered = hasty.respawn();
    nix::sys::signal::kill(holder_pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    assert!(matches!(unanswered, Err(HolderError::Timeout { .. })), "a stopped holder answers nothing: {unanswered:?}");
    // The holder reads the queued respawn once it goes on (its request count says when), then
    // has the time a respawn takes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while holder.client().info().unwrap().requests < before.requests + 2 {
        assert!(std::time::Instant::now() < deadline, "the holder never read the queued respawn");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    std::thread::sleep(std::time::Duration::from_millis(500));
    let after = holder.client().info().unwrap();
    assert_eq!(InfoReplyKey::of(&after), InfoReplyKey::of(&before), "the late respawn was performed");
    // Asked in time, the same holder respawns as usual.
    assert_eq!(holder.client().respawn().unwrap().generation, before.generation + 1);
}

/// LIFE-9: the refusal says so, as its own kind (nothing ended, nothing started).
#[test]
fn life_9_a_respawn_past_its_deadline_is_refused_by_kind() {
    let (holder, _sub) = start_raw("exec cat");
    let before = holder.client().info().unwrap();
    let mut raw = UnixStream::connect(&holder.socket).unwrap();
    raw.write_all(b"{\"op\":\"respawn\",\"start_by_ms\":1}\n").unwrap();
    let mut line = String::new();
    BufReader::new(&raw).read_line(&mut line).unwrap();
    let reply: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(reply["ok"], false, "{line}");
    assert_eq!(reply["error"]["kind"], "start_deadline_passed", "{line}");
    assert_eq!(InfoReplyKey::of(&holder.client().info().unwrap()), InfoReplyKey::of(&before));
    // A request without the field (a daemon older than it) still respawns.
    let mut raw = UnixStream::connect(&holder.socket).unwrap();
    raw.write_all(b"{\"op\":\"respawn\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(&raw).read_line(&mut line).unwrap();
    assert!(line.contains("\"ok\":true"), "{line}");
    assert_eq!(holder.client().info().unwrap().generation, before.generation + 1);
}

/// ADM-5, ADM-16: the screen is evidence about the process that drew it. After a respawn the
/// old process's last screen (an idle, empty composer) must not be read as the new process's:
/// the new incarnation starts on a blank screen, so until it draws its own the composer is
/// unknown, never "idle" (found against the real Codex: the catalog said idle for the new
/// incarnation, and the next send met a half-drawn TUI as `composer_not_empty`).
#[test]
fn respawn_starts_the_new_incarnation_on_a_blank_screen() {
    let (holder, mut sub) = start_raw("exec cat");
    let mut client = holder.client();
    client.write(b"drawn-by-the-old-process\n").unwrap();
    collect_until(&mut sub, |seen| contains(seen, b"drawn-by-the-old-process\n"));
    let before = client.screen().unwrap();
    assert!(before.lines.iter().any(|l| l.contains("drawn-by-the-old-process")), "{:?}", before.lines);
    client.respawn().unwrap();
    let after = client.screen().unwrap();
    assert!(!after.lines.iter().any(|l| l.contains("drawn-by-the-old-process")), "the old screen survived the respawn: {:?}", after.lines);
    // The new process draws on it as usual.
    let mut sub = HolderClient::connect(&holder.socket).unwrap().subscribe(after.output_offset).unwrap();
    client.write(b"drawn-by-the-new-one\n").unwrap();
    collect_until(&mut sub, |seen| contains(seen, b"drawn-by-the-new-one\n"));
    let drawn = client.screen().unwrap();
    assert!(drawn.lines.iter().any(|l| l.contains("drawn-by-the-new-one")), "{:?}", drawn.lines);
}

#[test]
fn exit_is_reported_then_kept_until_shutdown() {
    let holder = HolderGuard::start(&["sh", "-c", "printf bye; exit 7"]);
    let mut sub = holder.client().subscribe(0).unwrap();
    let (seen, exit) = collect_until(&mut sub, |_| false);
    assert!(seen.ends_with(b"bye"), "output precedes exited: {seen:?}");
    assert_eq!(exit, Some(Some(7)));
    let mut client = holder.client();
    let info = client.info().unwrap();
    assert_eq!((info.alive, info.exit_code), (false, Some(7)));
    // A write to a dead child writes nothing, and says so.
    let outcome = client.write(b"x").unwrap();
    assert_eq!(outcome.bytes_written, 0);
    assert!(outcome.error.unwrap().contains("not alive"));
    assert!(matches!(
        client.kill(libc::SIGTERM),
        Err(HolderError::Remote {
            kind: WireErrorKind::NotAlive,
            ..
        })
    ));
    // A late subscriber of the ended generation gets the output and the exit straight away.
    let mut late = holder.client().subscribe(0).unwrap();
    assert_eq!(
        collect_until(&mut late, |_| false),
        (b"bye".to_vec(), Some(Some(7)))
    );
}

#[test]
fn kill_delivers_the_signal_to_the_child() {
    let holder = HolderGuard::start(&["sleep", "1000"]);
    let mut sub = holder.client().subscribe(0).unwrap();
    let reply = holder.client().kill(libc::SIGTERM).unwrap();
    assert_eq!(reply.pid, holder.first.pid.unwrap());
    assert_eq!(
        collect_until(&mut sub, |_| false).1,
        Some(Some(128 + libc::SIGTERM))
    );
}

#[test]
fn resize_reaches_the_pty_and_the_screen() {
    let (holder, mut sub) = start_raw("sleep 0.3; stty size; exec cat");
    let mut client = holder.client();
    client.resize(100, 30).unwrap();
    collect_until(&mut sub, |seen| contains(seen, b"30 100"));
    let screen = client.screen().unwrap();
    assert_eq!(
        (screen.cols, screen.rows, screen.lines.len()),
        (100, 30, 30)
    );
    let info = client.info().unwrap();
    assert_eq!((info.cols, info.rows), (100, 30));
    assert!(matches!(
        client.resize(0, 30),
        Err(HolderError::Remote {
            kind: WireErrorKind::BadRequest,
            ..
        })
    ));
}

#[test]
fn socket_is_0600_in_a_0700_directory() {
    let holder = HolderGuard::start(&["cat"]);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&holder.socket), 0o600);
    assert_eq!(mode(holder.socket.parent().unwrap()), 0o700);
}

#[test]
fn spawn_refuses_a_directory_others_can_enter() {
    let socket = fresh_socket_path();
    let dir = socket.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let result = wakterm_runtime::holder::spawn_holder(holder_exe(), &config(&socket, &["cat"]));
    let _ = std::fs::remove_dir_all(dir);
    match result {
        Err(HolderError::Spawn { detail }) => assert!(detail.contains("mode 0700"), "{detail}"),
        other => panic!("expected a spawn refusal, got {other:?}"),
    }
}

#[test]
fn a_second_holder_on_a_live_socket_is_refused() {
    let holder = HolderGuard::start(&["cat"]);
    let result =
        wakterm_runtime::holder::spawn_holder(holder_exe(), &config(&holder.socket, &["cat"]));
    assert!(
        matches!(result, Err(HolderError::Spawn { ref detail }) if detail.contains("another holder")),
        "{result:?}"
    );
    assert_eq!(
        holder.client().info().unwrap().pid,
        holder.first.pid,
        "the first holder is untouched"
    );
}

#[test]
fn shutdown_ends_the_holder_and_the_child() {
    let holder = HolderGuard::start(&["sleep", "1000"]);
    let (holder_pid, child_pid) = (holder.first.holder_pid, holder.first.pid.unwrap());
    let last = holder.client().shutdown().unwrap();
    assert!(!last.alive);
    assert!(
        !holder.socket.exists(),
        "the socket is removed before the reply"
    );
    assert!(wait_gone(child_pid) && wait_gone(holder_pid));
    assert!(matches!(
        HolderClient::connect(&holder.socket),
        Err(HolderError::ConnectRefused { .. })
    ));
}

#[test]
fn bad_input_gets_structured_errors_and_keeps_the_connection() {
    let holder = HolderGuard::start(&["cat"]);
    let mut client = holder.client();
    let huge = vec![b'x'; MAX_WRITE_BYTES + 1];
    assert!(matches!(
        client.write(&huge),
        Err(HolderError::Remote {
            kind: WireErrorKind::TooLarge,
            ..
        })
    ));
    let end = client.info().unwrap().output_end;
    assert!(matches!(
        client.output(end + 1, 10),
        Err(HolderError::Remote {
            kind: WireErrorKind::BadRequest,
            ..
        })
    ));
    assert!(matches!(
        client.kill(0),
        Err(HolderError::Remote {
            kind: WireErrorKind::BadRequest,
            ..
        })
    ));
    // Raw garbage on the wire: answered, and the same connection still serves.
    let stream = UnixStream::connect(&holder.socket).unwrap();
    stream.set_read_timeout(Some(TEST_DEADLINE)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut line = String::new();
    for garbage in [
        "not json\n",
        "{\"op\":\"launch\"}\n",
        "{\"op\":\"write\",\"data\":\"%%%\"}\n",
    ] {
        writer.write_all(garbage.as_bytes()).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        assert!(
            line.contains("\"ok\":false") && line.contains("bad_request"),
            "{line}"
        );
    }
    writer.write_all(b"{\"op\":\"info\"}\n").unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert!(line.contains("\"ok\":true"), "{line}");
}

#[test]
fn connecting_to_nothing_is_connect_refused() {
    let socket = fresh_socket_path();
    assert!(matches!(
        HolderClient::connect(&socket),
        Err(HolderError::ConnectRefused { .. })
    ));
}

#[test]
fn a_child_that_stops_reading_gets_an_honest_partial_write() {
    let (holder, _sub) = start_raw("exec sleep 1000");
    let payload = vec![b'p'; MAX_WRITE_BYTES];
    let outcome = holder.client().write(&payload).unwrap();
    assert!(
        outcome.bytes_written > 0 && outcome.bytes_written < payload.len() as u64,
        "{outcome:?}"
    );
    assert!(outcome.error.unwrap().contains("deadline"));
}

#[test]
fn subscribers_see_the_exit_after_all_output() {
    let holder = HolderGuard::start(&[
        "sh",
        "-c",
        "i=0; while [ $i -lt 2000 ]; do echo line-$i; i=$((i+1)); done",
    ]);
    let mut sub = holder.client().subscribe(0).unwrap();
    let (seen, exit) = collect_until(&mut sub, |_| false);
    assert_eq!(exit, Some(Some(0)));
    assert!(
        seen.ends_with(b"line-1999\r\n"),
        "tail: {:?}",
        String::from_utf8_lossy(&seen[seen.len().saturating_sub(40)..])
    );
}

#[test]
fn a_command_that_cannot_start_is_reported_not_hidden() {
    let holder = HolderGuard::start(&["/nonexistent/agent-binary"]);
    let info = &holder.first;
    assert_eq!((info.pid, info.alive, info.exit_code), (None, false, Some(127)));
    assert!(info.spawn_error.as_deref().is_some_and(|e| !e.is_empty()));
    let mut sub = holder.client().subscribe(0).unwrap();
    assert_eq!(collect_until(&mut sub, |_| false), (Vec::new(), Some(Some(127))));
}

/// ADM-8: a write that names the process it must reach is refused, with nothing written, once
/// the pane runs another process (a respawn in between); naming the current one writes.
#[test]
fn write_expecting_a_replaced_process_writes_nothing() {
    use wakterm_runtime::holder::protocol::{ExpectedProcess, WriteRefusal};
    let (holder, _sub) = start_raw("exec cat");
    let mut client = holder.client();
    let before = client.info().unwrap();
    let old = ExpectedProcess { pid: before.pid.unwrap(), start_time_ticks: before.start_time_ticks.unwrap(), writes: None };
    let after = client.respawn().unwrap();
    let end = client.info().unwrap().output_end;
    let refused = client.write_expecting(b"for-the-old-process\n", Some(old), None).unwrap();
    assert_eq!(refused.bytes_written, 0);
    assert_eq!(refused.refused, Some(WriteRefusal::ProcessChanged), "{refused:?}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let page = client.output(end, 1 << 20).unwrap();
    assert!(!contains(&page.data, b"for-the-old-process"), "nothing reached the pane");
    let current = ExpectedProcess { pid: after.pid.unwrap(), start_time_ticks: after.start_time_ticks.unwrap(), writes: None };
    let written = client.write_expecting(b"for-the-new\n", Some(current), None).unwrap();
    assert_eq!((written.bytes_written, written.error, written.refused), (12, None, None));
}

/// ADM-4: a writer's look (the process and the pane's write count, and the output end then),
/// then a human's keys typed after it.
fn look_then_type(client: &mut HolderClient) -> (wakterm_runtime::holder::protocol::ExpectedProcess, u64) {
    let info = client.info().unwrap();
    let looked = wakterm_runtime::holder::protocol::ExpectedProcess { pid: info.pid.unwrap(), start_time_ticks: info.start_time_ticks.unwrap(), writes: Some(info.writes) };
    client.write(b"human-draft").unwrap(); // typed after the look
    (looked, info.output_end)
}

/// Nothing with `marker` reached the pane's output past `end` (a moment later).
fn assert_never_reached(client: &mut HolderClient, end: u64, marker: &[u8]) {
    std::thread::sleep(std::time::Duration::from_millis(200));
    let page = client.output(end, 1 << 20).unwrap();
    assert!(!contains(&page.data, marker), "nothing of the refused write reached the pane");
}

/// ADM-4: a write that names the pane's write count of its look is refused, with nothing
/// written, once any write came since (a human's input: the Ctrl-U that starts an admission
/// would erase it); naming the current count writes.
#[test]
fn adm_4_a_write_naming_a_stale_write_count_writes_nothing() {
    use wakterm_runtime::holder::protocol::{ExpectedProcess, WriteRefusal};
    let (holder, _sub) = start_raw("exec cat");
    let mut client = holder.client();
    let (looked, end) = look_then_type(&mut client);
    let refused = client.write_expecting(b"\x15admitted\n", Some(looked), None).unwrap();
    assert_eq!((refused.bytes_written, refused.refused), (0, Some(WriteRefusal::InputSinceLook)), "{refused:?}");
    assert_never_reached(&mut client, end, b"admitted");
    let now = ExpectedProcess { writes: Some(client.info().unwrap().writes), ..looked };
    let written = client.write_expecting(b"\nadmitted\n", Some(now), None).unwrap();
    assert_eq!((written.bytes_written, written.refused), (10, None), "{written:?}");
}

/// ADM-4, SUB-1: a submit's split write names the write count of its look too: once any write
/// came since (a draft typed, raw `session input`), it is refused before its first step, with
/// nothing written and no boundary; naming the current count writes every step.
#[test]
fn sub_1_write_steps_naming_a_stale_write_count_write_nothing() {
    use std::time::Duration;
    use wakterm_runtime::holder::protocol::{ExpectedProcess, WriteRefusal};
    let (holder, _sub) = start_raw("exec cat");
    let mut client = holder.client();
    let (looked, end) = look_then_type(&mut client);
    let steps = [b"\x15".to_vec(), b"submitted".to_vec(), b"\n".to_vec()];
    let refused = client.write_steps(&steps, Duration::from_millis(10), Some(looked), None).unwrap();
    assert_eq!((refused.steps_written, refused.bytes_written, refused.refused), (0, 0, Some(WriteRefusal::InputSinceLook)), "{refused:?}");
    assert!(refused.boundary.is_none(), "{refused:?}");
    assert_never_reached(&mut client, end, b"submitted");
    let now = ExpectedProcess { writes: Some(client.info().unwrap().writes), ..looked };
    let written = client.write_steps(&steps, Duration::from_millis(10), Some(now), None).unwrap();
    assert_eq!((written.steps_written, written.refused), (3, None), "{written:?}");
    assert!(written.boundary.is_some(), "{written:?}");
}

/// ADM-4, SUB-1: a look's write count covers only writes whose bytes all reached the pane: a
/// write under way (here blocked on a child that reads nothing for a second) is waited for.
/// Read with the screen, its count was taken for a write the screen showed while its bytes
/// were still going in, and a write naming that count erased a draft (a review).
#[test]
fn adm_4_a_looks_write_count_waits_for_a_write_under_way() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    let (holder, _sub) = start_raw("sleep 1; exec cat >/dev/null");
    let before = holder.client().info().unwrap().writes;
    let landed = Arc::new(AtomicBool::new(false));
    let writer = {
        let (mut client, landed) = (holder.client(), landed.clone());
        std::thread::spawn(move || {
            let outcome = client.write(&vec![b'x'; 512 * 1024]).unwrap();
            landed.store(true, Ordering::SeqCst);
            outcome
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while holder.client().info().unwrap().writes == before {
        assert!(std::time::Instant::now() < deadline, "the write never began");
        std::thread::sleep(Duration::from_millis(5));
    }
    let looked = holder.client().screen_with_info().unwrap();
    assert!(landed.load(Ordering::SeqCst), "the look answered while a counted write was still writing");
    let outcome = writer.join().unwrap();
    assert_eq!((outcome.bytes_written, outcome.error.as_deref()), (512 * 1024, None), "{outcome:?}");
    assert_eq!(looked.info.unwrap().writes, before + 1);
}

/// ADM-4: an admission's look (`screen` with info) waits for input written just before it to
/// be drawn: a TUI that draws a key 100 ms after reading it showed the composer as it was, so a
/// human's draft typed a moment before an admission read as empty and its Ctrl-U erased it.
/// A child that draws nothing holds the look no longer than `INPUT_DRAW_WAIT_MS`.
#[test]
fn adm_4_a_look_waits_for_input_written_just_before_it_to_be_drawn() {
    use std::time::{Duration, Instant};
    use wakterm_engine::pane_look::INPUT_DRAW_WAIT_MS;
    // Draws each line it reads 100 ms later.
    let (holder, _sub) = start_raw("while IFS= read -r line; do sleep 0.1; printf '%s' \"$line\"; done");
    let mut client = holder.client();
    client.write(b"human-draft\n").unwrap();
    let looked = client.screen_with_info().unwrap();
    let text = looked.screen.lines.join("\n");
    assert!(text.contains("human-draft"), "the look read the screen before the draft was drawn: {text:?}");
    // Nothing drawn at all (an ignored key): the look is held at most the bound.
    let (quiet, _sub) = start_raw("exec sleep 30");
    let mut client = quiet.client();
    client.write(b"x").unwrap();
    let started = Instant::now();
    client.screen_with_info().unwrap();
    let held = started.elapsed();
    assert!(held < Duration::from_millis(INPUT_DRAW_WAIT_MS + 2_000), "held {held:?}");
}

/// ADM-4: a look's draw wait counts from the output end read just before the write(2) that put
/// the keys' last bytes in: what the child printed while the write waited on a full PTY is no
/// redraw of the keys. Counted from before the write began, that output counted as their draw,
/// and the look read a screen that did not show them yet (a review of c003cbd: no test held it).
#[test]
fn adm_4_output_printed_while_a_write_waits_is_not_its_draw() {
    use std::time::{Duration, Instant};
    use wakterm_engine::pane_look::INPUT_DRAW_WAIT_MS;
    // Reads nothing for 0.8 s, prints at 0.5 s, then reads everything and prints nothing.
    let (holder, _sub) = start_raw("sleep 0.5; printf printed-while-blocked; sleep 0.3; exec cat >/dev/null");
    let mut client = holder.client();
    let end = client.info().unwrap().output_end;
    let outcome = client.write(&vec![b'x'; 512 * 1024]).unwrap();
    // The look at once: its wait runs from the write's end, so any delay before it eats into
    // what this test can see (the old rule held it under a millisecond).
    let started = Instant::now();
    client.screen_with_info().unwrap();
    let held = started.elapsed();
    assert_eq!((outcome.bytes_written, outcome.error.as_deref()), (512 * 1024, None), "{outcome:?}");
    let page = client.output(end, 1 << 20).unwrap();
    assert!(contains(&page.data, b"printed-while-blocked"), "the child printed before the write ended");
    assert!(held >= Duration::from_millis(INPUT_DRAW_WAIT_MS / 5), "the look took output printed while the write waited for the keys' draw: held {held:?}");
}

/// ADM-12: a write (or a split write) the holder comes to after its `start_by_ms` is refused
/// with nothing written, so a stalled holder never starts a write the daemon has given up on;
/// one the holder comes to in time is written.
#[test]
fn adm_12_a_write_past_its_start_deadline_writes_nothing() {
    use wakterm_runtime::holder::protocol::{monotonic_ms, WriteRefusal};
    let (holder, _sub) = start_raw("exec cat");
    let mut client = holder.client();
    let end = client.info().unwrap().output_end;
    let passed = monotonic_ms() - 1;
    let refused = client.write_expecting(b"too-late\n", None, Some(passed)).unwrap();
    assert_eq!((refused.bytes_written, refused.refused), (0, Some(WriteRefusal::StartDeadlinePassed)), "{refused:?}");
    let steps = client.write_steps(&[b"late-".to_vec(), b"steps\n".to_vec()], std::time::Duration::from_millis(10), None, Some(passed)).unwrap();
    assert_eq!((steps.steps_written, steps.bytes_written, steps.refused), (0, 0, Some(WriteRefusal::StartDeadlinePassed)), "{steps:?}");
    let in_time = client.write_expecting(b"in-time\n", None, Some(monotonic_ms() + 10_000)).unwrap();
    assert_eq!((in_time.bytes_written, in_time.refused), (8, None), "{in_time:?}");
    std::thread::sleep(std::time::Duration::from_millis(200));
    let page = client.output(end, 1 << 20).unwrap();
    assert!(contains(&page.data, b"in-time"), "the write in time reached the pane");
    assert!(!contains(&page.data, b"too-late") && !contains(&page.data, b"late-steps"), "nothing late reached the pane");
}

/// ADM-12: the start deadline is checked once the holder has the pane's write lock: a write
/// that waited for it behind a split write past its `start_by_ms` is refused, nothing written.
#[test]
fn adm_12_a_write_that_waited_for_the_lock_past_its_start_deadline_writes_nothing() {
    use wakterm_runtime::holder::protocol::{monotonic_ms, WriteRefusal};
    let (holder, _sub) = start_raw("exec cat");
    let mut client = holder.client();
    let end = client.info().unwrap().output_end;
    let mut splitter = holder.client();
    let split = std::thread::spawn(move || {
        let steps = [b"held-".to_vec(), b"lock-".to_vec(), b"steps\n".to_vec()];
        splitter.write_steps(&steps, std::time::Duration::from_millis(1_000), None, None).unwrap()
    });
    // The first step is out: the split write holds the lock through its two 1 s gaps.
    let began = std::time::Instant::now();
    while !contains(&client.output(end, 1 << 20).unwrap().data, b"held-") {
        assert!(began.elapsed() < std::time::Duration::from_secs(10), "the split write never began");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let waited = client.write_expecting(b"waited\n", None, Some(monotonic_ms() + 200)).unwrap();
    assert_eq!((waited.bytes_written, waited.refused), (0, Some(WriteRefusal::StartDeadlinePassed)), "{waited:?}");
    assert_eq!(split.join().unwrap().steps_written, 3);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let page = client.output(end, 1 << 20).unwrap();
    assert!(contains(&page.data, b"held-lock-steps") && !contains(&page.data, b"waited"), "only the split write");
}

// LIVE-2: `info_changed` answers at once when the caller's view is already stale, waits while
// nothing changes, and answers as soon as the child exits (pushed, not polled).
#[test]
fn live_2_info_changed_pushes_the_child_exit() {
    use std::time::{Duration, Instant};
    let holder = HolderGuard::start(&["sleep", "1000"]);
    let mut client = holder.client();
    let info = client.info().unwrap();
    let asked = Instant::now();
    let stale = client.info_changed(info.generation, false, Duration::from_secs(20)).unwrap();
    assert!(stale.alive && asked.elapsed() < Duration::from_secs(10), "a stale view is answered at once");
    let asked = Instant::now();
    let unchanged = client.info_changed(info.generation, true, Duration::from_millis(300)).unwrap();
    assert_eq!((unchanged.pid, unchanged.alive, unchanged.generation), (info.pid, info.alive, info.generation));
    assert!(asked.elapsed() >= Duration::from_millis(300), "nothing changed: it waited its timeout");

    let socket = holder.socket.clone();
    let generation = info.generation;
    let waiter = std::thread::spawn(move || {
        HolderClient::connect(&socket).unwrap().info_changed(generation, true, Duration::from_secs(50))
    });
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    holder.client().kill(libc::SIGTERM).unwrap();
    let changed = waiter.join().unwrap().unwrap();
    assert!(!changed.alive && changed.exit_code == Some(128 + libc::SIGTERM), "{changed:?}");
    assert!(killed.elapsed() < Duration::from_secs(40), "answered on the exit, not at its timeout");

    for timeout in [Duration::ZERO, Duration::from_secs(61)] {
        assert!(matches!(
            client.info_changed(0, true, timeout),
            Err(HolderError::Remote { kind: WireErrorKind::BadRequest, .. })
        ));
    }
}

/// SUB-2: `write_steps` writes its steps in order with the gap between them, holds the write
/// lock through the gaps (a concurrent write lands before or after the whole sequence, never
/// between steps), counts one accepted write, and reads the boundary after the last step.
#[test]
fn sub_2_write_steps_hold_the_write_lock_through_the_gaps() {
    use std::time::{Duration, Instant};
    let (holder, mut sub) = start_raw("exec cat");
    let mut client = holder.client();
    let writes_before = client.info().unwrap().writes;
    let socket = holder.socket.clone();
    let intruder = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(60)); // inside the first gap
        HolderClient::connect(&socket).unwrap().write(b"<intruder>").unwrap()
    });
    let started = Instant::now();
    let steps = vec![b"<one>".to_vec(), b"<two>".to_vec(), b"<three>".to_vec()];
    let outcome = client.write_steps(&steps, Duration::from_millis(150), None, None).unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "two gaps of 150 ms: {:?}", started.elapsed());
    assert_eq!((outcome.steps_written, outcome.bytes_written, outcome.error.as_deref()), (3, 17, None));
    let boundary = outcome.boundary.expect("a complete sequence has a boundary");
    assert_eq!(boundary.writes, writes_before + 1, "the sequence is one accepted write");
    assert!(boundary.screen.output_offset >= 5, "the boundary is read after the steps: {boundary:?}");
    assert_eq!(intruder.join().unwrap().error, None);
    let (seen, _) = collect_until(&mut sub, |seen| contains(seen, b"<intruder>") && contains(seen, b"<three>"));
    let text = String::from_utf8_lossy(&seen).to_string();
    assert!(text.contains("<one><two><three>"), "the steps arrived contiguous: {text:?}");
    assert_eq!(client.info().unwrap().writes, writes_before + 2);
}

/// SUB-2, SUB-3: `write_steps` naming a replaced process writes nothing and has no boundary;
/// bad shapes are refused before any byte.
#[test]
fn sub_3_write_steps_refuse_before_the_first_byte() {
    use std::time::Duration;
    use wakterm_runtime::holder::protocol::{ExpectedProcess, WriteRefusal};
    let (holder, _sub) = start_raw("exec cat");
    let mut client = holder.client();
    let before = client.info().unwrap();
    let old = ExpectedProcess { pid: before.pid.unwrap(), start_time_ticks: before.start_time_ticks.unwrap(), writes: None };
    client.respawn().unwrap();
    let end = client.info().unwrap().output_end;
    let refused = client.write_steps(&[b"<never-1>".to_vec(), b"\r".to_vec()], Duration::from_millis(10), Some(old), None).unwrap();
    assert_eq!((refused.bytes_written, refused.refused, refused.boundary.is_none()), (0, Some(WriteRefusal::ProcessChanged), true));
    for (steps, gap) in [(vec![], 10), (vec![b"<never-2>".to_vec(), Vec::new()], 10), (vec![b"<never-3>".to_vec()], 5_000)] {
        match client.write_steps(&steps, Duration::from_millis(gap), None, None) {
            Err(HolderError::Remote { kind: WireErrorKind::BadRequest, .. }) => {}
            other => panic!("{steps:?}/{gap}: expected bad_request, got {other:?}"),
        }
    }
    std::thread::sleep(std::time::Duration::from_millis(200));
    let page = client.output(end, 1 << 20).unwrap();
    assert!(!contains(&page.data, b"<never"), "nothing reached the pane: {:?}", String::from_utf8_lossy(&page.data));
}

/// Voluntary context switches of the holder's thread named `name` (its `comm`), read through
/// the `procfs` crate the daemon's own probes use.
fn thread_switches(holder_pid: u32, name: &str) -> u64 {
    let holder = procfs::process::Process::new(holder_pid as i32).expect("the holder's process");
    let status = holder
        .tasks()
        .expect("the holder's threads")
        .flatten()
        .filter_map(|task| task.status().ok())
        .find(|status| status.name == name)
        .unwrap_or_else(|| panic!("the holder has no thread named {name}"));
    status.voluntary_ctxt_switches.expect("a switch count")
}

/// The linger watch (exit CHILD_EXIT_LINGER after the child ended) waits for the child's start
/// or end only: output, which the holder signals for every chunk it reads, must not wake it
/// (it did, once per chunk: 12 % of a busy holder's CPU samples, issue 10).
#[test]
fn the_linger_watch_sleeps_through_output() {
    let (holder, mut sub) = start_raw("exec cat");
    let mut client = holder.client();
    let pid = holder.first.holder_pid;
    let (linger_before, reader_before) = (thread_switches(pid, "holder-linger"), thread_switches(pid, "holder-reader"));
    for i in 0..50 {
        let line = format!("chunk-{i}\n");
        assert_eq!(client.write(line.as_bytes()).unwrap().error, None);
        collect_until(&mut sub, |seen| contains(seen, line.as_bytes())); // one chunk at a time
    }
    let (linger_after, reader_after) = (thread_switches(pid, "holder-linger"), thread_switches(pid, "holder-reader"));
    // The control: switches of this thread are counted at all. Not one per chunk: on a loaded
    // machine the next chunk is often there before the reader is back in `read` (a CI run saw
    // 17 for 50 chunks). The linger watch's bound below holds either way: every chunk was read
    // and signalled (each was seen by the subscriber before the next was written).
    assert!(reader_after > reader_before, "the reader's switches are counted ({reader_before} -> {reader_after})");
    assert!(linger_after <= linger_before + 2, "50 output chunks woke the linger watch {} times", linger_after - linger_before);
}

/// ADM-19: the holder notes when another writer's Enter ended: a write carrying a carriage
/// return that names no process (a human's keys, a raw input). An admission's or a submit's
/// write (each names the process it must reach) is no other writer's, nor is a write without
/// an Enter.
#[test]
fn adm_19_the_holder_notes_only_other_writers_enters() {
    use std::time::Duration;
    use wakterm_runtime::holder::protocol::{monotonic_ms, ExpectedProcess};
    let (holder, _sub) = start_raw("exec cat >/dev/null");
    let mut client = holder.client();
    let info = client.info().unwrap();
    assert_eq!(info.other_enter_ms, None, "no Enter yet");
    let process = ExpectedProcess { pid: info.pid.unwrap(), start_time_ticks: info.start_time_ticks.unwrap(), writes: None };
    client.write(b"typed, no Enter").unwrap();
    client.write_expecting(b"\x15\x1b[200~ours\x1b[201~\r", Some(process), None).unwrap();
    client.write_steps(&[b"\x15".to_vec(), b"submitted".to_vec(), b"\r".to_vec()], Duration::from_millis(5), Some(process), None).unwrap();
    assert_eq!(client.info().unwrap().other_enter_ms, None, "keys without Enter, and our own prompts' Enters");
    let before = monotonic_ms();
    client.write(b"a human's prompt\r").unwrap();
    let noted = client.info().unwrap().other_enter_ms.expect("a human's Enter is noted");
    assert!((before..=monotonic_ms()).contains(&noted), "{before} <= {noted}");
    client.write_expecting(b"\x15\x1b[200~ours again\x1b[201~\r", Some(process), None).unwrap();
    assert_eq!(client.info().unwrap().other_enter_ms, Some(noted), "our prompt's Enter leaves the other writer's");
}

/// ADM-19: an `info_changed` call watching for Enters answers as soon as another writer's
/// Enter is noted (the daemon's monitor then reads the rollout before Codex records that
/// prompt's turn), not on keys without Enter nor on our own prompts; each Enter is noted later
/// than the last, so a watcher that knows the last wakes on the next even within the same ms.
#[test]
fn adm_19_info_changed_answers_another_writers_enter_at_once() {
    use std::time::{Duration, Instant};
    use wakterm_runtime::holder::protocol::ExpectedProcess;
    let (holder, _sub) = start_raw("exec cat >/dev/null");
    let mut client = holder.client();
    let info = client.info().unwrap();
    let process = ExpectedProcess { pid: info.pid.unwrap(), start_time_ticks: info.start_time_ticks.unwrap(), writes: None };
    let socket = holder.socket.clone();
    let generation = info.generation;
    let watch = move |after: u64, timeout: Duration| {
        let socket = socket.clone();
        std::thread::spawn(move || {
            let asked = Instant::now();
            let answer = HolderClient::connect(&socket).unwrap().info_changed_or_enter(generation, true, after, timeout).unwrap();
            (answer, asked.elapsed())
        })
    };
    let waiter = watch(0, Duration::from_millis(600));
    std::thread::sleep(Duration::from_millis(100));
    client.write(b"typed, no Enter").unwrap();
    client.write_expecting(b"\x15\x1b[200~ours\x1b[201~\r", Some(process), None).unwrap();
    let (quiet, waited) = waiter.join().unwrap();
    assert_eq!(quiet.other_enter_ms, None);
    assert!(waited >= Duration::from_millis(600), "no other writer's Enter: it waited its timeout ({waited:?})");

    let waiter = watch(0, Duration::from_secs(50));
    std::thread::sleep(Duration::from_millis(200));
    client.write(b"a human's prompt\r").unwrap();
    let (entered, waited) = waiter.join().unwrap();
    let noted = entered.other_enter_ms.expect("answered with the Enter");
    assert!(waited < Duration::from_secs(40), "answered on the Enter, not at its timeout ({waited:?})");
    client.write(b"\r").unwrap();
    client.write(b"\r").unwrap();
    let (next, waited) = watch(noted, Duration::from_secs(50)).join().unwrap();
    assert!(next.other_enter_ms.is_some_and(|at| at >= noted + 2), "each Enter is noted later: {next:?}");
    assert!(waited < Duration::from_secs(40), "a later Enter than the one known is answered at once ({waited:?})");
}
