//! Drawing the fake Codex screen: clear and redraw, with the real Codex markers.
//!
//! The strings that screen parsers key on are the real 0.169 ones (REAL_CODEX.md): the idle
//! composer `› Ask Codex to do anything`, the busy status `◦ Working (Ns • esc to interrupt)`
//! (bullet alternating `◦`/`•` like the real spinner)
//! and replies as lines starting with `•`. The layout follows the captured screens in
//! `fixtures/codex-0.169/screen-*.txt`: a `>_ OpenAI Codex (v0.169.0)` header, the transcript
//! (`› prompt`, `• reply`, `■ notice`), blank padding, then the composer three rows above the
//! bottom, followed by a blank row and two footer rows.

use super::rollout_records::FAKE_MODEL;
use super::session::HistoryLine;
use crate::rollout_writer::CODEX_CLI_VERSION;

pub const COMPOSER_PROMPT: &str = "› ";
pub const COMPOSER_PLACEHOLDER: &str = "Ask Codex to do anything";
pub const AGENT_BULLET: &str = "• ";
pub const NOTICE_BULLET: &str = "■ ";
const CONTINUATION: &str = "  ";

/// Terminal size used when the real one cannot be read.
pub const DEFAULT_ROWS: u16 = 24;
pub const DEFAULT_COLS: u16 = 80;

/// Everything one frame shows.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    pub history: &'a [&'a HistoryLine],
    pub draft: &'a str,
    /// Whole seconds the running turn has been busy, None when idle.
    pub busy_secs: Option<u64>,
    /// Working directory shown in the header and footer.
    pub cwd: &'a str,
    pub rows: u16,
    pub cols: u16,
}

/// The bytes that clear the terminal and draw `frame`, cursor left after the draft.
pub fn render(frame: &Frame<'_>) -> Vec<u8> {
    let cols = usize::from(frame.cols.max(8));
    let mut bottom = Vec::new();
    if let Some(secs) = frame.busy_secs {
        // The real spinner alternates its bullet; parsers must key on "Working (", not "•".
        let bullet = if secs % 2 == 0 { "◦" } else { "•" };
        bottom.extend(wrap(
            &format!("{bullet} Working ({secs}s • esc to interrupt)"),
            "",
            cols,
        ));
        bottom.push(String::new());
    }
    let composer = if frame.draft.is_empty() {
        COMPOSER_PLACEHOLDER
    } else {
        frame.draft
    };
    bottom.extend(block(COMPOSER_PROMPT, composer, cols));
    bottom.push(String::new());
    // Chrome rows are cut, not wrapped, so a narrow terminal cannot push the composer away.
    bottom.push(truncate(
        &format!("  {FAKE_MODEL} default · {}", frame.cwd),
        cols,
    ));
    bottom.push(truncate("  ← for agents · ? for shortcuts", cols));

    let mut lines: Vec<String> = vec![String::new()];
    lines.push(truncate(
        &format!("  >_ OpenAI Codex (v{CODEX_CLI_VERSION})"),
        cols,
    ));
    lines.push(truncate(&format!("     {}", frame.cwd), cols));
    lines.push(String::new());
    for line in frame.history {
        let (bullet, text) = match line {
            HistoryLine::User(text) => (COMPOSER_PROMPT, text),
            HistoryLine::Agent(text) => (AGENT_BULLET, text),
            HistoryLine::Notice(text) => (NOTICE_BULLET, text),
        };
        lines.push(String::new());
        lines.extend(block(bullet, text, cols));
    }
    // Pad so the composer sits near the bottom like the real one; when the transcript is
    // taller than the screen its top scrolls away (the composer must stay visible).
    let rows = usize::from(frame.rows.max(2));
    let fill = rows.saturating_sub(lines.len() + bottom.len());
    lines.extend(std::iter::repeat_n(String::new(), fill));
    lines.extend(bottom);
    let visible = &lines[lines.len().saturating_sub(rows)..];
    let mut out = b"\x1b[H\x1b[2J".to_vec();
    out.extend_from_slice(visible.join("\r\n").as_bytes());
    out
}

fn truncate(line: &str, cols: usize) -> String {
    line.chars().take(cols).collect()
}

/// A multi-line text with a bullet on its first row and indentation on the rest.
fn block(bullet: &str, text: &str, cols: usize) -> Vec<String> {
    let mut rows = Vec::new();
    for (index, line) in text.split('\n').enumerate() {
        let prefix = if index == 0 { bullet } else { CONTINUATION };
        rows.extend(wrap(line, prefix, cols));
    }
    rows
}

/// Splits a line into rows of at most `cols` characters so the terminal never wraps on its
/// own (which would push the composer off the bottom). Control characters are made visible.
fn wrap(line: &str, prefix: &str, cols: usize) -> Vec<String> {
    let clean: String = line
        .chars()
        .map(|c| if c.is_control() && c != '\t' { '·' } else { c })
        .collect();
    let clean = clean.replace('\t', "    ");
    let width = cols.saturating_sub(prefix.chars().count()).max(1);
    let chars: Vec<char> = clean.chars().collect();
    if chars.is_empty() {
        return vec![prefix.to_owned()];
    }
    chars
        .chunks(width)
        .enumerate()
        .map(|(index, chunk)| {
            let lead = if index == 0 { prefix } else { CONTINUATION };
            format!("{lead}{}", chunk.iter().collect::<String>())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(frame: &Frame<'_>) -> String {
        String::from_utf8(render(frame)).unwrap()
    }

    fn rows(frame: &Frame<'_>) -> Vec<String> {
        let drawn = text(frame);
        drawn
            .trim_start_matches("\x1b[H\x1b[2J")
            .split("\r\n")
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn idle_and_busy_markers_match_the_real_codex() {
        let agent = HistoryLine::Agent("done: x".into());
        let history = [&agent];
        let idle = Frame {
            history: &history,
            draft: "",
            busy_secs: None,
            cwd: "~/p",
            rows: 24,
            cols: 80,
        };
        let idle_rows = rows(&idle);
        assert_eq!(idle_rows.len(), 24);
        assert_eq!(idle_rows[1], "  >_ OpenAI Codex (v0.169.0)");
        assert_eq!(
            idle_rows[20], "› Ask Codex to do anything",
            "three rows above the bottom"
        );
        assert_eq!(idle_rows[22], "  mock-model default · ~/p");
        assert!(idle_rows.contains(&"• done: x".to_owned()));
        let busy = Frame {
            busy_secs: Some(3),
            draft: "a\n\nb",
            ..idle
        };
        let busy_rows = rows(&busy);
        assert_eq!(
            busy_rows[16..21],
            ["• Working (3s • esc to interrupt)", "", "› a", "  ", "  b"]
        );
    }

    #[test]
    fn long_lines_wrap_and_only_the_bottom_rows_are_drawn() {
        let lines: Vec<HistoryLine> = (0..50)
            .map(|i| HistoryLine::Agent(format!("reply {i}")))
            .collect();
        let refs: Vec<&HistoryLine> = lines.iter().collect();
        let draft = "x".repeat(17);
        let frame = Frame {
            history: &refs,
            draft: &draft,
            busy_secs: None,
            cwd: "/",
            rows: 7,
            cols: 10,
        };
        assert_eq!(
            rows(&frame),
            [
                "• reply 49",
                "› xxxxxxxx",
                "  xxxxxxxx",
                "  x",
                "",
                "  mock-mod",
                "  ← for ag"
            ]
        );
    }
}
