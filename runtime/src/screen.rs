//! What the rendered Codex TUI screen says about its composer and its turn (ADM-5).
//!
//! Evidence: the screens of the real Codex 0.169 in `fixtures/codex-0.169/screen-*.txt`.
//! The composer is the LAST line starting with `›` (earlier `›` lines are the transcript's
//! user messages); an empty composer shows the placeholder `Ask Codex to do anything`; a turn in
//! flight shows a status line `◦ Working (0s • esc to interrupt)` above the composer.
//!
//! Approval dialogs were not captured in 0.169 (the fixtures run with `-a never`). The markers
//! below are the strings the Codex TUI is publicly known to render for its approval overlay
//! (`Would you like to run the following command?`, `› 1. Yes, proceed (y)`, `Press enter to
//! confirm or esc to cancel`). Recognition is therefore deliberately eager: a false Question only
//! delays an admission, a missed one would let our Ctrl-U + paste + Enter answer the dialog.
//!
//! The text carries no attributes, so a draft that reads exactly like the placeholder is
//! indistinguishable from an empty composer; this is a known limit of screen evidence.

use wakterm_engine::Composer;

/// The placeholder Codex 0.169 renders in an empty composer.
pub const COMPOSER_PLACEHOLDER: &str = "Ask Codex to do anything";
/// The prompt marker of the composer (and of past user messages in the transcript).
pub const COMPOSER_MARKER: char = '›';
/// The hint on the status line while a turn runs; the header before it changes (reasoning
/// summaries replace `Working`), the hint does not.
pub const BUSY_HINT: &str = "esc to interrupt";
/// The separator Codex prints under a finished turn (`Worked for 3s • 00:03`).
pub const TURN_DONE_MARKER: &str = "Worked for";
/// The line Codex prints under an interrupted turn.
pub const TURN_INTERRUPTED_MARKER: &str = "Conversation interrupted";
/// The welcome box of a fresh session (`>_ OpenAI Codex (v0.169.0)`).
pub const BANNER_MARKER: &str = "OpenAI Codex";
/// Texts that only an interactive question (approval, elicitation) renders.
pub const QUESTION_MARKERS: &[&str] = &[
    "Would you like to run the following command?",
    "Would you like to make the following edits?",
    "Would you like to grant these permissions?",
    "Press enter to confirm or esc to cancel",
    "Codex needs your input",
    "Yes, proceed (y)",
    "(y/n)",
    "[y/N]",
    "[Y/n]",
];
/// Lines the real screens show below the composer: a blank, the model/cwd line, the shortcut
/// footer, and one more blank in `screen-raw-burst.txt`. More than this and the `›` line is not
/// the composer (e.g. an overlay hides it), so it is not trusted as one.
pub const MAX_LINES_BELOW_COMPOSER: usize = 6;
/// Lines from the bottom searched for a busy hint or a question (the bottom pane); the
/// transcript above may quote anything.
pub const BOTTOM_PANE_LINES: usize = 16;
/// Screens longer than this are judged on their last lines only (a terminal is far smaller).
pub const MAX_SCREEN_LINES: usize = 1000;

/// The turn state the screen shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScreenTurn {
    /// The composer is up and the last turn on screen ended (or none was ever started).
    Idle,
    /// The status line of a running turn is visible.
    Working,
    /// Anything else, including a reply still on screen without its end marker.
    Unknown,
}

/// What the composer holds. Question wins over everything, Unknown when no composer is found.
pub fn composer_state(screen_text: &str) -> Composer {
    let lines = screen_lines(screen_text);
    if shows_question(&lines) {
        return Composer::Question;
    }
    let Some(index) = composer_index(&lines) else { return Composer::Unknown };
    let text = composer_text(lines[index]);
    if text.is_empty() {
        // A bare marker is not the rendering of either state we observed: no evidence.
        Composer::Unknown
    } else if text == COMPOSER_PLACEHOLDER {
        Composer::Empty
    } else {
        Composer::Draft
    }
}

/// Whether the screen shows a running turn, a finished one, or cannot tell.
pub fn turn_hint(screen_text: &str) -> ScreenTurn {
    let lines = screen_lines(screen_text);
    if bottom_pane(&lines).iter().any(|line| line.contains(BUSY_HINT)) {
        return ScreenTurn::Working;
    }
    let Some(index) = composer_index(&lines) else { return ScreenTurn::Unknown };
    if shows_question(&lines) {
        // A question belongs to a running turn, but it is not "Working" evidence either.
        return ScreenTurn::Unknown;
    }
    if transcript_is_settled(&lines[..index]) {
        ScreenTurn::Idle
    } else {
        ScreenTurn::Unknown
    }
}

/// The screen's lines without trailing blank lines, bounded to the last [`MAX_SCREEN_LINES`].
fn screen_lines(screen_text: &str) -> Vec<&str> {
    let mut lines: Vec<&str> = screen_text.lines().collect();
    while lines.last().is_some_and(|line| line.trim().is_empty()) {
        lines.pop();
    }
    if lines.len() > MAX_SCREEN_LINES {
        lines.drain(..lines.len() - MAX_SCREEN_LINES);
    }
    assert!(lines.len() <= MAX_SCREEN_LINES);
    lines
}

fn bottom_pane<'a>(lines: &'a [&'a str]) -> &'a [&'a str] {
    &lines[lines.len().saturating_sub(BOTTOM_PANE_LINES)..]
}

/// A question marker in the bottom pane below the composer (an answered dialog may stay in the
/// transcript above a fresh composer), or a `›` selection on a numbered option.
fn shows_question(lines: &[&str]) -> bool {
    let from = composer_index(lines).map_or(0, |i| i + 1);
    let start = from.max(lines.len().saturating_sub(BOTTOM_PANE_LINES));
    let below = lines.get(start..).unwrap_or(&[]);
    let marker_below = below.iter().any(|line| QUESTION_MARKERS.iter().any(|m| line.contains(m)));
    let selected_option = last_marker_index(lines).is_some_and(|i| is_numbered_option(composer_text(lines[i])));
    marker_below || selected_option
}

/// The last `›` line, if it sits where the composer sits (near the bottom, below a draft's
/// further lines) and is not an option of a selection list.
fn composer_index(lines: &[&str]) -> Option<usize> {
    let index = last_marker_index(lines)?;
    let below = lines.len() - 1 - index - draft_lines_after(lines, index);
    let is_composer = below <= MAX_LINES_BELOW_COMPOSER && !is_numbered_option(composer_text(lines[index]));
    is_composer.then_some(index)
}

/// ADM-5: the further lines of a multi-line draft right after the `›` line at `index`
/// (indented, not blank; Codex renders them under the first). A draft of four lines and a
/// newline (a raw burst whose carriage returns Codex took as a paste) put its `›` line more
/// than [`MAX_LINES_BELOW_COMPOSER`] above the bottom, the composer read as unknown, which does
/// not block, and an admission's Ctrl-U erased the draft (a hostile run).
fn draft_lines_after(lines: &[&str], index: usize) -> usize {
    lines[index + 1..].iter().take_while(|line| line.starts_with("  ") && !line.trim().is_empty()).count()
}

fn last_marker_index(lines: &[&str]) -> Option<usize> {
    lines.iter().rposition(|line| line.trim_start().starts_with(COMPOSER_MARKER))
}

/// The text after the `›` marker, trimmed.
fn composer_text(line: &str) -> &str {
    let rest = line.trim_start();
    rest.strip_prefix(COMPOSER_MARKER).unwrap_or(rest).trim()
}

/// `1. Yes, proceed (y)`: a digit run, a dot, a space.
fn is_numbered_option(text: &str) -> bool {
    let digits = text.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && text[digits..].starts_with(". ")
}

/// The transcript above the composer ends with a finished turn, or holds no turn at all
/// (only the welcome box). A reply with no end marker yet is a turn still streaming
/// (`screen-busy-streamed.txt` shows no `Working` line at all).
fn transcript_is_settled(above: &[&str]) -> bool {
    let last = above.iter().rev().map(|line| line.trim()).find(|line| !line.is_empty());
    let Some(last) = last else { return false };
    if last.starts_with(TURN_DONE_MARKER) || last.contains(TURN_INTERRUPTED_MARKER) {
        return true;
    }
    let has_banner = above.iter().any(|line| line.contains(BANNER_MARKER));
    let has_turns = above.iter().any(|line| {
        let line = line.trim_start();
        line.starts_with(COMPOSER_MARKER) || line.starts_with('•')
    });
    has_banner && !has_turns
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixture(name: &str) -> String {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169").join(name);
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// Every captured screen, with what it must read as.
    const FIXTURES: &[(&str, Composer, ScreenTurn)] = &[
        ("screen-idle.txt", Composer::Empty, ScreenTurn::Idle),
        ("screen-completed.txt", Composer::Empty, ScreenTurn::Idle),
        ("screen-aborted.txt", Composer::Empty, ScreenTurn::Idle),
        ("screen-steering.txt", Composer::Empty, ScreenTurn::Idle),
        ("screen-busy.txt", Composer::Empty, ScreenTurn::Working),
        // The reply streams while the provider holds the turn open: no end marker yet.
        ("screen-busy-streamed.txt", Composer::Empty, ScreenTurn::Unknown),
        ("screen-draft.txt", Composer::Draft, ScreenTurn::Idle),
        // A raw burst stays in the composer unsubmitted (REAL_CODEX.md).
        ("screen-raw-burst.txt", Composer::Draft, ScreenTurn::Idle),
    ];

    #[test]
    fn every_real_codex_screen_reads_as_observed() {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures/codex-0.169");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| e.ok()?.file_name().into_string().ok())
            .filter(|n| n.starts_with("screen-") && n.ends_with(".txt"))
            .collect();
        on_disk.sort();
        let mut covered: Vec<String> = FIXTURES.iter().map(|(n, _, _)| n.to_string()).collect();
        covered.sort();
        assert_eq!(on_disk, covered, "a new screen fixture needs an expectation here");
        for (name, composer, turn) in FIXTURES {
            let screen = fixture(name);
            assert_eq!(composer_state(&screen), *composer, "{name}: composer");
            assert_eq!(turn_hint(&screen), *turn, "{name}: turn");
        }
    }

    /// An approval overlay replaces the composer; the `›` marks the selected option.
    const APPROVAL: &str = "\n  >_ OpenAI Codex (v0.169.0)\n\n› run the tests\n\n• Running cargo test\n\n  \
        Would you like to run the following command?\n\n  $ cargo test\n\n› 1. Yes, proceed (y)\n  \
        2. Yes, and don't ask again for this command (p)\n  3. No, and tell Codex what to do differently (esc)\n\n  \
        Press enter to confirm or esc to cancel\n";

    #[test]
    fn approval_dialog_is_a_question() {
        assert_eq!(composer_state(APPROVAL), Composer::Question);
        assert_eq!(turn_hint(APPROVAL), ScreenTurn::Unknown);
        // Selection moved to another option: still a question.
        let moved = APPROVAL.replace("› 1.", "  1.").replace("  2. Yes", "› 2. Yes");
        assert_eq!(composer_state(&moved), Composer::Question);
        // Without the `›` rendering at all, the footer below any `›` line still gives it away.
        let no_marker = APPROVAL.replace("› 1.", "  1.");
        assert_eq!(composer_state(&no_marker), Composer::Question);
    }

    #[test]
    fn an_answered_dialog_above_a_fresh_composer_is_not_a_question() {
        let answered = format!("{APPROVAL}\n  Worked for 2s • 00:02\n\n› {COMPOSER_PLACEHOLDER}\n\n  mock-model default · ~/p\n");
        // The dialog's footer is above the composer now; only the bottom pane below counts.
        assert_eq!(composer_state(&answered), Composer::Empty);
        assert_eq!(turn_hint(&answered), ScreenTurn::Idle);
    }

    #[test]
    fn transcript_prompts_are_not_the_composer() {
        // The last `›` line is a transcript message far above the bottom: no composer visible.
        let mut screen = String::from("› an old prompt\n");
        for _ in 0..MAX_LINES_BELOW_COMPOSER + 1 {
            screen.push_str("• reply line\n");
        }
        assert_eq!(composer_state(&screen), Composer::Unknown);
        assert_eq!(turn_hint(&screen), ScreenTurn::Unknown);
    }

    #[test]
    fn unrecognised_screens_are_unknown() {
        for screen in ["", "\n\n\n", "$ bash prompt", "›", "  ›   \n  footer", "\u{0}\u{1b}[2J garbage"] {
            assert_eq!(composer_state(screen), Composer::Unknown, "{screen:?}");
            assert_eq!(turn_hint(screen), ScreenTurn::Unknown, "{screen:?}");
        }
    }

    #[test]
    fn reasoning_header_with_interrupt_hint_is_working() {
        let screen = fixture("screen-busy.txt").replace("Working (0s", "Inspecting the repo (12s");
        assert_eq!(turn_hint(&screen), ScreenTurn::Working);
    }

    #[test]
    fn multi_line_draft_is_a_draft() {
        let screen = fixture("screen-idle.txt").replace(
            &format!("› {COMPOSER_PLACEHOLDER}"),
            "› first line of a draft\n  second line",
        );
        assert_eq!(composer_state(&screen), Composer::Draft);
    }

    /// A draft of many lines, its cursor on a new empty line (`p1\rp2\rp3\rp4\r` typed as a
    /// burst): its `›` line sits eight lines above the bottom, and it is still the composer.
    #[test]
    fn a_draft_of_many_lines_is_a_draft() {
        let screen = fixture("screen-idle.txt").replace(&format!("› {COMPOSER_PLACEHOLDER}"), "› p1\n  p2\n  p3\n  p4\n  ");
        assert_eq!(composer_state(&screen), Composer::Draft);
        assert_eq!(turn_hint(&screen), turn_hint(&fixture("screen-idle.txt")), "the turn reads as before");
        let longer = fixture("screen-idle.txt").replace(&format!("› {COMPOSER_PLACEHOLDER}"), &format!("› p0{}", "\n  more".repeat(30)));
        assert_eq!(composer_state(&longer), Composer::Draft);
        // A transcript message of several lines, replies below it and no composer: not one.
        let transcript = format!("› an old prompt\n  its second line\n\n{}", "• reply line\n".repeat(MAX_LINES_BELOW_COMPOSER));
        assert_eq!(composer_state(&transcript), Composer::Unknown);
    }

    #[test]
    fn overlong_screens_are_bounded_not_fatal() {
        let mut screen = "x\n".repeat(MAX_SCREEN_LINES * 3);
        screen.push_str(&fixture("screen-idle.txt"));
        assert_eq!(composer_state(&screen), Composer::Empty);
    }
}
