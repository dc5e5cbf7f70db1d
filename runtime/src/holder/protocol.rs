//! Wire format between a holder and its clients: one JSON object per line, in both directions.
//!
//! A request is `{"op": ...}`; every reply is an envelope `{"ok": true, "result": {...}}` or
//! `{"ok": false, "error": {"kind": ..., "message": ...}}`. After a successful `subscribe` reply
//! the connection carries only [`StreamEvent`]s. Binary payloads are standard base64.

use serde::{Deserialize, Serialize};

/// The longest an `info_changed` call waits before answering an unchanged `info`.
pub const MAX_INFO_WAIT_MS: u64 = 60_000;
/// Largest single `write` payload. A Codex prompt plus its paste framing is far below this.
pub const MAX_WRITE_BYTES: usize = 1024 * 1024;
/// Largest page `output` returns, whatever `max` asks for.
pub const MAX_OUTPUT_PAGE_BYTES: usize = 1024 * 1024;
/// Largest chunk one pushed `output` event carries.
pub const MAX_STREAM_CHUNK_BYTES: usize = 64 * 1024;
/// Longest line either side accepts: base64 of the largest payload plus envelope slack.
pub const MAX_LINE_BYTES: usize = 2 * MAX_WRITE_BYTES + 64 * 1024;
/// Terminal sizes beyond these are refused: vt100 allocates rows * cols cells.
/// HOLD-*: the smallest pane. vt100 underflows at 1 column (a wide character) or 1 row (a line
/// wrap), and its panic killed the holder's reader thread: the output end never moved again
/// while `info` said alive, and the child blocked once the PTY's buffer filled.
pub const MIN_COLS: u16 = 2;
pub const MIN_ROWS: u16 = 2;
pub const MAX_COLS: u16 = 1000;
pub const MAX_ROWS: u16 = 500;

const _: () = assert!(MAX_LINE_BYTES > MAX_WRITE_BYTES.div_ceil(3) * 4);
const _: () = assert!(MAX_LINE_BYTES > MAX_OUTPUT_PAGE_BYTES.div_ceil(3) * 4);
const _: () = assert!(MAX_STREAM_CHUNK_BYTES <= MAX_OUTPUT_PAGE_BYTES);

/// One request from a client.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    Info,
    /// LIVE-2: `info`, answered once the pane's child differs from what the caller knows
    /// (another generation, or alive changed) or after `timeout_ms` (at most
    /// [`MAX_INFO_WAIT_MS`]), whichever comes first: liveness is pushed, not polled.
    InfoChanged {
        generation: u64,
        alive: bool,
        timeout_ms: u64,
        /// Also answer when the pane's output end differs from this (the screen changed).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        output_end: Option<u64>,
        /// ADM-19: also answer when another writer's Enter was noted later than this (its
        /// `InfoReply::other_enter_ms`; 0 when the caller knows of none), so the daemon learns
        /// of it within a round trip, before Codex records its turn. A holder older than the
        /// field waits as if it were absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        enter_after: Option<u64>,
    },
    Write {
        #[serde(with = "base64_bytes")]
        data: Vec<u8>,
        /// When set, the write happens only if the pane still runs exactly this process,
        /// checked atomically with respawns (ADM-8: the prompt reaches the admitted process or
        /// nothing is written).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<ExpectedProcess>,
        /// ADM-12: when set, a holder that has not begun the write by this moment of
        /// [`monotonic_ms`] refuses it, nothing written ([`WriteRefusal::StartDeadlinePassed`]):
        /// a stalled holder never starts a write the daemon has given up on. A holder older
        /// than the field ignores it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_by_ms: Option<u64>,
    },
    /// SUB-2: several writes in order with `gap_ms` between them, under the pane's write
    /// lock throughout (no other writer splices into the gaps); answered with the Enter
    /// boundary captured right after the last step.
    WriteSteps {
        #[serde(with = "base64_steps")]
        steps: Vec<Vec<u8>>,
        gap_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        expect: Option<ExpectedProcess>,
        /// SUB-1: as `Write`'s: the first step starts by then or nothing is written.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_by_ms: Option<u64>,
    },
    /// The screen; with `with_info`, `info` too, read under the same lock ([`ScreenWithInfo`]),
    /// except `info.writes`: the writes that had all landed before the screen was read (ADM-4,
    /// taken first under the write lock). An admission's refresh needs both, and one call saves
    /// it a round trip (issue 10). A holder older than the flag ignores it and answers the
    /// screen alone.
    Screen {
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        with_info: bool,
    },
    Output {
        after: u64,
        max: u64,
    },
    Subscribe {
        after: u64,
    },
    Resize {
        cols: u16,
        rows: u16,
    },
    Kill {
        signal: i32,
    },
    /// Ends the child and starts the command again in the same pane.
    Respawn {
        /// LIFE-9: when set, a holder that has not begun the respawn by this moment of
        /// [`monotonic_ms`] refuses it ([`WireErrorKind::StartDeadlinePassed`]), the running
        /// process left alone: a stalled holder never replaces a process after the daemon
        /// answered that the restart failed. A holder older than the field ignores it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_by_ms: Option<u64>,
    },
    Shutdown,
}

/// The envelope of every reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    pub ok: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<WireError>,
}

/// Why the holder refused or failed a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireErrorKind {
    /// The line was not a request we understand, or a field is out of range.
    BadRequest,
    /// The payload or line exceeds a named limit.
    TooLarge,
    /// The operation needs a live child and there is none.
    NotAlive,
    /// The holder serves its limit of connections.
    Busy,
    /// An OS call failed inside the holder.
    Internal,
    /// LIFE-9: the holder came to the request after its `start_by_ms`; nothing was done.
    StartDeadlinePassed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireError {
    pub kind: WireErrorKind,
    pub message: String,
}

/// Result of `info`: the facts a daemon needs to name the process it talks to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InfoReply {
    /// Pid of the current child; `None` only when spawning it failed.
    pub pid: Option<u32>,
    /// Field 22 of /proc/PID/stat: with `pid` it names one process incarnation.
    pub start_time_ticks: Option<u64>,
    pub alive: bool,
    /// Exit code of the current child once it ended (128 + signal when killed by one).
    pub exit_code: Option<i32>,
    pub cols: u16,
    pub rows: u16,
    /// 0 for the first child, +1 for each respawn.
    pub generation: u64,
    pub holder_pid: u32,
    /// Absolute offset one past the last output byte received.
    pub output_end: u64,
    /// Why the current child could not be started, when it could not.
    pub spawn_error: Option<String>,
    /// Writes the pane has accepted (a write or write_steps that reached the writer with a
    /// live child): a submit's acknowledgement is void once another write came after it.
    #[serde(default)]
    pub writes: u64,
    /// The output offset at which the current generation's child started.
    #[serde(default)]
    pub generation_start: u64,
    /// Requests the holder has received so far, this one included (MON-1: an idle agent's
    /// holder is not asked anything periodically).
    #[serde(default)]
    pub requests: u64,
    /// Random, drawn when this holder started: with `holder_pid` it names one holder process.
    /// A holder started later at the same socket keeps another output stream (its offsets start
    /// over at 0), so a reader of this one must not read that one as its own (MGD-4). Empty
    /// from a holder older than the field.
    #[serde(default)]
    pub holder_instance: String,
    /// ADM-19: when (this machine's [`monotonic_ms`]) the last write carrying an Enter
    /// (`pane_look::count_enters`) ended that did not name the process it must reach: every
    /// admission's and submit's write names it, so this is a human's (`agent attach`), a raw
    /// `session action=input`'s or another program's. None when there was none, or from a
    /// holder older than the field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_enter_ms: Option<u64>,
    /// ADM-19: how many carriage returns those writes carried so far
    /// (`pane_look::count_enters`): each may have submitted a prompt. 0 from a holder older
    /// than the field.
    #[serde(default)]
    pub other_enters: u64,
    /// ADM-19: how many of them came within `OTHER_ENTER_GRACE_MS` before this answer
    /// (`OtherEnterLook::recent`). 0 from a holder older than the field.
    #[serde(default)]
    pub other_enters_recent: u64,
}

/// One holder process. Its output stream, child generations and write count are its own: a
/// holder started later at the same socket counts them from 0 again (MGD-4, SUB-4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HolderIdentity {
    pub pid: u32,
    /// `InfoReply::holder_instance` (empty from an older holder: then the pid alone names it).
    pub instance: String,
}

impl HolderIdentity {
    pub fn of(info: &InfoReply) -> HolderIdentity {
        HolderIdentity { pid: info.holder_pid, instance: info.holder_instance.clone() }
    }
}

/// `pid.instance`: the label a submit's boundary and samples carry (`EnterBoundary::holder`).
impl std::fmt::Display for HolderIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.pid, self.instance)
    }
}

/// The process a `write` must reach.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExpectedProcess {
    pub pid: u32,
    pub start_time_ticks: u64,
    /// ADM-4: the pane's write count the writer last saw (its look at the screen); a write
    /// that names it is refused, before its first byte, when any write came since. Absent
    /// from older daemons (no check); an older holder ignores it (no check either).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writes: Option<u64>,
    // ADM-19: a write naming its process is an admission's or a submit's; the holder counts
    // the Enter of any other write as another writer's (`InfoReply::other_enter_ms`).
}

impl From<wakterm_engine::ProcessIdentity> for ExpectedProcess {
    fn from(process: wakterm_engine::ProcessIdentity) -> ExpectedProcess {
        ExpectedProcess { pid: process.pid, start_time_ticks: process.start_time_ticks, writes: None }
    }
}

/// Why a `write` wrote nothing by decision, before its first byte (typed, so callers never
/// parse it out of the error text).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteRefusal {
    /// The pane runs another process than the one the write named.
    ProcessChanged,
    /// The pane's child is not alive.
    NotAlive,
    /// The holder came to the write after its `start_by_ms` (it was stalled, or the pane's
    /// write lock was held that long).
    StartDeadlinePassed,
    /// ADM-4: input reached the pane since the writer's look (the write count it named moved).
    InputSinceLook,
}

/// Milliseconds of this machine's monotonic clock (`CLOCK_MONOTONIC`): one clock for every
/// process on the machine, so a daemon's deadline means the same moment to its holders.
pub fn monotonic_ms() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let ms = i128::from(now.tv_sec) * 1000 + i128::from(now.tv_nsec) / 1_000_000;
    u64::try_from(ms).expect("the monotonic clock is not negative")
}

/// Result of `write`. `bytes_written` counts bytes the PTY master accepted before `error`.
/// `refused` is set exactly when the holder decided not to write (then `bytes_written` is 0).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WriteOutcome {
    pub bytes_written: u64,
    pub error: Option<String>,
    #[serde(default)]
    pub refused: Option<WriteRefusal>,
}

impl WriteOutcome {
    /// A write the holder declined before its first byte.
    pub fn refusal(refused: WriteRefusal, error: String) -> WriteOutcome {
        WriteOutcome { bytes_written: 0, error: Some(error), refused: Some(refused) }
    }
}

/// Result of `write_steps`. `steps_written` counts whole steps; `bytes_written` every byte the
/// master accepted. `boundary` is present exactly when every step was written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepsOutcome {
    pub steps_written: u64,
    pub bytes_written: u64,
    pub error: Option<String>,
    #[serde(default)]
    pub refused: Option<WriteRefusal>,
    pub boundary: Option<StepsBoundary>,
}

/// The pane right after the last step, read under one lock: output end, screen at that end,
/// child generation and accepted writes (this one included).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepsBoundary {
    pub screen: ScreenReply,
    pub generation: u64,
    pub writes: u64,
}

/// The longest gap `write_steps` accepts between steps.
pub const MAX_STEP_GAP_MS: u64 = 1_000;
/// The most steps one `write_steps` carries.
pub const MAX_WRITE_STEPS: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub row: u16,
    pub col: u16,
}

/// Result of `screen`: the emulated screen after exactly `output_offset` output bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenReply {
    /// One string per screen row, trailing blanks trimmed.
    pub lines: Vec<String>,
    pub cursor: Cursor,
    pub output_offset: u64,
    pub cols: u16,
    pub rows: u16,
    pub bracketed_paste: bool,
    pub alternate_screen: bool,
}

/// Result of `screen` with `with_info`: the screen and, from a holder that knows the flag, the
/// `info` of the same moment (None: an older holder answered the screen alone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScreenWithInfo {
    #[serde(flatten)]
    pub screen: ScreenReply,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info: Option<InfoReply>,
}

/// Result of `output`: bytes `[start, end)` of the raw output stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputPage {
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
    pub start: u64,
    pub end: u64,
    /// True when bytes after the requested offset were already evicted: `start` > `after`.
    pub truncated: bool,
}

/// Result of `subscribe`, sent once before the events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscribeReply {
    /// The child generation whose exit ends this stream.
    pub generation: u64,
}

/// Result of `kill`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillReply {
    pub pid: u32,
    pub signal: i32,
}

/// A message pushed on a subscribed connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Output bytes starting at absolute `offset`. `truncated` means bytes before `offset` that
    /// the subscriber asked for were evicted from the ring: the stream has a gap.
    Output {
        offset: u64,
        #[serde(with = "base64_bytes")]
        data: Vec<u8>,
        truncated: bool,
    },
    /// The subscribed generation's child ended; the last event of the stream.
    Exited { exit_code: Option<i32> },
    /// Sent when nothing else happened for a while, so a client can tell a quiet pane from a
    /// hung holder. `output_end` is the current end offset.
    Heartbeat { output_end: u64 },
}

/// Serialises `Vec<u8>` as a standard base64 string.
pub(crate) mod base64_bytes {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text)
            .map_err(serde::de::Error::custom)
    }
}

/// Serialises `Vec<Vec<u8>>` as a list of standard base64 strings.
pub(crate) mod base64_steps {
    use base64::Engine as _;
    use serde::{Deserialize, Deserializer, Serializer, ser::SerializeSeq};

    pub fn serialize<S: Serializer>(steps: &[Vec<u8>], s: S) -> Result<S::Ok, S::Error> {
        let mut seq = s.serialize_seq(Some(steps.len()))?;
        for step in steps {
            seq.serialize_element(&base64::engine::general_purpose::STANDARD.encode(step))?;
        }
        seq.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Vec<u8>>, D::Error> {
        let texts = Vec::<String>::deserialize(d)?;
        texts
            .iter()
            .map(|text| base64::engine::general_purpose::STANDARD.decode(text).map_err(serde::de::Error::custom))
            .collect()
    }
}

/// Reads one `\n`-terminated line of at most `max` bytes (newline excluded).
/// `Ok(None)` is a clean end of stream before any byte of a new line.
pub(crate) fn read_line_bounded(
    reader: &mut impl std::io::BufRead,
    max: usize,
) -> Result<Option<Vec<u8>>, LineError> {
    let mut line = Vec::new();
    loop {
        let available = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(LineError::Io(e)),
        };
        if available.is_empty() {
            return if line.is_empty() {
                Ok(None)
            } else {
                Err(LineError::Truncated)
            };
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i, true),
            None => (available.len(), false),
        };
        if line.len() + take > max {
            return Err(LineError::TooLong);
        }
        line.extend_from_slice(&available[..take]);
        reader.consume(if done { take + 1 } else { take });
        if done {
            assert!(line.len() <= max);
            return Ok(Some(line));
        }
    }
}

#[derive(Debug)]
pub(crate) enum LineError {
    Io(std::io::Error),
    TooLong,
    /// The peer closed the stream in the middle of a line.
    Truncated,
}

/// The fuzzing harness of runtime/tests, shared with this file's fuzz target.
#[cfg(test)]
#[path = "../../tests/fuzz_support/mod.rs"]
mod fuzz_support;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn request_wire_names_are_snake_case_ops() {
        let text = serde_json::to_string(&Request::Write {
            expect: None,
            data: b"hi\r".to_vec(),
            start_by_ms: None,
        })
        .unwrap();
        assert_eq!(text, r#"{"op":"write","data":"aGkN"}"#);
        let parsed: Request =
            serde_json::from_str(r#"{"op":"output","after":3,"max":10}"#).unwrap();
        assert_eq!(parsed, Request::Output { after: 3, max: 10 });
        assert!(serde_json::from_str::<Request>(r#"{"op":"write","data":"***"}"#).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"op":"launch"}"#).is_err());
    }

    /// Issue 10: `screen` with `info` in one call keeps the old wire form for a plain screen,
    /// and an older holder's answer (the screen alone) still parses, without `info`, so the
    /// daemon asks `info` separately.
    #[test]
    fn screen_with_info_is_compatible_both_ways() {
        assert_eq!(serde_json::to_string(&Request::Screen { with_info: false }).unwrap(), r#"{"op":"screen"}"#);
        assert_eq!(serde_json::from_str::<Request>(r#"{"op":"screen"}"#).unwrap(), Request::Screen { with_info: false });
        let asked = serde_json::to_string(&Request::Screen { with_info: true }).unwrap();
        assert_eq!(asked, r#"{"op":"screen","with_info":true}"#);
        let screen = ScreenReply {
            lines: vec!["> hi".into()],
            cursor: Cursor { row: 0, col: 4 },
            output_offset: 9,
            cols: 80,
            rows: 24,
            bracketed_paste: true,
            alternate_screen: false,
        };
        let old_answer = serde_json::to_string(&screen).unwrap();
        let parsed: ScreenWithInfo = serde_json::from_str(&old_answer).unwrap();
        assert_eq!(parsed, ScreenWithInfo { screen: screen.clone(), info: None });
        let info = InfoReply {
            pid: Some(7),
            start_time_ticks: Some(11),
            alive: true,
            exit_code: None,
            cols: 80,
            rows: 24,
            generation: 2,
            holder_pid: 5,
            output_end: 9,
            spawn_error: None,
            writes: 3,
            generation_start: 1,
            requests: 4,
            holder_instance: "9f2c".into(),
            other_enter_ms: Some(12),
            other_enters: 2,
            other_enters_recent: 1,
        };
        let both = ScreenWithInfo { screen, info: Some(info) };
        assert_eq!(serde_json::from_str::<ScreenWithInfo>(&serde_json::to_string(&both).unwrap()).unwrap(), both);
    }

    #[test]
    fn stream_events_round_trip() {
        let event = StreamEvent::Output {
            offset: 7,
            data: vec![0, 255, 10],
            truncated: false,
        };
        let text = serde_json::to_string(&event).unwrap();
        assert!(text.starts_with(r#"{"event":"output""#));
        assert_eq!(serde_json::from_str::<StreamEvent>(&text).unwrap(), event);
    }

    #[test]
    fn bounded_line_reader_splits_and_refuses_long_lines() {
        let mut input = std::io::Cursor::new(b"abc\nde\nxyz".to_vec());
        assert_eq!(
            read_line_bounded(&mut input, 8).unwrap(),
            Some(b"abc".to_vec())
        );
        assert_eq!(
            read_line_bounded(&mut input, 8).unwrap(),
            Some(b"de".to_vec())
        );
        assert!(matches!(
            read_line_bounded(&mut input, 8),
            Err(LineError::Truncated)
        ));
        let mut long = std::io::Cursor::new(b"0123456789\n".to_vec());
        assert!(matches!(
            read_line_bounded(&mut long, 8),
            Err(LineError::TooLong)
        ));
        let mut empty = std::io::Cursor::new(Vec::new());
        assert_eq!(read_line_bounded(&mut empty, 8).unwrap(), None);
    }

    /// Parses one line as each side of the holder protocol does: the server a [`Request`], the
    /// client a [`Reply`] or a [`StreamEvent`]. What parses round-trips; a payload is never
    /// larger than its line.
    fn check_holder_line(line: &[u8]) {
        if let Ok(request) = serde_json::from_slice::<Request>(line) {
            if let Request::Write { data, .. } = &request {
                assert!(data.len() <= line.len());
            }
            if let Request::WriteSteps { steps, .. } = &request {
                assert!(steps.iter().map(Vec::len).sum::<usize>() <= line.len());
            }
            let text = serde_json::to_vec(&request).expect("a request serialises");
            assert_eq!(serde_json::from_slice::<Request>(&text).expect("and parses back"), request);
        }
        if let Ok(reply) = serde_json::from_slice::<Reply>(line) {
            let text = serde_json::to_vec(&reply).expect("a reply serialises");
            assert_eq!(serde_json::from_slice::<Reply>(&text).expect("and parses back"), reply);
        }
        if let Ok(both) = serde_json::from_slice::<ScreenWithInfo>(line) {
            let text = serde_json::to_vec(&both).expect("a screen with info serialises");
            assert_eq!(serde_json::from_slice::<ScreenWithInfo>(&text).expect("and parses back"), both);
        }
        if let Ok(event) = serde_json::from_slice::<StreamEvent>(line) {
            let text = serde_json::to_vec(&event).expect("an event serialises");
            assert_eq!(serde_json::from_slice::<StreamEvent>(&text).expect("and parses back"), event);
        }
    }

    /// Reads a whole stream as a holder connection does, through a buffer of `capacity` bytes
    /// (so lines cross refills) with a line cap of `max`: lines come back exactly as sent,
    /// without their newline; the reader stops with `TooLong` exactly at a line over the cap
    /// and with `Truncated` exactly at an unterminated tail.
    fn check_holder_stream(bytes: &[u8], capacity: usize, max: usize) {
        let mut reader = std::io::BufReader::with_capacity(capacity, bytes);
        let mut at = 0;
        loop {
            let rest = &bytes[at..];
            let next_line_len = rest.iter().position(|&b| b == b'\n');
            match fuzz_support::timed(|| read_line_bounded(&mut reader, max)) {
                Ok(Some(line)) => {
                    assert_eq!(Some(line.len()), next_line_len);
                    assert!(line.len() <= max);
                    assert_eq!(&rest[..line.len()], &line[..]);
                    fuzz_support::timed(|| check_holder_line(&line));
                    at += line.len() + 1;
                }
                Ok(None) => return assert!(rest.is_empty()),
                Err(LineError::TooLong) => return assert!(next_line_len.unwrap_or(rest.len()) > max),
                Err(LineError::Truncated) => return assert!(next_line_len.is_none() && !rest.is_empty() && rest.len() <= max),
                Err(LineError::Io(error)) => panic!("reading memory failed: {error}"),
            }
        }
    }

    /// Fuzz target (issue 8): the holder protocol's line reader and message parsers.
    #[test]
    fn fuzz_holder_protocol() {
        fuzz_support::replay("holder_request", |bytes| {
            check_holder_stream(bytes, 7, MAX_LINE_BYTES);
            check_holder_stream(bytes, 4096, 16);
        });
        let huge = [MAX_LINE_BYTES + 1, 70_000, 17];
        let strategy = (fuzz_support::input(fuzz_support::seeds("holder_request"), &huge), 1usize..256, prop_oneof![Just(16usize), Just(4096), Just(MAX_LINE_BYTES)]);
        proptest::proptest!(fuzz_support::config(512), |((bytes, capacity, max) in strategy)| check_holder_stream(&bytes, capacity, max));
    }
}
