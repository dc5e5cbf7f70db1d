//! Test support for the daemon's agent tests: a PTY agent without a holder, a fake holder
//! at its socket, and a live process's `info` answer.

use super::agents::{AgentRecord, AgentRuntime};
use crate::paths::DataPaths;

/// A PTY Codex agent with its data directory under `dir`, no holder started.
pub(crate) fn pty_agent(dir: &std::path::Path, agent_id: &str) -> (AgentRuntime, DataPaths) {
    let paths = DataPaths { root: dir.to_path_buf() };
    paths.prepare().unwrap();
    let record = AgentRecord {
        agent_id: agent_id.into(),
        name: "a".into(),
        harness: "codex".into(),
        cwd: dir.display().to_string(),
        env: vec![("CODEX_HOME".into(), dir.display().to_string())],
        command: vec!["codex".into()],
        created_ms: 0,
        managed: false,
        thread: None,
        codex_home: None,
        resolved_codex_home: None,
    };
    (AgentRuntime::new(&paths, record), paths)
}

/// A fake holder at agent `id`'s socket under `paths`: answers the first `calls` lines of
/// one connection with `answer(line)` (the `result` JSON) and returns the lines it was asked.
pub(crate) fn fake_holder(paths: &DataPaths, id: &str, calls: usize, answer: impl Fn(&str) -> String + Send + 'static) -> std::thread::JoinHandle<Vec<String>> {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::os::unix::net::UnixListener::bind(paths.holder_socket(id)).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut writer = stream.try_clone().unwrap();
        let mut asked = Vec::new();
        for line in BufReader::new(stream).lines().map_while(Result::ok).take(calls) {
            writeln!(writer, r#"{{"ok":true,"result":{}}}"#, answer(&line)).unwrap();
            asked.push(line);
        }
        asked
    })
}

/// The `info` result of a live process: this test process, so its identity checks pass.
pub(crate) fn own_info(output_end: u64) -> String {
    let me = crate::proc_probe::identity(std::process::id()).unwrap();
    format!(r#"{{"pid":{},"start_time_ticks":{},"alive":true,"exit_code":null,"cols":80,"rows":24,"generation":0,"holder_pid":1,"output_end":{output_end},"spawn_error":null}}"#, me.pid, me.start_time_ticks)
}
