// SPDX-License-Identifier: GPL-2.0

//! The objects of one RC connection, wired together: an rdma_cm id, its
//! PD, send and receive CQs, queue pair, Send and Receive buffers and
//! memory regions, and the connection's identity ([`ConnHandle`]).
//!
//! [`ConnBox`] owns every one of them and releases them in the only safe
//! order in `Drop`: the queue pair is drained (every posted work request
//! completes, flushed) and destroyed, then the CQs go (which waits for
//! running completion handlers), then the buffers and regions (dropping
//! the page references their mappings held), the PD, and finally the
//! cm_id (which waits for a running CM event handler); then the identity
//! says the connection is gone. The hardware only ever borrows buffers
//! the connection owns, so no buffer can be freed while the HCA may still
//! touch it.
//!
//! This is mechanism only. The Send queue (`sq.rs`) knows the order in
//! which Sends were posted and which have completed, which is all it needs
//! to never hand out a buffer the device still reads; which buffer comes
//! next, when a Send asks for a completion and how full the queue may get
//! are the owner's [`SendPolicy`]. Receives (`rq.rs`) are reposted when
//! the owner says, from the state it keeps in the Receive CQ's handler.
//! Regions (`frwr.rs`) are made, registered and invalidated on demand,
//! each use of one through a token of its lender ([`super::token`]).

use core::{
    cell::UnsafeCell,
    pin::Pin,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{code::EINVAL, Result},
    ffi::c_void,
    new_condvar, new_mutex, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, Mutex, SpinLock},
};

use super::{
    buf::{DmaBuf, MAX_SEND_SGES},
    cm::{CmId, ConnParam},
    cq::Cq,
    device::{Device, DeviceCaps, DeviceName},
    events::{cm_handler, Events},
    listen::ConnRequest,
    mr::FrMr,
    pd::Pd,
    qp::{Qp, QpCaps},
    rq::recv_done,
    rw_op::RwTable,
    sq::{probe_done, send_done, ProbeWr, SqLocked},
    token::ConnHandle,
};
use crate::{
    kapi::{
        cell::{LeaseCell, RawPin},
        errno,
        net::{Net, SockAddr},
    },
    sys,
};

/// What [`ConnBox::create_qp`] makes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpSizes {
    /// Send buffers.
    pub(crate) send_bufs: usize,
    /// Bytes in each Send buffer.
    pub(crate) send_buf_size: usize,
    /// SGEs a Send may carry (at most [`MAX_SEND_SGES`]).
    pub(crate) send_sges: usize,
    /// Receive buffers.
    pub(crate) recv_bufs: usize,
    /// Bytes in each Receive buffer.
    pub(crate) recv_buf_size: usize,
    /// Memory regions made with the queue pair.
    pub(crate) mrs: usize,
    /// Most memory regions [`Conn::add_mrs`] may make in all (at least
    /// `mrs`).
    pub(crate) max_mrs: usize,
    /// Pages each memory region can cover.
    pub(crate) mr_pages: u32,
    /// Send queue work requests the owner's own use needs (Sends, REG_MRs,
    /// LOCAL_INVs, R/W). The queue pair has two more, for the liveness
    /// probe and the drain.
    pub(crate) send_wrs: usize,
    /// R/W contexts in flight at once (the R/W API's MR pool, where the
    /// device needs registered RDMA Read sinks; iWARP does).
    pub(crate) rdma_ctxs: u32,
}

/// The ib_core objects [`ConnBox::create_qp`] makes, in the order they are
/// released.
///
/// # Invariants
///
/// `device` is the device the connection's id resolved to, which the id
/// holds (and keeps registered) for as long as these objects exist.
pub(super) struct Objects {
    pub(super) qp: Option<Qp>,
    send_cq: Cq,
    recv_cq: Cq,
    pub(super) pd: Pd,
    pub(super) lkey: u32,
    device: NonNull<sys::ib_device>,
}

// SAFETY: `device` is only turned into a `&Device` (type invariant), which
// is `Sync`; the other fields are `Send` and `Sync`.
unsafe impl Send for Objects {}
// SAFETY: see `Send`.
unsafe impl Sync for Objects {}

impl Objects {
    /// The device (no id lookup: the per-Send path reads it).
    #[inline]
    pub(super) fn device(&self) -> &Device {
        // SAFETY: registered for as long as `self` exists (type invariant).
        unsafe { Device::from_raw(self.device.as_ptr()) }
    }
}

/// State of the Receive CQ's handler, reached only by it.
///
/// # Invariants
///
/// `local` is reached only through `&mut` of the connection (before its
/// CQs exist or after they are freed) and by the Receive completion
/// handler, which ib_core runs for the connection's one Receive CQ one
/// call at a time (the CQ's work item).
pub(super) struct RecvLocalCell<L>(pub(super) UnsafeCell<Option<L>>);

// SAFETY: `local` is reached by one thread at a time (type invariant) and
// moves between threads only with the handler's work item (`L: Send`).
unsafe impl<L: Send> Sync for RecvLocalCell<L> {}

/// One connection's objects, pinned at a stable address: the rdma_cm id's
/// context is its `events`, the CQs' context is the whole.
///
/// # Invariants
///
/// - `id` is `Some` from just after [`ConnBox::new`] allocates the value
///   until `Drop`; its context is `events`.
/// - While `objs` is `Some`, its objects are live and belong to this
///   connection; its CQs' context is this value, and `sends`, `recvs` and
///   `mrs` were made on its device and PD by [`ConnBox::create_qp`].
/// - Each non-null entry of `mrs` is the region of that index, from
///   `KBox::into_raw` of a pinned [`FrMr`] made on this connection's device
///   and PD; entries go from null to non-null only (with `mr_grow` held)
///   while the connection is shared, and back to null only in
///   `release_objects`, which frees them. `mrs_made` counts the non-null
///   entries, which are the first ones.
/// - `done_seq` is written only with `sq` locked: every Send numbered up
///   to it has completed (or was flushed).
/// - `conn_id` is `handle`'s number.
/// - Fields other than `events`, the locks and the atomics are written
///   only through the [`ConnBox`] by `&mut`: before anything is posted,
///   or after every handler is done.
#[pin_data]
pub(crate) struct Conn<V: Events> {
    #[pin]
    pub(super) events: V,
    id: Option<CmId>,
    pub(super) handle: Arc<ConnHandle>,
    /// `handle`'s number, kept here to read without going through the
    /// `Arc` on every post and completion.
    conn_id: u64,
    pub(super) objs: Option<Objects>,
    pub(super) sends: KVec<Pin<KBox<DmaBuf>>>,
    pub(super) recvs: KVec<Pin<KBox<DmaBuf>>>,
    pub(super) mrs: KVec<AtomicPtr<FrMr>>,
    /// Regions made so far (the first `mrs_made` entries of `mrs`).
    pub(super) mrs_made: AtomicUsize,
    /// Pages each region covers.
    pub(super) mr_pages: u32,
    /// Held while regions are being made.
    #[pin]
    pub(super) mr_grow: Mutex<()>,
    /// Orders Sends: numbering, posting and the owner's policy.
    #[pin]
    pub(super) sq: SpinLock<SqLocked<V::Sends>>,
    /// The number of the last Send known complete.
    pub(super) done_seq: AtomicU64,
    /// The number of the last Send posted (stored after its post).
    pub(super) sent_seq: AtomicU64,
    /// Threads waiting in `wait_sent`.
    pub(super) send_waiters: AtomicU32,
    /// Woken by Send completions while somebody waits.
    #[pin]
    pub(super) send_wait: CondVar,
    pub(super) send_sges: usize,
    /// Serialises the LOCAL_INV and R/W completion flags with their
    /// waiters.
    #[pin]
    pub(super) inv_lock: SpinLock<()>,
    /// Woken by every LOCAL_INV completion (an R/W operation has a wait
    /// of its own).
    #[pin]
    pub(super) inv_wait: CondVar,
    pub(super) recv_local: RecvLocalCell<V::RecvLocal>,
    /// The R/W operations (a server's).
    #[pin]
    pub(super) rw: SpinLock<RwTable>,
    /// One bit per entry of `rw`'s first [`RW_DONE_BITS`]: set by the
    /// completion of the operation there (before its `done`), cleared
    /// when one is prepared there. What [`Conn::rw_completed`] reads,
    /// without the table's lock: a hint, the operation's `done` is what
    /// counts for ending it.
    pub(super) rw_done_bits: [AtomicU64; super::rw::RW_DONE_WORDS],
    /// Set before draining: completions must not repost.
    pub(super) dying: AtomicBool,
    /// The liveness probe's work request (a zero-length RDMA Write), away
    /// while posted: there is one at a time.
    pub(super) probe: LeaseCell<ProbeWr>,
    /// Written once; ib_core reads it when the probe completes.
    pub(super) probe_cqe: sys::ib_cqe,
}

/// Owns a [`Conn`]; tears it down on drop. The `Conn` is written in place
/// only under the rules of its type invariants (see [`RawPin`]).
pub(crate) struct ConnBox<V: Events> {
    raw: RawPin<Conn<V>>,
}

impl<V: Events> core::ops::Deref for ConnBox<V> {
    type Target = Conn<V>;

    #[inline]
    fn deref(&self) -> &Conn<V> {
        &self.raw
    }
}

impl<V: Events> ConnBox<V> {
    /// Allocates the connection without an id, with a new identity;
    /// `Drop` copes with that.
    fn alloc(events: impl PinInit<V>, idle: V::Sends) -> Result<Self> {
        let handle = ConnHandle::new()?;
        let conn_id = handle.id();
        let raw = RawPin::new(pin_init!(Conn {
            events <- events,
            id: None,
            handle,
            conn_id,
            objs: None,
            sends: KVec::new(),
            recvs: KVec::new(),
            mrs: KVec::new(),
            mrs_made: AtomicUsize::new(0),
            mr_pages: 0,
            mr_grow <- new_mutex!((), "rpcrdma_rs:mr_grow"),
            sq <- new_spinlock!(SqLocked::new(idle), "rpcrdma_rs:send_queue"),
            done_seq: AtomicU64::new(0),
            sent_seq: AtomicU64::new(0),
            send_waiters: AtomicU32::new(0),
            send_wait <- new_condvar!("rpcrdma_rs:send_wait"),
            send_sges: 1,
            inv_lock <- new_spinlock!((), "rpcrdma_rs:inv_lock"),
            inv_wait <- new_condvar!("rpcrdma_rs:inv_wait"),
            recv_local: RecvLocalCell(UnsafeCell::new(None)),
            rw <- new_spinlock!(RwTable::new(), "rpcrdma_rs:rw"),
            rw_done_bits: Default::default(),
            dying: AtomicBool::new(false),
            probe: LeaseCell::new(ProbeWr(sys::ib_rdma_wr::default())),
            probe_cqe: sys::ib_cqe { done: Some(probe_done::<V>) },
        }))?;
        // The caller sets `id`.
        Ok(ConnBox { raw })
    }

    /// The address of `events`, the rdma_cm context.
    fn events_ctx(&self) -> *mut c_void {
        // SAFETY: live (type invariant); only the field's address is taken.
        unsafe { ptr::addr_of!((*self.raw.as_ptr()).events) }.cast_mut().cast::<c_void>()
    }

    /// Sets the id, once, before anything else reaches it.
    fn set_id(&mut self, id: CmId) {
        // SAFETY: `&mut self`, and no event of the id reads the field (the
        // CM handler reaches only `events`).
        unsafe { (*self.raw.as_ptr()).id = Some(id) };
    }

    /// Creates the rdma_cm identifier in `net` (which takes its own
    /// reference on the namespace) with `events` as its owner's state.
    /// `idle` is the Send policy until [`Self::create_qp`].
    pub(crate) fn new(net: &Net, events: impl PinInit<V>, idle: V::Sends) -> Result<Self> {
        let mut this = Self::alloc(events, idle)?;
        // SAFETY: `events` outlives the id: `Drop` destroys the id (waiting
        // for running handlers) before freeing it.
        let id = unsafe { CmId::new(net, cm_handler::<V>, this.events_ctx()) }?;
        this.set_id(id);
        Ok(this)
    }

    /// Accepts a connection request (the passive side): makes the
    /// connection on the request's id, creates its queue pair and buffers
    /// as [`Self::create_qp`] does, and accepts with `param`, under the
    /// id's handler mutex. Call it outside the listener's handler (a
    /// thread of the acceptor's; from the handler it fails with
    /// `EDEADLK`). On failure the request comes back (unless it is over),
    /// for the caller to accept again or drop (which refuses it).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        req: ConnRequest,
        events: impl PinInit<V>,
        sizes: QpSizes,
        idle: V::Sends,
        policy: V::Sends,
        local: V::RecvLocal,
        take_recv: impl FnMut(usize) -> Result<KVec<u8>>,
        param: &ConnParam<'_>,
    ) -> core::result::Result<Self, (kernel::error::Error, Option<ConnRequest>)> {
        let mut this = match Self::alloc(events, idle) {
            Ok(this) => this,
            Err(e) => return Err((e, Some(req))),
        };
        let ctx = this.events_ctx();
        let setup = |slot: &mut Option<CmId>| {
            let Some(cm) = slot.take() else { return Err(EINVAL) };
            this.set_id(cm);
            let made = this.create_qp(sizes, policy, local, take_recv).and_then(|()| this.id()?.accept(param));
            if made.is_err() {
                // The queue pair and buffers go while the id exists; the
                // id goes back to the request.
                this.release_objects();
                // SAFETY: `&mut` ownership; the CM handler reaches only
                // `events`.
                *slot = unsafe { (*this.raw.as_ptr()).id.take() };
            }
            made
        };
        // SAFETY: `events` outlives the id: `Drop` destroys the id (waiting
        // for running handlers) before freeing it.
        unsafe { req.adopt(cm_handler::<V>, ctx, setup) }?;
        Ok(this)
    }

    /// Creates the PD, CQs, RC queue pair, buffers and the first `mrs`
    /// regions (room for `max_mrs`), and posts every Receive. Call once,
    /// after route resolution. `policy` takes over from the idle one;
    /// `local` is the Receive handler's state; `take_recv(size)` provides
    /// each Receive buffer.
    pub(crate) fn create_qp(
        &mut self,
        sizes: QpSizes,
        policy: V::Sends,
        local: V::RecvLocal,
        mut take_recv: impl FnMut(usize) -> Result<KVec<u8>>,
    ) -> Result {
        let raw = self.raw.as_ptr();
        // SAFETY: `&mut self`: no other reference made through the box is
        // alive, and no completion handler runs before the Receives are
        // posted at the end (the CQs do not even exist yet). The CM handler
        // reaches only `events`, which is not borrowed here.
        let (id, objs, sends, recvs, mrs, mr_pages, send_sges, recv_local) = unsafe {
            (
                &(*raw).id,
                &mut (*raw).objs,
                &mut (*raw).sends,
                &mut (*raw).recvs,
                &mut (*raw).mrs,
                &mut (*raw).mr_pages,
                &mut (*raw).send_sges,
                &mut (*raw).recv_local,
            )
        };
        let id = id.as_ref().ok_or(EINVAL)?;
        if objs.is_some() || sizes.send_bufs == 0 || sizes.recv_bufs == 0 {
            return Err(EINVAL);
        }
        let device = id.device().ok_or(EINVAL)?;
        // The send queue and CQ also take the liveness probe and the
        // drain's marker, one each beyond the owner's.
        let send_wrs = u32::try_from(sizes.send_wrs).ok().and_then(|n| n.checked_add(2)).ok_or(EINVAL)?;
        // LOCAL_INVs take one slot per region at most (a region's next one
        // waits for the last): the rest is for Send chains and R/W.
        let mr_room = sizes.max_mrs.max(sizes.mrs).min(usize::from(super::token::NO_MR));
        let cap = sizes.send_wrs.checked_sub(mr_room).filter(|&c| c > 0).ok_or(EINVAL)?;
        let recv_wrs = u32::try_from(sizes.recv_bufs).ok().and_then(|n| n.checked_add(1)).ok_or(EINVAL)?;
        let ctx = raw.cast::<c_void>();
        // SAFETY: the device stays registered while the id holds it, and
        // the id outlives the PD (`Drop` releases it last).
        let pd = unsafe { Pd::new(device) }?;
        // SAFETY: as above; `ctx` is this pinned value, which outlives the
        // CQs (`Drop` frees them first).
        let send_cq = unsafe { Cq::new(device, ctx, send_wrs) }?;
        // SAFETY: as above.
        let recv_cq = unsafe { Cq::new(device, ctx, recv_wrs) }?;
        let ssges = sizes.send_sges.clamp(1, MAX_SEND_SGES);
        let lkey = pd.local_dma_lkey();
        let caps = QpCaps {
            send_wrs,
            recv_wrs,
            send_sges: ssges as u32,
            port_num: id.port_num(),
            rdma_ctxs: sizes.rdma_ctxs,
        };
        // SAFETY: `Drop` destroys the queue pair before the CQs, the PD
        // and the id.
        let qp = unsafe { Qp::new(id, &pd, &send_cq, &recv_cq, caps) }?;
        // INVARIANT: from here on `objs` records what exists, so that `Drop`
        // releases exactly that, whatever step fails; the id holds `device`
        // until it is destroyed, after the objects.
        let dev = NonNull::new(device.as_ptr()).ok_or(EINVAL)?;
        *objs = Some(Objects { qp: Some(qp), send_cq, recv_cq, pd, lkey, device: dev });
        *send_sges = ssges;
        for index in 0..sizes.send_bufs {
            let data = KVec::from_elem(0u8, sizes.send_buf_size, GFP_KERNEL)?;
            // SAFETY: `Drop` frees buffers before the id lets the device go;
            // `send_done` takes completions of a `DmaBuf`.
            let buf = unsafe { DmaBuf::new(device, lkey, data, index, true, send_done::<V>) }?;
            sends.push(buf, GFP_KERNEL)?;
        }
        for index in 0..sizes.recv_bufs {
            let data = take_recv(sizes.recv_buf_size)?;
            // SAFETY: as above, for Receives.
            let buf = unsafe { DmaBuf::new(device, lkey, data, index, false, recv_done::<V>) }?;
            recvs.push(buf, GFP_KERNEL)?;
        }
        // INVARIANT: every entry null, none made yet.
        let room = sizes.max_mrs.max(sizes.mrs).min(usize::from(super::token::NO_MR));
        mrs.reserve(room, GFP_KERNEL)?;
        for _ in 0..room {
            mrs.push(AtomicPtr::new(ptr::null_mut()), GFP_KERNEL)?;
        }
        *mr_pages = sizes.mr_pages;
        // INVARIANT: set before any Receive completes (none is posted yet).
        *recv_local.0.get_mut() = Some(local);
        *self.rw.lock() = RwTable::with_room(sizes.rdma_ctxs as usize)?;
        if self.add_mrs(sizes.mrs)?.len() < sizes.mrs {
            return Err(kernel::error::code::ENOMEM);
        }
        {
            let mut g = self.sq.lock();
            g.policy = policy;
            // Room for Send chains and R/W: what is left once each region
            // has room for its LOCAL_INV.
            g.cap = cap;
        }
        let mut next = 0..sizes.recv_bufs;
        self.post_recvs(|| next.next())
    }

    /// Drains and releases the queue pair, CQs, buffers, regions and PD,
    /// in that order; the id stays.
    fn release_objects(&mut self) {
        let raw = self.raw.as_ptr();
        // First the queue pair is drained, while completion handlers may
        // still run: they see the connection as it was, so a Send reclaimed
        // by the drain wakes the caller waiting for it. That caller may be
        // a Receive's handler, which the drain of the Receive queue waits
        // for.
        {
            let conn: &Conn<V> = self;
            conn.dying.store(true, Ordering::Release);
            if let Some(qp) = conn.objs.as_ref().and_then(|o| o.qp.as_ref()) {
                conn.disconnect();
                qp.drain();
            }
        }
        let (objs, sends, recvs, mrs, recv_local) = {
            // SAFETY: after the drain no completion handler runs (every
            // posted WR completed and its handler ran: the drain's marker
            // always finds room in the send queue, see `SqLocked`, and the
            // receive queue has room for one beyond its buffers), and the CM handler
            // reaches only `events`: the other fields are ours alone (type
            // invariant).
            unsafe {
                (&mut (*raw).objs, &mut (*raw).sends, &mut (*raw).recvs, &mut (*raw).mrs, &mut (*raw).recv_local)
            }
        };
        let Some(Objects { qp, send_cq, recv_cq, pd, .. }) = objs.take() else { return };
        // R/W operations whose tokens were lost: their work requests are
        // flushed; their contexts go before the queue pair they were made
        // on.
        if let Some(qp) = qp.as_ref() {
            // SAFETY: a shared reference to one field, beside the mutable
            // ones to others above.
            let mut t = unsafe { &(*raw).rw }.lock();
            for mut op in t.take_all() {
                // SAFETY: made on this queue pair; drained, so nothing of
                // it is posted. (Destroying a context does not sleep.)
                unsafe { op.as_mut().destroy(qp) };
            }
        }
        // Each object goes once, after those that used it.
        drop(qp);
        drop(send_cq);
        drop(recv_cq);
        drop(recv_local.0.get_mut().take());
        drop(core::mem::take(sends));
        // Unmapped, the Receive buffers are plain memory again: the owner's
        // next connection may map them on its device.
        let bufs = core::mem::take(recvs);
        // SAFETY: `events` is live; only a shared reference is made.
        let events = unsafe { &(*raw).events };
        events.recv_buffers_freed(bufs.into_iter().map(DmaBuf::into_data));
        for slot in mrs.iter() {
            let p = slot.swap(ptr::null_mut(), Ordering::Relaxed);
            if !p.is_null() {
                // SAFETY: made by `add_mrs` from a pinned box, and freed
                // once: the entry is null from now on (type invariant).
                drop(unsafe { Pin::new_unchecked(KBox::from_raw(p)) });
            }
        }
        self.mrs_made.store(0, Ordering::Relaxed);
        drop(pd);
    }
}

impl<V: Events> Drop for ConnBox<V> {
    fn drop(&mut self) {
        self.release_objects();
        let raw = self.raw.as_ptr();
        // Waits for a running event handler, after which none can start;
        // `raw` then frees the connection.
        // SAFETY: as in `release_objects`.
        drop(unsafe { (*raw).id.take() });
        // The queue pair, regions and buffers are gone: no token of this
        // connection names anything in the device's reach.
        self.handle.set_gone();
    }
}

impl<V: Events> Conn<V> {
    /// The owner's state given to [`ConnBox::new`].
    #[inline]
    pub(crate) fn events(&self) -> &V {
        &self.events
    }

    fn id(&self) -> Result<&CmId> {
        self.id.as_ref().ok_or(EINVAL)
    }

    /// The connection's identity (its number, and whether it is gone).
    #[inline]
    pub(crate) fn handle(&self) -> &Arc<ConnHandle> {
        &self.handle
    }

    /// The connection's number, unique among all connections ever made.
    #[inline(always)]
    pub(crate) fn conn_id(&self) -> u64 {
        self.conn_id
    }

    /// See [`CmId::resolve_addr`].
    pub(crate) fn resolve_addr(&self, dst: &SockAddr, timeout_ms: u32) -> Result {
        self.id()?.resolve_addr(dst, timeout_ms)
    }

    /// See [`CmId::resolve_route`].
    pub(crate) fn resolve_route(&self, timeout_ms: u32) -> Result {
        self.id()?.resolve_route(timeout_ms)
    }

    /// The resolved device (after [`CmEvent::AddrResolved`]).
    fn device(&self) -> Option<&Device> {
        self.id.as_ref()?.device()
    }

    /// The resolved device's capabilities.
    pub(crate) fn device_caps(&self) -> Result<DeviceCaps> {
        self.device().map(Device::caps).ok_or(EINVAL)
    }

    /// The resolved device's name, copied (for messages).
    pub(crate) fn device_name(&self) -> Option<DeviceName> {
        self.device().map(Device::name)
    }

    /// See [`CmId::connect`].
    pub(crate) fn connect(&self, param: &ConnParam<'_>) -> Result {
        self.id()?.connect(param)
    }

    /// See [`CmId::disconnect`].
    pub(crate) fn disconnect(&self) {
        if let Some(id) = self.id.as_ref() {
            id.disconnect();
        }
    }

    /// Moves the queue pair to the error state at once, synchronously:
    /// every posted work request is flushed, and no RDMA operation of the
    /// peer reaches the connection's memory any more (RFC 8166 section
    /// 4.5.4). For a post that failed with part of its chain posted, or an
    /// invalidation that could not be posted; the owner drops the
    /// connection after.
    pub(super) fn break_qp(&self) {
        if let Ok(qp) = self.qp() {
            qp.to_error();
        }
        self.disconnect();
    }

    pub(super) fn qp(&self) -> Result<&Qp> {
        self.objs.as_ref().and_then(|o| o.qp.as_ref()).ok_or_else(errno::ENOTCONN)
    }
}
