//! MGD-2: the JSON-RPC handshake that binds a managed agent to its app-server thread, through
//! the agent's holder (the app-server runs in a raw pane, MGD-1): `initialize`, `initialized`,
//! then `thread/start` for a new agent or `thread/resume` of the agent's own thread after a
//! restart of its process. Every wait is bounded.

use crate::app_server::{self, Reply};
use crate::holder::HolderClient;
use std::time::{Duration, Instant};
use wakterm_engine::{ManagedIds, SessionId};

/// How long the app-server may take to answer one handshake request (a cold `codex` start).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs the handshake and returns the thread the agent is bound to. A resume must come back
/// with the same thread and session, or the agent is not the one it was.
pub fn handshake(client: &mut HolderClient, cwd: &str, resume: Option<&ManagedIds>) -> Result<ManagedIds, String> {
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let mut from = client.info().map_err(|e| e.to_string())?.output_end;
    let nonce = uuid::Uuid::new_v4();
    let init = format!("wakterm-init-{nonce}");
    request(client, &app_server::initialize(&init), &init, &mut from, deadline)?;
    client.write(&app_server::initialized()).map_err(|e| e.to_string())?;
    let id = format!("wakterm-thread-{nonce}");
    let line = match resume {
        Some(ids) => app_server::thread_resume(&id, &ids.thread_id, cwd),
        None => app_server::thread_start(&id, cwd),
    };
    let result = request(client, &line, &id, &mut from, deadline)?;
    let Some((thread_id, session_id)) = app_server::thread_of(&result) else {
        return Err(format!("the app-server's thread reply names no thread: {}", truncate(&result.to_string())));
    };
    let ids = ManagedIds { thread_id, session_id: SessionId(session_id) };
    if let Some(expected) = resume {
        if &ids != expected {
            return Err(format!("the app-server resumed thread {} / session {}, not the agent's {} / {}", ids.thread_id, ids.session_id.0, expected.thread_id, expected.session_id.0));
        }
    }
    Ok(ids)
}

/// Writes one request and waits (bounded) for its reply in the output after `from`.
fn request(client: &mut HolderClient, line: &[u8], id: &str, from: &mut u64, deadline: Instant) -> Result<serde_json::Value, String> {
    let outcome = client.write(line).map_err(|e| e.to_string())?;
    if outcome.error.is_some() || outcome.bytes_written != line.len() as u64 {
        return Err(format!("writing {id} to the app-server failed: {:?}", outcome.error));
    }
    let mut partial = Vec::new();
    loop {
        let page = client.output(*from, 1024 * 1024).map_err(|e| e.to_string())?;
        *from = page.end;
        partial.extend_from_slice(&page.data);
        while let Some(newline) = partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = partial.drain(..=newline).collect();
            match app_server::reply_to(&line[..line.len() - 1], id) {
                Some(Reply::Result(result)) => return Ok(result),
                Some(Reply::Error(error)) => return Err(format!("the app-server refused {id}: {}", truncate(&error.to_string()))),
                None => {}
            }
        }
        if partial.len() > app_server::MAX_LINE_BYTES {
            return Err("the app-server wrote a line over the bound".to_string());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(format!("the app-server did not answer {id} within {HANDSHAKE_TIMEOUT:?}"));
        }
        if page.data.is_empty() {
            let info = client.info().map_err(|e| e.to_string())?;
            if !info.alive {
                return Err(format!("the app-server exited (code {:?}) before answering {id}", info.exit_code));
            }
            client.info_changed_or_output(info.generation, true, *from, left.min(Duration::from_secs(1))).map_err(|e| e.to_string())?;
        }
    }
}

fn truncate(text: &str) -> String {
    text.chars().take(300).collect()
}
