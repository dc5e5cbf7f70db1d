//! The rollout records Codex 0.169 writes per turn, aligned with the captured fixtures in
//! `fixtures/codex-0.169/` (field names and order; bulky instruction texts are shortened).
//!
//! Payloads are `derive(Serialize)` structs so the field order on disk is the declaration
//! order, as in the real Codex. Observers key on: `task_started.turn_id`, the prompt in the
//! `response_item` user message carrying `internal_chat_message_metadata_passthrough.turn_id`,
//! `item_completed` items of type `UserMessage` / `AgentMessage`, `task_complete`
//! (`last_agent_message`) and `turn_aborted`.
//!
//! Order observed: the first turn of a file writes `task_started`, developer and
//! environment-context messages, `world_state`, `turn_context`, `thread_settings_applied`;
//! later turns write `thread_settings_applied`, `task_started`, `turn_context`. Then the user
//! message (`response_item` + `item_completed`), and at the end the `AgentMessage`, the
//! assistant `response_item`, `token_usage_record`, `token_count`, `task_complete`.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::Serialize;

use crate::rollout_writer::RolloutWriter;

/// Context window the real 0.169 reports for the mock model.
pub const MODEL_CONTEXT_WINDOW_TOKENS: u64 = 258_400;

/// Model name the fake reports.
pub const FAKE_MODEL: &str = "mock-model";

/// `reason` of a `turn_aborted` record written for an interrupt (Esc, or `--abort-on`).
pub const ABORT_REASON_INTERRUPTED: &str = "interrupted";

/// What the real Codex injects into history when the user interrupts a turn.
const TURN_ABORTED_CONTEXT: &str = "<turn_aborted>\nThe user interrupted the previous turn on purpose. Any running unified exec processes may still be running in the background. If any tools/commands were aborted, they may have partially executed.\n</turn_aborted>";

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum EventMsg<'a> {
    TaskStarted {
        turn_attribution: TurnAttribution<'a>,
        turn_id: &'a str,
        root_turn_id: &'a str,
        started_at: u64,
        model_context_window: u64,
        collaboration_mode_kind: &'a str,
    },
    ThreadSettingsApplied {
        thread_id: &'a str,
        thread_settings: ThreadSettings<'a>,
    },
    ItemCompleted {
        thread_id: &'a str,
        turn_id: &'a str,
        item: TurnItem<'a>,
        started_at_ms: u64,
        completed_at_ms: u64,
    },
    TokenCount {
        info: Option<TokenInfo>,
        rate_limits: RateLimits,
    },
    TaskComplete {
        root_turn_id: &'a str,
        turn_id: &'a str,
        last_agent_message: Option<&'a str>,
        started_at: u64,
        completed_at: u64,
        duration_ms: u64,
        time_to_first_token_ms: u64,
    },
    TurnAborted {
        root_turn_id: &'a str,
        turn_id: &'a str,
        reason: &'a str,
        started_at: u64,
        completed_at: u64,
        duration_ms: u64,
    },
}

#[derive(Serialize)]
struct TurnAttribution<'a> {
    turn_id: &'a str,
    turn_trigger: &'a str,
    parent_turn_id: Option<&'a str>,
    initiating_agent_path: Option<&'a str>,
    root_turn_id: &'a str,
}

#[derive(Serialize)]
struct ThreadSettings<'a> {
    model: &'a str,
    model_provider_id: &'a str,
    approval_policy: &'a str,
    cwd: &'a Path,
}

/// Codex `TurnItem`: the variant name is the `type` tag (`UserMessage`, `AgentMessage`).
#[derive(Serialize)]
#[serde(tag = "type")]
enum TurnItem<'a> {
    UserMessage {
        id: String,
        client_id: String,
        content: Vec<UserInput<'a>>,
    },
    AgentMessage {
        id: String,
        content: Vec<AgentContent<'a>>,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum UserInput<'a> {
    Text {
        text: &'a str,
        text_elements: [(); 0],
    },
}

#[derive(Serialize)]
#[serde(tag = "type")]
enum AgentContent<'a> {
    Text { text: &'a str },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ResponseItem<'a> {
    Message {
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<&'a str>,
        id: String,
        role: &'a str,
        content: [ContentItem<'a>; 1],
        #[serde(skip_serializing_if = "Option::is_none")]
        internal_chat_message_metadata_passthrough: Option<Passthrough<'a>>,
    },
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum ContentItem<'a> {
    InputText { text: &'a str },
    OutputText { text: &'a str, annotations: [(); 0] },
}

#[derive(Serialize)]
struct Passthrough<'a> {
    turn_id: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    create_time: Option<f64>,
    content_item_kinds: [&'a str; 1],
    #[serde(skip_serializing_if = "Option::is_none")]
    content_item_metadata: Option<[ItemMetadata<'a>; 1]>,
}

#[derive(Serialize)]
struct ItemMetadata<'a> {
    provenance: Provenance<'a>,
}

#[derive(Serialize)]
struct Provenance<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    hook: Option<bool>,
}

/// Line-level `metadata` the real Codex puts after the payload of `response_item` lines.
#[derive(Serialize)]
struct HistoryMetadata {
    history_sequence: u64,
    sampled_through_sequence: u64,
    client_authored: bool,
}

#[derive(Serialize)]
struct WorldState<'a> {
    full: bool,
    state: WorldStateBody<'a>,
}

#[derive(Serialize)]
struct WorldStateBody<'a> {
    environments: Environments<'a>,
}

#[derive(Serialize)]
struct Environments<'a> {
    environments: LocalEnvironment<'a>,
}

#[derive(Serialize)]
struct LocalEnvironment<'a> {
    local: Environment<'a>,
}

#[derive(Serialize)]
struct Environment<'a> {
    cwd: &'a Path,
    status: &'a str,
    shell: &'a str,
}

#[derive(Serialize)]
struct TurnContext<'a> {
    turn_id: &'a str,
    root_turn_id: &'a str,
    disabled_plugin_ids: [(); 0],
    cwd: &'a Path,
    approval_policy: &'a str,
    approvals_reviewer: &'a str,
    model: &'a str,
    summary: &'a str,
    sandbox_policy: SandboxPolicy,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
enum SandboxPolicy {
    ReadOnly,
}

#[derive(Serialize, Clone, Copy, Default, Debug)]
struct TokenUsage {
    input_tokens: u64,
    cached_input_tokens: u64,
    cache_write_input_tokens: u64,
    output_tokens: u64,
    reasoning_output_tokens: u64,
    total_tokens: u64,
}

#[derive(Serialize)]
struct TokenInfo {
    total_token_usage: TokenUsage,
    last_token_usage: TokenUsage,
    last_usage_includes_reasoning: bool,
    model_context_window: u64,
}

#[derive(Serialize)]
struct RateLimits {
    limit_id: &'static str,
    primary: Option<()>,
    secondary: Option<()>,
}

#[derive(Serialize)]
struct TokenUsageRecord<'a> {
    thread_id: &'a str,
    turn_id: &'a str,
    session_id: &'a str,
    root_turn_id: &'a str,
    response_id: String,
    usage: TokenUsage,
    turn_token_usage: TokenUsage,
    thread_token_usage: TokenUsage,
}

/// A turn as the recorder needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnRecord {
    pub turn_id: String,
    pub started: SystemTime,
}

/// Writes Codex-shaped records for one session into its rollout file.
#[derive(Debug)]
pub struct RolloutRecorder {
    writer: RolloutWriter,
    cwd: PathBuf,
    turns_opened: u64,
    history_sequence: u64,
    sampled_through_sequence: u64,
    responses: u64,
    thread_usage: TokenUsage,
}

impl RolloutRecorder {
    pub fn new(writer: RolloutWriter, cwd: PathBuf) -> Self {
        RolloutRecorder {
            writer,
            cwd,
            turns_opened: 0,
            history_sequence: 0,
            sampled_through_sequence: 0,
            responses: 0,
            thread_usage: TokenUsage::default(),
        }
    }

    pub fn writer(&self) -> &RolloutWriter {
        &self.writer
    }

    pub fn writer_mut(&mut self) -> &mut RolloutWriter {
        &mut self.writer
    }

    fn thread_id(&self) -> String {
        self.writer.session_id().to_owned()
    }

    /// Opens a turn; the first turn of a file also carries the injected context.
    pub fn open_turn(&mut self, turn: &TurnRecord) -> io::Result<()> {
        let first = self.turns_opened == 0;
        self.turns_opened += 1;
        if !first {
            self.thread_settings_applied()?;
        }
        let turn_id = turn.turn_id.as_str();
        let attribution = TurnAttribution {
            turn_id,
            turn_trigger: "user",
            parent_turn_id: None,
            initiating_agent_path: None,
            root_turn_id: turn_id,
        };
        let started = EventMsg::TaskStarted {
            turn_attribution: attribution,
            turn_id,
            root_turn_id: turn_id,
            started_at: unix_secs(turn.started),
            model_context_window: MODEL_CONTEXT_WINDOW_TOKENS,
            collaboration_mode_kind: "default",
        };
        self.writer.append("event_msg", &started)?;
        if first {
            let permissions = "<permissions instructions>approval_policy: never; sandbox: read-only</permissions instructions>";
            self.history_item(
                "developer",
                ContentItem::InputText { text: permissions },
                None,
                None,
            )?;
            let environment = format!(
                "<environment_context>\n  <cwd>{}</cwd>\n  <shell>bash</shell>\n</environment_context>",
                self.cwd.display()
            );
            self.history_item(
                "user",
                ContentItem::InputText { text: &environment },
                None,
                None,
            )?;
            let cwd = self.cwd.clone();
            let local = Environment {
                cwd: &cwd,
                status: "available",
                shell: "bash",
            };
            let environments = Environments {
                environments: LocalEnvironment { local },
            };
            let world = WorldState {
                full: true,
                state: WorldStateBody { environments },
            };
            self.writer.append("world_state", &world)?;
        }
        self.turn_context(turn_id)?;
        if first {
            self.thread_settings_applied()?;
        }
        Ok(())
    }

    /// A user message of the turn: the opening prompt or a steering message.
    pub fn user_message(&mut self, turn: &TurnRecord, text: &str) -> io::Result<()> {
        let turn_id = turn.turn_id.as_str();
        let passthrough = Passthrough {
            turn_id,
            create_time: Some(unix_secs_f64(SystemTime::now())),
            content_item_kinds: ["user.text"],
            content_item_metadata: Some([ItemMetadata {
                provenance: Provenance {
                    kind: "user",
                    hook: None,
                },
            }]),
        };
        self.history_item(
            "user",
            ContentItem::InputText { text },
            None,
            Some(passthrough),
        )?;
        let item = TurnItem::UserMessage {
            id: uuid::Uuid::new_v4().to_string(),
            client_id: uuid::Uuid::new_v4().to_string(),
            content: vec![UserInput::Text {
                text,
                text_elements: [],
            }],
        };
        self.item_completed(turn_id, item)
    }

    /// Closes the turn with its final answer (`last_agent_message` = `reply`).
    pub fn complete_turn(
        &mut self,
        turn: &TurnRecord,
        prompt: &str,
        reply: &str,
    ) -> io::Result<()> {
        let turn_id = turn.turn_id.as_str();
        self.responses += 1;
        let message_id = format!("msg_fake_{}", self.responses);
        let agent = TurnItem::AgentMessage {
            id: message_id.clone(),
            content: vec![AgentContent::Text { text: reply }],
        };
        self.item_completed(turn_id, agent)?;
        let passthrough = Passthrough {
            turn_id,
            create_time: None,
            content_item_kinds: ["unknown"],
            content_item_metadata: None,
        };
        let content = ContentItem::OutputText {
            text: reply,
            annotations: [],
        };
        self.history_item_with_id(
            "assistant",
            content,
            Some("completed"),
            Some(passthrough),
            message_id,
        )?;
        self.sampled_through_sequence = self.history_sequence;
        self.token_usage(turn_id, prompt, reply)?;
        let now = SystemTime::now();
        let complete = EventMsg::TaskComplete {
            root_turn_id: turn_id,
            turn_id,
            last_agent_message: Some(reply),
            started_at: unix_secs(turn.started),
            completed_at: unix_secs(now),
            duration_ms: elapsed_ms(turn.started, now),
            time_to_first_token_ms: elapsed_ms(turn.started, now),
        };
        self.writer.append("event_msg", &complete)?;
        Ok(())
    }

    /// Closes the turn without a final, as an interrupt does.
    pub fn abort_turn(&mut self, turn: &TurnRecord, reason: &str) -> io::Result<()> {
        let turn_id = turn.turn_id.as_str();
        let passthrough = Passthrough {
            turn_id,
            create_time: Some(unix_secs_f64(SystemTime::now())),
            content_item_kinds: ["generic.turn_aborted"],
            content_item_metadata: Some([ItemMetadata {
                provenance: Provenance {
                    kind: "harness",
                    hook: Some(false),
                },
            }]),
        };
        let content = ContentItem::InputText {
            text: TURN_ABORTED_CONTEXT,
        };
        self.history_item("user", content, None, Some(passthrough))?;
        let now = SystemTime::now();
        let aborted = EventMsg::TurnAborted {
            root_turn_id: turn_id,
            turn_id,
            reason,
            started_at: unix_secs(turn.started),
            completed_at: unix_secs(now),
            duration_ms: elapsed_ms(turn.started, now),
        };
        self.writer.append("event_msg", &aborted)?;
        Ok(())
    }

    /// The `token_count` without usage (`info: null`) the real Codex writes once a model
    /// request has been in flight for a while: seen before a steer and before an interrupt.
    pub fn rate_limits_snapshot(&mut self) -> io::Result<()> {
        let rate_limits = RateLimits {
            limit_id: "codex",
            primary: None,
            secondary: None,
        };
        self.writer.append(
            "event_msg",
            &EventMsg::TokenCount {
                info: None,
                rate_limits,
            },
        )?;
        Ok(())
    }

    fn turn_context(&mut self, turn_id: &str) -> io::Result<()> {
        let cwd = self.cwd.clone();
        let context = TurnContext {
            turn_id,
            root_turn_id: turn_id,
            disabled_plugin_ids: [],
            cwd: &cwd,
            approval_policy: "never",
            approvals_reviewer: "user",
            model: FAKE_MODEL,
            summary: "none",
            sandbox_policy: SandboxPolicy::ReadOnly,
        };
        self.writer.append("turn_context", &context)?;
        Ok(())
    }

    fn thread_settings_applied(&mut self) -> io::Result<()> {
        let (thread_id, cwd) = (self.thread_id(), self.cwd.clone());
        let thread_settings = ThreadSettings {
            model: FAKE_MODEL,
            model_provider_id: "mock",
            approval_policy: "never",
            cwd: &cwd,
        };
        self.writer.append(
            "event_msg",
            &EventMsg::ThreadSettingsApplied {
                thread_id: &thread_id,
                thread_settings,
            },
        )?;
        Ok(())
    }

    fn item_completed(&mut self, turn_id: &str, item: TurnItem<'_>) -> io::Result<()> {
        let thread_id = self.thread_id();
        let now_ms = unix_ms(SystemTime::now());
        let event = EventMsg::ItemCompleted {
            thread_id: &thread_id,
            turn_id,
            item,
            started_at_ms: now_ms,
            completed_at_ms: now_ms,
        };
        self.writer.append("event_msg", &event)?;
        Ok(())
    }

    fn history_item(
        &mut self,
        role: &str,
        content: ContentItem<'_>,
        status: Option<&str>,
        passthrough: Option<Passthrough<'_>>,
    ) -> io::Result<()> {
        let id = format!("msg_{}", uuid::Uuid::new_v4());
        self.history_item_with_id(role, content, status, passthrough, id)
    }

    fn history_item_with_id(
        &mut self,
        role: &str,
        content: ContentItem<'_>,
        status: Option<&str>,
        passthrough: Option<Passthrough<'_>>,
        id: String,
    ) -> io::Result<()> {
        self.history_sequence += 1;
        let metadata = HistoryMetadata {
            history_sequence: self.history_sequence,
            sampled_through_sequence: self.sampled_through_sequence,
            client_authored: false,
        };
        let item = ResponseItem::Message {
            status,
            id,
            role,
            content: [content],
            internal_chat_message_metadata_passthrough: passthrough,
        };
        self.writer
            .append_with_metadata("response_item", &item, &metadata)?;
        Ok(())
    }

    fn token_usage(&mut self, turn_id: &str, prompt: &str, reply: &str) -> io::Result<()> {
        let usage = estimate_usage(prompt, reply);
        self.thread_usage.input_tokens += usage.input_tokens;
        self.thread_usage.output_tokens += usage.output_tokens;
        self.thread_usage.total_tokens += usage.total_tokens;
        let thread_id = self.thread_id();
        let record = TokenUsageRecord {
            thread_id: &thread_id,
            turn_id,
            session_id: &thread_id,
            root_turn_id: turn_id,
            response_id: format!("resp_fake_{}", self.responses),
            usage,
            turn_token_usage: usage,
            thread_token_usage: self.thread_usage,
        };
        self.writer.append("token_usage_record", &record)?;
        let info = TokenInfo {
            total_token_usage: self.thread_usage,
            last_token_usage: usage,
            last_usage_includes_reasoning: false,
            model_context_window: MODEL_CONTEXT_WINDOW_TOKENS,
        };
        let rate_limits = RateLimits {
            limit_id: "codex",
            primary: None,
            secondary: None,
        };
        self.writer.append(
            "event_msg",
            &EventMsg::TokenCount {
                info: Some(info),
                rate_limits,
            },
        )?;
        Ok(())
    }
}

/// About four characters per token, the usual rough estimate; nobody checks it.
fn estimate_usage(prompt: &str, reply: &str) -> TokenUsage {
    let input_tokens = prompt.chars().count() as u64 / 4 + 1;
    let output_tokens = reply.chars().count() as u64 / 4 + 1;
    TokenUsage {
        input_tokens,
        output_tokens,
        total_tokens: input_tokens + output_tokens,
        ..TokenUsage::default()
    }
}

fn since_epoch(at: SystemTime) -> Duration {
    at.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
}

fn unix_secs(at: SystemTime) -> u64 {
    since_epoch(at).as_secs()
}

fn unix_ms(at: SystemTime) -> u64 {
    u64::try_from(since_epoch(at).as_millis()).unwrap_or(u64::MAX)
}

fn unix_secs_f64(at: SystemTime) -> f64 {
    since_epoch(at).as_secs_f64()
}

fn elapsed_ms(from: SystemTime, to: SystemTime) -> u64 {
    u64::try_from(to.duration_since(from).unwrap_or_default().as_millis()).unwrap_or(u64::MAX)
}
