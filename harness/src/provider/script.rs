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

use serde::{Deserialize, Serialize};
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
#[serde(from = "RuleJson", into = "RuleJson")]
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
    /// Reply text template (`{prompt}` is replaced); `None` uses the script's default reply.
    pub text: Option<String>,
    /// Assistant message streamed before the `update_plan` call, verbatim (needs `plan`).
    pub commentary: Option<String>,
    /// Answer first with an `update_plan` call; the text comes once Codex returned its output.
    pub plan: Option<PlanUpdate>,
}

impl From<&str> for Reply {
    fn from(text: &str) -> Reply {
        Reply::from(text.to_string())
    }
}

impl From<String> for Reply {
    fn from(text: String) -> Reply {
        Reply {
            text: Some(text),
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
}

impl From<RuleJson> for Rule {
    fn from(j: RuleJson) -> Rule {
        let scripted = j.reply.is_some() || j.commentary.is_some() || j.plan.is_some();
        Rule {
            contains: j.contains,
            reply: scripted.then_some(Reply {
                text: j.reply,
                commentary: j.commentary,
                plan: j.plan,
            }),
            delay_ms: j.delay_ms,
            output_delay_ms: j.output_delay_ms,
            fail: j.fail,
        }
    }
}

impl From<Rule> for RuleJson {
    fn from(r: Rule) -> RuleJson {
        let reply = r.reply.unwrap_or_default();
        RuleJson {
            contains: r.contains,
            reply: reply.text,
            delay_ms: r.delay_ms,
            output_delay_ms: r.output_delay_ms,
            fail: r.fail,
            commentary: reply.commentary,
            plan: reply.plan,
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
}

/// A scripted function call, with the assistant commentary streamed before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    pub commentary: Option<String>,
    /// Tool name ([`UPDATE_PLAN_TOOL`]).
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
                let template = reply.and_then(|r| r.text.as_deref());
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
        Plan {
            rule: matched,
            reply_text,
            delay_ms,
            output_delay_ms,
            fail,
            tool_call,
        }
    }
}

/// A plan needs steps with text and no failure; commentary only goes before a plan call.
fn validate_reply(reply: &Reply, fails: bool) -> Result<(), String> {
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
