//! The oracle: ground truth (bytes that reached each pane, turns the provider started and
//! which write opened them, finals, durable commits) and the checks of DESIGN.md's list, run
//! at every receipt, write and publication, and at the end of the quiet phase (liveness).

use crate::store_model::StoreTables;
use crate::world::{Record, Session};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use wakterm_engine::{
    prompt::prompt_hash, AgentEvent, Classification, EventBody, ObserverEvent, PersistOp, ProcessIdentity, Receipt, SessionId, TerminalEvent,
    TerminalState, TurnId,
};

/// The managed agent's once-known runtime gaps (the `note.mgd_*` tolerances) are violations:
/// the default since they were fixed (20,000 seeds clean). `--lenient-mgd` tolerates them
/// again, to compare a run against the old findings.
pub static STRICT_MGD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

pub fn strict_mgd() -> bool {
    STRICT_MGD.load(std::sync::atomic::Ordering::Relaxed)
}

/// ADM-5 liveness: how long before a call the observer must have delivered a turn start for
/// the call's `awaiting_turn_start` refusal to be a stall. The driver's inbox is FIFO, so an
/// event sent before the call is applied before it; the margin only keeps the rule obviously
/// clear of any race.
pub const STALL_MARGIN_MS: u64 = 1_000;

/// MON-1 liveness: the longest the monitor may take, once faults stopped, to read a record
/// that became readable. The runtime's wakes come within milliseconds; an agent nothing can
/// wake (its sessions directory without a watch) is looked at every second
/// (`monitor_recheck::recheck_interval`), and the model's loop runs every 50-400 ms: far below
/// the 30 s recheck of an attached agent whose directory is watched.
pub const LOOK_LAG_BOUND_MS: u64 = 5_000;
/// EV-9: how long the settled events may hold more than retention's size bound (its task
/// passes every 0.2-1.5 s, each pass bringing them under it).
pub const RETENTION_SIZE_GRACE_MS: u64 = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// A receipt claims more (or other) than the evidence shows.
    Misclassified,
    /// One request id reached a pane twice.
    DuplicateWrite,
    /// A terminal event that is wrong: not our turn's final, out of order, twice, not durable.
    WrongFinal,
    /// Liveness: something unfinished after faults stopped.
    Unfinished,
    /// The observer reported evidence the ground truth does not hold: it started from a
    /// checkpoint saved for another process (OBS-1), or a resume did not replay every record
    /// after its armed cursor (REC-2, OBS-2).
    Evidence,
    /// Liveness (ADM-5, ADM-17): an admission was refused `busy`/`awaiting_turn_start` although
    /// the observer had delivered a turn start after the agent's last write well before the
    /// call: the engine kept waiting for a turn it had been told of. Or (ADM-5, ADM-18) it was
    /// refused `busy`/`turn_active` although the agent ran no turn since well before the call
    /// and the engine had been told its last turn ended (`check_not_over_refused`).
    Stalled,
    /// ADM-18: a no-steer send's prompt written into a running turn whose start the observer
    /// had delivered to the engine before the call (the engine knew it ran).
    Steered,
    /// EV-1, EV-2: an agent event sequence a subscriber saw not above the last one, or again
    /// with other content; a published event later gone from (or changed in) the store; a
    /// durable event no subscriber ever got.
    EventSequence,
    /// EV-2: an agent event published before its commit (not in the store as published).
    EventNotDurable,
    /// EV-3, EV-4: an agent's turn events out of the provider's record order, one record's
    /// event twice with no `observer.lost` / `observer.gap` / `agent.incarnation_changed`
    /// between, an event that is not the provider's record, or `agent.started` twice.
    EventOrder,
    /// EV-5, EV-7: the stream skipped provider records (of a session it reported attached)
    /// without an `observer.lost` / `observer.gap` / `agent.incarnation_changed` saying so, or
    /// ends short of what the provider recorded.
    EventGap,
    /// EV-6: a request terminal event without exactly one `request.terminal` agent event of
    /// the same `terminal_event_sequence` durable with it, or one without its terminal event;
    /// a request with a durable receipt without exactly one `request.admitted` (or a released
    /// one with any).
    RequestTerminalEvent,
    /// HIST-4: retention removed a finished request that finished less than its window ago
    /// (by simulated time, which no wall-clock step moves).
    PrunedEarly,
    /// SUB-4 (a): a submit acknowledged although the pane did not move after the true Enter
    /// boundary of that very submission with no other write after it, or the receipt's Enter
    /// boundary is not the pane's.
    SubmitFalseAck,
    /// SUB-5 (b): `retry_safe` / `not_started` with bytes of the submission in the pane,
    /// `complete` without all of them, `partial` with none.
    SubmitWriteState,
    /// SUB-1, SUB-2 (c): another writer's bytes inside a split write, two racing submits that
    /// both wrote, or the engine asking for a write while its own split write was in progress.
    Interleaved,
    /// SUB-5 (d): a receipt that fails `assert_consistent`, a `timeout_ms` not clamped to
    /// 250..=10000 (default 3000), or another submission's or agent's receipt.
    SubmitReceipt,
    /// SUB-4 (e): a submit call not answered within its bound, or submissions still in flight
    /// in a quiescent engine.
    SubmitStalled,
    /// ADM-4: an admission's write (its leading Ctrl-U) reached a composer holding a human's
    /// draft: the draft is erased (counted with `interleaved`: our write over another's input).
    DraftErased,
}

/// SUB-4: the pane at one moment (ground truth).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaneTruth {
    pub output_end: u64,
    pub screen: String,
    pub generation: u64,
    pub writes: u64,
    pub alive: bool,
    /// The holder the pane belongs to (a holder started later counts from 0 again).
    pub holder: u64,
}

/// One `session action=submit` call as the caller made it.
#[derive(Clone, Debug)]
pub struct SubmitCallInput {
    pub agent: usize,
    /// As sent (any case); the oracle keys by its lowercase form.
    pub submission_id: String,
    pub target: String,
    pub exact_agent_id: bool,
    pub text: String,
    pub timeout_ms: Option<u64>,
    /// Calls sent in the same instant share a group (two racing submits).
    pub group: Option<u64>,
}

/// SUB-*: what happened to one submission in the pane (ground truth).
#[derive(Clone, Debug, Default)]
pub struct SubmitTruth {
    pub agent: usize,
    pub group: Option<u64>,
    /// Bytes of its split write (all steps) and how many reached the pane.
    pub total: usize,
    pub reached: usize,
    /// The pane right after its CR went in (captured with it, before anything else moved).
    pub boundary: Option<PaneTruth>,
    /// The pane moved after `boundary` (more output AND another screen) while no other write
    /// had come after it and the same child ran.
    pub moved_after_enter: bool,
    /// Its receipt said retry-safe (nothing written): no byte may reach the pane later.
    pub said_unwritten: bool,
    pub answered: bool,
    /// When its caller sent it (ADM-5: a split write an earlier daemon handed out may land in
    /// a later one's run, which has no record of it: SUB-6).
    pub called_ms: u64,
}

#[derive(Clone, Debug)]
pub struct Violation {
    pub kind: Kind,
    pub message: String,
}

/// One write that passed the pane's incarnation check.
#[derive(Clone, Debug)]
pub struct WriteFact {
    /// The prompt as written (framing stripped).
    pub text: String,
    pub bytes_reached: usize,
    pub bytes_total: usize,
    /// When the engine asked for the write (a stalled holder writes later: `pane.write_late`).
    pub asked_ms: u64,
    /// When its bytes reached the pane (TIME-2: the restart's hold counts from the engine's
    /// learning of it, never earlier).
    pub landed_ms: u64,
}

/// What the engine claimed of a request that `Oracle::same_text_unwritten_at_write` may excuse
/// (CORR-6's known gap), each noted under its own name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SameTextClaim {
    /// A `request.bound` event named the human's turn.
    Bound,
    /// The request completed, or aborted, with the human's turn.
    Completed,
    Aborted,
    /// A send was acknowledged by the human's message.
    Acknowledged,
    /// The wait for the request's prompt ended at the human's message.
    WaitEnded,
}

impl SameTextClaim {
    fn note(self) -> &'static str {
        match self {
            SameTextClaim::Bound => "note.corr_6_same_text_bound",
            SameTextClaim::Completed => "note.corr_6_same_text_completed",
            SameTextClaim::Aborted => "note.corr_6_same_text_aborted",
            SameTextClaim::Acknowledged => "note.corr_6_same_text_acknowledged",
            SameTextClaim::WaitEnded => "note.corr_6_same_text_wait_ended",
        }
    }
}

/// CORR-6 (`caller.same_text_human`): a human's prompt `text` (trimmed), recorded as a user
/// message ending at `position` in `turn`: the text of any request sent before or after it
/// (a request may reuse it later, `caller.same_text_request`: seed 69134931 found the excuse
/// missing for a request issued after the human typed).
#[derive(Clone, Debug)]
pub struct SameText {
    pub session: SessionId,
    pub position: u64,
    pub text: String,
    pub turn: TurnId,
    /// The observer port has sent it to the engine (it may have ended the request's wait).
    pub delivered: bool,
}

#[derive(Clone, Debug)]
pub struct TurnTruth {
    pub agent: usize,
    /// The request whose complete write submitted the text that opened this turn.
    pub opened_by: Option<String>,
    pub final_message: Option<String>,
    pub aborted: bool,
    /// The rollout file (identity) the turn started in, and the one its final was written to.
    pub file: u64,
    pub final_file: Option<u64>,
    /// CORR-9: the hashes of the user messages recorded in the turn, in order: a later one of
    /// another text than the first steered it (`steered`).
    pub messages: Vec<String>,
}

impl TurnTruth {
    /// CORR-9: another prompt's message came in the turn after its first one, so the end of a
    /// request bound to it must say `steered`.
    pub fn steered(&self) -> bool {
        self.messages.split_first().is_some_and(|(first, rest)| rest.iter().any(|h| h != first))
    }
}

/// What a caller sent.
#[derive(Clone, Debug)]
pub struct CallInput {
    pub agent: usize,
    pub request_id: String,
    pub prompt: String,
    pub return_final: bool,
}

/// ADM-19's truth: a human's prompt the TUI took (`Oracle::human_prompts`).
#[derive(Clone, Debug)]
struct HumanPrompt {
    taken_ms: u64,
    /// The TUI put it into a turn (its user message recorded).
    in_turn: bool,
    /// The holder's note of its Enter and its count of Enters within the grace then.
    enter: Option<(u64, u64)>,
    /// Where its user message lies (session, position), once recorded.
    recorded: Option<(SessionId, u64)>,
    /// When that record was first sent to the engine.
    delivered_ms: Option<u64>,
}

#[derive(Default)]
pub struct Oracle {
    /// EV-9: since when the settled events have held more than the size bound.
    retention_over_since: Option<u64>,
    /// When the running daemon started (ADM-5's wait for a written prompt's turn is not
    /// durable: see `on_prompt_over_unread`).
    pub daemon_started_ms: u64,
    /// ADM-5 across a restart: the requests whose write this daemon can know of when it starts
    /// (their written prompts hold the agent as right after a write): return-final ones whose
    /// submitted marker was durable, finished ones (settled one-way, terminal) whose record
    /// holds the write's outcome.
    known_writes_at_start: BTreeSet<String>,
    /// ADM-5: the agents a daemon started with a registration left unfinished (REC-1), and
    /// until when: a write it cannot rule out, so it may hold them for RF-8's timeout from
    /// when the line landed at the latest (`WRITE_LANDS_WITHIN_MS` after its start: the
    /// holder may write it after the crash); and so may a later daemon,
    /// which counts the registration the restart ended (`RequestRecord::write_unknown`) from
    /// the same moment.
    unfinished_until: BTreeMap<usize, u64>,
    /// ADM-5, REC-1: the registrations a restart ended (`write_unknown`), by request id: the
    /// agent, and when that restart started. A later restart counts each again until RF-8's
    /// timeout after the latest its line may land, unless a later write of the agent was
    /// durably seen read (`RecoveredWrite::of`, `registered_after`): a daemon that wrote again
    /// waited for its own write, but its successor finds the ended registration again when
    /// that write is not durably taken (exploration seed 120187618).
    /// And the process it was registered on: the engine holds only for writes into the
    /// process the agent runs (`RecoveredWrite::reopen_wait`, a review).
    ended_unfinished: BTreeMap<String, (usize, u64, wakterm_engine::Incarnation)>,
    /// ADM-5 (managed): the agents this daemon started knowing of an earlier write than the
    /// pane's last one (that one's registration ended by an earlier restart, REC-1): it waits
    /// for the earlier line's own answer, which it may never see (answered before the mark, the
    /// mark's note of it lost with a loss), and a later line's answer cannot tell it which came
    /// first: it may hold them for RF-8's timeout from its start.
    older_line_at_start: BTreeSet<usize>,
    /// ADM-5 (PTY), EV-13: the agents this daemon started waiting for a write whose floor lies
    /// in another session than the one their pane writes in now (or in two sessions; not a
    /// write with no floor, whose wait its prompt's message ends): no turn
    /// it is told of passes that floor, so it holds the agent until its grace finds it idle with
    /// an empty composer, as for a session changed while down (`changed_while_down`). The
    /// session may have been replaced while the earlier daemon ran, after its durable mark last
    /// named the old one: to the restart that is the same (seed 22463 of a shifted world).
    floor_elsewhere_at_start: BTreeSet<usize>,
    /// ADM-5, ADM-12: per agent, which request's write the engine last gave up on
    /// (`write_result_lost`) and when the oracle first learned it:
    /// the write may land, so the engine holds the agent for RF-8's timeout from then (in the
    /// same daemon; one started after, `RecoveredWrite::of`, from `WRITE_LANDS_WITHIN_MS`
    /// later, the latest the holder may still write it) unless a later turn ends it. A later
    /// write of the engine's ends it (`on_pane_write`).
    lost_write_at: BTreeMap<usize, (String, u64)>,
    /// Request id -> the normal form of every prompt a caller sent under it (a changed input
    /// is another). Two requests may share one (`caller.same_text_request`): a write is known
    /// by its request, never by its text.
    prompts: BTreeMap<String, BTreeSet<String>>,
    pub writes: BTreeMap<String, Vec<WriteFact>>,
    pub turns: BTreeMap<String, TurnTruth>,
    /// The requests whose own written prompt the provider recorded as a user message (ADM-13:
    /// what acknowledges a send).
    pub own_prompts_recorded: BTreeSet<String>,
    /// `caller.same_text_human`: the user messages of humans' prompts of a request's text
    /// (`same_text_unwritten_at_write`).
    pub same_text_messages: Vec<SameText>,
    /// (request, turn): the request's own prompt was recorded in that turn (it opened it, joined
    /// it or steered into it). A turn that holds a human's prompt of the same text and ours
    /// shows both to the engine before it ends: completing it is no known gap
    /// (`prompt_twice_in_turn`), so `same_text_unwritten_at_write` excuses only its binding.
    pub own_messages: BTreeSet<(String, String)>,
    /// Where the rollout truly ended (the runtime's fstat, `World::record_end`) when each
    /// request's write was asked for (None: no end could be read); the pane port may lose it
    /// (mutant `record_end_not_reported`), this is what it read.
    pub ends_at_write: BTreeMap<String, Option<(SessionId, u64)>>,
    /// ADM-19: of the turn starts and user messages the observer port sent the engine, per
    /// agent, the latest moment one became readable in the rollout.
    prompt_delivered_ms: BTreeMap<usize, u64>,
    /// ADM-19's truth: per agent, the prompts a human submitted that the TUI took (an Enter
    /// on a non-empty composer), by id: when, and whether the TUI began its turn (or steered
    /// it into one) yet.
    human_prompts: BTreeMap<usize, BTreeMap<u64, HumanPrompt>>,
    next_human_prompt: u64,
    /// ADM-19's liveness: per agent, the first read to the end the observer loop made after
    /// the holder pushed an Enter (its note, the read's session and position, when), whether
    /// or not it reported it: where the engine's floor for that Enter should lie.
    enter_floors: BTreeMap<usize, (u64, SessionId, u64, u64)>,
    /// Per agent, when the engine last asked for a write of ours (any writer's: one that
    /// failed may have written, and the engine counts it).
    our_write_ms: BTreeMap<usize, u64>,
    /// The same as the current daemon started: the earlier daemons' last writes.
    our_write_ms_at_start: BTreeMap<usize, u64>,
    pub last_sequence: u64,
    pub ended: BTreeMap<String, u64>,
    /// When each request ended (its terminal event reached the watcher).
    pub ended_ms: BTreeMap<String, u64>,
    /// The requests a restart ended as registrations left unfinished (REC-1,
    /// `restart_in_write_window`): their write may have happened, or happen still.
    ended_by_restart: BTreeSet<String>,
    pub violations: Vec<Violation>,
    /// The classification of the last receipt each request id got.
    pub last_receipt: BTreeMap<String, Classification>,
    /// IDEM-2, IDEM-5: ids an `accepted` receipt with `replayed: false` was handed out for:
    /// only the one call that wrote may say so; a joined or later call is a replay.
    accepted_unreplayed: BTreeSet<String>,
    /// ADM-12: when the engine gave up on each request's write (a `write_result_lost`
    /// receipt): an old holder may write it any time later, a write the engine cannot know of.
    given_up_ms: BTreeMap<String, u64>,
    /// IDEM-7: ids a receipt called unwritten or retry-safe, and no call for the id has started
    /// since: a write of such an id proves the receipt claimed less than the truth.
    pub claimed_unwritten: BTreeMap<String, String>,
    /// Calls numbered in the order they started (the driver's inbox is FIFO), and the number of
    /// the latest call per id.
    pub calls_started: u64,
    pub latest_call: BTreeMap<String, u64>,
    /// TIME-1: per registered request with a deadline, the real (simulated) time it counts from
    /// (`on_registered`), the timeout, and the wall-clock offset of the daemon that registered
    /// it; and the current daemon's offset.
    pub deadlines: BTreeMap<String, (u64, u64, i64)>,
    /// The latest call of each request id with a timeout (start, timeout); the deadline is
    /// taken when the id's registration commits (`on_registered`): an earlier call refused
    /// before registering sets no deadline, and it may have been made to another daemon, with
    /// another wall-clock offset.
    pub call_deadlines: BTreeMap<String, (u64, u64)>,
    pub daemon_wall_offset_ms: i64,
    /// TIME-1: the wall-clock offset of the daemon that committed each terminal event, by
    /// sequence (`on_terminal_committed`).
    terminal_offsets: BTreeMap<u64, i64>,
    /// OBS-3: return-final requests (and their agent) a restarted daemon resumes in a rollout
    /// that was replaced while it was down: nothing read from the new file may end them.
    pub replaced_while_down: BTreeMap<String, usize>,
    /// A known runtime gap, counted as `note.obs3_loss_not_durable` instead of failed: requests
    /// of `replaced_while_down` whose OBS-3 loss did not become durable before a crash, and
    /// that a later daemon resumed from a checkpoint saved on the replacement file (which then
    /// proves fine). What they end with may come from the replacement file.
    pub obs3_unprotected: BTreeSet<String>,
    /// ADM-5 liveness: per agent, where its last write that passed the pane's incarnation check
    /// and opened a wait went (a plain send that joins an open wait is only `awaited`;
    /// session, and the record's end then: any turn start after it is newer), and the
    /// first turn start after it the current daemon's observer delivered to the engine (when,
    /// where, which turn), or an earlier daemon's, made durable (`on_daemon_start`).
    pub last_write: BTreeMap<usize, (SessionId, u64)>,
    pub turn_after_write: BTreeMap<usize, (u64, u64, TurnId)>,
    /// ADM-5, EV-13: the agents' rollout sessions ever cut back or replaced while a daemon was
    /// down (`on_file_changed_while_down`). A wait a restart reopens for a PTY write in such a
    /// session may have its floor in an older copy, which no position read since compares with
    /// (`AgentEntry::floor_unprovable`, `RecoveredWrite::floor_wait`; or not proven yet after a
    /// loss, `FloorProof`): the engine may hold the agent whatever turn it is told of, until the
    /// grace finds it idle with an empty composer. Also a write made after the change: the run
    /// that wrote it may have crashed before its note of the change was durable, and the next
    /// restart cannot tell which copy the write read (exploration seed 700053041).
    changed_while_down: BTreeSet<(usize, SessionId)>,
    /// The request whose bytes `last_write` is (none: a submit's).
    last_writer: BTreeMap<usize, String>,
    /// ADM-5 (PTY): the hash of the prompt `last_write` wrote (the write that opened the wait:
    /// a plain send that joins it changes neither, `awaited`): the engine's wait ends only at a
    /// user message carrying it (`AgentEntry::awaiting_prompts`), live or reopened by a restart
    /// (the latest write it knows of). None: a restart's engine waits for another write's
    /// prompt (`on_daemon_start`): no turn says the wait is over.
    last_prompt: BTreeMap<usize, Option<String>>,
    /// ADM-5 (PTY): the prompts of ours the engine's wait is for, with the rollout's end at
    /// each one's write: the last write's, and before it those of the same wait whose user
    /// message was not delivered (a plain send that may steer is written whatever the wait,
    /// ADM-13, and joins it: `AgentEntry::awaiting_prompts`). The wait ends once each has
    /// come past its own write (exploration seed 82398000: a send's message ended it while a
    /// submit's prompt sat queued).
    awaited: BTreeMap<usize, Vec<(String, SessionId, u64)>>,
    /// ADM-5 (PTY): until when a wait this oracle could not see (`stall_excused` when a plain
    /// send joined it) may still hold the agent: the engine's grace and RF-8's timeout run
    /// from the latest write into the wait.
    joined_unseen_until: BTreeMap<usize, u64>,
    /// ADM-5 (PTY): when the latest prompt of ours went into the agent's pane.
    wait_written_ms: BTreeMap<usize, u64>,
    /// ADM-5 (PTY): when the latest plain send that joined the wait (`awaited`) went into the
    /// agent's pane: the engine's grace runs from the latest write into the wait, so a prompt
    /// of ours written over an unread one is judged by the time since then too
    /// (`on_prompt_over_unread`; it went by the unread prompt's own taking, and an engine
    /// ending a joined wait at the grace from its first write was excused).
    joined_written_ms: BTreeMap<usize, u64>,
    /// ADM-5 (managed): the JSON-RPC id of the `turn/start` line `last_write` wrote: only the
    /// app-server's answer to that very line moves the engine's wait for it (an acceptance into
    /// a turn not yet started makes it the wait for that turn's start), so only the turn it
    /// opened (or the running turn it was folded into) counts as after the write.
    last_line: BTreeMap<usize, String>,
    /// The turn the engine was told the app-server accepted `last_line` into, and when it was
    /// told (a daemon's start, for one it learned from the durable mark).
    last_line_turn: BTreeMap<usize, (TurnId, u64)>,
    /// ADM-5 (managed) across a restart: the agents whose last line's acceptance the engine
    /// was told of (an attach or a loss since keeps it: `EventMark::forget_turns` keeps the
    /// answered lines): its durable mark must hold the line, so a restart after its turn's
    /// durable start must not hold the agent (`line_answer_kept`).
    answer_kept: BTreeSet<usize>,
    /// When `last_line` was written: the engine's wait for it ends RF-8's timeout later.
    last_line_written_ms: BTreeMap<usize, u64>,
    /// The turns a user message of was delivered to the engine: one ends the wait for an
    /// accepted turn's start as the start does (a replay after a restart may show the message
    /// and not the start, which lay before the mark).
    turn_users_delivered: BTreeSet<(usize, TurnId)>,
    /// CORR-15: per (agent, turn), the request id the engine was first told opened it.
    turn_openers: BTreeMap<(usize, TurnId), String>,
    /// Per agent, the last turn start the current daemon's observer delivered to the engine
    /// and when, or when it delivered that turn's end (None: ended) (`check_not_over_refused`).
    pub turn_news: BTreeMap<usize, (u64, Option<TurnId>)>,
    /// ADM-18: when the current daemon's observer first delivered each (agent, turn) start.
    pub turns_delivered: BTreeMap<(usize, TurnId), u64>,
    /// ADM-18: the no-steer sends, by request id, with their first call's start.
    pub no_steer_calls: BTreeMap<String, u64>,
    /// ADM-13: the plain one-way sends that may steer (not no-steer), by request id: written
    /// whatever the engine's wait for an earlier prompt's turn (ADM-5).
    steering_sends: BTreeSet<String>,
    /// Calls still waiting for their receipt, per request id: call number -> start time. A
    /// joined caller gets the receipt of the admission an earlier call of the id started, so
    /// that receipt may have been decided as early as the earliest of them.
    pub open_calls: BTreeMap<String, BTreeMap<u64, u64>>,
    /// EV-*: what an `agent events` subscriber has seen, and where the stream stands.
    pub stream: StreamTruth,
    /// Known engine gaps seen (counted as `note.*` faults, not violations).
    pub notes: Vec<&'static str>,
    /// SUB-*: every submission by lowercase id, and the id of each submission text.
    pub submits: BTreeMap<String, SubmitTruth>,
    pub submit_texts: BTreeMap<String, Vec<String>>,
    /// MGD-3: requests whose prompt the app-server folded into a running turn (steering): it
    /// opened no turn, so no request may end with a turn's final or abort for it.
    pub steered: BTreeSet<String>,
    /// MGD-7: requests that ended `delivery_failed`, or whose receipt said `turn_start_refused`:
    /// their prompt must never reach the thread later (checked when it does,
    /// `on_prompt_reached_thread`).
    pub delivery_failed: BTreeSet<String>,
    /// MGD-7: requests whose own `turn/start` line the app-server refused (ground truth).
    pub refused_lines: BTreeSet<String>,
    /// MGD-4: agents whose process exit the port reported `drained` although its last read
    /// failed (the runtime's `drained: observer.is_some()`; see `on_terminal`).
    pub exit_claimed_drained: BTreeSet<usize>,
    /// MGD-3, EV-7: managed agents whose fold lost the session (another thread's notification)
    /// while the observer stays attached and never announces `Attached` again: the engine's
    /// mark then stays unattached, so a real loss after it makes no `observer.lost` (EV-7's
    /// "nothing attached, nothing lost") and the stream may end on `observer.lost`. A known
    /// runtime gap, tolerated until the stream reports the agent attached again or reports a
    /// record (which makes the session the stream's: its next loss is reported).
    /// Set by the stream's `observer.lost`/`observer.gap` of such a loss, cleared by the next
    /// `observer.attached` or record event.
    pub fold_lost: BTreeSet<usize>,
}

/// EV-*: the subscriber's view of the durable Agent API event stream.
#[derive(Default)]
pub struct StreamTruth {
    /// Every event a subscriber got (live, or caught up from the store after a restart), as
    /// JSON, by sequence.
    pub seen: BTreeMap<u64, String>,
    pub last_seen: u64,
    /// EV-9: the subscriber rebased after this sequence (cursor_too_old): nothing at or
    /// below it is expected to reach it.
    pub rebased_through: u64,
    /// EV-3: every durable `turn.started` the oracle heard of (published, or in the store when
    /// a rebase skipped it), by sequence: a rebase counts the ones it skipped as started.
    pub durable_starts: BTreeMap<u64, (usize, String)>,
    /// EV-1, EV-8: the highest settled mark the daemon ever told readers (a catalog's
    /// `events_through`, a heartbeat's `last_sequence`), over every daemon of the run: a reader
    /// that took it as its cursor must get every event published after, so none may carry a
    /// sequence at or below it.
    pub told_through: u64,
    /// Per agent (index): where the stream stands in the provider's record.
    pub agents: BTreeMap<usize, AgentStream>,
    /// Agents `agent.started` announced.
    pub started: BTreeSet<usize>,
    /// EV-14: agents the stream said stopped: nothing of them may follow (an agent whose holder
    /// is still silent at the end of a daemon's startup is held, not stopped, LIVE-1).
    pub stopped: BTreeSet<usize>,
    /// EV-4: per agent, the process the stream announced and has not said exited (its
    /// incarnation): another may be announced only after its `agent.exited`. A rebase forgets
    /// it (the exit may lie in what it skipped).
    pub announced_alive: BTreeMap<usize, String>,
    /// EV-4, EV-13: the processes (agent, incarnation) the stream said exited: nothing read
    /// from a process's provider record follows its exit under its incarnation.
    pub exited: BTreeSet<(usize, String)>,
    /// Request id -> the `terminal_event_sequence` of its `request.terminal` event.
    pub request_terminal: BTreeMap<String, u64>,
    /// (agent, session, position) of every provider record an event reported, ever (across
    /// losses and restarts).
    pub ever_reported: BTreeSet<(usize, String, u64)>,
    /// EV-3: per (agent, turn id), the `request.bound` this daemon's stream reported, and the
    /// turns whose `turn.started` the stream ever reported (neither a loss nor a restart resets
    /// them: records read again after one are reported again). A turn's start is learned
    /// before a request is bound to it, so the stream reports its first `turn.started` first.
    pub bound_turns: BTreeMap<(usize, String), u64>,
    /// EV-4, MGD-4: every record event of a managed agent's process reported (agent, process,
    /// session, position, kind), and the last `observer.gap` of its stream (session, the
    /// position after which records may be lost). A gap says the records up to it were
    /// reported; the stream's positions are the holder's, so one of those reported again is a
    /// repeat (a restart that found the ring's head evicted made the whole loss a gap and
    /// reported the ring again, `turn.final` too: a hostile run). A repeat after an in-band
    /// loss (a resume replaying past `observer.lost`) is EV-7's reading afresh, not judged.
    pub managed_reported: BTreeSet<(usize, String, String, u64, &'static str)>,
    pub managed_gap: BTreeMap<usize, (String, u64)>,
    pub started_turns: BTreeSet<(usize, String)>,
    /// Known engine gaps this daemon may leave in an agent's stream (see `tolerate_gap`).
    pub tolerated: BTreeMap<usize, Vec<Tolerance>>,
    /// Per agent, the reasons of the `SessionLost` its startup resume answered while the tail
    /// was attached (see `on_resume_loss_while_attached`).
    pub loss_while_attached: BTreeMap<usize, Vec<String>>,
}

/// Records of one session (`after < position <= through`) the stream may skip without saying
/// so, because of a known engine gap (`note`); `reported_before`: only records some event had
/// reported before.
#[derive(Clone, Debug)]
pub struct Tolerance {
    session: SessionId,
    after: u64,
    through: u64,
    note: &'static str,
    reported_before: bool,
    /// The records can never be reported by any daemon (evicted, or skipped for good): kept
    /// across restarts, until the agent's stream starts over (a new holder).
    persistent: bool,
}

/// One agent's turn events since the last `observer.lost` / `observer.gap` /
/// `agent.incarnation_changed` (after which the provider's record is read afresh).
#[derive(Default)]
pub struct AgentStream {
    /// (session, position, kind) of every provider record event reported.
    reported: BTreeSet<(String, u64, &'static str)>,
    /// Per session: the last (position, rank) reported (`turn.final` ranks after the
    /// `turn.completed` of its record).
    last: BTreeMap<String, (u64, u8)>,
    /// The record the stream has reported through, in the session it last reported.
    cursor: Option<StreamCursor>,
    /// The engine took a startup resume's `SessionLost` for a loss of the attached tail
    /// (`note.ev7_resume_loss_while_tail_attached`) and has reported neither an attach nor a
    /// record since: a real loss of the tail now makes no `observer.lost` (after a record it
    /// does: `EventMark::reported_session`).
    unattached_by_resume_loss: bool,
    /// EV-9: what the stream had reported of the agent's records since its last loss when a
    /// `cursor_too_old` rebase cleared the rest (session, position, event kind): what the
    /// subscriber got before it, and what the events the rebase skipped reported (a loss among
    /// them clears it). The subscriber did not get the skipped events, but the stream did
    /// report the records: an attach below them (a restart resumes from its checkpoint, under
    /// the durable mark) or a record after them is no gap. A record counts only with every
    /// event it maps to (a `turn.completed` whose `turn.final` never came is owed). Forgotten
    /// at the agent's next loss, as the rest.
    covered_by_rebase: BTreeSet<(String, u64, &'static str)>,
}

#[derive(Clone, Debug)]
struct StreamCursor {
    session: SessionId,
    position: u64,
    /// The record at `position` has a final whose `turn.final` is still to come.
    final_due: bool,
}

/// What the world knew of a call's agent when its receipt came (`Oracle::on_receipt`).
pub struct AgentThen {
    /// Since when the agent is idle (None: busy).
    pub idle_since: Option<u64>,
    /// The holder's note of another writer's Enter.
    pub other_enter_ms: Option<u64>,
    /// OBS-4: no observer can read the session the agent's process wrote when the stream
    /// reported it (`Agent::rollout_gone`, and the same process, `Agent::gone_writer`).
    pub rollout_gone: bool,
}

/// What the ports know about one agent event when a subscriber gets it.
pub struct EventContext<'a> {
    /// The event as published, serialised.
    pub json: &'a str,
    /// The store's row of this sequence now (None: not durable).
    pub stored: Option<&'a str>,
    /// The agent's index in the world (None: an agent the world does not know).
    pub agent: Option<usize>,
    /// One of the agent's sessions (current or past): the provider's records and who wrote them.
    pub sessions: &'a dyn Fn(&SessionId) -> Option<&'a Session>,
    /// `request.terminal`: the durable terminal event of its `terminal_event_sequence`.
    pub terminal: Option<TerminalEvent>,
    /// A managed agent's event: the process (incarnation) whose stream it reports. Its
    /// positions are that process's holder offsets, so a record there is one record for good.
    pub managed_process: Option<String>,
}

impl EventContext<'_> {
    fn records(&self, session: &SessionId) -> Option<&[Record]> {
        (self.sessions)(session).map(|s| s.records.as_slice())
    }
}

/// The agent events one provider record maps to (EV-4), and the turn it names.
fn record_events(record: &Record) -> (Vec<&'static str>, Option<&TurnId>) {
    match &record.event {
        ObserverEvent::TurnStarted { turn, .. } => (vec!["turn.started"], Some(turn)),
        ObserverEvent::UserMessage { turn, .. } => (vec!["message.user"], turn.as_ref()),
        ObserverEvent::TurnCompleted { turn, final_message: Some(_), .. } => (vec!["turn.completed", "turn.final"], Some(turn)),
        ObserverEvent::TurnCompleted { turn, final_message: None, .. } => (vec!["turn.completed"], Some(turn)),
        ObserverEvent::TurnAborted { turn, .. } => (vec!["turn.aborted"], turn.as_ref()),
        ObserverEvent::AgentMessage { turn, .. } => (vec!["message.assistant"], turn.as_ref()),
        ObserverEvent::PlanUpdated { turn, .. } => (vec!["plan.updated"], turn.as_ref()),
        // A refusal makes no stream event (MGD-7); it is never a truth record either.
        ObserverEvent::Attached { .. }
        | ObserverEvent::SessionLost { .. }
        | ObserverEvent::ProcessExited { .. }
        | ObserverEvent::RequestRefused { .. }
        | ObserverEvent::TurnAccepted { .. } => (vec![], None),
    }
}

/// A turn event's provider record key: session, position, turn.
fn turn_event_parts(body: &EventBody) -> Option<(&SessionId, u64, Option<&TurnId>)> {
    match body {
        EventBody::TurnStarted { session, provider_turn_id, position } => Some((session, *position, Some(provider_turn_id))),
        EventBody::UserMessage { session, provider_turn_id, position, .. } => Some((session, *position, provider_turn_id.as_ref())),
        EventBody::TurnCompleted { session, provider_turn_id, position, .. } => Some((session, *position, Some(provider_turn_id))),
        EventBody::TurnFinal { session, provider_turn_id, position, .. } => Some((session, *position, Some(provider_turn_id))),
        EventBody::TurnAborted { session, provider_turn_id, position } => Some((session, *position, provider_turn_id.as_ref())),
        EventBody::AssistantMessage { session, provider_turn_id, position, .. } => Some((session, *position, provider_turn_id.as_ref())),
        EventBody::PlanUpdated { session, provider_turn_id, position, .. } => Some((session, *position, provider_turn_id.as_ref())),
        _ => None,
    }
}

/// The records of `records` strictly between `after` and `before` (None: no bound).
/// The positions of the records after `after` (and before `before`) that the stream reports:
/// a refusal (MGD-7) is evidence for correlation but makes no stream event.
fn records_between(records: &[Record], after: u64, before: Option<u64>) -> Vec<u64> {
    records.iter().filter(|r| reported(r)).map(|r| r.position).filter(|p| *p > after && before.is_none_or(|b| *p < b)).collect()
}

fn reported(record: &Record) -> bool {
    !record_events(record).0.is_empty()
}

impl Oracle {
    fn fail(&mut self, kind: Kind, message: String) {
        self.violations.push(Violation { kind, message });
    }

    // ----- SUB-*: session action=submit -----

    /// A caller is about to send this submit call.
    pub fn on_submit_call(&mut self, call: &SubmitCallInput, total: usize) {
        let id = call.submission_id.to_ascii_lowercase();
        self.submit_texts.entry(call.text.clone()).or_default().push(id.clone());
        let called_ms = wakterm_runtime::driver::now_ms();
        self.submits.insert(id, SubmitTruth { agent: call.agent, group: call.group, total, called_ms, ..SubmitTruth::default() });
    }

    /// The submission a split write's paste carries: texts are unique but for `/clear`, whose
    /// write belongs to the latest such call that has not written yet (callers never send a
    /// second bare `/clear` while one to the same daemon is unanswered).
    pub fn submission_of(&self, text: &str) -> Option<String> {
        let ids = self.submit_texts.get(text)?;
        let fresh = ids.iter().rev().find(|id| self.submits.get(*id).is_some_and(|s| s.reached == 0 && s.boundary.is_none() && !s.answered));
        fresh.or(ids.last()).cloned()
    }

    /// ADM-5, RF-7 for a managed agent: request `origin`'s `turn/start` line was written while
    /// `earlier`'s, written `age_ms` before, was still unread by the app-server. The engine may
    /// give up on an unread prompt only at RF-8's turn-start timeout (an idle thread with no
    /// composer is no evidence that it went elsewhere): written on top sooner, two prompts race
    /// into one thread (the second folded into the first's turn). Across a restart only for a
    /// write the new daemon can know of (`known_writes_at_start`: the new engine holds its agent
    /// as after the write; a registration left unfinished counts, its write unknown). Whatever
    /// other prompt was taken meanwhile (a human's raw input, an earlier line of ours read
    /// late): the wait is for the line's own answer (ADM-5). Until 2026-12-05 the check
    /// excused any prompt taken from a second before the earlier write on (the wait ended at
    /// any turn past the view at the write, which could stand behind the stream), and so hid
    /// a delayed observer's turn ending the wait (seed 8337 with the old engine).
    /// For a PTY agent (`terminal.slow_turn_start`: the TUI took the earlier prompt, its turn
    /// not started yet), the engine may give up at the grace instead (`grace_ms`,
    /// `AWAITING_TURN_GRACE_MS`: an idle agent with an empty composer then); a plain send that
    /// may steer is written whatever the wait (ADM-13) and is not checked.
    pub fn on_prompt_over_unread(&mut self, agent: usize, origin: Option<&str>, earlier: Option<&str>, age_ms: u64, grace_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        let written_ms = now.saturating_sub(age_ms);
        // ADM-12: bytes an old holder wrote after the engine had given its write up (ended
        // `write_result_lost`) are a write the engine cannot know of (its known late write).
        // A one-way request has no terminal event: its `write_result_lost` receipt says when
        // (exploration seed 5019295: a one-way write an old holder made 3 s after it).
        // Not a registration a restart ended (REC-1): the new engine holds for its line, which
        // may land after the restart (a review: every such return-final line was excused).
        let ended = |id: &str| self.ended_ms.get(id).filter(|_| !self.ended_by_restart.contains(id));
        let given_up = earlier.and_then(|id| ended(id).or(self.given_up_ms.get(id))).is_some_and(|ended| *ended <= written_ms);
        // A prompt written before this daemon started is a write it knows of only when its
        // request's record says so (`known_writes_at_start`).
        // A submit's split write an earlier daemon handed out, landing in this one's run: a
        // submit leaves no record a restart reads (SUB-6's known gap; exploration seed
        // 61569338: its holder wrote on past the crash).
        let submit_of_an_earlier_daemon = earlier.and_then(|id| self.submits.get(&id.to_ascii_lowercase())).is_some_and(|s| s.called_ms < self.daemon_started_ms);
        let known = !submit_of_an_earlier_daemon && (written_ms > self.daemon_started_ms || earlier.is_some_and(|id| self.known_writes_at_start.contains(id)));
        // CORR-6's known gap: the engine's wait for `earlier`'s prompt ended at a human's prompt
        // of the same text that the provider had not written when `earlier` was.
        let same_text = |oracle: &mut Oracle| earlier.is_some_and(|id| oracle.same_text_unwritten_at_write(id, None, SameTextClaim::WaitEnded));
        // The grace runs from the latest write into the wait: a send that joined it after the
        // unread prompt was taken.
        let joined_ago = self.joined_written_ms.get(&agent).filter(|joined| **joined > written_ms).map(|joined| now.saturating_sub(*joined));
        let grace_age = joined_ago.map_or(age_ms, |ago| ago.min(age_ms));
        if known && !given_up && grace_age + STALL_MARGIN_MS < grace_ms && !same_text(self) {
            let joined = joined_ago.map(|ago| format!(", a send joining its wait {ago} ms before")).unwrap_or_default();
            let m = format!("a{agent}: {origin:?}'s prompt written while {earlier:?}'s, written {age_ms} ms before{joined}, was still unread");
            self.fail(Kind::Interleaved, m);
        }
    }

    /// Agent `agent`'s app-server took a prompt written by `origin` (None: a human's raw input).
    pub fn on_prompt_taken(&mut self, origin: Option<&str>) {
        // MGD-6: a line the holder wrote short never becomes a request (the next line's lead
        // spoils the fragment); served, it runs a prompt the engine has no turn wait for.
        let short = origin.and_then(|id| self.writes.get(id)).is_some_and(|facts| facts.iter().all(|f| f.bytes_reached < f.bytes_total));
        if short {
            let m = format!("{origin:?}'s turn/start was served although the holder wrote it short (MGD-6)");
            self.fail(Kind::Interleaved, m);
        }
    }

    /// ADM-4: an admission's write erased the human draft in agent `a`'s composer.
    pub fn draft_erased(&mut self, a: usize, writer: &str, draft: &str) {
        self.fail(Kind::DraftErased, format!("a{a}: the write of {writer} (an admission or a submit) erased the human draft {draft:?}"));
    }

    /// (c) Another writer's bytes landed inside a split write, or the engine asked for a
    /// write while its own split write held the pane.
    pub fn interleaved(&mut self, message: String) {
        self.fail(Kind::Interleaved, message);
    }

    /// Bytes of `writer`'s write reached a pane.
    pub fn on_pane_bytes(&mut self, writer: &str, n: usize) {
        let Some(truth) = self.submits.get_mut(writer) else { return };
        truth.reached += n;
        if truth.said_unwritten && n > 0 {
            let m = format!("submission {writer}: its receipt said retry-safe / not started, then {n} of its bytes reached the pane");
            self.fail(Kind::SubmitWriteState, m);
        }
    }

    /// The pane right after a split write's CR went in (ground truth, whatever the port
    /// reports as the boundary).
    pub fn on_enter_boundary(&mut self, submission: &str, truth: PaneTruth) {
        if let Some(s) = self.submits.get_mut(submission) {
            s.boundary = Some(truth);
        }
    }

    /// The pane of agent `a` moved: for every submission still waiting for its receipt whose
    /// boundary is known, did it move after that boundary, with no other write since and the
    /// same child running?
    pub fn on_pane_moved(&mut self, a: usize, now: &PaneTruth) {
        for truth in self.submits.values_mut().filter(|s| s.agent == a && !s.answered && !s.moved_after_enter) {
            let Some(b) = &truth.boundary else { continue };
            if now.alive && now.holder == b.holder && now.generation == b.generation && now.writes == b.writes && now.output_end > b.output_end && now.screen != b.screen {
                truth.moved_after_enter = true;
            }
        }
    }

    /// (a)-(e) when a caller gets its submit receipt. `elapsed_ms`: how long the call waited
    /// (simulated time, clock jumps excluded); `bound_ms`: how long it may.
    pub fn on_submit_receipt(&mut self, call: &SubmitCallInput, receipt: &wakterm_engine::SubmitReceipt, started_ms: u64, elapsed_ms: u64, bound_ms: u64) {
        use wakterm_engine::{SubmitStatus, WriteState};
        let id = call.submission_id.to_ascii_lowercase();
        // ADM-5 liveness, as for admissions: not refused for a turn the engine was told of.
        if receipt.reason.as_deref() == Some("awaiting_turn_start") {
            self.check_agent_not_stalled(call.agent, &id, started_ms);
        }
        let mut problems: Vec<(Kind, String)> = Vec::new();
        // (d) the receipt's own invariants, the clamp, whose receipt it is.
        if let Err(panic) = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| receipt.assert_consistent())) {
            let why = panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default();
            problems.push((Kind::SubmitReceipt, format!("submission {id}: receipt fails assert_consistent ({why}): {receipt:?}")));
        }
        // Seed 003's numbers, not the engine's constants.
        let expected = call.timeout_ms.unwrap_or(3_000).clamp(250, 10_000);
        if receipt.timeout_ms != expected {
            problems.push((Kind::SubmitReceipt, format!("submission {id}: timeout_ms {:?} answered as {}, expected {expected}", call.timeout_ms, receipt.timeout_ms)));
        }
        if receipt.submission_id.as_deref().is_some_and(|s| s != id) {
            problems.push((Kind::SubmitReceipt, format!("submission {id}: the receipt names submission {:?}", receipt.submission_id)));
        }
        // (e) answered within its bound.
        if elapsed_ms > bound_ms {
            problems.push((Kind::SubmitStalled, format!("submission {id}: answered after {elapsed_ms} ms, bound {bound_ms} ms ({:?}/{:?})", receipt.status, receipt.reason)));
        }
        let truth = self.submits.get(&id).cloned().unwrap_or_default();
        // (b) the write state against the bytes that reached the pane.
        match receipt.write_state {
            WriteState::NotStarted if truth.reached > 0 => {
                let m = format!("submission {id}: {:?}/{:?} not_started, retry_safe {}, but {} of its {} bytes reached the pane", receipt.status, receipt.reason, receipt.retry_safe, truth.reached, truth.total);
                problems.push((Kind::SubmitWriteState, m));
            }
            WriteState::Complete if truth.reached != truth.total => {
                let m = format!("submission {id}: write_state complete, but {} of its {} bytes reached the pane", truth.reached, truth.total);
                problems.push((Kind::SubmitWriteState, m));
            }
            WriteState::Partial if truth.reached == 0 => {
                problems.push((Kind::SubmitWriteState, format!("submission {id}: write_state partial, but none of its bytes reached the pane")));
            }
            _ => {}
        }
        if receipt.retry_safe && truth.reached > 0 && receipt.write_state != WriteState::NotStarted {
            problems.push((Kind::SubmitWriteState, format!("submission {id}: retry_safe with {} bytes in the pane", truth.reached)));
        }
        // (a) an acknowledgement is the pane's true post-Enter movement.
        if receipt.status == SubmitStatus::Acknowledged || receipt.acknowledged {
            match &truth.boundary {
                None => problems.push((Kind::SubmitFalseAck, format!("submission {id}: acknowledged, but its CR never reached the pane"))),
                Some(b) => {
                    let enter = receipt.evidence.as_ref().map(|e| e.enter_offset);
                    if enter != Some(b.output_end) {
                        let m = format!("submission {id}: acknowledged with the Enter boundary at {enter:?}, but the pane's output ended at {} right after the CR", b.output_end);
                        problems.push((Kind::SubmitFalseAck, m));
                    }
                    if !truth.moved_after_enter {
                        let m = format!("submission {id}: acknowledged ({:?}), but the pane never moved after its Enter boundary (output {}, writes {}) with no other write after it", receipt.evidence, b.output_end, b.writes);
                        problems.push((Kind::SubmitFalseAck, m));
                    }
                }
            }
        }
        // (c) of submits sent in the same instant, at most one writes.
        if let Some(group) = truth.group.filter(|_| truth.reached > 0) {
            let others: Vec<String> = self.submits.iter().filter(|(other, s)| **other != id && s.group == Some(group) && s.reached > 0).map(|(other, _)| other.clone()).collect();
            if !others.is_empty() {
                problems.push((Kind::Interleaved, format!("submission {id} and {others:?}, sent in the same instant, both wrote to a{}", truth.agent)));
            }
        }
        if let Some(s) = self.submits.get_mut(&id) {
            s.answered = true;
            s.said_unwritten = receipt.retry_safe || receipt.write_state == WriteState::NotStarted;
        }
        for (kind, m) in problems {
            self.fail(kind, m);
        }
    }

    /// (e) at quiescence: the engine holds no submission.
    pub fn submissions_left(&mut self, n: u64) {
        if n > 0 {
            self.fail(Kind::SubmitStalled, format!("{n} submissions still in flight in a quiescent engine"));
        }
    }

    /// A caller sends `text` as request `request_id`'s prompt.
    pub fn note_prompt(&mut self, request_id: &str, text: &str) {
        self.prompts.entry(request_id.to_string()).or_default().insert(text.trim().to_string());
    }

    /// `text` is a prompt a caller sent as request `request_id`'s.
    pub fn is_prompt_of(&self, request_id: &str, text: &str) -> bool {
        self.prompts.get(request_id).is_some_and(|texts| texts.contains(text.trim()))
    }

    /// ADM-8: the engine wrote `text` as request `request_id`'s prompt to agent `a`: a text its
    /// caller sent under that id.
    pub fn check_written_text(&mut self, a: usize, request_id: &str, text: &str) {
        if !self.is_prompt_of(request_id, text) {
            self.fail(Kind::Misclassified, format!("a{a}: the engine wrote {text:?} as {request_id}'s prompt, which its caller never sent"));
        }
    }

    pub fn writes_of(&self, request_id: &str) -> usize {
        self.writes.get(request_id).map_or(0, Vec::len)
    }

    /// TIME-2: when request `request_id`'s last write reached the pane (simulated time, which
    /// no wall-clock step moves), if it ever did.
    pub fn write_landed_ms(&self, request_id: &str) -> Option<u64> {
        self.writes.get(request_id).and_then(|facts| facts.last()).map(|fact| fact.landed_ms)
    }

    /// RF-3, TIME-1: terminal event `sequence` committed in the current daemon: its wall-clock
    /// offset is the one that decided a timeout (a catch-up may show it to a watcher only
    /// after a later daemon started, with another offset: seed 33738).
    pub fn on_terminal_committed(&mut self, sequence: u64) {
        self.terminal_offsets.insert(sequence, self.daemon_wall_offset_ms);
    }

    /// HIST-4: retention removed `request_id`, which finished (its first finished phase
    /// committed) at `finished_ms` (simulated time, `None`: never seen finish), at `now_ms`:
    /// at least `window_ms` must lie between (a clock stepped by days made the wall-clock rule
    /// prune requests seconds after their end).
    pub fn on_request_pruned(&mut self, request_id: &str, finished_ms: Option<u64>, now_ms: u64, window_ms: u64) {
        if finished_ms.is_none_or(|at| at.saturating_add(window_ms) > now_ms) {
            let m = format!("{request_id}: pruned at {now_ms}, finished at {finished_ms:?}, with a window of {window_ms} ms");
            self.fail(Kind::PrunedEarly, m);
        }
    }

    /// IDEM-2/IDEM-3 across restarts: one request id never reaches a pane twice.
    pub fn on_write(&mut self, request_id: &str, fact: WriteFact) {
        let writes = self.writes.entry(request_id.to_string()).or_default();
        writes.push(fact);
        if writes.len() > 1 {
            let n = writes.len();
            self.fail(Kind::DuplicateWrite, format!("request {request_id} was written to the pane {n} times"));
        }
        if let Some(reason) = self.claimed_unwritten.get(request_id).cloned() {
            let m = format!("{request_id}: a receipt ({reason}) said not written or retry-safe, then the id was written with no new call");
            self.fail(Kind::Misclassified, m);
        }
    }

    /// A caller starts a call for `request_id`: a later write may be this call's. Returns the
    /// call's number.
    pub fn on_call(&mut self, request_id: &str, timeout_ms: u64) -> u64 {
        if timeout_ms > 0 {
            let at = wakterm_runtime::driver::now_ms();
            self.call_deadlines.insert(request_id.to_string(), (at, timeout_ms));
        } else {
            self.call_deadlines.remove(request_id);
        }
        self.claimed_unwritten.remove(request_id);
        self.calls_started += 1;
        self.latest_call.insert(request_id.to_string(), self.calls_started);
        let at = wakterm_runtime::driver::now_ms();
        self.open_calls.entry(request_id.to_string()).or_default().insert(self.calls_started, at);
        self.calls_started
    }

    /// A daemon starts: its engine has seen no turn yet, and the calls the dead one held will
    /// never be answered (their callers call again).
    ///
    /// `taken_durably`: the agents whose first turn after their last write (`turn_after_write`)
    /// the stream made durable, in the session it still reports. ADM-5: the new engine must not
    /// hold them for that write (`EventMark::prompts_taken`): the turn counts as delivered at its
    /// start; the others' turns, as before, only when its observer delivers them.
    /// `latest_known`: per agent, the latest of those writes (by registration), and the session
    /// of its recorded floor (where the engine's view stood at the write), and the PTY agents
    /// whose latest writes' floors no turn of the pane's session passes (in two sessions, or in
    /// another than the pane's: `floor_elsewhere_at_start`). `accepted_durably`:
    /// per agent, the lines the durable mark saw accepted into a turn not yet seen taking them
    /// (line id, turn). `unfinished`: the registrations left unfinished, this start ends them
    /// (REC-1), their agents and processes. `seen_read`: per agent, when the engine asked for
    /// each write whose record says durably that its prompt was read; and the process each
    /// agent runs now.
    pub fn on_daemon_start(
        &mut self,
        known_writes: BTreeSet<String>,
        unfinished: BTreeMap<String, (usize, wakterm_engine::Incarnation)>,
        (seen_read, running): (Vec<(usize, u64)>, BTreeMap<usize, wakterm_engine::Incarnation>),
        taken_durably: BTreeSet<usize>,
        (latest_known, floors_elsewhere): (BTreeMap<usize, (String, Option<SessionId>)>, BTreeSet<usize>),
        accepted_durably: Vec<(usize, (String, TurnId))>,
    ) {
        self.daemon_started_ms = wakterm_runtime::driver::now_ms();
        self.floor_elsewhere_at_start = floors_elsewhere;
        self.our_write_ms_at_start = self.our_write_ms.clone();
        self.known_writes_at_start = known_writes;
        for (id, (agent, incarnation)) in unfinished {
            self.ended_unfinished.insert(id, (agent, self.daemon_started_ms, incarnation));
        }
        self.hold_for_ended_registrations(&seen_read, &running);
        // Only when the last write the pane saw is the latest the new engine knows of: a later
        // one it does not know (a request that ended meanwhile) leaves it waiting on an earlier
        // write, whose floor may lie in an earlier session than the turn (seed 14134), and a
        // later one the pane never saw land (its result lost, the receipt lost in the crash)
        // is rightly held for (exploration seed 86889244). And only when the engine's view
        // stood in the pane's session at that write: a view lagging a session switch (a file
        // rewritten just before the write) leaves a floor the turn's session cannot pass, and
        // which came first the engine cannot tell (exploration seed 41003458).
        let latest = |agent: &usize| match (self.last_writer.get(agent), latest_known.get(agent), self.last_write.get(agent)) {
            (Some(id), Some((latest, floor)), Some((session, _))) => id == latest && floor.as_ref() == Some(session),
            _ => false,
        };
        self.older_line_at_start = latest_known
            .iter()
            .filter(|(agent, (id, _))| self.last_line.contains_key(agent) && self.last_writer.get(*agent) != Some(id))
            .map(|(agent, _)| *agent)
            .collect();
        self.turn_after_write.retain(|agent, _| taken_durably.contains(agent) && latest(agent));
        let other_prompt: Vec<usize> = self.last_prompt.keys().copied().filter(|agent| !latest(agent)).collect();
        for agent in other_prompt {
            self.last_prompt.insert(agent, None); // the engine waits for another write's prompt
        }
        for entry in self.turn_after_write.values_mut() {
            entry.0 = self.daemon_started_ms;
        }
        // ADM-5 (PTY): a wait not over durably is reopened for the prompt of the write that
        // opened it (`RecoveredWrite::floor_wait`, which also awaits the unread prompts of the
        // sends that joined it: this check, awaiting fewer, only judges less): its user
        // message, replayed or new, is awaited again.
        for (agent, prompt) in &self.last_prompt {
            if let (Some(hash), Some((session, end))) = (prompt, self.last_write.get(agent)) {
                if !self.turn_after_write.contains_key(agent) {
                    self.awaited.insert(*agent, vec![(hash.clone(), session.clone(), *end)]);
                }
            }
        }
        self.turns_delivered.clear();
        self.turn_news.clear();
        // What the dead daemon's engine was told of its lines' acceptances: the new one knows
        // it only from the durable mark (`EventMark::answered_lines`), or a replay: the start
        // of a turn the mark saw the pane's last line accepted into must end its wait.
        self.last_line_turn.clear();
        for (agent, (id, turn)) in accepted_durably {
            if self.last_line.get(&agent) == Some(&id) {
                self.last_line_turn.insert(agent, (turn, self.daemon_started_ms));
            }
        }
        self.open_calls.clear();
    }

    /// ADM-5, REC-1: at a start, the agents a registration a restart ended (this one or an
    /// earlier one) may hold: its holder may land the line up to `WRITE_LANDS_WITHIN_MS` after
    /// that restart, and the engine waits RF-8's timeout from then, unless the engine asked
    /// for a later write whose prompt the record says was read (`seen_read`), or that time has
    /// passed, or the agent runs another process now (`running`).
    fn hold_for_ended_registrations(&mut self, seen_read: &[(usize, u64)], running: &BTreeMap<usize, wakterm_engine::Incarnation>) {
        use wakterm_engine::limits::{TURN_START_TIMEOUT_MS, WRITE_LANDS_WITHIN_MS};
        let now = self.daemon_started_ms;
        self.ended_unfinished.retain(|_, (_, ended, _)| now < *ended + WRITE_LANDS_WITHIN_MS + TURN_START_TIMEOUT_MS);
        for (agent, ended, incarnation) in self.ended_unfinished.values() {
            let read_after = seen_read.iter().any(|(a, asked)| a == agent && asked > ended);
            if !read_after && running.get(agent) == Some(incarnation) {
                let until = ended + WRITE_LANDS_WITHIN_MS + TURN_START_TIMEOUT_MS;
                let held = self.unfinished_until.entry(*agent).or_insert(until);
                *held = (*held).max(until);
            }
        }
    }

    /// A write to agent `a`'s pane passed the incarnation check (whatever reached the pane):
    /// the engine will wait for a turn to start after it (ADM-5).
    pub fn on_pane_write(&mut self, agent: usize, session: SessionId, end: u64, (writer, prompt): (Option<&str>, Option<&str>), line: Option<String>) {
        if let (Some(id), Some(_)) = (writer, &line) {
            self.check_not_into_accepted_turn(agent, id);
        }
        // ADM-5 (PTY): a plain send that may steer (ADM-13), written while the wait is open,
        // joins it: the wait, and what excuses it, stay the earlier write's.
        // A wait this oracle cannot see (a stall it would excuse now: a restart's reopened
        // wait, a write whose outcome is unknown) is joined too, and may then last RF-8's
        // timeout from the send (the engine's grace runs from the latest write).
        // Only while the engine's wait may still be open: RF-8's timeout from the latest write
        // into it at most (its grace ends it sooner on an idle agent; the simulator's turns
        // are short), or a joined send would keep the check off for good (a review).
        let now = wakterm_runtime::driver::now_ms();
        let steers = writer.is_some_and(|id| self.may_steer(id));
        let unseen = self.wait_unseen(agent, now);
        let recent = self.wait_written_ms.get(&agent).is_some_and(|at| now < at + wakterm_engine::limits::TURN_START_TIMEOUT_MS);
        let open = unseen || (recent && !self.turn_after_write.contains_key(&agent) && self.awaited.get(&agent).is_some_and(|a| !a.is_empty()));
        let hash = prompt.map(prompt_hash);
        if hash.is_some() {
            self.wait_written_ms.insert(agent, now);
        }
        if let Some(hash) = hash.clone().filter(|_| steers && open) {
            self.awaited.entry(agent).or_default().push((hash, session, end));
            self.joined_written_ms.insert(agent, now);
            if unseen {
                self.joined_unseen_until.insert(agent, now + wakterm_engine::limits::TURN_START_TIMEOUT_MS);
            }
            return;
        }
        self.joined_unseen_until.remove(&agent);
        self.joined_written_ms.remove(&agent);
        let awaited = self.awaited.entry(agent).or_default();
        awaited.clear();
        if let Some(hash) = &hash {
            awaited.push((hash.clone(), session.clone(), end));
        }
        self.last_write.insert(agent, (session, end));
        self.turn_after_write.remove(&agent);
        match hash {
            Some(hash) => self.last_prompt.insert(agent, Some(hash)),
            None => self.last_prompt.remove(&agent),
        };
        if writer.is_some() {
            // The engine wrote again: the hold for a registration a restart ended is over (it
            // excused any later stall of the agent until its end, a review), and so is the one
            // for a write it gave up on (ADM-12: it writes again only once that write's hold
            // ended; the wait is for this write now, a review).
            self.unfinished_until.remove(&agent);
            self.lost_write_at.remove(&agent);
        }
        match writer {
            Some(id) => self.last_writer.insert(agent, id.to_string()),
            None => self.last_writer.remove(&agent),
        };
        match line {
            Some(id) => self.last_line.insert(agent, id),
            None => self.last_line.remove(&agent),
        };
        self.last_line_written_ms.insert(agent, wakterm_runtime::driver::now_ms());
        self.last_line_turn.remove(&agent);
        self.answer_kept.remove(&agent);
    }

    /// ADM-5 (PTY): the hash of the prompt of agent `a`'s last write, when the engine waits for it.
    pub fn last_prompt(&self, a: usize) -> Option<&str> {
        self.last_prompt.get(&a).and_then(|h| h.as_deref())
    }

    /// ADM-5 (managed): the `turn/start` line of agent `a`'s last write, if it wrote one.
    pub fn last_line(&self, a: usize) -> Option<&str> {
        self.last_line.get(&a).map(String::as_str)
    }

    /// The observer port sent the engine a turn start of agent `a`.
    pub fn on_turn_delivered(&mut self, agent: usize, session: &SessionId, position: u64, turn: &TurnId) {
        let at = wakterm_runtime::driver::now_ms();
        self.turns_delivered.entry((agent, turn.clone())).or_insert(at);
        self.turn_news.insert(agent, (at, Some(turn.clone())));
        // ADM-5 (managed): a turn the engine was told another writer's `turn/start` opened is
        // no sign that ours was read (`AgentEntry::turn_may_be_the_awaited_prompts`).
        // A managed write's wait ends only with its own line's answer: the start of the turn
        // the line was accepted into, whoever opened it.
        // A PTY write's live wait ends only at its prompt's user message
        // (`on_user_message_delivered`).
        let counts = match self.last_line.get(&agent) {
            Some(_) => self.last_line_turn.get(&agent).is_some_and(|(accepted, _)| accepted == turn),
            None if self.last_prompt.contains_key(&agent) => false,
            None => self.turn_openers.get(&(agent, turn.clone())).is_none_or(|id| wakterm_engine::prompt::is_turn_start_id(id)),
        };
        let after_write = counts && self.last_write.get(&agent).is_some_and(|(s, end)| s == session && position > *end);
        if after_write && !self.turn_after_write.contains_key(&agent) {
            self.turn_after_write.insert(agent, (at, position, turn.clone()));
        }
    }

    /// The observer port sent the engine the app-server's acceptance of request `id`'s
    /// `turn/start` into `turn` (CORR-15): the first one names who opened the turn. The
    /// acceptance of the last write's own line into a turn the engine was told runs (the line
    /// folded into it) ends the engine's wait at once (ADM-5).
    pub fn on_turn_accepted_delivered(&mut self, agent: usize, id: &str, turn: &TurnId, session: &SessionId, position: u64) {
        self.turn_openers.entry((agent, turn.clone())).or_insert_with(|| id.to_string());
        let own_line = self.last_line.get(&agent).is_some_and(|line| line == id);
        if own_line {
            self.last_line_turn.insert(agent, (turn.clone(), wakterm_runtime::driver::now_ms()));
            self.answer_kept.insert(agent);
        }
        let running = self.turn_news.get(&agent).is_some_and(|(_, news)| news.as_ref() == Some(turn));
        let after_write = self.last_write.get(&agent).is_some_and(|(s, end)| s == session && position > *end);
        if own_line && running && after_write && !self.turn_after_write.contains_key(&agent) {
            let at = wakterm_runtime::driver::now_ms();
            self.turn_after_write.insert(agent, (at, position, turn.clone()));
        }
    }

    /// The observer port sent the engine the end (completed or aborted) of agent `a`'s turn
    /// `turn`: the end of the last turn it started, or of an earlier one (a duplicate final).
    pub fn on_turn_end_delivered(&mut self, agent: usize, turn: Option<&TurnId>) {
        let at = wakterm_runtime::driver::now_ms();
        if let Some(news) = self.turn_news.get_mut(&agent) {
            if news.1.is_some() && news.1.as_ref() == turn {
                *news = (at, None);
            }
        }
    }

    /// CORR-6's known gap (`caller.same_text_human`): a human's prompt of request `id`'s own
    /// text (in `turn`, when given) whose user message was not in the file when the runtime
    /// read the rollout's end just before the request's write (`ends_at_write`, or no end
    /// could be read): the provider had not written it yet, and nothing in the records tells
    /// the two prompts apart, so the engine may take it for the request's (bind its turn, or
    /// acknowledge a send by it). Noted, not failed. A message the file held then (the view
    /// had not read it) is no excuse: the engine's floor passes over it.
    fn same_text_unwritten_at_write(&mut self, id: &str, turn: Option<&TurnId>, claim: SameTextClaim) -> bool {
        let ended = matches!(claim, SameTextClaim::Completed | SameTextClaim::Aborted);
        if ended && turn.is_some_and(|t| self.own_messages.contains(&(id.to_string(), t.0.clone()))) {
            return false; // both prompts were in the turn before it ended: CORR-6's second-message rule
        }
        let end = self.ends_at_write.get(id).cloned().flatten();
        let unwritten = self.same_text_messages.iter().any(|m| {
            // The wait: only a message the engine was given can have ended it.
            let in_turn = turn.is_none_or(|t| &m.turn == t) && (claim != SameTextClaim::WaitEnded || m.delivered);
            self.is_prompt_of(id, &m.text) && in_turn && end.as_ref().is_none_or(|(session, end)| session != &m.session || m.position > *end)
        });
        if unwritten {
            self.notes.push(claim.note());
        }
        unwritten
    }

    /// ADM-19: the TUI of agent `a` took a human's prompt (an Enter on a non-empty composer):
    /// its id, for `on_human_prompt_recorded`.
    /// `enter`: the holder's note of its Enter, and how many Enters of other writers it had
    /// noted within the grace then.
    pub fn on_human_prompt_taken(&mut self, a: usize, enter: Option<(u64, u64)>) -> u64 {
        self.next_human_prompt += 1;
        let taken_ms = wakterm_runtime::driver::now_ms();
        let prompt = HumanPrompt { taken_ms, in_turn: false, enter, recorded: None, delivered_ms: None };
        self.human_prompts.entry(a).or_default().insert(self.next_human_prompt, prompt);
        self.next_human_prompt
    }

    /// ADM-19: the TUI put the human's prompt `id` into a turn (started one with it, or
    /// steered it into the running one) and recorded its user message.
    pub fn on_human_prompt_in_turn(&mut self, a: usize, id: u64, record: (SessionId, u64)) {
        if let Some(prompt) = self.human_prompts.get_mut(&a).and_then(|p| p.get_mut(&id)) {
            prompt.in_turn = true;
            prompt.recorded = Some(record);
        }
    }

    /// The engine asked for a write of ours to agent `a`'s pane.
    pub fn on_write_asked(&mut self, a: usize) {
        self.our_write_ms.insert(a, wakterm_runtime::driver::now_ms());
    }

    /// ADM-19's liveness: the observer loop read agent `a`'s rollout to its end (`floor`)
    /// after the holder pushed the Enter noted at `noted`: the engine's floor for it.
    pub fn on_enter_floor_read(&mut self, a: usize, noted: u64, floor: &wakterm_engine::observer::Cursor) {
        let now = wakterm_runtime::driver::now_ms();
        if self.enter_floors.get(&a).is_none_or(|(known, ..)| *known < noted) {
            self.enter_floors.insert(a, (noted, floor.session.clone(), floor.position, now));
        }
    }

    /// ADM-19's liveness: a refusal `other_prompt_pending` of agent `a` for a call that began
    /// at `since`, while the holder's last note is `noted`: wrong when that Enter was the
    /// only one within the grace, took a human's prompt that the TUI put into a turn, whose
    /// user message lay past the floor the loop read after the holder's push and was sent to
    /// the engine `STALL_MARGIN_MS` before the call, with no prompt of ours in flight (none
    /// written within 60 s before it, nor a registration a restart ended that the agent may
    /// still hold for, `unfinished_until`: its write may have been made, and its prompt is
    /// awaited, seed 46617) and this
    /// daemon up since before it: the engine knew the
    /// prompt had shown (mutant `enter_report_dropped`: the floor came only with an
    /// admission's look, past the human's records, and the hold lasted the grace).
    pub fn check_enter_hold_ended(&mut self, a: usize, id: &str, since: u64, noted: Option<u64>) {
        let Some(noted) = noted else { return };
        let Some((floor_noted, session, floor, read_ms)) = self.enter_floors.get(&a).cloned() else { return };
        let ours_before = self.our_write_ms.get(&a).is_some_and(|at| *at + 60_000 > noted);
        let registration_held = self.unfinished_until.get(&a).is_some_and(|until| noted < *until);
        if floor_noted != noted || read_ms < self.daemon_started_ms || noted < self.daemon_started_ms || ours_before || registration_held {
            return;
        }
        let grace = wakterm_engine::limits::OTHER_ENTER_GRACE_MS;
        let prompts = self.human_prompts.get(&a).into_iter().flat_map(|p| p.values());
        let shown = prompts.filter(|p| p.enter == Some((noted, 1))).find_map(|p| match (&p.recorded, p.delivered_ms) {
            (Some((s, position)), Some(at)) if *s == session && *position > floor => Some(at),
            _ => None,
        });
        if let Some(at) = shown.filter(|at| at + STALL_MARGIN_MS <= since && since < noted + grace) {
            let m = format!("{id}: busy/other_prompt_pending for a{a}, though the human's prompt of the Enter it waits for was delivered to the engine {} ms before the call, past the floor the loop read after the holder's push", since - at);
            self.fail(Kind::Stalled, m);
        }
    }

    /// ADM-19: a new holder knows of no earlier Enter (nor can the engine), and the prompts a
    /// process took but had not put into a turn die with it: the human's prompts taken before
    /// are no longer judged.
    pub fn forget_human_prompts(&mut self, a: usize) {
        self.human_prompts.remove(&a);
    }

    /// ADM-19: the observer port sent the engine a turn start or a user message of agent `a`
    /// that became readable at `visible_ms`.
    pub fn on_prompt_delivered(&mut self, a: usize, visible_ms: u64, record: Option<(SessionId, u64)>) {
        let latest = self.prompt_delivered_ms.entry(a).or_insert(visible_ms);
        *latest = (*latest).max(visible_ms);
        let now = wakterm_runtime::driver::now_ms();
        for prompt in self.human_prompts.get_mut(&a).into_iter().flat_map(|p| p.values_mut()) {
            if record.is_some() && prompt.recorded == record {
                prompt.delivered_ms.get_or_insert(now);
            }
        }
    }

    /// ADM-19 (PTY): `writer`'s prompt (an admission's, a no-steer send's, a submit's; a plain
    /// send may steer, ADM-13) reaches agent `a`'s pane less than the grace after a human's
    /// Enter (`other_enter_ms`, as the holder noted it) with no turn start or user message that
    /// became readable after that Enter sent to the engine: that prompt's turn may still be
    /// unrecorded, and ours races it (the real Codex queued ours as the next turn, and a
    /// request of the same text completed with the human's). The engine's look must have
    /// refused it; a write of the look's count refuses an Enter after the look. By when the
    /// records became readable, not when they were sent (a review: an old turn delivered
    /// late after the Enter is no sign of its turn).
    /// `provider_lag_ms`: how late the provider writes its records (`observer.delayed`).
    pub fn check_other_enter(&mut self, a: usize, writer: &str, other_enter_ms: Option<u64>, provider_lag_ms: u64) {
        let now = wakterm_runtime::driver::now_ms();
        let Some(at) = other_enter_ms else { return };
        // A provider that writes seconds late writes an earlier turn's records after the
        // Enter, past any floor: the known gap of position floors (the real Codex writes
        // within some 25 ms).
        if provider_lag_ms <= crate::world::REAL_CODEX_RECORD_LAG_MS {
            self.check_human_prompts_recorded(a, writer, now);
        }
        let seen_since = self.prompt_delivered_ms.get(&a).is_some_and(|seen| *seen >= at);
        let recent = now < at + wakterm_engine::limits::OTHER_ENTER_GRACE_MS;
        if recent && !seen_since && !self.may_steer(writer) {
            self.interleaved(format!("a{a}: {writer}'s prompt was written {} ms after a human's Enter whose turn the engine had not been shown (ADM-19)", now - at));
        }
    }

    /// ADM-19's truth: no prompt of ours (but a plain send's, which may steer) reaches agent
    /// `a`'s pane within the grace of a human's prompt the TUI took and has not put into a
    /// turn yet (queued, or its turn's start delayed, `terminal.slow_turn_start`): that
    /// prompt's turn may start after ours is taken, and the TUI may queue ours behind it (the
    /// real Codex did: a review found two Enters within 25 ms, or a human's Enter right after
    /// a write of ours, let the first prompt's records, past the floor the monitor took early,
    /// end the hold of the second). Stronger than `check_other_enter`'s rule: by the human's
    /// own prompt. One in a turn already is no race: a prompt of ours joins that turn or
    /// follows it (CORR-6 tells them apart).
    fn check_human_prompts_recorded(&mut self, a: usize, writer: &str, now: u64) {
        let grace = wakterm_engine::limits::OTHER_ENTER_GRACE_MS;
        // A prompt of ours an earlier daemon asked for may still be in flight at this one's
        // start, and this engine does not know it (a submit is not durable; of admissions,
        // only the latest write's wait reopens): the count can be short by it (known gap;
        // exploration seed 73011079).
        let earlier_daemons = self.our_write_ms_at_start.get(&a).is_some_and(|at| self.daemon_started_ms < at + wakterm_engine::limits::AWAITING_TURN_GRACE_MS);
        if earlier_daemons && now < self.daemon_started_ms + grace {
            self.notes.push("note.adm_19_earlier_daemons_prompt_in_flight");
            return;
        }
        let unrecorded = |p: &&HumanPrompt| now < p.taken_ms + grace && !p.in_turn;
        let unrecorded = self.human_prompts.get(&a).and_then(|p| p.values().filter(unrecorded).map(|p| p.taken_ms).min());
        if let Some(taken_ms) = unrecorded.filter(|_| !self.may_steer(writer)) {
            self.interleaved(format!("a{a}: {writer}'s prompt was written {} ms after the TUI took a human's prompt not recorded yet (ADM-19)", now - taken_ms));
        }
    }

    /// CORR-5, ADM-5 (PTY): a request's durable floor (`RequestRecord::written_past`) never lies
    /// before where the rollout truly ended when its write was asked for (`ends_at_write`, the
    /// runtime's read of the file's length): nothing recorded up to there can carry its prompt,
    /// and a floor at the view's position instead let a turn of the same text that the view
    /// had not read yet bind the request or end its wait (`caller.same_text_human`; rare in
    /// the model, as the admission's refresh reads the file just before, so this catches the
    /// floor itself, mutant `record_end_not_reported`). Only for a write whose outcome was
    /// answered: a lost one's floor is the view's (no end came back). An end in another
    /// session than the floor's says nothing of it.
    pub fn check_write_floors(&mut self, ops: &[PersistOp]) {
        for op in ops {
            let PersistOp::PutRequest(r) = op else { continue };
            let answered = r.receipt.as_ref().is_some_and(|receipt| receipt.write_state != wakterm_engine::WriteState::Unknown);
            let (Some(floor), Some(Some((session, end)))) = (&r.written_past, self.ends_at_write.get(r.request_id.as_str())) else { continue };
            if answered && &floor.session == session && floor.position < *end {
                let m = format!("{}: its floor at the write is {}:{}, before the rollout's end then ({end})", r.request_id, floor.session.0, floor.position);
                self.fail(Kind::Evidence, m);
            }
        }
    }

    /// The observer port sent the engine a user message of agent `a`'s turn `turn`.
    /// And ADM-5 (PTY): the user message carrying an awaited prompt, past its write, takes it;
    /// the last one ends the engine's live wait (`AgentEntry::awaiting_prompts`).
    pub fn on_user_message_delivered(&mut self, agent: usize, turn: &TurnId, (session, position): (&SessionId, u64), hash: &str) {
        self.turn_users_delivered.insert((agent, turn.clone()));
        for message in self.same_text_messages.iter_mut().filter(|m| &m.session == session && m.position == position) {
            message.delivered = true;
        }
        let known = matches!(self.last_prompt.get(&agent), Some(Some(_)));
        let awaited = self.awaited.entry(agent).or_default();
        let taken = awaited.iter().position(|(h, s, end)| h == hash && s == session && position > *end);
        if let Some(i) = taken {
            awaited.remove(i);
        }
        let after_write = known && taken.is_some() && awaited.is_empty();
        if after_write && !self.turn_after_write.contains_key(&agent) {
            let at = wakterm_runtime::driver::now_ms();
            self.turn_after_write.insert(agent, (at, position, turn.clone()));
        }
    }

    /// The observer port sent the engine agent `a`'s facts after a liveness look, or a silent
    /// holder's first answer at a start with another process than the durable mark's: a
    /// process change ends the engine's wait (`AgentEntry::end_wait`), and the turn the old
    /// process accepted our line into may never start (ADM-5).
    pub fn on_process_changed_delivered(&mut self, agent: usize) {
        self.last_line_turn.remove(&agent);
        self.awaited.remove(&agent); // the engine's wait ends with the process
        self.joined_written_ms.remove(&agent);
    }

    /// The observer port sent the engine an attach or a loss of agent `a`'s session: the turn
    /// state comes from the record's head (or is unknown) until a turn start is delivered.
    pub fn on_session_changed_delivered(&mut self, agent: usize) {
        self.turn_news.remove(&agent);
    }

    /// ADM-5 (managed) across a restart: whether the engine was told of agent `a`'s last
    /// line's acceptance into the turn `turn_after_write` names, no later than that turn's
    /// start (`answer_kept`). Its durable mark then holds the line taken (the start's event
    /// batch carries the mark), so a new daemon must not wait for the line's own answer, a
    /// loss between the two notwithstanding (exploration seed 3640021: the mark forgot the
    /// answer at the loss and the restart held the agent RF-8's minute). Judged by what the
    /// engine was told, not by the mark it wrote, so a mark that forgot the line is caught (a
    /// review of 22a3145). Not so (the answer never reached the engine), the wait is the
    /// known gap (`RecoveredWrite::managed_wait`).
    pub fn line_answer_kept(&self, a: usize) -> bool {
        let told = self.last_line_turn.get(&a).zip(self.turn_after_write.get(&a));
        self.answer_kept.contains(&a) && told.is_some_and(|((turn, told_ms), (at, _, started))| told_ms <= at && turn == started)
    }

    /// ADM-5, ADM-18 (liveness): `busy`/`turn_active` for an agent that ran no turn: idle in
    /// truth since `STALL_MARGIN_MS` before the call (`since`) began, and the end of the last
    /// turn the engine was told started reached it as well before the call (a turn whose
    /// end the observer has not read yet is running as far as anyone can tell). An admission with the current
    /// incarnation and a no-steer send must be let in then; a refusal would keep them out
    /// while the agent waits.
    fn check_not_over_refused(&mut self, agent: usize, id: &str, since: u64, idle_since: Option<u64>) {
        let (Some(idle), Some(&(told, None))) = (idle_since, self.turn_news.get(&agent)) else { return };
        if idle + STALL_MARGIN_MS <= since && told + STALL_MARGIN_MS <= since {
            let m = format!("{id}: busy/turn_active for a{agent}, idle since {} ms before the call, its last turn's end delivered to the engine {} ms before it", since - idle, since - told);
            self.fail(Kind::Stalled, m);
        }
    }

    /// ADM-13: a plain one-way send that may steer is being made.
    pub fn on_steering_send(&mut self, request_id: &str) {
        self.steering_sends.insert(request_id.to_string());
    }

    /// ADM-13: whether `writer`'s write may go in while an earlier prompt's turn has not
    /// started (a plain send that may steer).
    pub fn may_steer(&self, writer: &str) -> bool {
        self.steering_sends.contains(writer)
    }

    /// ADM-18: a no-steer send is being made (its first call starts now).
    pub fn on_no_steer_call(&mut self, request_id: &str) {
        let at = wakterm_runtime::driver::now_ms();
        self.no_steer_calls.entry(request_id.to_string()).or_insert(at);
    }

    /// ADM-18: the prompt of request `id` was just folded into agent `agent`'s running turn
    /// `turn` (a TUI's Enter, or the app-server's `turn/start` on a busy thread). A no-steer
    /// send must not be written into a turn the engine had been told of (delivered by the
    /// current daemon's observer `STALL_MARGIN_MS` before the request's first call, so the
    /// engine handled it before the call: its inbox is in order) and not told the end of
    /// (the turn still runs). A turn started or seen later is the race every TUI write has.
    pub fn on_steered(&mut self, agent: usize, id: &str, turn: &TurnId) {
        let (Some(&called), Some(&delivered)) = (self.no_steer_calls.get(id), self.turns_delivered.get(&(agent, turn.clone()))) else {
            return;
        };
        if delivered + STALL_MARGIN_MS <= called {
            let m = format!("{id}: a no-steer send was written into a{agent}'s running turn {}, delivered to the engine {} ms before the call", turn.0, called - delivered);
            self.fail(Kind::Steered, m);
        }
    }

    /// ADM-5 (managed): a `turn/start` line of ours (an admission's or a send's: a managed send
    /// is refused while the wait is open) written while the engine had been told the agent's
    /// last line of ours was accepted into a turn whose start or user message it had not been
    /// told of yet (live, or by the durable mark at its start), before the call that wrote it
    /// began (its inbox is in order: the acceptance came first), by a simulated millisecond
    /// at least. The engine waits for that turn's start (`AgentEntry::awaiting_accepted`,
    /// `RecoveredWrite::managed_wait`): the reply comes before `turn/started`, and a prompt
    /// written between the two goes into the turn starting (RF-7; `app_server.slow_turn_start`).
    /// The call is the latest open one of the id (a retry meets the window its first call did
    /// not, a review).
    fn check_not_into_accepted_turn(&mut self, agent: usize, id: &str) {
        let called = self.open_calls.get(id).and_then(|calls| calls.values().max().copied());
        let (Some(called), Some((turn, told))) = (called, self.last_line_turn.get(&agent)) else { return };
        // The wait may end RF-8's timeout after the line's write (the engine counts from when it
        // learned of the write, or later after a restart: never sooner).
        let Some(&written) = self.last_line_written_ms.get(&agent) else { return };
        let waiting = called + STALL_MARGIN_MS < written.min(*told) + wakterm_engine::limits::TURN_START_TIMEOUT_MS;
        let key = (agent, turn.clone());
        let started = self.turns_delivered.contains_key(&key) || self.turn_users_delivered.contains(&key);
        if *told < called && waiting && !started {
            let m = format!("{id}: a turn/start of ours written to a{agent} while the engine had been told, {} ms before the call, that our last line was accepted into turn {}, not yet started", called - told, turn.0);
            self.fail(Kind::Steered, m);
        }
    }

    /// ADM-5, ADM-17: a wait for the written prompt's turn that the engine had been told was
    /// over before the call reached it (`since`, the earliest start among the id's open calls).
    fn check_not_stalled(&mut self, call: &CallInput, since: u64) {
        self.check_agent_not_stalled(call.agent, &call.request_id, since);
    }

    /// `check_not_stalled` for agent `agent` and a call named `id` that started at `since`.
    fn check_agent_not_stalled(&mut self, agent: usize, id: &str, since: u64) {
        let Some((at, position, turn)) = self.turn_after_write.get(&agent).cloned() else { return };
        if self.stall_excused(agent, since) {
            return;
        }
        if at + STALL_MARGIN_MS <= since {
            let (session, end) = self.last_write.get(&agent).cloned().expect("a turn after a write");
            let m = format!(
                "{}: busy/awaiting_turn_start for a{}, but turn {} (session {} at {position}, after the last write at {end}) was delivered to the engine {} ms before the call",
                id,
                agent,
                turn.0,
                session.0,
                since - at
            );
            self.fail(Kind::Stalled, m);
        }
    }

    /// ADM-5: whether the engine may hold agent `agent` at `since` for a write whose wait this
    /// oracle cannot follow (a stall is excused then), or one a plain send joined then.
    fn stall_excused(&self, agent: usize, since: u64) -> bool {
        let joined_unseen = self.joined_unseen_until.get(&agent).is_some_and(|until| since < until + STALL_MARGIN_MS);
        self.wait_unseen(agent, since) || joined_unseen
    }

    /// `stall_excused` but for a joined send's excuse (a send joining never renews it: a
    /// stream of sends would hide a stall for good, a review).
    fn wait_unseen(&self, agent: usize, since: u64) -> bool {
        // ADM-5, REC-1: a registration a daemon found unfinished may have been written (after
        // that turn): the engine holds its agent up to RF-8's timeout from that start.
        let unfinished = self.unfinished_until.get(&agent).is_some_and(|until| since < until + STALL_MARGIN_MS);
        let older_line = self.older_line_at_start.contains(&agent) && since < self.daemon_started_ms + wakterm_engine::limits::TURN_START_TIMEOUT_MS + STALL_MARGIN_MS;
        let unknown_write = unfinished || older_line;
        // A daemon started after the give-up counts from the latest the write may land
        // (`RequestRecord::written_ms`), the live one from the give-up.
        let lost_hold_ms = |lost: u64| wakterm_engine::limits::TURN_START_TIMEOUT_MS + if self.daemon_started_ms > lost { wakterm_engine::limits::WRITE_LANDS_WITHIN_MS } else { 0 };
        let lost_write = self.lost_write_at.get(&agent).is_some_and(|(_, lost)| since < lost + lost_hold_ms(*lost) + STALL_MARGIN_MS);
        // A wait a restart reopened (the last write made before this daemon started), for a PTY
        // write in a session changed while down (`changed_while_down`), or whose floor the
        // restart found in another session than the pane's (`floor_elsewhere_at_start`). The hold ends at the
        // grace after the write when the agent is idle with an empty composer; a running turn
        // or a dialog on the screen keeps it, without a bound in the engine (seed 31228: a
        // question 23 s after the start); the excuse stops at RF-8's timeout from the write, as
        // a restart reopens no older write's wait.
        // Also a line an earlier daemon handed out that landed in this one (a registration a
        // restart ended, REC-1: the engine's wait for it is the reopened one; exploration seed
        // 50120234).
        let written = self.last_line_written_ms.get(&agent).copied().unwrap_or(0);
        let earlier_daemons = self.last_writer.get(&agent).is_some_and(|id| self.ended_unfinished.contains_key(id) || self.known_writes_at_start.contains(id));
        let reopened = (written < self.daemon_started_ms || earlier_daemons) && !self.last_line.contains_key(&agent);
        let changed = self.last_write.get(&agent).is_some_and(|(session, _)| self.changed_while_down.contains(&(agent, session.clone())))
            || self.floor_elsewhere_at_start.contains(&agent);
        let copy_changed = reopened && changed && since < written + wakterm_engine::limits::TURN_START_TIMEOUT_MS + STALL_MARGIN_MS;
        unknown_write || lost_write || copy_changed
    }

    /// IDEM-7: no receipt says `prompt_written: false` or `retry_safe: true` for an id whose
    /// prompt was or may be written. An `invalid` rejection's `prompt_written: false` (a
    /// conflict, input the engine refuses) speaks of its own input, so only its `retry_safe`
    /// counts.
    /// A call that started after this one (same id) reached the engine after it, so the engine
    /// could not know of it when it answered: a write by that call does not belie this receipt.
    /// A call that started before it, and is still in flight, the engine did know of.
    fn check_unwritten_claim(&mut self, id: &str, receipt: &Receipt, call_number: u64) {
        let own_input = receipt.classification == Classification::Invalid;
        let claims = receipt.retry_safe || (!receipt.prompt_written && !own_input);
        if !claims {
            return;
        }
        let reason = format!("{:?}/{}", receipt.classification, receipt.reason.clone().unwrap_or_default());
        if self.writes_of(id) > 0 {
            self.fail(Kind::Misclassified, format!("{id}: receipt {reason} says not written or retry-safe, but the id was written"));
        }
        if self.latest_call.get(id).is_some_and(|latest| *latest > call_number) {
            return;
        }
        self.claimed_unwritten.insert(id.to_string(), reason);
    }

    /// ADM-5, ADM-12: the engine gave up on a write to agent `agent` (`write_result_lost`): it
    /// may land, so the engine holds the agent for RF-8's timeout from now.
    /// Learned first when the record saying so commits (`note_durable_give_ups`), then again
    /// from the receipt or the terminal event: the first time counts (a review: each later
    /// one moved the allowance on, the restart's catch-up to past the restart, where the
    /// allowance's +20 s no longer applied).
    pub fn on_write_given_up(&mut self, agent: usize, request_id: &str) {
        if self.lost_write_at.get(&agent).is_some_and(|(id, _)| id == request_id) {
            return;
        }
        self.lost_write_at.insert(agent, (request_id.to_string(), wakterm_runtime::driver::now_ms()));
    }

    /// ADM-9, ADM-10, ADM-15, IDEM-2, ADM-13, OBS-4 at the moment a caller gets its receipt.
    /// `agent_then`: the ground truth of agent `call.agent` then.
    pub fn on_receipt(&mut self, call: &CallInput, receipt: &Receipt, writes_before: usize, call_number: u64, agent_then: AgentThen) {
        let AgentThen { idle_since, other_enter_ms, rollout_gone } = agent_then;
        let id = &call.request_id;
        let writes = self.writes.get(id).cloned().unwrap_or_default();
        let class = receipt.classification;
        self.last_receipt.insert(id.clone(), class);
        self.check_unwritten_claim(id, receipt, call_number);
        if receipt.reason.as_deref() == Some("write_result_lost") {
            self.given_up_ms.entry(id.clone()).or_insert(wakterm_runtime::driver::now_ms());
            self.on_write_given_up(call.agent, id);
        }
        if class == Classification::Accepted && !receipt.replayed && !self.accepted_unreplayed.insert(id.clone()) {
            self.fail(Kind::Misclassified, format!("{id}: a second accepted receipt says replayed: false, but one call wrote"));
        }
        let open = self.open_calls.entry(id.clone()).or_default();
        let since = open.values().min().copied();
        let started = open.remove(&call_number);
        // A write this call caused was asked for after it began (an earlier call's write that a
        // stalled holder starts late may land during it, `pane.write_late`).
        let wrote = writes.iter().skip(writes_before).any(|w| started.is_none_or(|at| w.asked_ms >= at));
        // OBS-4: no look can show idle an agent whose rollout no observer reads (its process
        // writes a session removed, or replaced, while a daemon was down): a prompt that
        // needed it idle (all but a plain send, which may steer, ADM-13) written by this call
        // was written on no evidence (a fresh-looking first look taken for idle).
        if rollout_gone && wrote && !self.may_steer(id) {
            self.fail(Kind::Evidence, format!("{id}: written into a{}, whose rollout no observer can read since a restart: no look could show it idle", call.agent));
        }
        if class == Classification::Busy && receipt.reason.as_deref() == Some("awaiting_turn_start") {
            if let Some(since) = since {
                self.check_not_stalled(call, since);
            }
        }
        if class == Classification::Busy && receipt.reason.as_deref() == Some("turn_active") {
            if let Some(since) = since {
                self.check_not_over_refused(call.agent, id, since, idle_since);
            }
        }
        if class == Classification::Busy && receipt.reason.as_deref() == Some("other_prompt_pending") {
            if let Some(since) = since {
                self.check_enter_hold_ended(call.agent, id, since, other_enter_ms);
            }
        }
        if class.is_definitive_rejection() {
            if wrote || receipt.prompt_written {
                let reason = receipt.reason.clone().unwrap_or_default();
                self.fail(Kind::Misclassified, format!("{id}: definitive rejection {class:?}/{reason} but this call wrote to the pane"));
            }
            return;
        }
        if receipt.reason.as_deref() == Some("turn_start_refused") {
            // MGD-7: a receipt says the prompt never reached the thread only after the
            // app-server refused that request's own line; it must never reach it later.
            self.delivery_failed.insert(id.to_string());
            if !self.refused_lines.contains(id.as_str()) {
                self.fail(Kind::Misclassified, format!("{id}: receipt says turn_start_refused, but the app-server never refused its own line"));
            }
            let reached = self.steered.contains(id.as_str()) || self.turns.values().any(|t| t.opened_by.as_deref() == Some(id.as_str()));
            if reached {
                self.fail(Kind::Misclassified, format!("{id}: receipt says turn_start_refused, but its prompt reached the thread"));
            }
        }
        if receipt.reason.as_deref() == Some("steered_running_turn") {
            // MGD-3: a steered prompt joins a running turn; only a plain one-way send may steer,
            // and it never arms a return-final request.
            let armed = receipt.reply_pending || receipt.armed_cursor.is_some() || receipt.return_mode != wakterm_engine::ReturnMode::OneWay;
            if call.return_final || armed || receipt.operation != wakterm_engine::Operation::Send {
                let m = format!("{id}: steered_running_turn for a {:?} {:?} call (reply_pending {}, armed {:?})", receipt.operation, receipt.return_mode, receipt.reply_pending, receipt.armed_cursor);
                self.fail(Kind::Misclassified, m);
            }
            if self.turns.values().any(|t| t.opened_by.as_deref() == Some(id.as_str())) {
                // The view said busy, but the turn had ended: the app-server started a new
                // turn for the prompt, and the receipt says it steered.
                self.notes.push("note.mgd_steered_receipt_but_new_turn");
            }
        }
        if class == Classification::Accepted {
            match writes.as_slice() {
                [] => self.fail(Kind::Misclassified, format!("{id}: accepted but nothing reached the pane")),
                [w] => {
                    if w.bytes_reached != w.bytes_total {
                        let m = format!("{id}: accepted but only {} of {} bytes reached the pane", w.bytes_reached, w.bytes_total);
                        self.fail(Kind::Misclassified, m);
                    } else if w.text != call.prompt {
                        let m = format!("{id}: accepted but the pane got {:?}, the caller sent {:?}", w.text, call.prompt);
                        self.fail(Kind::Misclassified, m);
                    }
                }
                _ => self.fail(Kind::Misclassified, format!("{id}: accepted but written {} times", writes.len())),
            }
            let recorded = self.own_prompts_recorded.contains(id);
            if receipt.acknowledged == Some(true) && !recorded && !self.same_text_unwritten_at_write(&id, None, SameTextClaim::Acknowledged) {
                self.fail(Kind::Misclassified, format!("{id}: acknowledged but the provider never recorded the prompt"));
            }
            // ADM-13's cost, counted: `false` (unknown) although the provider had recorded the
            // send's own prompt by the answer (not yet read, or a message an earlier write of
            // its text may carry).
            if receipt.acknowledged == Some(false) && recorded {
                self.notes.push("note.adm_13_recorded_but_unacknowledged");
            }
        }
        if receipt.replayed {
            if let Some(w) = writes.first() {
                if w.text != call.prompt {
                    let m = format!("{id}: replayed {class:?} for input {:?}, but {:?} was written", call.prompt, w.text);
                    self.fail(Kind::Misclassified, m);
                }
            }
        }
    }

    /// TERM-2, RF-5, CORR-6, CORR-7, CORR-10, CORR-11 at every event a watcher sees.
    /// `durable`: the event is committed in the store right now.
    pub fn on_terminal(&mut self, event: &TerminalEvent, durable: bool) {
        let id = event.request_id.as_str().to_string();
        let seq = event.terminal_event_sequence;
        // REC-2: a resume always re-attaches at the armed cursor it was given, so only another
        // look (racing the resume) can attach past it; ending the request then gave up evidence
        // the resume was about to replay (simulator seed 97 before the fix).
        if event.reason.as_deref() == Some("observer_resumed_past_cursor") {
            self.fail(Kind::Evidence, format!("{id}: ended observer_resumed_past_cursor although its resume was still to replay from the armed cursor"));
        }
        if !durable {
            self.fail(Kind::WrongFinal, format!("{id}: terminal event {seq} visible before its commit"));
        }
        if seq <= self.last_sequence {
            self.fail(Kind::WrongFinal, format!("{id}: terminal sequence {seq} after {}", self.last_sequence));
        }
        if let Some(earlier) = self.ended.get(&id) {
            self.fail(Kind::WrongFinal, format!("{id}: ended twice (sequences {earlier} and {seq})"));
        }
        self.last_sequence = self.last_sequence.max(seq);
        self.ended.insert(id.clone(), seq);
        self.ended_ms.entry(id.clone()).or_insert_with(wakterm_runtime::driver::now_ms);
        if event.reason.as_deref() == Some(wakterm_engine::RESTART_REASON) {
            self.ended_by_restart.insert(id.clone());
        }
        let turn = event.provider_turn_id.as_ref().and_then(|t| self.turns.get(&t.0)).cloned();
        if self.steered.contains(&id) && matches!(event.state, TerminalState::Completed | TerminalState::Aborted) {
            let m = format!("{id}: ended {:?} with turn {:?}, but its prompt was folded into a running turn (MGD-3): it opened none", event.state, event.provider_turn_id);
            self.fail(Kind::WrongFinal, m);
        }
        // OBS-3: a resume across a replaced rollout ends indeterminate (a deadline or a cancel,
        // which read nothing from the file, may come first).
        let file_free = matches!(event.state, TerminalState::Indeterminate | TerminalState::TimedOut | TerminalState::Cancelled);
        if self.replaced_while_down.contains_key(&id) && !file_free {
            let m = format!("{id}: ended {:?} (turn {:?}, final {:?}) although its rollout was replaced while the daemon was down", event.state, event.provider_turn_id, event.final_message);
            self.fail(Kind::WrongFinal, m);
        }
        match event.state {
            TerminalState::Completed => match turn {
                Some(t) if t.opened_by.as_deref() == Some(id.as_str()) => {
                    if self.obs3_unprotected.contains(&id) {
                        // The known gap: its final may be the replacement file's.
                    } else if t.final_message != event.final_message {
                        let m = format!("{id}: completed with {:?}, the turn's final was {:?}", event.final_message, t.final_message);
                        self.fail(Kind::WrongFinal, m);
                    } else if t.final_file != Some(t.file) {
                        // The final must be its own turn's, in the file the turn (and the
                        // request's armed cursor) lived in.
                        let m = format!("{id}: completed with a final written to file {:?}, not to file {} its turn began in", t.final_file, t.file);
                        self.fail(Kind::WrongFinal, m);
                    } else {
                        self.check_steered_flag(&id, &t, event);
                    }
                }
                _ if self.same_text_unwritten_at_write(&id, event.provider_turn_id.as_ref(), SameTextClaim::Completed) => {}
                other => {
                    let opener = other.and_then(|t| t.opened_by);
                    let m = format!("{id}: completed with turn {:?} which was opened by {opener:?}", event.provider_turn_id);
                    self.fail(Kind::WrongFinal, m);
                }
            },
            TerminalState::Aborted => {
                let ours = turn.as_ref().is_some_and(|t| t.aborted && t.opened_by.as_deref() == Some(id.as_str()));
                if !ours && !self.same_text_unwritten_at_write(&id, event.provider_turn_id.as_ref(), SameTextClaim::Aborted) {
                    self.fail(Kind::WrongFinal, format!("{id}: aborted, but turn {:?} is not our aborted turn", event.provider_turn_id));
                } else if let Some(t) = turn.as_ref().filter(|_| ours && !self.obs3_unprotected.contains(&id)) {
                    self.check_steered_flag(&id, t, event);
                }
            }
            TerminalState::DeliveryFailed => {
                self.delivery_failed.insert(id.clone());
                if event.reason.as_deref() == Some("turn_start_refused") && !self.refused_lines.contains(&id) {
                    self.fail(Kind::WrongFinal, format!("{id}: ended turn_start_refused, but the app-server never refused its own line"));
                }
                let opened = self.turns.values().find(|t| t.opened_by.as_deref() == Some(id.as_str())).map(|t| t.agent);
                match opened {
                    // A known runtime gap (MGD-4): the process exit was reported drained
                    // although the observer's last read failed (the holder gone, or its
                    // connection dropped), so the turn the prompt opened was never read.
                    Some(agent) if self.exit_claimed_drained.contains(&agent) && !strict_mgd() => self.notes.push("note.mgd_delivery_failed_after_undrained_exit"),
                    Some(_) => self.fail(Kind::WrongFinal, format!("{id}: delivery_failed, but our prompt opened a turn")),
                    // MGD-3, MGD-7: a prompt folded into the running turn reached the thread.
                    None if self.steered.contains(&id) => self.fail(Kind::WrongFinal, format!("{id}: delivery_failed, but its prompt was folded into a running turn")),
                    None => {
                        if event.reason.as_deref() == Some("turn_start_refused") {
                            self.notes.push("note.turn_start_refused_ended");
                        }
                    }
                }
            }
            TerminalState::TimedOut => self.check_not_early(&id, event.terminal_event_sequence),
            TerminalState::Cancelled | TerminalState::Indeterminate => {}
        }
    }

    /// CORR-9: the end of request `id`, bound to its own turn `turn`, says whether another
    /// prompt steered that turn, since its final may answer that prompt too; either way wrong
    /// claims more (or less) than the turn's records show.
    fn check_steered_flag(&mut self, id: &str, turn: &TurnTruth, event: &TerminalEvent) {
        if turn.steered() != event.steered {
            let was = if turn.steered() { "was" } else { "was not" };
            let m = format!("{id}: {:?} with steered: {}, but its turn {:?} {was} steered", event.state, event.steered, event.provider_turn_id);
            self.fail(Kind::WrongFinal, m);
        }
    }

    /// RF-6: a reader was shown receipt `shown` of request `id` while the store held `stored`:
    /// an `accepted` one the store does not hold claims more than is durable (a failed
    /// confirmation makes it `indeterminate`, a crash `restart_in_write_window`).
    pub fn check_read_receipt(&mut self, id: &str, shown: Option<&Receipt>, stored: Option<&Receipt>) {
        let accepted = |r: Option<&Receipt>| r.is_some_and(|r| r.classification == Classification::Accepted);
        if accepted(shown) && !accepted(stored) {
            let m = format!("{id}: request get showed an accepted receipt the store does not hold (it holds {:?})", stored.map(|r| r.classification));
            self.fail(Kind::Misclassified, m);
        }
    }

    /// RF-4: a cancel's answer against the store at the moment its caller got it: `cancelled`
    /// only once the end is durable (answered after the commit), `commit_failed` only while it
    /// is not (the engine retries it no sooner than `PERSIST_RETRY_MS` later).
    pub fn check_cancel_answer(&mut self, id: &str, outcome: &str, end_stored: bool) {
        let wrong = match outcome {
            "cancelled" => !end_stored,
            "commit_failed" => end_stored,
            _ => false,
        };
        if wrong {
            let m = format!("{id}: a cancel answered {outcome} while the store {} its end", if end_stored { "held" } else { "did not hold" });
            self.fail(Kind::Misclassified, m);
        }
    }

    /// CORR-9: a user message of hash `hash` was recorded in the running turn `turn` (a steer).
    pub fn on_steer_recorded(&mut self, turn: &TurnId, hash: String) {
        if let Some(truth) = self.turns.get_mut(&turn.0) {
            truth.messages.push(hash);
        }
    }

    /// MGD-7: request `request_id`'s prompt reached the thread (opened a turn, or joined the
    /// running one): it must not have ended `delivery_failed` (a terminal event published
    /// before the app-server read the line passed the check at the terminal).
    pub fn on_prompt_reached_thread(&mut self, request_id: &str) {
        if self.delivery_failed.contains(request_id) {
            self.fail(Kind::WrongFinal, format!("{request_id}: ended delivery_failed (or its receipt said turn_start_refused), then its prompt reached the thread"));
        }
    }

    /// RF-3, TIME-1: request `request_id`'s registration committed: its deadline is the one
    /// the engine computed when it decided to register, in this daemon (its wall-clock offset),
    /// from a call still waiting for its receipt. The earliest of those may be the one that
    /// registered (later calls of the id join it; seed 123457909: a clock jump came between
    /// the registering call and the commit, and a retry after it joined), so the deadline
    /// counts from it: never later than the engine's own.
    pub fn on_registered(&mut self, request_id: &str) {
        let Some(&(latest_at, timeout_ms)) = self.call_deadlines.get(request_id) else { return };
        let open = self.open_calls.get(request_id).into_iter().flat_map(|open| open.values());
        let at = open.chain([&latest_at]).min().copied().expect("latest_at is there");
        self.deadlines.entry(request_id.to_string()).or_insert((at, timeout_ms, self.daemon_wall_offset_ms));
    }

    /// RF-3, TIME-1: `timed_out` only once the timeout has really passed. The one allowance is
    /// TIME-1's decision: a daemon that started with its wall clock stepped forward since the
    /// call moves durable deadlines by that step: the daemon that committed the event, not
    /// the current one (seed 33738: a daemon stepped forward timed the request out at its
    /// start and crashed, and the next one, stepped back, showed the event to a watcher).
    fn check_not_early(&mut self, id: &str, sequence: u64) {
        let Some(&(at, timeout_ms, offset_then)) = self.deadlines.get(id) else { return };
        let elapsed = wakterm_runtime::driver::now_ms().saturating_sub(at);
        let deciding = self.terminal_offsets.get(&sequence).copied().unwrap_or(self.daemon_wall_offset_ms);
        let allowance = u64::try_from(deciding - offset_then).unwrap_or(0);
        if elapsed + allowance < timeout_ms {
            self.fail(Kind::Misclassified, format!("{id}: timed out after {elapsed} ms of a {timeout_ms} ms timeout"));
        }
    }

    /// The known gap (`obs3_unprotected`): agent `agent`'s requests still protected by OBS-3
    /// lose that protection. Returns how many.
    pub fn unprotect_replaced(&mut self, agent: usize) -> usize {
        let ids: Vec<String> = self.replaced_while_down.iter().filter(|(id, a)| **a == agent && !self.ended.contains_key(*id)).map(|(id, _)| id.clone()).collect();
        for id in &ids {
            self.replaced_while_down.remove(id);
            self.obs3_unprotected.insert(id.clone());
        }
        ids.len()
    }

    /// OBS-1: an observer starts from a checkpoint only when it was saved for the process
    /// running now (ground truth), never for one that exited, even with the same pid.
    pub fn on_checkpoint_used(&mut self, agent: usize, saved_for: ProcessIdentity, running: Option<ProcessIdentity>) {
        if running != Some(saved_for) {
            let m = format!("a{agent}: the observer started from a checkpoint saved for process {saved_for:?}, but {running:?} runs");
            self.fail(Kind::Evidence, m);
        }
    }

    /// REC-2, OBS-2: a resume at `armed` attaches at or before it (`attached`: where reading
    /// began, EV-13) and replays exactly the records after that, up to where the observer read
    /// (`expected`, from the file), whatever checkpoint it started from.
    pub fn on_resume_replayed(&mut self, agent: usize, armed: u64, attached: u64, emitted: &[u64], expected: &[u64]) {
        if attached > armed {
            self.fail(Kind::Evidence, format!("a{agent}: resumed at {armed}, the observer attached past it at {attached} (REC-2)"));
        }
        if emitted != expected {
            let missing: Vec<&u64> = expected.iter().filter(|p| !emitted.contains(p)).collect();
            let m = format!("a{agent}: resumed at {armed}, replayed records at {emitted:?}, the file holds {expected:?} (missing {missing:?})");
            self.fail(Kind::Evidence, m);
        }
    }

    /// REC-2: a resume's answer attaches at its cursor, or reports a loss first (a loss of an
    /// earlier process's output, MGD-4, is followed by the attach at the current process's
    /// start); an attach anywhere else with no loss before it skips records silently.
    pub fn on_resume_answer(&mut self, agent: usize, cursor: u64, events: &[ObserverEvent]) {
        let first = events.iter().find(|e| matches!(e, ObserverEvent::Attached { .. } | ObserverEvent::SessionLost { .. }));
        if let Some(ObserverEvent::Attached { position, .. }) = first {
            if *position != cursor {
                self.fail(Kind::Evidence, format!("a{agent}: resumed at {cursor}, the observer attached at {position} with no loss reported (REC-2)"));
            }
        }
    }

    /// MON-1 liveness: after the faults stopped, the monitor reads a record within
    /// [`LOOK_LAG_BOUND_MS`] of `from` (when it became readable, or the daemon's start, or the
    /// heal, whichever is last).
    /// EV-9 at each pass of the retention task with a size bound: the settled events it may
    /// prune must not hold more than the bound (plus one event: a prune takes whole events)
    /// for longer than `RETENTION_SIZE_GRACE_MS`, or retention does not bound the disk.
    pub fn on_retention_pass(&mut self, now: u64, (settled_bytes, largest): (u64, u64), bound: u64) {
        if settled_bytes <= bound + largest {
            self.retention_over_since = None;
            return;
        }
        let since = *self.retention_over_since.get_or_insert(now);
        if now > since + RETENTION_SIZE_GRACE_MS {
            let m = format!("EV-9: the settled events hold {settled_bytes} bytes, over the {bound}-byte bound since {since} ms ({} ms)", now - since);
            self.fail(Kind::EventSequence, m);
            self.retention_over_since = None;
        }
    }

    pub fn on_monitor_read(&mut self, agent: usize, from: u64, now: u64) {
        if now > from + LOOK_LAG_BOUND_MS {
            let m = format!("a{agent}: a record readable at {from} ms (or since the daemon's start or the heal) was read by the monitor only at {now} ms, {} ms later (MON-1: bound {LOOK_LAG_BOUND_MS} ms)", now - from);
            self.fail(Kind::Unfinished, m);
        }
    }

    /// EV-4: every process the stream announced (`agent.started` or
    /// `agent.incarnation_changed` with an incarnation) exits on the stream, under its own
    /// incarnation, before another is announced: a daemon killed during `agent restart` left
    /// the change with no exit (hostile run 2's D4).
    fn check_announced_alive(&mut self, a: usize, seq: u64, event: &AgentEvent) {
        let incarnation = event.incarnation.as_ref().map(|i| i.0.clone());
        // Hostile run 2's D5: a gap "rewritten while down" at 0 and an attach at 0 under a
        // process the stream had said exited (killed while the daemon was down), the file
        // untouched.
        let kind = event.kind();
        let observed = ["observer.", "turn.", "message.", "plan."].iter().any(|prefix| kind.starts_with(prefix));
        if let Some(dead) = incarnation.as_ref().filter(|i| observed && self.stream.exited.contains(&(a, (*i).clone()))) {
            self.fail(Kind::EventOrder, format!("event {seq} ({kind}) of a{a} under {dead}, after that process's agent.exited"));
        }
        if let (EventBody::AgentExited { .. }, Some(incarnation)) = (&event.body, &incarnation) {
            self.stream.exited.insert((a, incarnation.clone()));
        }
        match &event.body {
            EventBody::AgentStarted { .. } | EventBody::IncarnationChanged { .. } => {
                if let Some(alive) = self.stream.announced_alive.remove(&a) {
                    let m = format!("event {seq} ({}): a{a}'s process {incarnation:?} announced while {alive}, announced before, never exited on the stream", event.kind());
                    self.fail(Kind::EventOrder, m);
                }
                if let Some(incarnation) = incarnation {
                    self.stream.announced_alive.insert(a, incarnation);
                }
            }
            // EV-14: the stop is the agent's last event; its process's exit comes first.
            EventBody::AgentStopped => {
                if let Some(alive) = self.stream.announced_alive.remove(&a) {
                    self.fail(Kind::EventOrder, format!("event {seq}: agent.stopped of a{a} while {alive}, announced, never exited on the stream"));
                }
            }
            EventBody::AgentExited { .. } => match self.stream.announced_alive.remove(&a) {
                Some(alive) if Some(&alive) != incarnation.as_ref() => {
                    self.fail(Kind::EventOrder, format!("event {seq}: agent.exited of a{a} under {incarnation:?}, while {alive} was the process announced"));
                }
                _ => {}
            },
            _ => {}
        }
    }

    /// A terminal reason that claims what the ground truth does not hold.
    pub fn false_evidence(&mut self, message: String) {
        self.fail(Kind::Evidence, message);
    }

    pub fn unfinished(&mut self, message: String) {
        self.fail(Kind::Unfinished, message);
    }

    // ----- EV-*: the durable Agent API event stream -----

    /// EV-1..EV-7 at every agent event a subscriber gets: live (`publish_event`) or caught up
    /// from the store after a restart (`agent events --after N`).
    pub fn on_agent_event(&mut self, event: &AgentEvent, cx: &EventContext<'_>) {
        let seq = event.sequence;
        let kind = event.kind();
        // (a) EV-1, EV-2: strictly increasing, never reused with other content.
        match self.stream.seen.get(&seq) {
            Some(earlier) if earlier != cx.json => {
                self.fail(Kind::EventSequence, format!("event sequence {seq} published again with other content: {earlier} then {}", cx.json));
            }
            Some(_) => self.fail(Kind::EventSequence, format!("event sequence {seq} ({kind}) published twice")),
            None if seq <= self.stream.last_seen => {
                self.fail(Kind::EventSequence, format!("event sequence {seq} ({kind}) published after {}", self.stream.last_seen));
            }
            None => {}
        }
        // (b) EV-2: visible only once durable, as published.
        if cx.stored != Some(cx.json) {
            let m = format!("event {seq} ({kind}) published while the store holds {:?}", cx.stored);
            self.fail(Kind::EventNotDurable, m);
        }
        self.stream.seen.insert(seq, cx.json.to_string());
        self.stream.last_seen = self.stream.last_seen.max(seq);
        let Some(a) = cx.agent else {
            self.fail(Kind::EventOrder, format!("event {seq} ({kind}) of an agent the world does not know: {}", event.agent_id));
            return;
        };
        // EV-14: `agent.stopped` is an agent's last event (LIVE-1: one whose holder is silent
        // past a daemon's startup wait is held, not stopped; its events go on when it answers).
        if self.stream.stopped.contains(&a) {
            self.fail(Kind::EventOrder, format!("event {seq} ({kind}) of a{a} after its agent.stopped"));
        }
        self.check_announced_alive(a, seq, event);
        match &event.body {
            EventBody::AgentStopped => {
                self.stream.stopped.insert(a);
            }
            EventBody::AgentStarted { .. } => {
                // EV-4: an agent re-registered at startup is not announced again.
                if !self.stream.started.insert(a) {
                    self.fail(Kind::EventOrder, format!("event {seq}: agent.started of a{a} again"));
                }
            }
            EventBody::ObserverLost { reason } if self.take_resume_loss(a, reason) => {
                // The known gap of `on_resume_loss_while_attached`: the tail goes on (the
                // cursor stays), and the engine may report its records afresh.
                self.notes.push("note.ev7_resume_loss_while_tail_attached");
                let stream = self.stream.agents.entry(a).or_default();
                stream.reported.clear();
                stream.last.clear();
                stream.unattached_by_resume_loss = true;
            }
            EventBody::IncarnationChanged { .. } | EventBody::ObserverLost { .. } | EventBody::ObserverGap { .. } => {
                let reason = match &event.body {
                    EventBody::ObserverLost { reason } | EventBody::ObserverGap { reason, .. } => reason.as_str(),
                    _ => "",
                };
                if reason.starts_with("app-server notification about another thread") && !strict_mgd() {
                    self.fold_lost.insert(a);
                } else {
                    self.fold_lost.remove(&a);
                }
                // After these the provider's record is read afresh (a new process's, EV-7).
                self.stream.agents.insert(a, AgentStream::default());
                match &event.body {
                    EventBody::ObserverGap { session: Some(session), after_position, .. } => {
                        self.stream.managed_gap.insert(a, (session.0.clone(), *after_position));
                    }
                    EventBody::IncarnationChanged { .. } => {
                        self.stream.managed_gap.remove(&a);
                    }
                    _ => {}
                }
            }
            EventBody::RequestBound { request_id, provider_turn_id } => {
                self.stream.bound_turns.insert((a, provider_turn_id.0.clone()), seq);
                self.check_bound(seq, request_id.as_str(), provider_turn_id)
            }
            EventBody::ObserverAttached { session, .. } if self.written_by_another_process(event, session, cx) => {}
            EventBody::ObserverAttached { session, position } => self.stream_attached(a, seq, session, *position, cx),
            EventBody::RequestTerminal { request_id, state, terminal_event_sequence, .. } => {
                let id = request_id.as_str().to_string();
                // (d) EV-6: one per request, riding on its durable terminal event.
                if let Some(earlier) = self.stream.request_terminal.insert(id.clone(), *terminal_event_sequence) {
                    let m = format!("event {seq}: a second request.terminal for {id} (terminal sequences {earlier} and {terminal_event_sequence})");
                    self.fail(Kind::RequestTerminalEvent, m);
                }
                match &cx.terminal {
                    Some(t) if t.request_id == *request_id && t.state == *state => {}
                    other => {
                        let found = other.as_ref().map(|t| (t.request_id.as_str().to_string(), t.state));
                        let m = format!("event {seq}: request.terminal of {id} ({state:?}) names terminal sequence {terminal_event_sequence}, whose durable event is {found:?}");
                        self.fail(Kind::RequestTerminalEvent, m);
                    }
                }
            }
            body => {
                if let Some((session, position, turn)) = turn_event_parts(body) {
                    if !self.written_by_another_process(event, session, cx) {
                        self.stream_turn(a, seq, kind, session, position, turn, cx);
                    }
                }
            }
        }
    }

    /// CORR-5, CORR-6, MGD-3: a request binds only the turn its own write opened; a turn that
    /// started before that write (the running turn a prompt was folded into, a human's) is
    /// never its turn.
    fn check_bound(&mut self, seq: u64, id: &str, turn: &TurnId) {
        let opener = self.turns.get(&turn.0).map(|t| t.opened_by.clone());
        if opener != Some(Some(id.to_string())) && !self.same_text_unwritten_at_write(id, Some(turn), SameTextClaim::Bound) {
            let steered = if self.steered.contains(id) { " (its prompt was folded into a running turn)" } else { "" };
            let m = format!("event {seq}: {id} bound to turn {} opened by {opener:?}, not by its own write{steered}", turn.0);
            self.fail(Kind::WrongFinal, m);
        }
    }

    /// `observer.attached`: the stream now tails `session`; what follows lies after
    /// `position`. Moving on from another session (or past records of this one) without a
    /// loss reported leaves records unreported (EV-7).
    fn stream_attached(&mut self, a: usize, seq: u64, session: &SessionId, position: u64, cx: &EventContext<'_>) {
        // `fold_lost` ends with the first attach reported after the loss it made.
        let fold_lost = self.fold_lost.remove(&a);
        let stream = self.stream.agents.entry(a).or_default();
        let unattached = std::mem::take(&mut stream.unattached_by_resume_loss);
        let cursor = stream.cursor.clone();
        let next = match &cursor {
            Some(c) if &c.session == session => StreamCursor { position: c.position.max(position), ..c.clone() },
            _ => StreamCursor { session: session.clone(), position, final_due: false },
        };
        stream.cursor = Some(next);
        let Some(c) = cursor else { return };
        let skipped = match (&c.session == session, cx.records(&c.session)) {
            (true, Some(records)) => records_between(records, c.position, Some(position + 1)),
            (false, Some(records)) => records_between(records, c.position, None),
            (_, None) => vec![],
        };
        let skipped = self.not_covered(a, &c.session, cx.records(&c.session), skipped);
        if !c.final_due && self.gap_tolerated(a, &c.session, &skipped) {
            return;
        }
        if !skipped.is_empty() && fold_lost {
            // The known gap of `fold_lost`: a loss after it made no `observer.lost`.
            self.notes.push("note.mgd_loss_unreported_after_fold_loss");
            return;
        }
        if !skipped.is_empty() || c.final_due {
            if unattached && &c.session != session {
                // The tail lost the session after `note.ev7_resume_loss_while_tail_attached`:
                // the engine, taking it for unattached already, reported no loss.
                self.notes.push("note.ev7_resume_loss_while_tail_attached");
                return;
            }
            let m = format!(
                "event {seq}: a{a} observer.attached {}@{position}, but records of {} after {} were never reported (final due: {}): {skipped:?}",
                session.0, c.session.0, c.position, c.final_due
            );
            self.fail(Kind::EventGap, m);
        }
    }

    /// (c) and completeness for one turn event: the provider's record, in record order, once,
    /// right after the record reported before it.
    #[allow(clippy::too_many_arguments)]
    fn stream_turn(&mut self, a: usize, seq: u64, kind: &'static str, session: &SessionId, position: u64, turn: Option<&TurnId>, cx: &EventContext<'_>) {
        // EV-7: a record reported makes its session the stream's (`EventMark::reported_session`):
        // its next loss is reported, so neither known gap below holds any longer.
        self.stream.agents.entry(a).or_default().unattached_by_resume_loss = false;
        self.fold_lost.remove(&a);
        let records = cx.records(session);
        let record = records.and_then(|rs| rs.iter().find(|r| r.position == position));
        let truth = record.map(record_events);
        match &truth {
            Some((kinds, truth_turn)) if kinds.contains(&kind) && *truth_turn == turn => {}
            other => {
                let m = format!("event {seq}: a{a} {kind} {}@{position} turn {:?} is not the provider's record ({other:?})", session.0, turn.map(|t| &t.0));
                self.fail(Kind::EventOrder, m);
            }
        }
        let has_final = truth.as_ref().is_some_and(|(kinds, _)| kinds.contains(&"turn.final"));
        let rank = u8::from(kind == "turn.final");
        let stream = self.stream.agents.entry(a).or_default();
        let mut problems = Vec::new();
        if !stream.reported.insert((session.0.clone(), position, kind)) {
            problems.push((Kind::EventOrder, format!("event {seq}: a{a} {kind} of record {}@{position} reported twice with no loss between", session.0)));
        }
        if let Some(process) = &cx.managed_process {
            let again = !self.stream.managed_reported.insert((a, process.clone(), session.0.clone(), position, kind));
            let held = self.stream.managed_gap.get(&a).is_some_and(|(gap_session, after)| gap_session == &session.0 && position <= *after);
            if again && held {
                problems.push((Kind::EventOrder, format!("event {seq}: a{a} {kind} of record {}@{position} of process {process} reported again after a gap past it (the stream held it)", session.0)));
            }
        }
        // EV-3: the engine learned the turn's start before it bound a request to the turn, so
        // the stream says so in that order (a failed event batch renumbered behind a request's
        // commit once put `request.bound` first).
        if let Some(turn) = turn.filter(|_| kind == "turn.started") {
            let key = (a, turn.0.clone());
            if let Some(bound_at) = self.stream.bound_turns.get(&key).filter(|_| !self.stream.started_turns.contains(&key)) {
                problems.push((Kind::EventOrder, format!("event {seq}: a{a} turn.started of {} after its request.bound (event {bound_at})", turn.0)));
            }
            self.stream.started_turns.insert(key);
        }
        let stream = self.stream.agents.entry(a).or_default();
        let last = stream.last.insert(session.0.clone(), (position, rank));
        if last.is_some_and(|last| last >= (position, rank)) {
            problems.push((Kind::EventOrder, format!("event {seq}: a{a} {kind} {}@{position} after {last:?}: out of record order", session.0)));
        }
        let cursor = stream.cursor.clone();
        let advance = cursor.as_ref().is_none_or(|c| &c.session != session || position >= c.position);
        if advance {
            let final_due = kind == "turn.completed" && has_final;
            stream.cursor = Some(StreamCursor { session: session.clone(), position, final_due });
        }
        self.stream.ever_reported.insert((a, session.0.clone(), position));
        match cursor {
            Some(c) if &c.session == session => {
                let skipped = self.not_covered(a, session, records, records.map_or(vec![], |rs| records_between(rs, c.position, Some(position))));
                let final_missing = c.final_due && !(kind == "turn.final" && position == c.position);
                if position > c.position && (!skipped.is_empty() || final_missing) && (final_missing || !self.gap_tolerated(a, session, &skipped)) {
                    let m = format!("event {seq}: a{a} {kind} {}@{position} follows record {} (final due: {}): records {skipped:?} never reported", session.0, c.position, c.final_due);
                    problems.push((Kind::EventGap, m));
                }
            }
            Some(c) => {
                // Another session without `observer.attached`: what the old one held after
                // the cursor was never reported.
                let old = cx.records(&c.session);
                let skipped = self.not_covered(a, &c.session, old, old.map_or(vec![], |rs| records_between(rs, c.position, None)));
                if c.final_due || (!skipped.is_empty() && !self.gap_tolerated(a, &c.session, &skipped)) {
                    let m = format!("event {seq}: a{a} {kind} in {} while records of {} after {} were never reported: {skipped:?}", session.0, c.session.0, c.position);
                    problems.push((Kind::EventGap, m));
                }
            }
            None => {}
        }
        for (kind, m) in problems {
            self.fail(kind, m);
        }
    }

    /// Registers a known engine gap for agent `a` in this daemon's life: records of `session`
    /// after `after` through `through` may be skipped without `observer.gap`. A gap made of
    /// such records only is counted as `note` instead of failed. `reported_before`: only
    /// records that some earlier event had reported (before a loss) qualify, so a gap of
    /// records never reported at all still fails.
    pub fn tolerate_gap(&mut self, a: usize, session: &SessionId, after: u64, through: u64, note: &'static str, reported_before: bool) {
        let tolerance = Tolerance { session: session.clone(), after, through, note, reported_before, persistent: false };
        self.stream.tolerated.entry(a).or_default().push(tolerance);
    }

    /// `tolerate_gap` for records no daemon can ever report (MGD-4's known runtime gaps, see
    /// `ManagedPort`): kept across daemon restarts.
    pub fn tolerate_forever(&mut self, a: usize, session: &SessionId, after: u64, through: u64, note: &'static str) {
        if strict_mgd() {
            return;
        }
        let tolerance = Tolerance { session: session.clone(), after, through, note, reported_before: false, persistent: true };
        self.stream.tolerated.entry(a).or_default().push(tolerance);
    }

    /// Records the stream itself declared possibly missing (`agent.exited` with `drained:
    /// false`, CORR-11): tolerated in every mode, strict included.
    pub fn tolerate_declared(&mut self, a: usize, session: &SessionId, after: u64, through: u64, note: &'static str) {
        let tolerance = Tolerance { session: session.clone(), after, through, note, reported_before: false, persistent: true };
        self.stream.tolerated.entry(a).or_default().push(tolerance);
    }

    /// A new holder starts agent `a`'s stream over at offset 0: its old tolerances are void.
    pub fn forget_tolerances(&mut self, a: usize) {
        self.stream.tolerated.remove(&a);
    }

    /// Whether every record of `skipped` lies in one persistent tolerance (no note: the end
    /// check, which runs repeatedly).
    fn persistently_tolerated(&self, a: usize, session: &SessionId, skipped: &[u64]) -> bool {
        let Some(tolerances) = self.stream.tolerated.get(&a) else { return false };
        tolerances.iter().any(|t| t.persistent && &t.session == session && skipped.iter().all(|p| *p > t.after && *p <= t.through))
    }

    /// Whether every record of `skipped` lies in one of agent `a`'s tolerated gaps (counting
    /// its note when so).
    fn gap_tolerated(&mut self, a: usize, session: &SessionId, skipped: &[u64]) -> bool {
        let Some(tolerances) = self.stream.tolerated.get(&a) else { return false };
        let ever = &self.stream.ever_reported;
        let covering = tolerances.iter().find(|t| {
            &t.session == session
                && skipped.iter().all(|p| *p > t.after && *p <= t.through && (!t.reported_before || ever.contains(&(a, session.0.clone(), *p))))
        });
        match covering {
            Some(t) if !skipped.is_empty() => {
                if !t.persistent {
                    self.notes.push(t.note); // (a persistent one was counted where it arose)
                }
                true
            }
            _ => false,
        }
    }

    /// EV-3: a provider record's event carries the incarnation of a process that wrote its
    /// session. The stream takes observer events when they arrive, so a registration that
    /// arrives while a write defers their application cannot get ahead of them (once, they
    /// were appended after the new process's `agent.incarnation_changed`, under its
    /// incarnation). Such an event fails and is left out of the other stream checks.
    fn written_by_another_process(&mut self, event: &AgentEvent, session: &SessionId, cx: &EventContext<'_>) -> bool {
        let Some(truth) = (cx.sessions)(session) else { return false };
        let ours = match &event.incarnation {
            Some(incarnation) => truth.writers.contains(incarnation),
            None => truth.writers.is_empty(), // released after the process exited
        };
        if !ours {
            let m = format!("event {}: {} of session {} under incarnation {:?}, which never wrote it (writers {:?})", event.sequence, event.kind(), session.0, event.incarnation, truth.writers);
            self.fail(Kind::EventOrder, m);
        }
        !ours
    }

    /// A known engine gap (EV-7), counted as `note.ev7_resume_loss_while_tail_attached` and
    /// not failed: a late startup resume answers `SessionLost` (into a session OBS-3 disproved,
    /// or one that is gone) while the tail is attached to the agent's current record (a first
    /// look that came before it re-attached and reported it). The engine takes it for a loss
    /// of the live tail (`observer.lost`, mark reset) while the tail stays attached and never
    /// reports the session afresh, nor its own later loss (the engine thinks it unattached):
    /// the stream's last word is `observer.lost`, and later records come with no
    /// `observer.attached` (once one is reported, the session is the stream's again and its
    /// next loss is reported: EV-7, seed 2500006902). The oracle keeps the agent's stream where the tail is (its
    /// cursor), and lets the records be reported again (a later daemon reads them afresh after
    /// the durable loss).
    pub fn on_resume_loss_while_attached(&mut self, a: usize, reason: &str) {
        self.stream.loss_while_attached.entry(a).or_default().push(reason.to_string());
    }

    /// Whether this `observer.lost` is the resume's of `on_resume_loss_while_attached` (by its
    /// reason: a resume's reasons are its own, and the tail's may be published after it).
    fn take_resume_loss(&mut self, a: usize, reason: &str) -> bool {
        let Some(reasons) = self.stream.loss_while_attached.get_mut(&a) else { return false };
        let Some(index) = reasons.iter().position(|r| r == reason) else { return false };
        reasons.remove(index);
        true
    }

    /// EV-13: agent `a`'s rollout `session` was cut back to `cut` while the daemon was down:
    /// the records the stream reported after it are gone, and the positions after it will
    /// hold new records. The stream's place in the file moves back to the cut, so a new record
    /// there that is never reported (dropped as a "replay") is a gap, and one reported is not
    /// a double.
    pub fn on_rollout_cut(&mut self, a: usize, session: &SessionId, cut: u64) {
        self.on_file_changed_while_down(a, session);
        let Some(stream) = self.stream.agents.get_mut(&a) else { return };
        if let Some(cursor) = stream.cursor.as_mut().filter(|c| &c.session == session && c.position > cut) {
            cursor.position = cut;
            cursor.final_due = false;
        }
        stream.reported.retain(|(s, position, _)| s != &session.0 || *position <= cut);
        stream.covered_by_rebase.retain(|(s, position, _)| s != &session.0 || *position <= cut);
        if let Some(last) = stream.last.get_mut(&session.0) {
            *last = (*last).min((cut, 1));
        }
        self.stream.ever_reported.retain(|(agent, s, position)| *agent != a || s != &session.0 || *position <= cut);
    }

    /// ADM-5, EV-13: agent `a`'s rollout of `session` was cut back or replaced while the daemon
    /// was down (`changed_while_down`).
    pub fn on_file_changed_while_down(&mut self, a: usize, session: &SessionId) {
        self.changed_while_down.insert((a, session.clone()));
    }

    /// A daemon started: nothing of any agent's observer has been reported since.
    pub fn on_stream_restart(&mut self) {
        for tolerances in self.stream.tolerated.values_mut() {
            tolerances.retain(|t| t.persistent);
        }
        self.stream.loss_while_attached.clear();
        // A crash may lose a batch whose records are read again after a binding that was
        // durable: EV-3's order is that of one daemon's bindings (turns reported started stay
        // so: the stream is durable, and a record read again after a restart is no first).
        self.stream.bound_turns.clear();
    }

    /// (d) EV-6 when a terminal event reaches a watcher: its `request.terminal` committed in
    /// the same transaction (`riding`: how many the store holds for its sequence).
    pub fn on_terminal_riding(&mut self, event: &TerminalEvent, riding: usize) {
        if riding != 1 {
            let m = format!("{}: terminal event {} is durable with {riding} request.terminal agent events", event.request_id, event.terminal_event_sequence);
            self.fail(Kind::RequestTerminalEvent, m);
        }
    }

    /// (a) EV-1: every event a subscriber got is still in the store as it was (a restart
    /// never loses or renumbers a published event). Pruned ones are gone by design.
    /// EV-9: the subscriber's cursor fell below what retention pruned (cursor_too_old) and it
    /// rebased after `through`, as documented: what lies at or below it is not expected, and
    /// its place in every agent's record starts afresh.
    pub fn on_stream_rebased(&mut self, through: u64, skipped_events: &[(usize, AgentEvent)]) {
        assert!(through >= self.stream.last_seen, "a rebase moves forward");
        // EV-3: a turn start the rebase skipped counts as reported (the order check must not
        // take its replay after a loss for a start after its binding: seed 31850 once the
        // draft faults of 2026-12-05 shifted the random streams), unless the subscriber got
        // the turn's `request.bound` and no start before it: the binding lies at or below the
        // cursor and the skipped start above it, so the start came after its binding, EV-3's
        // violation, skipped or not.
        let skipped: Vec<_> = self.stream.durable_starts.range((Bound::Excluded(self.stream.last_seen), Bound::Included(through))).map(|(s, key)| (*s, key.clone())).collect();
        for (sequence, key) in skipped {
            if let Some(bound_at) = self.stream.bound_turns.get(&key).copied().filter(|_| !self.stream.started_turns.contains(&key)) {
                assert!(bound_at <= self.stream.last_seen && bound_at < sequence, "a binding the subscriber got lies at or below its cursor");
                let m = format!("event {sequence}: a{} turn.started of {} after its request.bound (event {bound_at}), skipped by a rebase", key.0, key.1);
                self.fail(Kind::EventOrder, m);
            }
            self.stream.started_turns.insert(key);
        }
        self.stream.last_seen = through;
        self.stream.rebased_through = through;
        // EV-4: the skipped events are durable stream events (what retention pruned too, which
        // the model keeps): their lifecycle is the stream's, checked and kept as if delivered.
        // Cleared instead, a process that exited among them could be observed after its exit,
        // or a skipped announce replaced unexited, unseen (last session's review, L7).
        for (a, event) in skipped_events {
            self.check_announced_alive(*a, event.sequence, event);
        }
        let before = std::mem::take(&mut self.stream.agents);
        self.stream.request_terminal.clear();
        for (a, stream) in before {
            let mut covered = stream.covered_by_rebase;
            covered.extend(stream.reported);
            self.stream.agents.entry(a).or_default().covered_by_rebase = covered;
        }
        for (a, event) in skipped_events {
            assert!(event.sequence <= through, "a rebase skips events at or below its point");
            let covered = &mut self.stream.agents.entry(*a).or_default().covered_by_rebase;
            match &event.body {
                EventBody::IncarnationChanged { .. } | EventBody::ObserverLost { .. } | EventBody::ObserverGap { .. } => covered.clear(),
                body => {
                    if let Some((session, position, _)) = turn_event_parts(body) {
                        covered.insert((session.0.clone(), position, event.kind()));
                    }
                }
            }
        }
    }

    /// `skipped` (positions of `records`, records of `session`) less those whose every event
    /// the stream had reported before a rebase (EV-9, `AgentStream::covered_by_rebase`).
    fn not_covered(&self, a: usize, session: &SessionId, records: Option<&[Record]>, mut skipped: Vec<u64>) -> Vec<u64> {
        let (Some(stream), Some(records)) = (self.stream.agents.get(&a), records) else { return skipped };
        let covered = |p: &u64| {
            let record = records.iter().find(|r| r.position == *p);
            record.is_some_and(|r| record_events(r).0.iter().all(|kind| stream.covered_by_rebase.contains(&(session.0.clone(), *p, *kind))))
        };
        skipped.retain(|p| !covered(p));
        skipped
    }

    /// EV-8: the catalog's settled mark lags what the engine settled.
    /// EV-1, EV-8: the daemon's settled mark, as a catalog or a heartbeat tells it.
    pub fn on_settled_told(&mut self, through: u64) {
        self.stream.told_through = self.stream.told_through.max(through);
    }

    /// EV-3: a durable `turn.started` of agent `a` (see `StreamTruth::durable_starts`).
    pub fn on_turn_start_durable(&mut self, sequence: u64, a: usize, turn: &str) {
        self.stream.durable_starts.insert(sequence, (a, turn.to_string()));
    }

    /// EV-1, EV-8: an event published (by a daemon of this run) after readers were told of a
    /// settled mark: it must lie above it, or a reader at that cursor never gets it (a restart
    /// after failed commits numbered on from the last durable event, below what was told).
    pub fn on_event_published(&mut self, sequence: u64, kind: &str) {
        if sequence <= self.stream.told_through {
            let m = format!("event {sequence} ({kind}) published at or below the settled mark {} readers were told: a catalog's reader misses it", self.stream.told_through);
            self.fail(Kind::EventSequence, m);
        }
    }

    pub fn catalog_behind(&mut self, message: String) {
        self.fail(Kind::EventNotDurable, message);
    }

    /// EV-9: `cursor_too_old` only when retention really removed an event the subscriber
    /// had not read (after its cursor, at or below the pruned mark).
    pub fn check_cursor_too_old(&mut self, store: &StoreTables) {
        let (cursor, pruned) = (self.stream.last_seen, store.events_pruned_through());
        if !(cursor + 1..=pruned).any(|sequence| store.pruned_event(sequence).is_some()) {
            self.fail(Kind::EventSequence, format!("cursor_too_old after {cursor} although nothing after it was pruned (pruned through {pruned})"));
        }
    }

    pub fn check_seen_still_durable(&mut self, store: &StoreTables) {
        let pruned = store.events_pruned_through();
        let mut problems = Vec::new();
        for (seq, json) in self.stream.seen.range(pruned + 1..) {
            let stored = store.agent_event(*seq).map(|e| e.event_json.as_str());
            if stored != Some(json.as_str()) {
                problems.push(format!("published event {seq} {json} is now {stored:?} in the store"));
            }
        }
        for m in problems.into_iter().take(3) {
            self.fail(Kind::EventSequence, m);
        }
    }

    /// End of the run (everything quiescent): the store and the stream agree, and each agent's
    /// stream reached the end of what its provider recorded in the session its observer
    /// tails. Returns the problems (the caller waits a little for the stream to catch up).
    pub fn stream_end_problems(&self, store: &StoreTables, tails: &[(usize, SessionId, &[Record])]) -> Vec<(Kind, String)> {
        let mut problems = Vec::new();
        let stored = store.agent_events_after(store.events_pruned_through());
        // EV-9: retention may have removed a milestone below (the checks then see only what
        // is retained), and a rebased subscriber does not expect what lies before its rebase.
        let pruned = store.events_pruned_through() > 0;
        let unseen: Vec<u64> = stored
            .iter()
            .filter(|e| e.sequence > self.stream.rebased_through && !self.stream.seen.contains_key(&e.sequence))
            .map(|e| e.sequence)
            .collect();
        if !unseen.is_empty() {
            problems.push((Kind::EventSequence, format!("{} durable agent events never reached a subscriber: {:?}", unseen.len(), &unseen[..unseen.len().min(8)])));
        }
        // (d) every durable terminal event has exactly one request.terminal, and each
        // request.terminal its terminal event.
        let mut riding: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for e in &stored {
            if let Ok(event) = serde_json::from_str::<AgentEvent>(&e.event_json) {
                if let EventBody::RequestTerminal { request_id, terminal_event_sequence, .. } = event.body {
                    riding.entry(terminal_event_sequence).or_default().push(request_id.as_str().to_string());
                }
            }
        }
        for terminal in store.terminal_after(0) {
            let ids = riding.remove(&terminal.sequence).unwrap_or_default();
            if ids != [terminal.request_id.clone()] && !(pruned && ids.is_empty()) {
                let m = format!("terminal event {} of {} has request.terminal events {ids:?}", terminal.sequence, terminal.request_id);
                problems.push((Kind::RequestTerminalEvent, m));
            }
        }
        for (sequence, ids) in riding {
            problems.push((Kind::RequestTerminalEvent, format!("request.terminal of {ids:?} names terminal sequence {sequence}, which is not durable")));
        }
        // (e) EV-6: every request whose receipt is durable (any phase but registered and
        // released) has exactly one durable `request.admitted`; no other request has one.
        let mut admitted: BTreeMap<String, usize> = BTreeMap::new();
        for e in &stored {
            if let Ok(AgentEvent { body: EventBody::RequestAdmitted { request_id, .. }, .. }) = serde_json::from_str::<AgentEvent>(&e.event_json) {
                *admitted.entry(request_id.as_str().to_string()).or_default() += 1;
            }
        }
        for request in store.requests() {
            let owed = !matches!(request.phase.as_str(), "registered" | "released");
            let count = admitted.remove(&request.request_id).unwrap_or(0);
            if count != usize::from(owed) && !(pruned && count == 0) {
                let m = format!("request {} ({}) has {count} request.admitted events, expected {}", request.request_id, request.phase, usize::from(owed));
                problems.push((Kind::RequestTerminalEvent, m));
            }
        }
        for (request_id, count) in admitted {
            problems.push((Kind::RequestTerminalEvent, format!("{count} request.admitted events for {request_id}, which has no record")));
        }
        // Completeness at the end: every record of the session the observer tails reported.
        for (a, session, records) in tails {
            let cursor = self.stream.agents.get(a).and_then(|s| s.cursor.clone());
            if cursor.is_none() && self.stream.rebased_through > 0 {
                continue; // EV-9: rebased past this agent's events; nothing of it read since
            }
            let last = records.iter().rev().find(|r| reported(r)).map(|r| r.position);
            let ok = match &cursor {
                Some(c) if &c.session == session => {
                    let left = self.not_covered(*a, session, Some(records), records_between(records, c.position, None));
                    !c.final_due && (left.is_empty() || self.persistently_tolerated(*a, session, &left))
                }
                // `fold_lost`: the stream's last word on the agent is the fold's loss.
                None if self.fold_lost.contains(a) => true,
                _ => last.is_none(),
            };
            if !ok {
                let m = format!("a{a}: the stream ends at {cursor:?}, the provider recorded {} through {last:?}", session.0);
                problems.push((Kind::EventGap, m));
            }
        }
        problems
    }

    /// OBS-4, EV-7 at the end: an agent whose process writes `session` where no observer
    /// reads it (its rollout removed, or replaced by one of another directory, while a daemon
    /// was down) has no stream that still reports that session attached: the loss was said
    /// (`observer.gap`), or the stream never got that far.
    pub fn gone_session_problems(&self, gone: &[(usize, SessionId)]) -> Vec<(Kind, String)> {
        // A startup resume's loss the engine took for the tail's (`unattached_by_resume_loss`)
        // was said on the stream (`observer.lost`): the oracle keeps the cursor for the tail
        // that goes on, but no gap is owed (exploration seed 39709942).
        let reports = |a: &usize, session: &SessionId| {
            let stream = self.stream.agents.get(a);
            stream.is_some_and(|s| !s.unattached_by_resume_loss && s.cursor.as_ref().is_some_and(|c| &c.session == session))
        };
        gone.iter()
            .filter(|(a, session)| reports(a, session))
            .map(|(a, session)| (Kind::EventGap, format!("a{a}: the stream still reports session {}, whose rollout no observer can read since a restart, and no observer.gap said so", session.0)))
            .collect()
    }

    pub fn record_problems(&mut self, problems: Vec<(Kind, String)>) {
        for (kind, m) in problems {
            self.fail(kind, m);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(oracle: &Oracle) -> Vec<Kind> {
        oracle.violations.iter().map(|v| v.kind).collect()
    }

    /// Agent 0's session `s`: a turn started at 100, user messages at 200 and 300, its
    /// completion with a final at 400, and a second turn's start at 500.
    fn rebase_session() -> Session {
        let id = SessionId("s".to_string());
        let turn = |t: &str| TurnId(t.to_string());
        let user = |position| ObserverEvent::UserMessage { session: id.clone(), turn: Some(turn("t1")), prompt_hash: "h".to_string(), position };
        let events = [
            ObserverEvent::TurnStarted { session: id.clone(), turn: turn("t1"), position: 100 },
            user(200),
            user(300),
            ObserverEvent::TurnCompleted { session: id.clone(), turn: turn("t1"), final_message: Some("done".to_string()), position: 400 },
            ObserverEvent::TurnStarted { session: id.clone(), turn: turn("t2"), position: 500 },
        ];
        let records = events.into_iter().map(|event| Record { position: event.position().expect("a record"), visible_at_ms: 0, event }).collect();
        Session { id, base: 0, header: wakterm_engine::TurnState::Idle { last_completed: None }, records, next_position: 600, file: 1, writers: vec![] }
    }

    /// The stream's event `kind` for record `position` of `rebase_session` (`observer.lost`:
    /// a loss), numbered `sequence`.
    fn rebase_event(sequence: u64, position: u64, kind: &str) -> AgentEvent {
        let session = SessionId("s".to_string());
        let turn = TurnId(if position < 500 { "t1" } else { "t2" }.to_string());
        let body = match kind {
            "observer.lost" => EventBody::ObserverLost { reason: "lost".to_string() },
            "observer.attached" => EventBody::ObserverAttached { session, position },
            "turn.started" => EventBody::TurnStarted { session, provider_turn_id: turn, position },
            "message.user" => EventBody::UserMessage { session, provider_turn_id: Some(turn), prompt_hash: "h".to_string(), position },
            "turn.completed" => EventBody::TurnCompleted { session, provider_turn_id: turn, position, final_too_large: None },
            "turn.final" => EventBody::TurnFinal { session, provider_turn_id: turn, final_message: "done".to_string(), position },
            other => unreachable!("the test's kinds: {other}"),
        };
        let agent_id = wakterm_engine::AgentId::parse("0195f0c2-7b1a-7000-8000-000000000a00").expect("a uuid");
        AgentEvent { schema: "test".to_string(), sequence, at_ms: 0, agent_id, incarnation: None, body }
    }

    /// Oracle, seed 35541581 (EV-9 with EV-7): a subscriber that got the events of `seen`,
    /// rebased past those of `skipped`, then gets an attach at 100 (a restart resumed from its
    /// checkpoint, under the durable mark) and the start at 500. `cut`: the rollout is cut back
    /// there after the rebase (EV-13). Returns what the oracle found.
    fn attach_after_rebase(seen: &[(u64, &str)], skipped: &[(u64, &str)], cut: Option<u64>) -> Vec<Kind> {
        let session = rebase_session();
        let sessions = |id: &SessionId| (id == &session.id).then_some(&session);
        let mut oracle = Oracle::default();
        let mut sequence = 0;
        let mut next = |position: u64, kind: &str| {
            sequence += 1;
            rebase_event(sequence, position, kind)
        };
        let seen: Vec<AgentEvent> = seen.iter().map(|(p, kind)| next(*p, kind)).collect();
        let skipped: Vec<(usize, AgentEvent)> = skipped.iter().map(|(p, kind)| (0, next(*p, kind))).collect();
        let after = [next(100, "observer.attached"), next(500, "turn.started")];
        let json = |events: &[AgentEvent]| -> Vec<String> { events.iter().map(|e| serde_json::to_string(e).expect("serialises")).collect() };
        let (seen_json, after_json) = (json(&seen), json(&after));
        fn see<'a>(oracle: &mut Oracle, events: &[AgentEvent], jsons: &'a [String], sessions: &'a dyn Fn(&SessionId) -> Option<&'a Session>) {
            for (event, json) in events.iter().zip(jsons) {
                let cx = EventContext { json, stored: Some(json), agent: Some(0), sessions, terminal: None, managed_process: None };
                oracle.on_agent_event(event, &cx);
            }
        }
        see(&mut oracle, &seen, &seen_json, &sessions);
        let through = skipped.last().map_or(oracle.stream.last_seen, |(_, e)| e.sequence);
        oracle.on_stream_rebased(through, &skipped);
        if let Some(cut) = cut {
            oracle.on_rollout_cut(0, &session.id, cut);
        }
        see(&mut oracle, &after, &after_json, &sessions);
        kinds(&oracle)
    }

    /// EV-9: a rebase keeps what the stream had reported since the agent's last loss (what
    /// the subscriber got, and what the skipped events reported), so an attach below it and
    /// the next record are no gap (seed 35541581). Owed still: a record never reported, one
    /// reported before a loss among the skipped events, a final whose `turn.completed` alone
    /// came (a review), and records past a cut (a review).
    #[test]
    fn ev_9_a_rebase_counts_the_records_its_skipped_events_reported() {
        let whole = [(100, "turn.started"), (200, "message.user"), (300, "message.user"), (400, "turn.completed"), (400, "turn.final")];
        assert_eq!(attach_after_rebase(&[], &whole, None), vec![], "every record before 500 was reported at or below the rebase");
        assert_eq!(attach_after_rebase(&whole[..2], &whole[2..], None), vec![], "the subscriber got 100 and 200 before it went away");
        assert_eq!(attach_after_rebase(&[], &whole[..3], None), vec![Kind::EventGap], "400 was never reported");
        assert_eq!(attach_after_rebase(&[], &whole[..4], None), vec![Kind::EventGap], "400's turn.final never came");
        let lost_after = [&whole[..], &[(0, "observer.lost")]].concat();
        assert_eq!(attach_after_rebase(&[], &lost_after, None), vec![Kind::EventGap], "a loss after them: read afresh, owed again");
        let lost_before = [&[(0, "observer.lost")], &whole[..]].concat();
        assert_eq!(attach_after_rebase(&whole[..2], &lost_before, None), vec![], "a loss before them voids nothing after it");
        assert_eq!(attach_after_rebase(&[], &whole, Some(250)), vec![Kind::EventGap], "300 and 400 lie past a cut: new records there are owed");
    }

    /// EV-4 at a `cursor_too_old` rebase (a review, L7): the lifecycle of the events the rebase
    /// skipped is the stream's: an event observed after a skipped exit of its process fails,
    /// and so does a process announced while the one a skipped event announced never exited.
    #[test]
    fn ev_4_a_rebase_keeps_the_lifecycle_of_the_events_it_skipped() {
        let event = |sequence: u64, process: &str, body: EventBody| {
            let agent_id = wakterm_engine::AgentId::parse("0195f0c2-7b1a-7000-8000-000000000a00").expect("a uuid");
            (0, AgentEvent { schema: "test".to_string(), sequence, at_ms: 0, agent_id, incarnation: Some(wakterm_engine::Incarnation(process.to_string())), body })
        };
        let started = |sequence, process| event(sequence, process, EventBody::AgentStarted { name: "a".to_string(), transport: wakterm_engine::Transport::Pty });
        let changed = |sequence, process| event(sequence, process, EventBody::IncarnationChanged { previous: None });
        let exited = |sequence, process| event(sequence, process, EventBody::AgentExited { drained: false });
        let attach = |sequence, process| event(sequence, process, EventBody::ObserverAttached { session: SessionId("s".to_string()), position: 0 });
        let run = |seen: &[(usize, AgentEvent)], skipped: &[(usize, AgentEvent)], after: &[(usize, AgentEvent)]| {
            let mut oracle = Oracle::default();
            for (a, e) in seen {
                oracle.check_announced_alive(*a, e.sequence, e);
            }
            oracle.on_stream_rebased(skipped.last().map_or(0, |(_, e)| e.sequence), skipped);
            for (a, e) in after {
                oracle.check_announced_alive(*a, e.sequence, e);
            }
            kinds(&oracle)
        };
        assert_eq!(run(&[started(1, "x")], &[exited(2, "x"), changed(3, "y")], &[attach(4, "y")]), vec![], "in order");
        assert_eq!(run(&[started(1, "x")], &[exited(2, "x"), changed(3, "y")], &[attach(4, "x")]), vec![Kind::EventOrder], "x observed after its skipped exit");
        assert_eq!(run(&[started(1, "x")], &[exited(2, "x"), changed(3, "y")], &[changed(4, "z")]), vec![Kind::EventOrder], "y never exited");
        assert_eq!(run(&[started(1, "x")], &[changed(2, "y")], &[]), vec![Kind::EventOrder], "x never exited, among the skipped");
    }

    /// ADM-5, REC-1 (exploration seed 120187618): a registration a restart ended
    /// (`write_unknown`) holds its agent at a later restart too, until RF-8's timeout after
    /// the latest its line may land, though the daemon between wrote again (its live wait
    /// moved on, `on_pane_write`); unless that later write's prompt was durably seen read.
    #[test]
    fn adm_5_a_later_restart_holds_again_for_a_registration_an_earlier_one_ended() {
        use wakterm_engine::limits::{TURN_START_TIMEOUT_MS, WRITE_LANDS_WITHIN_MS};
        let ended = 4_000;
        let until = ended + WRITE_LANDS_WITHIN_MS + TURN_START_TIMEOUT_MS;
        let process = |p: &str| wakterm_engine::Incarnation(p.to_string());
        let restart_on = |at: u64, seen_read: &[(usize, u64)], runs: &str| {
            let mut oracle = Oracle::default();
            oracle.ended_unfinished.insert("r3".to_string(), (0, ended, process("p1")));
            oracle.daemon_started_ms = at;
            oracle.hold_for_ended_registrations(seen_read, &BTreeMap::from([(0, process(runs))]));
            oracle.unfinished_until.get(&0).copied()
        };
        let restart = |at: u64, seen_read: &[(usize, u64)]| restart_on(at, seen_read, "p1");
        assert_eq!(restart(13_000, &[]), Some(until), "the second daemon's write (asked at 5,000) not durably read");
        assert_eq!(restart(13_000, &[(1, 5_000)]), Some(until), "another agent's read write says nothing of a0");
        assert_eq!(restart(13_000, &[(0, 3_000)]), Some(until), "a write read before the restart that ended it");
        assert_eq!(restart(13_000, &[(0, 5_000)]), None, "a later write durably read: every line before it was read");
        assert_eq!(restart(until, &[]), None, "past the hold");
        assert_eq!(restart_on(13_000, &[], "p2"), None, "another process runs: the engine holds only for writes into it (a review)");
    }

    /// REC-2 (a review): the oracle fails a resume answered by an attach past its cursor, and
    /// records that are not exactly those after the attach.
    #[test]
    fn rec_2_a_resume_attaches_at_or_before_its_cursor_and_replays_what_follows() {
        let check = |attached: u64, emitted: &[u64]| {
            let mut oracle = Oracle::default();
            oracle.on_resume_replayed(0, 500, attached, emitted, &[600, 700]);
            kinds(&oracle)
        };
        assert_eq!(check(100, &[600, 700]), vec![], "attached below the cursor, every record after it");
        assert_eq!(check(500, &[600, 700]), vec![], "attached at the cursor");
        assert_eq!(check(550, &[600, 700]), vec![Kind::Evidence], "attached past the cursor");
        assert_eq!(check(100, &[700]), vec![Kind::Evidence], "a record skipped");
    }

    /// EV-3 at a `cursor_too_old` rebase: a durable turn start the rebase skipped counts as
    /// reported (its replay after a loss is no start after the binding: seed 31850), unless
    /// the subscriber got the turn's `request.bound` and no start before it, which is EV-3's
    /// violation skipped or not (the first exemption, in 3ba1767, took every skipped start as
    /// reported).
    #[test]
    fn ev_3_a_rebase_excuses_only_starts_before_their_binding() {
        let turn = (0, "t1".to_string());
        // The binding seen at 10 with no start before it; the start durable at 12, skipped.
        let mut oracle = Oracle::default();
        oracle.stream.bound_turns.insert(turn.clone(), 10);
        oracle.stream.last_seen = 10;
        oracle.on_turn_start_durable(12, 0, "t1");
        oracle.on_stream_rebased(20, &[]);
        assert_eq!(kinds(&oracle), vec![Kind::EventOrder], "{:?}", oracle.violations.first().map(|v| &v.message));
        // The start seen at 8, the binding at 10, the start's replay after a loss durable at
        // 12, skipped: nothing to report.
        let mut oracle = Oracle::default();
        oracle.stream.started_turns.insert(turn.clone());
        oracle.stream.bound_turns.insert(turn.clone(), 10);
        oracle.stream.last_seen = 10;
        oracle.on_turn_start_durable(12, 0, "t1");
        oracle.on_stream_rebased(20, &[]);
        assert!(kinds(&oracle).is_empty());
        // The start durable at 8, skipped from a cursor of 5 before its binding: it counts as
        // reported, so the binding and a replay of the start after it are in order.
        let mut oracle = Oracle::default();
        oracle.stream.last_seen = 5;
        oracle.on_turn_start_durable(8, 0, "t1");
        oracle.on_stream_rebased(20, &[]);
        assert!(oracle.stream.started_turns.contains(&turn) && kinds(&oracle).is_empty());
        // A rebase to where the subscriber stands skips nothing.
        oracle.on_stream_rebased(20, &[]);
        assert!(kinds(&oracle).is_empty());
    }
}
