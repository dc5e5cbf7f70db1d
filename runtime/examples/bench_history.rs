//! Issue 11's history benchmark: N one-way admissions (default 1,000,000) and their events
//! pushed through the production driver, the real engine and the real SQLite store (WAL,
//! synchronous=FULL, group commit) with event retention running, as the daemon does. Only the
//! pane and Codex are replaced: a write "completes" at once and the agent's turn (started, the
//! prompt's user message, completed with a final) is observed right after it.
//!
//! Prints, per window of admissions: the process RSS, the engine's requests in memory, and the
//! receipt latency p50/p99 (admit -> receipt, two durable commits), so "memory flat, latency
//! flat" is read from the first and the last rows.
//!
//!   cargo run --release -p wakterm-runtime --example bench_history -- [ADMISSIONS] [AGENTS]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use wakterm_engine::*;
use wakterm_runtime::driver::{run_driver, DriverMsg, Effects, EngineClock};
use wakterm_runtime::store::{op_for, Store, StoreWriter};

const WINDOW: usize = 100_000;

/// The pane and Codex of every agent: the prompt last written, and the rollout position.
#[derive(Default)]
struct FakeAgents {
    prompts: BTreeMap<AgentId, (String, u64)>,
}

struct BenchEffects {
    inbox: mpsc::Sender<DriverMsg>,
    writer: Arc<StoreWriter>,
    agents: Arc<Mutex<FakeAgents>>,
    /// EV-2: the engine's settled mark, which retention never prunes past (EV-9).
    settled: tokio::sync::watch::Sender<u64>,
}

fn idle_snapshot(agent: u64, position: u64) -> ObserverSnapshot {
    ObserverSnapshot {
        incarnation: Incarnation(format!("inc-{agent}")),
        process: Some(ProcessIdentity { pid: 1000 + agent as u32, start_time_ticks: 1 }),
        status: ObserverStatus::Attached,
        session: Some(SessionId(format!("s-{agent}"))),
        position,
        turn: TurnState::Idle { last_completed: Some(TurnId("t0".into())) },
        composer: Composer::Empty,
    }
}

fn agent_number(agent_id: &AgentId) -> u64 {
    u64::from_str_radix(&agent_id.as_str()[24..], 16).expect("bench agent ids end in hex")
}

impl Effects for BenchEffects {
    fn refresh(&mut self, refresh_id: u64, agent_id: AgentId) {
        let position = self.agents.lock().unwrap().prompts.get(&agent_id).map_or(10, |(_, p)| *p);
        let snapshot = Ok(idle_snapshot(agent_number(&agent_id), position));
        let _ = self.inbox.try_send(DriverMsg::Input(Input::ObserverRefreshed { refresh_id, agent_id, snapshot, pane: Default::default() }));
    }

    fn resume(&mut self, _agent_id: AgentId, _from: Cursor, _incarnation: Incarnation) {}
    fn expect_session(&mut self, _agent_id: AgentId, _session: SessionId, _incarnation: Incarnation) {}

    fn events_settled(&mut self, through: u64) {
        self.settled.send_replace(through);
    }

    fn persist(&mut self, token: u64, ops: Vec<PersistOp>, more_follow: bool) {
        let inbox = self.inbox.clone();
        let store_ops = ops.iter().map(op_for).collect();
        let done = Box::new(move |result: Result<_, wakterm_runtime::store::StoreError>| {
            let result = result.map(drop).map_err(|e| e.to_string());
            let _ = inbox.blocking_send(DriverMsg::Input(Input::PersistAcked { token, result }));
        });
        self.writer.submit_in_step(store_ops, done, more_follow).expect("the bench never fills the writer queue");
    }

    fn deliver(&mut self, delivery_id: u64, _request_id: RequestId, agent_id: AgentId, _incarnation: Incarnation, _bytes: Vec<u8>, _expect_writes: Option<u64>) {
        let (prompt, position) = {
            let mut agents = self.agents.lock().unwrap();
            let entry = agents.prompts.get_mut(&agent_id).expect("the bench admitted to this agent");
            entry.1 += 30;
            entry.clone()
        };
        let session = SessionId(format!("s-{}", agent_number(&agent_id)));
        let turn = TurnId(format!("t{position}"));
        let inbox = self.inbox.clone();
        let events = [
            ObserverEvent::TurnStarted { session: session.clone(), turn: turn.clone(), position: position - 20 },
            ObserverEvent::UserMessage { session: session.clone(), turn: Some(turn.clone()), prompt_hash: prompt::prompt_hash(&prompt), position: position - 10 },
            ObserverEvent::TurnCompleted { session, turn, final_message: Some("done".into()), position },
        ];
        tokio::spawn(async move {
            let _ = inbox.send(DriverMsg::Input(Input::Delivered { delivery_id, outcome: DeliveryOutcome::Complete, record_end: None })).await;
            for event in events {
                let _ = inbox.send(DriverMsg::Input(Input::Observed { agent_id: agent_id.clone(), event })).await;
            }
        });
    }

    fn publish(&mut self, _event: TerminalEvent) {}
    fn publish_event(&mut self, _event: AgentEvent) {}
    // The history benchmark never submits (SUB-*): nothing to write or watch.
    fn submit_write(&mut self, _: u64, _: AgentId, _: Incarnation, _: wakterm_engine::SplitWrite, _: Option<u64>) {
        unreachable!("the history benchmark makes no submit calls")
    }
    fn watch_pane(&mut self, _: u64, _: AgentId, _: wakterm_engine::EnterBoundary, _: u64) {
        unreachable!("the history benchmark makes no submit calls")
    }
    fn load_request(&mut self, load_id: u64, _request_id: RequestId) {
        // Plain sends carry generated ids: never looked up.
        let _ = self.inbox.try_send(DriverMsg::Input(Input::RequestLoaded { load_id, record: Ok(None) }));
    }
}

fn rss_mib() -> f64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: f64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0.0);
    pages * 4096.0 / (1024.0 * 1024.0)
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[index].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut args = std::env::args().skip(1);
    let total: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    let agents: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(100);
    let dir = tempfile::tempdir().expect("scratch dir");
    let db = dir.path().join("wakterm.db");
    let store = Arc::new(Store::open(&db).expect("store"));
    let writer = Arc::new(StoreWriter::spawn(&db).expect("writer"));
    let (inbox, inbox_rx) = mpsc::channel(wakterm_runtime::driver::DRIVER_INBOX);
    let fake = Arc::new(Mutex::new(FakeAgents::default()));
    let settled = tokio::sync::watch::Sender::new(0);
    let effects = BenchEffects { inbox: inbox.clone(), writer: writer.clone(), agents: fake.clone(), settled: settled.clone() };
    let clock = EngineClock::start(wakterm_runtime::driver::now_ms());
    tokio::spawn(run_driver(Engine::new(), inbox_rx, effects, clock));
    let retention = wakterm_runtime::daemon::retention::Retention::default();
    let stored = Arc::new(std::sync::atomic::AtomicU64::new(wakterm_runtime::daemon::retention::UNKNOWN_BYTES));
    let retention_clock = wakterm_runtime::daemon::retention::RetentionClock { engine: clock, behind_ms: 0 };
    tokio::spawn(wakterm_runtime::daemon::retention::run(store.clone(), writer.clone(), (retention, retention_clock), settled.subscribe(), stored));
    for n in 0..agents {
        let agent_id = AgentId::parse(&format!("0b5e3c1a-1111-4222-8333-{n:012x}")).unwrap();
        fake.lock().unwrap().prompts.insert(agent_id.clone(), (String::new(), 10));
        let facts = AgentFacts {
            agent_id: agent_id.clone(),
            name: format!("a{n}"),
            harness: Harness::Codex,
            transport: Transport::Pty,
            incarnation: Some(Incarnation(format!("inc-{n}"))),
            process: Some(ProcessIdentity { pid: 1000 + n as u32, start_time_ticks: 1 }),
            managed: None,
        };
        inbox.send(DriverMsg::Input(Input::AgentUpserted(facts))).await.unwrap();
        let snapshot = idle_snapshot(n, 10);
        inbox.send(DriverMsg::Input(Input::ObserverSnapshot { agent_id, snapshot })).await.unwrap();
    }
    println!("| admissions | RSS MiB | requests in memory | receipt p50 ms | receipt p99 ms | admissions/s |");
    println!("|---:|---:|---:|---:|---:|---:|");
    let started = Instant::now();
    let mut done = 0usize;
    while done < total {
        let window = WINDOW.min(total - done);
        let window_started = Instant::now();
        let (tx, mut rx) = mpsc::unbounded_channel();
        let per_agent = window.div_ceil(agents as usize);
        for n in 0..agents {
            let (inbox, fake, tx) = (inbox.clone(), fake.clone(), tx.clone());
            let count = per_agent.min(window.saturating_sub(n as usize * per_agent));
            tokio::spawn(async move {
                let agent_id = AgentId::parse(&format!("0b5e3c1a-1111-4222-8333-{n:012x}")).unwrap();
                for i in 0..count {
                    let prompt = format!("prompt {n} {i}");
                    fake.lock().unwrap().prompts.get_mut(&agent_id).unwrap().0 = prompt.clone();
                    let command = AdmitCommand {
                        op: OpId(0),
                        operation: Operation::Send,
                        target: format!("a{n}"),
                        exact_agent_id: false,
                        incarnation: None,
                        request_id: uuid::Uuid::new_v4().to_string(),
                        prompt,
                        paste_mode: PasteMode::Bracketed,
                        return_mode: ReturnMode::OneWay,
                        final_timeout_ms: 0,
                        generated_id: true,
                        share_prompt: false,
                        write_nonce: 0, // a PTY agent: no turn/start
                        no_steer: false,
                    };
                    let asked = Instant::now();
                    let (reply, answer) = oneshot::channel();
                    inbox.send(DriverMsg::Admit { command, reply }).await.unwrap();
                    let receipt = answer.await.expect("a receipt");
                    assert_eq!(receipt.classification, Classification::Accepted, "{receipt:?}");
                    let _ = tx.send(asked.elapsed());
                }
            });
        }
        drop(tx);
        let mut latencies = Vec::with_capacity(window);
        while let Some(latency) = rx.recv().await {
            latencies.push(latency);
        }
        assert_eq!(latencies.len(), window, "every admission answered");
        latencies.sort_unstable();
        done += window;
        let in_memory = wakterm_runtime::driver::ask(&inbox, |engine: &Engine| engine.requests_in_memory()).await.unwrap();
        let rate = window as f64 / window_started.elapsed().as_secs_f64();
        println!("| {done} | {:.1} | {in_memory} | {:.2} | {:.2} | {rate:.0} |", rss_mib(), percentile(&latencies, 0.5), percentile(&latencies, 0.99));
    }
    let events = store.last_event_sequence().unwrap();
    let size = std::fs::metadata(&db).map(|m| m.len()).unwrap_or(0) + std::fs::metadata(dir.path().join("wakterm.db-wal")).map(|m| m.len()).unwrap_or(0);
    println!();
    println!("{total} admissions with {agents} agents in {:.0} s; {events} events appended (retention keeps the newest {}); database {:.0} MiB",
        started.elapsed().as_secs_f64(), retention.events, size as f64 / (1024.0 * 1024.0));
}
