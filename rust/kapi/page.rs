// SPDX-License-Identifier: GPL-2.0

//! Pages (`struct page`): borrowed for handing to the device
//! ([`PageRef`]), with the direction the data moves in the type, and owned
//! ([`OwnedPage`]).
//!
//! Whatever maps or registers a page for the device takes a page reference
//! of its own (`get_page`) and drops it (`put_page`) only when the device
//! can no longer touch the page: a mapping owns what it names for its whole
//! life, so a token that is forgotten leaks the page rather than letting it
//! be freed under the device.

use core::{marker::PhantomData, ptr::NonNull};

use crate::sys;

mod sealed {
    pub(crate) trait Sealed {}
}

/// Which way data moves through a page handed to the device.
pub(crate) trait Dir: sealed::Sealed + Send + Sync + 'static {
    /// The device (or the peer, through a registration) writes the page.
    const INBOUND: bool;
}

/// The device reads the page: a call's data, a Send's payload, the source
/// of an RDMA Write; registered, the peer may read it (REMOTE_READ).
pub(crate) enum Outbound {}

/// The device writes the page: a reply's room, the sink of an RDMA Read;
/// registered, the peer may write it (REMOTE_WRITE).
pub(crate) enum Inbound {}

impl sealed::Sealed for Outbound {}
impl sealed::Sealed for Inbound {}

impl Dir for Outbound {
    const INBOUND: bool = false;
}

impl Dir for Inbound {
    const INBOUND: bool = true;
}

/// The owner tag of a page no request lends: any token may map it.
pub(crate) const ANY_OWNER: u64 = 0;

/// A page of memory someone else owns, borrowed for `'a`, that the device
/// may touch in direction `D`: a page of an RPC's buffer, handed out by
/// [`XdrBuf`](super::rpc::XdrBuf) (its call's pages are `Outbound`, its
/// reply's `Inbound`), or of an [`OwnedPage`] (either). Safe code cannot
/// make one for a page it does not hold, nor turn one direction into the
/// other.
///
/// `owner` is the [`Lender`](super::ib::Lender) whose memory it is
/// ([`ANY_OWNER`] for an owned page): a token of one request takes only
/// that request's pages.
///
/// # Invariants
///
/// `ptr` is a `struct page` that stays allocated for at least `'a`.
pub(crate) struct PageRef<'a, D: Dir> {
    ptr: NonNull<sys::page>,
    owner: u64,
    _life: PhantomData<(&'a sys::page, D)>,
}

impl<D: Dir> Clone for PageRef<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Dir> Copy for PageRef<'_, D> {}

impl<'a, D: Dir> PageRef<'a, D> {
    /// The page at `ptr` of the memory `owner` lends; `None` for a null
    /// page.
    ///
    /// # Safety
    ///
    /// `ptr` is null or a `struct page` that stays allocated for `'a`, and
    /// the device may move data through it in direction `D` for whoever
    /// holds it for `owner`.
    #[inline]
    pub(in crate::kapi) unsafe fn new(ptr: *mut sys::page, owner: u64) -> Option<Self> {
        // INVARIANT: per the contract.
        NonNull::new(ptr).map(|ptr| PageRef { ptr, owner, _life: PhantomData })
    }

    /// The lender whose memory the page is ([`ANY_OWNER`]: none).
    #[inline]
    pub(in crate::kapi) fn owner(self) -> u64 {
        self.owner
    }

    /// Takes a reference of the page for a mapping that names it: the
    /// page stays allocated until [`put`] drops it, whatever happens to
    /// the borrow. `None` (and no reference) for a page whose count is not
    /// the page's own to take: a slab page (a kmalloc'ed buffer), which
    /// is never handed to the device.
    #[inline]
    pub(in crate::kapi) fn get(self) -> Option<*mut sys::page> {
        // SAFETY: the page is live for `'a` (type invariant); the helper
        // takes a reference only of a page the page allocator owns.
        unsafe { sys::rpcrdma_rs_try_get_page(self.ptr.as_ptr()) }.then_some(self.ptr.as_ptr())
    }
}

/// Drops a page reference [`PageRef::get`] took.
///
/// # Safety
///
/// `page` holds a reference taken by `PageRef::get` that the caller owns
/// and gives up here, once; the device no longer touches the page through
/// the mapping the reference was taken for.
#[inline]
pub(in crate::kapi) unsafe fn put(page: *mut sys::page) {
    // SAFETY: per the contract.
    unsafe { sys::rpcrdma_rs_put_page(page) };
}

/// True if `len` bytes at `offset` lie inside one page.
pub(in crate::kapi) fn in_page(offset: u32, len: u32) -> bool {
    offset < super::PAGE_SIZE && len <= super::PAGE_SIZE - offset
}

/// A page the module allocated itself (a server-side or self-test buffer).
/// Dropping it drops the module's reference: a mapping that still names
/// the page keeps it allocated with its own.
///
/// # Invariants
///
/// `ptr` is `page`'s `struct page`, from the page allocator.
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

    /// The page, lent for `'a` (it cannot be freed while borrowed), in
    /// either direction: it is the module's own.
    pub(crate) fn page_ref<D: Dir>(&self) -> PageRef<'_, D> {
        // INVARIANT: allocated for as long as `self` is borrowed.
        PageRef { ptr: self.ptr, owner: ANY_OWNER, _life: PhantomData }
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

    /// How many references the page has now (a test of what holds it).
    pub(crate) fn ref_count(&self) -> i32 {
        // SAFETY: the page is live (owned); the helper only reads it.
        unsafe { sys::rpcrdma_rs_page_count(self.ptr.as_ptr()) }
    }
}
