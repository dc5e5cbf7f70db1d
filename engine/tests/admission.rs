//! Admission scenarios: each test names the SPEC.md rule it proves.

mod support;
use support::*;
use wakterm_engine::*;

fn classification(rig: &Rig, op: OpId) -> Classification {
    rig.receipt(op).classification
}

/// ADM-1: unknown display names and unknown exact ids are `unavailable`; exact lookup by id works.
#[test]
fn adm_1_resolution_by_name_or_exact_id() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.target = "nobody".to_string();
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("agent_unknown"));
    assert_eq!(classification(&rig, op), Classification::Unavailable);

    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.target = OTHER.to_string();
    command.exact_agent_id = true;
    let op = rig.submit(command);
    assert_eq!(classification(&rig, op), Classification::Unavailable);

    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.target = ZOLA.to_uppercase();
    command.exact_agent_id = true;
    let op = rig.submit(command);
    assert_eq!(classification(&rig, op), Classification::Accepted);
    assert_eq!(rig.writes(), 1);
}

/// ADM-1, LIVE-1: after a restart, until every agent the daemon knew is registered again (an
/// agent whose holder is slow to answer is registered up to 30 s later), an unknown target may
/// be one of them: the refusal says so and to try again; once startup is complete it does
/// not. Nothing is written either way.
#[test]
fn adm_1_an_unknown_target_during_startup_says_agents_are_still_being_reattached() {
    let mut rig = Rig::with_idle_zola();
    rig.crash_and_recover();
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.reason.as_deref(), Some("agent_unknown"));
    let detail = receipt.detail.clone().unwrap_or_default();
    assert!(detail.contains("still re-attaching 1 agent(s)") && detail.contains("try again"), "{detail}");
    rig.input(Input::StartupComplete);
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    let detail = rig.receipt(op).detail.clone().unwrap_or_default();
    assert_eq!(detail, "no agent has the name or id \"zola\"", "startup is over: the agent is just unknown");
    assert_eq!(rig.writes(), 0);
}

/// ADM-1 / INP-4: `--exact-agent-id` with something that is not an id is `invalid`.
#[test]
fn adm_1_exact_id_must_be_an_id() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.exact_agent_id = true;
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("agent_id_malformed"));
    assert_eq!(rig.writes(), 0);
}

/// ADM-2: an admission naming an old incarnation is `stale_incarnation` and writes nothing.
#[test]
fn adm_2_stale_incarnation() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
    command.incarnation = Some("inc-0".to_string());
    let op = rig.submit(command);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::StaleIncarnation);
    assert!(!receipt.prompt_written);
    assert_eq!(rig.writes(), 0);
    assert!(rig.durable.is_empty(), "IDEM-6: a definitive rejection persists nothing");
}

/// ADM-2: the observer verifying a different process than registered is also stale.
#[test]
fn adm_2_observer_sees_other_process() {
    let mut rig = Rig::with_idle_zola();
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 999)));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, op), Classification::StaleIncarnation);
    assert_eq!(rig.writes(), 0);
}

/// ADM-3: admission refreshes the observer and decides on the refreshed state.
#[test]
fn adm_3_admission_waits_for_the_refresh() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert!(!rig.has_receipt(op));
    assert_eq!(rig.refreshes.len(), 1);
    assert!(rig.deliveries.is_empty() && rig.persists.is_empty());
    rig.refresh_next();
    assert_eq!(rig.persists.len(), 1, "registration follows the refresh");
}

/// ADM-3: a refresh that never answers is `observer_failure`, nothing written.
#[test]
fn adm_3_refresh_timeout_is_observer_failure() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.advance(limits::REFRESH_TIMEOUT_MS);
    assert_eq!(classification(&rig, op), Classification::ObserverFailure);
    // The detail says the refresh did not answer (a frozen holder), not that nothing was seen.
    let detail = rig.receipt(op).detail.clone().unwrap_or_default();
    assert!(detail.contains("did not answer within 5000 ms"), "{detail}");
    assert!(rig.persists.is_empty() && rig.deliveries.is_empty());
}

/// ADM-3 / ADM-16: a refresh answered after its admission timed out still brings the agent's
/// view back (the timeout cleared it), as a monitor snapshot would: the catalog no longer
/// says `unknown` for an idle agent whose monitor has nothing new to send.
#[test]
fn adm_3_a_late_refresh_answer_is_the_agents_view_again() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let zola = agent_id(ZOLA);
    rig.input(Input::ObserverSnapshot { agent_id: zola.clone(), snapshot: idle_snapshot("inc-1", 100) }); // the monitor's
    assert_eq!(rig.engine.catalog_view(&zola).unwrap().state, AgentState::Idle);
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.advance(limits::REFRESH_TIMEOUT_MS);
    assert_eq!(classification(&rig, op), Classification::ObserverFailure);
    assert_eq!(rig.engine.catalog_view(&zola).unwrap().state, AgentState::Unknown, "the timeout proved nothing");
    rig.refresh_next(); // the late answer
    assert_eq!(rig.engine.catalog_view(&zola).unwrap().state, AgentState::Idle);
    assert!(rig.persists.is_empty() && rig.deliveries.is_empty(), "nothing of the timed-out admission goes on");

    // Never over a view that came after the timeout: that one is newer.
    let op = rig.admit(REQ2, "hi", ReturnMode::OneWay);
    rig.advance(limits::REFRESH_TIMEOUT_MS);
    assert_eq!(classification(&rig, op), Classification::ObserverFailure);
    // The monitor's, newer: the user typed a draft (the same position: only the screen moved).
    rig.input(Input::ObserverSnapshot { agent_id: zola.clone(), snapshot: ObserverSnapshot { composer: Composer::Draft, ..idle_snapshot("inc-1", 100) } });
    let draft_blocks = |rig: &Rig| rig.engine.catalog_view(&zola).unwrap().return_final_blocker.is_some();
    assert!(draft_blocks(&rig));
    rig.refresh_next(); // the late answer, its screen read before the draft: empty
    assert!(draft_blocks(&rig), "the newer view stays");
}

/// ADM-4: state re-checked after registration, immediately before the write: a turn that
/// started meanwhile makes it `busy`, the registration is released, nothing is written.
#[test]
fn adm_4_recheck_before_write() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.turn_started("turn-x", 1010); // someone typed into the pane
    rig.ack_next_persist(Ok(()));
    assert!(rig.deliveries.is_empty(), "no write after a failed re-check");
    rig.ack_next_persist(Ok(())); // the release
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Busy);
    assert!(!receipt.prompt_written);
    assert_eq!(rig.durable[&RequestId::parse(REQ).unwrap()].phase, Phase::Released);
}

/// ADM-4: an incarnation change between registration and the write is `stale_incarnation`.
#[test]
fn adm_4_incarnation_change_before_write() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.refresh_next();
    rig.input(Input::AgentUpserted(zola_facts("inc-2", 101)));
    rig.ack_next_persist(Ok(()));
    rig.ack_next_persist(Ok(()));
    assert_eq!(classification(&rig, op), Classification::StaleIncarnation);
    assert!(rig.deliveries.is_empty());
}

/// ADM-5: a running turn, a draft in the composer or a question make admission `busy`.
#[test]
fn adm_5_busy_states() {
    let cases = [
        (TurnState::Busy { turn: Some(turn("t")) }, Composer::Empty, "turn_active"),
        (TurnState::Idle { last_completed: Some(turn("t")) }, Composer::Draft, "composer_not_empty"),
        (TurnState::Idle { last_completed: Some(turn("t")) }, Composer::Question, "interactive_question"),
    ];
    for (turn_state, composer, reason) in cases {
        let mut rig = Rig::with_idle_zola();
        let mut snapshot = idle_snapshot("inc-1", 100);
        snapshot.turn = turn_state;
        snapshot.composer = composer;
        rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
        for mode in [ReturnMode::OneWay, ReturnMode::ReturnFinal] {
            let op = rig.admit(REQ, "hi", mode);
            let receipt = rig.receipt(op);
            assert_eq!(receipt.classification, Classification::Busy, "{reason}");
            assert_eq!(receipt.reason.as_deref(), Some(reason));
            assert!(!receipt.prompt_written);
        }
        assert_eq!(rig.writes(), 0);
    }
}

/// ADM-5: after a complete write, the agent stays busy until a turn starts, so a second
/// prompt cannot race into the same idle composer.
#[test]
fn adm_5_awaiting_turn_start_is_busy() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(classification(&rig, first), Classification::Accepted);
    // The observer has not seen the turn yet; the refresh still says idle.
    let second = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(second).reason.as_deref(), Some("awaiting_turn_start"));
    rig.turn_started("turn-1", 1010);
    // A turn start alone does not say the prompt was taken (its user message does).
    assert!(rig.awaiting_turn_start(), "ADM-5: still waiting");
    rig.user_message("turn-1", "one", 1020);
    rig.turn_completed("turn-1", "ok", 1030);
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.position = 1030;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let third = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(classification(&rig, third), Classification::Accepted);
}

/// ADM-5: the wait for the written prompt's turn ends when a fresh snapshot still shows an
/// idle agent with an empty composer after the grace period, and not before.
#[test]
fn adm_5_awaiting_turn_start_expires_only_with_evidence() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "lost prompt", ReturnMode::OneWay);
    rig.advance(limits::AWAITING_TURN_GRACE_MS - 1);
    let early = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(early).reason.as_deref(), Some("awaiting_turn_start"));
    let mut draft = idle_snapshot("inc-1", 100);
    draft.composer = Composer::Draft;
    rig.snapshots.insert(agent_id(ZOLA), Ok(draft));
    rig.advance(1);
    let still = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(still).classification, Classification::Busy, "the prompt may sit in the composer");
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    let later = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(later).classification, Classification::Accepted);
}

/// ADM-5 (PTY): only the user message carrying the written prompt ends the wait, not any turn
/// past the floor. The view at the write can stand behind the rollout (a look that showed a
/// checkpoint's view; records Codex had not flushed yet), so a human's turn that began before
/// the write lies past the floor; and the TUI may take our prompt and start its turn seconds
/// later. Ended by that turn, the wait let the next prompt go over ours, unread (the
/// simulator's `terminal.slow_turn_start`, seed 6617 of 1-20,000). A submit's wait: SUB-2's
/// `sub_2_only_the_submits_own_prompt_ends_its_wait`.
#[test]
fn adm_5_a_turn_that_does_not_carry_the_written_prompt_ends_no_pty_wait() {
    let mut rig = Rig::with_idle_zola(); // the view at 1,000
    let first = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(classification(&rig, first), Classification::Accepted);
    rig.provider_turn("turn-h", "a human's prompt", "its final", 1_000); // begun before the write, read only now: past the floor
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_030, ..idle_snapshot("inc-1", 100) }));
    let second = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(second).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(second));
    // Our prompt's turn, started late: its user message ends the wait.
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "one", 1_110);
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
    rig.turn_completed("turn-1", "done", 1_130);
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_130, ..idle_snapshot("inc-1", 100) }));
    let third = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(classification(&rig, third), Classification::Accepted);

}

/// ADM-5 (PTY): a plain send written while a wait is open (ADM-13 writes it whatever the wait)
/// joins the awaited prompts, never replaces them: its user message may come first (it steers,
/// or joins a turn about to start) while the earlier prompt sits queued in the TUI. It
/// replaced the awaited prompt, its record ended the wait, and the next admission went over
/// the queued one (the simulator's exploration seed 82398000, a submit's prompt). Each prompt
/// ends by its own record; a refused late landing takes only its own prompt off the wait.
#[test]
fn adm_5_a_plain_send_joins_the_wait_and_does_not_end_it_alone() {
    let mut rig = Rig::with_idle_zola(); // the view at 1,000
    let first = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(classification(&rig, first), Classification::Accepted);
    let command = rig.command(Operation::Send, REQ2, "two", ReturnMode::OneWay);
    let send = rig.submit(command);
    assert_eq!(rig.writes(), 2, "a plain send is written whatever the wait");
    // The send joins the turn about to start; "one" sits queued behind it.
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "two", 1_110);
    assert_eq!(rig.receipt(send).acknowledged, Some(true));
    assert!(rig.awaiting_turn_start(), "the first prompt is still unread");
    rig.turn_completed("turn-1", "done", 1_130);
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_130, ..idle_snapshot("inc-1", 100) }));
    let third = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "three", ReturnMode::OneWay);
    assert_eq!(rig.receipt(third).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(third));
    // The queued prompt's turn: its record ends the wait.
    rig.turn_started("turn-2", 1_200);
    rig.user_message("turn-2", "one", 1_210);
    assert!(!rig.awaiting_turn_start(), "both prompts were taken");
    rig.turn_completed("turn-2", "done", 1_230);
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_230, ..idle_snapshot("inc-1", 100) }));
    let fourth = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "three", ReturnMode::OneWay);
    assert_eq!(classification(&rig, fourth), Classification::Accepted, "{:?}", rig.receipt(fourth));
}

/// ADM-5 (PTY): a record counts once: a replay of the one that took an awaited prompt (a
/// resume after a loss) takes no other of the same text (a review: with a submit's and a
/// send's prompts alike, the replay of the send's record ended the wait while the queued one
/// was unread).
#[test]
fn adm_5_a_replayed_record_takes_one_awaited_prompt_only() {
    let mut rig = Rig::with_idle_zola(); // the view at 1,000
    let first = rig.admit(REQ, "continue", ReturnMode::OneWay);
    assert_eq!(classification(&rig, first), Classification::Accepted);
    let command = rig.command(Operation::Send, REQ2, "continue", ReturnMode::OneWay);
    let send = rig.submit(command);
    assert_eq!(rig.writes(), 2);
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "continue", 1_110); // one of the two
    assert!(rig.awaiting_turn_start(), "one prompt is still unread");
    rig.user_message("turn-1", "continue", 1_110); // the same record again: not past the view
    assert!(rig.awaiting_turn_start(), "a replay takes no second prompt");
    rig.turn_completed("turn-1", "done", 1_130);
    rig.user_message("turn-1", "continue", 1_110); // replayed after the view moved on
    assert!(rig.awaiting_turn_start(), "nor later");
    // ADM-13: by input order that record is the first write's, so it acknowledges no send.
    assert!(!rig.has_receipt(send), "{:?}", rig.receipt(send));
    rig.advance(limits::SEND_ACK_WAIT_MS);
    assert_eq!(rig.receipt(send).acknowledged, Some(false));
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_130, ..idle_snapshot("inc-1", 100) }));
    let third = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "three", ReturnMode::OneWay);
    assert_eq!(rig.receipt(third).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(third));
    rig.turn_started("turn-2", 1_200);
    rig.user_message("turn-2", "continue", 1_210);
    assert!(!rig.awaiting_turn_start(), "the other's own record");
}

/// ADM-5 (PTY): a wait awaits at most `MAX_AWAITED_PROMPTS`: a plain send past it is refused
/// `awaiting_turn_start`, nothing written, with or without a view (a review: the bound was
/// checked below the view's check, and a send with no view went past it to the engine's
/// assertion).
#[test]
fn adm_5_a_wait_awaits_a_bounded_number_of_prompts() {
    let mut rig = Rig::with_idle_zola();
    rig.lose_the_view(); // no record: no prompt is ever taken, no snapshot ends the wait
    let bound = wakterm_engine::agent::MAX_AWAITED_PROMPTS;
    for i in 0..bound {
        let id = format!("fe57dc90-994e-4e73-b09c-{:012x}", 0x100 + i);
        let command = rig.command(Operation::Send, &id, &format!("send {i}"), ReturnMode::OneWay);
        let op = rig.submit(command);
        assert_eq!(classification(&rig, op), Classification::Accepted, "{i}: {:?}", rig.receipt(op));
    }
    let command = rig.command(Operation::Send, REQ, "one too many", ReturnMode::OneWay);
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(op));
    assert_eq!(rig.writes(), bound);
}

/// ADM-5, RF-8 (PTY): a wait whose prompt's user message never comes (Codex recorded it under
/// other text: a slash command it expands) on an idle agent whose composer cannot be read ends
/// at RF-8's turn-start timeout (a review: with only the prompt's own user message and the
/// grace, which needs an empty composer, to end it, it held the agent for good). Not while a
/// turn runs: a prompt the TUI queued behind it is recorded only when it ends (a second review).
#[test]
fn adm_5_a_pty_wait_on_an_unreadable_idle_screen_ends_at_rf_8s_timeout() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, "/init", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted);
    let running = ObserverSnapshot { composer: Composer::Unknown, turn: TurnState::Busy { turn: Some(turn("turn-1")) }, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(running));
    rig.turn_started("turn-1", 1_010);
    rig.user_message("turn-1", "the instructions /init expands to", 1_020);
    rig.advance(limits::TURN_START_TIMEOUT_MS + limits::AWAITING_TURN_GRACE_MS);
    assert!(rig.awaiting_turn_start(), "a turn runs: the prompt may be queued behind it");
    rig.turn_completed("turn-1", "done", 1_030);
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { composer: Composer::Unknown, position: 1_030, ..idle_snapshot("inc-1", 100) }));
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    assert!(!rig.awaiting_turn_start(), "RF-8's minute ends it");
}

/// ADM-5 (PTY): a plain send written while the observer has no view (lost: ADM-13 writes
/// anyway) has no floor; the resume that follows re-reads the file, and its records are new to
/// the view although they lie before the write. Before, any such turn ended the wait (the
/// simulator's seed 3999 of 1-20,000: a file replaced while the daemon was down, read again
/// from its start); now only the user message carrying the send's prompt does.
#[test]
fn adm_5_a_send_written_with_no_view_waits_for_its_own_prompt() {
    let mut rig = Rig::with_idle_zola();
    rig.lose_the_view();
    let command = rig.command(Operation::Send, REQ, "one", ReturnMode::OneWay);
    let op = rig.submit(command);
    assert_eq!(classification(&rig, op), Classification::Accepted, "{:?}", rig.receipt(op));
    assert_eq!(rig.engine.agent(&agent_id(ZOLA)).unwrap().awaiting_prompts[0].past, None, "no view: no floor");
    // The resume reads the file from its start: an old turn, new to the view.
    rig.observe(ObserverEvent::Attached { session: session(), position: 400 });
    rig.provider_turn("turn-0", "an old prompt", "an old final", 490);
    assert!(rig.awaiting_turn_start(), "an old turn ends no wait");
    rig.turn_started("turn-1", 600);
    rig.user_message("turn-1", "one", 610);
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
}

/// ADM-6, CORR-4: return-final without a completed baseline turn is `observer_failure`, not busy;
/// a one-way admission to the same idle agent is still accepted.
#[test]
fn adm_6_no_baseline_cursor() {
    let mut rig = Rig::with_idle_zola();
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.turn = TurnState::Idle { last_completed: None };
    snapshot.session = None;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, op), Classification::ObserverFailure);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("no_baseline_cursor"));
    assert!(!rig.receipt(op).prompt_written);
    let op = rig.admit(REQ2, "hi", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted);
}

/// ADM-6: an unavailable observer or an unknown turn state refuses admit, never guesses.
#[test]
fn adm_6_observer_unavailable() {
    let mut rig = Rig::with_idle_zola();
    rig.snapshots.insert(agent_id(ZOLA), Err("two rollout files are open".to_string()));
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::ObserverFailure);
    assert_eq!(rig.receipt(op).detail.as_deref(), Some("two rollout files are open"));
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.turn = TurnState::Unknown;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("turn_state_unknown"));
    assert_eq!(rig.writes(), 0);
}

/// ADM-7: return-final to a harness without Codex evidence is `unsupported`.
#[test]
fn adm_7_unsupported_harness() {
    let mut rig = Rig::with_idle_zola();
    let mut facts = zola_facts("inc-1", 100);
    facts.harness = Harness::Other("claude".to_string());
    rig.input(Input::AgentUpserted(facts));
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, op), Classification::Unsupported);
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
    command.paste_mode = PasteMode::Raw;
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("raw_paste_return_final"));
    assert_eq!(rig.writes(), 0);
}

/// ADM-8: the prompt and Enter reach the pane as exactly one write.
#[test]
fn adm_8_one_write() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit(REQ, "Complete phases 2 and 3", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted);
    assert_eq!(rig.written.len(), 1);
    assert_eq!(rig.written[0].1, b"\x15\x1b[200~Complete phases 2 and 3\x1b[201~\r".to_vec());
}

/// ADM-9: every definitive rejection has prompt_written false and no write happened.
#[test]
fn adm_9_rejections_write_nothing() {
    let mut rig = Rig::with_idle_zola();
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.turn = TurnState::Busy { turn: None };
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    for (id, prompt) in [(REQ, "hi"), ("bad-id", "hi"), (REQ2, "")] {
        let op = rig.admit(id, prompt, ReturnMode::ReturnFinal);
        let receipt = rig.receipt(op);
        assert!(receipt.classification.is_definitive_rejection());
        assert!(!receipt.prompt_written && receipt.retry_safe && !receipt.reply_pending);
    }
    assert_eq!(rig.writes(), 0);
}

/// ADM-10: a failed or partial write is `indeterminate`, prompt_written true, never retry-safe.
#[test]
fn adm_10_write_errors_are_indeterminate() {
    for (bytes_written, state) in [(0, WriteState::Failed), (7, WriteState::Partial)] {
        let mut rig = Rig::with_idle_zola();
        rig.delivery_outcome = DeliveryOutcome::Failed { bytes_written, error: "EIO".to_string() };
        let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
        let receipt = rig.receipt(op).clone();
        assert_eq!(receipt.classification, Classification::Indeterminate);
        assert!(receipt.prompt_written && !receipt.retry_safe);
        assert_eq!(receipt.write_state, state);
        let events = rig.terminal_for(REQ);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].state, TerminalState::Indeterminate);
        // The turn our partial prompt may have opened never yields `completed`.
        rig.provider_turn("turn-1", "hi", "final", 1000);
        assert_eq!(rig.terminal_for(REQ).len(), 1);
    }
}

/// A one-way admission to an idle zola (answered by hand) whose one pane write never reports
/// its result: the engine gives up at DELIVERY_TIMEOUT_MS and its receipt is committed.
fn admission_with_a_lost_write() -> (Rig, OpId) {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.deliveries.len(), 1);
    rig.advance(limits::DELIVERY_TIMEOUT_MS);
    rig.ack_next_persist(Ok(()));
    (rig, op)
}

/// ADM-10: a write whose result never comes back is `indeterminate` (write_state unknown).
#[test]
fn adm_10_lost_write_result_is_indeterminate() {
    let (rig, op) = admission_with_a_lost_write();
    assert_eq!(rig.receipt(op).write_state, WriteState::Unknown);
    assert_eq!(classification(&rig, op), Classification::Indeterminate);
}

/// ADM-12: a write whose result was lost may still land (after a stall it may even start as
/// the engine gives up on it), so its agent stays claimed until its late outcome: even a plain
/// send, which may steer a running turn and so is not stopped by ADM-5's wait, is refused
/// before any byte; the late outcome, or the bound, frees the agent.
#[test]
fn adm_12_a_lost_write_holds_the_agent_until_its_outcome() {
    for late_outcome in [true, false] {
        let (mut rig, op) = admission_with_a_lost_write();
        assert_eq!(classification(&rig, op), Classification::Indeterminate);
        let send = |rig: &mut Rig, id: &str| {
            let command = rig.command(Operation::Send, id, "steer", ReturnMode::OneWay);
            rig.submit(command)
        };
        let early = send(&mut rig, "5e1d7f3a-2b4c-4d5e-8f60-718293a4b5c6");
        assert_eq!(rig.receipt(early).reason.as_deref(), Some("admission_in_progress"), "{:?}", rig.receipt(early));
        match late_outcome {
            true => rig.deliver_next(DeliveryOutcome::Complete),
            false => rig.advance(limits::LOST_WRITE_HOLD_MS),
        }
        assert!(rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_none(), "freed (late outcome: {late_outcome})");
        rig.engine.check_invariants();
        let later = send(&mut rig, "6f2e8a4b-3c5d-4e6f-9a71-8293a4b5c6d7");
        assert!(!rig.has_receipt(later), "the send took the claim and refreshes: {:?}", rig.receipts.get(&later));
        let claim = rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.clone();
        assert_eq!(claim.map(|c| c.to_string()).as_deref(), Some("6f2e8a4b-3c5d-4e6f-9a71-8293a4b5c6d7"));
    }
}

/// ADM-5, ADM-12: a write the engine gave up on may land later, its claim held meanwhile: the
/// wait for its turn is that write's. It keeps the write's prompt when the late outcome comes
/// (it was cleared, and a human's turn begun before the landing, read after it past the floor,
/// ended the wait: a review), and the grace does not end it while the write may still land
/// (an idle agent with an empty composer says nothing of bytes not landed yet; ended then,
/// the claim's release at the landing let the next prompt go over the landed one: a review).
#[test]
fn adm_5_a_lost_write_that_lands_late_is_waited_for_by_its_prompt() {
    let (mut rig, _) = admission_with_a_lost_write();
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    rig.refresh_next(); // the ADM-5 probe: idle, empty composer
    assert!(rig.awaiting_turn_start(), "the write may still land");
    rig.deliver_next(DeliveryOutcome::Complete); // late: the bytes landed just now
    rig.auto = Auto::All;
    rig.provider_turn("turn-h", "a human's prompt", "its final", 1_000); // begun before, read only now
    rig.snapshots.insert(agent_id(ZOLA), Ok(ObserverSnapshot { position: 1_030, ..idle_snapshot("inc-1", 100) }));
    let next = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(next).reason.as_deref(), Some("awaiting_turn_start"), "{:?}", rig.receipt(next));
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "hi", 1_110);
    assert!(!rig.awaiting_turn_start(), "its prompt was taken");
}

/// ADM-12: the bound of a lost write's hold is a timer the engine announces (`poll_timeout`),
/// because the daemon's driver ticks the engine only then (an unannounced bound held the agent
/// until some unrelated timer fired: the rig ticks only when a timer is due, as the driver).
/// ADM-5: while the write may still land, an idle agent with an empty composer does not end
/// the wait for its turn (the bytes may not have landed yet: a review saw the claim's release
/// at a late landing let the next prompt go over the landed one); at the bound, the engine
/// looks at once, and the grace ends it.
#[test]
fn adm_12_the_bound_of_a_lost_write_hold_is_an_announced_timer() {
    let (mut rig, op) = admission_with_a_lost_write();
    let gave_up = rig.now; // the receipt's commit is answered at once: no time passed since
    let bound = gave_up + limits::LOST_WRITE_HOLD_MS;
    assert_eq!(classification(&rig, op), Classification::Indeterminate);
    rig.advance(3_000); // the probes are answered 3 s late: none is due at the bound
    while rig.now + limits::AWAITING_TURN_GRACE_MS < bound {
        rig.advance(limits::AWAITING_TURN_GRACE_MS);
        rig.refresh_next(); // the ADM-5 probe: idle, empty composer
        let agent = rig.engine.agent(&agent_id(ZOLA)).unwrap();
        assert!(agent.awaiting_turn_after.is_some() && agent.claim.is_some(), "the write may still land: the wait and the hold stay");
        assert!(rig.engine.poll_timeout().is_some_and(|due| due <= bound), "the bound is announced");
    }
    rig.advance(bound - rig.now);
    assert!(rig.engine.agent(&agent_id(ZOLA)).unwrap().claim.is_none(), "freed at the bound");
    rig.refresh_next(); // asked at once
    assert!(!rig.awaiting_turn_start(), "the grace ends the wait");
}

/// ADM-17, ADM-5: positions compare only within one process. A replaced process's view (a
/// late snapshot of it, replayed after the agent's new process registered) is no floor for the
/// new process's snapshot, whose stream may start over (a managed agent's new holder starts at
/// 0 in the same thread): the new snapshot's position stands, so the new process's turn start
/// is fresh and ends the wait for a written prompt. Found by the simulator (seed 49463255: the
/// wait stayed open for the grace).
#[test]
fn adm_17_a_new_process_snapshot_is_not_held_back_by_the_old_process_position() {
    let mut rig = Rig::with_idle_zola();
    rig.input(Input::AgentUpserted(zola_facts("inc-2", 200)));
    let agent = agent_id(ZOLA);
    rig.input(Input::ObserverSnapshot { agent_id: agent.clone(), snapshot: idle_snapshot("inc-1", 100) }); // late, of the old process
    let mut fresh = idle_snapshot("inc-2", 200);
    fresh.position = 50;
    rig.input(Input::ObserverSnapshot { agent_id: agent.clone(), snapshot: fresh.clone() });
    let view = rig.engine.agent(&agent).unwrap().view.clone().unwrap();
    assert_eq!((view.position, view.incarnation.0.as_str()), (50, "inc-2"), "{view:?}");
    rig.snapshots.insert(agent.clone(), Ok(fresh)); // the admission's refresh sees the same
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.incarnation = Some("inc-2".to_string());
    let op = rig.submit(command);
    assert_eq!(classification(&rig, op), Classification::Accepted);
    assert!(rig.engine.agent(&agent).unwrap().awaiting_turn_after.is_some(), "ADM-5: waiting for the prompt's turn");
    let started = ObserverEvent::TurnStarted { session: session(), turn: turn("turn-1"), position: 60 };
    rig.input(Input::Observed { agent_id: agent.clone(), event: started });
    let prompt = ObserverEvent::UserMessage { session: session(), turn: Some(turn("turn-1")), prompt_hash: wakterm_engine::prompt::prompt_hash("hi"), position: 70 };
    rig.input(Input::Observed { agent_id: agent.clone(), event: prompt });
    assert!(rig.engine.agent(&agent).unwrap().awaiting_turn_after.is_none(), "the new process's turn ended the wait");
}

/// ADM-10 / DeliveryOutcome::Refused: a writer that proves it wrote nothing is a definitive
/// `unavailable` and the id is released.
#[test]
fn adm_10_refused_write_is_definitive() {
    let mut rig = Rig::with_idle_zola();
    rig.delivery_outcome = DeliveryOutcome::Refused { reason: "pane closed".to_string() };
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, op), Classification::Unavailable);
    assert!(!rig.receipt(op).prompt_written);
    assert!(rig.terminal_for(REQ).is_empty());
}

/// ADM-11: a registration that fails to commit is `internal_failure` and nothing is written.
#[test]
fn adm_11_registration_commit_failure() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.ack_next_persist(Err("disk full".to_string()));
    assert_eq!(classification(&rig, op), Classification::InternalFailure);
    assert!(rig.deliveries.is_empty());
    // The id is free: the same request can be retried and succeeds.
    rig.auto = Auto::All;
    let retry = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, retry), Classification::Accepted);
}

/// RF-6: a reader (`agent request get`) sees a request as the store holds it: nothing while its
/// registration commits, and no `accepted` receipt while the confirmation that makes it durable
/// is in flight (it may fail: the receipt is then `indeterminate`, `store_commit_failed`); nor
/// is a release shown before its commit. A review found the receipt shown before its commit.
#[test]
fn rf_6_a_reader_sees_no_receipt_before_its_commit() {
    let committed = |rig: &Rig| {
        let id = RequestId::parse(REQ).unwrap();
        rig.engine.request_as_committed(&id).map(|r| (r.phase, r.receipt.as_ref().map(|receipt| receipt.classification)))
    };
    let durable = |rig: &Rig| rig.durable.get(&RequestId::parse(REQ).unwrap()).map(|r| (r.phase, r.receipt.as_ref().map(|receipt| receipt.classification)));
    for (mode, confirmed) in [(ReturnMode::OneWay, Phase::Settled), (ReturnMode::ReturnFinal, Phase::Submitted)] {
        let mut rig = Rig::with_idle_zola();
        rig.auto = Auto::Manual;
        let op = rig.admit(REQ, "hi", mode);
        rig.refresh_next();
        assert_eq!(committed(&rig), None, "registering: nothing is durable yet");
        rig.ack_next_persist(Ok(()));
        rig.deliver_next(DeliveryOutcome::Complete);
        assert!(!rig.has_receipt(op), "{mode:?}: the confirmation is in flight");
        let in_memory = rig.engine.request(&RequestId::parse(REQ).unwrap()).unwrap();
        assert_eq!(in_memory.receipt.as_ref().map(|r| r.classification), Some(Classification::Accepted), "memory is ahead");
        assert_eq!(committed(&rig), Some((Phase::Registered, None)), "{mode:?}: confirming");
        assert_eq!(committed(&rig), durable(&rig), "{mode:?}: as the store holds it");
        rig.ack_next_persist(Ok(()));
        assert_eq!(classification(&rig, op), Classification::Accepted);
        // A settled one-way request has left memory (HIST-1): the reader asks the store.
        let shown = committed(&rig).or_else(|| durable(&rig)).unwrap();
        assert_eq!(shown, (confirmed, Some(Classification::Accepted)), "{mode:?}: durable now");
    }
    // A confirmation that fails: the receipt the reader could have seen was never true.
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.deliver_next(DeliveryOutcome::Complete);
    assert_eq!(committed(&rig), Some((Phase::Registered, None)));
    rig.ack_next_persist(Err("disk full".to_string()));
    assert_eq!(classification(&rig, op), Classification::Indeterminate);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("store_commit_failed"));
    // A release (the agent changed between the registration and its commit's answer).
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let op = rig.admit(REQ, "hi", ReturnMode::ReturnFinal);
    rig.refresh_next();
    rig.input(Input::AgentUpserted(zola_facts("inc-2", 200)));
    rig.ack_next_persist(Ok(()));
    assert!(!rig.has_receipt(op), "the release is in flight");
    assert_eq!(rig.engine.request(&RequestId::parse(REQ).unwrap()).map(|r| r.phase), Some(Phase::Released), "memory is ahead");
    assert_eq!(committed(&rig), Some((Phase::Registered, None)), "releasing: the registration is what the store holds");
    rig.ack_next_persist(Ok(()));
    assert!(!rig.receipt(op).prompt_written);
    assert_eq!(durable(&rig).map(|c| c.0), Some(Phase::Released), "released durably, and gone from memory");
}

/// ADM-12: while one admission holds the agent, a second one is `busy` before any write.
#[test]
fn adm_12_one_admission_per_agent() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let first = rig.admit(REQ, "one", ReturnMode::OneWay);
    let second = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(second).reason.as_deref(), Some("admission_in_progress"));
    rig.settle();
    assert_eq!(classification(&rig, first), Classification::Accepted);
    assert_eq!(rig.writes(), 1);
}

/// ADM-13: plain `send` keeps its interactive behaviour: it writes to a busy agent and reports
/// whether the observer acknowledged the prompt.
#[test]
fn adm_13_plain_send_steers_and_waits_for_ack() {
    let mut rig = Rig::with_idle_zola();
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.turn = TurnState::Busy { turn: Some(turn("turn-1")) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let command = rig.command(Operation::Send, REQ, "also do x", ReturnMode::OneWay);
    let op = rig.submit(command);
    assert!(!rig.has_receipt(op), "send waits briefly for acknowledgement");
    assert_eq!(rig.writes(), 1);
    rig.user_message("turn-1", "also do x", 1020);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Accepted);
    assert_eq!(receipt.acknowledged, Some(true));

    let command = rig.command(Operation::Send, REQ2, "and y", ReturnMode::OneWay);
    let op = rig.submit(command);
    rig.advance(limits::SEND_ACK_WAIT_MS);
    assert_eq!(rig.receipt(op).acknowledged, Some(false));
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
}

/// ADM-18: a plain one-way send that must not steer takes an idle agent only: a running turn
/// refuses it `busy` / `turn_active`, a turn state the observer cannot tell
/// `turn_state_unknown`, no observer view `observer_unavailable`, each with nothing written and
/// safe to retry, where a plain send is written each time. Idle, it is written with the current
/// incarnation (none named) and acknowledged as a send.
#[test]
fn adm_18_a_no_steer_send_never_writes_into_a_running_turn() {
    let busy = TurnState::Busy { turn: Some(turn("turn-1")) };
    for (turn_state, view, reason) in [(busy, true, "turn_active"), (TurnState::Unknown, true, "turn_state_unknown"), (TurnState::Unknown, false, "observer_unavailable")] {
        let mut rig = Rig::with_idle_zola();
        let mut snapshot = idle_snapshot("inc-1", 100);
        snapshot.turn = turn_state;
        let snapshot = if view { Ok(snapshot) } else { Err("two rollout files are open".to_string()) };
        rig.snapshots.insert(agent_id(ZOLA), snapshot);
        let mut command = rig.command(Operation::Send, REQ, "do not steer", ReturnMode::OneWay);
        command.no_steer = true;
        let op = rig.submit(command);
        let receipt = rig.receipt(op);
        assert_eq!((receipt.reason.as_deref(), receipt.prompt_written, receipt.retry_safe), (Some(reason), false, true), "{receipt:?}");
        assert_ne!(receipt.classification, Classification::Accepted);
        assert!(receipt.detail.as_deref().unwrap_or_default().contains("a no-steer send is written only into an agent seen idle"), "{receipt:?}");
        assert_eq!(rig.writes(), 0, "{reason}: nothing written");
        // The same send without the flag is written: the flag alone made the difference.
        let command = rig.command(Operation::Send, REQ2, "steer", ReturnMode::OneWay);
        let op = rig.submit(command);
        rig.advance(limits::SEND_ACK_WAIT_MS);
        assert_eq!((rig.receipt(op).classification, rig.writes()), (Classification::Accepted, 1), "{reason}");
    }
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Send, REQ, "idle, so fine", ReturnMode::OneWay);
    command.no_steer = true;
    let op = rig.submit(command);
    assert_eq!(rig.writes(), 1);
    rig.user_message("turn-2", "idle, so fine", 1020);
    let receipt = rig.receipt(op);
    assert_eq!((receipt.classification, receipt.acknowledged, receipt.operation), (Classification::Accepted, Some(true), Operation::Send), "{receipt:?}");
}

/// ADM-13: `send --return-final` needs an idle agent like `admit`.
#[test]
fn adm_13_send_return_final_needs_idle() {
    let mut rig = Rig::with_idle_zola();
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.turn = TurnState::Busy { turn: Some(turn("turn-1")) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let command = rig.command(Operation::Send, REQ, "hi", ReturnMode::ReturnFinal);
    let op = rig.submit(command);
    assert_eq!(classification(&rig, op), Classification::Busy);
    assert_eq!(rig.writes(), 0);
    // Idle: accepted at once, correlated instead of acknowledged, so its receipt says nothing
    // of an acknowledgement (`null`; it said `false`, "not taken", of a turn that completed).
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    let command = rig.command(Operation::Send, REQ2, "hi", ReturnMode::ReturnFinal);
    let op = rig.submit(command);
    assert_eq!((classification(&rig, op), rig.receipt(op).acknowledged), (Classification::Accepted, None));
}

/// ADM-14: a raw paste is never `accepted` without observer evidence.
#[test]
fn adm_14_raw_paste_needs_evidence() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.paste_mode = PasteMode::Raw;
    let op = rig.submit(command);
    assert!(!rig.has_receipt(op));
    rig.advance(limits::SEND_ACK_WAIT_MS);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.classification, Classification::Indeterminate);
    assert_eq!(receipt.reason.as_deref(), Some("raw_paste_unacknowledged"));
    // ADM-5: the TUI kept the paste unsent: the wait for its turn says what ends it.
    let held = ObserverSnapshot { composer: Composer::Draft, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(held));
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "meanwhile", ReturnMode::OneWay);
    let refused = rig.receipt(op);
    assert_eq!((refused.classification, refused.reason.as_deref()), (Classification::Busy, Some("awaiting_turn_start")));
    assert!(refused.detail.as_deref().is_some_and(|d| d.contains("composer holds unsent text")), "{refused:?}");
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));

    let mut command = rig.command(Operation::Admit, REQ2, "yo", ReturnMode::OneWay);
    command.paste_mode = PasteMode::Raw;
    rig.turn_started("turn-1", 1010); // clear awaiting from the first write
    rig.turn_completed("turn-1", "x", 1030);
    let mut snapshot = idle_snapshot("inc-1", 100);
    snapshot.position = 1030;
    rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
    let op = rig.submit(command);
    rig.turn_started("turn-2", 1040);
    rig.user_message("turn-2", "yo", 1050);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted);
    assert_eq!(rig.receipt(op).acknowledged, Some(true));
}

/// INP-1: bad prompts are `invalid` before anything else happens.
#[test]
fn inp_1_bad_prompts_are_invalid() {
    let mut rig = Rig::with_idle_zola();
    for (prompt, reason) in [("", "prompt_empty"), ("a\x1b[201~b", "prompt_control_character")] {
        let op = rig.admit(REQ, prompt, ReturnMode::OneWay);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some(reason));
    }
    let big = "x".repeat(limits::MAX_PROMPT_BYTES + 1);
    let op = rig.admit(REQ, &big, ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("prompt_too_large"));
    assert!(rig.refreshes.is_empty() && rig.durable.is_empty() && rig.writes() == 0);
}

/// INP-2: a malformed request id is `invalid` with no request id in the receipt.
#[test]
fn inp_2_malformed_request_id() {
    let mut rig = Rig::with_idle_zola();
    let op = rig.admit("not-a-uuid", "hi", ReturnMode::OneWay);
    let receipt = rig.receipt(op);
    assert_eq!(receipt.reason.as_deref(), Some("request_id_malformed"));
    assert!(receipt.request_id.is_none());
}

/// INP-2: the nil UUID (what an id left unset looks like) is refused with nothing written;
/// every prompt of a caller that never set its id would otherwise replay the first one's
/// receipt. The receipt names the id.
#[test]
fn inp_2_the_nil_uuid_is_no_request_id() {
    let mut rig = Rig::with_idle_zola();
    let nil = "00000000-0000-0000-0000-000000000000";
    let op = rig.admit(nil, "hi", ReturnMode::OneWay);
    let receipt = rig.receipt(op).clone();
    assert_eq!(receipt.classification, Classification::Invalid);
    assert_eq!(receipt.reason.as_deref(), Some("request_id_malformed"));
    assert!(receipt.detail.as_deref().is_some_and(|d| d.contains("nil UUID")), "{receipt:?}");
    assert_eq!(receipt.request_id.as_ref().map(RequestId::as_str), Some(nil));
    assert!(!receipt.prompt_written);
    assert_eq!(rig.writes(), 0);
    let op = rig.admit("00000000-0000-0000-0000-000000000001", "hi", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Accepted, "one bit set is an id");
}

/// INP-3: the final timeout is bounded and only meaningful with return-final.
#[test]
fn inp_3_timeout_range() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::ReturnFinal);
    command.final_timeout_ms = limits::MAX_FINAL_TIMEOUT_MS + 1;
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("final_timeout_out_of_range"));
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.final_timeout_ms = 5;
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("final_timeout_without_return_final"));
}

/// INP-4, INP-5: admit needs a well-formed incarnation; targets are bounded.
#[test]
fn inp_4_inp_5_incarnation_and_target() {
    let mut rig = Rig::with_idle_zola();
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.incarnation = None;
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("incarnation_required"));
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.incarnation = Some("a\nb".to_string());
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("incarnation_malformed"));
    let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
    command.target = "z".repeat(limits::MAX_TARGET_BYTES + 1);
    let op = rig.submit(command);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("target_malformed"));
    // White space: no name or id holds one (a target of spaces was `agent_unknown`).
    for target in ["   ", "zo la", " zola", "zola\u{a0}"] {
        let mut command = rig.command(Operation::Admit, REQ, "hi", ReturnMode::OneWay);
        command.target = target.to_string();
        let op = rig.submit(command);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some("target_malformed"), "{target:?}");
    }
    assert_eq!(rig.writes(), 0);
}

/// ADM-3: a snapshot older than observer events already applied (same session, smaller
/// position) never rolls the turn state back to idle.
#[test]
fn adm_3_stale_snapshot_does_not_roll_back_the_turn() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.turn_started("turn-1", 1010);
    // The refresh answer was taken at position 1000, before the turn started.
    rig.input(Input::ObserverSnapshot { agent_id: agent_id(ZOLA), snapshot: idle_snapshot("inc-1", 100) });
    let view = rig.engine.agent(&agent_id(ZOLA)).unwrap().view.clone().unwrap();
    assert_eq!(view.turn, TurnState::Busy { turn: Some(turn("turn-1")) });
    let op = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).classification, Classification::Busy);
}

/// ADM-5: a snapshot taken outside any admission (the catalog's) also ends the wait for a
/// written prompt's turn after the grace period.
#[test]
fn adm_5_catalog_snapshot_ends_the_wait() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "lost", ReturnMode::OneWay);
    assert!(rig.awaiting_turn_start());
    rig.advance(limits::AWAITING_TURN_GRACE_MS);
    rig.input(Input::ObserverSnapshot { agent_id: agent_id(ZOLA), snapshot: idle_snapshot("inc-1", 100) });
    assert!(!rig.awaiting_turn_start());
}

/// ADM-12: an agent removed and re-added while a write is in flight keeps that admission's
/// claim: a second admission is busy, so two payloads never splice.
#[test]
fn adm_12_claim_survives_agent_re_registration() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    rig.admit(REQ, "one", ReturnMode::OneWay);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    assert_eq!(rig.deliveries.len(), 1);
    rig.input(Input::AgentRemoved { agent_id: agent_id(ZOLA) });
    rig.input(Input::AgentUpserted(zola_facts("inc-1", 100)));
    let second = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(second).reason.as_deref(), Some("admission_in_progress"));
    assert_eq!(rig.deliveries.len(), 1);
}

/// A duplicate or unknown commit acknowledgement is ignored, never fatal.
#[test]
fn adm_11_duplicate_persist_ack_is_ignored() {
    let mut rig = Rig::with_idle_zola();
    rig.admit(REQ, "hi", ReturnMode::OneWay);
    rig.input(Input::PersistAcked { token: 1, result: Ok(()) });
    rig.input(Input::PersistAcked { token: 999_999, result: Err("late".to_string()) });
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert!(rig.receipt(op).replayed);
}

/// ADM-13, ADM-5: plain `send` may steer a running turn but never wipes a draft or answers an
/// interactive question.
#[test]
fn adm_13_plain_send_respects_drafts_and_questions() {
    for (composer, reason) in [(Composer::Draft, "composer_not_empty"), (Composer::Question, "interactive_question")] {
        let mut rig = Rig::with_idle_zola();
        let mut snapshot = idle_snapshot("inc-1", 100);
        snapshot.turn = TurnState::Busy { turn: Some(turn("turn-1")) };
        snapshot.composer = composer;
        rig.snapshots.insert(agent_id(ZOLA), Ok(snapshot));
        let command = rig.command(Operation::Send, REQ, "steer", ReturnMode::OneWay);
        let op = rig.submit(command);
        assert_eq!(rig.receipt(op).reason.as_deref(), Some(reason));
        assert_eq!(rig.writes(), 0);
    }
}

/// ADM-5: a failed write may still have put text (and the CR) into the composer: the agent
/// stays busy for the next admission.
#[test]
fn adm_5_failed_write_also_awaits_its_turn() {
    let mut rig = Rig::with_idle_zola();
    rig.delivery_outcome = DeliveryOutcome::Failed { bytes_written: 3, error: "EIO".to_string() };
    rig.admit(REQ, "one", ReturnMode::OneWay);
    rig.delivery_outcome = DeliveryOutcome::Complete;
    let op = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("awaiting_turn_start"));
}

/// ADM-13: old events replayed after a resume never acknowledge a new send whose text matches
/// an old prompt.
#[test]
fn adm_13_replayed_history_does_not_acknowledge() {
    let mut rig = Rig::with_idle_zola();
    let command = rig.command(Operation::Send, REQ, "same text", ReturnMode::OneWay);
    let op = rig.submit(command);
    rig.user_message("turn-0", "same text", 900); // history at or before the view's position
    assert!(!rig.has_receipt(op));
    rig.advance(limits::SEND_ACK_WAIT_MS);
    assert_eq!(rig.receipt(op).acknowledged, Some(false));
}

/// ADM-13, ADM-5 (PTY): a user message of the same text recorded before the write (within the
/// rollout's end the runtime read just before it, `record_end`, though the view had not read
/// it) neither acknowledges a send nor ends the agent's wait for the prompt's turn; our own,
/// recorded after it, does both.
#[test]
fn adm_13_a_same_text_message_recorded_before_the_write_neither_acknowledges_nor_ends_the_wait() {
    let mut rig = Rig::with_idle_zola();
    rig.record_end = Some(Cursor { session: session(), position: 1200 });
    let command = rig.command(Operation::Send, REQ, "continue", ReturnMode::OneWay);
    let op = rig.submit(command);
    rig.provider_turn("turn-human", "continue", "the human's final", 1100);
    assert!(!rig.has_receipt(op), "someone else's prompt acknowledged this send");
    assert!(rig.awaiting_turn_start(), "someone else's prompt ended the wait for this one's turn");
    rig.turn_started("turn-1", 1210);
    rig.user_message("turn-1", "continue", 1220);
    assert_eq!(rig.receipt(op).acknowledged, Some(true));
    assert!(!rig.awaiting_turn_start());
}

/// ADM-13, CORR-6 (one user message, one write): a plain send of the text of a return-final
/// prompt still waiting for its turn (the send joined that wait) is not acknowledged by the
/// turn's first message, which binds the request (input is read in order): it was, and the
/// send's receipt said its prompt was recorded while it could sit queued (a review). Its own
/// message, a steer into that turn here, acknowledges it; the request's turn then carries our
/// text twice, `indeterminate`.
#[test]
fn adm_13_a_send_is_not_acknowledged_by_an_earlier_requests_message_of_its_text() {
    let mut rig = Rig::with_idle_zola();
    let send = rig.same_text_send_joining_a_return_final_wait("again");
    assert!(!rig.has_receipt(send), "the request's message acknowledged the send: {:?}", rig.receipt(send));
    rig.user_message("turn-1", "again", 1_130); // the send's, steering the request's turn
    assert_eq!(rig.receipt(send).acknowledged, Some(true));
    let request = &rig.durable[&RequestId::parse(REQ).unwrap()];
    assert_eq!(request.terminal.as_ref().and_then(|t| t.reason.as_deref()), Some("prompt_twice_in_turn"), "{request:?}");
}

/// CORR-6 (PTY): a return-final prompt written over a composer the view could not classify
/// (a question on screen: the prompt may have answered it and never become a prompt, RF-7),
/// then a plain send of its text that joined its wait: the turn's first message of that text
/// may be the send's, so the request is `indeterminate`, never bound to it. The simulator
/// found one bound to the turn its same-text send opened, its final delivered (seed 36926).
/// Written over an empty composer, input order says the first message is the request's.
#[test]
fn corr_6_a_prompt_written_over_an_unseen_composer_is_not_bound_by_a_same_text_message_a_later_send_may_own() {
    let mut rig = Rig::with_idle_zola();
    let unseen = ObserverSnapshot { composer: Composer::Unknown, ..idle_snapshot("inc-1", 100) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(unseen));
    let op = rig.admit(REQ, "again", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, op), Classification::Accepted);
    assert!(rig.durable[&RequestId::parse(REQ).unwrap()].over_unseen_composer, "durable: a restart's reopened wait keeps no request of its prompts");
    rig.snapshots.insert(agent_id(ZOLA), Ok(idle_snapshot("inc-1", 100)));
    rig.advance(500);
    let command = rig.command(Operation::Send, REQ2, "again", ReturnMode::OneWay);
    rig.submit(command);
    assert_eq!(rig.writes(), 2, "a plain send is written whatever the wait");
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "again", 1_110);
    let request = &rig.durable[&RequestId::parse(REQ).unwrap()];
    let terminal = request.terminal.as_ref().expect("ended at the message");
    assert_eq!((terminal.state, terminal.reason.as_deref()), (TerminalState::Indeterminate, Some("same_text_prompt_unordered")), "{request:?}");

    let mut rig = Rig::with_idle_zola();
    rig.same_text_send_joining_a_return_final_wait("again"); // asserts the request is bound
    assert!(!rig.durable[&RequestId::parse(REQ).unwrap()].over_unseen_composer);
}

/// ADM-13, CORR-6 (one user message, one write): a plain send of the text of an earlier send
/// still unread (no message of it yet: the TUI may have queued it) is not acknowledged by the
/// first message of that text, which by input order is the earlier send's; the next one
/// acknowledges it. Found by the simulator's `caller.same_text_request` (seed 4690: there the
/// earlier prompt was a return-final request a failed commit had ended, so ADM-13's rule for
/// a request still waiting for its turn did not apply).
#[test]
fn adm_13_a_send_is_not_acknowledged_by_an_earlier_unread_writes_message_of_its_text() {
    let mut rig = Rig::with_idle_zola();
    let command = rig.command(Operation::Send, REQ, "again", ReturnMode::OneWay);
    let first = rig.submit(command);
    rig.advance(limits::SEND_ACK_WAIT_MS);
    assert_eq!(rig.receipt(first).acknowledged, Some(false), "nothing recorded yet");
    let command = rig.command(Operation::Send, REQ2, "again", ReturnMode::OneWay);
    let send = rig.submit(command);
    assert_eq!(rig.writes(), 2, "a plain send is written whatever the wait");
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "again", 1_110); // the first send's
    assert!(!rig.has_receipt(send), "the earlier send's message acknowledged the send: {:?}", rig.receipt(send));
    rig.user_message("turn-1", "again", 1_130); // the send's own
    assert_eq!(rig.receipt(send).acknowledged, Some(true));
    assert!(!rig.awaiting_turn_start(), "both prompts were recorded");
}

/// ADM-13 (one user message, one write): the send's own message acknowledges it although the
/// wait, which gives each message to the latest write first, took it for the earlier write of
/// its text, and the wait stays open for a third prompt never recorded (a review: the first
/// version blocked on any earlier write this message took, and the send got `false`).
#[test]
fn adm_13_a_sends_own_message_acknowledges_it_while_another_prompt_keeps_the_wait_open() {
    let mut rig = Rig::with_idle_zola();
    let first = rig.admit(REQ, "again", ReturnMode::OneWay);
    assert_eq!(classification(&rig, first), Classification::Accepted);
    let command = rig.command(Operation::Send, REQ2, "/never recorded", ReturnMode::OneWay);
    let other = rig.submit(command);
    rig.advance(limits::SEND_ACK_WAIT_MS);
    assert_eq!(rig.receipt(other).acknowledged, Some(false));
    let command = rig.command(Operation::Send, "fe57dc90-994e-4e73-b09c-fac483d9f05e", "again", ReturnMode::OneWay);
    let send = rig.submit(command);
    assert_eq!(rig.writes(), 3);
    rig.turn_started("turn-1", 1_100);
    rig.user_message("turn-1", "again", 1_110); // the first write's, by input order
    assert!(!rig.has_receipt(send), "{:?}", rig.receipt(send));
    rig.user_message("turn-1", "again", 1_110); // its replay (a resume after a loss)
    assert!(!rig.has_receipt(send), "a replay is no second message: {:?}", rig.receipt(send));
    rig.user_message("turn-1", "again", 1_130); // the send's
    assert_eq!(rig.receipt(send).acknowledged, Some(true));
    assert!(rig.awaiting_turn_start(), "the second prompt was never recorded");
}

/// ADM-5, ADM-17: the turn a write started may be observed before the write's outcome is known
/// (the monitor reads the rollout while the holder still answers). Its events and the
/// snapshot taken after them are applied in the order they arrived, once the outcome is
/// known, so the snapshot never makes the turn's own events look stale: the wait for the turn
/// ends at once and the next admission is accepted, not refused `awaiting_turn_start` until
/// the grace period runs out (the 10 s stall found by the benchmark).
#[test]
fn adm_17_a_turn_seen_during_the_write_ends_the_wait() {
    for return_mode in [ReturnMode::ReturnFinal, ReturnMode::OneWay] {
        let mut rig = Rig::with_idle_zola();
        rig.auto = Auto::Manual;
        let first = rig.admit(REQ, "one", return_mode);
        rig.refresh_next();
        rig.ack_next_persist(Ok(())); // registered: the write is asked for
        assert_eq!(rig.deliveries.len(), 1);
        // The monitor sees the whole turn, then sends its snapshot, before `Delivered`.
        rig.turn_started("turn-1", 1010);
        rig.user_message("turn-1", "one", 1020);
        rig.turn_completed("turn-1", "done", 1030);
        let mut after = idle_snapshot("inc-1", 100);
        after.position = 1030;
        after.turn = TurnState::Idle { last_completed: Some(turn("turn-1")) };
        rig.input(Input::ObserverSnapshot { agent_id: agent_id(ZOLA), snapshot: after.clone() });
        rig.snapshots.insert(agent_id(ZOLA), Ok(after));
        rig.auto = Auto::All;
        rig.settle();
        assert_eq!(classification(&rig, first), Classification::Accepted, "{return_mode:?}");
        let agent = rig.engine.agent(&agent_id(ZOLA)).unwrap();
        assert!(agent.awaiting_turn_after.is_none(), "{return_mode:?}: the turn was seen; nothing is awaited");
        let second = rig.admit(REQ2, "two", return_mode);
        assert_eq!(classification(&rig, second), Classification::Accepted, "{return_mode:?}: {:?}", rig.receipt(second));
        if return_mode == ReturnMode::ReturnFinal {
            let terminal = rig.terminal_for(REQ);
            assert_eq!(terminal.len(), 1, "the first request completed");
            assert_eq!(terminal[0].final_message.as_deref(), Some("done"));
        }
    }
}

/// ADM-13, ADM-17: a one-way `send` waiting for evidence is acknowledged by its own prompt
/// even when a snapshot newer than that prompt arrived during the write.
#[test]
fn adm_17_a_send_is_acknowledged_by_a_prompt_seen_during_the_write() {
    let mut rig = Rig::with_idle_zola();
    rig.auto = Auto::Manual;
    let command = rig.command(Operation::Send, REQ, "steer", ReturnMode::OneWay);
    let op = rig.submit(command);
    rig.refresh_next();
    rig.ack_next_persist(Ok(()));
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "steer", 1020);
    let mut after = idle_snapshot("inc-1", 100);
    after.position = 1020;
    after.turn = TurnState::Busy { turn: Some(turn("turn-1")) };
    rig.input(Input::ObserverSnapshot { agent_id: agent_id(ZOLA), snapshot: after });
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.auto = Auto::All;
    rig.settle();
    assert_eq!(rig.receipt(op).acknowledged, Some(true), "{:?}", rig.receipt(op));
}

/// ADM-4: the write names the pane's write count at the look the admission decided on, so the
/// holder refuses it (nothing written) when input reached the pane since: its Ctrl-U would
/// erase a draft typed after the look (a review lost 2 of 15). A managed line erases nothing
/// and names none; a refusal is `busy` / `input_since_look` (someone typed), retry-safe,
/// nothing written.
#[test]
fn adm_4_the_write_names_the_looks_write_count_and_a_refusal_writes_nothing() {
    let mut rig = Rig::with_idle_zola();
    rig.pane_writes = Some(7);
    let op = rig.admit(REQ, "hi", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted);
    assert_eq!(rig.expected_writes, vec![Some(7)]);
    let mut rig = Rig::with_idle_zola();
    rig.pane_writes = Some(9);
    rig.delivery_outcome = DeliveryOutcome::InputSinceLook { detail: "input reached the pane since the look".to_string() };
    let op = rig.admit(REQ2, "hi", ReturnMode::ReturnFinal);
    let receipt = rig.receipt(op);
    assert_eq!((receipt.prompt_written, receipt.retry_safe), (false, true), "{receipt:?}");
    assert_eq!((receipt.classification, receipt.reason.as_deref()), (Classification::Busy, Some("input_since_look")), "{receipt:?}");
    assert_eq!(rig.expected_writes, vec![Some(9)]);
}

/// ADM-19: another writer's Enter, `ago_ms` before the look, as the holder noted it.
fn enter_noted(rig: &Rig, ago_ms: u64) -> Option<pane_look::OtherEnterLook> {
    Some(pane_look::OtherEnterLook { noted_ms: 50_000 + rig.now - ago_ms, ago_ms, count: 0, recent: 0 })
}

/// The same Enter looked at again, `ms` later.
fn later(look: Option<pane_look::OtherEnterLook>, ms: u64) -> Option<pane_look::OtherEnterLook> {
    look.map(|look| pane_look::OtherEnterLook { ago_ms: look.ago_ms + ms, ..look })
}

/// Zola idle after `turn`, its last record ending at `position` of the rig's session.
fn idle_after(rig: &mut Rig, turn_id: &str, position: u64) {
    idle_after_in(rig, session(), turn_id, position);
}

/// Zola idle after `turn`, its last record ending at `position` of `in_session`.
fn idle_after_in(rig: &mut Rig, in_session: SessionId, turn_id: &str, position: u64) {
    let mut after = idle_snapshot("inc-1", 100);
    after.session = Some(in_session);
    after.position = position;
    after.turn = TurnState::Idle { last_completed: Some(turn(turn_id)) };
    rig.snapshots.insert(agent_id(ZOLA), Ok(after));
}

/// ADM-19 (PTY): another writer's Enter (a human's in `agent attach`, a raw input) whose turn
/// has not shown yet holds every prompt but a plain send. The real Codex 0.169 clears its
/// composer at the Enter and records the turn some 25 ms later: an admission in between saw an
/// idle agent with an empty composer, wrote its prompt before the human's records, the TUI
/// queued ours as the next turn, and with the same text the request completed with the human's
/// turn (`corr_6_real_codex_a_humans_prompt_of_the_same_text_is_never_taken_for_ours`).
#[test]
fn adm_19_another_writers_enter_holds_prompts_until_its_turn_shows() {
    let mut rig = Rig::with_idle_zola();
    rig.other_enter = enter_noted(&rig, 20);
    let held = |rig: &Rig, op: OpId| {
        let receipt = rig.receipt(op);
        (receipt.classification, receipt.reason.clone(), receipt.prompt_written)
    };
    let op = rig.admit(REQ, "continue", ReturnMode::ReturnFinal);
    assert_eq!(held(&rig, op), (Classification::Busy, Some("other_prompt_pending".to_string()), false));
    let mut no_steer = rig.command(Operation::Send, REQ2, "continue", ReturnMode::OneWay);
    no_steer.no_steer = true;
    let op = rig.submit(no_steer);
    assert_eq!(held(&rig, op), (Classification::Busy, Some("other_prompt_pending".to_string()), false));
    let submitted = rig.submit_text("continue", None);
    assert_eq!(rig.submit_receipt(submitted).reason.as_deref(), Some("other_prompt_pending"));
    assert_eq!(rig.writes(), 0, "nothing is written while the other prompt's turn may start");
    // The human's turn shows: the agent is busy for what it is; its end frees it.
    rig.advance(30);
    rig.turn_started("turn-h", 1100);
    rig.user_message("turn-h", "continue", 1110);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "continue", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("turn_active"));
    rig.turn_completed("turn-h", "the human's final", 1120);
    idle_after(&mut rig, "turn-h", 1120);
    rig.other_enter = later(rig.other_enter, 30); // the same Enter, looked at later
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05e", "continue", ReturnMode::ReturnFinal);
    assert_eq!(classification(&rig, op), Classification::Accepted, "{:?}", rig.receipt(op));
}

/// ADM-19: a plain send, which may steer (ADM-13), is written whatever the hold.
#[test]
fn adm_19_a_plain_send_is_not_held() {
    let mut rig = Rig::with_idle_zola();
    rig.other_enter = enter_noted(&rig, 0);
    let send = rig.command(Operation::Send, REQ, "a plain send", ReturnMode::OneWay);
    rig.submit(send);
    assert_eq!(rig.writes(), 1);
}

/// ADM-19: an Enter that starts no turn (an empty composer, a slash command) holds prompts
/// until the grace after it ends, and no longer; a look that cannot say (an older holder)
/// forgets no Enter reported before.
#[test]
fn adm_19_an_enter_that_starts_no_turn_holds_for_the_grace_only() {
    let mut rig = Rig::with_idle_zola();
    let enter = enter_noted(&rig, 0);
    rig.other_enter = enter;
    let op = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"));
    rig.advance(limits::OTHER_ENTER_GRACE_MS - 1);
    rig.other_enter = None; // this look could not say
    let op = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    rig.advance(1);
    rig.other_enter = later(enter, limits::OTHER_ENTER_GRACE_MS);
    let op = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted, "{:?}", rig.receipt(op));
}

/// ADM-19: the hold ends at a turn start or user message recorded after the Enter, judged by
/// position: past the view of the first complete look that reported the Enter. Records that
/// arrived after the Enter but lay in the rollout before that look (an old turn the monitor
/// had not delivered yet, or one deferred behind a write of ours, ADM-17) are no sign of the
/// Enter's turn (a review: judged by arrival, they ended the hold).
#[test]
fn adm_19_records_from_before_the_look_do_not_end_the_hold() {
    // Delivered after the Enter, before the look that reports it.
    let mut rig = Rig::with_idle_zola();
    rig.other_enter = enter_noted(&rig, 20);
    rig.provider_turn("turn-1", "quick", "done", 1010);
    idle_after(&mut rig, "turn-1", 1040);
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    // The same with no view before that refresh (lost, or a daemon just started): the floor is
    // what the refresh read, not the view it finds (the simulator's seed 12555: "anything
    // counts" let the replayed turn end the hold).
    let mut rig = Rig::with_idle_zola();
    rig.lose_the_view();
    rig.other_enter = enter_noted(&rig, 20);
    idle_after(&mut rig, "turn-1", 1040);
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    rig.provider_turn("turn-1", "quick", "done", 1010); // read again after a loss
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    // Arrived while a write of ours was in flight (deferred), applied after the Enter.
    let (mut rig, _first) = Rig::with_registered_zola(REQ, "one", ReturnMode::OneWay);
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "one", 1020);
    rig.advance(40);
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.auto = Auto::All;
    rig.settle();
    rig.turn_completed("turn-1", "done", 1030);
    idle_after(&mut rig, "turn-1", 1030);
    rig.other_enter = enter_noted(&rig, 20);
    let op = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    // Replayed (a resume reading the file again), they still lie before the floor.
    rig.turn_started("turn-1", 1010);
    rig.user_message("turn-1", "one", 1020);
    let op = rig.admit(REQ2, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    // The same Enter looked at again later is not moved past records that came after it.
    rig.advance(100);
    rig.turn_started("turn-h", 1100);
    rig.user_message("turn-h", "the human's", 1110);
    rig.turn_completed("turn-h", "done", 1120);
    idle_after(&mut rig, "turn-h", 1120);
    rig.other_enter = later(rig.other_enter, 100);
    let op = rig.admit("fe57dc90-994e-4e73-b09c-fac483d9f05d", "three", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted, "{:?}", rig.receipt(op));
}

/// ADM-19: a record of another session than the floor's says nothing of when it was recorded
/// (a session the human started and the observer found late, a fork holding copies of older
/// records): it does not end the hold, and the next refresh that reads a rollout to its end
/// takes the floor again, past which a record ends it (a review: counted as past, such a record
/// ended the hold). A look at an older Enter than the one known (a stale refresh's) changes
/// nothing.
#[test]
fn adm_19_a_record_of_another_session_does_not_end_the_hold() {
    let mut rig = Rig::with_idle_zola();
    let enter = enter_noted(&rig, 20);
    rig.other_enter = enter;
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"));
    let new_session = SessionId("sess-2".to_string());
    let prompted = |id: &str, position| ObserverEvent::UserMessage { session: new_session.clone(), turn: Some(turn(id)), prompt_hash: "h".to_string(), position };
    rig.observe(ObserverEvent::TurnStarted { session: new_session.clone(), turn: turn("turn-copy"), position: 50 });
    rig.observe(prompted("turn-copy", 55));
    rig.observe(ObserverEvent::TurnCompleted { session: new_session.clone(), turn: turn("turn-copy"), final_message: None, position: 60 });
    idle_after_in(&mut rig, new_session.clone(), "turn-copy", 60);
    rig.other_enter = enter.map(|look| pane_look::OtherEnterLook { noted_ms: look.noted_ms - 5_000, ago_ms: 5_000, ..look });
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    rig.other_enter = later(enter, 10); // the same Enter: this refresh takes the floor again
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
    // Past the floor that refresh took in the new session: the Enter's turn.
    rig.observe(ObserverEvent::TurnStarted { session: new_session.clone(), turn: turn("turn-h"), position: 70 });
    rig.observe(prompted("turn-h", 75));
    rig.observe(ObserverEvent::TurnCompleted { session: new_session.clone(), turn: turn("turn-h"), final_message: None, position: 80 });
    idle_after_in(&mut rig, new_session, "turn-h", 80);
    rig.other_enter = later(enter, 50);
    let op = rig.admit(REQ, "two", ReturnMode::OneWay);
    assert_eq!(classification(&rig, op), Classification::Accepted, "{:?}", rig.receipt(op));
}

/// ADM-19: the monitor's report of the Enter (the holder pushes it, `Input::OtherEnterNoted`)
/// comes with the snapshot the monitor read after it, before Codex records the Enter's turn:
/// that turn's records lie past the floor and end the hold, so a prompt after the human's turn
/// is written at once, not after the grace (the admission's look alone comes too late: its
/// read already holds the human's records, which then count for nothing). A report whose read
/// was cut (the turn unknown) sets no floor.
#[test]
fn adm_19_the_monitors_report_ends_the_hold_at_the_enters_turn() {
    for cut in [false, true] {
        let mut rig = Rig::with_idle_zola();
        let enter = enter_noted(&rig, 2);
        let mut snapshot = idle_snapshot("inc-1", 100);
        if cut {
            snapshot.turn = TurnState::Unknown;
        }
        rig.input(Input::OtherEnterNoted { agent_id: agent_id(ZOLA), enter: enter.unwrap(), snapshot });
        let reason = |rig: &Rig| rig.engine.catalog_view(&agent_id(ZOLA)).unwrap().return_final_blocker.map(|b| b.reason);
        if !cut {
            assert_eq!(reason(&rig), Some("other_prompt_pending"), "the report alone holds prompts");
        }
        rig.advance(25);
        rig.turn_started("turn-h", 1100);
        rig.user_message("turn-h", "continue", 1110);
        rig.turn_completed("turn-h", "the human's final", 1120);
        idle_after(&mut rig, "turn-h", 1120);
        rig.other_enter = later(enter, 30); // the admission's look: its read holds them
        let op = rig.admit(REQ2, "continue", ReturnMode::ReturnFinal);
        match cut {
            false => assert_eq!(classification(&rig, op), Classification::Accepted, "{:?}", rig.receipt(op)),
            true => assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "a cut read is no floor: {:?}", rig.receipt(op)),
        }
    }
}

/// ADM-19: a read that reported an older Enter than the one known is no floor of the newer
/// one: it may predate it (a review: the older Enter's report, arriving after the newer
/// Enter's cut look, gave the newer one its floor, and the older Enter's turn ended the hold).
#[test]
fn adm_19_an_older_enters_read_is_no_floor_of_a_newer_one() {
    let mut rig = Rig::with_idle_zola();
    let (older, newer) = (enter_noted(&rig, 30), enter_noted(&rig, 5));
    let mut cut = idle_snapshot("inc-1", 100);
    cut.turn = TurnState::Unknown;
    rig.input(Input::OtherEnterNoted { agent_id: agent_id(ZOLA), enter: newer.unwrap(), snapshot: cut });
    rig.input(Input::OtherEnterNoted { agent_id: agent_id(ZOLA), enter: older.unwrap(), snapshot: idle_snapshot("inc-1", 100) });
    rig.turn_started("turn-o", 1100); // the older Enter's turn
    rig.user_message("turn-o", "the older prompt", 1110);
    rig.turn_completed("turn-o", "done", 1120);
    idle_after(&mut rig, "turn-o", 1120);
    rig.other_enter = later(newer, 30);
    let op = rig.admit(REQ, "continue", ReturnMode::ReturnFinal);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"), "{:?}", rig.receipt(op));
}

/// ADM-19: the monitor's report of `enter`, its read at the baseline's end (1000).
fn enter_reported(rig: &mut Rig, enter: Option<pane_look::OtherEnterLook>) {
    rig.input(Input::OtherEnterNoted { agent_id: agent_id(ZOLA), enter: enter.unwrap(), snapshot: idle_snapshot("inc-1", 100) });
}

/// Zola's turn `id` of `prompt`, recorded from `start` on, ended; zola idle after it.
fn whole_turn(rig: &mut Rig, id: &str, prompt: &str, start: u64) {
    rig.turn_started(id, start);
    rig.user_message(id, prompt, start + 10);
    rig.turn_completed(id, "done", start + 20);
    idle_after(rig, id, start + 20);
}

/// ADM-19: the hold ends at a user message past the floor for the Enter's prompt and for each
/// other prompt in flight: one user message cannot be told from another (a same-text human's
/// is ours by every fingerprint), so the first other prompt's records are no sign of the
/// Enter's (a review: a second Enter within the 25 ms before Codex records the first, or a
/// human's Enter right after a write of ours, was held only until the first prompt's records
/// came, and the TUI may have queued the Enter's prompt behind that turn). Counted: the
/// previous Enter's prompt not shown yet, ours while ADM-5's wait is open, a plain send
/// written while it holds. A turn start alone is no prompt's record.
#[test]
fn adm_19_a_prompt_in_flight_at_the_enter_is_not_its_prompt() {
    let held = |rig: &mut Rig, request: &str, enter| {
        rig.other_enter = enter;
        let op = rig.admit(request, "continue", ReturnMode::OneWay);
        rig.receipt(op).reason.clone()
    };
    // Two Enters before the first one's turn is recorded.
    let mut rig = Rig::with_idle_zola();
    let (first, second) = (enter_noted(&rig, 10), enter_noted(&rig, 5));
    enter_reported(&mut rig, first);
    enter_reported(&mut rig, second);
    whole_turn(&mut rig, "turn-1", "the first Enter's", 1100);
    assert_eq!(held(&mut rig, REQ, later(second, 30)).as_deref(), Some("other_prompt_pending"), "the first Enter's turn");
    whole_turn(&mut rig, "turn-2", "the second Enter's", 1200);
    assert_eq!(held(&mut rig, REQ2, later(second, 60)), None, "both shown");

    // A human's Enter while our written prompt's turn has not shown (ADM-5's wait).
    let (mut rig, _first) = Rig::with_registered_zola(REQ, "ours", ReturnMode::OneWay);
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.auto = Auto::All;
    rig.settle();
    let enter = enter_noted(&rig, 2);
    enter_reported(&mut rig, enter);
    whole_turn(&mut rig, "turn-1", "ours", 1100);
    assert_eq!(held(&mut rig, REQ2, later(enter, 30)).as_deref(), Some("other_prompt_pending"), "our turn is no sign of the human's");
    whole_turn(&mut rig, "turn-h", "the human's", 1200);
    assert_eq!(held(&mut rig, "fe57dc90-994e-4e73-b09c-fac483d9f05d", later(enter, 60)), None);

    // A plain send written while the hold lasts, and a turn start with no user message.
    let mut rig = Rig::with_idle_zola();
    let enter = enter_noted(&rig, 2);
    enter_reported(&mut rig, enter);
    rig.other_enter = enter;
    let send = rig.command(Operation::Send, REQ, "a plain send", ReturnMode::OneWay);
    rig.submit(send);
    assert_eq!(rig.writes(), 1);
    rig.turn_started("turn-x", 1050);
    whole_turn(&mut rig, "turn-s", "a plain send", 1100);
    assert_eq!(held(&mut rig, REQ2, later(enter, 30)).as_deref(), Some("other_prompt_pending"), "the send's turn is no sign of the human's");
    whole_turn(&mut rig, "turn-h", "the human's", 1200);
    assert_eq!(held(&mut rig, "fe57dc90-994e-4e73-b09c-fac483d9f05d", later(enter, 60)), None);

    // Enters the holder counted that no look reported: between two known ones (the third of
    // three), or before the first one known (two within the grace, the simulator's seed 6860).
    let counted = |enter: Option<pane_look::OtherEnterLook>, count, recent| enter.map(|e| pane_look::OtherEnterLook { count, recent, ..e });
    for (first, second) in [(Some((1, 1)), (3, 3)), (None, (2, 2))] {
        let mut rig = Rig::with_idle_zola();
        if let Some((count, recent)) = first {
            let enter = counted(enter_noted(&rig, 40), count, recent);
            enter_reported(&mut rig, enter);
            whole_turn(&mut rig, "turn-1", "the first Enter's", 1010);
            rig.input(Input::OtherEnterNoted { agent_id: agent_id(ZOLA), enter: later(enter, 30).unwrap(), snapshot: rig.snapshots[&agent_id(ZOLA)].clone().unwrap() });
        }
        let enter = counted(enter_noted(&rig, 5), second.0, second.1);
        rig.input(Input::OtherEnterNoted { agent_id: agent_id(ZOLA), enter: enter.unwrap(), snapshot: rig.snapshots[&agent_id(ZOLA)].clone().unwrap() });
        whole_turn(&mut rig, "turn-2", "an Enter no look reported", 1100);
        assert_eq!(held(&mut rig, REQ, later(enter, 30)).as_deref(), Some("other_prompt_pending"), "{first:?}: one more prompt may come");
        whole_turn(&mut rig, "turn-3", "the last Enter's", 1200);
        assert_eq!(held(&mut rig, REQ2, later(enter, 60)), None, "{first:?}");
    }

    // A write of ours still in flight (its outcome not back) when the Enter comes, its record
    // arriving first; then that record replayed (a resume reading it again).
    let (mut rig, _ours) = Rig::with_registered_zola(REQ, "ours in flight", ReturnMode::OneWay);
    let enter = enter_noted(&rig, 1);
    enter_reported(&mut rig, enter);
    rig.turn_started("turn-1", 1100);
    rig.user_message("turn-1", "ours in flight", 1110);
    rig.user_message("turn-1", "ours in flight", 1110); // replayed: counted once
    rig.deliver_next(DeliveryOutcome::Complete);
    rig.auto = Auto::All;
    rig.settle();
    rig.turn_completed("turn-1", "done", 1120);
    idle_after(&mut rig, "turn-1", 1120);
    assert_eq!(held(&mut rig, REQ2, later(enter, 30)).as_deref(), Some("other_prompt_pending"), "our turn, twice, is no sign of the human's");
    whole_turn(&mut rig, "turn-h", "the human's", 1200);
    assert_eq!(held(&mut rig, "fe57dc90-994e-4e73-b09c-fac483d9f05d", later(enter, 60)), None);

    // A holder's counts at their limits overflow nothing (a review: the sum panicked).
    let mut rig = Rig::with_idle_zola();
    let huge = counted(enter_noted(&rig, 1), u64::MAX, u64::MAX);
    enter_reported(&mut rig, huge);
    assert_eq!(held(&mut rig, REQ, later(huge, 1)).as_deref(), Some("other_prompt_pending"));
    rig.advance(limits::OTHER_ENTER_GRACE_MS);
    assert_eq!(held(&mut rig, REQ2, later(huge, limits::OTHER_ENTER_GRACE_MS)), None, "the grace bounds it");

    // An Enter that took no prompt holds nothing past its grace, nor do the Enters before it
    // past theirs: the next Enter waits for its own prompt only.
    let mut rig = Rig::with_idle_zola();
    let empty = counted(enter_noted(&rig, 0), 1, 1);
    enter_reported(&mut rig, empty);
    rig.advance(limits::OTHER_ENTER_GRACE_MS + 5_000);
    let enter = counted(enter_noted(&rig, 2), 3, 1);
    enter_reported(&mut rig, enter);
    whole_turn(&mut rig, "turn-h", "the human's", 1100);
    assert_eq!(held(&mut rig, REQ, later(enter, 30)), None, "only its own prompt was in flight");
}

/// ADM-19: the hold's end by the grace is an announced timer: the catalog, which reads the
/// engine's time, says return-final is available again then, with no other input (the
/// real-Codex test waited 30 s on a catalog that kept saying `other_prompt_pending`).
#[test]
fn adm_19_the_holds_end_is_an_announced_timer() {
    let mut rig = Rig::with_idle_zola();
    rig.other_enter = enter_noted(&rig, 0);
    let op = rig.admit(REQ, "one", ReturnMode::OneWay);
    assert_eq!(rig.receipt(op).reason.as_deref(), Some("other_prompt_pending"));
    let reason = |rig: &Rig| rig.engine.catalog_view(&agent_id(ZOLA)).unwrap().return_final_blocker.map(|b| b.reason);
    assert_eq!(reason(&rig), Some("other_prompt_pending"));
    assert_eq!(rig.engine.poll_timeout(), Some(rig.now + limits::OTHER_ENTER_GRACE_MS));
    rig.advance(limits::OTHER_ENTER_GRACE_MS);
    assert_eq!(reason(&rig), None, "the catalog says available once the hold ended");
}
