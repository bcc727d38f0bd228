// SPDX-License-Identifier: GPL-2.0

//! Rate limiting for messages a peer can provoke at will.
//!
//! A misbehaving server can repeat the same fault thousands of times a
//! second; the log gets one line per interval per call site, which is what
//! `printk_ratelimited()` gives C code.

use core::sync::atomic::{AtomicU64, Ordering};


/// Lets one event through per interval. Put one in a `static` per message.
pub(crate) struct RateLimit {
    /// The jiffies value from which the next event is let through.
    next: AtomicU64,
}

/// The interval between two messages from one call site (printk's default).
const INTERVAL_MS: u32 = 5000;

impl RateLimit {
    /// A limiter that lets the first event through.
    pub(crate) const fn new() -> Self {
        RateLimit { next: AtomicU64::new(0) }
    }

    /// True if the caller may log now. Safe to call from any context.
    pub(crate) fn allow(&self) -> bool {
        let now = super::time::jiffies();
        let next = self.next.load(Ordering::Relaxed);
        if next != 0 && (now.wrapping_sub(next) as i64) < 0 {
            return false;
        }
        let until = now.wrapping_add(super::time::ms_to_jiffies(INTERVAL_MS)).max(1);
        self.next.compare_exchange(next, until, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}
