//! The durable request record: idempotency state (IDEM-*) and return-final progress (RF-1).

use crate::ids::{AgentId, Incarnation, RequestId, SessionId, TurnId};
use crate::observer::{Cursor, ProcessIdentity};
use crate::prompt::PasteMode;
use crate::receipt::{CorrelationSource, Operation, Receipt, ReturnMode};
use crate::terminal::TerminalEvent;
use serde::{Deserialize, Serialize};

/// RF-1: where a request is in its life. Every change is persisted before it is relied on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Durable before the pane write; the write may or may not have happened (REC-1).
    Registered,
    /// Definitively rejected after registration: nothing was written, the id is free again
    /// (IDEM-6).
    Released,
    /// A one-way admission with its final receipt.
    Settled,
    /// Return-final: the write completed and the submitted marker is durable.
    Submitted,
    /// Return-final: the first new provider turn carried our prompt (CORR-5, CORR-6).
    Bound,
    /// Return-final: exactly one terminal event is durable (RF-5).
    Terminal,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Registered => "registered",
            Phase::Released => "released",
            Phase::Settled => "settled",
            Phase::Submitted => "submitted",
            Phase::Bound => "bound",
            Phase::Terminal => "terminal",
        }
    }

    pub const ALL: [Phase; 6] = [Phase::Registered, Phase::Released, Phase::Settled, Phase::Submitted, Phase::Bound, Phase::Terminal];

    /// HIST-1: open (a restart recovers it) or finished (it never changes again): every phase is
    /// exactly one of the two. The one partition: the store's `open_requests`, its start query
    /// and its frozen SQL lists follow it.
    pub fn is_open(self) -> bool {
        match self {
            Phase::Registered | Phase::Submitted | Phase::Bound => true,
            Phase::Released | Phase::Settled | Phase::Terminal => false,
        }
    }

    /// Whether `name` (as stored, [`Phase::as_str`]) is an open phase.
    pub fn is_open_name(name: &str) -> bool {
        Phase::ALL.iter().any(|phase| phase.is_open() && phase.as_str() == name)
    }

    /// Return-final phases in which correlation is still running.
    pub fn is_correlating(self) -> bool {
        matches!(self, Phase::Submitted | Phase::Bound)
    }
}

/// RF-6: what one step of a request's life was, in the order it happened.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EvidenceStep {
    /// The refresh the admission decided on, and the armed cursor (IDEM-4).
    Registered,
    /// The one pane write and its outcome (ADM-8, ADM-10).
    Written,
    /// The submitted marker is durable; correlation starts (RF-1).
    Submitted,
    /// A turn started after the armed cursor: the candidate (CORR-5).
    TurnStarted,
    /// The first user message of the candidate turn, its hash against ours (CORR-6).
    UserMessage,
    /// Our prompt opened the turn (CORR-6).
    Bound,
    /// The request's end: its state, reason, the rule that decided and its evidence.
    Terminal,
}

/// RF-6: one step of the evidence trail, durable with the record and pruned with it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    pub at_ms: u64,
    pub step: EvidenceStep,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    pub request_id: RequestId,
    pub agent_id: AgentId,
    /// IDEM-1: hex SHA-256 over the caller's input.
    pub fingerprint: String,
    pub operation: Operation,
    pub return_mode: ReturnMode,
    pub paste_mode: PasteMode,
    pub final_timeout_ms: u64,
    pub incarnation: Incarnation,
    pub process: Option<ProcessIdentity>,
    pub session: Option<SessionId>,
    pub correlation_source: Option<CorrelationSource>,
    pub armed: Option<Cursor>,
    /// ADM-5: the write's floor: where the observer's view stood when the write's outcome was
    /// known, or for a PTY agent where its rollout ended just before the write when that lies
    /// further in the view's session (CORR-6's floor, `Input::Delivered::record_end`; with no
    /// view, that end alone); None: neither known. A turn starting at or before it began
    /// before the prompt could reach the agent, so it does not end the wait for the prompt's
    /// turn, here or in a daemon started after (a turn seen between the arming and the write,
    /// replayed after a restart, ended the reopened wait: exploration seed 58640897).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_past: Option<Cursor>,
    /// ADM-5: the event stream's next number when the write was handed out: a user message the
    /// mark noted before it is no sign the prompt was read, wherever it lies
    /// (`PromptTaken::noted_at_event`). None in a record written before 2026-12-06.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub written_at_event: Option<u64>,
    /// ADM-5, REC-1: a restart found this registration unfinished and ended it: whether its
    /// write happened, nobody knows. A later restart still counts it among the writes whose
    /// line may be unread (`RecoveredWrite::of`; the store loads it as it loads a written one,
    /// `Store::load_latest_written_since`): a second restart within RF-8's timeout forgot it,
    /// and the next prompt could go over its line (a listed gap until 2026-12-05).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub write_unknown: bool,
    /// ADM-5 (PTY): a plain send written while a wait was open, which it joined
    /// (`AgentEntry::awaiting_prompts`): its prompt, seen taken, says nothing of the prompts
    /// written before it (the TUI may have queued them: read is not recorded), so a restart
    /// does not take it as proof that they were read (`RecoveredWrite::joined_wait`; a review).
    /// A record of an older daemon has none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub joined_wait: bool,
    /// CORR-6 (PTY): registered while the view did not show an empty composer (an
    /// unclassified screen, which may be a dialog the prompt answers, RF-7): the TUI may never
    /// have taken it as a prompt, so a later same-text prompt may open the turn its message
    /// shows (`Engine::same_text_prompt_may_be_first`). Durable: a restart's reopened wait no
    /// longer ties its prompts to their requests (a review). A record of an older daemon has
    /// none.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub over_unseen_composer: bool,
    /// ADM-5, REC-1: the latest its write may have landed, by the restart that ended this
    /// registration (`write_unknown`): that restart's start plus `WRITE_LANDS_WITHIN_MS` (the
    /// holder outlives the daemon), as a time of the run that registered it (`own_time`,
    /// TIME-2); a later restart counts RF-8's timeout from there. From the
    /// registration, as until 2026-12-05, a registration commit stalled for seconds (it has
    /// no deadline) made a line written later look older than it was, and a second restart
    /// just under the minute from the write held nothing (a review). None in a record of an
    /// older daemon, or when that restart could not place its time on the registering run's
    /// clock: aged from its registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub write_unknown_since_ms: Option<u64>,
    /// Seed 000 / RF-2: a managed session's armed cursor as callers see it is the durable
    /// Agent API event sequence: the agent event stream's published mark when the request was
    /// armed. Every event of the agent after the armed position is numbered above it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub armed_event_sequence: Option<u64>,
    pub baseline_turn: Option<TurnId>,
    /// HASH-1 hash of the prompt; the prompt text itself is stored only in `shared_prompt`.
    pub prompt_hash: String,
    /// EV-12: the prompt's text, kept only when the caller opted in (`--share-prompt`), for its
    /// `request.admitted` event.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_prompt: Option<String>,
    /// MGD-7: the JSON-RPC id of a managed admission's `turn/start` (`prompt::turn_start_id`);
    /// an error reply under it is the app-server's refusal of this prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub turn_start_id: Option<String>,
    pub phase: Phase,
    pub receipt: Option<Receipt>,
    pub bound_turn: Option<TurnId>,
    /// CORR-9 (PTY): where the user message that bound `bound_turn` ends: a later one of the
    /// same text in that turn is a second prompt of our text (`Engine::correlate`). None
    /// before binding, and in a record bound by a daemon older than 2026-12-06.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_at: Option<u64>,
    /// CORR-9: a message of another prompt came in the bound turn after ours (a steer, or a
    /// prompt the TUI took with ours as one input): the turn's final may answer it too. Its
    /// end carries it (`TerminalEvent::steered`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub steered: bool,
    /// Absolute engine time at which the request times out (RF-3); none when timeout is 0.
    pub deadline_ms: Option<u64>,
    pub terminal: Option<TerminalEvent>,
    pub registered_ms: u64,
    pub updated_ms: u64,
    /// TIME-2: where the engine time of the run that registered it (and wrote it, if anyone
    /// did) stood on the machine's monotonic clock; none from an engine without one (a record
    /// of an older daemon, the boot unknown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_clock: Option<crate::run_clock::RunClock>,
    /// RF-6: the evidence trail, at most `MAX_EVIDENCE_ENTRIES` steps.
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// RF-6: steps left out once the trail was full (the end is always kept).
    #[serde(default)]
    pub evidence_dropped: u32,
}

impl RequestRecord {
    /// CORR-5: the point after which correlation looks for this request's turn: the armed
    /// cursor, or for a PTY agent (the provider file) its write's floor (`written_past`) when
    /// that lies further in the same session: where the rollout ended just before the write
    /// (the view may lag the file, `Engine::mark_written`). A turn recorded up to there began
    /// before the prompt could reach the TUI, whatever text its user message carries. None
    /// while not armed.
    pub fn correlation_floor(&self) -> Option<Cursor> {
        let written = self.written_past.as_ref().filter(|_| self.correlation_source == Some(CorrelationSource::ProviderFile));
        Some(self.armed.clone()?.or_further(written))
    }

    /// When its write's bytes landed, by its evidence (`Written`); else the latest they may
    /// land: the record was last updated when the engine gave the write up
    /// (`write_result_lost`, ADM-12), and the holder, which outlives the daemon, may still
    /// finish it up to `WRITE_LANDS_WITHIN_MS` later (a review: counted from the give-up, a
    /// restart held a line landing 10 s after it for 50 s only). The time a restart counts
    /// RF-8's turn-start timeout from (ADM-5).
    pub fn written_ms(&self) -> u64 {
        match self.evidence.iter().find(|e| e.step == EvidenceStep::Written) {
            Some(written) => written.at_ms,
            None => self.updated_ms.saturating_add(crate::limits::WRITE_LANDS_WITHIN_MS),
        }
    }

    /// TIME-2: how far `then_ms`, a time this record holds (of the run that registered it),
    /// lies after `now_ms`, a time of the run `run` (negative: before): on the monotonic
    /// clock when the two runs share a boot, else by the wall clocks the two runs read at
    /// their starts (a step between them moves it).
    fn ahead_ms(&self, then_ms: u64, now_ms: u64, run: Option<&crate::run_clock::RunClock>) -> i128 {
        let by_monotonic = run.zip(self.run_clock.as_ref()).and_then(|(now, then)| now.ahead_ms(now_ms, then, then_ms));
        by_monotonic.unwrap_or_else(|| i128::from(then_ms) - i128::from(now_ms))
    }

    /// TIME-2: how long before `now_ms` (a time of the run `run`) `then_ms`, a time this record
    /// holds, was (`ahead_ms`). Never negative.
    pub fn age_ms(&self, then_ms: u64, now_ms: u64, run: Option<&crate::run_clock::RunClock>) -> u64 {
        u64::try_from((-self.ahead_ms(then_ms, now_ms, run)).max(0)).unwrap_or(u64::MAX)
    }

    /// TIME-2: `then_ms`, a time this record holds, as a time of the run `run` (whose time is
    /// `now_ms`), past or still ahead (a restart's wait may count from a moment to come: a
    /// second restart soon after the one that ended a registration counts from where that one
    /// counted the line landed at the latest; taken as its own start, it lost up to 20 s of
    /// the hold, a review).
    pub fn in_run_time(&self, then_ms: u64, now_ms: u64, run: Option<&crate::run_clock::RunClock>) -> u64 {
        u64::try_from((i128::from(now_ms) + self.ahead_ms(then_ms, now_ms, run)).max(0)).unwrap_or(u64::MAX)
    }

    /// TIME-2: `now_ms`, a time of the run `run`, as a time of the run that registered this
    /// record, so that `age_ms` ages it as the record's own times: through the monotonic clock
    /// when the two runs share a boot; as it is when the record has no clock (`age_ms` then
    /// compares the wall clocks the runs read at their starts); none when only `run` has none,
    /// or their boots differ, or the time would lie before the registration (the frames do
    /// not meet: a time of one run read in the other's could make the line look far older
    /// than it is, and nothing held, a review).
    pub fn own_time(&self, now_ms: u64, run: Option<&crate::run_clock::RunClock>) -> Option<u64> {
        let own = match (run, self.run_clock.as_ref()) {
            (Some(now), Some(then)) if now.boot_id == then.boot_id => u64::try_from(now.monotonic_ms(now_ms) - i128::from(then.offset_ms)).ok()?,
            (_, None) => now_ms,
            _ => return None,
        };
        (own >= self.registered_ms).then_some(own)
    }

    /// RF-6: adds a step to the evidence trail. Bounded: the detail is cut at
    /// `MAX_EVIDENCE_DETAIL_BYTES`; once `MAX_EVIDENCE_ENTRIES - 1` steps are kept, only the
    /// terminal step is still added (the others are counted).
    pub fn note(&mut self, at_ms: u64, step: EvidenceStep, detail: impl Into<String>) {
        use crate::limits::{MAX_EVIDENCE_DETAIL_BYTES, MAX_EVIDENCE_ENTRIES};
        let room = match step {
            EvidenceStep::Terminal => MAX_EVIDENCE_ENTRIES,
            _ => MAX_EVIDENCE_ENTRIES - 1,
        };
        if self.evidence.len() >= room {
            self.evidence_dropped = self.evidence_dropped.saturating_add(1);
            return;
        }
        let mut detail = detail.into();
        if detail.len() > MAX_EVIDENCE_DETAIL_BYTES {
            let mut cut = MAX_EVIDENCE_DETAIL_BYTES;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
        }
        self.evidence.push(Evidence { at_ms, step, detail });
        assert!(self.evidence.len() <= MAX_EVIDENCE_ENTRIES);
    }

    /// The receipt of an admission whose write was attempted (accepted or indeterminate):
    /// everything but the evidence comes from this record.
    pub fn written_receipt(
        &self,
        classification: crate::receipt::Classification,
        write_state: crate::receipt::WriteState,
        acknowledged: Option<bool>,
        reason: Option<&str>,
        detail: Option<String>,
    ) -> Receipt {
        assert!(!classification.is_definitive_rejection(), "a written receipt is accepted or indeterminate");
        Receipt {
            schema: crate::receipt::RECEIPT_SCHEMA.to_string(),
            classification,
            prompt_written: true,
            write_state,
            retry_safe: false,
            reply_pending: self.return_mode == ReturnMode::ReturnFinal,
            request_id: Some(self.request_id.clone()),
            agent_id: Some(self.agent_id.clone()),
            incarnation: Some(self.incarnation.clone()),
            operation: self.operation,
            return_mode: self.return_mode,
            correlation_source: self.correlation_source,
            baseline_provider_turn: self.baseline_turn.clone(),
            armed_cursor: self.correlation_source.zip(self.armed.as_ref()).map(|(source, cursor)| match (source, self.armed_event_sequence) {
                (CorrelationSource::AgentApiEvents, Some(sequence)) => format!("ev1.{}.{sequence}", cursor.session.0),
                _ => cursor.render(source),
            }),
            acknowledged,
            replayed: false,
            reason: reason.map(str::to_string),
            detail,
        }
    }

    /// Invariants that hold in every phase; checked on persist and on recovery.
    pub fn assert_consistent(&self) {
        match self.phase {
            Phase::Registered | Phase::Released => {
                assert!(self.terminal.is_none() && self.bound_turn.is_none())
            }
            Phase::Settled => {
                assert_eq!(self.return_mode, ReturnMode::OneWay);
                assert!(self.receipt.is_some() && self.terminal.is_none());
            }
            Phase::Submitted => {
                assert_eq!(self.return_mode, ReturnMode::ReturnFinal);
                assert!(self.armed.is_some() && self.receipt.is_some() && self.bound_turn.is_none());
            }
            Phase::Bound => {
                assert!(self.bound_turn.is_some() && self.terminal.is_none());
            }
            Phase::Terminal => {
                assert_eq!(self.return_mode, ReturnMode::ReturnFinal);
                let terminal = self.terminal.as_ref().expect("RF-5: terminal phase has its event");
                terminal.assert_consistent();
                assert_eq!(terminal.request_id, self.request_id);
            }
        }
        if let Some(receipt) = &self.receipt {
            receipt.assert_consistent();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Phase;

    /// HIST-1: `ALL` lists every phase once, and a stored name is open exactly when its phase
    /// is; three of the six are.
    #[test]
    fn hist_1_open_and_finished_partition_every_phase() {
        let open: Vec<Phase> = Phase::ALL.into_iter().filter(|p| p.is_open()).collect();
        assert_eq!(open, [Phase::Registered, Phase::Submitted, Phase::Bound]);
        let mut names: Vec<&str> = Phase::ALL.iter().map(|p| p.as_str()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Phase::ALL.len());
        assert!(Phase::ALL.iter().all(|p| Phase::is_open_name(p.as_str()) == p.is_open()));
    }
}
