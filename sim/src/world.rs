//! Ground truth and simulated devices: the Codex TUI (composer, bracketed paste, turns), the
//! provider's record (a rollout file) and the observer that tails it, the processes behind the
//! panes, and the durable store model. The holder processes (panes, Codex) survive a daemon
//! crash; the observer's read state belongs to the daemon and is reset, except what it saved as
//! its durable checkpoint (OBS-1..OBS-3): a restarted daemon's observer proves the rollout is
//! the one checkpointed and reads from there. While the daemon is down the rollout may be
//! replaced, or the agent's pid reused by another process. The managed agent (a Codex
//! app-server and its holder's notification stream, MGD-*) is `app_server.rs`; the hooks here
//! (provider tick, liveness, tail, snapshot, resume) dispatch to it.

use crate::mutant::Mutant;
use crate::oracle::{Oracle, TurnTruth};
use crate::store_model::StoreTables;
use madsim::rand::{thread_rng, Rng};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;
use wakterm_engine::pane_look::LastInput;
use wakterm_engine::{
    prompt::prompt_hash, AgentFacts, AgentId, Composer, Harness, Incarnation, ObserverEvent, ObserverSnapshot, ObserverStatus,
    PlanStatus, PlanStep, ProcessIdentity, RequestRecord, ReturnMode, SessionId, Transport, TurnId, TurnState,
};
use wakterm_runtime::driver::DriverMsg;
use wakterm_runtime::observer_checkpoint::{ObserverCheckpoint, CHECKPOINT_INTERVAL_MS, CHECKPOINT_VERSION};
use wakterm_runtime::rollout_tail::TailCursor;

pub type Shared = Arc<Mutex<World>>;

/// Every fault class the run must see fire at least once over many seeds.
pub const FAULT_CLASSES: &[&str] = &[
    "pane.partial_write",
    "pane.write_error",
    "pane.error_after_complete",
    "pane.result_late",
    "pane.write_late",
    "pane.write_after_call_bound",
    "pane.start_deadline_refused",
    "pane.refused_stale",
    "process.exit",
    "process.replaced",
    "process.pid_reuse",
    "provider.bracketed_paste",
    "provider.raw_paste_kept",
    "provider.whitespace_trimmed",
    "provider.busy_turn",
    "provider.steering",
    "provider.aborted_turn",
    "provider.late_final",
    "provider.fast_turn",
    "provider.duplicate_final",
    "provider.human_turn",
    "provider.human_draft",
    "provider.question",
    "observer.file_lost",
    "observer.truncated",
    "observer.replaced",
    "observer.rewritten",
    "observer.record_too_large",
    "observer.delayed",
    "observer.refresh_slow",
    "observer.poll_before_resume",
    "observer.first_look_past_armed_cursor",
    // MGD-*: the managed agent's app-server and its holder's stream (`app_server.rs`).
    "app_server.stream_dropped",
    "app_server.notifications_evicted",
    "app_server.reply_lost",
    "app_server.exit_mid_turn",
    "app_server.exit_after_reply",
    "app_server.exit_before_reply",
    "app_server.holder_restart",
    "app_server.busy_steer",
    "app_server.foreign_thread",
    "app_server.delta_burst",
    "app_server.huge_final",
    "app_server.line_too_long",
    "app_server.thread_reproved",
    "app_server.resume_after_holder_restart",
    "app_server.mark_behind_respawn",
    "app_server.server_request",
    "app_server.resume_foreign_session",
    "app_server.resume_full_history",
    "app_server.turn_start_refused",
    "app_server.slow_reader",
    "app_server.stalled_past_turn_start_timeout",
    "app_server.slow_turn_start",
    "liveness.unknown",
    "liveness.silent_at_start",
    "liveness.silent_past_startup_bound",
    "monitor.wake_lost",
    "monitor.watch_incomplete",
    "monitor.watch_lost_while_set",
    "store.commit_failed",
    "store.end_commit_failed",
    "store.outage",
    "store.group_failed",
    "store.slow_commit",
    "store.stalled_commit",
    "store.lookup_failed",
    "store.seed_failed",
    "crash.random",
    "crash.after_commit",
    "crash.after_pane_write",
    "crash.after_checkpoint",
    "crash.between_events_and_checkpoint",
    "crash.finished_past_unread_line",
    "crash.within_the_minute",
    "crash.after_stalled_registration_write",
    "crash.after_acceptance_durable",
    "crash.after_events_past_a_failed_end",
    "crash.after_a_write_below_the_marks_turn",
    "checkpoint.older_than_file",
    "checkpoint.armed_before",
    "checkpoint.file_replaced_while_down",
    "checkpoint.pid_reused_while_down",
    "checkpoint.cut_below_mark_while_down",
    "checkpoint.cut_to_the_mark_while_down",
    "checkpoint.final_below_the_mark_while_down",
    "checkpoint.rollout_removed_while_down",
    "checkpoint.rollout_of_another_cwd_while_down",
    "checkpoint.rollout_of_another_session_while_down",
    "retention.pruned",
    "retention.by_size",
    "subscriber.away",
    "retention.cursor_too_old",
    "clock.jump",
    "clock.wall_step",
    "clock.wall_step_days",
    "clock.back_while_down",
    "clock.forward_while_down",
    "clock.deadline",
    "caller.retry_same_id",
    "caller.claims_generated_id",
    "caller.forged_turn_start_id",
    "caller.replayed_turn_start_id",
    "caller.no_steer_send",
    "caller.invalid_replay",
    "caller.changed_input",
    "caller.cancel",
    "caller.join_burst",
    "caller.other_spelling",
    "caller.chain",
    "caller.eager_next",
    // SUB-*: the pane behind a submit (seed 003).
    "terminal.never_reacts",
    "terminal.reacts_before_enter",
    "terminal.output_without_change",
    "terminal.stalled_echo",
    "terminal.unclassified_composer",
    "terminal.late_draw",
    "terminal.draft_races_submit",
    "terminal.keys_in_flight",
    "terminal.slow_turn_start",
    "terminal.queued_behind_start",
    "monitor.enter_push_late",
    "monitor.slow_wake",
    "caller.same_text_human",
    "caller.same_text_request",
    "monitor.step_bound",
    "pane.input_since_look",
    "submit.exit_mid_wait",
    "submit.split_write_fails",
    "submit.watch_lost",
    "submit.foreign_write",
    "submit.holder_replaced_mid_wait",
    "observer.composer_unknown",
    "observer.screen_push_late",
    "monitor.screen_push_lost",
    "observer.refresh_after_snapshot",
    "caller.submit_pair",
    "caller.submit_races_admission",
    "caller.send_during_submit_wait",
    "caller.after_call_bound",
    "holder.screen_stalled",
    "liveness.rebinding_at_start",
];

#[derive(Default)]
pub struct Counters {
    pub faults: BTreeMap<&'static str, u64>,
    pub receipts: BTreeMap<String, u64>,
    pub terminals: BTreeMap<String, u64>,
    /// EV-*: agent events a subscriber got, by kind.
    pub events: BTreeMap<&'static str, u64>,
    pub requests: u64,
}

impl Counters {
    pub fn fault(&mut self, name: &'static str) {
        debug_assert!(FAULT_CLASSES.contains(&name) || name.starts_with("note."), "{name}");
        *self.faults.entry(name).or_default() += 1;
    }
}

/// The per-seed trace: one line per step; its hash proves determinism.
#[derive(Default)]
pub struct Trace {
    pub lines: Vec<String>,
    pub hash: u64,
    pub t0_ms: u64,
}

impl Trace {
    pub fn push(&mut self, line: String) {
        let t = wakterm_runtime::driver::now_ms().saturating_sub(self.t0_ms);
        let line = format!("{t:>7} {line}");
        let mut h = if self.hash == 0 { 0xcbf2_9ce4_8422_2325 } else { self.hash };
        for b in line.bytes().chain(std::iter::once(b'\n')) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.hash = h;
        self.lines.push(line);
    }
}

/// Fault rates chosen by the seed (0 disables a class for this seed).
#[derive(Clone, Debug)]
pub struct FaultPlan {
    pub pane_error: f64,
    pub pane_late: f64,
    /// ADM-12: the holders predate `start_by_ms` (they outlived a daemon upgrade): they begin
    /// a write whenever they come to it. Newer holders refuse one they come to after the
    /// engine's deadline for its result (`pane.start_deadline_refused`).
    pub old_holders: bool,
    pub commit_fail: f64,
    pub commit_slow: f64,
    pub refresh_slow: f64,
    /// OBS-3: the engine's startup resume of an agent runs late, so the observer loop's (or a
    /// refresh's) first look at the agent comes before it (the runtime's monitor races it).
    pub resume_late: f64,
    pub crash_point: f64,
    /// A crash just after an observer checkpoint commits (before the engine's own commits of
    /// the events it covers): the restart must replay what lies between (OBS-2).
    pub crash_after_checkpoint: f64,
    pub abort: f64,
    pub late_final: f64,
    /// A turn that starts and completes within a few milliseconds of the write that opened it
    /// (all its records readable while the holder's answer to the write is still on its way).
    pub fast_turn: f64,
    pub duplicate_final: f64,
    pub max_crashes: u32,
    /// How often a step of the fault phase that issues no call leaves the humans and the
    /// faults alone: a calm seed lets a conversation (`caller.chain`) run turn after turn, with
    /// no human turn to end a wait the engine should have ended itself.
    pub calm: f64,
    /// EV-9: the daemon's `--retain-events` (0: retention off), far below the default so a
    /// run prunes what its subscriber may not have read yet.
    pub retain_events: u64,
    /// EV-9: the daemon's size bound in bytes of event JSON (0: none), tiny as `retain_events`.
    pub retain_bytes: u64,
    /// SUB-4: the harness takes a submit's CR and never moves the screen or the output.
    pub never_reacts: f64,
    /// SUB-4: the harness's whole reaction to a submit lands before the Enter boundary is
    /// captured (nothing moves after it but what a turn's end may print).
    pub reacts_before_enter: f64,
    /// SUB-4: the process exits while the acknowledgement is watched.
    pub exit_mid_wait: f64,
    /// SUB-2: a step of the split write fails (after some bytes, before any, or the holder's
    /// answer is lost after a complete write).
    pub split_fail: f64,
    /// SUB-4: the watch cannot read the pane (answers `Err`) or never answers.
    pub watch_lost: f64,
    /// SUB-4: another writer (`session action=input`, raw) writes around a submit.
    pub foreign_write: f64,
    /// MGD-4: the managed agent's holder ring (scaled down so that unread notifications are
    /// evicted in some seeds: while the daemon is down, or by a burst between two reads).
    pub ring_bytes: usize,
    /// A turn's answer streamed in a burst of deltas.
    pub burst: f64,
    /// A final answer over the (scaled) line bound.
    pub huge_line: f64,
    /// MGD-3: the holder's answer to a `turn/start` write never reaches the engine.
    pub reply_lost: f64,
    /// MGD-6: a turn asks the client a server request (an approval) and waits for the answer.
    pub server_request: f64,
    /// MON-1: per look of the observer loop at an attached PTY agent, the chance that the
    /// sessions watch misses its wakes from then on (until the tick sets it again).
    pub wake_lost: f64,
    /// MON-1: per look of the observer loop at an attached PTY agent, the chance that its
    /// sessions watch becomes incomplete (a subdirectory it could not watch) until a retry
    /// sets it whole.
    pub watch_incomplete: f64,
    /// MON-1: per look of the observer loop at an attached PTY agent, the chance that its
    /// sessions directory is removed (and made again) while the daemon sets its watch, the
    /// try's walk meeting the loss before the try answers: no watch is set, and the tick
    /// sets it again within a second.
    pub watch_lost_while_set: f64,
    /// ADM-4: a human's draft is drawn 5-400 ms after its keys reached the pane (a slow or
    /// busy TUI), or with the child's next output, whichever comes first.
    pub late_draw: f64,
    /// MON-4: the records one look of the observer loop reads at most (0: no bound), as the
    /// runtime's monitor stops at `MONITOR_STEP_BYTES`; not a fault, the runtime's own rule,
    /// so it holds after the heal too.
    pub step_records: usize,
    /// SUB-4: the screen adapter cannot classify a composer of several lines (`unknown`), as
    /// Codex's does for a tall paste (`terminal.unclassified_composer`).
    pub unclassified_composer: bool,
    /// SUB-1, ADM-4: as a submit's split write is asked for, a human types a draft into the
    /// pane (between the submit's look and its write, or just after it), as a review did.
    pub draft_races_submit: f64,
    /// ADM-4: a human's write is counted by the holder (before its first byte) 1-30 ms before
    /// its bytes land (a holder thread preempted, a PTY full for a moment).
    pub keys_in_flight: f64,
    /// ADM-5, REC-1: per commit, the chance it stalls 15-40 s (an fsync held up by a loaded
    /// disk): a registration's write then lands long after its registration, and a restart
    /// that ends it may come late in its minute (`store.stalled_commit`). With it, the daemon
    /// crashes right after such a registration's write (`crash.after_stalled_registration_write`),
    /// and a daemon started with a registration left unfinished crashes again within the minute
    /// (`crash.within_the_minute`), so a second restart meets the registration the first one
    /// ended (`RequestRecord::write_unknown`, aged from that start since 2026-12-05). Honest
    /// limit: the whole chain (and a slow reader's line still unread at the second restart's
    /// write) is too rare: a restart glue that dropped `write_unknown_since_ms` was not caught
    /// in 40,000 seeds; the engine test holds it.
    pub commit_stall: f64,
    /// ADM-5 (PTY): per submitted prompt into an idle TUI, the chance that Codex takes it
    /// but starts its turn (its records) only 100 ms - 7 s later (a first turn waiting for
    /// its MCP servers to start, a loaded machine). Enters meanwhile join that turn: a prompt
    /// written then races into the turn of the one before (`terminal.slow_turn_start`; the
    /// oracle's `Interleaved` check, `Oracle::on_prompt_over_unread`).
    pub slow_turn_start: f64,
}

impl FaultPlan {
    pub fn draw() -> FaultPlan {
        let mut rng = thread_rng();
        let mut rate = |p_on: f64, hi: f64| if rng.gen_bool(p_on) { rng.gen_range(0.0..hi) } else { 0.0 };
        FaultPlan {
            pane_error: rate(0.6, 0.35),
            pane_late: rate(0.4, 0.12),
            old_holders: false,
            commit_fail: rate(0.5, 0.15),
            commit_slow: rate(0.5, 0.2),
            refresh_slow: rate(0.4, 0.15),
            resume_late: rate(0.5, 0.9),
            crash_point: rate(0.6, 0.08),
            crash_after_checkpoint: rate(0.8, 0.6),
            abort: rate(0.6, 0.35),
            late_final: rate(0.5, 0.3),
            fast_turn: rate(0.5, 0.5),
            duplicate_final: rate(0.5, 0.4),
            max_crashes: thread_rng().gen_range(0..5),
            calm: if thread_rng().gen_bool(0.4) { thread_rng().gen_range(0.7..0.98) } else { 0.0 },
            retain_events: if thread_rng().gen_bool(0.3) { thread_rng().gen_range(15..300) } else { 0 },
            retain_bytes: if thread_rng().gen_bool(0.3) { thread_rng().gen_range(2_000..60_000) } else { 0 },
            never_reacts: 0.0,
            reacts_before_enter: 0.0,
            exit_mid_wait: 0.0,
            split_fail: 0.0,
            watch_lost: 0.0,
            foreign_write: 0.0,
            ring_bytes: 0,
            burst: 0.0,
            huge_line: 0.0,
            reply_lost: 0.0,
            server_request: 0.0,
            wake_lost: 0.0,
            watch_incomplete: 0.0,
            watch_lost_while_set: 0.0,
            late_draw: 0.0,
            step_records: 0,
            unclassified_composer: false,
            draft_races_submit: 0.0,
            keys_in_flight: 0.0,
            commit_stall: 0.0,
            slow_turn_start: 0.0,
        }
        .with_submit_faults()
        .with_app_server_faults()
        .with_holder_version()
        .with_monitor_faults()
        .with_screen_faults()
        .with_race_faults()
        .with_watch_set_faults()
        .with_stall_faults()
        .with_slow_start_faults()
    }

    /// A TUI slow to start a taken prompt's turn (ADM-5), drawn last for the same reason.
    fn with_slow_start_faults(mut self) -> FaultPlan {
        self.slow_turn_start = if thread_rng().gen_bool(0.5) { thread_rng().gen_range(0.0..0.4) } else { 0.0 };
        self
    }

    /// A commit stalled for seconds (ADM-5, REC-1), drawn last for the same reason.
    fn with_stall_faults(mut self) -> FaultPlan {
        self.commit_stall = if thread_rng().gen_bool(0.3) { thread_rng().gen_range(0.0..0.03) } else { 0.0 };
        self
    }

    /// The sessions watch set off the reactor (MON-1), drawn last for the same reason.
    fn with_watch_set_faults(mut self) -> FaultPlan {
        self.watch_lost_while_set = if thread_rng().gen_bool(0.5) { thread_rng().gen_range(0.0..0.03) } else { 0.0 };
        self
    }

    /// Keys racing a look or a submit's write (ADM-4, SUB-1), drawn last for the same reason.
    fn with_race_faults(mut self) -> FaultPlan {
        self.draft_races_submit = if thread_rng().gen_bool(0.5) { thread_rng().gen_range(0.0..0.5) } else { 0.0 };
        self.keys_in_flight = if thread_rng().gen_bool(0.5) { thread_rng().gen_range(0.0..0.5) } else { 0.0 };
        self
    }

    /// The screen adapter's limits (SUB-4), drawn last so the other rates of a seed are those
    /// it drew before this class existed.
    fn with_screen_faults(mut self) -> FaultPlan {
        self.unclassified_composer = thread_rng().gen_bool(0.5);
        self
    }

    /// The monitor's rates (MON-1).
    fn with_monitor_faults(mut self) -> FaultPlan {
        let mut rng = thread_rng();
        self.wake_lost = if rng.gen_bool(0.5) { rng.gen_range(0.0..0.05) } else { 0.0 };
        self.watch_incomplete = if rng.gen_bool(0.5) { rng.gen_range(0.0..0.03) } else { 0.0 };
        self.late_draw = if rng.gen_bool(0.5) { rng.gen_range(0.0..0.8) } else { 0.0 };
        self.step_records = if rng.gen_bool(0.5) { rng.gen_range(1..=3) } else { 0 };
        self
    }

    /// Old holders matter only where writes stall (`pane_late`).
    fn with_holder_version(mut self) -> FaultPlan {
        self.old_holders = self.pane_late > 0.0 && thread_rng().gen_bool(0.4);
        self
    }

    /// The managed agent's rates (MGD-*).
    fn with_app_server_faults(mut self) -> FaultPlan {
        let mut rng = thread_rng();
        self.ring_bytes = if rng.gen_bool(0.35) { rng.gen_range(2_500..8_000) } else { 64 * 1024 };
        let mut rate = |p_on: f64, hi: f64| if rng.gen_bool(p_on) { rng.gen_range(0.0..hi) } else { 0.0 };
        self.burst = rate(0.4, 0.4);
        self.huge_line = rate(0.2, 0.1);
        self.reply_lost = rate(0.3, 0.15);
        self.server_request = rate(0.4, 0.4);
        self
    }

    /// The submit fault rates (SUB-*).
    fn with_submit_faults(mut self) -> FaultPlan {
        let mut rng = thread_rng();
        let mut rate = |p_on: f64, hi: f64| if rng.gen_bool(p_on) { rng.gen_range(0.0..hi) } else { 0.0 };
        self.never_reacts = rate(0.4, 0.4);
        self.reacts_before_enter = rate(0.4, 0.5);
        self.exit_mid_wait = rate(0.4, 0.3);
        self.split_fail = rate(0.5, 0.4);
        self.watch_lost = rate(0.4, 0.25);
        self.foreign_write = rate(0.5, 0.7);
        self
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub ticks: u64,
}

impl Proc {
    pub fn incarnation(self) -> Incarnation {
        Incarnation(format!("inc-{}-{}", self.pid, self.ticks))
    }
    pub fn identity(self) -> ProcessIdentity {
        ProcessIdentity { pid: self.pid, start_time_ticks: self.ticks }
    }
}

#[derive(Clone, Debug)]
pub struct Record {
    pub position: u64,
    pub visible_at_ms: u64,
    pub event: ObserverEvent,
}

/// One provider record: a rollout file (byte positions) or an app-server stream (sequences).
#[derive(Clone, Debug)]
pub struct Session {
    pub id: SessionId,
    pub base: u64,
    /// The turn state the record starts with (history copied into a new file).
    pub header: TurnState,
    pub records: Vec<Record>,
    pub next_position: u64,
    /// The file's identity (device and inode): another file at the same path has another.
    pub file: u64,
    /// The processes (incarnations) that wrote into it: the one that created it, and one that
    /// resumed it (a pid reused while the daemon was down).
    pub writers: Vec<Incarnation>,
}

impl Session {
    /// Where the last record visible now ends (the file's readable length).
    fn visible_end(&self, now: u64) -> u64 {
        self.records.iter().take_while(|r| r.visible_at_ms <= now).last().map_or(self.base, |r| r.position)
    }

    /// The index of the first record ending after `position`.
    fn first_after(&self, position: u64) -> usize {
        self.records.partition_point(|r| r.position <= position)
    }

    /// The sim's stand-in for the sha256 of the 8 KiB before `offset` (`TailCursor`): a hash
    /// of the records ending in that window, contents included. None when `offset` is not a
    /// record boundary of the file.
    fn window_hash(&self, offset: u64) -> Option<[u8; 32]> {
        if offset != self.base && self.records.binary_search_by_key(&offset, |r| r.position).is_err() {
            return None;
        }
        let from = offset.saturating_sub(8192);
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ offset;
        {
            let mut mix = |bytes: &[u8]| {
                for b in bytes.iter().chain(b"\n") {
                    h ^= u64::from(*b);
                    h = h.wrapping_mul(0x0100_0000_01b3);
                }
            };
            for record in &self.records[self.first_after(from)..self.first_after(offset)] {
                mix(&record.position.to_le_bytes());
                match &record.event {
                    ObserverEvent::TurnStarted { turn, .. } => mix(turn.0.as_bytes()),
                    ObserverEvent::UserMessage { turn, prompt_hash, .. } => {
                        mix(turn.as_ref().map_or(&b""[..], |t| t.0.as_bytes()));
                        mix(prompt_hash.as_bytes());
                    }
                    ObserverEvent::TurnCompleted { turn, final_message, .. } => {
                        mix(turn.0.as_bytes());
                        mix(final_message.as_deref().unwrap_or_default().as_bytes());
                    }
                    ObserverEvent::TurnAborted { turn, .. } => mix(turn.as_ref().map_or(&b"-"[..], |t| t.0.as_bytes())),
                    ObserverEvent::AgentMessage { turn, text, .. } => {
                        mix(turn.as_ref().map_or(&b""[..], |t| t.0.as_bytes()));
                        mix(text.as_bytes());
                    }
                    ObserverEvent::PlanUpdated { turn, plan, .. } => {
                        mix(turn.as_ref().map_or(&b""[..], |t| t.0.as_bytes()));
                        for step in plan {
                            mix(step.step.as_bytes());
                        }
                    }
                    ObserverEvent::Attached { .. }
                    | ObserverEvent::SessionLost { .. }
                    | ObserverEvent::ProcessExited { .. }
                    | ObserverEvent::RequestRefused { .. }
                    | ObserverEvent::TurnAccepted { .. } => {}
                }
            }
        }
        let mut hash = [0u8; 32];
        hash[..8].copy_from_slice(&h.to_le_bytes());
        Some(hash)
    }

    /// OBS-2's proof (`RolloutTail::resume`): the same file (identity), at least as long as
    /// the checkpoint, with the same window before it.
    fn prove(&self, now: u64, tail: &TailCursor) -> Result<(), String> {
        if tail.ino != self.file {
            return Err(format!("replaced: file {} is not the checkpointed {}", self.file, tail.ino));
        }
        let end = self.visible_end(now);
        if end < tail.offset {
            return Err(format!("truncated: the file ends at {end}, before the checkpoint {}", tail.offset));
        }
        if self.window_hash(tail.offset) != Some(tail.checkpoint_hash) {
            return Err(format!("rewritten: the window before {} differs", tail.offset));
        }
        Ok(())
    }
}

/// The reasons a startup resume's `SessionLost` gives (REC-2, OBS-3).
const RESUME_LOST_DISPROVED: &str = wakterm_engine::REWRITTEN_WHILE_DOWN;
const RESUME_LOST_NO_PROCESS: &str = "no process runs behind the agent";
const RESUME_LOST_GONE: &str = "the armed session is gone";

/// The rollout path of a session (one file per session; a replacement keeps the path).
pub fn rollout_path(session: &SessionId) -> PathBuf {
    PathBuf::from(format!("/sim/codex/sessions/rollout-{}.jsonl", session.0))
}

/// ADM-5 (PTY, `terminal.slow_turn_start`): prompts the TUI took while no turn ran, whose
/// turn (its start and user messages) it records only at `due_ms`.
#[derive(Clone, Debug)]
pub struct PendingStart {
    pub due_ms: u64,
    /// In the order submitted.
    pub prompts: Vec<TakenPrompt>,
}

/// A prompt the TUI took (an Enter with text in the composer).
#[derive(Clone, Debug)]
pub struct TakenPrompt {
    pub text: String,
    pub hash: String,
    /// The request whose write submitted this text as its own prompt (`TurnTruth::opened_by`).
    pub opener: Option<String>,
    /// The writer of the Enter (None: a human).
    pub origin: Option<String>,
    pub taken_ms: u64,
    /// ADM-19: a human's prompt, as the oracle numbered it (`Oracle::on_human_prompt_taken`).
    pub human: Option<u64>,
}

#[derive(Clone, Debug)]
pub struct Running {
    pub turn: TurnId,
    pub due_ms: u64,
    pub abort: bool,
    /// MGD-6: the server request (its id) the app-server's turn waits for: it ends only after
    /// an answer.
    pub awaiting: Option<serde_json::Value>,
}

/// The daemon's observer for one agent; reset when the daemon restarts.
#[derive(Clone, Debug)]
pub struct Observer {
    pub attached: Option<SessionId>,
    pub read: usize,
    pub position: u64,
    pub turn: TurnState,
    pub lost_reported: bool,
    /// What this daemon last registered with the engine for the agent.
    pub reported: Option<Proc>,
    /// StaleTurnLabel mutant: the tracked turn id.
    pub label: Option<TurnId>,
    /// The identity of the attached file.
    pub file: u64,
    /// OBS-1: the checkpoint this daemon loaded at start, handed to the first observer of a
    /// process (`AgentRuntime::with_loaded_checkpoint`).
    pub loaded: Option<ObserverCheckpoint>,
    /// OBS-1: the checkpoint the current process's observer may start from, used once by the
    /// first attach that matches it (`CodexObserver::with_checkpoint`).
    pub saved: Option<ObserverCheckpoint>,
    /// `saved` is the checkpoint loaded from the store at start (not the state a resume
    /// reached in this daemon).
    pub saved_from_store: bool,
    /// OBS-2: records ending at or before this position are folded already (replayed only).
    pub fold_from: Option<u64>,
    /// OBS-1: what this daemon saved last: session, offset, when.
    pub last_saved: Option<(SessionId, u64, u64)>,
    /// OBS-3: the session whose checkpoint the file failed to prove (`CodexObserver`'s
    /// `disproved`): a resume into it, whenever it comes, is `SessionLost`.
    pub disproved: Option<SessionId>,
    /// This daemon's observer has looked at the agent (a tail poll or a refresh).
    pub looked: bool,
    /// The engine has had this daemon's observer resume the agent's session (REC-2).
    pub resumed: bool,
    /// MON-1: the observer's latest snapshot, the loop's or a refresh's (`note_view`).
    pub last_snapshot: Option<ObserverSnapshot>,
    /// MON-1: the last snapshot the loop (or a resume) sent the engine, and whether a
    /// refresh's view came since (`AgentRuntime::last_sent`): the loop sends again when it
    /// differs, the run read events, or a refresh came (`monitor_recheck::snapshot_is_news`).
    pub sent: Option<ObserverSnapshot>,
    pub refreshed: bool,
    /// MON-3: the last look at the screen (a refresh's, a resume's or the loop's).
    pub look: Option<ScreenLook>,
    /// MON-3: the file and the position where the record that last ended a turn (the fold
    /// went idle) begins (`Attachment::idle_from`): a look whose floor lies at or before it
    /// was taken before that turn ended.
    pub idle_from: Option<(u64, u64)>,
    /// Mutant `unknown_liveness_forgotten`: the loop stopped asking the holder after an
    /// unknown answer, until the agent's process changes again (the holder's next push).
    pub liveness_forgotten: Option<Option<Proc>>,
    /// MON-1, faults `monitor.wake_lost` and `monitor.watch_incomplete`: the sessions watch
    /// misses this agent's wakes (`ports::unwoken`); this daemon's watch, so it starts over
    /// with the daemon.
    pub unwoken: Option<Unwoken>,
    /// MON-1: when the observer loop last looked at the agent (its recheck counts from it).
    pub last_look_ms: u64,
    /// MON-4: the records the current read may take (the loop's look; None: a refresh's or
    /// an exit's read, to the end).
    pub step_budget: Option<usize>,
    /// MON-4: the last read stopped at its bound with readable records after it: the turn is
    /// unknown and no checkpoint is taken until the rest is read (as the runtime's `behind`).
    pub behind: bool,
    /// MON-4: when the first look of a chain of cut looks began (the oracle's read-lag check
    /// counts a continuation's lag from it: what came before it is the first look's lag).
    pub behind_since: Option<u64>,
    /// Mutant `behind_waits_for_a_wake`: the loop leaves the agent until a record appended
    /// after this (when, how many records then) is readable, or the 30 s recheck.
    pub asleep: Option<(u64, usize)>,
    /// ADM-19: the last Enter pushed by the holder that the loop reported with a read to the
    /// end (`Input::OtherEnterNoted`); this daemon's, so it starts over with the daemon.
    pub enter_reported: u64,
    /// MON-1: how many snapshots the loop (or a resume) sent the engine; a slow refresh may
    /// wait for the next one (`observer.refresh_after_snapshot`).
    pub snapshots_sent: u64,
    /// OBS-4: this daemon's observer attached once, or was told which session to expect
    /// (`CodexObserver::had_session`): an expectation comes once.
    pub had_session: bool,
    /// OBS-4: the session the stream reported before the restart (`Output::ExpectSession`),
    /// until an attach or a look that proves it gone.
    pub expected: Option<SessionId>,
}

/// MON-1: how the sessions watch misses an agent's wakes (`ports::unwoken`).
#[derive(Clone, Copy, Debug)]
pub struct Unwoken {
    /// Since when.
    pub since: u64,
    /// When the watch is set whole (which wakes every agent of its directory): the tick after
    /// `since` for a watch not set yet, the successful retry for an incomplete one.
    pub whole_at: u64,
    /// Set, but part of it failed (`monitor.watch_incomplete`); else not set yet.
    pub incomplete: bool,
    /// Not set: the directory was lost while the watch was being set
    /// (`monitor.watch_lost_while_set`).
    pub lost_while_set: bool,
}

/// MON-3: what one look at the screen read (`AgentRuntime::last_screen`), and the pane as it
/// was then: a later change of the pane (the composer, the Working indicator's redraw) is
/// pushed to the monitor by the holder, so the loop looks again, unless the push is late.
#[derive(Clone, Debug)]
pub struct ScreenLook {
    process: Proc,
    screen: u64,
    running: bool,
    working: bool,
    composer: Composer,
    /// How far the tailed file reached at the look (`LookFloor`: the file, its readable
    /// length), when the observer tails the session's current file.
    floor: Option<(u64, u64)>,
}

impl Observer {
    /// MON-1: the loop (or a resume) sent the engine `snapshot` (`AgentRuntime::note_sent`):
    /// the latest view, and what the engine holds until a refresh comes.
    pub fn note_sent(&mut self, snapshot: Option<ObserverSnapshot>) {
        (self.last_snapshot, self.sent, self.refreshed) = (snapshot.clone(), snapshot, false);
    }

    /// MON-3: only a new look at the screen can settle the turn (no snapshot yet, or one whose
    /// turn `monitor_recheck::screen_settles` says only the screen settles), as
    /// `AgentRuntime::screen_decides` (`has_screen`: a PTY agent's). `unknown_only`: mutant
    /// `screen_settles_unknown_only`.
    pub fn screen_decides(&self, has_screen: bool, unknown_only: bool) -> bool {
        self.last_snapshot.as_ref().is_none_or(|s| match unknown_only {
            true => s.turn == TurnState::Unknown, // the bug: a busy screen holds until a push
            false => wakterm_runtime::monitor_recheck::screen_settles(&s.turn, has_screen),
        })
    }

    /// A daemon's observer before its first attach.
    fn new(base: u64, reported: Option<Proc>, loaded: Option<ObserverCheckpoint>) -> Observer {
        Observer {
            attached: None,
            read: 0,
            position: base,
            turn: TurnState::Unknown,
            lost_reported: true,
            reported,
            label: None,
            file: 0,
            loaded,
            saved: None,
            saved_from_store: false,
            fold_from: None,
            last_saved: None,
            disproved: None,
            looked: false,
            resumed: false,
            last_snapshot: None,
            sent: None,
            refreshed: false,
            look: None,
            idle_from: None,
            liveness_forgotten: None,
            unwoken: None,
            last_look_ms: 0,
            step_budget: None,
            behind: false,
            behind_since: None,
            asleep: None,
            enter_reported: 0,
            snapshots_sent: 0,
            had_session: false,
            expected: None,
        }
    }
}

/// SUB-4: how the harness takes the CR of a split write (the pane port sets it per write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrMode {
    /// The screen and the output move a little after the CR (the usual case).
    Delayed,
    /// `terminal.never_reacts`: the CR is taken (a turn may start) but nothing moves.
    Never,
    /// `terminal.reacts_before_enter`: the whole reaction lands at once, before the Enter
    /// boundary is read.
    Immediate,
    /// `terminal.stalled_echo`: the TUI was stalled while the write arrived: it draws what was
    /// typed only after the Enter boundary, and that Enter is lost (the text stays in the
    /// composer). A hostile review got this by stopping the TUI for 150 ms and more.
    Stalled,
}

/// The pane as its holder keeps it (SUB-2, SUB-4): the raw-output end, what the screen shows
/// (a version: every change makes another), the writes it accepted, and its write lock, which
/// a split write holds through its gaps and every other writer takes for its one write. The
/// child generation is `Agent::spawned`.
pub struct Pane {
    pub output_end: u64,
    pub screen: u64,
    pub writes: u64,
    pub lock: Arc<tokio::sync::Mutex<()>>,
    /// The holder's `info_changed`: output, a write, the child exiting.
    pub changed: Arc<tokio::sync::Notify>,
    /// Harness output still to come: (due, generation, the screen changes).
    pub reactions: Vec<(u64, u64, bool)>,
    /// `terminal.stalled_echo`: the redraw withheld while stalled (bytes), then, once the
    /// Enter boundary is read, when it lands (due, generation, bytes).
    pub stalled_echo: Option<u64>,
    /// MON-3: when the TUI redraws the end of the turn that ended last, and the child
    /// generation it belongs to: until then its screen still shows the turn working, though
    /// Codex may have recorded the end already (the real TUI lags its rollout so).
    pub end_drawn_at: Option<(u64, u64)>,
    pub late_echoes: Vec<(u64, u64, u64)>,
    /// ADM-4: the last input write (the holder's `PaneState::last_input`): a look waits for
    /// its redraw ([`wakterm_engine::pane_look::undrawn_input_deadline`]).
    pub last_input: Option<LastInput>,
    /// ADM-19: when the last Enter of a writer that is no admission or submit (a human's)
    /// landed (the holder's `PaneState::other_enter_ms`); a new holder knows of none.
    pub other_enter_ms: Option<u64>,
    /// ADM-19: how many such Enters the holder counted (`PaneState::other_enters`), and when
    /// each came (`other_enter_times`, for the count within the grace).
    pub other_enters: u64,
    pub other_enter_times: Vec<u64>,
    /// ADM-19: the last of those Enters the holder pushed to the monitor (its `info_changed`
    /// answer, `enter_after`): when noted, and the count then.
    pub enter_pushed: Option<(u64, u64)>,
    /// `monitor.enter_push_late`: a push that reaches the monitor only at this time (a holder
    /// older than `enter_after`, which answers at its next output or timeout; a watch
    /// reconnecting): the note and count it carries.
    pub push_late: Option<(u64, (u64, u64))>,
    /// `terminal.late_draw`: a human's draft not drawn yet (due, generation, bytes).
    pub late_draw: Option<(u64, u64, u64)>,
    /// How the harness takes the next CR (the pane port sets it for a split write's CR).
    pub cr_mode: CrMode,
    /// The split write in progress, first byte to outcome: its submission id and the epoch of
    /// the daemon that asked for it. The holder holds its lifecycle lock meanwhile: no respawn.
    pub split: Option<(String, u64)>,
    /// ADM-12: every write the engine asked for that has not ended yet (not started, or still
    /// writing), by delivery id: its writer and the epoch of the daemon that asked.
    pub asked: BTreeMap<u64, (String, u64)>,
    /// The holder generation (`submit.holder_replaced_mid_wait`), and the agent's spawn count
    /// when the current holder started: the child generation counts from there.
    pub holder: u64,
    pub generation_base: u64,
}

impl Pane {
    fn new() -> Pane {
        Pane {
            output_end: 0,
            screen: 0,
            writes: 0,
            lock: Arc::new(tokio::sync::Mutex::new(())),
            changed: Arc::new(tokio::sync::Notify::new()),
            reactions: vec![],
            stalled_echo: None,
            end_drawn_at: None,
            late_echoes: vec![],
            last_input: None,
            other_enter_ms: None,
            other_enters: 0,
            other_enter_times: vec![],
            enter_pushed: None,
            push_late: None,
            late_draw: None,
            cr_mode: CrMode::Delayed,
            split: None,
            asked: BTreeMap::new(),
            holder: 1,
            generation_base: 0,
        }
    }
}

pub struct Agent {
    pub index: usize,
    pub agent_id: AgentId,
    pub name: String,
    pub transport: Transport,
    pub process: Option<Proc>,
    pub respawn_at_ms: Option<u64>,
    pub spawned: u64,
    pub composer: String,
    /// ADM-4: the last draft a human left (typed, no Enter): while the composer still holds
    /// it, an admission's write must not reach the pane (its Ctrl-U erases it).
    pub human_draft: Option<String>,
    /// The pane write counts at which a refresh's look read the composer as unknown (an
    /// admission that decided on such a look names that count).
    pub unknown_looks_at: std::collections::BTreeSet<u64>,
    /// The pane write counts at which a refresh's look read the screen with input still
    /// undrawn after `INPUT_DRAW_WAIT_MS` (`terminal.late_draw` past the bound).
    pub undrawn_looks_at: std::collections::BTreeSet<u64>,
    pub question: bool,
    pub running: Option<Running>,
    /// Since when no turn has run (ground truth; None while one runs): the oracle's
    /// over-refusal check (`Oracle::check_not_over_refused`).
    pub idle_since_ms: Option<u64>,
    pub last_completed: Option<TurnId>,
    pub turns_started: u64,
    pub session: Session,
    pub sessions_made: u64,
    pub files_made: u64,
    pub lost_until_ms: Option<u64>,
    pub lost_reason: String,
    /// OBS-4: the process holds no readable rollout of its session (the file was removed, or
    /// replaced by one of another working directory, while the daemon was down): Codex goes on
    /// writing the session where no observer reads it, for the rest of the process's life (a
    /// new session, as a new process makes, is readable again).
    pub rollout_gone: bool,
    /// OBS-4: the process that wrote the session when it went out of reach, when the durable
    /// stream had reported a session of it (the evidence the engine has that it writes a
    /// rollout; a pid reused later writes the session on, but its stream starts over).
    pub gone_writer: Option<Proc>,
    /// CORR-12: the next turn final the observer reads will be too large to read in full
    /// (a final is where Codex puts long text); the value is how long the observer is then
    /// blind. Reaching it loses the session (evidence lost); the record is never folded.
    pub unreadable_record: Option<u64>,
    /// MON-3, fault `holder.screen_stalled`: the holder answers no look at the screen and
    /// pushes no change of the pane from now on (a holder stopped while its turn runs).
    pub screen_stalled: bool,
    pub lag_ms: u64,
    /// The latest record the provider wrote late: when it became readable, and how late. A
    /// record is readable only after the one before it, so one slow record delays those after
    /// it, even once `lag_ms` is back to normal (`provider_lag_ms`).
    pub late_record: (u64, u64),
    pub pending_finals: Vec<(u64, TurnId, String)>,
    pub observer: Observer,
    /// SkipHashCheck mutant: the last prompt our pane port typed.
    pub last_typed: Option<String>,
    /// The provider's earlier records (sessions the agent left), kept for the oracle's
    /// event-stream checks (EV-4, EV-7).
    pub archived: Vec<Session>,
    /// SUB-*: the holder's pane.
    pub pane: Pane,
    /// MGD-*: the managed agent's app-server and holder stream (ground truth).
    pub app: Option<crate::app_server::AppServer>,
    /// MGD-4: the daemon's observer of that stream (the port; reset with the daemon).
    pub port: Option<crate::app_server::ManagedPort>,
    /// LIVE-1 at start (`liveness.silent_at_start`): the holder does not answer the daemon's
    /// first probe until then; the daemon registers the agent with the engine (and adds it to
    /// its monitor) only once a probe knows (`reattach_agents`). None: registered.
    pub silent_until_ms: Option<u64>,
    /// ADM-5 (PTY): a taken prompt whose turn has not started yet (`terminal.slow_turn_start`).
    pub pending_start: Option<PendingStart>,
    /// ADM-19 (`terminal.queued_behind_start`): prompts the TUI took while a taken prompt's
    /// turn had not started, each to run as a turn of its own after that one, in order.
    pub queued: std::collections::VecDeque<TakenPrompt>,
}

impl Agent {
    /// The running turn (if any) is over at `now`: the agent is idle from then on.
    pub fn stop_running(&mut self, now: u64) {
        if self.running.take().is_some() || self.idle_since_ms.is_none() {
            self.idle_since_ms = Some(now);
        }
    }

    pub fn new(index: usize, transport: Transport, ring_bytes: usize) -> Agent {
        let agent_id = AgentId::parse(&format!("0b5e3c1a-1111-4222-8333-00000000000{index}")).expect("uuid");
        let name = ["zola", "apex"][index].to_string();
        let proc0 = Proc { pid: 100 + index as u32, ticks: 5 };
        let mut agent = Agent {
            index,
            agent_id,
            name,
            transport,
            process: Some(proc0),
            respawn_at_ms: None,
            spawned: 1,
            composer: String::new(),
            human_draft: None,
            unknown_looks_at: Default::default(),
            undrawn_looks_at: Default::default(),
            question: false,
            running: None,
            idle_since_ms: Some(0),
            last_completed: None,
            turns_started: 0,
            session: Session {
                id: SessionId(String::new()),
                base: 0,
                header: TurnState::Idle { last_completed: None },
                records: vec![],
                next_position: 0,
                file: 0,
                writers: vec![],
            },
            sessions_made: 0,
            files_made: 0,
            lost_until_ms: None,
            lost_reason: String::new(),
            rollout_gone: false,
            gone_writer: None,
            unreadable_record: None,
            screen_stalled: false,
            lag_ms: 20,
            late_record: (0, 0),
            pending_finals: vec![],
            observer: Observer { lost_reported: false, ..Observer::new(0, None, None) },
            last_typed: None,
            archived: vec![],
            pane: Pane::new(),
            app: None,
            port: None,
            silent_until_ms: None,
            pending_start: None,
            queued: Default::default(),
        };
        if transport == Transport::AppServer {
            // MGD-2: one thread (== session) for the agent's whole life; its stream starts with
            // the handshake's answers (`World::app_handshake`, written here before any daemon).
            let app = crate::app_server::AppServer::new(index, ring_bytes);
            agent.session.id = SessionId(app.thread.clone());
            agent.session.file = app.holder;
            agent.session.writers = agent.process.map(Proc::incarnation).into_iter().collect();
            agent.sessions_made = 1;
            agent.app = Some(app);
            return agent;
        }
        // A completed baseline turn, as the tests' idle Codex has.
        let baseline = TurnId(format!("a{index}-baseline"));
        agent.new_session(TurnState::Idle { last_completed: Some(baseline.clone()) });
        agent.last_completed = Some(baseline);
        agent
    }

    fn new_session(&mut self, header: TurnState) {
        self.sessions_made += 1;
        let base = 1000 * self.sessions_made;
        let file = self.new_file();
        let next = Session {
            id: SessionId(format!("s{}-{}", self.index, self.sessions_made)),
            base,
            header,
            records: vec![],
            next_position: base,
            file,
            writers: self.process.map(Proc::incarnation).into_iter().collect(),
        };
        let previous = std::mem::replace(&mut self.session, next);
        self.rollout_gone = false;
        if !previous.id.0.is_empty() {
            self.archived.push(previous);
        }
    }

    /// One of this agent's sessions, current or past.
    pub fn session_of(&self, session: &SessionId) -> Option<&Session> {
        std::iter::once(&self.session).chain(self.archived.iter().rev()).find(|s| &s.id == session)
    }

    fn new_file(&mut self) -> u64 {
        self.files_made += 1;
        (self.index as u64 + 1) * 1_000_000 + self.files_made
    }

    pub fn facts(&self) -> AgentFacts {
        AgentFacts {
            agent_id: self.agent_id.clone(),
            name: self.name.clone(),
            harness: Harness::Codex,
            transport: self.transport,
            incarnation: self.process.map(Proc::incarnation),
            process: self.process.map(Proc::identity),
            // MGD-2: a managed agent is bound to its thread (== session in Codex 0.169).
            managed: self
                .app
                .as_ref()
                .map(|app| wakterm_engine::ManagedIds { thread_id: app.thread.clone(), session_id: SessionId(app.thread.clone()) }),
        }
    }

    fn true_turn(&self) -> TurnState {
        match &self.running {
            Some(r) => TurnState::Busy { turn: Some(r.turn.clone()) },
            None => TurnState::Idle { last_completed: self.last_completed.clone() },
        }
    }

    /// Appends a record; returns when it becomes readable.
    fn append(&mut self, now: u64, make: impl FnOnce(SessionId, u64) -> ObserverEvent) -> u64 {
        self.session.next_position += thread_rng().gen_range(60..400);
        let position = self.session.next_position;
        let event = make(self.session.id.clone(), position);
        let floor = self.session.records.last().map_or(0, |r| r.visible_at_ms);
        let visible_at_ms = (now + thread_rng().gen_range(0..=self.lag_ms)).max(floor);
        self.session.records.push(Record { position, visible_at_ms, event });
        if visible_at_ms > now + REAL_CODEX_RECORD_LAG_MS {
            self.late_record = (visible_at_ms, visible_at_ms - now);
        }
        visible_at_ms
    }

    /// How late the provider writes its records (ADM-19's known gap of position floors):
    /// `lag_ms`, or more when a record it wrote late became readable at or after `enter` (a
    /// human's Enter, as the holder noted it; seed 55698: records of turns run while the lag
    /// lasted became readable after the Enter, past its floor, with `lag_ms` back to normal).
    /// Records become readable in order, so the latest late one is the one to ask.
    pub fn provider_lag_ms(&self, enter: Option<u64>) -> u64 {
        let (readable_at, late_by) = self.late_record;
        if enter.is_some_and(|enter| readable_at >= enter) {
            self.lag_ms.max(late_by)
        } else {
            self.lag_ms
        }
    }
}

/// How late the real Codex writes a record after its event (some 25 ms): a provider later
/// than this is `observer.delayed`, where position floors have a known gap (ADM-19).
pub const REAL_CODEX_RECORD_LAG_MS: u64 = 25;

/// MON-3: how often, while faults run, the holder's push of a screen change the observer loop
/// has not looked at is lost for good (`monitor.screen_push_lost`).
pub const PUSH_LOST: f64 = 0.03;

/// MON-3: how often, while faults run, a look that saw a turn working is the last one the
/// holder answers (`holder.screen_stalled`, at most one agent per run).
pub const SCREEN_STALL: f64 = 0.004;

/// The whole simulated system of one seed.
pub struct World {
    pub mutant: Mutant,
    pub plan: FaultPlan,
    pub faults_on: bool,
    /// When the faults stopped (the quiet phase began), and when the daemon last started:
    /// the monitor's read lag counts from the later of them (`Oracle::on_monitor_read`).
    pub healed_ms: Option<u64>,
    pub daemon_started_ms: u64,
    /// `store.stalled_commit`: the requests whose registration's commit stalled, and when,
    /// until their write: the daemon crashes right after it, while crashes are left
    /// (`crash.after_stalled_registration_write`), so a restart ends such a registration. An
    /// entry older than a minute (a registration released or failed, never written; its id
    /// registered again later) draws nothing.
    pub stalled_registrations: BTreeMap<String, u64>,
    /// TIME-1: how far the daemon's wall clock is stepped from true (simulated) time, both
    /// directions; a daemon reads it when it starts.
    pub wall_offset_ms: i64,
    /// HIST-4, TIME-2: the running daemon's retention clock (its engine clock, less how far
    /// behind another run of the boot stood), as `recover_engine` gives the retention task.
    pub retention_clock: Option<wakterm_runtime::store::retention::RetentionClock>,
    /// HIST-4: when each request's first finished phase committed (simulated time), for the
    /// oracle's check that retention keeps it its window.
    pub finished_ms: BTreeMap<String, u64>,
    pub agents: Vec<Agent>,
    pub store: StoreTables,
    pub inbox: Option<mpsc::Sender<DriverMsg>>,
    /// MON-1: wakes the daemon's observer loop at the given time (a rollout append becomes
    /// readable, the pane printed), as inotify and the holder's `info_changed` wake the monitor.
    pub wake: Option<mpsc::UnboundedSender<u64>>,
    /// `monitor.slow_wake`: a loaded daemon's monitor reads a record up to this long after it
    /// became readable (0: within 5 ms). The view then lags the file when a prompt is written
    /// (records written after the admission's refresh read, not delivered yet), which the
    /// runtime's read of the rollout's end at the write covers (CORR-5, ADM-5).
    pub monitor_lag_ms: u64,
    pub crash: Option<mpsc::UnboundedSender<&'static str>>,
    pub crashes: u32,
    pub oracle: Oracle,
    pub counters: Counters,
    pub trace: Trace,
    /// PublishBeforeCommit mutant: sequences already pushed to watchers.
    pub early_published: Vec<u64>,
    /// Files that replaced a rollout while the daemon was down (`checkpoint.file_replaced_while_down`).
    pub replaced_files: std::collections::BTreeSet<u64>,
    /// EV-5: checkpoints the observer port handed to the engine, by JSON: how much each covers
    /// of an unfinished request's turn (`checkpoint_due`), read when its batch commits.
    pub checkpoint_weights: BTreeMap<String, u8>,
    /// EV-5: per agent id, the newest checkpoint handed to the engine and not yet durable.
    pub checkpoint_sent: BTreeMap<String, String>,
    /// EV-3, EV-13: agent ids whose request's end (`indeterminate`, `cancelled`, `timed_out`)
    /// failed to commit (`store.end_commit_failed`): the daemon may crash right after the agent's next
    /// event batch commits (`crash.after_events_past_a_failed_end`).
    pub end_failed_for: std::collections::BTreeSet<String>,
    /// The requests whose end `store.end_commit_failed` decided on (at its first commit that
    /// reached the store model; a retry is never failed by it).
    pub ends_rolled: std::collections::BTreeSet<String>,
    /// EV-8: the running daemon's settled sequence (published or abandoned): what the catalog
    /// waits for before it answers `events_through`.
    pub events_settled_through: u64,
    /// Event sequences whose commit failed (mutant `abandoned_numbers_passed`).
    pub abandoned_sequences: std::collections::BTreeSet<u64>,
    /// `store.outage`: the stretch (from, until) in which every commit fails, once drawn.
    pub store_outage: Option<(u64, u64)>,
    /// EV-9: the agent-events subscriber is away until then (it reads what it missed from
    /// the store when it is back).
    pub subscriber_away_until: Option<u64>,
    /// The holders' node: pane writers (split writes, humans, foreign writers) live outside
    /// the daemon and survive its crash.
    pub holder: Option<madsim::runtime::NodeHandle>,
    /// Counts daemon starts: which daemon asked for a write.
    pub daemon_epoch: u64,
    /// Simulated time skipped by `clock.jump` so far (a caller's wait excludes it).
    pub jumped_ms: u64,
    /// The bare `/clear` submit drawn and not yet answered (its text is then not unique:
    /// callers draw no second one meanwhile).
    pub clear_in_flight: Option<String>,
    /// `caller.after_call_bound`: admissions a caller makes later (at, agent), the scenario
    /// spawns them when they are due.
    pub late_callers: Vec<(u64, usize)>,
}

impl World {
    /// The daemon's wall clock: simulated time stepped by `wall_offset_ms`.
    pub fn wall_ms(&self) -> u64 {
        wakterm_runtime::driver::now_ms().saturating_add_signed(self.wall_offset_ms)
    }

    pub fn new(mutant: Mutant) -> World {
        let mut trace = Trace::default();
        trace.t0_ms = wakterm_runtime::driver::now_ms();
        let plan = FaultPlan::draw();
        let agents = vec![Agent::new(0, Transport::Pty, 0), Agent::new(1, Transport::AppServer, plan.ring_bytes)];
        let mut world = World {
            mutant,
            plan,
            faults_on: true,
            healed_ms: None,
            daemon_started_ms: 0,
            stalled_registrations: BTreeMap::new(),
            retention_clock: None,
            finished_ms: BTreeMap::new(),
            wall_offset_ms: 0,
            agents,
            store: StoreTables::default(),
            inbox: None,
            wake: None,
            monitor_lag_ms: 0,
            crash: None,
            crashes: 0,
            oracle: Oracle::default(),
            counters: Counters::default(),
            trace,
            early_published: vec![],
            replaced_files: Default::default(),
            checkpoint_weights: BTreeMap::new(),
            checkpoint_sent: BTreeMap::new(),
            end_failed_for: std::collections::BTreeSet::new(),
            ends_rolled: std::collections::BTreeSet::new(),
            events_settled_through: 0,
            abandoned_sequences: std::collections::BTreeSet::new(),
            store_outage: None,
            subscriber_away_until: None,
            holder: None,
            daemon_epoch: 0,
            jumped_ms: 0,
            clear_in_flight: None,
            late_callers: vec![],
        };
        world.app_handshake(1, false);
        world
    }

    pub fn log(&mut self, line: String) {
        self.trace.push(line);
    }

    /// MON-1: the observer loop runs a few milliseconds after `at` (a record becomes readable at
    /// `at`, or the pane printed then); a daemon that is down misses it.
    pub fn wake_observer(&self, at: u64) {
        if let Some(wake) = &self.wake {
            let lag = if self.monitor_lag_ms > 0 { thread_rng().gen_range(0..=self.monitor_lag_ms) } else { 0 };
            let _ = wake.send(at + thread_rng().gen_range(0..5) + lag);
        }
    }

    /// A chance, only while faults are on.
    pub fn fault_roll(&self, p: f64) -> bool {
        self.faults_on && p > 0.0 && thread_rng().gen_bool(p.min(1.0))
    }

    /// Asks the crash task to kill the daemon now (a crash point inside an effect).
    pub fn crash_point(&mut self, name: &'static str) -> bool {
        self.crash_point_at(self.plan.crash_point, name)
    }

    /// A crash point with its own rate. True when the daemon is killed here (a caller's other
    /// crash points and bookkeeping for this commit then do not run).
    pub fn crash_point_at(&mut self, p: f64, name: &'static str) -> bool {
        if self.fault_roll(p) && self.crashes < self.plan.max_crashes {
            if let Some(crash) = &self.crash {
                if crash.send(name).is_ok() {
                    self.crashes += 1;
                    return true;
                }
            }
        }
        false
    }

    // ----- the TUI and the provider (ground truth) -----

    /// Bytes that reached agent `a`'s pane. `origin`: the request whose write this is.
    /// The TUI echoes composer edits at once (the output grows, the screen changes); its
    /// reaction to a submitting CR comes later (`Pane::reactions`, `CrMode`).
    pub fn feed(&mut self, a: usize, bytes: &[u8], origin: Option<&str>) {
        self.draw_echoes_before_input(a);
        let raw_burst = bytes.len() > 1 && !bytes.starts_with(b"\x15\x1b[200~");
        let mut in_paste = false;
        let mut echo = 0u64;
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            if rest.starts_with(b"\x1b[200~") {
                in_paste = true;
                i += 6;
            } else if rest.starts_with(b"\x1b[201~") {
                in_paste = false;
                i += 6;
            } else if rest[0] == 0x15 && !in_paste {
                if !self.agents[a].composer.is_empty() {
                    echo += 8;
                }
                self.agents[a].composer.clear();
                i += 1;
            } else if rest[0] == b'\r' && !in_paste {
                if self.agents[a].pane.stalled_echo.is_some() {
                    // `terminal.stalled_echo`: the Enter is lost; the text stays a draft.
                    i += 1;
                    continue;
                }
                if raw_burst {
                    // A fast unbracketed burst: Codex keeps it in the composer, CR as newline.
                    self.agents[a].composer.push('\n');
                    self.counters.fault("provider.raw_paste_kept");
                    echo += 2;
                } else {
                    self.echo(a, std::mem::take(&mut echo));
                    self.submit(a, origin);
                }
                i += 1;
            } else {
                let ch_len = utf8_len(rest[0]).min(rest.len());
                let text = String::from_utf8_lossy(&rest[..ch_len]).to_string();
                self.agents[a].composer.push_str(&text);
                echo += ch_len as u64;
                i += ch_len;
            }
        }
        // An unterminated paste (a partial write) ends with the write: its text stays a draft.
        self.echo(a, echo);
    }

    /// The composer's redraw after an edit (nothing when nothing was edited or no process
    /// reads the pane).
    fn echo(&mut self, a: usize, bytes: u64) {
        if let Some(withheld) = self.agents[a].pane.stalled_echo.as_mut() {
            *withheld += bytes; // drawn after the Enter boundary (`terminal.stalled_echo`)
            return;
        }
        if bytes > 0 && self.agents[a].process.is_some() {
            self.pane_moved(a, bytes, true);
        }
    }

    // ----- the pane (SUB-2, SUB-4) -----

    /// The screen's digest as the holder reports it (the boundary's and every sample's).
    pub fn screen_digest(&self, a: usize) -> String {
        let agent = &self.agents[a];
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for v in [a as u64, agent.spawned, agent.pane.screen] {
            h ^= v;
            h = h.wrapping_mul(0x0100_0000_01b3).rotate_left(17);
        }
        format!("{h:016x}")
    }

    /// What the pane shows right now (ground truth; the holder's `screen` and `info`).
    pub fn pane_truth(&self, a: usize) -> crate::oracle::PaneTruth {
        let agent = &self.agents[a];
        crate::oracle::PaneTruth {
            output_end: agent.pane.output_end,
            screen: self.screen_digest(a),
            generation: agent.spawned - agent.pane.generation_base,
            writes: agent.pane.writes,
            alive: agent.process.is_some(),
            holder: agent.pane.holder,
        }
    }

    /// A submit call got its receipt, or never will (its daemon died, or was gone when it was
    /// sent): a bare `/clear` may be drawn again.
    pub fn call_ended(&mut self, call: &crate::oracle::SubmitCallInput) {
        if self.clear_in_flight.as_deref() == Some(call.submission_id.to_ascii_lowercase().as_str()) {
            self.clear_in_flight = None;
        }
    }

    /// The pane's holder as the runtime labels it (`EnterBoundary::holder`).
    pub fn holder_label(&self, a: usize) -> String {
        format!("sim-holder-{}", self.agents[a].pane.holder)
    }

    /// `submit.holder_replaced_mid_wait` (SUB-4): the agent's holder dies (its process with it)
    /// and `agent restart` starts another at the same socket, whose counts start over. Shaped
    /// as the hazard: its child generation and accepted writes come to equal the boundary's,
    /// and its TUI drew past the boundary's offset, none of it a reaction to our Enter. (The
    /// runtime's watch keeps one connection, so only a watch that connects after the
    /// replacement meets the new holder; the model lets any sample meet it, a superset. The
    /// output is not reset as a new holder's would be: the worst case for the offset check.)
    pub fn replace_pty_holder(&mut self, a: usize, boundary: &wakterm_engine::EnterBoundary) {
        if self.agents[a].process.is_none() || self.agents[a].pane.split.is_some() {
            return;
        }
        self.counters.fault("submit.holder_replaced_mid_wait");
        self.spawn_process(a, false);
        let agent = &mut self.agents[a];
        agent.pane.holder += 1;
        agent.pane.other_enter_ms = None;
        agent.pane.other_enters = 0;
        agent.pane.other_enter_times.clear();
        agent.pane.enter_pushed = None;
        agent.pane.push_late = None;
        self.oracle.forget_human_prompts(a);
        agent.pane.generation_base = agent.spawned - boundary.generation;
        agent.pane.writes = boundary.writes;
        self.pane_moved(a, 900, true);
        let holder = self.agents[a].pane.holder;
        self.log(format!("a{a} the holder is replaced (holder {holder}): its generation and writes match the boundary's"));
    }

    /// The composer as the screen adapter reads it.
    pub fn composer_on_screen(&self, a: usize) -> Composer {
        let agent = &self.agents[a];
        // `terminal.stalled_echo`: what was typed is not drawn yet; a submit is only written
        // into an empty composer, so the screen still shows it empty.
        let undrawn = agent.pane.stalled_echo.is_some() || agent.pane.late_echoes.iter().any(|(_, generation, _)| *generation == agent.spawned);
        // A human's keys typed since make the TUI draw its composer, the draft with it (the
        // screen said empty over a human's draft: CI exploration seed 41785460).
        let undrawn = undrawn && !agent.human_draft.as_ref().is_some_and(|d| agent.composer.contains(d.as_str()));
        // `terminal.late_draw`: the screen shows the composer as it was before the human's
        // last keys.
        let late = agent.pane.late_draw.is_some_and(|(_, generation, _)| generation == agent.spawned);
        let shown = match (&agent.human_draft, late) {
            (Some(draft), true) => agent.composer.strip_suffix(draft.as_str()).unwrap_or(&agent.composer),
            _ => agent.composer.as_str(),
        };
        if agent.question {
            Composer::Question
        } else if undrawn || shown.is_empty() {
            Composer::Empty
        } else if self.plan.unclassified_composer && misread_as_question(shown) {
            // `terminal.unclassified_composer`: the adapter reads a draft whose first line looks
            // like a numbered option, or a later line holds `(y/n)`, as a question (SUB-4: such
            // a lost Enter was acknowledged, a review).
            Composer::Question
        } else if self.plan.unclassified_composer && shown.trim().contains('\n') {
            // `terminal.unclassified_composer`: text of several lines (a tall paste) hides
            // what the adapter reads the composer by. The mutant reads that as empty.
            match self.mutant {
                Mutant::UnclassifiedComposerReadsEmpty => Composer::Empty, // the bug
                _ => Composer::Unknown,
            }
        } else {
            Composer::Draft
        }
    }

    /// The holder's `info_changed`: wakes pane watchers.
    fn pane_touch(&self, a: usize) {
        self.agents[a].pane.changed.notify_waiters();
    }

    /// The child printed `bytes` bytes of output; `screen`: what the screen shows changed.
    pub fn pane_moved(&mut self, a: usize, bytes: u64, screen: bool) {
        let pane = &mut self.agents[a].pane;
        // `terminal.late_draw`: the TUI draws the keys it holds with its next output.
        pane.late_draw = None;
        pane.output_end += bytes;
        if screen {
            pane.screen += 1;
        }
        let truth = self.pane_truth(a);
        self.oracle.on_pane_moved(a, &truth);
        self.pane_touch(a);
    }

    /// One write the pane accepts from `writer` (a submission id, a request id, `human`,
    /// `foreign`): the writes counter moves (a split write counts once, at its start) and the
    /// bytes reach the TUI. The pane's byte log is checked as it grows: nothing but the split
    /// write's own steps may land between its first byte and its outcome.
    pub fn pane_write(&mut self, a: usize, writer: &str, bytes: &[u8], origin: Option<&str>, new_write: bool) {
        // Before the write is noted as the last input (ADM-4): a redraw of earlier keys is no
        // draw of these (a review: drawn in `feed`, after the note, it was).
        self.draw_echoes_before_input(a);
        self.pane_accept(a, writer, bytes.len(), new_write);
        self.feed(a, bytes, origin);
        self.pane_touch(a);
    }

    /// `n` bytes of `writer`'s write reach the pane (the TUI has not read them yet).
    pub fn pane_accept(&mut self, a: usize, writer: &str, n: usize, new_write: bool) {
        if let Some((split, _)) = self.agents[a].pane.split.clone() {
            if split != writer {
                self.oracle.interleaved(format!("a{a}: {n} bytes of {writer} reached the pane inside split write {split} (SUB-2)"));
            }
        }
        if new_write {
            self.agents[a].pane.writes += 1;
        }
        if n > 0 {
            let pane = &mut self.agents[a].pane;
            pane.last_input = Some(LastInput { written_ms: wakterm_runtime::driver::now_ms(), output_end: pane.output_end });
        }
        self.oracle.on_pane_bytes(writer, n);
    }

    /// A human's keystrokes (one pane write): text into the composer, then maybe Enter.
    /// `counted`: the holder counted the write already, as it does before a write's first byte
    /// (`terminal.keys_in_flight`).
    pub fn human_keys(&mut self, a: usize, text: &str, enter: bool, counted: bool) {
        self.draw_echoes_before_input(a);
        self.pane_accept(a, "human", text.len() + usize::from(enter), !counted);
        if enter {
            self.note_other_enter(a);
        }
        self.agents[a].composer.push_str(text);
        if !enter {
            self.agents[a].human_draft = Some(text.to_string());
        }
        let drawable = self.agents[a].process.is_some() && self.agents[a].pane.stalled_echo.is_none();
        if !enter && drawable && self.fault_roll(self.plan.late_draw) {
            // ADM-4: drawn a moment later, or with the child's next output.
            self.counters.fault("terminal.late_draw");
            let due = wakterm_runtime::driver::now_ms() + thread_rng().gen_range(5..400);
            let generation = self.agents[a].spawned;
            self.agents[a].pane.late_draw = Some((due, generation, text.len() as u64));
            self.pane_touch(a);
            return;
        }
        self.echo(a, text.len() as u64);
        if enter {
            self.feed(a, b"\r", None);
        }
        self.pane_touch(a);
    }

    /// ADM-19: the holder notes another writer's Enter (each strictly later than the last, as
    /// the runtime's `Pane::note_input`, and counted) and pushes it to the monitor, which runs
    /// at once; sometimes the push comes late (`monitor.enter_push_late`), after the prompt's
    /// records may be readable.
    fn note_other_enter(&mut self, a: usize) {
        let now = wakterm_runtime::driver::now_ms();
        let pane = &mut self.agents[a].pane;
        let noted = pane.other_enter_ms.map_or(now, |last| now.max(last + 1));
        pane.other_enter_ms = Some(noted);
        pane.other_enters += 1;
        pane.other_enter_times.push(now);
        let note = (noted, pane.other_enters);
        if self.fault_roll(0.2) {
            self.counters.fault("monitor.enter_push_late");
            let due = now + thread_rng().gen_range(30..1_500);
            self.agents[a].pane.push_late = Some((due, note));
            self.wake_observer(due);
            return;
        }
        self.agents[a].pane.enter_pushed = Some(note);
        self.wake_observer(now);
    }

    /// ADM-19: the holder's counts of agent `a`'s other writers' Enters now (all, and those
    /// within the grace), as its `info` answers them.
    pub fn enter_counts(&self, a: usize) -> (u64, u64) {
        let pane = &self.agents[a].pane;
        let now = wakterm_runtime::driver::now_ms();
        (pane.other_enters, wakterm_engine::pane_look::OtherEnterLook::recent_among(pane.other_enter_times.iter().copied(), now))
    }

    /// `monitor.enter_push_late`: the late push reaches the monitor when due (a later Enter's
    /// push carries the holder's latest note anyway).
    pub fn late_enter_push(&mut self, a: usize) {
        let now = wakterm_runtime::driver::now_ms();
        let pane = &mut self.agents[a].pane;
        if let Some((_, note)) = pane.push_late.filter(|(due, _)| *due <= now) {
            pane.push_late = None;
            pane.enter_pushed = pane.enter_pushed.max(Some(note));
        }
    }

    /// A split write holds the holder's lifecycle lock: the child is not respawned meanwhile.
    pub fn split_in_progress(&self, a: usize) -> bool {
        self.agents[a].pane.split.is_some()
    }

    /// The harness reacts to a submitting CR: as the pane port asked for this write
    /// (`CrMode`), else a little later (sometimes slowly, sometimes with a redraw that changes
    /// nothing on the screen first).
    fn react_to_enter(&mut self, a: usize, now: u64, mode: CrMode) {
        let generation = self.agents[a].spawned;
        match mode {
            CrMode::Never | CrMode::Stalled => {}
            CrMode::Immediate => self.pane_moved(a, thread_rng().gen_range(40..400), true),
            CrMode::Delayed => {
                let delay = if thread_rng().gen_bool(0.1) { thread_rng().gen_range(300..4_000) } else { thread_rng().gen_range(2..300) };
                if thread_rng().gen_bool(0.25) {
                    let early = now + thread_rng().gen_range(1..=delay);
                    self.agents[a].pane.reactions.push((early.min(now + delay), generation, false));
                }
                self.agents[a].pane.reactions.push((now + delay, generation, true));
            }
        }
    }

    /// Harness output due by now lands (only from the child that was asked: a reaction of an
    /// exited process never comes).
    fn pane_tick(&mut self, a: usize, now: u64) {
        let generation = self.agents[a].spawned;
        let alive = self.agents[a].process.is_some();
        if let Some((due, g, bytes)) = self.agents[a].pane.late_draw {
            if due <= now {
                self.agents[a].pane.late_draw = None;
                if g == generation && alive {
                    self.pane_moved(a, bytes, true);
                }
            }
        }
        self.draw_late_echoes(a, now);
        if self.agents[a].pane.reactions.is_empty() {
            return;
        }
        let mut due: Vec<(u64, u64, bool)> = self.agents[a].pane.reactions.iter().copied().filter(|r| r.0 <= now).collect();
        self.agents[a].pane.reactions.retain(|r| r.0 > now);
        due.sort_by_key(|r| r.0);
        for (_, g, screen) in due {
            if g == generation && alive {
                if !screen {
                    self.counters.fault("terminal.output_without_change");
                }
                self.pane_moved(a, thread_rng().gen_range(20..600), screen);
            }
        }
    }

    /// `terminal.stalled_echo`: the late redraws of what was typed, due by `now`, land. A
    /// redraw of what was typed is no reaction to an Enter (the oracle's truth).
    fn draw_late_echoes(&mut self, a: usize, now: u64) {
        let generation = self.agents[a].spawned;
        let alive = self.agents[a].process.is_some();
        let echoes: Vec<(u64, u64, u64)> = self.agents[a].pane.late_echoes.iter().copied().filter(|e| e.0 <= now).collect();
        self.agents[a].pane.late_echoes.retain(|e| e.0 > now);
        for (_, g, bytes) in echoes {
            // A question shown meanwhile hides the composer: its redraw shows nothing.
            if g == generation && alive && bytes > 0 && !self.agents[a].question {
                let pane = &mut self.agents[a].pane;
                pane.output_end += bytes;
                pane.screen += 1;
                self.pane_touch(a);
            }
        }
    }

    /// The TUI reads its input in order: before it handles new keys, it draws what it had
    /// still to redraw of the keys before (`terminal.stalled_echo`). Left pending, a stalled
    /// submit's redraw landed after a later submit's Enter boundary, where it read as that
    /// Enter's reaction (exploration seed 50006721: a human's keys and a whole split write
    /// were handled meanwhile, which no TUI does before its redraw).
    fn draw_echoes_before_input(&mut self, a: usize) {
        self.draw_late_echoes(a, u64::MAX);
    }

    /// Enter: Codex trims the composer and starts a turn, or steers the running one.
    fn submit(&mut self, a: usize, origin: Option<&str>) {
        let now = wakterm_runtime::driver::now_ms();
        let mode = std::mem::replace(&mut self.agents[a].pane.cr_mode, CrMode::Delayed);
        let agent = &mut self.agents[a];
        if agent.process.is_none() || agent.question {
            let answered = agent.question && agent.process.is_some();
            agent.question = false;
            agent.composer.clear();
            if answered {
                self.react_to_enter(a, now, mode);
            }
            return;
        }
        let raw = std::mem::take(&mut agent.composer);
        let text = raw.trim().to_string();
        if text.is_empty() {
            return;
        }
        self.react_to_enter(a, now, mode);
        if text == "/clear" {
            // Codex clears its transcript: the screen changes, no turn starts, nothing is
            // recorded (SUB-2: the agent stays awaiting its turn for the grace). Written over
            // a prompt of ours still unread, it is checked as any prompt (ADM-5).
            self.check_over_pending(a, origin, now);
            self.log(format!("a{a} /clear by {origin:?}: the transcript is cleared, no turn"));
            return;
        }
        if text != raw {
            self.counters.fault("provider.whitespace_trimmed");
        }
        let hash = prompt_hash(&text);
        let opener = origin.filter(|rid| self.oracle.is_prompt_of(rid, &text)).map(str::to_string);
        let enter = self.agents[a].pane.other_enter_ms.map(|noted| (noted, self.enter_counts(a).1));
        let human = origin.is_none().then(|| self.oracle.on_human_prompt_taken(a, enter));
        let taken = TakenPrompt { text, hash, opener, origin: origin.map(str::to_string), taken_ms: now, human };
        let Some(taken) = self.join_pending_start(a, taken) else { return };
        let agent = &mut self.agents[a];
        if let Some(running) = agent.running.clone() {
            let hash = taken.hash.clone();
            self.oracle.on_steer_recorded(&running.turn, hash.clone());
            let agent = &mut self.agents[a];
            let visible = agent.append(now, |session, position| ObserverEvent::UserMessage { session, turn: Some(running.turn.clone()), prompt_hash: hash, position });
            self.note_human_prompt_recorded(a, taken.human);
            self.note_same_text(a, (taken.origin.as_deref(), &taken.text), &running.turn);
            self.wake_observer(visible);
            self.counters.fault("provider.steering");
            self.log(format!("a{a} steer {} by {:?}", running.turn.0, origin));
            if let Some(rid) = &taken.opener {
                self.oracle.on_steered(a, rid, &running.turn);
            }
            return;
        }
        if self.fault_roll(self.plan.slow_turn_start) {
            // Codex took the prompt (the composer is empty) but records its turn only later.
            let due_ms = now + thread_rng().gen_range(100..7_000);
            self.counters.fault("terminal.slow_turn_start");
            self.log(format!("a{a} prompt by {origin:?} taken, its turn starts in {} ms", due_ms - now));
            self.agents[a].pending_start = Some(PendingStart { due_ms, prompts: vec![taken] });
            return;
        }
        self.start_turn(a, now, taken, &[]);
    }

    /// ADM-19: the user message just appended to agent `a`'s rollout is the human's prompt
    /// `human` (None: not a human's).
    fn note_human_prompt_recorded(&mut self, a: usize, human: Option<u64>) {
        let (Some(id), Some(record)) = (human, self.agents[a].session.records.last()) else { return };
        let record = (self.agents[a].session.id.clone(), record.position);
        self.oracle.on_human_prompt_in_turn(a, id, record);
    }

    /// CORR-6 (`caller.same_text_human`): the user message just recorded in agent `a`'s turn
    /// `turn` is a human's prompt, maybe of a request's text (sent before or after it): where it
    /// lies, for the oracle's known-gap excuse (`Oracle::same_text_unwritten_at_write`); or the
    /// request's own prompt (which its write submitted), which rules that excuse out for the
    /// turn. And ADM-13: a request's own prompt recorded (not a human's prompt of its text, nor
    /// another request's, `caller.same_text_request`) is what may acknowledge its send.
    fn note_same_text(&mut self, a: usize, (origin, text): (Option<&str>, &str), turn: &TurnId) {
        let Some(origin) = origin else {
            let session = &self.agents[a].session;
            let text = text.trim().to_string();
            let message = crate::oracle::SameText { session: session.id.clone(), position: session.next_position, text, turn: turn.clone(), delivered: false };
            self.oracle.same_text_messages.push(message);
            return;
        };
        if self.oracle.is_prompt_of(origin, text) {
            self.oracle.own_prompts_recorded.insert(origin.to_string());
            self.oracle.own_messages.insert((origin.to_string(), turn.0.clone())); // our prompt, in `turn`
        }
    }

    /// `terminal.slow_turn_start`: an Enter while a taken prompt's turn has not started joins
    /// that turn (Codex sends the two as one input), or half the time is queued to run as a
    /// turn of its own after it (`terminal.queued_behind_start`, as the real Codex 0.169 did;
    /// so is an Enter between turns while queued prompts wait); the prompt is given back when
    /// there is no such turn. ADM-5: a prompt of ours written while an earlier one of ours is unread
    /// that way is the race the engine's wait exists to prevent (`Oracle::on_prompt_over_unread`;
    /// a plain send may steer, ADM-13, and so is written whatever the wait).
    fn join_pending_start(&mut self, a: usize, taken: TakenPrompt) -> Option<TakenPrompt> {
        if self.agents[a].pending_start.is_none() {
            if self.agents[a].running.is_none() && !self.agents[a].queued.is_empty() {
                self.check_over_pending(a, taken.origin.as_deref(), taken.taken_ms);
                self.agents[a].queued.push_back(taken); // behind the prompts queued before it
                return None;
            }
            return Some(taken);
        }
        self.check_over_pending(a, taken.origin.as_deref(), taken.taken_ms);
        let origin = taken.origin.clone();
        if thread_rng().gen_bool(0.5) {
            // The real Codex 0.169 (2026-12-06): a prompt entered some 13 ms after a human's
            // Enter, before that turn's records, ran as a turn of its own after it.
            self.counters.fault("terminal.queued_behind_start");
            self.log(format!("a{a} prompt by {origin:?} queued behind the turn not started yet"));
            self.agents[a].queued.push_back(taken);
            return None;
        }
        let pending = self.agents[a].pending_start.as_mut().expect("pending");
        pending.prompts.push(TakenPrompt { opener: None, ..taken });
        self.log(format!("a{a} prompt by {origin:?} joins the turn not started yet"));
        None
    }

    /// ADM-5 (PTY): an Enter of `origin`'s (None: a human's) while the latest prompt of ours
    /// the TUI took has no turn yet, waiting to start or queued (`Oracle::on_prompt_over_unread`;
    /// a plain send that may steer is written whatever the wait, ADM-13).
    fn check_over_pending(&mut self, a: usize, origin: Option<&str>, now: u64) {
        let agent = &self.agents[a];
        let waiting = agent.pending_start.iter().flat_map(|p| p.prompts.iter()).chain(agent.queued.iter());
        let latest = waiting.filter(|p| p.origin.is_some()).max_by_key(|p| p.taken_ms).map(|p| (p.origin.clone(), now - p.taken_ms));
        if let (Some(origin), Some((earlier, age_ms))) = (origin, latest) {
            if !self.oracle.may_steer(origin) {
                let grace = wakterm_engine::limits::AWAITING_TURN_GRACE_MS;
                self.oracle.on_prompt_over_unread(a, Some(origin), earlier.as_deref(), age_ms, grace);
            }
        }
    }

    /// `terminal.slow_turn_start`: a taken prompt's turn starts when due.
    fn start_pending_turn(&mut self, a: usize, now: u64) {
        if self.agents[a].pending_start.as_ref().is_none_or(|p| p.due_ms > now) {
            return;
        }
        let mut prompts = self.agents[a].pending_start.take().expect("pending").prompts.into_iter();
        let first = prompts.next().expect("a pending start has a prompt");
        let joined: Vec<TakenPrompt> = prompts.collect();
        self.start_turn(a, now, first, &joined);
    }

    /// `terminal.queued_behind_start`: the next queued prompt's turn starts once no turn runs
    /// or waits to start.
    fn start_queued_turn(&mut self, a: usize, now: u64) {
        let agent = &mut self.agents[a];
        if agent.running.is_some() || agent.pending_start.is_some() {
            return;
        }
        let Some(next) = agent.queued.pop_front() else { return };
        self.log(format!("a{a} the queued prompt by {:?} starts its turn", next.origin));
        self.start_turn(a, now, next, &[]);
    }

    /// The turn an Enter into an idle TUI, or a pending start's due time, starts: its first
    /// prompt (the request that opened it), then the prompts that joined it.
    fn start_turn(&mut self, a: usize, now: u64, first: TakenPrompt, joined: &[TakenPrompt]) {
        let TakenPrompt { text, hash, opener, origin, human, .. } = first;
        let agent = &mut self.agents[a];
        agent.turns_started += 1;
        let turn = TurnId(format!("a{a}-p{}-t{}", agent.spawned, agent.turns_started));
        let abort = self.faults_on && thread_rng().gen_bool(self.plan.abort.max(0.02));
        let late = self.faults_on && thread_rng().gen_bool(self.plan.late_final.max(0.02));
        let fast = !late && self.faults_on && thread_rng().gen_bool(self.plan.fast_turn);
        let duration = if late { thread_rng().gen_range(8_000..30_000) } else { thread_rng().gen_range(100..3_000) };
        if late {
            self.counters.fault("provider.late_final");
        }
        let agent = &mut self.agents[a];
        let running = Running { turn: turn.clone(), due_ms: now + duration, abort, awaiting: None };
        agent.running = Some(running.clone());
        agent.idle_since_ms = None;
        let t = turn.clone();
        let mut messages = vec![hash.clone()];
        let started = agent.append(now, |session, position| ObserverEvent::TurnStarted { session, turn: t.clone(), position });
        let prompted = agent.append(now, |session, position| ObserverEvent::UserMessage { session, turn: Some(t), prompt_hash: hash, position });
        self.note_human_prompt_recorded(a, human);
        self.note_same_text(a, (origin.as_deref(), &text), &turn);
        self.wake_observer(started);
        self.wake_observer(prompted);
        for prompt in joined {
            let (t, hash) = (turn.clone(), prompt.hash.clone());
            messages.push(hash.clone());
            let visible = self.agents[a].append(now, |session, position| ObserverEvent::UserMessage { session, turn: Some(t), prompt_hash: hash, position });
            self.note_human_prompt_recorded(a, prompt.human);
            self.note_same_text(a, (prompt.origin.as_deref(), &prompt.text), &turn);
            self.wake_observer(visible);
        }
        if origin.is_none() {
            self.counters.fault("provider.human_turn");
        }
        let file = self.agents[a].session.file;
        self.oracle.turns.insert(turn.0.clone(), TurnTruth { agent: a, opened_by: opener.clone(), final_message: None, aborted: false, file, final_file: None, messages });
        self.log(format!("a{a} turn {} started by {:?} text={:?}", turn.0, opener, text));
        if fast {
            // Its records (start, prompt, end) are readable within milliseconds of the write, while
            // the holder's answer to the write may still be on its way (ADM-17).
            self.counters.fault("provider.fast_turn");
            self.end_turn(a, running, now);
        }
    }

    /// The running turn ends: aborted or completed with its final (and maybe a duplicate later).
    fn end_turn(&mut self, a: usize, running: Running, now: u64) {
        self.agents[a].stop_running(now);
        if self.agents[a].transport == Transport::Pty {
            // The TUI prints the turn's end a moment later.
            let generation = self.agents[a].spawned;
            let drawn_at = now + thread_rng().gen_range(1..80);
            self.agents[a].pane.reactions.push((drawn_at, generation, true));
            self.agents[a].pane.end_drawn_at = Some((drawn_at, generation));
        }
        let t = running.turn.clone();
        // EV-10: Codex records assistant messages inside the turn: sometimes commentary, and
        // the final answer itself before `task_complete` (older builds without the turn id).
        if thread_rng().gen_bool(0.3) {
            self.assistant_message(a, &t, format!("working on {}", t.0), now);
        }
        // EV-11: and sometimes an `update_plan` call.
        if thread_rng().gen_bool(0.2) {
            let plan = vec![PlanStep { step: format!("step of {}", t.0), status: PlanStatus::InProgress }];
            let turn = Some(t.clone());
            let visible = self.agents[a].append(now, |session, position| ObserverEvent::PlanUpdated { session, turn, explanation: None, plan, position });
            self.wake_observer(visible);
        }
        if !running.abort {
            self.assistant_message(a, &t, format!("final of {}", t.0), now);
        }
        let agent = &mut self.agents[a];
        if running.abort {
            let labelled = thread_rng().gen_bool(0.8).then(|| t.clone());
            let visible = agent.append(now, |session, position| ObserverEvent::TurnAborted { session, turn: labelled, position });
            self.wake_observer(visible);
            self.counters.fault("provider.aborted_turn");
            if let Some(truth) = self.oracle.turns.get_mut(&t.0) {
                truth.aborted = true;
            }
            self.log(format!("a{a} turn {} aborted", t.0));
        } else {
            let text = format!("final of {}", t.0);
            agent.last_completed = Some(t.clone());
            let m = Some(text.clone());
            let visible = agent.append(now, |session, position| ObserverEvent::TurnCompleted { session, turn: t.clone(), final_message: m, position });
            self.wake_observer(visible);
            if self.faults_on && thread_rng().gen_bool(self.plan.duplicate_final) {
                let due = now + thread_rng().gen_range(0..3000);
                self.agents[a].pending_finals.push((due, t.clone(), format!("{text} (again)")));
            }
            let file = self.agents[a].session.file;
            if let Some(truth) = self.oracle.turns.get_mut(&t.0) {
                truth.final_message = Some(text);
                truth.final_file = Some(file);
            }
            self.log(format!("a{a} turn {} completed", t.0));
        }
    }

    fn assistant_message(&mut self, a: usize, t: &TurnId, text: String, now: u64) {
        let turn = thread_rng().gen_bool(0.9).then(|| t.clone());
        let visible = self.agents[a].append(now, |session, position| ObserverEvent::AgentMessage { session, turn, text, phase: None, position });
        self.wake_observer(visible);
    }

    /// Time passes for the provider: turns end, duplicate finals arrive, processes respawn.
    pub fn provider_tick(&mut self, a: usize) {
        let now = wakterm_runtime::driver::now_ms();
        if self.is_managed(a) {
            return self.app_tick(a, now);
        }
        if let Some(at) = self.agents[a].respawn_at_ms {
            if (now >= at || !self.faults_on) && !self.split_in_progress(a) {
                self.spawn_process(a, false);
            }
        }
        self.pane_tick(a, now);
        self.start_pending_turn(a, now);
        self.start_queued_turn(a, now);
        if let Some(running) = self.agents[a].running.clone() {
            if now >= running.due_ms {
                self.end_turn(a, running, now);
            }
        }
        let due: Vec<_> = self.agents[a].pending_finals.iter().filter(|f| f.0 <= now).cloned().collect();
        self.agents[a].pending_finals.retain(|f| f.0 > now);
        for (_, t, text) in due {
            let m = Some(text);
            let t2 = t.clone();
            let visible = self.agents[a].append(now, |session, position| ObserverEvent::TurnCompleted { session, turn: t2, final_message: m, position });
            self.wake_observer(visible);
            self.counters.fault("provider.duplicate_final");
            self.log(format!("a{a} duplicate final of {}", t.0));
        }
    }

    /// The process exits (its turn and composer die with it).
    pub fn kill_process(&mut self, a: usize, respawn_after_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        if agent.process.is_none() {
            return;
        }
        if agent.app.is_some() {
            self.app_killed(a);
        }
        let agent = &mut self.agents[a];
        agent.process = None;
        agent.stop_running(now);
        agent.pending_start = None;
        agent.queued.clear();
        agent.pending_finals.clear();
        self.oracle.forget_human_prompts(a); // ADM-19: what it took dies with it
        agent.composer.clear();
        agent.question = false;
        agent.respawn_at_ms = Some(now + respawn_after_ms);
        self.pane_touch(a);
        self.log(format!("a{a} process exited"));
    }

    /// A new Codex process: new incarnation, sometimes the same pid, a fresh session.
    pub fn spawn_process(&mut self, a: usize, reuse_pid: bool) {
        let agent = &mut self.agents[a];
        let old_pid = agent.process.map_or(100 + a as u32, |p| p.pid);
        agent.process = None;
        agent.stop_running(wakterm_runtime::driver::now_ms());
        agent.pending_start = None;
        agent.queued.clear();
        agent.pending_finals.clear();
        self.oracle.forget_human_prompts(a); // ADM-19: what it took dies with it
        agent.composer.clear();
        agent.respawn_at_ms = None;
        agent.spawned += 1;
        let pid = if reuse_pid { old_pid } else { 200 + (agent.spawned as u32) * 7 + a as u32 };
        agent.process = Some(Proc { pid, ticks: 5 + agent.spawned * 1000 });
        agent.last_completed = None;
        agent.turns_started = 0;
        if reuse_pid {
            self.counters.fault("process.pid_reuse");
        }
        if self.is_managed(a) {
            // `agent restart`: the same holder, the same thread resumed (MGD-2).
            self.app_respawned(a);
            self.log(format!("a{a} app-server process started pid {pid} (reuse={reuse_pid}), resuming its thread"));
            return;
        }
        self.agents[a].new_session(TurnState::Idle { last_completed: None });
        // The new child draws its screen.
        self.pane_moved(a, 900, true);
        self.log(format!("a{a} process started pid {pid} (reuse={reuse_pid})"));
    }

    /// The provider's record is lost, truncated, replaced or rewritten, or the event stream
    /// drops: its identity changes and the observer needs `lost_ms` to find it again.
    pub fn break_record(&mut self, a: usize, kind: &'static str, lost_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        let header = agent.true_turn();
        agent.new_session(header);
        agent.lost_until_ms = Some(now + lost_ms);
        agent.lost_reason = kind.to_string();
        self.counters.fault(kind);
        self.log(format!("a{a} record fault {kind}, observer blind for {lost_ms} ms"));
    }

    // ----- the observer (daemon side) -----

    /// The daemon (re)starts: its observer state is gone except the durable checkpoint, which
    /// the first observer of the running process gets (OBS-1). Nothing is attached yet: the
    /// first resume, refresh or tail poll attaches (as the runtime's first observer call does).
    pub fn reset_observer(&mut self, a: usize) {
        let loaded = self.stored_checkpoint(a);
        let agent = &mut self.agents[a];
        agent.observer = Observer::new(agent.session.base, agent.process, loaded);
        if agent.app.is_some() {
            return self.reset_managed_port(a);
        }
        if let Some(process) = self.agents[a].process {
            self.hand_checkpoint(a, process);
        }
    }

    /// OBS-1: a new observer (of `process`) takes the loaded checkpoint, kept only when it was
    /// saved for this exact incarnation (the runtime's own rule, `belongs_to`).
    fn hand_checkpoint(&mut self, a: usize, process: Proc) {
        let ignore_incarnation = self.mutant == Mutant::CheckpointIgnoresIncarnation;
        let observer = &mut self.agents[a].observer;
        observer.saved = observer.loaded.take().filter(|c| ignore_incarnation || c.belongs_to(&process.incarnation(), process.identity()));
        observer.saved_from_store = observer.saved.is_some();
    }

    /// The checkpoint the observer could save now (`CodexObserver::checkpoint`): attached to
    /// the current file of a rollout (PTY) agent, past any replay. None while that is not known.
    fn current_checkpoint(&self, a: usize) -> Option<ObserverCheckpoint> {
        let agent = &self.agents[a];
        let observer = &agent.observer;
        if agent.transport != Transport::Pty || observer.fold_from.is_some() || observer.behind {
            return None;
        }
        if observer.attached.as_ref() != Some(&agent.session.id) || observer.file != agent.session.file {
            return None;
        }
        let process = observer.reported?;
        let tail = TailCursor {
            dev: 1,
            ino: agent.session.file,
            offset: observer.position,
            checkpoint_hash: agent.session.window_hash(observer.position)?,
            item_dialect: false,
        };
        Some(ObserverCheckpoint {
            version: CHECKPOINT_VERSION,
            incarnation: process.incarnation(),
            process: process.identity(),
            session: agent.session.id.clone(),
            path: rollout_path(&agent.session.id),
            tail,
            turn: observer.turn.clone(),
        })
    }

    /// OBS-1 (`AgentRuntime::checkpoint_if_due`): the checkpoint to hand to the engine
    /// now (as JSON, EV-5), when the offset moved and the last save is at least
    /// `CHECKPOINT_INTERVAL_MS` old; and how much it newly covers of an unfinished request's
    /// turn (a crash right after it commits, before the engine commits what those records
    /// decided, is one the restart must replay across).
    pub fn checkpoint_due(&mut self, a: usize) -> Option<(String, u8)> {
        let now = wakterm_runtime::driver::now_ms();
        let observer = &self.agents[a].observer;
        let last = &observer.last_saved;
        let moved = last.as_ref().is_none_or(|(session, offset, _)| Some(session) != observer.attached.as_ref() || *offset != observer.position);
        let due = last.as_ref().is_none_or(|(_, _, at)| now.saturating_sub(*at) >= CHECKPOINT_INTERVAL_MS);
        if !moved || !due {
            return None;
        }
        let checkpoint = self.current_checkpoint(a)?;
        let agent = &mut self.agents[a];
        let covered_before = match &agent.observer.last_saved {
            Some((session, offset, _)) if *session == checkpoint.session => *offset,
            _ => agent.session.base,
        };
        let covered = &agent.session.records[agent.session.first_after(covered_before)..agent.session.first_after(checkpoint.tail.offset)];
        // How much it covers of an unfinished request's turn: 2 its end (final or abort), 1 its
        // start or prompt, 0 nothing.
        let turns = &self.oracle.turns;
        let ended = &self.oracle.ended;
        let weight = covered
            .iter()
            .filter_map(|r| {
                let (turn, weight) = match &r.event {
                    ObserverEvent::TurnCompleted { turn, .. } => (Some(turn), 2),
                    ObserverEvent::TurnAborted { turn, .. } => (turn.as_ref(), 2),
                    ObserverEvent::TurnStarted { turn, .. } => (Some(turn), 1),
                    ObserverEvent::UserMessage { turn, .. } => (turn.as_ref(), 1),
                    _ => (None, 0),
                };
                let opener = turn.and_then(|t| turns.get(&t.0)).and_then(|t| t.opened_by.as_ref());
                opener.is_some_and(|id| !ended.contains_key(id)).then_some(weight)
            })
            .max()
            .unwrap_or(0);
        agent.observer.last_saved = Some((checkpoint.session.clone(), checkpoint.tail.offset, now));
        self.log(format!("a{a} checkpoint {}@{} {:?}", checkpoint.session.0, checkpoint.tail.offset, checkpoint.turn));
        Some((checkpoint.to_json().expect("the simulator's rollout paths are UTF-8"), weight))
    }

    /// EV-4: agent `a`'s durable event mark.
    pub(crate) fn durable_mark(&self, a: usize) -> Option<wakterm_engine::EventMark> {
        let agent_id = self.agents[a].agent_id.to_string();
        let json = self.store.event_marks().into_iter().find(|(id, _)| *id == agent_id)?.1;
        serde_json::from_str(&json).ok()
    }

    /// A known engine gap (see `Oracle::tolerate_gap`): an `observer.lost` resets the agent's
    /// event mark (the session is read afresh) but the checkpoint saved before the loss stays
    /// in the store until a newer one commits; a restart in between resumes from that
    /// checkpoint, past records the stream had reported before the loss and was reporting
    /// again (EV-5's "checkpoint never past the mark" no longer holds).
    fn tolerate_stale_checkpoint(&mut self, a: usize, session: &SessionId, offset: u64) {
        let Some(mark) = self.durable_mark(a) else { return };
        if mark.session.as_ref() == Some(session) && mark.position < offset {
            self.log(format!("a{a} checkpoint {}@{offset} lies past the durable event mark {} (EV-5 gap)", session.0, mark.position));
            self.oracle.tolerate_gap(a, session, mark.position, offset, "note.ev5_checkpoint_past_mark_after_loss", true);
        }
    }

    /// The stored checkpoint of agent `a`, as a restarted daemon would load it.
    fn stored_checkpoint(&self, a: usize) -> Option<ObserverCheckpoint> {
        let agent_id = self.agents[a].agent_id.to_string();
        self.store.checkpoints().into_iter().find(|(id, _)| *id == agent_id).and_then(|(_, json)| ObserverCheckpoint::from_json(&json))
    }

    // ----- while the daemon is down -----

    /// Between a crash and the restart: the rollout the stored checkpoint covers may be
    /// replaced (same path and session, other content), or the agent's process replaced by
    /// another with the same pid that resumes the same session in the same file.
    pub fn while_down(&mut self) {
        if !self.faults_on {
            return;
        }
        for a in 0..self.agents.len() {
            let agent = &self.agents[a];
            if agent.transport == Transport::Pty && agent.process.is_some() && self.fault_roll(0.06) {
                self.remove_rollout_while_down(a);
                continue;
            }
            let agent = &self.agents[a];
            let (Some(process), Some(stored)) = (agent.process, self.stored_checkpoint(a)) else { continue };
            let covers = stored.belongs_to(&process.incarnation(), process.identity())
                && stored.session == agent.session.id
                && stored.tail.ino == agent.session.file;
            if agent.transport != Transport::Pty || !covers {
                continue;
            }
            // More often when a request waits in the file (then the replacement matters most;
            // a cut then reaches the restart's resume, OBS-2, EV-13).
            let pending = self.resumed_in_rollout(a);
            let replace = if pending.is_empty() { 20 } else { 45 };
            let roll = thread_rng().gen_range(0..100);
            if roll < replace {
                self.replace_rollout_while_down(a, pending);
            } else if roll < replace + 20 && self.agents[a].running.is_none() && !self.split_in_progress(a) {
                self.reuse_pid_while_down(a);
            } else if roll < replace + 45 && self.agents[a].running.is_none() {
                self.cut_rollout_while_down(a, stored.tail.offset, !pending.is_empty());
            }
        }
    }

    /// OBS-4: agent `a`'s rollout is removed, replaced by a rollout of another working
    /// directory, or another session's rollout is copied over it (the runtime's
    /// `Discovery::NoneOpen`, `CwdMismatch` and `Mislabelled`, one in this model),
    /// while the daemon is down, whether a checkpoint covers it or not: its process goes on
    /// writing the session where no observer reads it. The next daemon's stream must say the
    /// session it reported is gone (the oracle's `gone_session_problems`).
    fn remove_rollout_while_down(&mut self, a: usize) {
        let process = self.agents[a].process;
        let reported = self.durable_mark(a).is_some_and(|m| m.had_session && m.incarnation == process.map(Proc::incarnation));
        let agent = &mut self.agents[a];
        (agent.rollout_gone, agent.gone_writer) = (true, process.filter(|_| reported));
        agent.lost_reason = "the agent process holds no Codex rollout file open any more".to_string();
        let session = agent.session.id.clone();
        let class = match thread_rng().gen_range(0..3) {
            0 => "checkpoint.rollout_removed_while_down",
            1 => "checkpoint.rollout_of_another_cwd_while_down",
            _ => "checkpoint.rollout_of_another_session_while_down", // copied over it (`Mislabelled`)
        };
        self.counters.fault(class);
        self.log(format!("a{a} rollout {} out of every observer's reach while the daemon is down ({class})", session.0));
    }

    /// The return-final requests a restarted daemon will resume in agent `a`'s current
    /// rollout: durable as submitted or bound, armed in its session.
    fn resumed_in_rollout(&self, a: usize) -> Vec<String> {
        self.armed_in_rollout(a).into_iter().map(|(id, _)| id).collect()
    }

    /// `resumed_in_rollout` with each request's armed position.
    fn armed_in_rollout(&self, a: usize) -> Vec<(String, u64)> {
        self.waiting_in_rollout(a).into_iter().map(|(id, armed, _)| (id, armed)).collect()
    }

    /// `armed_in_rollout` with each request's bound turn, once bound.
    fn waiting_in_rollout(&self, a: usize) -> Vec<(String, u64, Option<wakterm_engine::TurnId>)> {
        let agent_id = self.agents[a].agent_id.to_string();
        let session = &self.agents[a].session.id;
        let mut pending = Vec::new();
        for stored in self.store.requests() {
            if stored.agent_id != agent_id || !matches!(stored.phase.as_str(), "submitted" | "bound") {
                continue;
            }
            let record: RequestRecord = serde_json::from_str(&stored.record_json).expect("stored records parse");
            match record.armed {
                Some(armed) if record.return_mode == ReturnMode::ReturnFinal && &armed.session == session => {
                    pending.push((stored.request_id, armed.position, record.bound_turn));
                }
                _ => {}
            }
        }
        pending
    }

    /// OBS-3: the rollout is replaced at the same path with the same session id and other
    /// content (every final rewritten); Codex goes on appending to the new file. Requests the
    /// restarted daemon will resume in it must not end with anything read from it.
    fn replace_rollout_while_down(&mut self, a: usize, pending: Vec<String>) {
        let session = self.agents[a].session.id.clone();
        self.oracle.on_file_changed_while_down(a, &session);
        self.oracle.replaced_while_down.extend(pending.into_iter().map(|id| (id, a)));
        let agent = &mut self.agents[a];
        agent.session.file = agent.new_file();
        self.replaced_files.insert(agent.session.file);
        for record in &mut agent.session.records {
            if let ObserverEvent::TurnCompleted { final_message: Some(text), .. } = &mut record.event {
                text.push_str(" (forged)");
            }
        }
        let file = agent.session.file;
        self.counters.fault("checkpoint.file_replaced_while_down");
        self.log(format!("a{a} rollout {} replaced while the daemon is down: file {file}, every final rewritten", session.0));
    }

    /// EV-13: the rollout is cut back to a record boundary between the stored checkpoint and
    /// the stream's mark (what the stream reported through), and Codex goes on appending at
    /// the cut: its next records sit at positions the stream already reported, with other
    /// content. Only when no turn runs (the cut records' turns are settled history). When a
    /// request waits in the file (`pending`: the restart resumes it, from the mark at the
    /// latest), always with a record ending at the mark (`checkpoint.cut_to_the_mark_while_down`),
    /// so a resume at the mark finds a record boundary of the new file (an armed cursor
    /// between the cut and the mark lies inside a new record, and the resume loses the
    /// session, unless `regrow_to_the_mark` ends one there); else half the time.
    fn cut_rollout_while_down(&mut self, a: usize, checkpoint: u64, pending: bool) {
        // The subscriber has read what the dead daemon made durable (the oracle checks those
        // events against the records they report, which the cut removes), as `agent events
        // --after` reads: below what retention pruned it is `cursor_too_old` and rebases (EV-9;
        // reading the store past pruned events unchecked once failed seed 10660).
        self.subscriber_away_until = None;
        let durable = self.store.last_event_sequence();
        crate::ports::subscriber_catch_up(self, durable, "read before the cut");
        let agent_id = self.agents[a].agent_id.to_string();
        let mark = self.store.event_marks().into_iter().find(|(id, _)| *id == agent_id);
        let Some(mark) = mark.and_then(|(_, json)| serde_json::from_str::<wakterm_engine::EventMark>(&json).ok()) else { return };
        let agent = &mut self.agents[a];
        if mark.session.as_ref() != Some(&agent.session.id) {
            return;
        }
        let boundaries: Vec<u64> = agent.session.records.iter().map(|r| r.position).filter(|p| *p >= checkpoint && *p < mark.position).collect();
        let cut = match boundaries.len() {
            0 if checkpoint < mark.position => checkpoint,
            0 => return,
            n => boundaries[thread_rng().gen_range(0..n)],
        };
        let before = agent.session.records.len();
        agent.session.records.retain(|r| r.position <= cut);
        agent.session.next_position = cut;
        let removed = before - agent.session.records.len();
        let session = agent.session.id.clone();
        self.oracle.on_rollout_cut(a, &session, cut);
        self.counters.fault("checkpoint.cut_below_mark_while_down");
        self.log(format!("a{a} rollout cut back to {cut} while down (checkpoint {checkpoint}, mark {}): {removed} records gone", mark.position));
        if pending || thread_rng().gen_bool(0.5) {
            self.regrow_to_the_mark(a, mark.position);
        }
    }

    /// EV-13, OBS-2: after a cut, Codex appends a record that ends exactly at the stream's
    /// mark: a restart that resumes at the mark finds it a record boundary, and only the
    /// record's own content says the file changed (an assistant message outside any turn,
    /// which changes no turn state). Before it, with a bound request waiting in the file,
    /// half the time a completion of that request's turn with another final below the mark
    /// (`checkpoint.final_below_the_mark_while_down`: the first final the cut took, a second
    /// one written again), or an abort of it: the engine reads it before the record at the
    /// mark says the file changed, and must not end the request with it.
    fn regrow_to_the_mark(&mut self, a: usize, mark: u64) {
        let waiting = self.bound_in_rollout(a).into_iter().filter(|(_, armed, _)| *armed < mark).max_by_key(|(_, armed, _)| *armed);
        if let Some((id, armed, turn)) = waiting.filter(|_| thread_rng().gen_bool(0.5)) {
            // The restart resumes from the earliest armed cursor of the requests waiting in the
            // file (the mark at the latest): it stays a record boundary (a review: placed at
            // the latest one, a resume from an earlier one lost the session).
            let resume = self.armed_in_rollout(a).into_iter().map(|(_, p)| p).min().unwrap_or(armed).min(armed);
            if resume > self.agents[a].session.next_position {
                self.append_new_record(a, resume, None);
            }
            let at = self.agents[a].session.next_position.max(armed);
            if at + 1 < mark {
                let end = thread_rng().gen_range(at + 1..mark);
                let session = self.agents[a].session.id.clone();
                // Half the time an abort of the turn instead: an end of another kind read
                // below the mark waits for the proof too (`ReplayZone::pending`).
                let (event, what) = if thread_rng().gen_bool(0.5) {
                    let text = format!("final of {} (written again)", turn.0);
                    (ObserverEvent::TurnCompleted { session, turn: turn.clone(), final_message: Some(text), position: end }, "a completion")
                } else {
                    (ObserverEvent::TurnAborted { session, turn: Some(turn.clone()), position: end }, "an abort")
                };
                self.append_new_record(a, end, Some(event));
                self.counters.fault("checkpoint.final_below_the_mark_while_down");
                self.log(format!("a{a} appended {what} of {} ({id}'s turn) at {end}, below the mark, while down", turn.0));
            }
        }
        self.append_new_record(a, mark, None);
        self.counters.fault("checkpoint.cut_to_the_mark_while_down");
        self.log(format!("a{a} appended a record ending at the mark {mark} while down"));
    }

    /// Appends a record ending at `end` to agent `a`'s cut rollout (`event`, or an assistant
    /// message outside any turn).
    fn append_new_record(&mut self, a: usize, end: u64, event: Option<ObserverEvent>) {
        let now = wakterm_runtime::driver::now_ms();
        let agent = &mut self.agents[a];
        assert!(agent.session.next_position < end, "a record ending at {end} follows {}", agent.session.next_position);
        let session = agent.session.id.clone();
        // Unique, as a real record is (its timestamp): one that repeated an earlier cut's record
        // at the same place would be that record, by every fingerprint (exploration seed
        // 76540773: two cuts to the same mark, the second record taken for the first).
        let text = format!("appended while down at {now} ms");
        let event = event.unwrap_or(ObserverEvent::AgentMessage { session, turn: None, text, phase: None, position: end });
        let visible_at_ms = agent.session.records.last().map_or(now, |r| r.visible_at_ms.max(now));
        agent.session.records.push(Record { position: end, visible_at_ms, event });
        agent.session.next_position = end;
    }

    /// The return-final requests bound to a turn that a restarted daemon will resume in agent
    /// `a`'s current rollout: id, armed position, turn.
    fn bound_in_rollout(&self, a: usize) -> Vec<(String, u64, wakterm_engine::TurnId)> {
        self.waiting_in_rollout(a).into_iter().filter_map(|(id, armed, turn)| Some((id, armed, turn?))).collect()
    }

    /// OBS-1: the idle process exits and another starts with the same pid (another start
    /// time), resuming the same session in the same file: only the incarnation tells the
    /// checkpoint is not its own.
    fn reuse_pid_while_down(&mut self, a: usize) {
        let agent = &mut self.agents[a];
        let Some(old) = agent.process else { return };
        agent.spawned += 1;
        let new = Proc { pid: old.pid, ticks: 5 + agent.spawned * 1000 };
        agent.process = Some(new);
        agent.session.writers.push(new.incarnation());
        agent.stop_running(wakterm_runtime::driver::now_ms());
        agent.pending_start = None;
        agent.queued.clear();
        agent.pending_finals.clear();
        self.oracle.forget_human_prompts(a); // ADM-19: what it took dies with it
        agent.composer.clear();
        agent.question = false;
        agent.respawn_at_ms = None;
        agent.turns_started = 0;
        self.pane_moved(a, 900, true);
        self.counters.fault("checkpoint.pid_reused_while_down");
        self.log(format!("a{a} pid {} reused while the daemon is down: {:?} -> {:?}, same session", old.pid, old.incarnation(), new.incarnation()));
        if self.is_managed(a) {
            // What the old app-server had not read from its stdin died with it (as
            // `app_killed`): the model kept it queued for the new process.
            let app = self.app(a);
            app.stdin.clear();
            app.queue.clear();
        }
    }

    fn transform(&mut self, a: usize, event: ObserverEvent) -> ObserverEvent {
        let agent = &mut self.agents[a];
        match self.mutant {
            Mutant::SkipHashCheck => match event {
                ObserverEvent::UserMessage { session, turn, position, prompt_hash: recorded } => {
                    let hash = agent.last_typed.as_deref().map(prompt_hash).unwrap_or(recorded);
                    ObserverEvent::UserMessage { session, turn, prompt_hash: hash, position }
                }
                other => other,
            },
            Mutant::StaleTurnLabel => match event {
                ObserverEvent::TurnStarted { session, turn, position } => {
                    let label = agent.observer.label.get_or_insert(turn).clone();
                    ObserverEvent::TurnStarted { session, turn: label, position }
                }
                ObserverEvent::UserMessage { session, turn, prompt_hash, position } => {
                    let turn = agent.observer.label.clone().or(turn);
                    ObserverEvent::UserMessage { session, turn, prompt_hash, position }
                }
                ObserverEvent::TurnCompleted { session, turn, final_message, position } => {
                    let turn = agent.observer.label.take().unwrap_or(turn);
                    ObserverEvent::TurnCompleted { session, turn, final_message, position }
                }
                ObserverEvent::TurnAborted { session, turn, position } => {
                    // The bug: an abort does not reset the tracker.
                    let turn = agent.observer.label.clone().or(turn);
                    ObserverEvent::TurnAborted { session, turn, position }
                }
                other => other,
            },
            _ => event,
        }
    }

    /// CORR-12: the next final the observer reads (present or still to come) will be too
    /// large to read; the observer then loses the session and is blind for `lost_ms`.
    pub fn make_record_unreadable(&mut self, a: usize, lost_ms: u64) {
        let agent = &mut self.agents[a];
        agent.unreadable_record = Some(lost_ms);
        self.counters.fault("observer.record_too_large");
        self.log(format!("a{a} the next final will be too large to read"));
    }

    fn read_records(&mut self, a: usize, now: u64, out: &mut Vec<ObserverEvent>) {
        let mut taken = 0;
        self.agents[a].observer.behind = false;
        loop {
            let agent = &self.agents[a];
            let Some(record) = agent.session.records.get(agent.observer.read) else { break };
            if record.visible_at_ms > now {
                break;
            }
            // MON-4: the look's step bound; readable records remain, so the look is behind.
            if agent.observer.step_budget.is_some_and(|budget| taken >= budget) {
                self.agents[a].observer.behind = true;
                break;
            }
            taken += 1;
            let is_final = matches!(record.event, ObserverEvent::TurnCompleted { .. });
            if let Some(lost_ms) = agent.unreadable_record.filter(|_| is_final) {
                // Skipped, never folded: the turn state stays what it was, the session is lost.
                let agent = &mut self.agents[a];
                agent.unreadable_record = None;
                agent.observer.read += 1;
                agent.observer.attached = None;
                agent.observer.fold_from = None;
                agent.observer.lost_reported = true;
                agent.lost_until_ms = Some(now + lost_ms);
                agent.lost_reason = "record_too_large".to_string();
                out.push(ObserverEvent::SessionLost { reason: "record_too_large".to_string(), session: None, before: None });
                break;
            }
            let record = record.clone();
            let event = self.transform(a, record.event);
            let obs = &mut self.agents[a].observer;
            obs.read += 1;
            let start = std::mem::replace(&mut obs.position, record.position);
            // OBS-2: up to the checkpoint, the fold's result is already known.
            match obs.fold_from {
                Some(checkpoint) if record.position <= checkpoint => {}
                _ => {
                    obs.fold_from = None;
                    let was_idle = matches!(obs.turn, TurnState::Idle { .. });
                    obs.turn = wakterm_engine::fold_turn(&obs.turn, &event); // CORR-13: the engine's one fold
                    if !was_idle && matches!(obs.turn, TurnState::Idle { .. }) {
                        obs.idle_from = Some((obs.file, start)); // MON-3
                    }
                }
            }
            if self.mutant == Mutant::AssistantMessagesDropped && matches!(event, ObserverEvent::AgentMessage { .. }) {
                continue; // the bug: the port maps assistant messages to nothing, as it once did
            }

            let event = match event {
                // The bug: the plan's turn id is read from `event_msg` records only.
                ObserverEvent::PlanUpdated { session, explanation, plan, position, .. } if self.mutant == Mutant::PlanTurnUnlabelled => {
                    ObserverEvent::PlanUpdated { session, turn: None, explanation, plan, position }
                }
                other => other,
            };
            out.push(event);
        }
        let obs = &mut self.agents[a].observer;
        if obs.fold_from.is_some_and(|checkpoint| obs.position >= checkpoint) {
            obs.fold_from = None;
        }
    }

    /// Attaches to the agent's current record (`CodexObserver::attach` and `open_tail`): from
    /// the saved checkpoint when the file proves to be the one checkpointed (OBS-2), replaying
    /// from `floor` (a resumed request's armed position) when that lies before it; from the
    /// start otherwise. A checkpoint the file no longer matches loses the session whoever
    /// looks first, the engine's resume or a tail poll or refresh (OBS-3), and marks it
    /// disproved for later resumes; the next look reads the file from the start. Events up to
    /// `floor` are folded, not emitted.
    fn attach(&mut self, a: usize, floor: Option<u64>, now: u64, out: &mut Vec<ObserverEvent>) {
        let mutant = self.mutant;
        let session = self.agents[a].session.id.clone();
        let saved = self.agents[a].observer.saved.take().filter(|c| c.session == session && c.path == rollout_path(&session));
        let from_store = std::mem::take(&mut self.agents[a].observer.saved_from_store);
        let file = &self.agents[a].session;
        let mut start = (0, file.base, file.header.clone(), None);
        if let Some(checkpoint) = saved {
            let proof = match mutant {
                Mutant::CheckpointSkipsIdentityCheck => Ok(()), // the bug
                _ => file.prove(now, &checkpoint.tail),
            };
            let offset = checkpoint.tail.offset;
            match (proof, floor) {
                (Err(why), floor) => {
                    let reason = wakterm_engine::REWRITTEN_WHILE_DOWN.to_string();
                    let observer = &mut self.agents[a].observer;
                    observer.attached = None;
                    observer.lost_reported = true;
                    observer.disproved = Some(session.clone());
                    let by = if floor.is_some() { "resume" } else { "first look" };
                    self.log(format!("a{a} checkpoint at {offset} no longer matches (OBS-3, {by}): {why}"));
                    out.push(ObserverEvent::SessionLost { reason, session: None, before: None });
                    return;
                }
                (Ok(()), floor) => {
                    let older = file.visible_end(now) > offset;
                    let replay = floor.filter(|armed| *armed < offset && mutant != Mutant::CheckpointSkipsArmedReplay); // (the bug)
                    start = match replay {
                        Some(armed) => (file.first_after(armed), armed, checkpoint.turn.clone(), Some(offset)),
                        None => (file.first_after(offset), offset, checkpoint.turn.clone(), None),
                    };
                    if older {
                        self.counters.fault("checkpoint.older_than_file");
                    }
                    if replay.is_some() {
                        self.counters.fault("checkpoint.armed_before");
                    }
                    let running = self.agents[a].process.map(Proc::identity);
                    self.oracle.on_checkpoint_used(a, checkpoint.process, running);
                    if floor.is_none() && from_store && !self.agents[a].observer.resumed {
                        // The first look came before the engine's resume and announces the
                        // session at the checkpoint, past a request's armed cursor: the engine
                        // keeps the request suspended until its resume replays from the armed
                        // position (REC-2, OBS-2; the oracle fails `observer_resumed_past_cursor`).
                        let past: Vec<String> = self.armed_in_rollout(a).into_iter().filter(|(id, armed)| *armed < offset && !self.oracle.ended.contains_key(id)).map(|(id, _)| id).collect();
                        for id in past {
                            self.counters.fault("observer.first_look_past_armed_cursor");
                            self.log(format!("a{a} first look attaches at the checkpoint {offset}, past the armed cursor of {id} (no replay, OBS-2)"));
                        }
                    }
                    if from_store {
                        self.tolerate_stale_checkpoint(a, &session, offset);
                    }
                    if from_store && self.replaced_files.contains(&checkpoint.tail.ino) {
                        // A runtime gap, not modelled away: OBS-3 lost this session at an
                        // earlier start, that loss never became durable (its terminal commit
                        // failed or came too late), and a checkpoint saved since on the
                        // replacement file now proves fine. Requests armed in the replaced
                        // file are resumed from it, by the engine's resume or by a first look
                        // that comes before it (see `Oracle::obs3_unprotected`).
                        for _ in 0..self.oracle.unprotect_replaced(a) {
                            self.counters.fault("note.obs3_loss_not_durable");
                        }
                    }
                    self.log(format!("a{a} attach from checkpoint {}@{offset} (floor {floor:?}) {:?}", session.0, checkpoint.turn));
                }
            }
        }
        let agent = &mut self.agents[a];
        let (read, position, turn, fold_from) = start;
        agent.observer.attached = Some(session.clone());
        agent.observer.had_session = true;
        agent.observer.expected = None; // found again, or another session: EV-7 judges it
        agent.observer.file = agent.session.file;
        agent.observer.lost_reported = false;
        agent.observer.read = read;
        agent.observer.position = position;
        agent.observer.turn = turn;
        agent.observer.fold_from = fold_from;
        agent.observer.label = None;
        agent.observer.idle_from = None; // a new attachment (MON-3)
        // OBS-2, EV-13 (`CodexObserver::attach`): announced where reading begins, the point
        // the checkpoint's proof covers, and every record after it emitted: the engine proves
        // those it already reported by the mark's fingerprint.
        let cursor_announced = mutant == Mutant::ResumeAnnouncedAtCursor; // (the bug)
        let announced = if cursor_announced { floor.unwrap_or(position).max(position) } else { position };
        out.push(ObserverEvent::Attached { session, position: announced });
        // MON-4: a look that attaches is not cut, also when it began on the session this one
        // replaced (`CodexObserver::attach`).
        agent.observer.step_budget = None;
        let mut events = Vec::new();
        self.read_records(a, now, &mut events);
        // OBS-2 (`CodexObserver::consume`, `check_replay_reached`): a resumed cursor past
        // where reading began must be a record boundary of the file; a record across it, or a
        // file that ends before it, is not the file the cursor was taken in: the session is
        // lost (the next look reads the file from the start). Without this the model took a
        // file cut back and grown again while the daemon was down through a cursor inside a
        // new record, and the new records below it were folded unseen (exploration seed
        // 90096648; the runtime loses the session there).
        if let Some(floor) = floor.filter(|floor| *floor > position) {
            let agent = &self.agents[a];
            let on_boundary = agent.session.records.iter().any(|r| r.position == floor && r.visible_at_ms <= now);
            let past = events.iter().any(|e| e.position().is_some_and(|p| p > floor));
            if !on_boundary && (past || !agent.observer.behind) {
                let reason = match past {
                    true => format!("the resumed cursor {floor} is not a record boundary of the rollout"),
                    false => format!("the rollout ends at {}, before the resumed cursor {floor}", agent.observer.position),
                };
                self.log(format!("a{a} resume lost: {reason}"));
                self.counters.fault("note.resume_cursor_off_boundary");
                // What the runtime read before it found the cursor no boundary came first.
                out.extend(events.iter().filter(|e| e.position().is_some_and(|p| p > announced && p <= floor)).cloned());
                let observer = &mut self.agents[a].observer;
                observer.attached = None;
                observer.lost_reported = true;
                observer.fold_from = None;
                observer.turn = TurnState::Unknown;
                out.push(ObserverEvent::SessionLost { reason, session: None, before: None });
                return;
            }
        }
        out.extend(events.into_iter().filter(|e| e.position().is_none_or(|p| p > announced)));
    }

    /// Tail: detect a lost or replaced record, re-attach, read what became visible.
    pub fn sync_observer(&mut self, a: usize, out: &mut Vec<ObserverEvent>) {
        if self.is_managed(a) {
            return self.managed_sync(a, out);
        }
        let now = wakterm_runtime::driver::now_ms();
        if self.agents[a].process.is_none() {
            return;
        }
        let agent = &mut self.agents[a];
        agent.observer.looked = true;
        if let Some(until) = agent.lost_until_ms {
            if now < until {
                if !agent.observer.lost_reported {
                    agent.observer.lost_reported = true;
                    agent.observer.attached = None;
                    out.push(ObserverEvent::SessionLost { reason: agent.lost_reason.clone(), session: None, before: None });
                }
                return;
            }
            agent.lost_until_ms = None;
        }
        if agent.rollout_gone {
            // OBS-4 (`CodexObserver::fail_awaited`): the tree holds no rollout of the session;
            // what this daemon's stream was told to expect is lost, once.
            if let Some(expected) = agent.observer.expected.take() {
                out.push(ObserverEvent::SessionLost { reason: wakterm_engine::ROLLOUT_NOT_HELD_WHILE_DOWN.to_string(), session: Some(expected), before: None });
            }
            return;
        }
        if agent.observer.attached.as_ref() != Some(&agent.session.id) {
            if !agent.observer.lost_reported {
                out.push(ObserverEvent::SessionLost { reason: "the record was replaced".to_string(), session: None, before: None });
            }
            return self.attach(a, None, now, out);
        }
        self.read_records(a, now, out);
    }

    /// Liveness probe: a changed process is reported before anything else (as
    /// `refresh_agent` does). Returns the events and the new facts to register.
    pub fn liveness(&mut self, a: usize, out: &mut Vec<ObserverEvent>) -> Option<AgentFacts> {
        if self.is_managed(a) {
            return self.managed_liveness(a, out);
        }
        let agent = &self.agents[a];
        if agent.observer.reported == agent.process {
            return None;
        }
        if agent.observer.reported.is_some() {
            let now = wakterm_runtime::driver::now_ms();
            let same_session = agent.observer.attached.as_ref() == Some(&agent.session.id) && agent.process.is_none();
            let mut drained = false;
            let exit_at = out.len();
            if same_session {
                self.read_records(a, now, out);
                let agent = &self.agents[a];
                drained = agent.observer.read == agent.session.records.len();
            }
            match self.mutant {
                Mutant::ExitBeforeLastRead => out.insert(exit_at, ObserverEvent::ProcessExited { drained }), // the bug
                _ => out.push(ObserverEvent::ProcessExited { drained }),
            }
        }
        let agent = &mut self.agents[a];
        agent.observer.reported = agent.process;
        agent.observer.lost_reported = true; // the new process's record is attached, not "lost"
        // A new observer for the new process (or none): nothing attached, no replay.
        agent.observer.attached = None;
        agent.observer.fold_from = None;
        agent.observer.saved = None;
        agent.observer.disproved = None;
        (agent.observer.had_session, agent.observer.expected) = (false, None); // OBS-4: the new observer's
        if let Some(process) = agent.process {
            self.hand_checkpoint(a, process);
        }
        Some(self.agents[a].facts())
    }

    /// CORR-5, ADM-5: where agent `a`'s attached rollout ends now, read from the file (the
    /// runtime's `CodexObserver::record_end`, an fstat of the file the observer holds): its
    /// readable length, whatever the observer has read of it. None when the observer holds
    /// no file, or another file than the session's now (a replaced one; the runtime's held
    /// descriptor would give the old file's length, which the engine never compares with the
    /// new file's positions: it is left out rather than modelled), or for a managed agent.
    pub fn record_end(&self, a: usize) -> Option<wakterm_engine::Cursor> {
        let agent = &self.agents[a];
        let attached = agent.observer.attached.as_ref()?;
        if self.is_managed(a) || agent.process.is_none() || attached != &agent.session.id || agent.observer.file != agent.session.file {
            return None;
        }
        let end = agent.session.visible_end(wakterm_runtime::driver::now_ms());
        (end >= agent.observer.position).then(|| wakterm_engine::Cursor { session: attached.clone(), position: end })
    }

    /// MON-3's known gap: agent `a`'s holder answers no look (`holder.screen_stalled`) and its
    /// last look was taken in another file than the one the observer tails now (the session
    /// was replaced since): nothing tells whether the new file's turn end came after that look,
    /// so its `Working` still counts (safety over liveness) and the agent stays `busy`.
    pub fn stalled_look_in_another_file(&self, a: usize) -> bool {
        let agent = &self.agents[a];
        let floor_file = agent.observer.look.as_ref().and_then(|look| look.floor).map(|(file, _)| file);
        agent.screen_stalled && floor_file.is_some_and(|file| file != agent.observer.file)
    }

    /// MON-3: agent `a`'s last look has no floor (the runtime's resume measures it on the
    /// tail it had before re-attaching: none right after a daemon start).
    pub fn drop_look_floor(&mut self, a: usize) {
        if let Some(look) = self.agents[a].observer.look.as_mut() {
            look.floor = None;
        }
    }

    /// A snapshot after a look at the screen (a refresh's, a resume's).
    pub fn snapshot(&mut self, a: usize) -> Result<ObserverSnapshot, String> {
        if self.is_managed(a) {
            return self.managed_snapshot(a);
        }
        let look = self.look_at_screen(a)?;
        self.snapshot_from(a, &look, false)
    }

    /// MON-3: the observer loop's snapshot: from the last look at this process's screen unless
    /// `look_again` (the process changed, only the screen settles the turn, nothing is
    /// attached) or the pane changed since; the holder's push of that change may come after
    /// the run (`observer.screen_push_late`), and the last look is used once more, or be lost
    /// for good (`monitor.screen_push_lost`, `PUSH_LOST` of the changes while faults run).
    pub fn monitor_snapshot(&mut self, a: usize, look_again: bool) -> Result<ObserverSnapshot, String> {
        if self.is_managed(a) {
            return self.managed_snapshot(a);
        }
        let agent = &self.agents[a];
        let kept = agent.observer.look.clone().filter(|look| !look_again && Some(look.process) == agent.process);
        let pane_changed = kept.as_ref().is_some_and(|look| look.screen != agent.pane.screen || look.running != agent.running.is_some());
        let look = match kept {
            // A stalled holder pushes nothing: the loop keeps its last look.
            Some(look) if !pane_changed || agent.screen_stalled => look,
            Some(mut look) if self.fault_roll(PUSH_LOST) => {
                // The holder's push of the change is lost for good (a holder stopped, then
                // continued while the loop's watch of it reconnected): the loop takes the pane as
                // seen, and what it shows stays the last look's until something makes it look.
                self.counters.fault("monitor.screen_push_lost");
                self.log(format!("a{a} the holder's push of a screen change is lost: the last look holds"));
                (look.screen, look.running) = (self.agents[a].pane.screen, self.agents[a].running.is_some());
                self.agents[a].observer.look = Some(look.clone());
                look
            }
            Some(look) if self.fault_roll(0.5) => {
                self.counters.fault("observer.screen_push_late");
                look
            }
            _ => self.look_at_screen(a)?,
        };
        self.snapshot_from(a, &look, true)
    }

    /// One look at agent `a`'s screen (the holder's `screen`), kept as the last look.
    fn look_at_screen(&mut self, a: usize) -> Result<ScreenLook, String> {
        let agent = &self.agents[a];
        let Some(process) = agent.process else { return Err("no process runs behind the agent".to_string()) };
        if agent.screen_stalled {
            return Err("the holder does not answer".to_string());
        }
        // The runtime's `with_screen`: a visible `Working` indicator beats an idle record. The
        // screen is not always readable (the sim reads it 70% of the time).
        let running = agent.running.is_some();
        // MON-3: a turn's end not redrawn yet still shows it working (`Pane::end_drawn_at`).
        let now = wakterm_runtime::driver::now_ms();
        let end_undrawn = agent.pane.end_drawn_at.is_some_and(|(at, generation)| now < at && generation == agent.spawned);
        let stale = self.mutant == Mutant::WorkingIndicatorSticky && agent.observer.look.as_ref().is_some_and(|l| l.working && l.process == process);
        let working = ((running || end_undrawn) && thread_rng().gen_bool(0.7)) || stale; // `stale`: the bug
        // The screen adapter cannot always classify the composer (a redraw in progress).
        let composer = if self.faults_on && agent.transport == Transport::Pty && thread_rng().gen_bool(0.03) {
            self.counters.fault("observer.composer_unknown");
            Composer::Unknown
        } else {
            self.composer_on_screen(a)
        };
        // MON-3: how far the tailed file reached (the runtime measures it right after the look).
        let agent = &self.agents[a];
        let tails_current = agent.observer.attached.as_ref() == Some(&agent.session.id) && agent.observer.file == agent.session.file;
        let floor = tails_current.then(|| (agent.session.file, agent.session.visible_end(wakterm_runtime::driver::now_ms())));
        let look = ScreenLook { process, screen: agent.pane.screen, running, working, composer, floor };
        self.agents[a].observer.look = Some(look.clone());
        // Fault `holder.screen_stalled`: the holder is stopped right after a look that saw a
        // turn working (one agent, for the rest of the run), so the turn ends unseen.
        if working && running && !self.agents.iter().any(|agent| agent.screen_stalled) && self.fault_roll(SCREEN_STALL) {
            self.counters.fault("holder.screen_stalled");
            self.log(format!("a{a} the holder stops answering looks at the screen (stopped during a turn)"));
            self.agents[a].screen_stalled = true;
        }
        Ok(look)
    }

    /// The snapshot of agent `a`'s observer with `look` for what the screen shows. `monitor`:
    /// the observer loop's (`CodexObserver::monitor_snapshot`): a look's `Working` does not
    /// count once a turn ended after it (MON-3); an admission's refresh always counts it.
    fn snapshot_from(&mut self, a: usize, look: &ScreenLook, monitor: bool) -> Result<ObserverSnapshot, String> {
        let agent = &self.agents[a];
        let process = look.process;
        let attached = agent.observer.attached.clone();
        let (status, turn) = match &attached {
            // MON-4: a look cut at its bound leaves the turn unknown (the runtime's `behind`).
            Some(_) if agent.observer.behind => (ObserverStatus::Attached, TurnState::Unknown),
            Some(_) => (ObserverStatus::Attached, agent.observer.turn.clone()),
            // OBS-4 (`CodexObserver::on_none_open`): a process whose rollout no observer reads,
            // of which this observer knows no session (no checkpoint of it loaded, never
            // attached, nothing expected yet), looks fresh, as before its first turn: no
            // rollout yet, idle (the engine takes it for unavailable while the stream reports
            // a session of that process, `awaiting_reported_session`).
            None if agent.rollout_gone && !agent.observer.had_session && agent.observer.saved.is_none() => {
                self.counters.fault("note.gone_rollout_looks_fresh");
                (ObserverStatus::Attached, TurnState::Idle { last_completed: None })
            }
            None => (ObserverStatus::Unavailable { reason: agent.lost_reason.clone() }, TurnState::Unknown),
        };
        // MON-3 (`turn_ended_after`): the turn that ended last ended after the look.
        let observer = &agent.observer;
        let ended_after = look.floor.is_some_and(|(file, offset)| observer.idle_from.is_some_and(|(f, start)| f == file && f == observer.file && start >= offset));
        let idle = matches!(turn, TurnState::Idle { .. }); // not while cut (`behind`: unknown)
        let explained = monitor && idle && ended_after && self.mutant != Mutant::EndedTurnLookCounts; // the mutant: it counts
        let turn = match turn {
            TurnState::Idle { .. } if look.working && !explained => TurnState::Busy { turn: None },
            other => other,
        };
        if matches!(turn, TurnState::Busy { .. }) {
            self.counters.fault("provider.busy_turn");
        }
        let agent = &self.agents[a];
        // A look a turn's end postdates is stale: its composer too (the runtime's `snapshot`).
        let composer = if explained { Composer::Unknown } else { look.composer };
        Ok(ObserverSnapshot {
            incarnation: process.incarnation(),
            process: Some(process.identity()),
            status,
            session: attached,
            position: agent.observer.position,
            turn,
            composer,
        })
    }

    /// OBS-4 (`CodexObserver::expect`): after a restart, the stream reported `session` for
    /// agent `a`'s process and nothing was observed since: a look now that finds its rollout
    /// gone loses it. Ignored once this daemon's observer attached; a managed agent's
    /// observer expects nothing (`AgentObserver::expect`).
    pub fn expect(&mut self, a: usize, session: &SessionId, out: &mut Vec<ObserverEvent>) {
        if self.is_managed(a) || self.agents[a].process.is_none() || self.agents[a].observer.had_session {
            return;
        }
        let observer = &mut self.agents[a].observer;
        observer.had_session = true;
        if self.mutant != Mutant::ExpectationIgnored {
            observer.expected = Some(session.clone()); // (the mutant: never)
        }
        self.sync_observer(a, out);
    }

    /// REC-2: re-attach at `from` and replay everything after it, or report the loss
    /// (`CodexObserver::resume`; OBS-2 and OBS-3 in `attach`). A session whose checkpoint an
    /// earlier look disproved is lost, even when that look came first and a later one has
    /// read the file again from the start (OBS-3).
    pub fn resume(&mut self, a: usize, from: &wakterm_engine::Cursor, out: &mut Vec<ObserverEvent>) {
        if self.is_managed(a) {
            return self.managed_resume(a, from, out);
        }
        let now = wakterm_runtime::driver::now_ms();
        let agent = &self.agents[a];
        if !agent.observer.resumed && agent.observer.looked && agent.process.is_some() {
            self.counters.fault("observer.poll_before_resume");
        }
        let agent = &mut self.agents[a];
        agent.observer.resumed = true;
        // The tail is attached to the agent's current record: a `SessionLost` this resume
        // answers is not the tail's (see `Oracle::on_resume_loss_while_attached`).
        let tail_attached = agent.observer.attached.as_ref() == Some(&agent.session.id) && !agent.observer.lost_reported;
        let disproved = agent.observer.disproved.as_ref() == Some(&from.session);
        let loses = match () {
            _ if disproved => Some(RESUME_LOST_DISPROVED),
            _ if agent.process.is_none() => Some(RESUME_LOST_NO_PROCESS),
            _ if agent.lost_until_ms.is_some_and(|t| now < t) || agent.rollout_gone || agent.session.id != from.session => Some(RESUME_LOST_GONE),
            _ => None,
        };
        // A loss naming another session than the tail's is not taken for the tail's (EV-7).
        if let Some(reason) = loses.filter(|_| tail_attached && from.session == agent.session.id) {
            self.oracle.on_resume_loss_while_attached(a, reason);
        }
        let agent = &self.agents[a];
        if agent.observer.disproved.as_ref() == Some(&from.session) {
            let reason = RESUME_LOST_DISPROVED;
            self.log(format!("a{a} resume into disproved session {} (OBS-3)", from.session.0));
            out.push(ObserverEvent::SessionLost { reason: reason.to_string(), session: Some(from.session.clone()), before: None });
            return;
        }
        let agent = &self.agents[a];
        let blind = agent.lost_until_ms.is_some_and(|t| now < t) || agent.rollout_gone;
        if agent.process.is_none() {
            out.push(ObserverEvent::SessionLost { reason: RESUME_LOST_NO_PROCESS.to_string(), session: Some(from.session.clone()), before: None });
            return;
        }
        if blind || agent.session.id != from.session {
            out.push(ObserverEvent::SessionLost { reason: RESUME_LOST_GONE.to_string(), session: Some(from.session.clone()), before: None });
            if self.agents[a].rollout_gone {
                self.sync_observer(a, out); // OBS-4: the same look fails the expectation too
            }
            return;
        }
        // OBS-2: the state reached so far serves the re-attach as a checkpoint would.
        if let Some(current) = self.current_checkpoint(a) {
            self.agents[a].observer.saved = Some(current);
            self.agents[a].observer.saved_from_store = false;
        }
        let observer = &mut self.agents[a].observer;
        observer.attached = None;
        observer.fold_from = None;
        observer.turn = TurnState::Unknown;
        let first = out.len();
        self.attach(a, Some(from.position), now, out);
        let lost = out[first..].iter().any(|e| matches!(e, ObserverEvent::SessionLost { .. }));
        if let (Some(ObserverEvent::Attached { position: at, .. }), false) = (out.get(first), lost) {
            // REC-2: attached at or before the cursor, and every record after the attach, up to
            // where the observer read (a cursor that proved no record boundary lost the session
            // instead, OBS-2; EV-13 proves the records it reported already).
            let at = *at;
            let emitted: Vec<u64> = out[first + 1..].iter().filter_map(ObserverEvent::position).collect();
            let agent = &self.agents[a];
            let reached = agent.observer.position.max(from.position);
            let records = &agent.session.records[agent.session.first_after(at)..agent.session.first_after(reached)];
            let expected: Vec<u64> = records.iter().map(|r| r.position).collect();
            self.oracle.on_resume_replayed(a, from.position, at, &emitted, &expected);
        }
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0xf0..=0xff => 4,
        0xe0..=0xef => 3,
        0xc0..=0xdf => 2,
        _ => 1,
    }
}

/// SUB-4, `terminal.unclassified_composer`: a draft Codex's screen adapter reads as a question
/// (`runtime::screen::composer_state`): its first line looks like a numbered option (`1. fix`),
/// or a later line holds a `(y/n)` marker.
fn misread_as_question(draft: &str) -> bool {
    let mut lines = draft.trim().lines();
    let first = lines.next().unwrap_or_default().trim_start();
    let numbered = first.split_once(". ").is_some_and(|(n, _)| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()));
    numbered || lines.any(|line| line.contains("(y/n)"))
}
