// SPDX-License-Identifier: GPL-2.0

//! The call and reply buffers of a request (`struct xdr_buf`): bounds-checked
//! views of their head, pages and tail ([`XdrBuf`]).
//!
//! An `xdr_buf` lives inside SUNRPC's `rpc_rqst`, which other threads may
//! write while a view is held (the reply path fixes up a reply buffer's
//! head while its task may be sending the call again): views keep a raw
//! pointer and read one field at a time, as C's `READ_ONCE` does, never a
//! Rust reference to the whole structure.

use core::{marker::PhantomData, ptr};

use kernel::ffi::{c_int, c_void};

use crate::kapi::{
    page::{Dir, PageRef, PageRun},
    PAGE_SIZE,
};
use crate::sys;

/// Reads one field of a structure others may write, as `READ_ONCE` does.
macro_rules! read_once {
    ($p:expr) => {{
        // Also used inside `unsafe` blocks, where this one is redundant.
        #[allow(unused_unsafe)]
        // SAFETY: the caller's pointer is valid (its SAFETY comment says
        // why); a volatile read of one naturally aligned field is what C
        // does for a field another thread may change.
        let v = unsafe { core::ptr::read_volatile(core::ptr::addr_of!($p)) };
        v
    }};
}
pub(super) use read_once;

/// Where `len` bytes at XDR offset `at` of `buf` start, if they lie within
/// its head. Most copies do (a call's header, a reply's fields before its
/// data, a small message whole): they are made directly, without SUNRPC's
/// walk of the buffer's parts.
///
/// # Safety
///
/// `buf` is a valid `xdr_buf`.
#[inline(always)]
pub(super) unsafe fn in_head(buf: *const sys::xdr_buf, at: u32, len: usize) -> Option<*mut u8> {
    let end = (at as usize).checked_add(len)?;
    let (base, iov_len) = (read_once!((*buf).head[0].iov_base), read_once!((*buf).head[0].iov_len));
    // `wrapping_add` stays inside the head: `at <= end <= iov_len`.
    (end <= iov_len).then(|| base.cast::<u8>().wrapping_add(at as usize))
}

/// Copies `data` into `buf` at XDR offset `at`; 0 or a negative errno.
///
/// # Safety
///
/// `buf` is a valid `xdr_buf` whose parts are writable memory the caller
/// may write.
pub(super) unsafe fn write_xdr(buf: *const sys::xdr_buf, at: u32, data: &[u8]) -> c_int {
    if data.is_empty() {
        return 0;
    }
    // SAFETY: per the contract.
    if let Some(dst) = unsafe { in_head(buf, at, data.len()) } {
        // SAFETY: the head is writable for `iov_len` bytes, of which these
        // `data.len()` are a part; `data` is another object.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        return 0;
    }
    // SAFETY: `buf` describes writable buffers; the function bounds the copy
    // by the buffer's parts.
    unsafe { sys::write_bytes_to_xdr_buf(buf, at, data.as_ptr().cast_mut().cast(), data.len() as u32) }
}

/// `XDRBUF_SPARSE_PAGES` (a macro bindgen does not see; helpers.c checks
/// the value at build time).
pub(super) const XDRBUF_SPARSE_PAGES: u32 = 0x04;

/// One of a request's buffers (`struct xdr_buf`: a head, a page list and a
/// tail), borrowed for `'a`, whose memory the device may move data
/// through in direction `D` (a call's is `Outbound`, a reply's `Inbound`),
/// lent by the request with lender tag `owner`.
///
/// # Invariants
///
/// `raw` is a buffer of a live request (made only by the request views of
/// this module), valid for `'a`, whose page array has an entry for every
/// page its `page_base + page_len` bytes touch, and whose head and tail
/// are linearly mapped memory; the request's task owns its memory, which
/// it lends to the transport in direction `D`.
pub(crate) struct XdrBuf<'a, D: Dir> {
    pub(super) raw: *const sys::xdr_buf,
    pub(super) owner: u64,
    pub(super) _life: PhantomData<(&'a sys::xdr_buf, D)>,
}

impl<D: Dir> Clone for XdrBuf<'_, D> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<D: Dir> Copy for XdrBuf<'_, D> {}

impl<'a, D: Dir> XdrBuf<'a, D> {
    /// Where the head starts in its first page, and its length.
    #[inline]
    pub(crate) fn head(&self) -> (u32, u32) {
        // SAFETY (of the reads): `raw` is valid for `'a` (type invariant).
        let (base, len) = (read_once!((*self.raw).head[0].iov_base), read_once!((*self.raw).head[0].iov_len));
        Self::kvec_extent(base, len)
    }

    /// Where the tail starts in its first page, and its length.
    #[inline]
    pub(crate) fn tail(&self) -> (u32, u32) {
        // SAFETY (of the reads): as in `head`.
        let (base, len) = (read_once!((*self.raw).tail[0].iov_base), read_once!((*self.raw).tail[0].iov_len));
        Self::kvec_extent(base, len)
    }

    /// Where a kvec at `base` of `len` bytes starts in its first page, and
    /// its length.
    #[inline]
    fn kvec_extent(base: *mut c_void, len: usize) -> (u32, u32) {
        (((base as usize) % PAGE_SIZE as usize) as u32, len as u32)
    }

    /// The head's length alone (a field read only when its value is used:
    /// `READ_ONCE` reads are never dropped as dead).
    #[inline]
    pub(crate) fn head_len(&self) -> u32 {
        // SAFETY (of the read): as in `head`.
        read_once!((*self.raw).head[0].iov_len) as u32
    }

    /// Where the page list's data starts in its first page, and its length.
    #[inline]
    pub(crate) fn pages(&self) -> (u32, u32) {
        // SAFETY (of the reads): as in `head`.
        (read_once!((*self.raw).page_base), read_once!((*self.raw).page_len))
    }

    /// The page list's length alone.
    #[inline]
    pub(crate) fn page_len(&self) -> u32 {
        // SAFETY (of the read): as in `head`.
        read_once!((*self.raw).page_len)
    }

    /// Bytes of data: what a call holds.
    #[inline]
    pub(crate) fn data_len(&self) -> u32 {
        // SAFETY (of the read): as in `head`.
        read_once!((*self.raw).len)
    }

    /// Bytes of room: what a reply may hold.
    #[inline]
    pub(crate) fn room(&self) -> u32 {
        // SAFETY (of the read): as in `head`.
        read_once!((*self.raw).buflen)
    }

    /// The `XDRBUF_*` flags.
    #[inline]
    pub(crate) fn flags(&self) -> u32 {
        // SAFETY (of the read): as in `head`.
        read_once!((*self.raw).flags)
    }

    /// Page `i` of the page list, which holds `page_base + page_len` bytes;
    /// `None` past its end.
    #[inline]
    pub(crate) fn page(&self, i: u32) -> Option<PageRef<'a, D>> {
        let (page_base, page_len) = self.pages();
        // `i` is below the page count, `(page_base + page_len)` over
        // `PAGE_SIZE` rounded up, if and only if page `i` starts before
        // the end; in `u64` neither side wraps.
        if u64::from(i) * u64::from(PAGE_SIZE) >= u64::from(page_base) + u64::from(page_len) {
            return None;
        }
        // SAFETY (of the read): as in `head`.
        let pages = read_once!((*self.raw).pages);
        // SAFETY: the page list has an entry for every page its
        // `page_base + page_len` bytes touch, and `i` is one of them; the
        // pages stay while the request's buffer is borrowed, lent in
        // direction `D` (type invariant).
        unsafe { PageRef::new(*pages.add(i as usize), self.owner) }
    }

    /// Pages `first` to `first + n - 1` of the page list, which holds
    /// `page_base + page_len` bytes; `None` unless all of them are in it.
    #[inline]
    pub(crate) fn page_run(&self, first: u32, n: u32) -> Option<PageRun<'a, D>> {
        let (page_base, page_len) = self.pages();
        // The last page asked for starts before the end, as in `page`; in
        // `u64` nothing wraps.
        let end = u64::from(first) + u64::from(n);
        if n == 0 || (end - 1) * u64::from(PAGE_SIZE) >= u64::from(page_base) + u64::from(page_len) {
            return None;
        }
        // SAFETY (of the read): as in `head`.
        let pages = read_once!((*self.raw).pages);
        // SAFETY: the page list has an entry for every page its `page_base
        // + page_len` bytes touch, and pages `first..first + n` are some
        // of them (each null or a page that stays while the request's
        // buffer is borrowed, lent in direction `D`: type invariant).
        Some(unsafe { PageRun::new(pages.add(first as usize), n, self.owner) })
    }

    /// Page `i` of the head (counting from the one it starts in); `None`
    /// past its end.
    pub(crate) fn head_page(&self, i: u32) -> Option<PageRef<'a, D>> {
        // SAFETY (of the reads): as in `head`.
        let (base, len) = (read_once!((*self.raw).head[0].iov_base), read_once!((*self.raw).head[0].iov_len));
        self.kvec_page(base, len, i)
    }

    /// Page `i` of the tail (counting from the one it starts in); `None`
    /// past its end.
    pub(crate) fn tail_page(&self, i: u32) -> Option<PageRef<'a, D>> {
        // SAFETY (of the reads): as in `head`.
        let (base, len) = (read_once!((*self.raw).tail[0].iov_base), read_once!((*self.raw).tail[0].iov_len));
        self.kvec_page(base, len, i)
    }

    fn kvec_page(&self, base: *mut c_void, len: usize, i: u32) -> Option<PageRef<'a, D>> {
        let ps = PAGE_SIZE as usize;
        let start = base as usize;
        if base.is_null() || i as usize >= (start % ps).checked_add(len)?.div_ceil(ps) {
            return None;
        }
        let addr = (start & !(ps - 1)).wrapping_add(i as usize * ps);
        // SAFETY: a head or tail is linearly mapped memory (type invariant),
        // and `addr` is in one of the pages its bytes touch; they stay while
        // the request's buffer is borrowed. (A slab page among them is
        // refused when a mapping asks for a reference of it.)
        unsafe { PageRef::new(sys::rpcrdma_rs_virt_to_page(addr as *const c_void), self.owner) }
    }
}
