//! ADM-4: when a look at a PTY pane may read its screen. Input written just before the look
//! may not be drawn yet: the screen then shows the composer as it was, and a human's draft
//! typed a moment before an admission was read as an empty composer, which the admission's
//! leading Ctrl-U then erased. The holder (`Pane::screen_with_info`) and the simulator's pane
//! port both ask this one rule how long to wait.

/// How long after an input write a look waits for the pane to print anything (the TUI's
/// redraw of what was typed). Past it the look reads the screen as it is: a TUI that draws
/// nothing for a key (an ignored key, a hung process) must not hold admissions for good.
pub const INPUT_DRAW_WAIT_MS: u64 = 250;

/// The last input write to a pane: when it ended (ms on the caller's monotonic clock) and the
/// pane's output end read just before the write(2) call that put its last bytes in (what the
/// pane printed while an earlier part of the write waited on a full PTY is no redraw of it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LastInput {
    pub written_ms: u64,
    pub output_end: u64,
}

/// ADM-4: `Some(deadline)` while a look must wait: the last input was written less than
/// [`INPUT_DRAW_WAIT_MS`] ago and the pane printed nothing since. The caller waits until the
/// output end moves or `deadline`, then asks again (None: read the screen now).
pub fn undrawn_input_deadline(last_input: Option<LastInput>, output_end_now: u64, now_ms: u64) -> Option<u64> {
    let last = last_input?;
    assert!(output_end_now >= last.output_end, "a pane's output end only grows within one holder");
    let deadline = last.written_ms.saturating_add(INPUT_DRAW_WAIT_MS);
    (output_end_now == last.output_end && now_ms < deadline).then_some(deadline)
}

/// What an admission's or a submit's look at a PTY pane read besides its screen, from the
/// same holder call; all None from a managed agent, a failed look or an older holder.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PaneLook {
    /// ADM-4: the pane's write count (the write names it: any write since refuses it).
    pub writes: Option<u64>,
    /// ADM-19: the last write carrying an Enter that no admission or submit made (a human's,
    /// a raw input's): its prompt's turn may not be recorded yet.
    pub other_enter: Option<OtherEnterLook>,
}

/// ADM-19: another writer's Enter as one look saw it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OtherEnterLook {
    /// When the holder noted it (its monotonic ms): it names the Enter, so the same one looked
    /// at again is known as such.
    pub noted_ms: u64,
    /// How long before the look it ended.
    pub ago_ms: u64,
    /// How many Enters of other writers the holder counted up to it (each carriage return of
    /// such a write, `count_enters`): how many prompts may have been submitted since an
    /// earlier note. 0: a holder that does not count.
    #[serde(default)]
    pub count: u64,
    /// How many of those Enters came within `OTHER_ENTER_GRACE_MS` before the look: the
    /// prompts that may still be in flight when no earlier Enter is known (a daemon just
    /// started, earlier Enters no look reported). 0: a holder that does not say.
    #[serde(default)]
    pub recent: u64,
}

impl OtherEnterLook {
    /// The holder's note `noted_ms`, looked at `now_ms` (both on the machine's monotonic
    /// clock), with the holder's counts (`count`, `recent`).
    pub fn noted_at(noted_ms: u64, (count, recent): (u64, u64), now_ms: u64) -> OtherEnterLook {
        OtherEnterLook { noted_ms, ago_ms: now_ms.saturating_sub(noted_ms), count, recent }
    }

    /// ADM-19: a holder's answer (`noted_ms`, its counts) looked at `now_ms`; a note later
    /// than now (a holder's reply is untrusted bytes) is no note: it would outrank every
    /// later Enter.
    pub fn from_holder(noted_ms: Option<u64>, counts: (u64, u64), now_ms: u64) -> Option<OtherEnterLook> {
        noted_ms.filter(|noted| *noted <= now_ms).map(|noted| OtherEnterLook::noted_at(noted, counts, now_ms))
    }

    /// ADM-19: the holder's Enters within the grace before `now_ms` among `times` (monotonic
    /// ms, one per carriage return of another writer's).
    pub fn recent_among(times: impl IntoIterator<Item = u64>, now_ms: u64) -> u64 {
        times.into_iter().filter(|at| now_ms.saturating_sub(*at) < crate::limits::OTHER_ENTER_GRACE_MS).count() as u64
    }
}

/// ADM-19: how many prompts a write's bytes (those the pane took) may have submitted: its
/// carriage returns. One inside a bracketed paste submits nothing, but counting it only makes
/// an admission wait a little longer; missing an Enter would let it race a human's prompt the
/// provider has not recorded yet.
pub fn count_enters(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b == b'\r').count() as u64
}

#[cfg(test)]
mod tests {
    use super::{count_enters, undrawn_input_deadline, LastInput, INPUT_DRAW_WAIT_MS};

    /// ADM-19: a carriage return anywhere is an Enter; a newline or none is not.
    #[test]
    fn adm_19_an_enter_is_any_carriage_return() {
        assert_eq!(count_enters(b"\x15\x1b[200~text\x1b[201~\r"), 1);
        assert_eq!(count_enters(b"\r"), 1);
        assert_eq!(count_enters(b"\x1b[200~a\rb\x1b[201~"), 1, "inside a paste too: a longer wait, never a race");
        assert_eq!(count_enters(b"typed, not sent\n"), 0);
        assert_eq!(count_enters(b""), 0);
        assert_eq!(count_enters(b"one\rtwo\r"), 2, "each may submit a prompt");
        // A holder's answer is untrusted: a note later than now is none (it would outrank
        // every later Enter); huge counts are clamped where they are added up (`MAX_OWED`).
        assert_eq!(super::OtherEnterLook::from_holder(Some(u64::MAX), (u64::MAX, u64::MAX), 100), None);
        assert_eq!(super::OtherEnterLook::from_holder(Some(90), (3, 2), 100).map(|l| (l.ago_ms, l.count, l.recent)), Some((10, 3, 2)));
    }

    /// ADM-4: a look waits only for input written within the bound and not drawn since.
    #[test]
    fn adm_4_a_look_waits_for_recent_undrawn_input_only() {
        let last = Some(LastInput { written_ms: 1_000, output_end: 500 });
        assert_eq!(undrawn_input_deadline(None, 500, 1_000), None, "no input: no wait");
        assert_eq!(undrawn_input_deadline(last, 500, 1_010), Some(1_000 + INPUT_DRAW_WAIT_MS), "undrawn: wait");
        assert_eq!(undrawn_input_deadline(last, 501, 1_010), None, "drawn since: no wait");
        assert_eq!(undrawn_input_deadline(last, 500, 1_000 + INPUT_DRAW_WAIT_MS), None, "past the bound: read as it is");
    }
}
