// SPDX-License-Identifier: GPL-2.0

//! Replies (RFC 8166 sections 4 and 5): an RDMA_MSG transport header and
//! the reply copied after it into one Send; a reply too long for that
//! written into the call's Reply chunk by RDMA Write, chained ahead of an
//! RDMA_NOMSG Send; RDMA_ERROR for a call this server cannot carry
//! (ERR_CHUNK) or a version it does not speak (ERR_VERS).

use kernel::prelude::*;

use super::{
    recv::{CallChunks, ConnState},
    xprt::ServerXprt,
};
use crate::{
    kapi::{
        errno,
        page::{OwnedPages, Outbound, PageRef},
        svc::SendRqst,
        PAGE_SIZE,
    },
    proto::v1,
    verbs::{Connection, Copying, Lender, Mapping, RwSeg, SendWriter},
};

/// How long a reply waits for a Send buffer before the connection is
/// given up.
const SEND_WAIT_MS: u32 = 10_000;

impl ConnState {
    /// Sends the reply of `x`'s request `rq` inline when it fits, whether
    /// or not the call offered a Reply chunk (the header then returns
    /// none: the reply is in the Send); one larger than the client takes
    /// inline goes into the call's Reply chunk, and without one is
    /// answered with RDMA_ERROR (ERR_CHUNK). Waits for a Send buffer when all are
    /// in use. A reply that cannot be sent closes the connection: its
    /// call would otherwise wait for ever.
    pub(super) fn sendto(&self, x: &ServerXprt, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        let r = self.send_reply(rq);
        if r.is_err() {
            x.svc().close_later();
        }
        r
    }

    fn send_reply(&self, rq: &SendRqst<'_, CallChunks>) -> Result<u32> {
        let conn = self.connection().ok_or_else(errno::ENOTCONN)?;
        let (xid, credits) = (rq.xid(), self.credits);
        let max = self.send_max as usize;
        loop {
            let seen = self.sends_seen();
            let sent = conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
                let room = w.room();
                let room = room.get_mut(..max.min(room.len())).unwrap_or_default();
                let n = v1::encode_msg(room, xid, credits, &v1::ChunkLists::NONE).map_err(|_| EINVAL)?;
                let m = rq.copy_reply(room.get_mut(n..).unwrap_or_default())?;
                w.copied(n.saturating_add(m))
            });
            match sent {
                Ok(()) => return Ok(rq.reply_len()),
                Err(e) if e == errno::ENOBUFS() => self.wait_sends(seen, SEND_WAIT_MS)?,
                Err(e) if e == errno::EMSGSIZE() => {
                    return match rq.ctxt() {
                        Some(c) => self.send_reply_chunk(&conn, rq, &c.reply),
                        None => send_error_chunk(&conn, xid, credits).map(|()| 0),
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
        let (xid, credits, len) = (rq.xid(), self.credits, rq.reply_len());
        let mut ret = KVec::from_elem(v1::Segment::default(), offered.len(), GFP_KERNEL)?;
        let Ok(n) = v1::fill_chunk(offered, len, &mut ret) else {
            return send_error_chunk(conn, xid, credits).map(|()| 0);
        };
        let returned = ret.get(..n).unwrap_or_default();
        // The reply, copied into pages of our own that the Writes read.
        let npages = len.div_ceil(PAGE_SIZE) as usize;
        let pages = OwnedPages::new(npages)?;
        let mut bounce = KVec::from_elem(0u8, PAGE_SIZE as usize, GFP_KERNEL)?;
        for i in 0..npages {
            let at = i as u32 * PAGE_SIZE;
            let part = bounce.get_mut(..(len - at).min(PAGE_SIZE) as usize).ok_or(EINVAL)?;
            rq.copy_reply_at(at, part)?;
            pages.page(i).ok_or(EINVAL)?.write(0, part)?;
        }
        // Each returned segment's share of the reply, page by page.
        let mut pieces: KVec<KVec<(PageRef<'_, Outbound>, u32, u32)>> = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut pos = 0u32;
        for seg in returned {
            let mut v = KVec::new();
            let mut left = seg.length;
            while left > 0 {
                let (page, off) = ((pos / PAGE_SIZE) as usize, pos % PAGE_SIZE);
                let take = left.min(PAGE_SIZE - off);
                v.push((pages.page(page).ok_or(EINVAL)?.page_ref::<Outbound>(), off, take), GFP_KERNEL)?;
                pos += take;
                left -= take;
            }
            pieces.push(v, GFP_KERNEL)?;
        }
        let mut segs = KVec::with_capacity(n, GFP_KERNEL)?;
        for (seg, p) in returned.iter().zip(pieces.iter()).filter(|(s, _)| s.length > 0) {
            segs.push(RwSeg { rkey: seg.handle, addr: seg.offset, pages: p }, GFP_KERNEL)?;
        }
        let mut writes = conn.rw_prepare(&segs, 0)?;
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
            let header = |w: &mut SendWriter<'_, Mapping>| {
                w.copy(|b| {
                    let lists = v1::ChunkLists { reads: &[], writes: &[], reply: Some(returned) };
                    v1::encode_nomsg(b, xid, credits, &lists).map_err(|_| EINVAL)
                })
            };
            match conn.send_with_writes(reg, writes, None, header) {
                Ok(t) => {
                    // Waits for the Send, after which the Writes are done.
                    return match conn.release(&lender, t, None) {
                        Ok(_) => Ok(len),
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

/// Sends RDMA_ERROR ERR_CHUNK for the call `xid`. An error: the caller
/// closes the connection (the call would wait for ever).
pub(super) fn send_error_chunk(conn: &Connection<ServerXprt>, xid: u32, credits: u32) -> Result {
    conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
        let n = v1::encode_err_chunk(w.room(), xid, credits).map_err(|_| EINVAL)?;
        w.copied(n)
    })
}

/// Sends RDMA_ERROR ERR_VERS (versions 1 to 1) for the message `xid`.
pub(super) fn send_error_vers(conn: &Connection<ServerXprt>, xid: u32, credits: u32) -> Result {
    conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
        let n = v1::encode_err_vers(w.room(), xid, credits, 1, 1).map_err(|_| EINVAL)?;
        w.copied(n)
    })
}
