// SPDX-License-Identifier: GPL-2.0

//! The `rdma` transport class and its transports.
//!
//! Ownership, per object:
//! - [`RdmaXprt`] belongs to SUNRPC's `rpc_xprt` (made in `setup`, dropped in
//!   `destroy`). It owns the current [`Endpoint`], if connected.
//! - [`Endpoint`] is one connection. Its [`Connection`] owns the cm_id, the
//!   verbs objects and every Send and Receive buffer; dropping the endpoint
//!   drains the queue pair before anything is freed.
//! - A call is copied into a pre-mapped Send buffer of the endpoint, so the
//!   HCA never reads memory SUNRPC owns; a reply is copied out of the Receive
//!   buffer into the request before the buffer is reposted.

use core::{
    ptr::NonNull,
    sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox},
    c_str,
    ffi::c_void,
    new_condvar, new_spinlock,
    prelude::*,
    str::CStr,
    sync::{Arc, CondVar, SpinLock},
};

use crate::{
    kapi::{
        errno,
        rdma::{CmEvent, Completion, ConnHandler, Connection, QpConfig, Received},
        rpc::{self, Create, PinnedRqst, Rqst, StatsWriter, Task, Xprt, XprtParams},
        work::{DelayedWork, DelayedWorkItem},
        xprt,
    },
    params,
    proto::{cm, credits, stats, v1},
    sys,
};

/// `XPRT_TRANSPORT_RDMA`: the ident NFS asks for with `proto=rdma`.
const XPRT_TRANSPORT_RDMA: u32 = 256;
/// Largest RPC payload (the in-tree client's: 1 MiB plus a page).
const MAX_PAYLOAD: u32 = (1 << 20) + 4096;
/// Address and route resolution timeout.
const RESOLVE_TIMEOUT_MS: u32 = 5000;
/// First reconnect delay, and the idle time before autoclose (in-tree values).
const INIT_REEST_S: u32 = 5;
const MAX_REEST_S: u32 = 30;
const IDLE_DISC_S: u32 = 5 * 60;
const BIND_S: u32 = 60;
/// Backchannel requests we keep Receives for (RFC 8167 support comes later).
const BC_RECEIVES: usize = 2;

/// The RPC-over-RDMA transport class.
pub(crate) struct RdmaTransport;

impl xprt::TransportClass for RdmaTransport {
    const NAME: &'static CStr = c_str!("rdma");
    const IDENT: u32 = XPRT_TRANSPORT_RDMA;
    const NETIDS: [&'static CStr; xprt::MAX_NETIDS] = [c_str!("rdma"), c_str!("rdma6")];

    fn setup(args: &xprt::CreateArgs<'_>) -> Result<NonNull<sys::rpc_xprt>> {
        if args.is_backchannel() {
            pr_warn!("backchannel transports are not supported\n");
            return Err(errno::EPROTONOSUPPORT());
        }
        let create = Create { raw: args.raw() };
        let server = args.servername().unwrap_or(c_str!("(unnamed)"));
        pr_debug!("creating a transport to {}\n", server);
        let v6 = args.is_ipv6();
        let s = |secs: u32| rpc::ms_to_jiffies(secs.saturating_mul(1000));
        let p = XprtParams {
            max_slots: params::slot_table_entries(),
            max_payload: MAX_PAYLOAD,
            timeout: s(60),
            reestablish: s(INIT_REEST_S),
            max_reconnect: s(MAX_REEST_S),
            idle: s(IDLE_DISC_S),
            bind: s(BIND_S),
        };
        let netid = if v6 { c_str!("rdma6") } else { c_str!("rdma") };
        rpc::new_xprt::<RdmaXprt>(&create, &crate::THIS_MODULE, &p, netid, |x| {
            let t = KBox::pin_init(RdmaXprt::new(x, p.max_slots), GFP_KERNEL)?;
            DelayedWork::init(t.as_ref());
            // The transport stays pinned at this address until `destroy`.
            Ok(t)
        })
    }
}

/// Transport statistics (the RDMA-specific part of the mountstats line).
#[derive(Default)]
struct Stats {
    bad_reply: AtomicU64,
    failed_marshal: AtomicU64,
    empty_sendctx_q: AtomicU64,
    pullup_copy: AtomicU64,
    total_rdma_request: AtomicU64,
}

/// One RPC-over-RDMA transport.
#[pin_data]
pub(crate) struct RdmaXprt {
    /// First field: dropping it cancels a pending connect before anything
    /// the connect worker uses goes away.
    connect_work: DelayedWork<RdmaXprt>,
    xprt: Xprt<'static>,
    max_requests: u32,
    #[pin]
    ep: SpinLock<Option<Arc<Endpoint>>>,
    /// The task holding the connect lock, as SUNRPC's cookie.
    connecting: AtomicBool,
    /// Set once a connect attempt has been made (reconnects back off).
    tried: AtomicBool,
    stats: Stats,
}

impl RdmaXprt {
    fn new(xprt: Xprt<'static>, max_requests: u32) -> impl PinInit<Self, Error> {
        try_pin_init!(RdmaXprt {
            connect_work: DelayedWork::new(),
            xprt,
            max_requests,
            ep <- new_spinlock!(None, "rpcrdma_rs:ep"),
            connecting: AtomicBool::new(false),
            tried: AtomicBool::new(false),
            stats: Stats::default(),
        })
    }

    fn cookie(&self) -> *mut c_void {
        (self as *const Self).cast_mut().cast()
    }

    fn endpoint(&self) -> Option<Arc<Endpoint>> {
        self.ep.lock().clone()
    }

    fn disconnect(&self) {
        let ep = self.ep.lock().take();
        // Dropping the last reference drains and tears the connection down.
        drop(ep);
    }

    /// Establishes a new connection (connect worker).
    fn establish(&self) -> Result<Arc<Endpoint>> {
        let x = self.xprt;
        let shared = Arc::pin_init(EpShared::new(x, self.max_requests), GFP_KERNEL)?;
        // SAFETY: the transport's network namespace outlives the transport,
        // and so every connection of it.
        let mut conn = unsafe { Connection::new(x.net(), shared.clone())? };
        // SAFETY: `peer` is the transport's own address storage.
        unsafe { conn.resolve_addr(x.peer(), RESOLVE_TIMEOUT_MS)? };
        shared.wait(CmState::AddrResolved, RESOLVE_TIMEOUT_MS)?;
        conn.resolve_route(RESOLVE_TIMEOUT_MS)?;
        shared.wait(CmState::RouteResolved, RESOLVE_TIMEOUT_MS)?;

        let caps = conn.device_caps()?;
        let (inline_send, inline_recv) = (params::max_inline_write(), params::max_inline_read());
        // Every outstanding call needs a Send and, with the backchannel, a
        // Receive; the device bounds both queues.
        let limit = (caps.max_qp_wr as usize).saturating_sub(BC_RECEIVES + 1);
        let max_requests = (self.max_requests as usize).min(limit);
        if max_requests == 0 {
            pr_err!("device {:?} cannot hold any RPC-over-RDMA request\n", conn.device_name());
            return Err(ENOMEM);
        }
        conn.create_qp(QpConfig {
            send_bufs: max_requests,
            send_buf_size: inline_send as usize,
            recv_bufs: max_requests + BC_RECEIVES,
            recv_buf_size: inline_recv as usize,
        })?;
        shared.max_requests.store(max_requests as u32, Ordering::Relaxed);
        // RFC 8797: our inline sizes, and that we handle Send With Invalidate.
        let ours = cm::PrivateData::new(inline_send, inline_recv, true);
        let pdata = ours.to_bytes();
        conn.connect(&pdata, caps.max_qp_rd_atom.min(255) as u8)?;
        let connect_ms = params::connect_timeout_ms();
        shared.wait(CmState::Established, connect_ms)?;
        Ok(Arc::new(Endpoint { conn }, GFP_KERNEL)?)
    }
}

impl DelayedWorkItem for RdmaXprt {
    fn work(&self) -> &DelayedWork<Self> {
        &self.connect_work
    }

    fn run(&self) {
        let x = self.xprt;
        self.disconnect();
        self.tried.store(true, Ordering::Relaxed);
        let result = self.establish();
        let status = match result {
            Ok(ep) => {
                let n = ep.shared().negotiated();
                pr_info!(
                    "connected to {} port {} via {}: inline thresholds {} (calls) and {} (replies)\n",
                    x.addr_str(),
                    x.port(),
                    ep.conn.device_name().unwrap_or(c_str!("?")),
                    n.send_threshold,
                    n.recv_threshold
                );
                // RFC 8166 section 3.3.3: one credit until the peer says more.
                x.set_credits(1);
                *self.ep.lock() = Some(ep);
                x.count_connect();
                x.set_connected();
                Ok(())
            }
            Err(e) => {
                pr_info!("cannot connect to {} port {}: error {}\n", x.addr_str(), x.port(), e.to_errno());
                Err(e)
            }
        };
        self.connecting.store(false, Ordering::Release);
        x.connect_finished(self.cookie(), status);
    }
}

impl rpc::Transport for RdmaXprt {
    fn connect(&self, x: Xprt<'_>, task: &Task<'_>) {
        if !x.lock_connect(task, self.cookie()) {
            return;
        }
        self.connecting.store(true, Ordering::Release);
        let delay = if self.tried.load(Ordering::Relaxed) {
            x.reconnect_delay(rpc::ms_to_jiffies(INIT_REEST_S * 1000))
        } else {
            0
        };
        self.connect_work.queue(delay);
    }

    fn close(&self, x: Xprt<'_>) {
        self.disconnect();
        x.disconnect_done();
    }

    fn send_request(&self, x: Xprt<'_>, rqst: &Rqst<'_>) -> Result {
        if !x.connected() {
            return Err(errno::ENOTCONN());
        }
        if !rqst.get_cong(x) {
            return Err(errno::EBADSLT());
        }
        let Some(ep) = self.endpoint() else {
            return Err(errno::ENOTCONN());
        };
        // A retransmission on the same connection would spend a credit the
        // server never granted: reconnect instead (RFC 8166 section 3.3).
        if rqst.sent_on_this_connection(x) {
            self.close(x);
            return Err(errno::ENOTCONN());
        }
        let n = ep.shared().negotiated();
        let len = rqst.send_len();
        let total = v1::MIN_MSG_HEADER_LEN + len;
        if total > n.send_threshold as usize || rqst.recv_buflen() + v1::MIN_MSG_HEADER_LEN > n.recv_threshold as usize {
            // Chunked calls and replies (FRWR) are not implemented yet.
            self.stats.failed_marshal.fetch_add(1, Ordering::Relaxed);
            pr_warn_ratelimited(&self.stats, len, rqst.recv_buflen());
            return Err(EIO);
        }
        let credits = ep.shared().max_requests.load(Ordering::Relaxed);
        let sent = ep.conn.send(|buf| {
            let hdr = v1::encode_msg(buf, u32::from_be(rqst.xid_be()), credits, &v1::ChunkLists::NONE)
                .map_err(|_| EINVAL)?;
            let body = buf.get_mut(hdr..hdr + len).ok_or(EINVAL)?;
            rqst.copy_call(body)?;
            Ok(hdr + len)
        });
        match sent {
            Ok(()) => {}
            Err(e) if e == errno::ENOBUFS() => {
                self.stats.empty_sendctx_q.fetch_add(1, Ordering::Relaxed);
                x.wait_for_buffer_space();
                return Err(EAGAIN);
            }
            Err(_) => {
                self.close(x);
                return Err(errno::ENOTCONN());
            }
        }
        self.stats.pullup_copy.fetch_add(1, Ordering::Relaxed);
        rqst.sent(len);
        if !rqst.reply_expected() {
            // No reply means no credit back: start over with a fresh grant.
            self.close(x);
            return Err(errno::ENOTCONN());
        }
        Ok(())
    }

    fn timer(&self, x: Xprt<'_>) {
        // RDMA has no keepalive: a timed-out RPC means the connection may be
        // dead. Reconnect, and everything is retransmitted.
        x.force_disconnect();
    }

    fn inject_disconnect(&self, _x: Xprt<'_>) {
        if let Some(ep) = self.endpoint() {
            ep.conn.disconnect();
        }
    }

    fn print_stats(&self, x: Xprt<'_>, out: &mut StatsWriter<'_>) {
        let st = x.stat();
        let hz = u64::from(sys::HZ);
        let ep = self.endpoint();
        let shared = ep.as_ref().map(|e| e.shared());
        let c = stats::Counters {
            bind_count: st.bind_count,
            connect_count: st.connect_count,
            connect_time: st.connect_time / hz,
            idle_time: stats::idle_time_secs(x.connected(), rpc::jiffies(), x.last_used(), hz),
            sends: st.sends,
            recvs: st.recvs,
            bad_xids: st.bad_xids,
            req_u: st.req_u,
            bklog_u: st.bklog_u,
            pullup_copy_count: self.stats.pullup_copy.load(Ordering::Relaxed),
            failed_marshal_count: self.stats.failed_marshal.load(Ordering::Relaxed),
            bad_reply_count: self.stats.bad_reply.load(Ordering::Relaxed)
                + shared.map_or(0, |s| s.bad_reply.load(Ordering::Relaxed)),
            empty_sendctx_q: self.stats.empty_sendctx_q.load(Ordering::Relaxed),
            total_rdma_request: self.stats.total_rdma_request.load(Ordering::Relaxed),
            ..Default::default()
        };
        let mut line = stats::LineBuf::<{ stats::MOUNTSTATS_MAX_LEN + 1 }>::new();
        if stats::write_mountstats(&mut line, &c).is_ok() && core::fmt::Write::write_str(&mut line, "\0").is_ok() {
            if let Ok(s) = CStr::from_bytes_with_nul(line.as_bytes()) {
                out.puts(s);
            }
        }
    }

    fn shutdown(&self, _x: Xprt<'_>) {
        self.connect_work.cancel_sync();
        self.disconnect();
    }
}

fn pr_warn_ratelimited(stats: &Stats, call: usize, reply: usize) {
    // One line per transport is enough to say what is missing.
    if stats.failed_marshal.load(Ordering::Relaxed) == 1 {
        pr_warn!(
            "RPC needs chunks (call {} bytes, reply up to {} bytes), which are not implemented yet\n",
            call,
            reply
        );
    }
}

/// Where a connection is in its setup.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CmState {
    Idle,
    AddrResolved,
    RouteResolved,
    Established,
    Failed(i32),
    Closed,
}

/// The part of a connection its completion and CM handlers share.
#[pin_data]
struct EpShared {
    xprt: Xprt<'static>,
    #[pin]
    state: SpinLock<(CmState, Option<cm::Negotiated>)>,
    #[pin]
    changed: CondVar,
    max_requests: AtomicU32,
    credits: AtomicU32,
    /// xprt_force_disconnect is asked for at most once per connection.
    disconnecting: AtomicBool,
    bad_reply: AtomicU64,
}

impl EpShared {
    fn new(xprt: Xprt<'static>, max_requests: u32) -> impl PinInit<Self, Error> {
        try_pin_init!(EpShared {
            xprt,
            state <- new_spinlock!((CmState::Idle, None), "rpcrdma_rs:cm_state"),
            changed <- new_condvar!("rpcrdma_rs:cm_changed"),
            max_requests: AtomicU32::new(max_requests),
            credits: AtomicU32::new(1),
            disconnecting: AtomicBool::new(false),
            bad_reply: AtomicU64::new(0),
        })
    }

    fn set(&self, s: CmState) {
        self.state.lock().0 = s;
        self.changed.notify_all();
    }

    /// Waits until the connection reaches `want`, fails, or `ms` pass.
    fn wait(&self, want: CmState, ms: u32) -> Result {
        let mut left = rpc::ms_to_jiffies(ms) as i64;
        let mut g = self.state.lock();
        loop {
            match g.0 {
                s if s == want => return Ok(()),
                CmState::Failed(e) => return Err(Error::from_errno(e)),
                CmState::Closed => return Err(errno::ECONNABORTED()),
                _ => {}
            }
            if left <= 0 {
                return Err(errno::ETIMEDOUT());
            }
            match self.changed.wait_interruptible_timeout(&mut g, left as _) {
                kernel::sync::CondVarTimeoutResult::Woken { jiffies } => left = jiffies as i64,
                kernel::sync::CondVarTimeoutResult::Timeout => left = 0,
                kernel::sync::CondVarTimeoutResult::Signal { .. } => return Err(ERESTARTSYS),
            }
        }
    }

    fn negotiated(&self) -> cm::Negotiated {
        self.state.lock().1.unwrap_or(cm::negotiate(
            cm::DEFAULT_INLINE_SIZE,
            cm::DEFAULT_INLINE_SIZE,
            false,
            None,
        ))
    }

    fn force_disconnect(&self) {
        if !self.disconnecting.swap(true, Ordering::AcqRel) {
            self.xprt.force_disconnect();
        }
    }

    fn reply(&self, data: &[u8]) {
        let limits = v1::Limits::DEFAULT;
        let (hdr, payload) = match v1::Header::decode_split(data, &limits) {
            Ok(h) => h,
            Err(_) => {
                // Unparseable (short, wrong version, bad procedure): drop it.
                self.bad_reply.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        self.xprt.clear_reestablish_timeout();
        let max = self.max_requests.load(Ordering::Relaxed);
        let grant = credits::sanitize_grant(hdr.credits, max);
        if self.credits.swap(grant, Ordering::Relaxed) != grant {
            self.xprt.set_credits(grant);
        }
        let Some(rqst) = self.xprt.lookup(hdr.xid.to_be()) else {
            // No such XID (a late reply, or a backchannel call): the counter
            // SUNRPC keeps for TCP counts it in `bad_xids`; we count it here.
            self.bad_reply.fetch_add(1, Ordering::Relaxed);
            return;
        };
        complete(rqst, &hdr, payload, &self.bad_reply);
    }
}

fn complete(rqst: PinnedRqst, hdr: &v1::Header<'_>, payload: &[u8], bad: &AtomicU64) {
    match &hdr.body {
        v1::Body::Msg(chunks) if chunks.reads.is_empty() && chunks.writes.is_empty() && chunks.reply.is_none() => {
            rqst.complete_with(payload)
        }
        v1::Body::Error(_) => rqst.fail(EIO),
        _ => {
            // Chunks we never offered, NOMSG without a Reply chunk, or a
            // retired procedure: the server is confused; fail this RPC.
            bad.fetch_add(1, Ordering::Relaxed);
            rqst.fail(EIO)
        }
    }
}

impl ConnHandler for EpShared {
    fn cm_event(&self, event: CmEvent<'_>) {
        match event {
            CmEvent::AddrResolved => self.set(CmState::AddrResolved),
            CmEvent::RouteResolved => self.set(CmState::RouteResolved),
            CmEvent::Established(pdata) => {
                let peer = cm::PrivateData::find(pdata);
                let n = cm::negotiate(params::max_inline_write(), params::max_inline_read(), true, peer.as_ref());
                let mut g = self.state.lock();
                *g = (CmState::Established, Some(n));
                drop(g);
                self.changed.notify_all();
            }
            CmEvent::AddrError(s) | CmEvent::RouteError(s) => {
                self.set(CmState::Failed(if s < 0 { s } else { errno::EHOSTUNREACH().to_errno() }))
            }
            CmEvent::Unreachable(status) => {
                pr_info!("server unreachable (rdma_cm status {})\n", status);
                self.set(CmState::Failed(errno::ENETUNREACH().to_errno()))
            }
            CmEvent::Rejected(status, pdata) => {
                pr_info!("connection rejected (rdma_cm status {}, {} bytes of private data)\n", status, pdata.len());
                self.set(CmState::Failed(errno::ECONNREFUSED().to_errno()))
            }
            CmEvent::ConnectError(status) => {
                pr_info!("connection error (rdma_cm status {})\n", status);
                self.set(CmState::Failed(errno::ENOTCONN().to_errno()))
            }
            CmEvent::Disconnected | CmEvent::DeviceRemoval | CmEvent::AddrChange => {
                let was = self.state.lock().0;
                self.set(CmState::Closed);
                if was == CmState::Established {
                    self.force_disconnect();
                }
            }
            CmEvent::Other => {}
        }
    }

    fn received(&self, msg: Received<'_>) {
        self.reply(msg.data);
    }

    fn receive_failed(&self, status: u32) {
        pr_warn!("Receive failed (status {}): reconnecting\n", status);
        self.force_disconnect();
    }

    fn send_done(&self, how: Completion) {
        match how {
            Completion::Ok => self.xprt.write_space(),
            Completion::Flushed => {}
            Completion::Failed(status) => {
                pr_warn!("Send failed (status {}): reconnecting\n", status);
                self.force_disconnect();
            }
        }
    }
}

/// One connection of a transport.
struct Endpoint {
    conn: Connection<EpShared>,
}

impl Endpoint {
    fn shared(&self) -> &EpShared {
        self.conn.handler()
    }
}
