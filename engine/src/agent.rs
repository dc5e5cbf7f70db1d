//! What the engine knows about each agent: facts the runtime registers, the latest observer
//! view, and the admission claim that serialises writes to its pane (ADM-12).

use crate::ids::{AgentId, Incarnation, RequestId, SessionId};
use crate::observer::{Composer, ObserverStatus, ProcessIdentity, TurnState};
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Harness {
    Codex,
    Other(String),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Transport {
    /// An observer-backed PTY pane.
    Pty,
    /// A managed Codex app-server session.
    AppServer,
}

/// Registered by the runtime whenever an agent appears or its process changes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentFacts {
    pub agent_id: AgentId,
    pub name: String,
    pub harness: Harness,
    pub transport: Transport,
    /// None while no process runs behind the agent.
    pub incarnation: Option<Incarnation>,
    pub process: Option<ProcessIdentity>,
    /// MGD-2 / CORR-8: a managed session's identity, both ids (Codex 0.169 gives them equal
    /// values, but they are two fields of its protocol); None for a PTY agent, and for a
    /// managed agent whose thread is not started yet.
    #[serde(default)]
    pub managed: Option<ManagedIds>,
}

/// MGD-2: the app-server thread and session an agent's managed transport is bound to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManagedIds {
    pub thread_id: String,
    pub session_id: SessionId,
}

/// The engine's latest observer knowledge of one agent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObserverView {
    pub status: ObserverStatus,
    pub session: Option<SessionId>,
    pub position: u64,
    pub turn: TurnState,
    pub composer: Composer,
    pub incarnation: Incarnation,
    pub process: Option<ProcessIdentity>,
}

/// ADM-5, EV-13: a floor no turn passes, in any session (`AgentEntry::floor_unprovable`,
/// `RecoveredWrite::floor_wait`): the wait ends with the grace or the process.
pub const UNREACHABLE_FLOOR: u64 = u64::MAX;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentEntry {
    pub facts: AgentFacts,
    pub view: Option<ObserverView>,
    /// ADM-12: the one admission allowed in flight for this agent.
    pub claim: Option<RequestId>,
    /// ADM-5: engine time of a complete write whose turn has not been observed starting (of a
    /// PTY wait, the latest write into it: a plain send joins a wait, `awaiting_prompts`);
    /// until it starts the agent counts as busy, so two prompts never race into one idle
    /// composer. Cleared by the prompt's turn (`correlation::wait_ended_by`), a process
    /// change, or a fresh snapshot that still shows an idle agent with an empty composer
    /// `no_turn_grace_ms` after the write.
    pub awaiting_turn_after: Option<u64>,
    /// MGD-7: the admission whose write opened that wait, when nothing wrote since (a refusal
    /// of its `turn/start` then ends the wait). None when unknown: the wait runs its course.
    pub awaiting_request: Option<RequestId>,
    /// ADM-5: the wait ends only with a turn started past this cursor: where the view stood
    /// at the write (or, reopened by a restart, the write's recorded floor or the request's
    /// armed cursor; for a managed line, where its acceptance lay): a resume replays the
    /// turns before it, which are not the prompt's. None: no view at the write, or a PTY wait
    /// (each of its prompts has its own floor, `AwaitedPrompt::past`).
    pub awaiting_past: Option<crate::observer::Cursor>,
    /// ADM-5, managed agents: the `turn/start` id (MGD-7's, nonce included) of the line the
    /// wait is for: a live write's (`mark_written`), or the latest write a restart recovered
    /// whose answer the event mark did not keep (`RecoveredWrite::managed_wait`). A turn past
    /// a floor says nothing of the line: the view may
    /// stand behind the stream at the write, or a restart knows only the armed cursor, and a
    /// turn that began before the write (an earlier prompt of ours read late, a human's steer)
    /// ended the wait while the line was unread, and the next prompt went over it
    /// (exploration seed 6717 once `monitor.watch_lost_while_set` was drawn; seed 8337 once
    /// the oracle stopped excusing live writes). Such a wait goes on until the app-server
    /// answers that very line (`correlation::line_answered`); or ends at the grace
    /// (`no_turn_grace_ms`) or with the process. A PTY agent has no such id: its wait goes
    /// by the written prompts' own user messages (`awaiting_prompts`).
    pub awaiting_unplaced: Option<String>,
    /// ADM-5, managed: the turn the app-server accepted the awaited line into, when that turn
    /// had not started yet: its start (or a user message in it) ends the wait, whoever opened
    /// it (`correlation::line_answered`).
    pub awaiting_accepted: Option<crate::ids::TurnId>,
    /// ADM-5, PTY agents: the prompts the wait is for, each with its floor (an admission's or a
    /// submit's, and a plain send's written while the wait was open; after a restart, the
    /// recovered writes' still unread, `RecoveredWrite::floor_wait`). A turn past the floor is
    /// no proof that prompt was taken: the
    /// TUI may take a prompt and start its turn only seconds later (a first turn waiting for
    /// its MCP servers), and the view may stand behind the rollout at the write (a look that
    /// showed a checkpoint's view, a stream being resumed after a loss, records Codex had not
    /// flushed yet), so a turn that began before the write (a human's) lay past the floor and
    /// ended the wait while our prompt was unread, and the next prompt was written on top
    /// (the simulator's `terminal.slow_turn_start`, seeds 3999 and 6617 of 1-20,000). Each
    /// prompt is awaited until a user message with its hash past its own floor; the wait ends
    /// when none is left, or at the grace, a process change, or RF-8's timeout after the
    /// latest write (`TURN_START_TIMEOUT_MS`, whatever the screen shows: a prompt Codex
    /// records under other text, a slash command it expands, would otherwise hold the agent
    /// while its composer cannot be read). A plain send (ADM-13, written whatever the wait)
    /// joins the prompts, never replaces them: it replaced the awaited one, its user message
    /// ended the wait while a submit's prompt the TUI had queued was unread, and an admission
    /// went over it (the simulator's exploration seed 82398000). At most
    /// `MAX_AWAITED_PROMPTS` (a plain send past it is refused `awaiting_turn_start`). A
    /// reopened wait also holds, taken from the start, the durable mark's records an earlier
    /// daemon counted for writes it does not await (`RecoveredWrite::floor_wait`): their
    /// replays take no awaited prompt. Empty for a managed line's wait, which goes by the
    /// line's own answer (`awaiting_unplaced`).
    pub awaiting_prompts: Vec<AwaitedPrompt>,
    /// ADM-5, EV-13: the wait is one a restart reopened (`RecoveredWrite::reopen_wait`): its
    /// floor is a position in the file as an earlier daemon read it, which a record the
    /// restart's replay zone still holds (or one below what a zone closed by a loss waited
    /// for, `FloorProof`) cannot pass, nor any turn once a file was found changed
    /// (`floor_unprovable`). A live write's floor is this daemon's view (for a PTY agent, or
    /// where its rollout ended just before the write when further, CORR-6's floor).
    pub awaiting_reopened: bool,
    /// ADM-5, EV-13: a record of the reopened wait's file, not proven yet, carried a turn past
    /// its floor: once the file is proven, the wait ends (`Engine::floor_proven`).
    pub reopened_end_unproven: bool,
    /// Why the last observer refresh failed, for the receipt's detail.
    pub refresh_error: Option<String>,
    /// ADM-5 / RF-7: when to look again (an engine-initiated refresh, a "probe") whether the
    /// written prompt's turn ever started; None while no wait is open or a probe is out.
    pub probe_at_ms: Option<u64>,
    /// SUB-2: writes through wakterm that may have reached this agent (admissions and
    /// submits); the `turn_epoch` of a submit receipt. Bookkeeping, never evidence.
    pub input_epoch: u64,
    /// CORR-15: turns a managed app-server accepted for a `turn/start` (turn, request id),
    /// newest last, at most `MAX_ACCEPTED_TURNS_KEPT`: whose prompt each turn carries.
    pub accepted_turns: std::collections::VecDeque<(crate::ids::TurnId, String)>,
    /// ADM-5 (managed): the turn of the latest turn start the observer reported, fresh or
    /// replayed, in arrival order (a resume replays in stream order): whether a replayed
    /// acceptance of the awaited line went into a turn already running (folded: the wait is
    /// over) or opened one yet to start. The view cannot say: it may stand past both.
    pub last_turn_started: Option<crate::ids::TurnId>,
    /// ADM-19 (PTY): the last Enter another writer put into the pane, as looks reported it.
    pub other_enter: Option<OtherEnter>,
    /// ADM-19 (PTY): prompts of ours asked for (a write issued: it may land before its
    /// outcome is known) whose user message has not arrived: hash, when asked; dropped past
    /// ADM-5's grace and with the process. Counted into a new Enter's hold (a review: the
    /// ADM-5 wait, which opens only with the write's outcome, missed a write still in flight
    /// whose record came first).
    pub own_unrecorded: std::collections::VecDeque<(String, u64)>,
}

/// ADM-5 (PTY): a prompt of ours written into the pane that a wait is for
/// (`AgentEntry::awaiting_prompts`); or, in a wait a restart reopened, a record an earlier
/// daemon counted for a write not awaited, taken from the start (`taken_by`, no floor).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AwaitedPrompt {
    /// Its hash (HASH-1: Codex records the prompt trimmed, as the hash is taken).
    pub hash: String,
    /// Its user message lies past this cursor: the view at its write, or where the rollout
    /// ended just before it (`Engine::mark_written`); reopened by a restart, the write's
    /// recorded floor. None: no view at the write (only a record new to the view passes).
    pub past: Option<crate::observer::Cursor>,
    /// The admission or submission that wrote it: a write refused before its first byte takes
    /// its own prompt off the wait (a review: the last one was taken off). None: reopened by a
    /// restart.
    pub request: Option<crate::ids::RequestId>,
    /// EV-13: a restart reopened it: its floor is a position in the file as an earlier daemon
    /// read it, which a record not proven yet cannot pass (`AgentEntry::floor_unprovable`).
    pub reopened: bool,
    /// Where the user message that took it lies (None: not taken yet). Kept until the wait
    /// ends: a replay of that record (a resume after a loss) takes no other prompt of the same
    /// text (a review: it ended the wait while the other was unread).
    pub taken_by: Option<crate::observer::Cursor>,
    /// EV-13: `taken_by` is a record not proven yet: it counts once the file is proven
    /// (`Engine::floor_proven`), and not at all once it is found changed.
    pub seen_unproven: bool,
}

impl AwaitedPrompt {
    /// Taken by a record that counts.
    pub fn taken(&self) -> bool {
        self.taken_by.is_some() && !self.seen_unproven
    }
}

/// ADM-5: the most prompts one PTY wait awaits (plain sends written while it is open).
pub const MAX_AWAITED_PROMPTS: usize = 64;

/// ADM-19: another writer's Enter, and whether its prompt's turn has shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherEnter {
    /// The holder's note of it (`OtherEnterLook::noted_ms`): a later look at the same Enter
    /// changes nothing (its later estimate would move it past records that came after it).
    pub noted_ms: u64,
    /// When it ended, in engine time, as the first look that reported it estimated (never
    /// earlier than it was: the look's answer is handled after it was read).
    pub at_ms: u64,
    /// Past where its prompt's records lie: how far the first refresh that reported it (or
    /// came after a record of another session) and read a rollout to its end read. The look
    /// read the pane before the rollout, so what that refresh read may predate the Enter (an
    /// old turn the monitor had not delivered yet): it counts for nothing. None until such a
    /// refresh: no record counts.
    pub floor: Option<crate::observer::Cursor>,
    /// User messages past the floor still to come before the Enter's prompt surely shows (at
    /// most `MAX_OWED`: a holder's counts are not trusted further): its own, and one for each
    /// other prompt in flight when it was noted (the Enters since the known one, the known
    /// one's still unshown while it holds, ours asked for and unrecorded: `own_unrecorded`)
    /// or asked for while it holds (a plain send's, ADM-13). Every prompt the TUI takes is
    /// recorded as one user message,
    /// but which is which cannot be told (a same-text human's is ours by every fingerprint),
    /// so the count is what can: a second Enter within the 25 ms before Codex records the
    /// first, or a human's Enter right after a write of ours, was held only until the other
    /// prompt's records came (a review; the simulator's truth check then found both), and
    /// the TUI may have queued the Enter's prompt behind it. An Enter that takes no prompt
    /// (an empty composer, a slash command) holds for the grace. 0: its prompt shows.
    pub owed: u64,
    /// The holder's count of other writers' Enters up to it (`OtherEnterLook::count`).
    pub count: u64,
    /// How far user messages were counted: a replay (a resume, a file read again) of one
    /// counts once (a review: counted again, it ended the hold early).
    pub counted_to: u64,
}

/// ADM-19: the most user messages one Enter's hold waits for (the holder keeps 256 Enter
/// times; a holder's reply is not trusted to overflow anything).
pub const MAX_OWED: u64 = 1024;

impl AgentEntry {
    pub fn new(facts: AgentFacts) -> AgentEntry {
        AgentEntry {
            facts,
            view: None,
            claim: None,
            awaiting_turn_after: None,
            awaiting_request: None,
            awaiting_past: None,
            awaiting_unplaced: None,
            awaiting_accepted: None,
            awaiting_prompts: Vec::new(),
            awaiting_reopened: false,
            reopened_end_unproven: false,
            refresh_error: None,
            probe_at_ms: None,
            input_epoch: 0,
            accepted_turns: Default::default(),
            last_turn_started: None,
            other_enter: None,
            own_unrecorded: Default::default(),
        }
    }

    /// ADM-19 (PTY): another writer's Enter whose prompt the view has not shown yet, when it
    /// ended less than [`crate::limits::OTHER_ENTER_GRACE_MS`] before `now_ms`: its turn may
    /// be recorded any moment, after a prompt written now (the TUI takes the Enter and clears
    /// its composer some 25 ms before Codex records the turn), and a prompt of the same text
    /// would then take that turn for its own. Its age, or None once a turn start or a user
    /// message recorded after it arrived (the human's, or one of a turn already running: a
    /// busy agent refuses on its own).
    pub fn other_enter_unseen(&self, now_ms: u64) -> Option<u64> {
        let enter = self.other_enter.as_ref().filter(|enter| enter.owed > 0)?;
        let age_ms = now_ms.saturating_sub(enter.at_ms);
        (age_ms < crate::limits::OTHER_ENTER_GRACE_MS).then_some(age_ms)
    }

    /// ADM-19: when the hold of another writer's Enter ends by the grace, while it holds.
    pub(crate) fn other_enter_hold_ends(&self, now_ms: u64) -> Option<u64> {
        self.other_enter_unseen(now_ms)?;
        self.other_enter.as_ref().map(|enter| enter.at_ms + crate::limits::OTHER_ENTER_GRACE_MS)
    }

    /// ADM-19: what a look read of the pane's last Enter by another writer (None: none, or a
    /// holder that cannot say: what is known stays; an older one than known: a stale look's).
    /// `read`: how far the same refresh read a rollout when it read one to its end, which is
    /// the floor; None when it did not (cut, lost, failed, no rollout yet).
    pub(crate) fn note_other_enter(&mut self, now_ms: u64, look: Option<crate::pane_look::OtherEnterLook>, read: Option<crate::observer::Cursor>) {
        let Some(look) = look else { return };
        if self.other_enter.as_ref().is_none_or(|known| known.noted_ms < look.noted_ms) {
            let at_ms = now_ms.saturating_sub(look.ago_ms);
            // The known Enter's prompts still unshown, while it holds (past the grace it holds
            // nothing: an Enter that took no prompt would otherwise hold every later one for
            // the whole grace).
            let earlier = self.other_enter_unseen(now_ms).and(self.other_enter.as_ref()).map_or(0, |known| known.owed);
            // The Enters since the known one, each a prompt (a review: one never looked at
            // between two looks was not counted), those within the grace only; with none
            // known (a daemon just started, earlier Enters no look reported: the simulator's
            // seed 6860), or another holder (its count starts over), all within the grace; one
            // from a holder that does not count.
            let recent = look.recent.clamp(1, MAX_OWED);
            let since = self.other_enter.as_ref().map_or(recent, |known| match look.count.checked_sub(known.count) {
                Some(n) if n > 0 && known.count > 0 => n.min(recent),
                _ => recent,
            });
            self.forget_old_own_prompts(now_ms);
            let unrecorded = self.awaiting_prompts.iter().filter(|p| !p.taken()).count();
            let ours = self.own_unrecorded.len().max(unrecorded) as u64;
            let owed = since.saturating_add(earlier).saturating_add(ours).min(MAX_OWED);
            self.other_enter = Some(OtherEnter { noted_ms: look.noted_ms, at_ms, floor: None, owed, count: look.count, counted_to: 0 });
        }
        let enter = self.other_enter.as_mut().expect("just set");
        // Only a read after this very Enter is its floor: one that reported an older Enter
        // may predate it (a review: an older Enter's report, arriving after a newer Enter's
        // cut look, gave the newer one its floor).
        if enter.floor.is_none() && enter.noted_ms == look.noted_ms {
            enter.floor = read;
        }
    }

    /// ADM-19: a turn start or a user message arrived (`Engine::note_prompt_seen`): past the
    /// Enter's floor in its session, it was recorded after that Enter. One of another session
    /// says nothing of when it was recorded (a session the human started and the observer
    /// found late, a fork holding copies of older records): the floor is taken again by the
    /// next refresh that reads a rollout to its end (a review: counted as past, such records
    /// ended the hold).
    pub(crate) fn note_prompt_arrived(&mut self, event: &crate::observer::ObserverEvent) {
        let Some(enter) = self.other_enter.as_mut() else { return };
        let Some(floor) = &enter.floor else { return }; // no such refresh since: it may predate it
        if event.session() != Some(&floor.session) {
            enter.floor = None;
            enter.counted_to = 0; // a position of that session's
            return;
        }
        let position = event.position().filter(|p| *p > floor.position.max(enter.counted_to));
        if let (Some(position), crate::observer::ObserverEvent::UserMessage { .. }) = (position, event) {
            enter.owed = enter.owed.saturating_sub(1);
            enter.counted_to = position;
        }
    }

    /// ADM-19: a user message arrived: the oldest prompt of ours of its text is recorded.
    pub(crate) fn note_own_prompt_recorded(&mut self, event: &crate::observer::ObserverEvent) {
        if let crate::observer::ObserverEvent::UserMessage { prompt_hash, .. } = event {
            if let Some(i) = self.own_unrecorded.iter().position(|(hash, _)| hash == prompt_hash) {
                self.own_unrecorded.remove(i);
            }
        }
    }

    /// ADM-19: a prompt of ours (`hash`) is being written (PTY; a plain send's too, which the
    /// hold lets through): its user message will lie past an Enter's floor, and is no sign of
    /// the Enter's. Counted when the write is asked for: its bytes may land, and its record
    /// come, before the write's outcome does (a review).
    pub(crate) fn note_own_prompt_asked(&mut self, hash: &str, now_ms: u64) {
        self.forget_old_own_prompts(now_ms);
        if self.own_unrecorded.len() >= MAX_OWED as usize {
            self.own_unrecorded.pop_front();
        }
        self.own_unrecorded.push_back((hash.to_string(), now_ms));
        if let Some(enter) = self.other_enter.as_mut().filter(|enter| enter.owed > 0) {
            enter.owed = enter.owed.saturating_add(1).min(MAX_OWED);
        }
    }

    /// ADM-19: prompts of ours asked for longer than ADM-5's grace ago no longer count: a
    /// write that took no prompt (a slash command, a failed write) would hold every later
    /// Enter.
    fn forget_old_own_prompts(&mut self, now_ms: u64) {
        self.own_unrecorded.retain(|(_, at)| now_ms.saturating_sub(*at) < crate::limits::AWAITING_TURN_GRACE_MS);
    }

    /// CORR-15: the app-server accepted request `id`'s `turn/start` into `turn`.
    pub(crate) fn note_accepted_turn(&mut self, id: &str, turn: &crate::ids::TurnId) {
        if self.accepted_turns.iter().any(|(t, i)| t == turn && i == id) {
            return;
        }
        if self.accepted_turns.len() >= crate::limits::MAX_ACCEPTED_TURNS_KEPT {
            self.accepted_turns.pop_front();
        }
        self.accepted_turns.push_back((turn.clone(), id.to_string()));
        assert!(self.accepted_turns.len() <= crate::limits::MAX_ACCEPTED_TURNS_KEPT);
    }

    /// CORR-15: whether `turn` may carry the prompt written under `id`: not when the app-server
    /// accepted `id` into another turn, nor when it accepted another request into `turn`.
    pub(crate) fn turn_may_carry(&self, turn: &crate::ids::TurnId, id: Option<&str>) -> Result<(), String> {
        if let Some((own, _)) = id.and_then(|id| self.accepted_turns.iter().rev().find(|(_, i)| i == id)) {
            if own != turn {
                return Err(format!("the app-server accepted this request's turn/start into turn {}", own.0));
            }
            return Ok(());
        }
        match self.accepted_turns.iter().rev().find(|(t, _)| t == turn) {
            Some((_, other)) if Some(other.as_str()) != id => Err(format!("the app-server accepted request {other}'s turn/start into it")),
            _ => Ok(()),
        }
    }

    /// ADM-5 (managed): whether `event` is a turn's start or user message that says the prompt
    /// the agent waits on was taken, or may have been. Not when the app-server accepted another
    /// writer's request into that turn first (a `turn/start` under an id that is not one of
    /// wakterm's, `prompt::turn_start_id`): a human's prompt through the holder ran while ours
    /// sat unread, and its start ended the wait (exploration seed 5015819: raw prompts ran while
    /// the holder stalled on our write). A turn whose acceptance is unknown (the reply lost)
    /// still ends a managed wait a restart reopened by its floor; a live managed write's waits
    /// for its own line's answer (`awaiting_unplaced`), a PTY write's for its own prompt's user
    /// message (`awaiting_prompts`).
    pub(crate) fn turn_may_be_the_awaited_prompts(&self, event: &crate::observer::ObserverEvent) -> bool {
        use crate::observer::ObserverEvent;
        let turn = match event {
            ObserverEvent::TurnStarted { turn, .. } => turn,
            ObserverEvent::UserMessage { turn: Some(turn), .. } => turn,
            ObserverEvent::UserMessage { turn: None, .. } => return true,
            _ => return false,
        };
        let opener = self.accepted_turns.iter().find(|(t, _)| t == turn).map(|(_, id)| id.as_str());
        crate::prompt::opener_may_be_wakterm(opener)
    }

    /// ADM-5, RF-7: how long after a write an idle agent with an empty composer is evidence that
    /// the prompt went somewhere else. A PTY pane shows its composer; a managed app-server has
    /// none (its snapshot's composer is always empty), and a `turn/start` line it has not read
    /// yet (an app-server slow to read its input) looks just the same: for it only RF-8's
    /// turn-start timeout ends the wait (a review saw a second prompt admitted on top of an
    /// unread one after 10 s, both then racing into one thread).
    pub fn no_turn_grace_ms(&self) -> u64 {
        match self.facts.transport {
            crate::agent::Transport::Pty => crate::limits::AWAITING_TURN_GRACE_MS,
            crate::agent::Transport::AppServer => crate::limits::TURN_START_TIMEOUT_MS,
        }
    }

    /// ADM-5: where the observer's view stands (None: no view, or no session in it): a write
    /// made now waits for a turn started past it.
    pub(crate) fn view_cursor(&self) -> Option<crate::observer::Cursor> {
        let view = self.view.as_ref()?;
        Some(crate::observer::Cursor { session: view.session.clone()?, position: view.position })
    }

    /// ADM-5: a write's bytes may have landed as late as `now_ms` (its outcome, or the moment
    /// the engine gave up on it), so a wait for its turn, if one is open, runs from then.
    pub(crate) fn written_until(&mut self, now_ms: u64) {
        if let Some(since) = self.awaiting_turn_after {
            self.awaiting_turn_after = Some(since.max(now_ms)); // a restart's may lie ahead
            self.awaiting_request = None; // a write landed late: whose, the wait no longer tells
            self.probe_at_ms = Some(now_ms + crate::limits::AWAITING_TURN_GRACE_MS);
        }
    }

    /// ADM-5: the wait for a written prompt's turn is over (its turn or another began, the
    /// grace passed, the write was refused, the process changed): nothing of it is kept, and no
    /// probe is due for it. `awaiting_request` stays: only its own refusal clears it.
    pub(crate) fn end_wait(&mut self) {
        self.awaiting_turn_after = None;
        self.awaiting_past = None;
        self.awaiting_unplaced = None;
        self.awaiting_accepted = None;
        self.awaiting_prompts.clear();
        self.not_reopened();
        self.probe_at_ms = None;
    }

    /// ADM-5, EV-13: the agent's wait (if any) is not one a restart reopened: a live write's,
    /// whose floor is this daemon's view, or none.
    pub(crate) fn not_reopened(&mut self) {
        self.awaiting_reopened = false;
        self.reopened_end_unproven = false;
    }

    /// ADM-5, EV-13: a file of the agent can no longer be tied to what the observer reads (a
    /// restart's replay zone found it changed: cut back and grown again, or replaced, while the
    /// daemon was down). A reopened wait's floor is moved out of reach (`UNREACHABLE_FLOOR`):
    /// the wait ends with the grace or the process, never by a turn (one of the new copy past
    /// the floor may be a copy of one that began before the write: the next prompt went over an
    /// unread one, a review; in whatever session the floor lies: a view lagging a session
    /// switch at the write leaves a floor in the older session, which any turn of the newer
    /// passes, a third review). A managed line's wait goes by the line's own answer, not by a
    /// position: it stays. A live write's floor is this daemon's view of the new copy (or the
    /// copy's end at the write, CORR-6's floor): it stays too.
    pub(crate) fn floor_unprovable(&mut self) {
        let by_floor = self.awaiting_unplaced.is_none() && self.awaiting_accepted.is_none();
        if self.awaiting_turn_after.is_none() || !self.awaiting_reopened || !by_floor {
            return;
        }
        for prompt in self.awaiting_prompts.iter_mut().filter(|p| p.reopened) {
            if prompt.seen_unproven {
                prompt.taken_by = None; // the record may be a copy of one from before the write
                prompt.seen_unproven = false;
            }
            if let Some(floor) = prompt.past.as_mut() {
                floor.position = UNREACHABLE_FLOOR;
            }
        }
        if let Some(floor) = self.awaiting_past.as_mut() {
            floor.position = UNREACHABLE_FLOOR;
            self.reopened_end_unproven = false;
        }
    }

    /// ADM-5 (PTY): a prompt of ours (`request`'s) was written (or is being) with `past` its
    /// floor: the wait (its grace from now) goes on until its user message too. A plain
    /// send's joins a wait already open (ADM-13 writes it whatever the wait), never replaces
    /// it. A prompt a restart reopened keeps its proof rule (`AwaitedPrompt::reopened`).
    pub(crate) fn await_prompt(&mut self, hash: String, past: Option<crate::observer::Cursor>, request: &crate::ids::RequestId, now_ms: u64) {
        if self.awaiting_prompts.is_empty() {
            self.not_reopened(); // a new wait: this daemon's
        }
        // `blocker_for_command` refuses a plain send past the bound; every other write needs
        // an agent with no wait open.
        assert!(self.awaiting_prompts.len() < MAX_AWAITED_PROMPTS, "a plain send past the bound is refused");
        self.awaiting_turn_after = Some(now_ms);
        self.awaiting_past = None; // a PTY wait's floors are its prompts'
        self.awaiting_unplaced = None;
        self.awaiting_accepted = None;
        let prompt = AwaitedPrompt { hash, past, request: Some(request.clone()), reopened: false, taken_by: None, seen_unproven: false };
        self.awaiting_prompts.push(prompt);
    }

    /// ADM-5 (PTY): `request`'s write was refused before its first byte: its prompt is not
    /// awaited; the wait ends when no prompt it is for is still untaken.
    pub(crate) fn prompt_not_written(&mut self, request: &crate::ids::RequestId) {
        self.awaiting_prompts.retain(|prompt| prompt.request.as_ref() != Some(request));
        if self.awaiting_prompts.iter().all(AwaitedPrompt::taken) {
            self.end_wait();
        }
    }

    /// ADM-5, ADM-12: the late outcome of a write the engine gave up on (`refused`: before its
    /// first byte, by the request that asked for it: its prompt is not awaited), or over, its
    /// bytes landed as late as now. The agent's claim was held meanwhile (`LandingWrite`), so
    /// no other write came since the give-up: a wait still open is this write's (or one it
    /// joined, a plain send), and keeps its prompt (a review: it was cleared, and the floor
    /// rule let a turn begun before the landing end the wait). The grace did not end it during
    /// the hold (`Engine::apply_snapshot`: an empty composer says nothing of bytes not landed
    /// yet).
    pub(crate) fn lost_write_ended(&mut self, now_ms: u64, refused: Option<&crate::ids::RequestId>) {
        match refused {
            Some(request) => self.prompt_not_written(request),
            None => self.written_until(now_ms),
        }
    }
}
