//! EV-9, HIST-4: retention of events and of finished requests. A background task looks, off the reactor, whether the oldest
//! events are due (beyond the newest `events`, or older than `days`), and only then asks the
//! writer to prune a bounded prefix; an idle daemon costs one cheap read per check.

use crate::store::{Store, StoreOp, StoreWriter};
use std::sync::Arc;
use std::time::Duration;

/// Default: the newest million events are kept.
pub const DEFAULT_RETAIN_EVENTS: u64 = 1_000_000;
/// Default: events of the last seven days are kept (whatever their number, up to the count).
pub const DEFAULT_RETAIN_DAYS: u64 = 7;
/// Events removed per prune transaction, so the writer is never held long.
pub const PRUNE_BATCH: u64 = 5_000;
/// How often the task looks whether anything is due.
pub const PRUNE_CHECK: Duration = Duration::from_secs(5);

const DAY_MS: u64 = 86_400_000;

/// What the stream keeps: an event is pruned when it is beyond the newest `events` OR older
/// than `days` (0: no age limit).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub events: u64,
    pub days: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { events: DEFAULT_RETAIN_EVENTS, days: DEFAULT_RETAIN_DAYS }
    }
}

impl Retention {
    /// The age limit as an engine time (0: none).
    fn before_ms(&self, now_ms: u64) -> u64 {
        match self.days {
            0 => 0,
            days => now_ms.saturating_sub(days.saturating_mul(DAY_MS)),
        }
    }

    /// HIST-4: the prune of finished requests to run now, if the oldest is past the window.
    pub fn requests_due(&self, store: &Store, now_ms: u64) -> Result<Option<StoreOp>, crate::store::StoreError> {
        let before_ms = self.before_ms(now_ms);
        let due = store.oldest_finished_request_ms()?.is_some_and(|oldest| oldest < before_ms);
        Ok(due.then_some(StoreOp::PruneRequests { before_ms, max_rows: PRUNE_BATCH }))
    }

    /// The prune to run now, if the oldest stored event is due.
    pub fn due(&self, store: &Store, now_ms: u64) -> Result<Option<StoreOp>, crate::store::StoreError> {
        let Some((oldest, oldest_at_ms)) = store.oldest_event()? else { return Ok(None) };
        let newest = store.last_event_sequence()?;
        let through_sequence = newest.saturating_sub(self.events);
        let before_ms = self.before_ms(now_ms);
        let due = oldest <= through_sequence || oldest_at_ms < before_ms;
        Ok(due.then_some(StoreOp::PruneEvents { through_sequence, before_ms, max_rows: PRUNE_BATCH }))
    }
}

/// Runs until the daemon stops: check, prune while due, sleep.
pub async fn run(store: Arc<Store>, writer: Arc<StoreWriter>, retention: Retention) {
    loop {
        let check = store.clone();
        let due = tokio::task::spawn_blocking(move || {
            let now_ms = crate::driver::now_ms();
            Ok::<_, crate::store::StoreError>(retention.due(&check, now_ms)?.or(retention.requests_due(&check, now_ms)?))
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
