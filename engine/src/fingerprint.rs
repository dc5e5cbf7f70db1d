//! IDEM-1: the idempotency fingerprint over exactly the caller's input.

use crate::ids::AgentId;
use crate::io::AdmitCommand;
use crate::prompt::{hex_sha256, PasteMode};
use crate::receipt::{Operation, ReturnMode};

/// Prefix of the current fingerprint version; a stored fingerprint without it is version 1.
pub const V2_PREFIX: &str = "v2:";

/// IDEM-1: `v2:` + hex SHA-256 over the resolved agent id, the prompt bytes (not the normal
/// form: a caller who changed white space changed the input), paste mode, return mode and
/// timeout (seed 000's key; the incarnation is checked beside it, IDEM-1). The target's
/// spelling, the exact-id flag and the operation are not input: an orchestrator that admitted
/// by name may retry by `--exact-agent-id`, or retry a `send --return-final` through `admit`.
/// Each field is length-prefixed so no two inputs share an encoding.
pub fn fingerprint(agent_id: &AgentId, command: &AdmitCommand) -> String {
    let agent = agent_id.to_string();
    let (paste, return_mode) = modes(command);
    let timeout = command.final_timeout_ms.to_string();
    format!("{V2_PREFIX}{}", digest(&[&agent, &command.prompt, paste, return_mode, &timeout]))
}

/// IDEM-1: does `command`, whose target resolves to `agent_id` (None: it resolves to no
/// agent), carry the input a stored fingerprint was made from? Version 1 fingerprints (records
/// written before version 2) are compared by their own rule.
pub fn same_input(stored: &str, agent_id: Option<&AgentId>, command: &AdmitCommand) -> bool {
    match stored.starts_with(V2_PREFIX) {
        true => agent_id.is_some_and(|agent_id| fingerprint(agent_id, command) == stored),
        false => fingerprint_v1(command) == stored,
    }
}

fn modes(command: &AdmitCommand) -> (&'static str, &'static str) {
    let paste = match command.paste_mode {
        PasteMode::Bracketed => "bracketed",
        PasteMode::Raw => "raw",
    };
    let return_mode = match command.return_mode {
        ReturnMode::OneWay => "one_way",
        ReturnMode::ReturnFinal => "return_final",
    };
    (paste, return_mode)
}

fn digest(fields: &[&str]) -> String {
    let mut encoded: Vec<u8> = Vec::with_capacity(fields.iter().map(|f| f.len() + 8).sum());
    for field in fields {
        encoded.extend_from_slice(&(field.len() as u64).to_be_bytes());
        encoded.extend_from_slice(field.as_bytes());
    }
    hex_sha256(&encoded)
}

/// IDEM-1, version 1 (records written before version 2): hex SHA-256 over operation, target
/// spelling, exact flag, incarnation as given, prompt bytes, paste mode, return mode, timeout.
pub fn fingerprint_v1(command: &AdmitCommand) -> String {
    let operation = match command.operation {
        Operation::Send => "send",
        Operation::Admit => "admit",
    };
    let (paste, return_mode) = modes(command);
    let exact = if command.exact_agent_id { "exact" } else { "name" };
    let incarnation = command.incarnation.as_deref().unwrap_or("");
    let timeout = command.final_timeout_ms.to_string();
    digest(&[operation, &command.target, exact, incarnation, &command.prompt, paste, return_mode, &timeout])
}
