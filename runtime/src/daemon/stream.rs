//! The one streaming protocol behind `request watch` (TERM-3) and `agent events` (EV-*):
//! subscribe to live events, refuse a cursor below what retention pruned (EV-9, HIST-4), send
//! the durable history after the cursor in pages, then the live events, skipping anything at
//! or below the last sequence sent, so nothing is lost or repeated.
//! CONN-3: a subscriber that hangs up is noticed at once (its read half reaches EOF), and a
//! heartbeat every `WATCH_HEARTBEAT` lets both ends notice a dead peer without an event.

use super::server::{write_encoded, write_line};
use super::Context;
use crate::protocol::Reply;
use crate::store::{Store, StoreError};
use serde::Serialize;
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};
use tokio::io::AsyncReadExt;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::broadcast;

/// What one stream reads from the store and pushes live.
pub(super) trait Feed: Clone + Send + Sync + 'static {
    type Event: Clone + Serialize + Send + 'static;
    /// Stored events read per page while a subscriber catches up.
    const PAGE: usize;
    fn sequence(event: &Self::Event) -> u64;
    /// Whether a live event is for this subscriber.
    fn wanted(&self, event: &Self::Event) -> bool;
    /// The sequence store reads stop at (EV-2: never past a pending commit); None: unbounded.
    fn through(&self) -> Option<u64>;
    /// One page of stored (sequence, JSON) after `after`, up to `through`.
    fn page(&self, store: &Store, after: u64, through: Option<u64>) -> Result<Vec<(u64, String)>, StoreError>;
    /// The answer to a cursor retention has passed (read off the reactor), if `after` is one.
    fn too_old(&self, store: &Store, after: u64) -> Result<Option<Reply>, StoreError>;
    /// The greatest sequence ever made durable (pruned ones included): no cursor a reader was
    /// ever given lies above it.
    fn last_durable(&self, store: &Store) -> Result<u64, StoreError>;
    /// What a reader with a cursor ahead of everything does instead (`cursor_ahead`).
    const REBASE: &'static str;
    /// EV-14: takes note of an event sent (stored or live: its `agent_id` and `kind`, see
    /// [`Encoded`]); true once nothing this stream selects can ever come after it (every agent
    /// it follows has stopped).
    fn exhausted_by(&mut self, _event: &Value) -> bool {
        false
    }
    /// EV-14: nothing this stream selects can come after what is stored (it follows only
    /// agents that had stopped when it began).
    fn exhausted(&self) -> bool {
        false
    }
}

/// The line that ends a stream: `--once`'s drain, or EV-14's stream whose agents all stopped
/// (`last_sequence` then the last event it sent, the stop, or its cursor: never past what it
/// followed, so a reader resuming by name after it meets whichever agent has the name now from
/// its first event).
fn end_line(last: u64, exhausted: bool) -> Value {
    match exhausted {
        true => json!({"end": true, "last_sequence": last, "ended": "agents_stopped"}),
        false => json!({"end": true, "last_sequence": last}),
    }
}

/// EV-9, TERM-3: a cursor above the greatest durable sequence was never given by this data
/// directory's daemon (it comes from another data directory, a database restored from an older
/// copy, or a typo): waiting after it would print nothing, for good, while events flow. It is
/// refused, exit 4, with the sequence to rebase from.
fn cursor_ahead(after: u64, last_durable: u64, rebase: &str) -> Option<Reply> {
    if after <= last_durable {
        return None;
    }
    let message = format!("cursor {after} is ahead of every event this daemon has stored (the last is {last_durable}): it was not given by this data directory; {rebase}");
    let mut reply = Reply::error(crate::protocol::exit::REJECTED, "cursor_ahead", message);
    reply.body["last_sequence"] = json!(last_durable);
    Some(reply)
}

/// The answer to a stream that cannot go on reading the store (EV-2: nothing is skipped): the
/// reader's cursor stays valid, so it can reconnect after it.
fn store_unreadable(last: u64, detail: &str) -> Value {
    let message = format!("{detail}; nothing after sequence {last} was sent: reconnect with --after {last}");
    let mut reply = Reply::error(crate::protocol::exit::ERROR, "store_unreadable", message);
    reply.body["last_sequence"] = json!(last);
    serde_json::to_value(reply).unwrap_or_default()
}

/// A live event as every subscriber receives it: one shared copy, encoded once, by the first
/// subscriber that sends it. The daemon has one reactor thread (issue 10): each subscriber
/// cloned the event and encoded it again (twice: to a `Value`, then to bytes), so a 2 MiB
/// final cost every one of 100 subscribers milliseconds of it, half a second in all.
pub struct Live<E> {
    pub event: E,
    encoded: OnceLock<Encoded>,
}

impl<E: Serialize> Live<E> {
    pub fn shared(event: E) -> Arc<Live<E>> {
        Arc::new(Live { event, encoded: OnceLock::new() })
    }

    fn encoded(&self) -> &Encoded {
        self.encoded.get_or_init(|| Encoded::of(serde_json::to_value(&self.event).unwrap_or_default()))
    }
}

/// An event's line as the stream sends it (`{"event": ...}` and its newline; the same bytes
/// for a stored and a live event: both go through a `Value`, whose keys are sorted), and what
/// [`Feed::exhausted_by`] reads of it.
pub(super) struct Encoded {
    head: Value,
    line: Vec<u8>,
}

impl Encoded {
    fn of(event: Value) -> Encoded {
        let head = json!({"agent_id": event["agent_id"], "kind": event["kind"]});
        let mut line = serde_json::to_vec(&json!({"event": event})).unwrap_or_default();
        line.push(b'\n');
        Encoded { head, line }
    }
}

pub(super) async fn serve<F: Feed>(mut peer: OwnedReadHalf, writer: &mut OwnedWriteHalf, context: &Arc<Context>, mut feed: F, mut live: broadcast::Receiver<Arc<Live<F::Event>>>, after: u64, once: bool) {
    // The caller subscribed `live` before this reads anything: nothing published in between is lost.
    // A cursor retention passed, or one past everything stored, is refused by the first
    // history read (`send_history`, `checked_page`).
    let mut last = after;
    let history = send_history(writer, context, &mut feed, &mut last).await;
    if history == History::Failed {
        return;
    }
    let exhausted = feed.exhausted(); // EV-14 (so is every `History::Exhausted`)
    if once || exhausted {
        let _ = write_line(writer, &end_line(last, exhausted)).await;
        return;
    }
    let mut heartbeat = tokio::time::interval(crate::protocol::WATCH_HEARTBEAT);
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut scratch = [0u8; 64];
    loop {
        let line = tokio::select! {
            biased;
            // The client sends nothing after its request: EOF, an error or stray bytes all
            // mean the subscription is over.
            _ = peer.read(&mut scratch) => return,
            received = live.recv() => match received {
                Ok(live) if F::sequence(&live.event) > last => {
                    let sequence = F::sequence(&live.event);
                    if !feed.wanted(&live.event) {
                        last = sequence;
                        continue;
                    }
                    let encoded = live.encoded();
                    let exhausted = feed.exhausted_by(&encoded.head);
                    if let Err(error) = write_encoded(writer, &encoded.line).await {
                        return log_dropped(&error, last);
                    }
                    last = sequence;
                    if exhausted {
                        let _ = write_line(writer, &end_line(last, true)).await;
                        return;
                    }
                    continue;
                }
                Ok(_) => continue,
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    match send_history(writer, context, &mut feed, &mut last).await {
                        History::Sent => continue,
                        History::Failed => return,
                        History::Exhausted => {
                            let _ = write_line(writer, &end_line(last, true)).await;
                            return;
                        }
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = heartbeat.tick() => json!({"heartbeat": true, "last_sequence": last}),
        };
        if let Err(error) = write_line(writer, &line).await {
            return log_dropped(&error, last);
        }
    }
}

/// How a history read ended.
#[derive(Debug, PartialEq, Eq)]
enum History {
    /// Everything up to the feed's bound was sent.
    Sent,
    /// EV-14: the last agent the stream follows stopped; `last` is that event's sequence.
    Exhausted,
    /// The stream is over (refused, unreadable, or the reader gone).
    Failed,
}

/// EV-14: a reader the daemon stops writing to (it read nothing for `REPLY_WRITE_TIMEOUT`) is
/// named in `mux.log`, with the last sequence whose line was written whole before (what it
/// read, at most); its CLI answers `stream_ended` with its own cursor. A reader that hung up is
/// routine and not logged.
fn log_dropped(error: &std::io::Error, delivered: u64) {
    if error.kind() == std::io::ErrorKind::TimedOut {
        tracing::warn!(delivered_through = delivered, "a stream reader stopped reading for {:?} and was dropped (it can resume after what it read)", super::server::REPLY_WRITE_TIMEOUT);
    }
}

/// Pages of durable events after `last`, up to the feed's bound. EV-9, HIST-4: each page is
/// checked against retention after it is read, so a reader retention overtakes (a slow
/// subscriber, one that lagged behind the live channel) is told `cursor_too_old` instead of
/// silently skipping what was pruned between its cursor and the page. Pruning only deletes a
/// prefix and its mark only grows, so a mark at or below `last` after the read proves the page
/// started right after `last`.
async fn send_history<F: Feed>(writer: &mut OwnedWriteHalf, context: &Arc<Context>, feed: &mut F, last: &mut u64) -> History {
    let through = feed.through();
    loop {
        let (store, reader, from) = (context.store.clone(), (*feed).clone(), *last);
        // Encoded there too, not on the reactor: a page holds up to 8 MiB of events.
        let read = tokio::task::spawn_blocking(move || checked_page(&reader, &store, from, through).map(|page| page.map(encode_page::<F>))).await;
        let page = match read.map_err(|e| e.to_string()).and_then(|read| read.map_err(|e| e.to_string())) {
            Ok(Ok(page)) => page,
            // The cursor is too old (retention) or ahead of everything stored.
            Ok(Err(refused)) => {
                let _ = write_line(writer, &serde_json::to_value(refused).unwrap_or_default()).await;
                return History::Failed;
            }
            Err(error) => {
                let _ = write_line(writer, &store_unreadable(*last, &error)).await;
                return History::Failed;
            }
        };
        let EncodedPage { rows, full } = page;
        for (sequence, encoded) in rows {
            // A stored row that does not parse is an error, never skipped: the reader's cursor
            // stays before it (it used to be sent as `{"event": null}` and passed).
            let Some(encoded) = encoded else {
                let _ = write_line(writer, &store_unreadable(*last, &format!("stored event {sequence} is not JSON"))).await;
                return History::Failed;
            };
            let exhausted = feed.exhausted_by(&encoded.head);
            if let Err(error) = write_encoded(writer, &encoded.line).await {
                log_dropped(&error, *last);
                return History::Failed;
            }
            *last = sequence;
            if exhausted {
                return History::Exhausted; // not past the stop: see `end_line`
            }
        }
        if !full {
            // A filtered read may stop short of `through`: nothing of ours lies between. EV-14:
            // not for a stream with nothing left to follow, which ends at the last event it sent
            // (a name resolved later may name an agent with events in between).
            if let Some(through) = through.filter(|_| !feed.exhausted()) {
                *last = (*last).max(through);
            }
            return History::Sent;
        }
    }
}

/// A page of stored events, encoded (None: a row that is not JSON).
struct EncodedPage {
    rows: Vec<(u64, Option<Encoded>)>,
    /// CONN-3: a page the store cut by size is full too: more may follow it.
    full: bool,
}

fn encode_page<F: Feed>(page: Vec<(u64, String)>) -> EncodedPage {
    let full = page.len() == F::PAGE || page.iter().map(|(_, json)| json.len()).sum::<usize>() >= crate::store::PAGE_MAX_BYTES;
    let rows = page.into_iter().map(|(sequence, json)| (sequence, serde_json::from_str::<Value>(&json).ok().map(Encoded::of))).collect();
    EncodedPage { rows, full }
}

/// One page after `from`, or the refusal of `from`: `cursor_ahead` when it lies past every
/// stored sequence, `cursor_too_old` when retention had passed it by the time the page was read
/// (checked after the read: see `send_history`).
pub(super) fn checked_page<F: Feed>(feed: &F, store: &Store, from: u64, through: Option<u64>) -> Result<Result<Vec<(u64, String)>, Reply>, StoreError> {
    if let Some(ahead) = cursor_ahead(from, feed.last_durable(store)?, F::REBASE) {
        return Ok(Err(ahead));
    }
    let page = feed.page(store, from, through)?;
    Ok(match feed.too_old(store, from)? {
        Some(too_old) => Err(too_old),
        None => Ok(page),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields out of key order, as a stored event's JSON has them (a struct's own order).
    #[derive(Serialize)]
    struct Sample {
        sequence: u64,
        kind: &'static str,
        agent_id: &'static str,
        text: String,
    }

    /// EV-2's one stream: a stored event and the same event live are sent as the same bytes
    /// (each is encoded once, where it is read: a history page on the blocking pool, a live
    /// event by its first subscriber), and a follower's EV-14 check reads the same head.
    #[test]
    fn ev_2_a_stored_and_a_live_event_are_sent_as_the_same_line() {
        let event = Sample { sequence: 7, kind: "agent.stopped", agent_id: "a1", text: "é\n\"".repeat(3) };
        let stored = serde_json::to_string(&event).unwrap();
        let page = encode_page::<super::super::requests::TerminalEvents>(vec![(7, stored), (8, "{not json".to_string())]);
        assert!(!page.full);
        let [(7, Some(from_store)), (8, None)] = page.rows.as_slice() else { panic!("a row that is not JSON is None, the other encoded") };
        let live = Live::shared(event);
        let from_live = live.encoded();
        assert_eq!(String::from_utf8_lossy(&from_store.line), String::from_utf8_lossy(&from_live.line));
        assert!(from_live.line.starts_with(b"{\"event\":{\"agent_id\":\"a1\",\"kind\":\"agent.stopped\",\"sequence\":7,"), "keys sorted");
        assert!(from_live.line.ends_with(b"}}\n") && from_live.line.iter().filter(|b| **b == b'\n').count() == 1, "one line");
        assert_eq!(from_store.head, json!({"agent_id": "a1", "kind": "agent.stopped"}));
        assert_eq!(from_live.head, from_store.head);
        assert!(std::ptr::eq(live.encoded(), from_live), "encoded once");
    }
}
