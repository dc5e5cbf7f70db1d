//! The pane side of `session action=submit` (SUB-2, SUB-4): the split write through the
//! holder, and the bounded acknowledgement watch. The engine decides; these only gather
//! evidence, and an error while gathering it is reported as such, never as evidence.

use super::agents::{AgentRuntime, Liveness};
use crate::holder::protocol::{ExpectedProcess, ScreenReply, StepsOutcome, WireErrorKind, WriteRefusal};
use crate::holder::{HolderClient, HolderError, HolderIdentity};
use sha2::{Digest, Sha256};
use std::time::{Duration, Instant};
use wakterm_engine::{judge, EnterBoundary, Incarnation, Judgement, PaneSample, SplitOutcome, SplitWrite};

/// The longest one wait for pane movement lasts before the watcher looks again anyway.
const WATCH_POLL_CAP: Duration = Duration::from_millis(500);

/// SUB-4: the digest of what the screen shows (rows and cursor), the same for the boundary
/// and for every sample.
pub fn screen_digest(screen: &ScreenReply) -> String {
    let mut hash = Sha256::new();
    for line in &screen.lines {
        hash.update(line.as_bytes());
        hash.update([0u8]);
    }
    hash.update(screen.cursor.row.to_le_bytes());
    hash.update(screen.cursor.col.to_le_bytes());
    hash.finalize().iter().take(12).map(|b| format!("{b:02x}")).collect()
}

/// SUB-2: the whole sequence in ONE holder call, which holds the pane's write lock through
/// the gaps and re-checks the process atomically with the write. Refused only when provably
/// nothing was written.
/// ADM-4: `expect_writes`, the pane's write count at the look the check decided on; the holder
/// refuses, before the first byte, when any write came since.
pub fn split_write(agent: &AgentRuntime, incarnation: &Incarnation, write: &SplitWrite, (start_by_ms, expect_writes): (u64, Option<u64>)) -> Option<SplitOutcome> {
    let written = agent.with_holder(|client, info| {
        let liveness = Liveness::from_info(&info);
        let (Some(process), true) = (liveness.process, liveness.incarnation().as_ref() == Some(incarnation)) else {
            return Some(SplitOutcome::Refused { reason: "the pane runs a different process than the one checked".to_string() });
        };
        let expect = ExpectedProcess { writes: expect_writes, ..process.into() };
        let outcome = client.write_steps(&write.steps, Duration::from_millis(write.gap_ms), Some(expect), Some(start_by_ms));
        outcome_of(outcome, HolderIdentity::of(&info).to_string())
    });
    // No connection, or `info` failed on a fresh one: the write was never sent.
    written.unwrap_or_else(|error| Some(SplitOutcome::Refused { reason: format!("cannot reach the pane: {error}") }))
}

/// The outcome of a split write's call; None when the holder did not answer within the call's
/// bound: the write's fate is unknown (a stalled holder may still run it), which is no
/// outcome (SUB-1, ADM-12: the engine's lost-write hold decides).
fn outcome_of(outcome: Result<StepsOutcome, HolderError>, holder: String) -> Option<SplitOutcome> {
    if outcome.as_ref().is_err_and(|error| super::effects::left_unknown(error, "a split write")) {
        return None;
    }
    Some(match outcome {
        Ok(outcome) if outcome.refused.is_some() => {
            assert_eq!(outcome.bytes_written, 0, "a refused write wrote nothing");
            let reason = outcome.error.unwrap_or_default();
            match outcome.refused {
                Some(WriteRefusal::InputSinceLook) => SplitOutcome::InputSinceLook { detail: reason },
                _ => SplitOutcome::Refused { reason },
            }
        }
        Ok(StepsOutcome { boundary: Some(boundary), error: None, .. }) => SplitOutcome::Complete {
            boundary: EnterBoundary {
                output_offset: boundary.screen.output_offset,
                screen_digest: screen_digest(&boundary.screen),
                generation: boundary.generation,
                writes: boundary.writes,
                holder,
            },
        },
        Ok(outcome) => SplitOutcome::Failed {
            bytes_written: outcome.bytes_written,
            error: outcome.error.unwrap_or_else(|| "the holder wrote every step but reported no boundary".to_string()),
        },
        // The holder refused to parse the request (an older holder without `write_steps`, or
        // a payload over its limits): it wrote nothing, and it has no boundary to give.
        Err(HolderError::Remote { kind: kind @ (WireErrorKind::BadRequest | WireErrorKind::TooLarge), message }) => {
            SplitOutcome::Refused { reason: format!("the pane's holder cannot take a split write ({kind:?}): {message}") }
        }
        Err(error) => SplitOutcome::Failed { bytes_written: 0, error: error.to_string() },
    })
}

/// SUB-4: samples the pane on its own holder connection until `judge` is no longer pending or
/// `wait_ms` passed since the boundary; returns the last sample. Waits are pushed by the
/// holder (`info_changed` on output), never a sleep loop.
pub fn watch(agent: &AgentRuntime, boundary: &EnterBoundary, wait_ms: u64, started: Instant) -> Result<PaneSample, String> {
    let mut client = agent.holder()?;
    let deadline = started + Duration::from_millis(wait_ms);
    loop {
        let sample = sample(&mut client, started).map_err(|e| format!("the pane could not be read: {e}"))?;
        let now = Instant::now();
        if judge(boundary, &sample) != Judgement::Pending || now >= deadline {
            return Ok(sample);
        }
        let wait = (deadline - now).min(WATCH_POLL_CAP).max(Duration::from_millis(1));
        client
            .info_changed_or_output(sample.generation, sample.alive, sample.output_end, wait)
            .map_err(|e| format!("the pane could not be watched: {e}"))?;
    }
}

/// One look: the screen and its offset under one holder lock, then the child and the writes.
fn sample(client: &mut HolderClient, started: Instant) -> Result<PaneSample, HolderError> {
    let screen = client.screen()?;
    let info = client.info()?;
    Ok(PaneSample {
        output_end: screen.output_offset,
        screen_digest: screen_digest(&screen),
        generation: info.generation,
        alive: info.alive,
        writes: info.writes,
        holder: HolderIdentity::of(&info).to_string(),
        composer: crate::screen::composer_state(&screen.lines.join("\n")),
        elapsed_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SUB-1: a split write's call the holder did not answer within its bound has no outcome
    /// (the holder may still write it); a holder that went away gives a failed one.
    #[test]
    fn sub_1_a_split_write_call_that_timed_out_has_no_outcome() {
        let timeout = HolderError::Timeout { op: "write_steps", after: Duration::from_secs(45) };
        assert_eq!(outcome_of(Err(timeout), "9.h1".into()), None);
        let gone = HolderError::PeerGone { op: "write_steps", detail: "closed".into() };
        assert!(matches!(outcome_of(Err(gone), "9.h1".into()), Some(SplitOutcome::Failed { bytes_written: 0, .. })));
    }
}
