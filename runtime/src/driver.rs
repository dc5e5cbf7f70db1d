//! The production driver: feeds the pure engine and performs its outputs through an
//! [`Effects`] port. The daemon plugs in real adapters (SQLite writer, holder panes, Codex
//! observers); the simulator plugs in simulated ones. Results of effects come back as
//! [`DriverMsg::Input`] on the same channel, so the engine sees one ordered stream.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::{mpsc, oneshot};
use wakterm_engine::{
    AdmitCommand, AgentEvent, AgentId, CancelCommand, CancelOutcome, Cursor, EnterBoundary, Engine, Incarnation, Input, OpId, Output, PersistOp, Receipt,
    RequestId, SessionId, SplitWrite, SubmitCommand, SubmitReceipt, TerminalEvent,
};

/// Bound of the driver's inbox: callers, effect results and observer events share it.
pub const DRIVER_INBOX: usize = 4096;

/// The side effects the engine asks for. Each must answer through the driver's inbox.
pub trait Effects: Send {
    /// ADM-3: refresh the agent's observer off the reactor; answer `ObserverRefreshed`.
    fn refresh(&mut self, refresh_id: u64, agent_id: AgentId);
    /// REC-2: re-attach the agent's observer at `from` and replay; answer `Observed` events.
    fn resume(&mut self, agent_id: AgentId, from: Cursor, incarnation: Incarnation);
    /// OBS-4: the observer of `incarnation` expects `session` (the stream's, before a
    /// restart); answer `Observed` events (a loss of it) and a snapshot, or nothing.
    fn expect_session(&mut self, agent_id: AgentId, session: SessionId, incarnation: Incarnation);
    /// Commit `ops` in one transaction; answer `PersistAcked` only after COMMIT. `more_follow`:
    /// another persist of the same engine step comes next (STORE-2: the writer keeps the step's
    /// batches in one transaction).
    fn persist(&mut self, token: u64, ops: Vec<PersistOp>, more_follow: bool);
    /// ADM-8: one pane write, of request `request_id`'s prompt; answer `Delivered`.
    fn deliver(&mut self, delivery_id: u64, request_id: RequestId, agent_id: AgentId, incarnation: Incarnation, bytes: Vec<u8>, expect_writes: Option<u64>);
    /// TERM-2: a durable terminal event for stream subscribers.
    fn publish(&mut self, event: TerminalEvent);
    /// EV-2: a durable agent event, in sequence order, for `agent events` subscribers.
    fn publish_event(&mut self, event: AgentEvent);
    /// EV-2, EV-8: every sequence through `through` is settled: published, or abandoned by a
    /// failed batch and never to be used. Called after every drain (the last settled number
    /// may be an abandoned one, which no `publish_event` announces).
    fn events_settled(&mut self, through: u64);
    /// HIST-2: read a request from the store off the reactor; answer `RequestLoaded`.
    fn load_request(&mut self, load_id: u64, request_id: RequestId);
    /// SUB-2: the split write as one writer call under the pane's write lock; answer
    /// `SubmitWritten` with the Enter boundary.
    /// `expect_writes`: the write count of the look the check decided on (ADM-4).
    fn submit_write(&mut self, delivery_id: u64, agent_id: AgentId, incarnation: Incarnation, write: SplitWrite, expect_writes: Option<u64>);
    /// SUB-4: sample the pane until `wakterm_engine::judge` is not `Pending` or `wait_ms`
    /// passed; answer `PaneWatched` with the last sample.
    fn watch_pane(&mut self, watch_id: u64, agent_id: AgentId, boundary: EnterBoundary, wait_ms: u64);
}

/// A read-only question to the engine, answered on the reactor without blocking; the closure
/// sends its own typed answer (see [`ask`]).
pub type Query = Box<dyn FnOnce(&Engine) + Send>;

pub enum DriverMsg {
    /// An engine input (effect results, observer events, agent facts).
    Input(Input),
    /// Observer inputs that arrived together, in order (a monitor read, a refresh, a resume, a
    /// process change): one engine step, so their events share a batch (`Engine::handle_all`).
    /// Never a caller's operation (those need an op id and a waiter).
    Inputs(Vec<Input>),
    /// A caller's admission; the receipt is sent on `reply`.
    Admit { command: AdmitCommand, reply: oneshot::Sender<Receipt> },
    /// A caller's cancel; the outcome is sent on `reply`.
    Cancel { request_id: String, reply: oneshot::Sender<CancelOutcome> },
    /// A `session action=submit` call (SUB-1); the receipt is sent on `reply`.
    Submit { command: SubmitCommand, reply: oneshot::Sender<SubmitReceipt> },
    Query(Query),
}

/// Asks the engine a read-only question through the driver. None: the driver is gone.
pub async fn ask<T: Send + 'static>(inbox: &mpsc::Sender<DriverMsg>, question: impl FnOnce(&Engine) -> T + Send + 'static) -> Option<T> {
    let (reply, answer) = oneshot::channel();
    let query: Query = Box::new(move |engine| drop(reply.send(question(engine))));
    inbox.send(DriverMsg::Query(query)).await.ok()?;
    answer.await.ok()
}

/// Who waits for an engine answer to a caller's operation.
enum Waiter {
    /// The caller, and the engine time its admission arrived (for the log's timing).
    Receipt(oneshot::Sender<Receipt>, u64),
    Cancel(oneshot::Sender<CancelOutcome>),
    Submit(oneshot::Sender<SubmitReceipt>, u64),
}

/// The wall clock: milliseconds since the Unix epoch (simulated under madsim). For records
/// people read (`created_ms`, `started_ms`) and for starting an [`EngineClock`]; never for
/// engine timers.
pub fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
}

/// The engine's time source (a port: the simulator may plant another).
pub trait Clock: Send {
    fn now_ms(&self) -> u64;
}

/// TIME-1: engine time is the wall clock read once, when the daemon starts, advanced by the
/// monotonic clock from then on. A wall-clock step while the daemon runs moves no timer
/// (delivery timeout, grace, probes, retries, deadlines); times stay epoch-like, so durable
/// deadlines and `at_ms` keep their meaning across a restart, which reads the wall clock again.
#[derive(Clone, Copy, Debug)]
pub struct EngineClock {
    origin_wall_ms: u64,
    origin: std::time::Instant,
}

impl EngineClock {
    pub fn start(wall_ms: u64) -> EngineClock {
        EngineClock { origin_wall_ms: wall_ms, origin: std::time::Instant::now() }
    }

    /// TIME-2: starts the clock and says where its time stands on the machine's monotonic
    /// clock (`CLOCK_MONOTONIC`, which `Instant` reads too), in this boot (`boot_id`); none when
    /// the boot cannot be read (a restart then ages this run's records by the wall clock).
    pub fn start_on_this_boot(wall_ms: u64, boot_id: Option<String>) -> (EngineClock, Option<wakterm_engine::RunClock>) {
        let monotonic_ms = crate::holder::protocol::monotonic_ms();
        let clock = EngineClock::start(wall_ms);
        let offset_ms = i64::try_from(i128::from(monotonic_ms) - i128::from(wall_ms)).ok();
        let run = boot_id.zip(offset_ms).map(|(boot_id, offset_ms)| wakterm_engine::RunClock { boot_id, offset_ms });
        (clock, run)
    }
}

/// TIME-2: this machine's boot, as the kernel names it (a random UUID per boot): none when it
/// cannot be read or does not look like one.
pub fn boot_id() -> Option<String> {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").ok()?;
    let id = text.trim();
    let plausible = (8..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    plausible.then(|| id.to_string())
}

impl Clock for EngineClock {
    fn now_ms(&self) -> u64 {
        let elapsed = u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.origin_wall_ms.saturating_add(elapsed)
    }
}

/// Runs until every sender of `inbox` is gone.
pub async fn run_driver<E: Effects, C: Clock>(mut engine: Engine, mut inbox: mpsc::Receiver<DriverMsg>, mut effects: E, clock: C) {
    let mut waiting: BTreeMap<OpId, Waiter> = BTreeMap::new();
    let mut next_op: u64 = 1;
    drain(&mut engine, &mut effects, &mut waiting, clock.now_ms());
    loop {
        let message = match engine.poll_timeout() {
            Some(at_ms) => {
                let wait = Duration::from_millis(at_ms.saturating_sub(clock.now_ms()));
                // `biased`: an unbiased select draws from tokio's own RNG, which madsim does
                // not control, and made simulation runs non-deterministic. Messages first.
                tokio::select! {
                    biased;
                    message = inbox.recv() => message,
                    _ = tokio::time::sleep(wait) => Some(DriverMsg::Input(Input::Tick)),
                }
            }
            None => inbox.recv().await,
        };
        let Some(message) = message else { break };
        let input = match message {
            DriverMsg::Input(input) => input,
            DriverMsg::Inputs(inputs) => {
                assert!(!inputs.iter().any(|i| matches!(i, Input::Admit(_) | Input::Cancel(_) | Input::Submit(_))), "a step carries no caller's operation");
                if tracing::enabled!(tracing::Level::TRACE) {
                    inputs.iter().for_each(|input| trace_kind("engine input", input));
                }
                engine.handle_all(clock.now_ms(), inputs);
                drain(&mut engine, &mut effects, &mut waiting, clock.now_ms());
                fire_due_timers(&mut engine, &mut effects, &mut waiting, &clock);
                continue;
            }
            DriverMsg::Admit { mut command, reply } => {
                command.op = OpId(next_op);
                next_op += 1;
                waiting.insert(command.op, Waiter::Receipt(reply, clock.now_ms()));
                Input::Admit(command)
            }
            DriverMsg::Cancel { request_id, reply } => {
                let op = OpId(next_op);
                next_op += 1;
                waiting.insert(op, Waiter::Cancel(reply));
                Input::Cancel(CancelCommand { op, request_id })
            }
            DriverMsg::Submit { mut command, reply } => {
                command.op = OpId(next_op);
                next_op += 1;
                waiting.insert(command.op, Waiter::Submit(reply, clock.now_ms()));
                Input::Submit(command)
            }
            DriverMsg::Query(query) => {
                query(&engine);
                fire_due_timers(&mut engine, &mut effects, &mut waiting, &clock);
                continue;
            }
        };
        if tracing::enabled!(tracing::Level::TRACE) {
            trace_kind("engine input", &input);
        }
        engine.handle(clock.now_ms(), input);
        drain(&mut engine, &mut effects, &mut waiting, clock.now_ms());
        fire_due_timers(&mut engine, &mut effects, &mut waiting, &clock);
    }
}

/// `WAKTERM_LOG=wakterm_runtime::driver=trace`: one line per engine input and output (and each
/// op of a commit), by kind only (never a prompt), so the log is a timeline of where an
/// admission's time goes.
fn trace_kind(what: &'static str, value: &impl std::fmt::Debug) {
    let text = format!("{value:?}");
    let kind = text.split(|c: char| !c.is_alphanumeric()).next().unwrap_or_default();
    tracing::trace!(kind, "{what}");
}

/// A busy inbox always wins the `biased` select, so timers that fell due meanwhile (commit
/// retries, deadlines, probes, step timeouts) fire after each message instead of waiting for a
/// quiet moment that may not come.
fn fire_due_timers<E: Effects, C: Clock>(engine: &mut Engine, effects: &mut E, waiting: &mut BTreeMap<OpId, Waiter>, clock: &C) {
    if engine.poll_timeout().is_some_and(|at_ms| at_ms <= clock.now_ms()) {
        engine.handle(clock.now_ms(), Input::Tick);
        drain(engine, effects, waiting, clock.now_ms());
    }
}

fn drain<E: Effects>(engine: &mut Engine, effects: &mut E, waiting: &mut BTreeMap<OpId, Waiter>, now_ms: u64) {
    // One step's outputs, all known now (an effect only answers through the inbox, later).
    let outputs: Vec<Output> = std::iter::from_fn(|| engine.poll_output()).collect();
    let mut persists_left = outputs.iter().filter(|output| matches!(output, Output::Persist { .. })).count();
    for output in outputs {
        if tracing::enabled!(tracing::Level::TRACE) {
            trace_kind("engine output", &output);
            if let Output::Persist { ops, .. } = &output {
                ops.iter().for_each(|op| trace_kind("persist op", op));
            }
        }
        match output {
            Output::RefreshObserver { refresh_id, agent_id } => effects.refresh(refresh_id, agent_id),
            Output::ResumeObserver { agent_id, from, incarnation } => effects.resume(agent_id, from, incarnation),
            Output::ExpectSession { agent_id, session, incarnation } => effects.expect_session(agent_id, session, incarnation),
            Output::Persist { token, ops } => {
                persists_left -= 1;
                effects.persist(token, ops, persists_left > 0)
            }
            Output::Deliver { delivery_id, request_id, agent_id, incarnation, bytes, expect_writes } => {
                effects.deliver(delivery_id, request_id, agent_id, incarnation, bytes, expect_writes)
            }
            // A caller that went away loses nothing durable.
            Output::Receipt { op, receipt } => match waiting.remove(&op) {
                Some(Waiter::Receipt(reply, started_ms)) => {
                    log_receipt(&receipt, now_ms.saturating_sub(started_ms));
                    drop(reply.send(receipt));
                }
                Some(_) => unreachable!("op {op:?} is not an admission"),
                None => {}
            },
            Output::CancelResult { op, outcome } => match waiting.remove(&op) {
                Some(Waiter::Cancel(reply)) => drop(reply.send(outcome)),
                Some(_) => unreachable!("op {op:?} is not a cancel"),
                None => {}
            },
            Output::SubmitReceipt { op, receipt } => match waiting.remove(&op) {
                Some(Waiter::Submit(reply, started_ms)) => {
                    log_submit(&receipt, now_ms.saturating_sub(started_ms));
                    drop(reply.send(receipt));
                }
                Some(_) => unreachable!("op {op:?} is not a submit"),
                None => {}
            },
            Output::SubmitWrite { delivery_id, agent_id, incarnation, write, expect_writes } => effects.submit_write(delivery_id, agent_id, incarnation, write, expect_writes),
            Output::WatchPane { watch_id, agent_id, boundary, wait_ms } => effects.watch_pane(watch_id, agent_id, boundary, wait_ms),
            Output::TerminalEvent(event) => effects.publish(event),
            Output::AgentEvent(event) => effects.publish_event(event),
            Output::LoadRequest { load_id, request_id } => effects.load_request(load_id, request_id),
        }
    }
    effects.events_settled(engine.events_published_through());
}

/// LOG-1: one line per admission decision: request id, classification, reason, timing. Never
/// the prompt.
fn log_receipt(receipt: &Receipt, elapsed_ms: u64) {
    let request_id = receipt.request_id.as_ref().map(|id| id.to_string()).unwrap_or_default();
    let agent_id = receipt.agent_id.as_ref().map(|id| id.to_string()).unwrap_or_default();
    tracing::info!(
        %request_id,
        %agent_id,
        classification = ?receipt.classification,
        reason = receipt.reason.as_deref().unwrap_or(""),
        written = receipt.prompt_written,
        replayed = receipt.replayed,
        elapsed_ms,
        "admission"
    );
}

/// LOG-1: one line per submit: submission id, status, reason, timing. Never the text.
fn log_submit(receipt: &SubmitReceipt, elapsed_ms: u64) {
    tracing::info!(
        submission_id = receipt.submission_id.as_deref().unwrap_or(""),
        agent_id = %receipt.agent_id.as_ref().map(|id| id.to_string()).unwrap_or_default(),
        status = ?receipt.status,
        reason = receipt.reason.as_deref().unwrap_or(""),
        write_state = ?receipt.write_state,
        elapsed_ms,
        "submit"
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use wakterm_engine::{AgentFacts, AgentId, Harness, Incarnation, Operation, PasteMode, ProcessIdentity, ReturnMode, Transport};

    /// A clock the test moves by hand.
    struct ManualClock(Arc<AtomicU64>);

    impl Clock for ManualClock {
        fn now_ms(&self) -> u64 {
            self.0.load(Ordering::SeqCst)
        }
    }

    /// Effects that never answer: a refresh stays unanswered until its timeout.
    struct Silent;

    impl Effects for Silent {
        fn refresh(&mut self, _: u64, _: AgentId) {}
        fn resume(&mut self, _: AgentId, _: Cursor, _: Incarnation) {}
        fn expect_session(&mut self, _: AgentId, _: SessionId, _: Incarnation) {}
        fn persist(&mut self, _: u64, _: Vec<PersistOp>, _: bool) {}
        fn deliver(&mut self, _: u64, _: RequestId, _: AgentId, _: Incarnation, _: Vec<u8>, _: Option<u64>) {}
        fn publish(&mut self, _: TerminalEvent) {}
        fn publish_event(&mut self, _: AgentEvent) {}
        fn events_settled(&mut self, _: u64) {}
        fn load_request(&mut self, _: u64, _: RequestId) {}
        fn submit_write(&mut self, _: u64, _: AgentId, _: Incarnation, _: SplitWrite, _: Option<u64>) {}
        fn watch_pane(&mut self, _: u64, _: AgentId, _: EnterBoundary, _: u64) {}
    }

    // The driver fires a timer that fell due even while its inbox never empties (the
    // `biased` select would otherwise serve messages only): the refresh deadline of an
    // admission whose refresh never answers (ADM-3) fires among a flood of read-only queries,
    // not after them.
    #[test]
    fn due_timers_fire_under_a_busy_inbox() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let now = Arc::new(AtomicU64::new(1_000_000));
            let (inbox, inbox_rx) = mpsc::channel(DRIVER_INBOX);
            let driver = tokio::spawn(run_driver(Engine::new(), inbox_rx, Silent, ManualClock(now.clone())));
            let facts = AgentFacts {
                agent_id: AgentId::parse("0195f2a4-3b1c-7d2e-8f3a-4b5c6d7e8f90").unwrap(),
                name: "zola".into(),
                harness: Harness::Codex,
                transport: Transport::Pty,
                incarnation: Some(Incarnation("inc-1".into())),
                process: Some(ProcessIdentity { pid: 100, start_time_ticks: 5 }),
                managed: None,
            };
            inbox.send(DriverMsg::Input(Input::AgentUpserted(facts))).await.unwrap();
            inbox.send(DriverMsg::Input(Input::StartupComplete)).await.unwrap();
            // HIST-5: an empty store, said so; the new id then needs no lookup (a
            // `generated_id` no longer skips one by itself, HIST-2).
            inbox.send(DriverMsg::Input(Input::HistorySeed { ids: Vec::new(), complete: true })).await.unwrap();
            let command = AdmitCommand {
                op: OpId(0),
                operation: Operation::Send,
                target: "zola".into(),
                exact_agent_id: false,
                incarnation: None,
                request_id: "0195f2a4-3b1c-7d2e-8f3a-4b5c6d7e8f91".into(),
                prompt: "hi".into(),
                paste_mode: PasteMode::Bracketed,
                return_mode: ReturnMode::OneWay,
                final_timeout_ms: 0,
                generated_id: true,
                share_prompt: false,
                write_nonce: 1,
                no_steer: false,
            };
            let (reply, receipt) = oneshot::channel();
            inbox.send(DriverMsg::Admit { command, reply }).await.unwrap();
            let deadline = ask(&inbox, |engine| engine.poll_timeout()).await.flatten().expect("the refresh has a deadline");
            // The refresh times out: the clock jumps past it while the inbox never empties.
            now.store(deadline + 1, Ordering::SeqCst);
            let timed_out_at = Arc::new(AtomicU64::new(u64::MAX));
            for n in 0..200u64 {
                let seen = timed_out_at.clone();
                let query: Query = Box::new(move |engine| {
                    if engine.poll_timeout().is_none_or(|at| at > deadline) {
                        seen.fetch_min(n, Ordering::SeqCst);
                    }
                });
                inbox.try_send(DriverMsg::Query(query)).expect("room in the inbox");
            }
            drop(inbox);
            driver.await.unwrap();
            drop(receipt); // what the admission does next is the engine's business (ADM-3)
            assert!(timed_out_at.load(Ordering::SeqCst) <= 1, "the timer fired among the queries, not after them: query {}", timed_out_at.load(Ordering::SeqCst));
        });
    }

    // TIME-1: after its start, engine time follows the monotonic clock, not the wall clock:
    // a clock started an hour "behind" the wall stays an hour behind, and never goes back.
    #[test]
    fn time_1_engine_clock_reads_the_wall_clock_only_at_start() {
        let hour_ago = now_ms() - 3_600_000;
        let clock = EngineClock::start(hour_ago);
        let first = clock.now_ms();
        std::thread::sleep(Duration::from_millis(20));
        let second = clock.now_ms();
        assert!(first >= hour_ago && first < hour_ago + 1_000, "starts at the wall time it was given");
        assert!(second >= first + 20, "advances with the monotonic clock");
        assert!(second < now_ms() - 3_500_000, "does not read the wall clock again");
    }
}
