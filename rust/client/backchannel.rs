// SPDX-License-Identifier: GPL-2.0

//! Backward calls from the server (RFC 8167): receiving them, answering
//! them, and refusing the ones that carry chunks.

use core::sync::atomic::Ordering;

use kernel::{c_str, new_spinlock, prelude::*, sync::SpinLock};

use crate::verbs::{FreeList, Live};
use crate::{
    kapi::{
        errno,
        ratelimit::RateLimit,
        rpc::{self, BcError, BcRqst, FreedBcRqst, Rqst, SendLocked, Xprt},
        trace, PAGE_SIZE,
    },
    proto::{
        plan, v1,
        v2::{self, Version},
    },
};

use super::{
    conn::EpShared,
    marshal::{wait_for_space, CallLists, HeaderFill},
    stats::COUNTERS,
    xprt::RdmaXprt,
};

/// Backward (server to client) requests we accept at once: our
/// reverse-direction credit grant, the callback session's slot limit, and
/// the Receives we keep posted for them beyond the forward ones (RFC 8167
/// section 4.3.1).
pub(super) const BC_SLOTS: usize = 16;

pub(super) const BC_RECEIVES: usize = BC_SLOTS;

/// True if `msg`, the payload of an RDMA_MSG with no chunks, is an RPC call
/// (the server calling the client) whose XID matches the transport header's.
pub(super) fn is_backward_call(xid: u32, msg: &[u8]) -> bool {
    match (msg.get(0..4), msg.get(4..8)) {
        (Some(x), Some(dir)) => x == xid.to_be_bytes() && dir == [0, 0, 0, 0],
        _ => false,
    }
}

impl RdmaXprt {
    /// Sends the callback service's reply to a backward call: RDMA_MSG with
    /// no chunks, granting our reverse-direction credits (RFC 8167 section
    /// 5.2). It takes no forward credit: the server keeps Receives for the
    /// replies to its calls (section 4.3.2).
    pub(super) fn send_bc_reply(&self, x: Xprt<'_>, rqst: &Rqst<'_>, locked: &mut SendLocked<'_>) -> Result {
        let Some(ep) = self.ep.get(locked).and_then(Option::as_ref) else {
            return Err(errno::ENOTCONN());
        };
        let len = rqst.send_len();
        let threshold = ep.shared().inline().0;
        let version = if ep.shared().is_v2() { Version::V2 } else { Version::V1 };
        if len > plan::backward_max_payload(threshold) as usize {
            // A reply we cannot send ends the connection (RFC 8166 section
            // 4.5.4): the server learns at once that its call failed.
            pr_warn!("backchannel reply of {} bytes does not fit inline: closing the connection\n", len);
            COUNTERS.backward_replies_unsendable.fetch_add(1, Ordering::Relaxed);
            rpc::Transport::close(self, x, locked);
            return Err(errno::ENOTCONN());
        }
        let xid = u32::from_be(rqst.xid_be());
        let epoch = ep.shared().release_epoch();
        let sent = ep.conn.send_copied(HeaderFill {
            rqst,
            version,
            xid,
            credits: BC_SLOTS as u32,
            nomsg: false,
            dir: v2::Direction::Reply,
            lists: CallLists::Any(v1::ChunkLists::NONE),
            len,
        });
        match sent {
            // Copied: nothing of the request is in the device's reach.
            Ok(()) => {
                trace::cb_reply(|| x.addr_str(), xid);
                rqst.sent(len);
                Ok(())
            }
            Err(e) if e == errno::ENOBUFS() => {
                wait_for_space(x, ep, &epoch);
                Err(EAGAIN)
            }
            Err(_) => {
                rpc::Transport::close(self, x, locked);
                Err(errno::ENOTCONN())
            }
        }
    }
}

/// Why a backward call was not delivered.
enum Undelivered {
    /// Every backchannel request is in use: the server sent more calls than
    /// it was granted.
    Overflow,
    /// The call was bad, or nobody serves it.
    Refused,
}

/// The backchannel requests of a transport, and which are free.
pub(super) struct BcPool {
    rqsts: KVec<BcRqst>,
    free: Pin<KBox<SpinLock<FreeList>>>,
}

impl BcPool {
    /// `n` requests.
    pub(super) fn new(n: usize) -> Result<Self> {
        let mut rqsts = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            rqsts.push(BcRqst::new()?, GFP_KERNEL)?;
        }
        let free = KBox::pin_init(new_spinlock!(FreeList::full(n)?, "rpcrdma_rs:bc"), GFP_KERNEL)?;
        Ok(BcPool { rqsts, free })
    }

    /// Hands the backward call `msg` (the RPC message from its XID on) to
    /// the transport's callback service.
    fn deliver(&self, x: Xprt<'_>, msg: &[u8]) -> core::result::Result<(), Undelivered> {
        let i = self.free.lock().pop().ok_or(Undelivered::Overflow)?;
        let Some(rqst) = self.rqsts.get(i) else { return Err(Undelivered::Overflow) };
        match rqst.deliver(x, msg) {
            Ok(()) => Ok(()),
            Err(e) => {
                // Busy cannot happen (it came off the free list); keep it out.
                if e != BcError::Busy {
                    self.free.lock().push(i);
                }
                Err(Undelivered::Refused)
            }
        }
    }

    /// `bc_free_rqst`: a request comes back from the callback service.
    pub(super) fn give_back(&self, freed: FreedBcRqst<'_>) {
        if let Some(i) = self.rqsts.iter().position(|r| r.take_back(&freed)) {
            self.free.lock().push(i);
        }
    }
}

impl EpShared {
    pub(super) fn backward_call(&self, xid: u32, msg: &[u8]) {
        trace::cb_call(|| self.xprt.get().addr_str(), xid);
        match self.bc.deliver(self.xprt.get(), msg) {
            Ok(()) => {
                COUNTERS.backward_calls.fetch_add(1, Ordering::Relaxed);
            }
            Err(Undelivered::Overflow) => {
                // The server sent more calls than we granted.
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!(
                        "{}: server sent more than the {} backward calls we granted; reconnecting\n",
                        self.xprt.get().addr_str(),
                        BC_SLOTS
                    );
                }
                COUNTERS.backchannel_overflows.fetch_add(1, Ordering::Relaxed);
                self.force_disconnect();
            }
            Err(Undelivered::Refused) => {
                self.count_bad_reply(xid, c_str!("backward call not delivered"));
            }
        }
    }

    /// Answers a backward call that carries chunks with RDMA_ERROR /
    /// ERR_CHUNK: we move no reverse-direction data by RDMA (RFC 8167
    /// section 5.3), and callbacks never need to.
    pub(super) fn refuse_backward_chunks(&self, conn: &Live<'_, Self>, xid: u32) {
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("{}: backward call with chunks refused with ERR_CHUNK\n", self.xprt.get().addr_str());
        }
        self.count_bad_reply(xid, c_str!("backward call with chunks"));
        let v2 = self.is_v2();
        let sent = self.send_answer(conn, "ERR_CHUNK", |buf| {
            if v2 {
                // Version Two has no ERR_CHUNK: the closest is a header we
                // cannot process.
                let err = v2::Header::error(xid, BC_SLOTS as u32, v2::ErrorBody::BadHeader);
                err.encode(buf).map_err(|_| EINVAL)
            } else {
                let err = v1::Body::Error(v1::ErrorBody::Chunk);
                v1::encode(buf, xid, BC_SLOTS as u32, &err).map_err(|_| EINVAL)
            }
        });
        if sent {
            COUNTERS.backward_chunk_errors.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl RdmaXprt {
    /// Backward messages travel inline: the largest RPC message one may be.
    pub(super) fn bc_max_payload(&self) -> usize {
        // Backward calls and replies travel inline, in one page each side.
        let inline = self.settings.inline_read.min(self.settings.inline_write).min(PAGE_SIZE);
        self.ep.with(|ep| match ep {
            Some(ep) => {
                let (send, recv) = ep.shared().inline();
                plan::backward_max_payload(send.min(recv).min(PAGE_SIZE)) as usize
            }
            None => plan::backward_max_payload(inline) as usize,
        })
    }
}
