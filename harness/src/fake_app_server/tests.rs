//! Unit tests of the fake app-server's state machine (no process, explicit clock).

use super::*;

fn config(dir: &Path, behaviour: Behaviour) -> ServerConfig {
    ServerConfig {
        codex_home: dir.join("codex-home"),
        state_dir: dir.join("state"),
        cwd: dir.join("project"),
        behaviour,
    }
}

fn line(value: Value) -> String {
    value.to_string()
}

/// A server after initialize and thread/start; returns it and the thread id.
fn ready(dir: &Path, behaviour: Behaviour) -> (FakeAppServer, String) {
    let mut server = FakeAppServer::new(config(dir, behaviour));
    let init = json!({ "id": 0, "method": "initialize", "params": { "clientInfo": { "name": "unit", "version": "1" } } });
    server.handle_line(&line(init), 0).unwrap();
    server
        .handle_line(r#"{"method":"initialized"}"#, 0)
        .unwrap();
    let start = server
        .handle_line(
            &line(json!({ "id": 1, "method": "thread/start", "params": {} })),
            0,
        )
        .unwrap();
    let thread_id = start.messages[0].to_value()["result"]["thread"]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    (server, thread_id)
}

fn turn_start(
    server: &mut FakeAppServer,
    id: u64,
    thread: &str,
    text: &str,
    now_ms: u64,
) -> Reaction {
    let request = json!({ "id": id, "method": "turn/start",
                          "params": { "threadId": thread, "input": [{ "type": "text", "text": text }] } });
    server.handle_line(&line(request), now_ms).unwrap()
}

fn methods(reaction: &Reaction) -> Vec<String> {
    reaction
        .messages
        .iter()
        .map(|m| {
            m.method()
                .map_or_else(|| "response".to_owned(), str::to_owned)
        })
        .collect()
}

#[test]
fn knobs_come_from_the_environment_with_defaults() {
    let env: BTreeMap<&str, &str> = [("HOME", "/home/u")].into();
    let config =
        ServerConfig::from_env(|k| env.get(k).map(|v| v.to_string()), "/w".into()).unwrap();
    assert_eq!(config.codex_home, Path::new("/home/u/.codex"));
    assert_eq!(
        config.state_dir,
        Path::new("/home/u/.codex/fake-app-server")
    );
    assert_eq!(config.behaviour, Behaviour::default());
    assert_eq!(config.behaviour.reply_template, "done: {prompt}");

    let env: BTreeMap<&str, &str> = [
        ("CODEX_HOME", "/c"),
        (ENV_REPLY, "R {prompt}"),
        (ENV_REPLY_DELAY_MS, "5"),
        (ENV_HOLD_PREFIX, "HOLD"),
        (ENV_HOLD_MS, "70"),
        (ENV_FAIL_PREFIX, "FAIL"),
        (ENV_EXIT_PREFIX, ""),
        (ENV_BUSY, "refuse"),
        (ENV_STATE_DIR, "/s"),
    ]
    .into();
    let config =
        ServerConfig::from_env(|k| env.get(k).map(|v| v.to_string()), "/w".into()).unwrap();
    let b = &config.behaviour;
    assert_eq!(
        (b.reply_template.as_str(), b.reply_delay_ms, b.hold_ms),
        ("R {prompt}", 5, 70)
    );
    assert_eq!(
        (
            b.hold_prefix.as_deref(),
            b.fail_prefix.as_deref(),
            b.exit_prefix.as_deref()
        ),
        (Some("HOLD"), Some("FAIL"), None)
    );
    assert_eq!(b.busy, BusyTurnStart::Refuse);
    assert_eq!(config.state_dir, Path::new("/s"));

    for (name, bad) in [
        (ENV_REPLY_DELAY_MS, "soon"),
        (ENV_HOLD_MS, "99999999999"),
        (ENV_BUSY, "queue"),
    ] {
        let env: BTreeMap<&str, &str> = [("HOME", "/h"), (name, bad)].into();
        assert!(
            ServerConfig::from_env(|k| env.get(k).map(|v| v.to_string()), "/w".into()).is_err(),
            "{name}={bad}"
        );
    }
    assert!(
        ServerConfig::from_env(|_| None, "/w".into()).is_err(),
        "no CODEX_HOME and no HOME"
    );
}

#[test]
fn prefixes_choose_the_plan_and_the_reply_uses_the_trimmed_prompt() {
    let behaviour = Behaviour {
        hold_prefix: Some("HOLD".into()),
        hold_ms: 700,
        fail_prefix: Some("FAIL".into()),
        exit_prefix: Some("DIE".into()),
        ..Behaviour::default()
    };
    let plan = |p: &str| behaviour.plan(p);
    assert_eq!(
        plan("hello"),
        Plan {
            delay_ms: 50,
            ending: Ending::Reply,
            exit_now: false,
            ask_approval: false,
            exit_after_reply: false,
            refuse: false
        }
    );
    assert_eq!(
        plan("  HOLD on"),
        Plan {
            delay_ms: 700,
            ending: Ending::Reply,
            exit_now: false,
            ask_approval: false,
            exit_after_reply: false,
            refuse: false
        }
    );
    assert_eq!(
        plan("say HOLD"),
        Plan {
            delay_ms: 50,
            ending: Ending::Reply,
            exit_now: false,
            ask_approval: false,
            exit_after_reply: false,
            refuse: false
        },
        "a prefix, not a substring"
    );
    assert_eq!(plan("FAIL").ending, Ending::Fail);
    assert!(plan("DIE").exit_now);
    let asking = Behaviour { approval_prefix: Some("ASK".into()), ..Behaviour::default() };
    assert!(asking.plan("ASK me").ask_approval && !asking.plan("tell me").ask_approval);
    assert_eq!(behaviour.reply_for("  hi \n"), "done: hi");
}

/// MGD-7's knob: a refused `turn/start` gets the real one's error for a submission that could
/// not be queued, and nothing else: no turn, no user message, no thread status change.
#[test]
fn a_refused_turn_start_is_one_error_and_no_turn() {
    let dir = tempfile::tempdir().unwrap();
    let refusing = Behaviour { refuse_prefix: Some("NOPE".into()), ..Behaviour::default() };
    assert!(refusing.plan("NOPE x").refuse && !refusing.plan("x NOPE").refuse);
    let (mut server, thread) = ready(dir.path(), refusing);
    let refused = turn_start(&mut server, 2, &thread, "NOPE hi", 1000);
    assert_eq!(methods(&refused), ["response"]);
    let error = refused.messages[0].to_value();
    assert_eq!(error["error"]["code"], INTERNAL_ERROR, "{error}");
    assert!(error["error"]["message"].as_str().unwrap().starts_with("failed to start turn"), "{error}");
    assert_eq!(server.next_deadline_ms(), None, "no turn runs");
    let opened = turn_start(&mut server, 3, &thread, "hi", 1000);
    assert_eq!(methods(&opened)[2], "turn/started", "the thread takes the next prompt");
}

#[test]
fn a_turn_replies_when_its_deadline_comes() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, thread) = ready(dir.path(), Behaviour::default());
    assert_eq!(server.next_deadline_ms(), None);
    let opened = turn_start(&mut server, 2, &thread, "hi", 1000);
    assert_eq!(
        methods(&opened),
        [
            "response",
            "thread/status/changed",
            "turn/started",
            "item/started",
            "item/completed"
        ]
    );
    assert!(!opened.crash);
    assert_eq!(server.next_deadline_ms(), Some(1050));
    assert!(server.tick(1049).unwrap().messages.is_empty(), "not yet");
    let done = server.tick(1050).unwrap();
    assert_eq!(
        methods(&done),
        [
            "item/started",
            "item/agentMessage/delta",
            "item/completed",
            "thread/status/changed",
            "turn/completed"
        ]
    );
    let completed = done.messages[4].to_value();
    assert_eq!(completed["params"]["turn"]["items"][0]["id"], "msg_mock_1");
    assert_eq!(completed["params"]["turn"]["items"][0]["text"], "done: hi");
    assert_eq!(server.next_deadline_ms(), None);
    let second = turn_start(&mut server, 3, &thread, "again", 2000);
    assert_ne!(
        second.messages[0].to_value()["result"]["turn"]["id"],
        completed["params"]["turn"]["id"]
    );
    let done = server.tick(2050).unwrap();
    assert_eq!(
        done.messages[0].to_value()["params"]["item"]["id"],
        "msg_mock_2"
    );
}

#[test]
fn steering_restarts_the_reply_for_the_latest_message() {
    let dir = tempfile::tempdir().unwrap();
    let behaviour = Behaviour {
        hold_prefix: Some("HOLD".into()),
        hold_ms: 5000,
        ..Behaviour::default()
    };
    let (mut server, thread) = ready(dir.path(), behaviour);
    let opened = turn_start(&mut server, 2, &thread, "HOLD it", 0);
    let turn_id = opened.messages[0].to_value()["result"]["turn"]["id"].clone();
    assert_eq!(server.next_deadline_ms(), Some(5000));
    let steered = turn_start(&mut server, 3, &thread, "answer this", 100);
    assert_eq!(
        methods(&steered),
        ["response", "item/started", "item/completed"]
    );
    assert_eq!(
        steered.messages[0].to_value()["result"]["turn"]["id"],
        turn_id
    );
    assert_eq!(
        server.next_deadline_ms(),
        Some(150),
        "the steering message is not held"
    );
    let done = server.tick(150).unwrap();
    let completed = done.messages.last().unwrap().to_value();
    assert_eq!(completed["params"]["turn"]["id"], turn_id);
    assert_eq!(
        completed["params"]["turn"]["items"][0]["text"],
        "done: answer this"
    );
}

#[test]
fn threads_survive_in_their_state_file() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, thread) = ready(dir.path(), Behaviour::default());
    let file = dir
        .path()
        .join("state/threads")
        .join(format!("{thread}.json"));
    assert!(
        !file.exists(),
        "no state before the first turn (like the real rollout)"
    );
    turn_start(&mut server, 2, &thread, "one", 0);
    let saved: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(saved["turns"][0]["status"], "inProgress");
    assert_eq!(saved["preview"], "one");
    server.tick(50).unwrap();
    turn_start(&mut server, 3, &thread, "two", 100); // still running when "the process dies"

    let mut other = FakeAppServer::new(config(dir.path(), Behaviour::default()));
    let init =
        json!({ "id": 0, "method": "initialize", "params": { "clientInfo": { "name": "unit" } } });
    other.handle_line(&line(init), 0).unwrap();
    let resume = json!({ "id": 1, "method": "thread/resume", "params": { "threadId": thread } });
    let resumed = other.handle_line(&line(resume), 0).unwrap();
    assert_eq!(methods(&resumed), ["thread/status/changed", "response"]);
    let result = resumed.messages[1].to_value()["result"].clone();
    let turns = result["thread"]["turns"].as_array().unwrap().clone();
    assert_eq!(turns.len(), 2);
    assert_eq!(
        (turns[0]["status"].as_str(), turns[1]["status"].as_str()),
        (Some("completed"), Some("interrupted"))
    );
    assert_eq!(turns[0]["itemsView"], "full");
    assert_eq!(turns[0]["items"][1]["text"], "done: one");
    assert_eq!(result["thread"]["preview"], "one");
    // msg_mock_N continues after the resumed thread's agent messages.
    turn_start(&mut other, 2, &thread, "three", 0);
    let done = other.tick(50).unwrap();
    assert_eq!(
        done.messages[0].to_value()["params"]["item"]["id"],
        "msg_mock_2"
    );
}

/// The rollout at `thread.path`: none before the first turn; then each turn's start, user
/// messages (a steer too), final and end, as the fake TUI writes them; a resume in a new
/// process continues the same file (one `session_meta`).
#[test]
fn the_rollout_records_turns_steers_and_finals_and_a_resume_continues_it() {
    let dir = tempfile::tempdir().unwrap();
    let behaviour = Behaviour { hold_prefix: Some("HOLD".into()), hold_ms: 5000, ..Behaviour::default() };
    let mut server = FakeAppServer::new(config(dir.path(), behaviour));
    let init = json!({ "id": 0, "method": "initialize", "params": { "clientInfo": { "name": "unit", "version": "1" } } });
    server.handle_line(&line(init), 0).unwrap();
    let start = server.handle_line(&line(json!({ "id": 1, "method": "thread/start", "params": {} })), 0).unwrap();
    let result = start.messages[0].to_value()["result"].clone();
    let (thread, path) = (result["thread"]["id"].as_str().unwrap().to_owned(), PathBuf::from(result["thread"]["path"].as_str().unwrap()));
    assert!(!path.exists(), "no rollout before the first turn (like the real one)");
    turn_start(&mut server, 2, &thread, "HOLD it", 0);
    turn_start(&mut server, 3, &thread, "answer this", 100);
    server.tick(150).unwrap();
    let lines = |path: &Path| -> Vec<Value> {
        std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
    };
    let kinds = |lines: &[Value], kind: &str| lines.iter().filter(|l| l["type"] == kind || l["payload"]["type"] == kind).count();
    let first = lines(&path);
    assert_eq!(first[0]["type"], "session_meta");
    assert_eq!(first[0]["payload"]["id"], thread.as_str());
    assert_eq!((kinds(&first, "task_started"), kinds(&first, "task_complete")), (1, 1), "{first:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    for said in ["HOLD it", "answer this", "done: answer this"] {
        assert!(text.contains(said), "{said} in the rollout");
    }

    let mut other = FakeAppServer::new(config(dir.path(), Behaviour::default()));
    let init = json!({ "id": 0, "method": "initialize", "params": { "clientInfo": { "name": "unit" } } });
    other.handle_line(&line(init), 0).unwrap();
    other.handle_line(&line(json!({ "id": 1, "method": "thread/resume", "params": { "threadId": thread } })), 0).unwrap();
    turn_start(&mut other, 2, &thread, "after the resume", 0);
    other.tick(50).unwrap();
    let all = lines(&path);
    assert_eq!(all[..first.len()], first[..], "continued, not rewritten");
    assert_eq!(kinds(&all, "session_meta"), 1);
    assert_eq!((kinds(&all, "task_started"), kinds(&all, "task_complete")), (2, 2));
    assert!(std::fs::read_to_string(&path).unwrap().contains("done: after the resume"));
}

#[test]
fn the_exit_prefix_crashes_after_the_turn_opened_and_was_saved() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, thread) = ready(
        dir.path(),
        Behaviour {
            exit_prefix: Some("DIE".into()),
            ..Behaviour::default()
        },
    );
    let opened = turn_start(&mut server, 2, &thread, "DIE", 0);
    assert!(opened.crash);
    assert_eq!(methods(&opened).last().unwrap(), "item/completed");
    assert!(dir
        .path()
        .join("state/threads")
        .join(format!("{thread}.json"))
        .exists());
}

#[test]
fn thread_ids_that_are_not_uuids_never_become_paths() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, _) = ready(dir.path(), Behaviour::default());
    let resume =
        json!({ "id": 5, "method": "thread/resume", "params": { "threadId": "../../etc/passwd" } });
    let reaction = server.handle_line(&line(resume), 0).unwrap();
    let error = reaction.messages[0].to_value();
    assert_eq!(error["error"]["code"], INVALID_REQUEST);
}

#[test]
fn the_envelope_keeps_the_real_key_order() {
    let response = Outgoing::Response {
        id: json!(3),
        result: json!({}),
    };
    assert_eq!(response.to_line(), r#"{"id":3,"result":{}}"#);
    let error = Outgoing::Error {
        id: json!(4),
        code: INVALID_REQUEST,
        message: "Not initialized".into(),
    };
    assert_eq!(
        error.to_line(),
        r#"{"error":{"code":-32600,"message":"Not initialized"},"id":4}"#
    );
    let note = Outgoing::Notification {
        method: "m".into(),
        params: json!({}),
        emitted_at_ms: 7,
    };
    assert_eq!(
        note.to_line(),
        r#"{"method":"m","params":{},"emittedAtMs":7}"#
    );
}

#[test]
fn nothing_answers_notifications_responses_or_garbage() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, _) = ready(dir.path(), Behaviour::default());
    for input in [
        "",
        "not json",
        "[1,2]",
        r#"{"method":"initialized"}"#,
        r#"{"id":9,"result":{}}"#,
    ] {
        assert_eq!(
            server.handle_line(input, 0).unwrap(),
            Reaction::default(),
            "{input}"
        );
    }
}

/// A ready server whose turn (started at 1000 ms) asks an approval: the server, the thread and
/// the request.
fn asking(dir: &Path) -> (FakeAppServer, String, Value) {
    let behaviour = Behaviour { approval_prefix: Some("ASK".into()), ..Behaviour::default() };
    let (mut server, thread) = ready(dir, behaviour);
    let opened = turn_start(&mut server, 2, &thread, "ASK first", 1000);
    let request = opened.messages.last().unwrap().to_value();
    (server, thread, request)
}

/// MGD-6: a turn that asks a server request waits for any answer (no timeout, as the real one):
/// nothing ends it until the client answers; an answer to another id changes nothing; the
/// answer (here an error, as wakterm declines) resolves the request and the reply follows.
#[test]
fn an_approval_request_waits_for_the_clients_answer() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, thread, request) = asking(dir.path());
    assert_eq!(request["method"], "item/commandExecution/requestApproval", "{request}");
    assert_eq!(request["params"]["threadId"], thread.as_str());
    let id = request["id"].clone();
    assert!(id.is_number(), "{request}");
    assert_eq!(server.next_deadline_ms(), None, "nothing is due while it waits");
    assert!(server.tick(1_000_000).unwrap().messages.is_empty(), "it waits however long");
    let other = server.handle_line(&line(json!({ "id": 999, "result": { "decision": "accept" } })), 1_000_000).unwrap();
    assert!(other.messages.is_empty(), "an answer to another id");
    let answer = json!({ "id": id, "error": { "code": -32000, "message": "declined" } });
    let resolved = server.handle_line(&line(answer), 1_000_000).unwrap();
    assert_eq!(methods(&resolved), ["serverRequest/resolved"]);
    assert_eq!(resolved.messages[0].to_value()["params"]["requestId"], id);
    assert_eq!(server.next_deadline_ms(), Some(1_000_050));
    let done = server.tick(1_000_050).unwrap();
    assert_eq!(methods(&done).last().map(String::as_str), Some("turn/completed"));
}

/// MGD-6, as the real 0.169 (`fixtures/codex-0.169/app-server/pending-request-resume.jsonl`):
/// a server request still pending is sent again, same id and params, right after the answer
/// to a `thread/resume` of its thread; once answered, a resume sends nothing more.
#[test]
fn a_pending_request_is_sent_again_after_a_resume() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, thread, request) = asking(dir.path());
    let resume = json!({ "id": 3, "method": "thread/resume", "params": { "threadId": thread } });
    let resumed: Vec<Value> = server.handle_line(&line(resume), 2000).unwrap().messages.iter().map(Outgoing::to_value).collect();
    let answer_at = resumed.iter().position(|m| m["id"] == 3 && m.get("result").is_some()).expect("the resume's answer");
    assert_eq!(resumed[answer_at + 1..], [request.clone()], "the same request again, right after: {resumed:?}");
    let decline = json!({ "id": request["id"], "error": { "code": -32000, "message": "declined" } });
    assert_eq!(methods(&server.handle_line(&line(decline), 3000).unwrap()), ["serverRequest/resolved"]);
    let again = server.handle_line(&line(json!({ "id": 4, "method": "thread/resume", "params": { "threadId": thread } })), 3001).unwrap();
    assert!(again.messages.iter().all(|m| m.to_value().get("method") != Some(&request["method"])), "nothing pending");
}
