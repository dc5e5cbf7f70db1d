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
    let items = json.get("input")?.as_array()?;
    items
        .iter()
        .rev()
        .filter(|item| item.get("role").and_then(Value::as_str) == Some("user"))
        .find_map(last_input_text)
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
}
