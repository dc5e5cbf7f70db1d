//! STORE-1: a store that went backwards (an older copy restored, a deleted WAL, an emptied
//! file) is refused at open instead of silently forgetting every request id it had admitted.

use std::path::Path;

use wakterm_runtime::store::{Store, StoreError, StoreOp, StoreWriter};

fn put(writer: &StoreWriter, i: u64) {
    let op = StoreOp::PutRequest {
        request_id: format!("req-{i:06}"),
        agent_id: "agent-1".into(),
        phase: "ended".into(),
        fingerprint: format!("fp-{i}"),
        record_json: format!(r#"{{"i":{i}}}"#),
        updated_ms: i,
    };
    writer.commit_blocking(vec![op]).expect("commit");
}

fn files(db: &Path) -> Vec<std::path::PathBuf> {
    ["", "-wal", "-shm"].iter().map(|s| db.with_file_name(format!("wakterm.db{s}"))).collect()
}

/// Copies the database's files that exist into `dir` (a backup, or an older state).
fn save_files(db: &Path, dir: &Path) {
    std::fs::create_dir(dir).unwrap();
    for file in files(db).iter().filter(|f| f.exists()) {
        std::fs::copy(file, dir.join(file.file_name().unwrap())).unwrap();
    }
}

/// Puts the database back as `save_files` kept it (files absent then are absent now).
fn restore_files(db: &Path, dir: &Path) {
    for file in files(db) {
        let _ = std::fs::remove_file(&file);
        let saved = dir.join(file.file_name().unwrap());
        if saved.exists() {
            std::fs::copy(saved, &file).unwrap();
        }
    }
}

fn refused(db: &Path) -> String {
    match Store::open(db) {
        Err(error @ StoreError::WentBackwards { .. }) => error.to_string(),
        Err(other) => panic!("expected WentBackwards, got {other}"),
        Ok(_) => panic!("a store that went backwards was opened"),
    }
}

#[test]
fn store_1_an_older_copy_of_the_database_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("wakterm.db");
    let writer = StoreWriter::spawn(&db).unwrap();
    put(&writer, 1);
    writer.shutdown().unwrap();
    let backup = tmp.path().join("backup");
    save_files(&db, &backup);
    let writer = StoreWriter::spawn(&db).unwrap();
    put(&writer, 2);
    writer.shutdown().unwrap();
    restore_files(&db, &backup);
    let message = refused(&db);
    assert!(message.contains("commits") && message.contains("watermark"), "{message}");
    // Proceeding deliberately: the message names the file to move aside.
    std::fs::remove_file(wakterm_runtime::store::watermark::path_for(&db)).unwrap();
    let store = Store::open(&db).expect("opens once the watermark is moved aside");
    assert_eq!(store.load_requests().unwrap().len(), 1);
}

#[test]
fn store_1_an_emptied_database_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("wakterm.db");
    let writer = StoreWriter::spawn(&db).unwrap();
    put(&writer, 1);
    writer.shutdown().unwrap();
    for file in files(&db) {
        let _ = std::fs::remove_file(&file);
    }
    std::fs::write(&db, b"").unwrap();
    let message = refused(&db);
    assert!(message.contains("emptied, deleted or replaced"), "{message}");
}

#[test]
fn store_1_a_deleted_wal_after_a_crash_is_refused() {
    // The writer commits in the WAL; a SIGKILL leaves it unmerged. Simulate by copying the
    // main file while the writer is still open (its commits live only in the WAL), then
    // putting that copy back without the WAL.
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("wakterm.db");
    let writer = StoreWriter::spawn(&db).unwrap();
    put(&writer, 1);
    put(&writer, 2);
    let main_only = tmp.path().join("main-only");
    std::fs::copy(&db, &main_only).unwrap();
    writer.shutdown().unwrap();
    for file in files(&db) {
        let _ = std::fs::remove_file(&file);
    }
    std::fs::copy(&main_only, &db).unwrap();
    let message = refused(&db);
    assert!(message.contains("deleted WAL") || message.contains("emptied"), "{message}");
}

/// SEC-1: the store itself refuses a symlinked database (SQLite would follow it), leaving the
/// link's target untouched, whoever opens it.
#[test]
fn sec_1_store_refuses_a_symlinked_database() {
    let tmp = tempfile::tempdir().unwrap();
    let target = tmp.path().join("precious");
    std::fs::write(&target, b"keep me").unwrap();
    let db = tmp.path().join("wakterm.db");
    std::os::unix::fs::symlink(&target, &db).unwrap();
    let error = Store::open(&db).err().expect("a symlinked database was opened").to_string();
    assert!(error.contains("symbolic link"), "{error}");
    assert!(StoreWriter::spawn(&db).is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"keep me");
}

/// STORE-1: the watermark is recorded on its own thread (its fsync no longer holds up the next
/// group), newest count first: after many concurrent groups it never leads the database (the
/// store opens) and, once the writer is shut down, it has caught up (a copy one commit older
/// is refused).
#[test]
fn store_1_the_watermark_thread_never_leads_and_catches_up_at_shutdown() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("wakterm.db");
    let writer = std::sync::Arc::new(StoreWriter::spawn(&db).unwrap());
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let writer = writer.clone();
            scope.spawn(move || (0..50).for_each(|i| put(&writer, t * 1000 + i)));
        }
    });
    put(&writer, 9_999);
    // An older state: everything but the last commit (copied while its WAL is live).
    let older = tmp.path().join("older");
    save_files(&db, &older);
    put(&writer, 10_000);
    std::sync::Arc::into_inner(writer).expect("the only handle").shutdown().unwrap();
    let store = Store::open(&db).expect("the watermark never leads the database");
    assert_eq!(store.load_requests().unwrap().len(), 202);
    drop(store);
    restore_files(&db, &older);
    let message = refused(&db);
    assert!(message.contains("commits"), "{message}");
}

/// STORE-1: a count that arrives while the watermark thread waits out its interval needs no
/// wake-up (issue 10: one per commit cost ~7 context switches per admission), yet it is
/// recorded when the interval ends, with the writer still running and no later commit.
#[test]
fn store_1_a_count_arriving_during_the_interval_is_recorded_when_it_ends() {
    let tmp = tempfile::tempdir().unwrap();
    let db = tmp.path().join("wakterm.db");
    let writer = StoreWriter::spawn(&db).unwrap();
    (0..5).for_each(|i| put(&writer, i));
    let commits = writer.stats().transactions;
    assert_eq!(commits, 5, "one group per blocking commit");
    let recorded = || {
        let text = std::fs::read_to_string(wakterm_runtime::store::watermark::path_for(&db)).unwrap_or_default();
        let field = text.split_whitespace().find_map(|f| f.strip_prefix("commits=")).unwrap_or("0");
        field.parse::<u64>().unwrap_or(0)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while recorded() < commits && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(recorded(), commits, "the newest count is recorded while the writer runs");
    writer.shutdown().unwrap();
}
