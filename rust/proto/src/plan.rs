// SPDX-License-Identifier: GPL-2.0
//! Chunk planning for the requester (client) side of RPC-over-RDMA version 1.
//!
//! Pure functions that decide, for one RPC, how the Call travels, how the
//! Reply is expected back and which byte regions must be registered (RFC
//! 8166 sections 3.4, 3.5, 4.4, 4.5). The kernel keeps all I/O: it describes
//! its `struct xdr_buf`s with [`XdrBufDesc`], asks [`plan_chunks`] for a
//! [`CallPlan`] and a [`ReplyPlan`], splits the chunk regions into memory
//! registrations with [`split_regions`], then maps, registers, encodes and
//! posts.
//!
//! # Call side ([`CallPlan`])
//!
//! 1. **Inline** (RDMA_MSG, no Read list) when the exact transport header plus
//!    the whole Call (`len`) fits the inline send threshold. `pullup` says
//!    whether to copy the whole message into one pre-mapped buffer (message
//!    not larger than [`Limits::pullup_threshold`], or the mapped form would
//!    need more Send SGEs than the device has) instead of sending head, each
//!    page piece and tail as separate SGEs. The pre-mapped buffer must
//!    therefore hold at least `inline_send` bytes.
//! 2. **Read chunk** (RDMA_MSG) when direct data placement is allowed, the page
//!    list holds bulk write payload ([`XDRBUF_WRITE`]) and the head is
//!    XDR-aligned: one Read chunk at XDR position `head.len` covers exactly
//!    `page_len` bytes of the page list; head and tail travel inline.
//! 3. **Long Call** (RDMA_NOMSG) otherwise: one Position-Zero Read chunk
//!    covers the whole Call (head, pages, tail) and nothing travels inline.
//!
//! ## XDR padding of a Read chunk
//!
//! RFC 8166 section 3.4.5 (XDR roundup and chunks; RFC 5666 section 3.7): a
//! Read chunk does not carry the XDR roundup of the data item it conveys, and
//! the inline Payload stream resumes at the next XDR-aligned position after
//! the item. SUNRPC's `xdr_write_pages()` puts the payload's 1..3 pad bytes
//! at the *start* of the tail kvec and then appends only whole XDR words, so
//! `tail.len % 4` is exactly the number of pad bytes there. The plan therefore registers
//! `page_len` bytes (unrounded) and tells the kernel to send the tail from
//! offset `tail_skip = tail.len % 4` for `tail.len - tail_skip` bytes (no
//! tail SGE at all when that is zero). Linux svcrdma rounds the chunk up
//! itself and starts the inline remainder right after the position, which
//! matches this exactly.
//!
//! # Reply side ([`ReplyPlan`])
//!
//! 1. **Inline** when the largest possible Reply (the receive `xdr_buf`'s
//!    `buflen`) plus the responder's chunk-less header
//!    ([`INLINE_REPLY_HEADER_LEN`], 28 bytes) fits the inline receive
//!    threshold.
//! 2. **Write chunk** when direct data placement is allowed, the receive page
//!    list is for bulk read payload ([`XDRBUF_READ`], `page_len > 0`) and the
//!    non-payload part (head + tail) plus the responder's header echoing the
//!    Write list fits inline. One Write chunk covers the page list.
//! 3. **Reply chunk** otherwise: covers head, pages and tail of the receive
//!    buffer.
//!
//! A Write list and a Reply chunk are never offered together (RFC 8166
//! allows it; the in-tree client does not use it and it is never needed: an
//! operation whose non-payload part does not fit inline gets a Reply chunk
//! for everything). A Read chunk with a Write chunk is allowed (no NFS
//! operation has both payloads, so it does not occur in practice).
//!
//! ## XDR padding of a Write chunk
//!
//! The Write chunk covers exactly `page_len` bytes; its length is never
//! rounded up (the bytes after `page_len` may lie in a page that is not in
//! the list). RFC 8166 section 3.4.5 has the responder leave the roundup out
//! of a Write chunk, and Linux svcrdma writes only the payload (never more
//! than the segment lengths). For older responders that write the pad (RFC 5666 wording), the
//! kernel may set [`Limits::write_pad_segment`]: when `page_len % 4 != 0` the
//! Write chunk then gets one extra [`WRITE_PAD_LEN`]-byte segment pointing at
//! a connection-wide pad buffer that the kernel registers once (no per-RPC
//! REG_MR/LOCAL_INV for it). This is what the in-tree client does.
//!
//! # Chunk regions and segmentation
//!
//! A chunk is built from at most three regions ([`RegionKind`]): the head
//! kvec, the page list and the tail kvec, in that order. Each non-empty
//! region is registered separately (a region never shares an MR with
//! another, because their pages are not contiguous), so a Long Call or Reply
//! chunk has at least one segment per non-empty region and its segments,
//! concatenated in order, form the message. Zero-length regions get no
//! segment. Within a region the bytes are contiguous: only the first page
//! may start at an offset and only the last may end short, so a region is
//! cut into MRs of at most `max_pages_per_mr` pages ([`split_regions`]). One
//! MR is one segment on the wire.
//!
//! # Header sizes
//!
//! Plans use the *exact* header length of each RPC (known from the segment
//! counts before anything is registered), so a Send never exceeds the
//! peer's receive buffer. [`Limits::max_call_header_len`] and
//! [`Limits::max_reply_header_len`] give the worst cases for sizing buffers.

use core::num::NonZeroU64;
use super::v1::{Proc, FIXED_HEADER_LEN, MIN_MSG_HEADER_LEN, READ_LIST_ENTRY_LEN, SEGMENT_LEN};

/// `xdr_buf` flag: the page list is the target of a file read (bulk read payload).
/// Same value as the kernel's `XDRBUF_READ`.
pub const XDRBUF_READ: u32 = 0x01;
/// `xdr_buf` flag: the page list is the source of a file write (bulk write
/// payload). Same value as the kernel's `XDRBUF_WRITE`.
pub const XDRBUF_WRITE: u32 = 0x02;
/// Fewest Send SGEs the planner works with: transport header, head, tail.
pub const MIN_SEND_SGES: u32 = 3;
/// A default for [`Limits::pullup_threshold`] (the in-tree client's initial
/// send buffer size, twice the 1 KiB default inline threshold).
pub const DEFAULT_PULLUP_THRESHOLD: u32 = 2048;
/// Length of the optional Write chunk pad segment.
pub const WRITE_PAD_LEN: u32 = 4;
/// Most regions a chunk is made of (head, pages, tail).
pub const MAX_REGIONS: usize = 3;
/// Length of the header a responder sends with an inline Reply to a Call
/// that offered no Write list and no Reply chunk (three empty lists).
pub const INLINE_REPLY_HEADER_LEN: u32 = MIN_MSG_HEADER_LEN as u32;

/// Largest RPC message a backward-direction message (a backward call, or
/// our reply to one) may carry under the inline threshold `threshold`:
/// such messages have no chunks (RFC 8167 sections 4.2 and 5.3), so the
/// transport header is the fixed one with three empty lists, and a word
/// more is kept for Version Two's direction field, so that one bound
/// serves either version.
pub const fn backward_max_payload(threshold: u32) -> u32 {
    threshold.saturating_sub(MIN_MSG_HEADER_LEN as u32 + 4)
}

/// A planning or segmentation failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanError {
    /// A [`Limits`] field is unusable (zero page size, MR depth or segment
    /// count, fewer than [`MIN_SEND_SGES`] Send SGEs, or an inline threshold
    /// smaller than the smallest header).
    BadLimits,
    /// The buffer description is inconsistent: for a Call, head + pages +
    /// tail differs from `len`; or an offset plus length does not fit in 32
    /// bits.
    BadShape,
    /// A chunk would need more segments than allowed.
    TooManySegments {
        /// Segments the chunk needs.
        needed: u32,
        /// The per-chunk limit.
        max: u32,
    },
    /// A transport header alone exceeds the inline threshold it must fit:
    /// the Call header of a Long Call (inline send threshold), or the header
    /// the responder would send back echoing a Reply chunk (inline receive
    /// threshold).
    HeaderTooLarge {
        /// Header length needed.
        len: u32,
        /// The threshold it exceeds.
        max: u32,
    },
    /// The output slice has room for fewer extents than needed.
    OutputTooSmall {
        /// Extents needed.
        needed: u32,
    },
}

/// Saturating conversion used only after the inputs were range-checked.
fn sat_u32(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

/// Negotiated and device limits that drive the plans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Inline send threshold: the largest Send (transport header plus inline
    /// RPC message) the peer can receive, from the CM private data.
    pub inline_send: u32,
    /// Inline receive threshold: the largest message the peer may Send us
    /// (our Receive buffer size as negotiated).
    pub inline_recv: u32,
    /// Send SGEs per Send WR the device (and the QP) allows.
    pub max_send_sge: u32,
    /// Page size in bytes (`PAGE_SIZE`).
    pub page_size: u32,
    /// Most pages one memory registration covers (FRWR depth).
    pub max_pages_per_mr: u32,
    /// Most segments in one chunk (Read chunk, Write chunk or Reply chunk).
    pub max_segments: u32,
    /// Inline Calls of at most this many bytes are pulled up (copied) into
    /// the pre-mapped send buffer instead of being DMA-mapped piecewise.
    pub pullup_threshold: u32,
    /// Add a [`WRITE_PAD_LEN`]-byte pad segment to a Write chunk whose length
    /// is not a multiple of four (see the module documentation).
    pub write_pad_segment: bool,
}

impl Limits {
    /// Checks that the limits can be planned with.
    pub fn validate(&self) -> Result<(), PlanError> {
        if self.page_size == 0
            || self.max_pages_per_mr == 0
            || self.max_segments == 0
            || self.max_send_sge < MIN_SEND_SGES
            || self.inline_send < INLINE_REPLY_HEADER_LEN
            || self.inline_recv < INLINE_REPLY_HEADER_LEN
        {
            return Err(PlanError::BadLimits);
        }
        Ok(())
    }

    /// The registration geometry (page size and MR depth).
    pub fn geometry(&self) -> Geometry {
        Geometry { page_size: self.page_size, max_pages: self.max_pages_per_mr }
    }

    /// Largest transport header this requester can send: a full Read list
    /// plus the larger of a full Write chunk or a full Reply chunk.
    pub fn max_call_header_len(&self) -> u32 {
        let n = self.max_segments;
        let with_write = call_header_len(n, Some(n), None);
        let with_reply = call_header_len(n, None, Some(n));
        if with_write > with_reply {
            with_write
        } else {
            with_reply
        }
    }

    /// Largest transport header a responder sends back: a Reply echoing a
    /// full Write chunk (larger than one echoing a full Reply chunk).
    pub fn max_reply_header_len(&self) -> u32 {
        let n = self.max_segments;
        let w = ReplyPlan::WriteChunk { len: 0, segments: n, pad_segment: false }.reply_header_len();
        let r = ReplyPlan::ReplyChunk { len: 0, segments: n }.reply_header_len();
        if w > r {
            w
        } else {
            r
        }
    }
}

/// Exact length of an RDMA_MSG or RDMA_NOMSG header sent by this requester:
/// `read_segments` Read list entries, an optional single Write chunk of the
/// given segment count, an optional Reply chunk of the given segment count.
pub const fn call_header_len(read_segments: u32, write_segments: Option<u32>, reply_segments: Option<u32>) -> u32 {
    let seg = SEGMENT_LEN as u64;
    let mut len = FIXED_HEADER_LEN as u64;
    // Read list: one entry per segment, then the terminating zero.
    len += read_segments as u64 * READ_LIST_ENTRY_LEN as u64 + 4;
    // Write list: optional chunk (present word, count, segments), terminator.
    len += match write_segments {
        Some(n) => 8 + n as u64 * seg + 4,
        None => 4,
    };
    // Reply chunk: absent word, or present word, count, segments.
    len += match reply_segments {
        Some(n) => 8 + n as u64 * seg,
        None => 4,
    };
    if len > u32::MAX as u64 {
        u32::MAX
    } else {
        len as u32
    }
}

/// One kvec of an `xdr_buf`, as far as registration needs to know it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kvec {
    /// Offset of `iov_base` in its page (`offset_in_page(iov_base)`).
    pub page_offset: u32,
    /// `iov_len`.
    pub len: u32,
}

/// The shape of a `struct xdr_buf`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct XdrBufDesc {
    /// The head kvec.
    pub head: Kvec,
    /// `page_base`: byte offset of the first page byte from the start of the
    /// page array (it may exceed a page; page index = `page_base / page_size`).
    pub page_base: u32,
    /// `page_len`.
    pub page_len: u32,
    /// The tail kvec.
    pub tail: Kvec,
    /// For a send buffer, `len` (must equal head + pages + tail); for a
    /// receive buffer, `buflen` (the largest Reply expected).
    pub len: u32,
    /// `flags` ([`XDRBUF_READ`], [`XDRBUF_WRITE`]; other bits ignored).
    pub flags: u32,
}

impl XdrBufDesc {
    /// head + page list + tail, or `None` on 32-bit overflow.
    pub fn parts_len(&self) -> Option<u32> {
        self.head.len.checked_add(self.page_len)?.checked_add(self.tail.len)
    }

    /// One of the three regions of this buffer.
    pub fn region(&self, kind: RegionKind) -> Region {
        match kind {
            RegionKind::Head => Region { kind, offset: self.head.page_offset, len: self.head.len },
            RegionKind::Pages => Region { kind, offset: self.page_base, len: self.page_len },
            RegionKind::Tail => Region { kind, offset: self.tail.page_offset, len: self.tail.len },
        }
    }

    /// Send SGEs an inline Call needs when head, each page piece and the
    /// tail are mapped separately: header + head + pieces + (tail if any).
    pub fn mapped_send_sges(&self, page_size: u32) -> u32 {
        let pieces = pages_spanned(self.page_base, self.page_len, page_size);
        let tail = u64::from(self.tail.len > 0);
        sat_u32(pieces.saturating_add(2).saturating_add(tail))
    }
}

/// Which part of an `xdr_buf` a region is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RegionKind {
    #[default]
    /// The head kvec (virtually contiguous, may cross pages).
    Head,
    /// The page list.
    Pages,
    /// The tail kvec (virtually contiguous, may cross pages).
    Tail,
}

/// A contiguous byte region to register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// Which part of the `xdr_buf` it is.
    pub kind: RegionKind,
    /// For a kvec, the offset of its first byte in its first page; for the
    /// page list, `page_base` (may exceed a page).
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
}

/// Up to [`MAX_REGIONS`] regions forming one chunk, in wire order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Regions {
    items: [Region; MAX_REGIONS],
    count: usize,
}

impl Regions {
    /// No regions.
    pub const EMPTY: Regions = Regions {
        items: [Region { kind: RegionKind::Head, offset: 0, len: 0 }; MAX_REGIONS],
        count: 0,
    };

    /// Appends `r` unless it is empty (or the array is full).
    fn push_nonempty(&mut self, r: Region) {
        if r.len == 0 {
            return;
        }
        if let Some(slot) = self.items.get_mut(self.count) {
            *slot = r;
            // Below the array's length: the entry exists.
            self.count = self.count.wrapping_add(1);
        }
    }

    /// The regions, in order.
    pub fn as_slice(&self) -> &[Region] {
        self.items.get(..self.count).unwrap_or(&[])
    }

    /// Number of regions.
    pub fn len(&self) -> usize {
        self.count
    }

    /// True if there is no region.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Sum of the region lengths.
    pub fn total_len(&self) -> u64 {
        // At most MAX_REGIONS lengths of 32 bits: the sum never saturates.
        self.as_slice().iter().fold(0u64, |acc, r| acc.saturating_add(u64::from(r.len)))
    }
}

/// Page size and MR depth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Page size in bytes (non-zero).
    pub page_size: u32,
    /// Most pages per memory registration (non-zero).
    pub max_pages: u32,
}

/// One memory registration (one chunk segment): which pages and bytes it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MrExtent {
    /// The region the bytes come from.
    pub kind: RegionKind,
    /// Index of the first page. For the page list it indexes the `xdr_buf`
    /// page array (`page_base / page_size` for the first extent); for a kvec
    /// it counts pages from the one holding the kvec's first byte (0).
    pub first_page: u32,
    /// Pages covered (1..=`max_pages`).
    pub npages: u32,
    /// Offset of the first byte in the first page (non-zero only for the
    /// first extent of a region).
    pub offset: u32,
    /// Bytes covered (the segment length).
    pub len: u32,
    /// Offset of the first byte from the start of its region.
    pub region_offset: u32,
    /// Offset of the first byte from the start of the chunk (the regions
    /// concatenated).
    pub chunk_offset: u32,
}

/// Pages touched by `len` bytes starting `offset` bytes into a page array.
fn pages_spanned(offset: u32, len: u32, page_size: u32) -> u64 {
    if len == 0 || page_size == 0 {
        return 0;
    }
    let ps = u64::from(page_size);
    let off = u64::from(offset) % ps;
    off.saturating_add(u64::from(len)).div_ceil(ps)
}

/// Checks a region's range and counts its MRs.
#[inline]
fn region_mrs(r: &Region, g: Geometry) -> Result<u64, PlanError> {
    if g.page_size == 0 || g.max_pages == 0 {
        return Err(PlanError::BadLimits);
    }
    if u64::from(r.offset) + u64::from(r.len) > u64::from(u32::MAX) {
        return Err(PlanError::BadShape);
    }
    Ok(pages_spanned(r.offset, r.len, g.page_size).div_ceil(u64::from(g.max_pages)))
}

/// Number of MRs (= chunk segments) needed to register `regions`.
#[inline]
pub fn count_mrs(regions: &[Region], g: Geometry) -> Result<u32, PlanError> {
    let mut total: u64 = 0;
    let mut bytes: u64 = 0;
    for r in regions {
        total = total.saturating_add(region_mrs(r, g)?);
        bytes = bytes.saturating_add(u64::from(r.len));
    }
    if bytes > u64::from(u32::MAX) {
        return Err(PlanError::BadShape);
    }
    Ok(sat_u32(total))
}

/// Splits one region into MRs; see [`split_regions`].
pub fn split_region(region: Region, g: Geometry, out: &mut [MrExtent]) -> Result<usize, PlanError> {
    split_regions(&[region], g, u32::MAX, out)
}

/// Splits the regions of a chunk into MRs of at most `g.max_pages` pages and
/// writes one [`MrExtent`] per MR into `out`, in wire order. Returns the
/// number written. Zero-length regions produce nothing. Fails when more
/// than `max_segments` MRs or more than `out.len()` would be needed (what
/// `out` then holds is unspecified), or when the regions are malformed as
/// [`count_mrs`] says.
pub fn split_regions(regions: &[Region], g: Geometry, max_segments: u32, out: &mut [MrExtent]) -> Result<usize, PlanError> {
    // A zero page size or depth would never make progress: say so before
    // anything divides by them.
    let Some(ps) = NonZeroU64::new(u64::from(g.page_size)) else {
        return Err(PlanError::BadLimits);
    };
    if g.max_pages == 0 {
        return Err(PlanError::BadLimits);
    }
    // One pass, without counting first: this runs for every RPC, and the
    // count is only needed to say why a chunk does not fit.
    let room = out.len().min(usize::try_from(max_segments).unwrap_or(usize::MAX));
    let span = ps.get().saturating_mul(u64::from(g.max_pages));
    // Nearly every chunk is one region that one MR covers (the page of a
    // 4 KiB read): its one extent without the loop.
    if let ([r], Some(slot)) = (regions, out.first_mut()) {
        if room > 0 {
            if let Some(e) = single_extent(*r, g) {
                *slot = e;
                return Ok(1);
            }
        }
    }
    split_loop(regions, g, max_segments, out, room, ps, span)
}

/// The one MR that covers `r`, if one can (the region is not empty and
/// spans at most `g.max_pages` pages): [`split_regions`] of `[r]` when it
/// returns one extent. `None` also for a zero page size or depth.
#[inline]
pub fn single_extent(r: Region, g: Geometry) -> Option<MrExtent> {
    let ps = NonZeroU64::new(u64::from(g.page_size))?;
    let span = ps.get().saturating_mul(u64::from(g.max_pages));
    let in_page = u64::from(r.offset) % ps;
    let len = u64::from(r.len);
    if len == 0 || in_page + len > span || u64::from(r.offset) + len > u64::from(u32::MAX) {
        return None;
    }
    Some(MrExtent {
        kind: r.kind,
        first_page: sat_u32(u64::from(r.offset) / ps),
        npages: sat_u32((in_page + len).div_ceil(ps.get())),
        offset: sat_u32(in_page),
        len: r.len,
        region_offset: 0,
        chunk_offset: 0,
    })
}

/// [`split_regions`]'s general case.
fn split_loop(
    regions: &[Region],
    g: Geometry,
    max_segments: u32,
    out: &mut [MrExtent],
    room: usize,
    ps: NonZeroU64,
    span: u64,
) -> Result<usize, PlanError> {
    let mut n = 0usize;
    let mut chunk_off: u64 = 0;
    for r in regions {
        if u64::from(r.offset) + u64::from(r.len) > u64::from(u32::MAX) {
            return Err(PlanError::BadShape);
        }
        let mut page = u64::from(r.offset) / ps;
        let mut in_page = u64::from(r.offset) % ps;
        let mut done: u64 = 0;
        let len = u64::from(r.len);
        while done < len {
            let slot = match out.get_mut(n) {
                Some(slot) if n < room => slot,
                _ => return Err(split_failure(regions, g, max_segments)),
            };
            // span > in_page, so every pass takes at least one byte.
            let take = span.saturating_sub(in_page).min(len.saturating_sub(done));
            let npages = in_page.saturating_add(take).saturating_add(ps.get() - 1) / ps;
            *slot = MrExtent {
                kind: r.kind,
                first_page: sat_u32(page),
                npages: sat_u32(npages),
                offset: sat_u32(in_page),
                len: sat_u32(take),
                region_offset: sat_u32(done),
                chunk_offset: sat_u32(chunk_off.saturating_add(done)),
            };
            n = n.saturating_add(1);
            page = page.saturating_add(npages);
            in_page = 0;
            done = done.saturating_add(take);
        }
        chunk_off = chunk_off.saturating_add(len);
    }
    if chunk_off > u64::from(u32::MAX) {
        return Err(PlanError::BadShape);
    }
    Ok(n)
}

/// Why [`split_regions`] ran out of room: the regions are malformed, or
/// need more MRs than allowed or than the output holds.
fn split_failure(regions: &[Region], g: Geometry, max_segments: u32) -> PlanError {
    match count_mrs(regions, g) {
        Err(e) => e,
        Ok(needed) if needed > max_segments => PlanError::TooManySegments { needed, max: max_segments },
        Ok(needed) => PlanError::OutputTooSmall { needed },
    }
}

/// How the Reply is expected back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyPlan {
    /// The whole Reply arrives inline in a Receive buffer; no chunk offered.
    Inline,
    /// One Write chunk covers the receive page list; head and tail arrive inline.
    WriteChunk {
        /// Bytes covered by the registered segments (`page_len`, not rounded up).
        len: u32,
        /// Registered segments (MRs) covering the page list.
        segments: u32,
        /// A [`WRITE_PAD_LEN`]-byte pad segment (connection-wide MR) follows.
        pad_segment: bool,
    },
    /// One Reply chunk covers the whole receive buffer (head, pages, tail).
    ReplyChunk {
        /// Bytes covered (head + pages + tail).
        len: u32,
        /// Registered segments (MRs).
        segments: u32,
    },
}

impl ReplyPlan {
    /// Segments of the Write chunk as encoded (including the pad segment),
    /// or `None` when there is no Write list.
    pub fn write_chunk_segments(&self) -> Option<u32> {
        match *self {
            ReplyPlan::WriteChunk { segments, pad_segment, .. } => Some(segments.saturating_add(u32::from(pad_segment))),
            _ => None,
        }
    }

    /// Segments of the Reply chunk, or `None` when there is none.
    pub fn reply_chunk_segments(&self) -> Option<u32> {
        match *self {
            ReplyPlan::ReplyChunk { segments, .. } => Some(segments),
            _ => None,
        }
    }

    /// MRs this RPC registers for the Reply (the pad segment needs none).
    pub fn mrs(&self) -> u32 {
        match *self {
            ReplyPlan::Inline => 0,
            ReplyPlan::WriteChunk { segments, .. } | ReplyPlan::ReplyChunk { segments, .. } => segments,
        }
    }

    /// The regions of the receive buffer to register, in order.
    pub fn chunk_regions(&self, rcv: &XdrBufDesc) -> Regions {
        let mut r = Regions::EMPTY;
        match self {
            ReplyPlan::Inline => {}
            ReplyPlan::WriteChunk { .. } => r.push_nonempty(rcv.region(RegionKind::Pages)),
            ReplyPlan::ReplyChunk { .. } => {
                r.push_nonempty(rcv.region(RegionKind::Head));
                r.push_nonempty(rcv.region(RegionKind::Pages));
                r.push_nonempty(rcv.region(RegionKind::Tail));
            }
        }
        r
    }

    /// Length of the header the responder sends with the Reply: empty lists
    /// for an inline Reply, the echoed Write list for a Write chunk, the
    /// echoed Reply chunk (RDMA_NOMSG) for a Reply chunk.
    pub fn reply_header_len(&self) -> u32 {
        match *self {
            ReplyPlan::Inline => INLINE_REPLY_HEADER_LEN,
            ReplyPlan::WriteChunk { .. } => call_header_len(0, self.write_chunk_segments(), None),
            ReplyPlan::ReplyChunk { segments, .. } => call_header_len(0, None, Some(segments)),
        }
    }
}

/// Plans how the Reply to an RPC comes back. `rcv` describes the receive
/// buffer (`len` = `buflen`); `ddp_allowed` is false for integrity or
/// privacy GSS flavors.
pub fn plan_reply(rcv: &XdrBufDesc, ddp_allowed: bool, limits: &Limits) -> Result<ReplyPlan, PlanError> {
    limits.validate()?;
    reply_plan(rcv, ddp_allowed, limits)
}

/// [`plan_reply`] with `limits` already validated.
#[inline]
fn reply_plan(rcv: &XdrBufDesc, ddp_allowed: bool, limits: &Limits) -> Result<ReplyPlan, PlanError> {
    let g = limits.geometry();
    let inline_recv = u64::from(limits.inline_recv);
    if u64::from(rcv.len) + u64::from(INLINE_REPLY_HEADER_LEN) <= inline_recv {
        return Ok(ReplyPlan::Inline);
    }
    let total = rcv.parts_len().ok_or(PlanError::BadShape)?;
    if ddp_allowed && rcv.flags & XDRBUF_READ != 0 && rcv.page_len > 0 {
        let segments = count_mrs(&[rcv.region(RegionKind::Pages)], g)?;
        let pad_segment = limits.write_pad_segment && rcv.page_len % 4 != 0;
        let plan = ReplyPlan::WriteChunk { len: rcv.page_len, segments, pad_segment };
        let encoded = segments.saturating_add(u32::from(pad_segment));
        let nonpayload = u64::from(rcv.head.len) + u64::from(rcv.tail.len);
        if encoded <= limits.max_segments && nonpayload + u64::from(plan.reply_header_len()) <= inline_recv {
            return Ok(plan);
        }
    }
    let regions = [rcv.region(RegionKind::Head), rcv.region(RegionKind::Pages), rcv.region(RegionKind::Tail)];
    let segments = count_mrs(&regions, g)?;
    if segments > limits.max_segments {
        return Err(PlanError::TooManySegments { needed: segments, max: limits.max_segments });
    }
    let plan = ReplyPlan::ReplyChunk { len: total, segments };
    let hdr = plan.reply_header_len();
    if hdr > limits.inline_recv {
        return Err(PlanError::HeaderTooLarge { len: hdr, max: limits.inline_recv });
    }
    Ok(plan)
}

/// How the Call is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallPlan {
    /// RDMA_MSG, the whole Call inline, no Read list.
    Inline {
        /// Copy the whole message into the pre-mapped send buffer (one SGE)
        /// rather than mapping head, page pieces and tail separately.
        pullup: bool,
    },
    /// RDMA_MSG with one Read chunk carrying the page list (bulk write payload).
    ReadChunk {
        /// XDR position of the chunk: the head length.
        position: u32,
        /// Bytes in the chunk: `page_len`, without XDR roundup.
        len: u32,
        /// Read segments (MRs).
        segments: u32,
        /// Leading tail bytes not sent: the payload's XDR pad (`tail.len % 4`).
        tail_skip: u32,
        /// Tail bytes sent inline after the head, from offset `tail_skip`
        /// (zero: no tail SGE).
        tail_len: u32,
    },
    /// RDMA_NOMSG with a Position-Zero Read chunk carrying the whole Call.
    LongCall {
        /// Bytes in the chunk (the whole Call).
        len: u32,
        /// Read segments (MRs).
        segments: u32,
    },
}

impl CallPlan {
    /// The transport procedure (RDMA_MSG or RDMA_NOMSG).
    pub fn procedure(&self) -> Proc {
        match self {
            CallPlan::LongCall { .. } => Proc::NoMsg,
            _ => Proc::Msg,
        }
    }

    /// Read list entries (= MRs registered for the Call).
    pub fn read_segments(&self) -> u32 {
        match *self {
            CallPlan::Inline { .. } => 0,
            CallPlan::ReadChunk { segments, .. } | CallPlan::LongCall { segments, .. } => segments,
        }
    }

    /// XDR position of every Read segment (`None` without a Read list).
    pub fn read_position(&self) -> Option<u32> {
        match *self {
            CallPlan::Inline { .. } => None,
            CallPlan::ReadChunk { position, .. } => Some(position),
            CallPlan::LongCall { .. } => Some(0),
        }
    }

    /// The regions of the send buffer to register, in order.
    pub fn chunk_regions(&self, snd: &XdrBufDesc) -> Regions {
        let mut r = Regions::EMPTY;
        match self {
            CallPlan::Inline { .. } => {}
            CallPlan::ReadChunk { .. } => r.push_nonempty(snd.region(RegionKind::Pages)),
            CallPlan::LongCall { .. } => {
                r.push_nonempty(snd.region(RegionKind::Head));
                r.push_nonempty(snd.region(RegionKind::Pages));
                r.push_nonempty(snd.region(RegionKind::Tail));
            }
        }
        r
    }

    /// Bytes of RPC message sent inline after the transport header.
    pub fn inline_len(&self, snd: &XdrBufDesc) -> u32 {
        match *self {
            CallPlan::Inline { .. } => snd.len,
            CallPlan::ReadChunk { tail_len, .. } => snd.head.len.saturating_add(tail_len),
            CallPlan::LongCall { .. } => 0,
        }
    }

    /// SGEs of the Send WR, the transport header's included.
    pub fn send_sges(&self, snd: &XdrBufDesc, page_size: u32) -> u32 {
        match *self {
            CallPlan::Inline { pullup: true } => 2,
            CallPlan::Inline { pullup: false } => snd.mapped_send_sges(page_size),
            CallPlan::ReadChunk { tail_len, .. } => u32::from(tail_len > 0).saturating_add(2),
            CallPlan::LongCall { .. } => 1,
        }
    }
}

/// Plans how a Call is sent, given the already planned Reply (whose chunk
/// lists share the Call's transport header). `snd` describes the send buffer
/// (`len` = head + pages + tail).
pub fn plan_call(snd: &XdrBufDesc, ddp_allowed: bool, limits: &Limits, reply: &ReplyPlan) -> Result<CallPlan, PlanError> {
    limits.validate()?;
    call_plan(snd, ddp_allowed, limits, reply)
}

/// [`plan_call`] with `limits` already validated.
#[inline]
fn call_plan(snd: &XdrBufDesc, ddp_allowed: bool, limits: &Limits, reply: &ReplyPlan) -> Result<CallPlan, PlanError> {
    let g = limits.geometry();
    if snd.parts_len() != Some(snd.len) {
        return Err(PlanError::BadShape);
    }
    let inline_send = u64::from(limits.inline_send);
    let (w, rc) = (reply.write_chunk_segments(), reply.reply_chunk_segments());

    let hdr = call_header_len(0, w, rc);
    if u64::from(hdr) + u64::from(snd.len) <= inline_send {
        let pullup = snd.len <= limits.pullup_threshold || snd.mapped_send_sges(g.page_size) > limits.max_send_sge;
        return Ok(CallPlan::Inline { pullup });
    }

    if ddp_allowed && snd.flags & XDRBUF_WRITE != 0 && snd.page_len > 0 && snd.head.len % 4 == 0 {
        let segments = count_mrs(&[snd.region(RegionKind::Pages)], g)?;
        let tail_skip = snd.tail.len % 4;
        let tail_len = snd.tail.len - tail_skip;
        let hdr = call_header_len(segments, w, rc);
        let inline = u64::from(snd.head.len) + u64::from(tail_len);
        if segments <= limits.max_segments && u64::from(hdr) + inline <= inline_send {
            return Ok(CallPlan::ReadChunk { position: snd.head.len, len: snd.page_len, segments, tail_skip, tail_len });
        }
    }

    let regions = [snd.region(RegionKind::Head), snd.region(RegionKind::Pages), snd.region(RegionKind::Tail)];
    let segments = count_mrs(&regions, g)?;
    if segments > limits.max_segments {
        return Err(PlanError::TooManySegments { needed: segments, max: limits.max_segments });
    }
    let hdr = call_header_len(segments, w, rc);
    if hdr > limits.inline_send {
        return Err(PlanError::HeaderTooLarge { len: hdr, max: limits.inline_send });
    }
    Ok(CallPlan::LongCall { len: snd.len, segments })
}

/// The plan of the common small RPC (GETATTR, ACCESS, LOOKUP, ...), made
/// without the general planner: the Call `snd` goes inline with no chunk
/// and is pulled up whole (it is at most `pullup_threshold` bytes), and a
/// Reply of up to `reply_len` bytes (the receive buffer's size) fits
/// inline. In that case it is the plan [`plan_chunks`] makes with any
/// limits that validate and these thresholds; `None` when the general
/// planner must decide.
#[inline]
pub fn plan_small(
    snd: &XdrBufDesc,
    reply_len: u32,
    inline_send: u32,
    inline_recv: u32,
    pullup_threshold: u32,
) -> Option<(CallPlan, ReplyPlan)> {
    const CALL_HEADER_LEN: u32 = call_header_len(0, None, None);
    let call_fits = u64::from(snd.len) + u64::from(CALL_HEADER_LEN) <= u64::from(inline_send);
    let reply_fits = u64::from(reply_len) + u64::from(INLINE_REPLY_HEADER_LEN) <= u64::from(inline_recv);
    if call_fits && reply_fits && snd.len <= pullup_threshold && snd.parts_len() == Some(snd.len) {
        Some((CallPlan::Inline { pullup: true }, ReplyPlan::Inline))
    } else {
        None
    }
}

/// The plan of the common bulk RPC, made without the general planner: one
/// chunk of one MR, either
///
/// - the Reply's page list in a Write chunk, the Call inline and pulled up
///   whole (an NFS READ, or READDIR or READLINK into pages), or
/// - the Call's page list in a Read chunk, the Reply inline (an NFS WRITE).
///
/// In those cases it is the plan [`plan_chunks`] makes with `ddp_allowed`
/// and any limits that validate and have these thresholds, the geometry `g`
/// and no Write pad segment; the extent is the chunk's one MR (the
/// [`single_extent`] of the page list). `None` when the general planner
/// must decide.
#[inline]
pub fn plan_one_mr(
    snd: &XdrBufDesc,
    rcv: &XdrBufDesc,
    ddp_allowed: bool,
    (inline_send, inline_recv): (u32, u32),
    pullup_threshold: u32,
    g: Geometry,
) -> Option<(CallPlan, ReplyPlan, MrExtent)> {
    // The header of a Call offering one Write chunk of one segment, and of
    // the Reply echoing it; the header of a Call with one Read segment.
    const WRITE_ONE_HEADER_LEN: u32 = call_header_len(0, Some(1), None);
    const READ_ONE_HEADER_LEN: u32 = call_header_len(1, None, None);
    const PLAIN_HEADER_LEN: u64 = INLINE_REPLY_HEADER_LEN as u64;
    let (send, recv) = (u64::from(inline_send), u64::from(inline_recv));
    if !ddp_allowed || snd.parts_len() != Some(snd.len) {
        return None;
    }
    if u64::from(rcv.len) + PLAIN_HEADER_LEN > recv {
        // The Reply does not fit inline: its page list in a Write chunk.
        rcv.parts_len()?;
        if rcv.flags & XDRBUF_READ == 0
            || u64::from(rcv.head.len) + u64::from(rcv.tail.len) + u64::from(WRITE_ONE_HEADER_LEN) > recv
            || snd.len > pullup_threshold
            || u64::from(snd.len) + u64::from(WRITE_ONE_HEADER_LEN) > send
        {
            return None;
        }
        let ext = single_extent(rcv.region(RegionKind::Pages), g)?;
        let reply = ReplyPlan::WriteChunk { len: rcv.page_len, segments: 1, pad_segment: false };
        return Some((CallPlan::Inline { pullup: true }, reply, ext));
    }
    // The Reply inline, the Call not: its page list in a Read chunk.
    let tail_skip = snd.tail.len % 4;
    let tail_len = snd.tail.len - tail_skip;
    if u64::from(snd.len) + PLAIN_HEADER_LEN <= send
        || snd.flags & XDRBUF_WRITE == 0
        || snd.head.len % 4 != 0
        || u64::from(snd.head.len) + u64::from(tail_len) + u64::from(READ_ONE_HEADER_LEN) > send
    {
        return None;
    }
    let ext = single_extent(snd.region(RegionKind::Pages), g)?;
    let call = CallPlan::ReadChunk { position: snd.head.len, len: snd.page_len, segments: 1, tail_skip, tail_len };
    Some((call, ReplyPlan::Inline, ext))
}

/// Plans how one RPC travels: the Reply first (its chunk lists go into the
/// Call's header), then the Call. The same as [`plan_reply`] followed by
/// [`plan_call`], with `limits` validated once.
pub fn plan_chunks(snd: &XdrBufDesc, rcv: &XdrBufDesc, ddp_allowed: bool, limits: &Limits) -> Result<(CallPlan, ReplyPlan), PlanError> {
    limits.validate()?;
    let reply = reply_plan(rcv, ddp_allowed, limits)?;
    let call = call_plan(snd, ddp_allowed, limits, &reply)?;
    Ok((call, reply))
}

#[cfg(test)]
mod tests {
    #[test]
    fn backward_messages_fit_the_inline_threshold() {
        use super::{backward_max_payload, MIN_MSG_HEADER_LEN};
        // A Version Two header without chunks: the fixed words, the
        // direction word, three empty lists.
        let v2_header = MIN_MSG_HEADER_LEN as u32 + 4;
        for threshold in [1024u32, 2048, 4096, 8192] {
            let max = backward_max_payload(threshold);
            assert_eq!(max + v2_header, threshold, "the largest fits exactly");
            assert!(max + 1 + v2_header > threshold, "one byte more does not");
        }
        assert_eq!(backward_max_payload(20), 0, "no underflow");
    }
    use super::super::v1::{encode_msg, ChunkLists, ReadSegment, Segment};
    use super::*;

    const PS: u32 = 4096;
    const MIB: u32 = 1 << 20;

    fn limits() -> Limits {
        Limits {
            inline_send: 4096,
            inline_recv: 4096,
            max_send_sge: 19,
            page_size: PS,
            max_pages_per_mr: 256,
            max_segments: 8,
            pullup_threshold: DEFAULT_PULLUP_THRESHOLD,
            write_pad_segment: false,
        }
    }

    fn kv(page_offset: u32, len: u32) -> Kvec {
        Kvec { page_offset, len }
    }

    /// A send buffer whose `len` is the sum of its parts.
    fn snd(head: u32, page_base: u32, page_len: u32, tail: u32, flags: u32) -> XdrBufDesc {
        XdrBufDesc { head: kv(64, head), page_base, page_len, tail: kv(64 + head, tail), len: head + page_len + tail, flags }
    }

    /// A small receive buffer (an inline reply).
    fn small_rcv() -> XdrBufDesc {
        XdrBufDesc { head: kv(0, 200), len: 200, ..Default::default() }
    }

    fn ext(kind: RegionKind, first_page: u32, npages: u32, offset: u32, len: u32, region_offset: u32, chunk_offset: u32) -> MrExtent {
        MrExtent { kind, first_page, npages, offset, len, region_offset, chunk_offset }
    }

    fn split_all(r: &Regions, l: &Limits, out: &mut [MrExtent]) -> Result<usize, PlanError> {
        split_regions(r.as_slice(), l.geometry(), l.max_segments, out)
    }

    /// Exact length of the Call's transport header for a planned RPC.
    fn header_len(call: &CallPlan, reply: &ReplyPlan) -> u32 {
        call_header_len(call.read_segments(), reply.write_chunk_segments(), reply.reply_chunk_segments())
    }

    #[test]
    fn nfs_write_1mib_page_base_0_is_one_read_segment() {
        let l = limits();
        let s = snd(120, 0, MIB, 0, XDRBUF_WRITE);
        let (call, reply) = plan_chunks(&s, &small_rcv(), true, &l).unwrap();
        assert_eq!(call, CallPlan::ReadChunk { position: 120, len: MIB, segments: 1, tail_skip: 0, tail_len: 0 });
        assert_eq!(reply, ReplyPlan::Inline);
        assert_eq!(call.procedure(), Proc::Msg);
        assert_eq!(call.read_position(), Some(120));
        assert_eq!(header_len(&call, &reply), 16 + 4 + 24 + 4 + 4);
        assert_eq!(call.inline_len(&s), 120);
        // (Read chunk MRs, Reply MRs, Send SGEs)
        assert_eq!((call.read_segments(), reply.mrs(), call.send_sges(&s, PS)), (1, 0, 2));
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 4];
        assert_eq!(split_all(&call.chunk_regions(&s), &l, &mut out), Ok(1));
        assert_eq!(out[0], ext(RegionKind::Pages, 0, 256, 0, MIB, 0, 0));
    }

    #[test]
    fn nfs_write_1mib_page_base_100_needs_a_second_mr() {
        let l = limits();
        let s = snd(120, 100, MIB, 0, XDRBUF_WRITE);
        let (call, reply) = plan_chunks(&s, &small_rcv(), true, &l).unwrap();
        assert_eq!(call, CallPlan::ReadChunk { position: 120, len: MIB, segments: 2, tail_skip: 0, tail_len: 0 });
        assert_eq!(header_len(&call, &reply), 16 + 4 + 2 * 24 + 4 + 4);
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 2];
        assert_eq!(split_all(&call.chunk_regions(&s), &l, &mut out), Ok(2));
        assert_eq!(out[0], ext(RegionKind::Pages, 0, 256, 100, 256 * PS - 100, 0, 0));
        assert_eq!(out[1], ext(RegionKind::Pages, 256, 1, 0, 100, 256 * PS - 100, 256 * PS - 100));
        assert_eq!(out[0].len + out[1].len, MIB);

        // page_base beyond the first page: the page index moves, not the offset.
        let s = snd(120, PS + 100, MIB, 0, XDRBUF_WRITE);
        assert_eq!(split_all(&plan_call(&s, true, &l, &ReplyPlan::Inline).unwrap().chunk_regions(&s), &l, &mut out), Ok(2));
        assert_eq!(out[0], ext(RegionKind::Pages, 1, 256, 100, 256 * PS - 100, 0, 0));
        assert_eq!(out[1], ext(RegionKind::Pages, 257, 1, 0, 100, 256 * PS - 100, 256 * PS - 100));
    }

    #[test]
    fn unaligned_write_payload_skips_the_pad_in_the_tail() {
        let l = limits();
        // 10001 bytes of data: xdr_write_pages put 3 pad bytes at the start
        // of the tail, then 8 bytes of further arguments.
        let s = snd(120, 0, 10_001, 3 + 8, XDRBUF_WRITE);
        let (call, _) = plan_chunks(&s, &small_rcv(), true, &l).unwrap();
        assert_eq!(call, CallPlan::ReadChunk { position: 120, len: 10_001, segments: 1, tail_skip: 3, tail_len: 8 });
        assert_eq!(call.inline_len(&s), 128);
        assert_eq!(call.send_sges(&s, PS), 3);
        // Tail holding only the pad: no tail SGE.
        let s = snd(120, 0, 10_001, 3, XDRBUF_WRITE);
        let c = plan_call(&s, true, &l, &ReplyPlan::Inline).unwrap();
        assert_eq!(c, CallPlan::ReadChunk { position: 120, len: 10_001, segments: 1, tail_skip: 3, tail_len: 0 });
        assert_eq!(c.send_sges(&s, PS), 2);
        // Lengths 1 and 2 mod 4.
        for (len, pad) in [(10_002u32, 2u32), (10_003, 1), (10_004, 0)] {
            let s = snd(120, 0, len, pad + 4, XDRBUF_WRITE);
            let c = plan_call(&s, true, &l, &ReplyPlan::Inline).unwrap();
            assert_eq!(c, CallPlan::ReadChunk { position: 120, len, segments: 1, tail_skip: pad, tail_len: 4 });
        }
    }

    #[test]
    fn nfs_read_1mib_uses_a_write_chunk() {
        let mut l = limits();
        let rcv = XdrBufDesc { head: kv(0, 200), page_base: 0, page_len: MIB, tail: kv(200, 100), len: 200 + MIB + 100, flags: XDRBUF_READ };
        let s = snd(140, 0, 0, 0, 0);
        let (call, reply) = plan_chunks(&s, &rcv, true, &l).unwrap();
        assert_eq!(reply, ReplyPlan::WriteChunk { len: MIB, segments: 1, pad_segment: false });
        assert_eq!(call, CallPlan::Inline { pullup: true });
        assert_eq!(header_len(&call, &reply), 16 + 4 + (8 + 16 + 4) + 4);
        assert_eq!(reply.reply_header_len(), 16 + 4 + (8 + 16 + 4) + 4);
        assert_eq!((call.read_segments(), reply.mrs(), call.send_sges(&s, PS)), (0, 1, 2));
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 8];
        assert_eq!(split_all(&reply.chunk_regions(&rcv), &l, &mut out), Ok(1));
        assert_eq!(out[0], ext(RegionKind::Pages, 0, 256, 0, MIB, 0, 0));

        // A shallower MR depth: 64 pages per MR -> 4 segments.
        l.max_pages_per_mr = 64;
        let (_, reply) = plan_chunks(&s, &rcv, true, &l).unwrap();
        assert_eq!(reply, ReplyPlan::WriteChunk { len: MIB, segments: 4, pad_segment: false });
        assert_eq!(split_all(&reply.chunk_regions(&rcv), &l, &mut out), Ok(4));
        assert_eq!(out[3], ext(RegionKind::Pages, 192, 64, 0, 64 * PS, 192 * PS, 192 * PS));
    }

    #[test]
    fn unaligned_read_payload_and_the_pad_segment() {
        let mut l = limits();
        let rcv = XdrBufDesc { head: kv(0, 200), page_base: 0, page_len: 5001, tail: kv(200, 100), len: 5301, flags: XDRBUF_READ };
        let p = plan_reply(&rcv, true, &l).unwrap();
        assert_eq!(p, ReplyPlan::WriteChunk { len: 5001, segments: 1, pad_segment: false });
        assert_eq!(p.write_chunk_segments(), Some(1));
        l.write_pad_segment = true;
        let p = plan_reply(&rcv, true, &l).unwrap();
        assert_eq!(p, ReplyPlan::WriteChunk { len: 5001, segments: 1, pad_segment: true });
        assert_eq!(p.write_chunk_segments(), Some(2));
        assert_eq!(p.mrs(), 1, "the pad MR is connection-wide");
        assert_eq!(p.reply_header_len(), 16 + 4 + (8 + 32 + 4) + 4);
        // Aligned payload: no pad segment even when enabled.
        let rcv = XdrBufDesc { page_len: 5000, len: 5300, ..rcv };
        assert_eq!(plan_reply(&rcv, true, &l), Ok(ReplyPlan::WriteChunk { len: 5000, segments: 1, pad_segment: false }));
        // The pad segment counts against the chunk's segment limit.
        l.max_segments = 1;
        let rcv = XdrBufDesc { page_len: 5001, len: 5301, ..rcv };
        assert_eq!(plan_reply(&rcv, true, &l), Err(PlanError::TooManySegments { needed: 3, max: 1 }));
    }

    #[test]
    fn readdir_reply_needs_a_reply_chunk() {
        let l = limits();
        let rcv = XdrBufDesc { head: kv(0, 300), page_base: 0, page_len: 32768, tail: kv(300, 0), len: 33068, flags: 0 };
        let s = snd(160, 0, 0, 0, 0);
        let (call, reply) = plan_chunks(&s, &rcv, true, &l).unwrap();
        assert_eq!(reply, ReplyPlan::ReplyChunk { len: 33068, segments: 2 });
        assert_eq!(call, CallPlan::Inline { pullup: true });
        assert_eq!(header_len(&call, &reply), 16 + 4 + 4 + 8 + 2 * 16);
        assert_eq!((call.read_segments(), reply.mrs(), call.send_sges(&s, PS)), (0, 2, 2));
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 3];
        assert_eq!(split_all(&reply.chunk_regions(&rcv), &l, &mut out), Ok(2));
        assert_eq!(out[0], ext(RegionKind::Head, 0, 1, 0, 300, 0, 0));
        assert_eq!(out[1], ext(RegionKind::Pages, 0, 8, 0, 32768, 0, 300));
        // Same with a tail: a third segment.
        let rcv = XdrBufDesc { tail: kv(300, 52), len: 33120, ..rcv };
        let p = plan_reply(&rcv, true, &l).unwrap();
        assert_eq!(p, ReplyPlan::ReplyChunk { len: 33120, segments: 3 });
        assert_eq!(split_all(&p.chunk_regions(&rcv), &l, &mut out), Ok(3));
        assert_eq!(out[2], ext(RegionKind::Tail, 0, 1, 300, 52, 0, 300 + 32768));
        // A READ whose non-payload part is too large for inline, or without
        // DDP (krb5i), also falls back to a Reply chunk.
        let rd = XdrBufDesc { head: kv(0, 4000), page_base: 0, page_len: 8192, tail: kv(0, 100), len: 12292, flags: XDRBUF_READ };
        assert_eq!(plan_reply(&rd, true, &l), Ok(ReplyPlan::ReplyChunk { len: 12292, segments: 3 }));
        let rd = XdrBufDesc { head: kv(0, 200), tail: kv(0, 100), len: 8492, ..rd };
        assert_eq!(plan_reply(&rd, false, &l), Ok(ReplyPlan::ReplyChunk { len: 8492, segments: 3 }));
        assert_eq!(plan_reply(&rd, true, &l), Ok(ReplyPlan::WriteChunk { len: 8192, segments: 1, pad_segment: false }));
    }

    #[test]
    fn reply_inline_threshold_is_exact() {
        let l = limits();
        let rcv = XdrBufDesc { head: kv(0, 4096 - 28), len: 4096 - 28, ..Default::default() };
        assert_eq!(plan_reply(&rcv, true, &l), Ok(ReplyPlan::Inline));
        let rcv = XdrBufDesc { head: kv(0, 4096 - 27), len: 4096 - 27, ..Default::default() };
        assert_eq!(plan_reply(&rcv, true, &l), Ok(ReplyPlan::ReplyChunk { len: 4069, segments: 1 }));
    }

    #[test]
    fn krb5_write_becomes_a_long_call() {
        let l = limits();
        let s = snd(200, 0, 65536, 4, XDRBUF_WRITE);
        let (call, reply) = plan_chunks(&s, &small_rcv(), false, &l).unwrap();
        assert_eq!(call, CallPlan::LongCall { len: 65740, segments: 3 });
        assert_eq!(call.procedure(), Proc::NoMsg);
        assert_eq!(call.read_position(), Some(0));
        assert_eq!(call.inline_len(&s), 0);
        assert_eq!(header_len(&call, &reply), 16 + 4 + 3 * 24 + 4 + 4);
        assert_eq!((call.read_segments(), reply.mrs(), call.send_sges(&s, PS)), (3, 0, 1));
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 3];
        assert_eq!(split_all(&call.chunk_regions(&s), &l, &mut out), Ok(3));
        assert_eq!(out[0], ext(RegionKind::Head, 0, 1, 64, 200, 0, 0));
        assert_eq!(out[1], ext(RegionKind::Pages, 0, 16, 0, 65536, 0, 200));
        assert_eq!(out[2], ext(RegionKind::Tail, 0, 1, 264, 4, 0, 65736));
        let total: u32 = out.iter().map(|e| e.len).sum();
        assert_eq!(total, s.len);
    }

    #[test]
    fn large_non_write_call_is_a_long_call() {
        let l = limits();
        // A SETACL-like call: pages but not write payload.
        let s = snd(300, 0, 8000, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::LongCall { len: 8300, segments: 2 }));
        // A write whose head is too large to travel inline with the Read chunk.
        let s = snd(4080, 0, 8192, 0, XDRBUF_WRITE);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::LongCall { len: 12272, segments: 2 }));
        // A head that is not XDR-aligned cannot give a Read chunk position.
        let s = snd(122, 0, 8192, 2, XDRBUF_WRITE);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::LongCall { len: 8316, segments: 3 }));
        // A head-only call larger than the threshold.
        let s = snd(5000, 0, 0, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::LongCall { len: 5000, segments: 1 }));
    }

    #[test]
    fn tiny_calls_are_pulled_up() {
        let l = limits();
        let s = snd(140, 0, 0, 0, 0);
        let (call, reply) = plan_chunks(&s, &small_rcv(), true, &l).unwrap();
        assert_eq!(call, CallPlan::Inline { pullup: true });
        assert_eq!(header_len(&call, &reply), 28);
        assert_eq!(call.inline_len(&s), 140);
        assert_eq!((call.read_segments(), reply.mrs(), call.send_sges(&s, PS)), (0, 0, 2));
        // A small write with its data in pages, still under the threshold.
        let s = snd(120, 0, 1000, 0, XDRBUF_WRITE);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::Inline { pullup: true }));
        // Zero-length call.
        let s = snd(0, 0, 0, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::Inline { pullup: true }));
    }

    #[test]
    fn mid_size_inline_call_is_mapped_unless_sges_run_out() {
        let mut l = limits();
        // 3000 bytes: above the pullup threshold, fits inline (28 + 3000).
        let s = snd(120, 0, 2876, 4, XDRBUF_WRITE);
        let c = plan_call(&s, true, &l, &ReplyPlan::Inline).unwrap();
        assert_eq!(c, CallPlan::Inline { pullup: false });
        assert_eq!(c.send_sges(&s, PS), 4); // header, head, one page, tail
        // Pages straddling a page boundary take two page SGEs.
        let s = snd(120, 4000, 3500, 0, XDRBUF_WRITE);
        assert_eq!(s.mapped_send_sges(PS), 4);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::Inline { pullup: false }));
        // The device allows only three SGEs: pull up instead of a chunk.
        l.max_send_sge = 3;
        let c = plan_call(&s, true, &l, &ReplyPlan::Inline).unwrap();
        assert_eq!(c, CallPlan::Inline { pullup: true });
        assert_eq!(c.send_sges(&s, PS), 2);
        // Exactly at the threshold: header + len == inline_send.
        let l = limits();
        let s = snd(4096 - 28, 0, 0, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::Inline { pullup: false }));
        let s = snd(4096 - 27, 0, 0, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Ok(CallPlan::LongCall { len: 4069, segments: 1 }));
    }

    #[test]
    fn reply_chunk_header_counts_against_the_inline_call() {
        let l = limits();
        let rc = ReplyPlan::ReplyChunk { len: 0, segments: 3 };
        // 16 + 4 + 4 + (8 + 16 * 3) = 80 bytes of header: 4016 bytes inline at most.
        assert_eq!(call_header_len(0, None, Some(3)), 80);
        let s = snd(4096 - 80, 0, 0, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &rc), Ok(CallPlan::Inline { pullup: false }));
        let s = snd(4096 - 79, 0, 0, 0, 0);
        assert_eq!(plan_call(&s, true, &l, &rc), Ok(CallPlan::LongCall { len: 4017, segments: 1 }));
    }

    #[test]
    fn read_and_write_chunk_together() {
        let l = limits();
        let s = snd(120, 0, 8192, 0, XDRBUF_WRITE);
        let rcv = XdrBufDesc { head: kv(0, 200), page_base: 0, page_len: 8192, tail: kv(0, 0), len: 8392, flags: XDRBUF_READ };
        let (call, reply) = plan_chunks(&s, &rcv, true, &l).unwrap();
        assert_eq!(call, CallPlan::ReadChunk { position: 120, len: 8192, segments: 1, tail_skip: 0, tail_len: 0 });
        assert_eq!(reply, ReplyPlan::WriteChunk { len: 8192, segments: 1, pad_segment: false });
        assert_eq!(header_len(&call, &reply), 16 + 28 + 28 + 4);
        assert_eq!((call.read_segments(), reply.mrs(), call.send_sges(&s, PS)), (1, 1, 2));
    }

    #[test]
    fn too_many_segments_and_header_too_large() {
        let mut l = limits();
        l.max_segments = 2;
        let s = snd(200, 0, 65536, 4, XDRBUF_WRITE);
        assert_eq!(plan_call(&s, false, &l, &ReplyPlan::Inline), Err(PlanError::TooManySegments { needed: 3, max: 2 }));
        // Read chunk too fragmented (depth 1 page): falls back, then fails.
        let mut l = limits();
        l.max_pages_per_mr = 1;
        let s = snd(120, 0, 65536, 0, XDRBUF_WRITE);
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Err(PlanError::TooManySegments { needed: 17, max: 8 }));
        let rcv = XdrBufDesc { head: kv(0, 200), page_base: 0, page_len: 65536, tail: kv(0, 0), len: 65736, flags: XDRBUF_READ };
        assert_eq!(plan_reply(&rcv, true, &l), Err(PlanError::TooManySegments { needed: 17, max: 8 }));
        // A Reply chunk whose echo in the Reply header cannot fit inline.
        let mut l = limits();
        l.inline_recv = 64;
        l.max_pages_per_mr = 1;
        l.max_segments = 64;
        let rcv = XdrBufDesc { head: kv(0, 100), page_base: 0, page_len: 2 * PS, tail: kv(0, 0), len: 100 + 2 * PS, flags: 0 };
        assert_eq!(plan_reply(&rcv, true, &l), Err(PlanError::HeaderTooLarge { len: 16 + 8 + 8 + 3 * 16, max: 64 }));
        // A tiny inline threshold: the Long Call header alone does not fit.
        let mut l = limits();
        l.inline_send = 64;
        let s = snd(200, 0, 65536, 4, XDRBUF_WRITE);
        assert_eq!(plan_call(&s, false, &l, &ReplyPlan::Inline), Err(PlanError::HeaderTooLarge { len: 100, max: 64 }));
    }

    #[test]
    fn small_rpc_shortcut_agrees_with_plan_chunks() {
        let mut rng = crate::testutil::Rng(0x2545_f491_4f6c_dd1d);
        let mut taken = 0;
        for _ in 0..50000 {
            // Lengths around the thresholds and the pull-up limit, and a
            // few that overflow.
            let len = |rng: &mut crate::testutil::Rng| match rng.next() % 8 {
                0 => u32::MAX - (rng.next() % 8) as u32,
                1 => 0,
                2 => (rng.next() % 64) as u32,
                _ => (rng.next() % 5000) as u32,
            };
            let (head, page_len, tail) = (len(&mut rng), len(&mut rng), len(&mut rng));
            let mut s = XdrBufDesc {
                head: kv(64, head),
                page_base: (rng.next() % 8192) as u32,
                page_len,
                tail: kv(64, tail),
                len: head.wrapping_add(page_len).wrapping_add(tail),
                flags: [0, XDRBUF_WRITE][(rng.next() % 2) as usize],
            };
            if rng.next() % 8 == 0 {
                // A length that is not the sum of the parts.
                s.len = len(&mut rng);
            }
            let reply_len = len(&mut rng);
            let rcv = XdrBufDesc {
                head: kv(0, reply_len.min(4096)),
                page_base: 0,
                page_len: reply_len.saturating_sub(4096),
                tail: kv(0, 0),
                len: reply_len,
                flags: [0, XDRBUF_READ][(rng.next() % 2) as usize],
            };
            let mut l = limits();
            l.inline_send = 28 + (rng.next() % 4200) as u32;
            l.inline_recv = 28 + (rng.next() % 4200) as u32;
            l.pullup_threshold = [0, 1024, DEFAULT_PULLUP_THRESHOLD, 8192][(rng.next() % 4) as usize];
            l.max_send_sge = MIN_SEND_SGES + (rng.next() % 30) as u32;
            let small = plan_small(&s, reply_len, l.inline_send, l.inline_recv, l.pullup_threshold);
            let general = plan_chunks(&s, &rcv, rng.next() % 2 == 0, &l);
            if let Some(plan) = small {
                taken += 1;
                assert_eq!(general, Ok(plan), "{s:?} reply {reply_len} {l:?}");
            } else if let Ok((CallPlan::Inline { pullup: true }, ReplyPlan::Inline)) = general {
                // The general planner also pulls up a call of more pieces
                // than the Send has SGEs for: only then may it find an
                // inline plan the shortcut left to it.
                assert!(s.len > l.pullup_threshold, "{s:?} reply {reply_len} {l:?}");
            }
        }
        assert!(taken > 1000, "the shortcut was taken {taken} times");
    }

    #[test]
    fn one_mr_shortcut_agrees_with_plan_chunks() {
        let mut rng = crate::testutil::Rng(0x9e37_79b9_7f4a_7c15);
        let (mut reads, mut writes, mut padded) = (0, 0, 0);
        for _ in 0..100_000 {
            // Lengths around the thresholds and an MR's reach, and a few
            // that overflow.
            let len = |rng: &mut crate::testutil::Rng| match rng.next() % 8 {
                0 => u32::MAX - (rng.next() % 8) as u32,
                1 => 0,
                2 => (rng.next() % 64) as u32,
                3 => (rng.next() % (1 << 20)) as u32,
                _ => (rng.next() % 5000) as u32,
            };
            let buf = |rng: &mut crate::testutil::Rng, flag: u32| {
                let (mut head, page_len, tail) = (len(rng), len(rng), len(rng));
                if rng.next() % 2 == 0 {
                    // XDR keeps a head in whole words.
                    head &= !3;
                }
                XdrBufDesc {
                    head: kv((rng.next() % 64) as u32, head),
                    page_base: [0, (rng.next() % 8192) as u32][(rng.next() % 2) as usize],
                    page_len,
                    tail: kv((rng.next() % 64) as u32, tail),
                    len: head.wrapping_add(page_len).wrapping_add(tail),
                    flags: [0, flag][(rng.next() % 4).min(1) as usize],
                }
            };
            let mut s = buf(&mut rng, XDRBUF_WRITE);
            if rng.next() % 8 == 0 {
                // A length that is not the sum of the parts.
                s.len = len(&mut rng);
            }
            let mut r = buf(&mut rng, XDRBUF_READ);
            if rng.next() % 2 == 0 {
                // A small call (a READ's arguments), or a small reply buffer
                // (a WRITE's result).
                s = XdrBufDesc { head: kv(64, s.len % 300), len: s.len % 300, ..Default::default() };
            } else if rng.next() % 2 == 0 {
                r = XdrBufDesc { head: kv(0, r.len % 300), len: r.len % 300, ..Default::default() };
            } else if rng.next() % 2 == 0 {
                r.len = r.parts_len().unwrap_or(r.len);
            }
            let mut l = limits();
            l.inline_send = 28 + (rng.next() % 4200) as u32;
            l.inline_recv = 28 + (rng.next() % 4200) as u32;
            l.pullup_threshold = [0, 1024, DEFAULT_PULLUP_THRESHOLD, 8192][(rng.next() % 4) as usize];
            l.max_send_sge = MIN_SEND_SGES + (rng.next() % 30) as u32;
            l.max_pages_per_mr = [1, 4, 256, u32::MAX][(rng.next() % 4) as usize];
            l.max_segments = 1 + (rng.next() % 8) as u32;
            // The edges: a call of the pull-up limit's length; a call, or
            // one offering a Write chunk, that just fits inline or just
            // does not; a reply that just fits inline or just does not; a
            // reply buffer of parts that overflow.
            let edge = (rng.next() % 3) as u32;
            let with_write = call_header_len(0, Some(1), None);
            match rng.next() % 12 {
                0 => s = XdrBufDesc { head: kv(64, l.pullup_threshold + edge), len: l.pullup_threshold + edge, ..s },
                1 => l.inline_send = s.len.saturating_add(27 + edge).max(28),
                2 => l.inline_send = s.len.saturating_add(with_write - 1 + edge).max(28),
                3 => l.inline_recv = r.len.saturating_add(27 + edge).max(28),
                4 => r.len = u32::MAX - edge,
                _ => {}
            }
            let ddp = rng.next() % 4 != 0;
            let quick = plan_one_mr(&s, &r, ddp, (l.inline_send, l.inline_recv), l.pullup_threshold, l.geometry());
            let general = plan_chunks(&s, &r, ddp, &l);
            let ctx = (s, r, ddp, l);
            match quick {
                Some((call, reply, ext)) => {
                    assert_eq!(general, Ok((call, reply)), "{ctx:?}");
                    // The extent is what registration would have split.
                    let regions = match reply {
                        ReplyPlan::WriteChunk { .. } => {
                            reads += 1;
                            reply.chunk_regions(&r)
                        }
                        _ => {
                            writes += 1;
                            padded += u32::from(s.tail.len % 4 != 0);
                            call.chunk_regions(&s)
                        }
                    };
                    let mut out = [MrExtent::default(); 8];
                    assert_eq!(split_all(&regions, &l, &mut out), Ok(1), "{ctx:?}");
                    assert_eq!(out[0], ext, "{ctx:?}");
                }
                None => {
                    // Each plan the shortcut makes, the general planner
                    // makes only where the shortcut is not exact: a call
                    // it would not pull up, or a chunk of more MRs.
                    if let Ok((call, reply)) = general {
                        let one_mr = |regions: Regions| {
                            let mut out = [MrExtent::default(); 8];
                            split_all(&regions, &l, &mut out) == Ok(1)
                        };
                        if let (CallPlan::Inline { pullup: true }, ReplyPlan::WriteChunk { segments: 1, .. }) = (call, reply) {
                            assert!(s.len > l.pullup_threshold || !one_mr(reply.chunk_regions(&r)), "{ctx:?}");
                        }
                        if let (CallPlan::ReadChunk { segments: 1, .. }, ReplyPlan::Inline) = (call, reply) {
                            assert!(!one_mr(call.chunk_regions(&s)), "{ctx:?}");
                        }
                    }
                }
            }
        }
        assert!(
            reads > 1000 && writes > 500 && padded > 100,
            "the shortcut was taken for {reads} reads and {writes} writes ({padded} with a pad in the tail)"
        );
    }

    #[test]
    fn one_region_shortcut_matches_the_loop() {
        let mut rng = crate::testutil::Rng(0x5851_f42d_4c95_7f2d);
        for _ in 0..20000 {
            let ps = [512u32, 4096, 65536][(rng.next() % 3) as usize];
            let g = Geometry { page_size: ps, max_pages: 1 + (rng.next() % 4) as u32 };
            let pick = |rng: &mut crate::testutil::Rng| match rng.next() % 4 {
                0 => u32::MAX - (rng.next() % 70000) as u32,
                1 => 0,
                _ => (rng.next() % (4 * 65536)) as u32,
            };
            let kind = [RegionKind::Head, RegionKind::Pages, RegionKind::Tail][(rng.next() % 3) as usize];
            let r = Region { kind, offset: pick(&mut rng), len: pick(&mut rng) };
            let max_segments = (rng.next() % 3) as u32;
            let (mut a, mut b) = ([MrExtent::default(); 4], [MrExtent::default(); 4]);
            let outlen = (rng.next() % 5) as usize;
            let fast = split_regions(&[r], g, max_segments, &mut a[..outlen]);
            let ps64 = NonZeroU64::new(u64::from(ps)).unwrap();
            let room = outlen.min(max_segments as usize);
            let slow = split_loop(&[r], g, max_segments, &mut b[..outlen], room, ps64, u64::from(ps) * u64::from(g.max_pages));
            assert_eq!(fast, slow, "{r:?} {g:?} max {max_segments} out {outlen}");
            if let Ok(n) = fast {
                assert_eq!(a[..n], b[..n], "{r:?} {g:?}");
            }
            // single_extent is the loop's answer when that is one extent.
            let mut c = [MrExtent::default(); 2];
            let span = u64::from(ps) * u64::from(g.max_pages);
            let one = match split_loop(&[r], g, u32::MAX, &mut c, 2, ps64, span) {
                Ok(1) => Some(c[0]),
                _ => None,
            };
            assert_eq!(single_extent(r, g), one, "{r:?} {g:?}");
        }
    }

    #[test]
    fn plan_chunks_is_plan_reply_then_plan_call() {
        let l = limits();
        let read = XdrBufDesc { head: kv(0, 120), page_base: 0, page_len: PS, tail: kv(0, 0), len: 120 + PS, flags: XDRBUF_READ };
        let readdir = XdrBufDesc { head: kv(0, 300), page_base: 0, page_len: 32768, tail: kv(300, 0), len: 33068, flags: 0 };
        // The Reply chunk's 64-byte header entry makes this Call too long to
        // go inline; with an inline Reply it would fit.
        let edge = snd(4096 - 63, 0, 0, 0, 0);
        assert_eq!(plan_call(&edge, true, &l, &ReplyPlan::Inline), Ok(CallPlan::Inline { pullup: false }));
        let cases = [
            (snd(120, 0, 0, 0, 0), read),
            (snd(120, 0, 8 * PS, 4, XDRBUF_WRITE), small_rcv()),
            (snd(120, 0, 8192, 0, XDRBUF_WRITE), read),
            (snd(200, 0, 65536, 4, 0), small_rcv()),
            (edge, readdir),
        ];
        for (s, r) in cases {
            for ddp in [true, false] {
                let reply = plan_reply(&r, ddp, &l).unwrap();
                let call = plan_call(&s, ddp, &l, &reply).unwrap();
                assert_eq!(plan_chunks(&s, &r, ddp, &l), Ok((call, reply)), "{s:?} {r:?} ddp {ddp}");
            }
        }
        let (call, _) = plan_chunks(&edge, &readdir, true, &l).unwrap();
        assert_eq!(call, CallPlan::LongCall { len: 4096 - 63, segments: 1 });
        // Either half's error comes through: the Reply's first.
        let mut deep = limits();
        deep.max_pages_per_mr = 1;
        let big_read = XdrBufDesc { head: kv(0, 200), page_base: 0, page_len: 65536, tail: kv(0, 0), len: 65736, flags: XDRBUF_READ };
        let bad_snd = XdrBufDesc { head: kv(0, 100), len: 99, ..Default::default() };
        assert_eq!(plan_chunks(&bad_snd, &big_read, true, &deep), Err(PlanError::TooManySegments { needed: 17, max: 8 }));
        assert_eq!(plan_chunks(&bad_snd, &small_rcv(), true, &deep), Err(PlanError::BadShape));
        // Limits are checked once, for both halves.
        let mut bad = limits();
        bad.page_size = 0;
        assert_eq!(plan_chunks(&snd(120, 0, 0, 0, 0), &read, true, &bad), Err(PlanError::BadLimits));
        bad = limits();
        bad.inline_recv = 8;
        assert_eq!(plan_chunks(&snd(120, 0, 0, 0, 0), &small_rcv(), true, &bad), Err(PlanError::BadLimits));
        bad = limits();
        bad.inline_send = 8;
        assert_eq!(plan_chunks(&snd(120, 0, 0, 0, 0), &small_rcv(), true, &bad), Err(PlanError::BadLimits));
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut l = limits();
        let s = XdrBufDesc { head: kv(0, 100), len: 99, ..Default::default() };
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Err(PlanError::BadShape));
        let s = XdrBufDesc { head: kv(0, u32::MAX), page_len: 1, len: 0, ..Default::default() };
        assert_eq!(plan_call(&s, true, &l, &ReplyPlan::Inline), Err(PlanError::BadShape));
        let rcv = XdrBufDesc { head: kv(0, u32::MAX), page_len: 1, len: u32::MAX, ..Default::default() };
        assert_eq!(plan_reply(&rcv, true, &l), Err(PlanError::BadShape));
        l.max_send_sge = 2;
        assert_eq!(plan_reply(&small_rcv(), true, &l), Err(PlanError::BadLimits));
        let mut l = limits();
        l.page_size = 0;
        assert_eq!(l.validate(), Err(PlanError::BadLimits));
        let g = Geometry { page_size: 0, max_pages: 4 };
        let r = Region { kind: RegionKind::Pages, offset: 0, len: 10 };
        assert_eq!(count_mrs(&[r], g), Err(PlanError::BadLimits));
        let g = Geometry { page_size: PS, max_pages: 4 };
        let r = Region { kind: RegionKind::Pages, offset: u32::MAX, len: 10 };
        assert_eq!(count_mrs(&[r], g), Err(PlanError::BadShape));
        // split_regions finds the same, whether the malformed region comes
        // first, after a good one, or only the regions' sum is too long.
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 8];
        let good = Region { kind: RegionKind::Head, offset: 0, len: 100 };
        assert_eq!(split_regions(&[r], g, 8, &mut out), Err(PlanError::BadShape));
        assert_eq!(split_regions(&[good, r], g, 8, &mut out), Err(PlanError::BadShape));
        assert_eq!(split_regions(&[good, r], g, 1, &mut out), Err(PlanError::BadShape));
        let big = Region { kind: RegionKind::Pages, offset: 0, len: u32::MAX };
        let g1 = Geometry { page_size: PS, max_pages: u32::MAX };
        assert_eq!(split_regions(&[big, good], g1, 8, &mut out), Err(PlanError::BadShape));
        assert_eq!(count_mrs(&[big, good], g1), Err(PlanError::BadShape));
        assert_eq!(split_regions(&[big], g1, 8, &mut out), Ok(1));
        // Extreme but valid: page size 1, one page per MR.
        let g = Geometry { page_size: 1, max_pages: 1 };
        let r = Region { kind: RegionKind::Pages, offset: u32::MAX - 3, len: 3 };
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 3];
        assert_eq!(split_region(r, g, &mut out), Ok(3));
        assert_eq!(out[2], ext(RegionKind::Pages, u32::MAX - 1, 1, 0, 1, 2, 2));
    }

    #[test]
    fn region_splitting_at_mr_depth_boundaries() {
        let g = Geometry { page_size: PS, max_pages: 4 };
        let mut out = [ext(RegionKind::Head, 0, 0, 0, 0, 0, 0); 4];
        let pages = |offset, len| Region { kind: RegionKind::Pages, offset, len };
        // Exactly one full MR.
        assert_eq!(split_region(pages(0, 4 * PS), g, &mut out), Ok(1));
        assert_eq!(out[0], ext(RegionKind::Pages, 0, 4, 0, 4 * PS, 0, 0));
        // One byte more: a second one-page MR.
        assert_eq!(split_region(pages(0, 4 * PS + 1), g, &mut out), Ok(2));
        assert_eq!(out[1], ext(RegionKind::Pages, 4, 1, 0, 1, 4 * PS, 4 * PS));
        // Starting at an offset: the first MR ends at its fourth page's end.
        assert_eq!(split_region(pages(1, 4 * PS - 1), g, &mut out), Ok(1));
        assert_eq!(out[0], ext(RegionKind::Pages, 0, 4, 1, 4 * PS - 1, 0, 0));
        assert_eq!(split_region(pages(1, 4 * PS), g, &mut out), Ok(2));
        assert_eq!(out[0], ext(RegionKind::Pages, 0, 4, 1, 4 * PS - 1, 0, 0));
        assert_eq!(out[1], ext(RegionKind::Pages, 4, 1, 0, 1, 4 * PS - 1, 4 * PS - 1));
        // Exactly three MRs worth, last one short.
        assert_eq!(split_region(pages(0, 11 * PS + 7), g, &mut out), Ok(3));
        assert_eq!(out[2], ext(RegionKind::Pages, 8, 4, 0, 3 * PS + 7, 8 * PS, 8 * PS));
        // A kvec crossing a page boundary inside one MR.
        let head = Region { kind: RegionKind::Head, offset: 4000, len: 200 };
        assert_eq!(split_region(head, g, &mut out), Ok(1));
        assert_eq!(out[0], ext(RegionKind::Head, 0, 2, 4000, 200, 0, 0));
        // Output slice too small: the count is reported (what the slice
        // holds then is unspecified; no caller reads it).
        let mut one = [ext(RegionKind::Tail, 9, 9, 9, 9, 9, 9); 1];
        assert_eq!(split_region(pages(0, 5 * PS), g, &mut one), Err(PlanError::OutputTooSmall { needed: 2 }));
        // Over the segment limit.
        let r = [pages(0, 5 * PS)];
        assert_eq!(split_regions(&r, g, 1, &mut out), Err(PlanError::TooManySegments { needed: 2, max: 1 }));
    }

    #[test]
    fn zero_length_regions_produce_nothing() {
        let g = Geometry { page_size: PS, max_pages: 4 };
        let mut out: [MrExtent; 0] = [];
        let z = Region { kind: RegionKind::Pages, offset: 100, len: 0 };
        assert_eq!(count_mrs(&[z], g), Ok(0));
        assert_eq!(split_region(z, g, &mut out), Ok(0));
        assert_eq!(split_regions(&[], g, 0, &mut out), Ok(0));
        // Empty parts are left out of a Long Call / Reply chunk.
        let s = snd(6000, 0, 0, 0, 0);
        let c = plan_call(&s, true, &limits(), &ReplyPlan::Inline).unwrap();
        let r = c.chunk_regions(&s);
        assert_eq!(r.len(), 1);
        assert_eq!(r.as_slice()[0].kind, RegionKind::Head);
        assert_eq!(r.total_len(), 6000);
        assert!(CallPlan::Inline { pullup: true }.chunk_regions(&s).is_empty());
        assert!(ReplyPlan::Inline.chunk_regions(&s).is_empty());
    }

    #[test]
    fn header_lengths_match_the_v1_encoder() {
        let seg = Segment { handle: 1, length: 2, offset: 3 };
        let rs = ReadSegment { position: 0, segment: seg };
        let reads = [rs; 5];
        let segs = [seg; 6];
        let mut buf = [0u8; 1024];
        for nr in [0usize, 1, 5] {
            for nw in [None, Some(1usize), Some(6)] {
                for nrc in [None, Some(1usize), Some(6)] {
                    let w: [&[Segment]; 1] = [&segs[..nw.unwrap_or(0)]];
                    let chunks = ChunkLists {
                        reads: &reads[..nr],
                        writes: if nw.is_some() { &w[..] } else { &[] },
                        reply: nrc.map(|n| &segs[..n]),
                    };
                    let len = encode_msg(&mut buf, 1, 1, &chunks).unwrap();
                    assert_eq!(
                        call_header_len(nr as u32, nw.map(|n| n as u32), nrc.map(|n| n as u32)) as usize,
                        len,
                        "reads {nr} write {nw:?} reply {nrc:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn worst_case_headers() {
        let mut l = limits();
        l.max_segments = 16;
        assert_eq!(l.max_call_header_len(), 16 + (4 + 16 * 24) + (12 + 16 * 16) + 4);
        assert_eq!(l.max_reply_header_len(), 16 + 4 + (12 + 16 * 16) + 4);
        assert_eq!(call_header_len(u32::MAX, Some(u32::MAX), Some(u32::MAX)), u32::MAX);
    }
}
