// SPDX-License-Identifier: GPL-2.0

//! The call and reply buffers of a request (`struct xdr_buf`): bounds-checked
//! views of their head, pages and tail ([`XdrBuf`]).

use core::ptr::{self};

use kernel::ffi::{c_int, c_void};

use crate::kapi::{page::PageRef, PAGE_SIZE};
use crate::sys;

/// Where `len` bytes at XDR offset `at` of `buf` start, if they lie within
/// its head. Most copies do (a call's header, a reply's fields before its
/// data, a small message whole): they are made directly, without SUNRPC's
/// walk of the buffer's parts.
pub(super) fn in_head(buf: &sys::xdr_buf, at: u32, len: usize) -> Option<*mut u8> {
    let end = (at as usize).checked_add(len)?;
    // `wrapping_add` stays inside the head: `at <= end <= iov_len`.
    (end <= buf.head[0].iov_len).then(|| buf.head[0].iov_base.cast::<u8>().wrapping_add(at as usize))
}

/// Copies `data` into `buf` at XDR offset `at`; 0 or a negative errno.
pub(super) fn write_xdr(buf: &sys::xdr_buf, at: u32, data: &[u8]) -> c_int {
    if data.is_empty() {
        return 0;
    }
    if let Some(dst) = in_head(buf, at, data.len()) {
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
/// tail), borrowed for `'a`.
///
/// # Invariants
///
/// `raw` is a buffer of a live request (made only by the request views of
/// this module) whose page array has an entry for every page its
/// `page_base + page_len` bytes touch, and whose head and tail are linearly
/// mapped memory, for `'a`.
#[derive(Clone, Copy)]
pub(crate) struct XdrBuf<'a> {
    pub(super) raw: &'a sys::xdr_buf,
}

impl<'a> XdrBuf<'a> {
    /// Where the head starts in its first page, and its length.
    #[inline]
    pub(crate) fn head(&self) -> (u32, u32) {
        Self::kvec_extent(&self.raw.head[0])
    }

    /// Where the tail starts in its first page, and its length.
    #[inline]
    pub(crate) fn tail(&self) -> (u32, u32) {
        Self::kvec_extent(&self.raw.tail[0])
    }

    /// Where `iov` starts in its first page, and its length.
    #[inline]
    fn kvec_extent(iov: &sys::kvec) -> (u32, u32) {
        (((iov.iov_base as usize) % PAGE_SIZE as usize) as u32, iov.iov_len as u32)
    }

    /// Where the page list's data starts in its first page, and its length.
    #[inline]
    pub(crate) fn pages(&self) -> (u32, u32) {
        (self.raw.page_base, self.raw.page_len)
    }

    /// Bytes of data (a call), room (a reply), and the `XDRBUF_*` flags.
    #[inline]
    pub(crate) fn lengths_and_flags(&self) -> (u32, u32, u32) {
        (self.raw.len, self.raw.buflen, self.raw.flags)
    }

    /// Page `i` of the page list, which holds `page_base + page_len` bytes;
    /// `None` past its end.
    #[inline]
    pub(crate) fn page(&self, i: u32) -> Option<PageRef<'a>> {
        let b = self.raw;
        // `i` is below the page count, `(page_base + page_len)` over
        // `PAGE_SIZE` rounded up, if and only if page `i` starts before
        // the end; in `u64` neither side wraps.
        if u64::from(i) * u64::from(PAGE_SIZE) >= u64::from(b.page_base) + u64::from(b.page_len) {
            return None;
        }
        // SAFETY: the page list has an entry for every page its
        // `page_base + page_len` bytes touch, and `i` is one of them; the
        // pages stay while the request's buffer is borrowed.
        unsafe { PageRef::new(*b.pages.add(i as usize)) }
    }

    /// Page `i` of the head (counting from the one it starts in); `None`
    /// past its end.
    pub(crate) fn head_page(&self, i: u32) -> Option<PageRef<'a>> {
        Self::kvec_page(&self.raw.head[0], i)
    }

    /// Page `i` of the tail (counting from the one it starts in); `None`
    /// past its end.
    pub(crate) fn tail_page(&self, i: u32) -> Option<PageRef<'a>> {
        Self::kvec_page(&self.raw.tail[0], i)
    }

    fn kvec_page(iov: &'a sys::kvec, i: u32) -> Option<PageRef<'a>> {
        let ps = PAGE_SIZE as usize;
        let start = iov.iov_base as usize;
        if iov.iov_base.is_null() || i as usize >= (start % ps).checked_add(iov.iov_len)?.div_ceil(ps) {
            return None;
        }
        let addr = (start & !(ps - 1)).wrapping_add(i as usize * ps);
        // SAFETY: a head or tail is linearly mapped memory (kmalloc or the
        // page allocator), and `addr` is in one of the pages its bytes
        // touch; they stay while the request's buffer is borrowed.
        unsafe { PageRef::new(sys::rpcrdma_rs_virt_to_page(addr as *const c_void)) }
    }
}
