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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Substring of the prompt that selects this rule (must be non-empty).
    pub contains: String,
    /// Reply template; `None` falls back to the script's default reply.
    #[serde(default)]
    pub reply: Option<String>,
    /// Wait this long before `response.completed` (or `response.failed`): holds the turn busy
    /// after the reply text was streamed.
    #[serde(default)]
    pub delay_ms: u64,
    /// Wait this long after `response.created`, before any reply text: holds the turn busy the
    /// way a model that is still thinking does (the TUI shows its "Working" status meanwhile).
    #[serde(default)]
    pub output_delay_ms: u64,
    /// Deliver a failure instead of a reply.
    #[serde(default)]
    pub fail: Option<FailMode>,
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
        }
        Ok(())
    }

    /// Chooses what to do for `prompt` (`None` when the request carried no user text).
    pub fn plan(&self, prompt: Option<&str>) -> Plan {
        let text = prompt.unwrap_or("");
        let matched = prompt.and_then(|p| self.rules.iter().position(|r| p.contains(&r.contains)));
        let (template, delay_ms, output_delay_ms, fail) = match matched {
            Some(i) => {
                let rule = &self.rules[i];
                let template = rule.reply.as_deref().unwrap_or(&self.default_reply);
                (template, rule.delay_ms, rule.output_delay_ms, rule.fail)
            }
            None => (self.default_reply.as_str(), 0, 0, None),
        };
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
        }
    }
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
}
