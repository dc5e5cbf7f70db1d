//! Drives the provider with a plain HTTP/1.1 client over `TcpStream`, as Codex would.

use super::*;
use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::time::Instant;

const BODY: &str = r#"{"model":"mock-model","stream":true,"input":[
    {"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"<environment_context/>"}]},
    {"type":"message","role":"user","content":[{"type":"input_text","text":"say hi ✓"}]}]}"#;

fn start(script_json: &str, log_path: Option<PathBuf>) -> Provider {
    let script = Script::from_json(script_json).unwrap();
    Provider::start(ProviderConfig {
        port: 0,
        script,
        log_path,
    })
    .unwrap()
}

fn send(port: u16, method: &str, path: &str, body: &str) -> BufReader<TcpStream> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Accept: text/event-stream\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(body.as_bytes()).unwrap();
    BufReader::new(stream)
}

/// Reads the status line and headers; returns (status, lower-cased header lines).
fn read_head(reader: &mut BufReader<TcpStream>) -> (u16, Vec<String>) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status = line.split(' ').nth(1).unwrap().parse().unwrap();
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "\r\n" {
            return (status, headers);
        }
        headers.push(line.trim_end().to_ascii_lowercase());
    }
}

/// Reads one chunk of a chunked body; `None` at the terminating chunk.
fn read_chunk(reader: &mut BufReader<TcpStream>) -> Option<String> {
    let mut size = String::new();
    reader.read_line(&mut size).unwrap();
    let len = usize::from_str_radix(size.trim_end(), 16).unwrap();
    let mut data = vec![0u8; len + 2];
    reader.read_exact(&mut data).unwrap();
    assert!(data.ends_with(b"\r\n"));
    data.truncate(len);
    (len > 0).then(|| String::from_utf8(data).unwrap())
}

/// Splits one SSE event into (name, data).
fn parse_event(chunk: &str) -> (String, serde_json::Value) {
    let mut lines = chunk.lines();
    let name = lines
        .next()
        .unwrap()
        .strip_prefix("event: ")
        .unwrap()
        .to_string();
    let data = serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap()).unwrap();
    (name, data)
}

fn read_events(reader: &mut BufReader<TcpStream>) -> Vec<(String, serde_json::Value)> {
    std::iter::from_fn(|| read_chunk(reader))
        .map(|c| parse_event(&c))
        .collect()
}

fn names(events: &[(String, serde_json::Value)]) -> Vec<&str> {
    events.iter().map(|(n, _)| n.as_str()).collect()
}

#[test]
fn a_prompt_gets_the_full_sse_sequence_with_the_templated_reply() {
    let log = std::env::temp_dir().join(format!(
        "wakterm-provider-test-{}.jsonl",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&log);
    let provider = start(r#"{"default_reply":"echo: {prompt}"}"#, Some(log.clone()));
    assert_ne!(provider.port(), 0);
    let mut reader = send(provider.port(), "POST", "/v1/responses", BODY);
    let (status, headers) = read_head(&mut reader);
    assert_eq!(status, 200);
    assert!(headers.contains(&"content-type: text/event-stream".to_string()));
    let events = read_events(&mut reader);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(events[2].1["delta"], "echo: say hi ✓");
    assert_eq!(events[3].1["item"]["content"][0]["text"], "echo: say hi ✓");
    assert_eq!(events[3].1["item"]["role"], "assistant");
    assert_eq!(events[0].1["response"]["id"], events[4].1["response"]["id"]);
    assert!(
        events[4].1["response"]["usage"]["total_tokens"]
            .as_u64()
            .unwrap()
            > 0
    );

    let received = provider.received();
    assert_eq!(received.len(), 1);
    assert_eq!(
        (received[0].path.as_str(), received[0].prompt.as_deref()),
        ("/v1/responses", Some("say hi ✓"))
    );
    assert_eq!(received[0].outcome, "reply");
    provider.stop();
    let logged: Vec<ReceivedRequest> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        logged, received,
        "the log file holds exactly what was recorded in memory"
    );
    let _ = std::fs::remove_file(&log);
}

#[test]
fn a_delay_rule_streams_the_opening_events_then_holds_completion() {
    let provider = start(
        r#"{"rules":[{"contains":"hi","reply":"slow {prompt}","delay_ms":600}]}"#,
        None,
    );
    let started = Instant::now();
    let mut reader = send(provider.port(), "POST", "/v1/responses", BODY);
    assert_eq!(read_head(&mut reader).0, 200);
    let opening: Vec<_> = (0..4)
        .map(|_| parse_event(&read_chunk(&mut reader).unwrap()))
        .collect();
    let opened_at = started.elapsed();
    assert_eq!(opening[2].1["delta"], "slow say hi ✓");
    // The request is recorded before the hold ends, so a test can see the busy turn's prompt.
    assert_eq!(provider.received()[0].prompt.as_deref(), Some("say hi ✓"));
    let rest = read_events(&mut reader);
    let closed_at = started.elapsed();
    assert_eq!(names(&rest), ["response.completed"]);
    assert!(
        closed_at >= Duration::from_millis(600),
        "completion came after {closed_at:?}"
    );
    assert!(
        closed_at - opened_at >= Duration::from_millis(300),
        "opening events were not streamed early"
    );
}

#[test]
fn an_output_delay_rule_holds_everything_after_response_created() {
    let provider = start(
        r#"{"rules":[{"contains":"hi","output_delay_ms":500}]}"#,
        None,
    );
    let started = Instant::now();
    let mut reader = send(provider.port(), "POST", "/v1/responses", BODY);
    assert_eq!(read_head(&mut reader).0, 200);
    assert_eq!(
        parse_event(&read_chunk(&mut reader).unwrap()).0,
        "response.created"
    );
    let created_at = started.elapsed();
    let rest = read_events(&mut reader);
    assert_eq!(rest.len(), 4, "item added, delta, item done, completed");
    assert_eq!(rest[1].1["delta"], "mock reply to: say hi ✓");
    assert!(
        started.elapsed() - created_at >= Duration::from_millis(250),
        "reply text was not held"
    );
}

#[test]
fn scripted_failures_are_http_500_or_response_failed() {
    let provider = start(
        r#"{"rules":[{"contains":"hi","fail":"http_500"},{"contains":"boom","fail":"response_failed"}]}"#,
        None,
    );
    let mut reader = send(provider.port(), "POST", "/v1/responses", BODY);
    assert_eq!(read_head(&mut reader).0, 500);
    let boom = BODY.replace("say hi ✓", "boom");
    let mut reader = send(provider.port(), "POST", "/v1/responses", &boom);
    assert_eq!(read_head(&mut reader).0, 200);
    let events = read_events(&mut reader);
    assert_eq!(names(&events).last(), Some(&"response.failed"));
    assert!(!names(&events).contains(&"response.completed"));
    let outcomes: Vec<_> = provider.received().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["http_500", "reply_then_failed"]);
}

#[test]
fn get_lists_no_models_and_unknown_posts_are_404() {
    let provider = start("{}", None);
    let mut reader = send(
        provider.port(),
        "GET",
        "/v1/models?client_version=0.169.0",
        "",
    );
    let (status, headers) = read_head(&mut reader);
    assert_eq!(status, 200);
    let len: usize = headers
        .iter()
        .find_map(|h| h.strip_prefix("content-length: "))
        .unwrap()
        .parse()
        .unwrap();
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body).unwrap();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["object"], "list");
    assert_eq!(json["data"], serde_json::json!([]));
    let mut reader = send(provider.port(), "POST", "/v1/other", "{}");
    assert_eq!(read_head(&mut reader).0, 404);
    let received = provider.received();
    assert_eq!(received[0].path, "/v1/models?client_version=0.169.0");
    assert_eq!(
        (received[0].prompt.as_ref(), received[1].outcome.as_str()),
        (None, "not_found")
    );
}

#[test]
fn stop_releases_the_port_and_a_bad_script_is_refused() {
    let provider = start("{}", None);
    let port = provider.port();
    provider.stop();
    let deadline = Instant::now() + Duration::from_secs(3);
    while TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "port {port} still accepts connections after stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let bad = Script {
        default_reply: String::new(),
        rules: vec![Rule {
            contains: String::new(),
            reply: None,
            delay_ms: 0,
            output_delay_ms: 0,
            fail: None,
        }],
    };
    let started = Provider::start(ProviderConfig {
        port: 0,
        script: bad,
        log_path: None,
    });
    assert!(matches!(
        started,
        Err(ProviderError::Script(ScriptError::Invalid(_)))
    ));
}

const PLAN_SCRIPT: &str = r#"{"rules":[{"contains":"PLAN","reply":"planned: {prompt}",
    "commentary":"Making a plan first.","plan":{"explanation":"scripted",
    "steps":[{"step":"look","status":"completed"},{"step":"answer","status":"in_progress"}]}},
    {"contains":"BARE","plan":{"steps":[{"step":"only","status":"pending"}]}}]}"#;

/// A Codex-like request: injected context, the prompt, then `extra` items; `update_plan` offered.
fn plan_body(prompt: &str, extra: &str, tools: &str) -> String {
    format!(
        r#"{{"model":"mock-model","stream":true,"tools":{tools},"input":[
        {{"type":"message","role":"user","content":[{{"type":"input_text","text":"<environment_context/>"}}]}},
        {{"type":"message","role":"user","content":[{{"type":"input_text","text":"{prompt}"}}]}}{extra}]}}"#
    )
}

const TOOLS: &str = r#"[{"type":"function","name":"exec_command","parameters":{}},
    {"type":"function","name":"update_plan","parameters":{}},{"type":"web_search"}]"#;

const ANSWERED: &str = r#",
    {"type":"message","role":"assistant","content":[{"type":"output_text","text":"Making a plan first."}]},
    {"type":"function_call","id":"fc_plan_1","call_id":"call_plan_1","name":"update_plan","arguments":"{}"},
    {"type":"function_call_output","call_id":"call_plan_1","output":"Plan updated"}"#;

#[test]
fn a_plan_rule_streams_commentary_then_an_update_plan_call_then_the_reply() {
    let provider = start(PLAN_SCRIPT, None);
    let mut reader = send(
        provider.port(),
        "POST",
        "/v1/responses",
        &plan_body("PLAN-UPDATE go", "", TOOLS),
    );
    assert_eq!(read_head(&mut reader).0, 200);
    let events = read_events(&mut reader);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.output_item.added",
            "response.output_text.delta",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let message = &events[3].1;
    assert_eq!(message["output_index"], 0);
    assert_eq!(message["item"]["role"], "assistant");
    assert_eq!(
        message["item"]["content"][0]["text"],
        "Making a plan first."
    );
    assert!(
        message["item"].get("phase").is_none(),
        "the mock sends no phase"
    );
    let added = &events[4].1;
    assert_eq!(
        (added["output_index"].as_u64(), &added["item"]["arguments"]),
        (Some(1), &serde_json::json!(""))
    );
    let done = &events[7].1;
    assert_eq!(done["output_index"], 1);
    let item = &done["item"];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["id"], "fc_plan_1");
    assert_eq!(item["call_id"], "call_plan_1");
    assert_eq!(item["name"], "update_plan");
    assert!(item.get("namespace").is_none());
    let args: serde_json::Value =
        serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        serde_json::json!({"explanation":"scripted","plan":[
            {"step":"look","status":"completed"},{"step":"answer","status":"in_progress"}]})
    );
    assert_eq!(events[5].1["delta"], item["arguments"]);
    assert_eq!(events[6].1["arguments"], item["arguments"]);
    assert_eq!(events[6].1["item_id"], "fc_plan_1");

    // The follow-up carries the call's output: the rule's reply text, no second call.
    let mut reader = send(
        provider.port(),
        "POST",
        "/v1/responses",
        &plan_body("PLAN-UPDATE go", ANSWERED, TOOLS),
    );
    assert_eq!(read_head(&mut reader).0, 200);
    let events = read_events(&mut reader);
    assert_eq!(
        events.len(),
        5,
        "created, message added, delta, done, completed"
    );
    assert_eq!(
        events[3].1["item"]["content"][0]["text"],
        "planned: PLAN-UPDATE go"
    );

    // A later turn (the earlier output is before its prompt) gets the call again.
    let later = plan_body(
        "PLAN-UPDATE go",
        "",
        TOOLS,
    )
    .replacen(
        r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"PLAN-UPDATE go"}]}"#,
        &format!(
            r#"{{"type":"message","role":"user","content":[{{"type":"input_text","text":"PLAN first"}}]}}{ANSWERED},
            {{"type":"message","role":"user","content":[{{"type":"input_text","text":"PLAN again"}}]}}"#
        ),
        1,
    );
    let mut reader = send(provider.port(), "POST", "/v1/responses", &later);
    assert_eq!(read_head(&mut reader).0, 200);
    let events = read_events(&mut reader);
    assert_eq!(events[7].1["item"]["name"], "update_plan");

    let received = provider.received();
    let outcomes: Vec<_> = received.iter().map(|r| r.outcome.as_str()).collect();
    assert_eq!(outcomes, ["update_plan_call", "reply", "update_plan_call"]);
    assert_eq!(received[2].prompt.as_deref(), Some("PLAN again"));
}

#[test]
fn no_update_plan_call_without_the_tool_and_none_before_it_without_commentary() {
    let provider = start(PLAN_SCRIPT, None);
    // Codex's task-title request offers no tools: a plain reply even though the prompt matches.
    let mut reader = send(
        provider.port(),
        "POST",
        "/v1/responses",
        &plan_body("title for: PLAN-UPDATE go", "", "[]"),
    );
    assert_eq!(read_head(&mut reader).0, 200);
    let events = read_events(&mut reader);
    assert_eq!(events.len(), 5);
    assert_eq!(
        events[3].1["item"]["content"][0]["text"],
        "planned: title for: PLAN-UPDATE go"
    );
    // A namespaced update_plan is not Codex's plan tool either.
    let namespaced = r#"[{"type":"namespace","name":"mcp__x","tools":[{"type":"function","name":"update_plan"}]}]"#;
    let mut reader = send(
        provider.port(),
        "POST",
        "/v1/responses",
        &plan_body("PLAN-UPDATE go", "", namespaced),
    );
    assert_eq!(read_head(&mut reader).0, 200);
    assert_eq!(read_events(&mut reader).len(), 5);
    // Without commentary the call is output 0 and no message precedes it.
    let mut reader = send(
        provider.port(),
        "POST",
        "/v1/responses",
        &plan_body("BARE", "", TOOLS),
    );
    assert_eq!(read_head(&mut reader).0, 200);
    let events = read_events(&mut reader);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    assert_eq!(events[4].1["output_index"], 0);
    assert_eq!(
        events[4].1["item"]["arguments"],
        r#"{"plan":[{"step":"only","status":"pending"}]}"#
    );
    let outcomes: Vec<_> = provider.received().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["reply", "reply", "update_plan_call"]);
}

const CALLS_SCRIPT: &str = r#"{"rules":[{"contains":"ORCHESTRATE",
    "reply":"relayed: {output_1:/terminal_event/final_message} (id {output_0:/request_id}, raw {last_output:/terminal})",
    "calls":[
      {"namespace":"mcp__wakterm","name":"agent_admit",
       "arguments":{"agent":"zola","prompt":"question","request_id":"11111111-2222-4333-8444-555555555555"}},
      {"namespace":"mcp__wakterm","name":"request_wait",
       "arguments":{"request_id":"{output_0:/request_id}","timeout_ms":60000}}]}]}"#;

const MCP_TOOLS: &str = r#"[{"type":"function","name":"exec_command","parameters":{}},
    {"type":"namespace","name":"mcp__wakterm","description":"wakterm","tools":[
      {"type":"function","name":"agent_admit","parameters":{}},
      {"type":"function","name":"request_wait","parameters":{}}]}]"#;

/// A call of the sequence and its output as Codex 0.169 sends them back (parts, "Wall time").
fn mcp_answer(k: usize, name: &str, output_json: &str) -> String {
    let quoted = serde_json::to_string(output_json).unwrap();
    format!(
        r#",
    {{"type":"function_call","call_id":"call_mcp_{k}","namespace":"mcp__wakterm","name":"{name}","arguments":"{{}}"}},
    {{"type":"function_call_output","call_id":"call_mcp_{k}","output":[
      {{"type":"input_text","text":"Wall time: 0.0123 seconds\nOutput:"}},{{"type":"input_text","text":{quoted}}}]}}"#
    )
}

fn post_events(provider: &Provider, body: &str) -> Vec<(String, serde_json::Value)> {
    let mut reader = send(provider.port(), "POST", "/v1/responses", body);
    assert_eq!(read_head(&mut reader).0, 200);
    read_events(&mut reader)
}

/// The last `output_item.done` item of a reply.
fn last_item(events: &[(String, serde_json::Value)]) -> serde_json::Value {
    events
        .iter()
        .rev()
        .find(|(name, _)| name == "response.output_item.done")
        .map(|(_, data)| data["item"].clone())
        .expect("an output item")
}

#[test]
fn a_calls_rule_makes_each_mcp_call_in_turn_then_quotes_their_outputs() {
    let provider = start(CALLS_SCRIPT, None);
    // 1. No output yet: call 0, namespaced, with its arguments as written.
    let events = post_events(&provider, &plan_body("ORCHESTRATE now", "", MCP_TOOLS));
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let item = last_item(&events);
    assert_eq!(
        (
            &item["type"],
            &item["namespace"],
            &item["name"],
            &item["call_id"],
            &item["id"]
        ),
        (
            &serde_json::json!("function_call"),
            &serde_json::json!("mcp__wakterm"),
            &serde_json::json!("agent_admit"),
            &serde_json::json!("call_mcp_0"),
            &serde_json::json!("fc_mcp_0")
        )
    );
    let args: serde_json::Value =
        serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        serde_json::json!({"agent":"zola","prompt":"question","request_id":"11111111-2222-4333-8444-555555555555"})
    );

    // 2. Call 0 answered: call 1, its argument filled from call 0's output.
    let receipt =
        r#"{"classification":"accepted","request_id":"11111111-2222-4333-8444-555555555555"}"#;
    let after_0 = mcp_answer(0, "agent_admit", receipt);
    let item = last_item(&post_events(
        &provider,
        &plan_body("ORCHESTRATE now", &after_0, MCP_TOOLS),
    ));
    assert_eq!(
        (&item["name"], &item["call_id"]),
        (
            &serde_json::json!("request_wait"),
            &serde_json::json!("call_mcp_1")
        )
    );
    let args: serde_json::Value =
        serde_json::from_str(item["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        serde_json::json!({"request_id":"11111111-2222-4333-8444-555555555555","timeout_ms":60000})
    );

    // 3. Both answered: the reply text with the outputs quoted.
    let waited = r#"{"terminal":true,"terminal_event":{"state":"completed","final_message":"mock reply to: question"}}"#;
    let after_1 = format!("{after_0}{}", mcp_answer(1, "request_wait", waited));
    let item = last_item(&post_events(
        &provider,
        &plan_body("ORCHESTRATE now", &after_1, MCP_TOOLS),
    ));
    assert_eq!(item["type"], "message");
    assert_eq!(
        item["content"][0]["text"],
        "relayed: mock reply to: question (id 11111111-2222-4333-8444-555555555555, raw true)"
    );

    // 4. The task-title request offers no tools: the text, with visible markers for the outputs.
    let item = last_item(&post_events(
        &provider,
        &plan_body("title: ORCHESTRATE now", "", "[]"),
    ));
    let text = item["content"][0]["text"].as_str().unwrap().to_string();
    assert!(
        text.starts_with("relayed: <no output for {output_1:/terminal_event/final_message}>"),
        "{text}"
    );

    // 5. A later turn (earlier outputs precede its prompt) starts the sequence again.
    let later = format!(
        r#"{after_1},
        {{"type":"message","role":"user","content":[{{"type":"input_text","text":"ORCHESTRATE again"}}]}}"#
    );
    let item = last_item(&post_events(
        &provider,
        &plan_body("ORCHESTRATE first", &later, MCP_TOOLS),
    ));
    assert_eq!(
        (&item["name"], &item["call_id"]),
        (
            &serde_json::json!("agent_admit"),
            &serde_json::json!("call_mcp_0")
        )
    );

    let outcomes: Vec<_> = provider.received().into_iter().map(|r| r.outcome).collect();
    assert_eq!(
        outcomes,
        [
            "call_0:mcp__wakterm/agent_admit",
            "call_1:mcp__wakterm/request_wait",
            "reply_after_calls",
            "reply_call_0_not_offered",
            "call_0:mcp__wakterm/agent_admit"
        ]
    );
}

#[test]
fn a_call_whose_tool_is_missing_is_not_made_and_plain_function_calls_work() {
    let provider = start(
        r#"{"rules":[{"contains":"GO","reply":"got {output_0}",
            "calls":[{"name":"exec_command","arguments":{"cmd":"true"}}]}]}"#,
        None,
    );
    // The namespace is offered, but not as a plain function: still made (exec_command is plain).
    let item = last_item(&post_events(&provider, &plan_body("GO", "", MCP_TOOLS)));
    assert_eq!(
        (&item["name"], item.get("namespace")),
        (&serde_json::json!("exec_command"), None)
    );
    let answered = r#",
        {"type":"function_call","call_id":"call_mcp_0","name":"exec_command","arguments":"{}"},
        {"type":"function_call_output","call_id":"call_mcp_0","output":"ok"}"#;
    let item = last_item(&post_events(
        &provider,
        &plan_body("GO", answered, MCP_TOOLS),
    ));
    assert_eq!(item["content"][0]["text"], "got ok");

    let provider = start(CALLS_SCRIPT, None);
    let only_exec = r#"[{"type":"function","name":"exec_command","parameters":{}}]"#;
    let item = last_item(&post_events(
        &provider,
        &plan_body("ORCHESTRATE", "", only_exec),
    ));
    assert_eq!(item["type"], "message", "no MCP namespace offered: no call");
    let outcomes: Vec<_> = provider.received().into_iter().map(|r| r.outcome).collect();
    assert_eq!(outcomes, ["reply_call_0_not_offered"]);
}

#[test]
fn calls_rules_round_trip_and_bad_ones_are_refused() {
    let script = Script::from_json(CALLS_SCRIPT).unwrap();
    let again = Script::from_json(&serde_json::to_string(&script).unwrap()).unwrap();
    assert_eq!(again, script);
    let json: serde_json::Value = serde_json::to_value(&script.rules[0]).unwrap();
    assert_eq!(json["calls"][1]["name"], "request_wait");
    assert_eq!(json["calls"][0]["namespace"], "mcp__wakterm");
    // Old rules still serialize without `calls`.
    let old = Script::from_json(r#"{"rules":[{"contains":"x","reply":"r"}]}"#).unwrap();
    assert!(serde_json::to_string(&old).unwrap().find("calls").is_none());
    assert!(script.plan(Some("ORCHESTRATE")).calls.len() == 2);
    assert!(old.plan(Some("x")).calls.is_empty());

    let refused = |rule: &str| {
        Script::from_json(&format!(r#"{{"rules":[{rule}]}}"#))
            .unwrap_err()
            .to_string()
    };
    assert!(refused(r#"{"contains":"x","calls":[{"name":"t"}]}"#).contains("needs `reply`"));
    assert!(
        refused(r#"{"contains":"x","reply":"r","calls":[{"name":" "}]}"#).contains("calls[0].name")
    );
    assert!(
        refused(r#"{"contains":"x","reply":"r","calls":[{"namespace":"","name":"t"}]}"#)
            .contains("calls[0].namespace")
    );
    assert!(
        refused(r#"{"contains":"x","reply":"r","calls":[{"name":"t","arguments":[1]}]}"#)
            .contains("not a JSON object")
    );
    assert!(
        refused(r#"{"contains":"x","reply":"r","fail":"http_500","calls":[{"name":"t"}]}"#)
            .contains("exclude")
    );
    assert!(refused(
        r#"{"contains":"x","reply":"r","plan":{"steps":[{"step":"s","status":"pending"}]},"calls":[{"name":"t"}]}"#
    )
    .contains("exclude"));
    assert!(
        refused(r#"{"contains":"x","reply":"r","calls":[{"name":"t","extra":1}]}"#)
            .contains("extra")
    );
    let many: Vec<String> = (0..=script::MAX_CALLS)
        .map(|_| r#"{"name":"t"}"#.to_string())
        .collect();
    assert!(refused(&format!(
        r#"{{"contains":"x","reply":"r","calls":[{}]}}"#,
        many.join(",")
    ))
    .contains("limit"));
}

#[test]
fn output_placeholders_fill_text_and_json_pointers_and_leave_other_braces() {
    use script::fill_outputs;
    let outputs = [
        Some("Wall time: 1 s\nOutput:\n{\"a\":{\"b\":[1,\"two\"]},\"s\":\"x\"}".to_string()),
        None,
    ];
    assert_eq!(fill_outputs("{output_0:/s}", &outputs), "x");
    assert_eq!(
        fill_outputs("{output_0:/a/b/1} {output_0:/a/b}", &outputs),
        "two [1,\"two\"]"
    );
    // An empty pointer: the first embedded JSON value itself (the JSON part of the output).
    assert_eq!(
        fill_outputs("[{output_0:}]", &outputs[..1]),
        r#"[{"a":{"b":[1,"two"]},"s":"x"}]"#
    );
    assert_eq!(fill_outputs("{last_output:/s}", &outputs[..1]), "x");
    assert_eq!(
        fill_outputs("{output_1}", &outputs),
        "<no output for {output_1}>"
    );
    assert_eq!(
        fill_outputs("{output_7}", &outputs),
        "<no output for {output_7}>"
    );
    assert!(fill_outputs("{output_0:/nope}", &outputs)
        .starts_with("<no JSON value at /nope in: Wall time"));
    assert_eq!(
        fill_outputs("{prompt} {output_x} {json: 1} {output_0:s} {", &outputs),
        "{prompt} {output_x} {json: 1} {output_0:s} {"
    );
    assert_eq!(
        fill_outputs("{last_output}", &[]),
        "<no output for {last_output}>"
    );
    // The first embedded JSON value that has the pointer wins.
    let two = [Some("[1] then {\"k\":2}".to_string())];
    assert_eq!(fill_outputs("{output_0:/k} {output_0:/0}", &two), "2 1");
}
