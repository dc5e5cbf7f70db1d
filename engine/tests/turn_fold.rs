//! CORR-13: one turn-state fold. The engine's view follows `fold_turn` exactly over any event
//! sequence, and the fold keeps CORR-5's rules (a late or duplicate completion of another turn
//! never ends the running one; evidence lost means unknown).

mod support;

use proptest::prelude::*;
use support::{agent_id, idle_snapshot, session, turn, Rig, ZOLA};
use wakterm_engine::{fold_turn, Input, ObserverEvent, TurnState};

/// One observer event without its position (assigned in order when applied).
#[derive(Clone, Debug)]
enum Step {
    Attached,
    Started(u8),
    User(Option<u8>),
    Completed(u8),
    Aborted(Option<u8>),
    Lost,
    Exited,
}

fn step() -> impl Strategy<Value = Step> {
    let id = 0u8..4;
    prop_oneof![
        Just(Step::Attached),
        id.clone().prop_map(Step::Started),
        proptest::option::of(id.clone()).prop_map(Step::User),
        id.clone().prop_map(Step::Completed),
        proptest::option::of(id).prop_map(Step::Aborted),
        Just(Step::Lost),
        Just(Step::Exited),
    ]
}

fn event(step: &Step, position: u64) -> ObserverEvent {
    let t = |n: &u8| turn(&format!("t{n}"));
    match step {
        Step::Attached => ObserverEvent::Attached { session: session(), position },
        Step::Started(n) => ObserverEvent::TurnStarted { session: session(), turn: t(n), position },
        Step::User(n) => ObserverEvent::UserMessage { session: session(), turn: n.as_ref().map(t), prompt_hash: "h".into(), position },
        Step::Completed(n) => ObserverEvent::TurnCompleted { session: session(), turn: t(n), final_message: Some("f".into()), position },
        Step::Aborted(n) => ObserverEvent::TurnAborted { session: session(), turn: n.as_ref().map(t), position },
        Step::Lost => ObserverEvent::SessionLost { reason: "lost".into(), session: None, before: None },
        Step::Exited => ObserverEvent::ProcessExited { drained: true },
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// CORR-13: the engine's view is the fold, step by step.
    #[test]
    fn corr_13_engine_view_is_the_one_fold(steps in proptest::collection::vec(step(), 1..40)) {
        let mut rig = Rig::with_idle_zola();
        rig.input(Input::ObserverSnapshot { agent_id: agent_id(ZOLA), snapshot: idle_snapshot("inc-1", 100) });
        let view = |rig: &Rig| rig.engine.agent(&agent_id(ZOLA)).and_then(|a| a.view.clone()).expect("a view").turn;
        let mut expected = view(&rig);
        let base = rig.engine.agent(&agent_id(ZOLA)).and_then(|a| a.view.clone()).expect("a view").position;
        for (i, step) in steps.iter().enumerate() {
            let event = event(step, base + 1 + i as u64);
            expected = fold_turn(&expected, &event);
            rig.observe(event);
            prop_assert_eq!(view(&rig), expected.clone(), "after {:?}", step);
        }
    }

    /// CORR-5 and CORR-13: the fold's own rules, from any state.
    #[test]
    fn corr_13_fold_keeps_the_late_completion_guard(prefix in proptest::collection::vec(step(), 0..20), last in step()) {
        let state = prefix.iter().enumerate().fold(TurnState::Unknown, |s, (i, step)| fold_turn(&s, &event(step, i as u64)));
        let next = fold_turn(&state, &event(&last, 99));
        match (&state, &last) {
            (_, Step::Started(n)) => prop_assert_eq!(next, TurnState::Busy { turn: Some(turn(&format!("t{n}"))) }),
            (_, Step::Lost | Step::Exited) => prop_assert_eq!(next, TurnState::Unknown),
            (_, Step::Attached) => prop_assert_eq!(next, state.clone()),
            (TurnState::Busy { turn: Some(running) }, Step::Completed(n)) if running.0 != format!("t{n}") => {
                prop_assert_eq!(next, state.clone(), "a late completion ended the running turn");
            }
            (_, Step::Completed(n)) => {
                let done = TurnState::Idle { last_completed: Some(turn(&format!("t{n}"))) };
                prop_assert_eq!(&next, &done);
                prop_assert_eq!(fold_turn(&next, &event(&last, 100)), done, "a duplicate completion changes nothing");
            }
            (TurnState::Idle { .. }, Step::User(_)) => {
                let busy = matches!(next, TurnState::Busy { .. });
                prop_assert!(busy, "a user message while idle starts a turn");
            }
            (_, Step::User(_)) => prop_assert_eq!(next, state.clone()),
            (_, Step::Aborted(_)) => {
                let ended_or_kept = matches!(next, TurnState::Idle { .. }) || next == state;
                prop_assert!(ended_or_kept, "an abort ends a turn or leaves another running one");
            }
        }
    }
}
