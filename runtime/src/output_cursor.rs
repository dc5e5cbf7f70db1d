//! OUT-3: the `agent output` cursor codec. A cursor is `wko2.<base64url(nonce ||
//! XChaCha20-Poly1305(state))>`, sealed under a key derived from the 32-byte key created once
//! per data directory ([`CURSOR_KEY_FILE`], 0600): opaque in fact and unforgeable. Nothing in a
//! cursor is believed before it opens. Paging lives in `output_page`.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, Generate, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use crate::rollout_tail::TailCursor;

/// Longest cursor accepted; a longer one is `cursor_invalid` before any decoding.
pub const MAX_CURSOR_CHARS: usize = 2048;
/// The per-data-directory cursor key (32 random bytes, mode 0600).
pub const CURSOR_KEY_FILE: &str = "output-cursor.key";
pub const CURSOR_KEY_BYTES: usize = 32;
/// Version prefix of every cursor token.
pub(crate) const CURSOR_PREFIX: &str = "wko2.";
pub(crate) const CURSOR_VERSION: u8 = 2;
/// Prefixes of cursors earlier builds issued (`wko1.`: readable state under a MAC).
pub(crate) const RETIRED_CURSOR_PREFIXES: [&str; 1] = ["wko1."];
/// Domain separation: the sealing key is HMAC-SHA256(file key, label), and the label is the
/// associated data of every sealed cursor.
pub(crate) const CURSOR_SEAL_LABEL: &[u8] = b"wakterm-output-cursor-seal-v2\0";
/// XChaCha20-Poly1305: a 24-byte random nonce (no practical collision risk) and a 16-byte tag.
pub(crate) const CURSOR_NONCE_BYTES: usize = 24;
pub(crate) const CURSOR_TAG_BYTES: usize = 16;

/// The key of cursors issued under one data directory.
#[derive(Clone)]
pub struct CursorKey(pub(crate) [u8; CURSOR_KEY_BYTES]);

impl std::fmt::Debug for CursorKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorKey(..)")
    }
}

impl CursorKey {
    pub fn from_bytes(bytes: [u8; CURSOR_KEY_BYTES]) -> CursorKey {
        CursorKey(bytes)
    }

    /// The sealing cipher, under a key derived from the file key with [`CURSOR_SEAL_LABEL`].
    pub(crate) fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(&hmac_sha256(&self.0, CURSOR_SEAL_LABEL).into())
    }

    /// Reads `dir/output-cursor.key`, creating it once (32 bytes from the system RNG, getrandom(2), 0600).
    /// Creation writes a private temporary file and hard-links it into place, so two racing
    /// creators agree on one key and nobody ever reads a half-written one.
    pub fn load_or_create(dir: &Path) -> io::Result<CursorKey> {
        let path = dir.join(CURSOR_KEY_FILE);
        match read_key(&path) {
            Ok(key) => return Ok(key),
            Err(error) if error.kind() == io::ErrorKind::NotFound => {}
            Err(error) => return Err(error),
        }
        let mut bytes = [0u8; CURSOR_KEY_BYTES];
        getrandom::fill(&mut bytes).map_err(io::Error::from)?;
        let tmp = dir.join(format!("{CURSOR_KEY_FILE}.tmp-{}", uuid::Uuid::new_v4().simple()));
        let written = (|| {
            let mut file = OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
            file.write_all(&bytes)?;
            file.sync_all()?;
            std::fs::hard_link(&tmp, &path)
        })();
        let _ = std::fs::remove_file(&tmp);
        match written {
            Ok(()) => {}
            Err(error) if error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(error) => return Err(error),
        }
        if let Ok(dir) = File::open(dir) {
            let _ = dir.sync_all();
        }
        read_key(&path)
    }
}

/// SEC-1: a regular file of ours, no link, made 0600 again when found open to others (as the
/// log and the database are: a key left 0644 made every `agent output` fail until someone ran
/// chmod by hand, a hostile run found).
pub(crate) fn read_key(path: &Path) -> io::Result<CursorKey> {
    let mut file = crate::paths::open_private_file(path, OpenOptions::new().read(true))?;
    if file.metadata()?.len() != CURSOR_KEY_BYTES as u64 {
        return Err(io::Error::other(format!(
            "{} must be a {CURSOR_KEY_BYTES}-byte file of ours with mode 0600",
            path.display()
        )));
    }
    let mut bytes = [0u8; CURSOR_KEY_BYTES];
    file.read_exact(&mut bytes)?;
    Ok(CursorKey(bytes))
}

/// HMAC-SHA256 (RFC 2104, the RustCrypto `hmac` crate).
pub(crate) fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// What a cursor is scoped to and where it points (OUT-3). Internal: never part of the API.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CursorState {
    pub(crate) v: u8,
    pub(crate) agent: String,
    pub(crate) inc: String,
    pub(crate) sess: String,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) off: u64,
    pub(crate) ck: String,
    pub(crate) item: bool,
}

impl CursorState {
    pub(crate) fn tail_cursor(&self) -> Option<TailCursor> {
        Some(TailCursor {
            dev: self.dev,
            ino: self.ino,
            offset: self.off,
            checkpoint_hash: unhex32(&self.ck)?,
            item_dialect: self.item,
        })
    }
}

/// Why a cursor was refused (the `reason` of `cursor_invalid`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CursorProblem {
    Malformed,
    Forged,
    VersionUnsupported,
    OtherAgent,
    IncarnationChanged,
    Truncated,
    Rewritten,
}

impl CursorProblem {
    pub fn reason(self) -> &'static str {
        match self {
            CursorProblem::Malformed => "cursor_malformed",
            CursorProblem::Forged => "cursor_forged",
            CursorProblem::VersionUnsupported => "cursor_version_unsupported",
            CursorProblem::OtherAgent => "cursor_other_agent",
            CursorProblem::IncarnationChanged => "incarnation_changed",
            CursorProblem::Truncated => "provider_record_truncated",
            CursorProblem::Rewritten => "provider_record_rewritten",
        }
    }

    pub(crate) fn detail(self) -> &'static str {
        match self {
            CursorProblem::Malformed => "the cursor is not one this daemon issues",
            CursorProblem::Forged => "the cursor does not open under this data directory's key: it was altered or issued elsewhere",
            CursorProblem::VersionUnsupported => "the cursor has a version this build does not read",
            CursorProblem::OtherAgent => "the cursor belongs to another agent",
            CursorProblem::IncarnationChanged => "the agent's process changed since the cursor was issued",
            CursorProblem::Truncated => "the provider record was truncated below the cursor's checkpoint",
            CursorProblem::Rewritten => "the provider record was rewritten in place before the cursor's checkpoint",
        }
    }
}

/// OUT-3: `wko2.` + base64url(nonce || sealed state); a fresh random nonce per cursor.
pub(crate) fn encode_cursor(key: &CursorKey, state: &CursorState) -> String {
    let plaintext = serde_json::to_vec(state).expect("cursor state serialises");
    // The system RNG failing is not a condition Linux reports once booted; `generate` panics then.
    let nonce = XNonce::generate();
    let sealed = key
        .cipher()
        .encrypt(&nonce, Payload { msg: &plaintext, aad: CURSOR_SEAL_LABEL })
        .expect("a cursor state is far below the cipher's length limit");
    let blob = [nonce.as_slice(), &sealed].concat();
    assert_eq!(blob.len(), CURSOR_NONCE_BYTES + plaintext.len() + CURSOR_TAG_BYTES);
    let token = format!("{CURSOR_PREFIX}{}", URL_SAFE_NO_PAD.encode(blob));
    assert!(token.len() <= MAX_CURSOR_CHARS, "an issued cursor must be accepted back");
    token
}

/// OUT-3: only a well-formed token that opens under our key is decoded.
pub(crate) fn decode_cursor(key: &CursorKey, token: &str) -> Result<CursorState, CursorProblem> {
    if token.len() > MAX_CURSOR_CHARS {
        return Err(CursorProblem::Malformed);
    }
    if RETIRED_CURSOR_PREFIXES.iter().any(|prefix| token.starts_with(prefix)) {
        return Err(CursorProblem::VersionUnsupported);
    }
    let body = token.strip_prefix(CURSOR_PREFIX).ok_or(CursorProblem::Malformed)?;
    let blob = URL_SAFE_NO_PAD.decode(body).map_err(|_| CursorProblem::Malformed)?;
    if blob.len() < CURSOR_NONCE_BYTES + CURSOR_TAG_BYTES {
        return Err(CursorProblem::Malformed);
    }
    let (nonce, sealed) = blob.split_at(CURSOR_NONCE_BYTES);
    let nonce: [u8; CURSOR_NONCE_BYTES] = nonce.try_into().expect("split at the nonce length");
    let plaintext = key
        .cipher()
        .decrypt(&XNonce::from(nonce), Payload { msg: sealed, aad: CURSOR_SEAL_LABEL })
        .map_err(|_| CursorProblem::Forged)?;
    let state: CursorState = serde_json::from_slice(&plaintext).map_err(|_| CursorProblem::Malformed)?;
    if state.v != CURSOR_VERSION {
        return Err(CursorProblem::VersionUnsupported);
    }
    if state.tail_cursor().is_none() {
        return Err(CursorProblem::Malformed);
    }
    Ok(state)
}

