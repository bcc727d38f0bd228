// SPDX-License-Identifier: GPL-2.0

//! A protection domain (`struct ib_pd`).

use core::ptr::NonNull;

use kernel::error::{from_err_ptr, Result};

use super::device::Device;
use crate::sys;

/// A protection domain, deallocated on drop.
///
/// # Invariants
///
/// `pd` was allocated by [`Pd::new`] and is deallocated only by `Drop`.
/// Its device outlives it (the owner's duty, see [`Pd::new`]).
pub(crate) struct Pd {
    pd: NonNull<sys::ib_pd>,
}

// SAFETY: ib_core serialises what is done to a PD itself; the Rust side only
// reads its local DMA lkey and passes the pointer to ib_core.
unsafe impl Send for Pd {}
// SAFETY: see `Send`.
unsafe impl Sync for Pd {}

impl Pd {
    /// Allocates a PD on `device`.
    ///
    /// # Safety
    ///
    /// The device must stay registered until the PD is dropped, and every
    /// object made in the PD (queue pairs, memory regions) must be released
    /// before it.
    pub(crate) unsafe fn new(device: &Device) -> Result<Self> {
        // SAFETY: the device is live (borrowed).
        let pd = from_err_ptr(unsafe { sys::rpcrdma_rs_alloc_pd(device.as_ptr()) })?;
        // INVARIANT: just allocated; `from_err_ptr` refused an error pointer.
        NonNull::new(pd).map(|pd| Pd { pd }).ok_or(kernel::error::code::ENOMEM)
    }

    /// The lkey that names all of local memory for DMA-mapped addresses.
    pub(crate) fn local_dma_lkey(&self) -> u32 {
        // SAFETY: the PD is live (type invariant).
        unsafe { sys::rpcrdma_rs_local_dma_lkey(self.pd.as_ptr()) }
    }

    /// The PD, for C functions that take one.
    pub(super) fn as_ptr(&self) -> *mut sys::ib_pd {
        self.pd.as_ptr()
    }
}

impl Drop for Pd {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`, released once; everything made in it
        // is gone (the contract of `new`).
        unsafe { sys::rpcrdma_rs_dealloc_pd(self.pd.as_ptr()) };
    }
}
