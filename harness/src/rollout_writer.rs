//! A writer for Codex 0.169 rollout files, shared by the fake Codex TUI and the simulator.
//!
//! The real Codex appends one JSON object per line to
//! `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-YYYY-MM-DDThh-mm-ss-<session-uuid>.jsonl`,
//! each shaped `{"timestamp":"...Z","ordinal":N,"type":KIND,"payload":{...}}`, and keeps the
//! file open for as long as the session lives. Observers rely on three properties that this
//! writer therefore guarantees:
//! - every line reaches the file in ONE `write()` call, so a reader never sees half a line
//!   unless the process dies inside that call;
//! - the file descriptor stays open until the writer is dropped, so `/proc/PID/fd` of the
//!   owning process shows the rollout (session discovery depends on it);
//! - `ordinal` counts lines from 0 (the `session_meta` line) without gaps.
//!
//! Deliberate damage (in-place rewrites) is a separate, explicit method so failure-path tests
//! can reach it without the normal path ever touching earlier bytes.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::Serialize;

/// Largest single rollout line we will write. A prompt larger than this is a caller bug in a
/// test double; refusing it keeps memory and the one-write guarantee bounded.
pub const MAX_ROLLOUT_LINE_BYTES: usize = 4 * 1024 * 1024;

/// `cli_version` written in `session_meta`: the Codex release whose format this file mimics.
pub const CODEX_CLI_VERSION: &str = "0.169.0";

/// `originator` written in `session_meta` by the interactive Codex TUI.
pub const CODEX_TUI_ORIGINATOR: &str = "codex-tui";

/// Length of an RFC 3339 UTC timestamp with milliseconds: `2026-11-30T12:34:56.789Z`.
const TIMESTAMP_LEN: usize = 24;

/// What a new rollout file says about its session in the first (`session_meta`) line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionMeta {
    /// Session id (a UUID string); also part of the file name.
    pub session_id: String,
    /// Working directory the session declares; observers compare it with the process cwd.
    pub cwd: PathBuf,
    pub cli_version: String,
    pub originator: String,
}

/// Where in the file one written line lives, so tests can damage it on purpose.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineSpan {
    pub offset_bytes: u64,
    /// Length including the trailing `\n`.
    pub len_bytes: u64,
}

/// An open, append-only rollout file.
#[derive(Debug)]
pub struct RolloutWriter {
    file: File,
    path: PathBuf,
    session_id: String,
    next_ordinal: u64,
    len_bytes: u64,
    last_line: Option<LineSpan>,
}

impl RolloutWriter {
    /// Creates the dated directory and the file, then writes the `session_meta` line.
    /// `now` decides both the path and the first timestamp (the real Codex names the file by
    /// the session start time).
    pub fn create(codex_home: &Path, meta: &SessionMeta, now: SystemTime) -> io::Result<Self> {
        Self::create_at(rollout_path(codex_home, &meta.session_id, now), meta, now)
    }

    /// Opens the rollout at `path` for appending: created with its `session_meta` line when it
    /// does not exist yet, else continued where it ends (a resumed thread: the real app-server
    /// appends a resumed thread's records to its rollout).
    pub fn open_at(path: &Path, meta: &SessionMeta, now: SystemTime) -> io::Result<Self> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == io::ErrorKind::NotFound => return Self::create_at(path.to_path_buf(), meta, now),
            Err(error) => return Err(error),
        };
        let file = OpenOptions::new().append(true).open(path)?;
        let next_ordinal = bytes.iter().filter(|b| **b == b'\n').count() as u64;
        Ok(RolloutWriter {
            file,
            path: path.to_path_buf(),
            session_id: meta.session_id.clone(),
            next_ordinal,
            len_bytes: bytes.len() as u64,
            last_line: None,
        })
    }

    fn create_at(path: PathBuf, meta: &SessionMeta, now: SystemTime) -> io::Result<Self> {
        assert!(!meta.session_id.is_empty(), "session id must not be empty");
        let dir = path
            .parent()
            .expect("rollout path always has a dated parent");
        std::fs::create_dir_all(dir)?;
        // create_new: two sessions must never share (and interleave lines in) one file.
        let file = OpenOptions::new()
            .append(true)
            .create_new(true)
            .open(&path)?;
        let mut writer = RolloutWriter {
            file,
            path,
            session_id: meta.session_id.clone(),
            next_ordinal: 0,
            len_bytes: 0,
            last_line: None,
        };
        let payload = SessionMetaPayload {
            session_id: &meta.session_id,
            id: &meta.session_id,
            timestamp: format_timestamp(now),
            cwd: &meta.cwd,
            runtime_workspace_roots: [&meta.cwd],
            originator: &meta.originator,
            cli_version: &meta.cli_version,
            source: "cli",
            thread_source: "user",
            model_provider: "mock",
            base_instructions: BaseInstructions {
                text: "You are a fake Codex used by wakterm tests.",
            },
        };
        writer.append_at("session_meta", &payload, now)?;
        assert_eq!(writer.next_ordinal, 1);
        Ok(writer)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Number of lines written so far (the ordinal the next line will get).
    pub fn lines_written(&self) -> u64 {
        self.next_ordinal
    }

    pub fn len_bytes(&self) -> u64 {
        self.len_bytes
    }

    pub fn last_line(&self) -> Option<LineSpan> {
        self.last_line
    }

    /// Appends one line of `kind` (e.g. `event_msg`, `response_item`, `turn_context`) stamped
    /// with the current time. Returns the ordinal the line received.
    pub fn append(&mut self, kind: &str, payload: &impl Serialize) -> io::Result<u64> {
        self.append_at(kind, payload, SystemTime::now())
    }

    /// Appends one line with an explicit timestamp (deterministic tests and the simulator).
    pub fn append_at(
        &mut self,
        kind: &str,
        payload: &impl Serialize,
        now: SystemTime,
    ) -> io::Result<u64> {
        self.append_line(kind, payload, None, now)
    }

    /// Appends one line that also carries the line-level `metadata` object the real Codex
    /// writes after the payload of `response_item` lines.
    pub fn append_with_metadata(
        &mut self,
        kind: &str,
        payload: &impl Serialize,
        metadata: &impl Serialize,
    ) -> io::Result<u64> {
        let metadata_json = serde_json::to_string(metadata)?;
        self.append_line(kind, payload, Some(metadata_json), SystemTime::now())
    }

    fn append_line(
        &mut self,
        kind: &str,
        payload: &impl Serialize,
        metadata_json: Option<String>,
        now: SystemTime,
    ) -> io::Result<u64> {
        assert!(!kind.is_empty(), "rollout line kind must not be empty");
        let ordinal = self.next_ordinal;
        let line = encode_line(format_timestamp(now), ordinal, kind, payload, metadata_json)?;
        let written = self.file.write(&line)?;
        if written != line.len() {
            // A short write leaves a torn line; say so instead of writing the rest in a
            // second call, which would break the one-write-per-line guarantee.
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short rollout write: {written} of {} bytes", line.len()),
            ));
        }
        self.file.flush()?;
        let span = LineSpan {
            offset_bytes: self.len_bytes,
            len_bytes: line.len() as u64,
        };
        self.len_bytes += span.len_bytes;
        self.last_line = Some(span);
        self.next_ordinal += 1;
        assert!(self.next_ordinal > ordinal);
        Ok(ordinal)
    }

    /// Overwrites already written bytes without changing the file length: the "provider
    /// rewrote its rollout" fault. Only ranges inside the written file are accepted.
    pub fn rewrite_in_place(&mut self, offset_bytes: u64, bytes: &[u8]) -> io::Result<()> {
        let end = offset_bytes.checked_add(bytes.len() as u64);
        if end.is_none_or(|end| end > self.len_bytes) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "in-place rewrite must stay inside the written bytes",
            ));
        }
        // A second, non-append handle: with O_APPEND, Linux pwrite ignores the offset and
        // would append instead of overwriting.
        let file = OpenOptions::new().write(true).open(&self.path)?;
        file.write_all_at(bytes, offset_bytes)?;
        file.sync_data()
    }

    /// Rewrites the timestamp of the most recent line to the Unix epoch: same length, still
    /// valid JSON, different bytes. Returns the span that changed, or None before any line.
    pub fn rewrite_last_line_timestamp(&mut self) -> io::Result<Option<LineSpan>> {
        let Some(span) = self.last_line else {
            return Ok(None);
        };
        // `{"timestamp":"` is the fixed prefix of every line encode_line writes.
        let value_offset = span.offset_bytes + TIMESTAMP_PREFIX.len() as u64;
        let epoch = format_timestamp(SystemTime::UNIX_EPOCH);
        assert_eq!(epoch.len(), TIMESTAMP_LEN);
        self.rewrite_in_place(value_offset, epoch.as_bytes())?;
        Ok(Some(span))
    }
}

const TIMESTAMP_PREFIX: &str = "{\"timestamp\":\"";

/// Serialises one line with the field order the real Codex uses: timestamp, ordinal, type,
/// payload. serde_json's `preserve_order` is not enabled in this workspace (and `json!`
/// would sort keys), so the outer object is assembled around individually serialised values
/// and payloads are derive(Serialize) structs whose declaration order is the field order.
fn encode_line(
    timestamp: String,
    ordinal: u64,
    kind: &str,
    payload: &impl Serialize,
    metadata_json: Option<String>,
) -> io::Result<Vec<u8>> {
    assert_eq!(timestamp.len(), TIMESTAMP_LEN);
    let kind_json = serde_json::to_string(kind)?;
    let payload_json = serde_json::to_string(payload)?;
    let metadata = metadata_json
        .map(|json| format!(",\"metadata\":{json}"))
        .unwrap_or_default();
    let line = format!(
        "{TIMESTAMP_PREFIX}{timestamp}\",\"ordinal\":{ordinal},\"type\":{kind_json},\"payload\":{payload_json}{metadata}}}\n"
    );
    if line.len() > MAX_ROLLOUT_LINE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "rollout line of {} bytes exceeds {MAX_ROLLOUT_LINE_BYTES}",
                line.len()
            ),
        ));
    }
    assert!(line.ends_with('\n') && !line[..line.len() - 1].contains('\n'));
    Ok(line.into_bytes())
}

/// `2026-11-30T12:34:56.789Z` (UTC, milliseconds), the format of every rollout timestamp.
pub fn format_timestamp(now: SystemTime) -> String {
    let text = humantime::format_rfc3339_millis(now).to_string();
    assert_eq!(text.len(), TIMESTAMP_LEN, "timestamp {text:?}");
    text
}

/// `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-YYYY-MM-DDThh-mm-ss-<id>.jsonl` for a session
/// started at `now`. The fake uses UTC for the date parts; the real Codex uses local time,
/// which is the same on the UTC machines the tests run on.
pub fn rollout_path(codex_home: &Path, session_id: &str, now: SystemTime) -> PathBuf {
    let stamp = format_timestamp(now);
    let (year, month, day) = (&stamp[0..4], &stamp[5..7], &stamp[8..10]);
    let file_stamp = stamp[0..19].replace(':', "-");
    codex_home
        .join("sessions")
        .join(year)
        .join(month)
        .join(day)
        .join(format!("rollout-{file_stamp}-{session_id}.jsonl"))
}

/// Payload of the first line; field order follows the real Codex `SessionMeta`.
#[derive(Serialize)]
struct SessionMetaPayload<'a> {
    session_id: &'a str,
    id: &'a str,
    timestamp: String,
    cwd: &'a Path,
    runtime_workspace_roots: [&'a Path; 1],
    originator: &'a str,
    cli_version: &'a str,
    source: &'a str,
    thread_source: &'a str,
    model_provider: &'a str,
    base_instructions: BaseInstructions<'a>,
}

#[derive(Serialize)]
struct BaseInstructions<'a> {
    text: &'a str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};
    use std::time::Duration;

    fn meta(id: &str, cwd: &Path) -> SessionMeta {
        SessionMeta {
            session_id: id.to_owned(),
            cwd: cwd.to_owned(),
            cli_version: CODEX_CLI_VERSION.to_owned(),
            originator: CODEX_TUI_ORIGINATOR.to_owned(),
        }
    }

    fn read_lines(path: &Path) -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap();
        text.lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    #[test]
    fn path_follows_the_codex_layout() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_796_041_296_789);
        let path = rollout_path(Path::new("/h"), "abc", at);
        assert_eq!(
            path,
            Path::new("/h/sessions/2026/11/30/rollout-2026-11-30T12-21-36-abc.jsonl")
        );
    }

    #[test]
    fn lines_keep_codex_field_order_and_gapless_ordinals() {
        let home = tempfile::tempdir().unwrap();
        let mut writer =
            RolloutWriter::create(home.path(), &meta("s-1", home.path()), SystemTime::now())
                .unwrap();
        let ordinal = writer
            .append(
                "event_msg",
                &json!({"type": "task_started", "turn_id": "t"}),
            )
            .unwrap();
        assert_eq!(ordinal, 1);
        let text = std::fs::read_to_string(writer.path()).unwrap();
        for (index, line) in text.lines().enumerate() {
            assert!(line.starts_with("{\"timestamp\":\""), "{line}");
            let after_ts = &line[TIMESTAMP_PREFIX.len() + TIMESTAMP_LEN..];
            assert!(
                after_ts.starts_with(&format!("\",\"ordinal\":{index},\"type\":\"")),
                "{line}"
            );
        }
        let lines = read_lines(writer.path());
        assert_eq!(lines[0]["type"], "session_meta");
        assert_eq!(lines[0]["payload"]["id"], "s-1");
        assert_eq!(lines[0]["payload"]["cli_version"], CODEX_CLI_VERSION);
        assert_eq!(lines[1]["payload"]["turn_id"], "t");
        assert_eq!(writer.len_bytes(), text.len() as u64);
    }

    #[test]
    fn the_same_session_cannot_be_created_twice() {
        let home = tempfile::tempdir().unwrap();
        let now = SystemTime::now();
        let _first = RolloutWriter::create(home.path(), &meta("dup", home.path()), now).unwrap();
        let second = RolloutWriter::create(home.path(), &meta("dup", home.path()), now);
        assert_eq!(second.unwrap_err().kind(), io::ErrorKind::AlreadyExists);
    }

    #[test]
    fn rewrite_changes_bytes_but_not_length_and_rejects_out_of_range() {
        let home = tempfile::tempdir().unwrap();
        let mut writer =
            RolloutWriter::create(home.path(), &meta("rw", home.path()), SystemTime::now())
                .unwrap();
        let before = std::fs::read(writer.path()).unwrap();
        let span = writer.rewrite_last_line_timestamp().unwrap().unwrap();
        assert_eq!(span.offset_bytes, 0);
        let after = std::fs::read(writer.path()).unwrap();
        assert_eq!(before.len(), after.len());
        assert_ne!(before, after);
        assert_eq!(
            read_lines(writer.path())[0]["timestamp"],
            "1970-01-01T00:00:00.000Z"
        );
        let past_end = writer.rewrite_in_place(writer.len_bytes(), b"x");
        assert_eq!(past_end.unwrap_err().kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn oversized_lines_are_refused_without_writing() {
        let home = tempfile::tempdir().unwrap();
        let mut writer =
            RolloutWriter::create(home.path(), &meta("big", home.path()), SystemTime::now())
                .unwrap();
        let len_before = writer.len_bytes();
        let huge = "x".repeat(MAX_ROLLOUT_LINE_BYTES);
        let result = writer.append("response_item", &json!({ "text": huge }));
        assert_eq!(result.unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(writer.len_bytes(), len_before);
        assert_eq!(writer.lines_written(), 1);
    }
}
