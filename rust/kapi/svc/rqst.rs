// SPDX-License-Identifier: GPL-2.0

//! The request a server thread brings to its transport (`struct
//! svc_rqst`): as `recvfrom` fills it with a call ([`RecvRqst`]) and as
//! `sendto` finds it with the reply ([`SendRqst`]).
//!
//! The thread owns its request; the core does not touch it while the
//! transport's operation runs. Which fields a transport sets, and how the
//! call's and the reply's pages are laid out, differs between kernel lines
//! (Documentation/server.rst, "The first step"): those rules live in one C
//! helper each, built for the kernel at hand.

use core::marker::PhantomData;

use kernel::{
    alloc::KBox,
    error::{
        code::{EBUSY, EINVAL},
        Result,
    },
    ffi::{c_int, c_void},
};

use crate::{
    kapi::{
        errno,
        page::{self, OwnedPage, OwnedPages, Outbound, PageRef, ANY_OWNER},
    },
    sys,
};

/// A thread's request in `recvfrom`, for the call it is to get, with a
/// context of type `C` for the call's `sendto`.
///
/// # Invariants
///
/// `raw` is the calling thread's request, exclusively the transport's for
/// `'a` (the `xpo_recvfrom` call), its transport held by the core;
/// `received` is true once `svc_xprt_received` was called for it; `len`
/// is the length of the call `set_call` gave it (0: none). Its
/// `rq_xprt_ctxt` is null or a `KBox<C>` that `set_ctxt` stored (the
/// class's `xpo_release_ctxt` frees it as one).
pub(crate) struct RecvRqst<'a, C> {
    raw: *mut sys::svc_rqst,
    received: bool,
    len: u32,
    _life: PhantomData<(&'a mut sys::svc_rqst, KBox<C>)>,
}

impl<C: Send + 'static> RecvRqst<'_, C> {
    /// The request `raw`, readied for a call: its reply pages an empty
    /// range where the kernel line wants one set, and nothing of the last
    /// request's context left.
    ///
    /// # Safety
    ///
    /// `raw` is the request the core passed to `xpo_recvfrom`, valid and
    /// the transport's alone for `'a`.
    pub(super) unsafe fn begin(raw: *mut sys::svc_rqst) -> Self {
        // SAFETY: per the contract.
        unsafe { sys::rpcrdma_rs_svc_recv_begin(raw) };
        // INVARIANT: per the contract; not received yet, no call.
        RecvRqst { raw, received: false, len: 0, _life: PhantomData }
    }

    /// Lets other threads look at the transport again
    /// (`svc_xprt_received`): once the work this thread takes is off the
    /// transport's queue. Done after `recvfrom` returns if not before.
    pub(crate) fn release_xprt(&mut self) {
        if core::mem::replace(&mut self.received, true) {
            return;
        }
        // SAFETY: the request is the thread's and its transport held by
        // the core (type invariant); once per call (the flag).
        unsafe { sys::svc_xprt_received((*self.raw).rq_xprt) };
    }

    /// Gives the thread `msg`, one RPC call (once): see
    /// [`RecvRqst::build_call`].
    pub(crate) fn set_call(&mut self, msg: &[u8]) -> Result {
        let len = u32::try_from(msg.len()).map_err(|_| errno::EMSGSIZE())?;
        self.build_call(len, |w| w.bytes(msg))
    }

    /// Gives the thread a call of `len` bytes (once), which `fill` writes
    /// in order, piece by piece, into the thread's own pages as the
    /// kernel's socket transports lay a call out; with the transport's
    /// addresses, `RQ_SECURE` set and `RQ_LOCAL` cleared. Fails with
    /// `EMSGSIZE` if the call does not fit the thread's pages (or is
    /// empty), `EBUSY` if the thread has its call; with `fill`'s error, or
    /// `EINVAL` if it wrote other than `len` bytes: then the thread has no
    /// call.
    pub(crate) fn build_call(&mut self, len: u32, fill: impl FnOnce(&mut CallWriter<'_>) -> Result) -> Result {
        if len == 0 || len > c_int::MAX as u32 {
            return Err(errno::EMSGSIZE());
        }
        if self.len != 0 {
            return Err(EBUSY);
        }
        // SAFETY: the request is the thread's (type invariant); the helper
        // only reads its call buffer's sizes.
        kernel::error::to_result(unsafe { sys::rpcrdma_rs_svc_recv_room(self.raw, len) })?;
        // INVARIANT: the room for `len` bytes was just checked.
        let mut w = CallWriter { raw: self.raw, at: 0, len, _life: PhantomData };
        fill(&mut w)?;
        if w.at != len {
            return Err(EINVAL);
        }
        // SAFETY: the request is the thread's; its call's `len` bytes are
        // written (`fill` wrote them all, checked just above).
        unsafe { sys::rpcrdma_rs_svc_recv_done(self.raw, len) };
        self.len = len;
        Ok(())
    }

    /// Gives the thread a call whose one data item arrived in `pages`
    /// (once), as svcrdma lays such a call out: `inline`, the RPC message
    /// sent inline, copied to the thread's head page, the head its first
    /// `pos` bytes and the tail the rest; the data item the first
    /// `page_len` bytes of `pages` (its XDR roundup included), which
    /// replace the thread's own pages after the head and become the
    /// thread's: nothing is copied. Addresses and flags as
    /// [`RecvRqst::build_call`] sets them. `page_len` must need every
    /// page of `pages`. Fails with `EMSGSIZE` if the call does not fit
    /// the thread's pages, `EBUSY` if the thread has its call: then the
    /// pages are dropped and the thread has no call. The caller sees to
    /// it that no device writes the pages any more (the R/W operation
    /// that filled them ended): from here they are the call.
    pub(crate) fn set_call_item(&mut self, inline: &[u8], pos: u32, pages: OwnedPages, page_len: u32) -> Result {
        let inline_len = u32::try_from(inline.len()).map_err(|_| errno::EMSGSIZE())?;
        let len = inline_len.checked_add(page_len).filter(|&l| l <= c_int::MAX as u32).ok_or(errno::EMSGSIZE())?;
        if self.len != 0 {
            return Err(EBUSY);
        }
        let raw = pages.raw_pages();
        let npages = u32::try_from(raw.len()).map_err(|_| errno::EMSGSIZE())?;
        // SAFETY: the request is the thread's (type invariant); `inline` is
        // readable for `inline_len` bytes; `raw` names `npages` pages
        // `pages` holds a reference of each (its invariant), given up
        // below only if the helper took them.
        let r = unsafe { sys::rpcrdma_rs_svc_recv_item(self.raw, inline.as_ptr(), inline_len, pos, raw.as_ptr(), npages, page_len) };
        kernel::error::to_result(r)?;
        // The helper took the references over: the request's pages now.
        pages.give_up();
        self.len = len;
        Ok(())
    }

    /// Keeps `ctxt` with the call, for its `sendto` ([`SendRqst::ctxt`]);
    /// one set before for this call is dropped. The core gives it back to
    /// the class's `xpo_release_ctxt` when the thread is done with the
    /// call, deferred or not.
    pub(crate) fn set_ctxt(&mut self, ctxt: KBox<C>) {
        let new = KBox::into_raw(ctxt).cast::<c_void>();
        // SAFETY: the request is the thread's (type invariant); its context
        // is null or a `KBox<C>` of ours, replaced here.
        let old = unsafe { core::mem::replace(&mut (*self.raw).rq_xprt_ctxt, new) };
        // SAFETY: as above: null or a `KBox<C>` set by this type, no longer
        // named by the request.
        unsafe { free_ctxt::<C>(old) };
    }

    /// Ends the call: the transport released, and the length of the call
    /// the thread got (0: none) as the core wants it.
    pub(super) fn finish(mut self) -> c_int {
        self.release_xprt();
        // At most `c_int::MAX` (`set_call`).
        self.len as c_int
    }
}

/// Writes a call into a thread's pages, in order ([`RecvRqst::build_call`]).
///
/// # Invariants
///
/// `raw` is the thread's request, exclusively the writer's while it
/// lives, its call buffer checked to have room for `len` bytes; `at <=
/// len` bytes are written.
pub(crate) struct CallWriter<'r> {
    raw: *mut sys::svc_rqst,
    at: u32,
    len: u32,
    _life: PhantomData<&'r mut sys::svc_rqst>,
}

impl CallWriter<'_> {
    /// Room for `n` more bytes, or `EINVAL`.
    fn take(&mut self, n: usize) -> Result<(u32, u32)> {
        let n = u32::try_from(n).map_err(|_| EINVAL)?;
        match self.at.checked_add(n) {
            Some(end) if end <= self.len => {
                let at = core::mem::replace(&mut self.at, end);
                Ok((at, n))
            }
            _ => Err(EINVAL),
        }
    }

    /// Appends `b`. Fails with `EINVAL` past the call's length.
    pub(crate) fn bytes(&mut self, b: &[u8]) -> Result {
        let (at, n) = self.take(b.len())?;
        // SAFETY: `at + n` is within the room checked for the call (type
        // invariant, `take`); `b` is readable for `n` bytes.
        unsafe { sys::rpcrdma_rs_svc_recv_put(self.raw, at, b.as_ptr(), n) };
        Ok(())
    }

    /// Appends `n` zero bytes. Fails with `EINVAL` past the call's length.
    pub(crate) fn zeros(&mut self, n: u32) -> Result {
        let (at, n) = self.take(n as usize)?;
        // SAFETY: as in `bytes`; a null source writes zeros.
        unsafe { sys::rpcrdma_rs_svc_recv_put(self.raw, at, core::ptr::null(), n) };
        Ok(())
    }

    /// Appends `len` bytes of `page` from `offset`. Fails with `EINVAL`
    /// past the page's end or the call's length.
    pub(crate) fn page(&mut self, page: &OwnedPage, offset: u32, len: u32) -> Result {
        if !page::in_page(offset, len) {
            return Err(EINVAL);
        }
        let (at, n) = self.take(len as usize)?;
        // SAFETY: as in `bytes`; the bytes lie inside the page (checked),
        // which `page` keeps allocated.
        unsafe { sys::rpcrdma_rs_svc_recv_put_page(self.raw, at, page.as_raw(), offset, n) };
        Ok(())
    }
}

/// Frees a call context `RecvRqst::set_ctxt` stored.
///
/// # Safety
///
/// `ctxt` is null or a `KBox<C>` made by [`RecvRqst::set_ctxt`] that
/// nothing names any more.
pub(super) unsafe fn free_ctxt<C>(ctxt: *mut c_void) {
    // SAFETY: per the contract.
    drop(unsafe { take_ctxt::<C>(ctxt) });
}

/// The context `ctxt`, owned again: `None` if null.
///
/// # Safety
///
/// As for [`free_ctxt`].
pub(super) unsafe fn take_ctxt<C>(ctxt: *mut c_void) -> Option<KBox<C>> {
    if ctxt.is_null() {
        return None;
    }
    // SAFETY: per the contract, a `KBox<C>` given up by `set_ctxt`, which
    // nothing names any more: owned here once.
    Some(unsafe { KBox::from_raw(ctxt.cast::<C>()) })
}

/// A thread's request while its reply is encoded (`xpo_result_payload`),
/// with the context of type `C` its `recvfrom` kept.
///
/// # Invariants
///
/// `raw` is the calling thread's request, exclusively the transport's for
/// `'a` (the call); its `rq_xprt_ctxt` is null or a `KBox<C>`
/// [`RecvRqst::set_ctxt`] stored, which nothing else reaches meanwhile.
pub(crate) struct PayloadRqst<'a, C> {
    raw: *mut sys::svc_rqst,
    _life: PhantomData<(&'a mut sys::svc_rqst, &'a mut C)>,
}

impl<C> PayloadRqst<'_, C> {
    /// # Safety
    ///
    /// `raw` is the request the core passed to `xpo_result_payload`, valid
    /// and the transport's alone for `'a`, its context null or a
    /// `KBox<C>` of this class's `recvfrom`.
    pub(super) unsafe fn new(raw: *mut sys::svc_rqst) -> Self {
        // INVARIANT: per the contract.
        PayloadRqst { raw, _life: PhantomData }
    }

    /// The context the call's `recvfrom` kept, if it kept one.
    pub(crate) fn ctxt_mut(&mut self) -> Option<&mut C> {
        // SAFETY: the request is the thread's (type invariant); its context
        // is null or a live `KBox<C>` nothing else reaches during `'a`,
        // borrowed mutably through `self`.
        unsafe { (*self.raw).rq_xprt_ctxt.cast::<C>().as_mut() }
    }
}

/// A thread's request in `sendto`, with its reply encoded, and the
/// context of type `C` its `recvfrom` kept.
///
/// # Invariants
///
/// `raw` is the calling thread's request, exclusively the transport's for
/// `'a` (the `xpo_sendto` call); `rq_res` describes the encoded reply; its
/// `rq_xprt_ctxt` is null or a `KBox<C>` [`RecvRqst::set_ctxt`] stored,
/// which the core does not free before the call returns.
pub(crate) struct SendRqst<'a, C> {
    raw: *mut sys::svc_rqst,
    _life: PhantomData<(&'a sys::svc_rqst, &'a C)>,
}

impl<C> SendRqst<'_, C> {
    /// # Safety
    ///
    /// `raw` is the request the core passed to `xpo_sendto`, valid and the
    /// transport's alone for `'a`, its context null or a `KBox<C>` of
    /// this class's `recvfrom`.
    pub(super) unsafe fn new(raw: *mut sys::svc_rqst) -> Self {
        // INVARIANT: per the contract.
        SendRqst { raw, _life: PhantomData }
    }

    /// The context the call's `recvfrom` kept, if it kept one.
    pub(crate) fn ctxt(&self) -> Option<&C> {
        // SAFETY: the request is the thread's (type invariant); its context
        // is null or a live `KBox<C>`, not freed before `'a` ends.
        unsafe { (*self.raw).rq_xprt_ctxt.cast::<C>().as_ref() }
    }

    /// The call's XID, as it came on the wire (`rq_xid`, set by the core
    /// from the call).
    pub(crate) fn xid(&self) -> u32 {
        // SAFETY: the request is the thread's (type invariant); one field.
        u32::from_be(unsafe { (*self.raw).rq_xid })
    }

    /// Bytes of the encoded reply (`rq_res.len`).
    pub(crate) fn reply_len(&self) -> u32 {
        // SAFETY: as in `xid`.
        unsafe { (*self.raw).rq_res.len }
    }

    /// Where the reply's byte `at` lies: its page, the offset there, and
    /// how many of the reply's bytes follow contiguously in that page, if
    /// the page is one of the reply's own, which the core lets go once
    /// `sendto` returns and never writes again: a reference of the page
    /// keeps these bytes as they are. `None` for a byte past the reply or
    /// elsewhere (to be copied, then).
    pub(crate) fn reply_piece(&self, at: u32) -> Option<(PageRef<'_, Outbound>, u32, u32)> {
        let mut page = core::ptr::null_mut();
        let mut offset = 0u32;
        // SAFETY: the request is the thread's and `rq_res` its reply (type
        // invariant); the helper reads them and writes only the two
        // out-parameters.
        let n = unsafe { sys::rpcrdma_rs_svc_reply_piece(self.raw, at, &mut page, &mut offset) };
        let n = u32::try_from(n).ok().filter(|&n| n > 0)?;
        // SAFETY: a page of the reply's (the helper checked), held by the
        // request until the core lets it go after `sendto`, so for at
        // least the borrow of `self`; the device may read it, and it is no
        // lender's.
        let page = unsafe { PageRef::new(page, ANY_OWNER) }?;
        Some((page, offset, n))
    }

    /// Copies the reply into the start of `dst`; returns its length.
    /// Fails with `EMSGSIZE` if it does not fit.
    pub(crate) fn copy_reply(&self, dst: &mut [u8]) -> Result<usize> {
        let len = self.reply_len();
        if len as usize > dst.len() {
            return Err(errno::EMSGSIZE());
        }
        self.copy_reply_at(0, dst.get_mut(..len as usize).unwrap_or_default())?;
        Ok(len as usize)
    }

    /// Copies the reply's bytes from `offset` on into all of `dst`. Fails
    /// with `EINVAL` if the reply has fewer.
    pub(crate) fn copy_reply_at(&self, offset: u32, dst: &mut [u8]) -> Result {
        let len = u32::try_from(dst.len()).map_err(|_| kernel::error::code::EINVAL)?;
        match offset.checked_add(len) {
            Some(end) if end <= self.reply_len() => {}
            _ => return Err(kernel::error::code::EINVAL),
        }
        // SAFETY: the request is the thread's and `rq_res` its reply (type
        // invariant); `dst` is writable for `len` bytes, and the function
        // bounds the copy by the buffer's parts.
        let rc = unsafe {
            sys::read_bytes_from_xdr_buf(
                core::ptr::addr_of_mut!((*self.raw).rq_res),
                offset,
                dst.as_mut_ptr().cast(),
                len,
            )
        };
        kernel::error::to_result(rc)
    }
}
