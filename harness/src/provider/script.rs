//! The provider's script: which reply (or failure) each prompt gets.
//!
//! A script is JSON so shell-driven tests can write one without Rust:
//!
//! ```json
//! { "default_reply": "echo: {prompt}",
//!   "rules": [ { "contains": "slow", "reply": "done {prompt}", "delay_ms": 5000 },
//!              { "contains": "think", "output_delay_ms": 5000 },
//!              { "contains": "boom", "fail": "http_500" } ] }
//! ```
//!
//! Rules are tried in order; the first whose `contains` is a substring of the prompt wins. A request
//! with no prompt, or no matching rule, gets `default_reply` with no delay.
//!
//! A rule may also script Codex's plan tool: with `"plan"` (and optionally `"commentary"`) the model
//! first answers with an assistant message holding the commentary, then an `update_plan` function
//! call; once Codex sends that call's `function_call_output` back, the rule's reply text follows:
//!
//! ```json
//! { "contains": "PLAN", "reply": "planned: {prompt}", "commentary": "Let me plan this first.",
//!   "plan": { "explanation": "why", "steps": [ { "step": "read", "status": "completed" },
//!                                               { "step": "write", "status": "in_progress" } ] } }
//! ```
//!
//! (See `Provider` for when the call is made: only if the request offers the `update_plan` tool.)
//!
//! A rule may instead script a SEQUENCE of tool calls (MCP tools too) with `"calls"`; it then
//! needs `"reply"`, whose template may quote the calls' outputs:
//!
//! ```json
//! { "contains": "ORCHESTRATE", "reply": "zola said: {output_1:/terminal_event/final_message}",
//!   "calls": [ { "namespace": "mcp__wakterm", "name": "agent_admit",
//!                "arguments": { "agent": "zola", "prompt": "q", "request_id": "<uuid>" } },
//!              { "namespace": "mcp__wakterm", "name": "request_wait",
//!                "arguments": { "request_id": "{output_0:/request_id}", "timeout_ms": 60000 } } ] }
//! ```
//!
//! Call k has `call_id` `call_mcp_k` (item id `fc_mcp_k`). The provider answers a request of the
//! turn with call k when the request (after its last user item) carries the
//! `function_call_output`s of calls 0..k-1 but not of call k, and offers call k's tool (a
//! `namespace` tool of that name holding the function, or a plain function tool when the call
//! has no namespace: Codex exposes MCP server `S` as namespace `mcp__S`). Once every call has its
//! output, it answers with the reply text. Placeholders in the reply text, and in string
//! arguments of call k (outputs 0..k-1 only), are:
//!
//! - `{output_K}`: call K's output text as Codex sent it (a string output as is; a list of
//!   `input_text` parts, which is what Codex 0.169 sends for MCP results, beginning with
//!   "Wall time: ...", joined with new lines);
//! - `{output_K:/json/pointer}`: the value at that JSON pointer of the first JSON object or array
//!   embedded in that text which has it (a string value unquoted, others as compact JSON);
//!   `{output_K:}` (empty pointer) is that first embedded JSON value itself;
//! - `{last_output}` / `{last_output:/pointer}`: the same for the last call.
//!
//! A missing output or pointer is replaced by a visible `<...>` marker, never silently by nothing.
//! Pointers cannot contain `}`. `{prompt}` is replaced first.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::Path;

/// Placeholder in reply templates replaced by the received prompt text.
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";
/// A script larger than this is refused: scripts are hand-written test inputs.
pub const MAX_SCRIPT_BYTES: u64 = 1024 * 1024;
/// Upper bound on rules, so matching stays cheap and a runaway generator is caught.
pub const MAX_SCRIPT_RULES: usize = 1024;
/// Upper bound on one delay: a hold longer than an hour is a script bug, not a test.
pub const MAX_DELAY_MS: u64 = 60 * 60 * 1000;
/// Upper bound on the steps of one scripted plan.
pub const MAX_PLAN_STEPS: usize = 100;
/// Name of Codex's plan tool (a plain function tool, no namespace).
pub const UPDATE_PLAN_TOOL: &str = "update_plan";
/// `call_id` of the scripted `update_plan` call; its `function_call_output` carries the same id.
pub const PLAN_CALL_ID: &str = "call_plan_1";
/// Item `id` of the scripted `update_plan` call.
pub const PLAN_ITEM_ID: &str = "fc_plan_1";
/// Upper bound on the scripted calls of one rule.
pub const MAX_CALLS: usize = 32;
/// `call_id` prefix of scripted sequence calls: call k is `call_mcp_k`.
pub const SEQ_CALL_ID_PREFIX: &str = "call_mcp_";
/// Item `id` prefix of scripted sequence calls: call k is `fc_mcp_k`.
pub const SEQ_ITEM_ID_PREFIX: &str = "fc_mcp_";
/// Reply used when a script does not name one.
pub const DEFAULT_REPLY_TEMPLATE: &str = "mock reply to: {prompt}";

/// How a scripted failure is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// The POST is answered `500 Internal Server Error` before any event.
    #[serde(rename = "http_500")]
    Http500,
    /// The stream opens normally and ends with a `response.failed` event instead of completing.
    ResponseFailed,
}

/// One scripted rule.
///
/// In JSON a rule is flat (`contains`, `reply`, `delay_ms`, `output_delay_ms`, `fail`, `commentary`,
/// `plan`); in Rust the reply text, the commentary and the plan travel together in [`Reply`], so
/// code that builds rules with `reply: Some("text".into())` keeps compiling.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RuleJson", into = "RuleJson")]
pub struct Rule {
    /// Substring of the prompt that selects this rule (must be non-empty).
    pub contains: String,
    /// What the model answers; `None` (or a [`Reply`] without `text`) falls back to the script's
    /// default reply text and makes no tool call.
    pub reply: Option<Reply>,
    /// Wait this long before `response.completed` (or `response.failed`): holds the turn busy
    /// after the reply text was streamed. With a plan, every response of the rule is held.
    pub delay_ms: u64,
    /// Wait this long after `response.created`, before any reply text: holds the turn busy the
    /// way a model that is still thinking does (the TUI shows its "Working" status meanwhile).
    pub output_delay_ms: u64,
    /// Deliver a failure instead of a reply (not allowed together with a plan).
    pub fail: Option<FailMode>,
}

/// The model's answer to a matched prompt.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Reply {
    /// Reply text template (`{prompt}` is replaced) and the calls made before it; `None` uses
    /// the script's default reply and makes no call.
    pub text: Option<ReplyText>,
    /// Assistant message streamed before the `update_plan` call, verbatim (needs `plan`).
    pub commentary: Option<String>,
    /// Answer first with an `update_plan` call; the text comes once Codex returned its output.
    pub plan: Option<PlanUpdate>,
}

/// The final text's template and the sequence of tool calls the model makes before it (their
/// outputs can be quoted in the template, see the module docs).
///
/// (The calls travel with the text, not as a field of [`Reply`] or [`Rule`], so code that builds
/// those with struct literals keeps compiling: `text: Some("...".into())` still works.)
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplyText {
    pub template: String,
    /// Made one per response, in order, before the text; empty: answer with the text at once.
    pub calls: Vec<ScriptedCall>,
}

impl From<&str> for ReplyText {
    fn from(text: &str) -> ReplyText {
        ReplyText::from(text.to_string())
    }
}

impl From<String> for ReplyText {
    fn from(template: String) -> ReplyText {
        ReplyText {
            template,
            calls: Vec::new(),
        }
    }
}

/// One scripted tool call of a sequence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedCall {
    /// The tool's namespace as the request offers it (`mcp__wakterm` for Codex's MCP server
    /// `wakterm`); absent: a plain function tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The bare tool name (`agent_admit`), never `mcp__wakterm__agent_admit`.
    pub name: String,
    /// A JSON object; its strings may hold `{output_K...}` placeholders of earlier calls.
    #[serde(default = "empty_object")]
    pub arguments: Value,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

impl ScriptedCall {
    /// `call_mcp_K`, the `call_id` of call `k` of a sequence.
    pub fn call_id(k: usize) -> String {
        format!("{SEQ_CALL_ID_PREFIX}{k}")
    }

    /// The streamed call for position `k`, with placeholders of `outputs` (those of calls
    /// 0..k) filled into its string arguments.
    pub fn to_tool_call(&self, k: usize, outputs: &[Option<String>]) -> ToolCall {
        let arguments = fill_value(&self.arguments, outputs);
        ToolCall {
            commentary: None,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            item_id: format!("{SEQ_ITEM_ID_PREFIX}{k}"),
            call_id: ScriptedCall::call_id(k),
            arguments: serde_json::to_string(&arguments).expect("JSON values serialize"),
        }
    }
}

fn fill_value(value: &Value, outputs: &[Option<String>]) -> Value {
    match value {
        Value::String(s) => Value::String(fill_outputs(s, outputs)),
        Value::Array(items) => Value::Array(items.iter().map(|v| fill_value(v, outputs)).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), fill_value(v, outputs)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Replaces `{output_K}`, `{output_K:/pointer}`, `{last_output}` and `{last_output:/pointer}`
/// in `template` by call outputs (`outputs[K]`; `None`: not received). Other braces stay.
pub fn fill_outputs(template: &str, outputs: &[Option<String>]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        out.push_str(&rest[..start]);
        let after = &rest[start + 1..];
        let Some(end) = after.find('}') else {
            out.push_str(&rest[start..]);
            return out;
        };
        match placeholder_value(&after[..end], outputs) {
            Some(value) => {
                out.push_str(&value);
                rest = &after[end + 1..];
            }
            None => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The text for one placeholder body (between the braces); `None` if it is not one of ours.
fn placeholder_value(body: &str, outputs: &[Option<String>]) -> Option<String> {
    let (head, pointer) = match body.split_once(':') {
        Some((head, pointer)) => (head, Some(pointer)),
        None => (body, None),
    };
    let k = if head == "last_output" {
        outputs.len().checked_sub(1)
    } else {
        let digits = head.strip_prefix("output_")?;
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(digits.parse::<usize>().ok()?)
    };
    if pointer.is_some_and(|p| !(p.is_empty() || p.starts_with('/'))) {
        return None;
    }
    let Some(text) = k.and_then(|k| outputs.get(k)).and_then(Option::as_ref) else {
        return Some(format!("<no output for {{{body}}}>"));
    };
    let Some(pointer) = pointer else {
        return Some(text.clone());
    };
    Some(match json_pointer_in_text(text, pointer) {
        Some(Value::String(s)) => s,
        Some(other) => other.to_string(),
        None => format!("<no JSON value at {pointer} in: {text}>"),
    })
}

/// The value at `pointer` of the first JSON object or array embedded in `text` that has it.
pub fn json_pointer_in_text(text: &str, pointer: &str) -> Option<Value> {
    text.char_indices()
        .filter(|(_, c)| *c == '{' || *c == '[')
        .find_map(|(i, _)| {
            let value = serde_json::Deserializer::from_str(&text[i..])
                .into_iter::<Value>()
                .next()?
                .ok()?;
            value.pointer(pointer).cloned()
        })
}

impl From<&str> for Reply {
    fn from(text: &str) -> Reply {
        Reply::from(text.to_string())
    }
}

impl From<String> for Reply {
    fn from(text: String) -> Reply {
        Reply {
            text: Some(text.into()),
            ..Reply::default()
        }
    }
}

/// Arguments of a scripted `update_plan` call (Codex's plan tool).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub explanation: Option<String>,
    /// Sent to Codex as the `plan` argument; must not be empty.
    pub steps: Vec<PlanStep>,
}

/// One step of a scripted plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlanStep {
    pub step: String,
    pub status: StepStatus,
}

/// The statuses Codex's `update_plan` accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepStatus {
    Pending,
    InProgress,
    Completed,
}

impl PlanUpdate {
    /// The call's `arguments` string: `{"explanation"?: ..., "plan": [{"step", "status"}]}`.
    pub fn arguments_json(&self) -> String {
        /// Field order as Codex documents the tool: explanation, plan; step, status.
        #[derive(Serialize)]
        struct Arguments<'a> {
            #[serde(skip_serializing_if = "Option::is_none")]
            explanation: Option<&'a str>,
            plan: &'a [PlanStep],
        }
        let args = Arguments {
            explanation: self.explanation.as_deref(),
            plan: &self.steps,
        };
        serde_json::to_string(&args).expect("plan arguments serialize")
    }
}

/// The JSON form of a [`Rule`]: flat, closed.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleJson {
    contains: String,
    #[serde(default)]
    reply: Option<String>,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    output_delay_ms: u64,
    #[serde(default)]
    fail: Option<FailMode>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    commentary: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    plan: Option<PlanUpdate>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    calls: Vec<ScriptedCall>,
}

impl TryFrom<RuleJson> for Rule {
    type Error = String;

    fn try_from(j: RuleJson) -> Result<Rule, String> {
        if !j.calls.is_empty() && j.reply.is_none() {
            return Err(format!(
                "rule {:?}: `calls` needs `reply` (the text answered once every call has its output)",
                j.contains
            ));
        }
        let scripted = j.reply.is_some() || j.commentary.is_some() || j.plan.is_some();
        let calls = j.calls;
        Ok(Rule {
            contains: j.contains,
            reply: scripted.then_some(Reply {
                text: j.reply.map(|template| ReplyText { template, calls }),
                commentary: j.commentary,
                plan: j.plan,
            }),
            delay_ms: j.delay_ms,
            output_delay_ms: j.output_delay_ms,
            fail: j.fail,
        })
    }
}

impl From<Rule> for RuleJson {
    fn from(r: Rule) -> RuleJson {
        let reply = r.reply.unwrap_or_default();
        let (template, calls) = match reply.text {
            Some(text) => (Some(text.template), text.calls),
            None => (None, Vec::new()),
        };
        RuleJson {
            contains: r.contains,
            reply: template,
            delay_ms: r.delay_ms,
            output_delay_ms: r.output_delay_ms,
            fail: r.fail,
            commentary: reply.commentary,
            plan: reply.plan,
            calls,
        }
    }
}

/// The whole script.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    #[serde(default = "default_reply_template")]
    pub default_reply: String,
    #[serde(default)]
    pub rules: Vec<Rule>,
}

fn default_reply_template() -> String {
    DEFAULT_REPLY_TEMPLATE.to_string()
}

impl Default for Script {
    fn default() -> Self {
        Script {
            default_reply: default_reply_template(),
            rules: Vec::new(),
        }
    }
}

/// What the provider does for one prompt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    /// Index of the matched rule, `None` for the default.
    pub rule: Option<usize>,
    pub reply_text: String,
    pub delay_ms: u64,
    pub output_delay_ms: u64,
    pub fail: Option<FailMode>,
    /// The rule scripts an `update_plan` call: the provider makes it when the request offers the
    /// tool and does not yet carry the call's output, and streams `reply_text` otherwise.
    pub tool_call: Option<ToolCall>,
    /// The rule's sequence of calls (see the module docs); `reply_text` still holds their
    /// `{output_K}` placeholders, which the provider fills per request.
    pub calls: Vec<ScriptedCall>,
}

/// A scripted function call, with the assistant commentary streamed before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub commentary: Option<String>,
    /// The tool's namespace (`mcp__wakterm`); `None` for a plain function tool.
    pub namespace: Option<String>,
    /// Tool name ([`UPDATE_PLAN_TOOL`], or a bare MCP tool name).
    pub name: String,
    pub item_id: String,
    pub call_id: String,
    /// The `arguments` JSON string.
    pub arguments: String,
}

/// Why a script was refused.
#[derive(Debug)]
pub enum ScriptError {
    Io(std::io::Error),
    TooLarge { bytes: u64 },
    Json(serde_json::Error),
    Invalid(String),
}

impl std::fmt::Display for ScriptError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ScriptError::Io(e) => write!(f, "cannot read script: {e}"),
            ScriptError::TooLarge { bytes } => {
                write!(f, "script is {bytes} bytes, limit {MAX_SCRIPT_BYTES}")
            }
            ScriptError::Json(e) => write!(f, "script is not valid JSON: {e}"),
            ScriptError::Invalid(why) => write!(f, "invalid script: {why}"),
        }
    }
}

impl std::error::Error for ScriptError {}

impl Script {
    /// Reads and validates a script file.
    pub fn from_file(path: &Path) -> Result<Script, ScriptError> {
        let bytes = std::fs::metadata(path).map_err(ScriptError::Io)?.len();
        if bytes > MAX_SCRIPT_BYTES {
            return Err(ScriptError::TooLarge { bytes });
        }
        let text = std::fs::read_to_string(path).map_err(ScriptError::Io)?;
        Script::from_json(&text)
    }

    /// Parses and validates a script from JSON text.
    pub fn from_json(text: &str) -> Result<Script, ScriptError> {
        let script: Script = serde_json::from_str(text).map_err(ScriptError::Json)?;
        script.validate()?;
        Ok(script)
    }

    /// Checks the limits; called by the parsers and by `Provider::start`.
    pub fn validate(&self) -> Result<(), ScriptError> {
        if self.rules.len() > MAX_SCRIPT_RULES {
            let n = self.rules.len();
            return Err(ScriptError::Invalid(format!(
                "{n} rules, limit {MAX_SCRIPT_RULES}"
            )));
        }
        for (i, rule) in self.rules.iter().enumerate() {
            if rule.contains.is_empty() {
                return Err(ScriptError::Invalid(format!(
                    "rule {i}: `contains` is empty"
                )));
            }
            for (name, d) in [
                ("delay_ms", rule.delay_ms),
                ("output_delay_ms", rule.output_delay_ms),
            ] {
                if d > MAX_DELAY_MS {
                    return Err(ScriptError::Invalid(format!(
                        "rule {i}: {name} {d} > {MAX_DELAY_MS}"
                    )));
                }
            }
            if let Some(reply) = &rule.reply {
                validate_reply(reply, rule.fail.is_some())
                    .map_err(|why| ScriptError::Invalid(format!("rule {i}: {why}")))?;
            }
        }
        Ok(())
    }

    /// Chooses what to do for `prompt` (`None` when the request carried no user text).
    pub fn plan(&self, prompt: Option<&str>) -> Plan {
        let text = prompt.unwrap_or("");
        let matched = prompt.and_then(|p| self.rules.iter().position(|r| p.contains(&r.contains)));
        let (template, delay_ms, output_delay_ms, fail, reply) = match matched {
            Some(i) => {
                let rule = &self.rules[i];
                let reply = rule.reply.as_ref();
                let template = reply
                    .and_then(|r| r.text.as_ref())
                    .map(|t| t.template.as_str());
                let template = template.unwrap_or(&self.default_reply);
                (
                    template,
                    rule.delay_ms,
                    rule.output_delay_ms,
                    rule.fail,
                    reply,
                )
            }
            None => (self.default_reply.as_str(), 0, 0, None, None),
        };
        let tool_call = reply.and_then(|r| {
            let plan = r.plan.as_ref()?;
            Some(ToolCall {
                commentary: r.commentary.clone(),
                namespace: None,
                name: UPDATE_PLAN_TOOL.to_string(),
                item_id: PLAN_ITEM_ID.to_string(),
                call_id: PLAN_CALL_ID.to_string(),
                arguments: plan.arguments_json(),
            })
        });
        assert!(
            delay_ms <= MAX_DELAY_MS && output_delay_ms <= MAX_DELAY_MS,
            "validated scripts bound every delay"
        );
        let reply_text = template.replace(PROMPT_PLACEHOLDER, text);
        let calls = reply
            .and_then(|r| r.text.as_ref())
            .map(|t| t.calls.clone())
            .unwrap_or_default();
        Plan {
            rule: matched,
            reply_text,
            delay_ms,
            output_delay_ms,
            fail,
            tool_call,
            calls,
        }
    }
}

/// A plan needs steps with text and no failure; commentary only goes before a plan call; calls
/// exclude a plan and a failure, and need names and object arguments.
fn validate_reply(reply: &Reply, fails: bool) -> Result<(), String> {
    let calls = reply.text.as_ref().map_or(&[][..], |t| t.calls.as_slice());
    if !calls.is_empty() {
        if fails {
            return Err("`calls` and `fail` exclude each other".into());
        }
        if reply.plan.is_some() {
            return Err("`calls` and `plan` exclude each other".into());
        }
        if calls.len() > MAX_CALLS {
            return Err(format!(
                "`calls` has {} calls, limit {MAX_CALLS}",
                calls.len()
            ));
        }
        for (j, call) in calls.iter().enumerate() {
            if call.name.trim().is_empty() {
                return Err(format!("`calls[{j}].name` is empty"));
            }
            if call
                .namespace
                .as_deref()
                .is_some_and(|ns| ns.trim().is_empty())
            {
                return Err(format!("`calls[{j}].namespace` is empty"));
            }
            if !call.arguments.is_object() {
                return Err(format!("`calls[{j}].arguments` is not a JSON object"));
            }
        }
    }
    if reply.commentary.as_deref() == Some("") {
        return Err("`commentary` is empty".into());
    }
    let Some(plan) = &reply.plan else {
        return match reply.commentary {
            Some(_) => {
                Err("`commentary` needs `plan` (it is streamed before the plan call)".into())
            }
            None => Ok(()),
        };
    };
    if fails {
        return Err("`plan` and `fail` exclude each other".into());
    }
    if plan.steps.is_empty() {
        return Err("`plan.steps` is empty".into());
    }
    if plan.steps.len() > MAX_PLAN_STEPS {
        let n = plan.steps.len();
        return Err(format!(
            "`plan.steps` has {n} steps, limit {MAX_PLAN_STEPS}"
        ));
    }
    if let Some(j) = plan.steps.iter().position(|s| s.step.trim().is_empty()) {
        return Err(format!("`plan.steps[{j}].step` is empty"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_matching_rule_wins_and_default_fills_the_rest() {
        let script = Script::from_json(
            r#"{"default_reply":"D {prompt}","rules":[
                {"contains":"slow","reply":"S {prompt}","delay_ms":7},
                {"contains":"sl","fail":"response_failed"}]}"#,
        )
        .unwrap();
        let slow = script.plan(Some("go slow"));
        assert_eq!(
            (slow.rule, slow.reply_text.as_str(), slow.delay_ms),
            (Some(0), "S go slow", 7)
        );
        let failing = script.plan(Some("sleep"));
        assert_eq!(failing.fail, Some(FailMode::ResponseFailed));
        assert_eq!(
            failing.reply_text, "D sleep",
            "a rule without reply uses the default template"
        );
        let other = script.plan(Some("hi"));
        assert_eq!(
            (other.rule, other.reply_text.as_str(), other.delay_ms),
            (None, "D hi", 0)
        );
        assert_eq!(script.plan(None).reply_text, "D ");
    }

    #[test]
    fn bad_scripts_are_refused_with_a_reason() {
        assert!(matches!(Script::from_json("{"), Err(ScriptError::Json(_))));
        assert!(matches!(
            Script::from_json(r#"{"rulez":[]}"#),
            Err(ScriptError::Json(_))
        ));
        let empty = Script::from_json(r#"{"rules":[{"contains":""}]}"#);
        assert!(matches!(empty, Err(ScriptError::Invalid(_))));
        let long = format!(
            r#"{{"rules":[{{"contains":"x","delay_ms":{}}}]}}"#,
            MAX_DELAY_MS + 1
        );
        assert!(matches!(
            Script::from_json(&long),
            Err(ScriptError::Invalid(_))
        ));
        let long = format!(
            r#"{{"rules":[{{"contains":"x","output_delay_ms":{}}}]}}"#,
            MAX_DELAY_MS + 1
        );
        assert!(matches!(
            Script::from_json(&long),
            Err(ScriptError::Invalid(_))
        ));
        assert_eq!(Script::from_json("{}").unwrap(), Script::default());
    }

    const PLAN_RULE: &str = r#"{"rules":[{"contains":"PLAN","reply":"planned {prompt}",
        "commentary":"Let me plan.","plan":{"explanation":"why","steps":[
        {"step":"read","status":"completed"},{"step":"write","status":"in_progress"},
        {"step":"test","status":"pending"}]}}]}"#;

    #[test]
    fn a_plan_rule_scripts_an_update_plan_call_and_keeps_its_reply_text() {
        let script = Script::from_json(PLAN_RULE).unwrap();
        let plan = script.plan(Some("PLAN it"));
        assert_eq!(plan.reply_text, "planned PLAN it");
        let call = plan.tool_call.expect("a plan rule scripts a call");
        assert_eq!(
            (
                call.name.as_str(),
                call.item_id.as_str(),
                call.call_id.as_str()
            ),
            ("update_plan", "fc_plan_1", "call_plan_1")
        );
        assert_eq!(call.commentary.as_deref(), Some("Let me plan."));
        let args: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(
            args,
            serde_json::json!({"explanation":"why","plan":[
                {"step":"read","status":"completed"},{"step":"write","status":"in_progress"},
                {"step":"test","status":"pending"}]})
        );
        assert_eq!(script.plan(Some("other")).tool_call, None);

        // Without explanation and commentary: arguments carry only `plan`, the text falls back.
        let bare = Script::from_json(
            r#"{"default_reply":"D","rules":[{"contains":"P","plan":{"steps":[{"step":"s","status":"pending"}]}}]}"#,
        )
        .unwrap();
        let plan = bare.plan(Some("P"));
        assert_eq!(plan.reply_text, "D");
        let call = plan.tool_call.unwrap();
        assert_eq!(call.commentary, None);
        assert_eq!(
            call.arguments,
            r#"{"plan":[{"step":"s","status":"pending"}]}"#
        );
    }

    #[test]
    fn rule_json_stays_flat_and_old_scripts_read_as_before() {
        let old = r#"{"contains":"x","reply":"r","delay_ms":5,"output_delay_ms":0,"fail":null}"#;
        let rule: Rule = serde_json::from_str(old).unwrap();
        assert_eq!(
            rule,
            Rule {
                contains: "x".into(),
                reply: Some("r".into()),
                delay_ms: 5,
                output_delay_ms: 0,
                fail: None
            }
        );
        assert_eq!(
            serde_json::to_string(&rule).unwrap(),
            old,
            "old rules serialize unchanged"
        );
        let script = Script::from_json(PLAN_RULE).unwrap();
        let again = Script::from_json(&serde_json::to_string(&script).unwrap()).unwrap();
        assert_eq!(again, script, "plan rules round-trip through JSON");
        let json: serde_json::Value = serde_json::to_value(&script.rules[0]).unwrap();
        assert_eq!(json["commentary"], "Let me plan.");
        assert_eq!(json["plan"]["steps"][1]["status"], "in_progress");
    }

    #[test]
    fn bad_plan_rules_are_refused_with_a_reason() {
        let invalid = |rule: &str| {
            let err = Script::from_json(&format!(r#"{{"rules":[{rule}]}}"#)).unwrap_err();
            assert!(matches!(err, ScriptError::Invalid(_)), "{rule}: {err}");
            err.to_string()
        };
        let json_error = |rule: &str| {
            let err = Script::from_json(&format!(r#"{{"rules":[{rule}]}}"#)).unwrap_err();
            assert!(matches!(err, ScriptError::Json(_)), "{rule}: {err}");
        };
        assert!(invalid(r#"{"contains":"x","plan":{"steps":[]}}"#).contains("steps` is empty"));
        assert!(
            invalid(r#"{"contains":"x","plan":{"steps":[{"step":" ","status":"pending"}]}}"#)
                .contains("steps[0].step")
        );
        assert!(invalid(r#"{"contains":"x","commentary":"c"}"#).contains("needs `plan`"));
        assert!(invalid(
            r#"{"contains":"x","commentary":"","plan":{"steps":[{"step":"s","status":"pending"}]}}"#
        )
        .contains("`commentary` is empty"));
        assert!(invalid(
            r#"{"contains":"x","fail":"http_500","plan":{"steps":[{"step":"s","status":"pending"}]}}"#
        )
        .contains("exclude"));
        let many: Vec<String> = (0..=MAX_PLAN_STEPS)
            .map(|i| format!(r#"{{"step":"s{i}","status":"pending"}}"#))
            .collect();
        let many = format!(
            r#"{{"contains":"x","plan":{{"steps":[{}]}}}}"#,
            many.join(",")
        );
        assert!(invalid(&many).contains("limit"));
        json_error(r#"{"contains":"x","plan":{"steps":[{"step":"s","status":"done"}]}}"#);
        json_error(r#"{"contains":"x","plan":{"steps":[{"step":"s","status":"pending","x":1}]}}"#);
        json_error(
            r#"{"contains":"x","plan":{"steps":[{"step":"s","status":"pending"}],"extra":1}}"#,
        );
        json_error(r#"{"contains":"x","plan":{"explanation":"e"}}"#);
        json_error(r#"{"contains":"x","plans":{}}"#);
    }
}
