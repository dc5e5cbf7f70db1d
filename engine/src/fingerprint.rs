//! IDEM-1: the idempotency fingerprint over exactly the caller's input.

use crate::io::AdmitCommand;
use crate::prompt::{hex_sha256, PasteMode};
use crate::receipt::{Operation, ReturnMode};

/// IDEM-1: hex SHA-256 over operation, target spelling, exact flag, incarnation as given,
/// prompt bytes (not the normal form: a caller who changed white space changed the input),
/// paste mode, return mode and timeout. Each field is length-prefixed so no two inputs
/// share an encoding.
pub fn fingerprint(command: &AdmitCommand) -> String {
    let mut encoded: Vec<u8> = Vec::with_capacity(command.prompt.len() + 128);
    let operation = match command.operation {
        Operation::Send => "send",
        Operation::Admit => "admit",
    };
    let paste = match command.paste_mode {
        PasteMode::Bracketed => "bracketed",
        PasteMode::Raw => "raw",
    };
    let return_mode = match command.return_mode {
        ReturnMode::OneWay => "one_way",
        ReturnMode::ReturnFinal => "return_final",
    };
    let exact = if command.exact_agent_id { "exact" } else { "name" };
    let incarnation = command.incarnation.as_deref().unwrap_or("");
    let timeout = command.final_timeout_ms.to_string();
    for field in [operation, &command.target, exact, incarnation, &command.prompt, paste, return_mode, &timeout] {
        encoded.extend_from_slice(&(field.len() as u64).to_be_bytes());
        encoded.extend_from_slice(field.as_bytes());
    }
    hex_sha256(&encoded)
}
