// SPDX-License-Identifier: GPL-2.0

//! Borrowed references to pages (`struct page`).

use core::{marker::PhantomData, ptr::NonNull};

use crate::sys;

/// A page of memory someone else owns, borrowed for `'a`: a page of an
/// RPC's buffer, handed out by [`XdrBuf`](super::rpc::XdrBuf). Safe code
/// cannot make one for a page it does not hold.
///
/// # Invariants
///
/// `ptr` is a `struct page` that stays allocated for at least `'a`.
#[derive(Clone, Copy)]
pub(crate) struct PageRef<'a> {
    ptr: NonNull<sys::page>,
    _life: PhantomData<&'a sys::page>,
}

impl<'a> PageRef<'a> {
    /// # Safety
    ///
    /// `ptr` must be a `struct page` that stays allocated for `'a`.
    pub(in crate::kapi) unsafe fn new(ptr: *mut sys::page) -> Option<Self> {
        // INVARIANT: per the contract.
        NonNull::new(ptr).map(|ptr| PageRef { ptr, _life: PhantomData })
    }

    /// The page, for C functions that take one.
    pub(in crate::kapi) fn as_ptr(self) -> *mut sys::page {
        self.ptr.as_ptr()
    }
}

/// True if `len` bytes at `offset` lie inside one page.
pub(in crate::kapi) fn in_page(offset: u32, len: u32) -> bool {
    offset < super::PAGE_SIZE && len <= super::PAGE_SIZE - offset
}
