//! The simulated ports behind the production driver's `Effects` trait, and the daemon's life:
//! start (recover from the durable store model, re-register agents, `StartupComplete`), the
//! store writer, the observer tail and liveness monitor (woken by rollout appends and pane
//! output as well as by its tick, MON-1; it sends each agent's events, then its snapshot,
//! ADM-17; then hands each rollout agent's observer checkpoint to the engine, after the events
//! it covers, which commits it in the agent's event batch, OBS-1, EV-5), the `agent events` and
//! `request watch` subscribers (live, and caught up from the store after a restart, EV-2), and
//! the crash (kill the node: every task of the daemon, queued commits included, is gone; panes,
//! Codex and committed data stay).

use crate::mutant::Mutant;
use crate::oracle::EventContext;
use crate::world::{Proc, Shared, Unwoken, World};
use madsim::rand::{thread_rng, Rng};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tokio::sync::mpsc;
use crate::world::CrMode;
use wakterm_engine::{
    judge, AgentEvent, AgentId, Cursor, DeliveryOutcome, DurableState, EnterBoundary, Engine, EventBody, EventMark, Incarnation, Input,
    Judgement, KeptRunClocks, ObserverEvent, PaneSample, PersistOp, Phase, RequestId, RequestRecord, RunClock, RunClocksSeen, SessionId, SplitOutcome,
    SplitWrite, TerminalEvent,
};
use wakterm_runtime::driver::{run_driver, Clock, DriverMsg, EngineClock, Effects, DRIVER_INBOX};
use wakterm_runtime::store::StoreOp;

fn ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(thread_rng().gen_range(lo..hi.max(lo + 1)))
}

fn send(inbox: &mpsc::Sender<DriverMsg>, input: Input) {
    // The inbox is bounded (DRIVER_INBOX) and this simulation stays far below it.
    inbox.try_send(DriverMsg::Input(input)).ok().expect("driver inbox has room");
}

/// As the runtime's resume and expectation (`RealEffects::resume`, `expect_session`): the
/// observer's events, then the snapshot after them, noted as sent, in one step. `tailed`: the
/// observer was attached before (MON-3: else the look's floor is dropped).
fn send_with_snapshot(w: &mut World, inbox: &mpsc::Sender<DriverMsg>, a: usize, events: Vec<ObserverEvent>, tailed: bool) {
    let mut step: Vec<Input> = events.into_iter().filter_map(|event| observed_input(w, a, event)).collect();
    let snapshot = w.snapshot(a).ok();
    if !tailed {
        w.drop_look_floor(a);
    }
    w.agents[a].observer.note_sent(snapshot.clone());
    step.extend(snapshot_input(w, a, snapshot));
    send_step(inbox, step);
}

/// Inputs that go in one message, so one engine step (as the runtime's monitor and refresh send
/// a read's events with what follows them: `DriverMsg::Inputs`, EV-3). Nothing: no message.
fn send_step(inbox: &mpsc::Sender<DriverMsg>, inputs: Vec<Input>) {
    if !inputs.is_empty() {
        inbox.try_send(DriverMsg::Inputs(inputs)).ok().expect("driver inbox has room");
    }
}

/// An answer from outside the daemon (a holder's): lost when the daemon that asked is gone.
fn send_if_running(inbox: &mpsc::Sender<DriverMsg>, input: Input) {
    match inbox.try_send(DriverMsg::Input(input)) {
        Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        Err(mpsc::error::TrySendError::Full(_)) => panic!("driver inbox has room"),
    }
}

/// One submission to the store writer: the engine's persist, acknowledged with its token.
/// (Observer checkpoints ride in the engine's event batches, EV-5.)
pub type Batch = (u64, Vec<PersistOp>);

pub struct SimEffects {
    pub world: Shared,
    pub inbox: mpsc::Sender<DriverMsg>,
    pub store: mpsc::UnboundedSender<Batch>,
}

fn agent_index(world: &World, agent_id: &AgentId) -> Option<usize> {
    agent_named(world, agent_id.as_str())
}

/// The provider position of a stored event mark.
fn mark_position(mark_json: &str) -> u64 {
    serde_json::from_str::<wakterm_engine::EventMark>(mark_json).expect("stored marks parse").position
}

/// `agent_index` by the store's text form of the id.
fn agent_named(world: &World, agent_id: &str) -> Option<usize> {
    world.agents.iter().position(|a| a.agent_id.as_str() == agent_id)
}

/// `app_server.resume_after_holder_restart` (REC-2): a late startup resume of a managed agent
/// sometimes outlives the agent's holder. The new holder starts its stream over at 0, so the
/// resume's cursor counts in a stream that is gone (seeds 77782850, 77787078 met it by
/// chance). The holder dies now and comes back within the returned time. More often when a
/// turn started in the stream after the resume's cursor: it is lost with the holder, so the
/// old process's observer must read nothing from the new one (MGD-4; mutant
/// `any_holder_read`).
fn holder_dies_before_resume(w: &mut World, agent_id: &AgentId, from: &Cursor) -> Option<u64> {
    let a = agent_index(w, agent_id).filter(|&a| w.is_managed(a) && w.agents[a].process.is_some())?;
    let session = &w.agents[a].session;
    let turn_after = session.id == from.session && session.records.iter().any(|r| r.position > from.position && matches!(r.event, ObserverEvent::TurnStarted { .. }));
    if !w.fault_roll(if turn_after { 0.9 } else { 0.3 }) {
        return None;
    }
    let back_ms = thread_rng().gen_range(100..500);
    w.app_holder_dies(a, back_ms);
    Some(back_ms)
}

/// ADM-4, as the holder's `Pane::screen_with_info`: a look at a PTY pane waits (up to
/// `INPUT_DRAW_WAIT_MS` after the write) for input written just before it to be drawn, before
/// it reads liveness and the screen (one holder call). True when the look goes on with the
/// last input still undrawn (past that bound).
async fn wait_for_input_drawn(world: &Shared, a: usize) -> bool {
    loop {
        let wait = {
            let w = world.lock().unwrap();
            let pane = &w.agents[a].pane;
            if w.is_managed(a) || w.mutant == Mutant::LookBeforeInputDrawn {
                return false; // the mutant: the look reads the screen at once
            }
            match wakterm_engine::pane_look::undrawn_input_deadline(pane.last_input, pane.output_end, wakterm_runtime::driver::now_ms()) {
                Some(deadline) => deadline.saturating_sub(wakterm_runtime::driver::now_ms()).clamp(1, 5),
                None => return pane.last_input.is_some_and(|last| last.output_end == pane.output_end),
            }
        };
        madsim::time::sleep(Duration::from_millis(wait)).await;
    }
}

impl Effects for SimEffects {
    fn refresh(&mut self, refresh_id: u64, agent_id: AgentId) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        madsim::task::spawn(async move {
            let slow = {
                let w = world.lock().unwrap();
                w.fault_roll(w.plan.refresh_slow)
            };
            if slow {
                world.lock().unwrap().counters.fault("observer.refresh_slow");
                late_after_a_snapshot(&world, &agent_id).await;
            } else {
                madsim::time::sleep(ms(1, 40)).await;
            }
            let known = agent_index(&world.lock().unwrap(), &agent_id);
            let Some(a) = known else {
                let snapshot = Err("the agent is not known to the daemon".to_string());
                return send(&inbox, Input::ObserverRefreshed { refresh_id, agent_id, snapshot, pane: Default::default() });
            };
            // ADM-4: the look's write count is taken under the pane's write lock, where no write
            // is under way (the holder's `screen_with_info`), before the draw wait and the
            // screen. The bug (`look_count_with_screen`): read with the screen, a write counted
            // but still landing is taken for keys the screen shows.
            let (lock, with_screen) = {
                let w = world.lock().unwrap();
                (w.agents[a].pane.lock.clone(), w.mutant == Mutant::LookCountWithScreen)
            };
            let landed = match with_screen {
                true => None, // the bug
                false => {
                    let _quiet = lock.lock_owned().await;
                    Some(world.lock().unwrap().agents[a].pane.writes)
                }
            };
            // ADM-19: the holder's note of a human's last Enter, read with the screen, before
            // the rollout (the runtime's `forward_liveness_and_screen`, then `refresh_scoped`).
            let other_enter_noted = { let w = world.lock().unwrap(); w.agents[a].pane.other_enter_ms.map(|noted| (noted, w.enter_counts(a))) };
            let undrawn = wait_for_input_drawn(&world, a).await;
            let late = look_at_liveness(&mut world.lock().unwrap(), &inbox, a).late;
            send_late(&inbox, late).await;
            let mut w = world.lock().unwrap();
            let mut events = Vec::new();
            // MON-4: one step of an attached rollout, as a monitor look (`refresh_scoped`).
            let chain_running = w.agents[a].observer.behind; // the monitor reads on already
            sync_one_step(&mut w, a, &mut events);
            // As the runtime's `refresh_agent`: the read's events and the answer, one step.
            let mut step = Vec::new();
            for event in events {
                w.log(format!("a{a} refresh observed {}", describe_event(&event)));
                step.extend(observed_input(&mut w, a, event));
            }
            let snapshot = w.snapshot(a);
            // ADM-4: the pane's write count of the look (PTY panes: the runtime's
            // `forward_liveness_and_screen`).
            // A stalled holder answered no look: no write count either (read in the same call).
            let pane_writes = (!w.is_managed(a) && !w.agents[a].screen_stalled).then(|| landed.unwrap_or(w.agents[a].pane.writes));
            if let (Some(writes), Ok(wakterm_engine::Composer::Unknown)) = (pane_writes, snapshot.as_ref().map(|s| s.composer)) {
                w.agents[a].unknown_looks_at.insert(writes);
            }
            if let (Some(writes), true) = (pane_writes, undrawn) {
                w.agents[a].undrawn_looks_at.insert(writes);
            }
            // The observer's latest view (`note_refreshed_view`), which the engine may not have
            // applied (a late refresh, ADM-3): the loop's next run sends (MON-1). The bug
            // (`monitor_compares_with_refresh`): it compares with this view (the old rule).
            w.agents[a].observer.last_snapshot = snapshot.clone().ok();
            match w.mutant {
                Mutant::MonitorComparesWithRefresh => w.agents[a].observer.sent = snapshot.clone().ok(),
                _ => w.agents[a].observer.refreshed = snapshot.is_ok(),
            }
            w.log(format!("a{a} refresh -> {}", describe_snapshot(&snapshot)));
            // ADM-19: how long ago a human's Enter landed (PTY panes). The bug
            // (`other_enter_not_reported`): the look does not say.
            let now = wakterm_runtime::driver::now_ms();
            let other_enter = other_enter_noted.filter(|_| !w.is_managed(a) && w.mutant != Mutant::OtherEnterNotReported);
            let other_enter = other_enter.map(|(noted_ms, count)| wakterm_engine::pane_look::OtherEnterLook::noted_at(noted_ms, count, now));
            let pane = wakterm_engine::pane_look::PaneLook { writes: pane_writes, other_enter };
            let answer = Input::ObserverRefreshed { refresh_id, agent_id, snapshot, pane };
            match w.mutant == Mutant::RefreshAnswerFirst {
                true => step.insert(0, answer), // the bug
                false => step.push(answer),
            }
            send_step(&inbox, step);
            // MON-4: a cut refresh asks the monitor to read on (`AgentRuntime::read_on`).
            match w.mutant {
                Mutant::CutRefreshNotReadOn if w.agents[a].observer.behind && !chain_running => leave_for_a_wake(&mut w, a), // the bug
                _ => read_on_if_behind(&mut w, a),
            }
        });
    }

    fn resume(&mut self, agent_id: AgentId, from: Cursor, incarnation: Incarnation) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        // The runtime runs it at once on a blocking thread, but does not promise it is the
        // first look at the agent: the monitor's first run, scheduled when the agent is added,
        // races it. So it is sometimes late (`observer.poll_before_resume`, counted in
        // `World::resume` when a tail poll or a refresh did look first): that first look then
        // meets a replaced rollout's checkpoint and answers `SessionLost`, and the resume into
        // the disproved session is `SessionLost` too (OBS-3, `World::attach` and
        // `World::resume`), so no request armed in the replaced file is read from it.
        madsim::task::spawn(async move {
            let (late, holder_back_ms) = {
                let mut w = world.lock().unwrap();
                let late = w.fault_roll(w.plan.resume_late);
                (late, late.then(|| holder_dies_before_resume(&mut w, &agent_id, &from)).flatten())
            };
            if let Some(back_ms) = holder_back_ms {
                madsim::time::sleep(Duration::from_millis(back_ms) + ms(200, 900)).await;
            } else if late {
                madsim::time::sleep(ms(50, 1_500)).await;
            }
            let mut w = world.lock().unwrap();
            let mut events = Vec::new();
            let ignores_process = w.mutant == Mutant::ResumeIgnoresItsProcess;
            match agent_index(&w, &agent_id) {
                // As the runtime: the daemon's observer of the agent (of the process it last
                // registered) reads another process than the one the resume was asked for, so
                // it drops it. (No observer: the resume answers the loss.)
                Some(a) if w.agents[a].observer.reported.is_some_and(|p| p.incarnation() != incarnation) && !ignores_process => {
                    if holder_back_ms.is_some() {
                        w.counters.fault("app_server.resume_after_holder_restart");
                    }
                    w.log(format!("a{a} resume at {}:{} (late={late}) for a process the agent no longer runs: dropped", from.session.0, from.position));
                }
                Some(a) => {
                    // MON-3: the runtime measures the resume's look floor on the tail it had.
                    let tailed = w.agents[a].observer.attached.is_some();
                    w.resume(a, &from, &mut events);
                    w.log(format!("a{a} resume at {}:{} (late={late}) -> {} events", from.session.0, from.position, events.len()));
                    send_with_snapshot(&mut w, &inbox, a, events, tailed);
                }
                None => {
                    let event = ObserverEvent::SessionLost { reason: "the agent is not known".to_string(), session: None, before: None };
                    send(&inbox, Input::Observed { agent_id: agent_id.clone(), event });
                }
            }
        });
    }

    fn expect_session(&mut self, agent_id: AgentId, session: SessionId, incarnation: Incarnation) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        // As the runtime: at once on a blocking thread, racing the monitor's first look.
        madsim::task::spawn(async move {
            let late = world.lock().unwrap().fault_roll(0.5);
            if late {
                madsim::time::sleep(ms(1, 800)).await;
            }
            let mut w = world.lock().unwrap();
            let Some(a) = agent_index(&w, &agent_id) else { return };
            // Another process's observer drops it, as the runtime's (its registration reset
            // what the stream reports); the observer of a process that ended meanwhile (its
            // pid reused) finds it gone (`discover_rollout_exact`), which liveness reports.
            let of = |process: Option<Proc>| process.is_some_and(|p| p.incarnation() == incarnation);
            if !of(w.agents[a].observer.reported) || !of(w.agents[a].process) {
                return;
            }
            let tailed = w.agents[a].observer.attached.is_some();
            let mut events = Vec::new();
            w.expect(a, &session, &mut events);
            w.log(format!("a{a} expects session {} (late={late}) -> {} events", session.0, events.len()));
            if events.is_empty() {
                return;
            }
            send_with_snapshot(&mut w, &inbox, a, events, tailed);
        });
    }

    /// `more_follow` only groups a step's batches into one SQLite transaction (STORE-2); each
    /// batch still commits or fails alone and is answered in order, which this model does.
    fn persist(&mut self, token: u64, ops: Vec<PersistOp>, _more_follow: bool) {
        let mut w = self.world.lock().unwrap();
        if w.mutant == Mutant::PublishBeforeCommit {
            for op in &ops {
                if let PersistOp::AppendTerminal(event) = op {
                    let durable = is_durable(&w, event);
                    w.early_published.push(event.terminal_event_sequence);
                    w.log(format!("publish(early) {} seq {} {:?}", event.request_id, event.terminal_event_sequence, event.state));
                    w.oracle.on_terminal(event, durable);
                }
            }
        }
        drop(w);
        let _ = self.store.send((token, ops)); // the writer died with the node: the batch is lost
    }

    /// The holder's `write`, run on the holders' node, as `submit_write`: a daemon crash does
    /// not stop a write the holder was asked for (a holder is its own process, MGD-1), so a
    /// stalled one may land after the crash, even after the next daemon's start (it died with
    /// the daemon until 2026-12-05, a review: no seed could land a line late across a restart).
    /// The answer goes to the daemon that asked, if it still runs.
    fn deliver(&mut self, delivery_id: u64, request_id: RequestId, agent_id: AgentId, incarnation: Incarnation, bytes: Vec<u8>, expect_writes: Option<u64>) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        let (holder, epoch, writer, record_end) = {
            let mut w = world.lock().unwrap();
            // The write is known by its request, not its text: two of ours may share one
            // (`caller.same_text_request`).
            let writer = request_id.as_str().to_string();
            ask_write(&mut w, &agent_id, delivery_id, writer.clone());
            // CORR-5, ADM-5: the runtime reads the rollout's length before the holder writes
            // (here, before the holder's part even starts). The bug: it is not reported.
            let record_end = agent_index(&w, &agent_id).and_then(|a| w.record_end(a));
            w.oracle.ends_at_write.insert(writer.clone(), record_end.as_ref().map(|c| (c.session.clone(), c.position)));
            let record_end = record_end.filter(|_| w.mutant != Mutant::RecordEndNotReported);
            (w.holder.clone().expect("the holders' node runs"), w.daemon_epoch, writer, record_end)
        };
        let asked_ms = wakterm_runtime::driver::now_ms();
        let bound = CallBound::write(asked_ms);
        let answered = bound.watch(&world, &inbox, delivery_id, |delivery_id, outcome| Input::Delivered { delivery_id, outcome: outcome.into(), record_end: None });
        holder.spawn(async move {
            madsim::time::sleep(ms(0, 20)).await;
            holder_stall(&world, &agent_id, &bound).await;
            // The holder's write takes the pane's write lock (a split write holds it through
            // its gaps).
            let lock = {
                let w = world.lock().unwrap();
                agent_index(&w, &agent_id).map(|a| w.agents[a].pane.lock.clone())
            };
            let _guard = match lock {
                Some(lock) => Some(lock.lock_owned().await),
                None => None,
            };
            // The bug (`look_writes_ignored`): the write count of the admission's look is not
            // checked.
            let checked = expect_writes.filter(|_| world.lock().unwrap().mutant != Mutant::LookWritesIgnored);
            let outcome = match (bound.refuse_if_late(&world, delivery_id), input_since_look(&world, &agent_id, checked)) {
                (Some(reason), _) => DeliveryOutcome::Refused { reason },
                (None, Some(detail)) => DeliveryOutcome::InputSinceLook { detail },
                (None, None) => write_to_pane(&world, (&agent_id, &incarnation), (&writer, &bytes), (asked_ms, expect_writes)),
            };
            end_write(&mut world.lock().unwrap(), &agent_id, delivery_id);
            let late = {
                let mut w = world.lock().unwrap();
                let now = wakterm_runtime::driver::now_ms();
                let stalled = w.stalled_registrations.remove(&writer).is_some_and(|at| now < at + 60_000);
                let managed = agent_index(&w, &agent_id).is_some_and(|a| w.is_managed(a));
                if managed && outcome == DeliveryOutcome::Complete && w.fault_roll(w.plan.reply_lost) {
                    // MGD-3: the turn/start line went in (its turn starts), but the holder's
                    // answer never comes back: the engine's DELIVERY_TIMEOUT decides.
                    w.counters.fault("app_server.reply_lost");
                    w.log(format!("deliver {delivery_id}: the holder's answer to the turn/start write is lost"));
                    return;
                }
                if w.daemon_epoch == epoch && w.inbox.is_some() {
                    // The daemon that asked still runs: it may crash now, the write's result
                    // not yet in.
                    match stalled {
                        true => w.crash_point_at(1.0, "crash.after_stalled_registration_write"),
                        false => w.crash_point("crash.after_pane_write"),
                    };
                }
                let late = w.fault_roll(w.plan.pane_late);
                if late {
                    w.counters.fault("pane.result_late");
                }
                late
            };
            madsim::time::sleep(if late { ms(10_500, 14_000) } else { ms(0, 20) }).await;
            if bound.answer(&world, &answered, delivery_id) {
                send_if_running(&inbox, Input::Delivered { delivery_id, outcome, record_end });
                read_as_committed(&world, &inbox, writer);
            }
        });
    }

    fn publish(&mut self, mut event: TerminalEvent) {
        let mut w = self.world.lock().unwrap();
        if w.mutant == Mutant::SteeredFlagDropped {
            event.steered = false; // the bug: the watcher's copy is rebuilt from TERM-1's first fields
        }
        if w.mutant == Mutant::SteeredFlagForged && matches!(event.state, wakterm_engine::TerminalState::Completed | wakterm_engine::TerminalState::Aborted) {
            event.steered = true; // the bug
        }
        let seq = event.terminal_event_sequence;
        if w.early_published.contains(&seq) {
            return; // PublishBeforeCommit: already pushed
        }
        let durable = is_durable(&w, &event);
        w.log(format!("publish {} seq {seq} {:?} turn {:?} reason {:?}", event.request_id, event.state, event.provider_turn_id.as_ref().map(|t| &t.0), event.reason));
        // LIVE-1: `incarnation_changed` is a claim about the process: false while the process
        // the request was admitted to still runs (an unanswered probe registered as "gone").
        if event.reason.as_deref() == Some("incarnation_changed") {
            let same = agent_index(&w, &event.agent_id).is_some_and(|a| w.agents[a].process.map(|p| p.incarnation()).as_ref() == Some(&event.incarnation));
            if same {
                let m = format!("{}: ended incarnation_changed although its process {} still runs", event.request_id, event.incarnation.0);
                w.oracle.false_evidence(m);
            }
        }
        *w.counters.terminals.entry(format!("{:?}", event.state)).or_default() += 1;
        w.oracle.on_terminal(&event, durable);
        note_write_given_up(&mut w, &event);
        let riding = riding_terminal_events(&w, &event);
        w.oracle.on_terminal_riding(&event, riding);
    }

    fn publish_event(&mut self, event: AgentEvent) {
        let mut w = self.world.lock().unwrap();
        w.oracle.on_event_published(event.sequence, event.kind());
        note_published_turn_start(&mut w, &event);
        if w.mutant == Mutant::SettledOnlyOnPublish {
            w.events_settled_through = event.sequence; // the bug: abandoned numbers never settle
        }
        // EV-9: a subscriber away for a while (disconnected, or too slow) reads what it missed
        // from the store when it is back, and retention may have passed its cursor meanwhile.
        let now = wakterm_runtime::driver::now_ms();
        match w.subscriber_away_until {
            Some(until) if now < until => return, // the event waits in the store
            Some(_) => {
                w.subscriber_away_until = None;
                return subscriber_catch_up(&mut w, event.sequence, "reconnect");
            }
            None if w.faults_on && (w.plan.retain_events > 0 || w.plan.retain_bytes > 0) && thread_rng().gen_bool(0.01) => {
                w.subscriber_away_until = Some(now + thread_rng().gen_range(500..5_000));
                w.counters.fault("subscriber.away");
                return;
            }
            None => {}
        }
        see_agent_event(&mut w, &event, "publish");
    }

    fn events_settled(&mut self, through: u64) {
        let mut w = self.world.lock().unwrap();
        if w.mutant == Mutant::AbandonedNumbersPassed {
            // The bug (the engine before this rule): the mark runs on over numbers whose
            // commit failed, whatever follows them.
            let mut through = through;
            while w.abandoned_sequences.contains(&(through + 1)) {
                through += 1;
            }
            w.events_settled_through = through;
        } else if w.mutant != Mutant::SettledOnlyOnPublish {
            w.events_settled_through = through;
        }
        let told = w.events_settled_through;
        w.oracle.on_settled_told(told);
    }

    /// HIST-2: the store's read side answers off the reactor; a read may fail
    /// (`store.lookup_failed`, HIST-3).
    fn load_request(&mut self, load_id: u64, request_id: RequestId) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        madsim::task::spawn(async move {
            madsim::time::sleep(ms(0, 5)).await;
            let mut w = world.lock().unwrap();
            let record = if w.fault_roll(w.plan.commit_fail) {
                w.counters.fault("store.lookup_failed");
                Err("injected: disk I/O error".to_string())
            } else {
                Ok(w.store.request(request_id.as_str()).map(|stored| serde_json::from_str::<RequestRecord>(&stored.record_json).expect("stored records parse")))
            };
            let found = match &record {
                Ok(Some(r)) => r.phase.as_str().to_string(),
                Ok(None) => "none".to_string(),
                Err(e) => e.clone(),
            };
            w.log(format!("load {request_id} -> {found}"));
            send(&inbox, Input::RequestLoaded { load_id, record });
        });
    }

    /// SUB-2: the holder's `write_steps`, run on the holders' node (a daemon crash does not
    /// stop a split write the holder has begun); the answer goes to the daemon that asked, if
    /// it still runs.
    fn submit_write(&mut self, delivery_id: u64, agent_id: AgentId, incarnation: Incarnation, write: SplitWrite, expect_writes: Option<u64>) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        // Whose write this is, known when it is asked for (a later submission of the same text
        // may come before a stalled write starts).
        let (holder, epoch, sid) = {
            let mut w = world.lock().unwrap();
            let text = write.steps.get(1).map(|paste| strip_paste(paste)).unwrap_or_default();
            let sid = w.oracle.submission_of(&text).unwrap_or_else(|| {
                w.oracle.unfinished(format!("a split write of an unknown submission text {text:?}"));
                "unknown-submission".to_string()
            });
            ask_write(&mut w, &agent_id, delivery_id, sid.clone());
            race_a_draft(&mut w, &world, &agent_id, delivery_id);
            (w.holder.clone().expect("the holders' node runs"), w.daemon_epoch, sid)
        };
        let bound = CallBound::split(wakterm_runtime::driver::now_ms(), &write);
        let answered = bound.watch(&world, &inbox, delivery_id, |delivery_id, outcome| Input::SubmitWritten { delivery_id, outcome: outcome.into() });
        holder.spawn(async move {
            madsim::time::sleep(ms(0, 10)).await;
            holder_stall(&world, &agent_id, &bound).await;
            let outcome = split_write(&world, (&agent_id, &incarnation, expect_writes), &write, epoch, sid, &bound, delivery_id).await;
            end_write(&mut world.lock().unwrap(), &agent_id, delivery_id);
            let outcome = match outcome {
                // The bug (`split_failure_refused`): every write error is "the pane refused".
                SplitOutcome::Failed { bytes_written, error } if bytes_written > 0 && world.lock().unwrap().mutant == Mutant::SplitFailureRefused => {
                    SplitOutcome::Refused { reason: format!("pane closed: {error}") }
                }
                other => other,
            };
            let late = {
                let mut w = world.lock().unwrap();
                let late = w.fault_roll(w.plan.pane_late);
                if late {
                    w.counters.fault("pane.result_late");
                }
                late
            };
            madsim::time::sleep(if late { ms(10_500, 14_000) } else { ms(0, 10) }).await;
            if bound.answer(&world, &answered, delivery_id) {
                send_if_running(&inbox, Input::SubmitWritten { delivery_id, outcome });
            }
        });
    }

    /// SUB-4: the daemon's watch on its own holder connection: sample, judge, wait for the
    /// holder's `info_changed` (at most 500 ms), until `judge` decides or `wait_ms` passed.
    fn watch_pane(&mut self, watch_id: u64, agent_id: AgentId, boundary: EnterBoundary, wait_ms: u64) {
        let world = self.world.clone();
        let inbox = self.inbox.clone();
        madsim::task::spawn(async move {
            let started = wakterm_runtime::driver::now_ms();
            let deadline = started + wait_ms;
            let (lost, exit_at, replaced_at) = {
                let w = world.lock().unwrap();
                // The harness usually reacts within a few hundred milliseconds: the faults land
                // early enough to matter.
                let early = |wait_ms: u64| thread_rng().gen_range(0..wait_ms.clamp(1, 600));
                let lost = w.fault_roll(w.plan.watch_lost).then(|| (thread_rng().gen_bool(0.5), started + early(wait_ms)));
                let exit_at = w.fault_roll(w.plan.exit_mid_wait).then(|| started + early(wait_ms));
                let replaced_at = w.fault_roll(0.1).then(|| started + early(wait_ms));
                (lost, exit_at, replaced_at)
            };
            let (mut exit_at, mut replaced_at) = (exit_at, replaced_at);
            let mut first_composer = None;
            loop {
                let now = wakterm_runtime::driver::now_ms();
                let changed = {
                    let mut w = world.lock().unwrap();
                    let Some(a) = agent_index(&w, &agent_id) else {
                        return send(&inbox, Input::PaneWatched { watch_id, sample: Err("the agent is not known to the daemon".to_string()) });
                    };
                    if exit_at.is_some_and(|at| at <= now) {
                        exit_at = None;
                        if w.agents[a].process.is_some() {
                            w.counters.fault("submit.exit_mid_wait");
                            w.kill_process(a, thread_rng().gen_range(300..3_000));
                        }
                    }
                    if replaced_at.is_some_and(|at| at <= now) {
                        replaced_at = None;
                        w.replace_pty_holder(a, &boundary);
                    }
                    match lost {
                        Some((true, at)) if at <= now => {
                            w.counters.fault("submit.watch_lost");
                            w.log(format!("a{a} watch {watch_id}: the pane cannot be read"));
                            return send(&inbox, Input::PaneWatched { watch_id, sample: Err("the pane could not be read: EIO".to_string()) });
                        }
                        Some((false, at)) if at <= now => {
                            w.counters.fault("submit.watch_lost");
                            w.log(format!("a{a} watch {watch_id}: the watch hangs and never answers"));
                            return;
                        }
                        _ => {}
                    }
                    let truth = w.pane_truth(a);
                    let sample = PaneSample {
                        output_end: truth.output_end,
                        screen_digest: truth.screen,
                        generation: truth.generation,
                        alive: truth.alive,
                        writes: truth.writes,
                        // As the runtime reads it: the holder that answered. The mutant
                        // `watch_ignores_holder` takes every answer for the writer's.
                        holder: match w.mutant {
                            Mutant::WatchIgnoresHolder => boundary.holder.clone(),
                            _ => w.holder_label(a),
                        },
                        // The mutant `watch_composer_from_first_sample` keeps the first one.
                        composer: match w.mutant {
                            Mutant::WatchComposerFromFirstSample => *first_composer.get_or_insert_with(|| w.composer_on_screen(a)),
                            _ => w.composer_on_screen(a),
                        },
                        elapsed_ms: now - started,
                    };
                    if sample.composer == wakterm_engine::Composer::Unknown && w.plan.unclassified_composer {
                        w.counters.fault("terminal.unclassified_composer");
                    }
                    let judged = judge(&boundary, &sample);
                    if judged != Judgement::Pending || now >= deadline {
                        w.log(format!("a{a} watch {watch_id} -> {judged:?} after {} ms (output {} -> {}, writes {} -> {})", now - started, boundary.output_offset, sample.output_end, boundary.writes, sample.writes));
                        return send(&inbox, Input::PaneWatched { watch_id, sample: Ok(sample) });
                    }
                    w.agents[a].pane.changed.clone()
                };
                let mut next = deadline.min(now + 500);
                for at in [exit_at, replaced_at, lost.map(|(_, at)| at)].into_iter().flatten() {
                    next = next.min(at.max(now));
                }
                let notified = changed.notified();
                let _ = madsim::time::timeout(Duration::from_millis(next.saturating_sub(now).max(1)), notified).await;
            }
        });
    }
}

/// ADM-5, ADM-12: a request ended `write_result_lost` (its terminal event seen live or caught
/// up after a restart): the engine gave its write up and holds the agent for RF-8's timeout, as
/// after a receipt saying so (`Oracle::on_receipt`), which a crash may have kept from its caller
/// (exploration seed 86889244).
fn note_write_given_up(w: &mut World, event: &TerminalEvent) {
    if event.reason.as_deref() == Some("write_result_lost") {
        if let Some(a) = agent_index(w, &event.agent_id) {
            w.oracle.on_write_given_up(a, event.request_id.as_str());
        }
    }
}

/// ADM-5 across a restart: the agents whose first turn after their last write (the oracle's
/// `turn_after_write`) is a durable `turn.started` event (a PTY write's: the user message
/// carrying its prompt, which the durable mark keeps), in the session their durable event
/// mark still reports (a later session's turn moves the mark's evidence there), with no loss
/// or gap of their observer durable after it (the mark forgets its turns then:
/// `EventMark::forget_turns`; a managed agent's evicted notifications, seed 12482). For a
/// managed agent's last line, besides, the engine must have been told the line's acceptance
/// into that turn no later than its start (`Oracle::line_answer_kept`): else the new engine
/// waits for that line's own answer (`RecoveredWrite::managed_wait`; a turn past the write's
/// floor proves nothing of the line), which a resume past it never replays, and holds the
/// agent for RF-8's timeout (a known gap).
fn turns_after_writes_durable(w: &World) -> BTreeSet<usize> {
    let of_kind = |kind: &str| -> Vec<AgentEvent> {
        w.store.agent_events_of_kind(kind).iter().filter_map(|stored| serde_json::from_str(&stored.event_json).ok()).collect()
    };
    let started = of_kind("turn.started");
    let losses: Vec<AgentEvent> = of_kind("observer.lost").into_iter().chain(of_kind("observer.gap")).collect();
    let durable = |a: usize, (_, at, turn): &(u64, u64, wakterm_engine::TurnId)| {
        let Some((session, _)) = w.oracle.last_write.get(&a) else { return false };
        let agent_id = &w.agents[a].agent_id;
        let reported = w.durable_mark(a).and_then(|m| m.session).as_ref() == Some(session);
        let stored = |e: &&AgentEvent| {
            &e.agent_id == agent_id
                && matches!(&e.body, EventBody::TurnStarted { session: s, provider_turn_id, position } if s == session && provider_turn_id == turn && position == at)
        };
        // A PTY write's: the user message carrying its prompt, kept by the durable mark
        // (`EventMark::prompts_taken`); the turn start is no sign (`AgentEntry::awaiting_prompts`).
        let pty_prompt = w.oracle.last_line(a).is_none().then(|| w.oracle.last_prompt(a));
        if let Some(prompt) = pty_prompt {
            let mark = w.durable_mark(a);
            let kept = |p: &wakterm_engine::PromptTaken| Some(p.prompt_hash.as_str()) == prompt && &p.at.session == session && p.at.position == *at;
            let Some(message) = mark.as_ref().and_then(|m| m.prompts_taken.iter().find(|p| kept(p))) else { return false };
            let lost_since = losses.iter().any(|e| &e.agent_id == agent_id && message.noted_at_event.is_none_or(|noted| e.sequence >= noted));
            return reported && !lost_since;
        }
        let Some(start) = started.iter().find(stored) else { return false };
        let lost_since = losses.iter().any(|e| &e.agent_id == agent_id && e.sequence > start.sequence);
        let line_answered = w.oracle.last_line(a).is_none() || w.oracle.line_answer_kept(a);
        reported && !lost_since && line_answered
    };
    w.oracle.turn_after_write.iter().filter(|(a, entry)| durable(**a, entry)).map(|(a, _)| *a).collect()
}

/// ADM-5 across a restart: per agent, when the engine asked for each write whose record says
/// durably that its prompt was read (bound to its turn, acknowledged, or refused by the
/// app-server): every line written before it was read, so a registration a restart ended
/// before that write no longer holds the agent (`Oracle::on_daemon_start`). Read from the
/// record's facts, as the engine's restart reads them.
fn writes_seen_read_durably(w: &World) -> Vec<(usize, u64)> {
    let refused = |reason: Option<&str>| reason == Some("turn_start_refused");
    let seen_read = |r: &RequestRecord| match r.phase {
        Phase::Bound => true,
        Phase::Settled => r.receipt.as_ref().is_some_and(|receipt| receipt.acknowledged == Some(true) || refused(receipt.reason.as_deref())),
        Phase::Terminal => r.bound_turn.is_some() || refused(r.terminal.as_ref().and_then(|t| t.reason.as_deref())),
        _ => false,
    };
    let mut taken = Vec::new();
    for stored in w.store.requests() {
        let record: RequestRecord = serde_json::from_str(&stored.record_json).expect("stored records parse");
        let asked = w.oracle.writes.get(record.request_id.as_str()).and_then(|writes| writes.iter().map(|f| f.asked_ms).min());
        if let (true, Some(a), Some(asked)) = (seen_read(&record), agent_index(w, &record.agent_id), asked) {
            taken.push((a, asked));
        }
    }
    taken
}

/// EV-6: how many `request.terminal` agent events of this terminal event the store holds.
fn riding_terminal_events(w: &World, event: &TerminalEvent) -> usize {
    w.store
        .agent_events_of_kind("request.terminal")
        .iter()
        .filter_map(|stored| serde_json::from_str::<AgentEvent>(&stored.event_json).ok())
        .filter(|e| matches!(&e.body, EventBody::RequestTerminal { terminal_event_sequence, .. } if *terminal_event_sequence == event.terminal_event_sequence))
        .count()
}

/// EV-3: tells the oracle of a published `turn.started` the store holds at its sequence (a
/// mutant that publishes before its commit must not make a start the store never kept count
/// as reported). Only a start's stored row is read.
fn note_published_turn_start(w: &mut World, event: &AgentEvent) {
    let EventBody::TurnStarted { provider_turn_id, .. } = &event.body else { return };
    let stored = w.store.agent_event(event.sequence).map(|stored| serde_json::from_str::<AgentEvent>(&stored.event_json).expect("stored events parse"));
    let kept = stored.is_some_and(|stored| stored.agent_id == event.agent_id && matches!(&stored.body, EventBody::TurnStarted { provider_turn_id: kept, .. } if kept == provider_turn_id));
    if kept {
        note_durable_turn_start(w, event);
    }
}

/// EV-3: tells the oracle of a durable `turn.started` (`Oracle::on_turn_start_durable`).
fn note_durable_turn_start(w: &mut World, event: &AgentEvent) {
    let agent = w.agents.iter().position(|a| a.agent_id == event.agent_id);
    if let (EventBody::TurnStarted { provider_turn_id, .. }, Some(a)) = (&event.body, agent) {
        w.oracle.on_turn_start_durable(event.sequence, a, &provider_turn_id.0);
    }
}

/// An `agent events` subscriber gets one event (`how`: live `publish`, or `catch-up` from the
/// store after a restart): the oracle checks it against the store and the provider's records.
pub(crate) fn see_agent_event(w: &mut World, event: &AgentEvent, how: &str) {
    let json = serde_json::to_string(event).expect("events serialise");
    let agent = w.agents.iter().position(|a| a.agent_id == event.agent_id);
    w.log(format!("{how} event {} a{} {}", event.sequence, agent.map_or("?".to_string(), |a| a.to_string()), describe_agent_event(&event.body)));
    *w.counters.events.entry(event.kind()).or_default() += 1;
    let terminal = match &event.body {
        EventBody::RequestTerminal { terminal_event_sequence, .. } => w
            .store
            .terminal_after(terminal_event_sequence.saturating_sub(1))
            .into_iter()
            .find(|t| t.sequence == *terminal_event_sequence)
            .and_then(|t| serde_json::from_str::<TerminalEvent>(&t.event_json).ok()),
        _ => None,
    };
    let managed_process = agent.filter(|a| w.is_managed(*a)).and_then(|_| event.incarnation.as_ref()).map(|i| i.0.clone());
    let World { oracle, agents, store, .. } = w;
    let agents: &[crate::world::Agent] = agents;
    // A managed agent's session (its thread) spans holder generations whose offsets restart:
    // the one a process of this event's incarnation wrote.
    let incarnation = event.incarnation.clone();
    let sessions = move |session: &wakterm_engine::SessionId| {
        let a = agent?;
        let agent = &agents[a];
        let by_writer = std::iter::once(&agent.session)
            .chain(agent.archived.iter().rev())
            .find(|s| &s.id == session && incarnation.as_ref().is_some_and(|i| s.writers.contains(i)));
        by_writer.or_else(|| agent.session_of(session))
    };
    // Durable when committed: retention may have removed it since (EV-9).
    let stored = store.agent_event(event.sequence).map(|e| e.event_json.as_str()).or_else(|| store.pruned_event(event.sequence));
    let cx = EventContext { json: &json, stored, agent, sessions: &sessions, terminal, managed_process };
    oracle.on_agent_event(event, &cx);
    for note in std::mem::take(&mut w.oracle.notes) {
        w.counters.fault(note);
    }
}

fn describe_agent_event(body: &EventBody) -> String {
    match body {
        EventBody::ObserverAttached { session, position } => format!("observer.attached {}@{position}", session.0),
        EventBody::ObserverGap { session, after_position, reason } => {
            format!("observer.gap {:?}@{after_position} {reason}", session.as_ref().map(|s| &s.0))
        }
        EventBody::TurnStarted { session, position, provider_turn_id } => format!("turn.started {}@{position} {}", session.0, provider_turn_id.0),
        EventBody::UserMessage { session, position, .. } => format!("message.user {}@{position}", session.0),
        EventBody::TurnCompleted { session, position, .. } => format!("turn.completed {}@{position}", session.0),
        EventBody::TurnFinal { session, position, .. } => format!("turn.final {}@{position}", session.0),
        EventBody::TurnAborted { session, position, .. } => format!("turn.aborted {}@{position}", session.0),
        EventBody::RequestTerminal { request_id, terminal_event_sequence, state, .. } => {
            format!("request.terminal {request_id} {state:?} terminal seq {terminal_event_sequence}")
        }
        EventBody::RequestAdmitted { request_id, .. } => format!("request.admitted {request_id}"),
        EventBody::RequestBound { request_id, provider_turn_id } => format!("request.bound {request_id} {}", provider_turn_id.0),
        other => other.kind().to_string(),
    }
}

fn is_durable(w: &World, event: &TerminalEvent) -> bool {
    w.store.terminal_for(event.request_id.as_str()).is_some_and(|e| e.sequence == event.terminal_event_sequence)
}

fn describe_snapshot(s: &Result<wakterm_engine::ObserverSnapshot, String>) -> String {
    match s {
        Ok(s) => format!("{:?} {:?} pos {} {:?} {:?}", s.status, s.session.as_ref().map(|x| &x.0), s.position, s.turn, s.composer),
        Err(e) => format!("error {e}"),
    }
}

/// The holder's pane: refuses before the first byte when the process changed (as
/// `write_once` does); otherwise writes all, some or none of the bytes, by the seed.
/// ADM-4, as the holder's `write_starting_by` and `write_steps`: under the pane's write lock, a
/// write naming the write count of its look is refused, nothing written, when any write came
/// since; the refusal's detail, or None. (The mutants `look_writes_ignored` and
/// `submit_look_writes_ignored` make their callers pass no count.)
fn input_since_look(world: &Shared, agent_id: &AgentId, expect_writes: Option<u64>) -> Option<String> {
    let mut w = world.lock().unwrap();
    let a = agent_index(&w, agent_id)?;
    let (seen, now) = (expect_writes?, w.agents[a].pane.writes);
    if seen == now {
        return None;
    }
    w.counters.fault("pane.input_since_look");
    w.log(format!("a{a} write refused: the pane's writes went from {seen} to {now} since the look"));
    Some(format!("input reached the pane since the writer's look (writes {seen} -> {now})"))
}

/// `looked`: the write names the write count of a look (ADM-4); without one (a plain send
/// written unobserved, ADM-13) nothing can tell a draft typed since.
/// `request`: whose prompt `bytes` carry.
fn write_to_pane(world: &Shared, (agent_id, incarnation): (&AgentId, &Incarnation), (request, bytes): (&str, &[u8]), (asked_ms, looked): (u64, Option<u64>)) -> DeliveryOutcome {
    let mut w = world.lock().unwrap();
    let Some(a) = agent_index(&w, agent_id) else {
        return DeliveryOutcome::Refused { reason: "the agent is not known to the daemon".to_string() };
    };
    let current = w.agents[a].process.map(|p| p.incarnation());
    if current.as_ref() != Some(incarnation) {
        w.counters.fault("pane.refused_stale");
        w.log(format!("a{a} write refused: pane runs {current:?}"));
        return DeliveryOutcome::Refused { reason: "the pane runs a different process than the one admitted".to_string() };
    }
    // MGD-3: a managed agent's one write is a JSON-RPC `turn/start` line.
    let (text, line_id) = managed_turn_start(bytes).unwrap_or_else(|| (strip_framing(bytes), None));
    w.oracle.check_written_text(a, request, &text);
    let total = bytes.len();
    let (reached, outcome) = if w.fault_roll(w.plan.pane_error) {
        match thread_rng().gen_range(0..3) {
            0 => {
                w.counters.fault("pane.partial_write");
                // Any cut, a quarter of them just before the last byte (a managed line's
                // newline: the cut that leaves a whole request, MGD-6).
                let k = thread_rng().gen_range(1..total + total / 3).min(total - 1);
                (k, DeliveryOutcome::Failed { bytes_written: k as u64, error: "EIO after a short write".to_string() })
            }
            1 => {
                w.counters.fault("pane.write_error");
                (0, DeliveryOutcome::Failed { bytes_written: 0, error: "EIO".to_string() })
            }
            _ => {
                w.counters.fault("pane.error_after_complete");
                (total, DeliveryOutcome::Failed { bytes_written: 0, error: "EPIPE on flush".to_string() })
            }
        }
    } else {
        (total, DeliveryOutcome::Complete)
    };
    if bytes.starts_with(b"\x15\x1b[200~") {
        w.counters.fault("provider.bracketed_paste");
    }
    if !w.is_managed(a) {
        let other_enter = w.agents[a].pane.other_enter_ms;
        let lag = w.agents[a].provider_lag_ms(other_enter);
        w.oracle.check_other_enter(a, request, other_enter, lag);
    }
    let kind = if looked.is_none() { Writer::UnobservedSend } else { Writer::Admission };
    check_draft_kept(&mut w, a, request, &bytes[..reached], (looked, kind));
    w.agents[a].last_typed = Some(text.clone());
    let (session, position) = (w.agents[a].session.id.clone(), w.agents[a].session.next_position);
    let prompt = line_id.is_none().then_some(text.as_str());
    w.oracle.on_pane_write(a, session, position, (Some(request), prompt), line_id);
    let landed_ms = wakterm_runtime::driver::now_ms();
    let fact = crate::oracle::WriteFact { text: text.clone(), bytes_reached: reached, bytes_total: total, asked_ms, landed_ms };
    w.oracle.on_write(request, fact);
    w.log(format!("a{a} write Some({request:?}) {reached}/{total} bytes -> {outcome:?}"));
    if w.is_managed(a) {
        // MGD-3: the bytes reach the app-server's stdin; it reads whole lines only (a short
        // write leaves a fragment that spoils the next line).
        if w.fault_roll(0.05) {
            forge_turn_starts(&mut w, a, request);
        }
        w.pane_accept(a, request, reached, true);
        let bytes = crate::app_server::as_mutant_writes(w.mutant, &bytes[..reached]);
        w.app_stdin(a, &bytes, Some(request));
    } else {
        w.pane_write(a, request, &bytes[..reached], Some(request), true);
    }
    // The pane echoes what was written: the holder's `info_changed` wakes the monitor.
    w.wake_observer(wakterm_runtime::driver::now_ms());
    // Mutants of the pane port: they misreport what the holder said.
    match (&outcome, w.mutant) {
        (DeliveryOutcome::Failed { bytes_written, .. }, Mutant::PartialWriteAccepted) if *bytes_written > 0 => DeliveryOutcome::Complete,
        (DeliveryOutcome::Failed { bytes_written, .. }, Mutant::RefusedAfterPartial) if *bytes_written > 0 => {
            DeliveryOutcome::Refused { reason: "pane closed".to_string() }
        }
        _ => outcome,
    }
}

/// Who writes a Ctrl-U into a pane, for [`check_draft_kept`].
#[derive(Clone, Copy, PartialEq, Eq)]
enum Writer {
    Admission,
    UnobservedSend,
    Submit,
}

/// ADM-4, SUB-1: a PTY write starting with Ctrl-U (an admission's, a submit's first step)
/// erases a human's draft still in the composer: the look the engine decided on showed none,
/// or it was typed since and the write was not refused. `reached`: the bytes that reach the
/// pane. `looked`: the write count the write named; `unobserved`: a plain send written without
/// a look (ADM-13), which cannot know of a draft. A submit (`Writer::Submit`) writes only on a
/// composer its look read empty, so no admission's exemption excuses it.
fn check_draft_kept(w: &mut World, a: usize, writer: &str, reached: &[u8], (looked, kind): (Option<u64>, Writer)) {
    let draft = w.agents[a].human_draft.clone().filter(|d| reached.starts_with(b"\x15") && w.agents[a].composer.contains(d.as_str()));
    let Some(draft) = draft else { return };
    if looked.is_some_and(|writes| w.agents[a].undrawn_looks_at.contains(&writes)) {
        // A known gap (SPEC ADM-4): keys the TUI had not drawn `INPUT_DRAW_WAIT_MS` after
        // they were written are not waited for any longer.
        w.counters.fault("note.draft_erased_undrawn_past_wait");
    } else if kind == Writer::Admission && looked.is_some_and(|writes| w.agents[a].unknown_looks_at.contains(&writes)) {
        // A known gap (SPEC ADM-4): a composer the screen adapter could not read does not
        // refuse an admission's write, so a draft it hid is erased. Counted, not failed (a
        // look at the same write count may have read it: the exemption is wide).
        w.counters.fault("note.draft_erased_composer_unknown");
    } else if kind == Writer::UnobservedSend {
        // A known gap (SPEC ADM-4): a plain send written without a look (ADM-13).
        w.counters.fault("note.draft_erased_unobserved_send");
    } else {
        w.oracle.draft_erased(a, writer, &draft);
    }
}

/// (c) ADM-12, SUB-1: the engine never asks for a pane write while another write it asked
/// for has not ended: not started yet (a stall can delay its start past the engine's deadline)
/// or still writing (a split write, through its gaps). Its claim lasts until the write's
/// outcome, a lost one's too. A write of a dead daemon (the holder finishes it) is not this
/// daemon's.
fn ask_write(w: &mut World, agent_id: &AgentId, delivery_id: u64, writer: String) {
    let Some(a) = agent_index(w, agent_id) else { return };
    let epoch = w.daemon_epoch;
    let other = w.agents[a].pane.asked.values().find(|(other, e)| *e == epoch && *other != writer).map(|(other, _)| other.clone());
    if let Some(other) = other {
        let m = format!("a{a}: the engine asked for a write ({writer}) while its write {other} had not ended (ADM-12)");
        w.oracle.interleaved(m);
    }
    w.agents[a].pane.asked.insert(delivery_id, (writer, epoch));
    w.oracle.on_write_asked(a);
}

/// The daemon's call for one write: the runtime's bound (`write_call_bound`,
/// `write_steps_call_bound` on a `HOLDER_CALL_TIMEOUT` connection) and when the engine gives
/// up on the write's result (its deadline; the lost-write hold runs from there).
pub struct CallBound {
    asked_ms: u64,
    call_ms: u64,
    give_up_ms: u64,
}

impl CallBound {
    fn write(asked_ms: u64) -> CallBound {
        let call = wakterm_runtime::holder::write_call_bound(wakterm_runtime::holder::HOLDER_CALL_TIMEOUT);
        CallBound { asked_ms, call_ms: millis(call), give_up_ms: wakterm_engine::limits::DELIVERY_TIMEOUT_MS }
    }

    fn split(asked_ms: u64, write: &SplitWrite) -> CallBound {
        let gap = Duration::from_millis(write.gap_ms);
        let call = wakterm_runtime::holder::write_steps_call_bound(wakterm_runtime::holder::HOLDER_CALL_TIMEOUT, gap, write.steps.len());
        CallBound { asked_ms, call_ms: millis(call), give_up_ms: wakterm_engine::submit::SPLIT_WRITE_TIMEOUT_MS }
    }

    /// The mutant `call_timeout_reported_as_failed`: at the bound, the glue reports a call
    /// the holder has not answered as a write that failed before any byte. The flag says
    /// whether an outcome went to the engine.
    fn watch(&self, world: &Shared, inbox: &mpsc::Sender<DriverMsg>, delivery_id: u64, input: fn(u64, TimedOut) -> Input) -> std::sync::Arc<std::sync::atomic::AtomicBool> {
        let answered = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        if world.lock().unwrap().mutant == Mutant::CallTimeoutReportedAsFailed {
            let (world, inbox, answered, call_ms) = (world.clone(), inbox.clone(), answered.clone(), self.call_ms);
            madsim::task::spawn(async move {
                madsim::time::sleep(Duration::from_millis(call_ms)).await;
                if !answered.swap(true, std::sync::atomic::Ordering::SeqCst) {
                    world.lock().unwrap().log(format!("deliver {delivery_id}: the call timed out; reported as failed (mutant)"));
                    send_if_running(&inbox, input(delivery_id, TimedOut));
                }
            });
        }
        answered
    }

    /// ADM-12, the holder's `start_by_ms` (`write_start_by`: the engine's deadline from when it
    /// asked): a holder that comes to the write later refuses it, nothing written;
    /// unless it predates the field (`old_holders`). Checked under the pane's write lock.
    fn refuse_if_late(&self, world: &Shared, delivery_id: u64) -> Option<String> {
        let mut w = world.lock().unwrap();
        let start_by = wakterm_runtime::holder::write_start_by(self.asked_ms, self.give_up_ms);
        let now = wakterm_runtime::driver::now_ms();
        if w.plan.old_holders || now <= start_by {
            return None;
        }
        w.counters.fault("pane.start_deadline_refused");
        w.log(format!("deliver {delivery_id}: the holder came to the write at {now}, after its start deadline {start_by}: refused"));
        Some(format!("the write was to start by {start_by} ms"))
    }

    /// Whether the holder's answer reaches the engine: not once the daemon's call timed out
    /// (ADM-12: the runtime reports no outcome then, the engine's hold decides).
    fn answer(&self, world: &Shared, answered: &std::sync::atomic::AtomicBool, delivery_id: u64) -> bool {
        let timed_out = wakterm_runtime::driver::now_ms() >= self.asked_ms + self.call_ms;
        if timed_out {
            world.lock().unwrap().log(format!("deliver {delivery_id}: the holder answered after the daemon's call timed out: no outcome"));
        }
        !timed_out && !answered.swap(true, std::sync::atomic::Ordering::SeqCst)
    }
}

fn millis(bound: Duration) -> u64 {
    u64::try_from(bound.as_millis()).expect("bounds fit")
}

/// A call that timed out, as the mutant reports it: a write that failed before any byte.
pub struct TimedOut;

impl From<TimedOut> for DeliveryOutcome {
    fn from(_: TimedOut) -> DeliveryOutcome {
        DeliveryOutcome::Failed { bytes_written: 0, error: "holder did not answer write".to_string() }
    }
}

impl From<TimedOut> for SplitOutcome {
    fn from(_: TimedOut) -> SplitOutcome {
        SplitOutcome::Failed { bytes_written: 0, error: "holder did not answer write_steps".to_string() }
    }
}

/// `pane.write_late`: the holder starts a write only after the engine's deadline for its result
/// has passed (a stalled holder, a loaded machine): the write lands after the engine gave up.
/// `pane.write_after_call_bound`, a third of them: the stall outlasts the daemon's call too
/// (no outcome then), ending before the engine's lost-write hold does; and the caller comes
/// back to the agent once a hold ended at the call's bound would have let it write
/// (`caller.after_call_bound`, after the ADM-5 grace that would follow).
async fn holder_stall(world: &Shared, agent_id: &AgentId, bound: &CallBound) {
    let stall = {
        let mut w = world.lock().unwrap();
        let stall = w.fault_roll(w.plan.pane_late / 2.0);
        if !stall {
            return;
        }
        w.counters.fault("pane.write_late");
        if thread_rng().gen_bool(1.0 / 3.0) {
            let comes_back = bound.asked_ms + bound.call_ms + wakterm_engine::limits::AWAITING_TURN_GRACE_MS;
            let hold_ends = bound.asked_ms + bound.give_up_ms + wakterm_engine::limits::LOST_WRITE_HOLD_MS;
            assert!(comes_back + 3_000 < hold_ends - 2_000, "the stall fits between the caller and the hold's end");
            w.counters.fault("pane.write_after_call_bound");
            if let Some(a) = agent_index(&w, agent_id) {
                w.counters.fault("caller.after_call_bound");
                w.late_callers.push((comes_back + thread_rng().gen_range(300..1_500), a));
            }
            let now = wakterm_runtime::driver::now_ms();
            Duration::from_millis(thread_rng().gen_range(comes_back + 3_000..hold_ends - 2_000).saturating_sub(now))
        } else {
            ms(10_500, 14_000)
        }
    };
    madsim::time::sleep(stall).await;
}

/// The write asked for as `delivery_id` ended (written, failed or refused).
fn end_write(w: &mut World, agent_id: &AgentId, delivery_id: u64) {
    if let Some(a) = agent_index(w, agent_id) {
        w.agents[a].pane.asked.remove(&delivery_id);
    }
}

/// `terminal.draft_races_submit`: a human types a draft as the submit's write is asked for,
/// after its look: the holder runs the two in either order (both take the pane's write lock).
fn race_a_draft(w: &mut World, world: &Shared, agent_id: &AgentId, delivery_id: u64) {
    let Some(a) = agent_index(w, agent_id).filter(|_| w.fault_roll(w.plan.draft_races_submit)) else { return };
    w.counters.fault("terminal.draft_races_submit");
    let text = format!("draft racing {delivery_id}");
    w.log(format!("a{a} human leaves a draft {text:?} as a submit's write is asked for"));
    // Typed 0-15 ms on (the holder's write starts 0-10 ms on): either may take the pane first.
    crate::scenario::type_keys(w, world, a, (text, false), ms(0, 15));
}

/// SUB-2, the holder's `write_steps`: under the pane's write lock (held through the gaps), it
/// refuses unless the pane runs `incarnation`, or when input reached the pane since the look
/// whose write count `looked` names (ADM-4; nothing written), counts the write, writes each
/// step whole with `gap_ms` between, and right after the CR reads the Enter boundary: the
/// output end, the screen there, the child generation, the writes counted at its start. A
/// child that exits during a gap makes the next step fail (EIO). Faults: a step fails after
/// some bytes or before any (`submit.split_write_fails`, also the holder's answer lost after
/// a complete write); the harness never reacts to the CR or reacts before the boundary.
#[allow(clippy::too_many_arguments)]
async fn split_write(world: &Shared, (agent_id, incarnation, looked): (&AgentId, &Incarnation, Option<u64>), write: &SplitWrite, epoch: u64, sid: String, bound: &CallBound, delivery_id: u64) -> SplitOutcome {
    let text = write.steps.get(1).map(|paste| strip_paste(paste)).unwrap_or_default();
    let (a, lock, skip_lock) = {
        let w = world.lock().unwrap();
        let Some(a) = agent_index(&w, agent_id) else {
            return SplitOutcome::Refused { reason: "the agent is not known to the holder".to_string() };
        };
        (a, w.agents[a].pane.lock.clone(), w.mutant == Mutant::SubmitSkipsWriteLock)
    };
    // The bug (`submit_skips_write_lock`): the steps go out without the lock across the gaps.
    let _guard = if skip_lock { None } else { Some(lock.lock_owned().await) };
    let (fail, mode, writes) = {
        let mut w = world.lock().unwrap();
        let current = w.agents[a].process.map(|p| p.incarnation());
        if current.as_ref() != Some(incarnation) {
            w.counters.fault("pane.refused_stale");
            w.log(format!("a{a} split write {sid} refused: pane runs {current:?}"));
            return SplitOutcome::Refused { reason: "the pane runs a different process than the one checked".to_string() };
        }
        // The bug (`submit_look_writes_ignored`): the write count the submit's look saw is
        // not checked.
        let expect_writes = looked.filter(|_| w.mutant != Mutant::SubmitLookWritesIgnored);
        drop(w);
        if let Some(reason) = bound.refuse_if_late(world, delivery_id) {
            return SplitOutcome::Refused { reason };
        }
        if let Some(detail) = input_since_look(world, agent_id, expect_writes) {
            return SplitOutcome::InputSinceLook { detail };
        }
        let mut w = world.lock().unwrap();
        // Which step fails, after how many of its bytes (None: none fails); `usize::MAX`: the
        // holder wrote every step but its answer was lost.
        let fail = w.fault_roll(w.plan.split_fail).then(|| {
            let step = thread_rng().gen_range(0..=write.steps.len());
            if step == write.steps.len() {
                (step, usize::MAX)
            } else {
                (step, thread_rng().gen_range(0..write.steps[step].len()))
            }
        });
        if fail.is_some() {
            w.counters.fault("submit.split_write_fails");
        }
        let mode = if w.fault_roll(w.plan.never_reacts) {
            w.counters.fault("terminal.never_reacts");
            CrMode::Never
        } else if w.fault_roll(w.plan.reacts_before_enter) {
            w.counters.fault("terminal.reacts_before_enter");
            CrMode::Immediate
        } else if w.fault_roll(w.plan.never_reacts) {
            w.counters.fault("terminal.stalled_echo");
            w.agents[a].pane.stalled_echo = Some(0);
            CrMode::Stalled
        } else {
            CrMode::Delayed
        };
        w.agents[a].pane.split = Some((sid.clone(), epoch));
        w.agents[a].pane.writes += 1;
        let writes = w.agents[a].pane.writes;
        w.agents[a].last_typed = Some(text.clone());
        let (session, position) = (w.agents[a].session.id.clone(), w.agents[a].session.next_position);
        w.oracle.on_pane_write(a, session, position, (None, Some(&text)), None);
        w.log(format!("a{a} split write {sid} starts (write {writes}, fail {fail:?}, cr {mode:?})"));
        (fail, mode, writes)
    };
    let mut written = 0u64;
    let last = write.steps.len() - 1;
    let mut before_enter = None;
    for (i, step) in write.steps.iter().enumerate() {
        if i > 0 {
            madsim::time::sleep(Duration::from_millis(write.gap_ms)).await;
        }
        let mut w = world.lock().unwrap();
        let dead = w.agents[a].process.is_none();
        let cut = match fail {
            Some((at, k)) if at == i => Some(k),
            _ if dead => Some(0),
            _ => None,
        };
        if i == 0 {
            // A submit always looks first (SUB-1): never an unobserved write.
            check_draft_kept(&mut w, a, &sid, &step[..cut.unwrap_or(step.len())], (looked, Writer::Submit));
            let other_enter = w.agents[a].pane.other_enter_ms;
            let lag = w.agents[a].provider_lag_ms(other_enter);
            w.oracle.check_other_enter(a, &sid, other_enter, lag);
        }
        if let Some(k) = cut {
            w.pane_write(a, &sid, &step[..k], Some(&sid), false);
            written += k as u64;
            w.agents[a].pane.split = None;
            if let Some(withheld) = w.agents[a].pane.stalled_echo.take() {
                w.pane_moved(a, withheld, true); // the stall ends with the failed write
            }
            let error = if dead { "write to pty master: EIO (the child exited)" } else { "write to pty master: EIO" };
            w.log(format!("a{a} split write {sid} fails at step {i} after {written} bytes"));
            return SplitOutcome::Failed { bytes_written: written, error: error.to_string() };
        }
        if i == last {
            if w.mutant == Mutant::BoundaryBeforeEnter {
                before_enter = Some(enter_boundary(&w, a, writes)); // the bug: read before the CR
            }
            w.agents[a].pane.cr_mode = mode;
        }
        w.pane_write(a, &sid, step, Some(&sid), false);
        written += step.len() as u64;
    }
    // Right after the CR, under the holder's lock: the Enter boundary.
    let mut w = world.lock().unwrap();
    w.agents[a].pane.cr_mode = CrMode::Delayed;
    if let Some(withheld) = w.agents[a].pane.stalled_echo.take() {
        // `terminal.stalled_echo`: the stalled TUI draws what was typed after the boundary.
        let due = wakterm_runtime::driver::now_ms() + thread_rng().gen_range(5..200);
        let generation = w.agents[a].spawned;
        w.agents[a].pane.late_echoes.push((due, generation, withheld));
    }
    let truth = w.pane_truth(a);
    w.oracle.on_enter_boundary(&sid, truth.clone());
    let boundary = before_enter.unwrap_or_else(|| enter_boundary(&w, a, writes));
    w.agents[a].pane.split = None;
    w.log(format!("a{a} split write {sid} complete: boundary output {} writes {} (pane {} / {})", boundary.output_offset, boundary.writes, truth.output_end, truth.writes));
    // The process went on and the TUI may have reacted: wake the monitor.
    w.wake_observer(wakterm_runtime::driver::now_ms());
    match fail {
        Some((_, usize::MAX)) => SplitOutcome::Failed { bytes_written: 0, error: "the holder connection was lost before its answer".to_string() },
        _ => SplitOutcome::Complete { boundary },
    }
}

/// The boundary as the holder reads it now (`writes`: the count taken at the write's start).
fn enter_boundary(w: &World, a: usize, writes: u64) -> EnterBoundary {
    let truth = w.pane_truth(a);
    EnterBoundary { output_offset: truth.output_end, screen_digest: truth.screen, generation: truth.generation, writes, holder: w.holder_label(a) }
}

/// The text inside a bracketed paste step.
fn strip_paste(paste: &[u8]) -> String {
    let text = String::from_utf8_lossy(paste).to_string();
    let text = text.strip_prefix("\u{1b}[200~").unwrap_or(&text);
    text.strip_suffix("\u{1b}[201~").unwrap_or(text).to_string()
}

/// MGD-7 fault `caller.forged_turn_start_id`: a raw `session input` racing the admission
/// (raw input takes no claim) sends, just ahead of the daemon's line, `turn/start`s under the
/// ids someone who knows the request id and the public id format would guess: the bare request
/// id, and with the nonce a daemon that drew none would use (0). The app-server refuses them
/// (no such thread); their refusals must end nothing.
fn forge_turn_starts(w: &mut World, a: usize, rid: &str) {
    w.counters.fault("caller.forged_turn_start_id");
    for id in [format!("wakterm-{rid}"), wakterm_engine::prompt::turn_start_id(rid, 0)] {
        let line = crate::app_server::raw_turn_start(&id, "no-such-thread", "forged");
        w.log(format!("a{a} raw input forges a turn/start under {id}"));
        w.pane_accept(a, "forger", line.len(), true);
        w.app_stdin(a, &line, None);
    }
}

/// MGD-3, MGD-7: the prompt and the JSON-RPC id of a managed admission's `turn/start` line
/// (None for a pane write).
fn managed_turn_start(bytes: &[u8]) -> Option<(String, Option<String>)> {
    let line = bytes.strip_prefix(wakterm_engine::prompt::LINE_LEAD)?.strip_suffix(b"\n")?;
    let line: serde_json::Value = serde_json::from_slice(line).ok()?;
    if line["method"] != "turn/start" {
        return None;
    }
    let text = line["params"]["input"][0]["text"].as_str()?.to_string();
    Some((text, line["id"].as_str().map(str::to_string)))
}

/// The prompt inside one admission write.
pub fn strip_framing(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes).to_string();
    let text = text.strip_prefix("\u{15}\u{1b}[200~").map(|t| t.strip_suffix("\u{1b}[201~\r").unwrap_or(t)).unwrap_or(&text);
    text.strip_suffix('\r').unwrap_or(text).to_string()
}

/// The same mapping the daemon uses.
pub use wakterm_runtime::store::op_for as store_op;

/// The single writer: FIFO, one batch per transaction; commit, then acknowledge.
async fn store_writer(world: Shared, inbox: mpsc::Sender<DriverMsg>, mut queue: mpsc::UnboundedReceiver<Batch>) {
    while let Some((token, ops)) = queue.recv().await {
        let took = commit_time(&world, &ops);
        let ack_first = world.lock().unwrap().mutant == Mutant::AckBeforeDurable;
        if ack_first {
            send(&inbox, Input::PersistAcked { token, result: Ok(()) });
        }
        madsim::time::sleep(took).await;
        let (result, group_lost) = {
            let mut w = world.lock().unwrap();
            let store_ops: Vec<StoreOp> = ops.iter().map(store_op).collect();
            let result = commit_or_fail(&mut w, &store_ops);
            w.log(format!("commit {token} {} -> {result:?}", describe_ops(&ops)));
            if result.is_err() {
                note_abandoned(&mut w, &ops);
            }
            let injected = result.as_ref().is_err_and(|e| e.starts_with("injected"));
            let group_lost = injected && w.fault_roll(0.4);
            if result.is_ok() {
                for op in &store_ops {
                    match op {
                        StoreOp::PutRequest { request_id, phase, .. } if phase == "registered" => {
                            w.oracle.on_registered(request_id);
                            w.finished_ms.remove(request_id); // IDEM-6: stored anew, to finish anew
                        }
                        StoreOp::AppendTerminal { sequence, .. } => w.oracle.on_terminal_committed(*sequence),
                        StoreOp::PutRequest { request_id, phase, .. } if crate::store_model::is_finished_phase(phase) => {
                            let now = wakterm_runtime::driver::now_ms();
                            w.finished_ms.entry(request_id.clone()).or_insert(now);
                        }
                        _ => {}
                    }
                }
                note_durable_give_ups(&mut w, &ops);
                w.oracle.check_write_floors(&ops);
                crash_after_commit(&mut w, &store_ops);
            }
            (result, group_lost)
        };
        madsim::time::sleep(ms(0, 3)).await;
        if !ack_first {
            send(&inbox, Input::PersistAcked { token, result });
        }
        if group_lost {
            fail_the_rest_of_the_group(&world, &inbox, &mut queue);
        }
    }
}

/// ADM-5, ADM-12: a request record that gave its write up (`write_result_lost`) is durable:
/// the engine holds the agent for RF-8's timeout from the give-up, in this daemon and after a
/// restart. The caller may never learn of it: a crash right after the commit kept a one-way
/// send's receipt, which has no terminal event, from its caller (exploration seed 35501909,
/// as seed 86889244 a terminal event's), and the oracle took the restart's hold for a stall.
/// Not by the reason alone: a give-up whose confirming commit failed says
/// `store_commit_failed` (IDEM-6) with the write's fate still unknown, and the engine holds for
/// it all the same (`RequestRecord::written_ms`: no `Written` step; exploration seed 47613849).
fn note_durable_give_ups(w: &mut World, ops: &[PersistOp]) {
    let gave_up = |reason: Option<&str>| reason == Some("write_result_lost");
    for op in ops {
        let PersistOp::PutRequest(r) = op else { continue };
        let receipt = r.receipt.as_ref().and_then(|r| r.reason.as_deref());
        let terminal = r.terminal.as_ref().and_then(|t| t.reason.as_deref());
        let fate_unknown = r.receipt.as_ref().is_some_and(|r| r.write_state == wakterm_engine::WriteState::Unknown)
            && !r.evidence.iter().any(|e| e.step == wakterm_engine::EvidenceStep::Written);
        if gave_up(receipt) || gave_up(terminal) || fate_unknown {
            if let Some(a) = agent_index(w, &r.agent_id) {
                w.oracle.on_write_given_up(a, r.request_id.as_str());
            }
        }
    }
}

/// The event sequences of a batch whose commit failed: the engine abandons them (mutant
/// `abandoned_numbers_passed` reads them).
fn note_abandoned(w: &mut World, ops: &[PersistOp]) {
    for op in ops {
        if let PersistOp::AppendEvent(event) = op {
            w.abandoned_sequences.insert(event.sequence);
        }
    }
}

/// `store.group_failed` (STORE-2): the runtime commits every batch queued when its writer
/// woke in one transaction, and an error that loses the transaction (a failed COMMIT, or one
/// after which SQLite rolls the whole transaction back: an I/O error, a full disk) fails them
/// all. Here the batches queued behind a failed one fail with it, each answered in order, none
/// durable (a review found the runtime's writer committed the ones after such an error alone).
fn fail_the_rest_of_the_group(world: &Shared, inbox: &mpsc::Sender<DriverMsg>, queue: &mut mpsc::UnboundedReceiver<Batch>) {
    while let Ok((token, ops)) = queue.try_recv() {
        let mut w = world.lock().unwrap();
        w.counters.fault("store.group_failed");
        w.log(format!("commit {token} {} -> failed with its group", describe_ops(&ops)));
        note_abandoned(&mut w, &ops);
        if w.mutant == Mutant::GroupRestCommittedAlone {
            let store_ops: Vec<StoreOp> = ops.iter().map(store_op).collect();
            if w.store.commit(&store_ops).is_ok() {
                // the bug: durable, yet answered failed (in this daemon, as a commit is)
                for op in &store_ops {
                    if let StoreOp::AppendTerminal { sequence, .. } = op {
                        w.oracle.on_terminal_committed(*sequence);
                    }
                }
            }
        }
        send(inbox, Input::PersistAcked { token, result: Err("injected: the group's transaction was lost".to_string()) });
    }
}

/// HIST-4: the simulator's retention of finished requests, in days. Its runs last minutes, so
/// only a wall clock stepped by days (`clock.wall_step_days`) reaches it, and then only when
/// ages are counted by the wall clock (mutant `retention_by_wall_clock`).
const RETAIN_REQUEST_DAYS: u64 = 1;

/// HIST-4: the daemon's pruning of finished requests by age, with the production rule
/// (`Retention::requests_due`) and clock (`RetentionClock`) over the store model.
fn prune_requests_by_age(w: &mut World) {
    let now = match (w.mutant, w.retention_clock) {
        (Mutant::RetentionByWallClock, _) => w.wall_ms(), // the bug
        (_, Some(clock)) => clock.now_ms(),
        (_, None) => return, // the stepped-clock mutant's daemon: no retention clock
    };
    let policy = wakterm_runtime::store::retention::Retention { events: u64::MAX, days: RETAIN_REQUEST_DAYS, bytes: 0 };
    if let Ok(Some(op)) = policy.requests_due(&w.store, now) {
        let before: BTreeSet<String> = w.store.requests().into_iter().map(|r| r.request_id).collect();
        let result = w.store.commit(std::slice::from_ref(&op));
        w.log(format!("retention {op:?} -> {result:?}"));
        if result.is_ok() {
            w.counters.fault("note.requests_pruned"); // only a mutant: a run lasts minutes
            let kept: BTreeSet<String> = w.store.requests().into_iter().map(|r| r.request_id).collect();
            let true_now = wakterm_runtime::driver::now_ms();
            for id in before.difference(&kept) {
                let finished = w.finished_ms.get(id).copied();
                w.oracle.on_request_pruned(id, finished, true_now, RETAIN_REQUEST_DAYS * 86_400_000);
            }
        }
    }
}

/// EV-9: the daemon's retention task, with the production rule (`Retention::due`) over the
/// store model, pruning in its own transactions between the engine's.
async fn retention(world: Shared) {
    loop {
        madsim::time::sleep(ms(200, 1_500)).await;
        let mut w = world.lock().unwrap();
        prune_requests_by_age(&mut w);
        let (events, bytes) = (w.plan.retain_events, w.plan.retain_bytes);
        if events == 0 && bytes == 0 {
            continue;
        }
        let events = if events == 0 { u64::MAX } else { events };
        let bound = if w.mutant == Mutant::RetentionSizeIgnored { 0 } else { bytes }; // the bug
        let policy = wakterm_runtime::store::retention::Retention { events, days: 0, bytes: bound };
        if let Ok(Some(op)) = policy.due(&w.store, 0, w.events_settled_through) {
            let result = w.store.commit(std::slice::from_ref(&op));
            let line = format!("retention {op:?} -> {result:?}, pruned through {}", w.store.events_pruned_through());
            w.log(line);
            if result.is_ok() {
                w.counters.fault("retention.pruned");
                if matches!(op, StoreOp::PruneEvents { excess_bytes: 1.., .. }) {
                    w.counters.fault("retention.by_size");
                }
            }
        }
        if bytes > 0 {
            let now = wakterm_runtime::driver::now_ms();
            let settled = w.store.settled_event_bytes(w.events_settled_through);
            w.oracle.on_retention_pass(now, settled, bytes);
        }
    }
}

/// `agent events --after last_seen`, reading the store through `published` (what the daemon
/// has published: EV-2). Below what retention pruned it is `cursor_too_old` (EV-9), and the
/// subscriber rebases as documented: a catalog (its events_through is `published`), then
/// `--after` it.
pub(crate) fn subscriber_catch_up(w: &mut World, published: u64, how: &str) {
    let checks = !(w.mutant == Mutant::LaggedReaderSkipsPruned && how == "reconnect"); // the bug
    if checks && wakterm_runtime::store::retention::cursor_too_old(w.oracle.stream.last_seen, w.store.events_pruned_through()) {
        let World { oracle, store, .. } = &mut *w;
        oracle.check_cursor_too_old(store);
        let line = format!("{how}: cursor {} is below the pruned {}: cursor_too_old, rebased after {published}", w.oracle.stream.last_seen, w.store.events_pruned_through());
        w.log(line);
        // What the rebase skips (a crashed daemon's events were never published live): what
        // retention pruned, then what the store still holds, all durable.
        let last_seen = w.oracle.stream.last_seen;
        let pruned: Vec<String> = w.store.pruned_events_after(last_seen).map(str::to_string).collect();
        let stored = w.store.agent_events_after(last_seen).into_iter().map(|e| e.event_json);
        let mut skipped = Vec::new();
        for json in pruned.into_iter().chain(stored) {
            let event: AgentEvent = serde_json::from_str(&json).expect("stored events parse");
            if event.sequence > published {
                break;
            }
            note_durable_turn_start(w, &event);
            let agent = w.agents.iter().position(|a| a.agent_id == event.agent_id);
            skipped.extend(agent.map(|a| (a, event)));
        }
        w.oracle.on_stream_rebased(published, &skipped);
        w.counters.fault("retention.cursor_too_old");
        return;
    }
    for stored in w.store.agent_events_after(w.oracle.stream.last_seen) {
        if stored.sequence > published {
            break;
        }
        let event: AgentEvent = serde_json::from_str(&stored.event_json).expect("stored events parse");
        see_agent_event(w, &event, how);
    }
}

/// How long this commit takes: slow (`store.slow_commit`), stalled for seconds
/// (`store.stalled_commit`), or quick.
fn commit_time(world: &Shared, ops: &[PersistOp]) -> Duration {
    let mut w = world.lock().unwrap();
    if w.fault_roll(w.plan.commit_stall) {
        w.counters.fault("store.stalled_commit");
        for op in ops {
            if let PersistOp::PutRequest(r) = op {
                if r.phase == Phase::Registered {
                    let now = wakterm_runtime::driver::now_ms();
                    w.stalled_registrations.insert(r.request_id.as_str().to_string(), now);
                }
            }
        }
        return ms(15_000, 40_000);
    }
    if w.fault_roll(w.plan.commit_slow) {
        w.counters.fault("store.slow_commit");
        return ms(200, 2_500);
    }
    ms(0, 6)
}

/// Commits one batch to the store model, or fails it (`store.commit_failed`).
fn commit_or_fail(w: &mut World, ops: &[StoreOp]) -> Result<(), String> {
    let now = wakterm_runtime::driver::now_ms();
    if ops.iter().any(|op| matches!(op, StoreOp::PutEventMark { agent_id, mark_json } if agent_named(w, agent_id).is_some_and(|a| w.mark_held_back(a, mark_position(mark_json), now)))) {
        w.counters.fault("store.commit_failed");
        return Err("injected: disk I/O error (the agent's event mark is held back)".to_string());
    }
    if let Some(agent_id) = fail_an_end_once(w, ops) {
        w.end_failed_for.insert(agent_id);
        w.counters.fault("store.end_commit_failed");
        return Err("injected: disk I/O error (an indeterminate end)".to_string());
    }
    if in_store_outage(w, now) {
        w.counters.fault("store.outage");
        return Err("injected: database or disk is full (a long outage)".to_string());
    }
    if w.fault_roll(w.plan.commit_fail) {
        w.counters.fault("store.commit_failed");
        return Err("injected: disk I/O error".to_string());
    }
    w.store.commit(ops)
}

/// `store.end_commit_failed`: in seeds whose commits may fail, a request's
/// `indeterminate` end (or a cancel's, or a deadline's: made before a replay zone's verdict,
/// they hold its gap too) fails the first commit that reaches the store model (always when it
/// ends on a lost or changed session, `observer_session_lost`; else 30 % of the time; decided
/// once per request, `World::ends_rolled`), and the daemon may crash right
/// after its agent's next event batch (`crash.after_events_past_a_failed_end`). Such an end says
/// evidence is missing or changed, and the batch carries what says so (a gap, a new file's
/// records): committed first, a crash left the request resumable in a file the durable mark
/// proved (exploration seed 200,080,325 met it once in 220,000 seeds). Returns the end's agent
/// id.
fn fail_an_end_once(w: &mut World, ops: &[StoreOp]) -> Option<String> {
    if w.plan.commit_fail <= 0.0 {
        return None;
    }
    let (request_id, end) = ops.iter().find_map(|op| match op {
        StoreOp::AppendTerminal { request_id, event_json, .. } => Some((request_id.clone(), serde_json::from_str::<serde_json::Value>(event_json).ok()?)),
        _ => None,
    })?;
    // Not a completion or an abort: a restart reads those again from the records.
    let kept = ["indeterminate", "cancelled", "timed_out"].iter().any(|state| end["state"] == *state);
    if !kept || !w.ends_rolled.insert(request_id) {
        return None;
    }
    let p = if end["reason"] == "observer_session_lost" { 1.0 } else { 0.3 };
    let agent_id = ops.iter().find_map(|op| match op {
        StoreOp::PutRequest { agent_id, .. } => Some(agent_id.clone()),
        _ => None,
    })?;
    w.fault_roll(p).then_some(agent_id)
}

/// Commit failure rates above which a seed may also have `store.outage`: decided from the plan
/// already drawn, so seeds below it draw nothing more and replay as before.
const OUTAGE_COMMIT_FAIL: f64 = 0.11;

/// `store.outage`: in seeds whose commits fail often, one stretch of 2-20 s (while faults
/// last) in which every commit fails, as a full disk or STORE-4's replaced file make them:
/// the engine's retries (events renumbered at each, EV-3; progress, terminals) pile up, and
/// everything must land in order, once, after it; the engine's invariants check that no
/// number is held for an event no longer on its way.
fn in_store_outage(w: &mut World, now: u64) -> bool {
    if !w.faults_on || w.plan.commit_fail <= OUTAGE_COMMIT_FAIL {
        return false;
    }
    match w.store_outage {
        Some((from, until)) => from <= now && now < until,
        None if thread_rng().gen_bool(0.01) => {
            let lasts_ms = thread_rng().gen_range(2_000..20_000);
            w.store_outage = Some((now, now + lasts_ms));
            w.log(format!("store outage for {lasts_ms} ms: every commit fails"));
            true
        }
        None => false,
    }
}

/// The crash points right after a commit. A request commit: `crash.after_commit`. An agent's
/// event batch carrying an observer checkpoint (EV-5, OBS-1): `crash.after_checkpoint`, most
/// often when the checkpoint covers the end of an unfinished request's turn, whose terminal
/// commit may not have happened yet. An event batch whose agent's newer checkpoint (handed to
/// the engine after these events) is not durable yet: `crash.between_events_and_checkpoint`,
/// so the restart replays from an older checkpoint across events already durable (EV-4).
fn crash_after_commit(w: &mut World, ops: &[StoreOp]) {
    if crash_with_mark_behind_respawn(w, ops) {
        return;
    }
    let checkpoint = ops.iter().find_map(|op| match op {
        StoreOp::PutCheckpoint { agent_id, checkpoint_json } => Some((agent_id.clone(), checkpoint_json.clone())),
        _ => None,
    });
    let batch_of = ops.iter().find_map(|op| match op {
        StoreOp::PutEventMark { agent_id, .. } => Some(agent_id.clone()),
        _ => None,
    });
    if let Some(agent_id) = batch_of.as_ref().filter(|agent_id| w.end_failed_for.contains(*agent_id)) {
        w.end_failed_for.remove(&agent_id.clone());
        if w.crash_point_at(0.8, "crash.after_events_past_a_failed_end") {
            return;
        }
    }
    if let Some(p) = write_floor_below_the_marks_turn(w, ops) {
        if w.crash_point_at(p, "crash.after_a_write_below_the_marks_turn") {
            return;
        }
    }
    if accepted_line_durable(ops) {
        if w.crash_point_at(0.5, "crash.after_acceptance_durable") {
            return; // else the batch's other crash points and checkpoint bookkeeping go on
        }
    }
    if let Some((agent_id, json)) = checkpoint {
        // A checkpoint committed alone (its events went in an earlier batch) is as likely a
        // crash point as one covering the end of a request's turn.
        let alone = !ops.iter().any(|op| matches!(op, StoreOp::AppendEvent { .. }));
        let covers = w.checkpoint_weights.remove(&json).unwrap_or(0).max(if alone { 2 } else { 0 });
        if w.checkpoint_sent.get(&agent_id) == Some(&json) {
            w.checkpoint_sent.remove(&agent_id);
        }
        let p = w.plan.crash_after_checkpoint / [10.0, 1.5, 1.0][usize::from(covers.min(2))];
        w.crash_point_at(p, "crash.after_checkpoint");
    } else if let Some(agent_id) = batch_of {
        if w.checkpoint_sent.contains_key(&agent_id) {
            let p = w.plan.crash_after_checkpoint / 4.0;
            w.crash_point_at(p, "crash.between_events_and_checkpoint");
        }
    } else if finished_past_unread_line(w, ops) {
        w.crash_point_at(0.9, "crash.finished_past_unread_line");
    } else {
        w.crash_point("crash.after_commit");
    }
}

/// ADM-5 (managed): a commit makes durable an event mark holding one of wakterm's lines the
/// app-server accepted into a turn not yet seen taking it (`AnsweredLine`, not `taken`): a
/// restart right then must wait for that turn's start (`RecoveredWrite::managed_wait`). Rare
/// otherwise (the acceptance becomes durable with the next event, usually that turn's start):
/// the last note's planted bug in that wait was not caught in 40,000 seeds.
fn accepted_line_durable(ops: &[StoreOp]) -> bool {
    ops.iter().any(|op| match op {
        StoreOp::PutEventMark { mark_json, .. } => serde_json::from_str::<EventMark>(mark_json).is_ok_and(|mark| mark.answered_lines.iter().any(|line| line.turn.is_some() && !line.taken)),
        _ => false,
    })
}

/// ADM-5: a commit finishes a request (terminal or settled) of a managed agent whose
/// app-server has another request's `turn/start` line still unread. A restart right then must
/// hold the agent for that line, whichever request finished last (a review found a bound
/// request finishing after a send that steered its turn unread hid the send; seeds 1-40,000
/// never crashed there before this crash point).
/// Its own line unread too: a one-way send settled unacknowledged by a slow reader is the
/// agent's latest write, which a restart must find (by the order the rows were stored, not the
/// times they hold: `clock.back_while_down`).
fn finished_past_unread_line(w: &World, ops: &[StoreOp]) -> bool {
    ops.iter().any(|op| match op {
        StoreOp::PutRequest { agent_id, phase, .. } if phase == "terminal" || phase == "settled" => agent_named(w, agent_id).is_some_and(|a| w.unread_turn_start(a)),
        _ => false,
    })
}

/// ADM-5, EV-13: the commit that makes a PTY write's floor durable (`RequestRecord::written_past`,
/// its confirm: `submitted` or `settled`) comes while the agent's durable event mark holds a
/// user message past it in the same session (`EventMark::prompts_taken`): the write's own,
/// already reported (noted at or after the write, `PromptTaken::noted_at_event`; a crash here
/// 10 % of the time), or one of an older copy of the file whose forgetting (a cut a restart
/// found, EV-13) is not durable yet (noted before it; half the time). A restart right then must tell the two apart (a review
/// found the second taken for the first, and the next prompt written over the unread line).
/// Returns the crash point's rate, if it applies.
fn write_floor_below_the_marks_turn(w: &World, ops: &[StoreOp]) -> Option<f64> {
    if !w.faults_on || w.crashes >= w.plan.max_crashes {
        return None; // no crash can come: spare the parsing
    }
    ops.iter().find_map(|op| {
        let StoreOp::PutRequest { agent_id, record_json, phase, .. } = op else { return None };
        if phase != "submitted" && phase != "settled" {
            return None;
        }
        let record = serde_json::from_str::<wakterm_engine::RequestRecord>(record_json).ok()?;
        let floor = record.written_past.as_ref().filter(|_| record.turn_start_id.is_none())?;
        let (_, json) = w.store.event_marks().into_iter().find(|(id, _)| id == agent_id)?;
        let mark = serde_json::from_str::<wakterm_engine::EventMark>(&json).ok()?;
        let past = mark.prompts_taken.iter().rev().find(|p| p.at.session == floor.session && p.at.position > floor.position)?;
        let noted_after = record.written_at_event.zip(past.noted_at_event).is_some_and(|(written, noted)| noted >= written);
        Some(if noted_after { 0.1 } else { 0.5 })
    })
}

/// The chance that a daemon restarted after a crash finds its wall clock stepped back by 1-30
/// minutes (`clock.back_while_down`).
const CLOCK_BACK_WHILE_DOWN: f64 = 0.25;

/// The chance that a daemon restarted after a crash (its clock not stepped back) finds its wall
/// clock stepped forward by 1-30 minutes (`clock.forward_while_down`).
const CLOCK_FORWARD_WHILE_DOWN: f64 = 0.25;

/// TIME-2: the one boot every simulated daemon runs in (the simulator reboots nothing).
const SIM_BOOT: &str = "5e1b0070-0000-4000-8000-000000000001";

/// `app_server.mark_behind_respawn`, the second half (`World::hold_mark_back`): a request
/// admitted to the new process is durable while the agent's mark is held in the earlier
/// process's output; the daemon dies now, before the mark can move.
fn crash_with_mark_behind_respawn(w: &mut World, ops: &[StoreOp]) -> bool {
    let now = wakterm_runtime::driver::now_ms();
    let held = ops.iter().find_map(|op| match op {
        StoreOp::PutRequest { agent_id, phase, .. } if phase == "submitted" => agent_named(w, agent_id).filter(|&a| w.mark_held_in_earlier_process(a, now)),
        _ => None,
    });
    let Some(a) = held else { return false };
    if !w.crash_point_at(1.0, "crash.after_commit") {
        return false;
    }
    w.counters.fault("app_server.mark_behind_respawn");
    w.app(a).mark_frozen = None;
    w.log(format!("a{a} the daemon dies with the agent's event mark held in an earlier process's output"));
    true
}

fn describe_ops(ops: &[PersistOp]) -> String {
    let mut parts = Vec::new();
    let mut events = Vec::new();
    for op in ops {
        match op {
            PersistOp::PutRequest(r) => parts.push(format!("put {} {}", r.request_id, r.phase.as_str())),
            PersistOp::AppendTerminal(e) => parts.push(format!("terminal {} seq {} {:?}", e.request_id, e.terminal_event_sequence, e.state)),
            PersistOp::AppendEvent(e) => events.push(e.sequence),
            PersistOp::PutEventMark(m) => parts.push(format!("mark {:?}@{}", m.session.as_ref().map(|s| &s.0), m.position)),
            PersistOp::PutCheckpoint { .. } => parts.push("checkpoint".to_string()),
        }
    }
    if !events.is_empty() {
        parts.push(format!("events {events:?}"));
    }
    parts.join(", ")
}

/// One observer event about agent `a` as an engine input (sent in a step), and tells the
/// oracle of a turn start it delivers (ADM-5's wait must end with it,
/// `Oracle::on_turn_delivered`).
fn observed_input(w: &mut World, a: usize, event: ObserverEvent) -> Option<Input> {
    if w.mutant == Mutant::EndedLinesAcceptanceDropped && acceptance_of_ended_request(w, &event) {
        w.log(format!("a{a} drops {} (mutant ended_lines_acceptance_dropped)", describe_event(&event)));
        return None; // the bug
    }
    if matches!(event, ObserverEvent::TurnStarted { .. } | ObserverEvent::UserMessage { .. }) {
        // When the provider's record became readable (ADM-19's truth: after a human's Enter
        // or not), in its session's file or an archived one; a record in neither, now.
        let agent = &w.agents[a];
        let file = std::iter::once(&agent.session).chain(agent.archived.iter().rev()).find(|s| Some(&s.id) == event.session());
        let visible = file.and_then(|s| s.records.iter().find(|r| Some(r.position) == event.position())).map(|r| r.visible_at_ms);
        let record = event.session().cloned().zip(event.position());
        w.oracle.on_prompt_delivered(a, visible.unwrap_or_else(wakterm_runtime::driver::now_ms), record);
    }
    match &event {
        ObserverEvent::TurnStarted { session, position, turn } => w.oracle.on_turn_delivered(a, session, *position, turn),
        ObserverEvent::TurnAccepted { id, turn, session, position } => w.oracle.on_turn_accepted_delivered(a, id, turn, session, *position),
        ObserverEvent::UserMessage { turn: Some(turn), session, position, prompt_hash } => w.oracle.on_user_message_delivered(a, turn, (session, *position), prompt_hash),
        ObserverEvent::TurnCompleted { turn, .. } => w.oracle.on_turn_end_delivered(a, Some(turn)),
        ObserverEvent::TurnAborted { turn, .. } => w.oracle.on_turn_end_delivered(a, turn.as_ref()),
        ObserverEvent::Attached { .. } | ObserverEvent::SessionLost { .. } => w.oracle.on_session_changed_delivered(a),
        _ => {}
    }
    let agent_id = w.agents[a].agent_id.clone();
    Some(Input::Observed { agent_id, event })
}

/// RF-6: a reader (`agent request get`) asks for request `request_id` right after its write's
/// outcome, inside the window where the engine has decided its receipt and the commit that makes
/// it durable is in flight: it must be shown no receipt the store does not hold
/// (`Oracle::check_read_receipt`). A query, as the daemon's `request get` asks the driver.
fn read_as_committed(world: &Shared, inbox: &mpsc::Sender<DriverMsg>, request_id: String) {
    let world = world.clone();
    let query: wakterm_runtime::driver::Query = Box::new(move |engine: &Engine| {
        let Ok(id) = RequestId::parse(&request_id) else { return };
        let mut w = world.lock().unwrap();
        let shown = match w.mutant {
            Mutant::ReaderSeesMemory => engine.request(&id).and_then(|r| r.receipt.clone()), // the bug
            _ => engine.request_as_committed(&id).and_then(|r| r.receipt.clone()),
        };
        let stored = w.store.request(&request_id).and_then(|r| serde_json::from_str::<RequestRecord>(&r.record_json).ok()).and_then(|r| r.receipt);
        w.oracle.check_read_receipt(&request_id, shown.as_ref(), stored.as_ref());
    });
    // A full inbox or a daemon gone: no reader this time.
    let _ = inbox.try_send(DriverMsg::Query(query));
}

/// Mutant `ended_lines_acceptance_dropped`: whether `event` is an app-server's acceptance of a
/// `turn/start` line whose request the store holds ended (`turn_start_id` names the request).
fn acceptance_of_ended_request(w: &World, event: &ObserverEvent) -> bool {
    let ObserverEvent::TurnAccepted { id, .. } = event else { return false };
    let Some(request_id) = id.strip_prefix("wakterm-").and_then(|rest| rest.get(..36)) else { return false };
    w.store.requests().iter().any(|r| r.request_id == request_id && r.phase == "terminal")
}

/// The daemon's observer tail and liveness monitor for every agent (the runtime's monitor,
/// `run_once`): liveness first, then the new records; it sends the events and, when due, the
/// observer's checkpoint after them (EV-5) as one step (EV-3), then the
/// snapshot of the view they lead to (MON-1: when it differs from the last one sent, or the
/// run read something), in that order: the snapshot's position lies past the events (ADM-17).
async fn observer_loop(world: Shared, inbox: mpsc::Sender<DriverMsg>, mut wake: mpsc::UnboundedReceiver<u64>) {
    let mut pending = std::collections::BTreeSet::new();
    loop {
        next_run(&mut wake, &mut pending).await;
        let agents = world.lock().unwrap().agents.len();
        for a in 0..agents {
            {
                let mut w = world.lock().unwrap();
                if still_silent(&mut w, &inbox, a) || unwoken(&mut w, a) || asleep(&mut w, a) {
                    continue;
                }
                w.agents[a].observer.last_look_ms = wakterm_runtime::driver::now_ms();
            }
            let Some(Liveness { process_changed, late }) = monitor_liveness(&mut world.lock().unwrap(), &inbox, a) else { continue };
            send_late(&inbox, late).await;
            let mut w = world.lock().unwrap();
            let mut events = Vec::new();
            let mut forced = process_changed;
            // MON-3: the screen is looked at again when the process changed, while only the
            // screen can settle the turn, or before anything is attached; else the last look
            // holds unless the pane changed (`World::monitor_snapshot`).
            let look_again = process_changed || w.agents[a].observer.attached.is_none() || w.agents[a].observer.screen_decides(!w.is_managed(a), w.mutant == Mutant::ScreenSettlesUnknownOnly);
            let before = w.agents[a].observer.attached.is_some().then(|| (w.agents[a].session.id.clone(), w.agents[a].observer.read));
            // ADM-19: an Enter the holder pushed and the loop has not reported yet (the
            // runtime's `Due::enter`); the mutant's report goes out with the snapshot the loop
            // sent before this run read anything.
            w.late_enter_push(a);
            let enter = w.agents[a].pane.enter_pushed.filter(|(at, _)| *at > w.agents[a].observer.enter_reported && !w.is_managed(a));
            let early_report = (w.mutant == Mutant::EnterReportedBeforeItsRead).then(|| w.agents[a].observer.sent.clone()).flatten();
            if let (Some(noted), Some(stale)) = (enter, early_report) {
                send_step(&inbox, vec![enter_report(&mut w, a, noted, stale)]); // the bug
            }
            sync_one_step(&mut w, a, &mut events);
            check_read_lag(&mut w, a, before);
            forced |= !events.is_empty();
            let snapshot = w.monitor_snapshot(a, look_again).ok();
            let observer = &w.agents[a].observer;
            let news = snapshot.as_ref().is_some_and(|s| wakterm_runtime::monitor_recheck::snapshot_is_news(forced, observer.refreshed, observer.sent.as_ref(), s));
            w.agents[a].observer.note_sent(snapshot.clone());
            // ADM-19: the report takes the snapshot's place, whether or not it is news; a read
            // that is no floor (cut at its step bound, no rollout) is reported again by the
            // next run (`enter_unread`).
            // The bugs: `enter_reported_before_its_read` reported it above; `enter_report_dropped`
            // sends the plain snapshot (the Enter becomes known only at an admission's look).
            let report = enter.filter(|_| !matches!(w.mutant, Mutant::EnterReportedBeforeItsRead | Mutant::EnterReportDropped)).zip(snapshot.clone());
            if let (Some((noted, _)), Some(floor)) = (enter, snapshot.as_ref().and_then(|s| s.read_to_end())) {
                w.agents[a].observer.enter_reported = noted;
                w.oracle.on_enter_floor_read(a, noted, &floor);
            }
            let mut snapshot = snapshot.filter(|_| news && report.is_none());
            let early = w.mutant == Mutant::SnapshotBeforeEvents && !events.is_empty(); // the bug
            if early {
                send_snapshot(&mut w, &inbox, a, snapshot.take());
            }
            // As the runtime's `run_once`: the read's events and the checkpoint, one step.
            let mut step = Vec::new();
            let checkpoint_first = w.mutant == Mutant::CheckpointBeforeEvents; // the bug
            if checkpoint_first {
                send_step(&inbox, checkpoint_input(&mut w, a).into_iter().collect());
            }
            for event in events {
                w.log(format!("a{a} observed {}", describe_event(&event)));
                step.extend(observed_input(&mut w, a, event));
            }
            if !checkpoint_first {
                step.extend(checkpoint_input(&mut w, a)); // EV-5: after the events it covers
            }
            send_step(&inbox, step);
            send_snapshot(&mut w, &inbox, a, snapshot);
            if let Some((noted, snapshot)) = report {
                send_step(&inbox, vec![enter_report(&mut w, a, noted, snapshot)]);
            }
            read_on_if_behind(&mut w, a);
        }
    }
}

/// ADM-19: the loop's report of the Enter the holder noted at `noted` (its monotonic ms),
/// with `snapshot`, read after the loop learnt of it (the runtime's `look` with `Due::enter`).
fn enter_report(w: &mut World, a: usize, (noted, count): (u64, u64), snapshot: wakterm_engine::ObserverSnapshot) -> Input {
    let recent = w.enter_counts(a).1; // the holder's answer that pushed it counted then
    let enter = wakterm_engine::pane_look::OtherEnterLook::noted_at(noted, (count, recent), wakterm_runtime::driver::now_ms());
    w.log(format!("a{a} reports the Enter noted {} ms ago with {}", enter.ago_ms, describe_snapshot(&Ok(snapshot.clone()))));
    w.counters.fault("note.adm_19_enter_reported");
    let agent_id = w.agents[a].agent_id.clone();
    Input::OtherEnterNoted { agent_id, enter, snapshot }
}

/// MON-4: a look's or a refresh's read of agent `a`'s rollout, one step of it
/// (`FaultPlan::step_records` records, the runtime's `MONITOR_STEP_BYTES`): a look that
/// attaches is not cut (`CodexObserver::sync_one_step`).
fn sync_one_step(w: &mut World, a: usize, events: &mut Vec<ObserverEvent>) {
    let attached = w.agents[a].observer.attached.is_some();
    w.agents[a].observer.step_budget = Some(w.plan.step_records).filter(|n| *n > 0 && attached);
    w.sync_observer(a, events);
    w.agents[a].observer.step_budget = None;
}

/// MON-4: a look (or a refresh) cut at its step bound is followed by a look at once (the
/// runtime's dispatcher runs a `behind` agent again when its run ends, or when a cut refresh
/// asks it to). A chain of cut looks starts at the first (`behind_since`, for the read-lag
/// check).
fn read_on_if_behind(w: &mut World, a: usize) {
    let now = wakterm_runtime::driver::now_ms();
    let observer = &mut w.agents[a].observer;
    if !observer.behind {
        observer.behind_since = None;
        return;
    }
    observer.behind_since.get_or_insert(now);
    w.counters.fault("monitor.step_bound");
    match w.mutant {
        Mutant::BehindWaitsForAWake => leave_for_a_wake(w, a), // the bug
        _ => w.wake_observer(now),
    }
}

/// Mutants `behind_waits_for_a_wake`, `cut_refresh_not_read_on`: the loop leaves agent `a`,
/// cut at its step bound, until a later append's wake or the recheck ([`asleep`]).
fn leave_for_a_wake(w: &mut World, a: usize) {
    let now = wakterm_runtime::driver::now_ms();
    w.agents[a].observer.behind_since.get_or_insert(now);
    w.agents[a].observer.asleep = Some((now, w.agents[a].session.records.len()));
}

/// Mutants `behind_waits_for_a_wake`, `cut_refresh_not_read_on`: an agent left behind is looked at again only once a
/// record appended after it was left is readable (the sessions watch's wake) or the attached
/// recheck is due (`ATTACHED_RECHECK`), unless something else read the rest meanwhile.
fn asleep(w: &mut World, a: usize) -> bool {
    let Some((since, records)) = w.agents[a].observer.asleep else { return false };
    let now = wakterm_runtime::driver::now_ms();
    let agent = &w.agents[a];
    let appended = agent.session.records.iter().skip(records).any(|r| r.visible_at_ms <= now);
    let recheck = now >= since + wakterm_runtime::monitor_recheck::ATTACHED_RECHECK.as_millis() as u64;
    let woken = !agent.observer.behind || appended || recheck || agent.observer.reported != agent.process;
    if woken {
        w.agents[a].observer.asleep = None;
    }
    !woken
}

/// MON-1's fault classes where the sessions watch misses the wakes of an attached PTY agent's
/// new records, so the loop leaves it alone until something else wakes it: the holder's push
/// of a process change; the watch being set whole, which wakes every agent of its directory
/// (`Dispatcher::look_again_under`); or the tick's recheck, by the runtime's own rules
/// (`monitor_recheck::recheck_interval`, `watch_trusted`, `next_watch_retry`).
/// - `monitor.wake_lost`: the watch is not set yet (as before the tick sets the watch of a
///   directory Codex has just created, or after the watch was lost); the tick sets it within
///   a second.
/// - `monitor.watch_lost_while_set`: the directory was removed (and made again) while the
///   watch was being set off the reactor, its walk meeting the loss before the try answered;
///   the tick sets it within a second, as for a watch not set yet.
/// - `monitor.watch_incomplete`: the watch is set but part of it failed (notify could not
///   watch a subdirectory: out of inotify watches), so it is not trusted; it is set whole by a
///   retry after a doubling wait, 0-3 retries failing first.
///
/// The model is stricter than the runtime: there, the holder's screen pushes and a pending
/// checkpoint also wake a run, so the bugs below showed only for records appended with the
/// pane still (as the end-to-end test did); here, only a process change does.
/// Mutant `unwatched_attached_waits`: setting the watch wakes nobody, and the recheck treats
/// the directory as watched (the daemon before 1791ab4). Mutant `incomplete_watch_trusted`:
/// an incomplete watch counts as covering its directory and is never set again (the daemon
/// before 5a86cca took notify's error for an overflow). Mutant `lost_watch_trusted`: the
/// watch of a directory lost while it was being set is kept as whole and trusted (the daemon
/// at 674152f, a review found it).
fn unwoken(w: &mut World, a: usize) -> bool {
    use wakterm_runtime::monitor_recheck::{recheck_interval, watch_trusted};
    let now = wakterm_runtime::driver::now_ms();
    let agent = &w.agents[a];
    let attached = agent.observer.attached.is_some();
    let Some(unwoken) = agent.observer.unwoken else {
        if w.is_managed(a) || !attached {
            return false;
        }
        return lose_wakes(w, a, now);
    };
    let old = match (unwoken.incomplete, unwoken.lost_while_set) {
        (false, false) => w.mutant == Mutant::UnwatchedAttachedWaits, // the bug
        (true, _) => w.mutant == Mutant::IncompleteWatchTrusted,      // the bug
        (false, true) => w.mutant == Mutant::LostWatchTrusted,        // the bug
    };
    let whole = now >= unwoken.whole_at;
    let set = unwoken.incomplete; // a watch not set yet has no part that failed
    let watched = whole || old || watch_trusted(set, unwoken.incomplete);
    // MON-1: soon while the screen decides or a refresh came since the last snapshot
    // (`AgentRuntime::recheck_soon`).
    let soon = agent.observer.screen_decides(!w.is_managed(a), w.mutant == Mutant::ScreenSettlesUnknownOnly) || agent.observer.refreshed;
    let recheck = recheck_interval(soon, attached, watched).as_millis() as u64;
    let process_changed = agent.observer.reported != agent.process;
    let woken = process_changed || (whole && !old) || now >= agent.observer.last_look_ms + recheck;
    if woken {
        w.log(format!("a{a} the monitor looks again after {} ms without wakes", now - unwoken.since));
        w.agents[a].observer.unwoken = None;
    }
    !woken
}

/// Rolls the two faults of [`unwoken`] for an attached agent; true when one fired.
fn lose_wakes(w: &mut World, a: usize, now: u64) -> bool {
    use wakterm_runtime::monitor_recheck::{next_watch_retry, TICK};
    let unwoken = if w.fault_roll(w.plan.wake_lost) {
        w.counters.fault("monitor.wake_lost");
        w.log(format!("a{a} the sessions watch misses its wakes (not set yet)"));
        Unwoken { since: now, whole_at: now + TICK.as_millis() as u64, incomplete: false, lost_while_set: false }
    } else if w.fault_roll(w.plan.watch_incomplete) {
        w.counters.fault("monitor.watch_incomplete");
        let failed_retries = thread_rng().gen_range(0..=3);
        let mut wait = next_watch_retry(None);
        let mut whole_at = now + wait.as_millis() as u64;
        for _ in 0..failed_retries {
            wait = next_watch_retry(Some(wait));
            whole_at += wait.as_millis() as u64;
        }
        w.log(format!("a{a} the sessions watch is incomplete until {whole_at} ms ({failed_retries} retries fail)"));
        Unwoken { since: now, whole_at, incomplete: true, lost_while_set: false }
    } else if w.fault_roll(w.plan.watch_lost_while_set) {
        // The runtime's try answers after its walk met the loss: no watch, and the tick
        // tries again at once (`Dispatcher::on_watch_set`).
        w.counters.fault("monitor.watch_lost_while_set");
        w.log(format!("a{a} the sessions directory was lost while its watch was set: not watched until the tick sets it again"));
        Unwoken { since: now, whole_at: now + TICK.as_millis() as u64, incomplete: false, lost_while_set: true }
    } else {
        return false;
    };
    w.agents[a].observer.unwoken = Some(unwoken);
    true
}

/// MON-1 liveness (`Oracle::on_monitor_read`): what this look read of the session it was
/// already reading (`before`: the session and the records read then, None when not attached:
/// an attach starts where its checkpoint or resume says) was readable since when; the lag
/// counts from the later of that, the daemon's start, the heal and the first look of a chain
/// of looks cut at their step bound (MON-4). Checked after the heal
/// only: while faults run, a blind observer (`observer.*`) may lag by design.
fn check_read_lag(w: &mut World, a: usize, before: Option<(wakterm_engine::SessionId, usize)>) {
    let (Some(healed), Some((session, read))) = (w.healed_ms, before) else { return };
    let agent = &w.agents[a];
    if w.is_managed(a) || agent.session.id != session || agent.observer.read <= read {
        return;
    }
    let oldest = agent.session.records[read..agent.observer.read].iter().map(|r| r.visible_at_ms).min().expect("read at least one");
    // MON-4: a look that goes on from a cut one is late by what it adds after the chain began.
    let chain = agent.observer.behind_since.unwrap_or(0);
    let from = oldest.max(healed).max(w.daemon_started_ms).max(chain);
    w.oracle.on_monitor_read(a, from, wakterm_runtime::driver::now_ms());
}

/// MON-1: waits for the loop's next run: a tick 50-400 ms away, or earlier when something it
/// was woken for (`World::wake_observer`: a record readable, the pane printed) is due.
async fn next_run(wake: &mut mpsc::UnboundedReceiver<u64>, pending: &mut std::collections::BTreeSet<u64>) {
    let tick = wakterm_runtime::driver::now_ms() + thread_rng().gen_range(50..400);
    loop {
        while let Ok(at) = wake.try_recv() {
            pending.insert(at);
        }
        let now = wakterm_runtime::driver::now_ms();
        let next = pending.first().map_or(tick, |at| tick.min(*at));
        if next <= now {
            break;
        }
        match madsim::time::timeout(Duration::from_millis(next - now), wake.recv()).await {
            Ok(Some(at)) => {
                pending.insert(at);
            }
            Ok(None) => madsim::time::sleep(Duration::from_millis(next - now)).await,
            Err(_) => break,
        }
    }
    let now = wakterm_runtime::driver::now_ms();
    pending.retain(|at| *at > now);
}

/// OBS-1, EV-5 (`AgentRuntime::checkpoint_if_due`): the observer's checkpoint, when due,
/// goes to the engine (which commits it in the agent's event batch), not to the store.
fn checkpoint_input(w: &mut World, a: usize) -> Option<Input> {
    let (checkpoint_json, covers) = w.checkpoint_due(a)?;
    let agent_id = w.agents[a].agent_id.clone();
    w.checkpoint_weights.insert(checkpoint_json.clone(), covers);
    w.checkpoint_sent.insert(agent_id.to_string(), checkpoint_json.clone());
    Some(Input::ObserverCheckpoint { agent_id, checkpoint_json })
}

/// The monitor's `Input::ObserverSnapshot`, when it has one to send.
fn send_snapshot(w: &mut World, inbox: &mpsc::Sender<DriverMsg>, a: usize, snapshot: Option<wakterm_engine::ObserverSnapshot>) {
    send_step(inbox, snapshot_input(w, a, snapshot).into_iter().collect());
}

fn snapshot_input(w: &mut World, a: usize, snapshot: Option<wakterm_engine::ObserverSnapshot>) -> Option<Input> {
    let snapshot = snapshot?;
    w.agents[a].observer.snapshots_sent += 1;
    w.log(format!("a{a} snapshot {}", describe_snapshot(&Ok(snapshot.clone()))));
    let agent_id = w.agents[a].agent_id.clone();
    Some(Input::ObserverSnapshot { agent_id, snapshot })
}

/// A slow refresh (`observer.refresh_slow`: a holder or a read that stalls) answers 4-7 s
/// later, past its admission's bound (5 s) two times in three. While faults run, half of the
/// slow refreshes (`observer.refresh_after_snapshot`) answer past the bound instead, right
/// after a snapshot the observer loop sends busy by the screen alone (a look older than the
/// pane) if one comes within 7 s: the order in which the engine does not apply a late
/// refresh (ADM-3) and holds a view the refresh's contradicts (an exploration found the loop
/// then compared with the refresh's unapplied view: MON-1).
async fn late_after_a_snapshot(world: &Shared, agent_id: &AgentId) {
    let after_snapshot = {
        let mut w = world.lock().unwrap();
        let roll = w.faults_on && thread_rng().gen_bool(0.5);
        agent_index(&w, agent_id).filter(|_| roll).map(|a| {
            w.counters.fault("observer.refresh_after_snapshot");
            (a, w.agents[a].observer.snapshots_sent)
        })
    };
    let Some((a, sent)) = after_snapshot else {
        return madsim::time::sleep(ms(4_000, 7_000)).await;
    };
    madsim::time::sleep(ms(5_001, 5_300)).await;
    let busy_by_the_screen = |w: &World| {
        w.agents.get(a).is_none_or(|agent| {
            let observer = &agent.observer;
            observer.snapshots_sent != sent && observer.sent.as_ref().is_some_and(|s| s.turn == wakterm_engine::TurnState::Busy { turn: None })
        })
    };
    for _ in 0..170 {
        if busy_by_the_screen(&world.lock().unwrap()) {
            break;
        }
        madsim::time::sleep(Duration::from_millis(10)).await;
    }
}

/// As the runtime's `forward_liveness`: a changed process's last events, then the agent's new
/// facts, one step.
fn send_liveness(w: &mut World, inbox: &mpsc::Sender<DriverMsg>, a: usize, events: &mut Vec<ObserverEvent>, facts: Option<wakterm_engine::AgentFacts>) {
    send_step(inbox, liveness_step(w, a, events, facts));
}

/// What a port's look at an agent's liveness found.
struct Liveness {
    process_changed: bool,
    /// Mutant `liveness_sent_after_release`: the change's step, still to be sent.
    late: Option<Vec<Input>>,
}

/// `reattach_agents`' late half: `StartupComplete` once every agent silent at the start is
/// registered, or after `STARTUP_PENDING_BOUND` (30 s), for the daemon of `epoch` only.
async fn startup_complete_when_registered(world: Shared, inbox: mpsc::Sender<DriverMsg>, epoch: u64) {
    let give_up = wakterm_runtime::driver::now_ms() + 30_000;
    loop {
        {
            let w = world.lock().unwrap();
            if w.daemon_epoch != epoch {
                return; // that daemon died
            }
            let waiting = w.agents.iter().any(|agent| agent.silent_until_ms.is_some());
            if !waiting || wakterm_runtime::driver::now_ms() >= give_up {
                // LIVE-1, EV-14: the agents still silent are held, not stopped (the daemon's
                // `reattach_agents`); mutant `unreachable_recorded_stopped` does not say so.
                for a in (0..w.agents.len()).filter(|a| w.agents[*a].silent_until_ms.is_some()) {
                    if w.mutant != Mutant::UnreachableRecordedStopped {
                        send_if_running(&inbox, Input::AgentUnreachable { agent_id: w.agents[a].agent_id.clone() });
                    }
                }
                send_if_running(&inbox, Input::StartupComplete);
                return;
            }
        }
        madsim::time::sleep(Duration::from_millis(100)).await;
    }
}

/// LIVE-1 at start: an agent whose holder was silent is registered by the first look after
/// the silence (a new observer of the process that runs then, its facts sent under the lock),
/// and only then joins the monitor. True while it is still silent: nothing else looks at it.
fn still_silent(w: &mut World, inbox: &mpsc::Sender<DriverMsg>, a: usize) -> bool {
    let Some(until) = w.agents[a].silent_until_ms else { return false };
    if wakterm_runtime::driver::now_ms() < until {
        return true;
    }
    w.agents[a].silent_until_ms = None;
    w.reset_observer(a);
    let facts = w.agents[a].facts();
    if w.durable_mark(a).is_some_and(|mark| mark.incarnation != facts.incarnation) {
        w.oracle.on_process_changed_delivered(a); // the process changed while it was silent
    }
    w.log(format!("a{a} its holder answers: registered {:?}", facts.incarnation));
    send_if_running(inbox, Input::AgentUpserted(facts));
    false
}

/// The monitor's liveness look. `liveness.unknown` (LIVE-1, LIVE-2): the holder's answer to
/// a look at a changed process gives no facts (a timeout, out of descriptors, a garbled
/// reply): nothing changes, and this run reads nothing of the agent (None; the model's
/// observer cannot tell the old process's records from the new one's). The holder pushed
/// the change once; the look stays due and the next run asks again (the runtime's tick).
/// Mutant `unknown_liveness_forgotten`: the monitor stops asking until the process changes
/// again, as the daemon did until a review found it, so it never looks at the agent again.
fn monitor_liveness(w: &mut World, inbox: &mpsc::Sender<DriverMsg>, a: usize) -> Option<Liveness> {
    let agent = &w.agents[a];
    let pending = agent.observer.reported != agent.process;
    if pending && agent.observer.liveness_forgotten.is_some_and(|at| at == agent.process) {
        return None; // the bug: nobody asks again
    }
    w.agents[a].observer.liveness_forgotten = None;
    if pending && w.fault_roll(0.15) {
        w.counters.fault("liveness.unknown");
        w.log(format!("a{a} liveness unknown (the holder's answer gave no facts): nothing changes"));
        if w.mutant == Mutant::UnknownLivenessForgotten {
            w.agents[a].observer.liveness_forgotten = Some(w.agents[a].process);
        }
        return None;
    }
    Some(look_at_liveness(w, inbox, a))
}

/// A port's liveness look (the refresh's, the monitor's): a change is sent at once, under the
/// world lock (LIVE-1: the runtime sends it under the observer lock it applied it under).
fn look_at_liveness(w: &mut World, inbox: &mpsc::Sender<DriverMsg>, a: usize) -> Liveness {
    let mut events = Vec::new();
    let facts = w.liveness(a, &mut events);
    let process_changed = facts.is_some();
    debug_assert!(process_changed || events.is_empty(), "only a process change ends a process");
    if w.mutant == Mutant::LivenessSentAfterRelease && process_changed {
        return Liveness { process_changed, late: Some(liveness_step(w, a, &mut events, facts)) }; // the bug
    }
    send_liveness(w, inbox, a, &mut events, facts);
    Liveness { process_changed, late: None }
}

/// Mutant `liveness_sent_after_release` (LIVE-1's fault class: a port's send split from the
/// lock it read under): the new process's observer is installed, the lock released, and only
/// after this pause is the change sent, so another port (a refresh, the monitor) may read the
/// new observer in between and send its events first, which the engine files under the old
/// process.
async fn send_late(inbox: &mpsc::Sender<DriverMsg>, late: Option<Vec<Input>>) {
    if let Some(step) = late {
        madsim::time::sleep(ms(1, 60)).await;
        send_step(inbox, step);
    }
}

fn liveness_step(w: &mut World, a: usize, events: &mut Vec<ObserverEvent>, facts: Option<wakterm_engine::AgentFacts>) -> Vec<Input> {
    let mut step = Vec::new();
    for event in events.drain(..) {
        w.log(format!("a{a} observed {}", describe_event(&event)));
        step.extend(observed_input(w, a, event));
    }
    if let Some(facts) = facts {
        w.log(format!("a{a} upsert {:?}", facts.incarnation));
        w.oracle.on_process_changed_delivered(a);
        step.push(Input::AgentUpserted(facts));
    }
    step
}

pub fn describe_event(event: &ObserverEvent) -> String {
    match event {
        ObserverEvent::Attached { session, position } => format!("attached {}:{position}", session.0),
        ObserverEvent::TurnStarted { turn, position, .. } => format!("turn_started {} @{position}", turn.0),
        ObserverEvent::UserMessage { turn, prompt_hash, position, .. } => {
            format!("user_message {:?} {} @{position}", turn.as_ref().map(|t| &t.0), &prompt_hash[..8])
        }
        ObserverEvent::TurnCompleted { turn, position, .. } => format!("turn_completed {} @{position}", turn.0),
        ObserverEvent::TurnAborted { turn, position, .. } => format!("turn_aborted {:?} @{position}", turn.as_ref().map(|t| &t.0)),
        ObserverEvent::AgentMessage { turn, position, .. } => format!("agent_message {:?} @{position}", turn.as_ref().map(|t| &t.0)),
        ObserverEvent::PlanUpdated { turn, position, .. } => format!("plan_updated {:?} @{position}", turn.as_ref().map(|t| &t.0)),
        ObserverEvent::SessionLost { reason, .. } => format!("session_lost {reason}"),
        ObserverEvent::ProcessExited { drained } => format!("process_exited drained={drained}"),
        ObserverEvent::RequestRefused { id, position, .. } => format!("request_refused {id} @{position}"),
        ObserverEvent::TurnAccepted { id, turn, position, .. } => format!("turn_accepted {id} -> {} @{position}", turn.0),
    }
}

/// The engine's clock in the simulator: the production one, or (mutant `WallClockTimers`) the
/// stepped wall clock read at every step, as the driver once did.
enum SimClock {
    Engine(EngineClock),
    Stepped(Shared),
}

impl Clock for SimClock {
    fn now_ms(&self) -> u64 {
        match self {
            SimClock::Engine(clock) => clock.now_ms(),
            SimClock::Stepped(world) => world.lock().unwrap().wall_ms(),
        }
    }
}

/// HIST-5, as `daemon::history_seed`: one read snapshot of every stored request id, sent to the
/// engine in chunks (a few ids each, so admissions interleave with the seed), the last one
/// `complete`. A failed read (`store.seed_failed`) stops short: ids stay looked up.
async fn history_seed(world: Shared, inbox: mpsc::Sender<DriverMsg>) {
    madsim::time::sleep(ms(0, 30)).await;
    let ids: Vec<RequestId> = {
        let w = world.lock().unwrap();
        let stored = match w.mutant {
            Mutant::SeedOpenRequestsOnly => w.store.open_requests(), // the bug: the recovery loader's rows
            _ => w.store.requests(),
        };
        stored.iter().map(|r| RequestId::parse(&r.request_id).expect("stored ids are UUIDs")).collect()
    };
    let mut chunks: Vec<Vec<RequestId>> = ids.chunks(thread_rng().gen_range(1..5)).map(<[RequestId]>::to_vec).collect();
    let last = chunks.pop().unwrap_or_default();
    for ids in chunks {
        let failed = {
            let mut w = world.lock().unwrap();
            let failed = w.fault_roll(w.plan.commit_fail / 4.0);
            if failed {
                w.counters.fault("store.seed_failed");
                w.log("history seed failed: ids stay looked up".to_string());
            }
            failed
        };
        if failed {
            return;
        }
        send(&inbox, Input::HistorySeed { ids, complete: false });
        madsim::time::sleep(ms(0, 3)).await;
    }
    world.lock().unwrap().log(format!("history seeded ({} ids)", ids.len()));
    send(&inbox, Input::HistorySeed { ids: last, complete: true });
}

/// Starts a daemon on a fresh node: recover the engine from what is durable, re-register the
/// agents, let watchers catch up from the store, and run the production driver.
pub fn start_daemon(world: &Shared) -> madsim::runtime::NodeHandle {
    let (inbox, inbox_rx) = mpsc::channel(DRIVER_INBOX);
    let (store_tx, store_rx) = mpsc::unbounded_channel();
    let (wake_tx, wake_rx) = mpsc::unbounded_channel();
    let (engine, clock) = {
        let mut w = world.lock().unwrap();
        let mut requests = Vec::new();
        // HIST-1: open requests only, as `recover_engine` (finished ones are read back).
        for stored in w.store.open_requests() {
            let record: RequestRecord = serde_json::from_str(&stored.record_json).expect("stored records parse");
            if w.mutant == Mutant::ForgetUnfinished && record.phase == Phase::Registered {
                continue; // the bug: "never confirmed, so never admitted"
            }
            requests.push(record);
        }
        let last_terminal_sequence = w.store.last_terminal_sequence();
        // EV-1, EV-4: as `recover_engine`: the last sequence (pruned ones included) and every
        // agent's event mark.
        let last_event_sequence = w.store.last_event_sequence();
        let mut event_marks = Vec::new();
        for (agent_id, json) in w.store.event_marks() {
            let mark: EventMark = serde_json::from_str(&json).unwrap_or_else(|e| panic!("the event mark of {agent_id} is unreadable: {e}"));
            event_marks.push(mark);
        }
        if w.mutant == Mutant::EventMarksDropped {
            event_marks.clear(); // the bug
        }
        if w.mutant == Mutant::MarksForgetTurnsTaken {
            for mark in &mut event_marks {
                mark.prompts_taken.clear(); // the bug
            }
        }
        if w.mutant == Mutant::MarksForgetAnsweredLines {
            for mark in &mut event_marks {
                mark.answered_lines.clear(); // the bug
            }
        }
        if w.mutant == Mutant::MarksReadAsExited {
            for mark in &mut event_marks {
                mark.exited = true; // the bug
            }
        }
        if w.mutant == Mutant::ReplaysTrustedByPosition {
            for mark in &mut event_marks {
                mark.fingerprint = None; // the bug: replays are dropped by position alone
            }
        }
        // TIME-1, ADM-5: a wall clock stepped back while the daemon was down (a VM restored
        // from a snapshot, a correction at boot): the earlier daemon's records carry times
        // ahead of the new one's, so which of two writes was registered last, their recorded
        // times no longer say (the restart once picked the earlier).
        if w.crashes > 0 && w.fault_roll(CLOCK_BACK_WHILE_DOWN) {
            let step = thread_rng().gen_range(60_000..1_800_000);
            w.wall_offset_ms -= step;
            w.counters.fault("clock.back_while_down");
            w.log(format!("wall clock stepped back {step} ms while the daemon was down"));
        } else if w.crashes > 0 && w.fault_roll(CLOCK_FORWARD_WHILE_DOWN) {
            // TIME-2: stepped forward, the earlier daemon's writes of a moment ago look older
            // than RF-8's timeout by their recorded times (the restart once held nothing).
            let step = thread_rng().gen_range(60_000..1_800_000);
            w.wall_offset_ms += step;
            w.counters.fault("clock.forward_while_down");
            w.log(format!("wall clock stepped forward {step} ms while the daemon was down"));
        }
        // TIME-1: the daemon reads its (possibly stepped) wall clock once, at start. TIME-2: a
        // write is recent by the simulated time since its bytes landed (no step of the wall
        // clock moves it), judged by the oracle's own record of the write, not by anything the
        // engine recorded.
        w.oracle.daemon_wall_offset_ms = w.wall_offset_ms;
        let timeout = wakterm_engine::limits::TURN_START_TIMEOUT_MS;
        let true_now = wakterm_runtime::driver::now_ms();
        let looks_recent = |record: &RequestRecord| w.oracle.write_landed_ms(record.request_id.as_str()).is_some_and(|landed| landed + timeout > true_now);
        // ADM-5: the new engine has seen no turn and answers no call of the dead one. The writes
        // it can know of: a return-final request's whose submitted marker is durable, a
        // registration's left unfinished (its write may have happened), a one-way request's
        // whose settled record holds the write's outcome and where the view stood, a
        // return-final request's ended since with such a record, a registration an earlier
        // restart ended (`write_unknown`), unless it looks too old.
        let written = |r: &&RequestRecord| matches!(r.phase, Phase::Submitted | Phase::Registered);
        let mut known: Vec<RequestRecord> = requests.iter().filter(written).cloned().collect();
        for stored in w.store.requests().into_iter().filter(|r| r.phase == "settled" || r.phase == "terminal") {
            let record: RequestRecord = serde_json::from_str(&stored.record_json).expect("stored records parse");
            if (record.written_past.is_some() || record.write_unknown) && looks_recent(&record) {
                known.push(record);
            }
        }
        let known_writes: BTreeSet<String> = known.iter().map(|r| r.request_id.as_str().to_string()).collect();
        // Per agent, the latest of them (the one the new engine holds for): a later write the
        // pane never saw land (its result lost, an old holder's bytes late) counts too.
        let mut latest_known: BTreeMap<usize, (u64, String, Option<wakterm_engine::SessionId>)> = BTreeMap::new();
        let mut floor_sessions: BTreeMap<usize, BTreeSet<Option<wakterm_engine::SessionId>>> = BTreeMap::new();
        for record in &known {
            let Some(a) = agent_index(&w, &record.agent_id) else { continue };
            let floor = record.written_past.as_ref().map(|c| c.session.clone());
            floor_sessions.entry(a).or_default().insert(floor.clone());
            let entry = (record.registered_ms, record.request_id.as_str().to_string(), floor);
            if latest_known.get(&a).is_none_or(|l| (entry.0, &entry.1) > (l.0, &l.1)) {
                latest_known.insert(a, entry);
            }
        }
        // The engine takes a turn as past its writes only past every write's floor
        // (`RecoveredWrite::reopen_wait`): floors in two sessions hold the agent, as no floor.
        let one_session = |a: &usize| floor_sessions.get(a).is_some_and(|s| s.len() == 1);
        // ADM-5 (PTY): the agents whose latest write's floor no turn of the pane's session now
        // passes: floors in two sessions, or one in another session than the pane's.
        let floors_elsewhere: BTreeSet<usize> = latest_known
            .iter()
            .filter(|(a, (_, _, floor))| !w.is_managed(**a) && (!one_session(a) || floor.as_ref().is_some_and(|f| f != &w.agents[**a].session.id)))
            .map(|(a, _)| *a)
            .collect();
        let latest_known = latest_known.into_iter().map(|(a, (_, id, floor))| (a, (id, floor.filter(|_| one_session(&a))))).collect();
        // Agents with a registration left unfinished: whether its write happened, nobody knows.
        // The engine's hold for such a line runs RF-8's timeout from when it landed at the
        // latest: WRITE_LANDS_WITHIN_MS after this start (its holder may write it after the
        // crash).
        let unfinished: BTreeMap<String, (usize, wakterm_engine::Incarnation)> = requests
            .iter()
            .filter(|r| r.phase == Phase::Registered)
            .filter_map(|r| Some((r.request_id.as_str().to_string(), (agent_index(&w, &r.agent_id)?, r.incarnation.clone()))))
            .collect();
        let taken_writes = writes_seen_read_durably(&w);
        // The process each agent runs now: the engine holds only for writes into it.
        let running: BTreeMap<usize, wakterm_engine::Incarnation> =
            (0..w.agents.len()).filter_map(|a| Some((a, w.agents[a].facts().incarnation?))).collect();
        let taken_durably = turns_after_writes_durable(&w);
        // ADM-5 (managed): the lines the durable marks saw accepted into a turn not yet seen
        // taking them: the new engine waits for that turn's start (`RecoveredWrite::managed_wait`).
        // Only a mark of the process that runs now: the engine reopens no wait into another
        // (a process change ends the wait; the accepted turn may never start).
        let accepted_durably = (0..w.agents.len())
            .filter_map(|a| w.durable_mark(a).map(|mark| (a, mark)))
            .filter(|(a, mark)| mark.incarnation.is_some() && mark.incarnation == w.agents[*a].facts().incarnation)
            .flat_map(|(a, mark)| mark.answered_lines.into_iter().filter(|line| !line.taken).filter_map(move |line| Some((a, (line.id, line.turn?)))))
            .collect();
        let any_unfinished = !unfinished.is_empty();
        w.oracle.on_daemon_start(known_writes, unfinished, (taken_writes, running), taken_durably, (latest_known, floors_elsewhere), accepted_durably);
        w.daemon_started_ms = wakterm_runtime::driver::now_ms();
        if any_unfinished && w.plan.commit_stall > 0.0 {
            crash_within_the_minute(&w, world.clone(), w.daemon_epoch + 1);
        }
        let clock = match w.mutant {
            Mutant::WallClockTimers => SimClock::Stepped(world.clone()), // the bug
            _ => SimClock::Engine(EngineClock::start(w.wall_ms())),
        };
        // (The stepped clock reads the world, whose lock is held here.)
        let now = match &clock {
            SimClock::Engine(engine_clock) => engine_clock.now_ms(),
            SimClock::Stepped(_) => w.wall_ms(),
        };
        // TIME-2: this run's engine time on the simulated monotonic clock (the simulated time,
        // which no wall step moves; one boot), and the store's record of the boot's runs,
        // committed before the run records anything, as `recover_engine`.
        let run_clock = match w.mutant {
            Mutant::RunClockIgnored => None, // the bug: ages and the window by the wall clock
            _ => Some(RunClock { boot_id: SIM_BOOT.to_string(), offset_ms: i64::try_from(true_now).expect("simulated time fits") - i64::try_from(now).expect("engine time fits") }),
        };
        let kept = KeptRunClocks::from_read::<()>(Ok(w.store.run_clocks()));
        assert!(kept != KeptRunClocks::Unreadable, "the simulator's daemons keep readable run clocks");
        let window = RunClocksSeen::restart_window(now, run_clock.as_ref(), kept);
        let json = serde_json::to_string(&window.keep).expect("run clocks serialize");
        w.store.commit(&[StoreOp::PutRunClocks { json }]).expect("the run clocks commit");
        let since_ms = window.since_ms;
        w.retention_clock = match &clock {
            SimClock::Engine(engine_clock) => Some(wakterm_runtime::store::retention::RetentionClock { engine: *engine_clock, behind_ms: window.behind_ms }),
            SimClock::Stepped(_) => None, // not the last daemon's clock either
        };
        // ADM-5: and, as `recover_engine`, of the requests finished within RF-8's turn-start
        // timeout, each agent's latest few written ones, oldest first.
        let recent = match w.mutant {
            Mutant::RecentFinishedNotLoaded => Vec::new(),
            Mutant::LatestWrittenByRecordedTime => latest_written_by_recorded_time(&w.store.requests(), since_ms), // the bug
            _ => w.store.latest_written_since(since_ms),
        };
        for stored in recent {
            if w.mutant == Mutant::RecentPtyWritesNotLoaded && agent_named(&w, &stored.agent_id).is_some_and(|a| !w.is_managed(a)) {
                continue; // the bug
            }
            requests.push(serde_json::from_str(&stored.record_json).expect("stored records parse"));
        }
        let engine = Engine::recover(DurableState { requests, last_terminal_sequence, last_event_sequence, event_marks }, now, run_clock);
        // `request watch --after N`: a watcher reconnects and reads what it missed.
        let missed = w.store.terminal_after(w.oracle.last_sequence);
        for stored in missed {
            let event: TerminalEvent = serde_json::from_str(&stored.event_json).expect("stored events parse");
            w.log(format!("watch catch-up {} seq {} {:?}", event.request_id, event.terminal_event_sequence, event.state));
            *w.counters.terminals.entry(format!("{:?}", event.state)).or_default() += 1;
            w.oracle.on_terminal(&event, true);
            note_write_given_up(&mut w, &event);
            let riding = riding_terminal_events(&w, &event);
            w.oracle.on_terminal_riding(&event, riding);
        }
        // EV-1: nothing a subscriber got was lost or renumbered by the crash; then
        // `agent events --after N`: the subscriber reconnects and reads what it missed (EV-2:
        // the new engine has published everything durable).
        let World { oracle, store, .. } = &mut *w;
        oracle.check_seen_still_durable(store);
        let through = w.store.last_event_sequence();
        w.subscriber_away_until = None; // it reconnects to the new daemon
        subscriber_catch_up(&mut w, through, "catch-up");
        w.oracle.on_stream_restart();
        // EV-5: the checkpoints the dead daemon's engine still held are gone with it.
        w.checkpoint_weights.clear();
        w.checkpoint_sent.clear();
        w.end_failed_for.clear();
        let now = wakterm_runtime::driver::now_ms();
        let mut silent = false;
        for a in 0..w.agents.len() {
            w.reset_observer(a);
            // LIVE-1: a holder that does not answer the first probe (stopped, its slots full):
            // the agent is registered once a probe knows, and `StartupComplete` waits for it.
            // SOCK-2 (`liveness.rebinding_at_start`): or its socket was removed while the daemon
            // was down and nobody listens until the holder binds it again (within a second):
            // unknown too, within `REBIND_GRACE` (`AgentRuntime::rebind_grace`).
            let rebinding = w.agents[a].process.is_some() && w.fault_roll(0.02);
            if w.agents[a].process.is_some() && (rebinding || w.fault_roll(0.04)) {
                // LIVE-1, EV-14 (`liveness.silent_past_startup_bound`): now and then silent
                // past `StartupComplete`'s 30 s wait: its requests end, and the agent is held,
                // not stopped; its events go on when the holder answers (a hostile run saw
                // `agent.stopped`, then its turn's events).
                let (class, window) = match rebinding {
                    true => ("liveness.rebinding_at_start", 100..1_000),
                    false if w.fault_roll(0.15) => ("liveness.silent_past_startup_bound", 30_500..36_000),
                    false => ("liveness.silent_at_start", 500..8_000),
                };
                w.counters.fault(class);
                let until = now + thread_rng().gen_range(window);
                debug_assert!(!rebinding || until - now < wakterm_runtime::holder::REBIND_GRACE.as_millis() as u64);
                w.log(format!("a{a} its holder is silent at the daemon's start until {until} ({class})"));
                w.agents[a].silent_until_ms = Some(until);
                let taken_for_exit = match rebinding {
                    true => w.mutant == Mutant::RebindingTakenForExit,
                    false => w.mutant == Mutant::SilentHolderRegisteredGone,
                };
                if taken_for_exit {
                    let facts = wakterm_engine::AgentFacts { incarnation: None, process: None, ..w.agents[a].facts() };
                    send(&inbox, Input::AgentUpserted(facts)); // the bug: "unknown" taken for "gone"
                    continue;
                }
                silent = true;
                continue;
            }
            w.agents[a].silent_until_ms = None;
            let facts = w.agents[a].facts();
            send(&inbox, Input::AgentUpserted(facts));
        }
        if silent {
            madsim::task::spawn(startup_complete_when_registered(world.clone(), inbox.clone(), w.daemon_epoch + 1));
        } else {
            send(&inbox, Input::StartupComplete);
        }
        w.daemon_epoch += 1;
        w.inbox = Some(inbox.clone());
        w.wake = Some(wake_tx);
        w.log(format!("daemon start, last sequence {last_terminal_sequence}, last event sequence {last_event_sequence}"));
        (engine, clock)
    };
    let node = madsim::runtime::Handle::current().create_node().name("daemon").build();
    let world = world.clone();
    node.spawn(async move {
        madsim::task::spawn(store_writer(world.clone(), inbox.clone(), store_rx));
        madsim::task::spawn(retention(world.clone()));
        madsim::task::spawn(observer_loop(world.clone(), inbox.clone(), wake_rx));
        madsim::task::spawn(history_seed(world.clone(), inbox.clone()));
        let effects = SimEffects { world, inbox, store: store_tx };
        run_driver(engine, inbox_rx, effects, clock).await;
    });
    node
}

/// `crash.within_the_minute`: the daemon starting (its epoch `epoch`) with a registration left
/// unfinished crashes again 20-60 s later, within RF-8's minute of the start that ended the
/// registration (REC-1), so the next start meets it marked `write_unknown` (ADM-5). Not when
/// that daemon crashed meanwhile (the next one would die at its start). On the holders' node,
/// which the seed's teardown kills (a task left sleeping would keep the world alive).
fn crash_within_the_minute(w: &World, world: Shared, epoch: u64) {
    let holders = w.holder.clone().expect("the holders' node runs");
    holders.spawn(async move {
        madsim::time::sleep(ms(20_000, 60_000)).await;
        let mut w = world.lock().unwrap();
        if w.daemon_epoch == epoch && w.inbox.is_some() {
            w.crash_point_at(1.0, "crash.within_the_minute");
        }
    });
}

/// Mutant `latest_written_by_recorded_time`: the restart's choice of each agent's latest
/// written finished request by the registration time its record holds (as the store chose it
/// until 2026-12-05), which a wall clock stepped back between two daemons inverts.
fn latest_written_by_recorded_time(stored: &[wakterm_runtime::store::StoredRequest], since_ms: u64) -> Vec<wakterm_runtime::store::StoredRequest> {
    let mut latest: BTreeMap<String, (u64, &wakterm_runtime::store::StoredRequest)> = BTreeMap::new();
    for request in stored.iter().filter(|r| crate::store_model::is_finished_phase(&r.phase) && r.updated_ms >= since_ms) {
        let record: serde_json::Value = serde_json::from_str(&request.record_json).expect("stored records parse");
        let written = !record["written_past"].is_null() || record["write_unknown"] == true;
        let (Some(registered), true) = (record["registered_ms"].as_u64(), written) else { continue };
        if latest.get(&request.agent_id).is_none_or(|(at, l)| (registered, &request.request_id) > (*at, &l.request_id)) {
            latest.insert(request.agent_id.clone(), (registered, request));
        }
    }
    latest.into_values().map(|(_, request)| request.clone()).collect()
}
