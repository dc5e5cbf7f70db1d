//! The fuzzing harness shared by `runtime/tests/fuzz_parsers.rs` and the holder protocol's unit
//! tests: stable Rust has no cargo-fuzz, so each parser of untrusted bytes is driven by proptest
//! with arbitrary bytes and with mutations of seed inputs (bit flips, cuts, deletions, splices
//! of another seed, duplications, and inserted NUL, escape, invalid UTF-8, JSON-hostile and huge
//! byte runs). Seeds are the files of `fuzz/corpus/<target>/` (small valid and nasty samples);
//! every harness first replays each of them. A failure proptest finds is shrunk and persisted
//! in the test file's `.proptest-regressions` beside it (commit those), and its input belongs
//! in the corpus once the bug is fixed.
//!
//! Cases per target are fixed so CI stays bounded; `WAKTERM_FUZZ_CASES=N` overrides them for
//! a longer local run.

#![allow(dead_code)]

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::Config;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// No single parse may take longer (debug build, loaded machine): catches runaway work, not
/// ordinary slowness.
pub const MAX_CASE_DURATION: Duration = Duration::from_secs(5);

/// One seed file of a target's corpus.
pub struct Seed {
    pub path: PathBuf,
    pub bytes: Vec<u8>,
}

/// Every file of `fuzz/corpus/<target>/`, in name order; a target without seeds is a mistake.
pub fn corpus(target: &str) -> Vec<Seed> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus").join(target);
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|entry| entry.expect("corpus entry").path())
        .filter(|path| path.is_file())
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "corpus {} has no seeds", dir.display());
    paths.into_iter().map(|path| Seed { bytes: std::fs::read(&path).expect("corpus file"), path }).collect()
}

/// Runs `check` on every corpus file of `target`, naming the file on failure.
pub fn replay(target: &str, mut check: impl FnMut(&[u8])) {
    for seed in corpus(target) {
        let started = Instant::now();
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check(&seed.bytes)));
        if let Err(panic) = outcome {
            eprintln!("corpus seed {} failed", seed.path.display());
            std::panic::resume_unwind(panic);
        }
        assert!(started.elapsed() < MAX_CASE_DURATION, "{} took {:?}", seed.path.display(), started.elapsed());
    }
}

/// A proptest configuration of `cases` cases (or `WAKTERM_FUZZ_CASES`).
pub fn config(cases: u32) -> Config {
    let cases = std::env::var("WAKTERM_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(cases);
    Config { cases, max_shrink_iters: 4096, ..Config::default() }
}

/// Times one case: a parse that runs away fails the property.
pub fn timed<T>(f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let value = f();
    let elapsed = started.elapsed();
    assert!(elapsed < MAX_CASE_DURATION, "one case took {elapsed:?}");
    value
}

/// One edit of a seed.
#[derive(Clone, Debug)]
pub enum Mutation {
    FlipBit { at: Index, bit: u8 },
    SetByte { at: Index, byte: u8 },
    /// Keep only the bytes before `at`.
    Cut { at: Index },
    Delete { from: Index, to: Index },
    Insert { at: Index, bytes: Vec<u8> },
    /// Insert a range of another seed.
    Splice { at: Index, seed: Index, from: Index, to: Index },
    /// Repeat a range in place.
    Duplicate { from: Index, to: Index },
}

/// `index` into a sequence of `len` items (0 when empty); `inclusive` allows `len` itself.
fn position(index: &Index, len: usize, inclusive: bool) -> usize {
    let slots = if inclusive { len + 1 } else { len };
    if slots == 0 {
        0
    } else {
        index.index(slots)
    }
}

fn ordered(a: usize, b: usize) -> (usize, usize) {
    (a.min(b), a.max(b))
}

impl Mutation {
    pub fn apply(&self, bytes: &mut Vec<u8>, seeds: &[Vec<u8>]) {
        let len = bytes.len();
        match self {
            Mutation::FlipBit { at, bit } if len > 0 => bytes[position(at, len, false)] ^= 1 << (bit % 8),
            Mutation::SetByte { at, byte } if len > 0 => bytes[position(at, len, false)] = *byte,
            Mutation::FlipBit { .. } | Mutation::SetByte { .. } => {}
            Mutation::Cut { at } => bytes.truncate(position(at, len, true)),
            Mutation::Delete { from, to } => {
                let (from, to) = ordered(position(from, len, true), position(to, len, true));
                bytes.drain(from..to);
            }
            Mutation::Insert { at, bytes: inserted } => {
                let at = position(at, len, true);
                bytes.splice(at..at, inserted.iter().copied());
            }
            Mutation::Splice { at, seed, from, to } => {
                let other = &seeds[position(seed, seeds.len(), false)];
                let (from, to) = ordered(position(from, other.len(), true), position(to, other.len(), true));
                let at = position(at, len, true);
                bytes.splice(at..at, other[from..to].iter().copied());
            }
            Mutation::Duplicate { from, to } => {
                let (from, to) = ordered(position(from, len, true), position(to, len, true));
                let copy = bytes[from..to].to_vec();
                bytes.splice(to..to, copy);
            }
        }
    }
}

/// Byte runs that break parsers: NUL, terminal escapes (the bracketed-paste terminator), CR
/// and LF, JSON quotes and escapes (a lone surrogate), invalid and overlong UTF-8, C1 and line
/// separators, huge and negative numbers, deep nesting, and runs of `huge_lengths` bytes (a
/// target's limits and one past them).
pub fn nasty_bytes(huge_lengths: &[usize]) -> impl Strategy<Value = Vec<u8>> {
    let fixed: Vec<Vec<u8>> = vec![
        b"\0".to_vec(),
        b"\x1b".to_vec(),
        b"\x1b[201~".to_vec(),
        b"\x1b[200~".to_vec(),
        b"\r".to_vec(),
        b"\n".to_vec(),
        b"\r\n".to_vec(),
        b"\"".to_vec(),
        b"\\".to_vec(),
        b"\\u0000".to_vec(),
        b"\\ud800".to_vec(),
        b"\\u001b".to_vec(),
        vec![0xff, 0xfe],
        vec![0xc3],
        vec![0xc0, 0x80],
        vec![0xed, 0xa0, 0x80],
        "\u{9b}".as_bytes().to_vec(),
        "\u{2028}\u{feff}".as_bytes().to_vec(),
        b"1e999999".to_vec(),
        b"-1".to_vec(),
        b"18446744073709551616".to_vec(),
        b"null".to_vec(),
        b"{}".to_vec(),
        vec![b'['; 256],
        b"{\"a\":".repeat(128),
    ];
    let huge: Vec<usize> = huge_lengths.to_vec();
    prop_oneof![
        4 => proptest::sample::select(fixed),
        2 => vec(any::<u8>(), 0..32),
        1 => (proptest::sample::select(huge), any::<u8>()).prop_map(|(len, byte)| vec![byte; len]),
    ]
}

pub fn mutation(huge_lengths: &[usize]) -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), any::<u8>()).prop_map(|(at, bit)| Mutation::FlipBit { at, bit }),
        1 => (any::<Index>(), any::<u8>()).prop_map(|(at, byte)| Mutation::SetByte { at, byte }),
        2 => any::<Index>().prop_map(|at| Mutation::Cut { at }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(from, to)| Mutation::Delete { from, to }),
        3 => (any::<Index>(), nasty_bytes(huge_lengths)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        1 => (any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(at, seed, from, to)| Mutation::Splice { at, seed, from, to }),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(from, to)| Mutation::Duplicate { from, to }),
    ]
}

/// A seed with one to four mutations applied.
pub fn mutated(seeds: Vec<Vec<u8>>, huge_lengths: &[usize]) -> impl Strategy<Value = Vec<u8>> {
    assert!(!seeds.is_empty());
    (any::<Index>(), vec(mutation(huge_lengths), 1..5)).prop_map(move |(seed, mutations)| {
        let mut bytes = seeds[seed.index(seeds.len())].clone();
        for mutation in &mutations {
            mutation.apply(&mut bytes, &seeds);
        }
        bytes
    })
}

/// What a target is fed: mostly mutated seeds, some arbitrary bytes.
pub fn input(seeds: Vec<Vec<u8>>, huge_lengths: &[usize]) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![1 => vec(any::<u8>(), 0..512), 3 => mutated(seeds, huge_lengths)]
}

/// The corpus of `target` as seed byte strings.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    corpus(target).into_iter().map(|seed| seed.bytes).collect()
}
