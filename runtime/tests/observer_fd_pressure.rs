//! LIVE-1 for the Codex observer: with the daemon out of file descriptors, the liveness probe
//! of an attached observer fails, and that failure must not read as "the process exited"
//! (found by `scripts/soak.sh`: a request ended `delivery_failed / process_exited_before_turn`
//! on a live agent whose turn then completed). Its own test binary: it lowers this process's
//! descriptor limit.

use std::io::Write;
use wakterm_engine::{Incarnation, ObserverEvent};
use wakterm_runtime::observer::{probe_to_engine, CodexObserver};

#[test]
fn live_1_observer_probe_out_of_descriptors_is_not_an_exit() {
    let home = tempfile::tempdir().expect("tempdir");
    let day = home.path().join("sessions/2026/11/30");
    std::fs::create_dir_all(&day).expect("sessions dir");
    // This test process plays Codex: it holds its rollout open for writing.
    let mut rollout = std::fs::File::create(day.join("rollout-2026-11-30T10-00-00-s.jsonl")).expect("rollout");
    rollout.write_all(b"{\"type\":\"session_meta\",\"payload\":{\"id\":\"s\",\"cwd\":\"/w\"}}\n").unwrap();
    let me = probe_to_engine(wakterm_runtime::proc_probe::identity(std::process::id()).expect("own identity"));
    let mut observer = CodexObserver::new(home.path().into(), None, me, Incarnation("i".into()));
    let attached = observer.refresh(None);
    assert!(attached.events.iter().any(|e| matches!(e, ObserverEvent::Attached { .. })), "{:?}", attached.events);

    // Use up every descriptor, then let the observer check its process.
    let mut hoard = Vec::new();
    while let Ok(file) = std::fs::File::open("/dev/null") {
        hoard.push(file);
        assert!(hoard.len() < 1_000_000, "no descriptor limit to reach");
    }
    rollout.write_all(b"{\"type\":\"event_msg\",\"payload\":{\"type\":\"task_started\",\"turn_id\":\"t1\"}}\n").unwrap();
    let events = observer.poll();
    drop(hoard);
    assert!(
        !events.iter().any(|e| matches!(e, ObserverEvent::ProcessExited { .. })),
        "LIVE-1: a probe that ran out of descriptors was read as an exit: {events:?}"
    );
    let later = observer.poll();
    assert!(!later.iter().any(|e| matches!(e, ObserverEvent::ProcessExited { .. })), "{later:?}");
}
