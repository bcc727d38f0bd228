// SPDX-License-Identifier: GPL-2.0

//! The kernel's clock tick (`jiffies`).

use crate::sys;

/// Ticks per second (`HZ`).
pub(crate) const HZ: u64 = sys::HZ as u64;

/// Milliseconds as jiffies, rounded up (`msecs_to_jiffies`).
pub(crate) fn ms_to_jiffies(ms: u32) -> u64 {
    kernel::time::msecs_to_jiffies(ms) as u64
}

/// The current time in jiffies.
pub(crate) fn jiffies() -> u64 {
    // SAFETY: `jiffies` is a word the timer interrupt updates and that is
    // always mapped; a volatile read of it is how C code reads it too.
    unsafe { core::ptr::read_volatile(&raw const sys::jiffies) as u64 }
}
