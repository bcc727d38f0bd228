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

/// A page the module allocated itself (a server-side or self-test buffer),
/// freed on drop.
///
/// # Invariants
///
/// `ptr` is `page`'s `struct page`.
pub(crate) struct OwnedPage {
    page: kernel::page::Page,
    ptr: NonNull<sys::page>,
}

impl OwnedPage {
    /// Allocates a zeroed page. Sleeps.
    pub(crate) fn new() -> kernel::error::Result<Self> {
        let page = kernel::page::Page::alloc_page(kernel::alloc::flags::GFP_KERNEL | kernel::alloc::flags::__GFP_ZERO)?;
        let ptr = NonNull::new(page.as_ptr().cast::<sys::page>()).ok_or(kernel::error::code::ENOMEM)?;
        // INVARIANT: `ptr` is the page's.
        Ok(OwnedPage { page, ptr })
    }

    /// The page, lent for `'a` (it cannot be freed while borrowed).
    pub(crate) fn page_ref(&self) -> PageRef<'_> {
        // INVARIANT: the page is allocated for as long as `self` is
        // borrowed.
        PageRef { ptr: self.ptr, _life: PhantomData }
    }

    /// Copies `src` into the page at `offset`.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> kernel::error::Result {
        // SAFETY: `src` is readable for its length; `write_raw` checks that
        // the bytes fit in the page.
        unsafe { self.page.write_raw(src.as_ptr(), offset, src.len()) }
    }

    /// Copies bytes of the page at `offset` into `dst`.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) -> kernel::error::Result {
        // SAFETY: `dst` is writable for its length; `read_raw` checks that
        // the bytes lie in the page.
        unsafe { self.page.read_raw(dst.as_mut_ptr(), offset, dst.len()) }
    }
}
