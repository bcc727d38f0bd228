// SPDX-License-Identifier: GPL-2.0

//! Replies (RFC 8166 sections 4 and 5): an RDMA_MSG transport header and
//! the reply copied after it into one Send; a reply too long for that
//! written into the call's Reply chunk by RDMA Write, chained ahead of an
//! RDMA_NOMSG Send; RDMA_ERROR for a call this server cannot carry
//! (ERR_CHUNK) or a version it does not speak (ERR_VERS).

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use super::{
    few::Few,
    recv::{CallChunks, ConnState, MAX_WRITE_CHUNKS},
    stats::COUNTERS,
    xprt::ServerXprt,
};
use crate::{
    kapi::{
        errno,
        page::{Dir, OwnedPages, Outbound, PageRef},
        svc::SendRqst,
        trace::{self, ChunkType},
        PAGE_SIZE,
    },
    proto::{responder, v1, v2::Version},
    verbs::{Connection, Copying, RwChunk, RwSeg, SendWriter},
};

/// How long a reply waits for a Send buffer before the connection is
/// given up.
pub(super) const SEND_WAIT_MS: u32 = 10_000;

impl ConnState {
    /// Sends the reply of `x`'s request `rq`: its result payloads written
    /// into the Write chunks the call offered for them and the rest
    /// inline; or all of it inline when it fits, whether or not the call
    /// offered a Reply chunk (the header then returns none: the reply is
    /// in the Send); or, larger than the client takes inline, into the
    /// call's Reply chunk. What cannot be carried is answered with
    /// RDMA_ERROR (ERR_CHUNK). Waits for a Send buffer when all are in
    /// use. A reply that cannot be sent closes the connection: its call
    /// would otherwise wait for ever.
    pub(super) fn sendto(&self, x: &ServerXprt, conn: &Connection<ServerXprt>, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        let r = self.send_reply(conn, rq);
        if r.is_err() {
            x.svc().close_later();
        } else if self.version.get() == Version::V2 && !self.initxch_sent.load(Ordering::Acquire) {
            // The client has a Receive for it now: the first reply
            // answered its only call.
            self.send_initxch_once(conn, rq.xid());
        }
        r
    }

    fn send_reply(&self, conn: &Connection<ServerXprt>, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        let xid = rq.xid();
        if let Some(c) = rq.ctxt().filter(|c| c.has_payload()) {
            return self.send_write_chunks(conn, rq, c);
        }
        // The Write chunks offered go back, nothing written into them.
        let unused = rq.ctxt().filter(|c| c.writes().next().is_some()).map(unused_writes).transpose()?;
        let mut lists = [&[][..]; MAX_WRITE_CHUNKS];
        let nchunks = match (rq.ctxt(), &unused) {
            (Some(c), Some(u)) => split_chunks(c.writes(), u, &mut lists),
            _ => 0,
        };
        let chunks = v1::ChunkLists { reads: &[], writes: lists.get(..nchunks).unwrap_or_default(), reply: None };
        let max = self.send_max() as usize;
        let inv = self.invalidate(rq);
        loop {
            let seen = self.sends_seen();
            let sent = conn.send_copied_invalidating(inv, |w: &mut SendWriter<'_, Copying>| {
                let room = w.room();
                let room = room.get_mut(..max.min(room.len())).unwrap_or_default();
                let n = self.encode_reply_header(room, xid, false, &chunks)?;
                let m = rq.copy_reply(room.get_mut(n..).unwrap_or_default())?;
                w.copied(n.saturating_add(m))
            });
            match sent {
                Ok(()) => {
                    trace::svc_reply(xid, ChunkType::Inline as u32, rq.reply_len(), inv.unwrap_or(0));
                    return Ok(rq.reply_len());
                }
                Err(e) if e == errno::ENOBUFS() => self.wait_sends(seen, SEND_WAIT_MS)?,
                Err(e) if e == errno::EMSGSIZE() => {
                    return match rq.ctxt().filter(|c| !c.reply().is_empty()) {
                        Some(c) => self.send_reply_chunk(conn, rq, c.reply(), chunks.writes),
                        None => self.send_error_chunk(conn, xid).map(|()| 0),
                    };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the reply of `rq` into the Reply chunk `offered` by RDMA
    /// Write and sends an RDMA_NOMSG header returning the chunk, the Send
    /// chained after the Writes (RFC 8166 section 3.5.4). A chunk too small
    /// for the reply gets ERR_CHUNK.
    fn send_reply_chunk(
        &self,
        conn: &Connection<ServerXprt>,
        rq: &SendRqst<'_, CallChunks>,
        offered: &[v1::Segment],
        unused: &[&[v1::Segment]],
    ) -> Result<u32> {
        let (xid, len) = (rq.xid(), rq.reply_len());
        let mut ret = blank_segments(offered.len())?;
        let Ok(n) = v1::fill_chunk(offered, len, &mut ret) else {
            return self.send_error_chunk(conn, xid).map(|()| 0);
        };
        let returned = ret.get(..n).unwrap_or_default();
        let copy;
        let mut local = None;
        if !flat_pieces(&[returned], |_, pos| rq.reply_piece(pos), &mut local)? {
            copy = copy_out(rq, 0, len)?;
            local = None;
            if !flat_pieces(&[returned], |_, pos| owned_piece(&copy, pos), &mut local)? {
                return Err(EINVAL);
            }
        }
        COUNTERS.write_bytes.fetch_add(u64::from(len), Ordering::Relaxed);
        let mut segs = rw_segs();
        rw_segments(returned.iter(), local.as_deref().unwrap_or_default(), &mut segs)?;
        let inv = self.invalidate(rq);
        self.write_and_send(conn, &segs, inv, |w: &mut SendWriter<'_, Copying>| {
            w.copy(|b| {
                let lists = v1::ChunkLists { reads: &[], writes: unused, reply: Some(returned) };
                self.encode_reply_header(b, xid, true, &lists)
            })
        })?;
        trace::svc_reply(xid, ChunkType::ReplyChunk as u32, len, inv.unwrap_or(0));
        Ok(len)
    }

    /// Writes the result payloads of `rq`'s reply into the Write chunks
    /// `c` offered for them (RFC 8166 section 3.5.3) and sends the rest of
    /// the reply inline after an RDMA_MSG header returning the Write list
    /// with the lengths written, the Send chained after the Writes. Each
    /// payload's XDR pad is neither written nor sent. A reply whose rest
    /// does not fit inline gets ERR_CHUNK.
    fn send_write_chunks(&self, conn: &Connection<ServerXprt>, rq: &SendRqst<'_, CallChunks>, c: &CallChunks) -> Result<u32> {
        let (xid, len) = (rq.xid(), rq.reply_len());
        // Each Write chunk returned with the bytes of its payload (none
        // for a chunk no payload went to), one after the other; the
        // payloads, kept out of the inline part.
        // The chunks offered, found once.
        let mut offered = [&[][..]; MAX_WRITE_CHUNKS];
        let (mut nwrites, mut nsegs) = (0usize, 0usize);
        for (o, w) in offered.iter_mut().zip(c.writes()) {
            *o = w;
            nwrites += 1;
            nsegs += w.len();
        }
        let offered = offered.get(..nwrites).unwrap_or_default();
        let mut returned = blank_segments(nsegs)?;
        let mut skip = [(0u32, 0u32); MAX_WRITE_CHUNKS];
        let (mut nskip, mut written, mut first) = (0, 0u64, 0usize);
        for (&offered, payload) in offered.iter().zip(c.payloads().iter()) {
            let (at, plen) = payload.unwrap_or((0, 0));
            let ret = returned.get_mut(first..).ok_or(EINVAL)?;
            first += offered.len();
            // Never: `note_payload` checked the payload fits.
            // Every offered segment comes back.
            v1::fill_chunk(offered, plen, ret).map_err(|_| E2BIG)?;
            written += u64::from(plen);
            if plen > 0 {
                // The payload and its XDR pad stay out of the inline part.
                let end = at.checked_add(plen.next_multiple_of(4)).ok_or(EINVAL)?.min(len);
                *skip.get_mut(nskip).ok_or(EINVAL)? = (at, end);
                nskip += 1;
            }
        }
        // Each chunk's segments as returned: the Write list sent back.
        let mut lists = [&[][..]; MAX_WRITE_CHUNKS];
        let nchunks = split_chunks(offered.iter().copied(), &returned, &mut lists);
        let lists = lists.get(..nchunks).unwrap_or_default();
        let mut inline = [(0u32, 0u32); MAX_WRITE_CHUNKS + 1];
        let parts = responder::inline_ranges(len, skip.get(..nskip).unwrap_or_default(), &mut inline)
            .map_err(|_| EINVAL)?;
        // The payloads' bytes where the reply holds them (each from where
        // its payload starts), or copied into pages of ours first.
        let copies;
        let start = |i: usize| c.payloads().get(i).copied().flatten().map(|(at, _)| at);
        let mut local = None;
        if !flat_pieces(lists, |i, pos| rq.reply_piece(start(i)?.checked_add(pos)?), &mut local)? {
            let mut v = KVec::with_capacity(nchunks, GFP_KERNEL)?;
            for payload in c.payloads() {
                let (at, plen) = payload.unwrap_or((0, 0));
                v.push(copy_out(rq, at, plen)?, GFP_KERNEL)?;
            }
            copies = v;
            local = None;
            if !flat_pieces(lists, |i, pos| owned_piece(copies.get(i)?, pos), &mut local)? {
                return Err(EINVAL);
            }
        }
        COUNTERS.write_bytes.fetch_add(written, Ordering::Relaxed);
        let mut segs = rw_segs();
        rw_segments(returned.iter(), local.as_deref().unwrap_or_default(), &mut segs)?;
        let max = self.send_max() as usize;
        let inv = self.invalidate(rq);
        let sent = self.write_and_send(conn, &segs, inv, |w: &mut SendWriter<'_, Copying>| {
            w.copy(|b| {
                let b = b.get_mut(..max.min(b.len())).unwrap_or_default();
                let chunks = v1::ChunkLists { reads: &[], writes: lists, reply: None };
                let mut n = self.encode_reply_header(b, xid, false, &chunks)?;
                for &(from, to) in inline.iter().take(parts) {
                    let part = b.get_mut(n..n + (to - from) as usize).ok_or_else(errno::EMSGSIZE)?;
                    rq.copy_reply_at(from, part)?;
                    n += part.len();
                }
                Ok(n)
            })
        });
        match sent {
            Ok(()) => {
                trace::svc_reply(xid, ChunkType::WriteList as u32, len, inv.unwrap_or(0));
                Ok(len)
            }
            // The rest does not fit inline: with a Reply chunk too, step 2
            // does not combine them.
            Err(e) if e == errno::EMSGSIZE() => self.send_error_chunk(conn, xid).map(|()| 0),
            Err(e) => Err(e),
        }
    }

    /// The client's rkey the reply to `rq` invalidates with its Send, if
    /// the client takes Send With Invalidate and the call named one
    /// handle (RFC 8797 section 4.1, xcharext section 3.2).
    fn invalidate(&self, rq: &SendRqst<'_, CallChunks>) -> Option<u32> {
        if !self.takes_remote_invalidate() {
            return None;
        }
        rq.ctxt().and_then(|c| c.invalidate)
    }

    /// Prepares an R/W operation with `prepare`, again after waiting (for
    /// Sends to complete, which destroys the writes they carried) while
    /// the connection holds as many as it was made for.
    pub(super) fn rw_prepare_waiting<D: Dir>(&self, mut prepare: impl FnMut() -> Result<RwChunk<D>>) -> Result<RwChunk<D>> {
        loop {
            let seen = self.sends_seen();
            match prepare() {
                Ok(op) => return Ok(op),
                Err(e) if e == EBUSY => self.wait_sends(seen, SEND_WAIT_MS)?,
                Err(e) => return Err(e),
            }
        }
    }

    /// Posts the RDMA Writes `segs` chained ahead of a Send that `fill`
    /// writes (the message naming what they wrote), a Send With
    /// Invalidate of `invalidate` if one, waiting for a Send buffer when
    /// all are in use. Returns once posted: the Send's completion ends
    /// the writes and lets their pages go. A message `fill` refuses
    /// (`EMSGSIZE`) writes nothing.
    fn write_and_send(
        &self,
        conn: &Connection<ServerXprt>,
        segs: &[RwSeg<'_, '_, Outbound>],
        invalidate: Option<u32>,
        fill: impl Fn(&mut SendWriter<'_, Copying>) -> Result,
    ) -> Result {
        let mut writes = self.rw_prepare_waiting(|| conn.rw_prepare(segs, 0))?;
        loop {
            let seen = self.sends_seen();
            match conn.send_after_writes(writes, invalidate, |w: &mut SendWriter<'_, Copying>| fill(w)) {
                Ok(()) => return Ok(()),
                // No Send buffer free: the Writes wait with it.
                Err((e, Some(w))) if e == errno::ENOBUFS() => {
                    writes = w;
                    if let Err(e) = self.wait_sends(seen, SEND_WAIT_MS) {
                        let _ = conn.rw_discard(writes);
                        return Err(e);
                    }
                }
                Err((e, Some(w))) => {
                    let _ = conn.rw_discard(w);
                    return Err(e);
                }
                Err((e, None)) => return Err(e),
            }
        }
    }
}

/// Bytes `[at, at + len)` of the reply of `rq`, copied into pages of our
/// own (the RDMA Writes read them after `sendto`'s thread moved on): for
/// a reply whose bytes do not all lie in its own pages.
fn copy_out(rq: &SendRqst<'_, CallChunks>, at: u32, len: u32) -> Result<OwnedPages> {
    COUNTERS.chunks_copied.fetch_add(1, Ordering::Relaxed);
    let npages = len.div_ceil(PAGE_SIZE) as usize;
    let pages = OwnedPages::new(npages)?;
    let mut bounce = KVec::from_elem(0u8, PAGE_SIZE.min(len) as usize, GFP_KERNEL)?;
    for i in 0..npages {
        let done = i as u32 * PAGE_SIZE;
        let part = bounce.get_mut(..(len - done).min(PAGE_SIZE) as usize).ok_or(EINVAL)?;
        rq.copy_reply_at(at.checked_add(done).ok_or(EINVAL)?, part)?;
        pages.page(i).ok_or(EINVAL)?.write(0, part)?;
    }
    Ok(pages)
}

/// One piece of the local side of an RDMA Read or Write: a page, an
/// offset in it and a length, inside the page.
pub(super) type Piece<'p, D> = (PageRef<'p, D>, u32, u32);

/// Most pieces kept in place: a 4 KiB payload at any offset in its pages
/// takes two, an 8 KiB one three.
const FEW_PIECES: usize = 4;

/// The pieces of a chunk's or a call's segments, in order.
pub(super) type Pieces<'p, D> = Few<Piece<'p, D>, FEW_PIECES>;

/// Most segments kept in place (a chunk's, or a reply's Write chunks'):
/// clients offer one or two per chunk.
const FEW_SEGMENTS: usize = 4;

/// Segments, as returned in a reply.
pub(super) type Segments = Few<v1::Segment, FEW_SEGMENTS>;

/// `n` segments for a reply to fill in (returned chunks), all zero.
#[inline]
fn blank_segments(n: usize) -> Result<Segments> {
    Segments::filled(v1::Segment::default(), n)
}

/// The RDMA Reads or Writes of a chunk or a call, one per segment.
pub(super) type RwSegs<'a, 'p, D> = Few<RwSeg<'a, 'p, D>, FEW_SEGMENTS>;

/// An empty [`RwSegs`].
pub(super) fn rw_segs<'a, 'p, D: Dir>() -> RwSegs<'a, 'p, D> {
    Few::new(RwSeg { rkey: 0, addr: 0, pages: &[] })
}

/// The local side of the segments of `chunks` (each chunk's segments),
/// one chunk after the other, as one list of pieces in order, into `out`
/// (which is `None`): `piece(chunk, pos)` finds the page holding byte
/// `pos` of chunk `chunk`'s bytes, the offset there and how many bytes
/// follow in that page. False if it finds no page for a byte.
/// [`rw_segments`] cuts the list into the segments again.
pub(super) fn flat_pieces<'p, D: Dir>(
    chunks: &[&[v1::Segment]],
    mut piece: impl FnMut(usize, u32) -> Option<Piece<'p, D>>,
    out: &mut Option<Pieces<'p, D>>,
) -> Result<bool> {
    for (i, &segs) in chunks.iter().enumerate() {
        let mut pos = 0u32;
        for seg in segs {
            let mut left = seg.length;
            while left > 0 {
                let Some((page, off, n)) = piece(i, pos) else { return Ok(false) };
                let take = left.min(n);
                // Made with the first piece: a page reference has no empty
                // value to fill the room with.
                Few::push_to(out, (page, off, take))?;
                pos = pos.checked_add(take).ok_or(EINVAL)?;
                left -= take;
            }
        }
    }
    Ok(true)
}

/// The piece of `pages` (their bytes in order) holding byte `pos`.
pub(super) fn owned_piece<D: Dir>(pages: &OwnedPages, pos: u32) -> Option<Piece<'_, D>> {
    let off = pos % PAGE_SIZE;
    let page = pages.page((pos / PAGE_SIZE) as usize)?;
    Some((page.page_ref::<D>(), off, PAGE_SIZE - off))
}

/// Adds to `out` an RDMA Write or Read for each segment of `segs` that
/// takes bytes, from or into its pieces, the next ones of `pieces` (as
/// [`flat_pieces`] made them for these segments, in order).
pub(super) fn rw_segments<'a, 'p, 's, D: Dir>(
    segs: impl IntoIterator<Item = &'s v1::Segment>,
    pieces: &'a [Piece<'p, D>],
    out: &mut RwSegs<'a, 'p, D>,
) -> Result {
    let mut rest = pieces;
    for seg in segs.into_iter().filter(|s| s.length > 0) {
        // The pieces that make up this segment's length.
        let (mut n, mut sum) = (0usize, 0u32);
        while sum < seg.length {
            let (_, _, l) = rest.get(n).ok_or(EINVAL)?;
            sum = sum.checked_add(*l).ok_or(EINVAL)?;
            n += 1;
        }
        if sum != seg.length {
            return Err(EINVAL);
        }
        let (these, more) = rest.split_at(n);
        rest = more;
        out.push(RwSeg { rkey: seg.handle, addr: seg.offset, pages: these })?;
    }
    Ok(())
}

/// The Write chunks `c` offered, as a reply that placed no payload in
/// them returns them: every segment, each with length 0 (svcrdma does
/// the same; a requester finds each chunk it offered in the reply).
fn unused_writes(c: &CallChunks) -> Result<Segments> {
    let n: usize = c.writes().map(<[v1::Segment]>::len).sum();
    let mut out = blank_segments(n)?;
    let mut at = 0;
    for offered in c.writes() {
        let rest = out.get_mut(at..).ok_or(EINVAL)?;
        at += v1::fill_chunk(offered, 0, rest).map_err(|_| EINVAL)?;
    }
    Ok(out)
}

/// Splits `segs` (the segments of every Write chunk `offered`, in order,
/// as returned) into one list per chunk, in `lists`. Returns how many
/// chunks that is.
fn split_chunks<'a, 'o>(
    offered: impl Iterator<Item = &'o [v1::Segment]>,
    segs: &'a [v1::Segment],
    lists: &mut [&'a [v1::Segment]; MAX_WRITE_CHUNKS],
) -> usize {
    let mut rest = segs;
    let mut n = 0;
    for (l, offered) in lists.iter_mut().zip(offered) {
        let (these, more) = rest.split_at(offered.len().min(rest.len()));
        *l = these;
        rest = more;
        n += 1;
    }
    n
}
