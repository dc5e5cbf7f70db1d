//! Prompt validation (INP-1), the correlation normal form and hash (HASH-1), and the exact
//! bytes of one admission write (ADM-8).

use crate::limits::MAX_PROMPT_BYTES;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How the prompt is typed into the pane (part of the idempotency fingerprint, IDEM-1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PasteMode {
    /// Ctrl-U, `ESC[200~` prompt `ESC[201~`, CR: the sequence the real Codex submits.
    Bracketed,
    /// The prompt bytes then CR, unbracketed. The real Codex treats such a burst as a paste and
    /// the CR as a newline, so this mode is never reported as submitted without observer
    /// evidence (ADM-14).
    Raw,
}

/// Why a prompt was refused before anything was written (INP-1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PromptError {
    /// Nothing but white space: Codex would submit nothing.
    Empty,
    /// Longer than [`MAX_PROMPT_BYTES`].
    TooLarge { bytes: usize },
    /// A control character that could escape the bracketed paste or act as a keystroke.
    ControlCharacter { offset: usize, code_point: u32 },
}

impl PromptError {
    /// Stable snake_case reason used in receipts.
    pub fn reason(&self) -> &'static str {
        match self {
            PromptError::Empty => "prompt_empty",
            PromptError::TooLarge { .. } => "prompt_too_large",
            PromptError::ControlCharacter { .. } => "prompt_control_character",
        }
    }

    /// Human-readable detail for the receipt's `detail` field.
    pub fn detail(&self) -> String {
        match self {
            PromptError::Empty => "the prompt is empty after trimming white space".to_string(),
            PromptError::TooLarge { bytes } => {
                format!("the prompt is {bytes} bytes; the limit is {MAX_PROMPT_BYTES}")
            }
            PromptError::ControlCharacter { offset, code_point } => format!(
                "control character U+{code_point:04X} at byte {offset}: only tab and newline are allowed"
            ),
        }
    }
}

/// INP-1: a prompt is admissible when it is non-empty after trimming, at most
/// [`MAX_PROMPT_BYTES`] bytes, and holds no control character other than tab and newline.
/// ESC is refused because `ESC[201~` would end the bracketed paste and type the rest as keys;
/// CR because it would submit early; C1 controls because U+009B is an 8-bit CSI.
pub fn validate_prompt(prompt: &str) -> Result<(), PromptError> {
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(PromptError::TooLarge { bytes: prompt.len() });
    }
    for (offset, ch) in prompt.char_indices() {
        let allowed_control = ch == '\t' || ch == '\n';
        if ch.is_control() && !allowed_control {
            return Err(PromptError::ControlCharacter { offset, code_point: ch as u32 });
        }
    }
    if normal_form(prompt).is_empty() {
        return Err(PromptError::Empty);
    }
    Ok(())
}

/// HASH-1: the form Codex records a submitted prompt in: leading and trailing white space
/// trimmed (Unicode White_Space, as Rust's `str::trim`), inner text unchanged.
pub fn normal_form(prompt: &str) -> &str {
    prompt.trim()
}

/// HASH-1: lowercase hex SHA-256 of the normal form. Both the admission side (our prompt) and
/// the observer side (the text Codex recorded) hash through this one function.
pub fn prompt_hash(prompt: &str) -> String {
    hex_sha256(normal_form(prompt).as_bytes())
}

pub(crate) fn hex_sha256(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(64);
    for byte in digest {
        out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(byte & 0x0f), 16).unwrap_or('0'));
    }
    out
}

/// Ctrl-U: clears the composer (it is verified empty first, so nothing of the user's is lost).
pub const CLEAR_LINE: &[u8] = b"\x15";
pub const PASTE_START: &[u8] = b"\x1b[200~";
pub const PASTE_END: &[u8] = b"\x1b[201~";
pub const SUBMIT: &[u8] = b"\r";

/// ADM-8: the complete bytes of one admission, written to the pane as ONE write so no other
/// writer can splice between the text and the Enter.
pub fn admission_bytes(prompt: &str, mode: PasteMode) -> Vec<u8> {
    assert!(validate_prompt(prompt).is_ok(), "admission_bytes needs a validated prompt");
    let mut bytes = Vec::with_capacity(prompt.len() + 16);
    match mode {
        PasteMode::Bracketed => {
            bytes.extend_from_slice(CLEAR_LINE);
            bytes.extend_from_slice(PASTE_START);
            bytes.extend_from_slice(prompt.as_bytes());
            bytes.extend_from_slice(PASTE_END);
        }
        PasteMode::Raw => bytes.extend_from_slice(prompt.as_bytes()),
    }
    bytes.extend_from_slice(SUBMIT);
    assert!(bytes.ends_with(SUBMIT) && bytes.len() > prompt.len());
    bytes
}

/// MGD-7: the JSON-RPC id of request `request_id`'s `turn/start`: the request id (the reply can
/// be told from any other) and the admission's random `write_nonce` (no other writer can name
/// it, so an error reply under it is the refusal of this very line).
pub fn turn_start_id(request_id: &str, write_nonce: u64) -> String {
    format!("wakterm-{request_id}-{write_nonce:016x}")
}

/// The size of every `turn_start_id` (a request id is a UUID): `wakterm-`, 36, `-`, 16.
pub const MAX_TURN_START_ID_BYTES: usize = 61;

/// MGD-7, ADM-5: whether a JSON-RPC id is one `turn_start_id` makes (a wakterm admission's
/// `turn/start`, any request's).
pub fn is_turn_start_id(id: &str) -> bool {
    id.starts_with("wakterm-")
}

/// ADM-5 (managed): whether a turn the app-server opened for a `turn/start` under `opener` (the
/// first acceptance of that turn, CORR-15; None: not known, a PTY agent or a reply lost) may
/// carry a prompt wakterm wrote: not when another writer's request opened it.
pub fn opener_may_be_wakterm(opener: Option<&str>) -> bool {
    opener.is_none_or(is_turn_start_id)
}

/// MGD-6: what every line the daemon writes to an app-server starts with, a `#` and a newline.
/// A fragment an earlier short write left in the app-server's stdin (a failed admission's, an
/// observer answer's) ends there as a line of its own that is not JSON, which Codex ignores,
/// instead of spoiling the line after it. The `#` keeps that fragment from ever being served: a
/// short write that lacked only its last newline left a whole request, which a bare newline
/// completed, so a failed admission's prompt reached the thread just ahead of a later one, both
/// racing into one turn (exploration seed 16413642; there the completing line was the
/// observer's re-proof). `{...}#` is not JSON (the real 0.169 logs "trailing characters" and
/// serves nothing; a lone `#` line it ignores too, and it serves the line after:
/// `fixtures/codex-0.169/app-server/spoiled-fragment.jsonl`).
pub const LINE_LEAD: &[u8] = b"#\n";

/// MGD-6: `line` (one JSON object and its newline) as the daemon writes it, after `LINE_LEAD`.
pub fn on_its_own_line(line: &[u8]) -> Vec<u8> {
    assert!(line.starts_with(b"{") && line.ends_with(b"}\n"), "one JSON object and its newline");
    assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line: serde_json escapes newlines");
    let mut bytes = Vec::with_capacity(LINE_LEAD.len() + line.len());
    bytes.extend_from_slice(LINE_LEAD);
    bytes.extend_from_slice(line);
    bytes
}

/// MGD-3 / ADM-8 for a managed session: the ONE write is the JSON-RPC `turn/start` request
/// line (Codex 0.169's shape: no `jsonrpc` field), carrying the prompt as the turn's only
/// input, under `id` (`turn_start_id`), after `LINE_LEAD` like every line the daemon writes to
/// an app-server (MGD-6).
pub fn managed_turn_start(thread_id: &str, id: &str, prompt: &str) -> Vec<u8> {
    assert!(validate_prompt(prompt).is_ok(), "managed_turn_start needs a validated prompt");
    assert!(is_turn_start_id(id), "a turn/start id names wakterm: {id}");
    let request = serde_json::json!({
        "id": id,
        "method": "turn/start",
        "params": {"threadId": thread_id, "input": [{"type": "text", "text": prompt}]},
    });
    let mut line = serde_json::to_vec(&request).expect("JSON values serialise");
    line.push(b'\n');
    on_its_own_line(&line)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// INP-1: ESC, the paste terminator, CR and C1 controls are refused; tab and newline pass.
    #[test]
    fn inp_1_control_characters_are_refused() {
        assert!(validate_prompt("line one\n\tline two").is_ok());
        let terminator = validate_prompt("hello \x1b[201~ rm -rf").unwrap_err();
        assert_eq!(terminator, PromptError::ControlCharacter { offset: 6, code_point: 0x1b });
        assert_eq!(validate_prompt("a\rb").unwrap_err().reason(), "prompt_control_character");
        assert_eq!(validate_prompt("a\u{9b}b").unwrap_err().reason(), "prompt_control_character");
        assert_eq!(validate_prompt("a\u{7f}").unwrap_err().reason(), "prompt_control_character");
    }

    /// INP-1: empty and white-space-only prompts are refused; the size limit is in bytes.
    #[test]
    fn inp_1_empty_and_oversized_prompts_are_refused() {
        assert_eq!(validate_prompt(""), Err(PromptError::Empty));
        assert_eq!(validate_prompt(" \n\t "), Err(PromptError::Empty));
        let at_limit = "é".repeat(MAX_PROMPT_BYTES / 2);
        assert!(validate_prompt(&at_limit).is_ok());
        let over = format!("{at_limit}x");
        assert_eq!(validate_prompt(&over), Err(PromptError::TooLarge { bytes: MAX_PROMPT_BYTES + 1 }));
    }

    /// HASH-1: the hash ignores leading/trailing white space and nothing else.
    #[test]
    fn hash_1_normal_form_trims_outer_white_space_only() {
        assert_eq!(prompt_hash("  Fix\tthe bug\n"), prompt_hash("Fix\tthe bug"));
        assert_ne!(prompt_hash("Fix the bug"), prompt_hash("Fix  the bug"));
        assert_ne!(prompt_hash("héllo"), prompt_hash("hello"));
        assert_eq!(prompt_hash("x").len(), 64);
    }

    /// ADM-8: one admission is Ctrl-U, bracketed paste, CR in a single buffer.
    #[test]
    fn adm_8_admission_bytes_are_one_bracketed_write() {
        let bytes = admission_bytes("hi\nthere", PasteMode::Bracketed);
        assert_eq!(bytes, b"\x15\x1b[200~hi\nthere\x1b[201~\r".to_vec());
        assert_eq!(admission_bytes("hi", PasteMode::Raw), b"hi\r".to_vec());
    }

    proptest! {
        /// INP-1 + ADM-8: no valid prompt can contain a byte that ends the paste early.
        #[test]
        fn inp_1_valid_prompts_never_contain_escape(prompt in "\\PC{0,64}") {
            if validate_prompt(&prompt).is_ok() {
                let bytes = admission_bytes(&prompt, PasteMode::Bracketed);
                let inner = &bytes[CLEAR_LINE.len() + PASTE_START.len()..bytes.len() - PASTE_END.len() - 1];
                prop_assert!(!inner.contains(&0x1b));
                prop_assert!(!inner.contains(&b'\r'));
            }
        }

        /// MGD-6: whatever a short write of one line left in the app-server's stdin (any
        /// number of its bytes, from the first to all but the last), the daemon's next line ends it as a line that is not JSON and
        /// is itself read whole: of the stdin's lines as the app-server splits them, only the
        /// next request parses, once. With a bare newline as the lead, a cut that lacked only
        /// the last newline was served as the earlier request (exploration seed 16413642).
        #[test]
        fn mgd_6_a_fragment_is_never_served_and_never_spoils_the_next_line(
            prompt in "[a-z \n\"\\\\é]{1,24}", cut_at in 0usize..1_000_000, keep in proptest::bool::ANY,
        ) {
            prop_assume!(validate_prompt(&prompt).is_ok());
            let earlier = managed_turn_start("thread-a", &turn_start_id("r-earlier", 1), &prompt);
            // Any cut from the first byte to all but the last (half the cases that one).
            let cut = if keep { earlier.len() - 1 } else { 1 + cut_at % (earlier.len() - 1) };
            let next = managed_turn_start("thread-a", &turn_start_id("r-next", 2), "the next prompt");
            let mut stdin = earlier[..cut].to_vec();
            stdin.extend_from_slice(&next);
            let requests: Vec<serde_json::Value> = stdin
                .split(|b| *b == b'\n')
                .filter_map(|line| serde_json::from_slice::<serde_json::Value>(line).ok())
                .collect();
            prop_assert_eq!(requests.len(), 1, "{:?}", String::from_utf8_lossy(&stdin));
            prop_assert_eq!(&requests[0]["id"], &serde_json::json!(turn_start_id("r-next", 2)));
        }
    }
}
