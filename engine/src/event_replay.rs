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
//! - a drained exit of the process, or a snapshot, that read the file to its end short of M:
//!   the file changed, the same verdict;
//! - the session lost, or another incarnation registered, before that: the held records are
//!   reported afresh after a gap (they were never proven).
//!
//! Checkpoints (EV-5) arriving meanwhile are held with the records they cover. At most
//! `MAX_HELD_REPLAYS` are held: past it the oldest goes (a replay if the file is proven; if it
//! changed, the gap after C says records after C may be missing).
//!
//! The requests the restart found armed in S wait on the verdict too (`ReplayZone::recovered`):
//! an end of their turn read from a held record is applied once the file is proven
//! (`ReplayZone::pending`), and a changed file ends them `indeterminate`, as OBS-3 ends those
//! resumed across a replaced file. An end unproven for `MAX_PROOF_WAIT_MS` ends
//! `indeterminate` too.

use std::collections::VecDeque;

use crate::engine::Engine;
use crate::events::{EventBody, EventMark};
use crate::ids::{AgentId, Incarnation, RequestId, SessionId};
use crate::observer::ObserverEvent;
use crate::terminal::TerminalState;

/// The `observer.gap` reason when the records after a restart's resume point are not the ones
/// the stream reported.
pub const REWRITTEN_WHILE_DOWN: &str = "rollout_rewritten_while_down";

/// Records and checkpoints one unproven replay holds at most; past it the oldest is dropped.
pub const MAX_HELD_REPLAYS: usize = 4096;

/// How long a recovered request's end read from an unproven record waits for the proof: the
/// zone settles at the restart's first read through the mark, so only a read that never gets
/// there (a tail error that lasts) waits this long; then the request ends `indeterminate`.
pub const MAX_PROOF_WAIT_MS: u64 = 60_000;

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
    pub held: VecDeque<Held>,
    /// The requests the restart found armed in `session` (suspended, REC-2): they wait on
    /// records of the file the zone proves. Requests armed after the restart read the file as
    /// it is now.
    pub recovered: Vec<RequestId>,
    /// Their turn's end, read from records the zone still holds: applied once the file is
    /// proven (a record of a file cut back and grown again must not end them).
    pub pending: Vec<PendingFinish>,
}

/// A recovered request's end read from an unproven record (`ReplayZone::pending`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingFinish {
    pub request_id: RequestId,
    pub state: TerminalState,
    pub reason: Option<String>,
    pub final_message: Option<String>,
    /// When it was read, and the record it was read from (RF-6's evidence).
    pub read_ms: u64,
    pub evidence: Option<String>,
}

/// Why a zone closed without proof (`Engine::replay_changed`), which says what becomes of the
/// recovered requests waiting on it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unproven {
    /// A record at or past the mark, or a file ending short of it, says the file changed.
    Content,
    /// The session was lost or another process registered: the requests end by that rule.
    Elsewhere,
}

impl ReplayZone {
    /// Holds one more record or checkpoint, dropping the oldest past `MAX_HELD_REPLAYS`: a
    /// resume with no checkpoint reads the file from its start, and past the bound it was
    /// taken for changed (a false gap, every held record reported again, a review).
    fn hold(&mut self, held: Held) {
        if self.held.len() >= MAX_HELD_REPLAYS {
            self.held.pop_front();
        }
        self.held.push_back(held);
        debug_assert!(self.held.len() <= MAX_HELD_REPLAYS);
    }

    /// A zone for a recovered mark that can be proven (it ends at a record with a fingerprint).
    pub(crate) fn for_mark(mark: &EventMark) -> Option<ReplayZone> {
        let (session, fingerprint) = (mark.session.clone()?, mark.fingerprint.clone()?);
        let zone = ReplayZone { session, through: mark.position, fingerprint, from: None, held: VecDeque::new(), recovered: Vec::new(), pending: Vec::new() };
        Some(zone)
    }
}

/// ADM-5, EV-13: the proof of a file a zone closed by a loss still waited for: a restart's
/// reopened wait keeps its floor in the file's older copy until a later read proves the file
/// the same (the record at `through` fingerprinted `fingerprint`) or shows it changed. The
/// resume of a checkpoint the file no longer matches (OBS-3) is such a loss, and the next look
/// reads the file from its start: a cut below the checkpoint, or a replacement, landed an
/// older turn past the floor by position alone (a review).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct FloorProof {
    pub session: SessionId,
    pub through: u64,
    pub fingerprint: String,
    /// The mark's `rewritten` before the loss made it this run (the pessimistic note, durable
    /// with the loss): put back once the file is proven.
    pub restore: Option<crate::events::RewriteRun>,
}

/// How a record of `session` (or its attach) meets a proof of the file through `through`.
enum ProofStep {
    /// Below the proving record: nothing is proven yet.
    Below,
    /// The record there is the one reported (an attach there: OBS-2 proved it).
    Proven,
    /// Another record there, or one past it: the file changed.
    Changed,
}

/// EV-13 (the zones) and ADM-5 (`FloorProof`): one rule for both. None: another session's
/// event, or one with no place.
fn proof_step(session: &SessionId, through: u64, fingerprint: &str, event: &ObserverEvent) -> Option<ProofStep> {
    let (Some(event_session), Some(position)) = (event.session(), event.position()) else { return None };
    if event_session != session {
        return None;
    }
    let step = match (event, position.cmp(&through)) {
        (_, std::cmp::Ordering::Less) => ProofStep::Below,
        // OBS-2 proved the file through the resume point: the Codex observer announces where
        // its checkpoint's proof ends, never a cursor past it; the managed observer announces
        // its cursor, in a holder's output, which is append-only within its process (a new
        // process resets the mark).
        (ObserverEvent::Attached { .. }, _) => ProofStep::Proven,
        (_, std::cmp::Ordering::Equal) if record_fingerprint(event) == fingerprint => ProofStep::Proven,
        _ => ProofStep::Changed,
    };
    Some(step)
}

/// How an observer event meets an open zone.
enum Verdict {
    /// Not the zone's business (another session's record, or a lifecycle fact).
    Pass,
    /// A record inside the zone: held until the zone settles.
    Hold,
    /// The file is the one reported: drop the held records.
    Proven,
    /// Report the held records afresh after a gap: the file changed, or nothing can prove it
    /// now (why: `Unproven`).
    Changed(Unproven),
}

impl Engine {
    /// EV-13: true when the event was taken by an open replay zone (held, or it settled the
    /// zone and was reported with it); false when the caller reports it as usual.
    pub(crate) fn replay_take(&mut self, agent_id: &AgentId, event: &ObserverEvent, incarnation: &Option<Incarnation>) -> bool {
        let Some(zone) = self.events.replay.get_mut(agent_id) else { return false };
        let step = proof_step(&zone.session, zone.through, &zone.fingerprint, event);
        let verdict = match (event, step) {
            (ObserverEvent::Attached { position, .. }, Some(ProofStep::Below)) => {
                zone.from = Some(zone.from.map_or(*position, |from| from.min(*position)));
                Verdict::Pass
            }
            (_, Some(ProofStep::Below)) => Verdict::Hold,
            (_, Some(ProofStep::Proven)) => Verdict::Proven,
            (_, Some(ProofStep::Changed)) => Verdict::Changed(Unproven::Content),
            // A resume of another session failed: not this zone's business.
            (ObserverEvent::SessionLost { session: Some(lost), .. }, _) if *lost != zone.session => Verdict::Pass,
            // MGD-4: a loss wholly at or before the mark in a managed agent's append-only
            // output (the holder's ring wrapped between the first look and the resume): what
            // follows is the same output, and the mark's record still proves it. It closed the
            // zone as a changed file, reporting the held records again (a review).
            (ObserverEvent::SessionLost { before: Some(before), .. }, _) if *before <= zone.through => Verdict::Pass,
            // Lost before anything was held: EV-7's gap says it all. A reopened wait's floor
            // still waits for the proof (`FloorProof`).
            (ObserverEvent::SessionLost { .. }, _) if zone.held.is_empty() => {
                let zone = self.events.replay.remove(agent_id).expect("open");
                self.await_floor_proof(agent_id, &zone);
                return false;
            }
            (ObserverEvent::SessionLost { .. }, _) => Verdict::Changed(Unproven::Elsewhere),
            // The process is gone and the observer read the file to its end, short of the
            // mark (a record at or past it settled the zone): the file is shorter than what
            // the stream reported (a review: the exit took the request for a prompt never read).
            (ObserverEvent::ProcessExited { drained: true }, _) if zone.from.is_some() => Verdict::Changed(Unproven::Content),
            // EV-4: the process ended unproven (its last read failed, or nothing was read):
            // what it held is reported now, before its exit, for nothing read from a process
            // follows its exit.
            (ObserverEvent::ProcessExited { .. }, _) => Verdict::Changed(Unproven::Elsewhere),
            _ => Verdict::Pass,
        };
        match verdict {
            Verdict::Pass => false,
            Verdict::Hold => {
                zone.hold(Held::Event(event.clone(), incarnation.clone()));
                true
            }
            Verdict::Proven => {
                let zone = self.events.replay.remove(agent_id).expect("open");
                self.floor_proven(agent_id);
                // The replays are dropped; the newest held checkpoint still follows them. The
                // event itself is reported as usual (the mark covers a record at M).
                if let Some(json) = zone.held.into_iter().rev().find_map(|h| if let Held::Checkpoint(json) = h { Some(json) } else { None }) {
                    self.record_checkpoint(agent_id, json);
                }
                for end in zone.pending {
                    let deciding = std::mem::replace(&mut self.deciding, end.evidence);
                    self.finish(&end.request_id, end.state, end.reason.as_deref(), end.final_message, None);
                    self.deciding = deciding;
                }
                false
            }
            Verdict::Changed(why) => {
                self.replay_changed(agent_id, why);
                false // the event itself follows, reported afresh
            }
        }
    }

    /// EV-13: the observer read the zone's session to its end short of the mark: the file is
    /// shorter than what the stream reported, so it changed. Not a snapshot whose turn state
    /// is unknown: a read cut at its bound says that (`CodexObserver::snapshot` while
    /// behind; a resume with no checkpoint reads the file from its start), as does a fold
    /// that knows nothing yet, and the next snapshot decides.
    pub(crate) fn replay_check_snapshot(&mut self, agent_id: &AgentId, snapshot: &crate::observer::ObserverSnapshot) {
        let Some(zone) = self.events.replay.get(agent_id) else { return };
        let attached = snapshot.status == crate::observer::ObserverStatus::Attached && snapshot.turn != crate::observer::TurnState::Unknown;
        if attached && zone.from.is_some() && snapshot.session.as_ref() == Some(&zone.session) && snapshot.position < zone.through {
            self.replay_changed(agent_id, Unproven::Content);
        }
    }

    /// EV-13: a recovered request's end (`state`) read from a record the agent's zone still
    /// holds waits for the zone's verdict (`ReplayZone::pending`); any other ends now.
    pub(crate) fn finish_when_proven(&mut self, request_id: &RequestId, state: TerminalState, reason: Option<&str>, final_message: Option<String>) {
        let agent_id = self.requests[request_id].agent_id.clone();
        let (read_ms, evidence) = (self.now_ms, self.deciding.clone());
        if let Some(zone) = self.events.replay.get_mut(&agent_id).filter(|zone| zone.recovered.contains(request_id)) {
            let end = PendingFinish { request_id: request_id.clone(), state, reason: reason.map(str::to_string), final_message, read_ms, evidence };
            debug_assert!(!zone.pending.iter().any(|p| &p.request_id == request_id), "a pending end reads nothing more");
            zone.pending.push(end);
            return;
        }
        self.finish(request_id, state, reason, final_message, None);
    }

    /// EV-13: the ends unproven for `MAX_PROOF_WAIT_MS` end `indeterminate`; the zone stays.
    pub(crate) fn expire_unproven_ends(&mut self) {
        let now = self.now_ms;
        let mut expired = Vec::new();
        for zone in self.events.replay.values_mut() {
            let (old, young): (Vec<PendingFinish>, Vec<PendingFinish>) = std::mem::take(&mut zone.pending).into_iter().partition(|p| p.read_ms + MAX_PROOF_WAIT_MS <= now);
            zone.pending = young;
            expired.extend(old.into_iter().map(|p| p.request_id));
        }
        for request_id in expired {
            self.finish(&request_id, TerminalState::Indeterminate, Some("observer_session_lost"), None, None);
        }
    }

    /// EV-13: when the oldest unproven end expires (`Engine::poll_timeout`).
    pub(crate) fn unproven_ends_due(&self) -> Option<u64> {
        self.events.replay.values().flat_map(|zone| zone.pending.iter().map(|p| p.read_ms + MAX_PROOF_WAIT_MS)).min()
    }

    /// EV-13: whether `request_id`'s end waits for its zone's verdict: it reads nothing more.
    pub(crate) fn end_awaits_proof(&self, request_id: &RequestId) -> bool {
        let agent_id = &self.requests[request_id].agent_id;
        self.events.replay.get(agent_id).is_some_and(|zone| zone.pending.iter().any(|p| &p.request_id == request_id))
    }

    /// ADM-5, EV-13: whether `event` is a record whose file is not proven yet: one the agent's
    /// open replay zone holds (its session, before the mark), or one below what a zone closed
    /// by a loss still waits for (`FloorProof`). It may be a copy of an older one, so it ends
    /// no reopened wait yet (`correlation::wait_ended_by`; ended once the file is proven,
    /// `floor_proven`).
    pub(crate) fn floor_unproven_by(&self, agent_id: &AgentId, event: &ObserverEvent) -> bool {
        let zone = self.events.replay.get(agent_id).map(|zone| (&zone.session, zone.through, &zone.fingerprint));
        let proof = self.events.proofs.get(agent_id).map(|proof| (&proof.session, proof.through, &proof.fingerprint));
        zone.into_iter().chain(proof).any(|(session, through, fingerprint)| matches!(proof_step(session, through, fingerprint, event), Some(ProofStep::Below)))
    }

    /// ADM-5, EV-13: this run, for `EventMark::rewritten`.
    fn this_run(&self) -> crate::events::RewriteRun {
        let started = self.run_clock.as_ref().map(|clock| clock.monotonic_ms(self.run_started_ms));
        match (&self.run_clock, started.and_then(|ms| i64::try_from(ms).ok())) {
            (Some(clock), Some(started_monotonic_ms)) => crate::events::RewriteRun { boot_id: clock.boot_id.clone(), started_monotonic_ms },
            _ => crate::events::RewriteRun { boot_id: crate::run_clock::UNKNOWN_BOOT.to_string(), started_monotonic_ms: i64::MAX },
        }
    }

    /// ADM-5, EV-13: a replay zone (or the proof a loss left) found the file changed: a floor
    /// from before can no longer be compared with what the observer reads: a reopened wait's
    /// now (`AgentEntry::floor_unprovable`), and a later restart's by the mark
    /// (`EventMark::rewritten`: this run, durable with the batch of the record that decided).
    fn floor_unprovable(&mut self, agent_id: &AgentId) {
        if let Some(agent) = self.agents.get_mut(agent_id) {
            agent.floor_unprovable();
        }
        let run = self.this_run();
        let mark = self.events.marks.entry(agent_id.clone()).or_insert_with(|| EventMark::new(agent_id.clone()));
        mark.rewritten = Some(run);
    }

    /// ADM-5, EV-13: a loss closed `zone` before anything proved the file: the next look reads
    /// the file from its start, and a reopened wait keeps waiting for the proof (`FloorProof`).
    /// The mark says this run until then (durable with the loss: a crash before the proof
    /// leaves the next restart no zone to prove the file with).
    fn await_floor_proof(&mut self, agent_id: &AgentId, zone: &ReplayZone) {
        let run = self.this_run();
        let mark = self.events.marks.entry(agent_id.clone()).or_insert_with(|| EventMark::new(agent_id.clone()));
        let restore = mark.rewritten.replace(run);
        let proof = FloorProof { session: zone.session.clone(), through: zone.through, fingerprint: zone.fingerprint.clone(), restore };
        self.events.proofs.insert(agent_id.clone(), proof);
    }

    /// ADM-5, EV-13: how `event` meets the proof a loss left (`FloorProof`), as it arrives.
    pub(crate) fn judge_floor_proof(&mut self, agent_id: &AgentId, event: &ObserverEvent) {
        let Some(proof) = self.events.proofs.get(agent_id) else { return };
        match proof_step(&proof.session, proof.through, &proof.fingerprint, event) {
            None | Some(ProofStep::Below) => {}
            Some(ProofStep::Proven) => {
                let proof = self.events.proofs.remove(agent_id).expect("judged");
                if let Some(mark) = self.events.marks.get_mut(agent_id) {
                    mark.rewritten = proof.restore;
                }
                self.floor_proven(agent_id);
            }
            Some(ProofStep::Changed) => {
                self.events.proofs.remove(agent_id);
                self.floor_unprovable(agent_id);
            }
        }
    }

    /// ADM-5, EV-13: the file is proven the one reported: a turn past the reopened wait's floor
    /// that an unproven record carried ends it now (`AgentEntry::reopened_end_unproven`); of a
    /// PTY wait, a reopened prompt such a record took counts as taken now
    /// (`AwaitedPrompt::seen_unproven`), and the wait ends once each is.
    fn floor_proven(&mut self, agent_id: &AgentId) {
        let Some(agent) = self.agents.get_mut(agent_id).filter(|agent| agent.awaiting_reopened) else { return };
        if agent.reopened_end_unproven {
            return agent.end_wait();
        }
        // PTY: a reopened prompt's record is proven its; the wait ends once each is taken.
        let proven = agent.awaiting_prompts.iter().any(|prompt| prompt.seen_unproven);
        for prompt in agent.awaiting_prompts.iter_mut() {
            prompt.seen_unproven = false;
        }
        if proven && agent.awaiting_prompts.iter().all(crate::agent::AwaitedPrompt::taken) {
            agent.end_wait();
        }
    }

    /// EV-13: a checkpoint covering held records is held with them.
    pub(crate) fn replay_holds_checkpoint(&mut self, agent_id: &AgentId, checkpoint_json: &str) -> bool {
        let Some(zone) = self.events.replay.get_mut(agent_id) else { return false };
        if zone.held.is_empty() {
            return false;
        }
        zone.hold(Held::Checkpoint(checkpoint_json.to_string()));
        true
    }

    /// EV-13: the file is not the one reported, or cannot be proven (`why`). The stream says so
    /// (a gap after where the observer resumed, then the attach there), and reports every held
    /// record afresh; the recovered requests end as `why` says (`end_unproven_requests`).
    pub(crate) fn replay_changed(&mut self, agent_id: &AgentId, why: Unproven) {
        let Some(zone) = self.events.replay.remove(agent_id) else { return };
        match why {
            Unproven::Content => self.floor_unprovable(agent_id),
            Unproven::Elsewhere => self.await_floor_proof(agent_id, &zone),
        }
        // Another process, an exit or none found at a registration, with nothing held (a loss
        // with nothing held closes in `replay_take`): nothing was read past the resume
        // point, so nothing is reported afresh and no gap is claimed (hostile run 2's D5: a
        // gap "rewritten while down" at 0 and an attach at 0, the file untouched, for a process
        // killed while the daemon was down). A record that changed the file follows its gap.
        if why == Unproven::Elsewhere && zone.held.is_empty() {
            self.end_unproven_requests(why, zone.recovered, zone.pending);
            return;
        }
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
        self.end_unproven_requests(why, zone.recovered, zone.pending);
    }

    /// EV-13, OBS-3: the recovered requests of a zone closed without proof.
    /// - The file changed (cut back and grown again): each waits on records that may be gone
    ///   (its turn's completion: it waited for good) or other (a final written again, whose
    ///   first the cut took): it ends `indeterminate`, as one resumed across a replaced file.
    ///   Found by the simulator once its cuts reached requests waiting in the file (seeds
    ///   21483 and 29111).
    /// - A loss or another process: the ends read from unproven records end `indeterminate`;
    ///   the others end by their own rule (`observer_session_lost`, CORR-1's
    ///   `incarnation_changed`) or go on. A managed loss in an earlier process's output ends
    ///   only the requests armed there (MGD-4): one armed later would wait for an end it had
    ///   read (a review).
    ///
    /// The gap's batch moves the durable mark past the zone: it waits for every recovered
    /// request's end not yet durable, whatever made it (`Engine::batches_follow_the_end`): a
    /// cancel or a deadline whose commit failed, lost with a crash, left the request open for
    /// the next daemon in a file the durable mark proved (a review).
    fn end_unproven_requests(&mut self, why: Unproven, recovered: Vec<RequestId>, pending: Vec<PendingFinish>) {
        let ended: Vec<RequestId> = match why {
            Unproven::Content => recovered.clone(),
            Unproven::Elsewhere => pending.into_iter().map(|p| p.request_id).collect(),
        };
        for request_id in ended {
            self.finish(&request_id, TerminalState::Indeterminate, Some("observer_session_lost"), None, None);
        }
        for request_id in &recovered {
            self.batches_follow_the_end(request_id);
        }
    }
}
