//! HIST-5: after start, the daemon reads every request id in the store once, off the reactor,
//! and hands them to the engine in chunks, so that a new id needs no store lookup (HIST-2).
//! Until the last chunk (`complete`) arrives, and for ever if the read fails, every id not in
//! memory is looked up as before: a failed seed costs speed, never safety.

use crate::driver::DriverMsg;
use crate::store::Store;
use std::sync::Arc;
use tokio::sync::mpsc;
use wakterm_engine::{Input, RequestId};

/// Ids per `Input::HistorySeed`: a chunk is about 200 KiB, so the driver's inbox never holds a
/// whole history at once (the read waits for room instead).
pub const SEED_CHUNK: usize = 4096;

/// Reads and sends the seed; the number of ids sent, or why the seed stopped short (nothing
/// `complete` was sent then).
pub fn seed(store: &Store, inbox: &mpsc::Sender<DriverMsg>) -> Result<u64, String> {
    let send = |ids: Vec<RequestId>, complete: bool| {
        let input = Input::HistorySeed { ids, complete };
        inbox.blocking_send(DriverMsg::Input(input)).map_err(|_| "the engine driver stopped".to_string())
    };
    let mut chunk = Vec::with_capacity(SEED_CHUNK);
    let mut sent = 0u64;
    let mut outcome = Ok(());
    store
        .for_each_request_id(|stored| {
            outcome = RequestId::parse(stored).map_err(|_| format!("a stored request id is not a UUID: {stored:?}")).and_then(|request_id| {
                chunk.push(request_id);
                sent += 1;
                if chunk.len() < SEED_CHUNK {
                    return Ok(());
                }
                send(std::mem::replace(&mut chunk, Vec::with_capacity(SEED_CHUNK)), false)
            });
            outcome.is_ok()
        })
        .map_err(|error| error.to_string())?;
    outcome?;
    send(chunk, true)?;
    Ok(sent)
}

/// Runs [`seed`] on a blocking thread and logs the outcome.
pub fn spawn(store: Arc<Store>, inbox: mpsc::Sender<DriverMsg>) {
    tokio::task::spawn_blocking(move || {
        let started = std::time::Instant::now();
        match seed(&store, &inbox) {
            Ok(ids) => tracing::info!(ids, elapsed_ms = started.elapsed().as_millis() as u64, "request history seeded (HIST-5): new ids need no store lookup"),
            Err(error) => tracing::warn!(%error, "request history not seeded (HIST-5): every id not in memory is looked up in the store"),
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{StoreOp, StoreWriter};
    use std::path::PathBuf;

    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn store_with(ids: &[String]) -> (Scratch, Store) {
        let dir = std::env::temp_dir().join(format!("wakterm-seed-unit-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).expect("scratch dir");
        let path = dir.join("wakterm.db");
        let writer = StoreWriter::spawn(&path).expect("writer");
        let phases = ["registered", "submitted", "terminal", "settled", "released"];
        let ops: Vec<StoreOp> = ids
            .iter()
            .enumerate()
            .map(|(n, id)| StoreOp::PutRequest {
                request_id: id.clone(),
                agent_id: "a1".into(),
                phase: phases[n % phases.len()].into(),
                fingerprint: "fp".into(),
                record_json: "{}".into(),
                updated_ms: n as u64,
            })
            .collect();
        for batch in ops.chunks(1000) {
            writer.commit_blocking(batch.to_vec()).expect("commit");
        }
        (Scratch(dir), Store::open(&path).expect("store"))
    }

    fn uuid_ids(count: usize) -> Vec<String> {
        (0..count).map(|_| uuid::Uuid::new_v4().to_string()).collect()
    }

    fn received(mut rx: mpsc::Receiver<DriverMsg>) -> Vec<(Vec<RequestId>, bool)> {
        let mut chunks = Vec::new();
        while let Ok(DriverMsg::Input(Input::HistorySeed { ids, complete })) = rx.try_recv() {
            chunks.push((ids, complete));
        }
        chunks
    }

    /// HIST-5: every stored id, finished or open, reaches the engine, in chunks of at most
    /// SEED_CHUNK, and only the last chunk says `complete`.
    #[test]
    fn hist_5_the_seed_sends_every_stored_id_and_completes_last() {
        let ids = uuid_ids(2 * SEED_CHUNK + 5);
        let (_scratch, store) = store_with(&ids);
        let (inbox, rx) = mpsc::channel(64);
        assert_eq!(seed(&store, &inbox), Ok(ids.len() as u64));
        let chunks = received(rx);
        assert_eq!(chunks.len(), 3);
        assert!(chunks.iter().all(|(chunk, _)| chunk.len() <= SEED_CHUNK));
        assert_eq!(chunks.iter().filter(|(_, complete)| *complete).count(), 1);
        assert!(chunks.last().expect("chunks").1, "complete comes last");
        let mut sent: Vec<String> = chunks.into_iter().flat_map(|(chunk, _)| chunk).map(|id| id.as_str().to_string()).collect();
        let mut expected = ids;
        sent.sort();
        expected.sort();
        assert_eq!(sent, expected);
    }

    /// HIST-5: an empty store seeds at once (one empty, complete chunk).
    #[test]
    fn hist_5_an_empty_store_seeds_complete() {
        let (_scratch, store) = store_with(&[]);
        let (inbox, rx) = mpsc::channel(4);
        assert_eq!(seed(&store, &inbox), Ok(0));
        assert_eq!(received(rx), vec![(Vec::new(), true)]);
    }

    /// HIST-5: a stored id that is not a UUID stops the seed short: nothing says `complete`,
    /// so every id stays looked up (a failed seed costs speed, never safety).
    #[test]
    fn hist_5_an_unreadable_id_leaves_the_seed_incomplete() {
        let mut ids = uuid_ids(10);
        ids.push("not-a-uuid".to_string());
        let (_scratch, store) = store_with(&ids);
        let (inbox, rx) = mpsc::channel(4);
        let error = seed(&store, &inbox).expect_err("refused");
        assert!(error.contains("not a UUID"), "{error}");
        assert!(received(rx).iter().all(|(_, complete)| !complete));
    }

    /// HIST-5: the seed reads the primary key's index, not the request records, so it costs
    /// the ids' bytes, not the history's.
    #[test]
    fn hist_5_the_seed_reads_only_the_id_index() {
        let (scratch, _store) = store_with(&uuid_ids(3));
        let conn = rusqlite::Connection::open(scratch.0.join("wakterm.db")).expect("open");
        let plan: String = conn
            .query_row(&format!("EXPLAIN QUERY PLAN {}", crate::store::REQUEST_IDS), [], |row| row.get(3))
            .expect("plan");
        assert!(plan.contains("COVERING INDEX"), "{plan}");
    }
}
