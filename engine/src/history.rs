//! HIST-*: bounded request history. The engine's memory holds open requests only; a finished
//! one (terminal and published, settled, or released) is dropped once nothing in flight refers
//! to it, and read back from the store when a caller names its id again.
//!
//! - HIST-1: a request leaves memory only when finished and durable: its last commit was
//!   acknowledged, its terminal event published, no cancel answer or retry waits on it, and no
//!   admission or lookup holds its id.
//! - HIST-2: an admission or cancel naming an id the engine does not hold asks the store first
//!   (`Output::LoadRequest`), parked until the answer; every later call naming the same id waits
//!   behind the same lookup, so two calls can never both miss a stored record and write twice.
//!   A caller's word that it generated the id just now (`generated_id`) skips nothing: a
//!   client that sent the flag with a reused id had its prompt written twice (HIST-5's filter
//!   is what lets a fresh id skip the lookup).
//! - HIST-5: once the runtime's seed of the stored ids is complete, an id neither seeded nor
//!   written by this engine (`StoredIds`, a Bloom filter) has no row: no lookup.
//! - HIST-3: a lookup that fails is `indeterminate` / `history_unreadable` (write state
//!   unknown, not retry-safe): the id may be one that was written and left memory, so nothing
//!   may be claimed about it (IDEM-7); replaying the same id later answers. A missing record is
//!   a new id.

use crate::engine::Engine;
use crate::ids::RequestId;
use crate::io::{AdmitCommand, CancelCommand, Output};
use crate::receipt::{Receipt, ReceiptContext};
use crate::request::{Phase, RequestRecord};

/// A call waiting for its id's store lookup (HIST-2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Parked {
    Admit(AdmitCommand),
    Cancel(CancelCommand),
}

impl Engine {
    /// HIST-2: true when the call was parked behind a store lookup of its id.
    pub(crate) fn park_unless_known(&mut self, request_id: &RequestId, call: Parked) -> bool {
        let known = self.admissions.contains_key(request_id) || self.requests.contains_key(request_id);
        if known {
            return false;
        }
        if let Some((_, parked)) = self.lookups.get_mut(request_id) {
            parked.push(call);
            return true;
        }
        // HIST-5: an id the complete seed never saw and this engine never wrote has no row.
        if self.stored_ids.is_seeded() && !self.stored_ids.may_contain(request_id) {
            return false;
        }
        let load_id = self.fresh_id();
        self.lookups.insert(request_id.clone(), (load_id, vec![call]));
        self.loads.insert(load_id, request_id.clone());
        self.push(Output::LoadRequest { load_id, request_id: request_id.clone() });
        true
    }

    /// HIST-2, HIST-3: the store's answer; the parked calls run in arrival order.
    pub(crate) fn on_request_loaded(&mut self, load_id: u64, loaded: Result<Option<RequestRecord>, String>) {
        let Some(request_id) = self.loads.remove(&load_id) else { return };
        let (_, parked) = self.lookups.remove(&request_id).expect("a load has its parked calls");
        match loaded {
            Err(error) => {
                for call in parked {
                    self.refuse_unlooked(&request_id, call, &error);
                }
                return;
            }
            Ok(Some(record)) => {
                assert_eq!(record.request_id, request_id, "HIST-2: the store answered for the id asked");
                assert!(is_finished(record.phase), "HIST-1: only finished requests leave memory");
                record.assert_consistent();
                // Memory is authoritative: an id admitted meanwhile is not overwritten.
                self.requests.entry(request_id.clone()).or_insert(record);
            }
            Ok(None) => {}
        }
        for call in parked {
            match call {
                Parked::Admit(command) => self.admit_known(command),
                Parked::Cancel(command) => self.cancel_known(command),
            }
        }
        self.evict_if_finished(&request_id);
    }

    /// HIST-5: the runtime's read of the ids in the store, chunk by chunk.
    pub(crate) fn on_history_seed(&mut self, ids: Vec<RequestId>, complete: bool) {
        for request_id in &ids {
            self.stored_ids.insert(request_id);
        }
        if complete {
            self.stored_ids.mark_seeded();
        }
    }

    fn refuse_unlooked(&mut self, request_id: &RequestId, call: Parked, error: &str) {
        match call {
            Parked::Admit(command) => {
                let context = ReceiptContext {
                    request_id: Some(request_id.clone()),
                    agent_id: None,
                    incarnation: None,
                    operation: command.operation,
                    return_mode: command.return_mode,
                };
                // IDEM-7: an id out of memory may be a written, finished one; this call wrote
                // nothing, but what the id already did is unknown.
                let detail = format!("the request history could not be read ({error}); this id may already have been written: replay the same id later to learn its outcome, never retry under a new id");
                let receipt = Receipt::outcome_unknown("history_unreadable", detail, context);
                self.reply(command.op, receipt);
            }
            Parked::Cancel(command) => {
                let outcome = crate::io::CancelOutcome::Failed { request_id: request_id.clone(), error: format!("the request history could not be read: {error}") };
                self.push(Output::CancelResult { op: command.op, outcome });
            }
        }
    }

    /// HIST-1: drops a finished request nothing refers to any more.
    pub(crate) fn evict_if_finished(&mut self, request_id: &RequestId) {
        let Some(record) = self.requests.get(request_id) else { return };
        let published = record.phase != Phase::Terminal || self.published_terminal(request_id).is_some();
        let idle = !self.admissions.contains_key(request_id)
            && !self.lookups.contains_key(request_id)
            && !self.terminal_retries.contains_key(request_id)
            && !self.progress_retries.contains_key(request_id)
            && !self.pending_cancel_answers.contains_key(request_id)
            && !self.persists.values().any(|purpose| purpose.request_id() == Some(request_id));
        if is_finished(record.phase) && published && idle {
            self.requests.remove(request_id);
            self.events.bound_announced.remove(request_id);
            self.events.admitted_due.remove(request_id);
        }
    }
}

/// HIST-1: phases after which a request never changes again.
pub fn is_finished(phase: Phase) -> bool {
    !phase.is_open()
}
