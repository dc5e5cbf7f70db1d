//! MEM-1: a trim returns memory the process freed but the allocator kept. Its own test binary
//! (one test, one thread): no other test allocates beside it.

use wakterm_runtime::daemon::heap_trim::{resident_bytes, trim};

/// 128 MiB in 1 KiB allocations (under glibc's mmap threshold: they live in the heap), a pin
/// allocated after them (so the heap's top cannot shrink by itself), all but the pin freed:
/// the resident set stays up until a trim returns the free pages.
#[test]
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn mem_1_a_trim_returns_freed_heap_memory() {
    const CHUNKS: usize = 128 * 1024;
    let chunks: Vec<Box<[u8; 1024]>> = (0..CHUNKS).map(|n| Box::new([n as u8; 1024])).collect();
    let pin = Box::new([1u8; 1024]);
    let full = resident_bytes().expect("statm");
    drop(chunks);
    let freed = resident_bytes().expect("statm");
    assert!(trim(), "the allocator held free memory to return");
    let trimmed = resident_bytes().expect("statm");
    eprintln!("resident: {} MiB allocated, {} MiB after free, {} MiB after the trim", full >> 20, freed >> 20, trimmed >> 20);
    assert!(freed + (16 << 20) > full, "freeing alone kept the memory (else this test shows nothing)");
    assert!(trimmed + (96 << 20) < freed, "the trim returned most of the 128 MiB");
    assert_eq!(pin[0], 1);
    // Not a target, a figure for the note: what a trim with nothing to return costs.
    let start = std::time::Instant::now();
    for _ in 0..100 {
        trim();
    }
    eprintln!("a trim with nothing to return: {:.1} us", start.elapsed().as_secs_f64() * 1e6 / 100.0);
}
