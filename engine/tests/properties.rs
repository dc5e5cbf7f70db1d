//! Property tests: random interleavings of admissions, acknowledgements, faults, provider
//! turns, cancels, deadlines and crashes (via `Engine::recover`), checked against ground
//! truth after every step. The invariants are DESIGN.md's oracle list; each cites its rule.

mod support;
use proptest::prelude::*;
use std::collections::BTreeMap;
use support::*;
use wakterm_engine::*;

const IDS: [&str; 3] = [REQ, REQ2, "fe57dc90-994e-4e73-b09c-fac483d9f05d"];

#[derive(Clone, Debug)]
enum Step {
    Admit { id: usize, variant: u8, return_final: bool, send: bool },
    AckPersist { ok: bool },
    Deliver { outcome: u8 },
    Refresh,
    ProviderAdvance,
    HumanTypes,
    Tick { ms: u64 },
    Cancel { id: usize },
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0..3usize, 0..2u8, any::<bool>(), any::<bool>())
            .prop_map(|(id, variant, return_final, send)| Step::Admit { id, variant, return_final, send }),
        4 => prop::bool::weighted(0.9).prop_map(|ok| Step::AckPersist { ok }),
        3 => (0..10u8).prop_map(|outcome| Step::Deliver { outcome }),
        3 => Just(Step::Refresh),
        4 => Just(Step::ProviderAdvance),
        1 => Just(Step::HumanTypes),
        1 => (1..3000u64).prop_map(|ms| Step::Tick { ms }),
        1 => (0..3usize).prop_map(|id| Step::Cancel { id }),
        1 => Just(Step::Crash),
    ]
}

/// Ground truth of the provider: a rollout-like log of what Codex did with the bytes that
/// really reached the pane.
#[derive(Default)]
struct Provider {
    position: u64,
    next_turn: u32,
    running: Option<(String, u32)>, // (turn id, steps until complete)
    /// Prompts written to the pane (complete writes) not yet consumed by a turn.
    queued: Vec<String>,
    /// turn id -> the first prompt of the turn, and whether our write (not a human) put it there.
    first_prompt: BTreeMap<String, (String, bool)>,
    log: Vec<ObserverEvent>,
    last_completed: String,
}

impl Provider {
    fn emit(&mut self, rig: &mut Rig, make: impl FnOnce(u64) -> ObserverEvent) {
        self.position += 10;
        let event = make(self.position);
        self.log.push(event.clone());
        rig.observe(event);
    }

    fn advance(&mut self, rig: &mut Rig, ours: &BTreeMap<String, bool>) {
        if let Some((turn_id, left)) = self.running.clone() {
            if left == 0 {
                let final_message = Some(format!("final-of-{turn_id}"));
                let t = turn(&turn_id);
                self.emit(rig, |position| ObserverEvent::TurnCompleted { session: session(), turn: t, final_message, position });
                self.running = None;
                self.last_completed = turn_id;
            } else {
                self.running = Some((turn_id, left - 1));
            }
            return;
        }
        if self.queued.is_empty() {
            return;
        }
        let prompt = self.queued.remove(0);
        self.next_turn += 1;
        let turn_id = format!("turn-{}", self.next_turn);
        let by_us = ours.get(&prompt).copied().unwrap_or(false);
        self.first_prompt.insert(turn_id.clone(), (prompt.clone(), by_us));
        let t = turn(&turn_id);
        self.emit(rig, |position| ObserverEvent::TurnStarted { session: session(), turn: t.clone(), position });
        let prompt_hash = prompt::prompt_hash(&prompt);
        self.emit(rig, |position| ObserverEvent::UserMessage { session: session(), turn: Some(t), prompt_hash, position });
        self.running = Some((turn_id, 1));
    }

    fn snapshot(&self) -> ObserverSnapshot {
        let mut snapshot = idle_snapshot("inc-1", 100);
        snapshot.position = self.position;
        snapshot.turn = match &self.running {
            Some((turn_id, _)) => TurnState::Busy { turn: Some(turn(turn_id)) },
            None => TurnState::Idle { last_completed: Some(turn(&self.last_completed)) },
        };
        snapshot
    }
}

fn prompt_for(id: usize, variant: u8) -> String {
    format!("prompt {id} variant {variant}")
}

fn run(steps: Vec<Step>) {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let mut provider = Provider { position: 1000, last_completed: "turn-0".to_string(), ..Provider::default() };
    let mut writes_per_id: BTreeMap<String, u32> = BTreeMap::new();
    let mut ours: BTreeMap<String, bool> = BTreeMap::new(); // prompt -> written by us
    let mut op_request: BTreeMap<OpId, String> = BTreeMap::new();
    // ADM-9 evidence: each call's request-id write count when it was made.
    let mut writes_at_call: BTreeMap<OpId, u32> = BTreeMap::new();
    let mut checked: std::collections::BTreeSet<OpId> = std::collections::BTreeSet::new();
    let mut humans = 0;
    for step in steps {
        rig.snapshots.insert(agent_id(ZOLA), Ok(provider.snapshot()));
        match step {
            Step::Admit { id, variant, return_final, send } => {
                let operation = if send { Operation::Send } else { Operation::Admit };
                let mode = if return_final { ReturnMode::ReturnFinal } else { ReturnMode::OneWay };
                let command = rig.command(operation, IDS[id], &prompt_for(id, variant), mode);
                op_request.insert(command.op, IDS[id].to_string());
                writes_at_call.insert(command.op, writes_per_id.get(IDS[id]).copied().unwrap_or(0));
                rig.submit(command);
            }
            Step::AckPersist { ok } => {
                if let Some((token, ops)) = rig.persists.pop_front() {
                    let result = if ok { Ok(()) } else { Err("injected".to_string()) };
                    rig.ack_persist(token, ops, result);
                }
            }
            Step::Deliver { outcome } => {
                let outcome = match outcome {
                    0 => DeliveryOutcome::Failed { bytes_written: 3, error: "EIO".to_string() },
                    1 => DeliveryOutcome::Refused { reason: "closed".to_string() },
                    _ => DeliveryOutcome::Complete,
                };
                deliver_front(&mut rig, &mut provider, &mut writes_per_id, &mut ours, outcome);
            }
            Step::Refresh => {
                if !rig.refreshes.is_empty() {
                    rig.refresh_next();
                }
            }
            Step::ProviderAdvance => provider.advance(&mut rig, &ours),
            Step::HumanTypes => {
                humans += 1;
                provider.queued.push(format!("human prompt {humans}"));
            }
            Step::Tick { ms } => rig.advance(ms),
            Step::Cancel { id } => {
                rig.input(Input::Cancel(CancelCommand { op: OpId(10_000 + humans), request_id: IDS[id].to_string() }))
            }
            Step::Crash => {
                rig.crash_and_recover();
                rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
                rig.input(Input::StartupComplete);
                rig.settle_resumes(&provider.log);
            }
        }
        check(&rig, &provider, &writes_per_id, &op_request);
        check_rejections_wrote_nothing(&rig, &writes_per_id, &op_request, &writes_at_call, &mut checked);
    }
    heal_and_check_liveness(&mut rig, &mut provider, &mut writes_per_id, &mut ours);
    check(&rig, &provider, &writes_per_id, &op_request);
}

/// Performs the oldest pending pane write with `outcome`, recording the ground truth: which
/// request id reached the pane, and the prompt the provider will see (even a partial write may
/// start a turn).
fn deliver_front(
    rig: &mut Rig,
    provider: &mut Provider,
    writes: &mut BTreeMap<String, u32>,
    ours: &mut BTreeMap<String, bool>,
    outcome: DeliveryOutcome,
) {
    let Some((_, _, bytes)) = rig.deliveries.front().cloned() else { return };
    let text = String::from_utf8_lossy(&bytes).to_string();
    let prompt = text.trim_start_matches("\u{15}\u{1b}[200~").trim_end_matches("\u{1b}[201~\r").to_string();
    let id = prompt.split(' ').nth(1).unwrap().parse::<usize>().unwrap();
    if !outcome.wrote_nothing() {
        *writes.entry(IDS[id].to_string()).or_default() += 1;
        ours.insert(prompt.clone(), true);
        provider.queued.push(prompt);
    }
    rig.deliver_next(outcome);
}

/// ADM-9: when a call's definitive rejection appears, its request id was written no more
/// times than when the call was made (a conflicting id may legitimately be written by the
/// other call, so conflicts are left out).
fn check_rejections_wrote_nothing(
    rig: &Rig,
    writes: &BTreeMap<String, u32>,
    op_request: &BTreeMap<OpId, String>,
    writes_at_call: &BTreeMap<OpId, u32>,
    checked: &mut std::collections::BTreeSet<OpId>,
) {
    for (op, receipts) in &rig.receipts {
        if !checked.insert(*op) {
            continue;
        }
        let (Some(id), Some(before)) = (op_request.get(op), writes_at_call.get(op)) else { continue };
        let receipt = &receipts[0];
        if receipt.classification.is_definitive_rejection() && receipt.reason.as_deref() != Some("request_id_conflict") {
            let now = writes.get(id).copied().unwrap_or(0);
            assert_eq!(now, *before, "ADM-9: {id} was rejected ({:?}) but written meanwhile", receipt.reason);
        }
    }
}

/// DESIGN liveness: with faults healed (every commit, write and refresh answered, the provider
/// finishing its turns, time passing), every request reaches a terminal state.
fn heal_and_check_liveness(rig: &mut Rig, provider: &mut Provider, writes: &mut BTreeMap<String, u32>, ours: &mut BTreeMap<String, bool>) {
    for _ in 0..400 {
        rig.snapshots.insert(agent_id(ZOLA), Ok(provider.snapshot()));
        while let Some((token, ops)) = rig.persists.pop_front() {
            rig.ack_persist(token, ops, Ok(()));
        }
        while !rig.deliveries.is_empty() {
            deliver_front(rig, provider, writes, ours, DeliveryOutcome::Complete);
        }
        while !rig.refreshes.is_empty() {
            rig.refresh_next();
        }
        rig.settle_resumes(&provider.log);
        provider.advance(rig, ours);
        rig.advance(1_000);
        let open = rig.engine.open_return_requests().count();
        if open == 0 && rig.engine.is_quiescent() && provider.running.is_none() && provider.queued.is_empty() {
            return;
        }
    }
    let open: Vec<_> = rig.engine.open_return_requests().map(|r| (r.request_id.to_string(), r.phase)).collect();
    panic!("liveness: requests never ended after faults healed: {open:?}");
}

impl Rig {
    /// Answers `ResumeObserver` the way the runtime does: attach, then replay after the cursor.
    fn settle_resumes(&mut self, log: &[ObserverEvent]) {
        let resumes = std::mem::take(&mut self.resumes);
        for (_, from) in resumes {
            self.observe(ObserverEvent::Attached { session: from.session.clone(), position: from.position });
            for event in log.iter().filter(|e| e.position().is_some_and(|p| p > from.position)) {
                self.observe(event.clone());
            }
        }
    }
}

fn check(rig: &Rig, provider: &Provider, writes: &BTreeMap<String, u32>, op_request: &BTreeMap<OpId, String>) {
    rig.engine.check_invariants();
    // IDEM-2 / IDEM-3: one request id never reaches the pane twice, across crashes.
    for (id, count) in writes {
        assert!(*count <= 1, "request {id} was written {count} times");
    }
    for (op, receipts) in &rig.receipts {
        assert_eq!(receipts.len(), 1, "one receipt per call");
        let receipt = &receipts[0];
        let Some(id) = op_request.get(op) else { continue };
        let written = writes.get(id).copied().unwrap_or(0);
        // ADM-9: a definitive rejection of a fresh (non-replayed) call wrote nothing for it.
        if receipt.classification.is_definitive_rejection() && receipt.reason.as_deref() != Some("request_id_conflict") {
            assert!(!receipt.prompt_written);
        }
        // ADM-15: accepted means the whole prompt and Enter were written exactly once.
        if receipt.classification == Classification::Accepted {
            assert_eq!(written, 1, "accepted {id} without exactly one write");
        }
    }
    // RF-5 / TERM-2: each request ends once; published sequences strictly increase.
    let mut seen = std::collections::BTreeSet::new();
    let mut last = 0;
    for event in &rig.published {
        assert!(seen.insert(event.request_id.clone()), "request ended twice");
        assert!(event.terminal_event_sequence > last);
        last = event.terminal_event_sequence;
        // CORR-6 / CORR-7: `completed` carries the final of the turn our own prompt opened.
        if event.state == TerminalState::Completed {
            let turn_id = event.provider_turn_id.as_ref().unwrap().0.clone();
            let (first_prompt, by_us) = provider.first_prompt[&turn_id].clone();
            assert!(by_us, "completed from a turn a human opened");
            let id_index = first_prompt.split(' ').nth(1).unwrap().parse::<usize>().unwrap();
            assert_eq!(IDS[id_index], event.request_id.as_str(), "completed from another request's turn");
            assert_eq!(event.final_message.as_deref(), Some(format!("final-of-{turn_id}").as_str()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]
    /// ADM-9, ADM-15, IDEM-2, IDEM-3, RF-5, TERM-2, CORR-6, CORR-7, REC-1, REC-2 under random
    /// interleavings with write faults, commit failures and crashes.
    #[test]
    fn engine_never_misclassifies(steps in prop::collection::vec(step(), 1..80)) {
        run(steps);
    }
}
