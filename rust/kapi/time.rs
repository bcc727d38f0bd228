// SPDX-License-Identifier: GPL-2.0

//! The kernel's clock tick (`jiffies`) and its monotonic clock.

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

/// Nanoseconds on the monotonic clock (`ktime_get`): since boot, never
/// going back, and true to the seconds that pass even where timer ticks
/// are lost. Any context but NMI.
pub(crate) fn monotonic_ns() -> u64 {
    // SAFETY: `ktime_get` reads the timekeeper under its sequence count;
    // callable from any context but NMI, and nothing here runs in NMI.
    let t = unsafe { sys::ktime_get() };
    u64::try_from(t).unwrap_or(0)
}

/// Waits on `cv` (releasing `guard`'s lock meanwhile) for at most `*left`
/// jiffies, and leaves in `*left` the time that remains (0 once it ran
/// out). A signal ends the wait with `ERESTARTSYS`.
pub(crate) fn wait_timeout<T: ?Sized, B: kernel::sync::lock::Backend>(
    cv: &kernel::sync::CondVar,
    guard: &mut kernel::sync::lock::Guard<'_, T, B>,
    left: &mut u64,
) -> kernel::error::Result {
    use kernel::sync::CondVarTimeoutResult;
    match cv.wait_interruptible_timeout(guard, *left as kernel::ffi::c_ulong) {
        CondVarTimeoutResult::Woken { jiffies } => *left = jiffies as u64,
        CondVarTimeoutResult::Timeout => *left = 0,
        CondVarTimeoutResult::Signal { .. } => return Err(kernel::error::code::ERESTARTSYS),
    }
    Ok(())
}
