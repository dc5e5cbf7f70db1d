//! One seed: a fault phase (callers, humans, the provider and faults interleaved by madsim's
//! seeded scheduler), then a quiet phase with every fault healed in which every request must
//! reach a terminal state (liveness), then the end-of-run checks.

use crate::mutant::Mutant;
use crate::oracle::{CallInput, SubmitCallInput, Violation};
use crate::ports::start_daemon;
use crate::world::{Counters, Shared, World};
use madsim::rand::{thread_rng, Rng};
use madsim::runtime::{Handle, NodeHandle};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use wakterm_engine::{AdmitCommand, Classification, OpId, Operation, PasteMode, Receipt, ReturnMode, SubmitCommand, SubmitReceipt};
use wakterm_runtime::driver::{now_ms, DriverMsg};

/// Simulated length of the fault phase.
pub const FAULT_PHASE_MS: u64 = 30_000;
/// Liveness bound: after faults stop, everything must be terminal within this.
pub const QUIET_PHASE_MS: u64 = 120_000;

pub struct Outcome {
    pub trace_hash: u64,
    pub trace: Vec<String>,
    pub violations: Vec<Violation>,
    pub counters: Counters,
    pub settle_ms: u64,
}

fn ms(lo: u64, hi: u64) -> Duration {
    Duration::from_millis(thread_rng().gen_range(lo..hi.max(lo + 1)))
}

#[derive(Clone, Copy, Debug)]
struct Mode {
    operation: Operation,
    return_final: bool,
    raw: bool,
    timeout_ms: u64,
    /// ADM-18: a one-way send that must not steer a running turn.
    no_steer: bool,
}

fn draw_mode() -> Mode {
    let mut rng = thread_rng();
    let roll = rng.gen_range(0..100);
    let (operation, return_final, raw) = match roll {
        0..=49 => (Operation::Admit, true, false),
        50..=64 => (Operation::Admit, false, false),
        65..=79 => (Operation::Send, true, false),
        80..=91 => (Operation::Send, false, false),
        92..=97 => (Operation::Send, false, true),
        _ => (Operation::Send, true, true),
    };
    let timeout_ms = if return_final && rng.gen_bool(0.3) { rng.gen_range(2_000..20_000) } else { 0 };
    let no_steer = operation == Operation::Send && !return_final && rng.gen_bool(0.5);
    Mode { operation, return_final, raw, timeout_ms, no_steer }
}

fn request_id(n: u64) -> String {
    format!("fe57dc90-994e-4e73-b09c-{n:012x}")
}

fn whitespace() -> &'static str {
    let mut rng = thread_rng();
    if rng.gen_bool(0.7) {
        ""
    } else {
        [" ", "\n", "  \t", "\t "][rng.gen_range(0..4)]
    }
}

/// EV-8: `agent catalog` answers once the effects' settled mark reaches what the engine has
/// settled (published or abandoned). Between the driver's steps the two are equal: a mark
/// behind the engine's would hold the catalog at `events_not_durable` for nothing.
async fn catalog_probe(world: Shared) {
    loop {
        madsim::time::sleep(ms(1_000, 4_000)).await;
        let Some(inbox) = world.lock().unwrap().inbox.clone() else { continue };
        let probe = world.clone();
        let _ = wakterm_runtime::driver::ask(&inbox, move |engine| {
            let mut w = probe.lock().unwrap();
            let (engine_mark, effects_mark) = (engine.events_published_through(), w.events_settled_through);
            if effects_mark < engine_mark {
                let m = format!("the engine settled events through {engine_mark}, the catalog's mark is {effects_mark}: it would answer events_not_durable");
                w.oracle.catalog_behind(m);
            }
        })
        .await;
    }
}

async fn ask_engine(world: &Shared, f: fn(&wakterm_engine::Engine) -> Value) -> Option<Value> {
    let inbox = world.lock().unwrap().inbox.clone()?;
    wakterm_runtime::driver::ask(&inbox, f).await
}

fn engine_status(engine: &wakterm_engine::Engine) -> Value {
    engine.check_invariants();
    let open: Vec<String> = engine.open_return_requests().map(|r| format!("{} {}", r.request_id, r.phase.as_str())).collect();
    // MON-3, ADM-16: the agents the catalog says run a turn (`busy`, `turn_active`) by the
    // screen alone (a view busy in no turn the rollout names).
    let by_screen = |id: &wakterm_engine::AgentId| {
        engine.agent(id).and_then(|a| a.view.as_ref()).is_some_and(|v| v.turn == wakterm_engine::TurnState::Busy { turn: None })
    };
    let turn_active: Vec<String> = engine
        .agent_ids()
        .filter(|id| by_screen(id) && engine.catalog_view(id).and_then(|v| v.return_final_blocker).is_some_and(|b| b.reason == "turn_active"))
        .map(|id| id.to_string())
        .collect();
    json!({"open": open, "quiescent": engine.is_quiescent(), "events_through": engine.events_through(), "finished_in_memory": engine.finished_in_memory(), "submissions": engine.submissions_in_flight(), "turn_active": turn_active})
}

// ----- SUB-*: `session action=submit` callers -----

fn submission_id(n: u64) -> String {
    let id = format!("5b0b7e11-aa4e-4c3d-9f0a-{n:012x}");
    // The runtime makes it; any case is a UUID.
    if thread_rng().gen_bool(0.1) {
        id.to_ascii_uppercase()
    } else {
        id
    }
}

/// A command for a submit: mostly prose or a slash command (unique, so the pane's bytes name
/// their submission), sometimes text INP-1 refuses.
fn submit_text(n: u64) -> String {
    let mut rng = thread_rng();
    const WORDS: &[&str] = &["fix", "the", "flaky", "test", "explain", "diff", "run", "lint", "über", "naïve", "日本"];
    match rng.gen_range(0..100) {
        0..=5 => ["", "  \n\t ", "esc \u{1b}[201~ inside", "early\rcr", "del \u{7f}"][rng.gen_range(0..5)].to_string(),
        6..=10 => "/clear".to_string(),
        11..=17 => format!("/review s{n}"),
        _ => {
            let words: Vec<&str> = (0..rng.gen_range(1..8)).map(|_| WORDS[rng.gen_range(0..WORDS.len())]).collect();
            let sep = if rng.gen_bool(0.1) { "\n" } else { " " };
            // Every seventh reads like a numbered option or asks `(y/n)` on a second line (a
            // screen adapter may read such a draft as a question, SUB-4); taken from `n`, so the
            // draws of a seed are as before.
            let (head, tail) = match n % 14 {
                0 => ("1. ", ""),
                7 => ("", "\nok (y/n)"),
                _ => ("", ""),
            };
            format!("{}{head}{}{sep}#s{n}{tail}{}", whitespace(), words.join(" "), whitespace())
        }
    }
}

/// `timeout_ms` as callers send it: absent, in range, or out of range either way.
fn submit_timeout() -> Option<u64> {
    let mut rng = thread_rng();
    match rng.gen_range(0..10) {
        0..=2 => None,
        3..=6 => Some(rng.gen_range(250..=10_000)),
        7 => Some(rng.gen_range(0..250)),
        8 => Some(rng.gen_range(10_001..60_000)),
        _ => Some([0, 1, 249, 10_001, u64::MAX][rng.gen_range(0..5)]),
    }
}

fn draw_submit(world: &Shared, n: u64, agent: usize, group: Option<u64>) -> SubmitCallInput {
    let mut w = world.lock().unwrap();
    let (target, exact_agent_id) = match thread_rng().gen_range(0..20) {
        0 => ("nobody".to_string(), false),
        1..=11 => (w.agents[agent].name.clone(), false),
        12..=15 => (w.agents[agent].agent_id.to_string(), false),
        _ => (w.agents[agent].agent_id.to_string(), true),
    };
    let submission_id = submission_id(n);
    let mut text = submit_text(n);
    if text == "/clear" && w.clear_in_flight.is_some() {
        // One bare `/clear` unanswered at a time, so a split write's bytes name their
        // submission (seed 1800040936: a second one, refused busy, took the first one's write).
        text = format!("/clear #s{n}");
    } else if text == "/clear" {
        w.clear_in_flight = Some(submission_id.to_ascii_lowercase());
    }
    SubmitCallInput { agent, submission_id, target, exact_agent_id, text, timeout_ms: submit_timeout(), group }
}

/// Sends these submit calls in one instant (back to back in the driver's inbox) and checks
/// each receipt. A submit is not idempotent (SUB-6): a call the daemon died under is not
/// repeated.
async fn submit_calls(world: Shared, calls: Vec<SubmitCallInput>) {
    let inbox = loop {
        if let Some(inbox) = world.lock().unwrap().inbox.clone() {
            break inbox;
        }
        madsim::time::sleep(Duration::from_millis(100)).await;
    };
    let mut waits = Vec::new();
    {
        let mut w = world.lock().unwrap();
        for call in calls {
            w.oracle.on_submit_call(&call, call.text.len() + 14);
            w.log(format!("submit {} a{} target={:?} timeout={:?} text={:?}", call.submission_id, call.agent, call.target, call.timeout_ms, call.text));
            let command = SubmitCommand {
                op: OpId(0),
                submission_id: call.submission_id.clone(),
                target: call.target.clone(),
                exact_agent_id: call.exact_agent_id,
                text: call.text.clone(),
                timeout_ms: call.timeout_ms,
            };
            let (reply, answer) = oneshot::channel();
            if inbox.try_send(DriverMsg::Submit { command, reply }).is_err() {
                w.log(format!("submit {}: the daemon is gone", call.submission_id));
                w.call_ended(&call);
                continue;
            }
            let started = (now_ms(), w.jumped_ms);
            waits.push(madsim::task::spawn(await_submit(world.clone(), call, answer, started)));
        }
    }
    for wait in waits {
        let _ = wait.await;
    }
}

async fn await_submit(world: Shared, call: SubmitCallInput, answer: oneshot::Receiver<SubmitReceipt>, started: (u64, u64)) {
    let receipt = answer.await;
    let mut w = world.lock().unwrap();
    w.call_ended(&call);
    let Ok(receipt) = receipt else {
        w.log(format!("submit {} got no answer: the daemon died", call.submission_id));
        return;
    };
    let elapsed = (now_ms() - started.0).saturating_sub(w.jumped_ms - started.1);
    let wait = wakterm_engine::submit::clamp_timeout_ms(call.timeout_ms);
    let bound = wakterm_engine::limits::REFRESH_TIMEOUT_MS
        + wakterm_engine::submit::SPLIT_WRITE_TIMEOUT_MS
        + wait
        + wakterm_engine::submit::WATCH_SLACK_MS
        + 1_000;
    w.log(format!(
        "submit receipt {} {:?} {:?} {:?} write={:?} retry_safe={} after {elapsed} ms",
        call.submission_id, receipt.status, receipt.classification, receipt.reason, receipt.write_state, receipt.retry_safe
    ));
    let key = format!("submit:{:?}/{}", receipt.status, receipt.reason.as_deref().unwrap_or("-"));
    *w.counters.receipts.entry(key).or_default() += 1;
    w.oracle.on_submit_receipt(&call, &receipt, started.0, elapsed, bound);
}

/// A raw `session action=input` from elsewhere lands around a submit (it takes the pane's
/// write lock like every holder writer): a Ctrl-U, or a key and a Ctrl-U.
fn foreign_writer(world: &Shared, agent: usize) {
    let w = world.lock().unwrap();
    if !w.fault_roll(w.plan.foreign_write) {
        return;
    }
    let lock = w.agents[agent].pane.lock.clone();
    let world = world.clone();
    w.holder.as_ref().expect("the holders' node runs").spawn(async move {
        madsim::time::sleep(ms(0, 700)).await;
        let _guard = lock.lock_owned().await;
        let mut w = world.lock().unwrap();
        let bytes: &[u8] = if thread_rng().gen_bool(0.5) { b"\x15" } else { b"y\x15" };
        w.counters.fault("submit.foreign_write");
        w.log(format!("a{agent} foreign raw write {bytes:?}"));
        w.pane_write(agent, "foreign", bytes, None, true);
    });
}

/// SUB-1: one submit, two submits in one instant, or a submit racing an `agent send`.
fn submit_scenario(world: &Shared, n: u64, callers: &mut Vec<madsim::task::JoinHandle<()>>) {
    let agent = if thread_rng().gen_bool(0.9) { 0 } else { 1 };
    match thread_rng().gen_range(0..100) {
        0..=59 => {
            let call = draw_submit(world, n, agent, None);
            callers.push(madsim::task::spawn(submit_calls(world.clone(), vec![call])));
        }
        60..=79 => {
            world.lock().unwrap().counters.fault("caller.submit_pair");
            let first = draw_submit(world, n, agent, Some(n));
            let mut second = draw_submit(world, n + 0x1_0000_0000, agent, Some(n));
            if second.text == first.text {
                second.text = format!("{} #s{}", second.text, n + 0x1_0000_0000); // one `/clear` per instant
            }
            let calls = vec![first, second];
            callers.push(madsim::task::spawn(submit_calls(world.clone(), calls)));
        }
        _ => {
            let call = draw_submit(world, n, agent, None);
            let prompt = format!("raced task {n} for a{agent}");
            let admission = CallInput { agent, request_id: request_id(0x5000_0000 + n), prompt: prompt.clone(), return_final: false };
            let return_final = thread_rng().gen_bool(0.3);
            let mode = Mode { operation: Operation::Send, return_final, raw: false, timeout_ms: 0, no_steer: false };
            {
                let mut w = world.lock().unwrap();
                w.counters.fault("caller.submit_races_admission");
                w.oracle.note_prompt(&admission.request_id, &prompt);
                w.counters.requests += 1;
            }
            // Half the time the send comes while the submit's prompt may sit unread (written,
            // its turn not started, or queued behind another): ADM-13 writes it whatever the
            // wait, and it joins the wait (`AgentEntry::awaiting_prompts`; exploration seed
            // 82398000 found a send's record ending it).
            let late = thread_rng().gen_bool(0.5).then(|| ms(50, 1_500));
            let raced = world.clone();
            callers.push(madsim::task::spawn(async move {
                if let Some(late) = late {
                    raced.lock().unwrap().counters.fault("caller.send_during_submit_wait");
                    madsim::time::sleep(late).await;
                }
                let _ = admit_once(&raced, &admission, mode).await;
            }));
            callers.push(madsim::task::spawn(submit_calls(world.clone(), vec![call])));
        }
    }
    foreign_writer(world, agent);
}

/// A human's keystrokes reach the pane through its holder, after any split write holding the
/// pane's write lock.
fn at_keyboard(w: &World, world: &Shared, a: usize, keys: impl FnOnce(&mut World) + Send + 'static) {
    let lock = w.agents[a].pane.lock.clone();
    let world = world.clone();
    w.holder.as_ref().expect("the holders' node runs").spawn(async move {
        let _guard = lock.lock_owned().await;
        keys(&mut world.lock().unwrap());
    });
}

/// A human's keys (`text`, then Enter when asked), typed `after` from now under the pane's write
/// lock. `terminal.keys_in_flight`: the holder counts the write, then its bytes land 1-30 ms
/// later, the lock held in between (as the holder's `write_starting_by`); a look must not take
/// that count for keys its screen shows (ADM-4).
pub(crate) fn type_keys(w: &World, world: &Shared, a: usize, (text, enter): (String, bool), after: Duration) {
    let lock = w.agents[a].pane.lock.clone();
    let world = world.clone();
    w.holder.as_ref().expect("the holders' node runs").spawn(async move {
        madsim::time::sleep(after).await;
        let _guard = lock.lock_owned().await;
        let in_flight = {
            let mut w = world.lock().unwrap();
            if w.agents[a].process.is_none() {
                return; // the holder refuses a write to a dead child
            }
            let in_flight = w.fault_roll(w.plan.keys_in_flight);
            if in_flight {
                w.counters.fault("terminal.keys_in_flight");
                w.agents[a].pane.writes += 1;
                w.log(format!("a{a} the holder counts a human's write of {text:?}; its bytes land later"));
            }
            in_flight
        };
        if in_flight {
            madsim::time::sleep(ms(1, 30)).await;
        }
        world.lock().unwrap().human_keys(a, &text, enter, in_flight);
    });
}

/// `app_server.stalled_past_turn_start_timeout`: in one seed in sixteen, when into the fault
/// phase the managed app-server stalls. Taken from the seed's number, not its random stream,
/// so the other seeds' worlds are as before the class (a draw shifted every seed's world).
fn stall_offset_ms(seed: u64) -> Option<u64> {
    let mixed = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (mixed >> 58 < 4).then(|| 500 + (mixed >> 20) % 7_500) // 4 of 64 top-bit patterns: 6.25 %
}

/// CORR-15, ADM-5 (managed), fault class `app_server.stalled_past_turn_start_timeout`: the
/// app-server reads nothing on its stdin for longer than RF-8's turn-start timeout (a wedged
/// reader: a turn already running still ends, unlike under a hostile run's SIGSTOP, which
/// stopped the process whole). A return-final request's line sits unread,
/// RF-8 ends it, the agent is free again, and a second request of the same text is written
/// behind it. When the app-server reads on, the first line opens a turn and the second is
/// folded into it (a steer): the second request must never take that turn, whose final
/// answers the first line (CORR-15: the reply to its own `turn/start` names the turn).
fn stall_scenario(world: &Shared, callers: &mut Vec<madsim::task::JoinHandle<()>>) {
    let mut w = world.lock().unwrap();
    let Some(a) = (0..w.agents.len()).find(|&a| w.is_managed(a)) else { return };
    if w.agents[a].process.is_none() {
        return;
    }
    let now = now_ms();
    let turn_start_timeout = wakterm_engine::limits::TURN_START_TIMEOUT_MS;
    let until = now + turn_start_timeout + thread_rng().gen_range(10_000..18_000);
    w.app(a).stalled_until = Some(until);
    w.counters.fault("app_server.stalled_past_turn_start_timeout");
    w.log(format!("a{a} app-server stalls: it reads nothing on its input for {} ms", until - now));
    let text = format!("stalled task for a{a}");
    let second_after = turn_start_timeout + thread_rng().gen_range(3_000..8_000);
    for (k, delay_ms) in [(0u64, 300), (1, second_after)] {
        let call = CallInput { agent: a, request_id: request_id(0x7000_0000 + k), prompt: text.clone(), return_final: true };
        w.oracle.note_prompt(&call.request_id, &text);
        w.counters.requests += 1;
        let mode = Mode { operation: Operation::Admit, return_final: true, raw: false, timeout_ms: 0, no_steer: false };
        let world = world.clone();
        callers.push(madsim::task::spawn(async move {
            madsim::time::sleep(Duration::from_millis(delay_ms)).await;
            // Refused (busy, no observer view) while the agent cannot take it: asked again, as
            // an orchestrator polling the catalog would (a definitive refusal: the same id is
            // a new attempt, IDEM-6).
            for _ in 0..20 {
                let receipt = admit_once(&world, &call, mode).await;
                if receipt.is_none_or(|r| !(r.retry_safe && !r.prompt_written)) {
                    break;
                }
                madsim::time::sleep(Duration::from_millis(1_000)).await;
            }
        }));
    }
}

/// `caller.after_call_bound`: an orchestrator that comes back to an agent whose write was lost
/// with a new prompt (a plain admission), at the moment the world planned.
fn spawn_late_callers(world: &Shared, callers: &mut Vec<madsim::task::JoinHandle<()>>) {
    let now = now_ms();
    let due: Vec<(u64, usize)> = {
        let mut w = world.lock().unwrap();
        let (due, later) = w.late_callers.drain(..).partition(|(at, _)| *at <= now);
        w.late_callers = later;
        due
    };
    for (at, agent) in due {
        let call = {
            let mut w = world.lock().unwrap();
            w.counters.requests += 1;
            let n = w.counters.requests;
            let prompt = format!("late task {n} at {at} for a{agent}");
            let call = CallInput { agent, request_id: request_id(0x6000_0000 + n), prompt: prompt.clone(), return_final: false };
            w.log(format!("late caller {} for a{agent}", call.request_id));
            w.oracle.note_prompt(&call.request_id, &prompt);
            call
        };
        let mode = Mode { operation: Operation::Admit, return_final: false, raw: false, timeout_ms: 0, no_steer: false };
        callers.push(madsim::task::spawn(caller(world.clone(), call, mode)));
    }
}

/// One caller: submits through `DriverMsg::Admit` as the daemon's server does, retries the
/// same id when the daemon died before answering, and sometimes repeats or changes its input.
async fn caller(world: Shared, call: CallInput, mode: Mode) {
    let mut call = call;
    let mut repeats = 0;
    let mut kept_prompt: Option<String> = None;
    loop {
        let receipt = admit_once(&world, &call, mode).await;
        if let Some(prompt) = kept_prompt.take() {
            call.prompt = prompt; // an invalid replay is one call; the caller's input stays
        }
        let Some(receipt) = receipt else { break };
        let (faults_on, mutant) = {
            let w = world.lock().unwrap();
            (w.faults_on, w.mutant)
        };
        let _ = mutant;
        if mode.return_final && receipt.classification == Classification::Accepted && thread_rng().gen_bool(0.15) {
            madsim::time::sleep(ms(0, 3_000)).await;
            cancel(&world, &call.request_id).await;
        }
        if !faults_on || repeats >= 2 {
            break;
        }
        repeats += 1;
        let roll = thread_rng().gen_range(0..100);
        if roll < 25 {
            world.lock().unwrap().counters.fault("caller.retry_same_id");
        } else if roll < 45 {
            let mut w = world.lock().unwrap();
            w.counters.fault("caller.changed_input");
            let roll = thread_rng().gen_range(0..10);
            call.prompt = if roll < 2 {
                // IDEM-7: a replay mangled into input the engine refuses (an empty prompt, an
                // ESC): its rejection must not call the (maybe written) id retry-safe.
                w.counters.fault("caller.invalid_replay");
                let invalid = if roll == 0 { "   ".to_string() } else { format!("{}\u{1b}[201~", call.prompt) };
                kept_prompt = Some(std::mem::replace(&mut call.prompt, invalid.clone()));
                invalid
            } else if roll < 7 {
                format!("{} ", call.prompt) // only white space changed: a different input (IDEM-1)
            } else {
                let changed = format!("{} (v{repeats})", call.prompt.trim());
                w.oracle.note_prompt(&call.request_id, &changed);
                changed
            };
        } else {
            break;
        }
        madsim::time::sleep(ms(50, 4_000)).await;
    }
    world.lock().unwrap().counters.requests += 0;
}

async fn admit_once(world: &Shared, call: &CallInput, mode: Mode) -> Option<Receipt> {
    loop {
        let inbox = loop {
            if let Some(inbox) = world.lock().unwrap().inbox.clone() {
                break inbox;
            }
            madsim::time::sleep(Duration::from_millis(100)).await;
        };
        let (command, writes_before, call_number) = {
            let mut w = world.lock().unwrap();
            let agent = &w.agents[call.agent];
            let incarnation = (mode.operation == Operation::Admit)
                .then(|| agent.observer.reported.map_or("inc-none".to_string(), |p| p.incarnation().0));
            let prompt = match w.mutant {
                Mutant::ReplayRewrittenInput => call.prompt.trim().to_string(), // the bug
                _ => call.prompt.clone(),
            };
            // IDEM-1: callers name the agent by name, by id, or by exact id, and may send a
            // return-final request through `send` or `admit`: one request either way.
            let (target, exact_agent_id) = match thread_rng().gen_range(0..10) {
                0..=5 => (agent.name.clone(), false),
                6..=7 => (agent.agent_id.to_string(), false),
                _ => (agent.agent_id.to_string(), true),
            };
            let flip = mode.return_final && thread_rng().gen_bool(0.3);
            let operation = match (flip, mode.operation) {
                (false, operation) => operation,
                (true, Operation::Send) => Operation::Admit,
                (true, Operation::Admit) => Operation::Send,
            };
            let incarnation = match operation {
                Operation::Admit => incarnation.or_else(|| agent.observer.reported.map(|p| p.incarnation().0)).or(Some("inc-none".to_string())),
                Operation::Send => None,
            };
            let request_id = match (w.mutant, exact_agent_id) {
                (Mutant::SpellingForksRequestId, true) => forked_id(&call.request_id), // the bug
                _ => call.request_id.clone(),
            };
            if exact_agent_id || target != agent.name || flip {
                w.counters.fault("caller.other_spelling");
            }
            // HIST-2: a socket client may claim it generated the id just now, retries of it
            // too; the engine must look it up anyway (trusting the flag wrote prompts twice).
            let generated_id = w.fault_roll(0.1);
            if generated_id {
                w.counters.fault("caller.claims_generated_id");
            }
            let command = AdmitCommand {
                op: OpId(0),
                operation,
                target,
                exact_agent_id,
                incarnation,
                request_id,
                prompt,
                paste_mode: if mode.raw { PasteMode::Raw } else { PasteMode::Bracketed },
                return_mode: if mode.return_final { ReturnMode::ReturnFinal } else { ReturnMode::OneWay },
                final_timeout_ms: mode.timeout_ms,
                generated_id,
                share_prompt: false,
                // MGD-7: drawn by the daemon per admission, as `admit_prompt` does.
                write_nonce: match w.mutant {
                    Mutant::WriteNonceNotDrawn => 0, // the bug: the field's default
                    _ => thread_rng().gen(),
                },
                no_steer: mode.no_steer && w.mutant != Mutant::NoSteerDropped,
            };
            if mode.no_steer {
                w.counters.fault("caller.no_steer_send");
                w.oracle.on_no_steer_call(&command.request_id);
            } else if operation == Operation::Send && !mode.return_final {
                w.oracle.on_steering_send(&command.request_id);
            }
            let writes_before = w.oracle.writes_of(&call.request_id);
            let call_number = w.oracle.on_call(&call.request_id, mode.timeout_ms);
            w.log(format!("call {} {:?} rf={} raw={} no_steer={} timeout={} a{} prompt={:?}", call.request_id, mode.operation, mode.return_final, mode.raw, mode.no_steer, mode.timeout_ms, call.agent, call.prompt));
            (command, writes_before, call_number)
        };
        let (reply, answer) = oneshot::channel();
        if inbox.send(DriverMsg::Admit { command, reply }).await.is_ok() {
            if let Ok(mut receipt) = answer.await {
                let mut w = world.lock().unwrap();
                if w.mutant == Mutant::JoinRefusalSaysUnwritten && receipt.reason.as_deref() == Some("too_many_joined_callers") {
                    receipt = plain_rejection(receipt); // the bug
                }
                if w.mutant == Mutant::LookupFailureSaysUnwritten && receipt.reason.as_deref() == Some("history_unreadable") {
                    receipt = plain_rejection(receipt); // the bug
                }
                if w.mutant == Mutant::ReplayFlagDropped {
                    receipt.replayed = false; // the bug
                }
                let class = format!("{:?}", receipt.classification);
                w.log(format!("receipt {} {class} {:?} written={} replayed={}", call.request_id, receipt.reason, receipt.prompt_written, receipt.replayed));
                *w.counters.receipts.entry(class).or_default() += 1;
                let agent = &w.agents[call.agent];
                let agent_then = crate::oracle::AgentThen { idle_since: agent.idle_since_ms, other_enter_ms: agent.pane.other_enter_ms, rollout_gone: agent.rollout_gone && agent.gone_writer == agent.process };
                w.oracle.on_receipt(call, &receipt, writes_before, call_number, agent_then);
                for note in std::mem::take(&mut w.oracle.notes) {
                    w.counters.fault(note);
                }
                return Some(receipt);
            }
        }
        {
            let mut w = world.lock().unwrap();
            w.log(format!("call {} got no answer: the daemon died", call.request_id));
            if w.faults_on && thread_rng().gen_bool(0.2) {
                return None; // the caller gives up; recovery must still end the request
            }
            w.counters.fault("caller.retry_same_id");
        }
        madsim::time::sleep(ms(100, 2_000)).await;
    }
}

/// The `SpellingForksRequestId` mutant: another request id for the same caller request.
fn forked_id(request_id: &str) -> String {
    let (head, last) = request_id.split_at(request_id.len() - 1);
    format!("{head}{}", if last == "f" { "e" } else { "f" })
}

/// The `JoinRefusalSaysUnwritten` and `LookupFailureSaysUnwritten` mutants' answer: a plain
/// rejection (nothing written, retry-safe) under the same reason.
fn plain_rejection(receipt: Receipt) -> Receipt {
    let context = wakterm_engine::receipt::ReceiptContext {
        request_id: receipt.request_id,
        agent_id: receipt.agent_id,
        incarnation: receipt.incarnation,
        operation: receipt.operation,
        return_mode: receipt.return_mode,
    };
    let reason = receipt.reason.unwrap_or_default();
    Receipt::rejection(Classification::InternalFailure, &reason, "refused", context)
}

/// A conversation with one agent (as `bench_suite`'s throughput phase drives it): a return-final
/// request, then, as soon as a watcher sees it end, the next one, while faults last. A refused
/// link (`busy`, `observer_failure`) is retried with the same id after a back-off. The engine
/// must let each link in once the previous turn is over: a link refused `awaiting_turn_start`
/// although the turn was observed is the oracle's `Stalled` (ADM-5, ADM-17).
async fn chain(world: Shared, agent: usize, first: u64, links: u64) {
    // The eager callers it spawned run to their end before it does: the quiet phase waits for
    // every caller, theirs included (a review: detached, one could admit after it).
    let mut eager = Vec::new();
    chain_links(&world, agent, (first, links), &mut eager).await;
    for caller in eager {
        let _ = caller.await;
    }
}

async fn chain_links(world: &Shared, agent: usize, (first, links): (u64, u64), eager: &mut Vec<madsim::task::JoinHandle<()>>) {
    let world = world.clone();
    for link in 0..links {
        let n = first + link * 0x1_0000;
        let operation = if thread_rng().gen_bool(0.5) { Operation::Admit } else { Operation::Send };
        let mode = Mode { operation, return_final: true, raw: false, timeout_ms: 0, no_steer: false };
        let prompt = format!("task {n} of a chain for a{agent}");
        let call = CallInput { agent, request_id: request_id(n), prompt, return_final: true };
        if !note_call_while_faults(&world, &call, (link > 0).then_some("caller.chain")) {
            return;
        }
        let Some(receipt) = admit_while_busy(&world, &call, mode, (8, (300, 1_500))).await else { return };
        if receipt.classification != Classification::Accepted {
            return;
        }
        let managed = world.lock().unwrap().is_managed(agent);
        if managed && operation == Operation::Admit && thread_rng().gen_bool(0.5) {
            eager.push(madsim::task::spawn(eager_next(world.clone(), agent, n)));
        }
        // A watcher waits for the request's terminal event.
        loop {
            madsim::time::sleep(ms(5, 60)).await;
            let w = world.lock().unwrap();
            if !w.faults_on {
                return;
            }
            if w.oracle.ended.contains_key(&call.request_id) {
                break;
            }
        }
    }
}

/// ADM-5 (`caller.eager_next`): an orchestrator that hands the agent its next prompt the
/// moment the last one's receipt came back, retrying while the agent is busy: a retry meets
/// the agent between the app-server's acceptance of the last line and its `turn/started`
/// (`app_server.slow_turn_start`), when the engine must still hold it
/// (`AgentEntry::awaiting_accepted`; the oracle's `check_not_into_accepted_turn`).
async fn eager_next(world: Shared, agent: usize, after: u64) {
    let n = after + 0x8000;
    let mode = Mode { operation: Operation::Admit, return_final: false, raw: false, timeout_ms: 0, no_steer: false };
    let prompt = format!("eager after task {after} for a{agent}");
    let call = CallInput { agent, request_id: request_id(n), prompt, return_final: false };
    if note_call_while_faults(&world, &call, Some("caller.eager_next")) {
        let _ = admit_while_busy(&world, &call, mode, (12, (50, 400))).await;
    }
}

/// A new request `call` of a caller that acts only while faults run: false once they stopped;
/// else its prompt is known to the oracle, it is counted, and so is its fault class, if any.
fn note_call_while_faults(world: &Shared, call: &CallInput, fault: Option<&'static str>) -> bool {
    let mut w = world.lock().unwrap();
    if !w.faults_on {
        return false;
    }
    w.oracle.note_prompt(&call.request_id, &call.prompt);
    w.counters.requests += 1;
    if let Some(fault) = fault {
        w.counters.fault(fault);
    }
    true
}

/// A caller that calls again with the same id while the agent is busy (or its observer
/// failed) and faults still run, after a back-off drawn from `backoff_ms`, at most `attempts`
/// calls: the last receipt (None: the daemon died under a call and the faults stopped).
async fn admit_while_busy(world: &Shared, call: &CallInput, mode: Mode, (attempts, backoff_ms): (u32, (u64, u64))) -> Option<Receipt> {
    let mut last = None;
    for _attempt in 0..attempts {
        let receipt = admit_once(world, call, mode).await?;
        let busy = matches!(receipt.classification, Classification::Busy | Classification::ObserverFailure);
        if !busy || !world.lock().unwrap().faults_on {
            return Some(receipt);
        }
        last = Some(receipt);
        madsim::time::sleep(ms(backoff_ms.0, backoff_ms.1)).await;
    }
    last
}

/// IDEM-5, IDEM-7: more callers than `MAX_JOINED_CALLERS` send one id and input at once; each
/// calls once (retrying only when the daemon died, as every caller does).
fn join_burst(world: &Shared, call: &CallInput, mode: Mode, callers: &mut Vec<madsim::task::JoinHandle<()>>) {
    let extra = thread_rng().gen_range(1..8);
    world.lock().unwrap().counters.fault("caller.join_burst");
    for _ in 0..wakterm_engine::limits::MAX_JOINED_CALLERS + extra {
        let (world, call) = (world.clone(), call.clone());
        callers.push(madsim::task::spawn(async move {
            let _ = admit_once(&world, &call, mode).await;
        }));
    }
}

async fn cancel(world: &Shared, request_id: &str) {
    let Some(inbox) = world.lock().unwrap().inbox.clone() else { return };
    let (reply, answer) = oneshot::channel();
    if inbox.send(DriverMsg::Cancel { request_id: request_id.to_string(), reply }).await.is_ok() {
        if let Ok(outcome) = answer.await {
            let mut w = world.lock().unwrap();
            w.counters.fault("caller.cancel");
            let outcome = serde_json::to_value(&outcome).ok().and_then(|v| v["outcome"].as_str().map(str::to_string)).unwrap_or_default();
            w.log(format!("cancel {request_id} -> {outcome}"));
            let end_stored = w.store.terminal_for(request_id).is_some();
            w.oracle.check_cancel_answer(request_id, &outcome, end_stored);
        }
    }
}

async fn provider_loop(world: Shared) {
    loop {
        madsim::time::sleep(ms(20, 150)).await;
        let mut w = world.lock().unwrap();
        for a in 0..w.agents.len() {
            w.provider_tick(a);
        }
    }
}

/// Kills the daemon when a crash point or the supervisor asks, then restarts it.
async fn crash_loop(world: Shared, mut requests: mpsc::UnboundedReceiver<&'static str>, daemon: Arc<Mutex<NodeHandle>>) {
    while let Some(reason) = requests.recv().await {
        let id = daemon.lock().unwrap().id();
        Handle::current().kill(id);
        {
            let mut w = world.lock().unwrap();
            w.inbox = None;
            w.wake = None;
            w.counters.fault(reason);
            w.log(format!("CRASH ({reason}): the daemon node is killed"));
            w.while_down(); // OBS: the rollout or the process may change before the restart
        }
        madsim::time::sleep(ms(50, 2_500)).await;
        let node = start_daemon(&world);
        *daemon.lock().unwrap() = node;
    }
}

/// MGD-*: what a human or a fault does to the managed agent for this roll (true when the roll
/// is the managed agent's own; the rest is shared with the PTY agent). There is no composer: a
/// "human" is a raw `session action=input` typing a whole `turn/start` line into the pane.
fn managed_act(w: &mut World, world: &Shared, a: usize, roll: u32, humans: &mut u64) -> bool {
    match roll {
        0..=21 => {
            *humans += 1;
            let text = format!("human {humans}");
            w.log(format!("a{a} raw input types a turn/start {text:?}"));
            at_keyboard(w, world, a, move |w| {
                let thread = crate::app_server::thread_id(a);
                let line = crate::app_server::raw_turn_start(&format!("mcp-input-{text}"), &thread, &text);
                w.pane_accept(a, "human", line.len(), true);
                w.app_stdin(a, &line, None);
            });
        }
        22..=42 => {} // no composer, no question
        50..=55 => match thread_rng().gen_range(0..100) {
            0..=29 => w.app_stream_dropped(a, thread_rng().gen_range(200..3_000)),
            30..=54 => w.app_holder_dies(a, thread_rng().gen_range(300..3_000)),
            55..=74 => at_keyboard(w, world, a, move |w| w.app_foreign_thread(a)),
            _ => {
                if w.agents[a].running.is_some() {
                    if thread_rng().gen_bool(0.5) {
                        w.hold_mark_back(a);
                    }
                    w.log(format!("a{a} the app-server is killed mid-turn"));
                    w.kill_process(a, thread_rng().gen_range(300..3_000));
                }
            }
        },
        _ => return false,
    }
    true
}

/// CORR-6, ADM-5, ADM-13, CORR-15 (`caller.same_text_request`): two prompts of ours of one
/// text. A caller sends, under a new request id, the text of an earlier call to the same agent
/// (most often the latest: it may still wait for its turn, a send joining its wait). Nothing
/// in a PTY agent's records tells the two apart but where they lie; the oracle knows each
/// write by its request. Returns the text to reuse; None when no caller does this.
fn same_text_request(world: &Shared, agent: usize, sent: &[(usize, String)]) -> Option<String> {
    let earlier: Vec<&String> = sent.iter().filter(|(a, _)| *a == agent).map(|(_, text)| text).collect();
    let mut w = world.lock().unwrap();
    if earlier.is_empty() || !w.fault_roll(0.12) {
        return None;
    }
    w.counters.fault("caller.same_text_request");
    let latest = earlier.len() - 1;
    let i = if thread_rng().gen_bool(0.7) { latest } else { thread_rng().gen_range(0..=latest) };
    Some(earlier[i].clone())
}

/// CORR-5, CORR-6 (`caller.same_text_human`): two prompts of one text. A human types the
/// call's prompt into its PTY agent and presses Enter a moment before the call, so a turn
/// carrying the call's hash, not opened by it, may lie past its armed cursor (the view not
/// yet read to it, or the provider's record not yet written). Returns how long the call
/// waits; None when no human does this.
fn same_text_human(world: &Shared, call: &CallInput) -> Option<Duration> {
    let mut w = world.lock().unwrap();
    if w.is_managed(call.agent) || !w.fault_roll(0.15) {
        return None;
    }
    w.counters.fault("caller.same_text_human");
    let text = call.prompt.trim().to_string();
    w.log(format!("a{} human types the text of {} ({text:?}) and presses Enter", call.agent, call.request_id));
    type_keys(&w, world, call.agent, (text, true), Duration::ZERO);
    // 30 % of the time within 50 ms of the human's typing (its keys may wait for the pane's
    // lock, and land 1-30 ms after the holder counts them): the real Codex records a turn
    // some 25 ms after it takes the Enter (ADM-19).
    Some(if thread_rng().gen_bool(0.3) { ms(0, 50) } else { ms(0, 2_500) })
}

/// A human at the keyboard, or a fault, by the seed.
fn act(world: &Shared, humans: &mut u64) {
    let mut w = world.lock().unwrap();
    let a = thread_rng().gen_range(0..w.agents.len());
    let roll = thread_rng().gen_range(0..100);
    if w.agents[a].app.as_ref().is_some_and(|app| app.stalled_until.is_some_and(|until| now_ms() < until)) {
        return; // `app_server.stalled_past_turn_start_timeout`: the stalled process lives on, untouched
    }
    if w.is_managed(a) && managed_act(&mut w, world, a, roll, humans) {
        return;
    }
    match roll {
        0..=21 => {
            *humans += 1;
            let text = format!("human {humans}");
            w.log(format!("a{a} human types {text:?} and presses Enter"));
            type_keys(&w, world, a, (text, true), Duration::ZERO);
        }
        22..=29 => {
            *humans += 1;
            let text = format!("draft {humans}");
            w.counters.fault("provider.human_draft");
            w.log(format!("a{a} human leaves a draft {text:?}"));
            type_keys(&w, world, a, (text, false), Duration::ZERO);
        }
        30..=39 => {
            w.log(format!("a{a} human clears the composer"));
            at_keyboard(&w, world, a, move |w| {
                w.agents[a].question = false;
                w.pane_write(a, "human", b"\x15", None, true);
            });
        }
        40..=42 => {
            if w.agents[a].process.is_some() {
                w.agents[a].question = true;
                w.pane_moved(a, 120, true);
                w.counters.fault("provider.question");
                w.log(format!("a{a} asks an interactive question"));
            }
        }
        43..=46 => {
            w.counters.fault("process.exit");
            w.kill_process(a, thread_rng().gen_range(300..4_000));
        }
        47..=49 if !w.split_in_progress(a) => {
            w.counters.fault("process.replaced");
            let reuse = thread_rng().gen_bool(0.4);
            w.spawn_process(a, reuse);
        }
        50..=55 => {
            let kind = ["observer.file_lost", "observer.truncated", "observer.replaced", "observer.rewritten"][thread_rng().gen_range(0..4)];
            let lost_ms = if kind == "observer.file_lost" { thread_rng().gen_range(800..4_000) } else { thread_rng().gen_range(0..1_500) };
            if thread_rng().gen_bool(0.2) {
                w.make_record_unreadable(a, thread_rng().gen_range(300..3_000));
            } else {
                w.break_record(a, kind, lost_ms);
            }
        }
        56..=59 => {
            if w.agents[a].lag_ms > 100 {
                w.agents[a].lag_ms = 20;
            } else if w.is_managed(a) && thread_rng().gen_bool(0.25) {
                // An app-server slow to read its input (a loaded machine): a `turn/start` line
                // sits unread for longer than RF-7's 10 s grace (found by a hostile run, not by
                // the simulator, whose app-server read within 6 s).
                w.agents[a].lag_ms = thread_rng().gen_range(10_000..40_000);
                w.counters.fault("app_server.slow_reader");
                let lag = w.agents[a].lag_ms;
                w.log(format!("a{a} app-server reads its input up to {lag} ms late"));
            } else {
                w.agents[a].lag_ms = thread_rng().gen_range(800..6_000);
                w.counters.fault("observer.delayed");
                let lag = w.agents[a].lag_ms;
                w.log(format!("a{a} observer delayed by up to {lag} ms"));
            }
        }
        60 if thread_rng().gen_bool(0.1) => {
            // HIST-4, TIME-2: a machine set right by NTP long after the daemon started (one
            // without a clock of its own): the wall clock jumps days ahead of engine time.
            let step: i64 = thread_rng().gen_range(86_400_000..3 * 86_400_000);
            w.wall_offset_ms += step;
            w.counters.fault("clock.wall_step_days");
            w.log(format!("wall clock steps {step} ms (days)"));
        }
        60 if thread_rng().gen_bool(0.5) => {
            // TIME-1: the wall clock is stepped (an NTP correction, a VM resume), either way.
            let step: i64 = if thread_rng().gen_bool(0.5) { thread_rng().gen_range(10_000..3_600_000) } else { -thread_rng().gen_range(10_000..3_600_000) };
            w.wall_offset_ms += step;
            w.counters.fault("clock.wall_step");
            w.log(format!("wall clock steps {step} ms"));
        }
        60..=61 => {
            let jump = Duration::from_millis(thread_rng().gen_range(1_000..25_000));
            w.counters.fault("clock.jump");
            w.log(format!("clock jumps {} ms", jump.as_millis()));
            w.jumped_ms += jump.as_millis() as u64;
            drop(w);
            madsim::time::advance(jump);
        }
        65..=66 => {
            // A loaded daemon (issue 10 measured a watcher p99 of 29 ms with 50 busy agents):
            // the monitor reads records late, so the view lags the file at a write.
            w.monitor_lag_ms = if w.monitor_lag_ms > 0 { 0 } else { thread_rng().gen_range(30..600) };
            if w.monitor_lag_ms > 0 {
                w.counters.fault("monitor.slow_wake");
            }
            let lag = w.monitor_lag_ms;
            w.log(format!("the monitor reads up to {lag} ms late"));
        }
        62..=64 => {
            if w.crashes < w.plan.max_crashes {
                if let Some(crash) = w.crash.clone() {
                    w.crashes += 1;
                    let _ = crash.send("crash.random");
                }
            }
        }
        _ => {}
    }
}

pub async fn run_seed(mutant: Mutant) -> Outcome {
    let world: Shared = Arc::new(Mutex::new(World::new(mutant)));
    {
        let mut w = world.lock().unwrap();
        let plan = format!("{:?}", w.plan);
        w.log(format!("fault plan {plan}"));
    }
    let (crash_tx, crash_rx) = mpsc::unbounded_channel();
    world.lock().unwrap().crash = Some(crash_tx);
    let holders = Handle::current().create_node().name("holders").build();
    world.lock().unwrap().holder = Some(holders);
    let node = start_daemon(&world);
    let daemon = Arc::new(Mutex::new(node));
    let crasher = madsim::task::spawn(crash_loop(world.clone(), crash_rx, daemon.clone()));
    let provider = madsim::task::spawn(provider_loop(world.clone()));
    let catalog = madsim::task::spawn(catalog_probe(world.clone()));
    let mut callers = Vec::new();
    let outcome = play(&world, &mut callers).await;
    // The outcome is final; what follows only frees this seed's memory.
    let mut tasks = callers;
    tasks.push(catalog);
    tasks.push(crasher);
    tasks.push(provider);
    teardown(&world, &daemon, tasks).await;
    outcome
}

/// Ends every task this seed started. madsim 0.2.34's `Runtime` has no `Drop` that cancels
/// pending tasks, and each task's future holds its own `TaskInfo`, whose waker holds the task:
/// a task still pending when `block_on` returns is never freed, with all it captured (the
/// world, the driver and its engine, channels). So abort the harness tasks, kill the daemon
/// node (its driver, store writer, observer tail and effect tasks), drop the world's senders,
/// and yield once: the executor drops every cancelled or killed task before `block_on` returns.
async fn teardown(world: &Shared, daemon: &Arc<Mutex<NodeHandle>>, tasks: Vec<madsim::task::JoinHandle<()>>) {
    for task in &tasks {
        task.abort();
    }
    let id = daemon.lock().unwrap().id();
    Handle::current().kill(id);
    {
        let mut w = world.lock().unwrap();
        if let Some(holders) = w.holder.take() {
            Handle::current().kill(holders.id());
        }
        w.inbox = None;
        w.wake = None;
        w.crash = None;
    }
    drop(tasks);
    YieldOnce(false).await;
}

struct YieldOnce(bool);

impl std::future::Future for YieldOnce {
    type Output = ();
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

async fn play(world: &Shared, callers: &mut Vec<madsim::task::JoinHandle<()>>) -> Outcome {
    let world = world.clone();
    let calls = thread_rng().gen_range(8..20u64);
    let submits = thread_rng().gen_range(2..9u64);
    let mut submitted = 0;
    let mut humans = 0;
    let start = now_ms();
    let mut issued = 0;
    let mut sent: Vec<(usize, String)> = Vec::new(); // (agent, prompt) of each plain call
    let mut stall_at = stall_offset_ms(Handle::current().seed()).map(|offset| start + offset);
    while now_ms() < start + FAULT_PHASE_MS {
        madsim::time::sleep(ms(20, 250)).await;
        if stall_at.is_some_and(|at| now_ms() >= at) {
            stall_at = None;
            stall_scenario(&world, callers);
        }
        if issued < calls && thread_rng().gen_bool(0.25) {
            issued += 1;
            let agent = thread_rng().gen_range(0..2);
            if thread_rng().gen_bool(0.15) {
                let links = thread_rng().gen_range(2..6);
                callers.push(madsim::task::spawn(chain(world.clone(), agent, issued, links)));
            } else {
                let mode = draw_mode();
                let prompt = match same_text_request(&world, agent, &sent) {
                    Some(text) => format!("{}{text}{}", whitespace(), whitespace()),
                    None => format!("{}task {issued} for a{agent}{}", whitespace(), whitespace()),
                };
                sent.push((agent, prompt.trim().to_string()));
                let call = CallInput { agent, request_id: request_id(issued), prompt: prompt.clone(), return_final: mode.return_final };
                {
                    let mut w = world.lock().unwrap();
                    w.oracle.note_prompt(&call.request_id, &prompt);
                    w.counters.requests += 1;
                    if mode.timeout_ms > 0 {
                        w.counters.fault("clock.deadline");
                    }
                }
                if thread_rng().gen_bool(0.1) {
                    join_burst(&world, &call, mode, callers);
                } else if let Some(delay) = same_text_human(&world, &call) {
                    let world = world.clone();
                    callers.push(madsim::task::spawn(async move {
                        madsim::time::sleep(delay).await;
                        caller(world, call, mode).await
                    }));
                } else {
                    callers.push(madsim::task::spawn(caller(world.clone(), call, mode)));
                }
            }
        } else if submitted < submits && thread_rng().gen_bool(0.08) {
            submitted += 1;
            submit_scenario(&world, submitted, callers);
        } else {
            let calm = world.lock().unwrap().plan.calm;
            if !thread_rng().gen_bool(calm) {
                act(&world, &mut humans);
            }
        }
        spawn_late_callers(&world, callers);
        let _ = ask_engine(&world, engine_status).await;
        if !world.lock().unwrap().oracle.violations.is_empty() {
            return finish(&world, 0);
        }
    }
    // Faults stop: the file is found again, the process runs, the human leaves the keyboard.
    {
        let mut w = world.lock().unwrap();
        w.faults_on = false;
        w.healed_ms = Some(now_ms());
        w.monitor_lag_ms = 0;
        for a in 0..w.agents.len() {
            let splitting = w.split_in_progress(a);
            if !w.agents[a].composer.is_empty() && !splitting {
                // The human clears what the composer holds (a Ctrl-U: a write to the pane, so
                // a submit still watching it is superseded, never acknowledged by the redraw).
                w.pane_accept(a, "human", 1, true);
            }
            if splitting {
                // Not through a split write's gaps: the human's Ctrl-U waits for the pane's
                // write lock. Cleared at once, the composer emptied with no write to the pane,
                // so the stalled TUI's late redraw of the split write's text showed an empty
                // composer and acknowledged an Enter it had lost (exploration seed 149).
                at_keyboard(&w, &world, a, move |w| {
                    if !w.agents[a].composer.is_empty() {
                        w.pane_write(a, "human", b"\x15", None, true);
                    }
                });
            }
            let agent = &mut w.agents[a];
            agent.lost_until_ms = None;
            agent.unreadable_record = None;
            agent.lag_ms = 20;
            agent.question = false;
            if !splitting {
                agent.composer.clear();
            }
            agent.pane.late_echoes.clear(); // what the stalled TUI had to redraw is cleared
            agent.pane.late_draw = None;
            if let Some(app) = agent.app.as_mut() {
                app.conn_down_until = None;
                // `app_server.slow_reader` heals too: what waits in its input is read now (a
                // stalled process only once its stall ends).
                let healed = (now_ms() + 20).max(app.stalled_until.unwrap_or(0));
                app.queue.iter_mut().for_each(|pending| pending.due_ms = pending.due_ms.min(healed));
                if app.holder_down {
                    continue; // `agent restart` brings the holder back at the provider's next tick
                }
            }
            if agent.process.is_none() && !w.split_in_progress(a) {
                w.spawn_process(a, false); // (else the provider respawns it once the split write ends)
            }
        }
        w.log("faults stop".to_string());
    }
    let healed = now_ms();
    let mut settled_at = None;
    while now_ms() < healed + QUIET_PHASE_MS {
        madsim::time::sleep(Duration::from_millis(500)).await;
        if !world.lock().unwrap().oracle.violations.is_empty() {
            return finish(&world, 0);
        }
        spawn_late_callers(&world, callers);
        let done = callers.iter().all(|c| c.is_finished()) && world.lock().unwrap().late_callers.is_empty();
        let status = ask_engine(&world, engine_status).await;
        let open = status.as_ref().and_then(|s| s["open"].as_array().map(Vec::len)).unwrap_or(usize::MAX);
        let quiescent = status.as_ref().and_then(|s| s["quiescent"].as_bool()).unwrap_or(false);
        // LIVE-1: a holder still silent since a daemon start (past `StartupComplete`'s bound,
        // its requests ended) has records the stream reports once it answers.
        let silent = world.lock().unwrap().agents.iter().any(|agent| agent.silent_until_ms.is_some());
        if done && open == 0 && quiescent && !silent {
            settled_at = Some(now_ms() - healed);
            break;
        }
    }
    // Liveness and end-of-run checks.
    let status = final_status(&world).await;
    check_event_stream_at_end(&world).await;
    // (Up to 22 s: a line written to a slow app-server before the faults stopped is read up to
    // 6 s later, the slowest stdin lag; a re-proof asked after answers that proved nothing
    // waits out its backoff, up to `MAX_REPROOF_BACKOFF_MS`, MGD-4.)
    let backoff_ms = wakterm_runtime::app_server_stream::MAX_REPROOF_BACKOFF_MS;
    for _ in 0..(6_000 + backoff_ms) / 250 {
        if world.lock().unwrap().managed_usable_at_end(false) {
            break;
        }
        madsim::time::sleep(Duration::from_millis(250)).await;
    }
    world.lock().unwrap().managed_usable_at_end(true);
    let mut w = world.lock().unwrap();
    let unanswered = callers.iter().filter(|c| !c.is_finished()).count();
    if unanswered > 0 {
        w.oracle.unfinished(format!("{unanswered} callers still wait for a receipt {QUIET_PHASE_MS} ms after faults stopped"));
    }
    match status {
        None => w.oracle.unfinished("the daemon does not answer after faults stopped".to_string()),
        Some(status) => {
            let open = status["open"].as_array().cloned().unwrap_or_default();
            w.oracle.submissions_left(status["submissions"].as_u64().unwrap_or(0));
            if !open.is_empty() || status["quiescent"] != json!(true) {
                w.oracle.unfinished(format!("not terminal {QUIET_PHASE_MS} ms after faults stopped: {status}"));
            } else if status["finished_in_memory"] != json!(0) {
                // HIST-1: a quiescent engine holds open requests only; a finished one left
                // behind is a leak that grows with history.
                w.oracle.unfinished(format!("HIST-1: finished requests still in engine memory when quiescent: {status}"));
            }
        }
    }
    let open_rows: Vec<String> = w
        .store
        .requests()
        .into_iter()
        .filter(|r| wakterm_engine::Phase::is_open_name(&r.phase))
        .map(|r| r.request_id)
        .collect();
    // Failed progress and release commits are retried by the engine, so after the quiet phase
    // no durable row may be left open: every one is a liveness violation.
    if !open_rows.is_empty() {
        w.oracle.unfinished(format!("durable requests never finished: {open_rows:?}"));
    }
    let unseen = w.store.terminal_after(w.oracle.last_sequence);
    if !unseen.is_empty() {
        w.oracle.unfinished(format!("{} durable terminal events never reached a watcher", unseen.len()));
    }
    drop(w);
    finish(&world, settled_at.unwrap_or(QUIET_PHASE_MS))
}

/// The engine's status for the liveness check. A provider turn that began before the faults
/// stopped may still end now, and each record the observer reports is an event batch to commit
/// (EV-3): the engine is busy for a few milliseconds, not stuck. So a busy answer is asked
/// again for a few seconds before it counts.
async fn final_status(world: &Shared) -> Option<Value> {
    let mut status = None;
    for _ in 0..20 {
        status = ask_engine(world, engine_status).await;
        let settled = status.as_ref().is_some_and(|s| s["open"].as_array().is_some_and(Vec::is_empty) && s["quiescent"] == json!(true));
        if settled {
            break;
        }
        madsim::time::sleep(Duration::from_millis(250)).await;
    }
    status
}

/// EV-*: once the engine is quiescent, the store and the subscriber agree and every agent's
/// stream has reported the provider's record of the session its observer tails through its
/// end. The observer may still be catching up when requests settle (a heal is seen at its next
/// run), so the stream gets a few seconds to get there.
async fn check_event_stream_at_end(world: &Shared) {
    {
        // A subscriber still away comes back for the end (EV-9).
        let mut w = world.lock().unwrap();
        if w.subscriber_away_until.take().is_some() {
            let published = w.store.last_event_sequence().min(w.events_settled_through.max(w.oracle.stream.last_seen));
            crate::ports::subscriber_catch_up(&mut w, published, "back for the end");
        }
    }
    let mut problems = Vec::new();
    let mut gap_noted = false;
    for _ in 0..40 {
        let status = ask_engine(world, engine_status).await;
        let quiescent = status.as_ref().and_then(|s| s["quiescent"].as_bool()).unwrap_or(false);
        let events_through = status.as_ref().and_then(|s| s["events_through"].as_u64()).unwrap_or(0);
        problems = {
            let mut w = world.lock().unwrap();
            let live = || w.agents.iter().enumerate().filter(|(_, a)| a.process.is_some());
            let tails: Vec<_> = live().filter(|(_, a)| !a.rollout_gone).map(|(i, a)| (i, a.session.id.clone(), a.session.records.as_slice())).collect();
            let mut problems = w.oracle.stream_end_problems(&w.store, &tails);
            let gone: Vec<_> = live().filter(|(_, a)| a.rollout_gone).map(|(i, a)| (i, a.session.id.clone())).collect();
            problems.extend(w.oracle.gone_session_problems(&gone));
            // MON-3, ADM-16: the catalog of a PTY agent that runs no turn (its TUI idle, its
            // records readable) is not held `turn_active` by its screen alone: the observer
            // loop's rechecks look at such a screen again (a lost push held it for good: the
            // hostile run's agent, `monitor.screen_push_lost`), and a late refresh's view the
            // engine did not apply hides no news from it (MON-1, `observer.refresh_after_snapshot`).
            let turn_active = status.as_ref().and_then(|s| s["turn_active"].as_array().cloned()).unwrap_or_default();
            for id in turn_active.iter().filter_map(Value::as_str) {
                let Some(a) = w.agents.iter().position(|agent| agent.agent_id.to_string() == id) else { continue };
                let agent = &w.agents[a];
                let idle = agent.process.is_some() && agent.running.is_none() && !w.is_managed(a) && agent.session.records.iter().all(|r| r.visible_at_ms <= wakterm_runtime::driver::now_ms());
                if quiescent && idle && w.stalled_look_in_another_file(a) {
                    if !std::mem::replace(&mut gap_noted, true) {
                        w.counters.fault("note.stalled_look_in_another_file"); // MON-3's known gap
                    }
                } else if quiescent && idle && agent.rollout_gone {
                    // OBS-4's known gap: a process writing a session no observer reads, with
                    // nothing durable to say it has one (its stream reported none of it),
                    // looks fresh; a prompt's or another writer's Enter then holds it until
                    // RF-8's timeout, since the turn it started is never seen (exploration
                    // seed 5829431).
                    if !std::mem::replace(&mut gap_noted, true) {
                        w.counters.fault("note.unseen_turn_holds_a_fresh_look");
                    }
                } else if quiescent && idle {
                    problems.push((crate::oracle::Kind::Stalled, format!("a{a} runs no turn, but the catalog says busy/turn_active naming no turn (a look at the screen would say idle)")));
                }
            }
            // EV-8: a quiescent engine has settled every number it assigned, so a catalog taken
            // now answers at once; a lower settled mark would hold it at `events_not_durable`.
            if quiescent && w.events_settled_through < events_through {
                let m = format!("quiescent, events_through {events_through} but settled only through {}: the catalog would answer events_not_durable forever", w.events_settled_through);
                problems.push((crate::oracle::Kind::EventNotDurable, m));
            }
            problems
        };
        if quiescent && problems.is_empty() {
            return;
        }
        madsim::time::sleep(Duration::from_millis(250)).await;
    }
    world.lock().unwrap().oracle.record_problems(problems);
}

fn finish(world: &Shared, settle_ms: u64) -> Outcome {
    let mut w = world.lock().unwrap();
    if let Some(v) = w.oracle.violations.first().cloned() {
        w.log(format!("VIOLATION {:?}: {}", v.kind, v.message));
    }
    Outcome {
        trace_hash: w.trace.hash,
        trace: std::mem::take(&mut w.trace.lines),
        violations: w.oracle.violations.clone(),
        counters: std::mem::take(&mut w.counters),
        settle_ms,
    }
}
