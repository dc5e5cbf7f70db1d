//! The control socket's connections: bounded reading of the one request line (CONN-2), the
//! cap's refusal (CONN-1), dispatch to the handler modules (`agent_handlers`, `catalog`,
//! `requests`), and the daemon-wide answers (status, stop, capabilities).

use super::agents::AgentRuntime;
use super::{agent_handlers, catalog, requests, Context};
use crate::protocol::{exit, ClientRequest, Reply, MAX_REQUEST_LINE_BYTES, PROTOCOL_VERSION};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::io::{AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use wakterm_engine::Engine;


/// CONN-2: a client must send its whole request line within this, or it is dropped (an idle
/// connection holds a descriptor the daemon's own probes may need).
pub const REQUEST_LINE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
pub use crate::protocol::REPLY_WRITE_TIMEOUT;
/// CONN-2: the bytes of unfinished request lines all connections may hold at once. Each line
/// may be up to `MAX_REQUEST_LINE_BYTES` (1 MiB), so 1,000 slow connections held about 1 GiB
/// for the 5 s `REQUEST_LINE_TIMEOUT`, again and again (a review); past this sum a connection
/// is answered `server_busy` (nothing done, retry) and closed.
pub const MAX_UNFINISHED_REQUEST_BYTES: usize = 64 * 1024 * 1024;
/// CONN-2: the first bytes of every request line are not charged to that budget, so a small
/// request (a status, a stop, a plain send) is never refused: 64 connections of nearly 1 MiB
/// each locked every client out, `mux status` and `mux stop` included (a review). With the
/// connection cap this adds at most 1,024 × 64 KiB.
pub const UNCHARGED_REQUEST_BYTES: usize = 64 * 1024;
/// What the unfinished request lines of this daemon's connections hold now.
static UNFINISHED_REQUEST_BYTES: AtomicUsize = AtomicUsize::new(0);

/// CONN-2: the bytes one connection's unfinished request line holds of a shared budget,
/// given back when it is dropped.
struct LineCharge<'a> {
    held: &'a AtomicUsize,
    cap: usize,
    /// The line's first bytes, not charged (`UNCHARGED_REQUEST_BYTES`).
    free: usize,
    /// The bytes of the line so far, and what of them is charged.
    seen: usize,
    charged: usize,
}

impl<'a> LineCharge<'a> {
    fn new(held: &'a AtomicUsize, cap: usize, free: usize) -> LineCharge<'a> {
        LineCharge { held, cap, free, seen: 0, charged: 0 }
    }

    /// `bytes` more of the line: what passes its free part is taken from the budget; false
    /// (and nothing taken) when that would pass the cap.
    fn add(&mut self, bytes: usize) -> bool {
        let due = (self.seen + bytes).saturating_sub(self.free.max(self.seen));
        let taken = due == 0 || self.held.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |held| held.checked_add(due).filter(|sum| *sum <= self.cap)).is_ok();
        if taken {
            self.seen += bytes;
            self.charged += due;
        }
        taken
    }
}

impl Drop for LineCharge<'_> {
    fn drop(&mut self) {
        let before = self.held.fetch_sub(self.charged, Ordering::SeqCst);
        debug_assert!(before >= self.charged, "CONN-2: a line gave back more than it took");
    }
}

/// CONN-2: reads the request line (through its newline, or to the end of what the `Take`
/// allows) into `line`, each piece charged to `charge` before it is kept.
async fn read_request_line<R: AsyncBufRead + Unpin>(reader: &mut R, line: &mut Vec<u8>, charge: &mut LineCharge<'_>) -> Result<(), Reply> {
    loop {
        let buffer = reader.fill_buf().await.map_err(|error| Reply::error(exit::USAGE, "bad_request", format!("the request could not be read: {error}")))?;
        if buffer.is_empty() {
            return Ok(());
        }
        let (take, done) = match buffer.iter().position(|byte| *byte == b'\n') {
            Some(end) => (end + 1, true),
            None => (buffer.len(), false),
        };
        if !charge.add(take) {
            let message = format!("the daemon holds {} MiB of unfinished requests from other connections; retry shortly (nothing was done)", charge.cap >> 20);
            return Err(Reply::error(exit::ERROR, "server_busy", message));
        }
        line.extend_from_slice(&buffer[..take]);
        reader.consume(take);
        if done {
            return Ok(());
        }
    }
}

pub async fn handle_connection(stream: UnixStream, context: Arc<Context>) {
    let peer_ok = stream.peer_cred().map(|cred| cred.uid() == crate::paths::current_uid()).unwrap_or(false);
    let (read_half, mut write_half) = stream.into_split();
    if !peer_ok {
        tracing::warn!("refused a control connection from another user");
        let reply = Reply::error(exit::ERROR, "permission_denied", "peers of another user are refused");
        let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
        return;
    }
    // One bounded read of the first line; `parse_request_line` (fuzzed) judges it.
    let mut line = Vec::new();
    let mut charge = LineCharge::new(&UNFINISHED_REQUEST_BYTES, MAX_UNFINISHED_REQUEST_BYTES, UNCHARGED_REQUEST_BYTES);
    let mut reader = BufReader::new(read_half.take(MAX_REQUEST_LINE_BYTES as u64));
    let parsed = match tokio::time::timeout(REQUEST_LINE_TIMEOUT, read_request_line(&mut reader, &mut line, &mut charge)).await {
        Err(_) => Err(Reply::error(exit::USAGE, "request_timeout", format!("no complete request line within {REQUEST_LINE_TIMEOUT:?}"))),
        Ok(Err(reply)) => Err(reply),
        Ok(Ok(())) => crate::protocol::parse_request_envelope(&line).and_then(|(request, give_up)| caller_still_waits(request, give_up)),
    };
    // A stream lives as long as its subscriber: the request line (up to 1 MiB) is not kept
    // with it (300 subscribers with padded lines held 300 MB; a review measured it).
    drop(line);
    drop(charge);
    let request = match parsed {
        Ok(request) => request,
        Err(reply) => {
            tracing::debug!(error = %reply.body["error"], "control connection without a usable request");
            let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
            return;
        }
    };
    if let ClientRequest::Watch { after, once } = request {
        return requests::watch(reader.into_inner().into_inner(), &mut write_half, &context, after, once).await;
    }
    if let ClientRequest::Events { after, once, agents } = request {
        return super::events::events(reader.into_inner().into_inner(), &mut write_half, &context, after, once, agents).await;
    }
    let stop = matches!(request, ClientRequest::Stop { .. });
    let reply = dispatch(request, &context).await;
    let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
    if stop {
        context.shutdown.notify_one();
    }
}

/// CLI-4: a request read after its caller's wait ended is not done: the caller was told the
/// outcome is unknown (`reply_lost`) or that nothing answered, and may have acted on it. A
/// daemon frozen for minutes typed a submit and stopped itself on a `mux stop` whose callers
/// had long gone (a review). Judged on the caller's monotonic clock when it sent one that is
/// ours (the same boot and time namespace; a wall clock stepped back between the send and the
/// read let a late request through, one stepped forward refused one in time); by the wall
/// clock otherwise (another clock, an older client).
fn caller_still_waits(request: ClientRequest, give_up: crate::protocol::GiveUp) -> Result<ClientRequest, Reply> {
    // A caller's monotonic time means ours only on the same clock (boot and time namespace:
    // a socket forwarded from another machine, a client in another namespace); else the wall.
    let (now, at) = match give_up.monotonic_here() {
        Some(at) => (crate::holder::protocol::monotonic_ms(), Some(at)),
        None => (crate::driver::now_ms(), give_up.wall_ms),
    };
    match at {
        Some(at) if now > at => {
            tracing::warn!(late_ms = now - at, "a request read after its caller gave up: not done (CLI-4)");
            Err(Reply::error(exit::ERROR, "caller_gone", format!("the request was read {} ms after its caller stopped waiting; nothing was done", now - at)))
        }
        _ => Ok(request),
    }
}

/// CONN-1: the answer to a connection over the daemon's cap: one clear error line, then close.
pub async fn refuse_over_cap(stream: UnixStream, cap: usize) {
    // LOG-1: one line a second at most, with how many were refused: a line per refusal let a
    // client churning connections (16,000 a second) rotate the admissions out of the log in
    // about 100 s (a review measured the rate).
    static REFUSED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static LAST_LOGGED_S: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let refused = REFUSED.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
    let now_s = crate::driver::now_ms() / 1_000;
    if LAST_LOGGED_S.swap(now_s, std::sync::atomic::Ordering::Relaxed) != now_s {
        tracing::warn!(cap, refused_so_far = refused, "control connection over the cap refused (CONN-1)");
    }
    let (_, mut write_half) = stream.into_split();
    let message = format!("the daemon already serves {cap} connections; retry shortly (nothing was done)");
    let reply = Reply::error(exit::ERROR, "too_many_connections", message);
    let _ = write_line(&mut write_half, &serde_json::to_value(reply).unwrap_or_default()).await;
}

pub(super) async fn write_line(writer: &mut tokio::net::unix::OwnedWriteHalf, value: &Value) -> std::io::Result<()> {
    let mut bytes = serde_json::to_vec(value).unwrap_or_default();
    bytes.push(b'\n');
    write_encoded(writer, &bytes).await
}

/// [`write_line`] of a line already encoded, its newline included.
pub(super) async fn write_encoded(writer: &mut tokio::net::unix::OwnedWriteHalf, bytes: &[u8]) -> std::io::Result<()> {
    debug_assert!(bytes.ends_with(b"\n"), "one whole line");
    let write = async {
        writer.write_all(bytes).await?;
        writer.flush().await
    };
    match tokio::time::timeout(REPLY_WRITE_TIMEOUT, write).await {
        Ok(result) => result,
        Err(_) => Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "the peer stopped reading")),
    }
}

async fn dispatch(request: ClientRequest, context: &Arc<Context>) -> Reply {
    if let Some(refused) = request.malformed_target() {
        return refused;
    }
    match request {
        ClientRequest::Status => status(context).await,
        ClientRequest::Stop { all } => stop(context, all).await,
        ClientRequest::AgentStart { name, harness, cwd, env, command, managed } => agent_handlers::start_agent(context, agent_handlers::StartSpec { name, harness, cwd, env, command, managed }).await,
        ClientRequest::AgentStop { target } => agent_handlers::stop_agent(context, &target).await,
        ClientRequest::AgentRestart { target } => agent_handlers::restart_agent(context, &target).await,
        ClientRequest::AgentList | ClientRequest::Catalog => catalog::catalog(context).await,
        ClientRequest::Capabilities => Reply::ok(capabilities()),
        ClientRequest::Admit(admit) => requests::admit_prompt(context, admit).await,
        ClientRequest::RequestGet { request_id, evidence } => requests::request_get(context, &request_id, evidence).await,
        ClientRequest::RequestCancel { request_id } => requests::request_cancel(context, request_id).await,
        ClientRequest::AgentOutput { target, after } => agent_handlers::agent_output(context, &target, after).await,
        ClientRequest::Submit(submit) => requests::submit(context, submit).await,
        ClientRequest::Watch { .. } | ClientRequest::Events { .. } => unreachable!("handled before dispatch"),
    }
}

pub(super) async fn query<T: Send + 'static>(context: &Context, f: impl FnOnce(&Engine) -> T + Send + 'static) -> Option<T> {
    crate::driver::ask(&context.inbox, f).await
}

async fn status(context: &Arc<Context>) -> Reply {
    let agents = context.agents.lock().expect("agent table").len();
    // EV-9: what the event store holds against its bounds, as of the retention task's last
    // check (at most `PRUNE_CHECK` old): the status answers liveness probes (`mux stop`'s is
    // bounded), so it reads no store, whose one reader connection a long catch-up may hold.
    let stored = Some(context.stored_event_bytes.load(Ordering::Relaxed)).filter(|bytes| *bytes != super::retention::UNKNOWN_BYTES);
    let retention = &context.retention;
    // HIST-4: none with `--retain-days 0` (nothing is pruned by age at all).
    let age_pruning = Some(context.retention_clock.age_pruning()).filter(|_| retention.days > 0);
    let late_hours = match age_pruning {
        Some(crate::store::retention::AgePruning::Late { hours }) => Some(hours),
        _ => None,
    };
    let events = json!({
        "stored_bytes": stored,
        "retain_events": retention.events,
        "retain_days": retention.days,
        "retain_mib": retention.bytes >> 20,
        "age_pruning": age_pruning.map(|a| a.as_str()),
        "age_pruning_late_hours": late_hours,
    });
    Reply::ok(json!({
        "schema": "wakterm.mux-status.v1",
        "running": true,
        "pid": std::process::id(),
        "data_dir": context.paths.root.display().to_string(), // UTF-8 (CLI-2): never a panic here
        "socket": context.paths.socket().display().to_string(),
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "agents": agents,
        "started_ms": context.started_ms,
        "events": events,
    }))
}

/// LIFE-5: how long `mux stop --all` waits for agent starts under way before it answers (its
/// caller waits 60 s for the answer). A start slower than this (a managed start's handshake
/// takes up to 60 s) ends its agent itself when it is done (`Context::stopping_all`).
const STARTS_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

async fn stop(context: &Arc<Context>, all: bool) -> Reply {
    let mut stopped = Vec::new();
    // LIFE-5: no agent starts from now on, and `--all` waits for the starts under way, so each
    // agent is stopped or never started. Before, an agent whose start ended after the list was
    // taken ran on, unnamed in `agents_stopped`.
    context.close_to_starts(all);
    let waited = std::time::Instant::now();
    while all && !context.starting.lock().expect("starting names").is_empty() {
        if waited.elapsed() > STARTS_WAIT {
            tracing::warn!("mux stop --all: agent starts still under way after {STARTS_WAIT:?}; each ends its agent when it is done");
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let mut not_stopped = Vec::new();
    if all {
        let agents: Vec<Arc<AgentRuntime>> = context.agents.lock().expect("agent table").values().cloned().collect();
        // LIFE-5: every agent at once, each on a blocking thread of its own. One after
        // another, three agents whose holders were SIGSTOPped (about 20 s each: the unanswered
        // shutdown, then the signals) outlasted the caller's 60 s wait: `daemon_unresponsive`,
        // and the daemon ran on (a hostile run).
        let stops: Vec<_> = agents
            .into_iter()
            .map(|agent| {
                let name = agent.record.name.clone();
                // LIFE-3: after a restart in progress (whose new pane this then ends), before
                // any that waits (which then starts nothing). LIVE-1: a holder still running
                // for the agent's socket though its shutdown was not answered (nobody listens
                // there, a link in its place) ends as for `agent stop`, or the agent is named
                // as not stopped: it was named stopped while its holder and process ran on (a
                // hostile run).
                let stop = tokio::task::spawn_blocking(move || {
                    let _one_at_a_time = agent.lifecycle.lock().expect("lifecycle lock");
                    agent.stopping.store(true, std::sync::atomic::Ordering::SeqCst);
                    agent.shut_down_pane();
                    agent.end_unreachable_holder()
                });
                (name, stop)
            })
            .collect();
        for (name, stop) in stops {
            let ended = stop.await.unwrap_or_else(|error| Err(format!("the stop did not finish: {error}")));
            match ended {
                Ok(()) => stopped.push(name),
                Err(error) => not_stopped.push(json!({"name": name, "error": error})),
            }
        }
    }
    // LIFE-6: the daemon's end waits for these; `mux stop` waits for its end that much longer.
    let changes = context.changes_under_way();
    Reply::ok(json!({"schema": "wakterm.mux-stop.v1", "stopping": true, "agents_stopped": stopped, "agents_not_stopped": not_stopped, "changes_under_way": changes}))
}

pub fn capabilities() -> Value {
    json!({
        "schema": "wakterm.agent-capabilities.v1",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": PROTOCOL_VERSION,
        "operations": {
            "agent.send": {"version": 1, "receipt_schema": wakterm_engine::receipt::RECEIPT_SCHEMA, "options": [crate::client::NO_STEER_OPTION]},
            "agent.admit": {"version": 1, "receipt_schema": wakterm_engine::receipt::RECEIPT_SCHEMA, "requires": ["incarnation", "request_id"]},
            "agent.catalog": {"version": 1, "schema": "wakterm.agent-catalog.v1"},
            "agent.request.get": {"version": 1, "schema": "wakterm.agent-request.v1"},
            "agent.request.cancel": {"version": 1, "schema": super::requests::CANCEL_SCHEMA},
            "agent.submit": {"version": 1, "receipt_schema": wakterm_engine::submit::SUBMIT_RECEIPT_SCHEMA},
            "agent.request.watch": {"version": 1, "event_schema": wakterm_engine::terminal::TERMINAL_SCHEMA},
            "agent.output": {"version": 1, "schema": "wakterm.agent-output-shadow.experimental.v1", "experimental": true},
            "agent.events": {"version": 1, "event_schema": wakterm_engine::AGENT_EVENTS_SCHEMA, "kinds": wakterm_engine::EventBody::KINDS, "catalog_field": "events_through"},
        },
        "classifications": ["accepted", "busy", "unsupported", "unavailable", "stale_incarnation", "invalid", "observer_failure", "internal_failure", "indeterminate"],
        "terminal_states": ["completed", "aborted", "timed_out", "cancelled", "delivery_failed", "indeterminate"],
        "return_final_harnesses": ["codex"],
        "limits": {
            "max_prompt_bytes": wakterm_engine::limits::MAX_PROMPT_BYTES,
            "max_final_timeout_ms": wakterm_engine::limits::MAX_FINAL_TIMEOUT_MS,
        },
    })
}


#[cfg(test)]
mod tests {
    use super::*;

    /// CONN-2: unfinished request lines share one budget: a piece that would pass it is not
    /// taken, and a line gives back what it held when dropped.
    #[test]
    fn conn_2_unfinished_lines_share_a_bounded_budget() {
        let held = AtomicUsize::new(0);
        let mut first = LineCharge::new(&held, 10, 0);
        let mut second = LineCharge::new(&held, 10, 0);
        assert!(first.add(8));
        assert!(!second.add(3), "8 + 3 passes the cap of 10");
        assert_eq!(held.load(Ordering::SeqCst), 8, "a refused piece takes nothing");
        assert!(second.add(2), "up to the cap is fine");
        drop(first);
        assert_eq!(held.load(Ordering::SeqCst), 2);
        assert!(second.add(3));
        drop(second);
        assert_eq!(held.load(Ordering::SeqCst), 0, "every byte given back");

        // A line's first bytes are free: a small request is read whatever the others hold.
        let mut hog = LineCharge::new(&held, 10, 4);
        assert!(hog.add(3) && held.load(Ordering::SeqCst) == 0, "within its free part");
        assert!(hog.add(11) && held.load(Ordering::SeqCst) == 10, "3 + 11 = 14: 10 past the free 4");
        let mut small = LineCharge::new(&held, 10, 4);
        assert!(small.add(4), "a line within its free part is read with the budget full");
        assert!(!small.add(1), "its first charged byte is not");
        drop((hog, small));
        assert_eq!(held.load(Ordering::SeqCst), 0);
    }

    /// CONN-2: a request line is read through its newline only, each piece charged before it
    /// is kept; with the budget held by other connections it is answered `server_busy`, unless
    /// it fits in a line's free part.
    #[tokio::test]
    async fn conn_2_a_line_past_the_shared_budget_is_refused() {
        let held = AtomicUsize::new(0);
        let mut line = Vec::new();
        let mut charge = LineCharge::new(&held, 64, 0);
        let mut input: &[u8] = b"{\"op\":\"status\"}\nnext";
        read_request_line(&mut input, &mut line, &mut charge).await.unwrap();
        assert_eq!(line, b"{\"op\":\"status\"}\n");
        assert_eq!(input, b"next", "nothing past the newline is read");
        assert_eq!(held.load(Ordering::SeqCst), line.len());
        drop(charge);

        let mut others = LineCharge::new(&held, 64, 0);
        assert!(others.add(60));
        let (mut line, mut charge) = (Vec::new(), LineCharge::new(&held, 64, 0));
        let mut input: &[u8] = b"{\"op\":\"status\"}\n";
        let refused = read_request_line(&mut input, &mut line, &mut charge).await.unwrap_err();
        assert_eq!(refused.body["error"], "server_busy", "{:?}", refused.body);
        assert_eq!(refused.exit_code, exit::ERROR);
        assert!(line.is_empty(), "nothing kept");
        assert_eq!(held.load(Ordering::SeqCst), 60);
        // With the daemon's free part, the same small request is read.
        let (mut line, mut charge) = (Vec::new(), LineCharge::new(&held, 64, UNCHARGED_REQUEST_BYTES));
        let mut input: &[u8] = b"{\"op\":\"status\"}\n";
        read_request_line(&mut input, &mut line, &mut charge).await.unwrap();
        assert_eq!(line, b"{\"op\":\"status\"}\n");
    }
}
