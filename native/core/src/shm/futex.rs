//! Sleeping on a 32-bit word of shared memory until another process changes
//! it: the Linux futex, the one primitive that blocks across processes on
//! plain memory without a spin.
//!
//! Elsewhere (no futex) the wait sleeps briefly instead, which keeps the
//! protocol correct at some cost in latency.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, for at most `timeout`; returns
/// early (spuriously, or because the word changed or a waker woke it).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    #[cfg(target_os = "linux")]
    {
        let ts = libc::timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
        };
        // SAFETY: `word` is a valid, aligned u32 for the whole call; a shared
        // (not PRIVATE) futex since other processes map the same memory.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                word.as_ptr(),
                libc::FUTEX_WAIT,
                expected,
                &ts as *const libc::timespec,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (word, expected);
        std::thread::sleep(timeout.min(Duration::from_micros(200)));
    }
}

/// Wakes every process sleeping in [`wait`] on `word`.
pub(crate) fn wake_all(word: &AtomicU32) {
    #[cfg(target_os = "linux")]
    // SAFETY: `word` is a valid, aligned u32; waking has no other effect.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
    #[cfg(not(target_os = "linux"))]
    let _ = word;
}
