// SPDX-License-Identifier: GPL-2.0

//! Receiving (RFC 8166 section 4): decoding a transport header, matching
//! a reply to its call, invalidating the call's regions and completing it.

use core::sync::atomic::Ordering;

use kernel::{c_str, prelude::*, str::CStr};

use crate::verbs::{Live, RemoteInv, Reuse};
use crate::{
    kapi::{ratelimit::RateLimit, rpc::ReleasedRqst, trace},
    proto::{v1, v2},
};

use super::{
    backchannel::is_backward_call,
    chunks::{Returned, Verdict},
    conn::EpShared,
    regions::KeptMr,
    slots::ReqState,
    stats::{count_invalidations, COUNTERS},
};

impl EpShared {
    /// A reply was dropped or failed its RPC as malformed or unexpected
    /// (`why`, for the `bad_reply` trace event; `xid` as it said, if it
    /// said).
    pub(super) fn count_bad_reply(&self, xid: u32, why: &'static CStr) {
        trace::bad_reply(|| self.xprt.get().addr_str(), xid, why);
        // In the transport's statistics, which outlive the connection: the
        // mountstats count only grows.
        self.stats.bad_reply.fetch_add(1, Ordering::Relaxed);
        COUNTERS.bad_replies.fetch_add(1, Ordering::Relaxed);
    }

    /// A reply's Write or Reply chunk does not match what its call offered:
    /// the server claims bytes it had no memory to write. Fails the RPC
    /// rather than hand stale buffer contents to the caller as data.
    pub(super) fn foreign_chunk(&self, xid: u32, e: &v1::ReturnedChunkError) -> Error {
        self.count_bad_reply(xid, c_str!("chunk does not match the one offered"));
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("{}: reply chunk does not match the one offered ({:?}): RPC failed\n", self.xprt.get().addr_str(), e);
        }
        EIO
    }

    pub(super) fn reply(&self, conn: &Live<'_, Self>, data: &[u8], invalidated: Option<RemoteInv>) {
        let Some(v2) = self.settle_version(conn, data, invalidated) else {
            return;
        };
        // Most replies of Version One come after one of two headers, told
        // by their fixed words without decoding lists: no chunk (all
        // inline), or one Write chunk of one segment (a READ's payload).
        let common = if v2 {
            None
        } else if let Some((xid, credits, payload)) = v1::decode_plain_msg(data) {
            Some((Returned::Inline, xid, credits, payload))
        } else {
            let one = v1::decode_one_write_msg(data);
            one.map(|(xid, credits, segs, payload)| (Returned::WriteChunk(segs), xid, credits, payload))
        };
        let (returned, xid, credits, payload) = match common {
            Some(r @ (returned, xid, _, payload)) => {
                self.xprt.get().clear_reestablish_timeout();
                if is_backward_call(xid, payload) {
                    // As for any RDMA_MSG (see `decode_other`).
                    match returned {
                        Returned::Inline => self.backward_call(xid, payload),
                        _ => self.refuse_backward_chunks(conn, xid),
                    }
                    return;
                }
                r
            }
            None => match self.decode_other(conn, data, v2) {
                Some(r) => r,
                None => return,
            },
        };
        let Some((rqst, verdict)) = self.take_request(conn, returned, xid, invalidated) else {
            // No such XID (a late reply, or a backchannel call): the counter
            // SUNRPC keeps for TCP counts it in `bad_xids`; we count it here.
            // Its credit field is no grant. The reply to a call whose RPC
            // ended before it came gives the call's credit back.
            if !self.late_reply(xid) {
                self.count_bad_reply(xid, c_str!("no call waits for this XID"));
            }
            return;
        };
        if returned.grants() {
            self.grant(xid, credits);
        }
        self.complete(xid, credits, rqst, payload, verdict);
    }

    /// Decodes a header that is neither of the two common ones `reply`
    /// tells first, as Version Two's if `v2`, and acts on those that
    /// answer no call of ours (backward calls, Version Two's optional
    /// messages, what does not decode). Returns what a reply
    /// returns, its XID, its credit field and its RPC message. Out of
    /// line: inlined, its values would crowd the registers of the common
    /// replies' path.
    #[inline(never)]
    fn decode_other<'a>(&self, conn: &Live<'_, Self>, data: &'a [u8], v2: bool) -> Option<(Returned<'a>, u32, u32, &'a [u8])> {
        let decoded = if v2 { Incoming::decode_v2(data) } else { Incoming::decode_v1(data) };
        let Some(inc) = decoded else {
            // Another version's request gets ERR_VERS; anything else that
            // does not parse (short, bad procedure, bad lists) is dropped.
            if !self.refuse_version(conn, data) {
                self.count_bad_reply(v1::peek(data).map_or(0, |p| p.xid), c_str!("header does not decode"));
            }
            return None;
        };
        self.xprt.get().clear_reestablish_timeout();
        match &inc.kind {
            // Version One tells a backward call by its RPC message, Version
            // Two also by the header's direction (they must agree).
            Kind::Msg(c, dir)
                if *dir == Some(v2::Direction::Call) || (dir.is_none() && is_backward_call(inc.xid, inc.payload)) =>
            {
                if !is_backward_call(inc.xid, inc.payload) {
                    self.count_bad_reply(inc.xid, c_str!("backward direction but not a call"));
                } else if c.is_none() {
                    // Its credit field asks for reverse credits; it is no
                    // grant of forward ones (RFC 8167 section 4.1).
                    self.backward_call(inc.xid, inc.payload);
                } else {
                    self.refuse_backward_chunks(conn, inc.xid);
                }
                return None;
            }
            // No reply carries a Read list: this can only be a backward call
            // sent as a Long Call.
            Kind::NoMsg(c, dir) if *dir == Some(v2::Direction::Call) || !c.reads.is_empty() => {
                self.refuse_backward_chunks(conn, inc.xid);
                return None;
            }
            Kind::Optional(o) => {
                self.optional(conn, inc.xid, o);
                return None;
            }
            _ => {}
        }
        // From here on only what the chunk lists return is needed of them.
        Some((Returned::of(&inc.kind), inc.xid, inc.credits, inc.payload))
    }

    /// Finds the request `xid`, judges what its reply returns against what
    /// the call offered, and ends its token: after this the server can no
    /// longer write into its regions (RFC 8166 s. 3.4.5), and the call's
    /// pages are free. Sleeps. Inlined into the Receive handler: the
    /// request and the verdict are not returned through memory.
    #[inline(always)]
    pub(super) fn take_request(
        &self,
        conn: &Live<'_, Self>,
        returned: Returned<'_>,
        xid: u32,
        invalidated: Option<RemoteInv>,
    ) -> Option<(ReleasedRqst<'_>, Verdict)> {
        let rqst = self.xprt.get().lookup(xid.to_be())?;
        let slot = self.slots.slot_of_pinned(&rqst)?;
        // A slot whose flag is clear holds its Default state (a small
        // call's: most calls), which nobody writes until this reply
        // completes the call: judged without the lock. A call with chunks
        // sets the flag, under the lock, before its Send can bring a
        // reply; one that sets it only after it was read here is a
        // retransmission this reply does not answer, and this reply acts
        // as if it had taken the lock before that call did.
        // Each branch sets both, rather than returning a pair: a pair is
        // built in memory and copied out.
        let (t, verdict);
        if slot.holds() {
            let mut st = slot.state().lock();
            if st.inflight.as_ref().is_some_and(|t| t.conn_id() != conn.conn_id()) {
                // A late reply from a connection being torn down: the
                // call went out again on the next one, whose reply it
                // waits for (and whose token it holds).
                return None;
            }
            verdict = st.judge(returned);
            t = st.take();
            slot.set_holds(&mut st, false);
        } else {
            verdict = ReqState::default().judge(returned);
            t = None;
        }
        let lender = slot.storage.lender();
        // The lender closed until the request is completed: no token can
        // reach its memory meanwhile.
        let closed = match t {
            // Most calls registered nothing and mapped nothing: no token.
            None => lender.close_idle()?,
            Some(t) => {
                let registered = t.len();
                // Most of the others one region (which the server
                // invalidated): that one inline, the rest a call. The
                // request keeps a region for its next call.
                // The first region taken back is kept for the request's
                // next call; one kept before goes to the pool.
                let reuse = KeepOrPool { conn, id: conn.conn_id(), kept: slot.kept() };
                let (closed, local) = match conn.release_closing(lender, t, invalidated, reuse) {
                    Ok(r) => r,
                    // Not this request's or this connection's: checked
                    // above, so never.
                    Err(_t) => return None,
                };
                count_invalidations(&self.stats, registered, local);
                if registered > 0 {
                    // A task may be waiting for memory regions to send its
                    // call.
                    self.xprt.get().write_space();
                }
                closed
            }
        };
        slot.set_answered(xid.to_be());
        let rqst = slot.storage.released(rqst, closed).ok()?;
        Some((rqst, verdict))
    }

    /// Completes the request `rqst` with the reply `xid` (granting
    /// `credits`), whose RPC message is `payload` and whose chunks the
    /// verdict judged.
    pub(super) fn complete(&self, xid: u32, credits: u32, rqst: ReleasedRqst<'_>, payload: &[u8], verdict: Verdict) {
        let bad = |why| {
            self.count_bad_reply(xid, why);
            EIO
        };
        let matched = |wtype: trace::ChunkType, written: u64| {
            trace::reply(xid, credits, wtype as u32, written as u32);
        };
        // The RPC message's XID mirrors the header's (RFC 8166 section
        // 4.1): a reply whose message says otherwise carries some other
        // call's results, and SUNRPC does not look (it matched the call by
        // the header's).
        let rpc_xid = match verdict {
            Verdict::Inline | Verdict::Written(_) => payload.first_chunk::<4>().copied(),
            Verdict::ReplyWritten(n) => rqst.head_word().filter(|_| n >= 4).map(u32::to_be_bytes),
            Verdict::Foreign(_) | Verdict::Error | Verdict::Bad => Some(xid.to_be_bytes()),
        };
        if rpc_xid != Some(xid.to_be_bytes()) {
            return rqst.fail(bad(c_str!("RPC message's XID differs from the header's")));
        }
        match verdict {
            Verdict::Inline => {
                matched(trace::ChunkType::Inline, 0);
                rqst.complete_with(payload)
            }
            Verdict::Written(written) => {
                if written > u64::from(rqst.reply_buf().page_len()) {
                    return rqst.fail(bad(c_str!("Write chunk longer than the reply's pages")));
                }
                matched(trace::ChunkType::WriteList, written);
                self.stats.total_rdma_reply.fetch_add(written, Ordering::Relaxed);
                complete_write_chunk(rqst, payload, written as u32)
            }
            Verdict::ReplyWritten(written) => {
                if written > u64::from(rqst.reply_buf().room()) {
                    return rqst.fail(bad(c_str!("Reply chunk longer than the reply buffer")));
                }
                matched(trace::ChunkType::ReplyChunk, written);
                self.stats.total_rdma_reply.fetch_add(written, Ordering::Relaxed);
                rqst.complete_reply_chunk(written as u32)
            }
            Verdict::Foreign(e) => rqst.fail(self.foreign_chunk(xid, &e)),
            Verdict::Error => rqst.fail(EIO),
            Verdict::Bad => rqst.fail(bad(c_str!("chunks the call did not offer"))),
        }
    }
}

/// Completes a reply whose bulk data the server wrote into the page list
/// (`written` bytes, a Write chunk: RFC 8166 section 3.5.3); `inline` is the
/// rest of the reply, which surrounds the data: what the head holds goes
/// before it, the rest follows the XDR-padded data.
fn complete_write_chunk(mut rqst: ReleasedRqst<'_>, inline: &[u8], written: u32) {
    let (head_len, page_len) = (rqst.receive_buf().head_len(), rqst.receive_buf().page_len());
    let Some(padded) = written.checked_next_multiple_of(4).filter(|_| written <= page_len) else {
        return rqst.fail(EIO);
    };
    // The reply's fields before the data may be shorter than the head
    // buffer: trim it so that decoding finds the data right after them.
    let head = head_len.min(u32::try_from(inline.len()).unwrap_or(u32::MAX));
    let (Some(before), Some(after), Some(data_end)) =
        (inline.get(..head as usize), inline.get(head as usize..), head.checked_add(padded))
    else {
        return rqst.fail(EIO);
    };
    rqst.trim_head(head);
    let placed = rqst.write_at(0, before).and_then(|()| {
        // The data's XDR pad is never sent (RFC 8166 section 3.5.3) but
        // lies inside the reply's length: zero it, whether or not anything
        // follows, so that no byte the server did not send (stale buffer
        // contents, or a peer's writes past the length it returned) reaches
        // the upper layer. Only what the buffer holds: a reply that ends
        // with the data may end at the buffer's end. `written <= padded <=
        // written + 3`, and `head + padded` did not overflow.
        let buf = rqst.receive_buf();
        let end = head.saturating_add(buf.page_len()).saturating_add(buf.tail().1);
        let pad_at = head.wrapping_add(written);
        let pad_len = padded.wrapping_sub(written).min(end.saturating_sub(pad_at));
        let pad = [0u8; 3];
        rqst.write_at(pad_at, pad.get(..pad_len as usize).ok_or(EINVAL)?)?;
        if after.is_empty() {
            return Ok(());
        }
        rqst.write_at(data_end, after)
    });
    match placed {
        Ok(()) => rqst.complete_placed(data_end.saturating_add(u32::try_from(after.len()).unwrap_or(u32::MAX))),
        Err(e) => rqst.fail(e),
    }
}

/// A received transport header, Version One or Two.
pub(super) struct Incoming<'a> {
    pub(super) xid: u32,
    pub(super) credits: u32,
    pub(super) kind: Kind<'a>,
    /// What follows the header (the RPC message of an RDMA_MSG).
    pub(super) payload: &'a [u8],
}

/// What a received header says, whichever the version.
pub(super) enum Kind<'a> {
    /// RDMA_MSG; Version Two also gives the direction.
    Msg(v1::Chunks<'a>, Option<v2::Direction>),
    /// RDMA_NOMSG; Version Two also gives the direction.
    NoMsg(v1::Chunks<'a>, Option<v2::Direction>),
    /// RDMA_ERROR (any code).
    Error,
    /// RDMA2_OPTIONAL.
    Optional(v2::Optional<'a>),
    /// RDMA_MSGP or RDMA_DONE, retired by RFC 8166.
    Retired,
}

impl<'a> Incoming<'a> {
    #[inline(always)]
    fn decode_v1(data: &'a [u8]) -> Option<Self> {
        let (h, payload) = v1::Header::decode_split(data, &v1::Limits::DEFAULT).ok()?;
        let kind = match h.body {
            v1::Body::Msg(c) => Kind::Msg(c, None),
            v1::Body::NoMsg(c) => Kind::NoMsg(c, None),
            v1::Body::Error(e) => {
                match e {
                    v1::ErrorBody::Vers { low, high } => trace::err(h.xid, v1::ERR_VERS, low, high),
                    v1::ErrorBody::Chunk => trace::err(h.xid, v1::ERR_CHUNK, 0, 0),
                }
                Kind::Error
            }
            _ => Kind::Retired,
        };
        Some(Incoming { xid: h.xid, credits: h.credits, kind, payload })
    }

    fn decode_v2(data: &'a [u8]) -> Option<Self> {
        let (h, payload) = v2::Header::decode(data).ok()?;
        let kind = match h.body {
            v2::Body::Msg(c) => Kind::Msg(c.lists, Some(c.direction)),
            v2::Body::NoMsg(c) => Kind::NoMsg(c.lists, Some(c.direction)),
            v2::Body::Error(e) => {
                let (low, high) = match e {
                    v2::ErrorBody::Vers { low, high } => (low, high),
                    _ => (0, 0),
                };
                trace::err(h.xid, e.code(), low, high);
                Kind::Error
            }
            v2::Body::Optional(o) => Kind::Optional(o),
        };
        Some(Incoming { xid: h.xid, credits: h.credit, kind, payload })
    }
}

/// Where a region a reply's release frees goes: kept by its request for
/// the next call (`kept`, of connection `id`), or the one kept before, or
/// it, back to `conn`'s pool. A value, so that it is inlined ([`Reuse`]).
struct KeepOrPool<'a, 'b> {
    conn: &'a Live<'b, EpShared>,
    id: u64,
    kept: &'a KeptMr,
}

impl Reuse for KeepOrPool<'_, '_> {
    #[inline(always)]
    fn reuse(&mut self, index: usize) {
        if let Some(back) = self.kept.keep(self.id, index) {
            self.conn.pool_put(back);
        }
    }
}
