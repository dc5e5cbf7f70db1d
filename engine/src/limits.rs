//! Every table, queue and input in the engine is bounded by one of these constants.
//! Units are in the names. The engine asserts them; the runtime may rely on them.

/// Largest prompt, in UTF-8 bytes, accepted for admission (INP-1).
pub const MAX_PROMPT_BYTES: usize = 64 * 1024;
/// Largest asynchronous deadline a caller may ask for: 7 days (INP-3).
pub const MAX_FINAL_TIMEOUT_MS: u64 = 7 * 24 * 3600 * 1000;
/// Longest target spelling (display name or agent id) accepted (INP-4).
pub const MAX_TARGET_BYTES: usize = 256;
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
/// Longest a submitted return-final prompt may go without its turn starting before the
/// request ends `indeterminate` whatever the screen shows (RF-8). Codex starts a turn within
/// tens of milliseconds of the submit; a minute without one means it never will.
pub const TURN_START_TIMEOUT_MS: u64 = 60_000;
/// How long a pane write may take before the engine stops waiting for its result (ADM-10).
pub const DELIVERY_TIMEOUT_MS: u64 = 10_000;
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
