//! TIME-2: where each daemon's engine time stood on the machine's monotonic clock, so a
//! restart can tell how long ago a write was, and which of two writes came later, whatever the
//! wall clocks did between two daemons (ADM-5).
//!
//! Engine time is a daemon's wall clock at its start advanced by the monotonic clock (TIME-1),
//! so one run's times differ from that monotonic clock by one constant, `offset_ms`. A record
//! keeps the offset of the run that registered and wrote it (REC-1: a registration is written
//! in the run that made it, or never). `CLOCK_MONOTONIC` is one clock for every process of one
//! boot and stops while the machine is suspended, when the agent could not read its input
//! either; across two boots it means nothing, and there no process of the earlier boot runs.

use serde::{Deserialize, Serialize};

/// A run's engine time on the machine's monotonic clock: monotonic = engine time + `offset_ms`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunClock {
    /// The machine's boot (`/proc/sys/kernel/random/boot_id`): monotonic times of two boots do
    /// not compare.
    pub boot_id: String,
    pub offset_ms: i64,
}

impl RunClock {
    /// The monotonic time of `engine_ms`, a time of this run.
    pub fn monotonic_ms(&self, engine_ms: u64) -> i128 {
        i128::from(engine_ms) + i128::from(self.offset_ms)
    }

    /// How far `then_ms`, a time of the run `then`, lies after `now_ms`, a time of this run
    /// (negative: before; a restart's wait may count from a moment still ahead): none when the
    /// two runs were not of one boot.
    pub fn ahead_ms(&self, now_ms: u64, then: &RunClock, then_ms: u64) -> Option<i128> {
        (then.boot_id == self.boot_id).then(|| then.monotonic_ms(then_ms) - self.monotonic_ms(now_ms))
    }
}

/// Durable (the store's `run_clocks`): the largest offset of any run of the current boot, which
/// bounds how far back, in the current run's time, another run of the boot recorded the
/// moment `RESTART_LOOKBACK_MS` ago. `i64::MAX` once the boot's runs are unknown (what was
/// kept could not be read): every later start of the boot looks at the whole history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunClocksSeen {
    pub boot_id: String,
    pub max_offset_ms: i64,
}

/// The boot a start without a run clock (its boot unknown) keeps: whatever boot reads it next
/// cannot tell where that run's times stood, and takes it as unreadable.
pub const UNKNOWN_BOOT: &str = "unknown";

/// What a start decides from the boot's earlier runs (`RunClocksSeen::restart_window`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunWindow {
    /// ADM-5: the earliest `updated_ms` a finished write less than RF-8's timeout old can
    /// hold, whichever run of the boot recorded it.
    pub since_ms: u64,
    /// HIST-4, EV-9: how far behind this run's time another run of the boot may have recorded
    /// the same moment (`u64::MAX`: unknown). Retention counts ages from this run's engine
    /// time less it, so no record younger than the retention by the monotonic clock goes.
    pub behind_ms: u64,
    /// What to commit before this run records anything.
    pub keep: RunClocksSeen,
}

/// What a start finds of the boot's earlier runs in the store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeptRunClocks {
    /// Nothing kept (a new store, or one of an older daemon).
    Nothing,
    Kept(RunClocksSeen),
    /// Kept, and unreadable (the read failed, or not its JSON): earlier runs of this boot may
    /// have recorded times anywhere.
    Unreadable,
}

impl KeptRunClocks {
    /// From the store's read of `meta.run_clocks`.
    pub fn from_read<E>(read: Result<Option<String>, E>) -> KeptRunClocks {
        match read {
            Ok(None) => KeptRunClocks::Nothing,
            Ok(Some(json)) => serde_json::from_str(&json).map_or(KeptRunClocks::Unreadable, KeptRunClocks::Kept),
            Err(_) => KeptRunClocks::Unreadable,
        }
    }
}

impl RunClocksSeen {
    /// ADM-5 at a restart: the earliest time, in the time each record holds, that a finished
    /// request updated within `RESTART_LOOKBACK_MS` (RF-8's timeout, and how late a line may
    /// land after the restart that ended its registration) before `now_ms` can hold (the
    /// store loads each agent's latest write updated since then), and what to keep durable
    /// before this run records anything. A run whose wall clock stood behind this one's
    /// recorded that moment as an earlier time: by the difference of their offsets. Before,
    /// the window was this run's `now_ms` less the timeout, and a wall clock stepped forward
    /// while the daemon was down made a write of a moment ago look older: not loaded, and the
    /// next prompt went over its unread line. Without a run clock (the boot unknown), or for
    /// records of an earlier boot, the wall clock's window, as before (such records are aged
    /// by the wall clocks too). Kept unreadable: the whole history, now and at every later
    /// start of the boot (a review: forgetting the earlier runs there let the next start's
    /// window miss a run whose wall clock stood behind). A run without a run clock keeps
    /// `UNKNOWN_BOOT`, which the next start takes as unreadable: that run's times stood
    /// anywhere, and a record it updated (registered by a run with a clock) needs the whole
    /// history too (the second review).
    pub fn restart_window(now_ms: u64, run: Option<&RunClock>, kept: KeptRunClocks) -> RunWindow {
        let wall_window = now_ms.saturating_sub(crate::limits::RESTART_LOOKBACK_MS);
        let Some(run) = run else {
            let keep = RunClocksSeen { boot_id: UNKNOWN_BOOT.to_string(), max_offset_ms: i64::MAX };
            return RunWindow { since_ms: wall_window, behind_ms: u64::MAX, keep };
        };
        let max_offset_ms = match kept {
            KeptRunClocks::Kept(seen) if seen.boot_id == UNKNOWN_BOOT => i64::MAX,
            KeptRunClocks::Kept(seen) if seen.boot_id == run.boot_id => seen.max_offset_ms.max(run.offset_ms),
            KeptRunClocks::Unreadable => i64::MAX,
            _ => run.offset_ms, // another boot's runs wrote nothing this boot's processes read
        };
        let behind_ms = u64::try_from(i128::from(max_offset_ms) - i128::from(run.offset_ms)).unwrap_or(u64::MAX);
        let keep = RunClocksSeen { boot_id: run.boot_id.clone(), max_offset_ms };
        RunWindow { since_ms: wall_window.saturating_sub(behind_ms), behind_ms, keep }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(boot: &str, offset_ms: i64) -> RunClock {
        RunClock { boot_id: boot.to_string(), offset_ms }
    }

    #[test]
    fn time_2_an_age_is_counted_on_the_monotonic_clock_of_one_boot() {
        // The earlier run's wall clock stood an hour ahead (offset an hour lower): a write at
        // its engine time 5,000,000 was monotonic 1,400,000.
        let earlier = run("b", -3_600_000);
        let now = run("b", 0);
        assert_eq!(now.ahead_ms(1_410_000, &earlier, 5_000_000), Some(-10_000));
        // Stepped the other way, the write looks younger by the wall, and is not.
        let behind = run("b", 3_600_000);
        assert_eq!(now.ahead_ms(5_000_000, &behind, 1_380_000), Some(-20_000));
        assert_eq!(now.ahead_ms(5_000_000, &run("other boot", 3_600_000), 1_380_000), None);
        assert_eq!(now.ahead_ms(0, &run("b", 0), 10), Some(10), "a moment still ahead");
    }

    #[test]
    fn time_2_the_restart_window_reaches_back_to_every_run_of_the_boot() {
        let timeout = crate::limits::RESTART_LOOKBACK_MS;
        let window = |run: Option<&RunClock>, kept: &RunClocksSeen| RunClocksSeen::restart_window(1_000_000, run, KeptRunClocks::Kept(kept.clone()));
        // First run of a boot: its own window, nothing behind, its offset kept.
        let first = RunClocksSeen::restart_window(1_000_000, Some(&run("b", 50)), KeptRunClocks::Nothing);
        assert_eq!(first, RunWindow { since_ms: 1_000_000 - timeout, behind_ms: 0, keep: RunClocksSeen { boot_id: "b".into(), max_offset_ms: 50 } });
        // The wall clock stepped forward 10 min while down: this run's offset is lower, and the
        // window reaches 10 min further back, where the earlier run recorded the same moment.
        let second = window(Some(&run("b", 50 - 600_000)), &first.keep);
        assert_eq!((second.since_ms, second.behind_ms, second.keep.max_offset_ms), (1_000_000 - timeout - 600_000, 600_000, 50));
        // A new boot forgets the old one's runs.
        let rebooted = window(Some(&run("c", -7)), &second.keep);
        assert_eq!((rebooted.since_ms, rebooted.behind_ms, rebooted.keep.boot_id.as_str(), rebooted.keep.max_offset_ms), (1_000_000 - timeout, 0, "c", -7));
        // No clock: the wall window, nothing known behind, and the next start of any boot takes
        // what it keeps as unreadable.
        let clockless = window(None, &rebooted.keep);
        assert_eq!((clockless.since_ms, clockless.behind_ms, clockless.keep.boot_id.as_str()), (1_000_000 - timeout, u64::MAX, UNKNOWN_BOOT));
        let after = window(Some(&run("c", -7)), &clockless.keep);
        assert_eq!((after.since_ms, after.keep.max_offset_ms), (0, i64::MAX));
        // Unreadable: the whole history, and every later start of the boot reads it too.
        let unreadable = RunClocksSeen::restart_window(1_000_000, Some(&run("c", -7)), KeptRunClocks::Unreadable);
        assert_eq!((unreadable.since_ms, unreadable.keep.max_offset_ms), (0, i64::MAX));
        assert!(unreadable.behind_ms > 1 << 62, "no age known: {}", unreadable.behind_ms);
        let later = RunClocksSeen::restart_window(2_000_000, Some(&run("c", 9)), KeptRunClocks::Kept(unreadable.keep.clone()));
        assert_eq!((later.since_ms, later.keep), (0, unreadable.keep));
        assert_eq!(KeptRunClocks::from_read::<()>(Ok(Some("{\"boot_id\":\"c\"}".into()))), KeptRunClocks::Unreadable);
        assert_eq!(KeptRunClocks::from_read(Err("disk I/O error")), KeptRunClocks::Unreadable);
        assert_eq!(KeptRunClocks::from_read::<()>(Ok(None)), KeptRunClocks::Nothing);
    }
}
