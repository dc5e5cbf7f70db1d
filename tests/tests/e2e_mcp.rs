//! Issue 13 (its first part): `wakterm mcp` driven by a real MCP client over stdio, the
//! official SDK's client spawning the server as a child process: initialize, list the tools,
//! call them against a running daemon and the fake Codex.

mod support;
#[path = "support/mcp_client.rs"]
mod mcp_client;

use mcp_client::{call, call_with_exit, connect, runtime};

use serde_json::json;
use support::{new_id, World};

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";





/// MCP-1, MCP-2: the tools are listed with JSON Schemas for their arguments; the admission API works end to
/// end: a return-final admission through MCP is answered with the daemon's receipt, and
/// request_wait brings back the final of exactly the turn it started.
#[test]
fn mcp_admit_and_wait_return_the_final_through_a_real_client() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    runtime().block_on(async {
        let client = connect(&w).await;
        let info = client.peer_info().expect("the server introduced itself");
        assert_eq!(info.server_info.name, "wakterm");
        let tools = client.list_all_tools().await.expect("tools/list");
        let mut names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        names.sort_unstable();
        assert_eq!(names, ["agent_admit", "agent_capabilities", "agent_catalog", "request_get", "request_wait", "session"]);
        let admit = tools.iter().find(|t| t.name == "agent_admit").unwrap();
        let schema = serde_json::to_value(&*admit.input_schema).unwrap();
        assert_eq!(schema["required"], json!(["agent", "prompt"]), "{schema}");
        let session = tools.iter().find(|t| t.name == "session").unwrap();
        let actions = &serde_json::to_value(&*session.input_schema).unwrap();
        assert!(actions.to_string().contains("submit") && actions.to_string().contains("input"), "{actions}");

        let (error, catalog) = call(&client, "agent_catalog", json!({})).await;
        assert!(!error, "{catalog}");
        assert_eq!(catalog["agents"][0]["name"], "zola", "{catalog}");

        let id = new_id();
        let (error, receipt) = call(&client, "agent_admit", json!({"agent": "zola", "prompt": "a question over MCP", "request_id": id})).await;
        assert!(!error, "{receipt}");
        assert_eq!((receipt["classification"].as_str(), receipt["reply_pending"].as_bool()), (Some("accepted"), Some(true)), "{receipt}");
        let (error, waited) = call(&client, "request_wait", json!({"request_id": id, "timeout_ms": 20000})).await;
        assert!(!error, "{waited}");
        assert_eq!(waited["terminal"], true, "{waited}");
        assert_eq!(waited["terminal_event"]["state"], "completed", "{waited}");
        assert_eq!(waited["terminal_event"]["final_message"], REPLY.replace("{prompt}", "a question over MCP").as_str());

        // IDEM-2: the same id again writes nothing and replays the receipt.
        let (_, replay) = call(&client, "agent_admit", json!({"agent": "zola", "prompt": "a question over MCP", "request_id": id})).await;
        assert_eq!(replay["replayed"], true, "{replay}");
        client.cancel().await.expect("close");
    });
    let prompts = w.user_prompts();
    assert_eq!(prompts.iter().filter(|p| *p == "a question over MCP").count(), 1, "written once, the replay wrote nothing: {prompts:?}");
}

/// A `session` call of `action` on `session_id`; raw input carries "x".
fn action_on(action: &str, session_id: &str) -> serde_json::Value {
    match action {
        "input" => json!({"action": action, "session_id": session_id, "input": "x"}),
        _ => json!({"action": action, "session_id": session_id}),
    }
}

/// MCP-3: the `session` tool: list and status are the catalog's; output is the experimental page;
/// input writes raw text and keys into the pane and answers write completion only (the fake
/// Codex's composer shows the draft); submit is not built yet and says so, structured. Bad
/// arguments get specific errors and change nothing.
#[test]
fn mcp_session_actions_and_bad_arguments() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, list) = call(&client, "session", json!({"action": "list"})).await;
        assert!(!error && list["agents"][0]["name"] == "zola", "{list}");
        let (error, status) = call(&client, "session", json!({"action": "status", "session_id": "zola"})).await;
        assert!(!error, "{status}");
        assert_eq!(status["state"], "idle", "{status}");
        let (error, page) = call(&client, "session", json!({"action": "output", "session_id": "zola"})).await;
        assert!(!error, "{page}");
        let (error, typed) = call(&client, "session", json!({"action": "input", "session_id": "zola", "input": "an unsent draft"})).await;
        assert!(!error && typed["ok"] == true, "{typed}");
        let drafted = w.wait_agent("zola", "the draft is seen", |z| z["return_final_unavailable_reason"] == "composer_not_empty");
        assert_eq!(drafted["return_final_available"], false, "{drafted}");
        let (error, cleared) = call(&client, "session", json!({"action": "input", "session_id": "zola", "special_key": "Ctrl_U"})).await;
        assert!(!error, "{cleared}");
        w.wait_agent("zola", "the draft is cleared", |z| z["return_final_available"] == true);

        let (error, key) = call(&client, "session", json!({"action": "input", "session_id": "zola", "special_key": "hyper-f13"})).await;
        assert!(error && key["error"] == "bad_request", "{key}");
        assert!(key["message"].as_str().is_some_and(|m| m.contains("known keys: enter,") && m.contains("ctrl-u")), "the answer lists the keys: {key}");
        // An unknown agent is the CLI's exit 6 for every action (status and input said 2).
        for action in ["status", "output", "input"] {
            let (error, nobody, exit_code) = call_with_exit(&client, "session", action_on(action, "nobody")).await;
            // (`output` answers its page's own shape: `reason`.)
            let said = nobody["error"] == "agent_unknown" || nobody["reason"] == "agent_unknown";
            assert!(error && said && exit_code == Some(6), "{action}: {nobody} {exit_code:?}");
        }
        // INP-4: a session id that cannot name an agent (empty, white space) is malformed for
        // every action, as for submit (status, output and input said `agent_unknown`); output
        // says it in its page's schema (OUT-1: every answer has a `state`).
        for (action, session_id) in [("status", ""), ("output", " "), ("input", ""), ("input", "zo la")] {
            let (error, malformed, exit_code) = call_with_exit(&client, "session", action_on(action, session_id)).await;
            let said = match action {
                "output" => malformed["state"] == "target_malformed" && malformed["schema"] == "wakterm.agent-output-shadow.experimental.v1",
                _ => malformed["error"] == "target_malformed",
            };
            assert!(error && said && exit_code == Some(2), "{action} {session_id:?}: {malformed} {exit_code:?}");
        }
        // INP-4, IDEM-7: under the caller's own id a stateless refusal is the daemon's to give;
        // one whose line is over the daemon's limit cannot be sent: the refusal made here,
        // with its receipt (it was `request_too_large`, exit 2: a review).
        let huge = "x".repeat(wakterm_runtime::protocol::MAX_REQUEST_LINE_BYTES + 1);
        let arguments = json!({"agent": format!("zo la{huge}"), "prompt": "hi", "request_id": "5d3b1f6e-8a2c-4e7d-9b1f-3c5e7a9d1b2f"});
        let (error, admit, exit_code) = call_with_exit(&client, "agent_admit", arguments).await;
        assert!(error && admit["reason"] == "target_malformed" && admit["retry_safe"] == false && exit_code == Some(4), "{}", admit.to_string().chars().take(300).collect::<String>());
        let (error, submitted) = call(&client, "session", json!({"action": "submit", "session_id": "", "input": "x"})).await;
        assert!(error && submitted["reason"] == "target_malformed" && submitted["classification"] == "invalid", "{submitted}");
        let (error, missing) = call(&client, "session", json!({"action": "input"})).await;
        assert!(error && missing["error"] == "bad_request", "{missing}");
        // Arguments that do not fit the tool's schema are a structured usage error, exit 2,
        // nothing sent (the SDK answered bare text; a review).
        let misfits = [
            ("agent_admit", json!({"agent": "zola", "prompt": "hi", "final_timeout_ms": -5})),
            ("agent_admit", json!({"target": "zola", "prompt": "hi"})),
            ("session", json!({"action": "bogus"})),
            ("request_wait", json!({"request_id": 7})),
            // MCP-3: the tools that take no argument refuse one too (they ignored it).
            ("agent_catalog", json!({"x": 1})),
            ("agent_capabilities", json!({"x": [1]})),
            // MCP-3: so does an action given an argument it does not take (a `submit` with
            // `after` wrote its input; a `list` with `input` listed).
            ("session", json!({"action": "submit", "session_id": "zola", "input": "must not be sent", "after": "x"})),
            ("session", json!({"action": "list", "input": "must not be sent"})),
            ("session", json!({"action": "input", "session_id": "zola", "input": "must not be sent", "timeout_ms": 500})),
        ];
        for (tool, arguments) in misfits {
            let (error, answer, exit_code) = call_with_exit(&client, tool, arguments.clone()).await;
            assert!(error && answer["schema"] == "wakterm.error.v1" && answer["error"] == "invalid_arguments", "{tool} {arguments}: {answer}");
            assert_eq!(exit_code, Some(2), "{tool} {arguments}: {answer}");
        }
        // A malformed request id is the daemon's own refusal, passed through.
        let (error, bad_id) = call(&client, "request_get", json!({"request_id": "not-a-uuid"})).await;
        assert!(error, "{bad_id}");
        client.cancel().await.expect("close");
    });
    assert!(w.user_prompts().len() == 1, "only the baseline turn: nothing was submitted: {:?}", w.user_prompts());
    // (submit has its own tests: e2e_submit.rs)
}

/// MCP-1: without a running daemon every tool answers a structured error (never hangs); a
/// request refused for what needs no state gets its receipt all the same (INP-1..5).
#[test]
fn mcp_without_a_daemon_answers_daemon_not_running() {
    let w = World::new(EXE);
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, reply) = call(&client, "agent_catalog", json!({})).await;
        assert!(error, "{reply}");
        assert_eq!(reply["error"], "daemon_not_running", "{reply}");
        // INP-1..5: what needs no state is refused before connecting, with the daemon's own
        // receipt (it said daemon_not_running): an admission's malformed target, a submit's
        // empty text (the text is checked before the target, as the engine does).
        let (error, admit, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zo la", "prompt": "hi"})).await;
        assert!(error && admit["classification"] == "invalid" && admit["reason"] == "target_malformed" && exit_code == Some(4), "{admit}");
        let (error, submit, exit_code) = call_with_exit(&client, "session", json!({"action": "submit", "session_id": "zo la", "input": " "})).await;
        assert!(error && submit["reason"] == "prompt_empty" && exit_code == Some(4), "{submit}");
        client.cancel().await.expect("close");
    });
}

/// MCP-2 (IDEM-7, INP-1): `agent_admit` shares the CLI's admission call. A reply lost after the
/// request reached the daemon is `indeterminate` with the request id to replay, the one the
/// tool generated included (it used to pass a bare `daemon_io` on, the generated id lost); a
/// prompt over the limit is refused before anything is sent, `invalid` / `prompt_too_large`
/// (it used to cut the daemon's line and answer "may have been written"); so are a submit's
/// text and raw input over it (raw input once panicked in the holder client).
#[test]
fn mcp_2_a_lost_reply_keeps_the_request_id_and_oversized_input_is_refused_unsent() {
    let w = World::new(EXE);
    let received = w.silent_daemon();
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, lost, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zola", "prompt": "may or may not be written"})).await;
        let sent: serde_json::Value = serde_json::from_str(&received.recv_timeout(std::time::Duration::from_secs(10)).expect("the request was sent")).unwrap();
        assert!(error, "{lost}");
        assert_eq!(exit_code, Some(5), "{lost}");
        assert_eq!((&lost["error"], &lost["classification"]), (&json!("reply_lost"), &json!("indeterminate")), "{lost}");
        assert_eq!((&lost["write_state"], &lost["retry_safe"]), (&json!("unknown"), &json!(false)), "{lost}");
        let sent_id = &sent["request_id"];
        assert!(sent_id.is_string(), "the request named its id: {sent}");
        assert_eq!(&lost["request_id"], sent_id, "the generated id is returned to replay: {lost}");

        let huge = "x".repeat(wakterm_engine::limits::MAX_PROMPT_BYTES + 1);
        let id = new_id();
        let (error, refused, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zola", "prompt": huge, "request_id": id})).await;
        assert!(error, "{refused}");
        assert_eq!(exit_code, Some(4), "{refused}");
        // MCP-2: a refusal is the receipt itself, as an acceptance is (it came wrapped).
        let receipt = &refused;
        // IDEM-7: refused before sending under an id the caller named, which may have been
        // written (only the daemon could tell): never retry-safe.
        assert_eq!((&receipt["classification"], &receipt["reason"], &receipt["prompt_written"], &receipt["retry_safe"]), (&json!("invalid"), &json!("prompt_too_large"), &json!(false), &json!(false)), "{receipt}");
        assert_eq!(receipt["request_id"], id.as_str(), "{receipt}");
        // INP-1: a submit's receipt, as the daemon's own refusal would be (it was a usage error).
        let (error, submit, exit_code) = call_with_exit(&client, "session", json!({"action": "submit", "session_id": "zola", "input": huge})).await;
        assert!(error && exit_code == Some(4), "{submit}");
        assert_eq!((&submit["schema"], &submit["status"], &submit["classification"], &submit["reason"]), (&json!("wakterm.session-submit.receipt.v1"), &json!("rejected"), &json!("invalid"), &json!("prompt_too_large")), "{submit}");
        assert_eq!((&submit["write_state"], &submit["retry_safe"]), (&json!("not_started"), &json!(true)), "{submit}");
        let (error, input) = call(&client, "session", json!({"action": "input", "session_id": "zola", "input": huge})).await;
        assert!(error && input["error"] == "input_too_large", "{input}");
        client.cancel().await.expect("close");
    });
    assert!(received.try_recv().is_err(), "nothing oversized was sent to the daemon");
}

/// MCP-3, MCP-4: raw `input` answers `ok: true` only when every byte was written: a pane whose
/// process is gone refuses it (`not_started`; it used to answer `ok: true` with the refusal
/// inside); a managed agent's pane (its app-server's JSON-RPC stdin) takes no raw input at
/// all (`input_needs_pty`; raw JSON there started a turn past admission). A misspelt argument
/// is an error, never ignored (`requestId` used to fall back to a generated id: two writes).
#[test]
fn mcp_4_raw_input_claims_only_what_was_written() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let exe = w.exe.display().to_string();
    let (cwd, home) = (w.work.display().to_string(), format!("CODEX_HOME={}", w.codex_home.display()));
    w.ok(&["agent", "start", "--name", "mia", "--managed", "--cwd", &cwd, "--env", &home, "--", &exe, "fake-codex-app-server", "app-server"]);
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, managed) = call(&client, "session", json!({"action": "input", "session_id": "mia", "input": "{\"jsonrpc\":\"2.0\"}\n"})).await;
        assert!(error && managed["error"] == "input_needs_pty", "{managed}");

        let arguments = json!({"agent": "zola", "prompt": "typo", "requestId": new_id()}).as_object().cloned().unwrap();
        let misspelt = client.call_tool(rmcp::model::CallToolRequestParams::new("agent_admit").with_arguments(arguments)).await;
        assert!(misspelt.is_err() || misspelt.as_ref().is_ok_and(|r| r.is_error == Some(true)), "{misspelt:?}");

        // The incarnation is the process's pid and start time.
        let pid: i32 = entry["incarnation"].as_str().and_then(|i| i.split('.').next()).and_then(|p| p.parse().ok()).expect("the fake's pid");
        // SAFETY: a signal to the test world's own fake Codex.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        w.wait_agent("zola", "stopped", |z| z["state"] == "stopped");
        let (error, refused) = call(&client, "session", json!({"action": "input", "session_id": "zola", "input": "into nothing"})).await;
        assert!(error, "{refused}");
        assert_eq!((&refused["ok"], &refused["write_state"]), (&json!(false), &json!("not_started")), "{refused}");
        client.cancel().await.expect("close");
    });
    assert!(!w.user_prompts().iter().any(|p| p == "typo"), "the misspelt call wrote nothing: {:?}", w.user_prompts());
}

/// MCP-1: a message line past the server's bound ends it with exit 1 and the reason on
/// stderr. rmcp took the read error for the end of its input: the server exited 0, silent,
/// and a client with a call in flight learnt nothing.
#[test]
fn mcp_1_a_line_past_the_bound_ends_the_server_saying_why() {
    use std::io::Write;
    let w = World::new(EXE);
    let mut server = w.cmd(&["mcp"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn mcp");
    let mut stdin = server.stdin.take().expect("stdin");
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    writeln!(stdin, "{initialize}").expect("initialize");
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("initialized");
    let chunk = vec![b'x'; 1 << 20];
    for _ in 0..6 {
        if stdin.write_all(&chunk).is_err() {
            break; // the server stopped reading
        }
    }
    drop(stdin);
    let out = server.wait_with_output().expect("the server exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("without its end"), "the reason is said: {stderr}");
}

/// MCP-1: a request sent before `initialize` is answered under its id (-32600), and the
/// server ends with exit 1 saying why on stderr, never what was sent: the SDK's own text
/// carried the whole request, a prompt and all, and its client got no answer (a hostile run).
#[test]
fn mcp_1_a_call_before_initialize_is_answered_and_its_arguments_stay_private() {
    use std::io::Write;
    let w = World::new(EXE);
    let mut server = w.cmd(&["mcp"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped()).spawn().expect("spawn mcp");
    let mut stdin = server.stdin.take().expect("stdin");
    let call = json!({"jsonrpc": "2.0", "id": 41, "method": "tools/call", "params": {"name": "agent_admit", "arguments": {"agent": "zola", "prompt": "SECRET-TOKEN-12345"}}});
    writeln!(stdin, "{call}").expect("call");
    drop(stdin);
    let out = server.wait_with_output().expect("the server exits");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let answer: serde_json::Value = serde_json::from_str(stdout.lines().next().unwrap_or_default()).unwrap_or_else(|e| panic!("one JSON answer: {e}: {stdout:?}"));
    assert_eq!((&answer["id"], &answer["error"]["code"]), (&json!(41), &json!(-32600)), "{answer}");
    assert!(stderr.contains("\"tools/call\", not `initialize`"), "the reason is said: {stderr}");
    assert!(!stderr.contains("SECRET") && !stdout.contains("SECRET"), "what was sent stays private: {stderr}");
}

/// MCP-2, ADM-18 (seed 000: the admission API never steers an active turn): a one-way
/// `agent_admit` with the incarnation is an admission, and without one a no-steer send: a
/// running turn refuses both `busy` / `turn_active` with nothing written. Only `steer: true`
/// makes it a plain send, written into the running turn (ADM-13: acknowledged); with an
/// incarnation or return_final that is a usage error. Every tool result carries the CLI's
/// exit code in `_meta`, `request_wait`'s and `session`'s too.
#[test]
fn mcp_2_a_one_way_admit_never_steers_unless_asked() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &["--hang-on", "HANGME"]);
    let incarnation = entry["incarnation"].as_str().expect("an incarnation").to_string();
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, idle, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zola", "prompt": "fire and forget", "return_final": false})).await;
        assert!(!error, "{idle}");
        assert_eq!((idle["classification"].as_str(), idle["operation"].as_str(), idle["acknowledged"].as_bool(), exit_code), (Some("accepted"), Some("send"), Some(true), Some(0)), "{idle}");
        let (_, status, exit_code) = call_with_exit(&client, "session", json!({"action": "status", "session_id": "zola"})).await;
        assert_eq!((status["name"].as_str(), exit_code), (Some("zola"), Some(0)), "{status}");
        let (_, waited, exit_code) = call_with_exit(&client, "request_wait", json!({"request_id": idle["request_id"], "timeout_ms": 100})).await;
        assert_eq!((waited["one_way"].as_bool(), exit_code), (Some(true), Some(0)), "{waited}");
        w.wait_agent("zola", "idle again", |z| z["state"] == "idle");
        assert_eq!(w.run(&["agent", "send", "zola", "please HANGME forever"]).code, 0);
        w.wait_agent("zola", "busy", |z| z["state"] == "busy");
        let prompts = w.user_prompts();
        let (error, busy, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zola", "prompt": "do not steer", "return_final": false, "incarnation": incarnation})).await;
        assert!(error, "{busy}");
        assert_eq!((busy["classification"].as_str(), busy["reason"].as_str(), busy["prompt_written"].as_bool(), exit_code), (Some("busy"), Some("turn_active"), Some(false), Some(4)), "{busy}");
        assert_eq!(w.user_prompts(), prompts, "nothing was written into the running turn");
        let (error, busy, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zola", "prompt": "do not steer either", "return_final": false})).await;
        assert!(error, "{busy}");
        assert_eq!((busy["classification"].as_str(), busy["reason"].as_str(), busy["operation"].as_str(), busy["retry_safe"].as_bool(), exit_code), (Some("busy"), Some("turn_active"), Some("send"), Some(true), Some(4)), "{busy}");
        assert_eq!(w.user_prompts(), prompts, "nothing was written into the running turn without an incarnation either");
        // The CLI's spelling of the same send.
        let cli = w.run(&["agent", "send", "zola", "--no-steer", "nor from the CLI"]);
        assert_eq!((cli.code, cli.json["classification"].as_str(), cli.json["reason"].as_str()), (4, Some("busy"), Some("turn_active")), "{cli:?}");
        assert_eq!(w.user_prompts(), prompts);
        for contradiction in [json!({"incarnation": incarnation}), json!({"return_final": true})] {
            let mut arguments = json!({"agent": "zola", "prompt": "steer and admit", "return_final": false, "steer": true});
            arguments.as_object_mut().unwrap().extend(contradiction.as_object().unwrap().clone());
            let (error, refused, exit_code) = call_with_exit(&client, "agent_admit", arguments).await;
            assert!(error, "{refused}");
            assert_eq!((refused["classification"].as_str(), refused["reason"].as_str(), refused["prompt_written"].as_bool(), exit_code), (Some("invalid"), Some("steer_not_allowed"), Some(false), Some(4)), "{refused}");
        }
        assert_eq!(w.user_prompts(), prompts);
        let (error, steered, exit_code) = call_with_exit(&client, "agent_admit", json!({"agent": "zola", "prompt": "steer on purpose", "return_final": false, "steer": true})).await;
        assert!(!error, "{steered}");
        assert_eq!((steered["classification"].as_str(), steered["operation"].as_str(), steered["acknowledged"].as_bool(), exit_code), (Some("accepted"), Some("send"), Some(true), Some(0)), "{steered}");
        assert_eq!(w.user_prompts().last().map(String::as_str), Some("steer on purpose"), "written into the running turn");
        let (error, input, exit_code) = call_with_exit(&client, "session", json!({"action": "input", "session_id": "nobody", "input": "x"})).await;
        assert!(error && exit_code.is_some(), "{input}");
        client.cancel().await.expect("close");
    });
}

/// MCP-5: `request_wait` ends when the client cancels it (`notifications/cancelled`: it polled
/// on to its timeout, 20 s here), and each look waits for the daemon no longer than the wait
/// has left (a frozen daemon made a 200 ms wait answer after 61 s: a review).
#[test]
fn mcp_5_request_wait_ends_on_cancel_and_within_its_bound() {
    use std::io::{BufRead, Write};
    use std::time::{Duration, Instant};
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &["--reply-delay-ms", "3000"]);
    let id = new_id();
    let out = w.run(&["agent", "send", "zola", "--return-final", "--request-id", &id, "slow answer"]);
    assert_eq!(out.code, 0, "{out:?}");
    let mut server = w.cmd(&["mcp"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("spawn mcp");
    let mut stdin = server.stdin.take().expect("stdin");
    let (tx, answers) = std::sync::mpsc::channel::<serde_json::Value>();
    let stdout = server.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(serde_json::from_str(&line).unwrap_or_default());
        }
    });
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    writeln!(stdin, "{initialize}").expect("initialize");
    assert_eq!(answers.recv_timeout(Duration::from_secs(30)).expect("initialized")["id"], 1);
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("initialized");
    let wait = |n: u64, timeout_ms: u64| json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "request_wait", "arguments": {"request_id": id, "timeout_ms": timeout_ms}}});

    let started = Instant::now();
    writeln!(stdin, "{}", wait(2, 20_000)).expect("request_wait");
    std::thread::sleep(Duration::from_millis(300));
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 2, "reason": "the user gave up"}})).expect("cancel");
    let answer = answers.recv_timeout(Duration::from_secs(30)).expect("an answer");
    assert!(started.elapsed() < Duration::from_secs(2), "the wait ended at the cancel, not its timeout: {:?}", started.elapsed());
    assert_eq!(answer["result"]["structuredContent"]["cancelled"], true, "{answer}");

    let daemon = w.daemon_pid();
    // SAFETY: a signal to our own daemon's pid.
    unsafe { libc::kill(daemon as i32, libc::SIGSTOP) };
    let started = Instant::now();
    writeln!(stdin, "{}", wait(3, 200)).expect("request_wait");
    let answer = answers.recv_timeout(Duration::from_secs(90)).expect("an answer");
    let took = started.elapsed();
    // A cancel ends a look the frozen daemon holds, too (it waited for the look's bound).
    let started = Instant::now();
    writeln!(stdin, "{}", wait(4, 20_000)).expect("request_wait");
    std::thread::sleep(Duration::from_millis(300));
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 4}})).expect("cancel");
    let cancelled = answers.recv_timeout(Duration::from_secs(60)).expect("an answer");
    let cancel_took = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(daemon as i32, libc::SIGCONT) };
    assert!(took < Duration::from_secs(5), "a 200 ms wait answered after {took:?}: {answer}");
    assert_eq!(answer["result"]["structuredContent"]["error"], "daemon_unresponsive", "{answer}");
    assert!(cancel_took < Duration::from_secs(3), "the cancel ended the look in flight: {cancel_took:?}: {cancelled}");
    assert_eq!(cancelled["result"]["structuredContent"]["cancelled"], true, "{cancelled}");
    drop(stdin);
    let _ = server.wait();
}

/// MCP-6: a call with a key twice in one object (`"action": "list", "action": "submit"`) runs
/// nothing: serde kept the last one, so a gateway that read the first saw a read-only call that
/// submitted (a review). The client gets an error for its id that says why.
#[test]
fn mcp_6_a_call_with_a_duplicate_key_runs_nothing() {
    use std::io::{BufRead, Write};
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let mut server = w.cmd(&["mcp"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("spawn mcp");
    let mut stdin = server.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(server.stdout.take().expect("stdout"));
    let mut next = || {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("a line");
        serde_json::from_str::<serde_json::Value>(&line).expect("JSON")
    };
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    writeln!(stdin, "{initialize}").expect("initialize");
    assert_eq!(next()["id"], 1);
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("initialized");
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"session","arguments":{{"action":"list","action":"submit","session_id":"zola","input":"must not be sent"}}}}}}"#).expect("call");
    let answer = next();
    assert_eq!(answer["id"], 2, "{answer}");
    assert!(answer["error"]["message"].as_str().unwrap_or_default().contains("has a key twice") || answer["error"].to_string().contains("has a key twice"), "the error says why: {answer}");
    // After a UTF-8 BOM, which the SDK drops before it parses (it hid the keys: a review).
    stdin.write_all(b"\xEF\xBB\xBF").expect("BOM");
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{{"name":"session","arguments":{{"action":"list","action":"input","session_id":"zola","input":"must not be typed"}}}}}}"#).expect("call");
    let answer = next();
    assert!(answer["id"] == 4 && answer["error"].to_string().contains("has a key twice"), "{answer}");
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "session", "arguments": {"action": "list"}}})).expect("call");
    assert_eq!(next()["result"]["structuredContent"]["agents"][0]["name"], "zola", "the server goes on");
    drop(stdin);
    let _ = server.wait();
    std::thread::sleep(std::time::Duration::from_millis(500));
    assert_eq!(w.user_prompts().len(), 1, "only the baseline turn: {:?}", w.user_prompts());
}

/// MCP-7: a request whose id the SDK cannot take (null, fractional, past 64 bits, an object)
/// is answered Invalid Request under id null, between the SDK's own lines, and the server goes
/// on (rmcp dropped such a line unanswered, and the client waited for good: a hostile run).
/// Read to the end of the output after the input ends, so a missing answer fails, not hangs.
#[test]
fn mcp_7_a_request_whose_id_the_sdk_cannot_take_is_answered() {
    use std::io::{BufRead, Write};
    let w = World::new(EXE);
    let mut server = w.cmd(&["mcp"]).stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped()).spawn().expect("spawn mcp");
    let mut stdin = server.stdin.take().expect("stdin");
    let mut stdout = std::io::BufReader::new(server.stdout.take().expect("stdout"));
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}});
    writeln!(stdin, "{initialize}").expect("initialize");
    let mut line = String::new();
    stdout.read_line(&mut line).expect("a line");
    assert_eq!(serde_json::from_str::<serde_json::Value>(&line).expect("JSON")["id"], 1, "{line}");
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).expect("initialized");
    for id in ["null", "1.5", "18446744073709551616", "{}"] {
        writeln!(stdin, r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list"}}"#).expect("request");
    }
    writeln!(stdin, "{}", json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).expect("request");
    drop(stdin);
    let answers: Vec<serde_json::Value> = stdout.lines().map(|line| serde_json::from_str(&line.expect("a line")).expect("JSON")).collect();
    let invalid = answers.iter().filter(|a| a["id"].is_null() && a["error"]["code"] == -32600).count();
    assert_eq!(invalid, 4, "one Invalid Request per such request: {answers:?}");
    assert!(answers.iter().any(|a| a["id"] == 2 && a["result"]["tools"].is_array()), "the server goes on: {answers:?}");
    assert_eq!(answers.len(), 5, "{answers:?}");
    assert!(server.wait().expect("the server ends with its input").success());
}

/// RF-6, MCP-5: an id whose admission has not committed its record yet is no unknown id:
/// `request get` says `request_admission_in_progress` (exit 6, nothing shown: the store holds
/// nothing yet) and `request_wait` waits for it as for a pending request. An `agent_admit` and
/// a `request_wait` of one id in flight together answered `request_not_found` while the
/// admission registered (a hostile run). Here a stopped holder (SIGSTOP) holds the admission in
/// its look for up to the refresh's bound.
#[test]
fn rf_6_an_admission_in_progress_is_waited_for_not_unknown() {
    let w = World::new(EXE);
    w.mux_start();
    let entry = w.ready_agent("zola", REPLY, &[]);
    let incarnation = entry["incarnation"].as_str().expect("an incarnation").to_string();
    let holders = w.holder_pids();
    assert_eq!(holders.len(), 1, "{holders:?}");
    let id = new_id();
    // SAFETY: signals to our own test world's holder.
    assert_eq!(unsafe { libc::kill(holders[0], libc::SIGSTOP) }, 0);
    let mut admit = w.cmd(&["agent", "admit", "zola", "--incarnation", &incarnation, "--request-id", &id, "held in its look"]).spawn().expect("admit");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    let in_progress = loop {
        let out = w.run(&["agent", "request", "get", &id]);
        if out.json["error"] == "request_admission_in_progress" {
            break out;
        }
        assert_eq!(out.json["error"], "request_not_found", "before the daemon has the admit: {out:?}");
        assert!(std::time::Instant::now() < deadline, "the admission in its look was never reported in progress: {out:?}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    assert_eq!(in_progress.code, 6, "{in_progress:?}");
    runtime().block_on(async {
        let client = connect(&w).await;
        let (error, waited, exit_code) = call_with_exit(&client, "request_wait", json!({"request_id": id, "timeout_ms": 300})).await;
        assert!(!error, "{waited}");
        assert_eq!((waited["still_pending"].as_bool(), waited["state"].as_str(), exit_code), (Some(true), Some("admitting"), Some(0)), "{waited}");
        client.cancel().await.expect("close");
    });
    assert_eq!(unsafe { libc::kill(holders[0], libc::SIGCONT) }, 0);
    let status = support::wait_exit(&mut admit, std::time::Duration::from_secs(30)).expect("the admission answered");
    let out = w.run(&["agent", "request", "get", &id]);
    assert_ne!(out.json["error"], "request_admission_in_progress", "its admission answered ({status:?}): {out:?}");
}
