//! MGD-*: the `codex app-server` JSON-RPC protocol as Codex 0.169 speaks it over stdio
//! (fixtures/codex-0.169/app-server/README.md): the requests the daemon writes and a fold
//! that turns the server's lines into the observer's events. Pure: no I/O, so the parser of
//! these untrusted bytes is fuzzed (`fuzz_app_server_lines`).
//!
//! The position of an event is the byte offset one past its line in the app-server's output
//! stream as the holder numbers it: the same monotonic cursor for every reader, across daemon
//! restarts, as long as the holder keeps the bytes (MGD-4).

use serde_json::{json, Value};
use wakterm_engine::{ObserverEvent, SessionId, TurnId, TurnState};

/// The longest line the fold accepts; a longer one is a lost record (the observer reports the
/// session lost rather than guess what it said).
pub const MAX_LINE_BYTES: usize = 8 * 1024 * 1024;

/// The `clientInfo.name` Codex records as the thread's originator.
pub const CLIENT_NAME: &str = "wakterm";

/// One JSON-RPC line as the daemon writes it (no `jsonrpc` field: Codex 0.169 sends none and
/// takes none), newline-terminated.
fn line(value: Value) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(&value).expect("JSON values serialise");
    assert!(!bytes.contains(&b'\n'), "serde_json escapes newlines inside strings");
    bytes.push(b'\n');
    bytes
}

pub fn initialize(id: &str) -> Vec<u8> {
    line(json!({"id": id, "method": "initialize", "params": {"clientInfo": {"name": CLIENT_NAME, "title": null, "version": env!("CARGO_PKG_VERSION")}}}))
}

pub fn initialized() -> Vec<u8> {
    line(json!({"method": "initialized"}))
}

pub fn thread_start(id: &str, cwd: &str) -> Vec<u8> {
    line(json!({"id": id, "method": "thread/start", "params": {"cwd": cwd, "approvalPolicy": "never"}}))
}

/// `excludeTurns`: the reply carries the thread's id, session and status without its turns
/// (the real 0.169 then still sends pending server requests again, MGD-6:
/// `fixtures/codex-0.169/app-server/pending-request-resume-exclude-turns.observations.json`,
/// `reproof.jsonl`). With its turns the reply of a long thread grew past the line bound, and
/// every re-proof was one more loss.
pub fn thread_resume(id: &str, thread_id: &str, cwd: &str) -> Vec<u8> {
    line(json!({"id": id, "method": "thread/resume", "params": {"threadId": thread_id, "cwd": cwd, "approvalPolicy": "never", "excludeTurns": true}}))
}

/// MGD-7: the most of a refusal's code and message kept for the evidence trail.
pub const MAX_REFUSAL_ERROR_BYTES: usize = 160;

/// MGD-6: the longest JSON-RPC id (as JSON) or method of a server request the observer answers.
pub const MAX_SERVER_REQUEST_ID_BYTES: usize = 1024;

/// MGD-6: the most server requests the observer keeps pending to decline. Codex asks one at a
/// time per turn item; a server that leaves more open is not one whose turn we can follow, and
/// kept without a bound they grew the fold (and every checkpoint of it) until the turn ended.
pub const MAX_PENDING_SERVER_REQUESTS: usize = 64;

/// MGD-6: the answer to a server request (an approval, a question for the user): a JSON-RPC
/// error, which Codex treats as a refusal (approvals denied, questions answered with nothing,
/// elicitations declined) and goes on with the turn. No `data`: a `turnTransition` reason there
/// would make it drop the answer and wait on.
pub fn decline(id: &Value, method: &str) -> Vec<u8> {
    let message = format!("wakterm declines server requests: {method} is refused (its agents run unattended; approvalPolicy never)");
    on_its_own_line(&line(json!({"id": id, "error": {"code": -32000, "message": message}})))
}

/// A line the observer writes (an answer, a re-proof) starts as the admission's does (MGD-6).
pub use wakterm_engine::prompt::on_its_own_line;

pub fn turn_interrupt(id: &str, thread_id: &str, turn_id: &str) -> Vec<u8> {
    line(json!({"id": id, "method": "turn/interrupt", "params": {"threadId": thread_id, "turnId": turn_id}}))
}

/// A reply to one of our requests, found in the output.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    Result(Value),
    Error(Value),
}

/// The reply with JSON-RPC id `id` in one output line, if the line is that reply.
pub fn reply_to(line: &[u8], id: &str) -> Option<Reply> {
    let value: Value = serde_json::from_slice(line).ok()?;
    if value.get("id")?.as_str()? != id || value.get("method").is_some() {
        return None;
    }
    match (value.get("result"), value.get("error")) {
        (Some(result), None) => Some(Reply::Result(result.clone())),
        (None, Some(error)) => Some(Reply::Error(error.clone())),
        _ => None,
    }
}

/// The thread a `thread/start` or `thread/resume` result names: (thread id, session id).
pub fn thread_of(result: &Value) -> Option<(String, String)> {
    let thread = result.get("thread")?;
    let id = thread.get("id")?.as_str()?.to_string();
    let session = thread.get("sessionId")?.as_str()?.to_string();
    (!id.is_empty() && !session.is_empty()).then_some((id, session))
}

/// What the fold knows between lines: the thread it watches and the turn in flight.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Fold {
    pub thread_id: String,
    pub turn: TurnState,
    /// The last agent message of the running turn (the final, once the turn completes; a
    /// `turn/completed` whose items are not loaded carries none itself).
    pub last_agent_text: Option<(String, String)>,
    /// MGD-2: this process has loaded the thread (a reply naming it, or a turn in it).
    pub loaded: bool,
    /// MGD-6: server requests about the thread not resolved yet, by their id's JSON text
    /// (id, method).
    #[serde(default)]
    pub pending_requests: std::collections::BTreeMap<String, (Value, String)>,
    /// MGD-2: the session the agent's thread must be loaded under (None: not checked).
    #[serde(default)]
    pub expected_session: Option<String>,
    /// CORR-11: turns a `turn/start` reply accepted (`result.turn.id`) whose `turn/started`
    /// this stream has not shown yet. Codex answers the request before it notifies the turn:
    /// an exit in between is no proof that no turn started.
    #[serde(default)]
    pub accepted_turns: std::collections::BTreeSet<String>,
    /// CORR-11: more turns were accepted than `MAX_ACCEPTED_TURNS` kept: no exit drains.
    #[serde(default)]
    pub accepted_overflow: bool,
    /// MGD-4: replies that proved the thread (its id under the agent's session), counted.
    #[serde(default)]
    pub proofs: u64,
    /// MGD-7: string ids answered with a result since the last `turn/started` (bounded by
    /// `MAX_ANSWERED_IDS`). A JSON-RPC id is answered once: an error reply under an id answered
    /// already is another request sent under it (a holder-socket client that read the id from
    /// the result), never the refusal of the one that was answered.
    #[serde(default)]
    pub answered_ids: std::collections::BTreeSet<String>,
    /// MGD-7: more ids were answered than kept since the last `turn/started`: no error reply is
    /// a refusal until the next one (the engine's turn evidence covers what came before it).
    #[serde(default)]
    pub answered_overflow: bool,
}

/// MGD-7: the most answered ids kept between two turn starts.
pub const MAX_ANSWERED_IDS: usize = 64;

/// CORR-11: the most accepted-but-unnotified turns kept (one per admission in flight; a server
/// that names more is not one whose exit can prove anything).
pub const MAX_ACCEPTED_TURNS: usize = 64;

impl Fold {
    pub fn new(thread_id: &str) -> Fold {
        Fold {
            thread_id: thread_id.to_string(),
            turn: TurnState::Idle { last_completed: None },
            last_agent_text: None,
            loaded: false,
            pending_requests: Default::default(),
            expected_session: None,
            accepted_turns: Default::default(),
            accepted_overflow: false,
            proofs: 0,
            answered_ids: Default::default(),
            answered_overflow: false,
        }
    }

    /// The fold of a thread that must be loaded under `session` (MGD-2).
    pub fn expecting(thread_id: &str, session: &SessionId) -> Fold {
        Fold { expected_session: Some(session.0.clone()), ..Fold::new(thread_id) }
    }

    fn session(&self) -> SessionId {
        SessionId(self.thread_id.clone())
    }

    /// MGD-3: the events one output line (without its newline) means, at `position` (one past
    /// the line). Replies and notifications nobody correlates on make none; a line that is not
    /// JSON is not ours to interpret and makes none either (Codex writes only JSON lines on
    /// stdout), but a notification about ANOTHER thread loses the session (CORR-3).
    pub fn line(&mut self, line: &[u8], position: u64) -> Vec<ObserverEvent> {
        let Ok(value) = serde_json::from_slice::<Value>(line) else { return Vec::new() };
        if value.pointer("/result/thread/id").and_then(Value::as_str) == Some(self.thread_id.as_str()) {
            // MGD-2: our thread under another session is not the agent's conversation: a failed
            // `agent restart` (which said so) left the new process loaded and admissible.
            let session = value.pointer("/result/thread/sessionId").and_then(Value::as_str);
            if let (Some(expected), Some(session)) = (self.expected_session.as_deref(), session) {
                if session != expected {
                    self.loaded = false;
                    self.turn = TurnState::Unknown;
                    let reason = format!("the app-server loaded the agent's thread under session {session}, not the agent's {expected}");
                    return vec![ObserverEvent::SessionLost { reason, session: None, before: None }];
                }
            }
            self.loaded = true; // the reply to a thread/start or thread/resume of our thread
            self.proofs += 1;
            // An unknown turn state (a stream whose start the holder no longer keeps) is what
            // the reply says the thread is doing now (Codex 0.169: `thread.status.type`).
            if self.turn == TurnState::Unknown {
                match value.pointer("/result/thread/status/type").and_then(Value::as_str) {
                    Some("idle") => self.turn = TurnState::Idle { last_completed: None },
                    Some("active") => self.turn = TurnState::Busy { turn: None },
                    _ => {}
                }
            }
        }
        if let (Some(_), Some(turn)) = (value.get("id"), value.pointer("/result/turn/id").and_then(Value::as_str)) {
            // CORR-11: a turn/start accepted (bounded: a hostile server could name turns forever).
            if self.accepted_turns.len() < MAX_ACCEPTED_TURNS || self.accepted_turns.contains(turn) {
                self.accepted_turns.insert(turn.to_string());
            } else {
                self.accepted_overflow = true;
            }
        }
        let Some(method) = value.get("method").and_then(Value::as_str) else { return self.reply(&value, position) };
        let params = value.get("params").cloned().unwrap_or(Value::Null);
        if let Some(id) = value.get("id") {
            // A server request (approvals, questions): no turn evidence; MGD-6 answers it.
            let ours = params.get("threadId").and_then(Value::as_str).is_none_or(|t| t == self.thread_id);
            // MGD-6: its answer echoes the id and names the method; one too long to answer in a
            // holder write is not a request we can decline (a 2 MB id hit the holder client's
            // line assertion and ended the daemon, again at every start): the turn's evidence
            // is lost instead.
            if ours && (id.to_string().len() > MAX_SERVER_REQUEST_ID_BYTES || method.len() > MAX_SERVER_REQUEST_ID_BYTES) {
                self.turn = TurnState::Unknown;
                let reason = format!("app-server request with an id or method too long to answer ({} bytes)", id.to_string().len().max(method.len()));
                return vec![ObserverEvent::SessionLost { reason, session: None, before: None }];
            }
            if ours && !self.pending_requests.contains_key(&id.to_string()) && self.pending_requests.len() >= MAX_PENDING_SERVER_REQUESTS {
                // Evidence lost: the re-proof the loss asks for (MGD-4) makes Codex send what is
                // still pending again, so forgetting them here leaves no turn waiting for good.
                self.turn = TurnState::Unknown;
                self.pending_requests.clear();
                let reason = format!("app-server left more than {MAX_PENDING_SERVER_REQUESTS} requests pending");
                return vec![ObserverEvent::SessionLost { reason, session: None, before: None }];
            }
            if ours {
                self.pending_requests.insert(id.to_string(), (id.clone(), method.to_string()));
            }
            return Vec::new();
        }
        if let Some(thread) = params.get("threadId").and_then(Value::as_str) {
            if thread != self.thread_id {
                let reason = format!("app-server notification about another thread ({method})");
                return vec![ObserverEvent::SessionLost { reason, session: None, before: None }];
            }
        }
        let events = match method {
            "serverRequest/resolved" => {
                if let Some(id) = params.get("requestId") {
                    self.pending_requests.remove(&id.to_string());
                }
                Vec::new()
            }
            "turn/started" => self.turn_started(&params, position),
            "item/completed" => self.item_completed(&params, position),
            "turn/completed" => self.turn_completed(&params, position),
            _ => Vec::new(),
        };
        for event in &events {
            self.turn = wakterm_engine::fold_turn(&self.turn, event);
        }
        events
    }

    /// MGD-7: a reply to a request with a string id (the daemon's ids are strings). A result
    /// is remembered; an error is that request's refusal unless the id was answered already
    /// (or too many were to know). Every refusal is reported, whoever sent the request: the
    /// engine ends only the request whose own `turn/start` id (random per admission) it names.
    fn reply(&mut self, value: &Value, position: u64) -> Vec<ObserverEvent> {
        if let Some(number) = value.get("id").filter(|id| id.is_number()) {
            // CORR-15, ADM-5: another client's `turn/start` (the daemon's ids are strings) still
            // says who opened its turn: under the number's text, never one of wakterm's ids.
            return self.accepted(&number.to_string(), value, position);
        }
        let Some(id) = value.get("id").and_then(Value::as_str).filter(|id| id.len() <= MAX_SERVER_REQUEST_ID_BYTES) else { return Vec::new() };
        if value.get("result").is_some() {
            if self.answered_ids.len() < MAX_ANSWERED_IDS {
                self.answered_ids.insert(id.to_string());
            } else {
                self.answered_overflow = true;
            }
            return self.accepted(id, value, position);
        }
        let Some(error) = value.get("error") else { return Vec::new() };
        if self.answered_overflow || self.answered_ids.contains(id) {
            return Vec::new(); // not the refusal of the request that was answered
        }
        let code = error.get("code").and_then(Value::as_i64).map_or("no code".to_string(), |c| c.to_string());
        let message = error.get("message").and_then(Value::as_str).unwrap_or("no message");
        let mut error = format!("{code}: {message}");
        crate::rollout::truncate_at_char(&mut error, MAX_REFUSAL_ERROR_BYTES);
        vec![ObserverEvent::RequestRefused { session: self.session(), id: id.to_string(), error, position }]
    }

    /// CORR-15: the turn a `turn/start` was handed to (`result.turn.id`) says whose prompt that
    /// turn carries; any other result says nothing.
    fn accepted(&self, id: &str, value: &Value, position: u64) -> Vec<ObserverEvent> {
        let turn = value.pointer("/result/turn/id").and_then(Value::as_str).filter(|turn| !turn.is_empty() && turn.len() <= MAX_SERVER_REQUEST_ID_BYTES);
        match turn {
            Some(turn) => vec![ObserverEvent::TurnAccepted { session: self.session(), id: id.to_string(), turn: TurnId(turn.to_string()), position }],
            None => Vec::new(),
        }
    }

    fn turn_started(&mut self, params: &Value, position: u64) -> Vec<ObserverEvent> {
        let Some(turn) = params.pointer("/turn/id").and_then(Value::as_str) else { return Vec::new() };
        self.accepted_turns.remove(turn);
        // MGD-7: a request answered before this start is covered by the turn evidence now (a
        // refusal after it contradicts a candidate turn: the engine says `indeterminate`).
        self.answered_ids.clear();
        self.answered_overflow = false;
        self.last_agent_text = None;
        self.loaded = true;
        vec![ObserverEvent::TurnStarted { session: self.session(), turn: TurnId(turn.to_string()), position }]
    }

    fn item_completed(&mut self, params: &Value, position: u64) -> Vec<ObserverEvent> {
        let turn = params.get("turnId").and_then(Value::as_str).map(|t| TurnId(t.to_string()));
        let Some(item) = params.get("item") else { return Vec::new() };
        match item.get("type").and_then(Value::as_str) {
            Some("userMessage") => {
                let Some(text) = user_text(item) else { return Vec::new() };
                let prompt_hash = wakterm_engine::prompt::prompt_hash(&text);
                vec![ObserverEvent::UserMessage { session: self.session(), turn, prompt_hash, position }]
            }
            Some("agentMessage") => {
                let Some(text) = item.get("text").and_then(Value::as_str) else { return Vec::new() };
                if turn.as_ref().is_some_and(|t| self.completed_last(&t.0)) {
                    return Vec::new(); // EV-4: no message after its turn's end (see `turn_completed`)
                }
                let phase = item.get("phase").and_then(Value::as_str).map(str::to_string);
                // CORR-7: the final slot is the running turn's; a message naming another turn of
                // the thread took it, and the turn's own final was lost when its `turn/completed`
                // carried no items (`completed` with "" although its final had been seen: a
                // review).
                let running_other = matches!(&self.turn, TurnState::Busy { turn: Some(running) } if Some(running) != turn.as_ref());
                if let (Some(turn), false) = (&turn, running_other) {
                    self.last_agent_text = Some((turn.0.clone(), text.to_string()));
                }
                vec![ObserverEvent::AgentMessage { session: self.session(), turn, text: text.to_string(), phase, position }]
            }
            _ => Vec::new(),
        }
    }

    /// EV-4: `turn` is the turn the thread completed last, with none started since.
    fn completed_last(&self, turn: &str) -> bool {
        matches!(&self.turn, TurnState::Idle { last_completed: Some(done) } if done.0 == turn)
    }

    /// CORR-10 for managed sessions: `completed` carries the final; `interrupted` and `failed`
    /// end the turn aborted.
    fn turn_completed(&mut self, params: &Value, position: u64) -> Vec<ObserverEvent> {
        let Some(turn) = params.pointer("/turn/id").and_then(Value::as_str) else { return Vec::new() };
        // EV-4: a turn ends once. A second `turn/completed` of the turn that just completed
        // (a hostile or confused server) published `turn.completed` and `turn.final` again for
        // one turn id, a second final a reader of the stream could take (a review).
        if self.completed_last(turn) {
            return Vec::new();
        }
        let status = params.pointer("/turn/status").and_then(Value::as_str).unwrap_or("");
        let turn_id = TurnId(turn.to_string());
        self.accepted_turns.remove(turn);
        self.pending_requests.clear(); // the server resolves what the turn left pending
        let final_message = final_of(params).or_else(|| {
            self.last_agent_text.as_ref().filter(|(t, _)| t == turn).map(|(_, text)| text.clone())
        });
        self.last_agent_text = None;
        match status {
            "completed" => vec![ObserverEvent::TurnCompleted { session: self.session(), turn: turn_id, final_message, position }],
            _ => vec![ObserverEvent::TurnAborted { session: self.session(), turn: Some(turn_id), position }],
        }
    }
}

/// The text of a `userMessage` item: its text parts joined, as Codex sent the input. A message
/// of no text part (an image only) is a user message still, of the empty text, as the TUI's
/// record of one hashes: ignored, it steered a bound turn unseen (CORR-9, a review). None only
/// for an item with no content list.
fn user_text(item: &Value) -> Option<String> {
    let parts = item.get("content")?.as_array()?;
    let texts: Vec<&str> = parts.iter().filter(|p| p.get("type").and_then(Value::as_str) == Some("text")).filter_map(|p| p.get("text")?.as_str()).collect();
    Some(texts.concat())
}

/// The last agent message among a completed turn's items, when they are loaded.
fn final_of(params: &Value) -> Option<String> {
    let items = params.pointer("/turn/items")?.as_array()?;
    items.iter().rev().find(|i| i.get("type").and_then(Value::as_str) == Some("agentMessage")).and_then(|i| i.get("text")?.as_str()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn transcript(name: &str) -> Vec<Value> {
        let path = format!("{}/../fixtures/codex-0.169/app-server/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|l| l["from"] == "server" && l.get("msg").is_some())
            .map(|l| l["msg"].clone())
            .collect()
    }

    fn fold_all(name: &str) -> (Fold, Vec<ObserverEvent>) {
        let lines = transcript(name);
        let thread = lines.iter().find_map(|m| m.pointer("/result/thread/id")).and_then(Value::as_str).unwrap().to_string();
        let mut fold = Fold::new(&thread);
        let mut events = Vec::new();
        for (n, message) in lines.iter().enumerate() {
            events.extend(fold.line(&serde_json::to_vec(message).unwrap(), (n as u64 + 1) * 100));
        }
        (fold, events)
    }

    fn kinds(events: &[ObserverEvent]) -> Vec<&'static str> {
        events
            .iter()
            .map(|e| match e {
                ObserverEvent::TurnStarted { .. } => "turn_started",
                ObserverEvent::UserMessage { .. } => "user_message",
                ObserverEvent::AgentMessage { .. } => "agent_message",
                ObserverEvent::TurnCompleted { .. } => "turn_completed",
                ObserverEvent::TurnAborted { .. } => "turn_aborted",
                ObserverEvent::RequestRefused { .. } => "request_refused",
                ObserverEvent::TurnAccepted { .. } => "turn_accepted",
                _ => "other",
            })
            .collect()
    }

    // CORR-15: the real 0.169 reply to a `turn/start` names the turn it handed the input to,
    // before that turn's `turn/started`; sent under a string id (the daemon's), it folds into
    // `TurnAccepted` for that id and turn. Under a number id (the capture's client) it is no
    // request of ours and folds into nothing.
    #[test]
    fn corr_15_a_turn_start_reply_names_the_turn_it_accepted() {
        let lines = transcript("completed-turn.jsonl");
        let reply_at = lines.iter().position(|m| m.pointer("/result/turn/id").is_some()).unwrap();
        let started_at = lines.iter().position(|m| m["method"] == "turn/started").unwrap();
        assert!(reply_at < started_at, "Codex answers before it notifies the turn");
        let turn = lines[reply_at].pointer("/result/turn/id").and_then(Value::as_str).unwrap().to_string();
        let thread = lines.iter().find_map(|m| m.pointer("/result/thread/id")).and_then(Value::as_str).unwrap().to_string();
        let mut fold = Fold::new(&thread);
        // A number id (the capture client's, as most clients'): another writer's turn, named
        // under the number's text (ADM-5: it then ends no wait for our line; it ended it when
        // only string ids were reported, a review).
        let theirs = fold.line(&serde_json::to_vec(&lines[reply_at]).unwrap(), 10);
        let [ObserverEvent::TurnAccepted { id, turn: accepted, .. }] = theirs.as_slice() else { panic!("{theirs:?}") };
        assert_eq!((id.as_str(), accepted.0.as_str()), (lines[reply_at]["id"].to_string().as_str(), turn.as_str()));
        assert!(!wakterm_engine::prompt::is_turn_start_id(id));
        let mut ours = lines[reply_at].clone();
        ours["id"] = json!("wakterm-req-1");
        let events = fold.line(&serde_json::to_vec(&ours).unwrap(), 20);
        let [ObserverEvent::TurnAccepted { id, turn: accepted, position, .. }] = events.as_slice() else { panic!("{events:?}") };
        assert_eq!((id.as_str(), accepted.0.as_str(), *position), ("wakterm-req-1", turn.as_str(), 20));
    }

    // EV-4: a second `turn/completed` (and a late agent message) of the turn that just completed
    // makes no events: one turn, one `turn.final` on the stream.
    #[test]
    fn ev_4_a_turn_completed_twice_ends_once() {
        let thread = "t-1";
        let mut fold = Fold::new(thread);
        let note = |method: &str, params: Value| serde_json::to_vec(&json!({"method": method, "params": params})).unwrap();
        let turn = |status: &str| json!({"id": "ours", "items": [], "itemsView": "notLoaded", "status": status});
        let agent = |text: &str| json!({"threadId": thread, "turnId": "ours", "item": {"type": "agentMessage", "id": "i", "text": text}});
        fold.line(&note("turn/started", json!({"threadId": thread, "turn": turn("inProgress")})), 10);
        fold.line(&note("item/completed", agent("the final")), 20);
        assert_eq!(fold.line(&note("turn/completed", json!({"threadId": thread, "turn": turn("completed")})), 30).len(), 1);
        assert!(fold.line(&note("item/completed", agent("EVIL SECOND FINAL")), 40).is_empty());
        assert!(fold.line(&note("turn/completed", json!({"threadId": thread, "turn": turn("completed")})), 50).is_empty());
        fold.line(&note("turn/started", json!({"threadId": thread, "turn": {"id": "next", "status": "inProgress"}})), 60);
        assert_eq!(fold.line(&note("item/completed", agent("late, after another start")), 70).len(), 1, "not the last completed any more");
    }

    // CORR-7: a `turn/completed` without items takes the final of its own turn's last agent
    // message, not of a message naming another turn that came after it.
    #[test]
    fn corr_7_another_turns_message_does_not_take_the_final() {
        let thread = "t-1";
        let mut fold = Fold::new(thread);
        let note = |method: &str, params: Value| serde_json::to_vec(&json!({"method": method, "params": params})).unwrap();
        let turn = |id: &str, status: &str| json!({"id": id, "items": [], "itemsView": "notLoaded", "status": status});
        let agent = |turn: &str, text: &str| json!({"threadId": thread, "turnId": turn, "item": {"type": "agentMessage", "id": "i", "text": text}});
        fold.line(&note("turn/started", json!({"threadId": thread, "turn": turn("ours", "inProgress")})), 10);
        fold.line(&note("item/completed", agent("ours", "done: attack one")), 20);
        fold.line(&note("item/completed", agent("other", "EVIL")), 30);
        let events = fold.line(&note("turn/completed", json!({"threadId": thread, "turn": turn("ours", "completed")})), 40);
        let [ObserverEvent::TurnCompleted { final_message, .. }] = events.as_slice() else { panic!("{events:?}") };
        assert_eq!(final_message.as_deref(), Some("done: attack one"));
    }

    // CORR-9: a user message of no text part (an image only) is a user message still, so a
    // steer of one is seen; an item with no content list is none.
    #[test]
    fn corr_9_a_user_message_of_no_text_is_still_one() {
        let thread = "t-1";
        let mut fold = Fold::new(thread);
        let note = |method: &str, params: Value| serde_json::to_vec(&json!({"method": method, "params": params})).unwrap();
        let user = |content: Value| json!({"threadId": thread, "turnId": "ours", "item": {"type": "userMessage", "id": "u", "content": content}});
        fold.line(&note("turn/started", json!({"threadId": thread, "turn": {"id": "ours", "items": [], "itemsView": "notLoaded", "status": "inProgress"}})), 10);
        let events = fold.line(&note("item/completed", user(json!([{"type": "localImage", "path": "/tmp/x.png"}]))), 20);
        let [ObserverEvent::UserMessage { prompt_hash, .. }] = events.as_slice() else { panic!("{events:?}") };
        assert_eq!(prompt_hash, &wakterm_engine::prompt::prompt_hash(""));
        assert!(fold.line(&note("item/completed", json!({"threadId": thread, "turnId": "ours", "item": {"type": "userMessage", "id": "v"}})), 30).is_empty());
    }

    // MGD-3: the real 0.169 transcripts fold into the turn events the engine correlates on:
    // the prompt's hash, and the reply as the turn's final.
    #[test]
    fn mgd_3_real_transcripts_fold_into_turn_events() {
        let (fold, events) = fold_all("completed-turn.jsonl");
        // The capture client's number id: its reply names the turn (CORR-15), before the start.
        assert_eq!(kinds(&events), ["turn_accepted", "turn_started", "user_message", "agent_message", "turn_completed"]);
        let ObserverEvent::UserMessage { prompt_hash, .. } = &events[2] else { unreachable!() };
        assert_eq!(prompt_hash, &wakterm_engine::prompt::prompt_hash("hello app-server fixture"));
        let ObserverEvent::TurnCompleted { final_message, .. } = &events[4] else { unreachable!() };
        assert_eq!(final_message.as_deref(), Some("mock reply to: hello app-server fixture"));
        assert!(matches!(fold.turn, TurnState::Idle { last_completed: Some(_) }));

        let (_, events) = fold_all("two-turns.jsonl");
        assert_eq!(kinds(&events).iter().filter(|k| **k == "turn_completed").count(), 2);

        let (fold, events) = fold_all("interrupted-turn.jsonl");
        assert_eq!(kinds(&events), ["turn_accepted", "turn_started", "user_message", "turn_aborted"]);
        assert!(matches!(fold.turn, TurnState::Idle { .. }));
    }

    // CORR-3: a notification about another thread is not evidence about ours.
    #[test]
    fn mgd_3_another_threads_notification_loses_the_session() {
        let mut fold = Fold::new("thread-a");
        let line = br#"{"method":"turn/started","params":{"threadId":"thread-b","turn":{"id":"t1"}}}"#;
        assert!(matches!(fold.line(line, 10).as_slice(), [ObserverEvent::SessionLost { .. }]));
        assert!(fold.line(b"not json at all", 20).is_empty());
        assert!(fold.line(br#"{"id":"x","result":{}}"#, 30).is_empty());
    }

    // MGD-4: a stream whose start is gone proves nothing about the turn; the reply to a
    // `thread/resume` of our thread proves the thread is loaded and says what it is doing.
    #[test]
    fn mgd_4_a_resume_reply_proves_the_thread_and_its_state() {
        let mut fold = Fold { turn: TurnState::Unknown, ..Fold::new("thread-a") };
        assert!(fold.line(br#"{"id":"x","result":{"thread":{"id":"thread-b","status":{"type":"idle"}}}}"#, 10).is_empty());
        assert!(!fold.loaded && fold.turn == TurnState::Unknown, "another thread's reply proves nothing");
        fold.line(br#"{"id":"x","result":{"thread":{"id":"thread-a","status":{"type":"active","activeFlags":[]}}}}"#, 20);
        assert!(fold.loaded);
        assert_eq!(fold.turn, TurnState::Busy { turn: None });
        let mut known = Fold::new("thread-a");
        known.line(br#"{"id":"x","result":{"thread":{"id":"thread-a","status":{"type":"active"}}}}"#, 30);
        assert_eq!(known.turn, TurnState::Idle { last_completed: None }, "a known state is kept: the events decide it");
    }

    // MGD-6, recorded from the real 0.169 (`fixtures/capture_app_server.py odd_lines`): an empty
    // line, a fragment ended by the next line's leading newline, and an error answer to an id it
    // never sent get NO answer; a request starting with a newline is served; the turn after all
    // that completes. So the observer's lines may start with a newline, and a decline that
    // arrives after its request was resolved is harmless.
    #[test]
    fn mgd_6_the_real_app_server_ignores_odd_lines_and_serves_a_leading_newline() {
        let path = format!("{}/../fixtures/codex-0.169/app-server/odd-lines.jsonl", env!("CARGO_MANIFEST_DIR"));
        let records: Vec<Value> = std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let raw: Vec<&str> = records.iter().filter(|r| r["from"] == "client").filter_map(|r| r["raw"].as_str()).collect();
        assert!(raw.contains(&"\n") && raw.iter().any(|r| r.starts_with("\n{\"id\": 9999")), "the odd lines were sent: {raw:?}");
        let server: Vec<&Value> = records.iter().filter(|r| r["from"] == "server").filter_map(|r| r.get("msg")).collect();
        assert!(server.iter().all(|m| m.get("error").is_none()), "no error answer to any odd line");
        assert!(server.iter().all(|m| m.get("id") != Some(&json!(9999)) && m.get("id") != Some(&Value::Null)));
        assert!(server.iter().any(|m| m["id"] == "leading-newline" && m["result"]["thread"]["id"].is_string()), "served");
        let (_, events) = fold_all("odd-lines.jsonl");
        assert_eq!(kinds(&events), ["turn_accepted", "turn_started", "user_message", "agent_message", "turn_completed"]);
    }

    // MGD-6, recorded from the real 0.169 (`fixtures/capture_app_server.py spoiled_fragment`):
    // a whole `turn/start` left without its newline (a short write that lacked only that) is
    // never served once the next line starts with `LINE_LEAD` (`{...}#` is not JSON); the line
    // after the lead is served, a lone lead is ignored, and the thread's next turn completes.
    // With a bare newline as the lead, that request was served late, ahead of the next prompt
    // (exploration seed 16413642).
    #[test]
    fn mgd_6_the_real_app_server_never_serves_a_fragment_the_lead_spoils() {
        let path = format!("{}/../fixtures/codex-0.169/app-server/spoiled-fragment.jsonl", env!("CARGO_MANIFEST_DIR"));
        let records: Vec<Value> = std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let lead = std::str::from_utf8(wakterm_engine::prompt::LINE_LEAD).unwrap();
        let raw: Vec<&str> = records.iter().filter(|r| r["from"] == "client").filter_map(|r| r["raw"].as_str()).collect();
        let cut = raw.iter().find(|r| r.contains("cut-short")).expect("the cut request was sent");
        assert!(cut.starts_with(lead) && cut.ends_with('}') && serde_json::from_str::<Value>(&cut[lead.len()..]).is_ok(), "a whole request, its newline missing: {cut}");
        assert!(raw.iter().any(|r| r.starts_with(&format!("{lead}{{\"id\": \"after-the-fragment\""))), "the next line came after the lead");
        assert!(raw.contains(&lead), "a lone lead was sent");
        let server: Vec<&Value> = records.iter().filter(|r| r["from"] == "server").filter_map(|r| r.get("msg")).collect();
        assert!(server.iter().all(|m| m.get("id") != Some(&json!("cut-short"))), "the spoiled request got no answer");
        let cut_at = records.iter().position(|r| r["raw"].as_str().is_some_and(|raw| raw.contains("cut-short"))).unwrap();
        let started_after = records[cut_at..].iter().filter(|r| r["msg"]["method"] == "turn/started").count();
        assert_eq!(started_after, 1, "only the turn asked for after it started");
        assert!(server.iter().any(|m| m["id"] == "after-the-fragment" && m["result"]["thread"]["id"].is_string()), "served");
        let (_, events) = fold_all("spoiled-fragment.jsonl");
        let kinds = kinds(&events);
        assert_eq!(kinds.iter().filter(|k| **k == "turn_completed").count(), 2, "{kinds:?}");
    }

    // MGD-6, recorded from the real 0.169 (`fixtures/codex-0.169/app-server/
    // pending_request_resume.py`): a server request left unanswered is sent again, same id,
    // method and params, after the answer to a `thread/resume` on the same connection
    // (openai/codex#12560), so an observer that lost it (evicted from the holder's ring) learns
    // it again from the resume it writes after every loss. The fold keeps it pending once, and
    // the decline lets the turn complete.
    #[test]
    fn mgd_6_the_real_app_server_sends_a_pending_request_again_on_resume() {
        let path = format!("{}/../fixtures/codex-0.169/app-server/pending-request-resume.jsonl", env!("CARGO_MANIFEST_DIR"));
        let records: Vec<Value> = std::fs::read_to_string(&path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let resume_id = records.iter().filter(|r| r["from"] == "client").find(|r| r["msg"]["method"] == "thread/resume").map(|r| r["msg"]["id"].clone()).unwrap();
        let server: Vec<&Value> = records.iter().filter(|r| r["from"] == "server").filter_map(|r| r.get("msg")).collect();
        let requests: Vec<usize> = (0..server.len()).filter(|i| server[*i].get("method").is_some() && server[*i].get("id").is_some()).collect();
        assert_eq!(requests.len(), 2, "the request and its replay");
        let (first, again) = (server[requests[0]], server[requests[1]]);
        assert_eq!(first["method"], "item/commandExecution/requestApproval");
        assert_eq!((&first["id"], &first["params"]), (&again["id"], &again["params"]), "the same request again");
        let resumed = server.iter().position(|m| m.get("result").is_some() && m["id"] == resume_id).unwrap();
        assert!(requests[0] < resumed && resumed < requests[1], "sent again after the resume's answer");
        let decline = records.iter().filter(|r| r["from"] == "client").find(|r| r["msg"].get("error").is_some()).unwrap();
        assert_eq!(decline["msg"]["id"], first["id"]);

        let thread = first["params"]["threadId"].as_str().unwrap();
        let mut fold = Fold::new(thread);
        let mut events = Vec::new();
        for (n, message) in server.iter().enumerate() {
            events.extend(fold.line(&serde_json::to_vec(message).unwrap(), (n as u64 + 1) * 100));
            if n == requests[0] || n == requests[1] {
                assert_eq!(fold.pending_requests.len(), 1, "one pending request, however often it is sent");
            }
        }
        assert!(fold.pending_requests.is_empty(), "resolved once declined");
        assert_eq!(kinds(&events).last(), Some(&"turn_completed"));
    }

    /// MGD-6: a server request whose id (or method) is too long to echo in an answer loses the
    /// turn's evidence and is not kept to be declined: its 2 MB decline hit the holder client's
    /// line assertion and ended the daemon, again at every start.
    #[test]
    fn mgd_6_a_request_too_long_to_answer_loses_the_evidence() {
        let mut fold = Fold::new("t1");
        let huge = serde_json::json!({"id": "x".repeat(2_000_000), "method": "item/commandExecution/requestApproval", "params": {"threadId": "t1"}});
        let events = fold.line(&serde_json::to_vec(&huge).unwrap(), 100);
        assert!(matches!(events.as_slice(), [ObserverEvent::SessionLost { .. }]), "{events:?}");
        assert!(fold.pending_requests.is_empty(), "nothing to decline");
        assert_eq!(fold.turn, TurnState::Unknown);
        let fine = serde_json::json!({"id": 7, "method": "item/commandExecution/requestApproval", "params": {"threadId": "t1"}});
        assert!(fold.line(&serde_json::to_vec(&fine).unwrap(), 200).is_empty());
        assert_eq!(fold.pending_requests.len(), 1, "an ordinary request is kept to be declined");
    }

    /// MGD-6: pending server requests are bounded; one past the bound loses the evidence (and
    /// with it the pending set: the re-proof makes Codex send them again), a repeat of a pending
    /// id is no new one.
    #[test]
    fn mgd_6_pending_server_requests_are_bounded() {
        let mut fold = Fold::new("t1");
        let request = |id: usize| serde_json::to_vec(&serde_json::json!({"id": id, "method": "item/tool/requestUserInput", "params": {"threadId": "t1"}})).unwrap();
        for id in 0..MAX_PENDING_SERVER_REQUESTS {
            assert!(fold.line(&request(id), 10 + id as u64).is_empty());
        }
        assert!(fold.line(&request(0), 500).is_empty(), "the same id again is no new request");
        assert_eq!(fold.pending_requests.len(), MAX_PENDING_SERVER_REQUESTS);
        let events = fold.line(&request(MAX_PENDING_SERVER_REQUESTS), 600);
        assert!(matches!(events.as_slice(), [ObserverEvent::SessionLost { .. }]), "{events:?}");
        assert!(fold.pending_requests.is_empty());
        assert_eq!(fold.turn, TurnState::Unknown);
    }

    /// MGD-2: a reply that loads the agent's thread under another session loses the evidence
    /// and leaves the thread unloaded; under its own session it loads it.
    #[test]
    fn mgd_2_the_agents_thread_under_another_session_is_not_loaded() {
        let reply = |session: &str| serde_json::to_vec(&serde_json::json!({"id": "r", "result": {"thread": {"id": "t1", "sessionId": session, "status": {"type": "idle"}}}})).unwrap();
        let mut fold = Fold::expecting("t1", &SessionId("s1".into()));
        let events = fold.line(&reply("other-session"), 100);
        assert!(matches!(events.as_slice(), [ObserverEvent::SessionLost { .. }]), "{events:?}");
        assert!(!fold.loaded && fold.turn == TurnState::Unknown);
        assert!(fold.line(&reply("s1"), 200).is_empty());
        assert!(fold.loaded, "its own session loads it");
        let mut unchecked = Fold::new("t1");
        unchecked.line(&reply("anything"), 100);
        assert!(unchecked.loaded);
    }

    #[test]
    fn requests_are_single_json_lines() {
        let bytes = wakterm_engine::prompt::managed_turn_start("thread-a", "wakterm-r-1", "two\nlines \"quoted\"");
        // MGD-6: on its own line, after `#` and a newline, the one JSON object and a newline.
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 2);
        assert!(bytes.starts_with(b"#\n{") && bytes.ends_with(b"}\n"));
        let value: Value = serde_json::from_slice(&bytes[2..]).unwrap();
        assert_eq!(value["params"]["input"][0]["text"], "two\nlines \"quoted\"");
        assert_eq!(value["id"], "wakterm-r-1");
        assert_eq!(reply_to(br#"{"id":"r-1","result":{"turn":{"id":"t"}}}"#, "r-1"), Some(Reply::Result(json!({"turn":{"id":"t"}}))));
        assert_eq!(reply_to(br#"{"id":"r-2","result":{}}"#, "r-1"), None);
        for request in [initialize("a"), initialized(), thread_start("b", "/w"), thread_resume("c", "t", "/w"), turn_interrupt("d", "t", "u")] {
            assert_eq!(request.iter().filter(|b| **b == b'\n').count(), 1);
            assert!(request.ends_with(b"\n"));
        }
    }

    /// MGD-7: an error reply to a request with a string id is its refusal, the code and message
    /// kept (bounded, cut on a character boundary); a result, a numeric id or a server request
    /// is not one.
    #[test]
    fn mgd_7_error_replies_are_refusals() {
        let mut fold = Fold::new("thread-a");
        let long = "é".repeat(200);
        let refused = fold.line(json!({"id": "wakterm-r-1-00", "error": {"code": -32603, "message": long}}).to_string().as_bytes(), 10);
        let [ObserverEvent::RequestRefused { id, error, position, .. }] = refused.as_slice() else { panic!("{refused:?}") };
        assert_eq!((id.as_str(), *position), ("wakterm-r-1-00", 10));
        assert!(error.starts_with("-32603: éé") && error.len() <= MAX_REFUSAL_ERROR_BYTES, "{error}");
        for line in [
            json!({"id": "wakterm-r-1-00", "result": {"turn": {"id": "t"}}}),
            json!({"id": 7, "error": {"code": -32600, "message": "no"}}),
            json!({"id": "srv-1", "method": "item/commandExecution/requestApproval", "params": {"threadId": "thread-a"}}),
        ] {
            let events = fold.line(line.to_string().as_bytes(), 20);
            assert!(!events.iter().any(|e| matches!(e, ObserverEvent::RequestRefused { .. })), "{line}: {events:?}");
        }
        assert_eq!(fold.turn, TurnState::Idle { last_completed: None }, "a refusal changes no turn state");
    }

    /// MGD-7: an id answered with a result is answered once: an error reply under it later is
    /// another request sent under the id (a holder-socket client that read it from the result),
    /// no refusal, until the next `turn/started` (the engine's turn evidence covers it then);
    /// past `MAX_ANSWERED_IDS` answered ids, no error reply is a refusal until then.
    #[test]
    fn mgd_7_an_answered_id_is_never_refused() {
        let refusals = |fold: &mut Fold, id: &str, position: u64| {
            let error = json!({"id": id, "error": {"code": -32600, "message": "thread not found: bogus"}});
            fold.line(error.to_string().as_bytes(), position).iter().filter(|e| matches!(e, ObserverEvent::RequestRefused { .. })).count()
        };
        let mut fold = Fold::new("thread-a");
        fold.line(json!({"id": "wakterm-r-1-00", "result": {"turn": {"id": "t1"}}}).to_string().as_bytes(), 10);
        assert_eq!(refusals(&mut fold, "wakterm-r-1-00", 20), 0, "a forged request under an answered id");
        assert_eq!(refusals(&mut fold, "wakterm-r-2-00", 30), 1, "an id never answered");
        fold.line(json!({"method": "turn/started", "params": {"threadId": "thread-a", "turn": {"id": "t1"}}}).to_string().as_bytes(), 40);
        assert_eq!(refusals(&mut fold, "wakterm-r-1-00", 50), 1, "after a turn start the engine's evidence decides");
        for n in 0..=MAX_ANSWERED_IDS {
            fold.line(json!({"id": format!("flood-{n}"), "result": {}}).to_string().as_bytes(), 60 + n as u64);
        }
        assert_eq!(refusals(&mut fold, "wakterm-r-3-00", 500), 0, "past the bound nothing is known");
        assert!(fold.answered_ids.len() <= MAX_ANSWERED_IDS);
    }

    /// MGD-7: the real 0.169's refusals (an unknown thread, an input too large) fold into one
    /// refusal each, under the request's id with the server's code and message; the request it
    /// accepted with empty input and the turn after them are no refusals.
    #[test]
    fn mgd_7_the_real_refusals_fold_into_refusals() {
        let (_, events) = fold_all("refused-turn.jsonl");
        let refusals: Vec<(&str, &str)> = events
            .iter()
            .filter_map(|e| match e {
                ObserverEvent::RequestRefused { id, error, .. } => Some((id.as_str(), error.as_str())),
                _ => None,
            })
            .collect();
        assert_eq!(refusals.len(), 2, "{refusals:?}");
        assert_eq!(refusals[0].0, "refused-unknown-thread");
        assert!(refusals[0].1.starts_with("-32600: thread not found"), "{refusals:?}");
        assert_eq!(refusals[1].0, "refused-huge-input");
        assert!(refusals[1].1.starts_with("-32602: Input exceeds the maximum length"), "{refusals:?}");
    }

    /// MGD-4: the re-proof asks for the thread without its turns (a long thread's full reply
    /// passed the line bound: every re-proof was one more loss), and names the agent's thread.
    #[test]
    fn mgd_4_the_reproof_asks_without_turns() {
        let value: Value = serde_json::from_slice(&thread_resume("c", "thread-a", "/w")).unwrap();
        assert_eq!(value["method"], "thread/resume");
        assert_eq!(value["params"]["threadId"], "thread-a");
        assert_eq!(value["params"]["excludeTurns"], true);
    }
}
