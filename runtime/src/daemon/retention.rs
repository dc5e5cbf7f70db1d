//! EV-9, HIST-4: retention of events and of finished requests. A background task looks, off the reactor, whether the oldest
//! events are due (beyond the newest `events`, or older than `days`), and only then asks the
//! writer to prune a bounded prefix; an idle daemon costs one cheap read per check.

pub use crate::store::retention::{AgePruning, Retention, RetentionClock, RetentionView, DEFAULT_RETAIN_DAYS, DEFAULT_RETAIN_EVENTS, DEFAULT_RETAIN_MIB, MAX_RETAIN_MIB, PRUNE_BATCH};
use crate::store::{Store, StoreError, StoreWriter};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `run`'s `stored` before the first check, or after a check that could not read it.
pub const UNKNOWN_BYTES: u64 = u64::MAX;

/// How often the task looks whether anything is due.
pub const PRUNE_CHECK: Duration = Duration::from_secs(5);


/// Runs until the daemon stops: check, prune while due, sleep. `settled`: the engine's settled
/// mark (EV-2), which no prune passes.
/// `stored`: the bytes of event JSON the store held at the last check (`UNKNOWN_BYTES` until
/// one was read), for `mux status`, which must not wait on the store.
pub async fn run(store: Arc<Store>, writer: Arc<StoreWriter>, (retention, clock): (Retention, RetentionClock), settled: tokio::sync::watch::Receiver<u64>, stored: Arc<AtomicU64>) {
    loop {
        let check = store.clone();
        let settled_through = *settled.borrow();
        let seen = stored.clone();
        let due = tokio::task::spawn_blocking(move || {
            let now_ms = clock.now_ms();
            seen.store(check.stored_event_bytes().unwrap_or(UNKNOWN_BYTES), Ordering::Relaxed);
            Ok::<_, StoreError>(retention.due(&*check, now_ms, settled_through)?.or(retention.requests_due(&*check, now_ms)?))
        })
        .await;
        let op = match due {
            Ok(Ok(Some(op))) => op,
            Ok(Ok(None)) => {
                tokio::time::sleep(PRUNE_CHECK).await;
                continue;
            }
            Ok(Err(error)) => {
                tracing::warn!(%error, "event retention could not read the store; retrying later");
                tokio::time::sleep(PRUNE_CHECK).await;
                continue;
            }
            Err(_) => return,
        };
        let (done, committed) = tokio::sync::oneshot::channel();
        let submitted = writer.submit(vec![op], Box::new(move |result| drop(done.send(result.map(drop)))));
        let result = match submitted {
            Ok(()) => committed.await.unwrap_or(Ok(())),
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            tracing::warn!(%error, "event retention prune failed; retrying later");
            tokio::time::sleep(PRUNE_CHECK).await;
        }
    }
}
