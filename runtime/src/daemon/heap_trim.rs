//! MEM-1: memory freed after a burst goes back to the system. glibc's allocator keeps what the
//! daemon freed in its arenas for reuse, so after a burst (a catch-up of large events, one
//! agent's burst of output, many unfinished request lines) the daemon's resident memory stayed
//! at the peak for good (a review: 1.82 GB resident after a 2.21 GB peak, with nothing in
//! use). Every [`TRIM_INTERVAL`], off the reactor, the allocator is asked to return what is free
//! (`malloc_trim`).

use std::time::Duration;

/// How often the daemon trims (each costs a walk of the allocator's free lists: microseconds
/// when nothing is free, measured in the session note).
pub const TRIM_INTERVAL: Duration = Duration::from_secs(10);
/// A trim that returned at least this much is logged.
const WORTH_LOGGING: u64 = 16 * 1024 * 1024;

/// The process's resident set in bytes (None: /proc could not be read).
pub fn resident_bytes() -> Option<u64> {
    let statm = procfs::process::Process::myself().ok()?.statm().ok()?;
    Some(statm.resident.saturating_mul(procfs::page_size()))
}

/// Asks the allocator to return every free page it holds to the system; true when it did.
/// A no-op outside glibc (musl returns what it frees itself).
pub fn trim() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: malloc_trim only walks the allocator's own free lists under its locks.
        unsafe { libc::malloc_trim(0) == 1 }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// Runs until the daemon stops: a trim every `TRIM_INTERVAL`.
pub async fn run() {
    loop {
        tokio::time::sleep(TRIM_INTERVAL).await;
        let Ok((before, after)) = tokio::task::spawn_blocking(|| (resident_bytes(), trim().then(resident_bytes).flatten())).await else { return };
        if let (Some(before), Some(after)) = (before, after) {
            if before.saturating_sub(after) >= WORTH_LOGGING {
                tracing::info!(before_mib = before >> 20, after_mib = after >> 20, "returned freed memory to the system (MEM-1)");
            }
        }
    }
}
