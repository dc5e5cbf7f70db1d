//! OUT: the experimental agent output shadow page (seed 002, SPEC.md "OUT").
//!
//! `wakterm agent output TARGET [--after CURSOR]` returns the Codex assistant messages the
//! agent's provider appended to its rollout since the caller's cursor, normalised, under the
//! schema [`OUTPUT_SCHEMA`]. It is a side-effect-free shadow reader (OUT-8): it opens its own
//! [`RolloutTail`] on the rollout the exact process incarnation holds open for writing
//! ([`proc_probe::discover_rollout_exact`], the observer's discovery rule), never touches the
//! agent's live observer, and keeps no state of its own apart from one cursor key per data
//! directory. The daemon runs [`read_output`] on a blocking thread, never on the reactor.
//!
//! The cursor (OUT-3, codec in `output_cursor`) is `wko2.<base64url(nonce || XChaCha20-Poly1305(state))>`: the state
//! names the agent, the process incarnation, the provider session id, the rollout's (dev, ino),
//! the byte offset after the last consumed complete record and the tail's content checkpoint.
//! It is sealed (encrypted and authenticated) under a key derived from the 32-byte key created
//! once per data directory ([`CURSOR_KEY_FILE`], 0600), so it is opaque in fact (none of the
//! provider's identifiers, the inode or the offset can be read from it) and unforgeable. Only a
//! cursor this data directory's daemon issued is ever resumed, so no read happens at an
//! attacker-chosen offset.

use crate::output_cursor::*;
pub use crate::output_cursor::{CursorKey, CursorProblem, CURSOR_KEY_BYTES, CURSOR_KEY_FILE, MAX_CURSOR_CHARS};
use crate::proc_probe::{self, Discovery};
use crate::protocol::{exit, Reply};
use crate::rollout::{RecordError, RolloutRecord};
use crate::rollout_tail::{RolloutTail, TailEntry, TailError};
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use wakterm_engine::limits::{echoed_field, no_agent_named};
use wakterm_engine::observer::RECORD_TOO_LARGE;

/// The schema of every answer (success and structured non-success alike).
pub const OUTPUT_SCHEMA: &str = "wakterm.agent-output-shadow.experimental.v1";
/// OUT-6: records (rollout lines) consumed by one page at most.
pub const OUTPUT_PAGE_MAX_RECORDS: usize = 256;
/// OUT-6: bytes consumed by one page at most (the first line of a page always comes whole).
pub const OUTPUT_PAGE_MAX_BYTES: usize = 1024 * 1024;
/// The record and byte budget of one page (OUT-6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budgets {
    pub max_records: usize,
    pub max_bytes: usize,
}

impl Default for Budgets {
    fn default() -> Self {
        Budgets { max_records: OUTPUT_PAGE_MAX_RECORDS, max_bytes: OUTPUT_PAGE_MAX_BYTES }
    }
}

/// What the daemon knows about the agent (copied out of its runtime record).
#[derive(Clone, Debug)]
pub struct AgentView {
    pub agent_id: String,
    pub harness: String,
    /// The confirmed process incarnation, None when no process runs.
    pub incarnation: Option<String>,
    pub process: Option<proc_probe::ProcessIdentity>,
    pub codex_home: PathBuf,
    pub cwd: PathBuf,
    /// LIVE-1: no answer of the agent's holder was applied since the daemon started (a holder
    /// unreachable through the start, held): no process known is no evidence that none runs.
    pub liveness_unknown: bool,
}

/// LIVE-1: what the catalog and the output page say of an agent whose holder has not answered
/// since the daemon started.
pub const LIVENESS_UNKNOWN: &str = "the agent's holder has not answered since the daemon started: whether its process runs is unknown";

impl AgentView {
    /// OUT-7: why no process can be read: none runs, or whether one runs is unknown (LIVE-1:
    /// a held agent was said `agent_not_running` while its process ran, a hostile run).
    fn no_process(&self) -> (&'static str, &'static str) {
        match self.liveness_unknown {
            true => ("liveness_unknown", LIVENESS_UNKNOWN),
            false => ("agent_not_running", "the agent has no running process"),
        }
    }
}

/// The provider session the agent's exact process holds open, or why there is none.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observed {
    Session { provider_session: String, path: PathBuf },
    Unavailable { reason: String, detail: String },
}

impl Observed {
    fn unavailable(reason: &str, detail: impl Into<String>) -> Observed {
        Observed::Unavailable { reason: reason.into(), detail: detail.into() }
    }
}

/// The observer's discovery rule (CORR-3), read-only: the one rollout the exact process tree
/// holds open for writing, its session_meta cwd matching the agent's. Details never name paths.
pub fn discover(agent: &AgentView) -> Observed {
    let Some(process) = agent.process else {
        let (reason, detail) = agent.no_process();
        return Observed::unavailable(reason, detail);
    };
    match proc_probe::discover_rollout_exact(process, &agent.codex_home, Some(&agent.cwd)) {
        Discovery::Found { path, session_id, .. } => Observed::Session { provider_session: session_id, path },
        Discovery::ProcessGone => Observed::unavailable("process_gone", "the agent's process exited or changed"),
        Discovery::NoneOpen => Observed::unavailable(
            "no_rollout_open",
            "the agent's process tree holds no Codex rollout open for writing (no turn started yet?)",
        ),
        Discovery::Ambiguous { paths } => Observed::unavailable(
            "several_rollouts_open",
            format!("the agent's process tree holds {} Codex rollouts open; refusing to guess", paths.len()),
        ),
        Discovery::CwdMismatch { .. } => Observed::unavailable(
            "rollout_cwd_mismatch",
            "the open rollout belongs to a session in another working directory",
        ),
        Discovery::Mislabelled { .. } => Observed::unavailable(
            "rollout_mislabelled",
            "the open rollout's first record names another session than its file name: it was rewritten",
        ),
        Discovery::Incomplete { .. } => Observed::unavailable(
            "discovery_incomplete",
            "the agent's open files or the rollout's session_meta could not be read yet",
        ),
    }
}

/// The daemon's entry point (blocking: call it from `spawn_blocking`).
pub fn read_output(data_dir: &Path, agent: &AgentView, after: Option<&str>) -> Reply {
    let key = match CursorKey::load_or_create(data_dir) {
        Ok(key) => key,
        Err(error) => {
            let mut body = base("error", &agent.agent_id);
            body.insert("reason".into(), json!("cursor_key_unavailable"));
            body.insert("detail".into(), json!(error.to_string()));
            return Reply { exit_code: exit::ERROR, body: Value::Object(body) };
        }
    };
    answer(&key, agent, after, Budgets::default(), discover)
}

/// OUT-7: the answer for a target no agent matches (exit 6).
pub fn agent_unknown(target: &str) -> Reply {
    let body = json!({
        "schema": OUTPUT_SCHEMA,
        "state": "agent_unknown",
        "target": echoed_field(target),
        "reason": "agent_unknown",
        "detail": no_agent_named(target),
    });
    Reply { exit_code: exit::NOT_FOUND, body }
}

/// OUT-1, INP-4: the answer for a target that cannot name an agent (exit 2, nothing read), in
/// the page's schema as every answer of it.
pub fn target_malformed(target: &str, detail: &str) -> Reply {
    let body = json!({
        "schema": OUTPUT_SCHEMA,
        "state": "target_malformed",
        "target": echoed_field(target),
        "reason": "target_malformed",
        "detail": format!("{detail}; nothing was read"),
    });
    Reply { exit_code: exit::USAGE, body }
}

fn base(state: &str, agent_id: &str) -> Map<String, Value> {
    let mut body = Map::new();
    body.insert("schema".into(), json!(OUTPUT_SCHEMA));
    body.insert("state".into(), json!(state));
    body.insert("agent_id".into(), json!(agent_id));
    body
}

/// The opaque session id: the provider session and the file that carries it.
fn opaque_session_id(agent_id: &str, provider_session: &str, dev: u64, ino: u64) -> String {
    let digest = Sha256::new()
        .chain_update(b"wakterm-output-session\0")
        .chain_update(agent_id.as_bytes())
        .chain_update([0])
        .chain_update(provider_session.as_bytes())
        .chain_update([0])
        .chain_update(dev.to_be_bytes())
        .chain_update(ino.to_be_bytes())
        .finalize();
    format!("ses_{}", hex(&digest[..16]))
}

/// OUT-2: the event id covers the provider session and the source record's content hash
/// (and its offset, so two byte-identical records stay distinct); stable across reads.
fn event_id(provider_session: &str, entry: &TailEntry) -> String {
    let digest = Sha256::new()
        .chain_update(b"wakterm-output-event\0")
        .chain_update(provider_session.as_bytes())
        .chain_update([0])
        .chain_update(entry.content_hash.expect("the output page's tail hashes lines"))
        .chain_update(entry.offset.to_be_bytes())
        .finalize();
    format!("evt_{}", hex(&digest[..16]))
}

fn issue(key: &CursorKey, agent_id: &str, incarnation: &str, provider_session: &str, tail: &RolloutTail) -> String {
    let cursor = tail.cursor();
    encode_cursor(
        key,
        &CursorState {
            v: CURSOR_VERSION,
            agent: agent_id.into(),
            inc: incarnation.into(),
            sess: provider_session.into(),
            dev: cursor.dev,
            ino: cursor.ino,
            off: cursor.offset,
            ck: hex(&cursor.checkpoint_hash),
            item: cursor.item_dialect,
        },
    )
}

/// A baseline at the current complete provider record: (cursor, opaque session id).
fn baseline(key: &CursorKey, agent: &AgentView, observed: &Observed) -> Result<(String, String), (String, String)> {
    let (provider_session, path) = match observed {
        Observed::Session { provider_session, path } => (provider_session, path),
        Observed::Unavailable { reason, detail } => return Err((reason.clone(), detail.clone())),
    };
    let Some(incarnation) = agent.incarnation.as_deref() else {
        let (reason, detail) = agent.no_process();
        return Err((reason.into(), detail.into()));
    };
    let mut tail = RolloutTail::open(path).map_err(|e| ("rollout_unreadable".to_string(), tail_detail(&e)))?;
    tail.seek_to_end_baseline().map_err(|e| ("rollout_unreadable".to_string(), tail_detail(&e)))?;
    let identity = tail.identity();
    let session_id = opaque_session_id(&agent.agent_id, provider_session, identity.dev, identity.ino);
    Ok((issue(key, &agent.agent_id, incarnation, provider_session, &tail), session_id))
}

/// Tail errors without paths.
fn tail_detail(error: &TailError) -> String {
    match error {
        TailError::Io { op, message, .. } => format!("reading the provider record failed ({op}): {message}"),
        TailError::Replaced { .. } => "the provider record file was replaced".into(),
        other => other.to_string(),
    }
}

fn observer_unavailable(agent_id: &str, reason: &str, detail: &str) -> Reply {
    let mut body = base("observer_unavailable", agent_id);
    body.insert("reason".into(), json!(reason));
    body.insert("detail".into(), json!(detail));
    // The caller's cursor (if any) is not invalidated: it may be retried later.
    body.insert("gap".into(), json!(false));
    Reply { exit_code: exit::ERROR, body: Value::Object(body) }
}

/// OUT-4, OUT-5: a response that ends the caller's continuity. It carries a replacement
/// `baseline_cursor` when the session is readable, never a `next_cursor`: adopting the
/// baseline is the consumer's explicit decision after recording the gap.
fn gap(key: &CursorKey, agent: &AgentView, observed: &Observed, state: &str, reason: &str, detail: &str) -> Reply {
    gap_with(agent, state, reason, detail, baseline(key, agent, observed))
}

/// A gap answer whose replacement (`baseline_cursor`, `session_id`) is given, or why not.
fn gap_with(
    agent: &AgentView,
    state: &str,
    reason: &str,
    detail: &str,
    replacement: Result<(String, String), (String, String)>,
) -> Reply {
    let mut body = base(state, &agent.agent_id);
    body.insert("reason".into(), json!(reason));
    body.insert("detail".into(), json!(detail));
    body.insert("gap".into(), json!(true));
    body.insert("events".into(), json!([]));
    match replacement {
        Ok((cursor, session_id)) => {
            body.insert("baseline_cursor".into(), json!(cursor));
            body.insert("session_id".into(), json!(session_id));
            body.insert("baseline".into(), json!(true));
        }
        Err((why, why_detail)) => {
            body.insert("baseline_cursor".into(), Value::Null);
            body.insert("baseline".into(), json!(false));
            body.insert("baseline_unavailable_reason".into(), json!(why));
            body.insert("baseline_unavailable_detail".into(), json!(why_detail));
        }
    }
    Reply { exit_code: exit::REJECTED, body: Value::Object(body) }
}

fn cursor_invalid(key: &CursorKey, agent: &AgentView, observed: &Observed, problem: CursorProblem) -> Reply {
    gap(key, agent, observed, "cursor_invalid", problem.reason(), problem.detail())
}

/// The whole read; `discover` is [`discover`] in the daemon and a fixture in tests.
pub fn answer(
    key: &CursorKey,
    agent: &AgentView,
    after: Option<&str>,
    budgets: Budgets,
    discover: impl FnOnce(&AgentView) -> Observed,
) -> Reply {
    // OUT-7: the page is Codex-only.
    if agent.harness != "codex" {
        let mut body = base("unsupported_harness", &agent.agent_id);
        body.insert("reason".into(), json!("harness_not_supported"));
        body.insert("harness".into(), json!(agent.harness));
        body.insert("detail".into(), json!("the output page reads Codex rollouts only"));
        return Reply { exit_code: exit::REJECTED, body: Value::Object(body) };
    }
    let observed = match (&agent.incarnation, agent.process) {
        (Some(_), Some(_)) => discover(agent),
        _ => {
            let (reason, detail) = agent.no_process();
            Observed::unavailable(reason, detail)
        }
    };
    let Some(token) = after else {
        // OUT-1: the first read is a baseline at the current complete record, no history.
        return match baseline(key, agent, &observed) {
            Ok((cursor, session_id)) => success(agent, session_id, Vec::new(), cursor, false, true),
            Err((reason, detail)) => observer_unavailable(&agent.agent_id, &reason, &detail),
        };
    };
    // OUT-3: authenticate before anything in the cursor is believed.
    let state = match decode_cursor(key, token) {
        Ok(state) => state,
        Err(problem) => return cursor_invalid(key, agent, &observed, problem),
    };
    if state.agent != agent.agent_id {
        return cursor_invalid(key, agent, &observed, CursorProblem::OtherAgent);
    }
    let Some(incarnation) = agent.incarnation.as_deref() else {
        return match &observed {
            Observed::Unavailable { reason, detail } => observer_unavailable(&agent.agent_id, reason, detail),
            Observed::Session { .. } => {
                let (reason, detail) = agent.no_process();
                observer_unavailable(&agent.agent_id, reason, detail)
            }
        };
    };
    if state.inc != incarnation {
        return cursor_invalid(key, agent, &observed, CursorProblem::IncarnationChanged);
    }
    let (provider_session, path) = match &observed {
        Observed::Session { provider_session, path } => (provider_session, path),
        Observed::Unavailable { reason, detail } => return observer_unavailable(&agent.agent_id, reason, detail),
    };
    // OUT-4: another provider session (or another file) is a new session, never continued.
    if &state.sess != provider_session {
        let detail = "the agent's process now writes another provider session";
        return gap(key, agent, &observed, "session_changed", "provider_session_changed", detail);
    }
    let tail_cursor = state.tail_cursor().expect("checked by decode_cursor");
    let mut tail = match RolloutTail::resume(path, &tail_cursor) {
        Ok(tail) => tail.with_line_hashes(), // OUT-2: event ids
        Err(error) => return tail_failure(key, agent, &observed, &error),
    };
    // OUT-6: one bounded page; the cost is what was appended since the cursor.
    let page = match tail.read_page(budgets.max_records, budgets.max_bytes) {
        Ok(page) => page,
        Err(error) => return tail_failure(key, agent, &observed, &error),
    };
    let identity = tail.identity();
    let session_id = opaque_session_id(&agent.agent_id, provider_session, identity.dev, identity.ino);
    let next = issue(key, &agent.agent_id, incarnation, provider_session, &tail);
    if let Some(len_bytes) = page.entries.iter().find_map(unreadable_len) {
        // OUT-9: the tail returns an unreadable record alone on its page, so the cursor
        // before this read sits just before it and `next` just after it.
        assert_eq!(page.entries.len(), 1, "an unreadable record is alone on its page");
        let detail = format!(
            "a provider record of {len_bytes} bytes is too long to read; an assistant message in it is missing"
        );
        return gap_with(agent, "record_skipped", RECORD_TOO_LARGE, &detail, Ok((next, session_id)));
    }
    let mut events = Vec::new();
    for entry in &page.entries {
        if let Ok(RolloutRecord::AgentMessage { turn_id, text, .. }) = &entry.record {
            events.push(json!({
                "event_id": event_id(provider_session, entry),
                "kind": "assistant_message",
                "turn_id": turn_id,
                "text": text,
            }));
        }
    }
    success(agent, session_id, events, next, page.has_more, false)
}

/// The length of a record the tail could not read in full (OUT-9).
fn unreadable_len(entry: &TailEntry) -> Option<u64> {
    if let Err(RecordError::LineTooLong { len_bytes }) = entry.record {
        Some(len_bytes)
    } else {
        None
    }
}

fn tail_failure(key: &CursorKey, agent: &AgentView, observed: &Observed, error: &TailError) -> Reply {
    match error {
        // OUT-5
        TailError::Truncated { .. } => cursor_invalid(key, agent, observed, CursorProblem::Truncated),
        TailError::Rewritten { .. } => cursor_invalid(key, agent, observed, CursorProblem::Rewritten),
        // OUT-4
        TailError::Replaced { .. } => {
            gap(key, agent, observed, "session_changed", "provider_file_replaced", "the provider record file was replaced")
        }
        TailError::Removed => observer_unavailable(&agent.agent_id, "rollout_removed", "the provider record file was removed"),
        TailError::Io { .. } | TailError::InvalidBudget { .. } => {
            observer_unavailable(&agent.agent_id, "rollout_unreadable", &tail_detail(error))
        }
    }
}

fn success(agent: &AgentView, session_id: String, events: Vec<Value>, next_cursor: String, has_more: bool, baseline: bool) -> Reply {
    let mut body = base("ok", &agent.agent_id);
    body.insert("incarnation".into(), json!(agent.incarnation));
    body.insert("session_id".into(), json!(session_id));
    body.insert("events".into(), Value::Array(events));
    body.insert("next_cursor".into(), json!(next_cursor));
    body.insert("has_more".into(), json!(has_more));
    body.insert("baseline".into(), json!(baseline));
    body.insert("gap".into(), json!(false));
    Reply { exit_code: exit::OK, body: Value::Object(body) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use hmac::{Hmac, Mac};
    use std::fs::OpenOptions;
    use std::io::Write;
    use std::os::unix::fs::{FileExt, PermissionsExt};

    const AGENT: &str = "00000000-0000-4000-8000-0000000000a1";
    const SESSION: &str = "00000000-0000-4000-8000-000000000050";

    fn fixture(name: &str) -> Vec<String> {
        let path = format!("{}/../fixtures/codex-0.169/{name}.jsonl", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(path).expect("fixture").lines().map(|l| format!("{l}\n")).collect()
    }

    struct Setup {
        _dir: tempfile::TempDir,
        path: PathBuf,
        key: CursorKey,
        agent: AgentView,
    }

    impl Setup {
        fn new(initial: &[String]) -> Setup {
            let dir = tempfile::tempdir().expect("tempdir");
            let path = dir.path().join("rollout-2026-11-30T10-00-00-s.jsonl");
            std::fs::write(&path, initial.concat()).expect("write");
            let agent = AgentView {
                agent_id: AGENT.into(),
                harness: "codex".into(),
                incarnation: Some("100.200".into()),
                process: Some(proc_probe::ProcessIdentity { pid: 100, start_time_ticks: 200 }),
                codex_home: dir.path().into(),
                cwd: dir.path().into(),
                liveness_unknown: false,
            };
            Setup { _dir: dir, path, key: CursorKey::from_bytes([7; 32]), agent }
        }

        fn observed(&self) -> Observed {
            Observed::Session { provider_session: SESSION.into(), path: self.path.clone() }
        }

        fn read_with(&self, after: Option<&str>, budgets: Budgets) -> Reply {
            let observed = self.observed();
            answer(&self.key, &self.agent, after, budgets, move |_| observed)
        }

        fn read(&self, after: Option<&str>) -> Reply {
            self.read_with(after, Budgets::default())
        }

        fn append(&self, lines: &[String]) {
            let mut file = OpenOptions::new().append(true).open(&self.path).expect("append");
            file.write_all(lines.concat().as_bytes()).expect("append");
        }
    }

    fn cursor(reply: &Reply) -> String {
        reply.body["next_cursor"].as_str().expect("next_cursor").to_string()
    }

    fn texts(reply: &Reply) -> Vec<String> {
        reply.body["events"].as_array().expect("events").iter().map(|e| e["text"].as_str().unwrap().to_string()).collect()
    }

    fn assert_gap(reply: &Reply, state: &str, reason: &str) {
        assert_eq!(reply.exit_code, exit::REJECTED, "{}", reply.body);
        assert_eq!(reply.body["schema"], OUTPUT_SCHEMA);
        assert_eq!(reply.body["state"], state, "{}", reply.body);
        assert_eq!(reply.body["reason"], reason, "{}", reply.body);
        assert_eq!(reply.body["gap"], true);
        assert!(reply.body.get("next_cursor").is_none(), "a gap never continues silently: {}", reply.body);
    }

    #[test]
    fn out_1_baseline_skips_history_then_returns_only_new_assistant_messages() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let first = s.read(None);
        assert_eq!(first.exit_code, exit::OK);
        assert_eq!(first.body["schema"], OUTPUT_SCHEMA);
        assert_eq!(first.body["state"], "ok");
        assert_eq!(first.body["agent_id"], AGENT);
        assert_eq!(first.body["baseline"], true);
        assert_eq!(first.body["has_more"], false);
        assert!(texts(&first).is_empty(), "no history: {}", first.body);
        assert!(first.body["session_id"].as_str().unwrap().starts_with("ses_"));
        assert!(!first.body.to_string().contains(SESSION), "the provider session id stays internal");

        // Nothing new yet.
        let again = s.read(Some(&cursor(&first)));
        assert_eq!(again.exit_code, exit::OK);
        assert!(texts(&again).is_empty());
        assert_eq!(again.body["baseline"], false);
        assert_eq!(again.body["session_id"], first.body["session_id"]);

        s.append(&lines[14..]);
        let page = s.read(Some(&cursor(&again)));
        assert_eq!(texts(&page), ["mock reply to: second of two turns"]);
        let event = &page.body["events"][0];
        assert_eq!(event["kind"], "assistant_message");
        assert_eq!(event["turn_id"], "00000000-0000-4000-8000-000000000060");
        let after = s.read(Some(&cursor(&page)));
        assert!(texts(&after).is_empty(), "nothing is delivered twice");
    }

    #[test]
    fn out_1_baseline_stops_at_the_last_complete_record() {
        let lines = fixture("two-turns");
        let partial = &lines[19][..40];
        let s = Setup::new(&[lines[..19].concat(), partial.to_string()]);
        let first = s.read(None);
        let rest = lines[19][40..].to_string();
        s.append(&[rest]);
        assert_eq!(texts(&s.read(Some(&cursor(&first)))), ["mock reply to: second of two turns"]);
    }

    #[test]
    fn out_2_event_ids_are_stable_across_reads_and_differ_by_content() {
        let lines = fixture("steered-after-output");
        let s = Setup::new(&lines[..1]);
        let base = cursor(&s.read(None));
        s.append(&lines[1..]);
        let a = s.read(Some(&base));
        let b = s.read(Some(&base));
        assert_eq!(texts(&a).len(), 2, "{}", a.body);
        assert_eq!(a.body["events"], b.body["events"], "same cursor, same events and ids");
        let ids: Vec<&str> = a.body["events"].as_array().unwrap().iter().map(|e| e["event_id"].as_str().unwrap()).collect();
        assert_ne!(ids[0], ids[1]);
        assert!(ids.iter().all(|id| id.starts_with("evt_")));

        // Same position, different record content: a different id.
        let other_lines: Vec<String> = lines.iter().map(|l| l.replace("held reply", "HELD reply")).collect();
        let t = Setup::new(&other_lines[..1]);
        let base = cursor(&t.read(None));
        t.append(&other_lines[1..]);
        let c = t.read(Some(&base));
        assert_ne!(c.body["events"][0]["event_id"], a.body["events"][0]["event_id"]);
        assert_eq!(c.body["events"][1]["event_id"], a.body["events"][1]["event_id"]);
    }

    #[test]
    fn out_3_cursor_round_trips_and_is_scoped() {
        let s = Setup::new(&fixture("completed-turn"));
        let token = cursor(&s.read(None));
        assert!(token.starts_with(CURSOR_PREFIX));
        let state = decode_cursor(&s.key, &token).expect("our cursor");
        assert_eq!(decode_cursor(&s.key, &encode_cursor(&s.key, &state)), Ok(state.clone()));
        assert_ne!(encode_cursor(&s.key, &state), token, "a fresh nonce per cursor");
        assert_eq!(state.agent, AGENT);
        assert_eq!(state.inc, "100.200");
        assert_eq!(state.sess, SESSION);
        assert_eq!(state.off, std::fs::metadata(&s.path).unwrap().len());
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// OUT-2, OUT-3: the cursor is opaque in fact: decoded, it shows neither the provider's
    /// session id, nor the agent, the inode, the offset or the checkpoint, nor any JSON; and
    /// flipping any one bit, or cutting it anywhere, makes it `cursor_invalid`.
    #[test]
    fn out_3_cursor_reveals_nothing_and_any_bit_flip_or_cut_is_cursor_invalid() {
        use std::os::unix::fs::MetadataExt;
        let s = Setup::new(&fixture("completed-turn"));
        let token = cursor(&s.read(None));
        let state = decode_cursor(&s.key, &token).unwrap();
        let body = token.strip_prefix(CURSOR_PREFIX).unwrap();
        let blob: Vec<u8> = body.split('.').flat_map(|part| URL_SAFE_NO_PAD.decode(part).expect("base64url")).collect();
        let ino = std::fs::metadata(&s.path).unwrap().ino();
        assert_eq!((state.ino, state.off), (ino, std::fs::metadata(&s.path).unwrap().len()));
        let mut secrets: Vec<Vec<u8>> = vec![
            SESSION.into(),
            AGENT.into(),
            state.inc.clone().into(),
            state.ck.clone().into(),
            unhex32(&state.ck).unwrap().to_vec(),
        ];
        for number in [state.ino, state.off, state.dev] {
            secrets.extend([number.to_string().into(), number.to_le_bytes().to_vec(), number.to_be_bytes().to_vec()]);
        }
        for secret in &secrets {
            assert!(!contains(&blob, secret), "the cursor shows {secret:?}");
        }
        for json in [&b"\"sess\""[..], b"\"off\"", b"\"ino\"", b"\"agent\""] {
            assert!(!contains(&blob, json), "the cursor shows JSON {:?}", String::from_utf8_lossy(json));
        }
        // No 8-byte piece of the state's own JSON (its opening `{"` included) is in the sealed
        // bytes. The 2-byte `{"` alone was checked before: random ciphertext of this length
        // holds it by chance about once in 400 cursors (it failed a CI run).
        let plain = serde_json::to_vec(&state).unwrap();
        for piece in plain.windows(8) {
            assert!(!contains(&blob, piece), "the cursor shows JSON {:?}", String::from_utf8_lossy(piece));
        }
        assert!(serde_json::from_slice::<Value>(&blob).is_err());
        assert!(std::str::from_utf8(&blob).is_err(), "sealed bytes, not text");
        assert!(!token.contains(SESSION) && !token.contains(AGENT));
        assert!(!body.contains('.'), "one sealed part");

        for bit in 0..blob.len() * 8 {
            let mut flipped = blob.clone();
            flipped[bit / 8] ^= 1 << (bit % 8);
            let token = format!("{CURSOR_PREFIX}{}", URL_SAFE_NO_PAD.encode(&flipped));
            assert_eq!(decode_cursor(&s.key, &token), Err(CursorProblem::Forged), "bit {bit}");
            if bit % 101 == 0 {
                assert_gap(&s.read(Some(&token)), "cursor_invalid", "cursor_forged");
            }
        }
        for cut in 0..token.len() {
            let reply = s.read(Some(&token[..cut]));
            assert_eq!(reply.body["state"], "cursor_invalid", "cut at {cut}: {}", reply.body);
        }
    }

    #[test]
    fn out_3_forged_malformed_and_foreign_cursors_are_cursor_invalid() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let token = cursor(&s.read(None));
        let mut state = decode_cursor(&s.key, &token).unwrap();

        // An attacker-chosen offset without our key: refused before any read.
        state.off = 3;
        let other_key = CursorKey::from_bytes([8; 32]);
        let forged = encode_cursor(&other_key, &state);
        let reply = s.read(Some(&forged));
        assert_gap(&reply, "cursor_invalid", "cursor_forged");
        assert_eq!(reply.body["baseline"], true, "the session is readable: a new baseline is offered");
        assert!(decode_cursor(&s.key, reply.body["baseline_cursor"].as_str().unwrap()).is_ok());

        // A readable state of the retired `wko1.` form, with whatever MAC: never believed.
        let readable = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&state).unwrap());
        let retired = format!("wko1.{readable}.{}", URL_SAFE_NO_PAD.encode([0u8; 32]));
        assert_gap(&s.read(Some(&retired)), "cursor_invalid", "cursor_version_unsupported");
        // A readable state under the current prefix.
        assert_gap(&s.read(Some(&format!("{CURSOR_PREFIX}{readable}"))), "cursor_invalid", "cursor_forged");
        for bad in ["", "garbage", "wko1.", "wko1.a.b", "wko2.", "wko2.a.b", "wko2.@@", &token[..token.len() - 5], &"x".repeat(MAX_CURSOR_CHARS + 1)] {
            let reply = s.read(Some(bad));
            assert_eq!(reply.body["state"], "cursor_invalid", "{bad:?}: {}", reply.body);
            assert_eq!(reply.exit_code, exit::REJECTED);
        }

        // Another agent's genuine cursor; another incarnation's genuine cursor.
        let mut other = Setup::new(&lines[..14]);
        other.key = s.key.clone();
        other.agent.agent_id = "00000000-0000-4000-8000-0000000000b2".into();
        let foreign = cursor(&other.read(None));
        assert_gap(&s.read(Some(&foreign)), "cursor_invalid", "cursor_other_agent");
        let mut restarted = Setup::new(&lines[..14]);
        restarted.key = s.key.clone();
        restarted.path = s.path.clone();
        restarted.agent.incarnation = Some("101.300".into());
        let reply = restarted.read(Some(&token));
        assert_gap(&reply, "cursor_invalid", "incarnation_changed");
        assert_eq!(reply.body["baseline"], true);

        // Version check happens after authentication.
        let mut v2 = decode_cursor(&s.key, &token).unwrap();
        v2.v = CURSOR_VERSION + 1;
        assert_gap(&s.read(Some(&encode_cursor(&s.key, &v2))), "cursor_invalid", "cursor_version_unsupported");
    }

    #[test]
    fn out_3_hmac_matches_rfc_4231() {
        // RFC 4231 test case 2 (a key shorter than the block).
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex(&mac), "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
        // RFC 4231 test case 6 (a key longer than the block, hashed first).
        let mac = hmac_sha256(&[0xaa; 131], b"Test Using Larger Than Block-Size Key - Hash Key First");
        assert_eq!(hex(&mac), "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54");
        // The constant-time comparison the crate provides accepts exactly the right tag.
        let mut verifier = <Hmac<Sha256> as Mac>::new_from_slice(b"Jefe").unwrap();
        verifier.update(b"what do ya want for nothing?");
        assert!(verifier.clone().verify_slice(&mac).is_err());
        let expected = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert!(verifier.verify_slice(&expected).is_ok());
    }

    /// The sealing key derivation is unchanged by the move from the hand-written HMAC to the
    /// `hmac` crate: the derived key is the one the earlier build computed (and Python's
    /// `hmac.new(bytes(range(32)), label, sha256)` agrees), and a cursor that build issued
    /// under this file key still opens to the same state.
    #[test]
    fn out_3_seal_key_derivation_is_stable_across_builds() {
        let file_key: [u8; CURSOR_KEY_BYTES] = std::array::from_fn(|i| i as u8);
        assert_eq!(
            hex(&hmac_sha256(&file_key, CURSOR_SEAL_LABEL)),
            "17c5559999b4693ffe96690967071caf09987277b3ce41004df1c4c1f4538d36"
        );
        const EARLIER_BUILD_CURSOR: &str = "wko2.6Jrosy9qrpkH6hUNXeDminR5PxkUmiMkmKKlSUJ7LZtJ9ZqgZ44SbjQ9HZt0qqtmLah_zFNKTSfbh64dU_rnJSaTCcEytmu5xwEQFiaTyU37CV60HjGtao3TKHoj-YKrYFSm-j6QQOr5SY76Xiw9N9YNuMA-k1z3ncto3km-WQbPtaZT2ESYQ0G83-ugtiRikh0TzBttNPRKMqepNLw5IJGjdohfWRjT9RVmZSCdrwIY_MANQThUkPQ1CC8fXmQc5K1uTJJyILn3S_LNI-k1wn1PXi0pYduC1l6p7yJ1Uf6Qxxs5rHWWlXwpK_8aJSZ3lVtpSeX5ZK2oG9biKrre1zPYaPhCoL9QbmF_9eCHtCNROnTs";
        let expected = CursorState {
            v: CURSOR_VERSION,
            agent: AGENT.into(),
            inc: "100.200".into(),
            sess: SESSION.into(),
            dev: 2049,
            ino: 1234567,
            off: 4096,
            ck: hex(&[0xab; 32]),
            item: true,
        };
        assert_eq!(decode_cursor(&CursorKey(file_key), EARLIER_BUILD_CURSOR), Ok(expected));
    }

    #[test]
    fn out_3_key_file_is_created_once_private_and_reused() {
        let dir = tempfile::tempdir().unwrap();
        let a = CursorKey::load_or_create(dir.path()).unwrap();
        let b = CursorKey::load_or_create(dir.path()).unwrap();
        assert_eq!(a.0, b.0);
        assert_ne!(a.0, [0; 32]);
        let meta = std::fs::metadata(dir.path().join(CURSOR_KEY_FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        assert_eq!(meta.len(), 32);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file is left");
        // SEC-1: a key found open to others is made private again and kept (it was refused,
        // and every `agent output` failed until someone ran chmod: a hostile run); a link is
        // refused.
        std::fs::set_permissions(dir.path().join(CURSOR_KEY_FILE), std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(CursorKey::load_or_create(dir.path()).unwrap().0, a.0, "the same key");
        let meta = std::fs::metadata(dir.path().join(CURSOR_KEY_FILE)).unwrap();
        assert_eq!(meta.permissions().mode() & 0o777, 0o600, "made private again");
        let linked = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(dir.path().join(CURSOR_KEY_FILE), linked.path().join(CURSOR_KEY_FILE)).unwrap();
        let error = CursorKey::load_or_create(linked.path()).map(|_| ()).expect_err("a linked key is refused");
        assert!(error.to_string().contains("symbolic link"), "{error}");
        let other = tempfile::tempdir().unwrap();
        assert_ne!(CursorKey::load_or_create(other.path()).unwrap().0, a.0, "one key per data directory");
    }

    #[test]
    fn out_4_other_provider_session_or_replaced_file_is_session_changed() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let token = cursor(&s.read(None));
        // The process now writes another session.
        let observed = Observed::Session { provider_session: "another-session".into(), path: s.path.clone() };
        let reply = answer(&s.key, &s.agent, Some(&token), Budgets::default(), move |_| observed);
        assert_gap(&reply, "session_changed", "provider_session_changed");
        assert_eq!(reply.body["baseline"], true);
        assert_ne!(reply.body["session_id"], s.read(None).body["session_id"], "a new session identity");

        // Same session id, but the file was replaced under the path.
        let copy = s.path.with_extension("new");
        std::fs::write(&copy, lines.concat()).unwrap();
        std::fs::rename(&copy, &s.path).unwrap();
        let reply = s.read(Some(&token));
        assert_gap(&reply, "session_changed", "provider_file_replaced");
        let fresh = reply.body["baseline_cursor"].as_str().unwrap().to_string();
        assert_ne!(reply.body["session_id"], Value::Null);
        let resumed = s.read(Some(&fresh));
        assert_eq!(resumed.exit_code, exit::OK, "{}", resumed.body);
        assert!(texts(&resumed).is_empty());
    }

    #[test]
    fn out_5_truncation_and_in_place_rewrite_invalidate_the_checkpoint() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let token = cursor(&s.read(None));
        let len = std::fs::metadata(&s.path).unwrap().len();

        // In-place rewrite of a consumed byte, then growth.
        let file = OpenOptions::new().write(true).open(&s.path).unwrap();
        file.write_all_at(b"X", len - 10).unwrap();
        s.append(&lines[14..]);
        let reply = s.read(Some(&token));
        assert_gap(&reply, "cursor_invalid", "provider_record_rewritten");
        assert_eq!(reply.body["baseline"], true);

        // Truncation below the cursor.
        let t = Setup::new(&lines[..14]);
        let token = cursor(&t.read(None));
        OpenOptions::new().write(true).open(&t.path).unwrap().set_len(len / 2).unwrap();
        let reply = t.read(Some(&token));
        assert_gap(&reply, "cursor_invalid", "provider_record_truncated");
        // Regrowing past the offset is a rewrite, never a silent continuation.
        t.append(&lines[7..]);
        let reply = t.read(Some(&token));
        assert_eq!(reply.body["state"], "cursor_invalid", "{}", reply.body);
    }

    #[test]
    fn out_6_budgets_bound_each_page_and_has_more_drains_tool_heavy_output() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let mut token = cursor(&s.read(None));
        let tool = r#"{"type":"response_item","payload":{"type":"function_call_output","output":"lots of tool output"}}"#;
        let mut appended: Vec<String> = (0..10).map(|_| format!("{tool}\n")).collect();
        appended.extend_from_slice(&lines[14..]);
        s.append(&appended);
        let budgets = Budgets { max_records: 3, max_bytes: OUTPUT_PAGE_MAX_BYTES };
        let mut pages = Vec::new();
        loop {
            let page = s.read_with(Some(&token), budgets);
            assert_eq!(page.exit_code, exit::OK, "{}", page.body);
            token = cursor(&page);
            let more = page.body["has_more"] == true;
            pages.push(page);
            if !more {
                break;
            }
        }
        assert_eq!(pages.len(), (10usize + 10).div_ceil(3));
        assert!(pages[0].body["events"].as_array().unwrap().is_empty() && pages[0].body["has_more"] == true, "a page without assistant events still says has_more");
        let all: Vec<String> = pages.iter().flat_map(texts).collect();
        assert_eq!(all, ["mock reply to: second of two turns"]);

        // A byte budget below one line still progresses one whole line per page.
        let t = Setup::new(&lines[..14]);
        let base = cursor(&t.read(None));
        t.append(&lines[14..]);
        let page = t.read_with(Some(&base), Budgets { max_records: 100, max_bytes: 1 });
        assert_eq!(page.body["has_more"], true);
        assert_eq!(decode_cursor(&t.key, &cursor(&page)).unwrap().off, (lines[..15].concat().len()) as u64);
    }

    fn agent_message(text: &str) -> String {
        let item = json!({"type": "AgentMessage", "content": [{"type": "Text", "text": text}]});
        let payload = json!({"type": "item_completed", "turn_id": "t", "item": item});
        format!("{}\n", json!({"type": "event_msg", "payload": payload}))
    }

    /// OUT-9: a record too long to read is an explicit gap, never `gap: false`: the page
    /// stops before it, the read that reaches it answers `record_skipped` with a
    /// `baseline_cursor` just past it (no `next_cursor`), and reading goes on from there.
    #[test]
    fn out_9_a_record_too_long_to_read_is_a_gap_and_reading_resumes_after_it() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let first = s.read(None);
        let huge = "A".repeat(crate::rollout_tail::MAX_PARSED_LINE_BYTES + 1024);
        s.append(&[agent_message("before"), agent_message(&huge), agent_message("after")]);
        // A byte budget that would hold all three: the page still stops before the skip.
        let budgets = Budgets { max_records: 10, max_bytes: crate::rollout_tail::MAX_BYTES_PER_PAGE };
        let page = s.read_with(Some(&cursor(&first)), budgets);
        assert_eq!(page.exit_code, exit::OK, "{}", page.body);
        assert_eq!(texts(&page), ["before"]);
        assert_eq!(page.body["gap"], false);
        assert_eq!(page.body["has_more"], true);

        let skipped = s.read(Some(&cursor(&page)));
        assert_gap(&skipped, "record_skipped", "record_too_large");
        assert!(skipped.body["events"].as_array().unwrap().is_empty());
        assert_eq!(skipped.body["baseline"], true);
        assert_eq!(skipped.body["session_id"], first.body["session_id"], "the same session continues");
        let resume = skipped.body["baseline_cursor"].as_str().expect("a cursor past the skipped record");
        let rest = s.read(Some(resume));
        assert_eq!(rest.exit_code, exit::OK, "{}", rest.body);
        assert_eq!(texts(&rest), ["after"]);
        assert_eq!(rest.body["gap"], false);
    }

    #[test]
    fn out_7_observer_unavailable_unsupported_harness_and_unknown_agent() {
        let s = Setup::new(&fixture("completed-turn"));
        let token = cursor(&s.read(None));
        let down = || Observed::unavailable("several_rollouts_open", "two");
        let reply = answer(&s.key, &s.agent, None, Budgets::default(), |_| down());
        assert_eq!(reply.exit_code, exit::ERROR);
        assert_eq!(reply.body["state"], "observer_unavailable");
        assert_eq!(reply.body["reason"], "several_rollouts_open");
        assert_eq!(reply.body["schema"], OUTPUT_SCHEMA);
        // A valid cursor stays valid while the observer is down (no gap, retry later).
        let reply = answer(&s.key, &s.agent, Some(&token), Budgets::default(), |_| down());
        assert_eq!(reply.body["state"], "observer_unavailable");
        assert_eq!(reply.body["gap"], false);
        // A forged cursor is still cursor_invalid, without a baseline.
        let reply = answer(&s.key, &s.agent, Some(&format!("{CURSOR_PREFIX}x.y")), Budgets::default(), |_| down());
        assert_gap(&reply, "cursor_invalid", "cursor_malformed");
        assert_eq!(reply.body["baseline_cursor"], Value::Null);

        let mut stopped = s.agent.clone();
        stopped.incarnation = None;
        stopped.process = None;
        let reply = answer(&s.key, &stopped, Some(&token), Budgets::default(), |_| panic!("no discovery without a process"));
        assert_eq!(reply.body["state"], "observer_unavailable");
        assert_eq!(reply.body["reason"], "agent_not_running");

        let mut other = s.agent.clone();
        other.harness = "other".into();
        let reply = answer(&s.key, &other, None, Budgets::default(), |_| panic!("no discovery for another harness"));
        assert_eq!(reply.exit_code, exit::REJECTED);
        assert_eq!(reply.body["state"], "unsupported_harness");
        assert_eq!(reply.body["schema"], OUTPUT_SCHEMA);

        let unknown = agent_unknown("nobody");
        assert_eq!(unknown.exit_code, exit::NOT_FOUND);
        assert_eq!(unknown.body["state"], "agent_unknown");
    }

    #[test]
    fn out_8_reading_does_not_write_the_provider_file_and_costs_what_was_appended() {
        let lines = fixture("two-turns");
        let s = Setup::new(&lines[..14]);
        let before = std::fs::read(&s.path).unwrap();
        let token = cursor(&s.read(None));
        let token = cursor(&s.read(Some(&token)));
        assert_eq!(std::fs::read(&s.path).unwrap(), before, "reading is side-effect free");
        // The cursor resumes at its offset: a resumed tail reads the checkpoint window plus
        // the appended bytes only.
        s.append(&lines[14..]);
        let state = decode_cursor(&s.key, &token).unwrap();
        let mut tail = RolloutTail::resume(&s.path, &state.tail_cursor().unwrap()).unwrap();
        tail.read_page(OUTPUT_PAGE_MAX_RECORDS, OUTPUT_PAGE_MAX_BYTES).unwrap();
        let appended = lines[14..].concat().len() as u64;
        let window = (crate::rollout_tail::CHECKPOINT_WINDOW_BYTES as u64).min(state.off);
        assert!(tail.bytes_read() <= 2 * window + appended, "read {} bytes", tail.bytes_read());
    }
}
