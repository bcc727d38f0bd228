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

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

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
        PAGE_SIZE,
        ratelimit::RateLimit,
        time,
        rdma::{self, CmEvent, Completion, ConnHandler, Connection, Live, PagesInFlight, QpConfig, Received, RecvCache, Registration},
        rpc::{self, BcError, BcPool, Create, PinnedRqst, Rqst, SlotTable, StatsWriter, Task, Which, Xprt, XprtParams},
        work::{DelayedWork, DelayedWorkItem},
        xprt,
    },
    params,
    proto::{
        cm, credits, plan, stats, v1,
        v2::{self, ConnVersion, Decision, Version},
        xchar::{self, Characteristics, XchOp, Xchar, XcharSpec, XcharSubset},
    },
    vers,
};

/// `XPRT_TRANSPORT_RDMA`: the ident NFS asks for with `proto=rdma`.
const XPRT_TRANSPORT_RDMA: u32 = 256;
/// Largest RPC payload (the in-tree client's: 1 MiB plus a page).
const MAX_PAYLOAD: u32 = (1 << 20) + PAGE_SIZE;
/// Address and route resolution timeout.
const RESOLVE_TIMEOUT_MS: u32 = 5000;
/// First reconnect delay, and the idle time before autoclose (in-tree values).
const INIT_REEST_S: u32 = 5;
const MAX_REEST_S: u32 = 30;
const IDLE_DISC_S: u32 = 5 * 60;
/// The work ID of [`RdmaXprt`]'s liveness check (the connect worker is 0).
const LIVENESS: u64 = 1;
const BIND_S: u32 = 60;
/// Backward (server to client) requests we accept at once: our
/// reverse-direction credit grant, the callback session's slot limit, and
/// the Receives we keep posted for them beyond the forward ones (RFC 8167
/// section 4.3.1).
const BC_SLOTS: usize = 16;
const BC_RECEIVES: usize = BC_SLOTS;

/// Module-wide FRWR counters, shown in debugfs (`rpcrdma_rs/`): regions
/// registered, regions the server invalidated with Send With Invalidate, and
/// regions we invalidated with LOCAL_INV.
pub(crate) static MRS_REGISTERED: AtomicU64 = AtomicU64::new(0);
/// See [`MRS_REGISTERED`].
pub(crate) static REMOTE_INVALIDATIONS: AtomicU64 = AtomicU64::new(0);
/// See [`MRS_REGISTERED`].
pub(crate) static LOCAL_INVALIDATIONS: AtomicU64 = AtomicU64::new(0);
/// Backward calls (server to client, RFC 8167) handed to the callback
/// service; shown in debugfs.
pub(crate) static BACKWARD_CALLS: AtomicU64 = AtomicU64::new(0);
/// Replies dropped or failed as malformed, unexpected or for no pending
/// call, over all transports (debugfs; mountstats has it per mount).
pub(crate) static BAD_REPLIES: AtomicU64 = AtomicU64::new(0);
/// Liveness probes that failed, each ending its connection (debugfs).
pub(crate) static PROBE_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Backward calls with chunks answered with ERR_CHUNK (debugfs).
pub(crate) static BACKWARD_CHUNK_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Connections dropped because the server exceeded our reverse credits
/// (debugfs).
pub(crate) static BACKCHANNEL_OVERFLOWS: AtomicU64 = AtomicU64::new(0);
/// Connections that settled on RPC-over-RDMA Version Two (debugfs).
pub(crate) static V2_CONNECTIONS: AtomicU64 = AtomicU64::new(0);
/// Version Two probes answered with ERR_VERS, after which the connection
/// went on with Version One (debugfs).
pub(crate) static V1_FALLBACKS: AtomicU64 = AtomicU64::new(0);
/// Transport characteristics messages (xcharext) received and applied,
/// answered or refused (debugfs).
pub(crate) static XCHAR_MESSAGES: AtomicU64 = AtomicU64::new(0);
/// Messages in a protocol version the connection does not speak, answered
/// with ERR_VERS (debugfs).
pub(crate) static ERR_VERS_SENT: AtomicU64 = AtomicU64::new(0);
/// Answers to backward calls (replies, RDMA_ERROR, xcharext responses)
/// that could not be sent, each closing its connection (debugfs).
pub(crate) static BACKWARD_REPLIES_UNSENDABLE: AtomicU64 = AtomicU64::new(0);
/// LOCAL_INV requests that could not be posted, each closing its
/// connection before the RPC completed (debugfs).
pub(crate) static INVALIDATE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// The RPC-over-RDMA transport class.
pub(crate) struct RdmaTransport;

impl xprt::TransportClass for RdmaTransport {
    const NAME: &'static CStr = c_str!("rdma");
    const IDENT: u32 = XPRT_TRANSPORT_RDMA;
    const NETIDS: [&'static CStr; xprt::MAX_NETIDS] = [c_str!("rdma"), c_str!("rdma6")];

    fn setup(args: &xprt::CreateArgs<'_>) -> Result<rpc::NewXprt> {
        if args.is_backchannel() {
            pr_warn!("backchannel transports are not supported\n");
            return Err(errno::EPROTONOSUPPORT());
        }
        let create = Create { raw: args.raw() };
        let server = args.servername().unwrap_or(c_str!("(unnamed)"));
        pr_debug!("creating a transport to {}\n", server);
        let v6 = args.is_ipv6();
        let s = |secs: u32| time::ms_to_jiffies(secs.saturating_mul(1000));
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
        rpc::new_xprt::<RdmaXprt>(&create, crate::kapi::compat::this_module(), &p, netid, |x| {
            let t = KBox::pin_init(RdmaXprt::new(x, p.max_slots, params::Settings::now())?, GFP_KERNEL)?;
            DelayedWork::<RdmaXprt>::init(t.as_ref());
            DelayedWork::<RdmaXprt, LIVENESS>::init(t.as_ref());
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
    total_rdma_reply: AtomicU64,
    read_chunks: AtomicU64,
    write_chunks: AtomicU64,
    reply_chunks: AtomicU64,
    nomsg_calls: AtomicU64,
    mrs_allocated: AtomicU64,
    local_inv_needed: AtomicU64,
}

/// Most segments one Write or Reply chunk is offered with.
const MAX_CHUNK_SEGMENTS: usize = rdma::MAX_MRS / 2;

/// How a request's reply will come back.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
enum ReplyShape {
    #[default]
    Inline,
    /// Its payload into the Write chunk offered.
    WriteChunk,
    /// Whole into the Reply chunk offered.
    ReplyChunk,
}

/// What the transport holds for one request between sending it and its
/// release: the memory regions it registered, the pages its Send may still
/// be reading, and how its reply comes back. The reply is checked against
/// it in place, under the slot's lock: nothing of it is copied per RPC.
struct ReqState {
    reg: Registration,
    sent: PagesInFlight,
    reply: ReplyShape,
    /// The segments of the Write or Reply chunk the call offered (the
    /// first `offered`): the only memory the server may say it wrote
    /// (`v1::check_returned_chunk`).
    segs: [v1::Segment; MAX_CHUNK_SEGMENTS],
    offered: usize,
}

/// What a reply's chunks say against what its call offered.
enum Verdict {
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

impl ReqState {
    /// Judges a reply of `kind` against what the call offered.
    fn judge(&self, kind: &Kind<'_>) -> Verdict {
        let offered = self.segs.get(..self.offered).unwrap_or(&[]);
        match (kind, self.reply) {
            (Kind::Msg(c, _), _) if c.reads.is_empty() && c.writes.is_empty() && c.reply.is_none() => Verdict::Inline,
            (Kind::Msg(c, _), ReplyShape::WriteChunk) if c.reads.is_empty() && c.writes.len() == 1 && c.reply.is_none() => {
                let returned = c.writes.iter().next().unwrap_or(v1::SegmentArray::EMPTY);
                match v1::check_returned_chunk(offered, &returned) {
                    Ok(n) => Verdict::Written(n),
                    Err(e) => Verdict::Foreign(e),
                }
            }
            (Kind::NoMsg(c, _), ReplyShape::ReplyChunk) if c.reads.is_empty() && c.writes.is_empty() => {
                let Some(reply) = c.reply.as_ref() else { return Verdict::Bad };
                match v1::check_returned_chunk(offered, reply) {
                    Ok(n) => Verdict::ReplyWritten(n),
                    Err(e) => Verdict::Foreign(e),
                }
            }
            (Kind::Error, _) => Verdict::Error,
            _ => Verdict::Bad,
        }
    }

    /// True if the state holds regions or a Send's pages to give back.
    fn holds_anything(&self) -> bool {
        !self.reg.is_empty() || !self.sent.is_none()
    }

    /// Takes the request's regions and its Send's pages token out of the
    /// slot, for the caller to invalidate and wait for.
    fn take(&mut self) -> (Registration, PagesInFlight) {
        (
            core::mem::replace(&mut self.reg, Registration::empty()),
            core::mem::replace(&mut self.sent, PagesInFlight::none()),
        )
    }
}

impl Default for ReqState {
    fn default() -> Self {
        ReqState {
            reg: Registration::empty(),
            sent: PagesInFlight::none(),
            reply: ReplyShape::Inline,
            segs: [v1::Segment::default(); MAX_CHUNK_SEGMENTS],
            offered: 0,
        }
    }
}

/// One RPC-over-RDMA transport.
#[pin_data]
pub(crate) struct RdmaXprt {
    /// First field: dropping it cancels a pending connect before anything
    /// the connect worker uses goes away.
    connect_work: DelayedWork<RdmaXprt>,
    /// The liveness check; also goes before what it uses.
    liveness: DelayedWork<RdmaXprt, LIVENESS>,
    /// The connection's Receive count when the liveness check last looked
    /// (`u64::MAX` after a connect: not looked yet).
    receives_seen: AtomicU64,
    xprt: Xprt<'static>,
    max_requests: u32,
    /// The parameters as they were when the transport was created.
    settings: params::Settings,
    /// Numbers the transport's connections (1, 2, ...).
    generation: AtomicU64,
    /// The connection whose replies may change SUNRPC's congestion window
    /// (its generation; 0: none), shared with every connection.
    window: Arc<SpinLock<u64>>,
    #[pin]
    ep: SpinLock<Option<Arc<Endpoint>>>,
    /// The task holding the connect lock, as SUNRPC's cookie.
    connecting: AtomicBool,
    /// Set once a connect attempt has been made (reconnects back off).
    tried: AtomicBool,
    slots: Arc<SlotTable<ReqState>>,
    bc: Arc<BcPool>,
    stats: Arc<Stats>,
    /// Receive buffers kept across connections.
    recv_cache: Arc<RecvCache>,
    /// The connection being set up by the connect worker, so that
    /// `shutdown` can abort it instead of waiting out its timeouts.
    #[pin]
    pending: SpinLock<Option<Arc<EpShared>>>,
    /// Set by `shutdown`: no new connection may be set up.
    dying: AtomicBool,
}

impl RdmaXprt {
    fn new(xprt: Xprt<'static>, max_requests: u32, settings: params::Settings) -> Result<impl PinInit<Self, Error>> {
        let slots = Arc::new(SlotTable::new(max_requests as usize)?, GFP_KERNEL)?;
        let stats = Arc::new(Stats::default(), GFP_KERNEL)?;
        let bc = Arc::new(BcPool::new(BC_SLOTS)?, GFP_KERNEL)?;
        let recv_cache = Arc::pin_init(RecvCache::new(), GFP_KERNEL)?;
        let window = Arc::pin_init(new_spinlock!(0, "rpcrdma_rs:window"), GFP_KERNEL)?;
        Ok(try_pin_init!(RdmaXprt {
            connect_work: DelayedWork::new(),
            liveness: DelayedWork::new(),
            receives_seen: AtomicU64::new(u64::MAX),
            xprt,
            max_requests,
            settings,
            generation: AtomicU64::new(0),
            window,
            ep <- new_spinlock!(None, "rpcrdma_rs:ep"),
            connecting: AtomicBool::new(false),
            tried: AtomicBool::new(false),
            slots,
            bc,
            stats,
            recv_cache,
            pending <- new_spinlock!(None, "rpcrdma_rs:pending"),
            dying: AtomicBool::new(false),
        }))
    }

    fn cookie(&self) -> *mut c_void {
        core::ptr::from_ref(self).cast_mut().cast()
    }

    fn endpoint(&self) -> Option<Arc<Endpoint>> {
        self.ep.lock().clone()
    }

    fn disconnect(&self) {
        let ep = self.ep.lock().take();
        if ep.is_some() {
            // Its late replies no longer move the window (RFC 8166
            // section 3.3.3: credits belong to a connection).
            *self.window.lock() = 0;
        }
        if let Some(ep) = ep.as_ref() {
            let shared = ep.shared();
            if shared.version.lock().probing() {
                // The probe was lost: start with Version One next time
                // (draft section 5.2).
                vers::remember_v1_only(shared.server_key);
                pr_info!("{}: no answer to the Version Two probe: Version One from now on\n", self.xprt.addr_str());
            }
        }
        // Dropping the last reference drains and tears the connection down.
        drop(ep);
    }

    /// Establishes a new connection (connect worker).
    fn establish(&self) -> Result<Arc<Endpoint>> {
        let x = self.xprt;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let shared = Arc::pin_init(
            EpShared::new(
                x,
                self.max_requests,
                EpConfig { settings: self.settings, generation, window: self.window.clone() },
                self.slots.clone(),
                self.bc.clone(),
                self.stats.clone(),
            ),
            GFP_KERNEL,
        )?;
        // Visible to `shutdown` from now on; it aborts the waits below.
        *self.pending.lock() = Some(shared.clone());
        if self.dying.load(Ordering::SeqCst) {
            return Err(errno::ECONNABORTED());
        }
        // SAFETY: the transport's network namespace outlives the transport,
        // and so every connection of it.
        let mut conn = unsafe { Connection::new(x.net(), shared.clone())? };
        // SAFETY: `peer` is the transport's own address storage.
        unsafe { conn.resolve_addr(x.peer(), RESOLVE_TIMEOUT_MS)? };
        shared.wait(CmState::AddrResolved, RESOLVE_TIMEOUT_MS)?;
        conn.resolve_route(RESOLVE_TIMEOUT_MS)?;
        shared.wait(CmState::RouteResolved, RESOLVE_TIMEOUT_MS)?;

        let caps = conn.device_caps()?;
        if !caps.frwr || caps.max_fast_reg_pages == 0 {
            pr_err!(
                "device {} cannot do fast registration (FRWR), which NFS/RDMA needs\n",
                conn.device_name().unwrap_or(c_str!("?"))
            );
            return Err(errno::EPROTONOSUPPORT());
        }
        // One region covers a whole 1 MiB payload where the device allows.
        let mr_pages = caps.max_fast_reg_pages.min(MAX_PAYLOAD / PAGE_SIZE + 1);
        if (MAX_PAYLOAD / PAGE_SIZE).div_ceil(mr_pages) as usize > rdma::MAX_MRS - 2 {
            pr_err!(
                "device {} registers at most {} pages at once: too few to carry 1 MiB I/O\n",
                conn.device_name().unwrap_or(c_str!("?")),
                caps.max_fast_reg_pages
            );
            return Err(ENOMEM);
        }
        let (inline_send, inline_recv) = (self.settings.inline_write, self.settings.inline_read);
        // Every outstanding call needs a Send and, with the backchannel, a
        // Receive; the device bounds both queues.
        // Each request may chain a REG_MR per region before its Send and a
        // LOCAL_INV per region after its reply. It has two Send buffers:
        // a reply often arrives before the completion that gives its
        // call's Send buffer back, and the next call on that slot must
        // not wait for it (nor stall every other call, the backchannel's
        // replies included, behind it).
        let per_request = 2 + 2 * rdma::MAX_MRS;
        let recv_batch = credits::recv_batch(self.max_requests) as usize;
        let limit = (caps.max_qp_wr as usize).saturating_sub(BC_RECEIVES + recv_batch + 1) / per_request;
        let max_requests = (self.max_requests as usize).min(limit);
        if max_requests == 0 {
            pr_err!("device {:?} cannot hold any RPC-over-RDMA request\n", conn.device_name());
            return Err(ENOMEM);
        }
        // The copied header and head, page pieces, the copied tail.
        let send_sges = (caps.max_send_sge as usize).min(rdma::MAX_SEND_SGES);
        if send_sges < plan::MIN_SEND_SGES as usize {
            pr_err!(
                "device {} allows {} SGEs per Send; RPC-over-RDMA needs {}\n",
                conn.device_name().unwrap_or(c_str!("?")),
                caps.max_send_sge,
                plan::MIN_SEND_SGES
            );
            return Err(errno::EPROTONOSUPPORT());
        }
        conn.create_qp(QpConfig {
            send_bufs: 2 * max_requests + BC_SLOTS,
            send_buf_size: inline_send as usize,
            send_sges,
            signal_interval: credits::default_signal_interval(max_requests as u32),
            recv_bufs: max_requests + BC_RECEIVES + recv_batch,
            recv_buf_size: inline_recv as usize,
            recv_batch,
            mrs: max_requests * 2,
            mr_pages,
            send_wrs: max_requests * per_request + BC_SLOTS,
        }, &self.recv_cache)?;
        shared.max_requests.store(max_requests as u32, Ordering::Relaxed);
        shared.mr_pages.store(mr_pages, Ordering::Relaxed);
        shared.send_sges.store(send_sges as u32, Ordering::Relaxed);
        self.stats.mrs_allocated.fetch_add((max_requests * 2) as u64, Ordering::Relaxed);
        // RFC 8797: our inline sizes, and that we handle Send With Invalidate.
        let ours = cm::PrivateData::new(inline_send, inline_recv, true);
        let pdata = ours.to_bytes();
        conn.connect(&pdata, caps.max_qp_rd_atom.min(255) as u8)?;
        let connect_ms = params::connect_timeout_ms();
        shared.wait(CmState::Established, connect_ms)?;
        Ok(Arc::new(Endpoint { conn }, GFP_KERNEL)?)
    }
}


impl RdmaXprt {
    /// Builds the transport header (registering chunks as the plan says)
    /// and sends the call. Records in `st` the regions registered and how
    /// the reply will arrive; returns the pages the Send may still be
    /// reading.
    fn marshal(&self, ep: &Endpoint, rqst: &Rqst<'_>, st: &mut ReqState) -> Result<PagesInFlight> {
        let ReqState { reg, reply, segs, offered, .. } = st;
        *reply = ReplyShape::Inline;
        *offered = 0;
        let shared = ep.shared();
        let xid = u32::from_be(rqst.xid_be());
        // The first call of a connection may be the Version Two probe.
        let version = match shared.settled() {
            Some(v) => v,
            None => shared.version.lock().for_call(xid).ok_or_else(errno::EPROTONOSUPPORT)?,
        };
        let (inline_send, inline_recv) = shared.inline();
        // A Version Two header has one more word (the direction) than the
        // Version One header the plan sizes.
        let extra = if version == Version::V2 { 4 } else { 0 };
        let snd = rqst.desc(Which::Call);
        let rcv = rqst.desc(Which::Reply);
        let limits = plan::Limits {
            inline_send: inline_send.saturating_sub(extra),
            inline_recv: inline_recv.saturating_sub(extra),
            max_send_sge: shared.send_sges.load(Ordering::Relaxed),
            page_size: PAGE_SIZE,
            max_pages_per_mr: shared.mr_pages.load(Ordering::Relaxed),
            max_segments: (rdma::MAX_MRS / 2) as u32,
            // Small calls are cheaper to copy than to map page by page.
            pullup_threshold: plan::DEFAULT_PULLUP_THRESHOLD,
            write_pad_segment: false,
        };
        let (call, reply_plan) = plan::plan_chunks(&snd, &rcv, rqst.ddp_allowed(), &limits).map_err(|e| {
            pr_warn_once_marshal(&self.stats, &e, &snd, &rcv);
            EIO
        })?;
        let g = limits.geometry();

        // Read chunk (call payload, or the whole call for a Long Call).
        // Most calls have none and most replies need one: plan the regions
        // of only the chunks there are, and clear no arrays they do not use.
        let mut read_buf;
        let mut reads: &[v1::ReadSegment] = &[];
        if call.read_segments() > 0 {
            let mut exts = [plan::MrExtent::default(); rdma::MAX_MRS / 2];
            read_buf = [v1::ReadSegment::default(); rdma::MAX_MRS / 2];
            let regions = call.chunk_regions(&snd);
            let nr = plan::split_regions(regions.as_slice(), g, limits.max_segments, &mut exts).map_err(|_| EIO)?;
            let position = call.read_position().unwrap_or(0);
            for (ext, out) in exts.iter().zip(read_buf.iter_mut()).take(nr) {
                let r = ep.conn.register(reg, true, xid, |w| rqst.fill_sg(Which::Call, ext, w))?;
                *out = v1::ReadSegment { position, segment: segment(r) };
            }
            reads = read_buf.get(..nr).ok_or(EINVAL)?;
        }
        // Write chunk or Reply chunk (the reply's destination), registered
        // straight into the request's record of what it offered.
        let mut nw = 0;
        if reply_plan.mrs() > 0 {
            let mut exts = [plan::MrExtent::default(); rdma::MAX_MRS / 2];
            let regions = reply_plan.chunk_regions(&rcv);
            nw = plan::split_regions(regions.as_slice(), g, limits.max_segments, &mut exts).map_err(|_| EIO)?;
            for (ext, out) in exts.iter().zip(segs.iter_mut()).take(nw) {
                let r = ep.conn.register(reg, false, xid, |w| rqst.fill_sg(Which::Reply, ext, w))?;
                *out = segment(r);
            }
        }
        let writes = segs.get(..nw).ok_or(EINVAL)?;
        let write_list: [&[v1::Segment]; 1] = [writes];
        let (shape, lists) = match reply_plan {
            plan::ReplyPlan::Inline => (ReplyShape::Inline, v1::ChunkLists { reads, writes: &[], reply: None }),
            plan::ReplyPlan::WriteChunk { .. } => {
                (ReplyShape::WriteChunk, v1::ChunkLists { reads, writes: &write_list, reply: None })
            }
            plan::ReplyPlan::ReplyChunk { .. } => {
                (ReplyShape::ReplyChunk, v1::ChunkLists { reads, writes: &[], reply: Some(writes) })
            }
        };
        let nomsg = matches!(call, plan::CallPlan::LongCall { .. });
        let credits = shared.max_requests.load(Ordering::Relaxed);
        let sent = ep.conn.send(reg, |out| {
            // The transport header and what is copied right after it.
            let (copied, rest) = match call {
                plan::CallPlan::Inline { pullup: true } => (snd.len, None),
                // Head copied, page list mapped in place, tail copied.
                plan::CallPlan::Inline { pullup: false } => (snd.head.len, Some((snd.head.len + snd.page_len, snd.tail.len))),
                plan::CallPlan::ReadChunk { tail_skip, tail_len, .. } => {
                    (snd.head.len, Some((snd.head.len + snd.page_len + tail_skip, tail_len)))
                }
                plan::CallPlan::LongCall { .. } => (0, None),
            };
            out.copy(|buf| {
                let hdr = encode_header(buf, version, xid, credits, nomsg, v2::Direction::Call, lists)?;
                let len = copied as usize;
                rqst.copy_call_at(0, buf.get_mut(hdr..hdr + len).ok_or(EINVAL)?)?;
                Ok(hdr + len)
            })?;
            if matches!(call, plan::CallPlan::Inline { pullup: false }) {
                rqst.call_pages(|page, off, len| out.map_page(page, off, len))?;
            }
            if let Some((from, len)) = rest {
                out.copy(|buf| {
                    rqst.copy_call_at(from, buf.get_mut(..len as usize).ok_or(EINVAL)?)?;
                    Ok(len as usize)
                })?;
            }
            Ok(())
        })?;

        // A counter moves only when there is something to add: an atomic
        // add of zero still costs a locked instruction per RPC.
        let add = |c: &AtomicU64, n: u64| {
            if n > 0 {
                c.fetch_add(n, Ordering::Relaxed);
            }
        };
        let st = &self.stats;
        let n = stats::MarshalCounts::of(&call, &reply_plan, &snd);
        add(&st.read_chunks, n.read_segments);
        add(&st.write_chunks, n.write_segments);
        add(&st.reply_chunks, n.reply_segments);
        add(&st.total_rdma_request, n.rdma_request_bytes);
        add(&st.pullup_copy, n.pullup_bytes);
        add(&st.nomsg_calls, n.nomsg_calls);
        add(&MRS_REGISTERED, reg.len() as u64);
        *reply = shape;
        *offered = nw;
        Ok(sent)
    }
}

/// Encodes an RDMA_MSG (or RDMA_NOMSG) transport header of `version` into
/// `buf`; returns its length. `dir` is the RPC message's direction, which
/// Version Two carries in the header.
fn encode_header(
    buf: &mut [u8],
    version: Version,
    xid: u32,
    credits: u32,
    nomsg: bool,
    dir: v2::Direction,
    lists: v1::ChunkLists<'_>,
) -> Result<usize> {
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

/// True if `msg`, the payload of an RDMA_MSG with no chunks, is an RPC call
/// (the server calling the client) whose XID matches the transport header's.
fn is_backward_call(xid: u32, msg: &[u8]) -> bool {
    match (msg.get(0..4), msg.get(4..8)) {
        (Some(x), Some(dir)) => x == xid.to_be_bytes() && dir == [0, 0, 0, 0],
        _ => false,
    }
}

/// Makes the task wait for Send buffers or memory regions after a send
/// failed for want of them, without losing a release that raced with the
/// failure (see [`Connection::release_epoch`]).
fn wait_for_space(x: Xprt<'_>, ep: &Endpoint, epoch: u64) {
    x.wait_for_buffer_space();
    if ep.conn.release_epoch() != epoch {
        x.write_space();
    }
}

/// Accounts an invalidation of `registered` regions of which `local`
/// needed a LOCAL_INV (the rest the server invalidated remotely).
fn count_invalidations(stats: &Stats, registered: usize, local: usize) {
    // Most replies need no LOCAL_INV, and many RPCs register nothing: skip
    // the locked adds of zero.
    if local > 0 {
        stats.local_inv_needed.fetch_add(local as u64, Ordering::Relaxed);
        LOCAL_INVALIDATIONS.fetch_add(local as u64, Ordering::Relaxed);
    }
    if registered > local {
        REMOTE_INVALIDATIONS.fetch_add((registered - local) as u64, Ordering::Relaxed);
    }
}

fn segment(r: rdma::Registered) -> v1::Segment {
    v1::Segment { handle: r.handle, length: r.length, offset: r.offset }
}

fn pr_warn_once_marshal(stats: &Stats, e: &plan::PlanError, snd: &plan::XdrBufDesc, rcv: &plan::XdrBufDesc) {
    if stats.failed_marshal.load(Ordering::Relaxed) == 0 {
        pr_warn!(
            "cannot marshal an RPC (call {} bytes, reply up to {}): {:?}\n",
            snd.len,
            rcv.len,
            e
        );
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
        *self.pending.lock() = None;
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
                // RFC 8166 section 3.3.3: credits do not outlive their
                // connection; one credit until the peer says more. From
                // now on only this connection's replies move the window.
                {
                    let mut owner = self.window.lock();
                    *owner = ep.shared().cfg.generation;
                    self.slots.forget_cong(x);
                    x.reset_credits(1);
                }
                *self.ep.lock() = Some(ep);
                x.count_connect();
                x.set_connected();
                self.receives_seen.store(u64::MAX, Ordering::Relaxed);
                self.schedule_liveness();
                Ok(())
            }
            Err(e) => {
                pr_info!("cannot connect to {} port {}: error {}\n", x.addr_str(), x.port(), e.to_errno());
                // No RDMA device for the route (one is being removed or not
                // yet added): to SUNRPC a network that is down for now,
                // retried after a delay, rather than an error for the RPC.
                if e == ENODEV || e == errno::EADDRNOTAVAIL() {
                    Err(errno::ENETUNREACH())
                } else {
                    Err(e)
                }
            }
        };
        self.connecting.store(false, Ordering::Release);
        x.connect_finished(self.cookie(), status);
    }
}

/// The liveness check. RDMA has no keepalive: a server that disconnected
/// while the link was down (its DREQ lost), or whose queue pair is gone,
/// leaves a client whose calls were all delivered waiting for replies that
/// cannot come, until the RPC timeout (60 s by default) gives up on them.
/// Every `probe_interval` seconds, if RPCs wait for replies and no Receive
/// completed since the last look, the connection is probed
/// ([`Connection::probe`]): a live peer acknowledges the probe and nothing
/// happens (a slow server is not a dead one); a dead one fails it after the
/// device's retries, and the connection is dropped and set up again.
impl DelayedWorkItem<LIVENESS> for RdmaXprt {
    fn work(&self) -> &DelayedWork<Self, LIVENESS> {
        &self.liveness
    }

    fn run(&self) {
        if self.dying.load(Ordering::SeqCst) {
            return;
        }
        // Not connected: the next connect starts the check again.
        let Some(ep) = self.endpoint() else { return };
        let seen = ep.conn.receives();
        let last = self.receives_seen.swap(seen, Ordering::Relaxed);
        if seen == last && self.xprt.replies_awaited() > 0 {
            // An error means the connection is on its way down anyway.
            let _ = ep.conn.probe();
        }
        drop(ep);
        self.schedule_liveness();
    }
}

impl RdmaXprt {
    /// Queues the liveness check one interval from now (unless disabled or
    /// already queued).
    fn schedule_liveness(&self) {
        let s = params::probe_interval_s();
        if s > 0 && !self.dying.load(Ordering::SeqCst) {
            self.liveness.queue(time::ms_to_jiffies(s * 1000));
        }
    }

    /// Sends the callback service's reply to a backward call: RDMA_MSG with
    /// no chunks, granting our reverse-direction credits (RFC 8167 section
    /// 5.2). It takes no forward credit: the server keeps Receives for the
    /// replies to its calls (section 4.3.2).
    fn send_bc_reply(&self, x: Xprt<'_>, rqst: &Rqst<'_>) -> Result {
        let Some(ep) = self.endpoint() else {
            return Err(errno::ENOTCONN());
        };
        let len = rqst.send_len();
        let threshold = ep.shared().inline().0 as usize;
        let version = if ep.shared().is_v2() { Version::V2 } else { Version::V1 };
        if v1::MIN_MSG_HEADER_LEN + 4 + len > threshold {
            // A reply we cannot send ends the connection (RFC 8166 section
            // 4.5.4): the server learns at once that its call failed.
            pr_warn!("backchannel reply of {} bytes does not fit inline: closing the connection\n", len);
            BACKWARD_REPLIES_UNSENDABLE.fetch_add(1, Ordering::Relaxed);
            rpc::Transport::close(self, x);
            return Err(errno::ENOTCONN());
        }
        let xid = u32::from_be(rqst.xid_be());
        let epoch = ep.conn.release_epoch();
        let sent = ep.conn.send(&Registration::empty(), |out| {
            out.copy(|buf| {
                let hdr =
                    encode_header(buf, version, xid, BC_SLOTS as u32, false, v2::Direction::Reply, v1::ChunkLists::NONE)?;
                rqst.copy_call_at(0, buf.get_mut(hdr..hdr + len).ok_or(EINVAL)?)?;
                Ok(hdr + len)
            })
        });
        match sent {
            // Copied only: nothing of the request stays mapped.
            Ok(_unmapped) => {
                rqst.sent(len);
                Ok(())
            }
            Err(e) if e == errno::ENOBUFS() => {
                wait_for_space(x, &ep, epoch);
                Err(EAGAIN)
            }
            Err(_) => {
                rpc::Transport::close(self, x);
                Err(errno::ENOTCONN())
            }
        }
    }
}

impl rpc::Transport for RdmaXprt {
    fn bc_pool(&self) -> &BcPool {
        &self.bc
    }

    fn bc_maxpayload(&self, _x: Xprt<'_>) -> usize {
        // Backward calls and replies travel inline, in one page each side.
        let inline = self.settings.inline_read.min(self.settings.inline_write).min(PAGE_SIZE);
        match self.ep.lock().as_ref() {
            Some(ep) => {
                let (send, recv) = ep.shared().inline();
                send.min(recv).min(PAGE_SIZE) as usize - v1::MIN_MSG_HEADER_LEN - 4
            }
            None => inline as usize - v1::MIN_MSG_HEADER_LEN - 4,
        }
    }

    fn bc_num_slots(&self) -> u32 {
        BC_SLOTS as u32
    }

    fn alloc_slot(&self, x: Xprt<'_>, task: &Task<'_>) {
        self.slots.alloc(x, task);
    }

    fn free_slot(&self, x: Xprt<'_>, rqst: &Rqst<'_>) {
        self.slots.free(x, rqst);
    }

    fn provide_buffers(&self, rqst: &Rqst<'_>) -> bool {
        self.slots.provide_buffers(rqst)
    }

    fn owns_buffers(&self, rqst: &Rqst<'_>) -> bool {
        self.slots.owns_buffers(rqst)
    }

    fn release_request(&self, x: Xprt<'_>, rqst: &Rqst<'_>) {
        // An RPC that ended without its reply (signal, timeout) may still
        // have regions the server could write into: invalidate them before
        // its pages go back.
        let Some(slot) = self.slots.slot_of(rqst) else { return };
        // The usual case: the reply handler already took both back.
        if !slot.holds() {
            return;
        }
        let mut st = slot.state().lock();
        let (mut reg, mut sent) = st.take();
        slot.set_holds(&mut st, false);
        drop(st);
        if reg.is_empty() && sent.is_none() {
            return;
        }
        if let Some(ep) = self.endpoint() {
            ep.conn.wait_sent(&mut sent);
            if !reg.is_empty() {
                let registered = reg.len();
                let local = ep.conn.invalidate(&mut reg, None);
                count_invalidations(&self.stats, registered, local);
                // A task may be waiting for memory regions to send its call.
                x.write_space();
            }
        }
        // Without a connection the token is stale: its regions were
        // released when that connection was torn down, and dropping the
        // token here releases nothing twice.
    }

    fn connect(&self, x: Xprt<'_>, task: &Task<'_>) {
        // SUNRPC calls this with the task holding the send lock, so the
        // connect lock is ours. Were it not, SUNRPC has already marked the
        // transport CONNECTING, and only the connect worker clears that:
        // it runs all the same, or the transport would never connect again.
        if !x.lock_connect(task, self.cookie()) {
            pr_warn!("{}: connect without the transport's send lock\n", x.addr_str());
        }
        self.connecting.store(true, Ordering::Release);
        let delay = if self.tried.load(Ordering::Relaxed) {
            x.reconnect_delay(time::ms_to_jiffies(INIT_REEST_S * 1000))
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
        if rqst.is_backchannel() {
            return self.send_bc_reply(x, rqst);
        }
        if !rqst.get_cong(x) {
            return Err(errno::EBADSLT());
        }
        let Some(ep) = self.endpoint() else {
            return Err(errno::ENOTCONN());
        };
        // A retransmission on the same connection would spend a credit the
        // server never granted: reconnect instead (RFC 8166 section 3.3).
        // The one exception is the Version Two probe the server refused
        // with ERR_VERS: it goes again as Version One (draft section 5.2).
        if rqst.sent_on_this_connection(x) {
            let xid = u64::from(u32::from_be(rqst.xid_be()));
            let again = ep.shared().resend_xid.compare_exchange(xid, NO_XID, Ordering::AcqRel, Ordering::Relaxed);
            if again.is_err() {
                self.close(x);
                return Err(errno::ENOTCONN());
            }
        }
        let Some(slot) = self.slots.slot_of(rqst) else {
            return Err(EINVAL);
        };
        // The reply can arrive on another CPU as soon as the Send is
        // posted: the slot stays locked until it holds this call's regions
        // and reply shape, so the Receive handler never finds them missing.
        // Nothing in `marshal` sleeps.
        let mut st = slot.state().lock();
        if st.holds_anything() {
            // A request re-sent on a new connection still holds the regions
            // of the old one, which went away with it: drop the stale token
            // (this sleeps, so not under the lock).
            let (mut stale, mut sent) = st.take();
            drop(st);
            ep.conn.invalidate(&mut stale, None);
            ep.conn.wait_sent(&mut sent);
            st = slot.state().lock();
        }
        let epoch = ep.conn.release_epoch();
        rqst.stamp_xmit();
        match self.marshal(&ep, rqst, &mut st) {
            Ok(sent) => {
                st.sent = sent;
                let holds = st.holds_anything();
                slot.set_holds(&mut st, holds);
                drop(st);
            }
            Err(e) => {
                ep.conn.release_unposted(&mut st.reg);
                drop(st);
                if e == errno::ENOBUFS() {
                    // Out of Send buffers or memory regions: wait for some.
                    self.stats.empty_sendctx_q.fetch_add(1, Ordering::Relaxed);
                    wait_for_space(x, &ep, epoch);
                    return Err(EAGAIN);
                }
                if e == errno::ENOTCONN() {
                    self.close(x);
                    return Err(e);
                }
                self.stats.failed_marshal.fetch_add(1, Ordering::Relaxed);
                return Err(EIO);
            }
        }
        let len = rqst.send_len();
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
        let hz = time::HZ;
        let c = stats::Counters {
            bind_count: st.bind_count,
            connect_count: st.connect_count,
            connect_time: stats::jiffies_to_secs(st.connect_time, hz),
            idle_time: stats::idle_time_secs(x.connected(), time::jiffies(), x.last_used(), hz),
            sends: st.sends,
            recvs: st.recvs,
            bad_xids: st.bad_xids,
            req_u: st.req_u,
            bklog_u: st.bklog_u,
            pullup_copy_count: self.stats.pullup_copy.load(Ordering::Relaxed),
            failed_marshal_count: self.stats.failed_marshal.load(Ordering::Relaxed),
            bad_reply_count: self.stats.bad_reply.load(Ordering::Relaxed),
            empty_sendctx_q: self.stats.empty_sendctx_q.load(Ordering::Relaxed),
            total_rdma_request: self.stats.total_rdma_request.load(Ordering::Relaxed),
            total_rdma_reply: self.stats.total_rdma_reply.load(Ordering::Relaxed),
            read_chunk_count: self.stats.read_chunks.load(Ordering::Relaxed),
            write_chunk_count: self.stats.write_chunks.load(Ordering::Relaxed),
            reply_chunk_count: self.stats.reply_chunks.load(Ordering::Relaxed),
            nomsg_call_count: self.stats.nomsg_calls.load(Ordering::Relaxed),
            mrs_allocated: self.stats.mrs_allocated.load(Ordering::Relaxed),
            local_inv_needed: self.stats.local_inv_needed.load(Ordering::Relaxed),
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
        // A connect in progress (say, to a server that went away) gives up
        // now rather than after its timeouts: the mount is gone.
        self.dying.store(true, Ordering::SeqCst);
        if let Some(shared) = self.pending.lock().clone() {
            shared.abort();
        }
        self.connect_work.cancel_sync();
        // After the connect worker, which may queue it; `dying` keeps it
        // from queueing itself again.
        self.liveness.cancel_sync();
        self.disconnect();
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
    cfg: EpConfig,
    #[pin]
    state: SpinLock<(CmState, Option<cm::Negotiated>)>,
    #[pin]
    changed: CondVar,
    max_requests: AtomicU32,
    credits: AtomicU32,
    /// xprt_force_disconnect is asked for at most once per connection.
    disconnecting: AtomicBool,
    /// The transport is going away: connection setup stops waiting.
    aborted: AtomicBool,
    /// Credits the next grant is reduced by: messages of ours that took a
    /// server Receive and get no reply (ROPT_INITXCH).
    grant_debt: AtomicU32,
    mr_pages: AtomicU32,
    send_sges: AtomicU32,
    slots: Arc<SlotTable<ReqState>>,
    bc: Arc<BcPool>,
    stats: Arc<Stats>,
    /// The protocol version of this connection.
    #[pin]
    version: SpinLock<ConnVersion>,
    /// [`Self::version`] once settled, for the paths every RPC takes
    /// without the lock: 0 while unsettled, else the version number. A
    /// settled version never changes for the connection's life.
    settled: AtomicU32,
    /// The inline thresholds [`Self::inline`] computes, `calls << 32 |
    /// replies`, once nothing they depend on can change but the server's
    /// characteristics; 0 until then, and again whenever those change.
    /// Stored only with [`Self::peer_xch`] locked.
    inline_cache: AtomicU64,
    /// The server, for remembering which version it speaks.
    server_key: u64,
    /// XID of the probe refused with ERR_VERS: it is sent again, as
    /// Version One, on this same connection (draft section 5.2).
    resend_xid: AtomicU64,
    /// Version Two: the server's transport characteristics, as its
    /// ROPT_INITXCH and ROPT_UPDXCH messages told them (xcharext).
    #[pin]
    peer_xch: SpinLock<Characteristics>,
}

/// What a connection takes from its transport when it is set up.
struct EpConfig {
    /// The transport's parameters (never the live module parameters).
    settings: params::Settings,
    /// This connection's number in its transport.
    generation: u64,
    /// The transport's window owner ([`RdmaXprt::window`]).
    window: Arc<SpinLock<u64>>,
}

/// The version number `v` has settled on, or 0 (for [`EpShared::settled`]).
fn settled_number(v: &ConnVersion) -> u32 {
    match v {
        ConnVersion::Neg(v2::Negotiation::Settled(v)) => v.number(),
        _ => 0,
    }
}

/// No XID (for [`EpShared::resend_xid`]).
const NO_XID: u64 = u64::MAX;

impl EpShared {
    fn new(
        xprt: Xprt<'static>,
        max_requests: u32,
        cfg: EpConfig,
        slots: Arc<SlotTable<ReqState>>,
        bc: Arc<BcPool>,
        stats: Arc<Stats>,
    ) -> impl PinInit<Self, Error> {
        let server_key = vers::server_key(xprt.peer_bytes());
        let start = vers::start(server_key, cfg.settings.versions, cfg.settings.inline_read);
        try_pin_init!(EpShared {
            cfg,
            settled: AtomicU32::new(settled_number(&start)),
            inline_cache: AtomicU64::new(0),
            version <- new_spinlock!(start, "rpcrdma_rs:version"),
            server_key,
            resend_xid: AtomicU64::new(NO_XID),
            peer_xch <- new_spinlock!(Characteristics::DEFAULT, "rpcrdma_rs:peer_xch"),
            xprt,
            state <- new_spinlock!((CmState::Idle, None), "rpcrdma_rs:cm_state"),
            changed <- new_condvar!("rpcrdma_rs:cm_changed"),
            max_requests: AtomicU32::new(max_requests),
            credits: AtomicU32::new(1),
            disconnecting: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            grant_debt: AtomicU32::new(0),
            mr_pages: AtomicU32::new(1),
            send_sges: AtomicU32::new(plan::MIN_SEND_SGES),
            slots,
            bc,
            stats,
        })
    }

    /// Makes connection setup give up at its next wait, or now.
    fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        self.set(CmState::Closed);
    }

    fn set(&self, s: CmState) {
        self.state.lock().0 = s;
        self.changed.notify_all();
    }

    /// Waits until the connection reaches `want`, fails, or `ms` pass.
    fn wait(&self, want: CmState, ms: u32) -> Result {
        let mut left = time::ms_to_jiffies(ms) as i64;
        let mut g = self.state.lock();
        loop {
            if self.aborted.load(Ordering::Acquire) {
                return Err(errno::ECONNABORTED());
            }
            match g.0 {
                s if s == want => return Ok(()),
                CmState::Failed(e) => return Err(Error::from_errno(e)),
                CmState::Closed => return Err(errno::ECONNABORTED()),
                _ => {}
            }
            if left <= 0 {
                return Err(errno::ETIMEDOUT());
            }
            match self.changed.wait_interruptible_timeout(&mut g, left as kernel::ffi::c_ulong) {
                kernel::sync::CondVarTimeoutResult::Woken { jiffies } => left = jiffies as i64,
                kernel::sync::CondVarTimeoutResult::Timeout => left = 0,
                kernel::sync::CondVarTimeoutResult::Signal { .. } => return Err(ERESTARTSYS),
            }
        }
    }

    /// The inline thresholds in force now, `(calls, replies)`: 1024 while
    /// the Version Two probe is out, the RFC 8797 exchange for Version One,
    /// Version Two's 4096 default (bounded by our buffers) for Version Two.
    fn inline(&self) -> (u32, u32) {
        let cached = self.inline_cache.load(Ordering::Acquire);
        if cached != 0 {
            return ((cached >> 32) as u32, cached as u32);
        }
        let established = self.state.lock().1;
        let n = established.unwrap_or(cm::Negotiated::BEFORE_EXCHANGE);
        let st = *self.version.lock();
        let settled = matches!(st, ConnVersion::Neg(v2::Negotiation::Settled(_)));
        let peer = self.peer_xch.lock();
        let t = match st {
            ConnVersion::Neg(v2::Negotiation::Settled(Version::V1)) => (n.send_threshold, n.recv_threshold),
            ConnVersion::Neg(v2::Negotiation::Settled(Version::V2)) => {
                // Calls: as large as the server says it can receive (its
                // Receive Buffer Size, 4096 until it says otherwise) and our
                // Send buffers hold. Replies: the 4096 default the server
                // assumes of us, though our buffers may be larger.
                let d = Version::V2.default_inline_threshold();
                let s = &self.cfg.settings;
                (peer.rbsiz.min(s.inline_write), d.min(s.inline_read))
            }
            _ => {
                let d = v2::NEGOTIATION_MAX_MESSAGE;
                (d.min(n.send_threshold), d.min(n.recv_threshold))
            }
        };
        // The CM exchange is done and the version settled: only the
        // server's characteristics can still change the thresholds, and
        // they clear the cache under the lock held here.
        if established.is_some() && settled {
            self.inline_cache.store(u64::from(t.0) << 32 | u64::from(t.1), Ordering::Release);
        }
        drop(peer);
        t
    }

    /// The version this connection settled on, if it has.
    fn settled(&self) -> Option<Version> {
        match self.settled.load(Ordering::Acquire) {
            0 => None,
            n if n == Version::V2.number() => Some(Version::V2),
            _ => Some(Version::V1),
        }
    }

    /// True if this connection settled on Version Two.
    fn is_v2(&self) -> bool {
        self.settled() == Some(Version::V2)
    }

    fn negotiated(&self) -> cm::Negotiated {
        self.state.lock().1.unwrap_or(cm::Negotiated::BEFORE_EXCHANGE)
    }

    fn force_disconnect(&self) {
        if !self.disconnecting.swap(true, Ordering::AcqRel) {
            self.xprt.force_disconnect();
        }
    }

    /// A reply was dropped or failed its RPC as malformed or unexpected.
    fn count_bad_reply(&self) {
        // In the transport's statistics, which outlive the connection: the
        // mountstats count only grows.
        self.stats.bad_reply.fetch_add(1, Ordering::Relaxed);
        BAD_REPLIES.fetch_add(1, Ordering::Relaxed);
    }

    /// Applies the server's credit grant from a reply that matched one of
    /// our calls (RFC 8166 section 3.3): from no other message, and only
    /// while this connection owns the transport's window, so that a late
    /// reply of an old connection cannot change the new one's.
    fn grant(&self, credits: u32) {
        let max = self.max_requests.load(Ordering::Relaxed);
        let mut grant = credits::sanitize_grant(credits, max);
        if self.grant_debt.load(Ordering::Relaxed) != 0 {
            let debt = self.grant_debt.swap(0, Ordering::Relaxed);
            grant = grant.saturating_sub(debt).max(1);
        }
        // The grant rarely changes: look before taking the lock.
        if self.credits.load(Ordering::Relaxed) == grant {
            return;
        }
        let owner = self.cfg.window.lock();
        if *owner == self.cfg.generation {
            self.credits.store(grant, Ordering::Relaxed);
            self.xprt.set_credits(grant);
        }
        drop(owner);
    }

    /// Sends a message that answers the server (a backward reply or error,
    /// an xcharext response). One we cannot send closes the connection
    /// (RFC 8166 section 4.5.4) rather than leave the server waiting.
    fn send_answer(&self, conn: &Live<'_, Self>, what: &str, encode: impl FnOnce(&mut [u8]) -> Result<usize>) -> bool {
        match conn.send(&Registration::empty(), |out| out.copy(encode)) {
            // Copied only: nothing stays mapped.
            Ok(_copied_only) => true,
            Err(e) => {
                BACKWARD_REPLIES_UNSENDABLE.fetch_add(1, Ordering::Relaxed);
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!("{}: cannot send {} (error {}): closing the connection\n", self.xprt.addr_str(), what, e.to_errno());
                }
                self.force_disconnect();
                false
            }
        }
    }

    /// A message that does not decode in this connection's version: if its
    /// fixed prefix names another version, it is a request we cannot
    /// process (a reply to our calls comes in their version, draft section
    /// 5.3), and is answered with ERR_VERS in a version we speak, giving
    /// the range we speak (RFC 8166 section 4.2, draft section 5.2).
    /// Returns false if the message is not of another version.
    fn refuse_version(&self, conn: &Live<'_, Self>, data: &[u8]) -> bool {
        let Ok(p) = v1::peek(data) else { return false };
        let allowed = self.cfg.settings.versions;
        let (ours, low, high) = match self.settled() {
            Some(v) => (v.number(), v.number(), v.number()),
            None => {
                let low = if allowed.v1 { Version::V1 } else { Version::V2 };
                let high = if allowed.v2 { Version::V2 } else { Version::V1 };
                (low.number(), low.number(), high.number())
            }
        };
        // Never answer an error with an error.
        if (low..=high).contains(&p.vers) || p.procedure == v1::RDMA_ERROR {
            return false;
        }
        self.count_bad_reply();
        if self.send_answer(conn, "ERR_VERS", |buf| {
            v1::encode_err_vers_any_version(buf, p.xid, ours, BC_SLOTS as u32, low, high).map_err(|_| EINVAL)
        }) {
            ERR_VERS_SENT.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// A reply's Write or Reply chunk does not match what its call offered:
    /// the server claims bytes it had no memory to write. Fails the RPC
    /// rather than hand stale buffer contents to the caller as data.
    fn foreign_chunk(&self, e: &v1::ReturnedChunkError) -> Error {
        self.count_bad_reply();
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("{}: reply chunk does not match the one offered ({:?}): RPC failed\n", self.xprt.addr_str(), e);
        }
        EIO
    }

    fn reply(&self, conn: &Live<'_, Self>, data: &[u8], invalidated: Option<u32>) {
        if !self.settle_version(conn, data, invalidated) {
            return;
        }
        let decoded = if self.is_v2() { Incoming::decode_v2(data) } else { Incoming::decode_v1(data) };
        let Some(inc) = decoded else {
            // Another version's request gets ERR_VERS; anything else that
            // does not parse (short, bad procedure, bad lists) is dropped.
            if !self.refuse_version(conn, data) {
                self.count_bad_reply();
            }
            return;
        };
        self.xprt.clear_reestablish_timeout();
        match &inc.kind {
            // Version One tells a backward call by its RPC message, Version
            // Two also by the header's direction (they must agree).
            Kind::Msg(c, dir) if *dir == Some(v2::Direction::Call) || (dir.is_none() && is_backward_call(inc.xid, inc.payload)) => {
                if !is_backward_call(inc.xid, inc.payload) {
                    self.count_bad_reply();
                } else if c.reads.is_empty() && c.writes.is_empty() && c.reply.is_none() {
                    // Its credit field asks for reverse credits; it is no
                    // grant of forward ones (RFC 8167 section 4.1).
                    self.backward_call(inc.payload);
                } else {
                    self.refuse_backward_chunks(conn, inc.xid);
                }
                return;
            }
            // No reply carries a Read list: this can only be a backward call
            // sent as a Long Call.
            Kind::NoMsg(c, dir) if *dir == Some(v2::Direction::Call) || !c.reads.is_empty() => {
                self.refuse_backward_chunks(conn, inc.xid);
                return;
            }
            Kind::Optional(o) => {
                self.optional(conn, inc.xid, o);
                return;
            }
            _ => {}
        }
        let Some((rqst, verdict)) = self.take_request(conn, &inc.kind, inc.xid, invalidated) else {
            // No such XID (a late reply, or a backchannel call): the counter
            // SUNRPC keeps for TCP counts it in `bad_xids`; we count it here.
            // Its credit field is no grant.
            self.count_bad_reply();
            return;
        };
        // Only a reply proper grants credits: not an RDMA_ERROR (Version
        // Two's answer to a refused probe says nothing of the server's
        // Receives), nor the retired RDMA_MSGP and RDMA_DONE, whose
        // direction we cannot tell (RFC 8167 section 4.1).
        if matches!(inc.kind, Kind::Msg(..) | Kind::NoMsg(..)) {
            self.grant(inc.credits);
        }
        self.complete(rqst, inc.payload, verdict);
    }

    /// Finds the request `xid`, judges its reply of `kind` against what
    /// the call offered, and takes its regions and Send back: after this
    /// the server can no longer write into them (RFC 8166 s. 3.4.5), and
    /// the call's pages are free. Sleeps.
    fn take_request(
        &self,
        conn: &Live<'_, Self>,
        kind: &Kind<'_>,
        xid: u32,
        invalidated: Option<u32>,
    ) -> Option<(PinnedRqst, Verdict)> {
        let rqst = self.xprt.lookup(xid.to_be())?;
        let (mut reg, mut sent, verdict) = match self.slots.slot_of_pinned(&rqst) {
            Some(slot) => {
                let mut st = slot.state().lock();
                if !conn.owns(&st.reg, &st.sent) {
                    // A late reply from a connection being torn down: the
                    // call went out again on the next one, whose reply it
                    // waits for (and whose regions it holds).
                    return None;
                }
                let verdict = st.judge(kind);
                let (reg, sent) = st.take();
                slot.set_holds(&mut st, false);
                (reg, sent, verdict)
            }
            None => (Registration::empty(), PagesInFlight::none(), ReqState::default().judge(kind)),
        };
        let registered = reg.len();
        let local = conn.invalidate(&mut reg, invalidated);
        count_invalidations(&self.stats, registered, local);
        if registered > 0 {
            // A task may be waiting for memory regions to send its call.
            self.xprt.write_space();
        }
        // The reply can overtake the Send's completion: the call's pages go
        // back to SUNRPC only once the HCA is done reading them.
        conn.wait_sent(&mut sent);
        Some((rqst, verdict))
    }

    /// While the Version Two probe is out, its answer settles the
    /// connection's version (draft section 5). Returns false if `data` was
    /// consumed here.
    fn settle_version(&self, conn: &Live<'_, Self>, data: &[u8], invalidated: Option<u32>) -> bool {
        if self.settled().is_some() {
            return true;
        }
        let decision = {
            let mut g = self.version.lock();
            let mut d = match &mut *g {
                ConnVersion::Neg(n @ v2::Negotiation::Probing { .. }) => n.on_reply(data),
                _ => return true,
            };
            // versions=2: Version Two or nothing.
            if let Decision::FallBackToV1 { low, high } = d {
                if !self.cfg.settings.versions.v1 {
                    *g = ConnVersion::Neg(v2::Negotiation::Failed);
                    d = Decision::NoCommonVersion { low, high };
                }
            }
            self.settled.store(settled_number(&g), Ordering::Release);
            d
        };
        let addr = self.xprt.addr_str();
        match decision {
            Decision::NotForProbe => true,
            // A refused probe (RejectedV2) still settles Version Two; the
            // error fails the probe's RPC in `reply`, and grants nothing.
            Decision::UseV2 { .. } | Decision::RejectedV2(_) => {
                V2_CONNECTIONS.fetch_add(1, Ordering::Relaxed);
                pr_info!("{}: using RPC-over-RDMA Version Two\n", addr);
                // Our characteristics go only where the grant has room for
                // a message without reply beside the next call: the server
                // assumes the defaults otherwise (xcharext section 4.1).
                let max = self.max_requests.load(Ordering::Relaxed);
                if let (Decision::UseV2 { credit }, Ok(p)) = (decision, v1::peek(data)) {
                    if credits::sanitize_grant(credit, max) >= 2 {
                        self.send_initxch(conn, p.xid);
                    }
                }
                true
            }
            Decision::FallBackToV1 { low, high } => {
                // The same call goes again, as Version One, on this same
                // connection; later connections start with Version One.
                V1_FALLBACKS.fetch_add(1, Ordering::Relaxed);
                vers::remember_v1_only(self.server_key);
                pr_info!("{}: server speaks RPC-over-RDMA versions {}..{}, not Two: using Version One\n", addr, low, high);
                let Ok(p) = v1::peek(data) else { return false };
                self.resend_xid.store(u64::from(p.xid), Ordering::Release);
                if let Some((rqst, _)) = self.take_request(conn, &Kind::Error, p.xid, invalidated) {
                    // SUNRPC encodes and transmits it again (call_status).
                    rqst.fail(EAGAIN);
                }
                false
            }
            Decision::NoCommonVersion { low, high } => {
                pr_warn!(
                    "{}: server speaks RPC-over-RDMA versions {}..{} only, none of those allowed (versions={})\n",
                    addr,
                    low,
                    high,
                    self.cfg.settings.versions.as_param()
                );
                if let Ok(p) = v1::peek(data) {
                    if let Some((rqst, _)) = self.take_request(conn, &Kind::Error, p.xid, invalidated) {
                        rqst.fail(errno::EPROTONOSUPPORT());
                    }
                }
                false
            }
            Decision::UnexpectedVersion(_) | Decision::Malformed(_) => {
                // Not an answer a Version Two server gives: speak Version
                // One to it from now on.
                self.count_bad_reply();
                vers::remember_v1_only(self.server_key);
                self.force_disconnect();
                false
            }
        }
    }

    /// Our transport characteristics, as the first OPTIONAL message of a
    /// Version Two connection (xcharext ROPT_INITXCH): the Receive buffer
    /// size, that replies may use Send With Invalidate, and that backward
    /// requests come inline. None of them changes during the connection.
    fn send_initxch(&self, conn: &Live<'_, Self>, probe_xid: u32) {
        let ours = Characteristics {
            rbsiz: self.cfg.settings.inline_read,
            req_rem_inv: true,
            brs: xchar::BkReqSup::Inline,
            ..Characteristics::DEFAULT
        };
        let vals: [Xchar<'_>; 3] = ours.as_xchars();
        let fixed = [0b111u32];
        let op = XchOp::InitXch { start: XcharSpec::from_slice(&vals), nochg: XcharSubset::from_words(&fixed) };
        // An OPTIONAL message without payload takes an XID of the calls'
        // XID space (draft 4.2.2); the server answers nothing to it.
        let xid = probe_xid ^ 0x8000_0000;
        // A forward-direction message: its credit field asks for our
        // forward credits, as a call's does. It takes a server Receive and
        // gets no reply: the probe's reply, which just arrived, is the
        // only one outstanding, so the grant it carries pays for it
        // ([`Self::grant`]); later replies grant afresh.
        let max = self.max_requests.load(Ordering::Relaxed);
        self.grant_debt.store(1, Ordering::Relaxed);
        self.send_answer(conn, "ROPT_INITXCH", |buf| {
            op.encode_message(xid, max, v2::Direction::Call, buf).map_err(|_| EINVAL)
        });
    }

    /// A Version Two RDMA2_OPTIONAL message. The transport characteristics
    /// operations (xcharext) are understood; any other type is answered
    /// with RDMA2_ERROR / ERR_INVAL_OPTION (draft section 3.1).
    fn optional(&self, conn: &Live<'_, Self>, xid: u32, o: &v2::Optional<'_>) {
        let err = |e: v2::ErrorBody| {
            let h = v2::Header::error(xid, BC_SLOTS as u32, e);
            self.send_answer(conn, "RDMA2_ERROR", |buf| h.encode(buf).map_err(|_| EINVAL));
        };
        if !xchar::is_xchar_opttype(o.opttype) {
            return err(v2::ErrorBody::InvalOption);
        }
        let op = match XchOp::from_optional(o) {
            Ok(op) => op,
            Err(e) => {
                self.count_bad_reply();
                return err(e.reply());
            }
        };
        XCHAR_MESSAGES.fetch_add(1, Ordering::Relaxed);
        match op {
            XchOp::InitXch { .. } | XchOp::UpdXch { .. } => {
                let (before, merged, after) = {
                    let mut peer = self.peer_xch.lock();
                    let before = peer.rbsiz;
                    let merged = peer.merge(&op, None);
                    self.inline_cache.store(0, Ordering::Release);
                    (before, merged, peer.rbsiz)
                };
                if let Ok(m) = merged {
                    if m.inconsistent || !m.invalid.is_empty() {
                        self.count_bad_reply();
                    }
                }
                if before != after {
                    pr_info!(
                        "{}: server's receive buffer is {} bytes: calls up to {} bytes go inline\n",
                        self.xprt.addr_str(),
                        after,
                        after.min(self.cfg.settings.inline_write)
                    );
                }
            }
            XchOp::ReqXch { want } => {
                // Our characteristics are fixed: a request for the values
                // we already have is done, any other is rejected.
                let rbsiz = self.cfg.settings.inline_read;
                let (mut done, mut rej, mut pend) = ([0u32; 8], [0u32; 8], [0u32; 8]);
                let decide = |x: &Xchar<'_>| match x {
                    Xchar::RecvBufSize(v) if *v == rbsiz => xchar::Disposition::Done,
                    Xchar::ReqRemInv(true) => xchar::Disposition::Done,
                    Xchar::BackwardRequest(xchar::BkReqSup::Inline) => xchar::Disposition::Done,
                    _ => xchar::Disposition::Rejected,
                };
                let Ok(n) = xchar::respond_to_request(&want, decide, &mut done, &mut rej, &mut pend) else {
                    return err(v2::ErrorBody::BadHeader);
                };
                let (d, r, p) = (&done[..n], &rej[..n], &pend[..n]);
                let resp = XchOp::RespXch {
                    done: XcharSubset::from_words(d),
                    rej: XcharSubset::from_words(r),
                    pend: XcharSubset::from_words(p),
                };
                // The answer takes the request's XID, and the direction of
                // the side that answers.
                let dir = if o.direction == v2::Direction::Call { v2::Direction::Reply } else { v2::Direction::Call };
                self.send_answer(conn, "ROPT_RESPXCH", |buf| {
                    resp.encode_message(xid, BC_SLOTS as u32, dir, buf).map_err(|_| EINVAL)
                });
            }
            // We never ask the server to change anything: a response
            // answers nothing of ours (xcharext section 4).
            XchOp::RespXch { .. } => {
                self.count_bad_reply();
                err(v2::ErrorBody::InvalOption)
            }
        }
    }

    fn backward_call(&self, msg: &[u8]) {
        match self.bc.deliver(self.xprt, msg) {
            Ok(()) => {
                BACKWARD_CALLS.fetch_add(1, Ordering::Relaxed);
            }
            Err(BcError::Overflow) => {
                // The server sent more calls than we granted.
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!(
                        "{}: server sent more than the {} backward calls we granted; reconnecting\n",
                        self.xprt.addr_str(),
                        BC_SLOTS
                    );
                }
                BACKCHANNEL_OVERFLOWS.fetch_add(1, Ordering::Relaxed);
                self.force_disconnect();
            }
            Err(BcError::NoService) | Err(BcError::BadSize) => {
                self.count_bad_reply();
            }
        }
    }

    /// Answers a backward call that carries chunks with RDMA_ERROR /
    /// ERR_CHUNK: we move no reverse-direction data by RDMA (RFC 8167
    /// section 5.3), and callbacks never need to.
    fn refuse_backward_chunks(&self, conn: &Live<'_, Self>, xid: u32) {
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("{}: backward call with chunks refused with ERR_CHUNK\n", self.xprt.addr_str());
        }
        self.count_bad_reply();
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
            BACKWARD_CHUNK_ERRORS.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn complete(&self, rqst: PinnedRqst, payload: &[u8], verdict: Verdict) {
        let bad = || {
            self.count_bad_reply();
            EIO
        };
        match verdict {
            Verdict::Inline => rqst.complete_with(payload),
            Verdict::Written(written) => {
                if written > u64::from(rqst.reply_desc().page_len) {
                    return rqst.fail(bad());
                }
                self.stats.total_rdma_reply.fetch_add(written, Ordering::Relaxed);
                rqst.complete_write_chunk(payload, written as u32)
            }
            Verdict::ReplyWritten(written) => {
                if written > u64::from(rqst.reply_desc().len) {
                    return rqst.fail(bad());
                }
                self.stats.total_rdma_reply.fetch_add(written, Ordering::Relaxed);
                rqst.complete_reply_chunk(written as u32)
            }
            Verdict::Foreign(e) => rqst.fail(self.foreign_chunk(&e)),
            Verdict::Error => rqst.fail(EIO),
            Verdict::Bad => rqst.fail(bad()),
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
                // Our sizes as the private data advertised them.
                let s = &self.cfg.settings;
                let n = cm::negotiate(s.inline_write, s.inline_read, true, peer.as_ref());
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
            CmEvent::DeviceRemoval => {
                // The connection's resources must go for the removal to
                // finish: the close the disconnect below starts frees them.
                pr_info!("{}: RDMA device going away: disconnecting\n", self.xprt.addr_str());
                let was = self.state.lock().0;
                self.set(CmState::Closed);
                if was == CmState::Established {
                    self.force_disconnect();
                }
            }
            CmEvent::Disconnected | CmEvent::AddrChange => {
                let was = self.state.lock().0;
                self.set(CmState::Closed);
                if was == CmState::Established {
                    self.force_disconnect();
                }
            }
            CmEvent::Other => {}
        }
    }

    fn received(&self, conn: Live<'_, Self>, msg: Received<'_>) {
        self.reply(&conn, msg.data, msg.invalidated_rkey);
    }

    fn receive_failed(&self, status: u32) {
        // A peer can provoke this at will (e.g. Send With Invalidate of
        // an rkey that is not ours): one line per 5 s at most.
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("Receive failed (status {}): reconnecting\n", status);
        }
        self.force_disconnect();
    }

    fn invalidate_failed(&self) {
        INVALIDATE_FAILURES.fetch_add(1, Ordering::Relaxed);
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("{}: cannot invalidate memory regions: closing the connection\n", self.xprt.addr_str());
        }
        self.force_disconnect();
    }

    fn probe_done(&self, how: Completion) {
        if let Completion::Failed(status) = how {
            PROBE_FAILURES.fetch_add(1, Ordering::Relaxed);
            static MSG: RateLimit = RateLimit::new();
            if MSG.allow() {
                pr_warn!(
                    "{}: replies overdue and the server's queue pair does not answer a probe (status {}): reconnecting\n",
                    self.xprt.addr_str(),
                    status
                );
            }
            self.force_disconnect();
        }
    }

    fn send_done(&self, how: Completion) {
        match how {
            Completion::Ok => self.xprt.write_space(),
            Completion::Flushed => {}
            Completion::Failed(status) => {
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!("Send failed (status {}): reconnecting\n", status);
                }
                self.force_disconnect();
            }
        }
    }
}

/// A received transport header, Version One or Two.
struct Incoming<'a> {
    xid: u32,
    credits: u32,
    kind: Kind<'a>,
    /// What follows the header (the RPC message of an RDMA_MSG).
    payload: &'a [u8],
}

/// What a received header says, whichever the version.
enum Kind<'a> {
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
    fn decode_v1(data: &'a [u8]) -> Option<Self> {
        let (h, payload) = v1::Header::decode_split(data, &v1::Limits::DEFAULT).ok()?;
        let kind = match h.body {
            v1::Body::Msg(c) => Kind::Msg(c, None),
            v1::Body::NoMsg(c) => Kind::NoMsg(c, None),
            v1::Body::Error(_) => Kind::Error,
            _ => Kind::Retired,
        };
        Some(Incoming { xid: h.xid, credits: h.credits, kind, payload })
    }

    fn decode_v2(data: &'a [u8]) -> Option<Self> {
        let (h, payload) = v2::Header::decode(data).ok()?;
        let kind = match h.body {
            v2::Body::Msg(c) => Kind::Msg(c.lists, Some(c.direction)),
            v2::Body::NoMsg(c) => Kind::NoMsg(c.lists, Some(c.direction)),
            v2::Body::Error(_) => Kind::Error,
            v2::Body::Optional(o) => Kind::Optional(o),
        };
        Some(Incoming { xid: h.xid, credits: h.credit, kind, payload })
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
