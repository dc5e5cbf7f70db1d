//! The engine's side of the durable event stream (EV-1..EV-7): making events from what the
//! engine learns, batching them per agent, committing them with their mark and checkpoint,
//! and publishing them in sequence order once durable. The event kinds live in `events.rs`.

use crate::agent::AgentFacts;
use crate::engine::{Engine, PersistPurpose};
use crate::events::{AgentEvent, EventBody, EventMark, AGENT_EVENTS_SCHEMA};
use crate::ids::{AgentId, Incarnation, RequestId};
use crate::io::{Output, PersistOp};
use crate::limits::PERSIST_RETRY_MS;
use crate::observer::ObserverEvent;
use crate::request::Phase;
use std::collections::{BTreeMap, BTreeSet};

/// Items in one agent event batch: far below the store's per-batch operation limit.
pub const MAX_EVENT_BATCH: usize = 1024;
/// EV-3: about the bytes of one agent event batch (`AgentEvent::bulk_bytes`; a checkpoint by
/// its JSON). A batch takes its first item whatever its size, then stops before the item that
/// would pass this. The store writer commits every agent's batches in turn, so a batch of a
/// thousand 2 MiB messages held every other agent's admission commit behind it (a review);
/// now another agent waits for about this much at most (one 2 MiB message at a time: an
/// admission to another agent during a 190 MB burst took 0.14 s at most, 0.27 s at 8 MiB).
pub const MAX_EVENT_BATCH_BYTES: usize = 2 * 1024 * 1024;

/// EV-3: retries in a row a failed batch keeps its numbers for (one each `PERSIST_RETRY_MS`:
/// 30 s), so the agent's order holds through a store outage of that length.
pub const MAX_KEPT_TRIES: u32 = 30;

/// Where one assigned sequence is on its way to subscribers (EV-2). A number whose commit
/// failed (abandoned: skipped; its event, if still true, got a new one) has no slot: a store
/// that fails every commit renumbers an agent's whole backlog at each retry, and keeping
/// those numbers grew the engine's memory with the square of the outage (a review measured
/// 72,841 slots for 1,201 events after 120 s).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    Pending,
    Committed(AgentEvent),
}

/// What an agent's next event batch commits, in the order it was learned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum BacklogItem {
    /// An event and the agent's mark right after it was made (EV-4), so any prefix of the
    /// backlog commits with the mark that covers exactly it.
    Event(AgentEvent, EventMark),
    /// EV-5: an observer checkpoint, committed after the events before it.
    Checkpoint(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventStream {
    pub next_sequence: u64,
    pub published_through: u64,
    /// EV-4: per agent, what has been made (and, once its batch commits, durably reported).
    pub marks: BTreeMap<AgentId, EventMark>,
    pub backlog: BTreeMap<AgentId, Vec<BacklogItem>>,
    /// EV-3: the one batch in flight per agent (its commit token and items).
    pub in_flight: BTreeMap<AgentId, (u64, Vec<BacklogItem>)>,
    /// Agents whose failed batch waits for its retry time.
    pub retry_at: BTreeMap<AgentId, u64>,
    /// EV-3: per agent, how many retries in a row its failed batch kept its numbers for (see
    /// `keeps_numbers`); reset when a batch of the agent commits.
    pub kept_tries: BTreeMap<AgentId, u32>,
    /// Request events riding on a request commit, by its token (EV-6).
    pub riding: BTreeMap<u64, Vec<AgentEvent>>,
    pub slots: BTreeMap<u64, Slot>,
    /// EV-7: agents whose observer has not been seen attached or lost since the restart.
    pub recovered_unattached: BTreeSet<AgentId>,
    /// Agents recovered with a mark and not registered since the restart.
    pub recovered_unregistered: BTreeSet<AgentId>,
    /// LIVE-1, EV-14: of those, the ones the runtime still holds, unreachable
    /// (`Input::AgentUnreachable`): not stopped when the startup completes.
    pub held_unregistered: BTreeSet<AgentId>,
    /// EV-13: per agent, the records after a restart's resume point held until the record at
    /// the mark proves (or disproves) the file.
    pub replay: BTreeMap<AgentId, crate::event_replay::ReplayZone>,
    /// ADM-5, EV-13: per agent, the proof of the file a zone closed by a loss still waited
    /// for (`crate::event_replay::FloorProof`).
    pub proofs: BTreeMap<AgentId, crate::event_replay::FloorProof>,
    /// EV-3, EV-13: per agent, its requests whose end is not durable yet and must be before the
    /// agent's next batch (`Engine::batches_follow_the_end`): the batches wait for them.
    pub ends_first: BTreeMap<AgentId, BTreeSet<RequestId>>,
    /// Requests whose `request.bound` is made (so a progress retry does not repeat it).
    pub bound_announced: BTreeSet<RequestId>,
    /// EV-6: requests whose receipt is not durable yet, so the next commit of their record
    /// carries `request.admitted`: set when an admission starts confirming (whatever commit
    /// confirms it: the confirm, or a terminal at admission), when a failed confirm's record is
    /// committed again, and by REC-1 for registrations a restart settles.
    pub admitted_due: BTreeSet<RequestId>,
}

impl Default for EventStream {
    fn default() -> Self {
        EventStream {
            next_sequence: 1,
            published_through: 0,
            marks: BTreeMap::new(),
            backlog: BTreeMap::new(),
            in_flight: BTreeMap::new(),
            retry_at: BTreeMap::new(),
            kept_tries: BTreeMap::new(),
            riding: BTreeMap::new(),
            slots: BTreeMap::new(),
            recovered_unattached: BTreeSet::new(),
            replay: BTreeMap::new(),
            proofs: BTreeMap::new(),
            ends_first: BTreeMap::new(),
            recovered_unregistered: BTreeSet::new(),
            held_unregistered: BTreeSet::new(),
            bound_announced: BTreeSet::new(),
            admitted_due: BTreeSet::new(),
        }
    }
}

impl EventStream {
    /// EV-1: continues after the last durable sequence, from the durable marks.
    pub fn recover(last_sequence: u64, marks: Vec<EventMark>) -> EventStream {
        let mut stream = EventStream { next_sequence: last_sequence + 1, published_through: last_sequence, ..EventStream::default() };
        for mark in marks {
            // EV-7: the stream reports a session: its first loss after the restart is a gap.
            if mark.reported_session().is_some() {
                stream.recovered_unattached.insert(mark.agent_id.clone());
            }
            stream.recovered_unregistered.insert(mark.agent_id.clone());
            if let Some(zone) = crate::event_replay::ReplayZone::for_mark(&mark) {
                stream.replay.insert(mark.agent_id.clone(), zone);
            }
            stream.marks.insert(mark.agent_id.clone(), mark);
        }
        stream
    }

    fn assign(&mut self) -> u64 {
        let sequence = self.next_sequence;
        self.next_sequence += 1;
        assert!(sequence > self.published_through, "EV-1: sequences only grow");
        self.slots.insert(sequence, Slot::Pending);
        sequence
    }

    fn make(&mut self, now_ms: u64, agent_id: &AgentId, incarnation: Option<Incarnation>, body: EventBody) -> AgentEvent {
        let sequence = self.assign();
        AgentEvent { schema: AGENT_EVENTS_SCHEMA.to_string(), sequence, at_ms: now_ms, agent_id: agent_id.clone(), incarnation, body }
    }

    /// A pending number's commit answered: committed (kept until published) or abandoned
    /// (forgotten: the numbers between the slots left are the abandoned ones).
    fn settle(&mut self, sequence: u64, committed: Option<AgentEvent>) {
        let slot = self.slots.remove(&sequence).expect("a settled sequence was assigned");
        assert_eq!(slot, Slot::Pending, "EV-2: a sequence settles once");
        if let Some(event) = committed {
            assert_eq!(event.sequence, sequence, "EV-2: an event settles under its own number");
            self.slots.insert(sequence, Slot::Committed(event));
        }
    }

    /// EV-2: the committed prefix, in order; abandoned numbers are skipped. EV-1: an abandoned
    /// number is passed only together with a committed one after it: that one is durable, so a
    /// restart (which numbers on after the greatest durable sequence) never numbers an event
    /// at or below what was passed. Abandoned numbers with nothing committed after them stay
    /// unpassed: the settled mark (the catalog's `events_through`, a heartbeat's
    /// `last_sequence`) stops before them, so no reader is told of them and a restart may
    /// number from there again. Passing them used to let a restart after a failed commit reuse
    /// numbers readers had been told were passed: a consumer at that cursor missed the events.
    fn take_publishable(&mut self) -> Vec<AgentEvent> {
        let mut ready = Vec::new();
        while let Some(through) = self.next_passable() {
            while let Some(entry) = self.slots.first_entry().filter(|entry| *entry.key() <= through) {
                let (sequence, slot) = entry.remove_entry();
                if let Slot::Committed(event) = slot {
                    ready.push(event);
                }
                assert!(sequence > self.published_through, "EV-2: published sequences strictly increase");
                self.published_through = sequence;
            }
        }
        ready
    }

    /// The next committed sequence the settled mark may move to: the first slot's when it is
    /// committed (abandoned numbers before it, which have no slot, are passed with it).
    fn next_passable(&self) -> Option<u64> {
        match self.slots.first_key_value()? {
            (sequence, Slot::Committed(_)) => Some(*sequence),
            (_, Slot::Pending) => None,
        }
    }

    /// The last number whose event the engine's view reflects: the greatest assigned one not
    /// abandoned (EV-8; see `take_publishable` for why abandoned ones at the end do not count).
    fn reflected_through(&self) -> u64 {
        let assigned = self.slots.last_key_value().map(|(sequence, _)| *sequence);
        assigned.unwrap_or(self.published_through).max(self.published_through)
    }

    /// EV-3: the numbers held in memory (assigned and not yet published): at most one per
    /// event not yet durable, however often its commit failed.
    pub(crate) fn numbers_held(&self) -> usize {
        self.slots.len()
    }

    /// EV-3: a request event of the agent numbered after `first` is committed (not yet
    /// published: `first` is still pending) or riding a request commit in flight. Every number
    /// of the agent's own events after `first` is in its failed batch or queued behind it, so
    /// a later number of the agent outside them is one of its request events (EV-6).
    fn request_event_after(&self, agent_id: &AgentId, first: u64) -> bool {
        let committed = self.slots.range(first + 1..).any(|(_, slot)| matches!(slot, Slot::Committed(event) if event.agent_id == *agent_id));
        committed || self.riding.values().flatten().any(|event| event.agent_id == *agent_id && event.sequence > first)
    }

    /// EV-3: a failed batch keeps its numbers for its retry when a request event of its agent
    /// numbered after them committed or may commit (a request's commit can be submitted before
    /// the agent's batch of events learned earlier, and succeed where the batch failed):
    /// renumbered, `turn.started` would come after the `request.bound` that refers to it. At
    /// most `MAX_KEPT_TRIES` retries in a row: a batch that cannot commit under its numbers (a
    /// tiny retention pruned past them) must not hold every later event back for good.
    fn keeps_numbers(&self, agent_id: &AgentId, items: &[BacklogItem]) -> bool {
        // What queued behind the batch is renumbered with it: its numbers count too (a batch
        // of a checkpoint alone can fail with the agent's events queued behind it).
        let queued = self.backlog.get(agent_id).map(Vec::as_slice).unwrap_or_default();
        let first = items.iter().chain(queued).find_map(|item| match item {
            BacklogItem::Event(event, _) => Some(event.sequence),
            BacklogItem::Checkpoint(_) => None,
        });
        let tries = self.kept_tries.get(agent_id).copied().unwrap_or(0);
        first.is_some_and(|first| tries < MAX_KEPT_TRIES && self.request_event_after(agent_id, first))
    }

    /// EV-3: the numbers of the events on their way to a commit: queued, in flight, or riding
    /// a request's commit (checkpoints have none).
    fn numbers_on_their_way(&self) -> impl Iterator<Item = u64> + '_ {
        let queued = self.backlog.values().chain(self.in_flight.values().map(|(_, items)| items)).flatten();
        let numbered = queued.filter_map(|item| match item {
            BacklogItem::Event(event, _) => Some(event.sequence),
            BacklogItem::Checkpoint(_) => None,
        });
        numbered.chain(self.riding.values().flatten().map(|event| event.sequence))
    }

    /// EV-3: every pending number is an event on its way, each once; a failed number is
    /// forgotten (a store failing every commit would otherwise hold one per event per retry).
    pub(crate) fn assert_numbers_accounted(&self) {
        let mut on_their_way = BTreeSet::new();
        for sequence in self.numbers_on_their_way() {
            assert!(on_their_way.insert(sequence), "EV-3: number {sequence} is on its way twice");
            assert_eq!(self.slots.get(&sequence), Some(&Slot::Pending), "EV-3: an event on its way holds a pending number");
        }
        let pending = self.slots.values().filter(|slot| **slot == Slot::Pending).count();
        assert_eq!(pending, on_their_way.len(), "EV-3: a pending number without an event on its way");
    }
}

/// EV-3: how many of the backlog's first items make the next batch: at most
/// [`MAX_EVENT_BATCH`] items and [`MAX_EVENT_BATCH_BYTES`], at least one.
fn batch_len(backlog: &[BacklogItem]) -> usize {
    let mut bytes = 0usize;
    let fits = backlog.iter().take(MAX_EVENT_BATCH).take_while(|item| {
        bytes = bytes.saturating_add(match item {
            BacklogItem::Event(event, _) => event.bulk_bytes(),
            BacklogItem::Checkpoint(json) => json.len(),
        });
        bytes <= MAX_EVENT_BATCH_BYTES
    });
    fits.count().max(1).min(backlog.len())
}

/// A newer checkpoint queued behind a failed batch supersedes the failed batch's own (EV-5:
/// the one kept is the last, after every event it covers).
fn newest_checkpoint_only(items: Vec<BacklogItem>) -> Vec<BacklogItem> {
    let newest = items.iter().rposition(|item| matches!(item, BacklogItem::Checkpoint(_)));
    items
        .into_iter()
        .enumerate()
        .filter(|(i, item)| !matches!(item, BacklogItem::Checkpoint(_)) || Some(*i) == newest)
        .map(|(_, item)| item)
        .collect()
}

/// The `observer.gap` reason when the first look after a restart attaches to another session
/// than the one the stream last reported attached (EV-7).
pub const SESSION_CHANGED_WHILE_DOWN: &str = "session_changed_while_down";

/// OBS-4, EV-7, REC-2: the reason code of a session the stream reported (or a startup resume
/// asked for) whose rollout the agent's process no longer holds after a restart: the file
/// removed, replaced by one of another working directory or copied over by another session's
/// while the daemon was down, or closed by Codex (`/new` before the next session's first
/// turn). Its records after the mark are not followed.
pub const ROLLOUT_NOT_HELD_WHILE_DOWN: &str = "rollout_not_held_while_down";

/// EV-4: the events one observer event makes, advancing `mark`. Pure, so the simulator's
/// ground truth and the engine use the same mapping.
pub fn observed_events(mark: &mut EventMark, event: &ObserverEvent, after_restart: bool) -> Vec<EventBody> {
    if let (Some(session), Some(position)) = (event.session(), event.position()) {
        if !matches!(event, ObserverEvent::Attached { .. }) {
            if mark.covers(session, position) {
                return Vec::new();
            }
            mark.session = Some(session.clone());
            mark.position = position;
            mark.fingerprint = Some(crate::event_replay::record_fingerprint(event)); // EV-13
            mark.note_prompts_and_lines(event); // ADM-5, durable with the event it notes
        }
    }
    match event {
        ObserverEvent::Attached { session, position } => {
            let mut bodies = Vec::new();
            // EV-7: the first look after a restart finds the observer on another session than
            // the one the stream reported attached: what the old one recorded after the mark
            // while the daemon was down will never be reported. Say so.
            // The session the stream reports (`reported_session`): records of it reported
            // after a loss, without an attach, are as much at stake (review of 2e55edf).
            if let Some(old) = mark.reported_session().cloned().filter(|old| after_restart && old != session) {
                let after_position = if mark.session.as_ref() == Some(&old) { mark.position } else { 0 };
                let reason = SESSION_CHANGED_WHILE_DOWN.to_string();
                bodies.push(EventBody::ObserverGap { reason, session: Some(old), after_position });
                mark.attached = None;
            }
            if mark.session.as_ref() != Some(session) {
                mark.session = Some(session.clone());
                mark.position = *position;
                mark.fingerprint = None;
                mark.forget_turns();
            }
            if mark.attached.as_ref() != Some(session) {
                mark.attached = Some(session.clone());
                bodies.push(EventBody::ObserverAttached { session: session.clone(), position: *position });
            }
            bodies
        }
        // MGD-4: a loss wholly at or before what the stream reported in that session (a late
        // resume's cursor in an earlier process's output; output the holder evicted, read
        // again after a restart) takes nothing from the stream.
        ObserverEvent::SessionLost { session: Some(session), before: Some(before), .. } if mark.covers(session, *before) => Vec::new(),
        ObserverEvent::SessionLost { reason, .. } => {
            // EV-7: a loss of the session the stream reports (a loss naming another one never
            // gets here: `report_observed`). Records of it reported without an attach count:
            // see `EventMark::reported_session`.
            let reported = mark.reported_session().is_some();
            mark.attached = None;
            if !reported {
                return Vec::new(); // nothing of it was reported: nothing is lost (EV-7)
            }
            let session = mark.session.take();
            let after_position = std::mem::take(&mut mark.position);
            mark.fingerprint = None;
            mark.forget_turns();
            // After a loss the session's records are read afresh: what follows is new.
            match after_restart {
                true => vec![EventBody::ObserverGap { reason: reason.clone(), session, after_position }],
                false => vec![EventBody::ObserverLost { reason: reason.clone() }],
            }
        }
        ObserverEvent::ProcessExited { drained } => match mark.exited {
            true => Vec::new(),
            false => {
                mark.exited = true;
                vec![EventBody::AgentExited { drained: *drained }]
            }
        },
        ObserverEvent::TurnStarted { session, turn, position } => {
            vec![EventBody::TurnStarted { session: session.clone(), provider_turn_id: turn.clone(), position: *position }]
        }
        ObserverEvent::UserMessage { session, turn, prompt_hash, position } => vec![EventBody::UserMessage {
            session: session.clone(),
            provider_turn_id: turn.clone(),
            prompt_hash: prompt_hash.clone(),
            position: *position,
        }],
        ObserverEvent::AgentMessage { session, turn, text, phase, position } => {
            // RF-9: a message too large to store is announced by its size, never carried.
            let too_large = crate::observer::final_too_large(text);
            vec![EventBody::AssistantMessage {
                session: session.clone(),
                provider_turn_id: turn.clone(),
                text: too_large.is_none().then(|| text.clone()),
                text_too_large: too_large.map(|bytes| bytes as u64),
                phase: phase.clone(),
                position: *position,
            }]
        }
        ObserverEvent::PlanUpdated { session, turn, explanation, plan, position } => {
            // RF-9: a plan too large to store is announced by its size, never carried.
            let too_large = crate::observer::json_too_large(&(explanation, plan));
            vec![EventBody::PlanUpdated {
                session: session.clone(),
                provider_turn_id: turn.clone(),
                explanation: explanation.clone().filter(|_| too_large.is_none()),
                plan: too_large.is_none().then(|| plan.clone()),
                plan_too_large: too_large.map(|bytes| bytes as u64),
                position: *position,
            }]
        }
        ObserverEvent::TurnCompleted { session, turn, final_message, position } => {
            // RF-9: a final too large to store is announced by its size, never carried.
            let too_large = final_message.as_deref().and_then(crate::observer::final_too_large);
            let completed = EventBody::TurnCompleted {
                session: session.clone(),
                provider_turn_id: turn.clone(),
                position: *position,
                final_too_large: too_large.map(|bytes| bytes as u64),
            };
            let last = final_message.as_ref().filter(|_| too_large.is_none()).map(|text| EventBody::TurnFinal {
                session: session.clone(),
                provider_turn_id: turn.clone(),
                final_message: text.clone(),
                position: *position,
            });
            std::iter::once(completed).chain(last).collect()
        }
        ObserverEvent::TurnAborted { session, turn, position } => {
            vec![EventBody::TurnAborted { session: session.clone(), provider_turn_id: turn.clone(), position: *position }]
        }
        // MGD-7: a refused request started nothing; the request it ends says so in its own
        // terminal event.
        ObserverEvent::RequestRefused { .. } => Vec::new(),
        // CORR-15: evidence of whose prompt a turn carries, not an event of the agent's.
        ObserverEvent::TurnAccepted { .. } => Vec::new(),
    }
}

/// The lifecycle events an agent registration makes, advancing `mark` (None: first seen).
pub fn registration_events(mark: Option<&mut EventMark>, facts: &AgentFacts) -> (Option<EventMark>, Vec<EventBody>) {
    let Some(mark) = mark else {
        let mut mark = EventMark::new(facts.agent_id.clone());
        mark.incarnation = facts.incarnation.clone();
        let started = EventBody::AgentStarted { name: facts.name.clone(), transport: facts.transport };
        return (Some(mark), vec![started]);
    };
    if facts.incarnation.is_none() || facts.incarnation == mark.incarnation {
        return (None, Vec::new());
    }
    let previous = mark.incarnation.replace(facts.incarnation.clone().expect("checked"));
    // A new process: nothing of the old one's observer carries over.
    *mark = EventMark { incarnation: mark.incarnation.clone(), ..EventMark::new(mark.agent_id.clone()) };
    (None, vec![EventBody::IncarnationChanged { previous }])
}

impl Engine {
    fn incarnation_of(&self, agent_id: &AgentId) -> Option<Incarnation> {
        self.agents.get(agent_id).and_then(|a| a.facts.incarnation.clone())
    }

    /// Numbers the events one fact made. Only the last carries the mark after the fact; the
    /// others carry the mark before it, so a batch that ends between them does not claim the
    /// fact reported in full (EV-4).
    pub(crate) fn queue(&mut self, agent_id: &AgentId, incarnation: Option<Incarnation>, bodies: Vec<EventBody>, before: EventMark) {
        let after = self.events.marks.get(agent_id).cloned().unwrap_or_else(|| EventMark::new(agent_id.clone()));
        let count = bodies.len();
        for (index, body) in bodies.into_iter().enumerate() {
            let event = self.events.make(self.now_ms, agent_id, incarnation.clone(), body);
            let mark = if index + 1 == count { after.clone() } else { before.clone() };
            self.events.backlog.entry(agent_id.clone()).or_default().push(BacklogItem::Event(event, mark));
        }
    }

    /// EV-4: an observer event as it arrives, under the incarnation registered now; after a
    /// restart, records that may be replays wait for proof (EV-13).
    pub(crate) fn record_observed(&mut self, agent_id: &AgentId, event: &ObserverEvent) {
        let incarnation = self.incarnation_of(agent_id);
        self.judge_floor_proof(agent_id, event); // ADM-5: before the zone, which it outlives
        if !self.replay_take(agent_id, event, &incarnation) {
            self.report_observed(agent_id, event, incarnation);
        }
    }

    /// EV-4: the events an observer event makes, against the agent's mark.
    pub(crate) fn report_observed(&mut self, agent_id: &AgentId, event: &ObserverEvent, incarnation: Option<Incarnation>) {
        // EV-7: a resume that could not re-attach another session than the one the stream
        // reports attached says nothing about that one (nor ends the wait for the first look).
        if let ObserverEvent::SessionLost { session: Some(lost), .. } = event {
            let reported = self.events.marks.get(agent_id).and_then(EventMark::reported_session);
            if reported.is_some_and(|reported| reported != lost) {
                return;
            }
        }
        let after_restart = self.events.recovered_unattached.contains(agent_id);
        if matches!(event, ObserverEvent::Attached { .. } | ObserverEvent::SessionLost { .. }) {
            self.events.recovered_unattached.remove(agent_id);
        }
        let next_event = self.events.next_sequence;
        let mark = self.events.marks.entry(agent_id.clone()).or_insert_with(|| EventMark::new(agent_id.clone()));
        let before = mark.clone();
        let bodies = observed_events(mark, event, after_restart);
        mark.had_session |= mark.reported_session().is_some(); // OBS-4
        if let Some(noted) = mark.prompts_taken.last_mut().filter(|p| p.noted_at_event.is_none()) {
            noted.noted_at_event = Some(next_event); // ADM-5: the record's events follow
        }
        self.queue(agent_id, incarnation, bodies, before);
    }

    pub(crate) fn record_registration(&mut self, facts: &AgentFacts) {
        let first_since_restart = self.events.recovered_unregistered.remove(&facts.agent_id);
        let mark = self.events.marks.get(&facts.agent_id);
        // EV-4: the first registration after a restart finds no process where the stream last
        // announced one alive (it exited while the daemon was down, unobserved), or any
        // registration finds another process there: the announced one ended unobserved, and
        // its exit comes before the next one's `agent.incarnation_changed` (a process replaced
        // while the daemon was down, a daemon killed during `agent restart`: the stream had the
        // change and no exit, hostile run 2's D4). A live replacement's exit was reported.
        let alive_elsewhere = |m: &EventMark| m.incarnation.is_some() && m.incarnation != facts.incarnation && !m.exited && !m.stopped;
        let ended_unseen = (first_since_restart || facts.incarnation.is_some()) && mark.is_some_and(alive_elsewhere);
        // EV-13: another process (or none) cannot prove the old one's replays: they are
        // reported after a gap, before its exit, for nothing read from a process follows its
        // exit (hostile run 2's D5 had the gap after it).
        let replaced = facts.incarnation.is_some() && mark.is_some_and(|m| facts.incarnation != m.incarnation);
        if replaced || ended_unseen {
            self.replay_changed(&facts.agent_id, crate::event_replay::Unproven::Elsewhere);
        }
        if ended_unseen {
            self.report_unseen_exit(&facts.agent_id);
            if facts.incarnation.is_none() {
                return;
            }
        }
        let before = self.events.marks.get(&facts.agent_id).cloned().unwrap_or_else(|| EventMark::new(facts.agent_id.clone()));
        let (created, bodies) = registration_events(self.events.marks.get_mut(&facts.agent_id), facts);
        if let Some(mark) = created {
            self.events.marks.insert(facts.agent_id.clone(), mark);
        }
        self.queue(&facts.agent_id, facts.incarnation.clone(), bodies, before);
    }

    /// EV-4: the announced process ended unobserved: its `agent.exited` (`drained: false`,
    /// nobody read its end), under its own incarnation.
    fn report_unseen_exit(&mut self, agent_id: &AgentId) {
        let mark = self.events.marks.get_mut(agent_id).expect("an announced process has a mark");
        assert!(mark.incarnation.is_some() && !mark.exited, "an announced process, not said to exit");
        let before = mark.clone();
        mark.exited = true;
        let announced = mark.incarnation.clone();
        self.queue(agent_id, announced, vec![EventBody::AgentExited { drained: false }], before);
    }

    pub(crate) fn record_removal(&mut self, agent_id: &AgentId, incarnation: Option<Incarnation>) {
        self.events.replay.remove(agent_id); // EV-13: a stopped agent's replays are moot
        self.events.proofs.remove(agent_id); // ADM-5: and its proofs
        let Some(mark) = self.events.marks.get_mut(agent_id) else { return };
        if mark.stopped {
            return;
        }
        // EV-4: the process the stream announced exits on it, under its own incarnation,
        // before the agent's stop, its last event (`agent stop` ends it unobserved: a hostile
        // run saw `agent.stopped` with no exit, while `mux stop --all` reported one).
        if mark.incarnation.is_some() && !mark.exited {
            self.report_unseen_exit(agent_id);
        }
        let mark = self.events.marks.get_mut(agent_id).expect("checked above");
        let before = mark.clone();
        mark.stopped = true;
        self.queue(agent_id, incarnation, vec![EventBody::AgentStopped], before);
    }

    /// EV-5: the monitor's checkpoint, after the events it covers; only the newest is kept.
    pub(crate) fn record_checkpoint(&mut self, agent_id: &AgentId, checkpoint_json: String) {
        let backlog = self.events.backlog.entry(agent_id.clone()).or_default();
        backlog.retain(|item| !matches!(item, BacklogItem::Checkpoint(_)));
        backlog.push(BacklogItem::Checkpoint(checkpoint_json));
    }

    /// EV-3: one batch per agent with nothing in flight, no retry pending, no end it must
    /// follow (`EventStream::ends_first`), and no loss whose ends are still to be drawn
    /// (`Engine::correlation_deferred`).
    pub(crate) fn flush_events(&mut self) {
        let ready: Vec<AgentId> = self
            .events
            .backlog
            .iter()
            .filter(|(agent_id, items)| {
                !items.is_empty()
                    && !self.events.in_flight.contains_key(*agent_id)
                    && !self.events.retry_at.contains_key(*agent_id)
                    && !self.events.ends_first.contains_key(*agent_id)
                    && !self.correlation_deferred(agent_id)
            })
            .map(|(agent_id, _)| agent_id.clone())
            .collect();
        for agent_id in ready {
            let backlog = self.events.backlog.get_mut(&agent_id).expect("listed");
            let items: Vec<BacklogItem> = backlog.drain(..batch_len(backlog)).collect();
            let mut mark = None;
            let mut ops: Vec<PersistOp> = Vec::with_capacity(items.len() + 1);
            for item in &items {
                ops.push(match item {
                    BacklogItem::Event(event, after) => {
                        mark = Some(after.clone());
                        PersistOp::AppendEvent(event.clone())
                    }
                    BacklogItem::Checkpoint(json) => PersistOp::PutCheckpoint { agent_id: agent_id.clone(), checkpoint_json: json.clone() },
                });
            }
            ops.extend(mark.map(PersistOp::PutEventMark));
            let token = self.persist_token(PersistPurpose::Events(agent_id.clone()), ops);
            self.events.in_flight.insert(agent_id, (token, items));
        }
        self.events.backlog.retain(|_, items| !items.is_empty());
    }

    /// EV-3, EV-13: the agent's event batches wait until `request_id`'s end, if it has one not
    /// yet durable, is. Called for every `indeterminate` end (`Engine::finish`) and for every
    /// request a replay zone's verdict concerns. Such an end says evidence is missing or
    /// changed (a rollout cut back and grown again, a lost or replaced session), and the events
    /// learned with it (the gap, the new file's records) move the durable mark and checkpoint
    /// past that evidence: a crash that lost the end left the request resumable in a file the
    /// durable mark now proved, and the next daemon completed it with a final written again
    /// (exploration seed 200,080,325). A completion or an abort elsewhere is read again after
    /// a restart from records the mark still proves, so it does not hold the stream.
    pub(crate) fn batches_follow_the_end(&mut self, request_id: &RequestId) {
        let Some(record) = self.requests.get(request_id) else { return };
        let committing = self.persists.values().any(|p| matches!(p, PersistPurpose::Terminal { request_id: r, .. } if r == request_id));
        if record.phase == Phase::Terminal && (committing || self.terminal_retries.contains_key(request_id)) {
            self.events.ends_first.entry(record.agent_id.clone()).or_default().insert(request_id.clone());
        }
    }

    /// EV-3: an admission of the agent is writing and holds back a loss of the session (ADM-17):
    /// the stream took it already, but the ends it makes (`observer_session_lost`) are drawn
    /// only when the write's outcome is known, so the batch waits for that too (a review: the
    /// loss's batch committed first, and a crash lost the end; with it durable, the next daemon
    /// may read a replaced file of the session on). Other deferred records make ends that a
    /// restart reads again from records the mark still proves: they do not hold the stream.
    pub(crate) fn correlation_deferred(&self, agent_id: &AgentId) -> bool {
        let claim = self.agents.get(agent_id).and_then(|a| a.claim.as_ref());
        let admission = claim.and_then(|claim| self.admissions.get(claim));
        admission.is_some_and(|a| a.deferred.iter().any(|d| matches!(d, crate::engine::Deferred::Event(ObserverEvent::SessionLost { .. }))))
    }

    /// `request_id`'s end is durable: its agent's batches no longer wait for it.
    pub(crate) fn end_made_durable(&mut self, request_id: &RequestId) {
        let Some(agent_id) = self.requests.get(request_id).map(|r| r.agent_id.clone()) else { return };
        let Some(waiting) = self.events.ends_first.get_mut(&agent_id) else { return };
        waiting.remove(request_id);
        if waiting.is_empty() {
            self.events.ends_first.remove(&agent_id);
        }
    }

    /// EV-3: a batch committed (publish what is ready) or failed (re-sequence and retry).
    pub(crate) fn on_events_committed(&mut self, agent_id: &AgentId, token: u64, result: Result<(), String>) {
        let Some((in_flight_token, items)) = self.events.in_flight.remove(agent_id) else { return };
        assert_eq!(in_flight_token, token, "EV-3: one batch in flight per agent");
        let ok = result.is_ok();
        if !ok && self.events.keeps_numbers(agent_id, &items) {
            // Still pending, in the same order, with what queued behind them.
            *self.events.kept_tries.entry(agent_id.clone()).or_default() += 1;
            let queued = self.events.backlog.remove(agent_id).unwrap_or_default();
            let kept = newest_checkpoint_only(items.into_iter().chain(queued).collect());
            self.events.backlog.insert(agent_id.clone(), kept);
            self.events.retry_at.insert(agent_id.clone(), self.now_ms + PERSIST_RETRY_MS);
            return;
        }
        self.events.kept_tries.remove(agent_id);
        let mut retried = Vec::new();
        for item in items {
            match item {
                BacklogItem::Event(event, mark) => {
                    let sequence = event.sequence;
                    if ok {
                        self.events.settle(sequence, Some(event));
                    } else {
                        self.events.settle(sequence, None);
                        retried.push(BacklogItem::Event(event, mark));
                    }
                }
                checkpoint @ BacklogItem::Checkpoint(_) if !ok => retried.push(checkpoint),
                BacklogItem::Checkpoint(_) => {}
            }
        }
        if !ok {
            // Everything queued behind the failed batch gets a later number than its retry.
            let queued = self.events.backlog.remove(agent_id).unwrap_or_default();
            for item in &queued {
                if let BacklogItem::Event(event, _) = item {
                    self.events.settle(event.sequence, None);
                }
            }
            let mut renumbered = Vec::new();
            for item in retried.into_iter().chain(queued) {
                renumbered.push(match item {
                    BacklogItem::Event(event, mark) => {
                        let fresh = self.events.make(event.at_ms, &event.agent_id, event.incarnation, event.body);
                        BacklogItem::Event(fresh, mark)
                    }
                    checkpoint => checkpoint,
                });
            }
            self.events.backlog.insert(agent_id.clone(), newest_checkpoint_only(renumbered));
            self.events.retry_at.insert(agent_id.clone(), self.now_ms + PERSIST_RETRY_MS);
        }
        self.publish_events();
    }

    /// EV-6: the request milestones a request commit makes true, numbered now and committed
    /// in the same transaction.
    pub(crate) fn ride_request_events(&mut self, purpose: &PersistPurpose, ops: &mut Vec<PersistOp>) -> Vec<AgentEvent> {
        let mut bodies: Vec<(AgentId, Option<Incarnation>, EventBody)> = Vec::new();
        for op in ops.iter() {
            match (purpose, op) {
                (_, PersistOp::PutRequest(record))
                    if record.receipt.is_some() && record.phase != Phase::Released && self.events.admitted_due.remove(&record.request_id) =>
                {
                    bodies.push((
                    record.agent_id.clone(),
                    Some(record.incarnation.clone()),
                    EventBody::RequestAdmitted {
                        request_id: record.request_id.clone(),
                        return_mode: record.return_mode,
                        classification: record.receipt.as_ref().map(|r| r.classification),
                        prompt_hash: record.prompt_hash.clone(),
                        prompt: record.shared_prompt.clone(),
                    },
                    ))
                }
                (PersistPurpose::Progress(_), PersistOp::PutRequest(record))
                    if record.phase == Phase::Bound && !self.events.bound_announced.contains(&record.request_id) =>
                {
                    let turn = record.bound_turn.clone().expect("a bound request names its turn");
                    self.events.bound_announced.insert(record.request_id.clone());
                    bodies.push((
                        record.agent_id.clone(),
                        Some(record.incarnation.clone()),
                        EventBody::RequestBound { request_id: record.request_id.clone(), provider_turn_id: turn },
                    ));
                }
                (_, PersistOp::AppendTerminal(event)) => {
                    self.events.bound_announced.remove(&event.request_id);
                    bodies.push((
                        event.agent_id.clone(),
                        Some(event.incarnation.clone()),
                        EventBody::RequestTerminal {
                            request_id: event.request_id.clone(),
                            state: event.state,
                            reason: event.reason.clone(),
                            provider_turn_id: event.provider_turn_id.clone(),
                            terminal_event_sequence: event.terminal_event_sequence,
                            steered: event.steered,
                        },
                    ))
                }
                _ => {}
            }
        }
        let mut riding = Vec::new();
        for (agent_id, incarnation, body) in bodies {
            let event = self.events.make(self.now_ms, &agent_id, incarnation, body);
            ops.push(PersistOp::AppendEvent(event.clone()));
            riding.push(event);
        }
        riding
    }

    /// EV-6: the request commit carrying these events ended. A failed commit abandons their
    /// numbers; the request's own retry makes them again if they are still true.
    pub(crate) fn on_riding_committed(&mut self, token: u64, ok: bool) {
        let Some(events) = self.events.riding.remove(&token) else { return };
        for event in events {
            if !ok {
                match &event.body {
                    EventBody::RequestBound { request_id, .. } => {
                        self.events.bound_announced.remove(request_id);
                    }
                    EventBody::RequestAdmitted { request_id, .. } => {
                        // The receipt is still not durable: its record's retry carries it.
                        self.events.admitted_due.insert(request_id.clone());
                    }
                    _ => {}
                }
            }
            self.events.settle(event.sequence, ok.then_some(event.clone()));
        }
        self.publish_events();
    }

    pub(crate) fn publish_events(&mut self) {
        for event in self.events.take_publishable() {
            event.assert_consistent();
            self.push(Output::AgentEvent(event));
        }
    }

    /// Failed batches whose retry time came.
    pub(crate) fn release_event_retries(&mut self) {
        let due: Vec<AgentId> = self.events.retry_at.iter().filter(|(_, at)| **at <= self.now_ms).map(|(id, _)| id.clone()).collect();
        for agent_id in due {
            self.events.retry_at.remove(&agent_id);
        }
    }

    /// The last sequence the engine's view reflects (assigned, not abandoned): a catalog
    /// answers once every event up to it is durable (EV-8).
    pub fn events_through(&self) -> u64 {
        self.events.reflected_through()
    }

    /// EV-2: every event up to this sequence is durable and published (or skipped).
    pub fn events_published_through(&self) -> u64 {
        self.events.published_through
    }

    /// EV-3: event numbers held in memory (assigned, not yet published), and the events on
    /// their way to a commit (queued, in flight, or riding a request's commit): the first is
    /// the second plus the committed events not yet passable (behind a pending number).
    pub fn events_held(&self) -> (usize, usize) {
        (self.events.numbers_held(), self.events.numbers_on_their_way().count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(stream: &mut EventStream) -> AgentEvent {
        let agent_id = AgentId::parse("0b5e3c1a-1111-4222-8333-000000000000").expect("uuid");
        stream.make(1, &agent_id, None, EventBody::AgentExited { drained: true })
    }

    /// EV-1, EV-8: abandoned numbers are passed only with a committed one after them; at the
    /// end they count neither in the settled mark nor in what the view reflects.
    #[test]
    fn ev_1_abandoned_numbers_are_passed_only_with_a_committed_one_after_them() {
        let mut stream = EventStream::recover(7, vec![]);
        let first = event(&mut stream);
        let (second, third) = (event(&mut stream), event(&mut stream));
        stream.settle(first.sequence, Some(first.clone()));
        stream.settle(second.sequence, None);
        stream.settle(third.sequence, None);
        assert_eq!(stream.take_publishable(), vec![first.clone()]);
        assert_eq!((stream.published_through, stream.reflected_through()), (8, 8), "the abandoned 9 and 10 are not passed");
        let pending = event(&mut stream);
        assert_eq!(stream.reflected_through(), 11, "a pending number counts: the view reflects it");
        assert!(stream.take_publishable().is_empty());
        stream.settle(pending.sequence, Some(pending.clone()));
        assert_eq!(stream.take_publishable(), vec![pending]);
        assert_eq!((stream.published_through, stream.reflected_through()), (11, 11), "passed with the committed 11");
        assert!(stream.slots.is_empty());
    }
}
