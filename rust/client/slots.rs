// SPDX-License-Identifier: GPL-2.0

//! What the transport holds for each request between sending it and its
//! release.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use kernel::{new_spinlock, prelude::*, sync::SpinLock};

use crate::verbs::{FreeList, InFlight};
use crate::{
    kapi::{
        cell::PinnedSlice,
        rpc::{FreedRqst, PinnedRqst, Rqst, RqstStorage, Task, Xprt},
    },
    proto::v1,
};

use super::{
    chunks::{ReplyShape, MAX_CHUNK_SEGMENTS},
    conn::Endpoint,
    regions::KeptMr,
    stats::count_invalidations,
    xprt::RdmaXprt,
};

/// What the transport holds for one request between sending it and its
/// release: the token of what its call put in the peer's and the device's
/// reach (its memory regions, and the Send if it maps pages), and how its
/// reply comes back. The reply is checked against it in place, under the
/// slot's lock: nothing of it is copied per RPC.
///
/// # Invariants
///
/// Whenever its slot's `holds` flag is clear, the state is its
/// [`Default`]: no token, a reply inline. A small call
/// (`plan::plan_small`) relies on it to be sent without locking the state
/// (`RdmaXprt::marshal`): what it would record is there already; and so
/// does its reply, judged without locking it (`EpShared::take_request`).
/// Every other call sets the flag, with the state locked, before it
/// registers or posts anything.
pub(super) struct ReqState {
    pub(super) inflight: Option<InFlight>,
    pub(super) reply: ReplyShape,
    /// The segments of the Write or Reply chunk the call offered (the
    /// first `offered`): the only memory the server may say it wrote
    /// (`v1::check_returned_chunk`).
    pub(super) segs: [v1::Segment; MAX_CHUNK_SEGMENTS],
    pub(super) offered: usize,
}

impl ReqState {
    /// Takes the request's token out of the slot, for the caller to end,
    /// and leaves the state as a fresh slot's (the segments offered are
    /// no longer counted).
    pub(super) fn take(&mut self) -> Option<InFlight> {
        self.reply = ReplyShape::Inline;
        self.offered = 0;
        self.inflight.take()
    }
}

impl Default for ReqState {
    fn default() -> Self {
        ReqState { inflight: None, reply: ReplyShape::Inline, segs: [v1::Segment::default(); MAX_CHUNK_SEGMENTS], offered: 0 }
    }
}

/// A request slot: the request storage SUNRPC borrows (with the lender of
/// its memory) and the transport's state for it. The state is only
/// touched by whoever currently acts for the request (its task, or the
/// reply handler while the request is pinned), behind a spinlock all the
/// same.
#[pin_data]
pub(super) struct Slot {
    pub(super) storage: RqstStorage,
    #[pin]
    state: SpinLock<ReqState>,
    /// Set (with the state locked) by every call but a small one before it
    /// registers anything, cleared when the state is emptied: a clear flag
    /// lets a small call, its reply and the usual release skip the lock.
    /// See [`Slot::holds`].
    holds: AtomicBool,
    /// The XID (as on the wire) of the last reply that completed the
    /// slot's request: a request released with another XID ended without
    /// its reply (see [`RdmaXprt::release_held`]).
    answered: AtomicU32,
    /// The memory region the request keeps for its next call (outside the
    /// lock: the reply takes the call's regions back after unlocking).
    kept: KeptMr,
    index: usize,
}

impl Slot {
    /// The memory region the request keeps between calls.
    pub(super) fn kept(&self) -> &KeptMr {
        &self.kept
    }

    /// The transport's state for this request.
    pub(super) fn state(&self) -> &SpinLock<ReqState> {
        &self.state
    }

    /// Records, with the state locked (`_locked` proves it), whether the
    /// state now holds anything to give back.
    pub(super) fn set_holds(&self, _locked: &mut ReqState, holds: bool) {
        self.holds.store(holds, Ordering::Release);
    }

    /// False if the state held nothing when it was last recorded: the
    /// request's own task, sending a small call or releasing the request
    /// after its RPC ended, may then skip the lock. Whoever emptied the
    /// state did so before the last RPC in the slot completed, and the
    /// completion orders that before the release, and the release before
    /// the slot's next call. The reply handler may skip it too: a call
    /// that records anything set the flag before posting its Send, which
    /// comes before its reply.
    pub(super) fn holds(&self) -> bool {
        self.holds.load(Ordering::Acquire)
    }

    /// Records that a reply to the call `xid_be` (as on the wire) was
    /// taken for the slot's request.
    #[inline]
    pub(super) fn set_answered(&self, xid_be: u32) {
        self.answered.store(xid_be, Ordering::Relaxed);
    }
}

/// The request slots of a transport (`max_requests` of them), and which are
/// free.
pub(super) struct SlotTable {
    /// In one allocation, each slot initialised in place (its locks are
    /// pinned); a request's slot is the one its storage's tag names.
    slots: PinnedSlice<Slot>,
    free: Pin<KBox<SpinLock<FreeList>>>,
}

impl SlotTable {
    /// `n` slots, all free.
    pub(super) fn new(n: usize) -> Result<Self> {
        let slots = PinnedSlice::new(n, |index| {
            let storage = RqstStorage::new(index)?;
            Ok(pin_init!(Slot {
                storage,
                state <- new_spinlock!(ReqState::default(), "rpcrdma_rs:slot"),
                holds: AtomicBool::new(false),
                answered: AtomicU32::new(0),
                kept: KeptMr::new(),
                index,
            }))
        })?;
        let free = KBox::pin_init(new_spinlock!(FreeList::full(n)?, "rpcrdma_rs:slots"), GFP_KERNEL)?;
        Ok(SlotTable { slots, free })
    }

    #[inline]
    fn get(&self) -> Option<&Slot> {
        let i = self.free.lock().pop()?;
        self.slots.get(i)
    }

    /// `alloc_slot`: lends `task` a free request, or queues it on the
    /// backlog. Inlined into SUNRPC's callback, as is [`SlotTable::free`]:
    /// each is its one caller.
    #[inline(always)]
    pub(super) fn alloc(&self, x: Xprt<'_>, task: &Task<'_>) {
        if let Some(slot) = self.get() {
            if slot.storage.lend(task) {
                return;
            }
            // A free slot that is lent: a bug; the slot stays out of use.
        }
        x.add_backlog(task);
        // A slot freed between `get` and joining the backlog would find no
        // waiter: look again and hand it over ourselves.
        if let Some(slot) = self.get() {
            if !slot.storage.lend_to_backlog(x) {
                self.free.lock().push(slot.index);
            }
        }
    }

    /// `free_slot`: the request goes to a backlogged task or back to the
    /// pool.
    #[inline(always)]
    pub(super) fn free(&self, x: Xprt<'_>, rqst: FreedRqst<'_>) {
        let Some(slot) = self.slots.get(rqst.tag()) else { return };
        if slot.storage.take_back(x, rqst) {
            self.free.lock().push(slot.index);
        }
    }

    /// Gives the regions the requests keep for `ep`'s connection back to
    /// its pool; returns how many.
    pub(super) fn reclaim_kept(&self, ep: &Endpoint) -> usize {
        let id = ep.conn.conn_id();
        let back = |slot: &&Slot| slot.kept.take(id).map(|i| ep.conn.pool_put(i)).is_some();
        self.slots.iter().filter(back).count()
    }

    /// See [`RqstStorage::forget_cong`].
    pub(super) fn forget_cong(&self, x: Xprt<'_>) {
        for slot in self.slots.iter() {
            slot.storage.forget_cong(x);
        }
    }

    /// The slot holding `rqst`, if it is one of this table's.
    #[inline]
    pub(super) fn slot_of(&self, rqst: &Rqst<'_>) -> Option<&Slot> {
        self.slots.get(rqst.tag()).filter(|slot| slot.storage.owns(rqst))
    }

    /// The slot holding a pinned request.
    #[inline]
    pub(super) fn slot_of_pinned(&self, rqst: &PinnedRqst) -> Option<&Slot> {
        self.slots.get(rqst.tag()).filter(|slot| slot.storage.owns_pinned(rqst))
    }
}

impl RdmaXprt {
    /// Gives back what a request that ended without its reply still holds;
    /// returns its slot.
    #[inline]
    pub(super) fn release_held(&self, x: Xprt<'_>, rqst: &Rqst<'_>) -> Option<&Slot> {
        let slot = self.slots.slot_of(rqst)?;
        // An RPC that ended without its reply (signal, timeout) may still
        // have regions the server could write into: invalidate them before
        // its pages go back. The usual case: the reply handler already took
        // them back.
        if slot.holds() {
            self.release_held_slow(x, slot);
        }
        // A call answered by no reply that went out on this connection:
        // the server may still hold its Receive. (The reply's handler
        // records the XID before it completes the RPC, which comes before
        // the release.)
        if slot.answered.load(Ordering::Relaxed) != rqst.xid_be() && rqst.sent_on_this_connection(x) {
            self.abandoned(x, rqst);
        }
        Some(slot)
    }

    /// See [`EpShared::abandon`].
    #[cold]
    #[inline(never)]
    fn abandoned(&self, x: Xprt<'_>, rqst: &Rqst<'_>) {
        // The connection first, then the check that the call went out on
        // it: a reconnect in between makes the check fail (the cookie
        // changes when a connection ends, before the next one is made).
        let Some(ep) = self.endpoint() else { return };
        if rqst.sent_on_this_connection(x) {
            ep.shared().abandon(u32::from_be(rqst.xid_be()));
        }
    }

    /// [`RdmaXprt::release_held`] for a request whose slot's state may
    /// hold something: out of line, so that the usual release (nothing
    /// held) saves and restores no registers for it.
    #[cold]
    #[inline(never)]
    fn release_held_slow(&self, x: Xprt<'_>, slot: &Slot) {
        // The connection first: a token taken out of the slot below is of
        // it, or of one that is gone (a connection's tokens are all ended,
        // or it is gone, before the next one is made).
        let ep = self.endpoint();
        let mut st = slot.state().lock();
        let t = st.take();
        slot.set_holds(&mut st, false);
        drop(st);
        let Some(t) = t else { return };
        let lender = slot.storage.lender();
        let registered = t.len();
        let t = match ep.as_ref().filter(|ep| ep.conn.conn_id() == t.conn_id()) {
            Some(ep) => match ep.conn.release(lender, t, None) {
                Ok((_released, local)) => {
                    count_invalidations(&self.stats, registered, local);
                    // A task may be waiting for memory regions to send its
                    // call.
                    x.write_space();
                    return;
                }
                Err(t) => t,
            },
            None => t,
        };
        // Of a connection that is gone, or going: its teardown ends
        // everything it registered.
        if lender.wait_dead(t).is_err() {
            pr_err!("a request's token is neither its connection's nor its own: the request stays unusable\n");
        }
    }
}
