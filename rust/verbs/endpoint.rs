// SPDX-License-Identifier: GPL-2.0

//! One connection and the state its completion handlers share: setting it
//! up, connecting, and what its events do before they reach the
//! [`ConnHandler`].

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel::{
    error::Result,
    new_spinlock,
    prelude::*,
    str::CStr,
    sync::{Arc, SpinLock},
};

use super::{
    freelist::FreeList, recv::RecvCache, CmEvent, Completion, ConnHandler, DeviceCaps, HeldRecv, QpConfig, Received,
    RwDir, VerbsCounters,
};
use crate::{
    kapi::{
        ib::{Conn, ConnBox, ConnParam, Events, Incoming, QpSizes},
        net::{Net, SockAddr},
        page::PageRef,
    },
    proto::credits::SendSignals,
};

/// The Send policy of a connection before its queue pair exists (no
/// buffers).
fn no_sends() -> SendSignals {
    SendSignals::new(0, 1)
}

/// Connection generations, so that a token can tell whether the connection
/// it was made on still exists.
static GENERATION: AtomicU64 = AtomicU64::new(1);

/// What a connection's completion handlers share, beside the handler.
#[pin_data]
pub(crate) struct EpState<T: ConnHandler> {
    pub(super) handler: Arc<T>,
    /// `handler.counters()`, looked up once.
    pub(super) counters: &'static VerbsCounters,
    /// Memory regions free for registration.
    #[pin]
    pub(super) free_mrs: SpinLock<FreeList>,
    /// Where the Receive buffers go back when the connection is torn down.
    pub(super) recv_cache: Arc<RecvCache>,
    /// Bumped whenever Send buffers or memory regions are given back; see
    /// [`Connection::release_epoch`].
    released: AtomicU64,
    /// A registration found no region idle since this was last taken
    /// ([`Connection::take_mrs_wanted`]).
    pub(super) mrs_wanted: AtomicBool,
    /// Receives completed successfully; written only by the receive CQ's
    /// handler, which never runs twice at once.
    receives: AtomicU64,
}

impl<T: ConnHandler> EpState<T> {
    fn new(handler: Arc<T>, cache: Arc<RecvCache>, free_mrs: FreeList) -> impl PinInit<Self> {
        let counters = handler.counters();
        pin_init!(EpState {
            handler,
            counters,
            free_mrs <- new_spinlock!(free_mrs, "rpcrdma_rs:free_mrs"),
            recv_cache: cache,
            released: AtomicU64::new(0),
            mrs_wanted: AtomicBool::new(false),
            receives: AtomicU64::new(0),
        })
    }

    /// The queue sizes, Send policy and region pool `cfg` asks for.
    fn sizes(cfg: &QpConfig) -> Result<(QpSizes, SendSignals, FreeList)> {
        let mut sizes = cfg.sizes;
        sizes.recv_batch = sizes.recv_batch.clamp(1, sizes.recv_bufs.max(1));
        let free_mrs = FreeList::first(sizes.mrs, sizes.max_mrs)?;
        let buffers = u32::try_from(sizes.send_bufs).map_err(|_| EINVAL)?;
        let policy = SendSignals::new(buffers, cfg.signal_interval);
        Ok((sizes, policy, free_mrs))
    }

    /// Sets up the pools for `cfg`; returns what the queue pair needs.
    fn prepare(&self, cfg: &QpConfig) -> Result<(QpSizes, SendSignals)> {
        let (sizes, policy, free_mrs) = Self::sizes(cfg)?;
        *self.free_mrs.lock() = free_mrs;
        Ok((sizes, policy))
    }

    /// Records that resources came back, before the caller wakes waiters.
    pub(super) fn note_release(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `released_since`: either the waiter sees
        // this bump, or its "waiting" flag is visible to our wake-up.
        core::sync::atomic::fence(Ordering::SeqCst);
    }
}

impl<T: ConnHandler> Events for EpState<T> {
    type Sends = SendSignals;

    fn cm_event(&self, event: CmEvent<'_>) {
        self.handler.cm_event(event);
    }

    fn received(&self, conn: &Conn<Self>, msg: Received<'_>) {
        // This handler never runs twice at once (one CQ): no locked add.
        self.receives.store(self.receives.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        self.handler.received(Live(conn), msg);
    }

    fn work_failed(&self, status: u32) {
        self.handler.receive_failed(status);
    }

    fn flushed(&self) {
        self.handler.queue_pair_flushed();
    }

    fn send_completed(&self, how: Completion, reclaimed: usize) {
        if reclaimed > 0 {
            self.note_release();
        }
        self.handler.send_done(how);
    }

    fn probe_done(&self, how: Completion) {
        self.handler.probe_done(how);
    }

    fn recv_buffers_freed(&self, bufs: impl Iterator<Item = KVec<u8>>) {
        self.recv_cache.give_back(bufs);
    }
}

/// A reading of a connection's release count
/// ([`Connection::release_epoch`]). Each release on the connection adds
/// one to its count; a reading is the count when it was taken plus the
/// releases its holder made since, so that the holder's own releases
/// never look like somebody else's.
pub(crate) struct ReleaseEpoch(u64);

impl ReleaseEpoch {
    /// Counts `n` releases the holder made itself.
    pub(super) fn own(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(n);
    }
}

/// An RDMA connection: its rdma_cm id, queue pair, buffers and regions,
/// and the handler its events go to.
pub(crate) struct Connection<T: ConnHandler> {
    pub(super) conn: ConnBox<EpState<T>>,
}

impl<T: ConnHandler> Connection<T> {
    /// Creates the rdma_cm identifier in `net` (which takes its own
    /// reference on the namespace); events go to `handler`, Receive
    /// buffers come from and go back to `cache`.
    pub(crate) fn new(net: &Net, handler: Arc<T>, cache: &Arc<RecvCache>) -> Result<Self> {
        let state = EpState::new(handler, cache.clone(), FreeList::new());
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        Ok(Connection { conn: ConnBox::<EpState<T>>::new(net, state, generation, no_sends())? })
    }

    /// The handler given to [`Connection::new`].
    pub(crate) fn handler(&self) -> &Arc<T> {
        &self.conn.events().handler
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

    /// The resolved device's name, for messages.
    pub(crate) fn device_name(&self) -> Option<&CStr> {
        self.conn.device_name()
    }

    /// Creates the PD, CQs, RC queue pair and buffers, and posts every
    /// Receive. Call once, after route resolution.
    pub(crate) fn create_qp(&mut self, cfg: QpConfig) -> Result {
        let (sizes, policy) = self.conn.events().prepare(&cfg)?;
        let cache = self.conn.events().recv_cache.clone();
        let made = self.conn.create_qp(sizes, policy, |size| cache.take(size));
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
    /// against it. Call from the [`Acceptor`](super::Acceptor)'s `request`.
    pub(crate) fn accept(
        req: Incoming<'_>,
        handler: Arc<T>,
        cache: &Arc<RecvCache>,
        cfg: QpConfig,
        private_data: &[u8],
        initiator_depth: u8,
    ) -> Result<Self> {
        // The pools are in place before the first Receive can complete.
        let (sizes, policy, free_mrs) = EpState::<T>::sizes(&cfg)?;
        let state = EpState::new(handler, cache.clone(), free_mrs);
        let param = ConnParam {
            private_data,
            responder_resources: 0,
            initiator_depth,
            flow_control: false,
            rnr_retry_count: 0,
            retry_count: 6,
        };
        let generation = GENERATION.fetch_add(1, Ordering::Relaxed);
        let take = cache.clone();
        let conn = ConnBox::<EpState<T>>::accept(
            req,
            state,
            generation,
            sizes,
            no_sends(),
            policy,
            |size| take.take(size),
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

    /// A reading of the count of resource releases (Send buffers, memory
    /// regions), taken before trying to send.
    ///
    /// Closes the lost-wakeup window of "no buffer, wait for space": read
    /// it before trying to send; after a failure with `ENOBUFS`, mark the
    /// transport as waiting (`xprt_wait_for_buffer_space`), then ask
    /// [`Connection::released_since`]. If something was released after
    /// the reading, its wake-up may have found no waiter: retry at once.
    /// If not, every later release sees the waiting mark and wakes the
    /// task. What the attempt itself gave back
    /// ([`Connection::release_unposted`]) moves the reading with it: a
    /// caller retrying for its own releases would retry for ever.
    ///
    /// The reading only has to come before the attempt (an acquire load,
    /// a plain load on x86): a release the attempt missed then counts
    /// after it. Telling a waiter from a release that missed its mark is
    /// [`Connection::released_since`]'s, whose fence pairs with the one in
    /// every release; one per RPC here would be a locked instruction for
    /// nothing.
    #[inline]
    pub(crate) fn release_epoch(&self) -> ReleaseEpoch {
        ReleaseEpoch(self.conn.events().released.load(Ordering::Acquire))
    }

    /// True if resources were released on this connection since `epoch`
    /// was read, other than by the reader itself. Call it after marking
    /// the caller as waiting: the fence orders that mark before this
    /// reading, as each release orders its count before it looks for
    /// waiters.
    pub(crate) fn released_since(&self, epoch: &ReleaseEpoch) -> bool {
        core::sync::atomic::fence(Ordering::SeqCst);
        self.conn.events().released.load(Ordering::Relaxed) != epoch.0
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
    /// True if what `reg` and `sent` hold (if anything) was registered or
    /// sent on this connection. A reply that arrives on a connection being
    /// torn down, for a call already sent again on its successor, finds
    /// the successor's tokens in the slot: they are not this connection's
    /// to invalidate or wait for.
    pub(crate) fn owns(&self, reg: &super::PostedRegistration, sent: &super::PagesInFlight) -> bool {
        self.0.owns(reg, sent)
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Calls `f` with the bytes of a held Receive; `None` if it is another
    /// connection's.
    pub(crate) fn with_held<R>(&self, h: &HeldRecv, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        self.conn.with_held(h, f)
    }

    /// Gives a held Receive back to be reposted.
    pub(crate) fn release_held(&self, h: HeldRecv) {
        self.conn.release_held(h)
    }

    /// RDMA Write of local `pages` to, or Read into them from, the peer's
    /// segment (`remote_addr`, `rkey`). Sleeps until done.
    pub(crate) fn rdma_rw(&self, dir: RwDir, pages: &[(PageRef<'_>, u32, u32)], remote_addr: u64, rkey: u32) -> Result {
        self.conn.rdma_rw(dir, pages, remote_addr, rkey)
    }
}
