//! Finding the new prompt in a Responses API request body.
//!
//! Codex sends the whole conversation on every request: `input[]` holds developer and user
//! messages with injected context (`<environment_context>`, AGENTS.md, ...) followed by the
//! history. The text the user just submitted is the last `input_text` part of the last item with
//! `role: "user"`.

use serde_json::Value;

/// Returns the prompt text, or `None` when the body is not JSON or holds no user `input_text`.
pub fn extract_prompt(body: &[u8]) -> Option<String> {
    let json: Value = serde_json::from_slice(body).ok()?;
    prompt_of(&json)
}

/// [`extract_prompt`] on an already parsed body.
pub fn prompt_of(json: &Value) -> Option<String> {
    let items = json.get("input")?.as_array()?;
    items
        .iter()
        .rev()
        .filter(|item| is_user(item))
        .find_map(last_input_text)
}

/// Whether the request offers a plain (top-level, not namespaced) function tool called `name`.
/// Codex's task-title request, for one, offers no tools at all.
pub fn offers_function_tool(json: &Value, name: &str) -> bool {
    let Some(tools) = json.get("tools").and_then(Value::as_array) else {
        return false;
    };
    tools.iter().any(|tool| {
        tool.get("type").and_then(Value::as_str) == Some("function")
            && tool.get("name").and_then(Value::as_str) == Some(name)
    })
}

/// Whether the request offers the tool `name`: inside the `namespace` tool of that name (how
/// Codex 0.169 offers an MCP server's tools: `{"type":"namespace","name":"mcp__S","tools":[...]}`),
/// or, with no namespace, as a plain function tool.
pub fn offers_tool(json: &Value, namespace: Option<&str>, name: &str) -> bool {
    let Some(namespace) = namespace else {
        return offers_function_tool(json, name);
    };
    let Some(tools) = json.get("tools").and_then(Value::as_array) else {
        return false;
    };
    tools.iter().any(|tool| {
        tool.get("type").and_then(Value::as_str) == Some("namespace")
            && tool.get("name").and_then(Value::as_str) == Some(namespace)
            && tool
                .get("tools")
                .and_then(Value::as_array)
                .is_some_and(|inner| {
                    inner
                        .iter()
                        .any(|f| f.get("name").and_then(Value::as_str) == Some(name))
                })
    })
}

/// The text of the `function_call_output` for `call_id` after the last user item (this turn's),
/// `None` when there is none. A string `output` is returned as is; a list of parts (Codex 0.169
/// sends MCP results as `input_text` parts, the first beginning with "Wall time: ...") gives
/// their texts joined with new lines; an object with `content` is read the same way.
pub fn call_output_this_turn(json: &Value, call_id: &str) -> Option<String> {
    let items = json.get("input").and_then(Value::as_array)?;
    let after_user = items.iter().rposition(is_user).map_or(0, |i| i + 1);
    let item = items[after_user..].iter().find(|item| {
        item.get("type").and_then(Value::as_str) == Some("function_call_output")
            && item.get("call_id").and_then(Value::as_str) == Some(call_id)
    })?;
    Some(output_text(item.get("output").unwrap_or(&Value::Null)))
}

fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(|part| match part.get("text").and_then(Value::as_str) {
                Some(text) => text.to_string(),
                None => part.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Object(map) => match map.get("content") {
            Some(content) => output_text(content),
            None => output.to_string(),
        },
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Whether the input holds a `function_call_output` for `call_id` AFTER the last user item, i.e.
/// Codex answered that call within the current turn (an earlier turn's output does not count, so
/// a later turn with a matching prompt gets the call again).
pub fn call_answered_this_turn(json: &Value, call_id: &str) -> bool {
    let Some(items) = json.get("input").and_then(Value::as_array) else {
        return false;
    };
    let after_user = items.iter().rposition(is_user).map_or(0, |i| i + 1);
    items[after_user..].iter().any(|item| {
        item.get("type").and_then(Value::as_str) == Some("function_call_output")
            && item.get("call_id").and_then(Value::as_str) == Some(call_id)
    })
}

fn is_user(item: &Value) -> bool {
    item.get("role").and_then(Value::as_str) == Some("user")
}

fn last_input_text(item: &Value) -> Option<String> {
    let parts = item.get("content")?.as_array()?;
    parts.iter().rev().find_map(|part| {
        let is_text = part.get("type").and_then(Value::as_str) == Some("input_text");
        let text = part.get("text").and_then(Value::as_str)?;
        is_text.then(|| text.to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_last_user_input_text_and_skips_other_roles() {
        let body = br#"{"input":[
            {"type":"message","role":"developer","content":[{"type":"input_text","text":"dev"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context/>"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"first"}]},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"reply"}]},
            {"type":"message","role":"user","content":[
                {"type":"input_image","image_url":"x"},
                {"type":"input_text","text":" second\n\tline "},
                {"type":"input_image","image_url":"y"}]},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"later"}]}
        ]}"#;
        assert_eq!(extract_prompt(body).as_deref(), Some(" second\n\tline "));
    }

    #[test]
    fn user_items_without_text_are_skipped_and_garbage_gives_none() {
        let body = br#"{"input":[
            {"role":"user","content":[{"type":"input_text","text":"kept"}]},
            {"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}"#;
        assert_eq!(extract_prompt(body).as_deref(), Some("kept"));
        assert_eq!(extract_prompt(b"not json"), None);
        assert_eq!(extract_prompt(br#"{"input":"string"}"#), None);
        assert_eq!(extract_prompt(br#"{"model":"m"}"#), None);
    }

    #[test]
    fn tool_offers_and_answered_calls_are_read_from_the_body() {
        let json: Value = serde_json::from_str(
            r#"{"tools":[{"type":"function","name":"exec_command"},
                {"type":"namespace","name":"ns","tools":[{"type":"function","name":"update_plan"}]},
                {"type":"web_search"}],
            "input":[
              {"role":"user","content":[{"type":"input_text","text":"turn 1"}]},
              {"type":"function_call","call_id":"c1","name":"update_plan","arguments":"{}"},
              {"type":"function_call_output","call_id":"c1","output":"Plan updated"},
              {"role":"user","content":[{"type":"input_text","text":"turn 2"}]},
              {"type":"function_call","call_id":"c2","name":"update_plan","arguments":"{}"},
              {"type":"function_call_output","call_id":"c2","output":"Plan updated"}]}"#,
        )
        .unwrap();
        assert!(offers_function_tool(&json, "exec_command"));
        assert!(
            !offers_function_tool(&json, "update_plan"),
            "a namespaced tool is not a plain function tool"
        );
        assert!(!offers_function_tool(
            &serde_json::json!({"tools":[]}),
            "exec_command"
        ));
        assert!(call_answered_this_turn(&json, "c2"));
        assert!(
            !call_answered_this_turn(&json, "c1"),
            "an earlier turn's output does not count"
        );
        assert!(!call_answered_this_turn(&serde_json::json!({}), "c2"));
        assert_eq!(prompt_of(&json).as_deref(), Some("turn 2"));
        assert!(offers_tool(&json, Some("ns"), "update_plan"));
        assert!(!offers_tool(&json, Some("ns"), "exec_command"));
        assert!(!offers_tool(&json, Some("other"), "update_plan"));
        assert!(offers_tool(&json, None, "exec_command"));
        assert!(!offers_tool(&json, None, "update_plan"));
        assert_eq!(
            call_output_this_turn(&json, "c2").as_deref(),
            Some("Plan updated")
        );
        assert_eq!(
            call_output_this_turn(&json, "c1"),
            None,
            "an earlier turn's output does not count"
        );
    }

    #[test]
    fn mcp_outputs_as_parts_are_joined() {
        let json: Value = serde_json::from_str(
            r#"{"input":[
              {"role":"user","content":[{"type":"input_text","text":"go"}]},
              {"type":"function_call","call_id":"m0","namespace":"mcp__w","name":"t","arguments":"{}"},
              {"type":"function_call_output","call_id":"m0","output":[
                {"type":"input_text","text":"Wall time: 0.1 seconds\nOutput:"},
                {"type":"input_text","text":"{\"a\":1}"}]},
              {"type":"function_call_output","call_id":"m1","output":{"content":"plain","success":true}}]}"#,
        )
        .unwrap();
        assert_eq!(
            call_output_this_turn(&json, "m0").as_deref(),
            Some("Wall time: 0.1 seconds\nOutput:\n{\"a\":1}")
        );
        assert_eq!(call_output_this_turn(&json, "m1").as_deref(), Some("plain"));
        assert_eq!(call_output_this_turn(&json, "m2"), None);
    }
}
