// SPDX-License-Identifier: GPL-2.0

//! One RPC-over-RDMA transport (SUNRPC's `rpc_xprt`) and the transport
//! operations SUNRPC calls on it.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel::{
    alloc::flags::GFP_KERNEL,
    new_spinlock,
    prelude::*,
    sync::{Arc, SpinLock},
};

use crate::kapi::{
    rpc::{
        self, ConnectLock, FreedBcRqst, FreedRqst, Lent, Rqst, RqstStorage, SendLocked, SendLockedCell, StatsWriter, Task,
        Xprt, XprtRef,
    },
    work::{self, DelayedWork},
};

use super::{
    backchannel::{BcPool, BC_SLOTS},
    recvbufs::RecvCache,
    conn::{Endpoint, EpShared},
    liveness::LIVENESS,
    params,
    regions::GROW_MRS,
    slots::SlotTable,
    stats::{Stats, COUNTERS},
};

/// One RPC-over-RDMA transport.
#[pin_data]
pub(crate) struct RdmaXprt {
    /// The connect worker; while queued it holds a reference of the
    /// transport.
    #[pin]
    pub(super) connect_work: DelayedWork<RdmaXprt>,
    /// The liveness check; the same.
    #[pin]
    pub(super) liveness: DelayedWork<RdmaXprt, LIVENESS>,
    /// Makes memory regions when calls run out of them; the same.
    #[pin]
    pub(super) grow_mrs: DelayedWork<RdmaXprt, GROW_MRS>,
    /// The connection's Receive count when the liveness check last looked
    /// (`u64::MAX` after a connect: not looked yet).
    pub(super) receives_seen: AtomicU64,
    pub(super) xprt: XprtRef,
    pub(super) max_requests: u32,
    /// The parameters as they were when the transport was created.
    pub(super) settings: params::Settings,
    /// Numbers the transport's connections (1, 2, ...).
    pub(super) generation: AtomicU64,
    /// The connection whose replies may change SUNRPC's congestion window
    /// (its generation; 0: none), shared with every connection.
    pub(super) window: Arc<SpinLock<u64>>,
    /// The connection, changed only under the send lock: a call being sent
    /// borrows it without a lock or a reference of its own.
    #[pin]
    pub(super) ep: SendLockedCell<Option<Arc<Endpoint>>>,
    /// The send lock, from `connect` to the end of the connect worker's
    /// run (see [`Xprt::lock_connect`]).
    #[pin]
    pub(super) connect_lock: SpinLock<Option<ConnectLock>>,
    /// Set once a connect attempt has been made (reconnects back off).
    pub(super) tried: AtomicBool,
    pub(super) slots: Arc<SlotTable>,
    pub(super) bc: Arc<BcPool>,
    pub(super) stats: Arc<Stats>,
    /// Receive buffers kept across connections.
    pub(super) recv_cache: Arc<RecvCache>,
    /// The connection being set up by the connect worker, so that
    /// `shutdown` can abort it instead of waiting out its timeouts.
    #[pin]
    pub(super) pending: SpinLock<Option<Arc<EpShared>>>,
    /// Set by `shutdown`: no new connection may be set up.
    pub(super) dying: AtomicBool,
}

impl RdmaXprt {
    pub(super) fn new(
        xprt: XprtRef,
        max_requests: u32,
        settings: params::Settings,
    ) -> Result<impl PinInit<Self, Error>> {
        let slots = Arc::new(SlotTable::new(max_requests as usize)?, GFP_KERNEL)?;
        let stats = Arc::new(Stats::default(), GFP_KERNEL)?;
        let bc = Arc::new(BcPool::new(BC_SLOTS)?, GFP_KERNEL)?;
        let recv_cache = Arc::pin_init(RecvCache::new(&COUNTERS.verbs), GFP_KERNEL)?;
        let window = Arc::pin_init(new_spinlock!(0, "rpcrdma_rs:window"), GFP_KERNEL)?;
        let ep = SendLockedCell::new(xprt.get(), None);
        Ok(try_pin_init!(RdmaXprt {
            connect_work <- DelayedWork::new(),
            liveness <- DelayedWork::new(),
            grow_mrs <- DelayedWork::new(),
            receives_seen: AtomicU64::new(u64::MAX),
            xprt,
            max_requests,
            settings,
            generation: AtomicU64::new(0),
            window,
            ep <- ep,
            connect_lock <- new_spinlock!(None, "rpcrdma_rs:connect_lock"),
            tried: AtomicBool::new(false),
            slots,
            bc,
            stats,
            recv_cache,
            pending <- new_spinlock!(None, "rpcrdma_rs:pending"),
            dying: AtomicBool::new(false),
        }))
    }

    /// A reference of the connection, for whoever does not hold the send
    /// lock.
    #[inline]
    pub(super) fn endpoint(&self) -> Option<Arc<Endpoint>> {
        self.ep.with(Clone::clone)
    }
}

#[vtable]
impl rpc::Transport for RdmaXprt {
    fn bc_free(&self, rqst: FreedBcRqst<'_>) {
        self.bc.give_back(rqst)
    }

    fn bc_maxpayload(&self, _x: Xprt<'_>) -> usize {
        self.bc_max_payload()
    }

    fn bc_num_slots(&self) -> u32 {
        BC_SLOTS as u32
    }

    #[inline]
    fn alloc_slot(&self, x: Xprt<'_>, task: &Task<'_>) {
        self.slots.alloc(x, task);
    }

    #[inline]
    fn free_slot(&self, x: Xprt<'_>, rqst: FreedRqst<'_>) {
        self.slots.free(x, rqst);
    }

    #[inline]
    fn storage<'a>(&'a self, rqst: &Rqst<'_>) -> Option<&'a RqstStorage> {
        self.slots.slot_of(rqst).map(|slot| &slot.storage)
    }

    #[inline]
    fn release_request<'a>(&'a self, x: Xprt<'_>, rqst: &Rqst<'_>) -> Option<&'a RqstStorage> {
        self.release_held(x, rqst).map(|slot| &slot.storage)
    }

    fn connect(this: Lent<'_, Self>, x: Xprt<'_>, task: &Task<'_>) {
        RdmaXprt::start_connect(this.arc(), x, task)
    }

    fn close(&self, x: Xprt<'_>, locked: &mut SendLocked<'_>) {
        // Its teardown completes in whoever drops the last reference; the
        // connect worker waits for it before making the next connection.
        drop(self.disconnect(locked));
        x.disconnect_done(locked);
    }

    #[inline]
    fn send_request(this: Lent<'_, Self>, x: Xprt<'_>, rqst: &Rqst<'_>, locked: &mut SendLocked<'_>) -> Result {
        RdmaXprt::send_call(this, x, rqst, locked)
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
        self.write_mountstats(x, out)
    }

    fn shutdown(&self, _x: Xprt<'_>, locked: &mut SendLocked<'_>) {
        // A connect in progress (say, to a server that went away) gives up
        // now rather than after its timeouts: the mount is gone.
        self.dying.store(true, Ordering::SeqCst);
        if let Some(shared) = self.pending.lock().clone() {
            shared.abort();
        }
        drop(work::cancel_sync::<_, 0>(self));
        // After the connect worker, which may queue it; `dying` keeps it
        // from queueing itself again.
        drop(work::cancel_sync::<_, LIVENESS>(self));
        drop(work::cancel_sync::<_, GROW_MRS>(self));
        drop(self.disconnect(locked));
    }
}

