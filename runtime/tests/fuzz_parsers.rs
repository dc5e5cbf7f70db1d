//! Fuzz targets (issue 8) for the parsers that read untrusted bytes, as bounded proptest runs
//! over the seed corpus in `fuzz/corpus/<target>/` (see `fuzz_support`): the control-socket
//! request line, the Codex rollout line, the rollout tail and the observer over it, the
//! `agent output` cursor, the prompt validator, the app-server line and stream, and the MCP
//! server's message line. The holder protocol's target is in
//! `holder::protocol`'s unit tests (its line reader is crate-private). Each target replays its
//! corpus, then runs arbitrary and mutated inputs, and checks that the parser never panics,
//! stays within its bounds, and keeps its contract.

mod fuzz_support;

use fuzz_support::{config, input, replay, seeds, timed};
use proptest::prelude::*;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::PathBuf;
use wakterm_engine::limits::MAX_PROMPT_BYTES;
use wakterm_engine::prompt::{admission_bytes, normal_form, prompt_hash, validate_prompt, PasteMode, PromptError};
use wakterm_engine::{Incarnation, ObserverEvent};
use wakterm_runtime::observer::{probe_to_engine, CodexObserver};
use wakterm_runtime::output_page::{answer, AgentView, Budgets, CursorKey, Observed, OUTPUT_SCHEMA};
use wakterm_runtime::proc_probe::ProcessIdentity;
use wakterm_runtime::protocol::{
    exit, frame_request_line, parse_request_line, ClientRequest, MAX_REQUEST_ERROR_OVERHEAD_BYTES, MAX_REQUEST_LINE_BYTES,
};
use wakterm_runtime::rollout::{parse_line, PromptDeduper, RecordError, RolloutRecord, MAX_KIND_LABEL_BYTES, MAX_RECORD_TEXT_BYTES};
use wakterm_runtime::rollout_tail::RolloutTail;

// ---------------------------------------------------------------- control socket request line

/// The daemon reads the first line of a connection (`frame_request_line`) and parses it
/// (`parse_request_line`): a request that round-trips, or a `bad_request` reply of bounded size.
fn check_control_request(received: &[u8]) {
    let line = frame_request_line(received);
    assert!(line.len() <= MAX_REQUEST_LINE_BYTES);
    assert!(line.iter().position(|&b| b == b'\n').is_none_or(|at| at == line.len() - 1), "one line at most");
    assert!(received.starts_with(line));
    match timed(|| parse_request_line(line)) {
        Ok(request) => {
            assert_eq!(line.last(), Some(&b'\n'));
            let json = serde_json::to_value(&request).expect("a request serialises");
            let again: ClientRequest = serde_json::from_value(json.clone()).expect("and parses back");
            assert_eq!(serde_json::to_value(&again).unwrap(), json, "round trip");
        }
        Err(reply) => {
            assert_eq!(reply.exit_code, exit::USAGE);
            assert_eq!(reply.body["error"], "bad_request");
            let message = reply.body["message"].as_str().expect("a message");
            assert!(message.len() <= line.len() + MAX_REQUEST_ERROR_OVERHEAD_BYTES, "{} byte message", message.len());
            serde_json::to_string(&reply).expect("a reply serialises");
        }
    }
}

#[test]
fn fuzz_control_request_line() {
    replay("control_request", check_control_request);
    let huge = [MAX_REQUEST_LINE_BYTES - 64, MAX_REQUEST_LINE_BYTES + 1, 70_000];
    proptest!(config(512), |(bytes in input(seeds("control_request"), &huge))| check_control_request(&bytes));
}

// ------------------------------------------------------------------------------ rollout lines

fn check_record(record: &RolloutRecord) {
    match record {
        RolloutRecord::UserMessage { text, .. } | RolloutRecord::AgentMessage { text, .. } => {
            assert!(text.len() <= MAX_RECORD_TEXT_BYTES);
        }
        RolloutRecord::TurnComplete { last_agent_message, .. } => {
            assert!(last_agent_message.as_ref().is_none_or(|t| t.len() <= MAX_RECORD_TEXT_BYTES));
        }
        RolloutRecord::Other { kind } => assert!(kind.len() <= MAX_KIND_LABEL_BYTES),
        // EV-11: bounded by the line (the tail's limit); RF-9 decides what the stream carries.
        RolloutRecord::PlanUpdated { .. } => {}
        RolloutRecord::SessionMeta { .. } | RolloutRecord::TurnStarted { .. } | RolloutRecord::TurnAborted { .. } => {}
    }
}

/// `parse_line` is total: a record within the text bounds, or a structured error whose text
/// never quotes the line (it carries only known kinds, field names and serde's position).
fn check_rollout_line(line: &[u8]) {
    match timed(|| parse_line(line)) {
        Ok(record) => check_record(&record),
        Err(RecordError::LineTooLong { .. }) => panic!("only the tail reports LineTooLong"),
        Err(error) => assert!(error.to_string().len() <= 256, "{error}"),
    }
}

/// MGD-3: the fold of one untrusted app-server output line (what a managed agent's process
/// prints) never panics, and every event it makes sits at the position it was given and names
/// the watched thread (a line about another thread makes a loss, never its events).
fn check_app_server_line(bytes: &[u8]) {
    let thread = "00000000-0000-4000-8000-000000000002";
    let mut fold = wakterm_runtime::app_server::Fold::new(thread);
    for event in timed(|| fold.line(bytes, 4242)) {
        if let Some(position) = event.position() {
            assert_eq!(position, 4242);
        }
        if let Some(session) = event.session() {
            assert_eq!(session.0, thread);
        }
    }
}

/// MCP-6: a message line `wakterm mcp` reads passes as it is, is dropped or becomes the refusal
/// call, and only when it is a JSON object with a key twice; and what passes as it is holds no
/// object with a key twice as the SDK reads the line (rmcp 1.8 drops a leading UTF-8 BOM: a
/// BOM hid the keys from the first version of the screen, a review).
fn check_mcp_line(bytes: &[u8]) {
    use wakterm_runtime::mcp::{has_duplicate_keys, screen_line, DUPLICATE_KEY_METHOD};
    let sdk_view = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    match timed(|| screen_line(bytes)) {
        Some(out) if out == bytes => {
            let object = serde_json::from_slice::<Value>(sdk_view).is_ok_and(|v| v.is_object());
            assert!(!(object && has_duplicate_keys(sdk_view)), "passed with a key twice: {}", String::from_utf8_lossy(bytes));
        }
        screened => {
            let parsed: Value = serde_json::from_slice(sdk_view).expect("only a line that parses is screened");
            assert!(parsed.is_object(), "{parsed}");
            if let Some(out) = screened {
                let refusal: Value = serde_json::from_slice(&out).expect("the refusal is JSON");
                assert_eq!(refusal["method"], DUPLICATE_KEY_METHOD);
                assert_eq!(refusal["id"], parsed["id"], "answered under the request's own id");
            }
        }
    }
}

/// MCP-7: the screen answers a line itself exactly when it is a request (a JSON object with a
/// method) whose id the SDK cannot take (no string, no 64-bit signed integer), with Invalid
/// Request under id null.
fn check_mcp_invalid_id(bytes: &[u8]) {
    use wakterm_runtime::mcp::invalid_id_answer;
    let sdk_view = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let parsed = serde_json::from_slice::<Value>(sdk_view).ok();
    let id = parsed.as_ref().filter(|v| v.get("method").is_some()).and_then(|v| v.as_object()?.get("id"));
    let untakable = id.is_some_and(|id| !id.is_string() && !id.is_i64());
    match timed(|| invalid_id_answer(bytes)) {
        Some(answer) => {
            assert!(untakable, "answered a line the SDK takes: {}", String::from_utf8_lossy(bytes));
            let answer: Value = serde_json::from_slice(&answer).expect("the answer is JSON");
            assert!(answer["id"].is_null() && answer["error"]["code"] == -32600, "{answer}");
        }
        None => assert!(!untakable, "left unanswered: {}", String::from_utf8_lossy(bytes)),
    }
}

/// MCP-7: the screen's own answers (`own_answer`) are one JSON-RPC error each, under the id
/// the line's request carried when it is readable (else null), and never to a response or a
/// notification; a line it answers is never handed on.
fn check_mcp_own_answer(bytes: &[u8]) {
    use wakterm_runtime::mcp::own_answer;
    let sdk_view = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let parsed = serde_json::from_slice::<Value>(sdk_view).ok();
    for initialized in [false, true] {
        let Some(answer) = timed(|| own_answer(bytes, initialized)) else { continue };
        let answer: Value = serde_json::from_slice(&answer).expect("the answer is JSON");
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert!(answer["error"]["code"].as_i64().is_some_and(|code| [-32700, -32600, -32602].contains(&code)), "{answer}");
        match &parsed {
            None => assert!(answer["id"].is_null(), "a parse error is under id null: {answer}"),
            Some(batch) if batch.is_array() => assert!(answer["id"].is_null(), "a batch is refused under id null: {answer}"),
            Some(message) => {
                assert!(message.get("result").is_none() && message.get("error").is_none(), "a response is never answered");
                assert_eq!(Some(&answer["id"]), message.get("id"), "under the request's own id: {answer}");
            }
        }
    }
}

/// MCP-7: a line the SDK cannot read is answered under id null or its request's own readable
/// id, or dropped only when it is an id-less notification or a response; one it reads is left
/// to it.
fn check_mcp_unreadable(bytes: &[u8]) {
    use wakterm_runtime::mcp::{unreadable, Unreadable};
    let sdk_view = bytes.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(bytes);
    let sdk_reads = serde_json::from_slice::<rmcp::model::ClientJsonRpcMessage>(sdk_view).is_ok();
    let parsed = serde_json::from_slice::<Value>(sdk_view).ok();
    match timed(|| unreadable(bytes)) {
        None => assert!(sdk_reads || parsed.is_none() || parsed.as_ref().and_then(|m| m.get("id")).is_some_and(|id| !id.is_string() && !id.is_i64()), "an unreadable line left to the SDK"),
        Some(Unreadable::Dropped) => {
            let message = parsed.expect("JSON");
            let response = message.get("result").is_some() || message.get("error").is_some();
            assert!(!sdk_reads && (response || message.get("id").is_none()), "only an id-less notification or a response is dropped: {message}");
        }
        Some(Unreadable::Answer(answer)) => {
            let answer: Value = serde_json::from_slice(&answer).expect("the answer is JSON");
            assert!(!sdk_reads, "a line the SDK reads is its own");
            let message = parsed.expect("JSON (what does not parse is own_answer's)");
            let id = message.get("id").cloned().unwrap_or(Value::Null);
            assert_eq!(answer["id"], id, "under the request's own id, or null: {answer}");
            let code = answer["error"]["code"].as_i64();
            let notification = message.is_object()
                && message.get("id").is_none()
                && message["jsonrpc"] == "2.0"
                && message["method"].is_string()
                && message.get("params").is_none_or(|p| p.is_object() || p.is_array());
            assert!(!notification, "a well-formed notification is never answered: {message}");
            // Invalid params only for a well-formed request: a readable id, "2.0", a method.
            let request = message["jsonrpc"] == "2.0" && message["method"].is_string() && !id.is_null();
            assert!(code == Some(-32600) || (code == Some(-32602) && request), "{answer} for {message}");
        }
    }
}

#[test]
fn fuzz_mcp_line() {
    replay("mcp_line", check_mcp_line);
    replay("mcp_line", check_mcp_invalid_id);
    replay("mcp_line", check_mcp_own_answer);
    replay("mcp_line", check_mcp_unreadable);
    proptest!(config(1024), |(bytes in input(seeds("mcp_line"), &[4_000, 300]))| check_mcp_unreadable(&bytes));
    proptest!(config(1024), |(bytes in input(seeds("mcp_line"), &[4_000, 300]))| check_mcp_own_answer(&bytes));
    proptest!(config(1024), |(bytes in input(seeds("mcp_line"), &[4_000, 300]))| check_mcp_invalid_id(&bytes));
    proptest!(config(1024), |(bytes in input(seeds("mcp_line"), &[4_000, 300]))| check_mcp_line(&bytes));
}

#[test]
fn fuzz_app_server_line() {
    replay("app_server_line", check_app_server_line);
    proptest!(config(1024), |(bytes in input(seeds("app_server_line"), &[70_000, 300]))| check_app_server_line(&bytes));
}

/// MGD-4: the stream follower over untrusted app-server output (one copy of the paging rules,
/// `app_server_stream`), pushed into a small holder ring so eviction happens, read in small
/// pages from a process start, with or without a resume cursor anywhere before the end (also
/// in an earlier process's output): never panics, never refuses a page the ring gives, never
/// reports an event past what was read or before the process's start, and every event names
/// the watched thread.
fn check_app_server_stream(bytes: &[u8], capacity: usize, page: usize, start: usize, cursor: Option<usize>) {
    use wakterm_runtime::app_server_stream::{Page, PlainFold, StreamFollower};
    let thread = "00000000-0000-4000-8000-000000000002";
    let session = wakterm_engine::SessionId(thread.to_string());
    let mut ring = wakterm_runtime::holder::OutputRing::new(capacity);
    let start = start.min(bytes.len()) as u64;
    ring.push(&bytes[..start as usize]);
    ring.push(&bytes[start as usize..]);
    let mut follower = StreamFollower::new(thread, session.clone(), start, PlainFold, 512);
    let mut events = Vec::new();
    if let Some(cursor) = cursor {
        let cursor = wakterm_engine::Cursor { session, position: (cursor as u64).min(ring.end()) };
        assert!(follower.resume(&cursor, &mut events));
    }
    for _ in 0..=bytes.len() + 1 {
        let slice = ring.read(follower.next_offset(), page).expect("an offset the follower asks for is in the stream");
        let view = Page { data: &slice.data, start: slice.start, end: slice.end, truncated: slice.truncated };
        timed(|| follower.page(view, &mut events)).expect("the ring's pages continue the stream");
        if slice.data.is_empty() {
            break;
        }
    }
    assert_eq!(follower.next_offset(), ring.end(), "read to the end");
    for event in &events {
        if let Some(position) = event.position() {
            assert!(position <= ring.end(), "{event:?}");
            let resumed_at = cursor.map(|c| c as u64);
            assert!(position >= start || Some(position) == resumed_at, "{event:?} before the process's start {start}");
        }
        if let Some(session) = event.session() {
            assert_eq!(session.0, thread);
        }
    }
}

#[test]
fn fuzz_app_server_stream() {
    let corpus: Vec<u8> = seeds("app_server_line").into_iter().flat_map(|mut s| {
        s.push(b'\n');
        s
    }).collect();
    check_app_server_stream(&corpus, 4096, 97, corpus.len() / 3, Some(corpus.len() / 5));
    check_app_server_stream(&corpus, 1 << 20, 4096, 0, None);
    proptest!(config(256), |(bytes in input(seeds("app_server_line"), &[3_000, 300]), capacity in 16usize..2048, page in 1usize..700, start in 0usize..3_000, cursor in proptest::option::of(0usize..3_000))| {
        check_app_server_stream(&bytes, capacity, page, start, cursor)
    });
}

#[test]
fn fuzz_rollout_line() {
    replay("rollout_line", check_rollout_line);
    proptest!(config(1024), |(bytes in input(seeds("rollout_line"), &[70_000, 300]))| check_rollout_line(&bytes));
}

/// The tail over a file of these bytes, in small pages: every complete line once, in order,
/// contiguous, hashed and parsed exactly as `parse_line` plus the deduper; a partial last line
/// is never consumed; the tail ends just past the last newline.
fn check_rollout_tail(bytes: &[u8], max_records: usize, max_bytes: usize) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rollout-2026-11-30T10-00-00-s.jsonl");
    std::fs::File::create(&path).and_then(|mut f| f.write_all(bytes)).expect("write rollout");
    let mut tail = RolloutTail::open(&path).expect("open").with_line_hashes();
    let mut deduper = PromptDeduper::default();
    let mut offset = 0u64;
    for _ in 0..=bytes.len() + 1 {
        let page = timed(|| tail.read_page(max_records, max_bytes)).expect("an intact file reads");
        assert!(page.entries.len() <= max_records);
        for entry in &page.entries {
            assert_eq!(entry.offset, offset, "contiguous");
            let line = &bytes[entry.offset as usize..entry.end as usize - 1];
            assert_eq!(bytes[entry.end as usize - 1], b'\n');
            assert!(!line.contains(&b'\n'));
            assert_eq!(entry.content_hash, Some(<[u8; 32]>::from(Sha256::digest(line))));
            assert_eq!(entry.record, parse_line(line).map(|r| deduper.filter(r)));
            offset = entry.end;
        }
        assert_eq!(page.next_offset, offset);
        if !page.has_more {
            let last_newline = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |at| at as u64 + 1);
            assert_eq!(offset, last_newline, "every complete line and nothing else");
            return;
        }
    }
    panic!("the tail did not finish a {}-byte file", bytes.len());
}

#[test]
fn fuzz_rollout_tail() {
    let whole: Vec<u8> = seeds("rollout_line").concat();
    check_rollout_tail(&whole, 3, 200);
    replay("rollout_line", |bytes| check_rollout_tail(bytes, 1, 1));
    let strategy = (input(seeds("rollout_line"), &[70_000, 300]), 1usize..8, 1usize..4096);
    proptest!(config(256), |((bytes, records, max_bytes) in strategy)| check_rollout_tail(&bytes, records, max_bytes));
}

/// The observer over a rollout of these bytes (after a valid `session_meta`), appended in
/// chunks of `chunk` bytes and polled after each: it never panics (its ordering assertions
/// hold), positions strictly increase, and its snapshot never claims more than it read.
fn check_rollout_observer(bytes: &[u8], chunk: usize) {
    let home = tempfile::tempdir().expect("tempdir");
    let day = home.path().join("sessions/2026/11/30");
    std::fs::create_dir_all(&day).expect("sessions dir");
    // This test process is the Codex: it holds the rollout open for writing.
    let mut rollout = std::fs::File::create(day.join("rollout-2026-11-30T10-00-00-s.jsonl")).expect("rollout");
    let meta = b"{\"type\":\"session_meta\",\"payload\":{\"id\":\"s\",\"cwd\":\"/w\"}}\n";
    rollout.write_all(meta).unwrap();
    let me = probe_to_engine(wakterm_runtime::proc_probe::identity(std::process::id()).expect("own identity"));
    let mut observer = CodexObserver::new(home.path().into(), None, me, Incarnation("i".into()));
    let mut last = None;
    let mut written = meta.len();
    for piece in bytes.chunks(chunk.max(1)).chain(std::iter::once(&[][..])) {
        rollout.write_all(piece).unwrap();
        written += piece.len();
        let refresh = timed(|| observer.refresh(None));
        for position in refresh.events.iter().filter_map(ObserverEvent::position) {
            assert!(last.is_none_or(|last| position > last), "{:?}", refresh.events);
            last = Some(position);
        }
        assert!(refresh.snapshot.position <= written as u64, "never past what was written");
    }
}

#[test]
fn fuzz_rollout_observer() {
    let whole: Vec<u8> = seeds("rollout_line").concat();
    check_rollout_observer(&whole, 97);
    replay("rollout_line", |bytes| check_rollout_observer(bytes, 7));
    let strategy = (input(seeds("rollout_line"), &[70_000, 300]), 1usize..2048);
    proptest!(config(48), |((bytes, chunk) in strategy)| check_rollout_observer(&bytes, chunk));
}

// ----------------------------------------------------------------------------- output cursor

const AGENT: &str = "00000000-0000-4000-8000-0000000000a1";
const SESSION: &str = "00000000-0000-4000-8000-000000000050";

/// One Codex agent with a real rollout, and the cursors this daemon issued for it.
struct CursorWorld {
    _dir: tempfile::TempDir,
    path: PathBuf,
    key: CursorKey,
    agent: AgentView,
    issued: Vec<String>,
}

impl CursorWorld {
    fn new() -> CursorWorld {
        let fixture = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169/two-turns.jsonl");
        let lines: Vec<String> = std::fs::read_to_string(fixture).expect("fixture").lines().map(|l| format!("{l}\n")).collect();
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rollout-2026-11-30T10-00-00-s.jsonl");
        std::fs::write(&path, lines[..14].concat()).expect("write");
        let agent = AgentView {
            agent_id: AGENT.into(),
            harness: "codex".into(),
            incarnation: Some("100.200".into()),
            process: Some(ProcessIdentity { pid: 100, start_time_ticks: 200 }),
            codex_home: dir.path().into(),
            cwd: dir.path().into(),
            liveness_unknown: false,
        };
        let mut world = CursorWorld { _dir: dir, path, key: CursorKey::from_bytes([7; 32]), agent, issued: Vec::new() };
        let baseline = world.read(None).body["next_cursor"].as_str().expect("baseline").to_string();
        std::fs::OpenOptions::new().append(true).open(&world.path).unwrap().write_all(lines[14..].concat().as_bytes()).unwrap();
        let page = world.read(Some(&baseline)).body["next_cursor"].as_str().expect("page").to_string();
        world.issued = vec![baseline, page];
        world
    }

    fn read(&self, after: Option<&str>) -> wakterm_runtime::protocol::Reply {
        let observed = Observed::Session { provider_session: SESSION.into(), path: self.path.clone() };
        timed(|| answer(&self.key, &self.agent, after, Budgets::default(), move |_| observed))
    }
}

/// OUT-3 under attack: a cursor this daemon issued reads `ok`; anything else, however close
/// to one, is `cursor_invalid` with a known reason, a gap and no `next_cursor`.
fn check_output_cursor(world: &CursorWorld, bytes: &[u8]) {
    let token = String::from_utf8_lossy(bytes);
    let reply = world.read(Some(&token));
    let body = &reply.body;
    assert_eq!(body["schema"], OUTPUT_SCHEMA);
    if world.issued.iter().any(|t| *t == token) {
        assert_eq!(body["state"], "ok", "{body}");
        return;
    }
    assert_eq!(reply.exit_code, exit::REJECTED, "{body}");
    assert_eq!(body["state"], "cursor_invalid", "{token:?}: {body}");
    let reasons = ["cursor_malformed", "cursor_forged", "cursor_version_unsupported"];
    assert!(reasons.contains(&body["reason"].as_str().unwrap_or_default()), "{body}");
    assert_eq!(body["gap"], true);
    assert!(body.get("next_cursor").is_none());
    assert!(body["events"].as_array().is_some_and(Vec::is_empty));
    assert!(!body.to_string().contains(SESSION), "the provider's session id never shows");
}

#[test]
fn fuzz_output_cursor() {
    let world = CursorWorld::new();
    for token in &world.issued {
        check_output_cursor(&world, token.as_bytes());
    }
    replay("output_cursor", |bytes| check_output_cursor(&world, bytes));
    let mut all = seeds("output_cursor");
    all.extend(world.issued.iter().map(|t| t.as_bytes().to_vec()));
    proptest!(config(512), |(bytes in input(all.clone(), &[2100, 40]))| check_output_cursor(&world, &bytes));
}

// --------------------------------------------------------------------------- prompt validator

/// INP-1 and ADM-8 for any text: accepted prompts are non-empty after trimming, within the
/// byte limit, free of controls but tab and newline, and cannot end the bracketed paste;
/// refusals name the first offending character exactly.
fn check_prompt(bytes: &[u8]) {
    let prompt = String::from_utf8_lossy(bytes);
    let first_control = prompt.char_indices().find(|(_, c)| c.is_control() && *c != '\t' && *c != '\n');
    match timed(|| validate_prompt(&prompt)) {
        Ok(()) => {
            assert!(prompt.len() <= MAX_PROMPT_BYTES);
            assert!(first_control.is_none());
            assert!(!normal_form(&prompt).is_empty());
            let written = admission_bytes(&prompt, PasteMode::Bracketed);
            let inner = &written[b"\x15\x1b[200~".len()..written.len() - b"\x1b[201~\r".len()];
            assert_eq!(inner, prompt.as_bytes());
            assert!(!inner.contains(&0x1b) && !inner.contains(&b'\r'));
            assert_eq!(prompt_hash(&prompt).len(), 64);
        }
        Err(PromptError::TooLarge { bytes }) => assert!(bytes == prompt.len() && bytes > MAX_PROMPT_BYTES),
        Err(PromptError::ControlCharacter { offset, code_point }) => {
            assert!(prompt.len() <= MAX_PROMPT_BYTES);
            assert_eq!(first_control.map(|(at, c)| (at, c as u32)), Some((offset, code_point)));
        }
        Err(PromptError::Empty) => {
            assert!(first_control.is_none());
            assert!(normal_form(&prompt).is_empty());
        }
    }
    if let Err(error) = validate_prompt(&prompt) {
        assert!(["prompt_empty", "prompt_too_large", "prompt_control_character"].contains(&error.reason()));
        assert!(error.detail().len() <= 128);
    }
}

#[test]
fn fuzz_prompt_validator() {
    replay("prompt", check_prompt);
    let huge = [MAX_PROMPT_BYTES, MAX_PROMPT_BYTES + 1, 4096];
    proptest!(config(1024), |(bytes in input(seeds("prompt"), &huge))| check_prompt(&bytes));
}

/// The corpus is what it says: every target has seeds, and the valid control requests parse.
#[test]
fn fuzz_corpus_seeds_are_meaningful() {
    let valid = fuzz_support::corpus("control_request")
        .into_iter()
        .filter(|seed| parse_request_line(frame_request_line(&seed.bytes)).is_ok())
        .count();
    assert!(valid >= 15, "{valid} valid control requests in the corpus");
    for target in ["holder_request", "rollout_line", "output_cursor", "prompt"] {
        assert!(!seeds(target).is_empty());
    }
    let parsed: Vec<Value> = seeds("rollout_line").iter().filter_map(|s| serde_json::from_slice(s).ok()).collect();
    assert!(parsed.len() >= 15);
}
