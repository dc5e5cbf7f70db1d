//! Every table, queue and input in the engine is bounded by one of these constants.
//! Units are in the names. The engine asserts them; the runtime may rely on them.

/// Largest prompt, in UTF-8 bytes, accepted for admission (INP-1).
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;
/// Largest asynchronous deadline a caller may ask for: 7 days (INP-3).
pub const MAX_FINAL_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;
/// Longest target spelling (display name or agent id) accepted (INP-4).
pub const MAX_TARGET_BYTES: usize = 256;
/// Characters of a caller's input (a target, an id, a key) an error message quotes (INP-6).
pub const MAX_ECHOED_CHARS: usize = 64;

/// INP-6: how an error names a caller's input: quoted, cut at [`MAX_ECHOED_CHARS`] with its
/// length said. One copy for every error, so input of any size gives an error of bounded size
/// (a 120 KB name came back whole, twice in `agent output`'s answer: a review).
pub fn echoed(input: &str) -> String {
    match echo_cut(input) {
        None => format!("{input:?}"),
        Some(shown) => format!("{shown:?}… ({} bytes)", input.len()),
    }
}

/// The one wording of "no such agent" for a caller's `target` (engine, daemon, CLI, MCP server,
/// output page), its input echoed as INP-6 says.
pub fn no_agent_named(target: &str) -> String {
    format!("no agent has the name or id {}", echoed(target))
}

/// INP-6: a caller's input echoed as a field's value: whole up to [`MAX_ECHOED_CHARS`], else
/// cut there and marked with a trailing `…`.
pub fn echoed_field(input: &str) -> String {
    match echo_cut(input) {
        None => input.to_string(),
        Some(shown) => format!("{shown}…"),
    }
}

/// The first [`MAX_ECHOED_CHARS`] characters of `input` when it has more (None: it is shown whole).
fn echo_cut(input: &str) -> Option<&str> {
    input.char_indices().nth(MAX_ECHOED_CHARS).map(|(cut, _)| &input[..cut])
}

/// CORR-15: turns accepted for a managed agent's `turn/start` requests remembered per agent.
pub const MAX_ACCEPTED_TURNS_KEPT: usize = 64;

/// ADM-5: wakterm's answered `turn/start` lines an agent's event mark keeps
/// (`EventMark::answered_lines`): the mark is written with every event batch, so few; enough
/// that a raw writer's forged refusals (two per race in the simulator) do not evict ours.
pub const MAX_ANSWERED_LINES_KEPT: usize = 4;

/// ADM-5: the latest written finished requests of each agent a restart loads
/// (`Store::load_latest_written_since`): a prompt the TUI queued may be older than the latest
/// write (a plain send written while it waited, ADM-13), so one was not enough (a review).
pub const MAX_RECENT_WRITES_LOADED: usize = 4;

/// ADM-5: the user messages an agent's event mark keeps (`EventMark::prompts_taken`): the mark
/// is written with every event batch, so few; enough for a write's prompt steered in among a
/// human's.
pub const MAX_PROMPTS_TAKEN_KEPT: usize = 4;

/// Longest opaque incarnation accepted (INP-4).
pub const MAX_INCARNATION_BYTES: usize = 256;
/// Agents the engine tracks at once.
pub const MAX_AGENTS: usize = 1024;
/// Admissions in flight at once, across all agents (ADM-12 allows one per agent).
pub const MAX_INFLIGHT_ADMISSIONS: usize = 1024;
/// Callers joined to one in-flight admission by repeating its request id (IDEM-5).
pub const MAX_JOINED_CALLERS: usize = 16;
/// Request records remembered for idempotency (IDEM-2). Beyond it admission answers
/// `internal_failure` rather than forget an id; retention is a documented gap (SPEC.md).
pub const MAX_REQUEST_RECORDS: usize = 200_000;
/// Outputs waiting to be drained by the runtime.
pub const MAX_PENDING_OUTPUTS: usize = 65_536;
/// How long an observer refresh may take before admission gives up (ADM-3).
pub const REFRESH_TIMEOUT_MS: u64 = 5_000;
/// How long plain `agent send` waits for observer acknowledgement (ADM-13).
pub const SEND_ACK_WAIT_MS: u64 = 2_000;
/// After a complete write, how long an idle agent with an empty composer still counts as
/// busy waiting for the written prompt's turn to appear (ADM-5).
pub const AWAITING_TURN_GRACE_MS: u64 = 10_000;
/// ADM-19: how long after another writer's Enter an admission or a submit waits for that
/// prompt's turn to show, when none shows: as long as for a prompt of its own (ADM-5's grace;
/// a first turn waiting for its MCP servers takes seconds). An Enter that submitted nothing
/// (an empty composer, a slash command) costs this much `busy`.
pub const OTHER_ENTER_GRACE_MS: u64 = AWAITING_TURN_GRACE_MS;
/// Longest a submitted return-final prompt may go without its turn starting before the
/// request ends `indeterminate` whatever the screen shows (RF-8). Codex starts a turn within
/// tens of milliseconds of the submit; a minute without one means it never will.
pub const TURN_START_TIMEOUT_MS: u64 = 60_000;
/// How long a pane write may take before the engine stops waiting for its result (ADM-10).
pub const DELIVERY_TIMEOUT_MS: u64 = 10_000;
/// ADM-5, REC-1: an admission's write handed to a holder lands, if ever, within this of its
/// hand-out: the holder starts it by `DELIVERY_TIMEOUT_MS` (its `start_by_ms`) and stops
/// writing after its own 10 s `WRITE_DEADLINE` (the runtime asserts the two fit). The holder
/// outlives the daemon, so the line may land after a restart (a review): a restart that finds
/// a registration unfinished counts RF-8's timeout from its start plus this, and a write the
/// engine gave up on (`write_result_lost`) from the give-up plus this
/// (`RequestRecord::written_ms`). Not a submit's split write (its steps and gaps take longer,
/// and a submit leaves no record a restart reads: SUB-6), nor holders older than
/// `start_by_ms` (no bound: ADM-12's known gap).
pub const WRITE_LANDS_WITHIN_MS: u64 = DELIVERY_TIMEOUT_MS + 10_000;
/// ADM-5, TIME-2: how far back a restart looks for finished writes whose line may be unread
/// (`RunClocksSeen::restart_window`): RF-8's timeout from when the line landed at the latest,
/// which for a registration an earlier restart ended is `WRITE_LANDS_WITHIN_MS` after that
/// restart's start, when its record was last updated.
pub const RESTART_LOOKBACK_MS: u64 = TURN_START_TIMEOUT_MS + WRITE_LANDS_WITHIN_MS;
/// ADM-12, SUB-1: how long a write whose result was lost keeps the agent's claim waiting for
/// its late outcome (the runtime's holder call answers within its own budget, far below this).
pub const LOST_WRITE_HOLD_MS: u64 = 60_000;
/// Retry interval for a durable commit that failed after the prompt was written (TERM-2).
pub const PERSIST_RETRY_MS: u64 = 1_000;
/// RF-6: steps kept in one request's evidence trail (the last slot is kept for its end).
pub const MAX_EVIDENCE_ENTRIES: usize = 24;
/// RF-6: bytes of one evidence step's detail.
pub const MAX_EVIDENCE_DETAIL_BYTES: usize = 240;
/// RF-9: largest final answer, as its JSON string (escapes included), that a terminal event
/// or a `turn.final` event carries. Well under the store's 4 MiB record limit, leaving room for
/// the rest of the record (evidence, ids); a larger final could never commit.
pub const MAX_FINAL_JSON_BYTES: usize = 2 * 1024 * 1024;

#[cfg(test)]
mod tests {
    use super::{echoed, echoed_field, MAX_ECHOED_CHARS};

    /// INP-6: short input is quoted whole; long input is cut on a character boundary (here a
    /// 3-byte one) and its length said.
    #[test]
    fn inp_6_echoes_are_bounded_and_cut_on_characters() {
        assert_eq!(echoed("zola"), "\"zola\"");
        assert_eq!(echoed_field("zola"), "zola");
        let long = "€".repeat(40_000);
        let shown = echoed(&long);
        assert!(shown.starts_with(&format!("\"{}\"…", "€".repeat(MAX_ECHOED_CHARS))), "{shown}");
        assert!(shown.ends_with("(120000 bytes)"), "{shown}");
        assert_eq!(echoed_field(&long), format!("{}…", "€".repeat(MAX_ECHOED_CHARS)));
        let exact = "a".repeat(MAX_ECHOED_CHARS);
        assert_eq!(echoed(&exact), format!("{exact:?}"), "at the bound: whole, no mark");
    }
}
