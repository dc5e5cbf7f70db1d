//! EV-9, HIST-4: the retention rule: which prune is due, read from the store (or from the
//! simulator's model of it, through [`RetentionView`]). The daemon's background task that
//! applies it is `daemon::retention::run`.

use super::{Store, StoreError, StoreOp};

/// Default: the newest million events are kept.
pub const DEFAULT_RETAIN_EVENTS: u64 = 1_000_000;
/// Default: events of the last seven days are kept (whatever their number, up to the count).
pub const DEFAULT_RETAIN_DAYS: u64 = 7;
/// Default: the newest events up to 1 GiB of stored JSON are kept. A million events of up to
/// 2 MiB each (RF-9's bound) was no practical bound on the disk (a review).
pub const DEFAULT_RETAIN_MIB: u64 = 1024;
/// EV-9: the largest `--retain-mib` whose bytes fit a u64: a larger one is refused, never
/// clamped without a word (a hostile run's D8: `mux status` showed another number).
pub const MAX_RETAIN_MIB: u64 = u64::MAX >> 20;
/// Events removed per prune transaction, so the writer is never held long.
pub const PRUNE_BATCH: u64 = 5_000;
const DAY_MS: u64 = 86_400_000;

/// What retention reads to decide: the store, or the simulator's model of it (one copy of the
/// rule for both).
pub trait RetentionView {
    /// The oldest stored event's sequence and time.
    fn oldest_event(&self) -> Result<Option<(u64, u64)>, StoreError>;
    /// The greatest event sequence ever stored, pruned ones included.
    fn last_event_sequence(&self) -> Result<u64, StoreError>;
    /// When the oldest finished request was last updated.
    fn oldest_finished_request_ms(&self) -> Result<Option<u64>, StoreError>;
    /// The bytes of event JSON stored.
    fn stored_event_bytes(&self) -> Result<u64, StoreError>;
}

impl RetentionView for Store {
    fn oldest_event(&self) -> Result<Option<(u64, u64)>, StoreError> {
        Store::oldest_event(self)
    }
    fn last_event_sequence(&self) -> Result<u64, StoreError> {
        Store::last_event_sequence(self)
    }
    fn oldest_finished_request_ms(&self) -> Result<Option<u64>, StoreError> {
        Store::oldest_finished_request_ms(self)
    }
    fn stored_event_bytes(&self) -> Result<u64, StoreError> {
        Store::stored_event_bytes(self)
    }
}

/// What the stream keeps: an event is pruned when it is beyond the newest `events`, OR older
/// than `days` (0: no age limit), OR the events stored hold more than `bytes` of JSON (0: no
/// size limit; the oldest go until they fit; `mux start --retain-mib` sets it in MiB).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Retention {
    pub events: u64,
    pub days: u64,
    pub bytes: u64,
}

impl Default for Retention {
    fn default() -> Self {
        Retention { events: DEFAULT_RETAIN_EVENTS, days: DEFAULT_RETAIN_DAYS, bytes: DEFAULT_RETAIN_MIB << 20 }
    }
}

/// HIST-4, EV-9, TIME-2: the time retention counts ages from. Stored times are engine times
/// (`updated_ms`, `at_ms`: TIME-1), so this is the engine's clock, less how far behind it
/// another run of the boot may have recorded the same moment: no record younger than the
/// retention on the monotonic clock goes. It read the wall clock: a clock stepped forward by
/// the retention's days while the daemon ran (a machine set right by NTP long after its
/// start) made every finished request due within a check of finishing, and a retry of its id
/// was taken for a new request (a review).
#[derive(Clone, Copy, Debug)]
pub struct RetentionClock {
    pub engine: crate::driver::EngineClock,
    /// `RunWindow::behind_ms` (`u64::MAX`: unknown, so no age is ever due).
    pub behind_ms: u64,
}

/// What `mux status` says of pruning by age (HIST-4, EV-9, TIME-2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AgePruning {
    /// As `--retain-days` says (less than a minute late).
    OnTime,
    /// Up to this many hours (rounded up) later than `--retain-days` says, as of the daemon's
    /// start: an earlier daemon of this boot stood behind (its clock, or suspends between the
    /// starts; a suspend while this daemon runs adds to it unseen).
    Late { hours: u64 },
    /// Not in this boot: where its daemons' times stood is unknown.
    Off,
}

impl AgePruning {
    pub fn as_str(&self) -> &'static str {
        match self {
            AgePruning::OnTime => "on",
            AgePruning::Late { .. } => "late",
            AgePruning::Off => "off",
        }
    }
}

impl RetentionClock {
    /// How pruning by age stands. Unknown frames keep an offset of `i64::MAX` (TIME-2), so a
    /// behind of more than 2^62 ms (146 million years) says unknown, not late.
    pub fn age_pruning(&self) -> AgePruning {
        const HOUR_MS: u64 = 3_600_000;
        match self.behind_ms {
            behind if behind >= 1 << 62 => AgePruning::Off,
            behind if behind >= 60_000 => AgePruning::Late { hours: behind.div_ceil(HOUR_MS) },
            _ => AgePruning::OnTime,
        }
    }

    pub fn now_ms(&self) -> u64 {
        use crate::driver::Clock;
        self.engine.now_ms().saturating_sub(self.behind_ms)
    }
}

/// EV-9: the test one prune applies to each of the oldest events in turn, until the first it
/// keeps. One copy for the store and the simulator's model of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventDue {
    pub through_sequence: u64,
    pub before_ms: u64,
    pub settled_through: u64,
    pub excess_bytes: u64,
}

impl EventDue {
    /// Whether the event at `sequence`, stored at `at_ms`, goes, `removed_bytes` of JSON
    /// having gone before it in this prune.
    pub fn prunes(&self, sequence: u64, at_ms: u64, removed_bytes: u64) -> bool {
        sequence <= self.settled_through && (sequence <= self.through_sequence || at_ms < self.before_ms || removed_bytes < self.excess_bytes)
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
    pub fn requests_due(&self, store: &impl RetentionView, now_ms: u64) -> Result<Option<StoreOp>, StoreError> {
        let before_ms = self.before_ms(now_ms);
        let due = store.oldest_finished_request_ms()?.is_some_and(|oldest| oldest < before_ms);
        Ok(due.then_some(StoreOp::PruneRequests { before_ms, max_rows: PRUNE_BATCH }))
    }

    /// The prune to run now, if the oldest stored event is due. `settled_through`: the engine's
    /// settled mark (EV-2), which no prune passes: an event committed behind a number still
    /// pending is not pruned before that number commits above the pruned mark (EV-3 keeps a
    /// failed batch's numbers for its retry when a request event after them committed).
    pub fn due(&self, store: &impl RetentionView, now_ms: u64, settled_through: u64) -> Result<Option<StoreOp>, StoreError> {
        let Some((oldest, oldest_at_ms)) = store.oldest_event()? else { return Ok(None) };
        let newest = store.last_event_sequence()?;
        let through_sequence = newest.saturating_sub(self.events);
        let before_ms = self.before_ms(now_ms);
        let excess_bytes = match self.bytes {
            0 => 0,
            bound => store.stored_event_bytes()?.saturating_sub(bound),
        };
        let due = EventDue { through_sequence, before_ms, settled_through, excess_bytes };
        Ok(due.prunes(oldest, oldest_at_ms, 0).then_some(StoreOp::PruneEvents { through_sequence, before_ms, max_rows: PRUNE_BATCH, settled_through, excess_bytes }))
    }
}


/// EV-9, HIST-4: a read `--after` this cursor cannot be served: retention removed events after
/// it (through `pruned_through`). One copy for the daemon's streams and the simulator.
pub fn cursor_too_old(after: u64, pruned_through: u64) -> bool {
    after < pruned_through
}
