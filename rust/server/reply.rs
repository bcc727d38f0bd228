// SPDX-License-Identifier: GPL-2.0

//! Replies (RFC 8166 sections 4 and 5): an RDMA_MSG transport header and
//! the reply copied after it into one Send; a reply too long for that
//! written into the call's Reply chunk by RDMA Write, chained ahead of an
//! RDMA_NOMSG Send; RDMA_ERROR for a call this server cannot carry
//! (ERR_CHUNK) or a version it does not speak (ERR_VERS).

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use super::{
    recv::{CallChunks, ConnState},
    xprt::ServerXprt,
};
use crate::{
    kapi::{
        errno,
        page::{Dir, OwnedPages, Outbound, PageRef},
        svc::SendRqst,
        PAGE_SIZE,
    },
    proto::{responder, v1, v2::Version},
    verbs::{Connection, Copying, Lender, Mapping, RwSeg, SendWriter},
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
    pub(super) fn sendto(&self, x: &ServerXprt, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        let r = self.send_reply(rq);
        if r.is_err() {
            x.svc().close_later();
        } else if self.version.get() == Version::V2 && !self.initxch_sent.load(Ordering::Acquire) {
            // The client has a Receive for it now: the first reply
            // answered its only call.
            if let Some(conn) = self.connection() {
                self.send_initxch_once(&conn, rq.xid());
            }
        }
        r
    }

    fn send_reply(&self, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        let conn = self.connection().ok_or_else(errno::ENOTCONN)?;
        let xid = rq.xid();
        if let Some(c) = rq.ctxt().filter(|c| c.has_payload()) {
            return self.send_write_chunks(&conn, rq, c);
        }
        let max = self.send_max() as usize;
        loop {
            let seen = self.sends_seen();
            let sent = conn.send_copied_invalidating(self.invalidate(rq), |w: &mut SendWriter<'_, Copying>| {
                let room = w.room();
                let room = room.get_mut(..max.min(room.len())).unwrap_or_default();
                let n = self.encode_reply_header(room, xid, false, &v1::ChunkLists::NONE)?;
                let m = rq.copy_reply(room.get_mut(n..).unwrap_or_default())?;
                w.copied(n.saturating_add(m))
            });
            match sent {
                Ok(()) => return Ok(rq.reply_len()),
                Err(e) if e == errno::ENOBUFS() => self.wait_sends(seen, SEND_WAIT_MS)?,
                Err(e) if e == errno::EMSGSIZE() => {
                    return match rq.ctxt().filter(|c| !c.reply.is_empty()) {
                        Some(c) => self.send_reply_chunk(&conn, rq, &c.reply),
                        None => self.send_error_chunk(&conn, xid).map(|()| 0),
                    };
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Writes the reply of `rq` into the Reply chunk `offered` by RDMA
    /// Write and sends an RDMA_NOMSG header returning the chunk, the Send
    /// chained after the Writes (RFC 8166 section 3.5.4); waits until the
    /// Send is done. A chunk too small for the reply gets ERR_CHUNK.
    fn send_reply_chunk(
        &self,
        conn: &Connection<ServerXprt>,
        rq: &SendRqst<'_, CallChunks>,
        offered: &[v1::Segment],
    ) -> Result<u32> {
        let (xid, len) = (rq.xid(), rq.reply_len());
        let mut ret = KVec::from_elem(v1::Segment::default(), offered.len(), GFP_KERNEL)?;
        let Ok(n) = v1::fill_chunk(offered, len, &mut ret) else {
            return self.send_error_chunk(conn, xid).map(|()| 0);
        };
        let returned = ret.get(..n).unwrap_or_default();
        let pages = copy_out(rq, 0, len)?;
        let local = pieces(&pages, returned)?;
        let mut segs = KVec::with_capacity(n, GFP_KERNEL)?;
        add_segments(&mut segs, returned, &local)?;
        self.write_and_send(conn, &segs, self.invalidate(rq), |w: &mut SendWriter<'_, Mapping>| {
            w.copy(|b| {
                let lists = v1::ChunkLists { reads: &[], writes: &[], reply: Some(returned) };
                self.encode_reply_header(b, xid, true, &lists)
            })
        })?;
        Ok(len)
    }

    /// Writes the result payloads of `rq`'s reply into the Write chunks
    /// `c` offered for them (RFC 8166 section 3.5.3) and sends the rest of
    /// the reply inline after an RDMA_MSG header returning the Write list
    /// with the lengths written, the Send chained after the Writes; waits
    /// until the Send is done. Each payload's XDR pad is neither written
    /// nor sent. A reply whose rest does not fit inline gets ERR_CHUNK.
    fn send_write_chunks(&self, conn: &Connection<ServerXprt>, rq: &SendRqst<'_, CallChunks>, c: &CallChunks) -> Result<u32> {
        let (xid, len) = (rq.xid(), rq.reply_len());
        // Each Write chunk returned with the bytes of its payload (none
        // for a chunk no payload went to), and the payloads' pages.
        let mut returned = KVec::with_capacity(c.writes.len(), GFP_KERNEL)?;
        let mut pages = KVec::with_capacity(c.writes.len(), GFP_KERNEL)?;
        let mut skip = KVec::with_capacity(c.writes.len(), GFP_KERNEL)?;
        for (offered, payload) in c.writes.iter().zip(c.payloads.iter()) {
            let (at, plen) = payload.unwrap_or((0, 0));
            let mut ret = KVec::from_elem(v1::Segment::default(), offered.len(), GFP_KERNEL)?;
            // Never: `note_payload` checked the payload fits.
            // Every offered segment comes back.
            v1::fill_chunk(offered, plen, &mut ret).map_err(|_| E2BIG)?;
            returned.push(ret, GFP_KERNEL)?;
            pages.push(copy_out(rq, at, plen)?, GFP_KERNEL)?;
            if plen > 0 {
                // The payload and its XDR pad stay out of the inline part.
                let end = at.checked_add(plen.next_multiple_of(4)).ok_or(EINVAL)?.min(len);
                skip.push((at, end), GFP_KERNEL)?;
            }
        }
        let mut inline = KVec::from_elem((0u32, 0u32), skip.len() + 1, GFP_KERNEL)?;
        let parts = responder::inline_ranges(len, &skip, &mut inline).map_err(|_| EINVAL)?;
        let mut all_pieces = KVec::with_capacity(returned.len(), GFP_KERNEL)?;
        for (ret, p) in returned.iter().zip(pages.iter()) {
            all_pieces.push(pieces(p, ret)?, GFP_KERNEL)?;
        }
        let mut segs = KVec::new();
        for (ret, p) in returned.iter().zip(all_pieces.iter()) {
            add_segments(&mut segs, ret, p)?;
        }
        let mut lists = KVec::with_capacity(returned.len(), GFP_KERNEL)?;
        for r in returned.iter() {
            lists.push(&r[..], GFP_KERNEL)?;
        }
        let max = self.send_max() as usize;
        let sent = self.write_and_send(conn, &segs, self.invalidate(rq), |w: &mut SendWriter<'_, Mapping>| {
            w.copy(|b| {
                let b = b.get_mut(..max.min(b.len())).unwrap_or_default();
                let chunks = v1::ChunkLists { reads: &[], writes: &lists, reply: None };
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
            Ok(()) => Ok(len),
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

    /// Posts the RDMA Writes `segs` chained ahead of a Send that `fill`
    /// writes (the message naming what they wrote), a Send With
    /// Invalidate of `invalidate` if one, waiting for a Send buffer when
    /// all are in use, and waits until the Send is done. A message `fill`
    /// refuses (`EMSGSIZE`) writes nothing.
    fn write_and_send(
        &self,
        conn: &Connection<ServerXprt>,
        segs: &[RwSeg<'_, '_, Outbound>],
        invalidate: Option<u32>,
        fill: impl Fn(&mut SendWriter<'_, Mapping>) -> Result,
    ) -> Result {
        let mut writes = conn.rw_prepare(segs, 0)?;
        let lender = Lender::new();
        loop {
            let seen = self.sends_seen();
            let reg = match conn.begin(&lender) {
                Ok(r) => r,
                Err(e) => {
                    let _ = conn.rw_discard(writes);
                    return Err(e);
                }
            };
            match conn.send_with_writes(reg, writes, invalidate, |w: &mut SendWriter<'_, Mapping>| fill(w)) {
                Ok(t) => {
                    // Waits for the Send, after which the Writes are done.
                    return match conn.release(&lender, t, None) {
                        Ok(_) => Ok(()),
                        Err(_) => Err(EIO),
                    };
                }
                Err((f, w)) => {
                    let _ = conn.release_unposted(&lender, f.reg);
                    match w {
                        // No Send buffer free: the Writes wait with it.
                        Some(w) if f.err == errno::ENOBUFS() => {
                            writes = w;
                            if let Err(e) = self.wait_sends(seen, SEND_WAIT_MS) {
                                let _ = conn.rw_discard(writes);
                                return Err(e);
                            }
                        }
                        Some(w) => {
                            let _ = conn.rw_discard(w);
                            return Err(f.err);
                        }
                        None => return Err(f.err),
                    }
                }
            }
        }
    }
}

/// Bytes `[at, at + len)` of the reply of `rq`, copied into pages of our
/// own (the RDMA Writes read them after `sendto`'s thread moved on).
fn copy_out(rq: &SendRqst<'_, CallChunks>, at: u32, len: u32) -> Result<OwnedPages> {
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

/// The local side of one segment of an RDMA Read or Write: (page, offset,
/// length) pieces, each inside its page, in order.
pub(super) type Pieces<'p, D> = KVec<(PageRef<'p, D>, u32, u32)>;

/// The local side of each segment of the chunk `segs`, whose bytes
/// `pages` holds (or takes) from its start in order: per segment, its
/// pieces (page, offset, length), each inside one page.
pub(super) fn pieces<'p, D: Dir>(pages: &'p OwnedPages, segs: &[v1::Segment]) -> Result<KVec<Pieces<'p, D>>> {
    let mut all = KVec::with_capacity(segs.len(), GFP_KERNEL)?;
    let mut pos = 0u32;
    for seg in segs {
        let mut v = KVec::new();
        let mut left = seg.length;
        while left > 0 {
            let (page, off) = ((pos / PAGE_SIZE) as usize, pos % PAGE_SIZE);
            let take = left.min(PAGE_SIZE - off);
            v.push((pages.page(page).ok_or(EINVAL)?.page_ref::<D>(), off, take), GFP_KERNEL)?;
            pos += take;
            left -= take;
        }
        all.push(v, GFP_KERNEL)?;
    }
    Ok(all)
}

/// Adds to `out` an RDMA Write or Read for each segment of `segs` that
/// takes bytes, from or into its `pieces`.
pub(super) fn add_segments<'a, 'p, D: Dir>(
    out: &mut KVec<RwSeg<'a, 'p, D>>,
    segs: &[v1::Segment],
    pieces: &'a [Pieces<'p, D>],
) -> Result {
    for (seg, p) in segs.iter().zip(pieces.iter()).filter(|(s, _)| s.length > 0) {
        out.push(RwSeg { rkey: seg.handle, addr: seg.offset, pages: p }, GFP_KERNEL)?;
    }
    Ok(())
}
