//! EV-13: after a restart, the provider records the stream may already have reported are
//! proven before they are dropped as replays.
//!
//! A mark says "reported through position M of session S" (EV-4). After a restart the observer
//! re-reads S from a checkpoint or an armed cursor C < M, so the records in (C, M] arrive again.
//! Dropping them by position alone is only right if the file still holds the same records: a
//! rollout cut back and appended to while the daemon was down holds NEW records at those
//! positions, and they would vanish silently. So the mark also keeps the fingerprint of the
//! record it ends at, and the records after C are held back (not dropped, not reported) until
//! the record at M settles it:
//!
//! - a record at M with the mark's fingerprint: the file is the one reported; the held records
//!   were replays and are dropped;
//! - a record at M with another fingerprint, or one beyond M with none at M: the file changed:
//!   `observer.gap` (after C), `observer.attached` at C, then every held record reported afresh;
//! - the session lost, or another incarnation registered, before that: the held records are
//!   reported afresh after the gap the loss makes (EV-7), or dropped with the old process's
//!   stream when a new process replaces it (after a gap, since they were never proven).
//!
//! Checkpoints (EV-5) arriving meanwhile are held with the records they cover.

use crate::engine::Engine;
use crate::events::{EventBody, EventMark};
use crate::ids::{AgentId, Incarnation, SessionId};
use crate::observer::ObserverEvent;

/// The `observer.gap` reason when the records after a restart's resume point are not the ones
/// the stream reported.
pub const REWRITTEN_WHILE_DOWN: &str = "rollout_rewritten_while_down";

/// Records and checkpoints one unproven replay may hold before it is treated as changed.
pub const MAX_HELD_REPLAYS: usize = 4096;

/// EV-13: a fingerprint of one provider record's event, kept in the mark that ends at it.
pub fn record_fingerprint(event: &ObserverEvent) -> String {
    let json = serde_json::to_string(event).expect("observer events serialise");
    crate::prompt::prompt_hash(&json)
}

/// What a replay zone holds until it is settled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Held {
    Event(ObserverEvent, Option<Incarnation>),
    Checkpoint(String),
}

/// One agent's unproven replay: records of `session` after `from`, up to the mark at `through`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReplayZone {
    pub session: SessionId,
    /// The mark's position and fingerprint: the record that proves the file.
    pub through: u64,
    pub fingerprint: String,
    /// Where the observer resumed (set by its first attach after the restart).
    pub from: Option<u64>,
    pub held: Vec<Held>,
}

impl ReplayZone {
    /// A zone for a recovered mark that can be proven (it ends at a record with a fingerprint).
    pub(crate) fn for_mark(mark: &EventMark) -> Option<ReplayZone> {
        let (session, fingerprint) = (mark.session.clone()?, mark.fingerprint.clone()?);
        let zone = ReplayZone { session, through: mark.position, fingerprint, from: None, held: Vec::new() };
        Some(zone)
    }
}

/// How an observer event meets an open zone.
enum Verdict {
    /// Not the zone's business (another session's record, or a lifecycle fact).
    Pass,
    /// A record inside the zone: held until the zone settles.
    Hold,
    /// The file is the one reported: drop the held records.
    Proven,
    /// The file changed: report the held records afresh after a gap.
    Changed,
}

impl Engine {
    /// EV-13: true when the event was taken by an open replay zone (held, or it settled the
    /// zone and was reported with it); false when the caller reports it as usual.
    pub(crate) fn replay_take(&mut self, agent_id: &AgentId, event: &ObserverEvent, incarnation: &Option<Incarnation>) -> bool {
        let Some(zone) = self.events.replay.get_mut(agent_id) else { return false };
        let verdict = match (event, event.session(), event.position()) {
            (ObserverEvent::Attached { session, position }, _, _) if *session == zone.session => {
                if *position >= zone.through {
                    // OBS-2 proved the file through the resume point: the observer announces
                    // where its checkpoint's proof ends, never a cursor past it.
                    Verdict::Proven
                } else {
                    zone.from = Some(zone.from.map_or(*position, |from| from.min(*position)));
                    Verdict::Pass
                }
            }
            (_, Some(session), Some(position)) if *session == zone.session => match position.cmp(&zone.through) {
                std::cmp::Ordering::Less => Verdict::Hold,
                std::cmp::Ordering::Equal if crate::event_replay::record_fingerprint(event) == zone.fingerprint => Verdict::Proven,
                _ => Verdict::Changed,
            },
            // A resume of another session failed: not this zone's business.
            (ObserverEvent::SessionLost { session: Some(lost), .. }, _, _) if *lost != zone.session => Verdict::Pass,
            // Lost before anything was held: EV-7's gap says it all.
            (ObserverEvent::SessionLost { .. }, _, _) if zone.held.is_empty() => {
                self.events.replay.remove(agent_id);
                return false;
            }
            (ObserverEvent::SessionLost { .. }, _, _) => Verdict::Changed,
            _ => Verdict::Pass,
        };
        let verdict = match verdict {
            // Bounded: a zone that never settles is reported afresh rather than held forever.
            Verdict::Hold if zone.held.len() >= MAX_HELD_REPLAYS => Verdict::Changed,
            other => other,
        };
        match verdict {
            Verdict::Pass => false,
            Verdict::Hold => {
                zone.held.push(Held::Event(event.clone(), incarnation.clone()));
                true
            }
            Verdict::Proven => {
                let zone = self.events.replay.remove(agent_id).expect("open");
                // The replays are dropped; the newest held checkpoint still follows them. The
                // event itself is reported as usual (the mark covers a record at M).
                if let Some(json) = zone.held.into_iter().rev().find_map(|h| if let Held::Checkpoint(json) = h { Some(json) } else { None }) {
                    self.record_checkpoint(agent_id, json);
                }
                false
            }
            Verdict::Changed => {
                self.replay_changed(agent_id);
                false // the event itself follows, reported afresh
            }
        }
    }

    /// EV-13: the observer read the zone's session to its end short of the mark (a refresh
    /// reads to the end, and the mark lies within one checkpoint interval of where it
    /// resumed): the file is shorter than what the stream reported, so it changed.
    pub(crate) fn replay_check_snapshot(&mut self, agent_id: &AgentId, snapshot: &crate::observer::ObserverSnapshot) {
        let Some(zone) = self.events.replay.get(agent_id) else { return };
        let attached = snapshot.status == crate::observer::ObserverStatus::Attached;
        if attached && zone.from.is_some() && snapshot.session.as_ref() == Some(&zone.session) && snapshot.position < zone.through {
            self.replay_changed(agent_id);
        }
    }

    /// EV-13: a checkpoint covering held records is held with them.
    pub(crate) fn replay_holds_checkpoint(&mut self, agent_id: &AgentId, checkpoint_json: &str) -> bool {
        let Some(zone) = self.events.replay.get_mut(agent_id) else { return false };
        if zone.held.is_empty() {
            return false;
        }
        zone.held.push(Held::Checkpoint(checkpoint_json.to_string()));
        true
    }

    /// EV-13: the file is not the one reported. The stream says so (a gap after where the
    /// observer resumed, then the attach there), and reports every held record afresh.
    pub(crate) fn replay_changed(&mut self, agent_id: &AgentId) {
        let Some(zone) = self.events.replay.remove(agent_id) else { return };
        let from = zone.from.unwrap_or(0).min(zone.through);
        let mark = self.events.marks.entry(agent_id.clone()).or_insert_with(|| EventMark::new(agent_id.clone()));
        let before = mark.clone();
        // The process the stream last announced wrote the session the gap is about.
        let incarnation = mark.incarnation.clone();
        mark.session = Some(zone.session.clone());
        mark.position = from;
        mark.fingerprint = None;
        mark.forget_turns(); // ADM-5: the place moved back
        mark.attached = Some(zone.session.clone());
        let gap = EventBody::ObserverGap { reason: REWRITTEN_WHILE_DOWN.to_string(), session: Some(zone.session.clone()), after_position: from };
        let attached = EventBody::ObserverAttached { session: zone.session.clone(), position: from };
        self.queue(agent_id, incarnation, vec![gap, attached], before);
        for held in zone.held {
            match held {
                Held::Event(event, incarnation) => self.report_observed(agent_id, &event, incarnation),
                Held::Checkpoint(json) => self.record_checkpoint(agent_id, json),
            }
        }
        self.end_requests_in_changed_file(agent_id, &zone.session);
    }

    /// EV-13, OBS-3: a request armed in a session whose file changed while the daemon was down
    /// (cut back and grown again) waits on records that may be gone (its turn's completion:
    /// it waited for good) or other (a final written again, whose first the cut took): it
    /// ends `indeterminate`, as one resumed across a replaced file.
    /// Found by the simulator once its cuts reached requests waiting in the file.
    fn end_requests_in_changed_file(&mut self, agent_id: &AgentId, session: &SessionId) {
        for request_id in self.correlating_requests_of(agent_id, true) {
            let armed = self.requests[&request_id].armed.as_ref().expect("correlating requests are armed");
            if &armed.session == session {
                self.finish(&request_id, crate::terminal::TerminalState::Indeterminate, Some("observer_session_lost"), None, None);
            }
        }
    }
}
