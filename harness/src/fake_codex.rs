//! A fake Codex 0.169 TUI for tests and demos (`wakterm fake-codex`, `wakterm-fake-codex`).
//!
//! It behaves like the real interactive Codex where admission and correlation look:
//! - raw-mode terminal with bracketed paste enabled; composer `› Ask Codex to do anything`
//!   when idle, `◦ Working (Ns • esc to interrupt)` (bullet alternating `◦`/`•`) while a turn runs, replies as `• ...`;
//! - `Ctrl-U` clears the draft; `CR` submits pasted or slowly typed text, but a fast burst of
//!   plain keys followed by `CR` (an unbracketed raw write) stays in the composer;
//! - submitted prompts are trimmed; a submit while busy steers the running turn;
//! - `Esc` (or `Ctrl-C`) while busy interrupts (`turn_aborted`); `Ctrl-C` twice or `Ctrl-D`
//!   on an empty composer quits;
//! - `/clear` on an idle session clears the transcript and redraws (no turn, nothing in the
//!   rollout; the real one also starts a new conversation); while busy it only shows a notice;
//! - a rollout file in the 0.169 format, created at the first turn and held open.
//!
//! Substring triggers (`--abort-on`, `--crash-on`, ...) let tests reach the failure paths;
//! `--ignore-enter` makes a harness that never reacts to Enter.
//!
//! Exit codes: 0 after a quit key or end of input, 1 on a terminal or rollout I/O error,
//! 2 on unusable options; `--crash-on` dies by SIGKILL.

mod composer;
pub mod rollout_records;
mod screen;
mod session;
mod terminal;

use std::io::{self, Write};
use std::path::PathBuf;
use std::time::Instant;

pub use composer::{Composer, ComposerAction};
pub use session::{Behaviour, FakeSession, HistoryLine, SessionConfig, SubmitOutcome};

use screen::Frame;

pub const EXIT_OK: i32 = 0;
pub const EXIT_IO_ERROR: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

/// Bytes taken from the terminal per read.
const READ_CHUNK_BYTES: usize = 64 * 1024;

/// Longest sleep of the event loop: the busy line's seconds counter updates this often.
const STATUS_REFRESH_MS: u64 = 1000;

/// Notice shown after the first Ctrl-C on an idle, empty composer.
const QUIT_HINT: &str = "Press Ctrl-C again to quit";

/// The slash command the fake understands (idle: clears the transcript).
const CLEAR_COMMAND: &str = "/clear";

/// Notice shown for `/clear` while a turn runs.
const CLEAR_WHILE_BUSY: &str = "'/clear' is disabled while a task is in progress.";

const STDIN_FD: std::os::fd::BorrowedFd<'static> = rustix::stdio::stdin();
const STDOUT_FD: std::os::fd::BorrowedFd<'static> = rustix::stdio::stdout();

/// Options of the fake Codex TUI.
#[derive(clap::Args, Debug, Clone)]
pub struct FakeCodexArgs {
    /// Reply of every completed turn; `{prompt}` is replaced by the trimmed prompt.
    #[arg(long, value_name = "TEMPLATE", default_value = "done: {prompt}")]
    pub reply: String,

    /// Time a turn stays busy before its reply is written.
    #[arg(long, value_name = "MS", default_value_t = 50)]
    pub reply_delay_ms: u64,

    /// A turn whose prompt contains SUBSTR ends with `turn_aborted` instead of a reply.
    #[arg(long, value_name = "SUBSTR")]
    pub abort_on: Option<String>,

    /// A turn whose prompt contains SUBSTR opens (task_started, context, user message), then
    /// the process kills itself with SIGKILL: no reply, no terminal restore.
    #[arg(long, value_name = "SUBSTR")]
    pub crash_on: Option<String>,

    /// A turn whose prompt contains SUBSTR never completes on its own (Esc still interrupts).
    #[arg(long, value_name = "SUBSTR")]
    pub hang_on: Option<String>,

    /// Before a turn whose prompt contains SUBSTR opens, the last rollout line is rewritten in
    /// place (its timestamp becomes 1970-01-01T00:00:00.000Z: same length, different bytes).
    #[arg(long, value_name = "SUBSTR")]
    pub rewrite_rollout_on: Option<String>,

    /// Before a turn whose prompt contains SUBSTR opens, the current rollout file is closed
    /// and a new one with a new session id is started (the turn is written there).
    #[arg(long, value_name = "SUBSTR")]
    pub replace_rollout_on: Option<String>,

    /// Codex home holding `sessions/`. Default: $CODEX_HOME, else ~/.codex.
    #[arg(long, value_name = "DIR")]
    pub codex_home: Option<PathBuf>,

    /// Session id of the first rollout file (default: a random UUID v4).
    #[arg(long, value_name = "UUID")]
    pub session_id: Option<uuid::Uuid>,

    /// A harness that never reacts to Enter: every CR byte read from the terminal is dropped
    /// unseen (no submit, no redraw), so a pasted draft just stays in the composer.
    #[arg(long)]
    pub ignore_enter: bool,
}

/// Runs the fake TUI on this process's stdin/stdout until quit; returns the exit code.
pub fn run(args: FakeCodexArgs) -> i32 {
    let ignore_enter = args.ignore_enter;
    let config = match session_config(args) {
        Ok(config) => config,
        Err(message) => {
            eprintln!("wakterm-fake-codex: {message}");
            return EXIT_USAGE;
        }
    };
    let raw_mode = match terminal::RawMode::enable(STDIN_FD) {
        Ok(raw_mode) => raw_mode,
        Err(error) => {
            eprintln!("wakterm-fake-codex: cannot enter raw mode: {error}");
            return EXIT_IO_ERROR;
        }
    };
    let result = App::new(config, ignore_enter).run_loop();
    // Best effort: the terminal may already be gone.
    let _ = write_out(terminal::DISABLE_BRACKETED_PASTE).and_then(|()| write_out(b"\r\n"));
    drop(raw_mode);
    match result {
        Ok(()) => EXIT_OK,
        Err(error) => {
            eprintln!("wakterm-fake-codex: {error}");
            EXIT_IO_ERROR
        }
    }
}

fn session_config(args: FakeCodexArgs) -> Result<SessionConfig, String> {
    let codex_home = match args.codex_home {
        Some(dir) => dir,
        None => default_codex_home().ok_or("no --codex-home, $CODEX_HOME or $HOME")?,
    };
    let cwd = std::env::current_dir()
        .map_err(|error| format!("cannot read the working directory: {error}"))?;
    let session_id = args
        .session_id
        .unwrap_or_else(uuid::Uuid::new_v4)
        .to_string();
    let behaviour = Behaviour {
        reply_template: args.reply,
        reply_delay_ms: args.reply_delay_ms,
        abort_on: args.abort_on,
        crash_on: args.crash_on,
        hang_on: args.hang_on,
        rewrite_rollout_on: args.rewrite_rollout_on,
        replace_rollout_on: args.replace_rollout_on,
    };
    Ok(SessionConfig {
        codex_home,
        cwd,
        session_id,
        behaviour,
    })
}

fn default_codex_home() -> Option<PathBuf> {
    let from_env = std::env::var_os("CODEX_HOME").filter(|value| !value.is_empty());
    from_env
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".codex")))
}

fn home_relative(path: &std::path::Path) -> String {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match home
        .as_deref()
        .and_then(|home| path.strip_prefix(home).ok())
    {
        Some(rest) if !rest.as_os_str().is_empty() => format!("~/{}", rest.display()),
        _ => path.display().to_string(),
    }
}

/// The bytes the composer gets from one read: all of them, or (`--ignore-enter`) all but CR.
fn keys_seen(bytes: &[u8], ignore_enter: bool) -> std::borrow::Cow<'_, [u8]> {
    if ignore_enter && bytes.contains(&b'\r') {
        std::borrow::Cow::Owned(bytes.iter().copied().filter(|b| *b != b'\r').collect())
    } else {
        std::borrow::Cow::Borrowed(bytes)
    }
}

fn write_out(bytes: &[u8]) -> io::Result<()> {
    let mut stdout = io::stdout().lock();
    stdout.write_all(bytes)?;
    stdout.flush()
}

/// The event loop's state: composer, session and screen bookkeeping.
struct App {
    composer: Composer,
    session: FakeSession,
    started: Instant,
    quit_armed: bool,
    notice: Option<HistoryLine>,
    dirty: bool,
    /// The working directory as the header shows it (`~` for $HOME, like the real one).
    cwd_label: String,
    /// `--ignore-enter`: CR bytes are dropped before the composer sees them.
    ignore_enter: bool,
}

enum Step {
    Continue,
    Quit,
}

impl App {
    fn new(config: SessionConfig, ignore_enter: bool) -> Self {
        let cwd_label = home_relative(&config.cwd);
        App {
            cwd_label,
            ignore_enter,
            composer: Composer::new(),
            session: FakeSession::new(config),
            started: Instant::now(),
            quit_armed: false,
            notice: None,
            dirty: true,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn run_loop(mut self) -> io::Result<()> {
        write_out(terminal::ENABLE_BRACKETED_PASTE)?;
        let mut buf = vec![0u8; READ_CHUNK_BYTES];
        loop {
            if self.dirty {
                self.draw()?;
            }
            let readable = terminal::wait_readable(STDIN_FD, self.poll_timeout_ms())?;
            let actions = if readable {
                let n = terminal::read_some(STDIN_FD, &mut buf)?;
                if n == 0 {
                    return Ok(()); // end of input: the terminal closed
                }
                let input = keys_seen(&buf[..n], self.ignore_enter);
                if input.is_empty() {
                    Vec::new() // only ignored Enters: nothing changes, nothing is redrawn
                } else {
                    self.dirty = true;
                    self.composer.feed(&input, self.now_ms())
                }
            } else {
                self.composer.on_quiet(self.now_ms()).into_iter().collect()
            };
            for action in actions {
                if let Step::Quit = self.apply(action)? {
                    return Ok(());
                }
            }
            self.dirty |= self.session.tick(self.now_ms())?;
            // The seconds counter of the busy line moves on its own.
            self.dirty |= self.session.busy_since_ms().is_some();
        }
    }

    fn poll_timeout_ms(&self) -> u64 {
        let now = self.now_ms();
        let mut timeout = STATUS_REFRESH_MS;
        if self.composer.has_pending_input() {
            timeout = timeout.min(composer::ESC_KEY_TIMEOUT_MS);
        }
        if let Some(deadline) = self.session.next_deadline_ms() {
            timeout = timeout.min(deadline.saturating_sub(now));
        }
        timeout
    }

    fn apply(&mut self, action: ComposerAction) -> io::Result<Step> {
        let was_armed = std::mem::take(&mut self.quit_armed);
        self.notice = None;
        match action {
            ComposerAction::Submit(draft) if draft.trim() == CLEAR_COMMAND => {
                if self.session.busy_since_ms().is_some() {
                    self.notice = Some(HistoryLine::Notice(CLEAR_WHILE_BUSY.to_owned()));
                } else {
                    self.session.clear_transcript();
                }
            }
            ComposerAction::Submit(draft) => {
                if let SubmitOutcome::CrashNow { .. } =
                    self.session.submit(&draft, self.now_ms())?
                {
                    terminal::crash_now();
                }
            }
            ComposerAction::Escape => {
                self.session.interrupt()?;
            }
            ComposerAction::CtrlCOnEmpty => {
                if self.session.interrupt()? {
                    return Ok(Step::Continue);
                }
                if was_armed {
                    return Ok(Step::Quit);
                }
                self.quit_armed = true;
                self.notice = Some(HistoryLine::Notice(QUIT_HINT.to_owned()));
            }
            ComposerAction::Quit => return Ok(Step::Quit),
        }
        self.dirty = true;
        Ok(Step::Continue)
    }

    fn draw(&mut self) -> io::Result<()> {
        let (rows, cols) = terminal::window_size(STDOUT_FD)
            .unwrap_or((screen::DEFAULT_ROWS, screen::DEFAULT_COLS));
        let mut history: Vec<&HistoryLine> = self.session.history().collect();
        history.extend(self.notice.as_ref());
        let draft = self.composer.text();
        let now = self.now_ms();
        let busy_secs = self
            .session
            .busy_since_ms()
            .map(|since| now.saturating_sub(since) / 1000);
        let cwd = self.cwd_label.as_str();
        write_out(&screen::render(&Frame {
            history: &history,
            draft: &draft,
            busy_secs,
            cwd,
            rows,
            cols,
        }))?;
        self.dirty = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::keys_seen;

    #[test]
    fn ignore_enter_drops_every_cr_and_nothing_else() {
        assert_eq!(
            &*keys_seen(b"\x1b[200~a\rb\x1b[201~\r", true),
            b"\x1b[200~ab\x1b[201~"
        );
        assert!(
            keys_seen(b"\r", true).is_empty(),
            "a lone Enter is not seen at all"
        );
        assert_eq!(&*keys_seen(b"a\r", false), b"a\r");
    }
}
