//! Incremental, budgeted reader of one Codex rollout file.
//!
//! Codex only appends to its rollout. Everything else that can happen to the file (truncation,
//! an in-place rewrite, the path being replaced or removed) breaks the evidence chain, so it is
//! reported as a distinct, sticky [`TailError`], never papered over: the observer turns it
//! into a gap (OUT: `cursor_invalid` / `session_changed`) and the engine into `indeterminate`.
//!
//! Cost: each [`RolloutTail::read_page`] does one `stat` of the path, one `fstat`, one
//! [`CHECKPOINT_WINDOW_BYTES`] re-read to verify the checkpoint, and reads only bytes appended
//! since the last call (`pread` from the saved offset). The file is never re-read from the start.
//!
//! Checkpoint: the window `[offset - min(offset, W), offset)` with `W = CHECKPOINT_WINDOW_BYTES`,
//! i.e. the tail of what we consumed (the last complete line, and earlier ones when it is
//! short). A window rather than "the whole last line" keeps the verification cost bounded after
//! a multi-MiB line (Codex writes images inline). While the tail is open it keeps those bytes
//! and compares the re-read window with them; only the saved form ([`TailCursor`], for a
//! restart) carries their sha256, computed when a cursor is asked for, and [`RolloutTail::resume`]
//! checks the window against it once.

use crate::rollout::{parse_line, PromptDeduper, RecordError, RolloutRecord};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// Records per page when the caller has no better idea.
pub const DEFAULT_MAX_RECORDS_PER_PAGE: usize = 256;
/// Bytes consumed per page when the caller has no better idea.
pub const DEFAULT_MAX_BYTES_PER_PAGE: usize = 1024 * 1024;
/// Hard ceiling on a page's record budget (bounds the returned Vec).
pub const MAX_RECORDS_PER_PAGE: usize = 4096;
/// Hard ceiling on a page's byte budget.
pub const MAX_BYTES_PER_PAGE: usize = 64 * 1024 * 1024;
/// Lines longer than this are hashed and skipped (record = `LineTooLong`), never buffered.
pub const MAX_PARSED_LINE_BYTES: usize = 16 * 1024 * 1024;
/// Size of one `pread`.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;
/// Bytes before the offset covered by the checkpoint hash.
pub const CHECKPOINT_WINDOW_BYTES: usize = 8 * 1024;

/// The (device, inode) pair naming one file independently of its path.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileIdentity {
    pub dev: u64,
    pub ino: u64,
}

/// Saved position in one rollout file: restorable with [`RolloutTail::resume`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TailCursor {
    pub dev: u64,
    pub ino: u64,
    /// Byte offset just past the last consumed line.
    pub offset: u64,
    /// sha256 of the checkpoint window ending at `offset`.
    pub checkpoint_hash: [u8; 32],
    /// The file has shown `item_completed` messages (see [`PromptDeduper`]).
    #[serde(default)]
    pub item_dialect: bool,
}

/// One complete line of the rollout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TailEntry {
    /// Byte offset of the line's first byte.
    pub offset: u64,
    /// Byte offset just past the line's newline (= the next line's offset).
    pub end: u64,
    /// sha256 of the line without its terminating newline, when the tail was asked for line
    /// hashes ([`RolloutTail::with_line_hashes`]: the output page's event ids, OUT-2).
    pub content_hash: Option<[u8; 32]>,
    pub record: Result<RolloutRecord, RecordError>,
}

/// What one [`RolloutTail::read_page`] returned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    pub entries: Vec<TailEntry>,
    /// Where the next page starts (= last entry's `end`, or the unchanged offset).
    pub next_offset: u64,
    /// A budget, or an unreadable line (alone on its page), stopped this page while unread
    /// bytes remained: read again now.
    pub has_more: bool,
}

/// Why the tail cannot (or can no longer) continue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TailError {
    /// An I/O call failed; transient, the same call may succeed later.
    Io { op: &'static str, kind: io::ErrorKind, message: String },
    /// The file is now shorter than what we already consumed.
    Truncated { file_len: u64, offset: u64 },
    /// The bytes before our offset are no longer the ones we consumed.
    Rewritten { offset: u64 },
    /// The path now names another file.
    Replaced { expected: FileIdentity, found: FileIdentity },
    /// The path no longer exists.
    Removed,
    /// A budget of zero or above the hard ceiling.
    InvalidBudget { max_records: usize, max_bytes: usize },
}

impl TailError {
    /// Truncation, rewrite, replacement and removal invalidate the tail for good.
    pub fn is_terminal(&self) -> bool {
        match self {
            TailError::Truncated { .. }
            | TailError::Rewritten { .. }
            | TailError::Replaced { .. }
            | TailError::Removed => true,
            TailError::Io { .. } | TailError::InvalidBudget { .. } => false,
        }
    }

    fn io(op: &'static str, error: &io::Error) -> Self {
        TailError::Io { op, kind: error.kind(), message: error.to_string() }
    }
}

impl fmt::Display for TailError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TailError::Io { op, message, .. } => write!(f, "rollout {op} failed: {message}"),
            TailError::Truncated { file_len, offset } => {
                write!(f, "rollout truncated to {file_len} bytes below offset {offset}")
            }
            TailError::Rewritten { offset } => write!(f, "rollout rewritten before offset {offset}"),
            TailError::Replaced { expected, found } => write!(
                f,
                "rollout replaced: {}:{} is now {}:{}",
                expected.dev, expected.ino, found.dev, found.ino
            ),
            TailError::Removed => write!(f, "rollout removed"),
            TailError::InvalidBudget { max_records, max_bytes } => {
                write!(f, "invalid page budget: {max_records} records, {max_bytes} bytes")
            }
        }
    }
}

impl std::error::Error for TailError {}

/// Incremental reader of one rollout file; see the module documentation.
#[derive(Debug)]
pub struct RolloutTail {
    path: PathBuf,
    file: File,
    identity: FileIdentity,
    /// Just past the last consumed line; always at a line boundary.
    offset: u64,
    /// Ends with the file's last `min(offset, CHECKPOINT_WINDOW_BYTES)` bytes before `offset`
    /// (may hold up to 2 windows before trimming): what `verify` compares the file with.
    window: Vec<u8>,
    deduper: PromptDeduper,
    /// Hash every line read (only the output page needs them; the observer does not).
    line_hashes: bool,
    /// Set by the first terminal error and returned by every later call.
    failure: Option<TailError>,
    /// Bytes returned by every `pread` since open: lets tests and metrics prove read cost.
    bytes_read: u64,
    /// OUT-6: the partial last line scanned so far (it starts at `offset`): the next read goes
    /// on from where this one stopped. It was scanned again from its start on every read, so
    /// 100 appends of 10 bytes to a 15 MB unfinished line cost 10 s of CPU (a review).
    partial: Option<Partial>,
}

/// A line whose newline has not been written yet, as far as it was scanned.
#[derive(Clone, Debug)]
struct Partial {
    /// Where the line starts (the tail's offset when it was scanned).
    offset: u64,
    /// Where its scan stopped (the file's end then).
    scanned_to: u64,
    /// Its bytes so far (None past `MAX_PARSED_LINE_BYTES`), and their hash when hashing.
    bytes: Option<Vec<u8>>,
    hasher: Option<Sha256>,
}

impl RolloutTail {
    /// Opens `path` at offset 0, remembering which file (dev, inode) it is.
    pub fn open(path: &Path) -> Result<RolloutTail, TailError> {
        let file = crate::paths::open_regular_file(path).map_err(|e| TailError::io("open", &e))?;
        let meta = file.metadata().map_err(|e| TailError::io("fstat", &e))?;
        Ok(RolloutTail {
            path: path.to_owned(),
            file,
            identity: FileIdentity { dev: meta.dev(), ino: meta.ino() },
            offset: 0,
            window: Vec::new(),
            deduper: PromptDeduper::default(),
            line_hashes: false,
            failure: None,
            bytes_read: 0,
            partial: None,
        })
    }

    /// Reopens `path` at a saved cursor, verifying identity, length and checkpoint.
    pub fn resume(path: &Path, cursor: &TailCursor) -> Result<RolloutTail, TailError> {
        let mut tail = RolloutTail::open(path)?;
        let expected = FileIdentity { dev: cursor.dev, ino: cursor.ino };
        if tail.identity != expected {
            return Err(TailError::Replaced { expected, found: tail.identity });
        }
        tail.offset = cursor.offset;
        tail.deduper = PromptDeduper::new(cursor.item_dialect);
        // Of the bytes before the offset only the saved hash is known: check them against it
        // once; from then on the tail holds them and `verify` compares bytes.
        tail.check_path()?;
        let (_, window) = tail.window_now()?;
        if window_hash(&window, tail.offset) != cursor.checkpoint_hash {
            return Err(TailError::Rewritten { offset: tail.offset });
        }
        tail.window = window;
        Ok(tail)
    }

    /// Opens `path` at `offset`, which must be a line boundary of the file named by `identity`
    /// (OBS-2: a request's armed cursor before the checkpoint). The window before `offset` is
    /// trusted as it is now; the caller has verified the file by a later checkpoint.
    pub fn open_at(path: &Path, identity: FileIdentity, offset: u64, item_dialect: bool) -> Result<RolloutTail, TailError> {
        let mut tail = RolloutTail::open(path)?;
        if tail.identity != identity {
            return Err(TailError::Replaced { expected: identity, found: tail.identity });
        }
        let file_len = tail.file.metadata().map_err(|e| TailError::io("fstat", &e))?.len();
        if file_len < offset {
            return Err(TailError::Truncated { file_len, offset });
        }
        let window = tail.read_window(offset)?;
        if offset > 0 && window.last() != Some(&b'\n') {
            // Not just after a complete line: not a position this file ever reported.
            return Err(TailError::Rewritten { offset });
        }
        tail.offset = offset;
        tail.window = window;
        tail.deduper = PromptDeduper::new(item_dialect);
        Ok(tail)
    }

    /// Every entry read from now on carries its line's sha256 (`TailEntry::content_hash`).
    pub fn with_line_hashes(mut self) -> RolloutTail {
        self.line_hashes = true;
        self
    }

    /// The saved form of the current position (hashes the checkpoint window: ask when saving).
    pub fn cursor(&self) -> TailCursor {
        TailCursor {
            dev: self.identity.dev,
            ino: self.identity.ino,
            offset: self.offset,
            checkpoint_hash: window_hash(&self.window, self.offset),
            item_dialect: self.deduper.item_dialect(),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn identity(&self) -> FileIdentity {
        self.identity
    }

    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The held file's length now (fstat of the descriptor the reads use). None after a
    /// terminal failure, when the path names another file by now (replaced: the next read
    /// reads the new one from its start, where this length means nothing), when either stat
    /// fails, or when the file is shorter than what was read (truncated: its offsets no
    /// longer mean what they did). An error is never evidence.
    pub fn length_now(&self) -> Option<u64> {
        if self.failure.is_some() {
            return None;
        }
        let at_path = std::fs::metadata(&self.path).ok()?;
        if (FileIdentity { dev: at_path.dev(), ino: at_path.ino() }) != self.identity {
            return None;
        }
        let len = self.file.metadata().ok()?.len();
        (len >= self.offset).then_some(len)
    }

    /// Total bytes returned by `pread` since open (checkpoint re-reads included).
    pub fn bytes_read(&self) -> u64 {
        self.bytes_read
    }

    /// Skips all history: positions just past the last complete line, for a baseline.
    pub fn seek_to_end_baseline(&mut self) -> Result<u64, TailError> {
        let file_len = self.verify()?;
        let boundary = self.last_line_boundary(file_len)?;
        assert!(boundary >= self.offset && boundary <= file_len);
        self.offset = boundary;
        self.window = self.read_window(boundary)?;
        Ok(boundary)
    }

    /// Reads the complete lines appended since the last call, within the budgets.
    ///
    /// The first line of a page is always returned whole even if it exceeds `max_bytes`, so a
    /// long line cannot stall the tail. A line over [`MAX_PARSED_LINE_BYTES`] (its record is
    /// `LineTooLong`) is always alone on its page, so a caller can stop exactly before it or
    /// exactly after it (CORR-12, OUT-9).
    pub fn read_page(&mut self, max_records: usize, max_bytes: usize) -> Result<Page, TailError> {
        if max_records == 0 || max_records > MAX_RECORDS_PER_PAGE || max_bytes == 0 || max_bytes > MAX_BYTES_PER_PAGE {
            return Err(TailError::InvalidBudget { max_records, max_bytes });
        }
        let file_len = self.verify()?;
        let start = self.offset;
        let mut reader = LineReader::new(start, file_len, self.partial.take());
        let mut entries = Vec::new();
        let mut budget_hit = false;
        loop {
            let consumed = self.offset - start;
            if entries.len() >= max_records || consumed >= max_bytes as u64 {
                budget_hit = true;
                break;
            }
            // Past the first entry, stop before a line that would overshoot the byte budget.
            let line_budget = if entries.is_empty() { u64::MAX } else { max_bytes as u64 - consumed };
            match reader.next_line(&self.file, line_budget, self.line_hashes, &mut self.bytes_read)? {
                // An unreadable line is alone on its page: the next page starts with it.
                NextLine::Line(line) if line.bytes.is_none() && !entries.is_empty() => {
                    budget_hit = true;
                    break;
                }
                NextLine::Line(line) if line.bytes.is_none() => {
                    entries.push(self.consume(line));
                    budget_hit = true;
                    break;
                }
                NextLine::Line(line) => entries.push(self.consume(line)),
                NextLine::OverBudget => {
                    budget_hit = true;
                    break;
                }
                NextLine::Eof => break,
            }
        }
        self.finish_page(reader.window_stale)?;
        self.partial = reader.partial.take().filter(|p| p.offset == self.offset);
        assert!(entries.len() <= max_records);
        assert!(entries.last().is_none_or(|e| e.end == self.offset));
        Ok(Page { entries, next_offset: self.offset, has_more: budget_hit && self.offset < file_len })
    }

    /// Turns one complete line into an entry and advances the offset past it.
    fn consume(&mut self, line: RawLine) -> TailEntry {
        assert_eq!(line.offset, self.offset, "lines are consumed in order");
        let record = match &line.bytes {
            Some(bytes) => parse_line(bytes).map(|r| self.deduper.filter(r)),
            None => Err(RecordError::LineTooLong { len_bytes: line.end - line.offset - 1 }),
        };
        if let Some(bytes) = &line.bytes {
            self.window.extend_from_slice(bytes);
            self.window.push(b'\n');
            trim_window(&mut self.window);
        }
        self.offset = line.end;
        TailEntry { offset: line.offset, end: line.end, content_hash: line.hash, record }
    }

    /// After a long line (not kept in memory), re-reads the checkpoint window it ends.
    fn finish_page(&mut self, window_stale: bool) -> Result<(), TailError> {
        if window_stale {
            self.window = self.read_window(self.offset)?;
        }
        Ok(())
    }

    /// Checks that the path still names our file and that our consumed prefix is intact;
    /// returns the current file length. Terminal failures are remembered.
    fn verify(&mut self) -> Result<u64, TailError> {
        if let Some(failure) = &self.failure {
            return Err(failure.clone());
        }
        let result = self.verify_fresh();
        if let Err(error) = &result {
            if error.is_terminal() {
                self.failure = Some(error.clone());
            }
        }
        result
    }

    fn verify_fresh(&mut self) -> Result<u64, TailError> {
        self.check_path()?;
        let (file_len, window) = self.window_now()?;
        if !self.window_unchanged(&window) {
            return Err(TailError::Rewritten { offset: self.offset });
        }
        self.window = window;
        Ok(file_len)
    }

    /// The path still names the file we hold.
    fn check_path(&self) -> Result<(), TailError> {
        match std::fs::metadata(&self.path) {
            Ok(meta) => {
                let found = FileIdentity { dev: meta.dev(), ino: meta.ino() };
                if found != self.identity {
                    return Err(TailError::Replaced { expected: self.identity, found });
                }
                Ok(())
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(TailError::Removed),
            Err(e) => Err(TailError::io("stat", &e)),
        }
    }

    /// The file's length and, if it still reaches our offset, the checkpoint window as it is now.
    fn window_now(&mut self) -> Result<(u64, Vec<u8>), TailError> {
        let file_len = self.file.metadata().map_err(|e| TailError::io("fstat", &e))?.len();
        if file_len < self.offset {
            return Err(TailError::Truncated { file_len, offset: self.offset });
        }
        Ok((file_len, self.read_window(self.offset)?))
    }

    /// `window` (re-read from the file) equals the consumed bytes it should hold. A short
    /// read, now or when the kept window was read (the file shrank meanwhile), differs.
    fn window_unchanged(&self, window: &[u8]) -> bool {
        let want = self.offset.min(CHECKPOINT_WINDOW_BYTES as u64) as usize;
        window.len() == want && self.window.len() >= want && window == &self.window[self.window.len() - want..]
    }

    /// The checkpoint window ending at `end` as it is in the file now.
    fn read_window(&mut self, end: u64) -> Result<Vec<u8>, TailError> {
        let len = end.min(CHECKPOINT_WINDOW_BYTES as u64) as usize;
        let mut window = vec![0u8; len];
        let n = read_full_at(&self.file, &mut window, end - len as u64, &mut self.bytes_read)?;
        // A short read means the file shrank below `end` since fstat: a different window.
        window.truncate(n);
        Ok(window)
    }

    /// Offset just past the last newline in the file (0 if none), scanning backwards from
    /// the end; costs the length of the trailing partial line, not the file.
    fn last_line_boundary(&mut self, file_len: u64) -> Result<u64, TailError> {
        let mut chunk = vec![0u8; READ_CHUNK_BYTES];
        let mut end = file_len;
        while end > self.offset {
            let len = (end - self.offset).min(READ_CHUNK_BYTES as u64) as usize;
            let n = read_full_at(&self.file, &mut chunk[..len], end - len as u64, &mut self.bytes_read)?;
            if n < len {
                return Err(TailError::Truncated { file_len: end - len as u64 + n as u64, offset: self.offset });
            }
            if let Some(i) = chunk[..len].iter().rposition(|&b| b == b'\n') {
                return Ok(end - len as u64 + i as u64 + 1);
            }
            end -= len as u64;
        }
        Ok(self.offset)
    }
}

/// sha256 of the last `min(offset, window)` bytes of `window` (which ends at `offset`).
fn window_hash(window: &[u8], offset: u64) -> [u8; 32] {
    let want = offset.min(CHECKPOINT_WINDOW_BYTES as u64) as usize;
    // A window shorter than wanted (file shrank mid-read) hashes differently: caught as Rewritten.
    let from = window.len().saturating_sub(want);
    Sha256::digest(&window[from..]).into()
}

/// Keeps the window bounded: trims to one window once it holds two.
fn trim_window(window: &mut Vec<u8>) {
    if window.len() > 2 * CHECKPOINT_WINDOW_BYTES {
        window.drain(..window.len() - CHECKPOINT_WINDOW_BYTES);
    }
    assert!(window.len() <= 2 * CHECKPOINT_WINDOW_BYTES);
}

/// `pread` until `buf` is full or end of file; counts the bytes read.
fn read_full_at(file: &File, buf: &mut [u8], offset: u64, counter: &mut u64) -> Result<usize, TailError> {
    let mut filled = 0;
    while filled < buf.len() {
        match read_once_at(file, &mut buf[filled..], offset + filled as u64, counter)? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

/// One `pread` (retried only when interrupted); counts the bytes read.
fn read_once_at(file: &File, buf: &mut [u8], offset: u64, counter: &mut u64) -> Result<usize, TailError> {
    loop {
        match file.read_at(buf, offset) {
            Ok(n) => {
                *counter += n as u64;
                return Ok(n);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(TailError::io("read", &e)),
        }
    }
}

/// A complete line as read: `bytes` is None when it was longer than [`MAX_PARSED_LINE_BYTES`].
struct RawLine {
    offset: u64,
    end: u64,
    hash: Option<[u8; 32]>,
    bytes: Option<Vec<u8>>,
}

enum NextLine {
    Line(RawLine),
    /// The next line would exceed the remaining byte budget (it stays unread).
    OverBudget,
    /// No complete line remains (a partial last line stays for next time).
    Eof,
}

/// Splits the bytes after an offset into lines, one `pread` chunk at a time, to where the file
/// ends when it is read (lines appended while a page is read are taken in the same page).
struct LineReader {
    chunk: Vec<u8>,
    /// File offset of `chunk[0]`.
    chunk_offset: u64,
    /// The file's length as `verify` saw it: a `pread` short of it is not the end.
    seen_len: u64,
    /// A `pread` came back short at or past `seen_len`: the end of the file when it was read.
    at_end: bool,
    /// Index in `chunk` of the next unscanned byte.
    pos: usize,
    /// A line too long to buffer was consumed, so the window must be re-read.
    window_stale: bool,
    /// In: the partial line a previous read left at `chunk_offset`'s line start. Out: the one
    /// this read ended in (None when it ended on a newline, or stopped before the end).
    partial: Option<Partial>,
}

impl LineReader {
    /// A reader from `offset`; a `partial` line left there by the previous read (and still
    /// within the file: a truncation below its scan makes it start over) is resumed where its
    /// scan stopped.
    fn new(offset: u64, seen_len: u64, partial: Option<Partial>) -> Self {
        let partial = partial.filter(|p| p.offset == offset && p.scanned_to <= seen_len);
        let chunk_offset = partial.as_ref().map_or(offset, |p| p.scanned_to);
        LineReader { chunk: Vec::new(), chunk_offset, seen_len, at_end: false, pos: 0, window_stale: false, partial }
    }

    fn next_line(&mut self, file: &File, line_budget: u64, hash: bool, counter: &mut u64) -> Result<NextLine, TailError> {
        let (line_offset, mut hasher, mut bytes, mut len) = match self.partial.take() {
            Some(p) => (p.offset, p.hasher.filter(|_| hash), p.bytes, p.scanned_to - p.offset),
            None => (self.chunk_offset + self.pos as u64, hash.then(Sha256::new), Some(Vec::new()), 0),
        };
        loop {
            if self.pos == self.chunk.len() && !self.refill(file, counter)? {
                // OUT-6: kept, so the next read scans only what is appended to it.
                if len > 0 {
                    self.partial = Some(Partial { offset: line_offset, scanned_to: line_offset + len, bytes, hasher });
                }
                return Ok(NextLine::Eof);
            }
            let rest = &self.chunk[self.pos..];
            let newline = memchr::memchr(b'\n', rest);
            let piece = &rest[..newline.unwrap_or(rest.len())];
            len += piece.len() as u64;
            if len + 1 > line_budget {
                return Ok(NextLine::OverBudget);
            }
            if let Some(hasher) = hasher.as_mut() {
                hasher.update(piece);
            }
            bytes = append_bounded(bytes, piece);
            self.pos += piece.len();
            if newline.is_some() {
                self.pos += 1;
                if bytes.is_none() {
                    self.window_stale = true;
                }
                let end = line_offset + len + 1;
                return Ok(NextLine::Line(RawLine { offset: line_offset, end, hash: hasher.map(|h| h.finalize().into()), bytes }));
            }
        }
    }

    /// Reads the next chunk; false at the end of the file. One `pread` per chunk: a short one
    /// (the file's end at that moment) ends this read without asking again for nothing; what is
    /// appended after it is read by the next call (the append's own wake asks for it).
    fn refill(&mut self, file: &File, counter: &mut u64) -> Result<bool, TailError> {
        assert_eq!(self.pos, self.chunk.len());
        self.chunk_offset += self.chunk.len() as u64;
        self.chunk.clear();
        self.pos = 0;
        if self.at_end {
            return Ok(false);
        }
        self.chunk.resize(READ_CHUNK_BYTES, 0);
        let n = read_once_at(file, &mut self.chunk, self.chunk_offset, counter)?;
        self.chunk.truncate(n);
        self.at_end = n == 0 || (n < READ_CHUNK_BYTES && self.chunk_offset + n as u64 >= self.seen_len);
        Ok(n > 0)
    }
}

/// Appends `piece` while the line stays under [`MAX_PARSED_LINE_BYTES`]; drops it beyond.
fn append_bounded(bytes: Option<Vec<u8>>, piece: &[u8]) -> Option<Vec<u8>> {
    let mut bytes = bytes?;
    if bytes.len() + piece.len() > MAX_PARSED_LINE_BYTES {
        return None;
    }
    bytes.extend_from_slice(piece);
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn started(turn: &str) -> String {
        format!(r#"{{"type":"event_msg","payload":{{"type":"task_started","turn_id":"{turn}"}}}}"#)
    }

    fn new_file() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("rollout-2026-11-30T10-00-00-s1.jsonl");
        File::create(&path).expect("create");
        (dir, path)
    }

    fn append(path: &Path, bytes: &str) {
        let mut file = std::fs::OpenOptions::new().append(true).open(path).expect("open for append");
        file.write_all(bytes.as_bytes()).expect("append");
    }

    fn turn_ids(page: &Page) -> Vec<String> {
        page.entries
            .iter()
            .map(|e| match &e.record {
                Ok(RolloutRecord::TurnStarted { turn_id }) => turn_id.clone(),
                other => format!("{other:?}"),
            })
            .collect()
    }

    fn read_default(tail: &mut RolloutTail) -> Result<Page, TailError> {
        tail.read_page(DEFAULT_MAX_RECORDS_PER_PAGE, DEFAULT_MAX_BYTES_PER_PAGE)
    }

    #[test]
    fn partial_lines_wait_until_complete() {
        let (_dir, path) = new_file();
        let mut tail = RolloutTail::open(&path).unwrap();
        let line = started("t1");
        let (head, rest) = line.split_at(10);
        append(&path, head);
        let page = read_default(&mut tail).unwrap();
        assert!(page.entries.is_empty());
        assert_eq!(page.next_offset, 0);
        append(&path, rest);
        assert!(read_default(&mut tail).unwrap().entries.is_empty(), "no newline yet");
        append(&path, &format!("\n{}\n{}", started("t2"), &started("t3")[..5]));
        let page = read_default(&mut tail).unwrap();
        assert_eq!(turn_ids(&page), ["t1", "t2"]);
        let first = &page.entries[0];
        assert_eq!((first.offset, first.end), (0, line.len() as u64 + 1));
        assert_eq!(first.content_hash, None, "lines are hashed only when asked");
        assert_eq!(page.entries[1].offset, first.end);
        assert_eq!(page.next_offset, page.entries[1].end);
        assert!(!page.has_more);
        append(&path, &format!("{}\n", &started("t3")[5..]));
        assert_eq!(turn_ids(&read_default(&mut tail).unwrap()), ["t3"]);
    }

    #[test]
    fn corrupt_line_in_the_middle_is_reported_and_reading_continues() {
        let (_dir, path) = new_file();
        append(&path, &format!("{}\n{{\"type\":\"event_msg\",\"pay\n\n{}\n", started("a"), started("b")));
        let mut tail = RolloutTail::open(&path).unwrap();
        let page = read_default(&mut tail).unwrap();
        assert_eq!(page.entries.len(), 4);
        assert!(matches!(page.entries[1].record, Err(RecordError::InvalidJson { .. })));
        assert_eq!(page.entries[2].record, Err(RecordError::EmptyLine));
        assert_eq!(page.entries[3].record, Ok(RolloutRecord::TurnStarted { turn_id: "b".into() }));
    }

    #[test]
    fn record_budget_sets_has_more_and_resumes_exactly() {
        let (_dir, path) = new_file();
        let all: String = (0..10).map(|i| started(&format!("t{i}")) + "\n").collect();
        append(&path, &all);
        let mut tail = RolloutTail::open(&path).unwrap();
        let mut seen = Vec::new();
        let mut pages = 0;
        loop {
            let page = tail.read_page(3, DEFAULT_MAX_BYTES_PER_PAGE).unwrap();
            assert!(page.entries.len() <= 3);
            seen.extend(turn_ids(&page));
            pages += 1;
            if !page.has_more {
                break;
            }
        }
        assert_eq!(pages, 4);
        assert_eq!(seen, (0..10).map(|i| format!("t{i}")).collect::<Vec<_>>());
    }

    #[test]
    fn byte_budget_stops_before_overshooting_but_always_progresses() {
        let (_dir, path) = new_file();
        let line_len = started("t0").len() + 1;
        append(&path, &(0..4).map(|i| started(&format!("t{i}")) + "\n").collect::<String>());
        let mut tail = RolloutTail::open(&path).unwrap();
        // Budget below one line: the first line still comes, alone.
        let page = tail.read_page(100, 1).unwrap();
        assert_eq!(turn_ids(&page), ["t0"]);
        assert!(page.has_more);
        // Budget of 2.5 lines: two whole lines, never a cut one.
        let page = tail.read_page(100, line_len * 5 / 2).unwrap();
        assert_eq!(turn_ids(&page), ["t1", "t2"]);
        assert!(page.has_more);
        let page = tail.read_page(100, line_len * 5 / 2).unwrap();
        assert_eq!(turn_ids(&page), ["t3"]);
        assert!(!page.has_more);
    }

    #[test]
    fn invalid_budgets_are_rejected() {
        let (_dir, path) = new_file();
        let mut tail = RolloutTail::open(&path).unwrap();
        for (records, bytes) in [(0, 10), (10, 0), (MAX_RECORDS_PER_PAGE + 1, 10), (10, MAX_BYTES_PER_PAGE + 1)] {
            assert_eq!(
                tail.read_page(records, bytes),
                Err(TailError::InvalidBudget { max_records: records, max_bytes: bytes })
            );
        }
    }

    #[test]
    fn truncation_is_detected_and_sticky() {
        let (_dir, path) = new_file();
        append(&path, &format!("{}\n{}\n", started("a"), started("b")));
        let mut tail = RolloutTail::open(&path).unwrap();
        let end = read_default(&mut tail).unwrap().next_offset;
        std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(10).unwrap();
        assert_eq!(read_default(&mut tail), Err(TailError::Truncated { file_len: 10, offset: end }));
        // Growing back past the offset does not heal it.
        append(&path, &"x".repeat(200));
        assert_eq!(read_default(&mut tail), Err(TailError::Truncated { file_len: 10, offset: end }));
    }

    #[test]
    fn truncate_and_regrow_is_a_rewrite() {
        let (_dir, path) = new_file();
        append(&path, &format!("{}\n", started("a")));
        let mut tail = RolloutTail::open(&path).unwrap();
        let end = read_default(&mut tail).unwrap().next_offset;
        std::fs::write(&path, format!("{}\n{}\n", started("X"), started("b"))).unwrap();
        assert_eq!(read_default(&mut tail), Err(TailError::Rewritten { offset: end }));
    }

    #[test]
    fn in_place_rewrite_of_the_consumed_tail_is_detected() {
        let (_dir, path) = new_file();
        append(&path, &format!("{}\n{}\n", started("aaaa"), started("bbbb")));
        let mut tail = RolloutTail::open(&path).unwrap();
        let end = read_default(&mut tail).unwrap().next_offset;
        // Same length, different byte inside the last consumed line.
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        file.write_all_at(b"c", end - 4).unwrap();
        append(&path, &format!("{}\n", started("new")));
        assert_eq!(read_default(&mut tail), Err(TailError::Rewritten { offset: end }));
        assert_eq!(read_default(&mut tail), Err(TailError::Rewritten { offset: end }), "sticky");
    }

    #[test]
    fn replacement_and_removal_are_detected() {
        let (dir, path) = new_file();
        append(&path, &format!("{}\n", started("a")));
        let mut tail = RolloutTail::open(&path).unwrap();
        read_default(&mut tail).unwrap();
        let other = dir.path().join("other.jsonl");
        std::fs::write(&other, format!("{}\n{}\n", started("a"), started("b"))).unwrap();
        std::fs::rename(&other, &path).unwrap();
        assert!(matches!(read_default(&mut tail), Err(TailError::Replaced { expected, found }) if expected != found));

        let (_dir2, path2) = new_file();
        let mut tail2 = RolloutTail::open(&path2).unwrap();
        std::fs::remove_file(&path2).unwrap();
        assert_eq!(read_default(&mut tail2), Err(TailError::Removed));
    }

    #[test]
    fn cursor_round_trips_and_resume_verifies_it() {
        let (_dir, path) = new_file();
        append(&path, &format!("{}\n{}\n", started("a"), started("b")));
        let mut tail = RolloutTail::open(&path).unwrap();
        read_default(&mut tail).unwrap();
        let cursor = tail.cursor();
        let json = serde_json::to_string(&cursor).unwrap();
        let restored: TailCursor = serde_json::from_str(&json).unwrap();
        assert_eq!(restored, cursor);
        append(&path, &format!("{}\n", started("c")));
        let mut resumed = RolloutTail::resume(&path, &restored).unwrap();
        assert_eq!(turn_ids(&read_default(&mut resumed).unwrap()), ["c"]);

        let forged = TailCursor { checkpoint_hash: [7; 32], ..restored.clone() };
        assert_eq!(RolloutTail::resume(&path, &forged).unwrap_err(), TailError::Rewritten { offset: cursor.offset });
        let beyond = TailCursor { offset: 1 << 40, ..restored.clone() };
        assert!(matches!(RolloutTail::resume(&path, &beyond), Err(TailError::Truncated { .. })));
        let elsewhere = TailCursor { ino: restored.ino + 1, ..restored };
        assert!(matches!(RolloutTail::resume(&path, &elsewhere), Err(TailError::Replaced { .. })));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        // The tail compares the re-read checkpoint window with the bytes it kept, and hashes
        // them only for a cursor: after any pages, with lines short and longer than the
        // window, the cursor's hash is the file's window, and a one-byte rewrite anywhere in
        // the window (same length) is `Rewritten`.
        #[test]
        fn the_kept_window_is_the_files_and_any_rewrite_in_it_is_seen(
            lines in proptest::collection::vec(0usize..3 * CHECKPOINT_WINDOW_BYTES, 1..12),
            max_records in 1usize..4,
            flip in 0usize..CHECKPOINT_WINDOW_BYTES,
        ) {
            let (_dir, path) = new_file();
            let mut tail = RolloutTail::open(&path).unwrap();
            for (i, len) in lines.iter().enumerate() {
                append(&path, &format!("{}\n", started(&format!("{i}-{}", "x".repeat(*len)))));
                while read_page_with(&mut tail, max_records).unwrap().has_more {}
                let bytes = std::fs::read(&path).unwrap();
                let offset = tail.offset() as usize;
                let window = &bytes[offset - offset.min(CHECKPOINT_WINDOW_BYTES)..offset];
                proptest::prop_assert_eq!(tail.cursor().checkpoint_hash, <[u8; 32]>::from(Sha256::digest(window)));
            }
            let end = tail.offset();
            let at = end - 1 - (flip as u64 % end.min(CHECKPOINT_WINDOW_BYTES as u64));
            let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
            let mut byte = [0u8; 1];
            file.read_exact_at(&mut byte, at).unwrap();
            file.write_all_at(&[byte[0] ^ 0x20], at).unwrap();
            proptest::prop_assert_eq!(read_default(&mut tail), Err(TailError::Rewritten { offset: end }));
        }

        // OUT-6: a file written in pieces cut anywhere (mid-line, mid-UTF-8), read between the
        // pieces with a resumed partial line, gives the entries one read of the whole file
        // gives: the same spans, hashes and records.
        #[test]
        fn reading_between_arbitrary_pieces_gives_what_one_read_gives(
            lines in proptest::collection::vec(0usize..2 * READ_CHUNK_BYTES, 1..8),
            cuts in proptest::collection::vec(1usize..4 * READ_CHUNK_BYTES, 1..40),
        ) {
            let body: String = lines.iter().enumerate().map(|(i, len)| started(&format!("{i}-{}", "é".repeat(*len / 2))) + "\n").collect();
            let (_dir, path) = new_file();
            let mut pieces = RolloutTail::open(&path).unwrap().with_line_hashes();
            let mut seen = Vec::new();
            let (mut at, mut cut) = (0usize, cuts.iter().cycle());
            while at < body.len() {
                let next = (at + cut.next().unwrap()).min(body.len());
                std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(&body.as_bytes()[at..next]).unwrap();
                at = next;
                loop {
                    let page = read_default(&mut pieces).unwrap();
                    seen.extend(page.entries.into_iter().map(|e| (e.offset, e.end, e.content_hash, e.record.is_ok())));
                    if !page.has_more {
                        break;
                    }
                }
            }
            let mut whole = RolloutTail::open(&path).unwrap().with_line_hashes();
            let mut expected = Vec::new();
            loop {
                let page = read_default(&mut whole).unwrap();
                expected.extend(page.entries.into_iter().map(|e| (e.offset, e.end, e.content_hash, e.record.is_ok())));
                if !page.has_more {
                    break;
                }
            }
            proptest::prop_assert_eq!(seen, expected);
        }
    }

    fn read_page_with(tail: &mut RolloutTail, max_records: usize) -> Result<Page, TailError> {
        tail.read_page(max_records, DEFAULT_MAX_BYTES_PER_PAGE)
    }

    // OBS-2: a tail opened at a request's armed cursor reads from there, and only at a line
    // boundary of the same file.
    #[test]
    fn obs_2_open_at_starts_on_a_line_boundary_of_the_same_file() {
        let (_dir, path) = new_file();
        let first = format!("{}\n", started("a"));
        append(&path, &format!("{first}{}\n", started("b")));
        let identity = RolloutTail::open(&path).unwrap().identity();
        let mut tail = RolloutTail::open_at(&path, identity, first.len() as u64, false).unwrap();
        assert_eq!(turn_ids(&read_default(&mut tail).unwrap()), ["b"]);
        // The window at open, its re-check by the page, and the new line: never the file again.
        assert_eq!(tail.bytes_read() as usize, 2 * first.len() + started("b").len() + 1, "reads the window and what follows, not more");
        assert_eq!(RolloutTail::open_at(&path, identity, 3, false).unwrap_err(), TailError::Rewritten { offset: 3 });
        assert!(matches!(RolloutTail::open_at(&path, identity, 1 << 30, false), Err(TailError::Truncated { .. })));
        let other = FileIdentity { ino: identity.ino + 1, ..identity };
        assert!(matches!(RolloutTail::open_at(&path, other, 0, false), Err(TailError::Replaced { .. })));
    }

    #[test]
    fn baseline_skips_history_and_stops_at_the_last_complete_line() {
        let (_dir, path) = new_file();
        let history = format!("{}\n{}\n", started("old1"), started("old2"));
        append(&path, &format!("{history}{}", &started("new")[..7]));
        let mut tail = RolloutTail::open(&path).unwrap();
        assert_eq!(tail.seek_to_end_baseline().unwrap(), history.len() as u64);
        assert!(read_default(&mut tail).unwrap().entries.is_empty());
        append(&path, &format!("{}\n", &started("new")[7..]));
        assert_eq!(turn_ids(&read_default(&mut tail).unwrap()), ["new"]);
        // The baseline checkpoint protects history too.
        let resumed = RolloutTail::resume(&path, &tail.cursor());
        assert!(resumed.is_ok());
    }

    #[test]
    fn appending_one_line_to_a_large_file_reads_only_that_line() {
        let (_dir, path) = new_file();
        let body: String = (0..20_000).map(|i| started(&format!("turn-{i:08}")) + "\n").collect();
        append(&path, &body);
        let mut tail = RolloutTail::open(&path).unwrap();
        let mut total = 0;
        loop {
            let page = tail.read_page(MAX_RECORDS_PER_PAGE, DEFAULT_MAX_BYTES_PER_PAGE).unwrap();
            total += page.entries.len();
            if !page.has_more {
                break;
            }
        }
        assert_eq!(total, 20_000);
        assert!(body.len() > 20 * CHECKPOINT_WINDOW_BYTES, "file must dwarf the window");
        let line = started("the-new-one") + "\n";
        append(&path, &line);
        let before = tail.bytes_read();
        let page = read_default(&mut tail).unwrap();
        let cost = tail.bytes_read() - before;
        assert_eq!(turn_ids(&page), ["the-new-one"]);
        // Checkpoint re-read plus the new line; nothing proportional to the file.
        assert_eq!(cost, (CHECKPOINT_WINDOW_BYTES + line.len()) as u64);
        // Nothing new: only the checkpoint is re-read.
        let before = tail.bytes_read();
        assert!(read_default(&mut tail).unwrap().entries.is_empty());
        assert_eq!(tail.bytes_read() - before, CHECKPOINT_WINDOW_BYTES as u64);
    }

    /// OUT-6: appending to an unfinished last line costs what was appended, not the line: a
    /// 15 MB line written in 10-byte pieces was scanned whole at every read (10 s of CPU for
    /// 1,000 bytes, a review). With line hashes too (the output page's), whose hash must be the
    /// whole line's; and a truncation below the scan starts the line over.
    #[test]
    fn out_6_appending_to_a_partial_line_reads_only_the_appended_bytes() {
        for hashes in [false, true] {
            let (_dir, path) = new_file();
            let mut tail = RolloutTail::open(&path).unwrap();
            if hashes {
                tail = tail.with_line_hashes();
            }
            let head = format!(r#"{{"type":"response_item","payload":{{"type":"message","role":"assistant","content":[{{"type":"output_text","text":"{}"#, "A".repeat(2 << 20));
            append(&path, &head);
            assert!(read_default(&mut tail).unwrap().entries.is_empty());
            let mut line = head.clone();
            for _ in 0..20 {
                let before = tail.bytes_read();
                append(&path, "BBBBBBBBBB");
                line.push_str("BBBBBBBBBB");
                assert!(read_default(&mut tail).unwrap().entries.is_empty());
                let cost = tail.bytes_read() - before;
                assert!(cost <= (CHECKPOINT_WINDOW_BYTES + 10) as u64, "an append of 10 bytes read {cost}");
            }
            let end = "\"}]}}\n";
            append(&path, end);
            line.push_str(end);
            let page = read_default(&mut tail).unwrap();
            assert_eq!(page.entries.len(), 1);
            assert_eq!(page.entries[0].end, line.len() as u64);
            let expected: [u8; 32] = Sha256::digest(&line.as_bytes()[..line.len() - 1]).into();
            assert_eq!(page.entries[0].content_hash, hashes.then_some(expected));
            assert!(page.entries[0].record.is_ok(), "{:?}", page.entries[0].record);
        }
    }

    fn huge_line() -> String {
        format!(r#"{{"type":"response_item","payload":{{"blob":"{}"}}}}"#, "A".repeat(MAX_PARSED_LINE_BYTES))
    }

    /// CORR-12, OUT-9: an over-long line is hashed, reported as `LineTooLong` alone on its
    /// page (never buffered, never dropped silently), and reading continues after it.
    #[test]
    fn corr_12_overlong_line_is_hashed_reported_alone_on_its_page_and_does_not_stall() {
        let (_dir, path) = new_file();
        let huge = huge_line();
        append(&path, &format!("{}\n{huge}\n{}\n", started("before"), started("after")));
        let mut tail = RolloutTail::open(&path).unwrap().with_line_hashes();
        // Even a budget that would hold all three lines stops before the unreadable one ...
        let page = tail.read_page(10, MAX_BYTES_PER_PAGE).unwrap();
        assert_eq!(turn_ids(&page), ["before"]);
        assert!(page.has_more);
        let before_end = page.next_offset;
        // ... and after it.
        let page = tail.read_page(10, MAX_BYTES_PER_PAGE).unwrap();
        assert_eq!(page.entries.len(), 1);
        assert_eq!(page.entries[0].offset, before_end);
        assert_eq!(page.entries[0].record, Err(RecordError::LineTooLong { len_bytes: huge.len() as u64 }));
        assert_eq!(page.entries[0].content_hash, Some(<[u8; 32]>::from(Sha256::digest(huge.as_bytes()))));
        assert!(page.has_more);
        // The checkpoint after a skipped line is still valid for resume.
        assert!(RolloutTail::resume(&path, &tail.cursor()).is_ok());
        assert_eq!(turn_ids(&tail.read_page(10, MAX_BYTES_PER_PAGE).unwrap()), ["after"]);
    }

    #[test]
    fn legacy_duplicates_of_item_messages_are_demoted_across_resume() {
        let (_dir, path) = new_file();
        let item = r#"{"type":"event_msg","payload":{"type":"item_completed","turn_id":"t","item":{"type":"UserMessage","content":[{"type":"text","text":"p"}]}}}"#;
        let legacy = r#"{"type":"event_msg","payload":{"type":"user_message","message":"p"}}"#;
        append(&path, &format!("{item}\n"));
        let mut tail = RolloutTail::open(&path).unwrap();
        read_default(&mut tail).unwrap();
        append(&path, &format!("{legacy}\n"));
        let mut resumed = RolloutTail::resume(&path, &tail.cursor()).unwrap();
        let page = read_default(&mut resumed).unwrap();
        assert!(matches!(page.entries[0].record, Ok(RolloutRecord::Other { .. })));
    }
}
