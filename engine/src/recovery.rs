//! Restart: rebuilding the engine from what was durable (REC-*).

use crate::engine::{Engine, PersistPurpose};
use crate::io::DurableState;
use crate::receipt::{Classification, Receipt, ReturnMode, WriteState};
use crate::request::{Phase, RequestRecord};
use crate::run_clock::RunClock;
use crate::terminal::TerminalState;

/// The reason recorded for registrations found unfinished at startup.
pub const RESTART_REASON: &str = "restart_in_write_window";

impl Engine {
    /// Rebuilds the engine after a restart or crash. REC-1: every registration not durably
    /// confirmed as submitted becomes `indeterminate`: the previous runtime may or may not have
    /// written it, and a post-restart prompt must never satisfy it. REC-2: submitted and bound
    /// requests are suspended until their agent's incarnation, process and observer session are
    /// re-verified. TERM-3: sequences continue after the last durable one.
    /// `run_clock`: TIME-2, where this run's engine time stands on the machine's monotonic
    /// clock (none: unknown, and a restart ages its records by the wall clock alone).
    pub fn recover(durable: DurableState, now_ms: u64, run_clock: Option<RunClock>) -> Engine {
        let mut engine = Engine::new();
        engine.now_ms = now_ms;
        engine.run_clock = run_clock;
        engine.run_started_ms = now_ms;
        engine.next_sequence = durable.last_terminal_sequence + 1;
        engine.last_published_sequence = durable.last_terminal_sequence;
        engine.events = crate::event_stream::EventStream::recover(durable.last_event_sequence, durable.event_marks);
        let mut loaded = Vec::with_capacity(durable.requests.len()); // the store's order
        for record in durable.requests {
            record.assert_consistent();
            loaded.push(record.request_id.clone());
            engine.stored_ids.insert(&record.request_id); // HIST-5: it has a row
            if let Some(event) = &record.terminal {
                assert!(event.terminal_event_sequence <= durable.last_terminal_sequence, "TERM-3");
            }
            engine.requests.insert(record.request_id.clone(), record);
        }
        // ADM-5: the writes whose prompts may be unread, before REC-1 ends the registrations.
        for record in loaded.iter().map(|id| &engine.requests[id]) {
            if let Some(write) = RecoveredWrite::of(record, now_ms, engine.run_clock.as_ref()) {
                engine.recovered_writes.entry(record.agent_id.clone()).or_default().push(write);
            }
        }
        let registered: Vec<_> = engine.requests.values().filter(|r| r.phase == Phase::Registered).map(|r| r.request_id.clone()).collect();
        for request_id in registered {
            let record = engine.requests.get_mut(&request_id).expect("exists");
            // ADM-5: a later restart still holds for its line, from when it landed at the latest.
            record.write_unknown = true;
            record.write_unknown_since_ms = record.own_time(now_ms + crate::limits::WRITE_LANDS_WITHIN_MS, engine.run_clock.as_ref());
            record.receipt = Some(restart_receipt(record));
            engine.events.admitted_due.insert(request_id.clone()); // EV-6: its receipt was never durable
            match record.return_mode {
                ReturnMode::OneWay => {
                    record.phase = Phase::Settled;
                    engine.persist_record(PersistPurpose::Progress(request_id.clone()), &request_id);
                }
                ReturnMode::ReturnFinal => {
                    engine.finish(&request_id, TerminalState::Indeterminate, Some(RESTART_REASON), None, None);
                }
            }
        }
        let correlating: Vec<_> = engine.requests.values().filter(|r| r.phase.is_correlating()).map(|r| r.request_id.clone()).collect();
        engine.correlating.extend(correlating.iter().cloned());
        // EV-13: the requests each replay zone's proof decides (armed in its session).
        for request_id in &correlating {
            let record = &engine.requests[request_id];
            let armed = record.armed.as_ref().expect("correlating requests are armed");
            if let Some(zone) = engine.events.replay.get_mut(&record.agent_id).filter(|zone| zone.session == armed.session) {
                zone.recovered.push(request_id.clone());
            }
        }
        engine.suspended.extend(correlating);
        // HIST-1: finished requests (if the runtime loaded any) are read back on demand.
        let finished: Vec<_> = engine.requests.keys().cloned().collect();
        for request_id in finished {
            engine.evict_if_finished(&request_id);
        }
        engine
    }

    /// LIVE-1, EV-14: the runtime holds this agent, unreachable since the start
    /// (`Input::AgentUnreachable`); one registered meanwhile is not held back.
    pub(crate) fn on_agent_unreachable(&mut self, agent_id: crate::AgentId) {
        if self.events.recovered_unregistered.contains(&agent_id) {
            self.events.held_unregistered.insert(agent_id);
        }
    }

    /// REC-2: the runtime registered every agent it found; requests whose agent did not come
    /// back cannot be verified.
    pub(crate) fn on_startup_complete(&mut self) {
        // ADM-5: agents that did not come back have no wait; one the runtime holds keeps its
        // recovered writes for its registration (LIVE-1): a prompt written before the restart
        // may still sit unread, and the next admission once it answered was written behind it
        // (the simulator's `liveness.silent_past_startup_bound`, seed 45,523,595).
        let held = &self.events.held_unregistered;
        self.recovered_writes.retain(|agent_id, _| held.contains(agent_id));

        // EV-4: an agent the stream announced and that did not come back was stopped and
        // deleted, and the daemon died before the engine heard of it: say so now.
        let orphaned: Vec<_> = self
            .suspended
            .iter()
            .filter(|id| !self.agents.contains_key(&self.requests[*id].agent_id))
            .cloned()
            .collect();
        for request_id in orphaned {
            self.finish(&request_id, TerminalState::Indeterminate, Some("agent_missing_after_restart"), None, None);
        }
        // EV-14: the stops after the requests' ends (see `on_agent_removed`). LIVE-1: an agent
        // the runtime still holds did not stop: it stays unregistered until its holder answers
        // (its first registration then still knows it as the first since the restart, EV-4).
        let held = std::mem::take(&mut self.events.held_unregistered);
        let (waiting, gone): (std::collections::BTreeSet<_>, std::collections::BTreeSet<_>) = std::mem::take(&mut self.events.recovered_unregistered).into_iter().partition(|id| held.contains(id));
        self.events.recovered_unregistered = waiting;
        for agent_id in gone {
            let incarnation = self.events.marks.get(&agent_id).and_then(|m| m.incarnation.clone());
            self.record_removal(&agent_id, incarnation);
        }
    }
}

/// The receipt a replay of a registration interrupted by a restart returns: the write may or
/// may not have happened, so it claims neither.
fn restart_receipt(record: &RequestRecord) -> Receipt {
    let detail = "the daemon stopped between registering this request and confirming its write".to_string();
    record.written_receipt(Classification::Indeterminate, WriteState::Unknown, None, Some(RESTART_REASON), Some(detail))
}

/// ADM-5 across a restart: whether a finished request's record says no turn of its prompt is
/// pending though its prompt was not seen read (`prompt_seen_read`, checked first): a one-way
/// send settled with no receipt, or a return-final request ended because its turn never came
/// (RF-7, RF-8: the live wait ended with it).
fn wait_over_unread(record: &RequestRecord) -> bool {
    match record.phase {
        Phase::Settled => record.receipt.is_none(),
        Phase::Terminal => record.terminal.as_ref().and_then(|t| t.reason.as_deref()) == Some("no_turn_started"),
        _ => false,
    }
}

/// ADM-5 across a restart: a recovered write and the durable mark's user message counted as
/// its record (`RecoveredWrite::records_taken`).
type TakenRecord<'w, 'm> = (&'w RecoveredWrite, &'m crate::events::PromptTaken);

/// ADM-5 across a restart: the wait a restart reopens (`AgentEntry::awaiting_past`,
/// `awaiting_unplaced`, `awaiting_accepted`).
struct ReopenedWait {
    past: Option<crate::observer::Cursor>,
    unplaced: Option<String>,
    accepted: Option<crate::ids::TurnId>,
    /// A PTY wait's prompts, each with its floor, in write order, then the records counted
    /// for writes it does not await, taken (`AgentEntry::awaiting_prompts`).
    prompts: Vec<crate::agent::AwaitedPrompt>,
}

/// ADM-5 across a restart: whether a request's record says its prompt was read: its turn
/// started (bound, or a send acknowledged by its user message) or its line was refused
/// (MGD-7). Not a wait given up (`no_turn_started`): that says nothing of the line.
fn prompt_seen_read(record: &RequestRecord) -> bool {
    let refused = |reason: Option<&str>| reason == Some("turn_start_refused");
    match record.phase {
        Phase::Bound => true,
        Phase::Settled => record.receipt.as_ref().is_some_and(|r| r.acknowledged == Some(true) || refused(r.reason.as_deref())),
        Phase::Terminal => record.bound_turn.is_some() || refused(record.terminal.as_ref().and_then(|t| t.reason.as_deref())),
        _ => false,
    }
}

/// ADM-5 across a restart: a prompt an earlier daemon wrote into this process whose turn it may
/// not have seen starting: it may still be unread (an app-server slow to read its input shows
/// nothing of it; a short write's fragment waits for the next line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RecoveredWrite {
    /// MGD-7: the write's `turn/start` id (managed agents only).
    pub turn_start_id: Option<String>,
    /// The written prompt's hash (HASH-1): a PTY write was read when its user message was.
    pub prompt_hash: String,
    pub incarnation: crate::ids::Incarnation,
    pub process: Option<crate::observer::ProcessIdentity>,
    /// The write's floor (`RequestRecord::written_past`: the view at the write, or the rollout's
    /// end then when further, CORR-6), else the request's
    /// armed cursor: only a record past it ends the wait (a resume replays the turns before
    /// it, which are not the prompt's); for a PTY write, only its prompt's user message. None:
    /// a plain send registered with no view (ADM-13), left unfinished: no floor, only its
    /// prompt's user message, new to the view, ends the wait.
    pub floor: Option<crate::observer::Cursor>,
    /// When the write's bytes landed at the latest: the wait's grace runs from it.
    pub since_ms: u64,
    /// When its request was registered (by the wall clock of the daemon that registered it):
    /// which write was the latest, when the floors cannot say (`RecoveredWrite::latest`).
    pub registered_ms: u64,
    /// TIME-2: the same on the machine's monotonic clock, when the record's run and this one
    /// share a boot: an order no wall clock moves.
    pub registered_monotonic_ms: Option<i128>,
    /// The floor is the write's own (`written_past`), not the armed cursor
    /// of a registration whose write the restart cannot see: only then does a turn the stream
    /// saw past it say the prompt was taken (a turn between the arming and the write is not).
    pub floor_at_write: bool,
    /// The event stream's next number at the write (`RequestRecord::written_at_event`).
    pub written_at_event: Option<u64>,
    /// The write's prompt was seen taken (its request bound to its turn, acknowledged) or
    /// refused: no wait for it, but a write registered before it was read before it (input is
    /// read in order), so when it is the latest, nothing is held (`reopen_wait`), unless it
    /// joined a wait (`joined_wait`).
    pub taken: bool,
    /// A plain send that joined an open wait (`RequestRecord::joined_wait`; ADM-13 writes it
    /// whatever the wait): taken, it says nothing of a prompt written before it, which the TUI
    /// may have queued (read is not recorded: a review).
    pub joined_wait: bool,
    /// Its request is finished (settled, terminal): one of the few latest the store loads.
    pub finished: bool,
    /// CORR-9: where the user message that bound its request lies (`RequestRecord::bound_at`):
    /// of the mark's records, that one only is its own (`records_taken`).
    pub bound_at: Option<u64>,
}

impl RecoveredWrite {
    /// The write of `record` a restart reopens the wait with, if any:
    /// - a return-final request recovered `submitted` (its marker durable, no turn bound): the
    ///   wait runs from the daemon's start (when the write landed, the record does not say);
    /// - a one-way request settled after a write whose outcome was known (`written_past`),
    ///   less than RF-8's `TURN_START_TIMEOUT_MS` before now, whose prompt was not seen taken
    ///   (acknowledged) or refused (MGD-7): the wait runs from the write. The runtime loads
    ///   each agent's latest few written finished records (`Store::load_latest_written_since`,
    ///   weighed by `RecoveredWrite::considered`); before, a daemon
    ///   started after a one-way prompt's write knew nothing of it and wrote the next prompt on
    ///   top of the unread one;
    /// - a return-final request ended (cancelled, timed out, its observer lost, ...) after a
    ///   write less than that timeout before now, with no turn bound and not ended because its
    ///   turn never came (`no_turn_started`: the live wait ended then) or its line was refused:
    ///   its line may still be unread, and the live engine held the agent for it (a review: the
    ///   restart loaded a one-way request written before it as the agent's latest write, whose
    ///   turn had run, and wrote the next prompt over the ended request's unread line);
    /// - a registration a restart finds unfinished (REC-1: its write may have happened), past
    ///   its armed cursor, from the latest its line may land: `WRITE_LANDS_WITHIN_MS` after
    ///   the daemon's start (the holder outlives the daemon and may still write it; from the
    ///   start, a line landing 15 s later was held 45 s, a review); its time says nothing
    ///   sure (a wall clock stepped while the daemon was down moves it); a restart ends the
    ///   registration and marks it `write_unknown`, and a later restart counts it again
    ///   within RF-8's timeout from the same moment (it reopened a wait once: a second
    ///   restart within the minute forgot its line). Before, the restart ended it
    ///   `indeterminate` and the next prompt was written over its line (the simulator's check
    ///   fails 17 of seeds 1-20,000).
    ///
    /// And, as evidence rather than a wait, a request whose prompt was seen read
    /// (`prompt_seen_read`: bound, acknowledged, refused; `RecoveredWrite::taken`): the lines
    /// of writes registered before it were read before it (`reopen_wait`).
    ///
    /// TIME-2: how long ago the write was, the monotonic clock says when the record's run and
    /// this one share a boot (`run`); else the wall clocks the two runs read at their starts,
    /// which a step between them moves (a step forward made a write of a moment ago look older
    /// than the timeout, and nothing held its agent).
    fn of(record: &RequestRecord, now_ms: u64, run: Option<&RunClock>) -> Option<RecoveredWrite> {
        let same_boot = run.zip(record.run_clock.as_ref()).filter(|(now, then)| now.boot_id == then.boot_id);
        let floor_at_write = record.written_past.is_some(); // a registration has none
        let taken = prompt_seen_read(record);
        let (floor, since_ms) = match (record.phase, record.return_mode) {
            _ if taken => (Some(record.written_past.clone().or(record.armed.clone())?), now_ms),
            // A plain send registered with no view has no armed cursor (ADM-13); its line may
            // still be unread, so it is held for too, by its prompt alone (a registration with
            // no cursor was left out until 2026-12-06: the simulator's exploration seeds
            // 300010150 and 4200025562 once a TUI could take a prompt and start its turn late).
            (Phase::Registered, _) => (record.armed.clone(), now_ms + crate::limits::WRITE_LANDS_WITHIN_MS),
            (Phase::Submitted, _) => {
                let armed = record.armed.clone().expect("a submitted request is armed");
                // The view at the write when recorded (a record of an older daemon has none).
                (Some(record.written_past.clone().unwrap_or(armed)), now_ms)
            }
            (Phase::Settled, ReturnMode::OneWay) | (Phase::Terminal, _) if record.write_unknown => {
                // A registration an earlier restart ended (REC-1): aged from when that
                // restart counted its line landed at the latest (`write_unknown_since_ms`,
                // which may still lie ahead; a record of an older daemon, or of a restart
                // whose clock did not meet the record's, from its registration); its floor
                // is its armed cursor, as at that restart.
                let since = record.in_run_time(record.write_unknown_since_ms.unwrap_or(record.registered_ms), now_ms, run);
                if now_ms >= since.saturating_add(crate::limits::TURN_START_TIMEOUT_MS) {
                    return None;
                }
                (record.armed.clone(), since) // none for a send registered with no view
            }
            (Phase::Settled, ReturnMode::OneWay) | (Phase::Terminal, _) => {
                let since = record.in_run_time(record.written_ms(), now_ms, run); // may lie ahead
                if wait_over_unread(record) || now_ms >= since.saturating_add(crate::limits::TURN_START_TIMEOUT_MS) {
                    return None;
                }
                (Some(record.written_past.clone()?), since)
            }
            _ => return None, // released (never written); a bound one is taken, above
        };
        let registered_monotonic_ms = same_boot.map(|(_, then)| then.monotonic_ms(record.registered_ms));
        Some(RecoveredWrite { turn_start_id: record.turn_start_id.clone(), prompt_hash: record.prompt_hash.clone(), incarnation: record.incarnation.clone(), process: record.process, floor, since_ms, registered_ms: record.registered_ms, registered_monotonic_ms, floor_at_write, written_at_event: record.written_at_event, taken, joined_wait: record.joined_wait, finished: matches!(record.phase, Phase::Settled | Phase::Terminal), bound_at: record.bound_at.filter(|_| record.bound_turn.is_some()) })
    }

    /// The agent registered again: on the same process, it counts as busy until a turn starts
    /// past the floor or the wait's grace passes, as right after the write; the grace runs
    /// from the latest `since_ms`. Before, a daemon started after such a write admitted the
    /// next prompt on top of the unread one. Of the agent's `writes`, those into the process
    /// it runs count (a request left open on an earlier process says nothing of this one:
    /// taking all missed the one that did, exploration seed 4646), and the latest one's floor
    /// is the wait's: the earliest's let the replayed turn of an earlier prompt, long read,
    /// end the wait for a later one still unread (found when one-way prompts and unfinished
    /// registrations joined the writes: exploration seed 5009149).
    ///
    /// A latest write whose prompt was seen taken or refused (`RecoveredWrite::taken`, a
    /// request bound to its turn, say) reopens nothing: every line before it was read; not one
    /// that joined a wait (a plain send that may have steered past a queued prompt): the
    /// wait is then for every unread prompt from the one that opened it on (`floor_wait`).
    ///
    /// `mark`: the agent's durable event mark, when of the process the writes went to (a
    /// managed agent's new holder starts its positions over in the same thread). Its turns
    /// start at or before the mark, where no look reads again, so before, a prompt whose turn
    /// had run held its agent until RF-8's timeout after the write. A managed agent's wait is
    /// for its latest line's own answer (`managed_wait`, as the live wait); a PTY agent's for
    /// its latest write's prompt's user message past the floor (`floor_wait`).
    pub fn reopen_wait(writes: Vec<RecoveredWrite>, agent: &mut crate::agent::AgentEntry, mark: Option<&crate::events::EventMark>, now_ms: u64, boot: Option<&str>) {
        let same: Vec<&RecoveredWrite> =
            writes.iter().filter(|w| agent.facts.incarnation.as_ref() == Some(&w.incarnation) && agent.facts.process == w.process).collect();
        let considered = Self::considered(same);
        let mark = mark.filter(|m| m.incarnation.is_some() && m.incarnation == agent.facts.incarnation);
        let in_this_copy = Self::in_this_copy(mark, boot);
        let records = Self::records_taken(&considered, mark, &in_this_copy);
        let doubted = |w: &RecoveredWrite| Self::taken_without_its_record(w, &records, &in_this_copy);
        let (taken, same): (Vec<&RecoveredWrite>, Vec<&RecoveredWrite>) = considered.iter().copied().partition(|w| w.taken && !doubted(w));
        let Some(latest) = Self::latest(&same) else { return };
        if taken.iter().any(|t| !t.joined_wait && Self::registered_after(t, latest)) {
            return; // a later prompt was taken: every line before it was read (unless it joined a wait)
        }
        let wait = match &latest.turn_start_id {
            Some(line) => Self::managed_wait(line, latest, mark),
            None => Self::floor_wait((&same, &considered), &records, latest, &in_this_copy),
        };
        let Some(wait) = wait else { return };
        let since = same.iter().map(|w| w.since_ms).max().expect("one at least");
        if agent.awaiting_turn_after.is_none() {
            agent.awaiting_turn_after = Some(since);
            agent.awaiting_request = None; // MGD-7: whose refusal would end it, unknown here
            agent.awaiting_past = wait.past;
            agent.awaiting_unplaced = wait.unplaced;
            agent.awaiting_accepted = wait.accepted;
            agent.awaiting_prompts = wait.prompts;
            agent.awaiting_reopened = true;
            // Look when the grace may have run out, and at least as often as after a write.
            let due = since.saturating_add(agent.no_turn_grace_ms());
            agent.probe_at_ms = Some(due.clamp(now_ms, now_ms + crate::limits::AWAITING_TURN_GRACE_MS));
        }
    }

    /// A PTY agent's reopened wait (its writes have no line id): ended by the user message
    /// carrying the latest write's prompt past its floor (`AgentEntry::awaiting_prompts`; input
    /// is read in order, so the writes before it were read: but read is not recorded, and a
    /// plain send that steered is recorded before a prompt the TUI queued, so a restart after
    /// such a send does not count as proof, `RecoveredWrite::joined_wait`). None when the mark
    /// holds, past every write's floor (each the view at its write), the user message carrying
    /// that write's prompt (`PromptTaken::may_carry`; one record for one write,
    /// `records_taken`), not only the latest's: which write was the
    /// latest, the floors say only within one session, and the registration times not for sure
    /// (a wall clock stepped back between two daemons made an older write look the later one,
    /// and its turn skipped the wait for a later write still unread). Not any turn past the
    /// floor (as until 2026-12-06): the view at the write may stand behind the rollout, and a
    /// human's turn that began before the write lay past it while our prompt, taken by the TUI,
    /// had no turn yet (the simulator's `terminal.slow_turn_start`, seed 19221).
    ///
    /// The user message must also have been noted after the write (`PromptTaken::noted_at_event`):
    /// a mark whose forgetting (a file cut back, EV-13) was not durable at a crash keeps a
    /// record of the old copy, past a floor in the new one by position alone (a review). A
    /// record of an older daemon has no number: by position, as then; a mark of one, none:
    /// the wait stays.
    ///
    /// Nor does a turn count for a write registered before a run that found a file of the agent
    /// changed while the daemon was down, or could not prove it (`EventMark::rewritten`, by the
    /// monotonic clock of `boot`, this run's: a record of another boot or of none is taken for
    /// such a write): its floor may lie in an older copy, which no position read since compares
    /// with, and the wait's floor is moved out of every turn's reach (`UNREACHABLE_FLOOR`). The live engine does so
    /// when the zone closes (`AgentEntry::floor_unprovable`); a second restart within RF-8's
    /// minute took the new copy's turns, noted after the write, for the write's. Writes of that
    /// run and later ones read only the new copy; one of them whose prompt the mark holds says
    /// an older copy's write registered before it, and landed (its view recorded), was read.
    ///
    /// `considered`: `same` and the writes seen taken. After a send that joined a wait, the
    /// prompts of every unread write from the one that opened the wait on are awaited, not the
    /// latest's alone (`AgentEntry::awaiting_prompts`); with no opener among them (not loaded,
    /// older than RF-8's timeout), every unread one.
    fn floor_wait((same, considered): (&[&RecoveredWrite], &[&RecoveredWrite]), records: &[TakenRecord], latest: &RecoveredWrite, in_this_copy: &dyn Fn(&RecoveredWrite) -> bool) -> Option<ReopenedWait> {
        let taken_past = |w: &&RecoveredWrite| records.iter().any(|(write, _)| std::ptr::eq(*write, *w));
        // A write was read when one registered after it (by the monotonic clock) was: input is
        // read in order (exploration seed 33864710: a write of the new copy whose prompt the
        // mark holds, after one of the replaced file, held its agent; in the same copy, a
        // write whose prompt left the mark's few, or was recorded under other text, did: a
        // review). Only a write whose bytes are known to have landed (its view at the write
        // recorded): an unfinished registration's may land after the later one (a holder
        // outlives its daemon: a review). A given-up write's view is recorded at the give-up,
        // and no later write is made while it may land (ADM-12's claim, up to
        // `LOST_WRITE_HOLD_MS`; holders older than `start_by_ms` have no bound: the known gap).
        // Not a send's that joined a wait: it may have steered past a prompt the TUI queued (a
        // review).
        let landed_before = |w: &&RecoveredWrite, later: &&RecoveredWrite| w.floor_at_write && !later.joined_wait && Self::registered_after(later, w);
        let read = |w: &&RecoveredWrite| taken_past(w) || same.iter().any(|later| taken_past(later) && landed_before(w, later));
        if same.iter().all(read) {
            return None;
        }
        // The latest write's prompt; after a send that joined a wait (taken or not), also every
        // unread one from the write that opened it on (taken or not: a review), whose prompt
        // may sit queued behind the sends'.
        let opener = Self::latest(&considered.iter().copied().filter(|w| !w.joined_wait).collect::<Vec<_>>());
        let after_opener = |w: &RecoveredWrite| opener.is_none_or(|o| std::ptr::eq(w, o) || Self::registered_after(w, o));
        let sends_joined = considered.iter().any(|w| w.joined_wait && after_opener(w));
        let joined = |w: &&RecoveredWrite| sends_joined && !read(w) && after_opener(w);
        let waiting: Vec<&RecoveredWrite> = same.iter().copied().filter(|w| std::ptr::eq(*w, latest) || joined(w)).collect();
        let prompts = waiting.iter().map(|w| {
            let mut past = w.floor.clone();
            if let Some(past) = past.as_mut().filter(|_| !in_this_copy(w)) {
                past.position = crate::agent::UNREACHABLE_FLOOR; // in any session
            }
            crate::agent::AwaitedPrompt { hash: w.prompt_hash.clone(), past, request: None, reopened: true, taken_by: None, seen_unproven: false }
        });
        // And each record already counted for a write not awaited, as taken: its replay (the
        // resume reads again from the checkpoint) takes no awaited prompt of the same text (a
        // review: a taken send's record, replayed, took the queued opener's place), as a live
        // replay takes none (`AwaitedPrompt::taken_by`). An awaited write's own record (the
        // latest's, awaited whatever the mark says when an earlier write is unread) still ends
        // its part of the wait when replayed, as before.
        let awaited = |w: &RecoveredWrite| waiting.iter().any(|v| std::ptr::eq(*v, w));
        let counted = records.iter().filter(|(w, _)| !awaited(w)).map(|(w, record)| crate::agent::AwaitedPrompt { hash: w.prompt_hash.clone(), past: None, request: None, reopened: true, taken_by: Some(record.at.clone()), seen_unproven: false });
        Some(ReopenedWait { past: None, unplaced: None, accepted: None, prompts: prompts.chain(counted).take(crate::agent::MAX_AWAITED_PROMPTS).collect() })
    }

    /// ADM-5 across a restart: the mark's user message (`EventMark::prompts_taken`) each of
    /// `writes` took, one for one. Two prompts of one text (a wait's opener and a send that
    /// joined it) were both taken for read by one record past both floors, and the next prompt
    /// went over the opener, queued behind the turn the send steered (a review). The writes
    /// seen taken go first (their prompts were recorded: a record either of two writes may have
    /// made counts as the taken one's), the bound ones first, each taking the record that
    /// bound it, the others the earliest record each may have made (`may_be_its_record`; a
    /// later one lies past more floors: it is left to the others); then the unread ones, the
    /// latest first (a later write's record lies past an earlier one's floor too, so the
    /// earlier one is left what only it can have made). An unread write's record lies past
    /// its floor at the write, in this copy of the file; a taken write whose floor says
    /// nothing here takes one of its text wherever it lies.
    fn records_taken<'w, 'm>(writes: &[&'w RecoveredWrite], mark: Option<&'m crate::events::EventMark>, in_this_copy: &dyn Fn(&RecoveredWrite) -> bool) -> Vec<TakenRecord<'w, 'm>> {
        let Some(mark) = mark else { return Vec::new() };
        let mut order = writes.to_vec();
        // The bound ones first (their record is known), then by registration (the monotonic
        // clock, else the recorded time), the floor last.
        order.sort_by_key(|w| std::cmp::Reverse((w.taken, w.bound_at.is_some(), w.registered_monotonic_ms, w.registered_ms, w.floor.as_ref().map_or(0, |f| f.position))));
        let mut free: Vec<&crate::events::PromptTaken> = mark.prompts_taken.iter().collect();
        let mut counted = Vec::new();
        for write in order {
            let Some(floor) = Self::record_floor(write, in_this_copy) else { continue };
            let carries = |record: &&crate::events::PromptTaken| Self::may_be_its_record(write, floor, record);
            let found = if write.taken { free.iter().position(carries) } else { free.iter().rposition(carries) };
            if let Some(i) = found {
                counted.push((write, free.remove(i)));
            }
        }
        assert!(counted.len() <= mark.prompts_taken.len(), "a record counts for one write");
        counted
    }

    /// Where `write`'s record may lie (`records_taken`): past its floor at the write, in this
    /// copy of the file (`Some(Some(floor))`); a taken write's, when its floor says nothing
    /// here, anywhere (`Some(None)`); None: an unread write with no such floor, whose record
    /// nothing here can tell.
    fn record_floor<'w>(write: &'w RecoveredWrite, in_this_copy: &dyn Fn(&RecoveredWrite) -> bool) -> Option<Option<&'w crate::observer::Cursor>> {
        let floor = write.floor.as_ref().filter(|_| (write.floor_at_write || write.taken) && in_this_copy(write));
        (floor.is_some() || write.taken).then_some(floor)
    }

    /// Whether the mark's `record` may be `write`'s user message (`PromptTaken::may_carry`);
    /// a bound request's is the one that bound it (CORR-9, `bound_at`; a review: taking the
    /// earliest of its text, a bound write whose own record had left the mark took a later
    /// write's).
    fn may_be_its_record(write: &RecoveredWrite, floor: Option<&crate::observer::Cursor>, record: &crate::events::PromptTaken) -> bool {
        record.may_carry(&write.prompt_hash, floor, write.written_at_event) && write.bound_at.is_none_or(|at| record.at.position == at)
    }

    /// ADM-5 across a restart: `write` was seen taken, but the record of its text that it
    /// may have made went to another write (`records_taken`): one user message counted for
    /// two (a send of a return-final prompt's text, joined to its wait, acknowledged by the
    /// user message that bound the request: a review found both then taken, no wait reopened,
    /// and the next prompt written over the send's, unread). Taken as unread (PTY only: a
    /// managed write goes by its line's answer). A taken write whose record is not among the
    /// mark's few at all stays taken, and so does a bound one (its turn is its own: CORR-6).
    fn taken_without_its_record(write: &RecoveredWrite, records: &[TakenRecord], in_this_copy: &dyn Fn(&RecoveredWrite) -> bool) -> bool {
        if !write.taken || write.bound_at.is_some() || write.turn_start_id.is_some() || records.iter().any(|(w, _)| std::ptr::eq(*w, write)) {
            return false;
        }
        let Some(floor) = Self::record_floor(write, in_this_copy) else { return false };
        records.iter().any(|(_, record)| Self::may_be_its_record(write, floor, record))
    }

    /// Whether a write's floor lies in the copy of its file the observer reads now (ADM-5,
    /// EV-13): none when a run found one of the agent's files changed while the daemon was
    /// down, or could not prove it (`EventMark::rewritten`), after the write was registered
    /// (by the monotonic clock of `boot`, this run's: a record of another boot or of none is
    /// taken for such a write).
    fn in_this_copy<'a>(mark: Option<&'a crate::events::EventMark>, boot: Option<&'a str>) -> impl Fn(&RecoveredWrite) -> bool + 'a {
        let rewritten = mark.and_then(|m| m.rewritten.as_ref());
        move |w: &RecoveredWrite| rewritten.is_none_or(|run| run.followed_by(boot, w.registered_monotonic_ms))
    }

    /// A managed agent's reopened wait, for its latest write's own line (`line`; the latest
    /// line's answer covers every line before it, input being read in order), as the live
    /// wait (ADM-5): none when the mark saw that line refused, or its turn take it
    /// (`EventMark::answered_lines`); the wait for that turn's start when it saw the line
    /// accepted only; else the wait for the line's answer. Not by the mark's turn past the
    /// write's floor: the floor is the view at the write, which may stand behind the stream,
    /// so such a turn may have begun before the write (and an unfinished registration's floor
    /// is only its armed cursor).
    fn managed_wait(line: &str, latest: &RecoveredWrite, mark: Option<&crate::events::EventMark>) -> Option<ReopenedWait> {
        let answered = mark.and_then(|m| m.answered_lines.iter().find(|answer| answer.id == line));
        match answered {
            None => Some(ReopenedWait { past: latest.floor.clone(), unplaced: Some(line.to_string()), accepted: None, prompts: Vec::new() }),
            Some(answer) if answer.taken || answer.turn.is_none() => None,
            Some(answer) => Some(ReopenedWait { past: Some(answer.at.clone()), unplaced: None, accepted: answer.turn.clone(), prompts: Vec::new() }),
        }
    }

    /// Of one process's writes (in the store's order: the open ones, then the finished ones
    /// oldest first), those a restart weighs: every open one, and of the finished ones (the
    /// latest few the store loads, `MAX_RECENT_WRITES_LOADED`) the latest, and when it is a
    /// plain send that joined a wait (`joined_wait`: it may have steered past a prompt the TUI
    /// had queued), those back to the write that opened the wait (a review: only the latest
    /// was loaded, the send's record counted as proof that the queued prompt was read, and the
    /// next prompt went over it). An older finished write's wait had ended before a later
    /// write that joined none was made (ADM-5), so it is not weighed (as when only the latest
    /// was loaded).
    fn considered(writes: Vec<&RecoveredWrite>) -> Vec<&RecoveredWrite> {
        let (mut finished, mut considered): (Vec<&RecoveredWrite>, Vec<&RecoveredWrite>) = writes.into_iter().partition(|w| w.finished);
        if finished.iter().all(|w| w.registered_monotonic_ms.is_some()) {
            finished.sort_by_key(|w| w.registered_monotonic_ms); // stable: else the store's order
        }
        let sends = finished.iter().rev().take_while(|w| w.joined_wait).count();
        let from = finished.len().saturating_sub(sends + 1); // and the one before them
        considered.extend(&finished[from..]);
        considered
    }

    /// Whether `taken` was registered after `write` by the monotonic clock (TIME-2; unknown for
    /// a record of an older daemon or of another boot: no). Not by floors: a taken write's
    /// floor past a later write's (a file cut back under the same session id, a view lost
    /// and set again lower) would skip the wait for that later line (a review).
    fn registered_after(taken: &RecoveredWrite, write: &RecoveredWrite) -> bool {
        taken.registered_monotonic_ms.zip(write.registered_monotonic_ms).is_some_and(|(t, w)| t > w)
    }

    /// The latest of one process's writes, whose floor the reopened wait takes. The one
    /// registered last by the monotonic clock (TIME-2), when every record's run shares this
    /// one's boot (a claim serializes an agent's writes, so registrations come in write
    /// order). Else, floors all in one session: the furthest (the view only moves on within a
    /// session; a file cut back under the same session id can only make it a floor past the
    /// latest write's, a longer wait). Else by the recorded time, which a wall clock stepped
    /// back between two daemons can get wrong (only records of an older daemon, or of an
    /// unknown boot). The monotonic clock comes first since 2026-12-06: a PTY write's floor
    /// may be where the rollout ended at the write (CORR-6), further than a later write's
    /// floor at its view (a plain send written with no end reported), and the furthest floor
    /// named the earlier write: the reopened wait then ended at its prompt while the later
    /// one was still unread (a review).
    fn latest<'a>(writes: &[&'a RecoveredWrite]) -> Option<&'a RecoveredWrite> {
        let first = writes.first()?;
        let session = |w: &'a RecoveredWrite| w.floor.as_ref().map(|f| &f.session);
        let position = |w: &RecoveredWrite| w.floor.as_ref().map_or(0, |f| f.position);
        if writes.iter().all(|w| w.registered_monotonic_ms.is_some()) {
            return writes.iter().copied().max_by_key(|w| (w.registered_monotonic_ms, position(w)));
        }
        if writes.iter().all(|w| w.floor.is_some() && session(w) == session(first)) {
            return writes.iter().copied().max_by_key(|w| (position(w), w.registered_ms));
        }
        writes.iter().copied().max_by_key(|w| (w.registered_ms, position(w)))
    }
}
