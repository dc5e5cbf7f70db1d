//! The CLI side of the control protocol: blocking, one connection per call.
//!
//! SEC-2: before a byte of a request (which may hold a private prompt) is sent, the client
//! checks that the data and run directories are its user's own and private, and that the
//! process serving the socket runs as the same user (SO_PEERCRED). CLI-1: every wait is
//! bounded: the connect, each reply, and the silence of a watch stream.

use crate::paths::DataPaths;
use crate::protocol::{exit, ClientRequest, Reply, WATCH_SILENCE};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// How long a CLI call waits for its answer. Admission answers within its own bounded waits
/// (refresh, write, acknowledgement); this only guards against a wedged daemon.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a connect may wait (a stopped daemon's full listen queue blocks `connect`).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub fn connect(paths: &DataPaths) -> Result<UnixStream, Reply> {
    let not_running = |error: &dyn std::fmt::Display| {
        // CLI-2: advice that fits. No daemon can serve a directory whose sockets would not fit
        // a Unix socket's path (`mux start` refuses it): "run `wakterm mux start`" went in a
        // circle (a review).
        let advice = match paths.check_socket_room() {
            Ok(()) => "run `wakterm mux start`".to_string(),
            Err(too_long) => format!("no daemon can serve it: {too_long}"),
        };
        // LIFE-6: a daemon that holds the lock but does not serve is stopping or starting;
        // "no daemon runs" (exit 3) was false, and a script that took it for stopped and
        // started another failed on the lock (a hostile run).
        if let Some(pid) = paths.lock_holder() {
            let message = format!(
                "a wakterm daemon (pid {pid}) holds {}'s lock but does not serve at its socket: it is stopping (a `mux stop` or SIGTERM under way) or still starting; nothing was sent; `wakterm mux status` says when it serves, `mux start` waits for it to end",
                paths.root.display()
            );
            return Reply::error(exit::ERROR, "daemon_not_serving", message);
        }
        let message = format!("no wakterm daemon answers at {} ({error}); {advice}", paths.socket().display());
        Reply::error(exit::DAEMON_NOT_RUNNING, "daemon_not_running", message)
    };
    match paths.verify_private().and_then(|()| crate::paths::verify_socket(&paths.socket())) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(not_running(&error)),
        Err(error) => {
            // CLI-2: only modes can be repaired; a file, a link or another user's directory
            // cannot, and saying so would send the user in a circle.
            let text = error.to_string();
            let hint = match (text.contains(crate::paths::OPEN_TO_OTHERS), text.contains(&paths.socket().display().to_string())) {
                (true, _) => "nothing was sent; if the directory is yours, `wakterm mux start` repairs its modes",
                (false, true) => "nothing was sent; `wakterm mux start` puts this directory's own socket in its place",
                (false, false) => "nothing was sent; point WAKTERM_DATA_DIR at a directory of your own (`wakterm mux start` makes it)",
            };
            return Err(Reply::error(exit::ERROR, "data_dir_not_private", format!("{error}; {hint}")));
        }
    }
    let stream = connect_bounded(&paths.socket(), CONNECT_TIMEOUT).map_err(|error| match error.kind() {
        // Nothing was sent: a distinct name, so an admission is not mistaken for a lost reply.
        std::io::ErrorKind::TimedOut => Reply::error(exit::UNRESPONSIVE, "daemon_not_accepting", format!("the daemon did not accept a connection within {CONNECT_TIMEOUT:?}; nothing was sent")),
        _ => not_running(&error),
    })?;
    verify_peer(&stream)?;
    Ok(stream)
}

/// `UnixStream::connect` with a bound and without a helper thread, so the daemon can use it for
/// its holder connections too: a non-blocking connect to a Unix socket either completes at once
/// or fails with `EAGAIN` while the listen queue is full, so it is retried every
/// [`CONNECT_RETRY`] until `timeout`.
pub(crate) fn connect_bounded(path: &std::path::Path, timeout: Duration) -> std::io::Result<UnixStream> {
    use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};
    let address = SocketAddrUnix::new(path)?;
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let socket = rustix::net::socket_with(AddressFamily::UNIX, SocketType::STREAM, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK, None)?;
        match rustix::net::connect(&socket, &address) {
            Ok(()) => {
                let stream = UnixStream::from(socket);
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(rustix::io::Errno::AGAIN) if std::time::Instant::now() < deadline => std::thread::sleep(CONNECT_RETRY),
            Err(rustix::io::Errno::AGAIN) => return Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")),
            Err(error) => return Err(error.into()),
        }
    }
}

/// Pause between connects to a full listen queue.
const CONNECT_RETRY: Duration = Duration::from_millis(10);

/// SEC-2: the server must run as our own user.
fn verify_peer(stream: &UnixStream) -> Result<(), Reply> {
    let uid = crate::paths::current_uid();
    match rustix::net::sockopt::socket_peercred(stream) {
        Ok(cred) if cred.uid.as_raw() == uid => Ok(()),
        Ok(cred) => Err(Reply::error(exit::ERROR, "daemon_not_trusted", format!("the socket is served by uid {}, not by us ({uid}); nothing was sent", cred.uid.as_raw()))),
        Err(error) => Err(Reply::error(exit::ERROR, "daemon_not_trusted", format!("cannot read the socket peer's credentials ({error}); nothing was sent"))),
    }
}

/// [`send`] with the caller's give-up time, `wait` from now, on both clocks (CLI-4,
/// [`crate::protocol::GiveUp`]).
fn send_waited(stream: &mut UnixStream, request: &ClientRequest, wait: Duration) -> Result<(), Reply> {
    let wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX);
    let mut value = serde_json::to_value(request).expect("requests serialise");
    if let Some(clock) = crate::protocol::monotonic_clock_id() {
        value[crate::protocol::GIVE_UP_MONOTONIC_FIELD] = serde_json::json!(crate::holder::protocol::monotonic_ms().saturating_add(wait_ms));
        value[crate::protocol::GIVE_UP_CLOCK_FIELD] = serde_json::json!(clock);
    }
    value[crate::protocol::GIVE_UP_FIELD] = serde_json::json!(crate::driver::now_ms().saturating_add(wait_ms));
    let mut line = serde_json::to_vec(&value).expect("requests serialise");
    line.push(b'\n');
    fits_one_request_line(&line)?;
    write_request(stream, &line)
}

fn send(stream: &mut UnixStream, request: &ClientRequest) -> Result<(), Reply> {
    let mut line = serde_json::to_vec(request).expect("requests serialise");
    line.push(b'\n');
    fits_one_request_line(&line)?;
    write_request(stream, &line)
}

/// How long a write that failed waits for the daemon's answer already sent (CONN-2).
const REFUSAL_READ_WAIT: Duration = Duration::from_secs(1);

/// Writes the request line. A daemon that refused the request before reading all of it
/// (CONN-2's `server_busy`) answers and closes while the line is still being written: the
/// write fails with a broken pipe and the answer waits unread. It is read now (bounded), so the
/// caller gets the daemon's reason, not `daemon_io` "Broken pipe" (a review).
fn write_request(stream: &mut UnixStream, line: &[u8]) -> Result<(), Reply> {
    let _ = stream.set_write_timeout(Some(CALL_TIMEOUT));
    let Err(error) = stream.write_all(line) else { return Ok(()) };
    if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) {
        return Err(io_error(error));
    }
    let _ = stream.set_read_timeout(Some(REFUSAL_READ_WAIT));
    let mut answer = String::new();
    let read = BufReader::new(std::io::Read::take(&*stream, 64 * 1024)).read_line(&mut answer);
    match read.ok().filter(|n| *n > 0).and_then(|_| serde_json::from_str::<Reply>(&answer).ok()) {
        Some(reply) => Err(reply),
        None => Err(io_error(error)),
    }
}

/// CLI-2: a request over the daemon's line limit is refused here, unsent. The daemon reads
/// only the limit, answers `bad_request` and closes, so sending it ended as `daemon_io`
/// ("Broken pipe") or that `bad_request`, whichever won the race (a review: an `agent start`
/// with ten 120 KB `--env` values).
fn fits_one_request_line(line: &[u8]) -> Result<(), Reply> {
    let limit = crate::protocol::MAX_REQUEST_LINE_BYTES;
    if line.len() <= limit {
        return Ok(());
    }
    let message = format!("the request is {} bytes, over the daemon's limit of {limit} bytes per request; nothing was sent", line.len());
    Err(Reply::error(exit::USAGE, "request_too_large", message))
}

/// A failed read or write on the connection: a timeout is `daemon_unresponsive` (exit 7);
/// anything else is `daemon_io`.
fn io_error(error: std::io::Error) -> Reply {
    match error.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
            Reply::error(exit::UNRESPONSIVE, "daemon_unresponsive", "the daemon stopped answering (no reply within the bound)")
        }
        _ => Reply::error(exit::ERROR, "daemon_io", error.to_string()),
    }
}

/// One request, one reply.
/// The detail of a reply that was lost once the request may have reached the daemon (the
/// connection broke or fell silent after sending): None for any answer, and for a daemon that
/// was never reached (`daemon_not_running`), which provably got nothing.
pub fn lost_after_sending(reply: &Reply) -> Option<&str> {
    let lost = reply.body["error"] == "daemon_io" || reply.body["error"] == "daemon_unresponsive";
    lost.then(|| reply.body["message"].as_str().unwrap_or("no detail"))
}

/// LIFE-9, LIFE-3: a restart's or a stop's reply lost after the request reached the daemon (a
/// crash, a stop) may follow a change it made: indeterminate (exit 5), saying to look at the
/// catalog before asking again, never a plain error a caller would retry (a hostile run: a
/// daemon SIGKILLed during `agent restart` answered `daemon_io`, exit 1, and the restart had
/// taken effect in 2 of 3).
pub fn call_pane_change(paths: &DataPaths, request: &ClientRequest) -> Reply {
    let (what, error) = match request {
        ClientRequest::AgentRestart { .. } => ("restart", "agent_restart_unknown"),
        ClientRequest::AgentStop { .. } => ("stop", "agent_stop_unknown"),
        _ => return call(paths, request),
    };
    indeterminate_if_lost(call(paths, request), |why| {
        let message = format!("no answer came from the daemon ({why}); the {what} may have been carried out: check `agent catalog` (the agent's incarnation, or whether it is still listed) before you ask again");
        Reply::error(exit::INDETERMINATE, error, message).body
    })
}

/// IDEM-7: an admission's reply can be lost after the request reached the daemon (a crash, a
/// stop): the prompt may then have been written, so the answer is `indeterminate` (exit 5)
/// with the request id to replay, never a plain error a caller might retry under a new id.
/// The CLI and the MCP server both call this (the MCP tool once passed the bare error on, and a
/// request id it had generated was never returned). It is no receipt (the daemon gave none, so
/// whether a terminal event will come is unknown), but it carries the receipt fields a caller
/// decides a retry on, with the values that claim nothing: `write_state: unknown`,
/// `retry_safe: false` (a seed audit found them missing).
pub fn call_admission(paths: &DataPaths, admit: &crate::protocol::AdmitRequest) -> Reply {
    let request_id = admit.request_id.clone().expect("callers name the request before sending it");
    let refused_here = stateless_refusal(admit, &request_id);
    if let Some((refused, false)) = refused_here {
        return refused;
    }
    if let Err(refused) = check_prompt_size(admit) {
        return refused;
    }
    // The daemon never saw the request (none runs, the line is over its limit, or the
    // capabilities question failed): the refusal made here, if any, else why.
    let unsent = |reply: Reply| refused_here.map_or(reply, |(refused, _)| refused);
    if let Err(refused) = check_daemon_knows_no_steer(paths, admit) {
        return unsent(refused); // nothing of the prompt was sent (never "may have been written")
    }
    let reply = call(paths, &ClientRequest::Admit(admit.clone()));
    if reply.exit_code == exit::DAEMON_NOT_RUNNING || reply.body["error"] == "request_too_large" {
        return unsent(reply);
    }
    indeterminate_if_lost(reply, |why| {
        let message = format!(
            "no answer came from the daemon ({why}); the prompt may have been written. Replay with request id {request_id} once the daemon answers again (restarted, or resumed if it was stopped) to learn the outcome; never retry under a new id"
        );
        serde_json::json!({"schema": "wakterm.error.v1", "error": "reply_lost", "classification": "indeterminate", "write_state": "unknown", "retry_safe": false, "request_id": request_id, "message": message})
    })
}

/// INP-1..5: the engine's own refusal of what needs no state (an id that is no UUID, a bad
/// prompt, a malformed target, a missing incarnation...), for the CLI and the MCP server: with
/// no daemon running they said `daemon_not_running`, and a daemon gives this same receipt.
/// Also whether the daemon is asked first: IDEM-7, a caller's own well-formed id may be one
/// whose prompt was written before, and only the daemon knows (its receipt then says
/// `retry_safe: false`); without a daemon the refusal made here never calls it retry-safe. A
/// generated id is new, and an id that is no UUID was never stored: answered here at once.
fn stateless_refusal(admit: &crate::protocol::AdmitRequest, request_id: &str) -> Option<(Reply, bool)> {
    let mut receipt = wakterm_engine::stateless_check(&admit.clone().into_command(request_id.to_string(), admit.generated_id, 0)).err()?;
    let ask_the_daemon = !admit.generated_id && receipt.request_id.is_some();
    receipt.retry_safe &= !ask_the_daemon;
    Some((Reply { exit_code: exit::REJECTED, body: serde_json::to_value(receipt).expect("receipts serialise") }, ask_the_daemon))
}

/// Once the request may have reached the daemon, a missing or late reply is not a rejection:
/// exit 5 with `body(why)`; any answer (and a daemon never reached) passes as it is.
fn indeterminate_if_lost(reply: Reply, body: impl FnOnce(&str) -> Value) -> Reply {
    match lost_after_sending(&reply) {
        Some(why) => Reply { exit_code: exit::INDETERMINATE, body: body(why) },
        None => reply,
    }
}

/// INP-1, answered before anything is sent: a prompt over the limit would make a request line
/// the daemon does not read whole (it answers nothing, and the caller could only say "may have
/// been written"). Refused here with the `invalid` / `prompt_too_large` receipt the daemon gives.
pub fn check_prompt_size(admit: &crate::protocol::AdmitRequest) -> Result<(), Reply> {
    if admit.prompt.len() <= wakterm_engine::limits::MAX_PROMPT_BYTES {
        return Ok(());
    }
    let error = wakterm_engine::prompt::PromptError::TooLarge { bytes: admit.prompt.len() };
    let caller_named_id = !admit.generated_id && admit.request_id.is_some();
    Err(refused_input(admit.operation, admit.return_mode, admit.request_id.as_deref(), caller_named_id, error.reason(), error.detail()))
}

/// The `invalid` receipt of input refused before it was sent (INP-1: too large, not UTF-8),
/// as the daemon gives it. IDEM-7: under an id the caller named (not one generated just now)
/// it is never retry-safe: that id may have been written, which only the daemon could tell
/// (the daemon's own refusal of such input looks the id up; this one cannot).
pub fn refused_input(operation: wakterm_engine::Operation, return_mode: wakterm_engine::ReturnMode, request_id: Option<&str>, caller_named_id: bool, reason: &str, detail: String) -> Reply {
    refused_before_sending(wakterm_engine::Classification::Invalid, (operation, return_mode), request_id, caller_named_id, reason, detail)
}

/// ADM-18: a daemon started from an older wakterm ignores a field it does not know, so a
/// no-steer send to it would steer. Asked first (one capabilities call, only for a no-steer
/// send); one that does not list the option refuses the send, nothing sent.
fn check_daemon_knows_no_steer(paths: &DataPaths, admit: &crate::protocol::AdmitRequest) -> Result<(), Reply> {
    let plain_send = admit.operation == wakterm_engine::Operation::Send && admit.return_mode == wakterm_engine::ReturnMode::OneWay;
    if !(admit.no_steer && plain_send) {
        return Ok(()); // nothing that could steer: no question to ask
    }
    let capabilities = call(paths, &ClientRequest::Capabilities);
    if capabilities.exit_code != exit::OK {
        return Err(capabilities); // nothing was sent of the prompt
    }
    let options = &capabilities.body["operations"]["agent.send"]["options"];
    if options.as_array().is_some_and(|options| options.iter().any(|o| o == NO_STEER_OPTION)) {
        return Ok(());
    }
    let version = capabilities.body["version"].as_str().unwrap_or("unknown").to_string();
    let detail = format!("the running daemon (wakterm {version}) predates no-steer sends and would write into a running turn; restart it (`wakterm mux stop`, then `wakterm mux start`: agents keep running) or send without no-steer. Nothing was sent");
    let modes = (admit.operation, admit.return_mode);
    Err(refused_before_sending(wakterm_engine::Classification::Unsupported, modes, admit.request_id.as_deref(), !admit.generated_id, "daemon_outdated", detail))
}

/// ADM-18: the `agent.send` option a daemon lists when it honours `no_steer`.
pub const NO_STEER_OPTION: &str = "no_steer";

/// A refusal made before anything was sent, as the daemon's own refusal receipts are.
pub fn refused_before_sending(classification: wakterm_engine::Classification, (operation, return_mode): (wakterm_engine::Operation, wakterm_engine::ReturnMode), request_id: Option<&str>, caller_named_id: bool, reason: &str, detail: String) -> Reply {
    let context = wakterm_engine::receipt::ReceiptContext {
        request_id: request_id.and_then(|id| wakterm_engine::RequestId::parse(id).ok()),
        agent_id: None,
        incarnation: None,
        operation,
        return_mode,
    };
    let mut receipt = wakterm_engine::Receipt::rejection(classification, reason, detail, context);
    if caller_named_id {
        receipt.retry_safe = false;
    }
    Reply { exit_code: exit::REJECTED, body: serde_json::to_value(receipt).expect("receipts serialise") }
}

/// INP-1 for a submit's text: over the prompt limit it is refused before anything is sent,
/// with the `rejected` / `invalid` / `prompt_too_large` receipt (exit 4) the daemon gives (it
/// was a `wakterm.error.v1` usage error, exit 2, unlike an admission's).
pub fn check_submit_size(text: &str, timeout_ms: Option<u64>) -> Result<(), Reply> {
    let limit = wakterm_engine::limits::MAX_PROMPT_BYTES;
    match text.len() > limit {
        true => Err(submit_refused("prompt_too_large", format!("the text is {} bytes; the limit is {limit}", text.len()), timeout_ms)),
        false => Ok(()),
    }
}

/// The receipt of a submit whose text is over the limit (INP-1).
pub fn submit_refused(reason: &'static str, detail: String, timeout_ms: Option<u64>) -> Reply {
    // SUB-5: a fresh id, as the daemon draws for every submit (`daemon::requests`).
    let id = wakterm_engine::RequestId::parse(&uuid::Uuid::new_v4().to_string()).expect("a fresh UUID is a request id");
    let receipt = wakterm_engine::SubmitReceipt::refused_before_sending(id, wakterm_engine::Classification::Invalid, reason, detail, timeout_ms);
    Reply { exit_code: exit::REJECTED, body: serde_json::to_value(receipt).expect("receipts serialise") }
}

/// SUB-5: a submit whose reply is lost once the request may have reached the daemon (a crash,
/// a stop, a wedge) may have written the command: exit 5, `retry_safe: false`, never a plain
/// error a caller might retry. A daemon that was never reached stays `daemon_not_running`.
pub fn call_submit(paths: &DataPaths, submit: &crate::protocol::SubmitRequest) -> Reply {
    // INP-1, INP-4: the engine's own refusal of what needs no state, before connecting (as
    // for admissions, `stateless_refusal`).
    if let Some(problem) = wakterm_engine::submit_input_problem(&submit.text, &submit.target) {
        return submit_refused(problem.reason, problem.detail, submit.timeout_ms);
    }
    if let Err(refused) = check_submit_size(&submit.text, submit.timeout_ms) {
        return refused;
    }
    let reply = call(paths, &ClientRequest::Submit(submit.clone()));
    indeterminate_if_lost(reply, |why| {
        let message = format!(
            "no answer came from the daemon ({why}); the command may have been written. There is no submission record to replay (SUB-6): look at the agent before submitting again"
        );
        serde_json::json!({"schema": "wakterm.error.v1", "error": "reply_lost", "write_state": "unknown", "acknowledged": false, "retry_safe": false, "message": message})
    })
}

pub fn call(paths: &DataPaths, request: &ClientRequest) -> Reply {
    call_within(paths, request, CALL_TIMEOUT)
}

/// `call` with its own bound on the reply.
/// One agent's entry in a catalog answer (`agent catalog`'s body), named by its name or by its
/// id in any spelling the daemon takes (canonically lowercase); `agent_unknown` (exit 6)
/// otherwise. `agent attach` and MCP's `session` look agents up by it.
pub fn catalog_agent(catalog: &Value, target: &str) -> Result<Value, Reply> {
    let id = wakterm_engine::AgentId::parse(target).ok();
    let agents = catalog["agents"].as_array().map(Vec::as_slice).unwrap_or_default();
    let found = agents.iter().find(|a| a["name"] == target || id.as_ref().is_some_and(|id| a["agent_id"] == id.as_str()));
    found.cloned().ok_or_else(|| Reply::error(exit::NOT_FOUND, "agent_unknown", wakterm_engine::limits::no_agent_named(target)))
}

pub fn call_within(paths: &DataPaths, request: &ClientRequest, bound: Duration) -> Reply {
    let mut stream = match connect(paths) {
        Ok(stream) => stream,
        Err(reply) => return reply,
    };
    let _ = stream.set_read_timeout(Some(bound));
    // CLI-4: the daemon does nothing with a request it reads after this wait ends.
    if let Err(reply) = send_waited(&mut stream, request, bound) {
        return reply;
    }
    let mut line = String::new();
    match BufReader::new(stream).read_line(&mut line) {
        Ok(0) => Reply::error(exit::ERROR, "daemon_io", "the daemon closed the connection without answering"),
        Ok(_) => serde_json::from_str(&line).unwrap_or_else(|e| Reply::error(exit::ERROR, "daemon_io", format!("unreadable reply: {e}"))),
        Err(error) => io_error(error),
    }
}

/// What a stream hands its reader.
#[derive(Debug, PartialEq)]
pub enum StreamItem<'a> {
    /// One event (`{"event": ...}`) and its sequence (0 when it names none).
    Event { event: &'a Value, sequence: u64 },
    /// EV-8, CONN-3: the sequence the stream has covered: every event the subscription wants
    /// up to it was sent, so `--after` it misses nothing (a filtered reader's own last event can
    /// lie far below it). From a heartbeat's or `--once`'s end line (`end`) `last_sequence`.
    /// `agents_stopped`: the stream ended because every agent it follows stopped (EV-14).
    Bookmark { last_sequence: u64, end: bool, agents_stopped: bool },
}

/// How long a stream that ended without its end line waits to learn whether the daemon still
/// answers (`stream_ended`) or is gone (`daemon_gone`).
const ENDED_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// A streaming request (`request watch`, `agent events`): events and bookmarks until `on_item`
/// returns false, the `once` drain ends, or the stream breaks. A break (the connection failed,
/// fell silent, or closed without an end line) carries `last_sequence`: the cursor to resume
/// after, so a reader never has to guess where it stood. The daemon's refusals come as it gave
/// them.
pub fn stream(paths: &DataPaths, request: &ClientRequest, mut on_item: impl FnMut(StreamItem<'_>) -> bool) -> Result<(), Reply> {
    let (mut covered, sequence_field) = request.stream_cursor().unwrap_or((0, "sequence"));
    let mut stream = connect(paths)?;
    send(&mut stream, request)?;
    let _ = stream.set_read_timeout(Some(WATCH_SILENCE));
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            // EOF; a line without its newline was cut off when the daemon dropped the reader
            // (or died) mid-write: not an answer, the same break.
            Ok(_) if !line.ends_with('\n') => break,
            Ok(_) => {}
            Err(error) => return Err(resumable(io_error(error), covered)),
        }
        let value: Value = serde_json::from_str(&line).map_err(|e| resumable(Reply::error(exit::ERROR, "daemon_io", e.to_string()), covered))?;
        let mark = value.get("last_sequence").and_then(Value::as_u64);
        if let Some(event) = value.get("event") {
            let sequence = event.get(sequence_field).and_then(Value::as_u64).unwrap_or(0);
            let go_on = on_item(StreamItem::Event { event, sequence });
            covered = covered.max(sequence);
            if !go_on {
                return Ok(());
            }
        } else if value.get("heartbeat").is_some() || value.get("end").is_some() {
            covered = covered.max(mark.unwrap_or(0));
            let end = value.get("end").is_some();
            let agents_stopped = value["ended"] == "agents_stopped";
            if !on_item(StreamItem::Bookmark { last_sequence: covered, end, agents_stopped }) || end {
                return Ok(());
            }
        } else if let Some(error) = value.get("error") {
            return Err(resumable(Reply::error(exit::ERROR, "watch_failed", error.to_string()), covered));
        } else if let Ok(reply) = serde_json::from_value::<Reply>(value) {
            // The daemon's own answer (a refusal: cursor_too_old, agent_unknown, ...) keeps its
            // fields; a refused cursor is no place to resume.
            return Err(reply);
        }
    }
    Err(resumable(ended_without_end(paths, covered), covered))
}

/// The answer to a stream that closed without its end line: `daemon_gone` (exit 3) when no
/// daemon answers now; `stream_ended` (exit 1) when one does, which stopped or restarted
/// meanwhile, or dropped this reader for falling behind (it writes to a reader at most
/// `REPLY_WRITE_TIMEOUT`, 10 s: a consumer that stops reading our standard output is one).
fn ended_without_end(paths: &DataPaths, covered: u64) -> Reply {
    let probe = call_within(paths, &ClientRequest::Capabilities, ENDED_PROBE_TIMEOUT);
    if probe.exit_code != exit::OK {
        return Reply::error(exit::DAEMON_NOT_RUNNING, "daemon_gone", format!("the daemon closed the stream and no longer answers; after a restart, resume with --after {covered}"));
    }
    let bound = crate::protocol::REPLY_WRITE_TIMEOUT.as_secs();
    let message = format!(
        "the stream ended without its end line while a daemon answers: it restarted meanwhile, or dropped this reader for falling more than {bound} s behind (standard output not read); resume with --after {covered}"
    );
    Reply::error(exit::ERROR, "stream_ended", message)
}

/// A broken stream's error with the cursor to resume after.
fn resumable(mut reply: Reply, covered: u64) -> Reply {
    if reply.body.get("last_sequence").is_none() && reply.body.is_object() {
        reply.body["last_sequence"] = Value::from(covered);
    }
    reply
}

#[cfg(test)]
mod tests {
    use super::*;

    /// CLI-4: a waiting call sends when its wait ends on the wall clock and, where its
    /// monotonic clock can be named, on that clock with its name (a review found no test of
    /// what the client sends: the e2e test writes its lines by hand).
    #[test]
    fn cli_4_a_waiting_call_sends_its_give_up_on_both_clocks() {
        use crate::holder::protocol::monotonic_ms;
        let (mut client, server) = UnixStream::pair().unwrap();
        let before = (monotonic_ms(), crate::driver::now_ms());
        send_waited(&mut client, &ClientRequest::Status, Duration::from_secs(30)).unwrap();
        let after = (monotonic_ms(), crate::driver::now_ms());
        let mut line = String::new();
        BufReader::new(server).read_line(&mut line).unwrap();
        let (request, give_up) = crate::protocol::parse_request_envelope(line.as_bytes()).unwrap();
        assert!(matches!(request, ClientRequest::Status));
        // The machines this project runs on name their monotonic clock (as the e2e test needs).
        assert!(crate::protocol::monotonic_clock_id().is_some(), "no boot id or time namespace here");
        assert!(give_up.monotonic_here().is_some_and(|at| (before.0 + 30_000..=after.0 + 30_000).contains(&at)), "{give_up:?}");
        assert!(give_up.wall_ms.is_some_and(|at| (before.1 + 30_000..=after.1 + 30_000).contains(&at)), "{give_up:?}");
    }

    /// CONN-2: a daemon that refuses a request before reading it whole answers and closes while
    /// the client still writes: the write breaks, and the client reads the answer waiting
    /// there (here `server_busy`) instead of reporting `daemon_io` "Broken pipe" (a review).
    #[test]
    fn conn_2_a_refusal_sent_while_the_request_is_written_reaches_the_caller() {
        let (mut client, server) = UnixStream::pair().unwrap();
        let daemon = std::thread::spawn(move || {
            let mut server = server;
            let mut first = [0u8; 16];
            std::io::Read::read_exact(&mut server, &mut first).unwrap();
            server.write_all(b"{\"exit_code\":1,\"body\":{\"error\":\"server_busy\"}}\n").unwrap();
        });
        let line = vec![b'x'; 4 * 1024 * 1024];
        let refused = write_request(&mut client, &line).unwrap_err();
        daemon.join().unwrap();
        assert_eq!((refused.exit_code, refused.body["error"].as_str()), (1, Some("server_busy")), "{refused:?}");
    }

    /// A fake daemon: answers the stream request with `lines` (each written as given: a last
    /// one without its newline is cut off), closes it, then answers a probe when
    /// `answers_probe` (or stops listening).
    fn fake_daemon(paths: &DataPaths, lines: &'static [&'static str], answers_probe: bool) -> std::thread::JoinHandle<()> {
        paths.prepare().expect("private dirs");
        let listener = std::os::unix::net::UnixListener::bind(paths.socket()).expect("bind");
        let socket = paths.socket();
        std::thread::spawn(move || {
            let answer = |reply: &[&str]| {
                let (stream, _) = listener.accept().expect("accept");
                let mut request = String::new();
                BufReader::new(&stream).read_line(&mut request).expect("request");
                for line in reply {
                    write!(&stream, "{line}").expect("write");
                }
            };
            answer(lines);
            if answers_probe {
                answer(&["{\"exit_code\":0,\"body\":{\"schema\":\"wakterm.capabilities.v1\"}}\n"]);
            } else {
                drop(listener);
                std::fs::remove_file(socket).expect("unlink");
            }
        })
    }

    /// LIFE-9, LIFE-3: a restart or a stop whose daemon closed the connection after reading it
    /// may have acted: indeterminate, not `daemon_io` (exit 1, which a caller retries).
    #[test]
    fn life_9_a_restart_or_stop_whose_answer_was_lost_is_unknown() {
        for (request, error) in [(ClientRequest::AgentRestart { target: "ada".into() }, "agent_restart_unknown"), (ClientRequest::AgentStop { target: "ada".into() }, "agent_stop_unknown")] {
            let dir = tempfile::tempdir().expect("tempdir");
            let paths = DataPaths { root: dir.path().join("d") };
            let daemon = fake_daemon(&paths, &[], false);
            let reply = call_pane_change(&paths, &request);
            daemon.join().expect("fake daemon");
            assert_eq!((reply.exit_code, reply.body["error"].as_str()), (exit::INDETERMINATE, Some(error)), "{:?}", reply.body);
            assert!(reply.body["message"].as_str().unwrap().contains("agent catalog"), "{:?}", reply.body);
        }
    }

    /// EV-14 (client side): a stream that breaks answers with the cursor to resume after (the
    /// greatest of its events and bookmarks), and says whether a daemon still answers
    /// (`stream_ended`, exit 1: it restarted, or dropped a reader that fell behind) or not
    /// (`daemon_gone`, exit 3). Both used to be `daemon_gone` without a cursor. A clean end
    /// hands its bookmark to the reader.
    #[test]
    fn ev_14_a_broken_stream_names_its_cursor_and_whether_a_daemon_answers() {
        // The daemon dropped the reader mid-line: the cut line is no answer (it was
        // `daemon_io`, "EOF while parsing", before the review of EV-14).
        const BROKEN: &[&str] = &["{\"event\":{\"sequence\":40}}\n", "{\"heartbeat\":true,\"last_sequence\":42}\n", "{\"event\":{\"sequence\":43,\"text\":\"cut of"];
        let request = ClientRequest::Events { after: 7, once: false, agents: vec!["ada".into()] };
        for (answers_probe, code, error) in [(true, exit::ERROR, "stream_ended"), (false, exit::DAEMON_NOT_RUNNING, "daemon_gone")] {
            let dir = tempfile::tempdir().expect("tempdir");
            let paths = DataPaths { root: dir.path().join("d") };
            let daemon = fake_daemon(&paths, BROKEN, answers_probe);
            let mut items = Vec::new();
            let reply = stream(&paths, &request, |item| {
                items.push(format!("{item:?}"));
                true
            })
            .expect_err("the stream broke");
            daemon.join().expect("fake daemon");
            assert_eq!((reply.exit_code, reply.body["error"].as_str()), (code, Some(error)), "{:?}", reply.body);
            assert_eq!(reply.body["last_sequence"], 42, "{:?}", reply.body);
            assert!(reply.body["message"].as_str().unwrap().contains("--after 42"), "{:?}", reply.body);
            assert_eq!(items.len(), 2, "{items:?}");
            assert!(items[1].contains("last_sequence: 42, end: false"), "{items:?}");
        }
        // A clean end is a bookmark and Ok.
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = DataPaths { root: dir.path().join("d") };
        let daemon = fake_daemon(&paths, &["{\"end\":true,\"last_sequence\":9}\n"], false);
        let mut items = Vec::new();
        stream(&paths, &request, |item| {
            items.push(format!("{item:?}"));
            true
        })
        .expect("a clean end");
        daemon.join().expect("fake daemon");
        assert_eq!(items, ["Bookmark { last_sequence: 9, end: true, agents_stopped: false }"]);
    }

    /// ADM-18 (client side): a daemon that does not list the no-steer option (one started
    /// from an older wakterm) is not sent a no-steer send: it would ignore the field and steer.
    /// Refused `unsupported` / `daemon_outdated`, nothing sent: the fake daemon stops listening
    /// after its capabilities answer, so a send would have been `daemon_not_running`.
    #[test]
    fn adm_18_a_daemon_without_the_option_is_not_sent_a_no_steer_send() {
        let dir = tempfile::tempdir().expect("tempdir");
        let paths = DataPaths { root: dir.path().join("d") };
        let daemon = fake_daemon(&paths, &["{\"exit_code\":0,\"body\":{\"version\":\"0.1.0\",\"operations\":{\"agent.send\":{\"version\":1}}}}\n"], false);
        let admit = crate::protocol::AdmitRequest {
            operation: wakterm_engine::Operation::Send,
            target: "zola".into(),
            exact_agent_id: false,
            incarnation: None,
            request_id: Some("0195f2a4-3b1c-7d2e-8f3a-4b5c6d7e8f91".into()),
            prompt: "not into a running turn".into(),
            paste_mode: wakterm_engine::PasteMode::Bracketed,
            return_mode: wakterm_engine::ReturnMode::OneWay,
            final_timeout_ms: 0,
            share_prompt: false,
            generated_id: true,
            no_steer: true,
        };
        let refused = call_admission(&paths, &admit);
        daemon.join().expect("fake daemon");
        assert_eq!((refused.exit_code, refused.body["classification"].as_str(), refused.body["reason"].as_str()), (exit::REJECTED, Some("unsupported"), Some("daemon_outdated")), "{:?}", refused.body);
        assert_eq!((refused.body["prompt_written"].as_bool(), refused.body["retry_safe"].as_bool()), (Some(false), Some(true)), "{:?}", refused.body);
        assert!(refused.body["detail"].as_str().unwrap().contains("wakterm 0.1.0"), "{:?}", refused.body);
    }

    /// CONN-1 (client side): a daemon that stopped accepting (its listen queue full) makes
    /// `connect` answer "timed out" within the bound, never hang; a listening daemon is reached
    /// at once and the stream is blocking again.
    #[test]
    fn conn_1_a_full_listen_queue_times_out_within_the_bound() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).expect("bind"); // never accepts
        let first = connect_bounded(&path, Duration::from_millis(200)).expect("a queue with room accepts at once");
        assert!(!first.as_fd_nonblocking(), "the stream is blocking again");
        let mut held = vec![first];
        let started = std::time::Instant::now();
        let error = loop {
            match connect_bounded(&path, Duration::from_millis(200)) {
                Ok(stream) => held.push(stream),
                Err(error) => break error,
            }
            assert!(held.len() < 10_000, "the listen queue never filled");
        };
        assert_eq!(error.kind(), std::io::ErrorKind::TimedOut, "{error}");
        assert!(started.elapsed() < Duration::from_secs(10), "bounded: {:?}", started.elapsed());
        let missing = dir.path().join("absent.sock");
        assert_eq!(connect_bounded(&missing, Duration::from_millis(200)).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    }

    trait Blocking {
        fn as_fd_nonblocking(&self) -> bool;
    }

    impl Blocking for UnixStream {
        fn as_fd_nonblocking(&self) -> bool {
            rustix::fs::fcntl_getfl(self).is_ok_and(|flags| flags.contains(rustix::fs::OFlags::NONBLOCK))
        }
    }
}
