// SPDX-License-Identifier: GPL-2.0

//! A completion queue (`struct ib_cq`) and how a work request completed.

use core::ptr::NonNull;

use kernel::{
    error::{from_err_ptr, Result},
    ffi::{c_int, c_void},
};

use super::device::Device;
use crate::sys;

/// How a work request completed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Completion {
    /// Success.
    Ok,
    /// Flushed: the queue pair went to the error state (disconnect or drain).
    Flushed,
    /// Failed with this `ib_wc_status`.
    Failed(u32),
}

impl Completion {
    pub(super) fn of(wc: &sys::ib_wc) -> Self {
        match wc.status {
            sys::ib_wc_status_IB_WC_SUCCESS => Completion::Ok,
            sys::ib_wc_status_IB_WC_WR_FLUSH_ERR => Completion::Flushed,
            s => Completion::Failed(s),
        }
    }
}

/// A completion queue polled by ib_core in process context; freed on drop,
/// which waits for a running completion handler.
///
/// # Invariants
///
/// `cq` was allocated by [`Cq::new`] and is freed only by `Drop`.
pub(crate) struct Cq {
    cq: NonNull<sys::ib_cq>,
}

// SAFETY: ib_core polls the CQ and serialises its handlers itself; the Rust
// side only passes the pointer to ib_core.
unsafe impl Send for Cq {}
// SAFETY: see `Send`.
unsafe impl Sync for Cq {}

impl Cq {
    /// Allocates a CQ of `entries` on `device`, whose completions call the
    /// `done` function of each work request's CQE with `context` in the
    /// CQ's `cq_context`.
    ///
    /// # Safety
    ///
    /// The device must stay registered until the CQ is dropped, and
    /// `context` must stay valid for every completion handler: until the
    /// CQ is dropped.
    pub(crate) unsafe fn new(device: &Device, context: *mut c_void, entries: u32) -> Result<Self> {
        let entries = c_int::try_from(entries).map_err(|_| kernel::error::code::EINVAL)?;
        // SAFETY: the device is live; `context` per the contract.
        let cq = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_cq(device.as_ptr(), context, entries) })?;
        // INVARIANT: just allocated.
        NonNull::new(cq).map(|cq| Cq { cq }).ok_or(kernel::error::code::ENOMEM)
    }

    /// The CQ, for C functions that take one.
    pub(super) fn as_ptr(&self) -> *mut sys::ib_cq {
        self.cq.as_ptr()
    }
}

impl Drop for Cq {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, freed once. This waits for a running
        // completion handler; none starts afterwards.
        unsafe { sys::ib_free_cq(self.cq.as_ptr()) };
    }
}
