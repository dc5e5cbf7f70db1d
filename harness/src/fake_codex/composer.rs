//! The fake Codex composer: turns raw terminal bytes into a draft and submit decisions.
//!
//! Pure and clock-free (time is passed in as `now_ms`), so the rules that matter for
//! admission are unit-tested without a terminal:
//! - bracketed paste (`ESC[200~` ... `ESC[201~`) lands in the draft verbatim, even when the
//!   markers are split across reads;
//! - `CR` submits, EXCEPT right after a fast burst of plain keys: the real Codex treats such a
//!   burst as an unbracketed paste and its `CR` as a new line, so a raw write of
//!   `text\r` never submits;
//! - `Ctrl-U` clears the draft; a lone `ESC` becomes the Esc key only after a short quiet
//!   period, because it may be the first byte of a sequence still in flight.

/// Largest draft the composer keeps; further input is dropped (bounded memory).
pub const MAX_COMPOSER_BYTES: usize = 1024 * 1024;

/// Longest escape sequence we buffer before giving up on it (real keys are < 16 bytes).
pub const MAX_ESCAPE_SEQUENCE_BYTES: usize = 32;

/// Plain keys arriving closer together than this belong to one burst (a human cannot type
/// that fast; a paste or a raw `write()` can).
pub const PASTE_BURST_CHAR_INTERVAL_MS: u64 = 30;

/// A burst needs at least this many plain keys before its `CR` is treated as a new line.
pub const PASTE_BURST_MIN_CHARS: usize = 2;

/// A lone `ESC` with nothing after it for this long is the Esc key.
pub const ESC_KEY_TIMEOUT_MS: u64 = 25;

const PASTE_START: &[u8] = b"\x1b[200~";
const PASTE_END: &[u8] = b"\x1b[201~";

/// What the application must do after the composer consumed input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ComposerAction {
    /// Enter on a draft whose trimmed text is non-empty: the untrimmed draft text. The
    /// composer is already cleared.
    Submit(String),
    /// The Esc key (interrupts a running turn).
    Escape,
    /// Ctrl-C on an empty draft (interrupt when busy, arm/confirm quit when idle).
    CtrlCOnEmpty,
    /// Ctrl-D on an empty draft: quit.
    Quit,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ParseState {
    Ground,
    /// Bytes of an escape sequence seen so far, starting with ESC.
    Escape(Vec<u8>),
    /// Inside a bracketed paste; `end_matched` bytes of PASTE_END are held back.
    Paste {
        end_matched: usize,
    },
}

/// Draft text plus the byte parser state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Composer {
    draft: Vec<u8>,
    state: ParseState,
    /// Time the pending lone ESC arrived (only meaningful in `ParseState::Escape`).
    escape_started_ms: u64,
    burst_chars: usize,
    last_plain_key_ms: Option<u64>,
    /// The previous pasted byte was CR (so a following LF is the same line break).
    paste_last_was_cr: bool,
}

impl Default for Composer {
    fn default() -> Self {
        Self::new()
    }
}

impl Composer {
    pub fn new() -> Self {
        Composer {
            draft: Vec::new(),
            state: ParseState::Ground,
            escape_started_ms: 0,
            burst_chars: 0,
            last_plain_key_ms: None,
            paste_last_was_cr: false,
        }
    }

    /// The draft as text (invalid UTF-8 is shown with replacement characters).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.draft).into_owned()
    }

    pub fn is_empty(&self) -> bool {
        self.draft.is_empty()
    }

    /// True while bytes of an unfinished escape sequence or paste are held back.
    pub fn has_pending_input(&self) -> bool {
        self.state != ParseState::Ground
    }

    /// Consumes one read's worth of bytes that arrived at `now_ms`.
    pub fn feed(&mut self, bytes: &[u8], now_ms: u64) -> Vec<ComposerAction> {
        let mut actions = Vec::new();
        for &byte in bytes {
            self.feed_byte(byte, now_ms, &mut actions);
        }
        assert!(self.draft.len() <= MAX_COMPOSER_BYTES);
        actions
    }

    /// Called when no input arrived for a while: a lone pending ESC becomes the Esc key.
    pub fn on_quiet(&mut self, now_ms: u64) -> Option<ComposerAction> {
        match &self.state {
            ParseState::Escape(seq)
                if seq.len() == 1
                    && now_ms.saturating_sub(self.escape_started_ms) >= ESC_KEY_TIMEOUT_MS =>
            {
                self.state = ParseState::Ground;
                Some(ComposerAction::Escape)
            }
            _ => None,
        }
    }

    fn feed_byte(&mut self, byte: u8, now_ms: u64, actions: &mut Vec<ComposerAction>) {
        match std::mem::replace(&mut self.state, ParseState::Ground) {
            ParseState::Ground => self.ground_byte(byte, now_ms, actions),
            ParseState::Escape(seq) => self.escape_byte(seq, byte, now_ms, actions),
            ParseState::Paste { end_matched } => self.paste_byte(end_matched, byte),
        }
    }

    fn ground_byte(&mut self, byte: u8, now_ms: u64, actions: &mut Vec<ComposerAction>) {
        match byte {
            0x1b => {
                self.state = ParseState::Escape(vec![byte]);
                self.escape_started_ms = now_ms;
            }
            b'\r' => self.enter(now_ms, actions),
            // Ctrl-J inserts a new line in the real composer.
            b'\n' => self.push_draft(b"\n"),
            0x15 => self.draft.clear(),
            0x03 => {
                if self.draft.is_empty() {
                    actions.push(ComposerAction::CtrlCOnEmpty);
                } else {
                    self.draft.clear();
                }
            }
            0x04 if self.draft.is_empty() => actions.push(ComposerAction::Quit),
            0x7f | 0x08 => self.backspace(),
            b'\t' | 0x20.. => self.plain_key(byte, now_ms),
            // Other control keys have no composer meaning here.
            _ => {}
        }
    }

    fn escape_byte(
        &mut self,
        mut seq: Vec<u8>,
        byte: u8,
        now_ms: u64,
        actions: &mut Vec<ComposerAction>,
    ) {
        seq.push(byte);
        if seq.len() == 2 && byte != b'[' && byte != b'O' {
            // ESC + key (Alt-key) or ESC ESC: deliver Esc, then treat the byte normally.
            actions.push(ComposerAction::Escape);
            self.ground_byte(byte, now_ms, actions);
            return;
        }
        let complete = match seq[1] {
            b'O' => seq.len() == 3,
            _ => seq.len() > 2 && (0x40..=0x7e).contains(&byte),
        };
        if complete {
            if seq == PASTE_START {
                self.state = ParseState::Paste { end_matched: 0 };
                self.paste_last_was_cr = false;
                // A paste ends any key burst: the CR after it is a real Enter.
                self.burst_chars = 0;
                self.last_plain_key_ms = None;
            }
            // Other sequences (arrows, focus, bracketed-paste end without start) are ignored.
        } else if seq.len() < MAX_ESCAPE_SEQUENCE_BYTES {
            self.state = ParseState::Escape(seq);
        }
        // An overlong sequence is dropped whole rather than typed as text.
    }

    fn paste_byte(&mut self, end_matched: usize, byte: u8) {
        if byte == PASTE_END[end_matched] {
            if end_matched + 1 == PASTE_END.len() {
                return; // paste finished; state already Ground
            }
            self.state = ParseState::Paste {
                end_matched: end_matched + 1,
            };
            return;
        }
        // The held-back prefix of the end marker was paste content after all.
        let held = PASTE_END[..end_matched].to_vec();
        self.push_paste(&held);
        if byte == PASTE_END[0] {
            self.state = ParseState::Paste { end_matched: 1 };
        } else {
            self.push_paste(&[byte]);
            self.state = ParseState::Paste { end_matched: 0 };
        }
    }

    /// Pasted CR / CRLF become LF, as terminals and the real composer normalise them.
    fn push_paste(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            let after_cr = std::mem::replace(&mut self.paste_last_was_cr, byte == b'\r');
            match byte {
                b'\n' if after_cr => {} // second half of a CRLF already stored as LF
                b'\r' => self.push_draft(b"\n"),
                _ => self.push_draft(&[byte]),
            }
        }
    }

    fn plain_key(&mut self, byte: u8, now_ms: u64) {
        // UTF-8 continuation bytes belong to the key that started them.
        let is_continuation = byte & 0xc0 == 0x80;
        if !is_continuation {
            let in_burst = self
                .last_plain_key_ms
                .is_some_and(|last| now_ms.saturating_sub(last) < PASTE_BURST_CHAR_INTERVAL_MS);
            self.burst_chars = if in_burst { self.burst_chars + 1 } else { 1 };
            self.last_plain_key_ms = Some(now_ms);
        }
        self.push_draft(&[byte]);
    }

    fn enter(&mut self, now_ms: u64, actions: &mut Vec<ComposerAction>) {
        let in_burst = self.burst_chars >= PASTE_BURST_MIN_CHARS
            && self
                .last_plain_key_ms
                .is_some_and(|last| now_ms.saturating_sub(last) < PASTE_BURST_CHAR_INTERVAL_MS);
        if in_burst {
            // Part of an unbracketed paste: a new line, and the burst goes on.
            self.push_draft(b"\n");
            self.last_plain_key_ms = Some(now_ms);
            return;
        }
        let text = self.text();
        if text.trim().is_empty() {
            return; // the real Codex ignores Enter on a blank draft
        }
        self.draft.clear();
        self.burst_chars = 0;
        actions.push(ComposerAction::Submit(text));
    }

    fn backspace(&mut self) {
        while let Some(byte) = self.draft.pop() {
            if byte & 0xc0 != 0x80 {
                break; // removed the lead byte of one whole character
            }
        }
    }

    fn push_draft(&mut self, bytes: &[u8]) {
        let room = MAX_COMPOSER_BYTES - self.draft.len();
        self.draft
            .extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(text: &str) -> Vec<ComposerAction> {
        vec![ComposerAction::Submit(text.to_owned())]
    }

    #[test]
    fn admission_sequence_in_one_write_submits_the_pasted_text() {
        let mut composer = Composer::new();
        composer.feed(b"stale draft", 0);
        let actions = composer.feed(b"\x15\x1b[200~ hello\n\tworld \xc3\xa9 \x1b[201~\r", 1000);
        assert_eq!(actions, submit(" hello\n\tworld \u{e9} "));
        assert!(composer.is_empty());
    }

    #[test]
    fn a_raw_burst_followed_by_cr_stays_in_the_composer() {
        let mut composer = Composer::new();
        let actions = composer.feed(b"hello\r", 0);
        assert!(actions.is_empty());
        assert_eq!(composer.text(), "hello\n");
        // A later, separate Enter submits what the burst left behind.
        assert_eq!(composer.feed(b"\r", 500), submit("hello\n"));
    }

    #[test]
    fn slow_typing_then_enter_submits() {
        let mut composer = Composer::new();
        for (index, byte) in b"hi".iter().enumerate() {
            composer.feed(&[*byte], index as u64 * 100);
        }
        assert_eq!(composer.feed(b"\r", 300), submit("hi"));
    }

    #[test]
    fn paste_markers_split_across_reads_are_reassembled() {
        let mut composer = Composer::new();
        assert!(composer.feed(b"\x1b[20", 0).is_empty());
        assert!(composer.feed(b"0~a\x1b[2", 1).is_empty());
        assert!(composer.has_pending_input());
        assert!(composer.feed(b"01", 2).is_empty());
        assert_eq!(composer.feed(b"~\r", 3), submit("a"));
    }

    #[test]
    fn an_escape_inside_a_paste_that_is_not_the_end_marker_is_content() {
        let mut composer = Composer::new();
        composer.feed(b"\x1b[200~x\x1b[2y\x1b\x1b[201~", 0);
        assert_eq!(composer.text(), "x\x1b[2y\x1b");
    }

    #[test]
    fn ctrl_u_clears_and_blank_enter_is_ignored() {
        let mut composer = Composer::new();
        composer.feed(b"\x1b[200~draft\x1b[201~", 0);
        composer.feed(b"\x15", 100);
        assert!(composer.is_empty());
        assert!(composer.feed(b"\x1b[200~  \n \x1b[201~\r", 200).is_empty());
        assert_eq!(
            composer.text(),
            "  \n ",
            "a blank draft is kept, not submitted"
        );
    }

    #[test]
    fn lone_escape_becomes_the_esc_key_only_after_the_quiet_period() {
        let mut composer = Composer::new();
        assert!(composer.feed(b"\x1b", 100).is_empty());
        assert_eq!(composer.on_quiet(110), None);
        assert_eq!(
            composer.on_quiet(100 + ESC_KEY_TIMEOUT_MS),
            Some(ComposerAction::Escape)
        );
        assert!(!composer.has_pending_input());
        // Arrow keys are swallowed, not typed.
        assert!(composer.feed(b"\x1b[A\x1bOB", 200).is_empty());
        assert!(composer.is_empty());
    }

    #[test]
    fn control_keys_on_empty_and_non_empty_drafts() {
        let mut composer = Composer::new();
        assert_eq!(
            composer.feed(b"\x03", 0),
            vec![ComposerAction::CtrlCOnEmpty]
        );
        assert_eq!(composer.feed(b"\x04", 0), vec![ComposerAction::Quit]);
        composer.feed(b"\x1b[200~ab\xc3\xa9\x1b[201~", 0);
        assert!(
            composer.feed(b"\x04", 100).is_empty(),
            "Ctrl-D on a draft does not quit"
        );
        composer.feed(b"\x7f", 200);
        assert_eq!(
            composer.text(),
            "ab",
            "backspace removes one whole character"
        );
        assert!(
            composer.feed(b"\x03", 300).is_empty(),
            "Ctrl-C clears a draft first"
        );
        assert!(composer.is_empty());
    }

    #[test]
    fn pasted_crlf_becomes_one_newline_and_the_draft_is_bounded() {
        let mut composer = Composer::new();
        composer.feed(b"\x1b[200~a\r\nb\rc\x1b[201~", 0);
        assert_eq!(composer.text(), "a\nb\nc");
        let mut big = b"\x1b[200~".to_vec();
        big.extend(std::iter::repeat_n(b'x', MAX_COMPOSER_BYTES + 10));
        big.extend_from_slice(b"\x1b[201~");
        composer.feed(&big, 10);
        assert_eq!(composer.text().len(), MAX_COMPOSER_BYTES);
    }
}
