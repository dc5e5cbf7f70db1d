//! Server-sent events of one Responses API reply, in the order Codex 0.169 consumes them.
//!
//! Each event is `event: NAME\ndata: JSON\n\n`; the JSON repeats the name in `type` because Codex
//! dispatches on the data's `type`, while other clients read the `event:` line.

use super::script::ToolCall;
use serde_json::{json, Value};

/// Ids of one reply; `seq` makes them unique within a provider run.
#[derive(Clone, Debug)]
pub struct ReplyIds {
    pub response_id: String,
    pub item_id: String,
}

impl ReplyIds {
    pub fn new(seq: u64) -> ReplyIds {
        ReplyIds {
            response_id: format!("resp_mock_{seq}"),
            item_id: format!("msg_mock_{seq}"),
        }
    }
}

/// Encodes one SSE event.
pub fn event(name: &str, mut data: Value) -> String {
    assert!(
        !name.is_empty() && !name.contains('\n'),
        "event names are single tokens"
    );
    if let Some(map) = data.as_object_mut() {
        map.insert("type".to_string(), Value::String(name.to_string()));
    }
    // serde_json never emits a raw newline, so the data fits on one `data:` line.
    format!("event: {name}\ndata: {data}\n\n")
}

/// The first event of every reply.
pub fn created_event(ids: &ReplyIds) -> String {
    event(
        "response.created",
        json!({"response":{"id":ids.response_id,"status":"in_progress"}}),
    )
}

/// The reply text: the assistant item, its text, the finished item.
pub fn output_events(ids: &ReplyIds, text: &str) -> Vec<String> {
    message_events(&ids.item_id, 0, text)
}

/// One assistant `message` output item at `output_index`.
fn message_events(item_id: &str, output_index: usize, text: &str) -> Vec<String> {
    let empty_item = json!({"type":"message","role":"assistant","id":item_id,"status":"in_progress","content":[]});
    let full_item = json!({"type":"message","role":"assistant","id":item_id,"status":"completed",
        "content":[{"type":"output_text","text":text,"annotations":[]}]});
    vec![
        event(
            "response.output_item.added",
            json!({"output_index":output_index,"item":empty_item}),
        ),
        event(
            "response.output_text.delta",
            json!({"item_id":item_id,"output_index":output_index,"content_index":0,"delta":text}),
        ),
        event(
            "response.output_item.done",
            json!({"output_index":output_index,"item":full_item}),
        ),
    ]
}

/// A tool-call reply: the commentary as an assistant message (output 0, when set), then the
/// `function_call` item (with `namespace` when the call has one: Codex refuses an MCP tool named
/// `mcp__S__tool` without it) with its arguments streamed the
/// way the Responses API does: item added with empty arguments, arguments delta, arguments done,
/// item done.
pub fn tool_call_events(ids: &ReplyIds, call: &ToolCall) -> Vec<String> {
    let mut events = Vec::new();
    if let Some(commentary) = &call.commentary {
        events.extend(message_events(&ids.item_id, 0, commentary));
    }
    let index = usize::from(call.commentary.is_some());
    let item = |arguments: &str, status: &str| {
        let mut item = json!({"type":"function_call","id":call.item_id,"call_id":call.call_id,"name":call.name,
            "arguments":arguments,"status":status});
        if let Some(namespace) = &call.namespace {
            item["namespace"] = Value::String(namespace.clone());
        }
        item
    };
    events.extend([
        event(
            "response.output_item.added",
            json!({"output_index":index,"item":item("", "in_progress")}),
        ),
        event(
            "response.function_call_arguments.delta",
            json!({"item_id":call.item_id,"output_index":index,"delta":call.arguments}),
        ),
        event(
            "response.function_call_arguments.done",
            json!({"item_id":call.item_id,"output_index":index,"arguments":call.arguments}),
        ),
        event(
            "response.output_item.done",
            json!({"output_index":index,"item":item(&call.arguments, "completed")}),
        ),
    ]);
    events
}

/// The closing event of a successful reply.
pub fn completed_event(ids: &ReplyIds, prompt: &str, text: &str) -> String {
    // Rough token counts (4 bytes a token) so Codex's usage display has plausible numbers.
    let input_tokens = prompt.len() / 4 + 1;
    let output_tokens = text.len() / 4 + 1;
    let usage = json!({"input_tokens":input_tokens,"input_tokens_details":{"cached_tokens":0},
        "output_tokens":output_tokens,"output_tokens_details":{"reasoning_tokens":0},
        "total_tokens":input_tokens + output_tokens});
    event(
        "response.completed",
        json!({"response":{"id":ids.response_id,"status":"completed","usage":usage}}),
    )
}

/// The closing event of a scripted stream failure.
pub fn failed_event(ids: &ReplyIds) -> String {
    let error =
        json!({"code":"server_error","message":"scripted failure from wakterm-mock-provider"});
    event(
        "response.failed",
        json!({"response":{"id":ids.response_id,"status":"failed","error":error}}),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_their_name_twice_and_stay_on_one_data_line() {
        let ids = ReplyIds::new(3);
        let text = "two\nlines \"quoted\"";
        let call = ToolCall {
            commentary: Some(text.to_string()),
            namespace: Some("mcp__x".into()),
            name: "update_plan".into(),
            item_id: "fc_plan_1".into(),
            call_id: "call_plan_1".into(),
            arguments: r#"{"plan":[{"step":"a\nb","status":"pending"}]}"#.into(),
        };
        let all: Vec<String> = std::iter::once(created_event(&ids))
            .chain(output_events(&ids, text))
            .chain([completed_event(&ids, "p", text), failed_event(&ids)])
            .chain(tool_call_events(&ids, &call))
            .collect();
        for ev in &all {
            let mut lines = ev.trim_end_matches('\n').lines();
            let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
            let data: Value =
                serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap())
                    .unwrap();
            assert_eq!(data["type"], name);
            assert!(lines.next().is_none(), "one event is exactly two lines");
        }
        assert!(all[3].contains("msg_mock_3") && all[4].contains("resp_mock_3"));
        let done: Value = serde_json::from_str(
            all.last()
                .unwrap()
                .lines()
                .nth(1)
                .unwrap()
                .strip_prefix("data: ")
                .unwrap(),
        )
        .unwrap();
        assert_eq!(done["item"]["namespace"], "mcp__x");
        assert_eq!(done["item"]["name"], "update_plan");
    }
}
