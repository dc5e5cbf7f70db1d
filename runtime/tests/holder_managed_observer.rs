//! MGD-4 against real holders: a managed agent's observer reads only the holder its process runs
//! under. A holder that died and was replaced at the same socket (`agent restart` after a holder
//! restart) numbers another stream from 0; read as the old process's, it once made a killed
//! process's drain report the new holder's output as that process's last records, and its exit
//! as `drained` (the simulator's seed 1684: a prompt that did open a turn ended
//! `delivery_failed`).

mod holder_support;

use holder_support::*;
use wakterm_engine::{Incarnation, ManagedIds, ObserverStatus, ProcessIdentity, SessionId};
use wakterm_runtime::holder::{spawn_holder, HolderClient, HolderIdentity, InfoReply};
use wakterm_runtime::managed_observer::{ManagedObserver, StreamStart};

fn observer_of(socket: &std::path::Path, info: &InfoReply, holder: Option<HolderIdentity>) -> ManagedObserver {
    let ids = ManagedIds { thread_id: "thread-1".into(), session_id: SessionId("thread-1".into()) };
    let process = ProcessIdentity { pid: info.pid.unwrap(), start_time_ticks: info.start_time_ticks.unwrap() };
    let incarnation = Incarnation(format!("{}.{}", process.pid, process.start_time_ticks));
    let stream = StreamStart { start: info.generation_start, holder };
    ManagedObserver::new(socket.to_path_buf(), ids, process, incarnation, stream, "/".into())
}

/// Why the observer's last read failed, if it did.
fn failure(observer: &ManagedObserver) -> Option<String> {
    match observer.snapshot().status {
        ObserverStatus::Attached => None,
        ObserverStatus::Unavailable { reason } => Some(reason),
    }
}

fn start_cat(socket: &std::path::Path) -> InfoReply {
    let argv = raw_sh("exec cat");
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    spawn_holder(holder_exe(), &config(socket, &argv)).expect("holder starts")
}

#[test]
fn mgd_4_an_observer_never_reads_a_replaced_holder_as_its_own() {
    let socket = fresh_socket_path();
    let _cleanup = ShutdownOnDrop(socket.clone());
    let first = start_cat(&socket);
    assert!(!first.holder_instance.is_empty(), "a holder names itself");
    let mut observer = observer_of(&socket, &first, Some(HolderIdentity::of(&first)));
    observer.poll();
    assert!(observer.read_ok(), "its own holder reads: {:?}", failure(&observer));

    // The holder dies; another starts at the same socket with its own stream from 0.
    HolderClient::connect(&socket).unwrap().shutdown().unwrap();
    assert!(wait_gone(first.holder_pid), "the first holder is gone");
    let second = start_cat(&socket);
    assert_ne!(HolderIdentity::of(&second), HolderIdentity::of(&first));
    assert_eq!(second.generation_start, 0, "a new holder's stream starts over");

    // The first poll meets the broken connection; every later one reaches the new holder and
    // must refuse it.
    for _ in 0..3 {
        observer.poll();
        assert!(!observer.read_ok(), "the replaced holder's observer must not read the new stream");
    }
    let error = failure(&observer).expect("the snapshot says why");
    assert!(error.contains("holder was replaced"), "{error}");

    // An observer of the new holder's process reads it, and so does one that does not know its
    // holder (the identity was unknown when it was made).
    let mut fresh = observer_of(&socket, &second, Some(HolderIdentity::of(&second)));
    fresh.poll();
    assert!(fresh.read_ok(), "{:?}", failure(&fresh));
    let mut unchecked = observer_of(&socket, &second, None);
    unchecked.poll();
    assert!(unchecked.read_ok(), "{:?}", failure(&unchecked));
    // The old process's observer without the holder check still writes nothing to the new
    // process: its `thread/resume` names its own process, and the holder refuses it.
    let mut blind = observer_of(&socket, &first, None);
    blind.poll();
    let error = failure(&blind).expect("the write naming the old process is refused");
    assert!(error.contains("cannot ask the app-server for its thread"), "{error}");
}
