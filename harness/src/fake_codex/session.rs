//! The fake Codex session: turns, steering, interrupts and the rollout they write.
//!
//! Clock-free like the composer (`now_ms` comes in), so the turn rules are unit-tested on a
//! temporary CODEX_HOME without a terminal. The rollout file is created lazily at the first
//! turn, as the real Codex does, and stays open for the life of the session.

use std::collections::VecDeque;
use std::io;
use std::path::PathBuf;
use std::time::SystemTime;

use super::rollout_records::{RolloutRecorder, TurnRecord, ABORT_REASON_INTERRUPTED};
use crate::rollout_writer::{RolloutWriter, SessionMeta, CODEX_CLI_VERSION, CODEX_TUI_ORIGINATOR};

/// Screen history kept for redraws; older lines scroll away for good.
pub const MAX_HISTORY_LINES: usize = 512;

/// Where `{prompt}` appears in a reply template, it is replaced by the trimmed prompt.
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";

/// Notice the real Codex prints when a turn is interrupted.
pub const INTERRUPTED_NOTICE: &str =
    "Conversation interrupted - use /feedback if something went wrong";

/// How turns end, chosen per prompt by substring triggers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Behaviour {
    pub reply_template: String,
    pub reply_delay_ms: u64,
    pub abort_on: Option<String>,
    pub crash_on: Option<String>,
    pub hang_on: Option<String>,
    pub rewrite_rollout_on: Option<String>,
    pub replace_rollout_on: Option<String>,
}

impl Behaviour {
    fn triggers(trigger: &Option<String>, prompt: &str) -> bool {
        trigger
            .as_deref()
            .is_some_and(|needle| !needle.is_empty() && prompt.contains(needle))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionConfig {
    pub codex_home: PathBuf,
    pub cwd: PathBuf,
    /// Session id of the first rollout file (replacements always get fresh ids).
    pub session_id: String,
    pub behaviour: Behaviour,
}

/// One line of the transcript the screen shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryLine {
    User(String),
    Agent(String),
    Notice(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SubmitOutcome {
    /// A blank prompt (after trimming): nothing happens, like the real Codex.
    Ignored,
    Started {
        turn_id: String,
    },
    /// Submitted while busy: recorded as a user message of the running turn, which then
    /// answers this latest message (as the real Codex did in the steered-turn fixture).
    Steered {
        turn_id: String,
    },
    /// `--crash-on` matched: the turn opened and the process must now die abruptly.
    CrashNow {
        turn_id: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ActiveTurn {
    record: TurnRecord,
    /// The latest user message of the turn: the reply answers it.
    prompt: String,
    started_ms: u64,
    /// When the turn ends on its own; None for a hanging turn.
    ends_at_ms: Option<u64>,
    aborts: bool,
    /// Whether the mid-turn `token_count` (info null) was written already.
    snapshot_written: bool,
}

#[derive(Debug)]
pub struct FakeSession {
    config: SessionConfig,
    rollout: Option<RolloutRecorder>,
    turn: Option<ActiveTurn>,
    history: VecDeque<HistoryLine>,
}

impl FakeSession {
    pub fn new(config: SessionConfig) -> Self {
        assert!(!config.session_id.is_empty());
        FakeSession {
            config,
            rollout: None,
            turn: None,
            history: VecDeque::new(),
        }
    }

    pub fn rollout(&self) -> Option<&RolloutWriter> {
        self.rollout.as_ref().map(RolloutRecorder::writer)
    }

    /// Start time of the running turn, if any (drives the `◦ Working (Ns ...)` line).
    pub fn busy_since_ms(&self) -> Option<u64> {
        self.turn.as_ref().map(|turn| turn.started_ms)
    }

    /// The next time `tick` has work to do.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        self.turn.as_ref().and_then(|turn| turn.ends_at_ms)
    }

    pub fn history(&self) -> impl Iterator<Item = &HistoryLine> {
        self.history.iter()
    }

    /// Handles one submitted draft. The prompt is trimmed like the real Codex trims it.
    pub fn submit(&mut self, draft: &str, now_ms: u64) -> io::Result<SubmitOutcome> {
        let prompt = draft.trim();
        if prompt.is_empty() {
            return Ok(SubmitOutcome::Ignored);
        }
        self.push_history(HistoryLine::User(prompt.to_owned()));
        if let Some(mut turn) = self.turn.take() {
            self.rate_limits_snapshot_once(&mut turn)?;
            self.open_rollout()?.user_message(&turn.record, prompt)?;
            turn.prompt = prompt.to_owned();
            // The steer starts a new model request; a hanging turn keeps hanging.
            let delay_ms = self.config.behaviour.reply_delay_ms;
            turn.ends_at_ms = turn.ends_at_ms.map(|_| now_ms.saturating_add(delay_ms));
            let turn_id = turn.record.turn_id.clone();
            self.turn = Some(turn);
            return Ok(SubmitOutcome::Steered { turn_id });
        }
        self.start_turn(prompt, now_ms)
    }

    /// Finishes a turn whose reply delay has passed. Returns true when the screen changed.
    pub fn tick(&mut self, now_ms: u64) -> io::Result<bool> {
        let due = self
            .turn
            .as_ref()
            .and_then(|turn| turn.ends_at_ms)
            .is_some_and(|at| now_ms >= at);
        if !due {
            return Ok(false);
        }
        let mut turn = self.turn.take().expect("due implies a running turn");
        if turn.aborts {
            self.abort(&mut turn)?;
            return Ok(true);
        }
        let reply = self
            .config
            .behaviour
            .reply_template
            .replace(PROMPT_PLACEHOLDER, &turn.prompt);
        self.open_rollout()?
            .complete_turn(&turn.record, &turn.prompt, &reply)?;
        self.push_history(HistoryLine::Agent(reply));
        assert!(self.turn.is_none());
        Ok(true)
    }

    /// `/clear` on an idle session: the transcript the screen shows is emptied. The rollout
    /// and the session id are kept (the real Codex also starts a new conversation).
    pub fn clear_transcript(&mut self) {
        assert!(self.turn.is_none(), "/clear is refused while a turn runs");
        self.history.clear();
    }

    /// Esc / Ctrl-C while busy. Returns true when a turn was interrupted.
    pub fn interrupt(&mut self) -> io::Result<bool> {
        let Some(mut turn) = self.turn.take() else {
            return Ok(false);
        };
        self.abort(&mut turn)?;
        Ok(true)
    }

    fn start_turn(&mut self, prompt: &str, now_ms: u64) -> io::Result<SubmitOutcome> {
        assert!(self.turn.is_none());
        let behaviour = self.config.behaviour.clone();
        if Behaviour::triggers(&behaviour.replace_rollout_on, prompt) && self.rollout.is_some() {
            self.replace_rollout()?;
        }
        let turn_id = uuid::Uuid::new_v4().to_string();
        let record = TurnRecord {
            turn_id: turn_id.clone(),
            started: SystemTime::now(),
        };
        let recorder = self.open_rollout()?;
        if Behaviour::triggers(&behaviour.rewrite_rollout_on, prompt) {
            recorder.writer_mut().rewrite_last_line_timestamp()?;
        }
        recorder.open_turn(&record)?;
        recorder.user_message(&record, prompt)?;
        if Behaviour::triggers(&behaviour.crash_on, prompt) {
            return Ok(SubmitOutcome::CrashNow { turn_id });
        }
        let hangs = Behaviour::triggers(&behaviour.hang_on, prompt);
        self.turn = Some(ActiveTurn {
            record,
            prompt: prompt.to_owned(),
            started_ms: now_ms,
            ends_at_ms: (!hangs).then(|| now_ms.saturating_add(behaviour.reply_delay_ms)),
            aborts: Behaviour::triggers(&behaviour.abort_on, prompt),
            snapshot_written: false,
        });
        Ok(SubmitOutcome::Started { turn_id })
    }

    fn abort(&mut self, turn: &mut ActiveTurn) -> io::Result<()> {
        self.rate_limits_snapshot_once(turn)?;
        self.open_rollout()?
            .abort_turn(&turn.record, ABORT_REASON_INTERRUPTED)?;
        self.push_history(HistoryLine::Notice(INTERRUPTED_NOTICE.to_owned()));
        Ok(())
    }

    /// Real captures show one `token_count` with `info: null` after the opening user message
    /// of a turn that stays in flight (before a steer or an interrupt); never a second one.
    fn rate_limits_snapshot_once(&mut self, turn: &mut ActiveTurn) -> io::Result<()> {
        if !std::mem::replace(&mut turn.snapshot_written, true) {
            self.open_rollout()?.rate_limits_snapshot()?;
        }
        Ok(())
    }

    /// Closes the current file (dropping the writer closes the fd, as a real session switch
    /// would) and continues in a new file under a new session id.
    fn replace_rollout(&mut self) -> io::Result<()> {
        self.rollout = None;
        self.config.session_id = uuid::Uuid::new_v4().to_string();
        self.open_rollout()?;
        Ok(())
    }

    /// The open rollout, created on first use.
    fn open_rollout(&mut self) -> io::Result<&mut RolloutRecorder> {
        if self.rollout.is_none() {
            let meta = SessionMeta {
                session_id: self.config.session_id.clone(),
                cwd: self.config.cwd.clone(),
                cli_version: CODEX_CLI_VERSION.to_owned(),
                originator: CODEX_TUI_ORIGINATOR.to_owned(),
            };
            let writer = RolloutWriter::create(&self.config.codex_home, &meta, SystemTime::now())?;
            self.rollout = Some(RolloutRecorder::new(writer, self.config.cwd.clone()));
        }
        Ok(self.rollout.as_mut().expect("created above"))
    }

    fn push_history(&mut self, line: HistoryLine) {
        if self.history.len() == MAX_HISTORY_LINES {
            self.history.pop_front();
        }
        self.history.push_back(line);
        assert!(self.history.len() <= MAX_HISTORY_LINES);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn session(home: &std::path::Path, behaviour: Behaviour) -> FakeSession {
        FakeSession::new(SessionConfig {
            codex_home: home.to_owned(),
            cwd: PathBuf::from("/work/project"),
            session_id: "11111111-2222-4333-8444-555555555555".to_owned(),
            behaviour: Behaviour {
                reply_template: "done: {prompt}".to_owned(),
                reply_delay_ms: 50,
                ..behaviour
            },
        })
    }

    fn records(session: &FakeSession) -> Vec<Value> {
        let text = std::fs::read_to_string(session.rollout().unwrap().path()).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    /// `type` of event_msg payloads, or the line kind otherwise, for order assertions.
    fn kinds(records: &[Value]) -> Vec<String> {
        records
            .iter()
            .map(|record| match record["type"].as_str().unwrap() {
                "event_msg" => record["payload"]["type"].as_str().unwrap().to_owned(),
                "response_item" => format!(
                    "{}:{}",
                    "message",
                    record["payload"]["role"].as_str().unwrap()
                ),
                other => other.to_owned(),
            })
            .collect()
    }

    #[test]
    fn no_rollout_exists_until_the_first_turn_and_a_turn_writes_the_0169_order() {
        let home = tempfile::tempdir().unwrap();
        let mut session = session(home.path(), Behaviour::default());
        assert_eq!(session.submit("  \n ", 0).unwrap(), SubmitOutcome::Ignored);
        assert!(session.rollout().is_none());
        let SubmitOutcome::Started { turn_id } = session.submit(" \tfix\tit\n ünï ", 0).unwrap()
        else {
            panic!()
        };
        assert!(!session.tick(49).unwrap());
        assert!(session.tick(50).unwrap());
        let lines = records(&session);
        assert_eq!(
            kinds(&lines),
            [
                "session_meta",
                "task_started",
                "message:developer",
                "message:user",
                "world_state",
                "turn_context",
                "thread_settings_applied",
                "message:user",
                "item_completed",
                "item_completed",
                "message:assistant",
                "token_usage_record",
                "token_count",
                "task_complete",
            ]
        );
        assert_eq!(lines[0]["payload"]["cwd"], "/work/project");
        assert_eq!(lines[7]["payload"]["content"][0]["text"], "fix\tit\n ünï");
        assert_eq!(
            lines[7]["payload"]["internal_chat_message_metadata_passthrough"]["turn_id"],
            turn_id.as_str()
        );
        assert_eq!(lines[8]["payload"]["item"]["type"], "UserMessage");
        assert_eq!(
            lines[9]["payload"]["item"]["content"][0]["text"],
            "done: fix\tit\n ünï"
        );
        assert_eq!(lines[13]["payload"]["turn_id"], turn_id.as_str());
        assert_eq!(
            lines[13]["payload"]["last_agent_message"],
            "done: fix\tit\n ünï"
        );
        for (ordinal, line) in lines.iter().enumerate() {
            assert_eq!(line["ordinal"], ordinal as u64);
        }
    }

    #[test]
    fn steering_is_recorded_in_the_running_turn() {
        let home = tempfile::tempdir().unwrap();
        let mut session = session(home.path(), Behaviour::default());
        let SubmitOutcome::Started { turn_id } = session.submit("first", 0).unwrap() else {
            panic!()
        };
        assert_eq!(
            session.submit("steer", 10).unwrap(),
            SubmitOutcome::Steered {
                turn_id: turn_id.clone()
            }
        );
        session.tick(60).unwrap();
        let lines = records(&session);
        let started: Vec<_> = lines
            .iter()
            .filter(|l| l["payload"]["type"] == "task_started")
            .collect();
        assert_eq!(started.len(), 1);
        let users: Vec<_> = lines
            .iter()
            .filter(|l| l["payload"]["item"]["type"] == "UserMessage")
            .collect();
        assert_eq!(users.len(), 2);
        assert!(users
            .iter()
            .all(|l| l["payload"]["turn_id"] == turn_id.as_str()));
        // The steer restarted the model request; the final answers the latest message.
        assert_eq!(
            lines.last().unwrap()["payload"]["last_agent_message"],
            "done: steer"
        );
    }

    #[test]
    fn abort_hang_and_interrupt_end_turns_without_a_final() {
        let home = tempfile::tempdir().unwrap();
        let behaviour = Behaviour {
            abort_on: Some("ABORT".into()),
            hang_on: Some("HANG".into()),
            ..Default::default()
        };
        let mut session = session(home.path(), behaviour);
        session.submit("please ABORT", 0).unwrap();
        assert!(session.tick(50).unwrap());
        assert_eq!(
            records(&session).last().unwrap()["payload"]["type"],
            "turn_aborted"
        );
        session.submit("HANG forever", 100).unwrap();
        assert_eq!(session.next_deadline_ms(), None);
        assert!(!session.tick(u64::MAX).unwrap());
        assert!(session.interrupt().unwrap());
        assert!(!session.interrupt().unwrap(), "nothing left to interrupt");
        let lines = records(&session);
        assert_eq!(
            lines
                .iter()
                .filter(|l| l["payload"]["type"] == "turn_aborted")
                .count(),
            2
        );
        assert_eq!(
            lines
                .iter()
                .filter(|l| l["payload"]["type"] == "task_complete")
                .count(),
            0
        );
    }

    #[test]
    fn clear_empties_the_transcript_and_writes_nothing() {
        let home = tempfile::tempdir().unwrap();
        let mut session = session(home.path(), Behaviour::default());
        session.submit("one", 0).unwrap();
        session.tick(50).unwrap();
        let before = records(&session).len();
        assert_eq!(session.history().count(), 2);
        session.clear_transcript();
        assert_eq!(session.history().count(), 0);
        assert_eq!(records(&session).len(), before, "no rollout record");
    }

    #[test]
    fn crash_trigger_stops_after_the_user_message() {
        let home = tempfile::tempdir().unwrap();
        let mut session = session(
            home.path(),
            Behaviour {
                crash_on: Some("CRASH".into()),
                ..Default::default()
            },
        );
        assert!(matches!(
            session.submit("CRASH now", 0).unwrap(),
            SubmitOutcome::CrashNow { .. }
        ));
        let lines = records(&session);
        assert_eq!(
            lines.last().unwrap()["payload"]["item"]["type"],
            "UserMessage"
        );
        assert_eq!(session.busy_since_ms(), None);
    }

    #[test]
    fn replace_starts_a_new_file_and_rewrite_damages_earlier_bytes() {
        let home = tempfile::tempdir().unwrap();
        let behaviour = Behaviour {
            replace_rollout_on: Some("REPLACE".into()),
            rewrite_rollout_on: Some("REWRITE".into()),
            ..Default::default()
        };
        let mut session = session(home.path(), behaviour);
        session.submit("one", 0).unwrap();
        session.tick(50).unwrap();
        let first_path = session.rollout().unwrap().path().to_owned();
        let before = std::fs::read(&first_path).unwrap();
        session.submit("REWRITE two", 100).unwrap();
        let after = std::fs::read(&first_path).unwrap();
        assert_ne!(
            before[..],
            after[..before.len()],
            "earlier bytes changed in place"
        );
        session.tick(150).unwrap();
        session.submit("REPLACE three", 200).unwrap();
        let second_path = session.rollout().unwrap().path().to_owned();
        assert_ne!(first_path, second_path);
        let lines = records(&session);
        assert_eq!(lines[0]["type"], "session_meta");
        assert_ne!(
            lines[0]["payload"]["id"],
            "11111111-2222-4333-8444-555555555555"
        );
    }
}
