// SPDX-License-Identifier: GPL-2.0

//! One connection and the state its completion handlers share: setting it
//! up, connecting, and what its events do before they reach the
//! [`ConnHandler`].

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel::{
    error::Result,
    new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
};

use super::{
    freelist::FreeList,
    recv::RecvBatch,
    send::SendRing,
    CmEvent, Completion, ConnHandler, DeviceCaps, DeviceName, HeldRecv, QpConfig, Received, VerbsCounters,
};
use crate::kapi::{
    ib::{Conn, ConnBox, ConnHandle, ConnParam, ConnRequest, Events, QpSizes, RwChunk, RwPosted, RwSeg},
    net::{Net, SockAddr},
    page::{Dir, Inbound, OwnedPages},
};

/// What a connection's completion handlers share, beside the handler.
#[pin_data]
pub(crate) struct EpState<T: ConnHandler> {
    pub(super) handler: Arc<T>,
    /// `handler.counters()`, looked up once.
    pub(super) counters: &'static VerbsCounters,
    /// Memory regions free for registration.
    #[pin]
    pub(super) free_mrs: SpinLock<FreeList>,
    /// A registration found no region idle since this was last taken
    /// ([`Connection::take_mrs_wanted`]).
    pub(super) mrs_wanted: AtomicBool,
    /// Receives completed successfully; written only by the receive CQ's
    /// handler, which never runs twice at once.
    receives: AtomicU64,
}

impl<T: ConnHandler> EpState<T> {
    fn new(handler: Arc<T>, free_mrs: FreeList) -> impl PinInit<Self> {
        let counters = handler.counters();
        pin_init!(EpState {
            handler,
            counters,
            free_mrs <- new_spinlock!(free_mrs, "rpcrdma_rs:free_mrs"),
            mrs_wanted: AtomicBool::new(false),
            receives: AtomicU64::new(0),
        })
    }

    /// The queue sizes, Send ring, Receive batch and region pool `cfg`
    /// asks for.
    fn sizes(cfg: &QpConfig) -> Result<(QpSizes, SendRing, RecvBatch, FreeList)> {
        let recv_batch = cfg.recv_batch.clamp(1, cfg.recv_bufs.max(1));
        let max_mrs = cfg.max_mrs.max(cfg.mrs);
        let free_mrs = FreeList::first(cfg.mrs, max_mrs)?;
        // Room for one Send with every registration it may carry, at least.
        let budget = cfg.send_wrs.max(cfg.max_send_regs.saturating_add(1));
        let ring = SendRing::new(cfg.send_bufs, cfg.signal_interval)?;
        let batch = RecvBatch::new(cfg.recv_bufs, recv_batch)?;
        // The Sends, the REG_MRs chained in front and R/W operations take
        // their slots from the budget (kapi counts them); each region has
        // at most one LOCAL_INV posted (its invalidation waits for it
        // before the region is used again), so one slot per region covers
        // those.
        let sizes = QpSizes {
            send_bufs: cfg.send_bufs,
            send_buf_size: cfg.send_buf_size,
            send_sges: cfg.send_sges,
            recv_bufs: cfg.recv_bufs,
            recv_buf_size: cfg.recv_buf_size,
            mrs: cfg.mrs,
            max_mrs,
            mr_pages: cfg.mr_pages,
            send_wrs: budget.checked_add(max_mrs).ok_or(EINVAL)?,
            rdma_ctxs: cfg.rdma_ctxs,
        };
        Ok((sizes, ring, batch, free_mrs))
    }

    /// Says that resources came back, before the caller wakes waiters.
    #[inline]
    pub(super) fn note_release(&self) {
        self.handler.released();
    }
}

impl<T: ConnHandler> Events for EpState<T> {
    type Sends = SendRing;
    type RecvLocal = RecvBatch;

    fn cm_event(&self, event: CmEvent<'_>) {
        self.handler.cm_event(event);
    }

    fn received(&self, conn: &Conn<Self>, _local: &mut RecvBatch, msg: Received<'_>) {
        // This handler never runs twice at once (one CQ): no locked add.
        self.receives.store(self.receives.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        self.handler.received(Live(conn), msg);
    }

    #[inline]
    fn recv_idle(&self, conn: &Conn<Self>, local: &mut RecvBatch, index: usize) {
        if local.push(index) && conn.post_recvs(|| local.pop()).is_err() {
            self.handler.receive_failed(u32::MAX);
        }
    }

    fn work_failed(&self, status: u32) {
        self.handler.receive_failed(status);
    }

    fn flushed(&self) {
        self.handler.queue_pair_flushed();
    }

    #[inline]
    fn send_completed(&self, how: Completion, reclaimed: usize) {
        if reclaimed > 0 {
            self.note_release();
        }
        self.handler.send_done(how);
    }

    fn probe_done(&self, how: Completion) {
        self.handler.probe_done(how);
    }

    fn rw_done(&self, cookie: u64, how: Completion) {
        self.handler.rw_done(cookie, how);
    }

    fn inject_partial_post(&self) -> bool {
        self.handler.inject_partial_post()
    }

    fn inject_partial_rw_post(&self) -> bool {
        self.handler.inject_partial_rw_post()
    }

    fn recv_buffers_freed(&self, bufs: impl Iterator<Item = KVec<u8>>) {
        self.handler.recv_buffers_freed(bufs);
    }
}

/// An RDMA connection: its rdma_cm id, queue pair, buffers and regions,
/// and the handler its events go to.
pub(crate) struct Connection<T: ConnHandler> {
    pub(super) conn: ConnBox<EpState<T>>,
}

impl<T: ConnHandler> Connection<T> {
    /// Creates the rdma_cm identifier in `net` (which takes its own
    /// reference on the namespace); events go to `handler`, and so do
    /// Receive buffers when the connection goes.
    pub(crate) fn new(net: &Net, handler: Arc<T>) -> Result<Self> {
        let state = EpState::new(handler, FreeList::new());
        Ok(Connection { conn: ConnBox::<EpState<T>>::new(net, state, SendRing::idle())? })
    }

    /// The handler given to [`Connection::new`].
    pub(crate) fn handler(&self) -> &Arc<T> {
        &self.conn.events().handler
    }

    /// The connection's number, unique among all connections.
    #[inline]
    pub(crate) fn conn_id(&self) -> u64 {
        self.conn.conn_id()
    }

    /// The connection's identity, which says when it is gone.
    pub(crate) fn handle(&self) -> &Arc<ConnHandle> {
        self.conn.handle()
    }

    /// Starts resolving `dst` to a device and address; the outcome arrives
    /// as [`CmEvent::AddrResolved`] or [`CmEvent::AddrError`].
    pub(crate) fn resolve_addr(&self, dst: &SockAddr, timeout_ms: u32) -> Result {
        self.conn.resolve_addr(dst, timeout_ms)
    }

    /// Starts resolving the route; the outcome arrives as
    /// [`CmEvent::RouteResolved`] or [`CmEvent::RouteError`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        self.conn.resolve_route(timeout_ms)
    }

    /// The resolved device's capabilities (after [`CmEvent::AddrResolved`]).
    pub(crate) fn device_caps(&self) -> Result<DeviceCaps> {
        self.conn.device_caps()
    }

    /// The resolved device's name, for messages (`?` before resolution).
    pub(crate) fn device_name(&self) -> DeviceName {
        self.conn.device_name().unwrap_or_default()
    }

    /// Creates the PD, CQs, RC queue pair and buffers, and posts every
    /// Receive. Call once, after route resolution.
    pub(crate) fn create_qp(&mut self, cfg: QpConfig) -> Result {
        let (sizes, ring, batch, free_mrs) = EpState::<T>::sizes(&cfg)?;
        *self.conn.events().free_mrs.lock() = free_mrs;
        let handler = self.conn.events().handler.clone();
        let made = self.conn.create_qp(sizes, ring, batch, |size| handler.recv_buffer(size));
        // Regions made before a failure are freed with the connection
        // all the same (see `Drop`).
        self.count_mrs(self.conn.mrs_made());
        made
    }

    /// Adds `n` regions made to [`VerbsCounters::mrs_live`].
    pub(super) fn count_mrs(&self, n: usize) {
        if n > 0 {
            self.conn.events().counters.mrs_live.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Accepts a connection request (the passive side, a server): events
    /// go to `handler`, queues as `cfg` says; `private_data` goes back to
    /// the peer, and we may have `initiator_depth` RDMA Reads in flight
    /// against it. Call it from a thread of the acceptor's, not from the
    /// [`Acceptor`](super::Acceptor)'s `request` (the CM's handler): the
    /// request may wait in a queue meanwhile. On failure the request comes
    /// back (unless it is over), to accept again or drop.
    pub(crate) fn accept(
        req: ConnRequest,
        handler: Arc<T>,
        cfg: QpConfig,
        private_data: &[u8],
        initiator_depth: u8,
    ) -> core::result::Result<Self, (kernel::error::Error, Option<ConnRequest>)> {
        // The pools are in place before the first Receive can complete.
        let (sizes, ring, batch, free_mrs) = match EpState::<T>::sizes(&cfg) {
            Ok(s) => s,
            Err(e) => return Err((e, Some(req))),
        };
        let buffers = handler.clone();
        let state = EpState::new(handler, free_mrs);
        let param = ConnParam {
            private_data,
            responder_resources: 0,
            initiator_depth,
            flow_control: false,
            rnr_retry_count: 0,
            retry_count: 6,
        };
        let conn = ConnBox::<EpState<T>>::accept(
            req,
            state,
            sizes,
            SendRing::idle(),
            ring,
            batch,
            |size| buffers.recv_buffer(size),
            &param,
        )?;
        let this = Connection { conn };
        this.count_mrs(this.conn.mrs_made());
        Ok(this)
    }

    /// Starts connecting, sending `private_data`; the outcome arrives as a
    /// CM event. `responder_resources`: RDMA Reads the peer may have in
    /// flight against us.
    pub(crate) fn connect(&self, private_data: &[u8], responder_resources: u8) -> Result {
        self.conn.connect(&ConnParam {
            private_data,
            responder_resources,
            // The active side of RPC-over-RDMA (the client) never issues
            // RDMA Reads.
            initiator_depth: 0,
            // Credits prevent receiver-not-ready: an RNR is a bug, show it.
            flow_control: false,
            rnr_retry_count: 0,
            retry_count: 6,
        })
    }

    /// Asks the peer to disconnect; flushes every posted work request.
    pub(crate) fn disconnect(&self) {
        self.conn.disconnect();
    }

    /// Receives completed successfully on this connection so far.
    pub(crate) fn receives(&self) -> u64 {
        self.conn.events().receives.load(Ordering::Relaxed)
    }
}

impl<T: ConnHandler> Drop for Connection<T> {
    fn drop(&mut self) {
        // The regions go with the connection (its `conn`, dropped next).
        let n = self.conn.mrs_made() as u64;
        if n > 0 {
            self.conn.events().counters.mrs_live.fetch_sub(n, Ordering::Relaxed);
        }
    }
}

/// The connection a completion handler runs on, borrowed for the call.
pub(crate) struct Live<'a, T: ConnHandler>(pub(super) &'a Conn<EpState<T>>);

impl<T: ConnHandler> Live<'_, T> {
    /// The connection's number (see [`Connection::conn_id`]).
    #[inline]
    pub(crate) fn conn_id(&self) -> u64 {
        self.0.conn_id()
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Calls `f` with the bytes of a held Receive; `None` if it is another
    /// connection's.
    pub(crate) fn with_held<R>(&self, h: &HeldRecv, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.conn.with_held(h, f)
    }

    /// Gives a held Receive back to be reposted; fails for another
    /// connection's.
    pub(crate) fn release_held(&self, h: HeldRecv) -> Result {
        self.conn.release_held(h)
    }

    /// Gives back the held Receives `next` yields, reposted together (one
    /// chained post): see
    /// [`Conn::release_held_many`](crate::kapi::ib::Conn::release_held_many).
    pub(crate) fn release_held_many(&self, next: impl FnMut() -> Option<HeldRecv>) -> Result {
        self.conn.release_held_many(next)
    }

    /// Prepares an RDMA Write of local `Outbound` pages to, or Read into
    /// `Inbound` ones from, the peer's segments `segs` (one chunk): see
    /// [`Conn::rw_prepare`](crate::kapi::ib::Conn::rw_prepare). Sleeps.
    pub(crate) fn rw_prepare<D: Dir>(&self, segs: &[RwSeg<'_, '_, D>], cookie: u64) -> Result<RwChunk<D>> {
        self.conn.rw_prepare(segs, cookie)
    }

    /// Prepares an RDMA Read of the peer's segments `segs` (rkey,
    /// address, length) into pages of the operation's own, one run per
    /// chunk of `chunks` (its segments, its length): see
    /// [`Conn::rw_prepare_read`](crate::kapi::ib::Conn::rw_prepare_read).
    /// Sleeps.
    pub(crate) fn rw_prepare_read<S>(&self, segs: S, chunks: &[(usize, u32)], cookie: u64) -> Result<RwChunk<Inbound>>
    where
        S: Iterator<Item = (u32, u64, u32)> + Clone,
    {
        self.conn.rw_prepare_read(segs, chunks, cookie)
    }

    /// Posts `c` alone; [`ConnHandler::rw_done`] gets its completion, and
    /// [`Connection::rw_wait`] waits for it.
    pub(crate) fn rw_post<D: Dir>(&self, c: RwChunk<D>) -> core::result::Result<RwPosted<D>, (Error, RwChunk<D>)> {
        self.conn.rw_post(c)
    }

    /// Waits until `p` completes, then ends it. Sleeps.
    pub(crate) fn rw_wait<D: Dir>(&self, p: RwPosted<D>) -> core::result::Result<Completion, RwPosted<D>> {
        self.conn.rw_wait(p)
    }

    /// Waits until the RDMA Read `p` completes, then ends it, and hands
    /// over the pages it filled, in `filled`: see
    /// [`Conn::rw_wait_filled`](crate::kapi::ib::Conn::rw_wait_filled).
    /// Sleeps.
    pub(crate) fn rw_wait_filled(
        &self,
        p: RwPosted<Inbound>,
        filled: &mut [Option<OwnedPages>],
    ) -> core::result::Result<Completion, RwPosted<Inbound>> {
        self.conn.rw_wait_filled(p, filled)
    }

    /// True once `p` completed: [`Connection::rw_wait`] then returns at
    /// once.
    pub(crate) fn rw_completed<D: Dir>(&self, p: &RwPosted<D>) -> bool {
        self.conn.rw_completed(p)
    }

    /// How many R/W operations the connection holds (prepared, posted, or
    /// carried by a Send not yet complete).
    pub(crate) fn rw_live(&self) -> usize {
        self.conn.rw_live()
    }

    /// Ends `c`, never posted.
    pub(crate) fn rw_discard<D: Dir>(&self, c: RwChunk<D>) -> core::result::Result<(), RwChunk<D>> {
        self.conn.rw_discard(c)
    }

    /// One R/W operation, start to end: prepared, posted and waited for.
    /// Fails with `EIO` if the device reports an error. Sleeps.
    pub(crate) fn rdma_rw<D: Dir>(&self, segs: &[RwSeg<'_, '_, D>]) -> Result {
        let c = self.rw_prepare(segs, 0)?;
        let p = match self.rw_post(c) {
            Ok(p) => p,
            Err((e, c)) => {
                let _ = self.rw_discard(c);
                return Err(e);
            }
        };
        match self.rw_wait(p) {
            Ok(Completion::Ok) => Ok(()),
            Ok(_) => Err(EIO),
            // Of this connection: never.
            Err(_p) => Err(EINVAL),
        }
    }
}
