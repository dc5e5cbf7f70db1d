//! The raw output of a pane, addressed by absolute byte offsets that never reset, of which the
//! last [`OUTPUT_RING_BYTES`] are kept.

use std::collections::VecDeque;

/// Output kept for late readers. A Codex turn rarely repaints more than this between polls.
pub const OUTPUT_RING_BYTES: usize = 4 * 1024 * 1024;

/// A read out of the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingSlice {
    pub data: Vec<u8>,
    pub start: u64,
    pub end: u64,
    /// Bytes between the requested offset and `start` were evicted.
    pub truncated: bool,
}

#[derive(Debug)]
pub struct OutputRing {
    bytes: VecDeque<u8>,
    /// Absolute offset of `bytes[0]`.
    start: u64,
    capacity: usize,
}

/// The requested offset lies beyond everything ever received: not from this pane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetBeyondEnd {
    pub end: u64,
}

impl OutputRing {
    pub fn new(capacity: usize) -> Self {
        assert!(capacity > 0);
        OutputRing {
            bytes: VecDeque::with_capacity(capacity),
            start: 0,
            capacity,
        }
    }

    pub fn start(&self) -> u64 {
        self.start
    }

    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Appends `chunk`, evicting the oldest bytes beyond capacity.
    pub fn push(&mut self, chunk: &[u8]) {
        let end_before = self.end();
        let keep = &chunk[chunk.len().saturating_sub(self.capacity)..];
        let overflow = (self.bytes.len() + keep.len()).saturating_sub(self.capacity);
        self.bytes.drain(..overflow);
        self.start += overflow as u64;
        self.bytes.extend(keep);
        // Bytes of `chunk` that never fit still count: offsets follow the stream, not the ring.
        self.start += (chunk.len() - keep.len()) as u64;
        assert!(self.bytes.len() <= self.capacity);
        assert_eq!(self.end(), end_before + chunk.len() as u64);
    }

    /// Up to `max` bytes from offset `after` (or from the oldest kept byte, if later).
    pub fn read(&self, after: u64, max: usize) -> Result<RingSlice, OffsetBeyondEnd> {
        if after > self.end() {
            return Err(OffsetBeyondEnd { end: self.end() });
        }
        let from = after.max(self.start());
        let skip = (from - self.start) as usize;
        let take = max.min(self.bytes.len() - skip);
        let data: Vec<u8> = self.bytes.range(skip..skip + take).copied().collect();
        let slice = RingSlice {
            start: from,
            end: from + take as u64,
            truncated: from > after,
            data,
        };
        assert!(slice.end <= self.end() && slice.data.len() <= max);
        Ok(slice)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_survive_eviction() {
        let mut ring = OutputRing::new(8);
        ring.push(b"abcdef");
        ring.push(b"ghij");
        assert_eq!((ring.start(), ring.end()), (2, 10));
        let slice = ring.read(0, 100).unwrap();
        assert_eq!(
            slice,
            RingSlice {
                data: b"cdefghij".to_vec(),
                start: 2,
                end: 10,
                truncated: true
            }
        );
        let slice = ring.read(5, 3).unwrap();
        assert_eq!(
            slice,
            RingSlice {
                data: b"fgh".to_vec(),
                start: 5,
                end: 8,
                truncated: false
            }
        );
        assert_eq!(ring.read(10, 3).unwrap().data, b"");
        assert_eq!(ring.read(11, 3), Err(OffsetBeyondEnd { end: 10 }));
    }

    #[test]
    fn chunk_larger_than_capacity_keeps_its_tail() {
        let mut ring = OutputRing::new(4);
        ring.push(b"xy");
        ring.push(b"0123456789");
        assert_eq!((ring.start(), ring.end()), (8, 12));
        assert_eq!(ring.read(8, 10).unwrap().data, b"6789");
    }
}
