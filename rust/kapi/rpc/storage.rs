// SPDX-License-Identifier: GPL-2.0

//! Memory the transport keeps for the requests it lends SUNRPC
//! ([`RqstStorage`]): the `rpc_rqst` itself, its call and reply buffer, and
//! the [`Lender`] its DMA tokens are counted against.
//!
//! C keeps the addresses of the request and of its buffers while the
//! request is lent: both are allocations of their own that the storage
//! owns (so the storage itself may move), and a storage dropped while
//! lent leaks them instead of freeing memory SUNRPC still uses.

use core::{marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox},
    error::Result,
    prelude::*,
};

use super::{xdr::read_once, PinnedRqst, ReleasedRqst, Rqst, Task, XdrBuf, Xprt};
use crate::kapi::{
    cell::{CShared, LeaseCell},
    ib::{Closed, Lender},
    page::{Inbound, Outbound},
};
use crate::sys;

/// Bytes of a request's own call and reply buffer ([`RqstStorage`]): one
/// page. Most calls and replies fit (bulk data travels in the page
/// lists); larger ones get a buffer of their own.
pub(crate) const SLOT_BUFFER: usize = crate::kapi::PAGE_SIZE as usize;

/// The tag of a request that is no slot's (a backchannel request).
pub(crate) const NO_SLOT: usize = usize::MAX;

/// An `rpc_rqst` in an allocation of its own, with the tag its owner
/// finds it by (a slot's index, or [`NO_SLOT`]).
///
/// Every request a transport of this module gives SUNRPC is one: its
/// slots' ([`RqstStorage`]) and its backchannel's
/// ([`BcRqst`](super::BcRqst)). SUNRPC makes none of its own for them
/// (`xprt_alloc` is asked for no preallocated request).
#[repr(C)]
pub(super) struct RqstBox {
    pub(super) rqst: CShared<sys::rpc_rqst>,
    pub(super) tag: usize,
}

impl RqstBox {
    /// A zeroed request (as SUNRPC's own slot allocator hands them out)
    /// with `tag`.
    pub(super) fn new(tag: usize) -> Result<NonNull<RqstBox>> {
        let b = KBox::new(RqstBox { rqst: CShared::new(Default::default()), tag }, GFP_KERNEL)?;
        // Freed by the owner's `Drop` (or leaked while lent).
        Ok(NonNull::from(KBox::leak(b)))
    }

    /// The tag of the box holding `rqst`.
    ///
    /// # Safety
    ///
    /// `rqst` is the request of a live `RqstBox`.
    pub(super) unsafe fn tag_of(rqst: NonNull<sys::rpc_rqst>) -> usize {
        // SAFETY: per the contract, `rqst` is the first field of a
        // `repr(C)` `RqstBox`, which is therefore at the same address;
        // `tag` is written once, before the request is given to anybody.
        unsafe { (*rqst.as_ptr().cast::<RqstBox>()).tag }
    }

    /// Frees a box made by [`RqstBox::new`].
    ///
    /// # Safety
    ///
    /// Nobody uses the request any more, and the box is freed once.
    pub(super) unsafe fn free(b: NonNull<RqstBox>) {
        // SAFETY: from `KBox::leak` in `new`, freed once (the contract).
        drop(unsafe { KBox::from_raw(b.as_ptr()) });
    }
}

/// A call and reply buffer larger than a slot's own: pages from the page
/// allocator (a mapping of them takes page references, which a slab
/// allocation could not give), freed when dropped.
///
/// # Invariants
///
/// `page` heads a compound allocation of at least `len` bytes from
/// `rpcrdma_rs_alloc_buf`, and `addr` is its linear address.
struct BigBuf {
    page: NonNull<sys::page>,
    addr: NonNull<u8>,
}

// SAFETY: the pages are the owner's alone (C holds their address only while
// the request that uses them is lent, and never frees them).
unsafe impl Send for BigBuf {}

impl BigBuf {
    /// `len` bytes, allocated as `task` may (the RPC layer's allocation
    /// flags for it); `None` when memory is short.
    fn new(task: &Task<'_>, len: usize) -> Option<Self> {
        // SAFETY: the task is valid for the callback; the helper allocates
        // with its flags.
        let page = NonNull::new(unsafe { sys::rpcrdma_rs_alloc_buf(task.raw.as_ptr(), len) })?;
        // SAFETY: a page just allocated from the page allocator (linearly
        // mapped on every kernel the module builds for).
        let addr = NonNull::new(unsafe { sys::rpcrdma_rs_page_address(page.as_ptr()) }.cast::<u8>())?;
        // INVARIANT: as allocated.
        Some(BigBuf { page, addr })
    }
}

impl Drop for BigBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `new`, given back once; a mapping that
        // still names a page keeps it with a reference of its own.
        unsafe { sys::rpcrdma_rs_free_buf(self.page.as_ptr()) };
    }
}

/// An `rpc_rqst` the transport keeps, with a call and reply buffer of its
/// own (one page) and the [`Lender`] of its memory: lent to SUNRPC from
/// [`RqstStorage::lend`] (or a backlog hand-over) until SUNRPC gives it
/// back in `free_slot`.
///
/// # Invariants
///
/// `rqst` is an [`RqstBox`] made by `new`, and `buffer` a page from the
/// page allocator at linear address `buffer_addr`, both the storage's
/// alone. `lent` is away exactly while SUNRPC may use `rqst` (a task holds
/// it, or is being handed it); while `lent` is idle no task refers to
/// `rqst`. `big` holds the buffer `buf_alloc` made for the request when
/// its own was too small; it is touched only by the request's task (in
/// `buf_alloc` and `buf_free`).
pub(crate) struct RqstStorage {
    rqst: NonNull<RqstBox>,
    lent: LeaseCell<()>,
    /// SUNRPC encodes the call into it and decodes the reply from it while
    /// the request is its task's, so only raw pointers to it leave here.
    buffer: ManuallyDrop<kernel::page::Page>,
    buffer_addr: NonNull<u8>,
    big: ManuallyDrop<LeaseCell<Option<BigBuf>>>,
    lender: Lender,
}

// SAFETY: the request and buffers are the storage's alone, reached by C
// only while lent (type invariant); the rest is `Send` and `Sync`.
unsafe impl Send for RqstStorage {}
// SAFETY: see `Send`; shared use goes through the lease cells and C's own
// rules for a lent request, which every `unsafe` use states.
unsafe impl Sync for RqstStorage {}

impl RqstStorage {
    /// A zeroed request tagged `tag` (its owner's index for it), not lent.
    pub(crate) fn new(tag: usize) -> Result<Self> {
        let buffer = kernel::page::Page::alloc_page(GFP_KERNEL)?;
        // SAFETY: a page just allocated from the page allocator, linearly
        // mapped.
        let addr = unsafe { sys::rpcrdma_rs_page_address(buffer.as_ptr().cast()) };
        let buffer_addr = NonNull::new(addr.cast::<u8>()).ok_or(ENOMEM)?;
        let rqst = RqstBox::new(tag)?;
        // INVARIANT: both allocated here, nothing lent.
        Ok(RqstStorage {
            rqst,
            lent: LeaseCell::new(()),
            buffer: ManuallyDrop::new(buffer),
            buffer_addr,
            big: ManuallyDrop::new(LeaseCell::new(None)),
            lender: Lender::new(),
        })
    }

    /// The request's address.
    #[inline]
    fn rqst_ptr(&self) -> *mut sys::rpc_rqst {
        // SAFETY: the box is live (type invariant); the request is reached
        // only through the address its `CShared` gives.
        unsafe { (*self.rqst.as_ptr()).rqst.get() }
    }

    /// True if `rqst` is this storage's request.
    #[inline]
    pub(crate) fn owns(&self, rqst: &Rqst<'_>) -> bool {
        core::ptr::eq(self.rqst_ptr(), rqst.raw.as_ptr())
    }

    /// The lender of the request's memory, whose tokens its completion
    /// waits for.
    #[inline]
    pub(crate) fn lender(&self) -> &Lender {
        &self.lender
    }

    /// `rqst`, if it is this storage's, as a request whose buffers tokens
    /// of this storage's lender may name ([`LentRqst`]).
    #[inline]
    pub(crate) fn lent_rqst<'a>(&'a self, rqst: &Rqst<'a>) -> Option<LentRqst<'a>> {
        self.owns(rqst).then(|| LentRqst { rqst: Rqst { raw: rqst.raw, _life: PhantomData }, owner: self.lender.id() })
    }

    /// Lends the request to `task` (which asked for a slot); false if it is
    /// lent already.
    #[inline]
    pub(crate) fn lend(&self, task: &Task<'_>) -> bool {
        let Some(l) = self.lent.lease() else { return false };
        l.hand_off();
        let t = task.raw.as_ptr();
        // SAFETY: the task is valid for the callback; the request is not
        // lent (it was idle), so no other task refers to it, and its box
        // stays allocated while it is lent (type invariant).
        unsafe {
            (*t).tk_rqstp = self.rqst_ptr();
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
        if unsafe { sys::xprt_wake_up_backlog(x.as_ptr(), self.rqst_ptr()) } {
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
    pub(crate) fn take_back(&self, x: Xprt<'_>, freed: super::FreedRqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst_ptr(), freed.raw.as_ptr()) {
            return false;
        }
        // SAFETY: valid transport; SUNRPC gave the request back, so handing
        // it to another task is ours to do (it stays lent).
        if unsafe { sys::xprt_wake_up_backlog(x.as_ptr(), self.rqst_ptr()) } {
            return false;
        }
        // SAFETY: SUNRPC gave the request back (`free_slot`) and no task
        // took it over: nothing in SUNRPC refers to it any more.
        let Some(l) = (unsafe { self.lent.take_back() }) else { return false };
        // SAFETY: the request is idle: nobody uses it. SUNRPC's own
        // allocator clears a request it takes back, and its users rely on
        // that (the credential pointer, for one, is not set again before it
        // is looked at).
        unsafe { core::ptr::write_bytes(self.rqst_ptr(), 0, 1) };
        drop(l);
        true
    }

    /// `buf_alloc`: points the call and reply buffers of `rqst` (sized by
    /// SUNRPC in `rq_callsize` and `rq_rcvsize`) at the storage's own
    /// buffer, call first, as SUNRPC lays them out, or, when they do not
    /// fit, at a buffer made for them (kept until `free_buffers`). Fails
    /// with `ENOMEM` (SUNRPC tries again later) and `EINVAL` for another
    /// storage's request.
    #[inline]
    pub(super) fn provide_buffers(&self, task: &Task<'_>, rqst: &Rqst<'_>) -> Result {
        if !self.owns(rqst) {
            return Err(EINVAL);
        }
        let r = rqst.raw.as_ptr();
        // SAFETY: the request is the calling task's, which is asking for its
        // buffers: nobody else writes these fields now.
        let (call, reply) = unsafe { ((*r).rq_callsize, (*r).rq_rcvsize) };
        let size = call.checked_add(reply).ok_or(EINVAL)?;
        let base = if size <= SLOT_BUFFER { self.buffer_addr } else { self.provide_big(task, size)? };
        // SAFETY: as above; `call <= size`, so the reply buffer starts
        // inside (or right at the end of) the buffer, which stays until
        // `free_buffers` (the storage's own: until the storage goes).
        unsafe {
            (*r).rq_buffer = base.as_ptr().cast();
            (*r).rq_rbuffer = base.as_ptr().add(call).cast();
        }
        Ok(())
    }

    /// [`RqstStorage::provide_buffers`]'s buffer made for a request of
    /// `size` bytes, too big for the storage's own: out of line, so that
    /// the usual call saves no registers for it.
    #[cold]
    #[inline(never)]
    fn provide_big(&self, task: &Task<'_>, size: usize) -> Result<NonNull<u8>> {
        let mut big = self.big.lease().ok_or(EINVAL)?;
        let b = BigBuf::new(task, size).ok_or(ENOMEM)?;
        let addr = b.addr;
        // The old one (never: `free_buffers` took it) goes now.
        *big = Some(b);
        Ok(addr)
    }

    /// `buf_free`: lets go of what `provide_buffers` gave `rqst` (the
    /// buffer made for it, if any). Nothing for another storage's request.
    pub(super) fn free_buffers(&self, rqst: &Rqst<'_>) {
        if !self.owns(rqst) {
            return;
        }
        let r = rqst.raw.as_ptr();
        // SAFETY: the request is its task's, which is done with its
        // buffers; a mapping of them that is still in the device's reach
        // holds page references of its own.
        let own = unsafe {
            let own = core::ptr::eq((*r).rq_buffer.cast::<u8>(), self.buffer_addr.as_ptr());
            (*r).rq_buffer = core::ptr::null_mut();
            (*r).rq_rbuffer = core::ptr::null_mut();
            own
        };
        // Given the storage's own buffer, the request had no buffer made
        // for it (were one left, it would go with the next one made, or
        // with the storage: kept, never freed early).
        if own {
            return;
        }
        if let Some(mut big) = self.big.lease() {
            drop(big.take());
        }
    }

    /// Credits are granted per connection (RFC 8166 section 3.3.3): a
    /// request that held a congestion window slot on the old connection
    /// must claim one again on the new. Call while connecting, when no
    /// request is being sent, before [`Xprt::reset_cwnd`].
    pub(crate) fn forget_cong(&self, x: Xprt<'_>) {
        // SAFETY: valid transport; the request stays allocated; the helper
        // takes transport_lock, under which SUNRPC reads and changes
        // `rq_cong`.
        unsafe { sys::rpcrdma_rs_clear_rq_cong(x.as_ptr(), self.rqst_ptr()) };
    }

    /// Makes the request, found by XID and pinned, one that may take its
    /// reply and be completed, given its lender closed: nothing of its
    /// memory is in reach, nor can be until the request is completed
    /// ([`Conn::release_closing`](crate::kapi::ib::Conn::release_closing),
    /// [`Lender::close_idle`], [`Lender::close`]). The request back if it
    /// is not this storage's or `closed` keeps another lender closed.
    #[inline]
    pub(crate) fn released<'a>(
        &'a self,
        rqst: PinnedRqst,
        closed: Closed<'a>,
    ) -> core::result::Result<ReleasedRqst<'a>, PinnedRqst> {
        if !core::ptr::eq(self.rqst_ptr(), rqst.raw.as_ptr()) || closed.lender() != self.lender.id() {
            return Err(rqst);
        }
        Ok(ReleasedRqst::new(rqst, closed))
    }

    /// True if `rqst`, pinned, is this storage's request.
    #[inline]
    pub(crate) fn owns_pinned(&self, rqst: &PinnedRqst) -> bool {
        core::ptr::eq(self.rqst_ptr(), rqst.raw.as_ptr())
    }
}

impl Drop for RqstStorage {
    fn drop(&mut self) {
        if !self.lent.is_idle() {
            // SUNRPC still holds the request (it never gave it back): its
            // memory stays, leaked, rather than freed under it.
            pr_err!("request storage dropped while lent: leaking it\n");
            return;
        }
        // SAFETY: not lent: nobody refers to the request; freed once here.
        unsafe { RqstBox::free(self.rqst) };
        // SAFETY: each dropped once, here; a mapping that still names a
        // page holds a reference of its own.
        unsafe {
            ManuallyDrop::drop(&mut self.buffer);
            ManuallyDrop::drop(&mut self.big);
        }
    }
}

/// A request of a transport's slot, with the lender tag of its storage:
/// its buffers' pages carry it, so that a token of the request takes only
/// its own pages. Made by [`RqstStorage::lent_rqst`].
///
/// # Invariants
///
/// `rqst` is the request of the storage whose lender is `owner`.
pub(crate) struct LentRqst<'a> {
    rqst: Rqst<'a>,
    owner: u64,
}

impl<'a> core::ops::Deref for LentRqst<'a> {
    type Target = Rqst<'a>;

    #[inline]
    fn deref(&self) -> &Rqst<'a> {
        &self.rqst
    }
}

impl LentRqst<'_> {
    /// The call (`rq_snd_buf`): the peer or the device only reads it.
    #[inline]
    pub(crate) fn call_buf(&self) -> XdrBuf<'_, Outbound> {
        // INVARIANT: a buffer of the live request, whose task owns it and
        // lends it (the call, to be read).
        XdrBuf {
            // SAFETY: only the field's address is taken.
            raw: unsafe { core::ptr::addr_of!((*self.rqst.raw.as_ptr()).rq_snd_buf) },
            owner: self.owner,
            _life: PhantomData,
        }
    }

    /// The reply's room (`rq_rcv_buf`): the peer or the device writes it.
    #[inline]
    pub(crate) fn reply_buf(&self) -> XdrBuf<'_, Inbound> {
        // INVARIANT: as for `call_buf` (the reply, to be written).
        XdrBuf {
            // SAFETY: only the field's address is taken.
            raw: unsafe { core::ptr::addr_of!((*self.rqst.raw.as_ptr()).rq_rcv_buf) },
            owner: self.owner,
            _life: PhantomData,
        }
    }

    /// Bytes of the reply's room (`rq_rcv_buf.buflen`).
    #[inline]
    pub(crate) fn reply_room(&self) -> u32 {
        // SAFETY (of the read): the request is live for `'a`.
        read_once!((*self.rqst.raw.as_ptr()).rq_rcv_buf.buflen)
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
    /// The tag of its storage (see [`RqstBox`]).
    #[inline]
    pub(crate) fn tag(&self) -> usize {
        // SAFETY: a request SUNRPC gives back to a transport of this module
        // is in an `RqstBox` (see there), live for the call.
        unsafe { RqstBox::tag_of(self.raw) }
    }
}
