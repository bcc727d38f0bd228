// SPDX-License-Identifier: GPL-2.0

//! Sending a call (RFC 8166 section 3.5 and 4): the transport header, the
//! call copied or mapped into one Send, and the chunks the plan asks for.

use core::sync::atomic::{AtomicU64, Ordering};

use kernel::prelude::*;

use crate::verbs::{Fill, FillOne, InFlight, Mapping, Registered, Registration, SendFailed, SendWriter};
use crate::{
    kapi::{
        errno,
        rpc::{Lent, LentRqst, Rqst, SendLocked, Transport, Xprt},
        trace, PAGE_SIZE,
    },
    proto::{
        plan, stats, v1,
        v2::{self, Version},
    },
};

use super::{
    chunks::{
        desc, for_each_page, register_read_chunk, register_reply_chunk, segment, ExtentSg, ReplyShape,
        MAX_CHUNK_SEGMENTS,
    },
    conn::{Endpoint, EpShared, ReleaseEpoch},
    inline::CallParams,
    slots::{ReqState, Slot},
    stats::{Stats, COUNTERS},
    version::NO_XID,
    xprt::RdmaXprt,
};

/// Calls of at most this many bytes are copied into the Send buffer whole:
/// small calls are cheaper to copy than to map page by page.
const PULLUP_THRESHOLD: u32 = plan::DEFAULT_PULLUP_THRESHOLD;

/// How one call goes on the wire: its version and XID, its buffer, and
/// how the call and its reply travel.
pub(super) struct CallShape {
    pub(super) version: Version,
    pub(super) xid: u32,
    /// The call's buffer (`rq_snd_buf`).
    pub(super) snd: plan::XdrBufDesc,
    pub(super) call: plan::CallPlan,
    pub(super) reply: plan::ReplyPlan,
}

/// A call the general planner planned: its shape, and what registering
/// its chunks needs besides.
pub(super) struct Planned {
    pub(super) shape: CallShape,
    /// The reply's buffer (`rq_rcv_buf`).
    pub(super) rcv: plan::XdrBufDesc,
    pub(super) limits: plan::Limits,
}

impl RdmaXprt {
    /// Builds the transport header (registering chunks as the plan says)
    /// and sends the call. Records in the state of its slot `slot` the
    /// regions posted, the pages the Send may still be reading and how the
    /// reply will arrive. On failure every region registered for the call
    /// is given back, as releases of the caller's own in `epoch` (its
    /// reading from before).
    ///
    /// The slot's state holds nothing (`send_call` emptied it). A small
    /// call leaves it so: copied whole after a header without chunk lists,
    /// it holds nothing once sent and its reply comes back inline, which
    /// is what the state says already; it is sent without locking the
    /// state, and its reply is judged without locking it. Any other call
    /// locks it and sets the slot's `holds` flag before anything is
    /// registered, and keeps it locked until it holds the call's regions
    /// and reply shape: the reply can arrive on another CPU as soon as the
    /// Send is posted, and the Receive handler must never find them
    /// missing. Nothing in here sleeps.
    pub(super) fn marshal(&self, ep: &Endpoint, rqst: &Rqst<'_>, slot: &Slot, epoch: &mut ReleaseEpoch) -> Result {
        let shared = ep.shared();
        // The request as its slot lends it: its buffers' pages are the
        // slot's lender's, for the call's token alone to name.
        let rqst = slot.storage.lent_rqst(rqst).ok_or(EINVAL)?;
        let xid = u32::from_be(rqst.xid_be());
        let CallParams { version, send: inline_send, recv: inline_recv } = match shared.call_params() {
            Some(p) => p,
            None => self.call_params_uncached(shared, xid)?,
        };
        // A sparse reply page array (NFSv3 GETACL) gets its pages before
        // any of them is planned or registered.
        rqst.fill_sparse_pages()?;
        let snd = desc(rqst.call_buf());
        let reply_len = rqst.reply_room();
        // Most calls are small and so are their replies (GETATTR, ACCESS,
        // LOOKUP): no chunk to plan or register.
        if let Some((call, rp)) = plan::plan_small(&snd, reply_len, inline_send, inline_recv, PULLUP_THRESHOLD) {
            // The call copied whole after an RDMA_MSG header without chunk
            // lists: the Send names nothing of the request's, so it needs
            // no token.
            let credits = shared.max_requests.load(Ordering::Relaxed);
            let lists = CallLists::Any(v1::ChunkLists::NONE);
            let dir = v2::Direction::Call;
            let len = snd.len as usize;
            ep.conn.send_copied(HeaderFill { rqst: &rqst, version, xid, credits, nomsg: false, dir, lists, len })?;
            self.count_call(&call, &rp, &snd, 0);
            trace::marshal(&rqst, xid, || {
                marshalled(&CallShape { version, xid, snd, call, reply: rp }, &desc(rqst.reply_buf()))
            });
            return Ok(());
        }
        self.register_and_send(ep, &rqst, slot, (version, xid), (inline_send, inline_recv), &snd, epoch)
    }

    /// Registers the chunks of the call `rqst` (`xid`, of `version`, its
    /// buffer `snd`, under the inline thresholds `(send, receive)`) and
    /// sends it; see [`RdmaXprt::marshal`]. If the Send is posted, the
    /// slot's state holds its token, else every region registered for the
    /// call is given back (releases of the caller's own in `epoch`).
    #[allow(clippy::too_many_arguments)]
    fn register_and_send(
        &self,
        ep: &Endpoint,
        rqst: &LentRqst<'_>,
        slot: &Slot,
        (version, xid): (Version, u32),
        (inline_send, inline_recv): (u32, u32),
        snd: &plan::XdrBufDesc,
        epoch: &mut ReleaseEpoch,
    ) -> Result {
        let shared = ep.shared();
        // Most of these calls move a page list one MR covers (READ,
        // WRITE): one chunk of one segment. The rest are planned in
        // general. The plans travel as values and the Call's description
        // stays where it is: a `CallShape` built for the quick plans would
        // be stored field by field, only for its fields to be read back.
        let mut st = slot.state().lock();
        // Set before anything is registered: a reply handler that finds
        // the flag clear takes the state for empty without locking it,
        // which is then true until this call is posted (see
        // `EpShared::take_request`). A call that fails leaves it set over
        // an empty state; the next send or the release clears it.
        slot.set_holds(&mut st, true);
        let ReqState { inflight, reply, segs, offered } = &mut *st;
        let lender = slot.storage.lender();
        let vx = (version, xid);
        let rcv = desc(rqst.reply_buf());
        let thresholds = (inline_send, inline_recv);
        let g = plan::Geometry { page_size: PAGE_SIZE, max_pages: shared.mr_pages.load(Ordering::Relaxed) };
        let ddp = rqst.ddp_allowed();
        // One region, registered and sent in one call, each direction on
        // its own branch: what it knows (the lists' shape, the reply's)
        // stays constants there.
        if let Some((call, rp, ext)) = plan::plan_one_mr(snd, &rcv, ddp, thresholds, PULLUP_THRESHOLD, g) {
            // The region the request kept from its last call, if it is
            // this connection's; else one from the pool.
            let index = match slot.kept().take(ep.conn.conn_id()) {
                Some(i) => i,
                None => ep.conn.pool_take()?,
            };
            let nomsg = matches!(call, plan::CallPlan::LongCall { .. });
            let credits = shared.max_requests.load(Ordering::Relaxed);
            let read = call.read_position();
            let one = OneRegionFill { call: CallHead { rqst, version, xid, credits, nomsg, call, snd }, read };
            let sent = if one.read.is_some() {
                let fill_sg = ExtentSg { buf: rqst.call_buf(), ext: &ext };
                ep.conn.send_one(lender, index, xid, fill_sg, one).map(|(t, _)| (t, ReplyShape::Inline, 0))
            } else {
                let fill_sg = ExtentSg { buf: rqst.reply_buf(), ext: &ext };
                ep.conn.send_one(lender, index, xid, fill_sg, one).map(|(t, seg)| {
                    let [first, ..] = segs;
                    *first = segment(seg);
                    (t, ReplyShape::WriteChunk, 1)
                })
            };
            return match sent {
                Ok((t, reply_shape, nw)) => {
                    let out = (inflight, reply, offered);
                    self.record_posted(rqst, vx, snd, (call, rp), t, (reply_shape, nw), out);
                    Ok(())
                }
                Err((e, pooled, unposted)) => {
                    // Its own release: it must not make the caller retry.
                    epoch.own(pooled as u64);
                    if let Some(reg) = unposted {
                        // A post that stopped part of the way: ending its
                        // token sleeps (the queue pair goes to the error
                        // state first), so not under the slot's lock.
                        drop(st);
                        release_unposted(ep, slot, reg, epoch);
                    }
                    // EBUSY: the request's reply is being completed (its
                    // lender is closed meanwhile): try again, to find it
                    // answered.
                    Err(if e == EBUSY { EAGAIN } else { e })
                }
            };
        }
        // The general planner's: any number of regions in the call's
        // token, given back whole if the call fails before it is posted.
        // EBUSY: as above.
        let mut reg = ep.conn.begin(lender).map_err(|e| if e == EBUSY { EAGAIN } else { e })?;
        let out = (inflight, reply, offered);
        let mut read_segs = [v1::ReadSegment::default(); MAX_CHUNK_SEGMENTS];
        let planned = self.register_planned(ep, rqst, vx, (*snd, rcv), thresholds, &mut reg, &mut read_segs, segs);
        let (call, rp, reads, reply_shape, writes) = match planned {
            Ok((call, rp, nr, reply_shape, nw)) => match (read_segs.get(..nr), segs.get(..nw)) {
                (Some(reads), Some(writes)) => (call, rp, reads, reply_shape, writes),
                _ => {
                    release_unposted(ep, slot, reg, epoch);
                    return Err(EINVAL);
                }
            },
            Err(e) => {
                release_unposted(ep, slot, reg, epoch);
                return Err(e);
            }
        };
        let nw = writes.len();
        let write_list = [writes];
        let lists = match reply_shape {
            ReplyShape::Inline => v1::ChunkLists { reads, writes: &[], reply: None },
            ReplyShape::WriteChunk => v1::ChunkLists { reads, writes: &write_list, reply: None },
            ReplyShape::ReplyChunk => v1::ChunkLists { reads, writes: &[], reply: Some(writes) },
        };
        let planned = (call, rp, CallLists::Any(lists), reply_shape, nw);
        match self.post_and_record(ep, rqst, vx, snd, reg, planned, out) {
            Ok(()) => Ok(()),
            Err(f) => {
                // Out of the slot's lock: after a post that stopped part of
                // the way, ending the token sleeps (the queue pair goes to
                // the error state first).
                drop(st);
                release_unposted(ep, slot, f.reg, epoch);
                Err(f.err)
            }
        }
    }

    /// Posts the call (see [`RdmaXprt::post`]) with the token `reg` (the
    /// regions registered for it), as `planned` (the call's and reply's
    /// plans, the chunk lists, how the reply will arrive and how many
    /// segments the call offers for it), and records the posted token in
    /// `out` (the slot state's fields). On failure the token comes back,
    /// for the caller to give back outside the slot's lock. The general
    /// planner's calls; a call of one region goes through
    /// [`Connection::send_one`](crate::verbs::Connection::send_one).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn post_and_record(
        &self,
        ep: &Endpoint,
        rqst: &LentRqst<'_>,
        (version, xid): (Version, u32),
        snd: &plan::XdrBufDesc,
        reg: Registration,
        (call, rp, lists, reply_shape, nw): (plan::CallPlan, plan::ReplyPlan, CallLists<'_>, ReplyShape, usize),
        out: (&mut Option<InFlight>, &mut ReplyShape, &mut usize),
    ) -> core::result::Result<(), SendFailed> {
        let t = self.post(ep, rqst, (version, xid), call, snd, reg, lists)?;
        self.record_posted(rqst, (version, xid), snd, (call, rp), t, (reply_shape, nw), out);
        Ok(())
    }

    /// Accounts the call `rqst` (`xid`, of `version`, its buffer `snd`),
    /// posted as planned (`call`, `reply`) with the token `t`, and records
    /// the token and how the reply will arrive (`shape`, offering `nw`
    /// segments) in `out`, the slot state's fields. Both ways a call with
    /// chunks is posted end here.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn record_posted(
        &self,
        rqst: &LentRqst<'_>,
        (version, xid): (Version, u32),
        snd: &plan::XdrBufDesc,
        (call, rp): (plan::CallPlan, plan::ReplyPlan),
        t: InFlight,
        (shape, nw): (ReplyShape, usize),
        (inflight, reply, offered): (&mut Option<InFlight>, &mut ReplyShape, &mut usize),
    ) {
        self.count_call(&call, &rp, snd, t.len());
        trace::marshal(rqst, xid, || {
            marshalled(&CallShape { version, xid, snd: *snd, call, reply: rp }, &desc(rqst.reply_buf()))
        });
        *inflight = Some(t);
        *reply = shape;
        *offered = nw;
    }

    /// Plans the call `rqst` (`xid`, of `version`, its buffers `snd` and
    /// `rcv`) with the general planner under the inline thresholds
    /// `(send, receive)`, and registers the chunks it asks for into `reg`:
    /// the Read chunk's segments into `reads`, the Write or Reply chunk's
    /// into `segs`. Returns the plans, how many Read segments and Write or
    /// Reply segments there are, and how the reply will arrive. Kept out
    /// of `send_call`: few calls take it, and inlined, its values would
    /// crowd the registers of the calls that do not.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn register_planned(
        &self,
        ep: &Endpoint,
        rqst: &LentRqst<'_>,
        (version, xid): (Version, u32),
        (snd, rcv): (plan::XdrBufDesc, plan::XdrBufDesc),
        thresholds: (u32, u32),
        reg: &mut Registration,
        reads: &mut [v1::ReadSegment; MAX_CHUNK_SEGMENTS],
        segs: &mut [v1::Segment; MAX_CHUNK_SEGMENTS],
    ) -> Result<(plan::CallPlan, plan::ReplyPlan, usize, ReplyShape, usize)> {
        let p = &self.plan(ep.shared(), rqst, version, xid, (snd, rcv), thresholds)?;
        // Most calls have no Read chunk and most replies need a Write or
        // Reply chunk: register only the chunks there are.
        let nr = if p.shape.call.read_segments() > 0 { register_read_chunk(ep, rqst, p, reg, reads)? } else { 0 };
        let nw = if p.shape.reply.mrs() > 0 { register_reply_chunk(ep, rqst, p, reg, segs)? } else { 0 };
        let reply_shape = match p.shape.reply {
            plan::ReplyPlan::Inline => ReplyShape::Inline,
            plan::ReplyPlan::WriteChunk { .. } => ReplyShape::WriteChunk,
            plan::ReplyPlan::ReplyChunk { .. } => ReplyShape::ReplyChunk,
        };
        Ok((p.shape.call, p.shape.reply, nr, reply_shape, nw))
    }

    /// What the call `xid` needs on the connection `shared` before it is
    /// planned, while the connection has not cached it
    /// ([`EpShared::call_params`]): its first calls, or any call after the
    /// server's characteristics changed.
    #[cold]
    #[inline(never)]
    fn call_params_uncached(&self, shared: &EpShared, xid: u32) -> Result<CallParams> {
        let version = match shared.settled() {
            Some(v) => v,
            None => self.version_unsettled(shared, xid)?,
        };
        Ok(CallParams::of(version, shared.inline()))
    }

    /// The version of the call `xid` while the connection's version is
    /// not settled: its first calls only.
    fn version_unsettled(&self, shared: &EpShared, xid: u32) -> Result<Version> {
        let mut g = shared.version.lock();
        let unprobed = matches!(*g, v2::ConnVersion::Unprobed);
        let v = g.for_call(xid).ok_or_else(errno::EPROTONOSUPPORT)?;
        drop(g);
        if unprobed && v == Version::V2 {
            trace::version(|| self.xprt.get().addr_str(), xid, trace::VersionEvent::Probe as u32, 2);
        }
        Ok(v)
    }

    /// Plans, with the general planner, the call `rqst` (`xid`, of
    /// `version`, its buffers `snd` and `rcv`) on the connection `shared`, under the
    /// inline thresholds `(send, receive)`: which chunks the call and its
    /// reply need.
    fn plan(
        &self,
        shared: &EpShared,
        rqst: &LentRqst<'_>,
        version: Version,
        xid: u32,
        (snd, rcv): (plan::XdrBufDesc, plan::XdrBufDesc),
        (inline_send, inline_recv): (u32, u32),
    ) -> Result<Planned> {
        let limits = plan::Limits {
            inline_send,
            inline_recv,
            max_send_sge: shared.send_sges.load(Ordering::Relaxed),
            page_size: PAGE_SIZE,
            max_pages_per_mr: shared.mr_pages.load(Ordering::Relaxed),
            max_segments: MAX_CHUNK_SEGMENTS as u32,
            pullup_threshold: PULLUP_THRESHOLD,
            write_pad_segment: false,
        };
        let (call, reply) = plan::plan_chunks(&snd, &rcv, rqst.ddp_allowed(), &limits).map_err(|e| {
            pr_warn_once_marshal(&self.stats, &e, &snd, &rcv);
            EIO
        })?;
        Ok(Planned { shape: CallShape { version, xid, snd, call, reply }, rcv, limits })
    }

    /// Posts the call `xid` of `version`, planned as `call` (its buffer
    /// `snd`): the transport header with `lists`, then the call copied, or
    /// its head and tail copied and its page list mapped, or (a Long Call)
    /// nothing more, after the registrations in `reg`.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn post(
        &self,
        ep: &Endpoint,
        rqst: &LentRqst<'_>,
        (version, xid): (Version, u32),
        call: plan::CallPlan,
        snd: &plan::XdrBufDesc,
        reg: Registration,
        lists: CallLists<'_>,
    ) -> core::result::Result<InFlight, SendFailed> {
        let nomsg = matches!(call, plan::CallPlan::LongCall { .. });
        let credits = ep.shared().max_requests.load(Ordering::Relaxed);
        let fill = CallFill { call: CallHead { rqst, version, xid, credits, nomsg, call, snd }, lists };
        ep.conn.send(reg, fill)
    }

    /// Accounts a call planned as `call` and `reply` (its buffer `snd`)
    /// that went out with `registered` regions. Inlined into each of its
    /// two callers, where the plans are mostly known.
    #[inline(always)]
    fn count_call(&self, call: &plan::CallPlan, reply: &plan::ReplyPlan, snd: &plan::XdrBufDesc, registered: usize) {
        // A counter moves only when there is something to add: an atomic
        // add of zero still costs a locked instruction per RPC.
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        let st = &self.stats;
        stats::MarshalCounts::count(call, reply, snd, |c, n| {
            let counter = match c {
                stats::MarshalCounter::ReadSegments => &st.read_chunks,
                stats::MarshalCounter::WriteSegments => &st.write_chunks,
                stats::MarshalCounter::ReplySegments => &st.reply_chunks,
                stats::MarshalCounter::RdmaRequestBytes => &st.total_rdma_request,
                stats::MarshalCounter::PullupBytes => &st.pullup_copy,
                stats::MarshalCounter::NomsgCalls => &st.nomsg_calls,
            };
            add(counter, n);
        });
        add(&COUNTERS.mrs_registered, registered as u64);
    }
}

/// What the `marshal` trace event reports of the call planned as `p`, its
/// reply buffer `rcv`.
fn marshalled(p: &CallShape, rcv: &plan::XdrBufDesc) -> trace::Marshalled {
    let s = &p.snd;
    let rtype = match p.call {
        plan::CallPlan::Inline { pullup: true } if s.page_len == 0 && s.tail.len == 0 => trace::ChunkType::Inline,
        plan::CallPlan::Inline { pullup: true } => trace::ChunkType::Pullup,
        plan::CallPlan::Inline { pullup: false } => trace::ChunkType::Mapped,
        plan::CallPlan::ReadChunk { .. } => trace::ChunkType::ReadList,
        plan::CallPlan::LongCall { .. } => trace::ChunkType::LongCall,
    };
    let wtype = match p.reply {
        plan::ReplyPlan::Inline => trace::ChunkType::Inline,
        plan::ReplyPlan::WriteChunk { .. } => trace::ChunkType::WriteList,
        plan::ReplyPlan::ReplyChunk { .. } => trace::ChunkType::ReplyChunk,
    };
    let (r, w, rc) = (p.call.read_segments(), p.reply.write_chunk_segments(), p.reply.reply_chunk_segments());
    trace::Marshalled {
        version: p.version.number(),
        hdrlen: plan::call_header_len(r, w, rc).saturating_add(p.version.extra_header_len()),
        xdr: (s.head.len, s.page_len, s.tail.len),
        rtype,
        wtype,
        rcv: (rcv.head.len, rcv.page_len, rcv.tail.len),
        rcv_flags: rcv.flags,
    }
}

/// A transport header (of `version`, for `xid`, granting or asking
/// `credits`, RDMA_NOMSG if `nomsg`, for a message going in direction
/// `dir`, with chunk lists `lists`) and the first `len` bytes of `rqst`'s
/// RPC message after it, copied into a Send. The whole of a small call's
/// Send, or of a backward reply's; the start of a call with chunks
/// ([`CallFill`]). A value, so that it is inlined ([`Fill`]).
pub(super) struct HeaderFill<'a, 'r> {
    pub(super) rqst: &'a Rqst<'r>,
    pub(super) version: Version,
    pub(super) xid: u32,
    pub(super) credits: u32,
    pub(super) nomsg: bool,
    pub(super) dir: v2::Direction,
    pub(super) lists: CallLists<'a>,
    pub(super) len: usize,
}

impl<M> Fill<M> for HeaderFill<'_, '_> {
    #[inline(always)]
    fn fill(self, out: &mut SendWriter<'_, M>) -> Result {
        let HeaderFill { rqst, version, xid, credits, nomsg, dir, lists, len } = self;
        // Written in place, not in a closure `copy` calls: see `Fill`.
        let buf = out.room();
        let hdr = encode_header(buf, version, xid, credits, nomsg, dir, lists)?;
        let used = copy_call_after(rqst, buf, hdr, len)?;
        out.copied(used)
    }
}

/// A call as its Send is filled: the request, its header's fields but
/// the chunk lists, and how its plan sends it.
#[derive(Clone, Copy)]
struct CallHead<'a, 'r> {
    rqst: &'a LentRqst<'r>,
    version: Version,
    xid: u32,
    credits: u32,
    nomsg: bool,
    call: plan::CallPlan,
    snd: &'a plan::XdrBufDesc,
}

/// The Send of a call with chunks, as [`RdmaXprt::post`] builds it: a
/// value, not a closure, so that its fill is inlined into each copy of
/// the post whatever the optimiser thinks of its size ([`Fill`]).
struct CallFill<'a, 'r> {
    call: CallHead<'a, 'r>,
    lists: CallLists<'a>,
}

impl Fill<Mapping> for CallFill<'_, '_> {
    #[inline(always)]
    fn fill(self, out: &mut SendWriter<'_, Mapping>) -> Result {
        let CallFill { call: CallHead { rqst, version, xid, credits, nomsg, call, snd }, lists } = self;
        // The transport header and what is copied right after it. The
        // offsets are sums of the call's lengths (a `u32`): should one
        // wrap, the copy would refuse the range it names.
        let (copied, rest) = match call {
            plan::CallPlan::Inline { pullup: true } => (snd.len, None),
            // Head copied, page list mapped in place, tail copied.
            plan::CallPlan::Inline { pullup: false } => {
                (snd.head.len, Some((snd.head.len.wrapping_add(snd.page_len), snd.tail.len)))
            }
            plan::CallPlan::ReadChunk { tail_skip, tail_len, .. } => {
                let from = snd.head.len.wrapping_add(snd.page_len).wrapping_add(tail_skip);
                (snd.head.len, Some((from, tail_len)))
            }
            plan::CallPlan::LongCall { .. } => (0, None),
        };
        let dir = v2::Direction::Call;
        HeaderFill { rqst, version, xid, credits, nomsg, dir, lists, len: copied as usize }.fill(out)?;
        if matches!(call, plan::CallPlan::Inline { pullup: false }) {
            for_each_page(rqst.call_buf(), |page, off, len| out.map_page(page, off, len))?;
        }
        // Most calls have nothing after their page list (a 4 KiB WRITE's
        // tail is empty): no second copy then.
        if let Some((from, len)) = rest.filter(|&(_, len)| len > 0) {
            rqst.copy_call_at(from, out.room().get_mut(..len as usize).ok_or(EINVAL)?)?;
            out.copied(len as usize)?;
        }
        Ok(())
    }
}

/// The Send of a call that registers one region
/// ([`Connection::send_one`](crate::verbs::Connection::send_one)): a
/// [`CallFill`] whose lists name that region's segment, once registered,
/// as a Read chunk at position `read`, or else as a Write chunk. A value,
/// so that it is inlined ([`FillOne`]).
struct OneRegionFill<'a, 'r> {
    call: CallHead<'a, 'r>,
    read: Option<u32>,
}

impl FillOne for OneRegionFill<'_, '_> {
    #[inline(always)]
    fn fill(self, seg: &Registered, out: &mut SendWriter<'_, Mapping>) -> Result {
        let OneRegionFill { call, read } = self;
        let segment = segment(*seg);
        let read_one;
        let lists = match read {
            Some(position) => {
                read_one = v1::ReadSegment { position, segment };
                CallLists::OneRead(&read_one)
            }
            None => CallLists::OneWrite(&segment),
        };
        CallFill { call, lists }.fill(out)
    }
}

/// The chunk lists of a call's transport header: the two shapes nearly
/// every call with chunks has, by a tag and a reference (what a call
/// carries from registering to posting, and what the header's encoding
/// tests, is then one word and a pointer, not three slices), or any lists.
#[derive(Clone, Copy)]
pub(super) enum CallLists<'a> {
    /// One Read segment, no other chunk (a WRITE's).
    OneRead(&'a v1::ReadSegment),
    /// One Write chunk of one segment, no other chunk (a READ's).
    OneWrite(&'a v1::Segment),
    /// Any lists (a small call's none, the general planner's).
    Any(v1::ChunkLists<'a>),
}

/// Encodes an RDMA_MSG (or RDMA_NOMSG) transport header of `version` into
/// `buf`; returns its length. `dir` is the RPC message's direction, which
/// Version Two carries in the header. Inlined, with `v1::encode`, into
/// each Send: the header body is then never built and copied as a value.
#[inline(always)]
pub(super) fn encode_header(
    buf: &mut [u8],
    version: Version,
    xid: u32,
    credits: u32,
    nomsg: bool,
    dir: v2::Direction,
    lists: CallLists<'_>,
) -> Result<usize> {
    let one_write: [&[v1::Segment]; 1];
    let lists = match (version, lists) {
        (Version::V1, CallLists::OneRead(rs)) => {
            return v1::encode_one_read(buf, xid, credits, nomsg, rs).map_err(|_| EINVAL);
        }
        (Version::V1, CallLists::OneWrite(s)) => {
            return v1::encode_one_write(buf, xid, credits, nomsg, s).map_err(|_| EINVAL);
        }
        (_, CallLists::OneRead(rs)) => v1::ChunkLists { reads: core::slice::from_ref(rs), writes: &[], reply: None },
        (_, CallLists::OneWrite(s)) => {
            one_write = [core::slice::from_ref(s)];
            v1::ChunkLists { reads: &[], writes: &one_write, reply: None }
        }
        (_, CallLists::Any(lists)) => lists,
    };
    match version {
        Version::V1 => {
            let body = if nomsg { v1::Body::NoMsg(lists) } else { v1::Body::Msg(lists) };
            v1::encode(buf, xid, credits, &body).map_err(|_| EINVAL)
        }
        Version::V2 => {
            let c = v2::Chunks { direction: dir, lists };
            let body = if nomsg { v2::Body::NoMsg(c) } else { v2::Body::Msg(c) };
            v2::Header { xid, credit: credits, body }.encode(buf).map_err(|_| EINVAL)
        }
    }
}

/// Copies the first `len` bytes of `rqst`'s call into `buf` after the
/// `hdr` bytes of transport header already there; returns the bytes of
/// `buf` now used. Inlined into each Send's fill.
#[inline(always)]
pub(super) fn copy_call_after(rqst: &Rqst<'_>, buf: &mut [u8], hdr: usize, len: usize) -> Result<usize> {
    let body = buf.get_mut(hdr..).and_then(|b| b.get_mut(..len)).ok_or(EINVAL)?;
    rqst.copy_call_at(0, body)?;
    // Both lie within `buf`.
    Ok(hdr.wrapping_add(len))
}

/// Makes the task wait for Send buffers or memory regions after a send
/// failed for want of them, without losing a release that raced with the
/// failure (see [`EpShared::release_epoch`]).
pub(super) fn wait_for_space(x: Xprt<'_>, ep: &Endpoint, epoch: &ReleaseEpoch) {
    x.wait_for_buffer_space();
    if ep.shared().released_since(epoch) {
        x.write_space();
    }
}

pub(super) fn pr_warn_once_marshal(stats: &Stats, e: &plan::PlanError, snd: &plan::XdrBufDesc, rcv: &plan::XdrBufDesc) {
    if stats.failed_marshal.load(Ordering::Relaxed) == 0 {
        pr_warn!("cannot marshal an RPC (call {} bytes, reply up to {}): {:?}\n", snd.len, rcv.len, e);
    }
}

impl RdmaXprt {
    /// Sends a forward call, or a backchannel reply (SUNRPC's `send_request` op).
    pub(super) fn send_call(this: Lent<'_, Self>, x: Xprt<'_>, rqst: &Rqst<'_>, locked: &mut SendLocked<'_>) -> Result {
        if !x.connected() {
            return Err(errno::ENOTCONN());
        }
        if rqst.is_backchannel() {
            return this.send_bc_reply(x, rqst, locked);
        }
        if !rqst.get_cong(x) {
            return Err(errno::EBADSLT());
        }
        // The connection changes only under the send lock, which SUNRPC
        // holds for us: borrowed, without a reference of our own.
        let Some(ep) = this.ep.get(locked).and_then(Option::as_ref) else {
            return Err(errno::ENOTCONN());
        };
        // A retransmission on the same connection would spend a credit the
        // server never granted: reconnect instead (RFC 8166 section 3.3).
        // The one exception is the Version Two probe the server refused
        // with ERR_VERS: it goes again as Version One (draft section 5.2).
        if rqst.sent_on_this_connection(x) && !may_resend(ep, rqst) {
            this.close(x, locked);
            return Err(errno::ENOTCONN());
        }
        let Some(slot) = this.slots.slot_of(rqst) else {
            return Err(EINVAL);
        };
        if slot.holds() {
            drop_stale(ep, slot);
        }
        let mut epoch = ep.shared().release_epoch();
        rqst.stamp_xmit();
        if let Err(e) = this.marshal(ep, rqst, slot, &mut epoch) {
            let (e, close) = Self::send_failed(this, x, ep, rqst, &epoch, e);
            if close {
                this.close(x, locked);
            }
            return Err(e);
        }
        let len = rqst.send_len();
        rqst.sent(len);
        if !rqst.reply_expected() {
            // No reply means no credit back: start over with a fresh grant.
            this.close(x, locked);
            return Err(errno::ENOTCONN());
        }
        Ok(())
    }
}

impl RdmaXprt {
    /// What `send_call` does when marshalling the call `rqst` failed with
    /// `e`: out of Send buffers or memory regions, the task waits for some
    /// (releases since `epoch` wake it at once) and regions are made if
    /// that is what is missing; a connection gone is to be closed (true);
    /// anything else fails the call. Returns the error for SUNRPC.
    #[cold]
    #[inline(never)]
    fn send_failed(
        this: Lent<'_, Self>,
        x: Xprt<'_>,
        ep: &Endpoint,
        rqst: &Rqst<'_>,
        epoch: &ReleaseEpoch,
        e: Error,
    ) -> (Error, bool) {
        if e == errno::ENOBUFS() {
            this.stats.empty_sendctx_q.fetch_add(1, Ordering::Relaxed);
            wait_for_space(x, ep, epoch);
            RdmaXprt::grow_mrs_later(this.arc(), ep);
            return (EAGAIN, false);
        }
        if e == errno::ENOTCONN() {
            return (e, true);
        }
        if e == EAGAIN {
            return (e, false);
        }
        trace::marshal_failed(u32::from_be(rqst.xid_be()), e.to_errno());
        this.stats.failed_marshal.fetch_add(1, Ordering::Relaxed);
        (EIO, false)
    }
}

/// True if the call `rqst`, already sent on `ep`'s connection, may go
/// again on it: only the Version Two probe the server refused with
/// ERR_VERS, once (draft section 5.2).
#[cold]
#[inline(never)]
fn may_resend(ep: &Endpoint, rqst: &Rqst<'_>) -> bool {
    let xid = u64::from(u32::from_be(rqst.xid_be()));
    ep.shared().resend_xid.compare_exchange(xid, NO_XID, Ordering::AcqRel, Ordering::Relaxed).is_ok()
}

/// Ends what the request in `slot` still holds of its last call before it
/// is sent again: its token is of a connection that is gone (the call
/// goes again on a new one, and a connection's teardown comes before the
/// next one is made), or of this one (a probe the server refused, sent
/// again). Sleeps (not under the lock).
#[cold]
#[inline(never)]
fn drop_stale(ep: &Endpoint, slot: &Slot) {
    let mut st = slot.state().lock();
    let stale = st.take();
    slot.set_holds(&mut st, false);
    drop(st);
    let Some(t) = stale else { return };
    let lender = slot.storage.lender();
    let t = match ep.conn.release(lender, t, None) {
        Ok(_) => return,
        Err(t) => t,
    };
    if lender.wait_dead(t).is_err() {
        pr_err!("a request's token is neither its connection's nor its own: the request stays unusable\n");
    }
}

/// Gives back the regions a call registered but did not send (the token
/// `reg` of `slot`'s lender), as releases of the caller's own in `epoch`.
/// After a post that stopped part of the way this sleeps (the queue pair
/// goes to the error state first): not under the slot's lock then.
#[cold]
#[inline(never)]
fn release_unposted(ep: &Endpoint, slot: &Slot, reg: Registration, epoch: &mut ReleaseEpoch) {
    match ep.conn.release_unposted(slot.storage.lender(), reg) {
        // Its own releases: they must not make the caller retry.
        Ok((_released, n)) => epoch.own(n as u64),
        Err(_reg) => {
            pr_err!("a call's registration is neither its connection's nor its own: the request stays unusable\n");
        }
    }
}
