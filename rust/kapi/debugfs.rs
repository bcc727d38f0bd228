// SPDX-License-Identifier: GPL-2.0

//! Read-only module-wide counters in debugfs (`rpcrdma_rs/`).

use core::sync::atomic::AtomicU64;

use crate::sys;

/// The debugfs directory; removed on drop.
pub(crate) struct Counters(*mut sys::dentry);

// SAFETY: the dentry pointer is only used again in `drop`.
unsafe impl Send for Counters {}
// SAFETY: no method takes `&self`.
unsafe impl Sync for Counters {}

impl Counters {
    /// Publishes the module's `'static` counters. debugfs being absent or failing is
    /// not an error: the files are for operators and tests only.
    pub(crate) fn new(
        registered: &'static AtomicU64,
        remote: &'static AtomicU64,
        local: &'static AtomicU64,
        backward_calls: &'static AtomicU64,
    ) -> Self {
        // SAFETY: the counters are statics, so they outlive the files, which
        // `drop` removes before the module (and its statics) goes away. An
        // `AtomicU64` has the layout of a `u64`, and debugfs only reads it.
        Counters(unsafe {
            sys::rpcrdma_rs_debugfs_init(registered.as_ptr(), remote.as_ptr(), local.as_ptr(), backward_calls.as_ptr())
        })
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        // SAFETY: the directory came from `new`; removing an error pointer or
        // NULL is a no-op.
        unsafe { sys::rpcrdma_rs_debugfs_exit(self.0) };
    }
}
