// SPDX-License-Identifier: GPL-2.0

//! Memory the transport keeps for the requests it lends SUNRPC
//! ([`RqstStorage`]) and the pinned array that holds them ([`PinnedSlice`]).

use core::{marker::PhantomData, ptr::NonNull};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox, KVVec},
    error::Result,
    ffi::c_void,
    prelude::*,
};

use super::{Rqst, Task, Xprt};
use crate::kapi::{
    cell::{CShared, LeaseCell},
    compat,
};
use crate::sys;

/// Bytes of a request's own call and reply buffer ([`RqstStorage`]). Most
/// calls and replies fit (bulk data travels in the page lists); larger ones
/// get SUNRPC's. A buffer size, not a page.
pub(crate) const SLOT_BUFFER: usize = 4096;

/// An `rpc_rqst` the transport keeps, with a call and reply buffer of its
/// own: lent to SUNRPC from [`RqstStorage::lend`] (or a backlog hand-over)
/// until SUNRPC gives it back in `free_slot` ([`FreedRqst`]).
///
/// # Invariants
///
/// `lent` is away exactly while SUNRPC may use `rqst` (a task holds it, or
/// is being handed it); while `lent` is idle no task refers to `rqst`.
/// `rqst` does not move while lent (the storage is pinned where it lives:
/// every constructor of a value that holds one pins it, see
/// [`PinnedSlice`]).
pub(crate) struct RqstStorage {
    rqst: CShared<sys::rpc_rqst>,
    lent: LeaseCell<()>,
    /// SUNRPC encodes the call into it and decodes the reply from it while
    /// the request is its task's, so only raw pointers to it leave here.
    buffer: KBox<CShared<[u8; SLOT_BUFFER]>>,
}

impl RqstStorage {
    /// A zeroed request (as SUNRPC's own slot allocator hands them out),
    /// not lent.
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: `CShared` may hold uninitialised bytes (an `Opaque`).
        let buffer = unsafe { KBox::<CShared<[u8; SLOT_BUFFER]>>::new_uninit(GFP_KERNEL)?.assume_init() };
        Ok(RqstStorage { rqst: CShared::new(Default::default()), lent: LeaseCell::new(()), buffer })
    }

    /// Where the `rpc_rqst` lies inside the storage, to find a storage by
    /// a request's address ([`PinnedSlice::at_addr`]).
    pub(crate) const RQST_OFFSET: usize = core::mem::offset_of!(RqstStorage, rqst);

    /// Lends the request to `task` (which asked for a slot); false if it is
    /// lent already.
    #[inline]
    pub(crate) fn lend(&self, task: &Task<'_>) -> bool {
        let Some(l) = self.lent.lease() else { return false };
        l.hand_off();
        let t = task.raw.as_ptr();
        // SAFETY: the task is valid for the callback; the request is not
        // lent (it was idle), so no other task refers to it.
        unsafe {
            (*t).tk_rqstp = self.rqst.get();
            (*t).tk_status = 0;
        }
        true
    }

    /// Lends the request to the first task waiting on `x`'s backlog; false
    /// (and the request stays idle) if none waits or it is lent already.
    pub(crate) fn lend_to_backlog(&self, x: Xprt<'_>) -> bool {
        let Some(l) = self.lent.lease() else { return false };
        // Away before the hand-over: the task may run and free it at once.
        l.hand_off();
        // SAFETY: valid transport; the request was idle, so no task refers
        // to it.
        if unsafe { sys::xprt_wake_up_backlog(x.as_ptr(), self.rqst.get()) } {
            return true;
        }
        // SAFETY: nobody took the request: it was never lent.
        drop(unsafe { self.lent.take_back() });
        false
    }

    /// `free_slot`: SUNRPC gives `freed` back. It goes straight on to the
    /// first task on the backlog if one waits; otherwise it is zeroed and
    /// idle, and true is returned (the caller keeps it as free). False, and
    /// nothing done, if `freed` is not this storage's request.
    pub(crate) fn take_back(&self, x: Xprt<'_>, freed: FreedRqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst.get(), freed.raw.as_ptr()) {
            return false;
        }
        // SAFETY: valid transport; SUNRPC gave the request back, so handing
        // it to another task is ours to do (it stays lent).
        if unsafe { sys::xprt_wake_up_backlog(x.as_ptr(), self.rqst.get()) } {
            return false;
        }
        // SAFETY: SUNRPC gave the request back (`free_slot`) and no task
        // took it over: nothing in SUNRPC refers to it any more.
        let Some(l) = (unsafe { self.lent.take_back() }) else { return false };
        // SAFETY: the request is idle: nobody uses it. SUNRPC's own
        // allocator clears a request it takes back, and its users rely on
        // that (the credential pointer, for one, is not set again before it
        // is looked at).
        unsafe { core::ptr::write_bytes(self.rqst.get(), 0, 1) };
        drop(l);
        true
    }

    /// `buf_alloc`: points the call and reply buffers of `rqst` (sized by
    /// SUNRPC in `rq_callsize` and `rq_rcvsize`) into the storage's own
    /// buffer, call first, as SUNRPC lays them out. False if `rqst` is not
    /// this storage's or they do not fit.
    #[inline]
    pub(crate) fn provide_buffers(&self, rqst: &Rqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst.get(), rqst.raw.as_ptr()) {
            return false;
        }
        let (call, reply) = (rqst.get().rq_callsize, rqst.get().rq_rcvsize);
        if !matches!(call.checked_add(reply), Some(n) if n <= SLOT_BUFFER) {
            return false;
        }
        let base = self.buffer.get().cast::<u8>();
        let r = rqst.raw.as_ptr();
        // SAFETY: the request is the calling task's, which is asking for
        // its buffers; `call <= SLOT_BUFFER`, so the reply buffer starts
        // inside (or right at the end of) the storage's buffer.
        unsafe {
            (*r).rq_buffer = base.cast();
            (*r).rq_rbuffer = base.add(call).cast();
        }
        true
    }

    /// True if the buffers of `rqst` are this storage's own (nothing to
    /// free).
    #[inline]
    pub(crate) fn owns_buffers(&self, rqst: &Rqst<'_>) -> bool {
        rqst.get().rq_buffer == self.buffer.get().cast::<c_void>()
    }

    /// Credits are granted per connection (RFC 8166 section 3.3.3): a
    /// request that held a congestion window slot on the old connection
    /// must claim one again on the new. Call while connecting, when no
    /// request is being sent, before [`Xprt::reset_cwnd`].
    pub(crate) fn forget_cong(&self, x: Xprt<'_>) {
        // SAFETY: valid transport; the request stays allocated; the helper
        // takes transport_lock, under which SUNRPC reads and changes
        // `rq_cong`.
        unsafe { sys::rpcrdma_rs_clear_rq_cong(x.as_ptr(), self.rqst.get()) };
    }
}

/// A request SUNRPC gives back (`free_slot`), for [`RqstStorage::take_back`].
///
/// # Invariants
///
/// `raw` is the request SUNRPC passed to `free_slot`, live for `'a`.
pub(crate) struct FreedRqst<'a> {
    pub(super) raw: NonNull<sys::rpc_rqst>,
    pub(super) _life: PhantomData<&'a sys::rpc_rqst>,
}

impl FreedRqst<'_> {
    /// The request's address, to find its storage.
    pub(crate) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }
}

/// `n` values initialised in place in one allocation that never moves: each
/// is pinned for the slice's life, and one is found from the address of
/// one of its fields with a range check and a division.
///
/// # Invariants
///
/// `v` is never grown or shrunk after `new`, so its elements never move.
pub(crate) struct PinnedSlice<T> {
    v: KVVec<T>,
}

impl<T> PinnedSlice<T> {
    /// `n` values, the `i`th made by `init(i)`. The allocation may come
    /// from vmalloc: nothing in it may be mapped for DMA.
    pub(crate) fn new<I: PinInit<T>>(n: usize, mut init: impl FnMut(usize) -> Result<I>) -> Result<Self> {
        let mut v = KVVec::<T>::with_capacity(n, GFP_KERNEL)?;
        for i in 0..n {
            let init = init(i)?;
            let Some(place) = v.spare_capacity_mut().first_mut() else {
                return Err(ENOMEM);
            };
            // SAFETY: `place` is the uninitialised element `i` of an
            // allocation that never moves: the vector has room for all `n`
            // values and is never grown or shrunk (type invariant), so the
            // value stays where it is initialised, pinned, until the slice
            // is dropped (which drops it in place).
            match unsafe { compat::pin_init_at(init, place.as_mut_ptr()) } {
                Ok(()) => {}
                Err(never) => match never {},
            }
            // SAFETY: elements `0..=i` are initialised.
            unsafe { compat::kvec_add_initialised(&mut v, 1) };
        }
        Ok(PinnedSlice { v })
    }

    /// The `i`th value.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.v.get(i)
    }

    /// Every value.
    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.v.iter()
    }

    /// The value whose field at `offset` (bytes into `T`) lies at `addr`;
    /// `None` for an address outside the slice. An address inside it that
    /// is not such a field's gives the value it falls in: a reference to
    /// one of the values all the same, found with one subtraction, one
    /// division by a constant and one bounds check (the slot table does
    /// this four or five times per RPC).
    #[inline]
    pub(crate) fn at_addr(&self, addr: usize, offset: usize) -> Option<&T> {
        let size = core::mem::size_of::<T>();
        if size == 0 {
            return None;
        }
        // Below the first value's field the subtraction wraps to an index
        // far past the end, which `get` refuses.
        let at = addr.wrapping_sub((self.v.as_ptr() as usize).wrapping_add(offset));
        self.v.get(at / size)
    }
}
