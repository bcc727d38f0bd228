// SPDX-License-Identifier: GPL-2.0

//! What differs between the supported kernel lines, in one place.
//!
//! The module builds against 6.12 LTS and the 7.x line. Where the kernel
//! crate changed shape between them, the rest of the module calls the
//! functions here, and each has one body per shape, picked by a cfg that a
//! build-time probe of the target tree sets (`probes.mk`: it asks whether
//! the tree has a trait, function or macro key, never which version it is).
//! The `module!` declaration in `rpcrdma.rs` is the only other place.

use kernel::{alloc::Allocator, ffi::c_char, prelude::PinInit, str::CStr, ThisModule};

#[cfg(rpcrdma_cstr_ext)]
use kernel::str::CStrExt as _;

/// The C string's pointer, for C.
#[inline]
pub(crate) fn cstr_ptr(s: &CStr) -> *const c_char {
    s.as_char_ptr()
}

/// The C string's bytes, without the terminating NUL.
#[inline]
pub(crate) fn cstr_bytes(s: &CStr) -> &[u8] {
    #[cfg(rpcrdma_cstr_ext)]
    return s.to_bytes();
    #[cfg(not(rpcrdma_cstr_ext))]
    return s.as_bytes();
}

/// A C string from C.
///
/// # Safety
///
/// `ptr` points to a NUL-terminated string that stays valid and unchanged
/// for `'a`.
#[inline]
pub(crate) unsafe fn cstr_from_ptr<'a>(ptr: *const c_char) -> &'a CStr {
    // SAFETY: as the caller promises.
    unsafe { CStr::from_char_ptr(ptr) }
}

/// Counts `n` more initialised elements at the end of `v`.
///
/// # Safety
///
/// `v.len() + n <= v.capacity()`, and the `n` elements of its allocation
/// from index `v.len()` on are initialised.
#[inline]
pub(crate) unsafe fn kvec_add_initialised<T, A: Allocator>(v: &mut kernel::alloc::Vec<T, A>, n: usize) {
    #[cfg(rpcrdma_kvec_inc_len)]
    // SAFETY: as the caller promises.
    unsafe {
        v.inc_len(n)
    };
    #[cfg(not(rpcrdma_kvec_inc_len))]
    // SAFETY: as the caller promises.
    unsafe {
        v.set_len(v.len() + n)
    };
}

/// Runs a pin-initialiser on `slot`.
///
/// # Safety
///
/// `slot` is valid for writes and uninitialised; it does not move until the
/// value is dropped (it is pinned); on `Err` the caller only deallocates it.
#[inline]
pub(crate) unsafe fn pin_init_at<T, E>(init: impl PinInit<T, E>, slot: *mut T) -> Result<(), E> {
    #[cfg(rpcrdma_pin_init_init)]
    // SAFETY: as the caller promises.
    return unsafe { init.__init(slot) };
    #[cfg(not(rpcrdma_pin_init_init))]
    // SAFETY: as the caller promises.
    return unsafe { init.__pinned_init(slot) };
}

/// This module's `THIS_MODULE`.
#[inline]
pub(crate) fn this_module() -> &'static ThisModule {
    #[cfg(rpcrdma_this_module_fn)]
    return kernel::module::this_module::<crate::RpcRdma>();
    #[cfg(not(rpcrdma_this_module_fn))]
    return &crate::THIS_MODULE;
}

/// Makes a type that implements `core::fmt::Display` printable by the
/// `pr_*!` macros on kernel lines where they format through
/// `kernel::fmt::Display`.
macro_rules! printable {
    ($t:ty) => {
        #[cfg(rpcrdma_kernel_fmt_display)]
        impl kernel::fmt::Display for $t {
            fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                core::fmt::Display::fmt(self, f)
            }
        }
    };
}
pub(crate) use printable;
