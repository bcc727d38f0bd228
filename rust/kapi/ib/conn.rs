// SPDX-License-Identifier: GPL-2.0

//! The objects of one RC connection, wired together: an rdma_cm id, its
//! PD, send and receive CQs, queue pair, Send and Receive buffers and
//! memory regions.
//!
//! [`ConnBox`] owns every one of them and releases them in the only safe
//! order in `Drop`: the queue pair is drained (every posted work request
//! completes, flushed) and destroyed, then the CQs go (which waits for
//! running completion handlers), then the buffers and regions, the PD and
//! finally the cm_id (which waits for a running CM event handler). The
//! hardware only ever borrows buffers the connection owns, so no buffer can
//! be freed while the HCA may still touch it.
//!
//! This is mechanism only (Send buffers are used round a ring, in the
//! order they are posted: see `SendRing`; consumed Receives are reposted
//! in batches of the size the caller gives, by the Receive CQ's handler
//! with no lock: see `RecvPending`). What to do with an event, which
//! region to use next and when to ask for a Send completion are the
//! caller's: it implements [`Events`] (its state lives inside the
//! connection, pinned, so completions reach it) and [`SendPolicy`] (kept
//! under the lock that orders Sends).

use core::{
    cell::Cell,
    ops::Range,
    pin::Pin,
    ptr::{self, NonNull},
    sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVec},
    error::{
        code::{EINVAL, EIO, ENOMEM},
        Error, Result,
    },
    ffi::{c_int, c_void},
    new_condvar, new_mutex, new_spinlock,
    prelude::*,
    sync::{CondVar, Mutex, SpinLock},
};

use super::{
    cm::{CmEvent, CmId, ConnParam},
    cq::{Completion, Cq},
    device::{Device, DeviceCaps},
    dma::{BufState, DmaBuf, PagesInFlight, SendDone, SendWriter, MAX_SEND_SGES},
    listen::Incoming,
    mr::{
        note_invalidated, FrMr, Holding, Invalidated, MrState, OnePostedRegistration, OneRegistration,
        PostedRegistration, Registered, Registration, SgWriter, MAX_MRS,
    },
    pd::Pd,
    qp::{Qp, QpCaps},
    rw::{RwDir, RwOp},
};
use crate::{
    kapi::{
        cell::{Lease, LeaseCell, RawPin},
        errno,
        net::{Net, SockAddr},
        page::PageRef,
        trace,
    },
    sys,
};

/// What [`ConnBox::create_qp`] makes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpSizes {
    /// Send buffers (= Sends that may be outstanding).
    pub(crate) send_bufs: usize,
    /// Bytes in each Send buffer.
    pub(crate) send_buf_size: usize,
    /// SGEs a Send may carry (at most [`MAX_SEND_SGES`]).
    pub(crate) send_sges: usize,
    /// Receive buffers.
    pub(crate) recv_bufs: usize,
    /// Consumed Receives are reposted together, in one chained post, once
    /// this many have gathered (at least one); `recv_bufs` must include
    /// that many spares.
    pub(crate) recv_batch: usize,
    /// Bytes in each Receive buffer.
    pub(crate) recv_buf_size: usize,
    /// Memory regions for chunks made with the queue pair.
    pub(crate) mrs: usize,
    /// Most memory regions [`Conn::add_mrs`] may make in all (at least
    /// `mrs`).
    pub(crate) max_mrs: usize,
    /// Pages each memory region can cover.
    pub(crate) mr_pages: u32,
    /// Send queue slots the Sends and the REG_MRs posted with them may
    /// hold at once (at least one Send with [`MAX_MRS`] registrations).
    /// The queue pair also gets a slot per memory region for its
    /// LOCAL_INV, and two more (the liveness probe, the drain).
    pub(crate) send_wrs: usize,
}

/// What arrived in a Receive.
pub(crate) struct Received<'a> {
    /// The bytes the peer sent.
    pub(crate) data: &'a [u8],
    /// The rkey the peer invalidated with Send With Invalidate, if it did.
    pub(crate) invalidated_rkey: Option<u32>,
    /// Set by `hold`: the trampoline then hands the buffer off to the
    /// token instead of making it idle.
    hold: &'a Cell<bool>,
    index: usize,
    generation: u64,
}

impl Received<'_> {
    /// Keeps the Receive buffer after the handler returns: it is not
    /// reposted until the returned token is given to
    /// [`Conn::release_held`], and [`Conn::with_held`] reads it meanwhile
    /// (a server keeps a call's Receive until its reply is sent).
    pub(crate) fn hold(self) -> HeldRecv {
        self.hold.set(true);
        HeldRecv { generation: self.generation, index: self.index, len: self.data.len() }
    }
}

/// A Receive buffer its handler kept ([`Received::hold`]): not posted, and
/// reached only through this token.
///
/// # Invariants
///
/// Receive buffer `index` of the connection of generation `generation` was
/// handed off to this token when its Receive completed with `len` bytes,
/// and is not posted until the token is consumed (`release_held`). Only
/// `hold` makes one, once per completion.
#[must_use = "a held Receive is not reposted until it is released"]
pub(crate) struct HeldRecv {
    generation: u64,
    index: usize,
    len: usize,
}

/// When a Send asks for a completion. Called under the lock that orders
/// Sends, so calls never overlap; they must not sleep. (Which buffer a
/// Send uses is not a choice: the next one round the ring.)
pub(crate) trait SendPolicy: Send + Unpin {
    /// A Send is being posted (`mapped`: it carries DMA-mapped pages),
    /// leaving `idle_after` Send buffers idle: true to ask for its
    /// completion. Every Send posted before a signalled one is reclaimed by
    /// that one's completion; a sender that finds no idle buffer waits for
    /// one, so while every buffer is outstanding one must be signalled.
    fn signal(&mut self, mapped: bool, idle_after: usize) -> bool;
}

/// What a connection's owner does with its events. Its state lives in the
/// connection, pinned ([`ConnBox::new`]); the handlers get it by
/// reference, with the connection where they may post.
pub(crate) trait Events: Send + Sync + Sized {
    /// The Send policy, kept under the lock that orders Sends.
    type Sends: SendPolicy;

    /// An rdma_cm event arrived. Runs in the CM's work context.
    fn cm_event(&self, event: CmEvent<'_>);

    /// A Receive completed successfully; its buffer is held over the call.
    /// Runs in process context and may sleep.
    fn received(&self, conn: &Conn<Self>, msg: Received<'_>);

    /// A Receive, REG_MR or LOCAL_INV failed (not flushed): the
    /// connection must be dropped.
    fn work_failed(&self, status: u32);

    /// A work request came back flushed before the connection's teardown
    /// began: the queue pair went to the error state for a reason no
    /// completion of ours shows (an error its responder hit serving the
    /// peer, a disconnect). The connection must be dropped. Called for
    /// each such completion.
    fn flushed(&self);

    /// A signalled Send completed; `reclaimed` Send buffers (it and those
    /// posted before it) are idle again.
    fn send_completed(&self, how: Completion, reclaimed: usize);

    /// The liveness probe ([`Conn::probe`]) completed.
    fn probe_done(&self, how: Completion);

    /// The connection is being torn down: its Receive buffers, unmapped,
    /// for the owner to keep or free.
    fn recv_buffers_freed(&self, bufs: impl Iterator<Item = KVec<u8>>);
}

/// A Send that was posted.
#[must_use = "the token says when the Send's pages are free again"]
pub(crate) struct Sent {
    /// The pages the Send maps in place.
    pub(crate) pages: PagesInFlight,
    /// It asked for a completion.
    pub(crate) signaled: bool,
    /// It carries DMA-mapped pages.
    pub(crate) mapped: bool,
}

/// A Send that failed: the error and the registration it did not post
/// (a [`Registration`] or a [`OneRegistration`]).
pub(crate) struct SendFailed<R = Registration> {
    /// Why.
    pub(crate) err: Error,
    /// The regions, still unposted: give them back.
    pub(crate) reg: R,
}

/// How an invalidation went.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Invalidation {
    /// Regions that needed a LOCAL_INV.
    pub(crate) local: usize,
    /// The LOCAL_INV could not be posted on a live connection: its queue
    /// pair is in the error state now, and the connection must be dropped.
    pub(crate) post_failed: bool,
}

impl Invalidation {
    /// Nothing posted: no region needed a LOCAL_INV.
    const NONE: Self = Invalidation { local: 0, post_failed: false };
}

/// The liveness probe's work request; see [`Conn::probe`].
///
/// # Invariants
///
/// Its one pointer, `wr.wr_cqe`, is null or the connection's own
/// `probe_cqe`, in the same pinned allocation.
struct ProbeWr(sys::ib_rdma_wr);

// SAFETY: its one pointer names the connection's own probe CQE, in the same
// pinned allocation (type invariant).
unsafe impl Send for ProbeWr {}

/// The ib_core objects [`ConnBox::create_qp`] makes, in the order they are
/// released.
///
/// # Invariants
///
/// `device` is the device the connection's id resolved to, which the id
/// holds (and keeps registered) for as long as these objects exist.
struct Objects {
    qp: Option<Qp>,
    send_cq: Cq,
    recv_cq: Cq,
    pd: Pd,
    lkey: u32,
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
    fn device(&self) -> &Device {
        // SAFETY: registered for as long as `self` exists (type invariant).
        unsafe { Device::from_raw(self.device.as_ptr()) }
    }
}

/// The Send buffers in the order Sends use them, and the owner's
/// [`SendPolicy`].
///
/// Sends take the buffers round the ring, one after the other, and post
/// them in that order: taking, filling and posting a buffer happen under
/// one hold of the ring's lock. So the ring's order is the queue pair's,
/// and a completion of the Send in buffer `i` proves every Send in the
/// buffers before `i`, back to the oldest still outstanding, done too.
/// No list of free buffers is kept: the next buffer is the one after the
/// last posted, and it is free unless every buffer is outstanding.
///
/// # Invariants
///
/// `bufs` is empty or `next < bufs.len()`, `outstanding <= bufs.len()`.
/// The `outstanding` buffers before `next` (round the ring) hold posted
/// Sends not yet reclaimed, the oldest first; every other buffer is idle:
/// its cell is idle, or away with the device done with it (its Send was
/// reclaimed; the cell is taken back when the buffer is used next). A
/// buffer's `mapped` is set while it is outstanding with pages mapped;
/// `mapped_outstanding` counts those. An idle buffer maps no page (its
/// `pages` is empty): a Send's pages are unmapped when it is reclaimed,
/// or at once if it is not posted. `room` plus the slots held
/// (`sent_wrs - reclaimed_wrs + reserved_wrs`, wrapping) is the budget the
/// ring was made with.
struct SendRing<P> {
    /// Per Send buffer.
    bufs: KVec<SendSlot>,
    /// The buffer the next Send uses.
    next: usize,
    /// Posted Sends not yet reclaimed: the buffers just before `next`.
    outstanding: usize,
    /// Outstanding Sends that mapped pages.
    mapped_outstanding: usize,
    /// Send queue slots taken by every Send posted so far (wrapping): a
    /// Send takes one for itself and one per REG_MR chained in front.
    sent_wrs: usize,
    /// `sent_wrs` as of the last Send reclaimed: the outstanding Sends hold
    /// `sent_wrs - reclaimed_wrs` slots. On the device, a work request's
    /// slot is free once a signalled completion of it or of a later one
    /// arrives; a Send is reclaimed only then, so this never counts too
    /// few. Kept as two running sums, a completion gives back the slots of
    /// every Send it reclaims at once.
    reclaimed_wrs: usize,
    /// Send queue slots held by [`SendRing::reserve`].
    reserved_wrs: usize,
    /// Send queue slots free: the budget (`QpSizes::send_wrs`, the most
    /// slots all of the above may hold) less those held, kept as it
    /// changes so that a post tests one value.
    room: usize,
    policy: P,
}

/// What the ring knows of one Send buffer.
#[derive(Clone, Copy, Default)]
struct SendSlot {
    /// Bumped each time the buffer is posted, so that a [`PagesInFlight`]
    /// cannot mistake a later Send in the same buffer for its own.
    seq: u64,
    /// `SendRing::sent_wrs` just after its last Send was posted.
    wrs_end: usize,
    /// Outstanding, with pages mapped: unmapped when reclaimed.
    mapped: bool,
}

impl<P> SendRing<P> {
    fn idle(policy: P) -> Self {
        Self::with(KVec::new(), 0, policy)
    }

    fn new(n: usize, budget: usize, policy: P) -> Result<Self> {
        Ok(Self::with(KVec::from_elem(SendSlot::default(), n, GFP_KERNEL)?, budget, policy))
    }

    /// A ring of `bufs`, none outstanding.
    fn with(bufs: KVec<SendSlot>, budget: usize, policy: P) -> Self {
        // INVARIANT: `next` is 0, nothing outstanding.
        SendRing {
            bufs,
            next: 0,
            outstanding: 0,
            mapped_outstanding: 0,
            sent_wrs: 0,
            reclaimed_wrs: 0,
            reserved_wrs: 0,
            room: budget,
            policy,
        }
    }

    /// The buffer after `i`, round the ring.
    #[inline(always)]
    fn after(&self, i: usize) -> usize {
        // `i` is an index, far below `usize::MAX`.
        let j = i.wrapping_add(1);
        if j >= self.bufs.len() {
            0
        } else {
            j
        }
    }

    /// The oldest outstanding Send's buffer (`next` if none is).
    #[inline(always)]
    fn oldest(&self) -> usize {
        match self.next.checked_sub(self.outstanding) {
            Some(i) => i,
            // Round the ring: `outstanding <= bufs.len()` and `next <
            // bufs.len()` (type invariant), so this neither wraps nor
            // exceeds the ring.
            None => self.next.wrapping_add(self.bufs.len()).wrapping_sub(self.outstanding),
        }
    }

    /// How far buffer `index` lies after the oldest outstanding one, if it
    /// holds an outstanding Send.
    #[inline(always)]
    fn outstanding_at(&self, index: usize) -> Option<usize> {
        let oldest = self.oldest();
        let d = match index.checked_sub(oldest) {
            Some(d) => d,
            // Round the ring; an `index` past the ring gives a `d` past
            // `outstanding`, whatever it wrapped to.
            None => index.wrapping_add(self.bufs.len()).wrapping_sub(oldest),
        };
        (d < self.outstanding).then_some(d)
    }

    /// The buffer for a Send with `need` send queue slots (its REG_MRs and
    /// itself), if one is idle and the send queue has room.
    #[inline(always)]
    fn next_idle(&self, need: usize) -> Option<usize> {
        if self.outstanding >= self.bufs.len() || need > self.room {
            return None;
        }
        Some(self.next)
    }

    /// Records the Send posted in buffer `index` (which [`Self::next_idle`]
    /// gave, under the same lock hold) with `need` send queue slots,
    /// `mapped` if it maps pages; returns its sequence number. Always
    /// inlined into the post.
    #[inline(always)]
    fn push_posted(&mut self, index: usize, need: usize, mapped: bool) -> u64 {
        self.next = self.after(index);
        // Neither count exceeds the ring's length: `next_idle` found a
        // buffer that was not outstanding.
        self.outstanding = self.outstanding.wrapping_add(1);
        self.sent_wrs = self.sent_wrs.wrapping_add(need);
        // `next_idle` found `need` slots free.
        self.room = self.room.wrapping_sub(need);
        self.mapped_outstanding = self.mapped_outstanding.wrapping_add(usize::from(mapped));
        let sent_wrs = self.sent_wrs;
        match self.bufs.get_mut(index) {
            Some(b) => {
                b.wrs_end = sent_wrs;
                b.mapped = mapped;
                b.seq = b.seq.wrapping_add(1);
                b.seq
            }
            None => 0,
        }
    }

    /// Takes `n` send queue slots for work requests of no Send buffer
    /// (an RDMA Read or Write), if there is room.
    fn reserve(&mut self, n: usize) -> bool {
        if n > self.room {
            return false;
        }
        // At most the budget now.
        self.reserved_wrs = self.reserved_wrs.wrapping_add(n);
        self.room = self.room.wrapping_sub(n);
        true
    }

    /// Gives back slots [`Self::reserve`] took, once their work requests
    /// completed.
    fn unreserve(&mut self, n: usize) {
        let n = n.min(self.reserved_wrs);
        self.reserved_wrs = self.reserved_wrs.wrapping_sub(n);
        // Back to where it was before they were reserved.
        self.room = self.room.wrapping_add(n);
    }

    /// True if buffer `index`'s Send of sequence `seq` is still
    /// outstanding.
    #[inline]
    fn still_posted(&self, index: usize, seq: u64) -> bool {
        self.bufs.get(index).is_some_and(|b| b.seq == seq) && self.outstanding_at(index).is_some()
    }
}

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
/// - Fields other than `events` and the locks are written only through
///   the [`ConnBox`] by `&mut`: before anything is posted, or after every
///   handler is done.
#[pin_data]
pub(crate) struct Conn<V: Events> {
    #[pin]
    events: V,
    id: Option<CmId>,
    objs: Option<Objects>,
    sends: KVec<Pin<KBox<DmaBuf>>>,
    recvs: KVec<Pin<KBox<DmaBuf>>>,
    mrs: KVec<AtomicPtr<FrMr>>,
    /// Regions made so far (the first `mrs_made` entries of `mrs`).
    mrs_made: AtomicUsize,
    /// Pages each region covers.
    mr_pages: u32,
    /// Held while regions are being made.
    #[pin]
    mr_grow: Mutex<()>,
    #[pin]
    ring: SpinLock<SendRing<V::Sends>>,
    /// Woken when a Send that mapped pages is reclaimed.
    #[pin]
    send_wait: CondVar,
    send_sges: usize,
    /// Serialises the LOCAL_INV completion flags with their waiters.
    #[pin]
    inv_lock: SpinLock<()>,
    /// Woken by every LOCAL_INV completion.
    #[pin]
    inv_wait: CondVar,
    generation: u64,
    /// Consumed Receives waiting to be reposted together.
    recv_pending: RecvPending,
    /// Set before draining: completions must not repost.
    dying: AtomicBool,
    /// The liveness probe's work request (a zero-length RDMA Write), away
    /// while posted: there is one at a time.
    probe: LeaseCell<ProbeWr>,
    /// Written once; ib_core reads it when the probe completes.
    probe_cqe: sys::ib_cqe,
}

/// The indices of consumed Receive buffers waiting to be reposted in one
/// chained post once `batch` have gathered: kept by the Receive CQ's
/// handler, with no lock.
///
/// # Invariants
///
/// `pending` is reached only through `&mut` of the connection (before its
/// CQs exist or after they are freed) and by [`recv_done`], which ib_core
/// runs for the connection's one Receive CQ one call at a time (the CQ's
/// work item); its `n` is at most its list's length.
struct RecvPending {
    pending: core::cell::UnsafeCell<Pending>,
    batch: usize,
}

struct Pending {
    list: KVec<usize>,
    n: usize,
}

// SAFETY: `pending` is reached by one thread at a time (type invariant).
unsafe impl Sync for RecvPending {}

impl RecvPending {
    const fn none() -> Self {
        RecvPending { pending: core::cell::UnsafeCell::new(Pending { list: KVec::new(), n: 0 }), batch: 1 }
    }

    /// Room for `n` indices, reposted `batch` at a time.
    fn new(n: usize, batch: usize) -> Result<Self> {
        let list = KVec::from_elem(0usize, n, GFP_KERNEL)?;
        Ok(RecvPending { pending: core::cell::UnsafeCell::new(Pending { list, n: 0 }), batch: batch.max(1) })
    }

    /// Adds `index`; true once a batch has gathered. With no room, which
    /// only a bug elsewhere causes (the list holds every Receive buffer,
    /// and a buffer is pending at most once), `index` is dropped and true
    /// returned: the caller posts those gathered.
    ///
    /// # Safety
    ///
    /// Called by the Receive CQ's handler (type invariant).
    #[inline]
    unsafe fn push(&self, index: usize) -> bool {
        // SAFETY: the handler alone reaches `pending`, one call at a time
        // (type invariant); no other reference to it is alive.
        let p = unsafe { &mut *self.pending.get() };
        match p.list.get_mut(p.n) {
            Some(slot) => {
                *slot = index;
                // Below the list's length: the entry exists.
                p.n = p.n.wrapping_add(1);
                p.n >= self.batch
            }
            None => true,
        }
    }

    /// Takes an index back.
    ///
    /// # Safety
    ///
    /// See [`RecvPending::push`].
    #[inline]
    unsafe fn pop(&self) -> Option<usize> {
        // SAFETY: see `push`.
        let p = unsafe { &mut *self.pending.get() };
        p.n = p.n.checked_sub(1)?;
        p.list.get(p.n).copied()
    }
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
    /// Allocates the connection without an id; `Drop` copes with that.
    fn alloc(events: impl PinInit<V>, generation: u64, idle: V::Sends) -> Result<Self> {
        let raw = RawPin::new(pin_init!(Conn {
            events <- events,
            id: None,
            objs: None,
            sends: KVec::new(),
            recvs: KVec::new(),
            mrs: KVec::new(),
            mrs_made: AtomicUsize::new(0),
            mr_pages: 0,
            mr_grow <- new_mutex!((), "rpcrdma_rs:mr_grow"),
            ring <- new_spinlock!(SendRing::idle(idle), "rpcrdma_rs:send_ring"),
            send_wait <- new_condvar!("rpcrdma_rs:send_wait"),
            send_sges: 1,
            inv_lock <- new_spinlock!((), "rpcrdma_rs:inv_lock"),
            inv_wait <- new_condvar!("rpcrdma_rs:inv_wait"),
            generation,
            recv_pending: RecvPending::none(),
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
    /// `generation` tells this connection's tokens from other
    /// connections'; `idle` is the Send policy until [`Self::create_qp`].
    pub(crate) fn new(net: &Net, events: impl PinInit<V>, generation: u64, idle: V::Sends) -> Result<Self> {
        let mut this = Self::alloc(events, generation, idle)?;
        // SAFETY: `events` outlives the id: `Drop` destroys the id (waiting
        // for running handlers) before freeing it.
        let id = unsafe { CmId::new(net, cm_handler::<V>, this.events_ctx()) }?;
        this.set_id(id);
        Ok(this)
    }

    /// Accepts a connection request (the passive side): makes the
    /// connection on the request's id, creates its queue pair and buffers
    /// as [`Self::create_qp`] does, and accepts with `param`. On failure the
    /// request is refused and rdma_cm destroys its id.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        req: Incoming<'_>,
        events: impl PinInit<V>,
        generation: u64,
        sizes: QpSizes,
        idle: V::Sends,
        policy: V::Sends,
        take_recv: impl FnMut(usize) -> Result<KVec<u8>>,
        param: &ConnParam<'_>,
    ) -> Result<Self> {
        let mut this = Self::alloc(events, generation, idle)?;
        // SAFETY: `req` is a request's new id inside its handler (type
        // invariant of `Incoming`); `events` outlives the id. On failure
        // below the id is forgotten, not destroyed: rdma_cm destroys it.
        let id = unsafe { CmId::adopt(req.id, cm_handler::<V>, this.events_ctx()) };
        this.set_id(id);
        let made = this.create_qp(sizes, policy, take_recv).and_then(|()| this.id()?.accept(param));
        if let Err(e) = made {
            // Release the queue pair and buffers while the id still exists,
            // then give the id back to rdma_cm.
            this.release_objects();
            // SAFETY: `&mut` ownership; the CM handler reaches only
            // `events`.
            core::mem::forget(unsafe { (*this.raw.as_ptr()).id.take() });
            return Err(e);
        }
        req.accepted.set(true);
        Ok(this)
    }

    /// Creates the PD, CQs, RC queue pair, buffers and the first `mrs`
    /// regions (room for `max_mrs`), and posts every Receive. Call once,
    /// after route resolution. `policy` takes
    /// over from the idle one; `take_recv(size)` provides each Receive
    /// buffer.
    pub(crate) fn create_qp(
        &mut self,
        sizes: QpSizes,
        policy: V::Sends,
        mut take_recv: impl FnMut(usize) -> Result<KVec<u8>>,
    ) -> Result {
        let raw = self.raw.as_ptr();
        // SAFETY: `&mut self`: no other reference made through the box is
        // alive, and no completion handler runs before the Receives are
        // posted at the end (the CQs do not even exist yet). The CM handler
        // reaches only `events`, which is not borrowed here.
        let (id, objs, sends, recvs, mrs, mr_pages, send_sges, recv_pending) = unsafe {
            (
                &(*raw).id,
                &mut (*raw).objs,
                &mut (*raw).sends,
                &mut (*raw).recvs,
                &mut (*raw).mrs,
                &mut (*raw).mr_pages,
                &mut (*raw).send_sges,
                &mut (*raw).recv_pending,
            )
        };
        let id = id.as_ref().ok_or(EINVAL)?;
        if objs.is_some() || sizes.send_bufs == 0 || sizes.recv_bufs == 0 {
            return Err(EINVAL);
        }
        let device = id.device().ok_or(EINVAL)?;
        // Room for one Send with every registration it may carry, at least.
        let budget = sizes.send_wrs.max(MAX_MRS + 1);
        let max_mrs = sizes.max_mrs.max(sizes.mrs);
        let send_wrs = u32::try_from(budget + max_mrs).map_err(|_| EINVAL)?;
        let recv_wrs = u32::try_from(sizes.recv_bufs).map_err(|_| EINVAL)?;
        let ctx = raw.cast::<c_void>();
        // SAFETY: the device stays registered while the id holds it, and
        // the id outlives the PD (`Drop` releases it last).
        let pd = unsafe { Pd::new(device) }?;
        // The send queue and CQ also take the liveness probe and the
        // drain's marker, one each beyond the Sends and registrations.
        // SAFETY: as above; `ctx` is this pinned value, which outlives the
        // CQs (`Drop` frees them first).
        let send_cq = unsafe { Cq::new(device, ctx, send_wrs + 2) }?;
        // SAFETY: as above.
        let recv_cq = unsafe { Cq::new(device, ctx, recv_wrs + 1) }?;
        let ssges = sizes.send_sges.clamp(1, MAX_SEND_SGES);
        let lkey = pd.local_dma_lkey();
        let caps = QpCaps { send_wrs: send_wrs + 2, recv_wrs: recv_wrs + 1, send_sges: ssges as u32 };
        // SAFETY: `Drop` destroys the queue pair before the CQs, the PD
        // and the id.
        let qp = unsafe { Qp::new(id, &pd, &send_cq, &recv_cq, caps) }?;
        // INVARIANT: from here on `objs` records what exists, so that `Drop`
        // releases exactly that, whatever step fails.
        // INVARIANT: the id holds `device` until it is destroyed, after
        // the objects.
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
        let room = sizes.max_mrs.max(sizes.mrs).min(usize::from(u16::MAX));
        mrs.reserve(room, GFP_KERNEL)?;
        for _ in 0..room {
            mrs.push(AtomicPtr::new(ptr::null_mut()), GFP_KERNEL)?;
        }
        *mr_pages = sizes.mr_pages;
        *recv_pending = RecvPending::new(sizes.recv_bufs, sizes.recv_batch)?;
        if self.add_mrs(sizes.mrs)?.len() < sizes.mrs {
            return Err(ENOMEM);
        }
        *self.ring.lock() = SendRing::new(sizes.send_bufs, budget, policy)?;
        let mut next = 0..sizes.recv_bufs;
        self.post_recvs(|| next.next())
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

    /// Region `index`, if it has been made.
    #[inline(always)]
    fn mr(&self, index: usize) -> Option<&FrMr> {
        let p = self.mrs.get(index)?.load(Ordering::Acquire);
        // SAFETY: a non-null entry is a live, pinned region that only
        // `release_objects` frees, through `&mut` (type invariant); the
        // `Acquire` pairs with the `Release` that published it.
        unsafe { p.as_ref() }
    }

    /// The connection's generation (numbering connections, for tokens
    /// that must not outlive theirs).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Regions made so far.
    pub(crate) fn mrs_made(&self) -> usize {
        self.mrs_made.load(Ordering::Relaxed)
    }

    /// Most regions the connection may have.
    pub(crate) fn max_mrs(&self) -> usize {
        self.mrs.len()
    }

    /// Makes up to `n` more regions, within the most given to
    /// [`ConnBox::create_qp`]; returns the indices of those made, which
    /// are idle (the caller's free list takes them). Fails only if none
    /// could be made. Sleeps (allocates with `GFP_KERNEL`): call from
    /// process context, holding no spinlock.
    pub(crate) fn add_mrs(&self, n: usize) -> Result<Range<usize>> {
        let _g = self.mr_grow.lock();
        let start = self.mrs_made.load(Ordering::Relaxed);
        let end = start.saturating_add(n).min(self.mrs.len());
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        let pd = self.objs.as_ref().map(|o| &o.pd).ok_or_else(errno::ENOTCONN)?;
        let device = self.id()?.device().ok_or(EINVAL)?;
        let mut made = start;
        while made < end {
            // SAFETY: `release_objects` frees regions after the queue pair
            // and before the PD and the id, and it cannot run while `&self`
            // is held; the functions take `FrMr` completions.
            let mr = match unsafe { FrMr::new(device, pd, self.mr_pages, made, reg_done::<V>, inv_done::<V>) } {
                Ok(mr) => mr,
                Err(e) if made == start => return Err(e),
                Err(_) => break,
            };
            // SAFETY: the region is never moved out of its box: the pointer
            // is put back into a pinned box when it is freed.
            let p = KBox::into_raw(unsafe { Pin::into_inner_unchecked(mr) });
            // INVARIANT: a region made on this connection's device and PD
            // goes into its own index, the first null one, with `mr_grow`
            // held.
            if let Some(slot) = self.mrs.get(made) {
                slot.store(p, Ordering::Release);
            }
            made += 1;
            self.mrs_made.store(made, Ordering::Relaxed);
        }
        Ok(start..made)
    }

    /// A completion came back flushed: our own teardown (`dying`) flushes
    /// everything and says nothing; any other flush is news to the owner.
    fn note_flushed(&self) {
        if !self.dying.load(Ordering::Acquire) {
            self.events.flushed();
        }
    }

    /// How a Receive, REG_MR or LOCAL_INV went: true if it succeeded; a
    /// failure goes to [`Events::work_failed`], a flush to
    /// [`Conn::note_flushed`].
    fn work_done(&self, how: Completion) -> bool {
        match how {
            Completion::Ok => return true,
            Completion::Flushed => self.note_flushed(),
            Completion::Failed(status) => self.events.work_failed(status),
        }
        false
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

    /// The resolved device's name, for messages.
    pub(crate) fn device_name(&self) -> Option<&kernel::str::CStr> {
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

    fn qp(&self) -> Result<&Qp> {
        self.objs.as_ref().and_then(|o| o.qp.as_ref()).ok_or_else(errno::ENOTCONN)
    }

    /// Posts the idle Receive buffers `next` names, in one chained post.
    /// A buffer that is not idle is skipped.
    #[inline(always)]
    pub(crate) fn post_recvs(&self, mut next: impl FnMut() -> Option<usize>) -> Result {
        let qp = self.qp()?;
        let mut chain: *mut sys::ib_recv_wr = ptr::null_mut();
        while let Some(i) = next() {
            let Some(mut b) = self.recvs.get(i).and_then(|b| b.cell.lease()) else { continue };
            b.recv_wr.next = chain;
            chain = &raw mut b.recv_wr;
            b.hand_off();
        }
        if chain.is_null() {
            return Ok(());
        }
        // SAFETY: every WR in the chain describes a mapped buffer the
        // connection owns (it outlives the queue pair), handed off to the
        // device.
        unsafe { qp.post_recv(chain) }
    }

    /// Sends one message: `fill` builds it, copying bytes into a pre-mapped
    /// buffer and mapping pages in place ([`SendWriter`]). The registrations
    /// in `reg` are posted in front of the Send; the returned token owns
    /// them until they are invalidated. Fails with `ENOBUFS` when every
    /// Send buffer is outstanding (or the send queue has no room); on
    /// failure nothing was posted and the registration comes back.
    ///
    /// `fill` runs under the spinlock that orders Sends: it must not sleep.
    #[inline]
    pub(crate) fn send(
        &self,
        reg: Registration,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> core::result::Result<(PostedRegistration, Sent), SendFailed> {
        match self.post_send(Some((reg.0.generation, reg.0.held())), None, fill) {
            // INVARIANT: the regions' REG_MRs went out with the Send.
            Ok(sent) => Ok((PostedRegistration(reg.0), sent)),
            Err(err) => Err(SendFailed { err, reg }),
        }
    }

    /// [`Conn::send`] with the one region of `reg` posted in front of the
    /// Send.
    #[inline]
    pub(crate) fn send_one(
        &self,
        reg: OneRegistration,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> core::result::Result<(PostedRegistration, Sent), SendFailed<OneRegistration>> {
        match self.post_send(Some((reg.generation, core::slice::from_ref(&reg.index))), None, fill) {
            // INVARIANT: the region's REG_MR went out with the Send.
            Ok(sent) => Ok((PostedRegistration(Registration::from(reg).0), sent)),
            Err(err) => Err(SendFailed { err, reg }),
        }
    }

    /// Sends a message that advertises no memory regions; see
    /// [`Conn::send`].
    #[inline]
    pub(crate) fn send_unregistered(&self, fill: impl FnOnce(&mut SendWriter<'_>) -> Result) -> Result<Sent> {
        self.post_send(None, None, fill)
    }

    /// Sends a message with Send With Invalidate: the peer's HCA
    /// invalidates `rkey` (one of the peer's regions) before the peer sees
    /// the message. A responder's answer to a requester that allows it
    /// (RFC 8797).
    pub(crate) fn send_invalidating(
        &self,
        rkey: u32,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> Result<Sent> {
        self.post_send(None, Some(rkey), fill)
    }

    /// Posts a Send, behind the REG_MRs of the regions `reg` names if
    /// given (the generation of their connection, and their indices; a
    /// message without regions passes none, and the chaining is left out
    /// of its code). Inlined into each caller, whose fill is its own.
    #[inline(always)]
    fn post_send(
        &self,
        reg: Option<(u64, &[u16])>,
        invalidate: Option<u32>,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> Result<Sent> {
        let objs = self.objs.as_ref().ok_or_else(errno::ENOTCONN)?;
        let qp = objs.qp.as_ref().ok_or_else(errno::ENOTCONN)?;
        let device = objs.device();
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        // At most `MAX_MRS` registrations, and the Send.
        let need = match reg {
            Some((generation, held)) if !held.is_empty() && generation != self.generation => return Err(EINVAL),
            Some((_, held)) => held.len().wrapping_add(1),
            None => 1,
        };
        // Taking the next buffer, filling it and posting it happen under
        // one hold of the lock, so the ring has the queue pair's order (see
        // `SendRing`). A Send that is not posted leaves the ring as it was.
        let mut r = self.ring.lock();
        let index = r.next_idle(need).ok_or_else(errno::ENOBUFS)?;
        let Some((buf, mut b)) = self.sends.get(index).and_then(|buf| {
            // SAFETY: not outstanding, so idle (type invariant of
            // `SendRing`): any Send it carried was reclaimed, by a
            // completion of it or of a later Send, and the device is done
            // with it.
            Some((&**buf, unsafe { buf.cell.lease_done() }?))
        }) else {
            return Err(EINVAL);
        };
        let mapped = match self.fill_send(buf, &mut b, device, objs.lkey, invalidate, fill) {
            Ok(mapped) => mapped,
            Err(e) => {
                buf.unmap_unposted(&mut b.pages);
                return Err(e);
            }
        };
        let send_wr = &raw mut b.send_wr;
        let Some(head) = reg.map_or(Some(send_wr), |(_, held)| self.chain_registrations(held, send_wr)) else {
            buf.unmap_unposted(&mut b.pages);
            return Err(EINVAL);
        };
        // `next_idle` found a buffer idle: `outstanding < bufs.len()`.
        let idle_after = r.bufs.len().wrapping_sub(r.outstanding).wrapping_sub(1);
        let signaled = r.policy.signal(mapped, idle_after);
        b.send_wr.send_flags = if signaled { sys::ib_send_flags_IB_SEND_SIGNALED as c_int } else { 0 };
        b.hand_off();
        // SAFETY: every WR in the chain points at memory the connection
        // owns (buffers, regions; they outlive the queue pair) or at mapped
        // pages the caller keeps until the token below is waited for; the
        // buffer and regions are handed off.
        if let Err(e) = unsafe { qp.post_send(head) } {
            // SAFETY: the post failed: the Send never reached the device.
            if let Some(mut b) = unsafe { buf.cell.take_back() } {
                buf.unmap_unposted(&mut b.pages);
            }
            return Err(e);
        }
        let seq = r.push_posted(index, need, mapped);
        drop(r);
        let pages =
            if mapped { PagesInFlight { generation: self.generation, index, seq } } else { PagesInFlight::none() };
        Ok(Sent { pages, signaled, mapped })
    }

    /// Builds a Send in `b` (the buffer `buf`, leased): `fill` writes the
    /// message, then the work request gets its SGEs and opcode. Returns
    /// whether the message maps pages.
    #[inline(always)]
    fn fill_send(
        &self,
        buf: &DmaBuf,
        b: &mut BufState,
        device: &Device,
        lkey: u32,
        invalidate: Option<u32>,
        fill: impl FnOnce(&mut SendWriter<'_>) -> Result,
    ) -> Result<bool> {
        let BufState { data, sge, pages, send_wr, .. } = b;
        let mut w = SendWriter {
            data: data.as_mut_slice(),
            used: 0,
            sges: sge,
            n: 0,
            max_sge: self.send_sges,
            last_copied: false,
            pages,
            mapped: false,
            device,
            dma: buf.dma,
            lkey,
        };
        let filled = fill(&mut w);
        // The buffer was idle, so it mapped no page before (type invariant
        // of `SendRing`): whether the Send maps pages is whether `fill`
        // mapped some, which the compiler knows of a fill that never
        // calls `map_page`.
        let (used, nsge, mapped) = (w.used, w.n, w.mapped);
        filled?;
        if nsge == 0 {
            return Err(EINVAL);
        }
        buf.sync_for_device(used);
        send_wr.num_sge = nsge as c_int;
        match invalidate {
            None => send_wr.opcode = sys::ib_wr_opcode_IB_WR_SEND,
            Some(rkey) => {
                send_wr.opcode = sys::ib_wr_opcode_IB_WR_SEND_WITH_INV;
                send_wr.ex.invalidate_rkey = rkey;
            }
        }
        Ok(mapped)
    }

    /// Chains the REG_MRs of the regions `held` (a registration token's,
    /// of this connection) in front of `send`: one post, and the queue
    /// pair's ordering makes the regions valid before the peer sees the
    /// message. `None` if the token names a region it does not hold (then
    /// every region stays the token's).
    #[inline(always)]
    fn chain_registrations(&self, held: &[u16], send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr> {
        let mut head = send;
        for &i in held.iter().rev() {
            // SAFETY: the region belongs to the token (type invariant of
            // `Registration` and `OneRegistration`) and holds nothing the
            // device reads: its work request is copied when posted.
            let mut m = self.mr(usize::from(i)).and_then(|mr| unsafe { mr.cell.take_back() })?;
            m.reg_wr.wr.next = head;
            head = &raw mut m.reg_wr.wr;
            m.hand_off();
        }
        Some(head)
    }

    /// Gives back `index` and every Send posted before it: a completion of
    /// it proves them all done. Returns how many.
    #[inline(always)]
    fn reclaim_sends(&self, index: usize) -> usize {
        let mut r = self.ring.lock();
        // Already reclaimed by a later signalled completion, if not
        // outstanding (a flushed unsignalled Send reports itself too).
        let Some(before) = r.outstanding_at(index) else { return 0 };
        // `before < outstanding <= bufs.len()`: neither this nor the
        // counts taken back below can wrap.
        let n = before.wrapping_add(1);
        // Only Sends that mapped pages have anything to give back here; the
        // others' buffers are taken back when they are used next.
        let mut mapped = false;
        if r.mapped_outstanding > 0 {
            let mut i = r.oldest();
            for _ in 0..n {
                if let Some(s) = r.bufs.get_mut(i).filter(|s| s.mapped) {
                    s.mapped = false;
                    r.mapped_outstanding = r.mapped_outstanding.wrapping_sub(1);
                    if let Some(buf) = self.sends.get(i) {
                        // SAFETY: a completion of `index` proves every Send
                        // posted before it done too (the queue pair
                        // completes in order, and the ring has its order).
                        if let Some(mut b) = unsafe { buf.cell.take_back() } {
                            mapped |= buf.unmap_pages(&mut b.pages);
                        }
                    }
                }
                i = r.after(i);
            }
        }
        // The slots of every Send through `index`'s come back at once.
        let reclaimed = r.bufs.get(index).map_or(r.sent_wrs, |b| b.wrs_end);
        // At most what the outstanding Sends held: the room stays within
        // the budget.
        r.room = r.room.wrapping_add(reclaimed.wrapping_sub(r.reclaimed_wrs));
        r.reclaimed_wrs = reclaimed;
        // INVARIANT: the `n` oldest outstanding buffers are idle again.
        r.outstanding = r.outstanding.wrapping_sub(n);
        drop(r);
        if mapped {
            self.send_wait.notify_all();
        }
        n
    }

    /// Waits until the Send of `sent` no longer reads the caller's pages,
    /// and empties the token. Sleeps; the wait is bounded by the queue
    /// pair's retry limit (a dead connection flushes every Send).
    #[inline]
    pub(crate) fn wait_sent(&self, t: PagesInFlight) -> SendDone {
        if t.is_none() || t.generation != self.generation {
            return SendDone(());
        }
        let mut r = self.ring.lock();
        while r.still_posted(t.index, t.seq) {
            self.send_wait.wait(&mut r);
        }
        SendDone(())
    }

    /// True if what `reg` and `sent` hold (if anything) was registered or
    /// sent on this connection.
    pub(crate) fn owns(&self, reg: &PostedRegistration, sent: &PagesInFlight) -> bool {
        let g = self.generation;
        (reg.is_empty() || reg.0.generation == g) && (sent.is_none() || sent.generation == g)
    }

    /// Registers memory region `index` (which the caller's free list says
    /// is idle) for `reg`: `fill` describes its pages (at most the region's
    /// depth), `to_device` is true when the peer reads the memory (a Read
    /// chunk) and false when it writes it. The REG_MR work request is
    /// posted in front of the next [`Conn::send`] with `reg`. On failure
    /// the region is idle again.
    pub(crate) fn register(
        &self,
        reg: &mut Registration,
        index: usize,
        to_device: bool,
        xid: u32,
        fill: impl FnOnce(&mut SgWriter<'_>) -> Result,
    ) -> Result<Registered> {
        let held = &mut reg.0;
        let at = held.n;
        if at >= MAX_MRS || (at > 0 && held.generation != self.generation) {
            return Err(EINVAL);
        }
        let (seg, one) = self.register_one(index, to_device, xid, fill)?;
        // INVARIANT: the region now belongs to `reg`, until invalidated or
        // released; `at` is below `MAX_MRS`, and a token's regions share
        // one connection, both checked above.
        held.generation = one.generation;
        held.mrs[at] = one.index;
        held.n = at.wrapping_add(1);
        Ok(seg)
    }

    /// [`Conn::register`] for a call that registers one region: returns
    /// the token that holds it, which [`Conn::send_one`] posts.
    #[inline(always)]
    pub(crate) fn register_one(
        &self,
        index: usize,
        to_device: bool,
        xid: u32,
        fill: impl FnOnce(&mut SgWriter<'_>) -> Result,
    ) -> Result<(Registered, OneRegistration)> {
        if self.objs.is_none() {
            return Err(errno::ENOTCONN());
        }
        let mr = self.mr(index).ok_or(EINVAL)?;
        let mut m = mr.cell.lease().ok_or(EINVAL)?;
        // The table was initialised when the region was made; `push` sets
        // only the entries this registration uses.
        let mut w = SgWriter { sg: m.sg.as_mut_slice(), n: 0 };
        fill(&mut w)?;
        let n = w.n;
        let seg = mr.map(&mut m, n, to_device, xid)?;
        trace::mr_map(xid, mr.index.into(), n as i32, seg.handle, seg.length, seg.offset, u32::from(!to_device));
        // INVARIANT: the region now belongs to the token, until
        // invalidated or released.
        m.hand_off();
        Ok((seg, OneRegistration { generation: self.generation, index: mr.index }))
    }

    /// Takes back region `i` from the token that held it.
    fn take_back_mr(&self, i: u16) -> Option<(&FrMr, Lease<'_, MrState>)> {
        let mr = self.mr(usize::from(i))?;
        // SAFETY: the state of a region holds nothing the device reads (its
        // work requests are copied when posted, its scatterlist when
        // mapped); the caller consumed the token that held it.
        let m = unsafe { mr.cell.take_back() }?;
        Some((mr, m))
    }

    /// Gives back the regions of a token whose REG_MR requests were never
    /// posted (the call was not sent); `freed` gets each region's index.
    pub(crate) fn release_unposted(&self, reg: Registration, mut freed: impl FnMut(usize)) -> Invalidated {
        let held = reg.0;
        if held.generation != self.generation {
            return Invalidated(());
        }
        for &i in held.held() {
            if let Some((mr, mut m)) = self.take_back_mr(i) {
                mr.unmap(&mut m);
                drop(m);
                freed(usize::from(i));
            }
        }
        Invalidated(())
    }

    /// Invalidates the regions of `reg` and takes them back; the region
    /// whose rkey the peer already invalidated (Send With Invalidate) is
    /// skipped. Sleeps until the LOCAL_INV work requests complete. `reuse`
    /// gets the index of each region that may be registered again (not one
    /// whose invalidation failed: it keeps a live rkey until the
    /// connection is torn down). `fail` is asked just before a LOCAL_INV
    /// is posted: true makes the post fail as if the device had refused it
    /// (a test hook). A token from an earlier
    /// connection holds nothing and is simply emptied.
    ///
    /// The usual case (one region, which the peer's Send With Invalidate
    /// already invalidated: a read's Write chunk or a write's Read chunk;
    /// nothing to post or wait for) is [`Conn::invalidated_remotely`]'s,
    /// inlined into the caller; the rest is [`Conn::invalidate_posting`].
    #[inline(always)]
    pub(crate) fn invalidate(
        &self,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
        fail: impl FnOnce() -> bool,
        mut reuse: impl FnMut(usize),
    ) -> (Invalidated, Invalidation) {
        // Most calls registered nothing: that is told before anything else.
        match reg.split() {
            Holding::Nothing(inv) => (inv, Invalidation::NONE),
            Holding::One(one) => match self.invalidated_remotely(one, remotely_invalidated) {
                Ok((inv, idle)) => {
                    if let Some(i) = idle {
                        reuse(i);
                    }
                    (inv, Invalidation::NONE)
                }
                Err(one) => self.invalidate_posting(one.into(), remotely_invalidated, fail, reuse),
            },
            Holding::Many(reg) if reg.0.generation != self.generation => (Invalidated(()), Invalidation::NONE),
            Holding::Many(reg) => self.invalidate_posting(reg, remotely_invalidated, fail, reuse),
        }
    }

    /// The usual case of [`Conn::invalidate`], for a token's one region
    /// ([`PostedRegistration::split`]): the peer's Send With Invalidate
    /// of `remotely_invalidated` already invalidated it, and it is taken
    /// back, with nothing to post or wait for. Returns the proof and the
    /// region's index, idle again, for the caller to reuse (none for a
    /// token of an earlier connection, which holds nothing). Any other
    /// case hands the token back, for [`Conn::invalidate`].
    #[inline(always)]
    pub(crate) fn invalidated_remotely(
        &self,
        reg: OnePostedRegistration,
        remotely_invalidated: Option<u32>,
    ) -> core::result::Result<(Invalidated, Option<usize>), OnePostedRegistration> {
        if reg.generation != self.generation {
            return Ok((Invalidated(()), None));
        }
        let Some(remote) = remotely_invalidated else { return Err(reg) };
        let i = reg.index;
        let Some((mr, mut m)) = self.take_back_mr(i) else { return Err(reg) };
        if FrMr::rkey(&m) != remote {
            // Not the one: the loops of `invalidate_posting` take it back
            // again.
            m.hand_off();
            return Err(reg);
        }
        trace::mr_reminv(i.into(), remote);
        mr.unmap(&mut m);
        drop(m);
        Ok((Invalidated(()), Some(usize::from(i))))
    }

    /// [`Conn::invalidate`] of a token that holds regions of this
    /// connection, other than the one region the peer already
    /// invalidated: a LOCAL_INV for each region the peer did not
    /// invalidate, posted and waited for.
    #[inline(never)]
    fn invalidate_posting(
        &self,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
        fail: impl FnOnce() -> bool,
        mut reuse: impl FnMut(usize),
    ) -> (Invalidated, Invalidation) {
        let held = reg.0;
        let Ok(qp) = self.qp() else { return (Invalidated(()), Invalidation::NONE) };
        let mut chain: *mut sys::ib_send_wr = ptr::null_mut();
        let mut last: Option<&FrMr> = None;
        let mut local: usize = 0;
        let mut remote_seen = false;
        for &i in held.held().iter().rev() {
            let Some((mr, mut m)) = self.take_back_mr(i) else { continue };
            let rkey = FrMr::rkey(&m);
            if !remote_seen && remotely_invalidated == Some(rkey) {
                remote_seen = true;
                trace::mr_reminv(i.into(), rkey);
                m.hand_off();
                continue;
            }
            trace::mr_localinv(i.into(), rkey);
            mr.inv_done.store(false, Ordering::Relaxed);
            let wr = &mut m.inv_wr;
            wr.next = chain;
            wr.ex.invalidate_rkey = rkey;
            // Only the last LOCAL_INV is signalled: the queue pair
            // completes work requests in order.
            wr.send_flags = if last.is_none() { sys::ib_send_flags_IB_SEND_SIGNALED } else { 0 };
            chain = wr;
            m.hand_off();
            if last.is_none() {
                last = Some(mr);
            }
            // One per region `reg` holds: at most `MAX_MRS`.
            local = local.wrapping_add(1);
        }
        let mut broken = false;
        let mut post_failed = false;
        if let Some(last) = last {
            let dying = self.dying.load(Ordering::Acquire);
            let posted = if dying || fail() {
                Err(EIO)
            } else {
                // SAFETY: the chain's WRs belong to our regions, handed off;
                // the regions outlive the queue pair.
                unsafe { qp.post_send(chain) }
            };
            if posted.is_err() {
                broken = true;
                // The regions keep live rkeys. Before the caller may give
                // their pages back, the queue pair goes to the error state,
                // so that no RDMA operation of the peer reaches them (RFC
                // 8166 section 4.5.4): rdma_disconnect does that
                // synchronously. A dying connection's teardown does the
                // same.
                self.disconnect();
                post_failed = !dying;
            } else {
                let mut g = self.inv_lock.lock();
                while !last.inv_done.load(Ordering::Acquire) {
                    self.inv_wait.wait(&mut g);
                }
                drop(g);
                broken = !last.inv_ok.load(Ordering::Acquire);
            }
        }
        for &i in held.held() {
            let Some((mr, mut m)) = self.take_back_mr(i) else { continue };
            mr.unmap(&mut m);
            drop(m);
            if !broken {
                reuse(usize::from(i));
            }
        }
        (Invalidated(()), Invalidation { local, post_failed })
    }

    /// Takes back a held Receive's buffer (`None` if `h` is another
    /// connection's).
    fn take_held(&self, h: &HeldRecv) -> Option<(&DmaBuf, Lease<'_, BufState>)> {
        if h.generation != self.generation {
            return None;
        }
        let buf = self.recvs.get(h.index)?;
        // SAFETY: the buffer was handed to `h` when its Receive completed
        // and has not been posted since (type invariant of `HeldRecv`); `h`
        // is its only token, borrowed here.
        let b = unsafe { buf.cell.take_back() }?;
        Some((buf, b))
    }

    /// Calls `f` with the bytes of a held Receive.
    pub(crate) fn with_held<R>(&self, h: &HeldRecv, f: impl FnOnce(&[u8]) -> R) -> Option<R> {
        let (_, b) = self.take_held(h)?;
        let r = f(b.data.get(..h.len).unwrap_or(&[]));
        // Back to the token.
        b.hand_off();
        Some(r)
    }

    /// Gives a held Receive back: it is reposted at once (the batch of
    /// consumed ones belongs to the Receive CQ's handler).
    pub(crate) fn release_held(&self, h: HeldRecv) {
        let Some((buf, b)) = self.take_held(&h) else { return };
        drop(b);
        let mut one = Some(buf.index);
        if !self.dying.load(Ordering::Acquire) && self.post_recvs(|| one.take()).is_err() {
            self.events.work_failed(u32::MAX);
        }
    }

    /// Moves data between local `pages` (page, offset, length) and the
    /// peer's registered segment (`remote_addr`, `rkey`) by RDMA Write or
    /// Read, with the kernel's R/W API; sleeps until it completes. Fails
    /// with `EIO` if the device reports an error.
    pub(crate) fn rdma_rw(&self, dir: RwDir, pages: &[(PageRef<'_>, u32, u32)], remote_addr: u64, rkey: u32) -> Result {
        let qp = self.qp()?;
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        let port = self.id()?.port_num();
        let mut op = RwOp::new(dir, pages, rw_done::<V>)?;
        let n = op.sg.len() as u32;
        let dma_dir = op.dma_dir();
        // SAFETY: nothing is moved out of the pinned box.
        let op_mut = unsafe { op.as_mut().get_unchecked_mut() };
        let (ctx, sg) = (op_mut.ctx.get(), op_mut.sg.as_mut_ptr());
        // SAFETY: `ctx` is this operation's (uninitialised) context; the
        // scatterlist holds `n` live pages (borrowed by the caller until
        // this returns); the QP is live. The call DMA-maps the pages.
        let ret = unsafe { sys::rdma_rw_ctx_init(ctx, qp.as_ptr(), port, sg, n, 0, remote_addr, rkey, dma_dir) };
        if ret < 0 {
            return Err(Error::from_errno(ret));
        }
        let cqe = ptr::from_ref(&op.cqe).cast_mut();
        // Its work requests take `ret` send queue slots until it completes
        // (the last one is signalled).
        let slots = ret as usize;
        let reserved = self.ring.lock().reserve(slots);
        let posted = if reserved {
            // SAFETY: the context was initialised above; the CQE is in the
            // pinned op, which lives until its completion was seen below.
            unsafe { sys::rdma_rw_ctx_post(ctx, qp.as_ptr(), port, cqe, ptr::null_mut()) }
        } else {
            -(sys::ENOBUFS as c_int)
        };
        if posted == 0 {
            let mut g = self.inv_lock.lock();
            while !op.done.load(Ordering::Acquire) {
                self.inv_wait.wait(&mut g);
            }
        }
        if reserved {
            self.ring.lock().unreserve(slots);
        }
        // SAFETY: initialised above; its work requests completed (or were
        // never posted). This unmaps the pages.
        unsafe { sys::rdma_rw_ctx_destroy(ctx, qp.as_ptr(), port, sg, n, dma_dir) };
        if posted != 0 {
            return Err(Error::from_errno(posted));
        }
        match op.status.load(Ordering::Relaxed) {
            sys::ib_wc_status_IB_WC_SUCCESS => Ok(()),
            _ => Err(EIO),
        }
    }

    /// Probes the peer: posts a signalled zero-length RDMA Write. It names
    /// no memory and touches none on either side (a zero-length RDMA
    /// operation carries no valid R_Key, IBTA C9-88) and the peer's upper
    /// layer never sees it, but the peer's queue pair must acknowledge it:
    /// if the peer is gone, the device's retries run out and
    /// [`Events::probe_done`] gets the failure. One probe at a time:
    /// `Ok(false)` if the last one has not completed yet.
    pub(crate) fn probe(&self) -> Result<bool> {
        let qp = self.qp()?;
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        // Away while posted: one probe at a time.
        let Some(mut w) = self.probe.lease() else { return Ok(false) };
        w.0 = sys::ib_rdma_wr::default();
        w.0.wr.opcode = sys::ib_wr_opcode_IB_WR_RDMA_WRITE;
        w.0.wr.__bindgen_anon_1.wr_cqe = ptr::from_ref(&self.probe_cqe).cast_mut();
        w.0.wr.send_flags = sys::ib_send_flags_IB_SEND_SIGNALED as c_int;
        let wr = &raw mut w.0.wr;
        w.hand_off();
        // SAFETY: the WR and its CQE are in this pinned value, which
        // outlives the queue pair; the send queue has a slot set aside for
        // the probe (`create_qp`). ib_core only reads the CQE.
        if let Err(e) = unsafe { qp.post_send(wr) } {
            // SAFETY: the post failed: the device never saw the WR.
            drop(unsafe { self.probe.take_back() });
            return Err(e);
        }
        Ok(true)
    }
}

impl<V: Events> ConnBox<V> {
    /// Drains and releases the queue pair, CQs, buffers, regions and PD,
    /// in that order; the id stays.
    fn release_objects(&mut self) {
        let raw = self.raw.as_ptr();
        // First the queue pair is drained, while completion handlers may
        // still run: they see the connection as it was, so a Send reclaimed
        // by the drain unmaps its pages and wakes the caller waiting for
        // them. That caller may be a Receive's handler, which the drain of
        // the Receive queue waits for.
        {
            let conn: &Conn<V> = self;
            conn.dying.store(true, Ordering::Release);
            if let Some(qp) = conn.objs.as_ref().and_then(|o| o.qp.as_ref()) {
                conn.disconnect();
                qp.drain();
            }
        }
        let (objs, sends, recvs, mrs) = {
            // SAFETY: after the drain no completion handler runs (every
            // posted WR completed and its handler ran), and the CM handler
            // reaches only `events`: the other fields are ours alone (type
            // invariant).
            unsafe { (&mut (*raw).objs, &mut (*raw).sends, &mut (*raw).recvs, &mut (*raw).mrs) }
        };
        let Some(Objects { qp, send_cq, recv_cq, pd, .. }) = objs.take() else { return };
        // Each object goes once, after those that used it.
        drop(qp);
        drop(send_cq);
        drop(recv_cq);
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
    }
}

/// Recovers the connection and buffer of a completion.
///
/// # Safety
///
/// `cq` must be one of a live `Conn<V>`'s CQs and `wc` a completion whose
/// `wr_cqe` is the CQE of one of its buffers.
unsafe fn completion<'a, V: Events>(
    cq: *mut sys::ib_cq,
    wc: *mut sys::ib_wc,
) -> (&'a Conn<V>, &'a DmaBuf, &'a sys::ib_wc) {
    // SAFETY: per the contract, `cq_context` is the `Conn<V>` and `wr_cqe`
    // is the `cqe` field of a `DmaBuf` it owns; both outlive this completion.
    unsafe {
        let conn = &*(*cq).cq_context.cast::<Conn<V>>();
        let wc = &*wc;
        let cqe = wc.__bindgen_anon_1.wr_cqe;
        let buf = &*cqe.cast::<u8>().sub(core::mem::offset_of!(DmaBuf, cqe)).cast::<DmaBuf>();
        (conn, buf, wc)
    }
}

/// Receive completion handler.
///
/// # Safety
///
/// Called by ib_core for a Receive posted by a [`Conn<V>`].
unsafe extern "C" fn recv_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, buf, wc) = unsafe { completion::<V>(cq, wc) };
    trace::wc_receive(buf.index as u32, wc.status, wc.vendor_err, wc.byte_len);
    if !conn.work_done(Completion::of(wc)) {
        return;
    }
    // SAFETY: the Receive completed: the HCA is done writing the buffer.
    let Some(b) = (unsafe { buf.cell.take_back() }) else { return };
    let len = (wc.byte_len as usize).min(b.data.len());
    // The HCA wrote `len` bytes into this buffer, which is ours (leased)
    // until it is reposted.
    buf.sync_for_cpu(len);
    let invalidated_rkey = if wc.wc_flags & sys::ib_wc_flags_IB_WC_WITH_INVALIDATE as c_int != 0 {
        // SAFETY: `ex` holds the invalidated rkey when the flag is set.
        Some(unsafe { wc.ex.invalidate_rkey })
    } else {
        None
    };
    let hold = Cell::new(false);
    let msg = Received {
        data: b.data.get(..len).unwrap_or(&[]),
        invalidated_rkey,
        hold: &hold,
        index: buf.index,
        generation: conn.generation,
    };
    conn.events.received(conn, msg);
    if hold.get() {
        // The `HeldRecv` made by `hold` owns it now.
        b.hand_off();
        return;
    }
    drop(b);
    if conn.dying.load(Ordering::Acquire) {
        return;
    }
    // SAFETY: this is the Receive CQ's handler.
    if unsafe { conn.recv_pending.push(buf.index) } {
        // SAFETY: as above; `post_recvs` does not reach the list otherwise.
        if conn.post_recvs(|| unsafe { conn.recv_pending.pop() }).is_err() {
            conn.events.work_failed(u32::MAX);
        }
    }
}

/// Send completion handler.
///
/// # Safety
///
/// Called by ib_core for a Send posted by a [`Conn<V>`].
unsafe extern "C" fn send_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, buf, wc) = unsafe { completion::<V>(cq, wc) };
    trace::wc_send(buf.index as u32, wc.status, wc.vendor_err, 0);
    let n = conn.reclaim_sends(buf.index);
    let how = Completion::of(wc);
    if how == Completion::Flushed {
        conn.note_flushed();
    }
    conn.events.send_completed(how, n);
}

/// Liveness probe completion.
///
/// # Safety
///
/// Called by ib_core for the probe posted by [`Conn::probe`] of a live
/// `Conn<V>`, whose send CQ `cq` is.
unsafe extern "C" fn probe_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the contract, `cq_context` is the `Conn<V>`, which
    // outlives its CQs, and `wc` is valid for the call.
    let (conn, wc) = unsafe { (&*(*cq).cq_context.cast::<Conn<V>>(), &*wc) };
    let how = Completion::of(wc);
    // SAFETY: the probe completed: the WR is no longer posted, and the next
    // probe may reuse it.
    drop(unsafe { conn.probe.take_back() });
    if how == Completion::Flushed {
        conn.note_flushed();
    }
    conn.events.probe_done(how);
}

/// Recovers the connection and memory region of a REG_MR or LOCAL_INV
/// completion.
///
/// # Safety
///
/// As for [`completion`], with `wr_cqe` the CQE at `offset` in a `FrMr`.
unsafe fn mr_completion<'a, V: Events>(
    cq: *mut sys::ib_cq,
    wc: *mut sys::ib_wc,
    offset: usize,
) -> (&'a Conn<V>, &'a FrMr, &'a sys::ib_wc) {
    // SAFETY: per the contract.
    unsafe {
        let conn = &*(*cq).cq_context.cast::<Conn<V>>();
        let wc = &*wc;
        let mr = &*wc.__bindgen_anon_1.wr_cqe.cast::<u8>().sub(offset).cast::<FrMr>();
        (conn, mr, wc)
    }
}

/// REG_MR completion: reported only when it failed or was flushed.
///
/// # Safety
///
/// Called by ib_core for a REG_MR posted by a [`Conn<V>`].
unsafe extern "C" fn reg_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, _mr, wc) = unsafe { mr_completion::<V>(cq, wc, core::mem::offset_of!(FrMr, reg_cqe)) };
    conn.work_done(Completion::of(wc));
}

/// LOCAL_INV completion: wakes the invalidating thread.
///
/// # Safety
///
/// Called by ib_core for a LOCAL_INV posted by a [`Conn<V>`].
unsafe extern "C" fn inv_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, mr, wc) = unsafe { mr_completion::<V>(cq, wc, core::mem::offset_of!(FrMr, inv_cqe)) };
    let how = Completion::of(wc);
    let g = conn.inv_lock.lock();
    note_invalidated(mr, how == Completion::Ok);
    drop(g);
    conn.inv_wait.notify_all();
    conn.work_done(how);
}

/// R/W completion: wakes the thread in [`Conn::rdma_rw`].
///
/// # Safety
///
/// Called by ib_core for the last work request of an R/W operation posted
/// by a [`Conn<V>`].
unsafe extern "C" fn rw_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: `cq_context` is the `Conn<V>`, which outlives its CQs; the CQE
    // is the `cqe` of a pinned `RwOp` whose thread waits for this.
    let (conn, op, wc) = unsafe {
        let conn = &*(*cq).cq_context.cast::<Conn<V>>();
        let wc = &*wc;
        let op = &*wc.__bindgen_anon_1.wr_cqe.cast::<u8>().sub(core::mem::offset_of!(RwOp, cqe)).cast::<RwOp>();
        (conn, op, wc)
    };
    let g = conn.inv_lock.lock();
    // After this (and the unlock) the waiter may free the op.
    op.complete(wc.status);
    drop(g);
    conn.inv_wait.notify_all();
}

/// rdma_cm event handler.
///
/// # Safety
///
/// Called by rdma_cm for an id created by [`ConnBox::new`], whose context
/// is the connection's pinned `events`.
unsafe extern "C" fn cm_handler<V: Events>(id: *mut sys::rdma_cm_id, event: *mut sys::rdma_cm_event) -> c_int {
    // SAFETY: per the contract; the id and event are valid for the call.
    let (events, ev) = unsafe { (&*(*id).context.cast::<V>(), &*event) };
    // SAFETY: `ev` is this running handler's event.
    let event = unsafe { CmEvent::decode(ev) };
    events.cm_event(event);
    0
}
