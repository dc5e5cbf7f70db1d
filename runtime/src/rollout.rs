//! Codex rollout records: one JSONL line of `$CODEX_HOME/sessions/**/rollout-*.jsonl` parsed
//! into the few facts the observer needs (session identity, turn boundaries, the real prompt,
//! assistant text, the final answer).
//!
//! The parser is stateless and total: every line yields either a record or a structured
//! [`RecordError`]; unknown kinds become [`RolloutRecord::Other`] so a newer Codex never stops
//! the observer. The line shape is `{"timestamp":..,"ordinal":N,"type":KIND,"payload":{..}}`
//! (see REAL_CODEX.md); `ordinal` and `timestamp` are not needed and ignored.
//!
//! One prompt yields exactly one [`RolloutRecord::UserMessage`]: Codex writes the prompt up to
//! three times (a `response_item` message with role `user`, an `event_msg`/`item_completed`
//! `UserMessage` in 0.169, an `event_msg`/`user_message` in older builds). `response_item`
//! messages also carry injected context (`<environment_context>`, developer instructions) that
//! is indistinguishable by role, so they are never reported as prompts. Only the event
//! stream is. A build that writes BOTH event forms is handled by [`PromptDeduper`].

use crate::json_fields::{self, as_string, object_fields, raw_object_fields};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::fmt;
use std::path::PathBuf;

/// Longest text we keep from one record. Longer texts are cut at a char boundary and flagged,
/// because a prompt or answer larger than this cannot be carried by receipts anyway.
pub const MAX_RECORD_TEXT_BYTES: usize = 4 * 1024 * 1024;

/// Longest `kind` label kept in [`RolloutRecord::Other`]; provider kinds are short words.
pub const MAX_KIND_LABEL_BYTES: usize = 128;

/// The facts one rollout line carries. Closed: every consumer matches exhaustively.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RolloutRecord {
    /// First line of every rollout: which session this file belongs to and where it runs.
    SessionMeta {
        session_id: String,
        cwd: PathBuf,
        cli_version: Option<String>,
        originator: Option<String>,
    },
    /// `event_msg`/`task_started`: the provider opened a turn with a stable id.
    TurnStarted { turn_id: String },
    /// The prompt the user (or we) submitted. `turn_id` is absent in older builds.
    UserMessage { turn_id: Option<String>, text: String, source: MessageSource },
    /// Assistant text (not necessarily the final answer of the turn). `phase`: Codex's label
    /// when the model gave one (`commentary`, `final_answer`), EV-10.
    AgentMessage { turn_id: Option<String>, text: String, source: MessageSource, phase: Option<String> },
    /// `response_item`/`function_call` of Codex's `update_plan` tool with arguments it accepts
    /// (EV-11): the model's whole new plan. Codex records no other plan record.
    PlanUpdated { turn_id: Option<String>, explanation: Option<String>, plan: Vec<wakterm_engine::PlanStep> },
    /// `event_msg`/`task_complete`: the turn ended; `last_agent_message` is its final answer.
    TurnComplete { turn_id: String, last_agent_message: Option<String> },
    /// `event_msg`/`turn_aborted`: the turn was interrupted or replaced.
    TurnAborted { turn_id: Option<String>, reason: String },
    /// Anything else, labelled `type` or `type/payload.type` (e.g. `event_msg/token_count`).
    Other { kind: String },
}

impl RolloutRecord {
    /// What kind of record this is, never what it says (a prompt or an answer is private: a
    /// rollout starting with a user message put the prompt into the catalog's observer detail
    /// and every refused receipt's, a hostile run).
    pub fn kind_label(&self) -> &str {
        match self {
            RolloutRecord::SessionMeta { .. } => "session_meta",
            RolloutRecord::TurnStarted { .. } => "task_started",
            RolloutRecord::UserMessage { .. } => "a user message",
            RolloutRecord::AgentMessage { .. } => "an agent message",
            RolloutRecord::PlanUpdated { .. } => "update_plan",
            RolloutRecord::TurnComplete { .. } => "task_complete",
            RolloutRecord::TurnAborted { .. } => "turn_aborted",
            RolloutRecord::Other { kind } => kind, // a bounded label of its type fields
        }
    }
}

/// Which event form a message came from; lets [`PromptDeduper`] drop legacy duplicates.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MessageSource {
    /// `event_msg`/`item_completed` (0.169 and later).
    ItemCompleted,
    /// `event_msg`/`user_message` or `agent_message` (older builds).
    LegacyEvent,
}

/// The longest session id a `session_meta` may carry (a Codex id is a 36-character UUID).
pub const MAX_SESSION_ID_BYTES: usize = 128;

/// Why a line is not a usable record. The tail reports it and continues with the next line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// The line holds only white space.
    EmptyLine,
    /// Not JSON; `message` is serde_json's description (line/column, no content).
    InvalidJson { message: String },
    /// JSON, but not an object with a string `type`.
    NotARecord,
    /// A known kind lacks a field we need for correlation (e.g. a `task_started` without
    /// `turn_id`): reported, not guessed, so the engine can treat the turn as uncorrelatable.
    MissingField { kind: String, field: &'static str },
    /// A known field has the wrong JSON type.
    WrongType { kind: String, field: &'static str },
    /// The line is longer than the tail is willing to parse (set by the tail, not the parser).
    LineTooLong { len_bytes: u64 },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RecordError::EmptyLine => write!(f, "empty rollout line"),
            RecordError::InvalidJson { message } => write!(f, "invalid JSON: {message}"),
            RecordError::NotARecord => write!(f, "JSON is not a rollout record object"),
            RecordError::MissingField { kind, field } => write!(f, "{kind}: missing {field}"),
            RecordError::WrongType { kind, field } => write!(f, "{kind}: {field} has wrong type"),
            RecordError::LineTooLong { len_bytes } => write!(f, "line of {len_bytes} bytes too long"),
        }
    }
}

impl std::error::Error for RecordError {}

/// Parses one rollout line (with or without its trailing newline).
pub fn parse_line(line: &[u8]) -> Result<RolloutRecord, RecordError> {
    let trimmed = line.trim_ascii();
    if trimmed.is_empty() {
        return Err(RecordError::EmptyLine);
    }
    // Only `type` and `payload` are taken; the rest (most of a line) is checked and skipped.
    let Some([kind, payload]) = object_fields(trimmed, ["type", "payload"]).map_err(invalid_json)? else {
        return Err(RecordError::NotARecord);
    };
    let Some(kind) = as_string(kind).map_err(invalid_json)? else { return Err(RecordError::NotARecord) };
    let payload = match payload {
        Some(payload) if json_fields::is_object(payload) => payload,
        // Our two known kinds need an object payload; any other kind is skipped either way.
        _ if kind == "session_meta" || kind == "event_msg" => {
            return Err(RecordError::MissingField { kind, field: "payload" });
        }
        _ => return Ok(other(&kind, None)),
    };
    if kind == "session_meta" {
        return parse_session_meta(whole(payload)?);
    }
    if kind == "response_item" {
        return parse_response_item(payload).map_err(invalid_json);
    }
    let [sub_kind] = raw_object_fields(payload, ["type"]).map_err(invalid_json)?.expect("an object");
    match as_string(sub_kind).map_err(invalid_json)? {
        Some(event) if kind == "event_msg" => parse_event_msg(&event, payload),
        sub_kind => Ok(other(&kind, sub_kind.as_deref())),
    }
}

/// serde_json's description of why bytes are not JSON (line/column, no content).
fn invalid_json(error: serde_json::Error) -> RecordError {
    RecordError::InvalidJson { message: error.to_string() }
}

/// A payload the record is read from, built whole (a kind whose fields are all needed).
fn whole(payload: &RawValue) -> Result<Map<String, Value>, RecordError> {
    serde_json::from_str(payload.get()).map_err(invalid_json)
}

/// The name of Codex's plan tool (a plain function tool, no namespace).
pub const PLAN_TOOL: &str = "update_plan";

/// `update_plan`'s arguments as Codex parses them; arguments it cannot parse fail the call, so
/// they are no plan.
#[derive(serde::Deserialize)]
struct UpdatePlanArgs {
    #[serde(default)]
    explanation: Option<String>,
    plan: Vec<wakterm_engine::PlanStep>,
}

/// Of the `response_item` records (model input and output, injected context included) only
/// the plan tool's call is a fact the stream reports (EV-11); messages come from `event_msg`.
/// Only the fields that decide that are read: the rest (the model's text, tool output) is
/// skipped unbuilt.
fn parse_response_item(payload: &RawValue) -> Result<RolloutRecord, serde_json::Error> {
    const FIELDS: [&str; 5] = ["type", "name", "namespace", "arguments", "internal_chat_message_metadata_passthrough"];
    let [sub_kind, name, namespace, arguments, passthrough] = raw_object_fields(payload, FIELDS)?.expect("an object");
    let sub_kind = as_string(sub_kind)?;
    let is_plan_call = sub_kind.as_deref() == Some("function_call")
        && as_string(name)?.as_deref() == Some(PLAN_TOOL)
        && namespace.is_none_or(json_fields::is_null);
    let arguments = as_string(arguments)?;
    let parsed = arguments.filter(|_| is_plan_call).and_then(|json| serde_json::from_str::<UpdatePlanArgs>(&json).ok());
    let Some(args) = parsed else {
        let label = if is_plan_call { "function_call(update_plan, arguments refused)" } else { sub_kind.as_deref().unwrap_or("") };
        return Ok(other("response_item", (!label.is_empty()).then_some(label)));
    };
    let turn_id = match passthrough.filter(|raw| json_fields::is_object(raw)) {
        Some(meta) => as_string(raw_object_fields(meta, ["turn_id"])?.expect("an object")[0])?,
        None => None,
    };
    Ok(RolloutRecord::PlanUpdated { turn_id, explanation: args.explanation, plan: args.plan })
}

fn other(kind: &str, sub_kind: Option<&str>) -> RolloutRecord {
    let mut label = match sub_kind {
        Some(sub) => format!("{kind}/{sub}"),
        None => kind.to_owned(),
    };
    truncate_at_char(&mut label, MAX_KIND_LABEL_BYTES);
    RolloutRecord::Other { kind: label }
}

fn parse_session_meta(mut payload: Map<String, Value>) -> Result<RolloutRecord, RecordError> {
    // Some builds nest the metadata under `meta` (a flattened struct in others).
    if let Some(Value::Object(meta)) = payload.remove("meta") {
        if !payload.contains_key("id") {
            payload = meta;
        }
    }
    let kind = "session_meta";
    let session_id = required_str(&payload, kind, "id")?;
    // A session id names a file, a cursor and the events of a stream: a Codex id is a UUID.
    // One longer or with control characters is no session id (a 1,500-byte one made an output
    // cursor too long to be accepted back, and its assertion ended the daemon).
    if session_id.is_empty() || session_id.len() > MAX_SESSION_ID_BYTES || session_id.chars().any(char::is_control) {
        return Err(RecordError::WrongType { kind: kind.into(), field: "id" });
    }
    let cwd = required_str(&payload, kind, "cwd")?;
    Ok(RolloutRecord::SessionMeta {
        session_id,
        cwd: PathBuf::from(cwd),
        cli_version: optional_str(&payload, kind, "cli_version")?,
        originator: optional_str(&payload, kind, "originator")?,
    })
}

/// Reads the `event_msg` kinds the observer needs; every other one (token counts, settings) is
/// `Other` by its label, its payload never built.
fn parse_event_msg(event: &str, raw: &RawValue) -> Result<RolloutRecord, RecordError> {
    let kind = format!("event_msg/{event}");
    match event {
        "task_started" => {
            let payload = whole(raw)?;
            Ok(RolloutRecord::TurnStarted { turn_id: required_str(&payload, &kind, "turn_id")? })
        }
        "task_complete" => {
            let payload = whole(raw)?;
            Ok(RolloutRecord::TurnComplete {
                turn_id: required_str(&payload, &kind, "turn_id")?,
                last_agent_message: optional_text(&payload, &kind, "last_agent_message")?,
            })
        }
        "turn_aborted" => {
            let payload = whole(raw)?;
            Ok(RolloutRecord::TurnAborted {
                turn_id: optional_str(&payload, &kind, "turn_id")?,
                // The reason is informative only; an absent one is reported as such, not invented.
                reason: optional_str(&payload, &kind, "reason")?.unwrap_or_else(|| "unspecified".into()),
            })
        }
        "user_message" => {
            let payload = whole(raw)?;
            Ok(RolloutRecord::UserMessage {
                turn_id: optional_str(&payload, &kind, "turn_id")?,
                text: required_text(&payload, &kind, "message")?,
                source: MessageSource::LegacyEvent,
            })
        }
        "agent_message" => {
            let payload = whole(raw)?;
            Ok(RolloutRecord::AgentMessage {
                turn_id: optional_str(&payload, &kind, "turn_id")?,
                text: required_text(&payload, &kind, "message")?,
                source: MessageSource::LegacyEvent,
                phase: phase_label(&payload),
            })
        }
        "item_completed" => parse_item_completed(&whole(raw)?, &kind),
        _ => Ok(other("event_msg", Some(event))),
    }
}

/// `item_completed` carries `turn_id` and an `item` whose `type` names the turn item.
fn parse_item_completed(payload: &Map<String, Value>, kind: &str) -> Result<RolloutRecord, RecordError> {
    let Some(item) = payload.get("item") else {
        return Err(RecordError::MissingField { kind: kind.into(), field: "item" });
    };
    let Value::Object(item) = item else {
        return Err(RecordError::WrongType { kind: kind.into(), field: "item" });
    };
    let item_type = item.get("type").and_then(Value::as_str).unwrap_or("");
    let turn_id = optional_str(payload, kind, "turn_id")?;
    match item_type {
        "UserMessage" => Ok(RolloutRecord::UserMessage {
            turn_id,
            text: item_text(item, kind)?,
            source: MessageSource::ItemCompleted,
        }),
        "AgentMessage" => Ok(RolloutRecord::AgentMessage {
            turn_id,
            text: item_text(item, kind)?,
            source: MessageSource::ItemCompleted,
            phase: phase_label(item),
        }),
        _ => Ok(other("event_msg/item_completed", Some(item_type))),
    }
}

/// EV-10: a message's `phase` label, when it is a short string (anything else is no label:
/// the message itself is still reported).
fn phase_label(map: &Map<String, Value>) -> Option<String> {
    map.get("phase").and_then(Value::as_str).filter(|p| !p.is_empty() && p.len() <= MAX_KIND_LABEL_BYTES).map(str::to_owned)
}

/// The text of a turn item: its `content[]` text parts joined in order (images and other
/// non-text parts carry no `text` and are skipped), or a plain `text` field.
fn item_text(item: &Map<String, Value>, kind: &str) -> Result<String, RecordError> {
    match item.get("content") {
        Some(Value::Array(parts)) => {
            let mut text = String::new();
            for part in parts {
                if let Some(piece) = part.get("text").and_then(Value::as_str) {
                    text.push_str(piece);
                }
            }
            truncate_at_char(&mut text, MAX_RECORD_TEXT_BYTES);
            Ok(text)
        }
        Some(_) => Err(RecordError::WrongType { kind: kind.into(), field: "item.content" }),
        None => required_text(item, kind, "text"),
    }
}

fn required_str(map: &Map<String, Value>, kind: &str, field: &'static str) -> Result<String, RecordError> {
    optional_str(map, kind, field)?
        .ok_or_else(|| RecordError::MissingField { kind: kind.into(), field })
}

fn optional_str(
    map: &Map<String, Value>,
    kind: &str,
    field: &'static str,
) -> Result<Option<String>, RecordError> {
    match map.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RecordError::WrongType { kind: kind.into(), field }),
    }
}

fn required_text(map: &Map<String, Value>, kind: &str, field: &'static str) -> Result<String, RecordError> {
    optional_text(map, kind, field)?.ok_or_else(|| RecordError::MissingField { kind: kind.into(), field })
}

fn optional_text(
    map: &Map<String, Value>,
    kind: &str,
    field: &'static str,
) -> Result<Option<String>, RecordError> {
    let mut text = optional_str(map, kind, field)?;
    if let Some(text) = text.as_mut() {
        truncate_at_char(text, MAX_RECORD_TEXT_BYTES);
    }
    Ok(text)
}

/// Cuts `text` to at most `max_bytes`, at a character boundary.
pub(crate) fn truncate_at_char(text: &mut String, max_bytes: usize) {
    if text.len() <= max_bytes {
        return;
    }
    let mut cut = max_bytes;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    text.truncate(cut);
    assert!(text.len() <= max_bytes);
}

/// Keeps "one prompt, one UserMessage" for builds that write the prompt both as
/// `item_completed` and as a legacy `user_message` event (same for agent messages).
///
/// Rule: once a file has shown any `item_completed` message, it speaks the item dialect and
/// its legacy message events are duplicates, reported as `Other`. Codex emits the item before
/// its legacy form, so the first legacy copy of a prompt is never seen before its item.
/// A file that never shows an item keeps its legacy events (older builds).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PromptDeduper {
    item_dialect: bool,
}

impl PromptDeduper {
    /// Starts with knowledge of the dialect (e.g. restored with a cursor).
    pub fn new(item_dialect: bool) -> Self {
        PromptDeduper { item_dialect }
    }

    /// True once an `item_completed` message was seen.
    pub fn item_dialect(&self) -> bool {
        self.item_dialect
    }

    /// Passes a record through, demoting legacy duplicates in an item-dialect file.
    pub fn filter(&mut self, record: RolloutRecord) -> RolloutRecord {
        match &record {
            RolloutRecord::UserMessage { source, .. } | RolloutRecord::AgentMessage { source, .. } => {
                match source {
                    MessageSource::ItemCompleted => {
                        self.item_dialect = true;
                        record
                    }
                    MessageSource::LegacyEvent if self.item_dialect => {
                        let name = match record {
                            RolloutRecord::UserMessage { .. } => "user_message",
                            _ => "agent_message",
                        };
                        other("event_msg", Some(&format!("{name}(legacy duplicate)")))
                    }
                    MessageSource::LegacyEvent => record,
                }
            }
            RolloutRecord::SessionMeta { .. }
            | RolloutRecord::PlanUpdated { .. }
            | RolloutRecord::TurnStarted { .. }
            | RolloutRecord::TurnComplete { .. }
            | RolloutRecord::TurnAborted { .. }
            | RolloutRecord::Other { .. } => record,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, payload: &str) -> Vec<u8> {
        format!(r#"{{"timestamp":"2026-11-30T10:00:00.000Z","ordinal":3,"type":"{kind}","payload":{payload}}}"#)
            .into_bytes()
    }

    #[test]
    fn session_meta_gives_identity_and_cwd() {
        let rec = parse_line(&line(
            "session_meta",
            r#"{"id":"0199-abc","cwd":"/w/proj","cli_version":"0.169.0","originator":"codex_cli_rs","instructions":null}"#,
        ));
        assert_eq!(
            rec,
            Ok(RolloutRecord::SessionMeta {
                session_id: "0199-abc".into(),
                cwd: "/w/proj".into(),
                cli_version: Some("0.169.0".into()),
                originator: Some("codex_cli_rs".into()),
            })
        );
    }

    #[test]
    fn session_meta_nested_under_meta_and_missing_id_is_an_error() {
        let nested = parse_line(&line("session_meta", r#"{"meta":{"id":"s1","cwd":"/a"},"git":{}}"#));
        assert!(matches!(nested, Ok(RolloutRecord::SessionMeta { ref session_id, .. }) if session_id == "s1"));
        let missing = parse_line(&line("session_meta", r#"{"cwd":"/a"}"#));
        assert_eq!(missing, Err(RecordError::MissingField { kind: "session_meta".into(), field: "id" }));
    }

    /// OUT-3, CORR-*: a session id that is no id (too long, empty, control characters) makes
    /// the record unusable: a 1,500-byte one made an output cursor too long to be accepted back,
    /// and the cursor's assertion ended the daemon.
    #[test]
    fn a_session_id_that_is_no_id_is_refused() {
        let wrong = Err(RecordError::WrongType { kind: "session_meta".into(), field: "id" });
        for id in ["s".repeat(MAX_SESSION_ID_BYTES + 1), String::new(), "a\u{1}b".to_string()] {
            let payload = serde_json::json!({"id": id, "cwd": "/a"}).to_string();
            assert_eq!(parse_line(&line("session_meta", &payload)), wrong, "{id:?}");
        }
        let longest = "s".repeat(MAX_SESSION_ID_BYTES);
        let payload = serde_json::json!({"id": longest, "cwd": "/a"}).to_string();
        assert!(matches!(parse_line(&line("session_meta", &payload)), Ok(RolloutRecord::SessionMeta { .. })));
    }

    #[test]
    fn turn_lifecycle_events() {
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"task_started","turn_id":"t1","model_context_window":1}"#)),
            Ok(RolloutRecord::TurnStarted { turn_id: "t1".into() })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"task_complete","turn_id":"t1","last_agent_message":"done"}"#)),
            Ok(RolloutRecord::TurnComplete { turn_id: "t1".into(), last_agent_message: Some("done".into()) })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"task_complete","turn_id":"t1","last_agent_message":null}"#)),
            Ok(RolloutRecord::TurnComplete { turn_id: "t1".into(), last_agent_message: None })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"turn_aborted","turn_id":"t1","reason":"interrupted"}"#)),
            Ok(RolloutRecord::TurnAborted { turn_id: Some("t1".into()), reason: "interrupted".into() })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"turn_aborted","reason":"replaced"}"#)),
            Ok(RolloutRecord::TurnAborted { turn_id: None, reason: "replaced".into() })
        );
    }

    #[test]
    fn task_started_without_turn_id_is_reported_not_guessed() {
        let rec = parse_line(&line("event_msg", r#"{"type":"task_started","model_context_window":5}"#));
        assert_eq!(
            rec,
            Err(RecordError::MissingField { kind: "event_msg/task_started".into(), field: "turn_id" })
        );
    }

    #[test]
    fn item_completed_user_and_agent_messages() {
        let user = parse_line(&line(
            "event_msg",
            r#"{"type":"item_completed","thread_id":"th","turn_id":"t2","item":{"type":"UserMessage","id":"u1","content":[{"type":"text","text":"Fix\tthe "},{"type":"image","image_url":"x"},{"type":"text","text":"bug ü"}]}}"#,
        ));
        assert_eq!(
            user,
            Ok(RolloutRecord::UserMessage {
                turn_id: Some("t2".into()),
                text: "Fix\tthe bug ü".into(),
                source: MessageSource::ItemCompleted,
            })
        );
        let agent = parse_line(&line(
            "event_msg",
            r#"{"type":"item_completed","turn_id":"t2","item":{"type":"AgentMessage","id":"a1","content":[{"type":"Text","text":"Done."}]}}"#,
        ));
        assert_eq!(
            agent,
            Ok(RolloutRecord::AgentMessage {
                turn_id: Some("t2".into()),
                text: "Done.".into(),
                source: MessageSource::ItemCompleted,
                phase: None,
            })
        );
        let reasoning = parse_line(&line(
            "event_msg",
            r#"{"type":"item_completed","turn_id":"t2","item":{"type":"Reasoning","id":"r"}}"#,
        ));
        assert_eq!(reasoning, Ok(RolloutRecord::Other { kind: "event_msg/item_completed/Reasoning".into() }));
    }

    #[test]
    fn agent_message_phase_is_kept_when_codex_records_one() {
        let with = |phase: &str| {
            line("event_msg", &format!(r#"{{"type":"item_completed","turn_id":"t","item":{{"type":"AgentMessage","id":"a","phase":{phase},"content":[{{"type":"Text","text":"x"}}]}}}}"#))
        };
        let phase_of = |bytes: Vec<u8>| match parse_line(&bytes) {
            Ok(RolloutRecord::AgentMessage { phase, .. }) => phase,
            other => panic!("{other:?}"),
        };
        assert_eq!(phase_of(with(r#""commentary""#)), Some("commentary".to_string()));
        assert_eq!(phase_of(with(r#""final_answer""#)), Some("final_answer".to_string()));
        assert_eq!(phase_of(with("7")), None, "not a label: the message stays, the label goes");
        assert_eq!(phase_of(with(&format!("{:?}", "p".repeat(MAX_KIND_LABEL_BYTES + 1)))), None);
    }

    #[test]
    fn plan_tool_calls_are_plans_and_nothing_else_is() {
        use wakterm_engine::{PlanStatus, PlanStep};
        let call = |name: &str, extra: &str, arguments: &str| {
            let arguments = serde_json::to_string(arguments).unwrap();
            line(
                "response_item",
                &format!(r#"{{"type":"function_call","name":"{name}"{extra},"arguments":{arguments},"call_id":"c1","internal_chat_message_metadata_passthrough":{{"turn_id":"t1"}}}}"#),
            )
        };
        let good = r#"{"explanation":"why","plan":[{"step":"read","status":"completed"},{"step":"write","status":"in_progress"}]}"#;
        assert_eq!(
            parse_line(&call("update_plan", "", good)),
            Ok(RolloutRecord::PlanUpdated {
                turn_id: Some("t1".into()),
                explanation: Some("why".into()),
                plan: vec![
                    PlanStep { step: "read".into(), status: PlanStatus::Completed },
                    PlanStep { step: "write".into(), status: PlanStatus::InProgress },
                ],
            })
        );
        // Arguments Codex refuses (an unknown status, no plan, not JSON) made no plan.
        for refused in [r#"{"plan":[{"step":"x","status":"blocked"}]}"#, r#"{"explanation":"e"}"#, "not json"] {
            let record = parse_line(&call("update_plan", "", refused));
            assert!(matches!(&record, Ok(RolloutRecord::Other { kind }) if kind.contains("arguments refused")), "{record:?}");
        }
        // Another tool, or an MCP tool that happens to share the name, is not the plan tool.
        assert!(matches!(parse_line(&call("shell", "", good)), Ok(RolloutRecord::Other { .. })));
        assert!(matches!(parse_line(&call("update_plan", r#","namespace":"mcp__x""#, good)), Ok(RolloutRecord::Other { .. })));
    }

    #[test]
    fn legacy_user_and_agent_message_events() {
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"user_message","message":"hello","images":null}"#)),
            Ok(RolloutRecord::UserMessage { turn_id: None, text: "hello".into(), source: MessageSource::LegacyEvent })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"agent_message","message":"hi"}"#)),
            Ok(RolloutRecord::AgentMessage { turn_id: None, text: "hi".into(), source: MessageSource::LegacyEvent, phase: None })
        );
    }

    #[test]
    fn response_item_messages_are_never_prompts() {
        for role in ["user", "developer", "assistant"] {
            let rec = parse_line(&line(
                "response_item",
                &format!(
                    r#"{{"type":"message","role":"{role}","content":[{{"type":"input_text","text":"<environment_context>"}}]}}"#
                ),
            ));
            assert_eq!(rec, Ok(RolloutRecord::Other { kind: "response_item/message".into() }));
        }
    }

    #[test]
    fn unknown_kinds_are_other_not_errors() {
        assert_eq!(
            parse_line(&line("world_state", r#"{"x":1}"#)),
            Ok(RolloutRecord::Other { kind: "world_state".into() })
        );
        assert_eq!(
            parse_line(&line("turn_context", r#"{"turn_id":"t","cwd":"/"}"#)),
            Ok(RolloutRecord::Other { kind: "turn_context".into() })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"token_count","info":null}"#)),
            Ok(RolloutRecord::Other { kind: "event_msg/token_count".into() })
        );
        assert_eq!(parse_line(br#"{"type":"compacted"}"#), Ok(RolloutRecord::Other { kind: "compacted".into() }));
    }

    #[test]
    fn corrupt_and_odd_lines_are_structured_errors() {
        assert!(matches!(parse_line(b"{\"type\":\"event_msg\",\"pay"), Err(RecordError::InvalidJson { .. })));
        assert_eq!(parse_line(b"  \n"), Err(RecordError::EmptyLine));
        assert_eq!(parse_line(b"[1,2]"), Err(RecordError::NotARecord));
        assert_eq!(parse_line(b"{\"type\":7}"), Err(RecordError::NotARecord));
        assert!(matches!(parse_line(&[0xff, 0xfe, b'\n']), Err(RecordError::InvalidJson { .. })));
        assert_eq!(
            parse_line(br#"{"type":"event_msg"}"#),
            Err(RecordError::MissingField { kind: "event_msg".into(), field: "payload" })
        );
        assert_eq!(
            parse_line(&line("event_msg", r#"{"type":"task_started","turn_id":5}"#)),
            Err(RecordError::WrongType { kind: "event_msg/task_started".into(), field: "turn_id" })
        );
    }

    // Only the fields a record needs are built (`json_fields`): a skipped field is checked for
    // syntax and UTF-8 only, so a lone surrogate escape or an out-of-range number there no
    // longer hides the record; in a field that is read it still makes the line invalid.
    #[test]
    fn skipped_fields_are_checked_for_syntax_and_read_fields_fully() {
        let started = |extra: &str| format!(r#"{{"x":{extra},"type":"event_msg","payload":{{"type":"task_started","turn_id":"t1","y":{extra}}}}}"#);
        for odd in [r#""\ud800""#, "1e400", r#"{"deep":[[[[[[["\udc00"]]]]]]]}"#] {
            let record = parse_line(started(odd).as_bytes());
            assert!(matches!(record, Err(RecordError::InvalidJson { .. })), "the payload of a read kind is built: {odd} {record:?}");
            let skipped = format!(r#"{{"x":{odd},"type":"event_msg","payload":{{"type":"token_count","y":{odd}}}}}"#);
            assert_eq!(parse_line(skipped.as_bytes()), Ok(RolloutRecord::Other { kind: "event_msg/token_count".into() }), "{odd}");
            let item = format!(r#"{{"type":"response_item","payload":{{"type":"message","content":[{odd}]}}}}"#);
            assert_eq!(parse_line(item.as_bytes()), Ok(RolloutRecord::Other { kind: "response_item/message".into() }), "{odd}");
        }
        let read = br#"{"type":"event_msg","payload":{"type":"task_started","turn_id":"\ud800"}}"#;
        assert!(matches!(parse_line(read), Err(RecordError::InvalidJson { .. })));
        let bad_utf8_skipped = b"{\"x\":\"\xff\",\"type\":\"event_msg\",\"payload\":{\"type\":\"token_count\"}}";
        assert!(matches!(parse_line(bad_utf8_skipped), Err(RecordError::InvalidJson { .. })), "UTF-8 is checked everywhere");
        let unclosed_skipped = br#"{"x":[1,{"a":2],"type":"event_msg","payload":{"type":"token_count"}}"#;
        assert!(matches!(parse_line(unclosed_skipped), Err(RecordError::InvalidJson { .. })), "so is syntax");
    }

    #[test]
    fn trailing_newline_and_crlf_are_accepted() {
        let mut bytes = line("event_msg", r#"{"type":"task_started","turn_id":"t9"}"#);
        bytes.extend_from_slice(b"\r\n");
        assert_eq!(parse_line(&bytes), Ok(RolloutRecord::TurnStarted { turn_id: "t9".into() }));
    }

    #[test]
    fn oversized_text_is_cut_at_a_char_boundary() {
        let big = "é".repeat(MAX_RECORD_TEXT_BYTES / 2 + 3);
        let rec = parse_line(&line("event_msg", &format!(r#"{{"type":"agent_message","message":"{big}"}}"#)));
        let Ok(RolloutRecord::AgentMessage { text, .. }) = rec else { panic!("expected agent message") };
        assert!(text.len() <= MAX_RECORD_TEXT_BYTES);
        assert!(text.len() > MAX_RECORD_TEXT_BYTES - 4);
    }

    #[test]
    fn deduper_keeps_one_prompt_when_both_forms_are_written() {
        let item = parse_line(&line(
            "event_msg",
            r#"{"type":"item_completed","turn_id":"t","item":{"type":"UserMessage","content":[{"type":"text","text":"p"}]}}"#,
        ))
        .unwrap();
        let legacy = parse_line(&line("event_msg", r#"{"type":"user_message","message":"p"}"#)).unwrap();
        let mut dedup = PromptDeduper::default();
        let out: Vec<_> = [item, legacy].into_iter().map(|r| dedup.filter(r)).collect();
        let prompts = out.iter().filter(|r| matches!(r, RolloutRecord::UserMessage { .. })).count();
        assert_eq!(prompts, 1);
        assert!(matches!(out[1], RolloutRecord::Other { .. }));
    }

    #[test]
    fn deduper_keeps_legacy_prompts_in_legacy_files() {
        let legacy = parse_line(&line("event_msg", r#"{"type":"user_message","message":"p"}"#)).unwrap();
        let mut dedup = PromptDeduper::default();
        assert_eq!(dedup.filter(legacy.clone()), legacy);
        assert!(!dedup.item_dialect());
    }
}
