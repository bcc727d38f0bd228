// SPDX-License-Identifier: GPL-2.0

//! Backchannel requests (RFC 8167): an `rpc_rqst` with a page for the
//! backward call and one for its reply, lent to the callback service
//! ([`BcRqst`]).

use core::{marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
    prelude::*,
};

use super::{
    storage::{RqstBox, NO_SLOT},
    Xprt,
};
use crate::kapi::{cell::LeaseCell, PAGE_SIZE};
use crate::sys;

/// A backchannel request: SUNRPC's `rpc_rqst`, a page holding a copy of the
/// backward call, and a page the callback service encodes its reply into.
/// Idle in the transport's pool; SUNRPC's (the callback service's) from
/// [`BcRqst::deliver`] until `bc_free_rqst` gives it back
/// ([`FreedBcRqst`]). C keeps the addresses of the request and the
/// buffers, allocations of their own, so the value itself may move; one
/// dropped while the callback service holds it leaks them.
///
/// # Invariants
///
/// `rqst` is an [`RqstBox`] (tagged [`NO_SLOT`]) made by `new`, the
/// request's alone. `bufs` is away exactly while the request is queued to
/// or held by the callback service; its buffers' heap storage never moves
/// (never grown).
pub(crate) struct BcRqst {
    rqst: NonNull<RqstBox>,
    bufs: ManuallyDrop<LeaseCell<BcBufs>>,
}

// SAFETY: the request and buffers are the value's alone, reached by C only
// while they are the callback service's (type invariant).
unsafe impl Send for BcRqst {}
// SAFETY: see `Send`; shared use goes through the lease cell.
unsafe impl Sync for BcRqst {}

struct BcBufs {
    call: KVec<u8>,
    reply: KVec<u8>,
}

/// Why a backward call was not delivered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BcError {
    /// The request is in use.
    Busy,
    /// No callback service is attached to the transport (yet).
    NoService,
    /// The call does not fit a request's page, or is too short.
    BadSize,
}

impl BcRqst {
    /// A request with page-sized call and reply buffers.
    pub(crate) fn new() -> Result<Self> {
        let ps = PAGE_SIZE as usize;
        let bufs = BcBufs { call: KVec::from_elem(0u8, ps, GFP_KERNEL)?, reply: KVec::from_elem(0u8, ps, GFP_KERNEL)? };
        let rqst = RqstBox::new(NO_SLOT)?;
        // INVARIANT: made here, not delivered.
        Ok(BcRqst { rqst, bufs: ManuallyDrop::new(LeaseCell::new(bufs)) })
    }

    /// The request's address.
    fn rqst_ptr(&self) -> *mut sys::rpc_rqst {
        // SAFETY: the box is live (type invariant); the request is reached
        // only through the address its `CShared` gives.
        unsafe { (*self.rqst.as_ptr()).rqst.get() }
    }

    /// Hands the backward call `msg` (the RPC message from its XID on) to
    /// `x`'s callback service in this request.
    pub(crate) fn deliver(&self, x: Xprt<'_>, msg: &[u8]) -> core::result::Result<(), BcError> {
        let mut b = self.bufs.lease().ok_or(BcError::Busy)?;
        let BcBufs { call, reply } = &mut *b;
        if msg.len() < 8 || msg.len() > call.len() {
            return Err(BcError::BadSize);
        }
        for (d, s) in call.iter_mut().zip(msg) {
            *d = *s;
        }
        let (call, reply, reply_len) = (call.as_mut_ptr(), reply.as_mut_ptr(), reply.len());
        b.hand_off();
        // SAFETY: the request is idle (its buffers were) and handed off with
        // them; they stay put (boxed, never-grown KVecs) until `take_back`.
        // The transport is live.
        let ok = unsafe {
            sys::rpcrdma_rs_bc_prepare(self.rqst_ptr(), x.as_ptr(), call.cast(), msg.len(), reply.cast(), reply_len);
            sys::rpcrdma_rs_bc_enqueue(self.rqst_ptr())
        };
        if !ok {
            // SAFETY: not enqueued: nobody got the request.
            drop(unsafe { self.bufs.take_back() });
            return Err(BcError::NoService);
        }
        Ok(())
    }

    /// `bc_free_rqst`: the callback service gives `freed` back. True if it
    /// was this request (idle again).
    pub(crate) fn take_back(&self, freed: &FreedBcRqst<'_>) -> bool {
        if !core::ptr::eq(self.rqst_ptr(), freed.raw.as_ptr()) {
            return false;
        }
        // SAFETY: SUNRPC gives the request back when the callback service
        // is done with it and its buffers.
        unsafe { self.bufs.take_back() }.is_some()
    }
}

impl Drop for BcRqst {
    fn drop(&mut self) {
        if !self.bufs.is_idle() {
            // The callback service still holds it: leaked, not freed under
            // it.
            pr_err!("backchannel request dropped while in use: leaking it\n");
            return;
        }
        // SAFETY: idle: nobody refers to the request or its buffers; each
        // is freed once, here.
        unsafe {
            RqstBox::free(self.rqst);
            ManuallyDrop::drop(&mut self.bufs);
        }
    }
}

/// A backchannel request the callback service gives back
/// (`bc_free_rqst`), for [`BcRqst::take_back`].
///
/// # Invariants
///
/// `raw` is the request SUNRPC passed to `bc_free_rqst`, live for `'a`.
pub(crate) struct FreedBcRqst<'a> {
    pub(super) raw: NonNull<sys::rpc_rqst>,
    pub(super) _life: PhantomData<&'a sys::rpc_rqst>,
}
