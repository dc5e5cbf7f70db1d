//! The CLI side of the control protocol: blocking, one connection per call.

use crate::paths::DataPaths;
use crate::protocol::{exit, ClientRequest, Reply};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

/// How long a CLI call waits for its answer. Admission answers within its own bounded waits
/// (refresh, write, acknowledgement); this only guards against a wedged daemon.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

pub fn connect(paths: &DataPaths) -> Result<UnixStream, Reply> {
    UnixStream::connect(paths.socket()).map_err(|error| {
        let message = format!("no wakterm daemon answers at {} ({error}); run `wakterm mux start`", paths.socket().display());
        Reply::error(exit::DAEMON_NOT_RUNNING, "daemon_not_running", message)
    })
}

fn send(stream: &mut UnixStream, request: &ClientRequest) -> Result<(), Reply> {
    let mut line = serde_json::to_vec(request).expect("requests serialise");
    line.push(b'\n');
    stream.write_all(&line).map_err(|e| Reply::error(exit::ERROR, "daemon_io", e.to_string()))
}

/// One request, one reply.
pub fn call(paths: &DataPaths, request: &ClientRequest) -> Reply {
    let mut stream = match connect(paths) {
        Ok(stream) => stream,
        Err(reply) => return reply,
    };
    let _ = stream.set_read_timeout(Some(CALL_TIMEOUT));
    if let Err(reply) = send(&mut stream, request) {
        return reply;
    }
    let mut line = String::new();
    match BufReader::new(stream).read_line(&mut line) {
        Ok(0) => Reply::error(exit::ERROR, "daemon_io", "the daemon closed the connection without answering"),
        Ok(_) => serde_json::from_str(&line).unwrap_or_else(|e| Reply::error(exit::ERROR, "daemon_io", format!("unreadable reply: {e}"))),
        Err(error) => Reply::error(exit::ERROR, "daemon_io", error.to_string()),
    }
}

/// `request watch`: calls `on_event` for each terminal event; stops when it returns false, at
/// the end of a `once` drain, or when the daemon goes away (an error reply).
pub fn watch(paths: &DataPaths, after: u64, once: bool, mut on_event: impl FnMut(&Value) -> bool) -> Result<(), Reply> {
    let mut stream = connect(paths)?;
    send(&mut stream, &ClientRequest::Watch { after, once })?;
    let reader = BufReader::new(stream);
    for line in reader.lines() {
        let line = line.map_err(|e| Reply::error(exit::ERROR, "daemon_io", e.to_string()))?;
        let value: Value = serde_json::from_str(&line).map_err(|e| Reply::error(exit::ERROR, "daemon_io", e.to_string()))?;
        if let Some(event) = value.get("event") {
            if !on_event(event) {
                return Ok(());
            }
        } else if value.get("end").is_some() {
            return Ok(());
        } else if let Some(error) = value.get("error") {
            return Err(Reply::error(exit::ERROR, "watch_failed", error.to_string()));
        } else if let Ok(reply) = serde_json::from_value::<Reply>(value) {
            return Err(reply);
        }
    }
    Err(Reply::error(exit::DAEMON_NOT_RUNNING, "daemon_gone", "the daemon closed the stream"))
}
