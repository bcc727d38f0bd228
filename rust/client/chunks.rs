// SPDX-License-Identifier: GPL-2.0

//! Chunks (RFC 8166 section 3.4 and 4.2): what a call offered for its
//! reply, and judging the chunks a reply returns against it.

use kernel::prelude::*;

use crate::verbs::{self, FillSg, Registration, SgWriter};
use crate::{
    kapi::{
        page::{Dir, Inbound, Outbound, PageRef},
        rpc::{LentRqst, XdrBuf},
        PAGE_SIZE,
    },
    proto::{plan, v1},
};

use super::{conn::Endpoint, marshal::Planned, reply::Kind, slots::ReqState};

/// Most memory regions one call registers: its Read, Write and Reply
/// chunks together. The Send queue always has room for one Send with that
/// many REG_MRs in front of it, and a connection starts with that many.
pub(super) const MAX_MRS: usize = 8;

/// Most segments one Write or Reply chunk is offered with.
pub(super) const MAX_CHUNK_SEGMENTS: usize = MAX_MRS / 2;

/// Which buffer of a request a chunk's regions cover, by the way its data
/// moves: a call's (`Outbound`: the server reads it, a Read chunk) or a
/// reply's (`Inbound`: the server writes it, a Write or Reply chunk).
pub(super) trait ChunkDir: Dir + Sized {
    /// The call's buffer, or the reply's.
    fn buf<'a>(rqst: &'a LentRqst<'_>) -> XdrBuf<'a, Self>;
}

impl ChunkDir for Outbound {
    #[inline(always)]
    fn buf<'a>(rqst: &'a LentRqst<'_>) -> XdrBuf<'a, Self> {
        rqst.call_buf()
    }
}

impl ChunkDir for Inbound {
    #[inline(always)]
    fn buf<'a>(rqst: &'a LentRqst<'_>) -> XdrBuf<'a, Self> {
        rqst.reply_buf()
    }
}

/// How a request's reply will come back.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum ReplyShape {
    #[default]
    Inline,
    /// Its payload into the Write chunk offered.
    WriteChunk,
    /// Whole into the Reply chunk offered.
    ReplyChunk,
}

/// What a reply's chunks say against what its call offered.
pub(super) enum Verdict {
    /// All of it inline.
    Inline,
    /// Its payload in the Write chunk: this many bytes.
    Written(u64),
    /// Whole in the Reply chunk: this many bytes.
    ReplyWritten(u64),
    /// The server claims memory it was not offered.
    Foreign(v1::ReturnedChunkError),
    /// RDMA_ERROR.
    Error,
    /// Chunks we never offered, NOMSG without our Reply chunk, or a retired
    /// procedure.
    Bad,
}

/// What a reply's chunk lists return, told from its decoded header before
/// the call it answers is looked up: all that judging it against the call's
/// offer needs, a tag and one segment array, where the decoded header is
/// three lists (kept across the lookup, it would be stored and read back).
#[derive(Clone, Copy)]
pub(super) enum Returned<'a> {
    /// RDMA_MSG without chunks: all of the reply inline.
    Inline,
    /// RDMA_MSG with one Write chunk and no other chunk.
    WriteChunk(v1::SegmentArray<'a>),
    /// RDMA_NOMSG with a Reply chunk and no other chunk.
    ReplyChunk(v1::SegmentArray<'a>),
    /// Any other RDMA_MSG or RDMA_NOMSG: chunks no reply carries.
    Bad,
    /// RDMA_ERROR.
    Error,
    /// RDMA_MSGP or RDMA_DONE (retired by RFC 8166), or RDMA2_OPTIONAL:
    /// no reply proper.
    Other,
}

impl<'a> Returned<'a> {
    /// What the header of `kind` returns.
    #[inline(always)]
    pub(super) fn of(kind: &Kind<'a>) -> Self {
        match kind {
            Kind::Msg(c, _) if c.is_none() => Returned::Inline,
            Kind::Msg(c, _) if c.reads.is_empty() && c.reply.is_none() => {
                c.writes.single().map_or(Returned::Bad, Returned::WriteChunk)
            }
            Kind::NoMsg(c, _) if c.reads.is_empty() && c.writes.is_empty() => {
                c.reply.map_or(Returned::Bad, Returned::ReplyChunk)
            }
            Kind::Msg(..) | Kind::NoMsg(..) => Returned::Bad,
            Kind::Error => Returned::Error,
            Kind::Optional(_) | Kind::Retired => Returned::Other,
        }
    }

    /// True for a reply proper (RDMA_MSG or RDMA_NOMSG), whose credit
    /// field grants credits: not an RDMA_ERROR (Version Two's answer to a
    /// refused probe says nothing of the server's Receives), nor the
    /// retired RDMA_MSGP and RDMA_DONE, whose direction we cannot tell
    /// (RFC 8167 section 4.1).
    #[inline]
    pub(super) fn grants(&self) -> bool {
        !matches!(self, Returned::Error | Returned::Other)
    }
}

impl ReqState {
    /// Judges a reply that returns `returned` against what the call
    /// offered. Inlined into the Receive handler.
    #[inline(always)]
    pub(super) fn judge(&self, returned: Returned<'_>) -> Verdict {
        // Only a returned chunk needs the offer: an inline reply (a
        // WRITE's) does not look it up.
        let offered = || self.segs.get(..self.offered).unwrap_or(&[]);
        match (returned, self.reply) {
            (Returned::Inline, _) => Verdict::Inline,
            (Returned::WriteChunk(r), ReplyShape::WriteChunk) => match v1::check_returned_chunk(offered(), &r) {
                Ok(n) => Verdict::Written(n),
                Err(e) => Verdict::Foreign(e),
            },
            (Returned::ReplyChunk(r), ReplyShape::ReplyChunk) => match v1::check_returned_chunk(offered(), &r) {
                Ok(n) => Verdict::ReplyWritten(n),
                Err(e) => Verdict::Foreign(e),
            },
            (Returned::Error, _) => Verdict::Error,
            _ => Verdict::Bad,
        }
    }
}

pub(super) fn segment(r: verbs::Registered) -> v1::Segment {
    v1::Segment { handle: r.handle, length: r.length, offset: r.offset }
}

/// Registers the Read chunk the plan `p` asks for (it has one) into `reg`,
/// its segments into `out`; returns how many there are.
pub(super) fn register_read_chunk(
    ep: &Endpoint,
    rqst: &LentRqst<'_>,
    p: &Planned,
    reg: &mut Registration,
    out: &mut [v1::ReadSegment; MAX_CHUNK_SEGMENTS],
) -> Result<usize> {
    // A Read chunk for the call's data, or a Long Call's whole message.
    let position = p.shape.call.read_position().ok_or(EIO)?;
    // The usual Read chunk: a page list one region covers (a write of up
    // to the region depth).
    let one = match p.shape.call {
        plan::CallPlan::ReadChunk { segments: 1, .. } => {
            plan::single_extent(p.shape.snd.region(plan::RegionKind::Pages), p.limits.geometry())
        }
        _ => None,
    };
    let regions = p.shape.call.chunk_regions(&p.shape.snd);
    register_extents::<Outbound>(ep, rqst, p, reg, regions.as_slice(), one, |i, segment| {
        if let Some(seg) = out.get_mut(i) {
            *seg = v1::ReadSegment { position, segment };
        }
    })
}

/// Registers the Write or Reply chunk (the reply's destination) the plan
/// `p` asks for (it has one) into `reg`, its segments straight into the
/// request's record of what it offered; returns how many there are.
pub(super) fn register_reply_chunk(
    ep: &Endpoint,
    rqst: &LentRqst<'_>,
    p: &Planned,
    reg: &mut Registration,
    segs: &mut [v1::Segment; MAX_CHUNK_SEGMENTS],
) -> Result<usize> {
    // The usual reply chunk: a Write chunk for a page list one region
    // covers (a read of up to the region depth).
    let one = match p.shape.reply {
        plan::ReplyPlan::WriteChunk { segments: 1, pad_segment: false, .. } => {
            plan::single_extent(p.rcv.region(plan::RegionKind::Pages), p.limits.geometry())
        }
        _ => None,
    };
    let regions = p.shape.reply.chunk_regions(&p.rcv);
    register_extents::<Inbound>(ep, rqst, p, reg, regions.as_slice(), one, |i, segment| {
        if let Some(seg) = segs.get_mut(i) {
            *seg = segment;
        }
    })
}

/// Registers the pieces `regions` of the chunk the plan `p` asks for in
/// `rqst`'s buffer of direction `D` (the call's data for a Read chunk, the
/// reply's room for a Write or Reply chunk) and hands each one's segment
/// to `put` with its index; returns how many there are. `one` is the
/// chunk's single extent when the planner found one (the usual case),
/// which skips gathering and splitting its regions.
#[inline]
fn register_extents<D: ChunkDir>(
    ep: &Endpoint,
    rqst: &LentRqst<'_>,
    p: &Planned,
    reg: &mut Registration,
    regions: &[plan::Region],
    one: Option<plan::MrExtent>,
    mut put: impl FnMut(usize, v1::Segment),
) -> Result<usize> {
    let xid = p.shape.xid;
    if let Some(ext) = one {
        let seg = ep.conn.register::<D>(reg, xid, ExtentSg { buf: D::buf(rqst), ext: &ext })?;
        put(0, segment(seg));
        return Ok(1);
    }
    let mut exts = [plan::MrExtent::default(); MAX_CHUNK_SEGMENTS];
    let n = plan::split_regions(regions, p.limits.geometry(), p.limits.max_segments, &mut exts).map_err(|_| EIO)?;
    for (i, ext) in exts.iter().enumerate().take(n) {
        let seg = ep.conn.register::<D>(reg, xid, ExtentSg { buf: D::buf(rqst), ext })?;
        put(i, segment(seg));
    }
    Ok(n)
}

/// The planner's view of a request's buffer `b`: for a call its data
/// (`len`), for a reply its room (`buflen`).
#[inline]
pub(super) fn desc<D: Dir>(b: XdrBuf<'_, D>) -> plan::XdrBufDesc {
    let ((head_offset, head_len), (tail_offset, tail_len)) = (b.head(), b.tail());
    let (page_base, page_len) = b.pages();
    plan::XdrBufDesc {
        head: plan::Kvec { page_offset: head_offset, len: head_len },
        page_base,
        page_len,
        tail: plan::Kvec { page_offset: tail_offset, len: tail_len },
        len: if D::INBOUND { b.room() } else { b.data_len() },
        flags: b.flags(),
    }
}

/// The pages of `ext`, a piece of `buf` the planner chose, as a region's
/// scatterlist ([`fill_sg`]): a value, so that it is inlined into the
/// registration ([`FillSg`]).
pub(super) struct ExtentSg<'a, 'b, D: Dir> {
    pub(super) buf: XdrBuf<'a, D>,
    pub(super) ext: &'b plan::MrExtent,
}

impl<D: Dir> FillSg<D> for ExtentSg<'_, '_, D> {
    #[inline(always)]
    fn fill(self, w: &mut SgWriter<'_, D>) -> Result {
        fill_sg(self.buf, self.ext, w)
    }
}

/// Fills `w` with the pages of `ext`, a piece of `b` the planner chose.
/// The kind of piece is tested once, not for every page.
#[inline(always)]
pub(super) fn fill_sg<D: Dir>(b: XdrBuf<'_, D>, ext: &plan::MrExtent, w: &mut SgWriter<'_, D>) -> Result {
    match ext.kind {
        // A page list's pages in one call (a 1 MiB chunk names 256); the
        // one page of a 4 KiB READ or WRITE as any other, which costs less.
        plan::RegionKind::Pages if ext.npages > 1 => {
            w.push_run(b.page_run(ext.first_page, ext.npages).ok_or(EINVAL)?, ext.offset, ext.len)
        }
        plan::RegionKind::Pages => fill_sg_with(ext, w, |n| b.page(n)),
        plan::RegionKind::Head => fill_sg_with(ext, w, |n| b.head_page(n)),
        plan::RegionKind::Tail => fill_sg_with(ext, w, |n| b.tail_page(n)),
    }
}

/// [`fill_sg`] for one kind of piece, whose page `n` is `page(n)`.
#[inline(always)]
fn fill_sg_with<'a, D: Dir>(
    ext: &plan::MrExtent,
    w: &mut SgWriter<'_, D>,
    page: impl Fn(u32) -> Option<PageRef<'a, D>>,
) -> Result {
    let (mut left, mut off, mut n) = (ext.len, ext.offset, ext.first_page);
    for _ in 0..ext.npages {
        let len = PAGE_SIZE.saturating_sub(off).min(left);
        w.push(page(n).ok_or(EINVAL)?, len, off)?;
        // `len <= left`; past the last page index there is no page, so a
        // saturated index is refused above.
        left = left.wrapping_sub(len);
        off = 0;
        n = n.saturating_add(1);
    }
    Ok(())
}

/// Calls `f` with each piece (page, offset in it, length) of the page list
/// of `b`, in order.
pub(super) fn for_each_page<'a>(
    b: XdrBuf<'a, Outbound>,
    mut f: impl FnMut(PageRef<'a, Outbound>, u32, u32) -> Result,
) -> Result {
    let (page_base, page_len) = b.pages();
    let mut left = page_len;
    let mut idx = page_base / PAGE_SIZE;
    let mut off = page_base % PAGE_SIZE;
    while left > 0 {
        // `off < PAGE_SIZE` and `len <= left`: nothing wraps, and the page
        // index stays below the page count SUNRPC's lengths allow.
        let len = PAGE_SIZE.wrapping_sub(off).min(left);
        f(b.page(idx).ok_or(EINVAL)?, off, len)?;
        left = left.wrapping_sub(len);
        off = 0;
        idx = idx.wrapping_add(1);
    }
    Ok(())
}
