//! Planted bugs. Each lives in a simulated port or in the glue around the production driver
//! (never in engine/ or runtime/), is a realistic bug of that layer, and must be caught by the
//! oracle.
//!
//! SUB-* (seed 003, `session action=submit`) in the simulator: submit callers (`scenario.rs`:
//! one submit, two sent in the same instant, one racing an `agent send`; random text, some of
//! it invalid; `timeout_ms` absent, in range and out of range), the pane model (`world.rs`
//! `Pane`: raw-output end, screen, child generation, writes, write lock; the TUI echoes
//! edits and reacts to a submitting CR a little later), the holder's split write and the
//! daemon's watch (`ports.rs`), fault classes `terminal.never_reacts`,
//! `terminal.reacts_before_enter`, `terminal.output_without_change`, `submit.exit_mid_wait`,
//! `submit.split_write_fails`, `submit.watch_lost`, `submit.foreign_write`,
//! `observer.composer_unknown`, `caller.submit_pair`, `caller.submit_races_admission`; oracle
//! kinds `SubmitFalseAck`, `SubmitWriteState`, `Interleaved`, `SubmitReceipt`,
//! `SubmitStalled`; mutants `boundary_before_enter`, `split_failure_refused`,
//! `submit_skips_write_lock`, `watch_composer_from_first_sample` (forced by
//! `terminal.stalled_echo`, whose screen shows the composer empty until the late redraw).
//! ADM-4: the oracle's `DraftErased` (an admission's write reaching a human's draft) and mutant
//! `look_writes_ignored` (the pane port skips the write-count precondition), and for a submit's
//! split write `submit_look_writes_ignored`; `look_count_with_screen` (the look's count taken
//! with a write under way, fault class `terminal.keys_in_flight`).
//!
//! MGD-* (managed app-server sessions) in the simulator: agent 1 is a Codex app-server under
//! its holder (`app_server.rs`: one thread for its whole life, stdin lines, the holder's
//! bounded output ring with byte offsets, respawns resuming the thread, holder restarts
//! starting the stream over), observed by a replica of the runtime's `ManagedObserver` that
//! folds with the production `app_server::Fold::line`. Fault classes
//! `app_server.notifications_evicted`, `app_server.reply_lost`, `app_server.exit_mid_turn`,
//! `app_server.holder_restart`, `app_server.busy_steer`, `app_server.stream_dropped` (the
//! daemon's holder connection drops for a while), `app_server.foreign_thread`,
//! `app_server.delta_burst`, `app_server.huge_final`, `app_server.line_too_long`,
//! `app_server.stalled_past_turn_start_timeout` (CORR-15's path, `scenario::stall_scenario`); oracle checks
//! for every `request.bound` (only the turn the request's own write opened), steered receipts
//! (one-way sends only, never armed) and steered prompts (never a final), and the REC-2 replay
//! of a managed resume; the once-known runtime gaps `note.mgd_*` fail (`--lenient-mgd` tolerates them);
//! mutants `server_request_unanswered`, `steer_reported_as_new_turn`, `foreign_thread_accepted`,
//! `any_holder_read` (a holder restarted under the agent's socket: its stream is not the old
//! process's), `resume_ignores_its_process` (REC-2: a resume asked for one process, read in
//! another's stream; forced by `app_server.resume_after_holder_restart`). The fault class
//! `app_server.mark_behind_respawn` holds the event mark in a killed process's output across
//! `agent restart` and a daemon crash. (`earlier_tail_skipped` is gone: see
//! `World::managed_resume`.)
//!
//! ADM-12 / SUB-1 lost writes: fault classes `pane.result_late`, `pane.write_late`,
//! `pane.write_after_call_bound` (the daemon's call to the holder times out: no outcome, the
//! engine's hold decides), `caller.after_call_bound` and `pane.start_deadline_refused` (a
//! holder refuses a write it comes to after the engine's deadline; `old_holders` do not); the oracle's check that the engine
//! never asks for a write while another it asked for has not ended (`ports::ask_write`);
//! mutant `call_timeout_reported_as_failed`.
//!
//! MON-1 in the simulator: the observer loop stands for the runtime's monitor; fault class
//! `monitor.wake_lost` (the sessions watch misses an attached agent's wakes, `ports::unwoken`,
//! ended as the runtime's tick and recheck rule end it: `monitor_recheck::recheck_interval`);
//! the oracle's read-lag bound after the heal (`Oracle::on_monitor_read`); mutant
//! `unwatched_attached_waits`. Fault class `monitor.watch_incomplete` (a watch with a failed
//! part, trusted by `monitor_recheck::watch_trusted` and set whole again after
//! `monitor_recheck::next_watch_retry`); mutant `incomplete_watch_trusted`. Fault class
//! `monitor.watch_lost_while_set` (the directory lost while its watch was set off the
//! reactor); mutant `lost_watch_trusted`.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mutant {
    None,
    /// Pane port: a short write (the holder wrote k < len bytes) is reported `Complete`.
    PartialWriteAccepted,
    /// Pane port: a write that failed after some bytes is reported `Refused` (the writer maps
    /// every "pane closed" error to refused, even mid-write).
    RefusedAfterPartial,
    /// Observer port: user messages carry the hash of the last prompt we typed into the pane
    /// (taken from the screen echo) instead of the text Codex recorded: the prompt-hash check
    /// is skipped in effect.
    SkipHashCheck,
    /// Observer port: the turn-id tracker is reset on task_complete but not on turn_aborted, so
    /// the turn after an aborted one is reported under the aborted turn's id (a later turn's
    /// final arrives labelled with an earlier turn id).
    StaleTurnLabel,
    /// Restart glue: the loader skips `registered` rows ("never confirmed") before
    /// `Engine::recover`, so unfinished registrations are forgotten instead of indeterminate.
    ForgetUnfinished,
    /// Effects: terminal events are pushed to watchers when their persist is issued instead of
    /// after the commit is acknowledged.
    PublishBeforeCommit,
    /// Store port: acknowledges a batch before it is durable (ack, then commit; a crash in
    /// between loses an acknowledged commit).
    AckBeforeDurable,
    /// Caller layer (daemon server): "normalises" the prompt by trimming it before admission,
    /// so a retry that changed white space replays another input's receipt and the pane gets
    /// different bytes than the caller sent.
    ReplayRewrittenInput,
    /// Caller layer (daemon server): a joined caller the engine could not serve is answered
    /// with a plain `internal_failure` rejection (nothing written, retry-safe), as the daemon
    /// once did, although the admission it joined goes on to write.
    JoinRefusalSaysUnwritten,
    /// Caller layer (daemon server): every receipt is handed out with `replayed: false`, as
    /// the engine once answered every caller joined to an admission (IDEM-5).
    ReplayFlagDropped,
    /// Pane port (the holder's look): reads the screen at once, not waiting for input written
    /// just before it to be drawn (ADM-4), so a human's draft typed a moment before an
    /// admission reads as an empty composer.
    LookBeforeInputDrawn,
    /// Observer port (the monitor): a look cut at its step bound (MON-4) is not followed by
    /// another at once; the rest waits for the next append's wake or the 30 s recheck.
    BehindWaitsForAWake,
    /// Observer port (an admission's refresh): a refresh cut at its step bound (MON-4) does not
    /// ask the monitor to read on; the rest waits for the next append's wake or the recheck.
    CutRefreshNotReadOn,
    /// Retention task: prunes by count and age only, as before EV-9's size bound (a million
    /// events of up to 2 MiB each bounded nothing on the disk).
    RetentionSizeIgnored,
    /// Caller layer (daemon server): a failed history lookup is answered with a plain
    /// `internal_failure` rejection (nothing written, retry-safe), as HIST-3 once said, although
    /// the id it could not read may be a written one that left memory.
    LookupFailureSaysUnwritten,
    /// Caller layer (daemon server): a call by exact agent id is filed under a request id of
    /// its own spelling, so a retry by another spelling is a new request and writes again.
    SpellingForksRequestId,
    /// Clock port: engine timers read the (stepped) wall clock at every step instead of the
    /// monotonic clock started from it, so a wall-clock step moves every timer.
    WallClockTimers,
    /// Observer port (OBS-2): a stored checkpoint is trusted without proving the rollout is
    /// the one checkpointed (file identity, length, window hash), so a file replaced while the
    /// daemon was down is read from the checkpoint as if it were the same.
    CheckpointSkipsIdentityCheck,
    /// Observer port (OBS-1): the checkpoint loaded at start is handed to the new observer
    /// whatever process it was saved for, so after a pid is reused by another process the old
    /// incarnation's checkpoint and turn state are used.
    CheckpointIgnoresIncarnation,
    /// Observer port (OBS-2): a request armed before the checkpoint is resumed from the
    /// checkpoint (announced at its armed position), so the records between are never replayed.
    CheckpointSkipsArmedReplay,
    /// Observer port (OBS-2, EV-13): a resume whose cursor lies past the checkpoint is
    /// announced at the cursor and the records between are folded unseen (as the runtime did
    /// until 2026-12-05): a file cut back and grown again while the daemon was down, a new
    /// record ending exactly at the cursor, hides its new records below it (forced by
    /// `checkpoint.cut_to_the_mark_while_down`).
    ResumeAnnouncedAtCursor,
    /// Observer port (ADM-17, MON-1): the monitor sends its snapshot of the view before the
    /// events it read to get there, so the engine sees those events as stale: a written
    /// prompt's turn start no longer ends the wait for it (ADM-5) and the agent stays
    /// `busy`/`awaiting_turn_start` until the grace runs out.
    SnapshotBeforeEvents,
    /// Observer port (EV-5, OBS-1): the monitor hands its checkpoint to the engine before the
    /// events it covers (as the monitor did when it wrote the checkpoint itself), so the
    /// checkpoint commits in a batch of its own ahead of them; a crash between the two
    /// commits restarts the observer past records whose events never became durable.
    CheckpointBeforeEvents,
    /// Observer port (ADM-3, ADM-17, EV-3): a refresh puts its answer first in the one step
    /// it sends, before the events it read to get there, so the engine decides the admission
    /// on the view and then sees the events as stale: a turn start they carried no longer ends
    /// an earlier written prompt's wait (ADM-5).
    RefreshAnswerFirst,
    /// Observer port (LIVE-1, EV-3): a changed process's last events and new facts are sent
    /// after the lock the change was applied under is released (as the daemon did until a
    /// review found it), so another port can read the new process's observer in between and
    /// send its events first: the engine files them under the old process.
    LivenessSentAfterRelease,
    /// Store port (STORE-2): after an error that loses the group's transaction, the batches
    /// behind it each commit alone (a savepoint outside a transaction opens one) and are still
    /// answered failed, as the runtime's writer did until a review found it.
    GroupRestCommittedAlone,
    /// Observer port (LIVE-1, LIVE-2): after a liveness look that got no facts, the monitor
    /// stops asking until the holder pushes the next change (the process changes again), as
    /// the daemon did until a review found it: the change it missed is never applied by it.
    UnknownLivenessForgotten,
    /// Observer port (MON-1): the daemon before 1791ab4. An attached agent whose sessions
    /// directory had no watch yet (Codex creates it on its first turn; the tick sets the watch
    /// after) waited out the 30 s recheck, and setting the watch woke nobody: records written
    /// before it went unread that long (an end-to-end test failed half its runs on it).
    UnwatchedAttachedWaits,
    /// Monitor (MON-1): a sessions watch notify reported an error for (a subdirectory it could
    /// not watch, out of inotify watches) was taken for an overflow: its agents were woken once
    /// and the watch still counted as covering its directory, never set again, so records
    /// appended in the unwatched part waited out the 30 s recheck (the daemon before 5a86cca).
    IncompleteWatchTrusted,
    /// Monitor (MON-1): the answer of a watch set off the reactor was taken whole after its
    /// walk had reported the directory removed (notify hands on what the walk met before it
    /// answers): the watch of a directory that was gone stayed trusted and was never set
    /// again, so records appended once Codex made it again waited out the 30 s recheck (the
    /// daemon at 674152f, a review found it).
    LostWatchTrusted,
    /// Restart glue (EV-4): the loader builds `DurableState` without the stored event marks,
    /// so the restarted engine announces its agents again and appends the records it replays
    /// (from the checkpoint or a request's armed cursor) a second time.
    EventMarksDropped,
    /// Effects (EV-8): the settled mark the catalog waits for moves only when an event is
    /// published (as the daemon once did), so a sequence abandoned by a failed commit, if it
    /// is the last one assigned, holds every catalog at `events_not_durable`.
    SettledOnlyOnPublish,
    /// EV-1, EV-8: effects move the settled mark on over event numbers whose commit failed,
    /// whatever follows them (the engine before this rule): a restart before the next commit
    /// numbers events at or below what readers were told.
    AbandonedNumbersPassed,
    /// Observer port (EV-10): assistant messages are mapped to nothing (as the observer once
    /// did), so the stream never reports `message.assistant` although the provider recorded it.
    AssistantMessagesDropped,
    /// Observer port (EV-11): a plan update is reported without its turn id (read from
    /// `event_msg` records only, where Codex writes no plan), so it cannot be placed in its turn.
    PlanTurnUnlabelled,
    /// Restart glue (EV-13): the marks lose their record fingerprints (as marks written before
    /// EV-13 had none), so the restarted engine drops every record at or below a mark's
    /// position as a replay, even new records a rollout cut back while down holds there.
    ReplaysTrustedByPosition,
    /// Stream glue (EV-9): a subscriber that lagged re-reads the store from its cursor without
    /// asking whether retention passed it (the pruned check made only at subscribe, as the
    /// daemon once did), so what was pruned meanwhile is skipped silently.
    LaggedReaderSkipsPruned,
    /// Pane port (SUB-2, SUB-4): the holder reads the Enter boundary before it writes the CR,
    /// so the harness's reaction to the paste or the CR, landing before the true boundary,
    /// counts as post-Enter movement: a false acknowledgement.
    BoundaryBeforeEnter,
    /// Pane port (SUB-2, SUB-5): a split write that failed after some bytes is reported
    /// `Refused` (the writer maps every error to "pane closed"), so the receipt says
    /// `not_started` / retry-safe with bytes in the composer.
    SplitFailureRefused,
    /// Pane port (SUB-2): the steps are written without holding the pane's write lock across
    /// the gaps, so another writer (a raw `input`, a human) splices into them.
    SubmitSkipsWriteLock,
    /// Observer port (MGD-3): every `turn/start` result naming a turn is taken for that turn's
    /// start, so a prompt the app-server folded into the running turn reports a `TurnStarted`
    /// of the running turn after it: a return-final request could bind a turn it never opened.
    SteerReportedAsNewTurn,
    /// Caller layer (MGD-7): the daemon draws no nonce for an admission (the field keeps its
    /// default, 0), so the `turn/start` id is the request id and a public format: a raw writer
    /// who knows the request id sends a request under it, and the app-server's refusal of that
    /// line ends the admission `delivery_failed` while its own line starts its turn.
    WriteNonceNotDrawn,
    /// Pane and observer glue (MGD-6): the daemon's lines reach the app-server after a bare
    /// newline (the lead's `#` lost), as the daemon once wrote them: a short write that lacked
    /// only its last newline is completed by the next line and served late, just ahead of it.
    BareNewlineLead,
    /// Restart glue (ADM-5): only open requests are loaded, as before, so the new engine knows
    /// nothing of a one-way prompt written shortly before the restart (nor of a return-final
    /// one ended since) and writes the next prompt over it while it is still unread.
    RecentFinishedNotLoaded,
    /// Restart glue (ADM-5, PTY): each agent's latest written finished request is loaded for
    /// managed agents only, on the belief that a TUI reads a prompt at once (a PTY prompt is
    /// in its turn or in the composer by the time a daemon restarts): a TUI that took a
    /// one-way prompt and starts its turn seconds later (`terminal.slow_turn_start`) gets the
    /// next prompt written over it.
    RecentPtyWritesNotLoaded,
    /// Restart glue (ADM-5): each agent's latest written finished request (one, not the few) is chosen by the
    /// registration time its record holds, not by the order the rows were stored: a wall clock
    /// stepped back between two daemons makes an older write, whose turn ran, the latest, and
    /// the next prompt goes over the later one still unread.
    LatestWrittenByRecordedTime,
    /// Restart glue (TIME-2): the new engine is given no run clock, so a restart ages the
    /// earlier daemons' writes, and picks its window of recent ones, by the wall clocks alone:
    /// a wall clock stepped forward while the daemon was down makes a write of a moment ago
    /// look older than RF-8's timeout, and the next prompt goes over its unread line.
    RunClockIgnored,
    /// Retention glue (HIST-4): finished requests are pruned by their age counted from the
    /// wall clock instead of engine time, as the daemon once did: a wall clock stepped days
    /// ahead makes every finished request due at once (a retry of its id is then taken for a
    /// new request, and a restart forgets a write whose line is unread).
    RetentionByWallClock,
    /// Restart glue (ADM-5): the stored event marks are read back without the prompts they saw
    /// taken (`EventMark::prompts_taken`, as marks an older daemon wrote): a restart shortly after
    /// a one-way prompt whose turn ran holds its agent until RF-8's timeout after the write.
    MarksForgetTurnsTaken,
    /// Restart glue (ADM-5, managed): the stored event marks are read back without the line
    /// each saw answered (`EventMark::answered_lines`, as marks an older daemon wrote): a
    /// restart shortly after a managed prompt whose turn ran holds its agent until RF-8's
    /// timeout after the write.
    MarksForgetAnsweredLines,
    /// Restart glue (EV-4): the stored event marks are read back as having reported their
    /// process's exit (a flag defaulted the wrong way): a process replaced while the daemon was
    /// down, or ending later, never exits on the stream (the oracle's `check_announced_alive`).
    MarksReadAsExited,
    /// Observer port (EV-4): a process's exit is reported before the records its last read
    /// found, which then follow its `agent.exited` under its incarnation (the oracle's
    /// `check_announced_alive`; hostile run 2's D5 had a gap and an attach there).
    ExitBeforeLastRead,
    /// Observer port (OBS-4): the session the stream reported before a restart is not
    /// expected: a process whose rollout was removed (or replaced by one of another working
    /// directory) while the daemon was down holds none, and the stream's last word on it stays
    /// `observer.attached` (a hostile run's find, 2026-12-07).
    ExpectationIgnored,
    /// ADM-18: the caller layer drops a send's no-steer flag.
    NoSteerDropped,
    /// Observer port (MGD-7): every error reply to a string id is reported as a refusal, one
    /// under an id the app-server answered already too (a holder-socket client that read the
    /// id from the result sent a request under it): the request ends `delivery_failed` while
    /// its prompt opens the turn.
    AnsweredIdRefusalReported,
    /// Observer port (CORR-3): a notification of another thread on the same app-server is
    /// folded (by a fold of that thread) and reported as the agent's own.
    ForeignThreadAccepted,
    /// Observer port glue (MGD-6): server requests are marked answered but no decline is
    /// written, so a turn that asked one waits forever.
    ServerRequestUnanswered,
    /// Restart glue (HIST-5): the history seed reads the recovery loader's rows (open requests
    /// only), so the engine takes a finished, evicted request's id for new and skips its lookup.
    SeedOpenRequestsOnly,
    /// Pane port glue (ADM-12, SUB-1): a write call the holder did not answer within the
    /// daemon's bound is reported as a write that failed before any byte (as the daemon once
    /// did), which ends the engine's lost-write hold while the stalled holder can still write.
    CallTimeoutReportedAsFailed,
    /// Resume glue (REC-2): a resume runs on whatever process the agent runs when it comes,
    /// as the runtime once did, so a late startup resume reads its old cursor in a new holder's
    /// stream (which starts over at 0) and skips every record before it.
    ResumeIgnoresItsProcess,
    /// Managed observer glue (MGD-4): the observer of a process does not check which holder
    /// its connection reached, so after a holder restart the old process's last read (its
    /// drain) reads the new holder's stream, from offset 0, as its own.
    AnyHolderRead,
    /// Watch glue (SUB-4): a pane sample does not say which holder answered, so after a holder
    /// restart the new holder's counts (generation and writes from 0 again) are compared with
    /// the boundary as if the same pane had moved.
    WatchIgnoresHolder,
    /// Managed observer glue (MGD-4): every re-proof write is reported failed, although it went
    /// through, so the re-proof is asked again at the next read whatever the backoff: a process
    /// whose answers prove nothing (`app_server.resume_foreign_session`) is asked for ever.
    ReproofWriteReportedFailed,
    /// Restart glue (LIVE-1): an agent whose holder did not answer the first probe is
    /// registered at once with no process (as the daemon did until a review found it), so the
    /// requests bound to its running turn end `incarnation_changed` while it runs on.
    SilentHolderRegisteredGone,
    /// Restart glue (LIVE-1, SOCK-2): nobody listening at a holder's socket at the daemon's
    /// first probe is taken for an exit, while the holder binds its removed socket again (a
    /// hostile run: `agent.exited` for a live agent, its request ended `indeterminate`).
    RebindingTakenForExit,
    /// Restart glue (LIVE-1, EV-14): an agent whose holder is still silent when the daemon's
    /// startup wait ends is not said to be held (`Input::AgentUnreachable`), so the engine
    /// records it stopped, and its events follow its `agent.stopped` once it answers (a
    /// hostile run saw that).
    UnreachableRecordedStopped,
    /// Observer port: the screen adapter keeps an earlier look's `Working` indicator after the
    /// pane redrew idle, so a finished turn reads as running (admissions and no-steer sends
    /// are refused `turn_active` while the agent waits).
    WorkingIndicatorSticky,
    /// Pane port: a submit's watch reads the composer once, in its first sample, and reports
    /// that in every later one. A TUI that draws the typed text only after the Enter boundary
    /// and lost the Enter (`terminal.stalled_echo`) then reads as an empty composer that
    /// moved: a false acknowledgement (SUB-4's draft check never sees the draft).
    WatchComposerFromFirstSample,
    /// Pane port (the screen adapter): a composer it cannot classify (several lines,
    /// `terminal.unclassified_composer`) reads as empty: a submit whose Enter a stalled TUI
    /// lost is acknowledged on the late redraw of its own text (SUB-4; a review got one with a
    /// 30-line command).
    UnclassifiedComposerReadsEmpty,
    /// Pane port: a write's ADM-4 precondition (the pane's write count at the admission's look)
    /// is not checked, so its Ctrl-U erases a draft a human typed after the look.
    LookWritesIgnored,
    /// Pane port: a submit's split write is not checked against the pane's write count at the
    /// submit's look (as before 2026-12-05), so its Ctrl-U erases a draft typed after the
    /// look, or raw `session input` sent meanwhile (SUB-1, MCP-4).
    SubmitLookWritesIgnored,
    /// Pane port (the holder's look): the write count is read with the screen, not under the
    /// write lock, so a human's write counted but still landing (`terminal.keys_in_flight`) is
    /// taken for keys the screen shows, and the write naming that count erases the draft (as
    /// the holder did before 2026-12-05, a review).
    LookCountWithScreen,
    /// Pane port: the write's outcome does not say where the rollout ended before the write
    /// (the runtime's fstat, `CodexObserver::record_end`), so a human's turn of the same text
    /// that the view had not read yet lies past the floor and binds the request (CORR-5,
    /// CORR-6; the engine's floor before 2026-12-06).
    RecordEndNotReported,
    /// ADM-19: the pane port's look does not say when a human last pressed Enter
    /// (`PaneLook::other_enter`), so a prompt is written while the human's turn may
    /// still be unrecorded (the real Codex's 25 ms).
    OtherEnterNotReported,
    /// ADM-19: the observer loop reports a pushed Enter with the snapshot it sent before
    /// this run's read (a read that may predate the Enter), ahead of the run's events: a turn
    /// start or user message recorded before the Enter but read now lies past that floor and
    /// ends the hold while the human's turn is unrecorded.
    EnterReportedBeforeItsRead,
    /// ADM-19: the observer loop never reports a pushed Enter (the engine learns of it only
    /// at an admission's look, whose read already holds the human's records): the hold lasts
    /// the whole grace after the human's turn showed.
    EnterReportDropped,
    /// Effects (CORR-9): a terminal event is handed to watchers rebuilt from TERM-1's first
    /// fields, without `steered`, so a steered turn's final reads as our prompt's alone.
    SteeredFlagDropped,
    /// Effects (CORR-9): every completed or aborted terminal event is handed to watchers as
    /// steered, so an unsteered turn's final reads as shared with another prompt (the other
    /// direction of `SteeredFlagDropped`).
    SteeredFlagForged,
    /// Managed observer port (CORR-15): the turn a `turn/start` reply names is never reported,
    /// so a request whose line a stalled app-server folded into the turn an earlier same-text
    /// line opened takes that turn's final.
    TurnAcceptedDropped,
    /// Managed observer port (CORR-15): a `turn/start` reply whose request the store holds
    /// ended is not reported ("nobody waits for that line"), so the turn a stalled app-server
    /// opened for a line RF-8 ended looks free, and a later same-text request folded into it
    /// takes its final (the stall path's own mutant: `TurnAcceptedDropped` is caught off it).
    EndedLinesAcceptanceDropped,
    /// Reader (RF-6): `request get` shows the engine's record as it is in memory, with the
    /// `accepted` receipt its confirmation has not made durable yet (a review found it so).
    ReaderSeesMemory,
    /// Observer loop (MON-3): only an unknown turn makes it look at the screen again, so a busy
    /// screen over an idle rollout holds until the pane's next push, for good when that push is
    /// lost (`monitor.screen_push_lost`; the hostile run's agent stuck `busy`).
    ScreenSettlesUnknownOnly,
    /// Observer loop (MON-1): compares its next snapshot with the observer's latest view, a
    /// refresh's too, which the engine may not have applied (a late refresh over a newer
    /// monitor snapshot, ADM-3): a view busy by a stale look then holds (an exploration's).
    MonitorComparesWithRefresh,
    /// Observer loop (MON-3): a look's `Working` indicator counts whatever turn ended after the
    /// look, so a holder stopped while its turn ends holds the agent `busy` (a hostile run).
    EndedTurnLookCounts,
    /// Managed observer port (MGD-4, EV-4): an eviction's loss is reported unbounded, so after
    /// a restart the engine makes it a gap after its durable mark and reports every record
    /// still in the ring again (the hostile run's repeated `turn.final`).
    EvictionLossUnbounded,
}

pub const MUTANTS: &[(Mutant, &str, &str)] = &[
    (Mutant::PartialWriteAccepted, "partial_write_accepted", "pane port reports a partial write as Complete"),
    (Mutant::RefusedAfterPartial, "refused_after_partial", "pane port reports a mid-write failure as Refused"),
    (Mutant::SkipHashCheck, "skip_hash_check", "observer port reports our prompt hash for every user message"),
    (Mutant::StaleTurnLabel, "stale_turn_label", "observer port labels the turn after an aborted one with the aborted turn's id"),
    (Mutant::ForgetUnfinished, "forget_unfinished", "restart drops registered records before Engine::recover"),
    (Mutant::PublishBeforeCommit, "publish_before_commit", "effects publish a terminal event when its persist is issued"),
    (Mutant::AckBeforeDurable, "ack_before_durable", "store port acknowledges before the commit is durable"),
    (Mutant::ReplayRewrittenInput, "replay_rewritten_input", "caller layer trims prompts, replaying a request id with different input"),
    (Mutant::SpellingForksRequestId, "spelling_forks_request_id", "caller layer files exact-id calls under another request id"),
    (Mutant::WallClockTimers, "wall_clock_timers", "clock port reads the stepped wall clock for engine timers"),
    (Mutant::JoinRefusalSaysUnwritten, "join_refusal_says_unwritten", "caller layer answers an over-cap joined caller with a retry-safe rejection"),
    (Mutant::ReplayFlagDropped, "replay_flag_dropped", "caller layer answers every call with replayed: false, joined and repeated ones too"),
    (Mutant::LookBeforeInputDrawn, "look_before_input_drawn", "pane port reads a look's screen without waiting for input written just before it to be drawn"),
    (Mutant::RetentionSizeIgnored, "retention_size_ignored", "retention task ignores the size bound, pruning by count and age only"),
    (Mutant::BehindWaitsForAWake, "behind_waits_for_a_wake", "observer port leaves a look cut at its step bound for the next wake, not reading on at once"),
    (Mutant::UnclassifiedComposerReadsEmpty, "unclassified_composer_reads_empty", "pane port reads a composer the screen adapter cannot classify as empty"),
    (Mutant::CutRefreshNotReadOn, "cut_refresh_not_read_on", "observer port leaves what a refresh cut at its step bound left unread for the next wake"),
    (Mutant::LookupFailureSaysUnwritten, "lookup_failure_says_unwritten", "caller layer answers a failed history lookup with a retry-safe rejection"),
    (Mutant::CheckpointSkipsIdentityCheck, "checkpoint_skips_identity_check", "observer port resumes from a checkpoint without proving the file is the same"),
    (Mutant::CheckpointIgnoresIncarnation, "checkpoint_ignores_incarnation", "observer port uses a checkpoint saved for another process (a reused pid)"),
    (Mutant::CheckpointSkipsArmedReplay, "checkpoint_skips_armed_replay", "observer port resumes a request armed before the checkpoint from the checkpoint"),
    (Mutant::ResumeAnnouncedAtCursor, "resume_announced_at_cursor", "observer port announces a resume past the checkpoint at its cursor and folds the records between unseen"),
    (Mutant::SnapshotBeforeEvents, "snapshot_before_events", "observer port sends its snapshot before the events it read"),
    (Mutant::CheckpointBeforeEvents, "checkpoint_before_events", "observer port hands its checkpoint to the engine before the events it covers"),
    (Mutant::RefreshAnswerFirst, "refresh_answer_first", "observer port puts a refresh's answer before the events it read, in one step"),
    (Mutant::LivenessSentAfterRelease, "liveness_sent_after_release", "observer port sends a process change after releasing the lock it applied it under"),
    (Mutant::GroupRestCommittedAlone, "group_rest_committed_alone", "store port commits the batches behind a lost group transaction alone, answering them failed"),
    (Mutant::UnknownLivenessForgotten, "unknown_liveness_forgotten", "observer port stops asking after an unknown liveness answer until the process changes again"),
    (Mutant::UnwatchedAttachedWaits, "unwatched_attached_waits", "monitor: an attached agent without a sessions watch waits out the 30 s recheck; setting the watch wakes nobody"),
    (Mutant::IncompleteWatchTrusted, "incomplete_watch_trusted", "monitor: a sessions watch with a failed part still counts as covering its directory and is never set again"),
    (Mutant::LostWatchTrusted, "lost_watch_trusted", "monitor: the watch of a sessions directory lost while the watch was being set counts as covering it and is never set again"),
    (Mutant::EventMarksDropped, "event_marks_dropped", "restart glue recovers the engine without the stored event marks"),
    (Mutant::SettledOnlyOnPublish, "settled_only_on_publish", "effects move the catalog's settled mark only on a published event"),
    (Mutant::AbandonedNumbersPassed, "abandoned_numbers_passed", "effects move the settled mark on over event numbers whose commit failed"),
    (Mutant::AssistantMessagesDropped, "assistant_messages_dropped", "observer port drops assistant messages"),
    (Mutant::PlanTurnUnlabelled, "plan_turn_unlabelled", "observer port reports plan updates without their turn id"),
    (Mutant::LaggedReaderSkipsPruned, "lagged_reader_skips_pruned", "a lagged subscriber's re-read skips what retention pruned, silently"),
    (Mutant::ReplaysTrustedByPosition, "replays_trusted_by_position", "restart glue drops the marks' fingerprints, so replays are trusted by position"),
    (Mutant::BoundaryBeforeEnter, "boundary_before_enter", "pane port reads a submit's Enter boundary before writing the CR"),
    (Mutant::SplitFailureRefused, "split_failure_refused", "pane port reports a split write that failed after some bytes as Refused"),
    (Mutant::SubmitSkipsWriteLock, "submit_skips_write_lock", "pane port writes a submit's steps without the pane's write lock across the gaps"),
    (Mutant::ServerRequestUnanswered, "server_request_unanswered", "managed observer glue never writes the decline of a server request"),
    (Mutant::SteerReportedAsNewTurn, "steer_reported_as_new_turn", "managed observer port reports a turn start for a prompt folded into the running turn"),
    (Mutant::AnsweredIdRefusalReported, "answered_id_refusal_reported", "managed observer port reports an error under an id answered already as a refusal"),
    (Mutant::WriteNonceNotDrawn, "write_nonce_not_drawn", "caller layer draws no nonce for a managed turn/start id, so a raw writer can forge its refusal"),
    (Mutant::BareNewlineLead, "bare_newline_lead", "pane and observer glue send the daemon's app-server lines after a bare newline, so a fragment that lacked only its newline is served"),
    (Mutant::RecentFinishedNotLoaded, "recent_finished_not_loaded", "restart glue loads open requests only, not each agent's latest request finished within RF-8's timeout"),
    (Mutant::RecentPtyWritesNotLoaded, "recent_pty_writes_not_loaded", "restart glue loads each agent's latest request finished within RF-8's timeout for managed agents only (a TUI is taken to read a prompt at once)"),
    (Mutant::RetentionByWallClock, "retention_by_wall_clock", "retention glue counts finished requests' ages from the wall clock, which a step of days makes all due"),
    (Mutant::RunClockIgnored, "run_clock_ignored", "restart glue gives the new engine no run clock: writes are aged by the wall clocks, which a step forward while the daemon was down makes look old"),
    (Mutant::LatestWrittenByRecordedTime, "latest_written_by_recorded_time", "restart glue picks each agent's latest written finished request by its recorded registration time, which a wall clock stepped back between two daemons inverts"),
    (Mutant::MarksForgetTurnsTaken, "marks_forget_turns_taken", "restart glue reads the stored event marks back without the turn each saw taken, so a one-way prompt whose turn ran holds its agent after a restart"),
    (Mutant::MarksForgetAnsweredLines, "marks_forget_answered_lines", "restart glue reads the stored event marks back without the line each saw answered, so a managed prompt whose turn ran holds its agent after a restart"),
    (Mutant::MarksReadAsExited, "marks_read_as_exited", "restart glue reads the stored event marks back as having reported their process's exit, so an announced process never exits on the stream"),
    (Mutant::ExitBeforeLastRead, "exit_before_last_read", "observer port reports a process's exit before the records its last read found"),
    (Mutant::ExpectationIgnored, "expectation_ignored", "observer port ignores the session the stream reported before a restart, so a rollout gone while the daemon was down makes no gap"),
    (Mutant::NoSteerDropped, "no_steer_dropped", "caller layer drops a send's no-steer flag, so it is written into a running turn"),
    (Mutant::SeedOpenRequestsOnly, "seed_open_requests_only", "restart glue seeds the stored-id filter from open requests only"),
    (Mutant::ForeignThreadAccepted, "foreign_thread_accepted", "managed observer port folds another thread's notifications as the agent's own"),
    (Mutant::CallTimeoutReportedAsFailed, "call_timeout_reported_as_failed", "pane port glue reports a write call that timed out as a failed write"),
    (Mutant::WatchIgnoresHolder, "watch_ignores_holder", "watch glue compares a replaced holder's pane with the boundary"),
    (Mutant::AnyHolderRead, "any_holder_read", "managed observer glue reads whichever holder answers at the agent's socket as its process's own"),
    (Mutant::ResumeIgnoresItsProcess, "resume_ignores_its_process", "resume glue reads a resume's cursor in whatever process the agent runs when it comes"),
    (Mutant::ReproofWriteReportedFailed, "reproof_write_reported_failed", "managed observer glue reports every re-proof write as failed, so the re-proof backoff never holds"),
    (Mutant::SilentHolderRegisteredGone, "silent_holder_registered_gone", "restart glue registers an agent whose holder did not answer its first probe as having no process"),
    (Mutant::RebindingTakenForExit, "rebinding_taken_for_exit", "restart glue takes nobody listening at a holder's socket being bound again at the daemon's start for an exit"),
    (Mutant::UnreachableRecordedStopped, "unreachable_recorded_stopped", "restart glue does not tell the engine that an agent still silent at the end of the startup wait is held, so the stream says it stopped and its events follow"),
    (Mutant::WorkingIndicatorSticky, "working_indicator_sticky", "observer port keeps an earlier look's Working indicator after the pane redrew idle"),
    (Mutant::LookWritesIgnored, "look_writes_ignored", "pane port writes an admission whatever input reached the pane since its look"),
    (Mutant::SubmitLookWritesIgnored, "submit_look_writes_ignored", "pane port writes a submit's steps whatever input reached the pane since its look"),
    (Mutant::LookCountWithScreen, "look_count_with_screen", "pane port's look reads the write count with the screen, a write under way counted"),
    (Mutant::RecordEndNotReported, "record_end_not_reported", "pane port's write outcome omits where the rollout ended before the write, so the floor is the view's"),
    (Mutant::OtherEnterNotReported, "other_enter_not_reported", "pane port's look omits when a human last pressed Enter, so a prompt races the human's unrecorded turn"),
    (Mutant::EnterReportDropped, "enter_report_dropped", "observer loop never reports a pushed Enter, so its hold lasts the grace after the human's turn showed"),
    (Mutant::EnterReportedBeforeItsRead, "enter_reported_before_its_read", "observer loop reports a pushed Enter with the snapshot it sent before its read, so records older than the Enter end the hold"),
    (Mutant::SteeredFlagDropped, "steered_flag_dropped", "effects publish terminal events without their steered flag"),
    (Mutant::SteeredFlagForged, "steered_flag_forged", "effects publish every completed or aborted terminal event as steered"),
    (Mutant::TurnAcceptedDropped, "turn_accepted_dropped", "managed observer port never reports the turn a turn/start reply names"),
    (Mutant::ScreenSettlesUnknownOnly, "screen_settles_unknown_only", "observer loop looks at the screen again only for an unknown turn, not for one busy by the screen alone"),
    (Mutant::EndedTurnLookCounts, "ended_turn_look_counts", "observer loop counts a kept look's Working indicator after a turn that ended since the look, so a stopped holder holds the agent busy"),
    (Mutant::EvictionLossUnbounded, "eviction_loss_unbounded", "managed observer reports an eviction's loss unbounded (past the mark), so a restart reports the ring's records again"),
    (Mutant::MonitorComparesWithRefresh, "monitor_compares_with_refresh", "observer loop compares its snapshot with a refresh's view, not with what it sent, so a late refresh's unapplied view hides news"),
    (Mutant::ReaderSeesMemory, "reader_sees_memory", "request get shows the in-memory record, its receipt before the confirming commit"),
    (Mutant::EndedLinesAcceptanceDropped, "ended_lines_acceptance_dropped", "managed observer port drops a turn/start reply's turn when the store holds its request ended"),
    (Mutant::WatchComposerFromFirstSample, "watch_composer_from_first_sample", "pane port reads a submit watch's composer once, in its first sample, and reports it in every later one"),
];

impl Mutant {
    pub fn parse(name: &str) -> Option<Mutant> {
        if name == "none" {
            return Some(Mutant::None);
        }
        MUTANTS.iter().find(|(_, n, _)| *n == name).map(|(m, _, _)| *m)
    }

    pub fn name(self) -> &'static str {
        MUTANTS.iter().find(|(m, _, _)| *m == self).map_or("none", |(_, n, _)| n)
    }
}
