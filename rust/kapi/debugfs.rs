// SPDX-License-Identifier: GPL-2.0

//! Module-wide counters (read-only) and test hooks in debugfs (`rpcrdma_rs/`).

use core::sync::atomic::AtomicU64;

use kernel::str::CStr;

use crate::sys;

/// The debugfs directory; removed on drop.
///
/// # Invariants
///
/// The pointer is the directory `new` created (or an error value
/// debugfs returned, which its functions accept), removed only by `drop`.
pub(crate) struct Counters(*mut sys::dentry);

// SAFETY: the dentry pointer is only used again in `drop`.
unsafe impl Send for Counters {}
// SAFETY: no method takes `&self`.
unsafe impl Sync for Counters {}

impl Counters {
    /// Publishes the module's `'static` counters under the given file names,
    /// read-only, and its test hooks (`knobs`) readable and writable by root.
    /// debugfs being absent or failing is not an error: the files are for
    /// operators and tests only.
    pub(crate) fn new(files: &[(&'static CStr, &'static AtomicU64)], knobs: &[(&'static CStr, &'static AtomicU64)]) -> Self {
        // SAFETY: no arguments.
        let dir = unsafe { sys::rpcrdma_rs_debugfs_dir() };
        let all = files.iter().map(|f| (f, false)).chain(knobs.iter().map(|k| (k, true)));
        for ((name, value), writable) in all {
            // SAFETY: `dir` came from debugfs (an error pointer makes this a
            // no-op); the name is a static string, copied by debugfs; the
            // values are statics, so they outlive the files, which `drop`
            // removes before the module (and its statics) goes away. An
            // `AtomicU64` has the layout of a `u64`. debugfs reads it, and
            // writes a knob, with single aligned 64-bit accesses, the way
            // the kernel's own C code shares such values with atomic users.
            unsafe { sys::rpcrdma_rs_debugfs_u64(dir, super::compat::cstr_ptr(name), value.as_ptr(), writable) };
        }
        Counters(dir)
    }
}

impl Drop for Counters {
    fn drop(&mut self) {
        // SAFETY: the directory came from `new`; removing an error pointer or
        // NULL is a no-op.
        unsafe { sys::rpcrdma_rs_debugfs_exit(self.0) };
    }
}
