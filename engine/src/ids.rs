//! Identifiers the engine validates at its boundary (INP-2, INP-4).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A caller-owned request id: a UUID in canonical lowercase hyphenated form (INP-2).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(String);

/// A stable agent id (a UUID assigned by the runtime when the agent is created).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(String);

/// The opaque process incarnation of an agent: changes whenever the process behind it changes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Incarnation(pub String);

/// A provider turn id, as Codex writes it (`turn_id`) or as the app-server reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TurnId(pub String);

/// An observer session: the Codex rollout session id, or the app-server thread id.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub String);

/// Why an identifier was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdError {
    NotUuid,
}

/// Parses a UUID in any case and returns it in canonical lowercase form, or `None`.
/// Hand-written because the engine must not depend on a random source (the `uuid` crate's
/// generator features); parsing is 20 lines.
pub fn canonical_uuid(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return None;
    }
    for (index, byte) in bytes.iter().enumerate() {
        let hyphen_slot = matches!(index, 8 | 13 | 18 | 23);
        let valid = if hyphen_slot { *byte == b'-' } else { byte.is_ascii_hexdigit() };
        if !valid {
            return None;
        }
    }
    Some(text.to_ascii_lowercase())
}

impl RequestId {
    pub fn parse(text: &str) -> Result<Self, IdError> {
        canonical_uuid(text).map(RequestId).ok_or(IdError::NotUuid)
    }
    /// INP-2: the nil UUID, all zeros (canonical ids are lowercase, so one comparison).
    pub fn is_nil(&self) -> bool {
        self.0 == "00000000-0000-0000-0000-000000000000"
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AgentId {
    pub fn parse(text: &str) -> Result<Self, IdError> {
        canonical_uuid(text).map(AgentId).ok_or(IdError::NotUuid)
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// INP-2: request ids are UUIDs, canonicalised to lowercase.
    #[test]
    fn inp_2_request_id_must_be_a_uuid() {
        let id = RequestId::parse("FE57DC90-994E-4E73-B09C-FAC483D9F05B").unwrap();
        assert_eq!(id.as_str(), "fe57dc90-994e-4e73-b09c-fac483d9f05b");
        for bad in ["", "fe57dc90", "fe57dc90-994e-4e73-b09c-fac483d9f05", "fe57dc90x994e-4e73-b09c-fac483d9f05b", "ge57dc90-994e-4e73-b09c-fac483d9f05b"] {
            assert_eq!(RequestId::parse(bad), Err(IdError::NotUuid), "{bad}");
        }
    }
}
