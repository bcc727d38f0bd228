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

/// Pages in a row of someone else's page array, borrowed for `'a`, that
/// the device may touch in direction `D`: the pages of a piece of an RPC's
/// page list ([`XdrBuf::page_run`](super::rpc::XdrBuf::page_run)), handed
/// to a registration in one call rather than a page at a time.
///
/// # Invariants
///
/// `pages` points at `n` entries of a page array that stay readable for
/// `'a` and, whenever read, are each null or a `struct page` that stays
/// allocated for at least `'a`, lent by `owner` for the device to move
/// data through in direction `D`.
pub(crate) struct PageRun<'a, D: Dir> {
    pages: *const *mut sys::page,
    n: u32,
    owner: u64,
    _life: PhantomData<(&'a sys::page, D)>,
}

impl<'a, D: Dir> PageRun<'a, D> {
    /// The `n` pages at `pages`, of the memory `owner` lends.
    ///
    /// # Safety
    ///
    /// `pages` points at `n` entries that stay readable for `'a` and,
    /// whenever read, are each null or a `struct page` that stays allocated
    /// for `'a`, through which the device may move data in direction `D`
    /// for whoever holds it for `owner`.
    #[inline]
    pub(in crate::kapi) unsafe fn new(pages: *const *mut sys::page, n: u32, owner: u64) -> Self {
        // INVARIANT: per the contract.
        PageRun { pages, n, owner, _life: PhantomData }
    }

    /// The lender whose memory the pages are.
    #[inline]
    pub(in crate::kapi) fn owner(&self) -> u64 {
        self.owner
    }

    /// How many pages.
    #[inline]
    pub(in crate::kapi) fn len(&self) -> u32 {
        self.n
    }

    /// Points the first [`PageRun::len`] entries of `sg` at the pages,
    /// `len` bytes in all from `offset` in the first page, each taking a
    /// reference of its page as [`PageRef::get`] does; returns the
    /// entries set (fewer than all at a null or slab page), which hold
    /// the references until [`put_sg`] drops them.
    ///
    /// # Safety
    ///
    /// `sg` has room for [`PageRun::len`] entries (a reference an entry
    /// held before is overwritten: leaked, never dropped); `offset` is
    /// below `PAGE_SIZE` and `offset + len` bytes span exactly the run's
    /// pages, so that every entry stays inside its page.
    #[inline]
    pub(in crate::kapi) unsafe fn get_into(&self, sg: *mut sys::scatterlist, offset: u32, len: u32) -> u32 {
        // SAFETY: the entries are readable and their pages live for `'a`
        // (type invariant); `sg` has room for them and the bytes lie in
        // the pages (the contract). At most `n` entries are set.
        let done = unsafe { sys::rpcrdma_rs_sg_get_pages(sg, self.pages, self.n, offset, len) };
        done.min(self.n)
    }
}

/// Drops the page references held by the first `n` entries of `sg`.
///
/// # Safety
///
/// `sg` points at `n` initialised entries, each of which holds a reference taken by [`PageRef::get`] or
/// [`PageRun::get_into`] that the caller owns and gives up here, once; the
/// device no longer touches the pages through the mapping the references
/// were taken for.
#[inline]
pub(in crate::kapi) unsafe fn put_sg(sg: *mut sys::scatterlist, n: u32) {
    // SAFETY: per the contract.
    unsafe { sys::rpcrdma_rs_sg_put_pages(sg, n) };
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

// SAFETY: the value owns its page reference (`kernel::page::Page` is
// `Send`); `ptr` only names that page, which any thread may free or read
// through the value it moved to.
unsafe impl Send for OwnedPage {}

impl OwnedPage {
    /// Allocates a zeroed page. Sleeps.
    pub(crate) fn new() -> kernel::error::Result<Self> {
        Self::alloc(true)
    }

    /// Allocates a page, zeroed if `zero`. Sleeps.
    fn alloc(zero: bool) -> kernel::error::Result<Self> {
        let flags = kernel::alloc::flags::GFP_KERNEL;
        let page = kernel::page::Page::alloc_page(if zero { flags | kernel::alloc::flags::__GFP_ZERO } else { flags })?;
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

    /// The page's `struct page`, for kapi's helpers.
    pub(in crate::kapi) fn as_raw(&self) -> *mut sys::page {
        self.ptr.as_ptr()
    }

    /// Copies `src` into the page at `offset`.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) -> kernel::error::Result {
        // SAFETY: `src` is readable for its length; `write_raw` checks that
        // the bytes fit in the page.
        unsafe { self.page.write_raw(src.as_ptr(), offset, src.len()) }
    }

    /// Zeroes `len` bytes of the page at `offset`.
    pub(crate) fn zero(&self, offset: usize, len: usize) -> kernel::error::Result {
        // SAFETY: as for `write`: `fill_zero_raw` checks that the bytes fit
        // in the page, which is the module's own.
        unsafe { self.page.fill_zero_raw(offset, len) }
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

/// Pages the module allocated itself, with the page array a [`PageRun`]
/// names (a self-test's buffer of several pages, the sink of a call's Read
/// chunk). Dropping it drops the module's references, as [`OwnedPage`]
/// does. One page (a 4 KiB WRITE's sink) is kept with its array in place:
/// no allocation beside the page's.
///
/// # Invariants
///
/// The array (`ptr` of [`Pages::One`], `ptrs` of [`Pages::Many`]) has one
/// entry per page, in order, each that page's `struct page`; nothing
/// changes after `new`.
pub(crate) struct OwnedPages(Pages);

enum Pages {
    One { page: OwnedPage, ptr: [*mut sys::page; 1] },
    Many { pages: kernel::alloc::KVec<OwnedPage>, ptrs: kernel::alloc::KVec<*mut sys::page> },
}

// SAFETY: the pages are `OwnedPage`s (`Send`); the array only names them
// (type invariant) and moves with them.
unsafe impl Send for OwnedPages {}

impl OwnedPages {
    /// Allocates `n` zeroed pages. Sleeps.
    pub(crate) fn new(n: usize) -> kernel::error::Result<Self> {
        Self::alloc(n, true)
    }

    /// Allocates `n` pages not zeroed: their bytes are whatever the page
    /// allocator left in them, so only for kapi's
    /// [`Sink`](crate::kapi::ib::rw::Sink), which nothing reads before a
    /// Read wrote it. Sleeps.
    pub(in crate::kapi) fn new_uninit(n: usize) -> kernel::error::Result<Self> {
        Self::alloc(n, false)
    }

    fn alloc(n: usize, zero: bool) -> kernel::error::Result<Self> {
        if n == 1 {
            let page = OwnedPage::alloc(zero)?;
            let ptr = [page.ptr.as_ptr()];
            // INVARIANT: the page's entry.
            return Ok(OwnedPages(Pages::One { page, ptr }));
        }
        let flags = kernel::alloc::flags::GFP_KERNEL;
        let mut pages = kernel::alloc::KVec::with_capacity(n, flags)?;
        let mut ptrs = kernel::alloc::KVec::with_capacity(n, flags)?;
        for _ in 0..n {
            let p = OwnedPage::alloc(zero)?;
            ptrs.push(p.ptr.as_ptr(), flags)?;
            pages.push(p, flags)?;
        }
        // INVARIANT: one entry per page, in order, each its page's.
        Ok(OwnedPages(Pages::Many { pages, ptrs }))
    }

    /// How many pages.
    pub(crate) fn len(&self) -> usize {
        self.raw_pages().len()
    }

    /// Page `i`.
    pub(crate) fn page(&self, i: usize) -> Option<&OwnedPage> {
        match &self.0 {
            Pages::One { page, .. } => (i == 0).then_some(page),
            Pages::Many { pages, .. } => pages.get(i),
        }
    }

    /// The pages' `struct page`s, in order, for kapi's helpers.
    pub(in crate::kapi) fn raw_pages(&self) -> &[*mut sys::page] {
        match &self.0 {
            Pages::One { ptr, .. } => ptr,
            Pages::Many { ptrs, .. } => ptrs,
        }
    }

    /// Forgets the pages without dropping their references: once a helper
    /// took the references over ([`OwnedPages::raw_pages`]).
    pub(in crate::kapi) fn give_up(self) {
        match self.0 {
            // The references are the helper's now, not dropped here.
            Pages::One { page, .. } => core::mem::forget(page),
            Pages::Many { pages, ptrs } => {
                for p in pages {
                    core::mem::forget(p);
                }
                drop(ptrs);
            }
        }
    }

    /// All the pages, as a run, lent for `'_` in either direction: they
    /// are the module's own.
    pub(crate) fn run<D: Dir>(&self) -> PageRun<'_, D> {
        let ptrs = self.raw_pages();
        // SAFETY: the array has `len` entries, each a page `self` holds,
        // which stays allocated (and the array readable, in place: it
        // never changes, and `self` cannot move) for as long as `self` is
        // borrowed (type invariant).
        unsafe { PageRun::new(ptrs.as_ptr(), ptrs.len() as u32, ANY_OWNER) }
    }
}
