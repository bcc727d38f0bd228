// SPDX-License-Identifier: GPL-2.0

//! Scatterlist entries of the tables this module owns, set as
//! `<linux/scatterlist.h>`'s inline functions set them (the same on every
//! supported kernel line): a call out to a C wrapper per entry costs more
//! than the two or three stores.

use kernel::ffi::c_ulong;

use crate::sys;

/// The two low bits of `page_link`: a chain link, the last entry.
const SG_CHAIN: c_ulong = sys::SG_CHAIN as c_ulong;
const SG_END: c_ulong = sys::SG_END as c_ulong;

/// Points `sg` at `len` bytes at `offset` in `page` and clears its end
/// mark (`sg_set_page`, then `sg_unmark_end`: entries are reused, and only
/// the last one set may carry the mark).
#[inline(always)]
pub(super) fn set_page(sg: &mut sys::scatterlist, page: *mut sys::page, len: u32, offset: u32) {
    // A `struct page` is word-aligned: its address leaves the two low bits
    // free for the marks.
    sg.page_link = (sg.page_link & SG_CHAIN) | page as c_ulong;
    sg.offset = offset;
    sg.length = len;
}

/// The page `sg` points at (`sg_page`).
#[inline(always)]
pub(super) fn page(sg: &sys::scatterlist) -> *mut sys::page {
    (sg.page_link & !(SG_CHAIN | SG_END)) as *mut sys::page
}

/// Marks `sg` as the table's last entry (`sg_mark_end`).
#[inline(always)]
pub(super) fn mark_end(sg: &mut sys::scatterlist) {
    sg.page_link = (sg.page_link | SG_END) & !SG_CHAIN;
}
