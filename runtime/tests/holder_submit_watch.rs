//! SUB-4 against real holders: a submit's acknowledgement watch compares the pane only with the
//! boundary of the same holder. A holder started later at the same socket counts its child
//! generations, accepted writes and output from 0 again, so its pane can match the boundary's
//! counts and pass its offset without any reaction to our Enter.

mod holder_support;

use holder_support::*;
use std::time::Instant;
use wakterm_engine::{judge, EnterBoundary, Judgement};
use wakterm_runtime::daemon::agents::{AgentRecord, AgentRuntime};
use wakterm_runtime::daemon::submit::watch;
use wakterm_runtime::holder::{spawn_holder, HolderClient, HolderIdentity, InfoReply};
use wakterm_runtime::paths::DataPaths;

fn start(socket: &std::path::Path, then: &str) -> InfoReply {
    let argv = raw_sh(then);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    spawn_holder(holder_exe(), &config(socket, &argv)).expect("holder starts")
}

#[test]
fn sub_4_a_replaced_holder_is_never_an_acknowledgement() {
    // A short private data directory: the socket path must fit in sun_path.
    let root = fresh_socket_path().parent().unwrap().to_path_buf();
    let paths = DataPaths { root };
    paths.prepare().unwrap();
    let agent_id = "6c9c591e-087b-4c45-9001-bf796f895b57";
    let record = AgentRecord {
        agent_id: agent_id.into(),
        name: "watched".into(),
        harness: "codex".into(),
        cwd: "/".into(),
        env: vec![],
        command: vec!["codex".into()],
        created_ms: 0,
        managed: false,
        thread: None,
        codex_home: None,
        resolved_codex_home: None,
    };
    let agent = AgentRuntime::new(&paths, record);
    let socket = paths.holder_socket(agent_id);
    let _cleanup = ShutdownOnDrop(socket.clone());

    // The boundary of a split write in the first holder (no writes, generation 0).
    let first = start(&socket, "exec cat");
    let boundary = EnterBoundary {
        output_offset: first.output_end,
        screen_digest: "the screen at our Enter".into(),
        generation: first.generation,
        writes: first.writes,
        holder: HolderIdentity::of(&first).to_string(),
    };
    // That holder dies; another starts at the same socket and draws more than the boundary's
    // offset, with the same generation and write count.
    HolderClient::connect(&socket).unwrap().shutdown().unwrap();
    assert!(wait_gone(first.holder_pid), "the first holder is gone");
    let second = start(&socket, "printf ' and a new TUI drawing far past the old offset'; exec cat");
    assert_eq!((second.generation, second.writes), (boundary.generation, boundary.writes));
    let mut sub = HolderClient::connect(&socket).unwrap().subscribe(0).unwrap();
    collect_until(&mut sub, |seen| contains(seen, b"old offset"));

    let sample = watch(&agent, &boundary, 300, Instant::now()).expect("the pane is readable");
    assert!(sample.output_end > boundary.output_offset, "the new holder's output passed the offset");
    assert_ne!(sample.holder, boundary.holder, "the sample names the holder that answered");
    assert_eq!(judge(&boundary, &sample), Judgement::Exited, "{sample:?}");
}
