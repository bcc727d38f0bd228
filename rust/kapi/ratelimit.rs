// SPDX-License-Identifier: GPL-2.0

//! Rate limiting for messages a peer can provoke at will.
//!
//! A misbehaving server can repeat the same fault thousands of times a
//! second; the log gets one line per interval per call site, which is what
//! `printk_ratelimited()` gives C code. The interval is measured on the
//! monotonic clock, not in jiffies: a kernel with a periodic tick counts
//! jiffies by timer interrupts, and a guest that misses some (a loaded
//! host, an emulated CPU) counts fewer than the seconds that passed.

use core::sync::atomic::{AtomicU64, Ordering};


/// Lets one event through per interval. Put one in a `static` per message.
pub(crate) struct RateLimit {
    /// The monotonic time (ns) from which the next event is let through.
    next: AtomicU64,
}

/// The interval between two messages from one call site (printk's default
/// of 5 s), in ns.
const INTERVAL_NS: u64 = 5_000_000_000;

impl RateLimit {
    /// A limiter that lets the first event through.
    pub(crate) const fn new() -> Self {
        RateLimit { next: AtomicU64::new(0) }
    }

    /// True if the caller may log now. Safe to call from any context.
    pub(crate) fn allow(&self) -> bool {
        let now = super::time::monotonic_ns();
        let next = self.next.load(Ordering::Relaxed);
        if next != 0 && now < next {
            return false;
        }
        let until = now.saturating_add(INTERVAL_NS).max(1);
        self.next.compare_exchange(next, until, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}
