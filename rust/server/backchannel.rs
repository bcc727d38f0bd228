// SPDX-License-Identifier: GPL-2.0

//! The backchannel (RFC 8167) from the server's side: NFSv4.1 callbacks
//! sent to a client over its forward connection.
//!
//! nfsd makes its callback client for a connection by ident
//! (`XPRT_TRANSPORT_RDMA | XPRT_TRANSPORT_BC`), naming the server
//! transport; the `rdma backchannel` class ([`BcClass`]) answers with a
//! [`BcXprt`]: an `rpc_xprt` whose calls go out as RDMA_MSG (RDMA2_MSG,
//! direction Call, on Version Two) with no chunks, copied into a Send of
//! the forward connection, whose replies the connection's Receive
//! completions find among the calls ([`ConnState::received`] and
//! `proto::responder::backward_reply`) and complete at once. Its requests
//! ([`BC_REQUESTS`]) are its credits: the calls it asks the client to take,
//! and the Receives the connection keeps beyond the forward credits for
//! their replies (section 4.3). It lives as long as SUNRPC keeps it; the
//! connection lends it its Send buffers and lets it go when it goes.

use core::sync::atomic::Ordering;

use kernel::{
    c_str, new_spinlock,
    prelude::*,
    str::CStr,
    sync::{Arc, SpinLock},
};

use super::{
    recv::ConnState,
    stats::COUNTERS,
    xprt::{Role, ServerXprt},
};
use crate::{
    kapi::{
        compat, errno,
        rpc::{
            self, ClassSlot, ClassSlotRef, CreateArgs, FreedRqst, Lent, Rqst, RqstStorage, RpcTimeout, SendLocked, Task,
            TransportClass, Xprt, XprtParams, XprtRef, MAX_NETIDS,
        },
        time, trace, PAGE_SIZE,
    },
    proto::{
        responder::BackwardReply,
        v1,
        v2::{self, Version},
        xchar::BkReqSup,
    },
    verbs::{Copying, FreeList, SendWriter},
};

/// Backward calls a connection has in flight at once: the backchannel's
/// requests, the credits its calls ask for, and the Receives a connection
/// keeps for their replies beyond its forward credits.
pub(super) const BC_REQUESTS: u32 = 4;

/// `XPRT_TRANSPORT_BC`: set in the ident of a backchannel class.
const XPRT_TRANSPORT_BC: u32 = 1 << 31;

/// The registered class.
static CLASS: ClassSlot = ClassSlot::new();

/// A callback's retransmit timeout (nfsd gives its own to its clients).
static TIMEOUT: RpcTimeout = RpcTimeout::new(60 * time::HZ);

/// The `rdma backchannel` class: what nfsd's callback client for one of
/// our connections is made with.
pub(crate) struct BcClass;

impl TransportClass for BcClass {
    const NAME: &'static CStr = c_str!("rdma backchannel");
    const IDENT: u32 = super::xprt::XPRT_TRANSPORT_RDMA | XPRT_TRANSPORT_BC;
    /// None: a backchannel is never mounted.
    const NETIDS: [&'static CStr; MAX_NETIDS] = [c_str!(""), c_str!("")];
    const SLOT: ClassSlotRef = ClassSlotRef::new(&CLASS);

    fn setup(args: &CreateArgs<'_>) -> Result<rpc::NewXprt> {
        let p = XprtParams {
            max_slots: BC_REQUESTS,
            max_payload: PAGE_SIZE,
            timeout: 60 * time::HZ,
            reestablish: 0,
            max_reconnect: 0,
            idle: 0,
            bind: 0,
            rpc_timeout: &TIMEOUT,
        };
        let netid = if args.is_ipv6() { c_str!("rdma6") } else { c_str!("rdma") };
        rpc::new_bc_xprt::<BcXprt, ServerXprt>(args, compat::this_module(), &p, netid, |x, server| {
            let bc = Arc::pin_init(BcXprt::new(x, server.clone()), GFP_KERNEL)?;
            match &server.role {
                Role::Conn(c) => c.attach_backchannel(bc.clone())?,
                Role::Listener(_) => return Err(EINVAL),
            }
            Ok(bc)
        })
    }
}

/// A connection's backchannel transport: its requests, and the server
/// transport whose connection carries its calls.
#[pin_data]
pub(crate) struct BcXprt {
    xprt: XprtRef,
    server: Arc<ServerXprt>,
    /// The requests, each with its call and reply buffer; a request's tag
    /// is its index.
    rqsts: KVec<RqstStorage>,
    #[pin]
    free: SpinLock<FreeList>,
}

impl BcXprt {
    fn new(xprt: XprtRef, server: Arc<ServerXprt>) -> impl PinInit<Self, Error> {
        try_pin_init!(BcXprt {
            xprt,
            server,
            rqsts: {
                let mut v = KVec::with_capacity(BC_REQUESTS as usize, GFP_KERNEL)?;
                for i in 0..BC_REQUESTS as usize {
                    v.push(RqstStorage::new(i)?, GFP_KERNEL)?;
                }
                v
            },
            free <- new_spinlock!(FreeList::full(BC_REQUESTS as usize)?, "rpcrdma_rs:bc_free"),
        }? Error)
    }

    fn conn_state(&self) -> Option<&ConnState> {
        match &self.server.role {
            Role::Conn(c) => Some(c),
            Role::Listener(_) => None,
        }
    }

    /// A free request and its index.
    fn take_free(&self) -> Option<(usize, &RqstStorage)> {
        let i = self.free.lock().pop()?;
        Some((i, self.rqsts.get(i)?))
    }

    /// Completes the backward call `r` answers, with its reply, from the
    /// connection's Receive completion: the client's grant of backward
    /// credits opens the congestion window (at least one, at most our
    /// requests). A reply that answers no call waiting is dropped.
    pub(super) fn complete(&self, r: &BackwardReply<'_>) {
        let x = self.xprt.get();
        let Some(p) = x.lookup(r.xid.to_be()) else {
            COUNTERS.bc_replies_dropped.fetch_add(1, Ordering::Relaxed);
            return;
        };
        // Unpinned (left waiting) when it goes unanswered below.
        let Some(s) = self.rqsts.get(p.tag()).filter(|s| s.owns_pinned(&p)) else { return };
        // Nothing of a backward call is ever in the device's reach: its
        // lender never lends.
        let Some(closed) = s.lender().close_idle() else { return };
        let Ok(done) = s.released(p, closed) else { return };
        x.set_cwnd(u64::from(r.credits.clamp(1, BC_REQUESTS)) << RPC_CWNDSHIFT);
        COUNTERS.bc_replies.fetch_add(1, Ordering::Relaxed);
        trace::svc_cb_reply(|| self.server.svc().peer_text(), r.xid);
        done.complete_with(r.reply);
    }
}

/// SUNRPC's congestion window unit (`RPC_CWNDSHIFT`): one request.
const RPC_CWNDSHIFT: u32 = 8;

#[vtable]
impl rpc::Transport for BcXprt {
    fn alloc_slot(&self, x: Xprt<'_>, task: &Task<'_>) {
        if let Some((_, s)) = self.take_free() {
            if s.lend(task) {
                return;
            }
            // A free request that is lent: a bug; it stays out of use.
        }
        x.add_backlog(task);
        // One freed meanwhile found nobody on the backlog.
        if let Some((i, s)) = self.take_free() {
            if !s.lend_to_backlog(x) {
                self.free.lock().push(i);
            }
        }
    }

    fn free_slot(&self, x: Xprt<'_>, rqst: FreedRqst<'_>) {
        let i = rqst.tag();
        let Some(s) = self.rqsts.get(i) else { return };
        if s.take_back(x, rqst) {
            self.free.lock().push(i);
        }
    }

    fn storage<'a>(&'a self, rqst: &Rqst<'_>) -> Option<&'a RqstStorage> {
        self.rqsts.get(rqst.tag()).filter(|s| s.owns(rqst))
    }

    fn release_request<'a>(&'a self, _x: Xprt<'_>, rqst: &Rqst<'_>) -> Option<&'a RqstStorage> {
        // Nothing held: a call is copied into its Send.
        self.storage(rqst)
    }

    fn connect(_this: Lent<'_, Self>, x: Xprt<'_>, _task: &Task<'_>) {
        // The client connects; a backchannel whose connection went is
        // done (nfsd's callbacks never ask to connect).
        x.connect_not_started(errno::ENOTCONN());
    }

    fn close(&self, x: Xprt<'_>, _locked: &mut SendLocked<'_>) {
        // Never called (see `close_unlocked`).
        self.close_unlocked(x);
    }

    fn close_unlocked(&self, x: Xprt<'_>) {
        x.mark_disconnected();
    }

    fn send_request(this: Lent<'_, Self>, _x: Xprt<'_>, rqst: &Rqst<'_>, _locked: &mut SendLocked<'_>) -> Result {
        let server = &this.server;
        let c = this.conn_state().filter(|_| !server.svc().is_dead()).ok_or_else(errno::ENOTCONN)?;
        let r = c.send_backward(rqst);
        match &r {
            Ok(()) => trace::svc_cb_call(|| server.svc().peer_text(), u32::from_be(rqst.xid_be())),
            Err(e) if *e == errno::ENOTCONN() => server.svc().close_later(),
            Err(_) => {}
        }
        r
    }

    fn shutdown(&self, _x: Xprt<'_>, _locked: &mut SendLocked<'_>) {}
}

impl ConnState {
    /// Sends the backward call `rqst` (RFC 8167 section 4.1): its transport
    /// header, in the connection's version, asks for our backward
    /// credits, and the call follows it in the same Send. No Send buffer
    /// free: `ENOBUFS` (SUNRPC tries again shortly; the thread is
    /// rpciod's). Too long for the client's Receives: `EMSGSIZE`, the
    /// callback fails; so does one to a client that takes none
    /// (`EPROTONOSUPPORT`).
    pub(super) fn send_backward(&self, rqst: &Rqst<'_>) -> Result {
        let conn = self.connection().filter(|_| !self.is_detached()).ok_or_else(errno::ENOTCONN)?;
        // A Version Two client that says it takes no backward requests
        // (xcharext section 3.3) gets none: the callback fails.
        if self.version.get() == Version::V2 && self.peer.lock().brs == BkReqSup::None {
            return Err(errno::EPROTONOSUPPORT());
        }
        let len = rqst.send_len();
        let xid = u32::from_be(rqst.xid_be());
        let max = self.send_max() as usize;
        rqst.stamp_xmit();
        conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
            let room = w.room();
            let room = room.get_mut(..max.min(room.len())).unwrap_or_default();
            let n = self.encode_backward_header(room, xid)?;
            let end = n.checked_add(len).ok_or_else(errno::EMSGSIZE)?;
            let body = room.get_mut(n..end).ok_or_else(errno::EMSGSIZE)?;
            rqst.copy_call_at(0, body)?;
            w.copied(end)
        })?;
        rqst.sent(len);
        COUNTERS.bc_calls.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Encodes the transport header of the backward call `xid`: RDMA_MSG
    /// with no chunks (RDMA2_MSG, direction Call, on Version Two), asking
    /// for [`BC_REQUESTS`] credits. Its length.
    fn encode_backward_header(&self, out: &mut [u8], xid: u32) -> Result<usize> {
        match self.version.get() {
            Version::V1 => v1::encode_msg(out, xid, BC_REQUESTS, &v1::ChunkLists::NONE).map_err(|_| errno::EMSGSIZE()),
            Version::V2 => {
                let c = v2::Chunks { direction: v2::Direction::Call, lists: v1::ChunkLists::NONE };
                v2::Header { xid, credit: BC_REQUESTS, body: v2::Body::Msg(c) }.encode(out).map_err(|_| errno::EMSGSIZE())
            }
        }
    }
}
