//! EV-*: the durable Agent API event stream on the real daemon: a subscriber that reconnects
//! after a daemon SIGKILLed mid-turn sees every event once, in order, never renumbered; a
//! catalog's `events_through` is a rebase point; retention answers `cursor_too_old`.

mod support;
#[path = "support/event_schema.rs"]
mod event_schema;

use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::{Duration, Instant};
use support::{new_id, World};

const EXE: &str = env!("CARGO_BIN_EXE_wakterm-e2e");
const REPLY: &str = "Final answer for: {prompt}";

/// `agent events --once --after N`: (exit code, events).
fn read_events(w: &World, after: u64, extra: &[&str]) -> (i32, Vec<Value>, Value) {
    let a = after.to_string();
    let mut args = vec!["agent", "events", "--once", "--after", &a];
    args.extend_from_slice(extra);
    let out = w.run(&args);
    let events = out.stdout.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok()).filter(|v| v.get("sequence").is_some()).collect();
    (out.code, events, out.json)
}

fn sequences(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["sequence"].as_u64().expect("sequence")).collect()
}

fn assert_strictly_increasing(events: &[Value]) {
    let s = sequences(events);
    assert!(s.windows(2).all(|w| w[0] < w[1]), "EV-1: sequences strictly increase: {s:?}");
}

/// EV-4: what identifies one provider record's event (or one milestone).
fn identity(event: &Value) -> String {
    format!(
        "{} {} {} {} {}",
        event["agent_id"], event["kind"], event["session"], event["position"], event["request_id"]
    )
}

/// A spawned reader's standard output, line by line through a channel, so a test waits for a
/// line with a bound instead of blocking on a stream that never ends.
fn lines_of(child: &mut std::process::Child) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("piped standard output");
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

fn wait_for(w: &World, what: &str, mut done: impl FnMut(&World) -> bool) {
    let deadline = Instant::now() + support::DEADLINE;
    while !done(w) {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(support::POLL);
    }
}

/// Must-show of the event stream: subscribe, run turns on two agents, SIGKILL the daemon
/// mid-turn, restart; the subscriber reconnecting `--after` its last sequence sees every event
/// exactly once, in order, and a second full read shows the same events with the same numbers.
#[test]
fn ev_1_ev_4_a_subscriber_survives_a_daemon_crash_mid_turn() {
    let w = World::new(EXE);
    w.mux_start();
    let slow = ["--reply-delay-ms", "1500"];
    let a = w.ready_agent("ada", REPLY, &slow);
    let b = w.ready_agent("bob", REPLY, &slow);

    let mut child = w.cmd(&["agent", "events", "--after", "0"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("subscribe");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<Value>();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                let _ = tx.send(v);
            }
        }
    });

    let ids = [new_id(), new_id()];
    for (entry, id) in [(&a, &ids[0]), (&b, &ids[1])] {
        let incarnation = entry["incarnation"].as_str().expect("incarnation");
        let name = entry["name"].as_str().expect("name");
        let out = w.run(&["agent", "admit", name, "--incarnation", incarnation, "--request-id", id, "--return-final", &format!("question for {name}")]);
        assert_eq!(out.code, 0, "{out:?}");
    }
    // Both turns run (1.5 s each): kill the daemon while they do.
    wait_for(&w, "both turns started", |w| w.turns_started() >= 4);
    support::sigkill_and_wait(w.daemon_pid());
    let _ = child.wait();
    reader.join().expect("reader");
    let first: Vec<Value> = rx.try_iter().filter(|v| v.get("sequence").is_some()).collect();
    assert!(!first.is_empty(), "the subscriber saw the history before the crash");
    assert_strictly_increasing(&first);
    let last = *sequences(&first).last().expect("events");

    w.mux_start();
    for id in &ids {
        let event = w.wait_terminal(id);
        assert_eq!(event["state"], "completed", "{event}");
    }
    let terminal_sequences: BTreeSet<u64> = ids.iter().map(|id| w.wait_terminal(id)["terminal_event_sequence"].as_u64().unwrap()).collect();
    wait_for(&w, "both request.terminal events", |w| {
        let (_, events, _) = read_events(w, last, &[]);
        events.iter().filter(|e| e["kind"] == "request.terminal").count() == 2
    });
    let (code, second, _) = read_events(&w, last, &[]);
    assert_eq!(code, 0);
    let mut joined = first.clone();
    joined.extend(second);
    assert_strictly_increasing(&joined);
    let (code, full, _) = read_events(&w, 0, &[]);
    assert_eq!(code, 0);
    assert_eq!(full, joined, "EV-1: a second full read has the same events with the same sequences");

    let mut seen = BTreeSet::new();
    for event in &full {
        event_schema::assert_event_schema(event);
        assert!(seen.insert(identity(event)), "EV-4: reported twice: {event}");
    }
    for (entry, id) in [(&a, &ids[0]), (&b, &ids[1])] {
        let agent = &entry["agent_id"];
        let name = entry["name"].as_str().unwrap();
        let mine: Vec<&Value> = full.iter().filter(|e| &e["agent_id"] == agent).collect();
        assert_eq!(mine.iter().filter(|e| e["kind"] == "agent.started").count(), 1, "announced once across the restart");
        let answer = REPLY.replace("{prompt}", &format!("question for {name}"));
        let final_at = mine.iter().position(|e| e["kind"] == "turn.final" && e["final_message"] == answer.as_str()).expect("the turn's final");
        let terminal_at = mine.iter().position(|e| e["kind"] == "request.terminal" && e["request_id"] == id.as_str()).expect("the request's end");
        assert!(final_at < terminal_at);
        let terminal = mine[terminal_at];
        assert_eq!(terminal["state"], "completed");
        assert!(terminal_sequences.contains(&terminal["terminal_event_sequence"].as_u64().unwrap()));
        let kinds: Vec<&str> = mine.iter().map(|e| e["kind"].as_str().unwrap()).collect();
        for kind in ["observer.attached", "request.admitted", "request.bound", "turn.started", "message.user", "message.assistant", "turn.completed"] {
            assert!(kinds.contains(&kind), "{name}: no {kind} in {kinds:?}");
        }
    }
    // --agent filters by name; the filtered read is the agent's subsequence.
    let (code, only_ada, _) = read_events(&w, 0, &["--agent", "ada"]);
    assert_eq!(code, 0);
    let expected: Vec<Value> = full.iter().filter(|e| e["agent_id"] == a["agent_id"]).cloned().collect();
    assert_eq!(only_ada, expected);
    // An id in another spelling (upper case) is the same agent, as everywhere else.
    let upper = a["agent_id"].as_str().unwrap().to_ascii_uppercase();
    let (code, by_upper_id, _) = read_events(&w, 0, &["--agent", &upper]);
    assert_eq!((code, &by_upper_id), (0, &expected));
    let out = w.run(&["agent", "events", "--once", "--agent", "nobody"]);
    assert_eq!((out.code, out.json["error"].as_str()), (6, Some("agent_unknown")), "{out:?}");
}

/// EV-8, EV-9: with a small retention, an old cursor is `cursor_too_old` (exit 4) with the
/// recovery metadata; a consumer that rebases on a catalog's `events_through` then sees every
/// later event and none from before.
#[test]
fn ev_8_ev_9_retention_answers_cursor_too_old_and_the_catalog_rebases() {
    let w = World::new(EXE);
    w.ok(&["mux", "start", "--retain-events", "12"]);
    w.ready_agent("ada", REPLY, &[]);
    for n in 0..4 {
        let out = w.run(&["agent", "send", "ada", &format!("filler {n}")]);
        assert_eq!(out.code, 0, "{out:?}");
        wait_for(&w, "the send's turn completed", |w| w.completed_turns().len() >= n + 2);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let refused = loop {
        let (code, _, json) = read_events(&w, 0, &[]);
        if code == 4 {
            break json;
        }
        assert!(Instant::now() < deadline, "retention never pruned (last exit {code}: {json})");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(refused["error"], "cursor_too_old", "{refused}");
    let pruned = refused["pruned_through"].as_u64().expect("pruned_through");
    let oldest = refused["oldest_retained_sequence"].as_u64().expect("oldest_retained_sequence");
    assert!(oldest > pruned, "{refused}");
    assert!(refused["rebase"].is_object(), "{refused}");
    let (code, retained, _) = read_events(&w, pruned, &[]);
    assert_eq!(code, 0, "reading at the pruned mark is allowed");
    assert_eq!(sequences(&retained).first(), Some(&oldest));

    let catalog = w.ok(&["agent", "catalog"]);
    let through = catalog["events_through"].as_u64().expect("events_through");
    assert!(through >= *sequences(&retained).last().unwrap(), "the catalog reflects every durable event");
    let out = w.run(&["agent", "send", "ada", "--share-prompt", "after the rebase"]);
    assert_eq!(out.code, 0, "{out:?}");
    wait_for(&w, "the new turn's final", |w| {
        let (_, events, _) = read_events(w, through, &[]);
        events.iter().any(|e| e["kind"] == "turn.final")
    });
    let (code, after, _) = read_events(&w, through, &[]);
    assert_eq!(code, 0);
    assert!(sequences(&after).iter().all(|s| *s > through), "nothing from before the rebase point");
    let mut kinds: Vec<&str> = after.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    kinds.sort_unstable();
    let expected = ["message.assistant", "message.user", "request.admitted", "turn.completed", "turn.final", "turn.started"];
    assert_eq!(kinds, expected, "nothing missed after it: {after:?}");
    // EV-12: this caller shared its prompt; every earlier request.admitted carries its hash only.
    let admitted = after.iter().find(|e| e["kind"] == "request.admitted").unwrap();
    assert_eq!(admitted["prompt"], "after the rebase", "{admitted}");
    assert!(retained.iter().filter(|e| e["kind"] == "request.admitted").all(|e| e.get("prompt").is_none()), "{retained:?}");
}

/// EV-9 by size, end to end: `mux start --retain-mib 1` reaches the daemon started in the
/// background, `mux status` shows the bounds and the bytes the store holds, and once the events'
/// JSON passes 1 MiB (shared 60 KB prompts, each in `request.admitted`, `message.assistant` and
/// `turn.final`) retention prunes the oldest until it fits: an old cursor is `cursor_too_old`.
#[test]
fn ev_9_retention_by_size_end_to_end() {
    let w = World::new(EXE);
    // A bound whose bytes do not fit is refused, nothing started (it was clamped without a
    // word: a hostile run's D8).
    let refused = w.run(&["mux", "start", "--retain-mib", "18446744073709551615"]);
    assert_eq!((refused.code, refused.json["error"].as_str()), (2, Some("usage")), "{refused:?}");
    assert!(refused.json["message"].as_str().is_some_and(|m| m.contains("--retain-mib")), "{refused:?}");
    assert_eq!(w.run(&["mux", "status"]).code, 3, "no daemon was started");
    w.ok(&["mux", "start", "--retain-mib", "1"]);
    let status = w.ok(&["mux", "status"]);
    assert_eq!(status["events"]["retain_mib"], 1, "{status}");
    assert_eq!(status["events"]["retain_events"], 1_000_000, "the default: {status}");
    // HIST-4, TIME-2: the first daemon of this data directory: pruning by age as the flag says
    // (off for the boot where the kernel does not name its boot).
    let named_boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").is_ok();
    let expected = if named_boot { "on" } else { "off" };
    assert_eq!((&status["events"]["age_pruning"], &status["events"]["age_pruning_late_hours"]), (&serde_json::json!(expected), &serde_json::json!(null)), "{status}");
    w.ready_agent("ada", REPLY, &[]);
    let big = "p".repeat(60 * 1024);
    for n in 0..8 {
        let prompt = format!("{n} {big}");
        let out = w.run(&["agent", "send", "ada", "--share-prompt", &prompt]);
        assert_eq!(out.code, 0, "{out:?}");
        wait_for(&w, "the send's turn completed", |w| w.completed_turns().len() >= n + 2);
    }
    // `stored_bytes` is the retention task's last reading (up to 5 s old): one taken before the
    // sends also says "under 1 MiB", so the prune is awaited first, then a reading after it.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (code, _, refused) = read_events(&w, 0, &[]);
        if (code, refused["error"].as_str()) == (4, Some("cursor_too_old")) {
            break;
        }
        assert!(Instant::now() < deadline, "retention never pruned the oldest events: {code} {refused}");
        std::thread::sleep(Duration::from_millis(200));
    }
    loop {
        let stored = w.ok(&["mux", "status"])["events"]["stored_bytes"].as_u64().expect("stored_bytes");
        if stored <= 1024 * 1024 {
            break;
        }
        assert!(Instant::now() < deadline, "retention never brought the store under 1 MiB ({stored} bytes)");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// EV-9, TERM-3: a cursor past every event this data directory's daemon has stored (one kept
/// from another data directory, a restored database, a typo) is refused, exit 4
/// `cursor_ahead` with the last stored sequence to rebase from. Both streams used to accept it
/// and print nothing, for good, while events flowed. A cursor at the catalog's
/// `events_through` is of course fine. And a reader that closes its end (`| head -1`) ends the
/// stream quietly (the CLI panicked with a backtrace on the closed pipe).
#[test]
fn ev_9_a_cursor_ahead_of_the_store_is_refused_and_a_closed_reader_ends_quietly() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    let through = w.ok(&["agent", "catalog"])["events_through"].as_u64().expect("events_through");
    let (code, events, _) = read_events(&w, through, &[]);
    assert_eq!((code, events.len()), (0, 0), "the catalog's cursor is valid and up to date");
    for after in [through + 1_000, u64::MAX] {
        let (code, events, answer) = read_events(&w, after, &[]);
        assert_eq!((code, events.len()), (4, 0), "{answer}");
        assert_eq!((&answer["error"], &answer["last_sequence"]), (&serde_json::json!("cursor_ahead"), &serde_json::json!(through)), "{answer}");
        let out = w.run(&["agent", "request", "watch", "--once", "--after", &after.to_string()]);
        assert_eq!((out.code, &out.json["error"]), (4, &serde_json::json!("cursor_ahead")), "{out:?}");
    }
    let out = w.run(&["agent", "request", "watch", "--once", "--after", "0"]);
    assert_eq!(out.code, 0, "{out:?}");
    // A stream's agent filter is bounded: one kept 26,000 names for its life (a review).
    let ids: Vec<String> = (0..=wakterm_runtime::daemon::events::MAX_EVENT_FILTER_AGENTS).map(|_| new_id()).collect();
    let filters: Vec<&str> = ids.iter().flat_map(|id| ["--agent", id.as_str()]).collect();
    let (code, events, answer) = read_events(&w, 0, &filters);
    assert_eq!((code, events.len(), answer["error"].as_str()), (2, 0, Some("too_many_agents")), "{answer}");

    // A reader that leaves while no event comes (`| head -1` after the backlog) is noticed
    // at the next heartbeat: the stream waited for an event that might never come (a review).
    let through = through.to_string();
    for args in [vec!["agent", "request", "watch", "--after", "0"], vec!["agent", "events", "--after", through.as_str()]] {
        let mut quiet = w.cmd(&args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("a stream");
        drop(quiet.stdout.take());
        let status = support::wait_exit(&mut quiet, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{args:?}: the stream did not end after its reader left, with no event coming"));
        assert!(status.success(), "{args:?}: {status:?}");
    }
    let mut reader = w.cmd(&["agent", "events", "--after", "0"]).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("agent events");
    let mut first = String::new();
    BufReader::new(reader.stdout.take().unwrap()).read_line(&mut first).expect("the first event");
    assert!(first.contains("\"sequence\""), "{first}");
    // The read end is closed now; the next event the reader gets has nowhere to go.
    w.ok(&["agent", "send", "zola", "after the reader left"]);
    let status = support::wait_exit(&mut reader, Duration::from_secs(20)).expect("the reader's stream ends on its closed output");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut reader.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(status.success() && !stderr.contains("panicked"), "{status:?}: {stderr}");
}

/// EV-8: a catalog lists every agent whose `agent.started` lies within its `events_through`,
/// even while agents are being started: the catalog read its agent table before asking the
/// engine, so an agent started in between was left out while its `agent.started` was covered
/// (`agent events --after events_through` then never named it). Catalogs taken throughout six
/// concurrent starts are checked against the stream; the daemon pauses each catalog between
/// its two reads (`WAKTERM_FAULT=catalog_pause`), so starts land in between.
#[test]
fn ev_8_a_catalog_taken_during_starts_lists_every_agent_its_cursor_covers() {
    let w = World::new(EXE);
    let out = w.cmd(&["mux", "start"]).env("WAKTERM_FAULT", "catalog_pause").output().expect("mux start");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    let catalogs = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..6)
            .map(|i| {
                let w = &w;
                scope.spawn(move || {
                    std::thread::sleep(Duration::from_millis(100 * i));
                    w.start_agent(&format!("agent{i}"), REPLY, &[])
                })
            })
            .collect();
        // Four catalogs in flight at any time until every start is done.
        let mut catalogs = Vec::new();
        let mut asking = Vec::new();
        while !starts.iter().all(|s| s.is_finished()) {
            if asking.len() < 4 {
                let w = &w;
                asking.push(scope.spawn(move || catalog_on_socket(w)));
                std::thread::sleep(Duration::from_millis(30));
                continue;
            }
            std::thread::sleep(Duration::from_millis(10));
            let (done, running): (Vec<_>, Vec<_>) = asking.into_iter().partition(|a| a.is_finished());
            asking = running;
            catalogs.extend(done.into_iter().filter_map(|a| a.join().unwrap()));
        }
        catalogs.extend(asking.into_iter().filter_map(|a| a.join().unwrap()));
        for start in starts {
            start.join().unwrap();
        }
        catalogs
    });
    let (_, events, _) = read_events(&w, 0, &[]);
    let started: Vec<(u64, String)> = events.iter().filter(|e| e["kind"] == "agent.started").map(|e| (e["sequence"].as_u64().unwrap(), e["agent_id"].as_str().unwrap().to_string())).collect();
    assert_eq!(started.len(), 6, "{started:?}");
    assert!(catalogs.len() >= 4, "catalogs were taken during the starts: {}", catalogs.len());
    for catalog in &catalogs {
        let through = catalog["events_through"].as_u64().unwrap();
        let listed: BTreeSet<&str> = catalog["agents"].as_array().unwrap().iter().map(|a| a["agent_id"].as_str().unwrap()).collect();
        for (sequence, agent_id) in started.iter().filter(|(sequence, _)| *sequence <= through) {
            assert!(listed.contains(agent_id.as_str()), "events_through {through} covers agent.started {sequence} of {agent_id}, which the catalog does not list: {catalog}");
        }
    }
}

/// One `catalog` request straight on the daemon's socket; its body when it answered exit 0.
fn catalog_on_socket(w: &World) -> Option<Value> {
    let mut socket = std::os::unix::net::UnixStream::connect(w.data.join("run/mux.sock")).expect("the daemon's socket");
    std::io::Write::write_all(&mut socket, b"{\"op\":\"catalog\"}\n").unwrap();
    let mut line = String::new();
    BufReader::new(socket).read_line(&mut line).unwrap();
    let reply: Value = serde_json::from_str(&line).expect("a reply line");
    (reply["exit_code"] == 0).then(|| reply["body"].clone())
}

/// EV-14: a reader filtered on one agent keeps a cursor that retention does not overtake: its
/// `--bookmarks` carry the sequence the stream covered, other agents' events included, so a
/// reader polling with `--once` resumes after a quiet spell of its agent where the sequence of
/// its own last event is `cursor_too_old`. Nothing of its agent is missed after the bookmark.
/// A live follower gets a bookmark from a heartbeat. An id no agent and no retained event has
/// is `agent_unknown` (a live stream on it used to wait forever); a stopped agent's id is not.
#[test]
fn ev_14_a_filtered_reader_resumes_from_its_bookmark_across_retention() {
    let w = World::new(EXE);
    w.ok(&["mux", "start", "--retain-events", "24"]);
    let ada = w.ready_agent("ada", REPLY, &[]);
    let bob = w.ready_agent("bob", REPLY, &[]);
    let start = w.ok(&["agent", "catalog"])["events_through"].as_u64().expect("events_through");
    let bookmark_of = |stdout: &str| -> Vec<u64> {
        let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
        let marks: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "stream.bookmark").collect();
        for mark in &marks {
            assert_eq!(mark["schema"], "wakterm.agent-events.v1", "{mark}");
            assert!(mark.get("sequence").is_none(), "a bookmark is no event: {mark}");
        }
        marks.iter().map(|m| m["last_sequence"].as_u64().expect("last_sequence")).collect()
    };
    let mut cursor = start;
    let mut turns = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    // Bob works while ada is quiet, until retention has passed the start.
    loop {
        let out = w.run(&["agent", "send", "bob", &format!("filler {turns}")]);
        assert_eq!(out.code, 0, "{out:?}");
        turns += 1;
        wait_for(&w, "bob's turn completed", |w| w.completed_turns().len() >= turns + 2);
        // Everything published so far, then the filtered read (which covers at least that).
        let (_, everything, _) = read_events(&w, cursor, &[]);
        let a = cursor.to_string();
        let out = w.run(&["agent", "events", "--once", "--agent", "ada", "--bookmarks", "--after", &a]);
        assert_eq!(out.code, 0, "the bookmark's cursor is never too old: {out:?}");
        let marks = bookmark_of(&out.stdout);
        assert_eq!(marks.len(), 1, "--once ends with one bookmark: {}", out.stdout);
        assert!(everything.iter().all(|e| e["agent_id"] == bob["agent_id"]), "ada was quiet: {everything:?}");
        assert!(marks[0] >= *sequences(&everything).last().unwrap_or(&cursor), "the bookmark covers bob's events: {marks:?}");
        cursor = marks[0];
        let (code, _, refused) = read_events(&w, start, &["--agent", "ada"]);
        if code == 4 {
            assert_eq!(refused["error"], "cursor_too_old", "{refused}");
            break;
        }
        assert!(Instant::now() < deadline, "retention never passed the start (last exit {code}: {refused})");
    }
    // Without --bookmarks no bookmark is printed.
    let out = w.run(&["agent", "events", "--once", "--agent", "ada", "--after", &cursor.to_string()]);
    assert_eq!((out.code, bookmark_of(&out.stdout).len()), (0, 0), "{out:?}");
    // Ada's next turn reaches the reader at its bookmark, whole.
    let out = w.run(&["agent", "send", "ada", "ada speaks"]);
    assert_eq!(out.code, 0, "{out:?}");
    wait_for(&w, "ada's turn final", |w| read_events(w, cursor, &["--agent", "ada"]).1.iter().any(|e| e["kind"] == "turn.final"));
    let (code, mine, _) = read_events(&w, cursor, &["--agent", "ada"]);
    assert_eq!(code, 0);
    let kinds: BTreeSet<&str> = mine.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    for kind in ["request.admitted", "message.user", "turn.started", "turn.completed", "turn.final"] {
        assert!(kinds.contains(kind), "{kind} missing after the bookmark: {mine:?}");
    }
    assert!(mine.iter().all(|e| e["agent_id"] == ada["agent_id"]));

    // A live follower hears a heartbeat's bookmark covering bob's next turn.
    let ada_last = *sequences(&mine).last().unwrap();
    let mut follower = w
        .cmd(&["agent", "events", "--agent", "ada", "--bookmarks", "--after", &ada_last.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("follower");
    let lines_rx = lines_of(&mut follower);
    let out = w.run(&["agent", "send", "bob", "while ada follows"]);
    assert_eq!(out.code, 0, "{out:?}");
    wait_for(&w, "bob's last turn final", |w| read_events(w, ada_last, &["--agent", "bob"]).1.iter().any(|e| e["kind"] == "turn.final"));
    let bob_last = *sequences(&read_events(&w, ada_last, &["--agent", "bob"]).1).last().expect("bob's events");
    let heard = loop {
        // Heartbeats come every 5 s; 20 s is four of them.
        let line = lines_rx.recv_timeout(Duration::from_secs(20)).expect("the follower printed a bookmark covering bob's turn");
        let line: Value = serde_json::from_str(&line).expect("JSON");
        match line["kind"] == "stream.bookmark" {
            true if line["last_sequence"].as_u64() >= Some(bob_last) => break line["last_sequence"].as_u64().unwrap(),
            true => {}
            false => assert_eq!(line["agent_id"], ada["agent_id"], "only ada's events and bookmarks: {line}"),
        }
    };
    let _ = follower.kill();
    let _ = follower.wait();
    assert!(heard >= bob_last);

    // A live stream following ada by name ends when ada stops, at the stop: nothing it
    // selects can come any more, and its bookmarks never pass the events of another agent
    // started later under the name, which a reader resuming by name must get (review of EV-14:
    // the stream kept printing bookmarks past them, and the resumed reader skipped them).
    // It starts just before ada's last event, so the event it prints says it is attached.
    let mut follower = w
        .cmd(&["agent", "events", "--agent", "ada", "--bookmarks", "--after", &(ada_last - 1).to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("follower of ada");
    let rx = lines_of(&mut follower);
    let first = rx.recv_timeout(Duration::from_secs(20)).expect("the follower's first line");
    w.ok(&["agent", "stop", "ada"]);
    let mut rest = Vec::new();
    loop {
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => rest.push(line),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                let _ = follower.kill();
                panic!("the follower did not end after ada's stop: {rest:?}");
            }
        }
    }
    let ended = follower.wait_with_output().expect("the follower ends by itself");
    let lines: Vec<Value> = std::iter::once(&first).chain(&rest).map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(lines[0]["sequence"].as_u64(), Some(ada_last), "{lines:?}");
    assert_eq!(ended.status.code(), Some(0), "{lines:?}");
    let stopped = lines.iter().find(|l| l["kind"] == "agent.stopped").expect("ada's stop");
    let end = lines.last().expect("an end bookmark");
    assert_eq!((end["kind"].as_str(), end["ended"].as_str()), (Some("stream.bookmark"), Some("agents_stopped")), "{lines:?}");
    assert_eq!(end["last_sequence"], stopped["sequence"], "the stream ends at the stop, not past it");
    assert!(String::from_utf8_lossy(&ended.stderr).contains("has stopped"));
    let resume = end["last_sequence"].as_u64().unwrap();
    let new_ada = w.ready_agent("ada", REPLY, &[]);
    assert_ne!(new_ada["agent_id"], ada["agent_id"]);
    let (code, of_new, _) = read_events(&w, resume, &["--agent", "ada"]);
    assert_eq!(code, 0);
    let kinds: Vec<&str> = of_new.iter().map(|e| e["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"agent.started"), "resumed by name, from the new agent's first event: {kinds:?}");
    assert!(of_new.iter().all(|e| e["agent_id"] == new_ada["agent_id"]), "{of_new:?}");
    // A stream on a stopped agent's id has nothing more to wait for either: it ends after its
    // history (it waited forever), at the stop, not at the end of what it read (the new ada's
    // events lie beyond).
    let out = w.run(&["agent", "events", "--agent", ada["agent_id"].as_str().unwrap(), "--bookmarks", "--after", &(resume - 1).to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    let lines: Vec<Value> = out.stdout.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(lines.iter().map(|l| l["kind"].as_str().unwrap()).collect::<Vec<_>>(), ["agent.stopped", "stream.bookmark"], "{out:?}");
    assert_eq!((lines[1]["last_sequence"].as_u64(), lines[1]["ended"].as_str()), (Some(resume), Some("agents_stopped")), "{out:?}");
    // And after the stop, nothing: it ends at its cursor.
    let out = w.run(&["agent", "events", "--agent", ada["agent_id"].as_str().unwrap(), "--bookmarks", "--after", &resume.to_string()]);
    assert_eq!(out.code, 0, "{out:?}");
    assert_eq!(bookmark_of(&out.stdout), [resume], "{out:?}");

    // An id nothing ever had is refused; a stopped agent's id still reads its events.
    let out = w.run(&["agent", "events", "--once", "--agent", &new_id()]);
    assert_eq!((out.code, out.json["error"].as_str()), (6, Some("agent_unknown")), "{out:?}");
    w.ok(&["agent", "stop", "bob"]);
    let bob_id = bob["agent_id"].as_str().unwrap();
    let (code, of_bob, _) = read_events(&w, cursor, &["--agent", bob_id]);
    assert_eq!(code, 0);
    assert!(!of_bob.is_empty() && of_bob.iter().all(|e| e["agent_id"] == bob["agent_id"]), "{of_bob:?}");
}

/// HIST-4: with `--retain-days 0` nothing is pruned by age, and `mux status` says no more of
/// pruning by age (`age_pruning` null) than that.
#[test]
fn hist_4_status_says_nothing_of_age_pruning_when_nothing_is_pruned_by_age() {
    let w = World::new(EXE);
    w.ok(&["mux", "start", "--retain-days", "0"]);
    let status = w.ok(&["mux", "status"]);
    assert_eq!(status["events"]["retain_days"], 0, "{status}");
    assert_eq!((&status["events"]["age_pruning"], &status["events"]["age_pruning_late_hours"]), (&serde_json::json!(null), &serde_json::json!(null)), "{status}");
}

/// OBS-4, EV-7 (a hostile run, 2026-12-07): the agent's rollout removed while the daemon was
/// down (Codex goes on writing the deleted file) left the stream's last word on the session
/// `observer.attached` for good, and the catalog `turn_state_unknown` with no detail. Now the
/// restarted daemon's stream says `observer.gap` (`rollout_not_held_while_down`, the session, after
/// the last record it reported), and the catalog names what the observer found.
#[test]
fn obs_4_a_rollout_removed_while_the_daemon_is_down_is_a_gap() {
    let w = World::new(EXE);
    w.mux_start();
    w.ready_agent("zola", REPLY, &[]);
    wait_for(&w, "the baseline's turn.final on the stream", |w| read_events(w, 0, &[]).1.iter().any(|e| e["kind"] == "turn.final"));
    let (_, before, _) = read_events(&w, 0, &[]);
    let session = before.iter().find(|e| e["kind"] == "observer.attached").expect("attached")["session"].clone();
    let reported = before.iter().filter(|e| e["session"] == session).filter_map(|e| e["position"].as_u64()).max();
    support::sigkill_and_wait(w.daemon_pid());
    let files = w.rollout_files();
    assert_eq!(files.len(), 1, "{files:?}");
    std::fs::remove_file(&files[0]).expect("remove the rollout");
    w.mux_start();
    wait_for(&w, "observer.gap", |w| read_events(w, 0, &[]).1.iter().any(|e| e["kind"] == "observer.gap"));
    let (_, after, _) = read_events(&w, 0, &[]);
    let gap = after.iter().position(|e| e["kind"] == "observer.gap").unwrap();
    assert_eq!(after[gap]["reason"], "rollout_not_held_while_down", "{}", after[gap]);
    assert_eq!(after[gap]["session"], session);
    assert_eq!(after[gap]["after_position"].as_u64(), reported);
    assert!(after[gap + 1..].iter().all(|e| e["session"].is_null()), "nothing of the session follows: {:?}", &after[gap..]);
    let z = w.catalog_entry("zola").expect("zola");
    assert_eq!((&z["return_final_available"], &z["return_final_unavailable_reason"]), (&Value::Bool(false), &Value::from("observer_unavailable")), "{z}");
    assert!(z["observer_detail"].as_str().is_some_and(|d| d.contains("no Codex rollout file open")), "{z}");
}
