//! MCP `session action=submit` (seed 003, SUB-*): one call that claims a confirmed-idle, empty
//! composer, writes the split sequence under the admission claim (ADM-12), and answers with a
//! receipt whose acknowledgement is independent post-Enter terminal movement, never our own
//! bookkeeping. No durable registry (SUB-6): a submission lives for one call.

use crate::admission::Stage;
use crate::engine::Engine;
use crate::ids::{canonical_uuid, AgentId, Incarnation, RequestId};
use crate::io::{OpId, Output};
use crate::limits::{DELIVERY_TIMEOUT_MS, MAX_INFLIGHT_ADMISSIONS, REFRESH_TIMEOUT_MS};
use crate::observer::{Composer, ObserverSnapshot};
use crate::prompt::{validate_prompt, CLEAR_LINE, PASTE_END, PASTE_START, SUBMIT};
use crate::receipt::{Classification, Operation, ReturnMode, WriteState};
use serde::{Deserialize, Serialize};

/// Versioned schema name carried by every submit receipt.
pub const SUBMIT_RECEIPT_SCHEMA: &str = "wakterm.session-submit.receipt.v1";
/// SUB-4: the acknowledgement wait's default and bounds (seed 003).
pub const SUBMIT_DEFAULT_TIMEOUT_MS: u64 = 3_000;
pub const SUBMIT_MIN_TIMEOUT_MS: u64 = 250;
pub const SUBMIT_MAX_TIMEOUT_MS: u64 = 10_000;
/// SUB-2: the gap between the three writes of the split sequence (seed 003).
pub const SUBMIT_GAP_MS: u64 = 50;
/// SUB-1: how long the engine waits for a split write's outcome (the write's own bound, and
/// its two gaps).
pub const SPLIT_WRITE_TIMEOUT_MS: u64 = DELIVERY_TIMEOUT_MS + SUBMIT_GAP_MS * 2;
/// SUB-4: how long past its own wait the engine waits for the runtime's watch to answer.
pub const WATCH_SLACK_MS: u64 = 2_000;

/// SUB-4: the caller's `timeout_ms`, clamped to 250..=10000 (default 3000).
pub fn clamp_timeout_ms(requested: Option<u64>) -> u64 {
    requested.unwrap_or(SUBMIT_DEFAULT_TIMEOUT_MS).clamp(SUBMIT_MIN_TIMEOUT_MS, SUBMIT_MAX_TIMEOUT_MS)
}

/// One `session action=submit` call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitCommand {
    pub op: OpId,
    /// A fresh UUID the runtime made for this call (the engine has no randomness).
    pub submission_id: String,
    /// Display name, or agent id when `exact_agent_id`.
    pub target: String,
    pub exact_agent_id: bool,
    pub text: String,
    /// The caller's `timeout_ms`, unclamped (SUB-4 clamps it).
    pub timeout_ms: Option<u64>,
}

/// SUB-2: the split write: each step is written whole, with `gap_ms` between steps, in ONE
/// writer call that holds the pane's write lock throughout (no other writer can splice).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitWrite {
    pub steps: Vec<Vec<u8>>,
    pub gap_ms: u64,
}

/// SUB-2: Ctrl-U, then the bracketed paste, then CR.
pub fn submit_steps(text: &str) -> SplitWrite {
    assert!(validate_prompt(text).is_ok(), "submit_steps needs validated text");
    let paste = [PASTE_START, text.as_bytes(), PASTE_END].concat();
    let write = SplitWrite { steps: vec![CLEAR_LINE.to_vec(), paste, SUBMIT.to_vec()], gap_ms: SUBMIT_GAP_MS };
    assert!(write.steps.last().is_some_and(|s| s == SUBMIT), "the Enter is the last step");
    write
}

/// SUB-4: the pane right after the CR was written, captured by the writer under the same lock
/// as the write: the boundary every acknowledgement must lie beyond.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnterBoundary {
    /// The raw-output offset one past the last output byte received when the CR went in.
    pub output_offset: u64,
    /// A digest of the emulated screen at that offset.
    pub screen_digest: String,
    /// The pane's child generation (a respawn changes it).
    pub generation: u64,
    /// How many writes the pane had accepted, this one included.
    pub writes: u64,
    /// The holder process that wrote it (the runtime's `pid.instance`). A holder started later
    /// at the same socket counts its generations, writes and output from 0 again, so only the
    /// same holder's samples compare with this boundary. Empty when unknown.
    #[serde(default)]
    pub holder: String,
}

/// How the split write ended, as the writer can prove it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum SplitOutcome {
    Complete { boundary: EnterBoundary },
    /// Nothing was written, by decision before the first byte (pane closed, process changed,
    /// no observation buffer to prove an acknowledgement with).
    Refused { reason: String },
    /// SUB-1, ADM-4: refused before the first byte because a write reached the pane since the
    /// submit's look (a human's draft, raw input): nothing was written.
    InputSinceLook { detail: String },
    /// The write failed after `bytes_written` bytes (possibly 0, still possibly partial).
    Failed { bytes_written: u64, error: String },
}

impl SplitOutcome {
    /// Refused before the first byte, for whatever reason: nothing reached the pane.
    pub fn wrote_nothing(&self) -> bool {
        matches!(self, SplitOutcome::Refused { .. } | SplitOutcome::InputSinceLook { .. })
    }
}

/// One look at the pane during the acknowledgement wait.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaneSample {
    pub output_end: u64,
    /// A digest of the screen at `output_end`.
    pub screen_digest: String,
    pub generation: u64,
    pub alive: bool,
    pub writes: u64,
    /// The holder that answered (`EnterBoundary::holder`).
    #[serde(default)]
    pub holder: String,
    /// The composer as the screen adapter reads it.
    pub composer: Composer,
    /// Milliseconds since the boundary.
    pub elapsed_ms: u64,
}

/// SUB-4: what one sample proves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Output arrived after the Enter boundary and the screen differs from the boundary's.
    Acknowledged,
    /// Nothing proves a reaction yet.
    Pending,
    /// The process ended or was replaced (its holder too).
    Exited,
    /// Another write reached the pane after ours: movement can no longer be attributed.
    Superseded,
}

/// SUB-4: the acknowledgement rule, one copy for the runtime's watcher, the engine's receipt
/// and the simulator. Movement must be BOTH new output after the boundary AND a screen that
/// differs from the boundary's: a reaction before the boundary is already in the boundary's
/// screen, so it can only ever produce a conservative timeout. And the composer must not hold
/// a draft: a submitted command leaves it, so a screen that shows text still in the composer
/// after the Enter shows a late redraw of what was typed (a stalled TUI drawing its paste
/// after the boundary, its Enter dropped), not a reaction to the Enter (a review acknowledged
/// four such submits, each receipt saying `composer_state: draft`); nor a composer the
/// adapter cannot read ([`composer_left`]).
pub fn judge(boundary: &EnterBoundary, sample: &PaneSample) -> Judgement {
    if sample.holder != boundary.holder || sample.generation != boundary.generation || !sample.alive {
        return Judgement::Exited;
    }
    if sample.writes != boundary.writes {
        return Judgement::Superseded;
    }
    if moved(boundary, sample) && composer_left(sample.composer) {
        return Judgement::Acknowledged;
    }
    Judgement::Pending
}

/// SUB-4: whether the composer, as the screen adapter reads it, shows the command left it:
/// empty, nothing else. A composer the adapter cannot classify proves nothing: a hostile
/// review stalled the TUI while a 30-line command arrived, its Enter was lost, and the late
/// redraw of the pasted text (read as `unknown`) was acknowledged. Nor does a `question`: the
/// adapter reads a draft as one when its first line looks like a numbered option (`1. fix the
/// bug`) or a later line holds a `(y/n)` marker, and such lost Enters were acknowledged too (a
/// second review). A command that opens a dialog is then unacknowledged: conservative.
fn composer_left(composer: Composer) -> bool {
    match composer {
        Composer::Empty => true,
        Composer::Draft | Composer::Unknown | Composer::Question => false,
    }
}

/// SUB-4: the terminal moved after the Enter: new output past the boundary, and another screen.
fn moved(boundary: &EnterBoundary, sample: &PaneSample) -> bool {
    sample.output_end > boundary.output_offset && sample.screen_digest != boundary.screen_digest
}

/// The receipt's one-word summary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmitStatus {
    /// The whole sequence was written and the terminal moved after the Enter.
    Acknowledged,
    /// Nothing was written; retry-safe.
    Rejected,
    /// The whole sequence was written; nothing proves the terminal took it. Not retry-safe.
    Unacknowledged,
    /// The write failed part-way or its result is unknown. Not retry-safe.
    WriteFailed,
}

/// The acknowledgement's evidence: raw-output offsets and the screen after the Enter.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AckEvidence {
    /// The raw-output offset at the Enter boundary.
    pub enter_offset: u64,
    /// The offset of the sample that proved movement.
    pub output_offset: u64,
    /// Output bytes between the two.
    pub bytes_after_enter: u64,
    /// Always true in an acknowledgement: the screen differs from the boundary's.
    pub screen_changed: bool,
    /// Milliseconds from the Enter to the proving sample.
    pub elapsed_ms: u64,
}

/// SUB-5: the one receipt of a submit call (seed 003's fields).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitReceipt {
    pub schema: String,
    pub submission_id: Option<String>,
    pub agent_id: Option<AgentId>,
    pub incarnation: Option<Incarnation>,
    pub status: SubmitStatus,
    /// A rejection's admission word (`busy`, `observer_failure`, ...); null otherwise.
    pub classification: Option<Classification>,
    pub write_state: WriteState,
    pub acknowledged: bool,
    pub evidence: Option<AckEvidence>,
    /// The agent's input epoch: complete writes through wakterm so far. Bookkeeping, never
    /// evidence (seed 003).
    pub turn_epoch: Option<u64>,
    /// The composer: as checked before the write (rejections), or as the screen showed it at
    /// the last sample (after a write); null when never observed.
    pub composer_state: Option<Composer>,
    pub retry_safe: bool,
    /// The last raw-output offset observed (the proving one for an acknowledgement).
    pub output_offset: Option<u64>,
    /// The clamped acknowledgement wait (SUB-4).
    pub timeout_ms: u64,
    pub reason: Option<String>,
    pub detail: Option<String>,
}

impl SubmitReceipt {
    /// INP-1, SUB-5: the receipt of a submit refused before anything was sent (its text over
    /// the limit, which the daemon could not read whole; input the engine's stateless check
    /// refuses), as the engine gives a rejection, under `submission_id`: a fresh id the caller
    /// drew, as the daemon draws one for every submit (it said `null`, where the daemon's
    /// refusal of the same input names one: a review).
    pub fn refused_before_sending(submission_id: RequestId, classification: Classification, reason: &'static str, detail: String, timeout_ms: Option<u64>) -> SubmitReceipt {
        let ending = Ending::rejected(classification, reason, detail, None);
        build_receipt(Some(submission_id.as_str().to_string()), None, None, None, clamp_timeout_ms(timeout_ms), ending)
    }

    /// SUB-5: retry-safe exactly when nothing was written; acknowledged only with evidence
    /// after a complete write.
    pub fn assert_consistent(&self) {
        assert_eq!(self.schema, SUBMIT_RECEIPT_SCHEMA);
        assert_eq!(self.retry_safe, self.write_state == WriteState::NotStarted, "SUB-5");
        assert_eq!(self.status == SubmitStatus::Rejected, self.write_state == WriteState::NotStarted);
        assert_eq!(self.classification.is_some(), self.status == SubmitStatus::Rejected);
        assert_eq!(self.acknowledged, self.status == SubmitStatus::Acknowledged);
        assert_eq!(self.acknowledged, self.evidence.is_some());
        assert_eq!(self.reason.is_none(), self.acknowledged, "every non-acknowledgement says why");
        if let Some(evidence) = &self.evidence {
            assert_eq!(self.write_state, WriteState::Complete);
            assert!(evidence.output_offset > evidence.enter_offset && evidence.screen_changed);
            assert_eq!(evidence.bytes_after_enter, evidence.output_offset - evidence.enter_offset);
            assert_eq!(self.output_offset, Some(evidence.output_offset));
        }
        if self.status == SubmitStatus::Unacknowledged {
            assert_eq!(self.write_state, WriteState::Complete);
        }
        assert!((SUBMIT_MIN_TIMEOUT_MS..=SUBMIT_MAX_TIMEOUT_MS).contains(&self.timeout_ms));
    }
}

/// Where one submission is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum SubmitStep {
    Refreshing { refresh_id: u64 },
    Writing { delivery_id: u64 },
    Watching { watch_id: u64, boundary: EnterBoundary },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Submission {
    pub op: OpId,
    pub text: String,
    pub agent_id: AgentId,
    pub incarnation: Option<Incarnation>,
    pub timeout_ms: u64,
    pub step: SubmitStep,
    pub deadline_ms: u64,
    pub turn_epoch: Option<u64>,
    /// The composer the authoritative check saw (empty, once the write is asked for).
    pub composer_checked: Option<Composer>,
    /// ADM-4, SUB-1: the pane's write count read with the screen of the refresh the check
    /// decided on; the split write names it, so input that reached the pane since (a draft a
    /// human typed, raw `session input`) makes the holder refuse before the Ctrl-U erases it.
    pub pane_writes: Option<u64>,
}

/// What a finished submission reports besides its status.
struct Ending {
    status: SubmitStatus,
    classification: Option<Classification>,
    write_state: WriteState,
    reason: Option<&'static str>,
    detail: Option<String>,
    evidence: Option<AckEvidence>,
    output_offset: Option<u64>,
    composer: Option<Composer>,
}

impl Ending {
    fn rejected(classification: Classification, reason: &'static str, detail: String, composer: Option<Composer>) -> Ending {
        Ending {
            status: SubmitStatus::Rejected,
            classification: Some(classification),
            write_state: WriteState::NotStarted,
            reason: Some(reason),
            detail: Some(detail),
            evidence: None,
            output_offset: None,
            composer,
        }
    }

    fn written(status: SubmitStatus, write_state: WriteState, reason: &'static str, detail: String) -> Ending {
        Ending { status, classification: None, write_state, reason: Some(reason), detail: Some(detail), evidence: None, output_offset: None, composer: None }
    }
}

/// INP-1, then INP-4, for a submit: what refuses it before any state is read, as the engine
/// answers it. The CLI asks it too before it connects (with no daemon running it said
/// `daemon_not_running`).
pub fn submit_input_problem(text: &str, target: &str) -> Option<crate::admission::Blocker> {
    if let Err(problem) = validate_prompt(text) {
        return Some(crate::admission::blocker(Classification::Invalid, problem.reason(), problem.detail()));
    }
    crate::admission::target_problem(target)
}

impl Engine {
    /// SUB-1, SUB-3: validate, resolve, claim (the admission claim, ADM-12), refresh.
    pub(crate) fn on_submit(&mut self, command: SubmitCommand) {
        let timeout_ms = clamp_timeout_ms(command.timeout_ms);
        let Some(id) = canonical_uuid(&command.submission_id).and_then(|id| RequestId::parse(&id).ok()) else {
            let detail = "the runtime gave a submission id that is not a UUID".to_string();
            let ending = Ending::rejected(Classification::InternalFailure, "submission_id_malformed", detail, None);
            return self.reply_submit(command.op, None, None, None, timeout_ms, ending);
        };
        if let Some(problem) = submit_input_problem(&command.text, &command.target) {
            let ending = Ending::rejected(problem.classification, problem.reason, problem.detail, None);
            return self.reply_submit(command.op, Some(id), None, None, timeout_ms, ending);
        }
        let probe = submit_probe(&command);
        let agent_id = match self.resolve(&probe) {
            Ok(agent_id) => agent_id,
            Err(problem) => {
                let ending = Ending::rejected(problem.classification, problem.reason, problem.detail, None);
                return self.reply_submit(command.op, Some(id), None, None, timeout_ms, ending);
            }
        };
        let incarnation = self.agents[&agent_id].facts.incarnation.clone();
        let claimed = self.agents[&agent_id].claim.is_some();
        let blocked = if self.submissions.len() >= MAX_INFLIGHT_ADMISSIONS || self.submissions.contains_key(&id) {
            Some(crate::admission::blocker(Classification::InternalFailure, "capacity_exhausted", "the engine's submission table is full or the id is in use"))
        } else if self.agents[&agent_id].facts.transport != crate::agent::Transport::Pty {
            let detail = "submit types into a terminal composer; this agent has no pane";
            Some(crate::admission::blocker(Classification::Unsupported, "submit_needs_pty", detail))
        } else if claimed {
            Some(crate::admission::blocker(Classification::Busy, "admission_in_progress", "another admission or submit is writing to this agent"))
        } else {
            self.blocker_for_command(&probe, &agent_id, None, Stage::Facts)
        };
        if let Some(problem) = blocked {
            let ending = Ending::rejected(problem.classification, problem.reason, problem.detail, None);
            return self.reply_submit(command.op, Some(id), Some(agent_id), incarnation, timeout_ms, ending);
        }
        let refresh_id = self.fresh_id();
        self.agents.get_mut(&agent_id).expect("resolved").claim = Some(id.clone());
        self.refreshes.insert(refresh_id, id.clone());
        let submission = Submission {
            op: command.op,
            text: command.text,
            agent_id: agent_id.clone(),
            incarnation,
            timeout_ms,
            step: SubmitStep::Refreshing { refresh_id },
            deadline_ms: self.now_ms + REFRESH_TIMEOUT_MS,
            turn_epoch: None,
            composer_checked: None,
            pane_writes: None,
        };
        self.submissions.insert(id, submission);
        self.push(Output::RefreshObserver { refresh_id, agent_id });
    }

    /// SUB-1, SUB-3: the authoritative check on the refreshed view, then the split write.
    pub(crate) fn submit_after_refresh(&mut self, id: &RequestId, snapshot: Option<Result<ObserverSnapshot, String>>) {
        let agent_id = self.submissions[id].agent_id.clone();
        match snapshot {
            Some(Ok(snapshot)) => self.apply_snapshot(&agent_id, snapshot),
            Some(Err(reason)) => {
                if let Some(agent) = self.agents.get_mut(&agent_id) {
                    agent.view = None;
                    agent.refresh_error = Some(reason);
                }
            }
            None => {
                if let Some(agent) = self.agents.get_mut(&agent_id) {
                    agent.view = None; // ADM-3: a refresh that never answered proves nothing
                }
            }
        }
        let composer = self.agents.get(&agent_id).and_then(|a| a.view.as_ref()).map(|v| v.composer);
        let probe = submit_probe_for(&agent_id);
        let problem = self.blocker_for_command(&probe, &agent_id, Some(id), Stage::Authoritative).or_else(|| {
            // SUB-1: submit needs a CONFIRMED empty composer; an admission lets an unknown one
            // pass on the rollout's word (ADM-5), a submit does not.
            (composer == Some(Composer::Unknown)).then(|| {
                let detail = "the screen does not show an empty composer";
                crate::admission::blocker(Classification::ObserverFailure, "composer_unconfirmed", detail)
            })
        });
        if let Some(problem) = problem {
            let ending = Ending::rejected(problem.classification, problem.reason, problem.detail, composer);
            return self.finish_submission(id, ending);
        }
        assert_eq!(composer, Some(Composer::Empty), "SUB-1: only a confirmed empty composer is written to");
        self.submissions.get_mut(id).expect("exists").composer_checked = composer;
        self.start_split_write(id);
    }

    /// SUB-2: the write, under the claim. Bytes may reach the composer from now on, so the
    /// agent counts as awaiting its turn (ADM-5) before the write begins: a turn our write
    /// starts is then seen after the wait began and ends it.
    fn start_split_write(&mut self, id: &RequestId) {
        let delivery_id = self.fresh_id();
        let now_ms = self.now_ms;
        let submission = self.submissions.get_mut(id).expect("exists");
        let write = submit_steps(&submission.text);
        let expect_writes = submission.pane_writes;
        submission.step = SubmitStep::Writing { delivery_id };
        submission.deadline_ms = now_ms + SPLIT_WRITE_TIMEOUT_MS;
        let agent_id = submission.agent_id.clone();
        let incarnation = submission.incarnation.clone().expect("a claimed, checked agent runs a process");
        let agent = self.agents.get_mut(&agent_id).expect("a claimed agent is registered");
        let floor = agent.view_cursor(); // a turn at or before it began before the write
        let hash = crate::prompt::prompt_hash(&submission.text);
        agent.await_prompt(hash.clone(), floor, id, now_ms);
        agent.awaiting_request = None; // a submit's wait, no admission's
        agent.note_own_prompt_asked(&hash, now_ms); // ADM-19
        self.submit_writes.insert(delivery_id, id.clone());
        self.push(Output::SubmitWrite { delivery_id, agent_id, incarnation, write, expect_writes });
    }

    pub(crate) fn on_submit_written(&mut self, delivery_id: u64, outcome: SplitOutcome) {
        let Some(id) = self.submit_writes.remove(&delivery_id) else {
            return self.landed_write(delivery_id, outcome.wrote_nothing()); // late: given up on
        };
        let agent_id = self.submissions[&id].agent_id.clone();
        self.release_claim(&agent_id, &id);
        match outcome {
            SplitOutcome::Refused { reason } => {
                let checked = self.submissions[&id].composer_checked; // nothing was written: still as checked
                self.submit_wrote_nothing(&agent_id, &id, Ending::rejected(Classification::Unavailable, "pane_refused_write", reason, checked));
            }
            SplitOutcome::InputSinceLook { detail } => {
                // Input came since the check: the composer is no longer known to be empty.
                self.submit_wrote_nothing(&agent_id, &id, Ending::rejected(Classification::Busy, "input_since_look", detail, None));
            }
            SplitOutcome::Failed { bytes_written, error } => {
                self.advance_epoch(&id);
                let state = if bytes_written > 0 { WriteState::Partial } else { WriteState::Failed };
                self.finish_submission(&id, Ending::written(SubmitStatus::WriteFailed, state, "write_error", error));
            }
            SplitOutcome::Complete { boundary } => {
                self.advance_epoch(&id);
                let watch_id = self.fresh_id();
                let now_ms = self.now_ms;
                let submission = self.submissions.get_mut(&id).expect("exists");
                let wait_ms = submission.timeout_ms;
                submission.deadline_ms = now_ms + wait_ms + WATCH_SLACK_MS;
                submission.step = SubmitStep::Watching { watch_id, boundary: boundary.clone() };
                self.submit_watches.insert(watch_id, id.clone());
                self.push(Output::WatchPane { watch_id, agent_id, boundary, wait_ms });
            }
        }
    }

    /// SUB-3: a split write refused before its first byte: nothing reached the pane, so no
    /// turn is awaited; the submission ends with `ending` (a rejection).
    fn submit_wrote_nothing(&mut self, agent_id: &AgentId, id: &RequestId, ending: Ending) {
        if let Some(agent) = self.agents.get_mut(agent_id) {
            agent.prompt_not_written(id); // a submit needs an agent with no wait (ADM-5)
        }
        self.finish_submission(id, ending);
    }

    /// SUB-4: the watch's last sample decides; an error while gathering it is no evidence.
    pub(crate) fn on_pane_watched(&mut self, watch_id: u64, sample: Result<PaneSample, String>) {
        let Some(id) = self.submit_watches.remove(&watch_id) else { return }; // late: timed out
        let SubmitStep::Watching { boundary, .. } = self.submissions[&id].step.clone() else {
            unreachable!("a watch belongs to a watching submission")
        };
        let ending = match sample {
            Err(error) => Ending::written(SubmitStatus::Unacknowledged, WriteState::Complete, "observation_lost", error),
            Ok(sample) => ending_for_sample(&boundary, &sample),
        };
        self.finish_submission(&id, ending);
    }

    /// Deadlines of submission steps (the runtime did not answer in time).
    pub(crate) fn expire_submissions(&mut self) {
        let due: Vec<RequestId> =
            self.submissions.iter().filter(|(_, s)| s.deadline_ms <= self.now_ms).map(|(id, _)| id.clone()).collect();
        for id in due {
            match self.submissions[&id].step.clone() {
                SubmitStep::Refreshing { refresh_id } => {
                    self.refreshes.remove(&refresh_id);
                    self.submit_after_refresh(&id, None);
                }
                SubmitStep::Writing { delivery_id } => {
                    // The caller is answered at its bound; the claim waits for the write's end.
                    self.submit_writes.remove(&delivery_id);
                    self.hold_lost_write(delivery_id, self.submissions[&id].agent_id.clone(), &id);
                    self.advance_epoch(&id);
                    let detail = "the pane write did not report its result in time".to_string();
                    self.finish_submission(&id, Ending::written(SubmitStatus::WriteFailed, WriteState::Unknown, "write_result_lost", detail));
                }
                SubmitStep::Watching { watch_id, .. } => {
                    self.submit_watches.remove(&watch_id);
                    let detail = "the pane watch did not answer in time".to_string();
                    self.finish_submission(&id, Ending::written(SubmitStatus::Unacknowledged, WriteState::Complete, "observation_lost", detail));
                }
            }
        }
    }

    /// SUB-2: the agent's input epoch advances with every write that may have reached it, and
    /// the ADM-5 wait opened at the write's start gets its probe. The wait then runs from now:
    /// the write's bytes may have landed as late as its outcome (a lost one, as late as the
    /// engine gave up on it: after a stall every deadline fires as the delayed write starts),
    /// as an admission's does (`mark_written`).
    fn advance_epoch(&mut self, id: &RequestId) {
        let agent_id = self.submissions[id].agent_id.clone();
        let now_ms = self.now_ms;
        let epoch = self.agents.get_mut(&agent_id).map(|agent| {
            agent.input_epoch += 1;
            agent.written_until(now_ms);
            agent.input_epoch
        });
        self.submissions.get_mut(id).expect("exists").turn_epoch = epoch;
    }

    /// ADM-12: the claim covers the readiness check and the split write, no longer (a lost
    /// write's until its late outcome): a peer arriving during the acknowledgement wait meets
    /// `awaiting_turn_start` instead.
    fn finish_submission(&mut self, id: &RequestId, ending: Ending) {
        let submission = self.submissions.remove(id).expect("finishing a known submission");
        self.release_claim(&submission.agent_id, id);
        let epoch = submission.turn_epoch.or_else(|| self.agents.get(&submission.agent_id).map(|a| a.input_epoch));
        let receipt = build_receipt(Some(id.to_string()), Some(submission.agent_id), submission.incarnation, epoch, submission.timeout_ms, ending);
        self.push(Output::SubmitReceipt { op: submission.op, receipt });
    }

    fn reply_submit(&mut self, op: OpId, id: Option<RequestId>, agent_id: Option<AgentId>, incarnation: Option<Incarnation>, timeout_ms: u64, ending: Ending) {
        let epoch = agent_id.as_ref().and_then(|a| self.agents.get(a)).map(|a| a.input_epoch);
        let receipt = build_receipt(id.map(|id| id.to_string()), agent_id, incarnation, epoch, timeout_ms, ending);
        self.push(Output::SubmitReceipt { op, receipt });
    }

    /// ADM-12: the submission holding this agent's claim: one refreshing or writing (a lost
    /// write's claim is `landing_claim_of`).
    pub(crate) fn submission_claim_of(&self, agent_id: &AgentId) -> Option<RequestId> {
        self.submissions
            .iter()
            .find(|(_, s)| &s.agent_id == agent_id && matches!(s.step, SubmitStep::Refreshing { .. } | SubmitStep::Writing { .. }))
            .map(|(id, _)| id.clone())
    }

    /// In-flight submissions (for tests and the simulator's quiescence check).
    pub fn submissions_in_flight(&self) -> usize {
        self.submissions.len()
    }
}

/// SUB-4, SUB-5: a final sample's verdict as a receipt ending.
fn ending_for_sample(boundary: &EnterBoundary, sample: &PaneSample) -> Ending {
    let judged = judge(boundary, sample);
    let (reason, detail) = match judged {
        Judgement::Acknowledged => {
            let evidence = AckEvidence {
                enter_offset: boundary.output_offset,
                output_offset: sample.output_end,
                bytes_after_enter: sample.output_end - boundary.output_offset,
                screen_changed: true,
                elapsed_ms: sample.elapsed_ms,
            };
            return Ending {
                status: SubmitStatus::Acknowledged,
                classification: None,
                write_state: WriteState::Complete,
                reason: None,
                detail: None,
                evidence: Some(evidence),
                output_offset: Some(sample.output_end),
                composer: Some(sample.composer),
            };
        }
        // The receipt said "did not move" of a terminal that did (a review).
        // (Pending after movement: the composer did not read empty.)
        Judgement::Pending if moved(boundary, sample) => (
            "composer_not_left",
            "the terminal moved after the Enter, but the composer does not read empty (it holds text, a question, or cannot be read): the command may still be in it",
        ),
        Judgement::Pending => ("no_post_enter_movement", "the terminal did not move after the Enter before the deadline"),
        Judgement::Exited => ("session_exited", "the agent's process ended or was replaced during the wait"),
        Judgement::Superseded => ("superseded", "another write reached the pane after the Enter; movement cannot be attributed"),
    };
    let mut ending = Ending::written(SubmitStatus::Unacknowledged, WriteState::Complete, reason, detail.to_string());
    ending.output_offset = Some(sample.output_end);
    ending.composer = Some(sample.composer);
    ending
}

fn build_receipt(
    submission_id: Option<String>,
    agent_id: Option<AgentId>,
    incarnation: Option<Incarnation>,
    turn_epoch: Option<u64>,
    timeout_ms: u64,
    ending: Ending,
) -> SubmitReceipt {
    let receipt = SubmitReceipt {
        schema: SUBMIT_RECEIPT_SCHEMA.to_string(),
        submission_id,
        agent_id,
        incarnation,
        status: ending.status,
        classification: ending.classification,
        write_state: ending.write_state,
        acknowledged: ending.status == SubmitStatus::Acknowledged,
        evidence: ending.evidence,
        turn_epoch,
        composer_state: ending.composer,
        retry_safe: ending.write_state == WriteState::NotStarted,
        output_offset: ending.output_offset,
        timeout_ms,
        reason: ending.reason.map(str::to_string),
        detail: ending.detail,
    };
    receipt.assert_consistent();
    receipt
}

/// The admission checks a submit meets: those of an immediate one-way admission by the
/// current incarnation that must find the agent idle (turn, composer, pending prompt).
fn submit_probe(command: &SubmitCommand) -> crate::io::AdmitCommand {
    crate::io::AdmitCommand {
        op: command.op,
        operation: Operation::Admit,
        target: command.target.clone(),
        exact_agent_id: command.exact_agent_id,
        incarnation: None,
        request_id: String::new(),
        prompt: String::new(),
        paste_mode: crate::prompt::PasteMode::Bracketed,
        return_mode: ReturnMode::OneWay,
        final_timeout_ms: 0,
        generated_id: false,
        share_prompt: false,
        write_nonce: 0, // a probe writes nothing
        no_steer: false, // an admission never steers
    }
}

fn submit_probe_for(agent_id: &AgentId) -> crate::io::AdmitCommand {
    let command = SubmitCommand {
        op: OpId(0),
        submission_id: String::new(),
        target: agent_id.to_string(),
        exact_agent_id: true,
        text: String::new(),
        timeout_ms: None,
    };
    submit_probe(&command)
}
