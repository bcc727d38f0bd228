// SPDX-License-Identifier: GPL-2.0

//! RPC tasks and requests (`struct rpc_task`, `struct rpc_rqst`) as the
//! transport's callbacks see them: borrowed for one call ([`Task`],
//! [`Rqst`]), or found by XID and pinned until completed ([`PinnedRqst`]).

use core::{
    marker::PhantomData,
    ptr::{self, NonNull},
};

use kernel::{
    error::{Error, Result},
    ffi::{c_int, c_ulong},
    prelude::*,
    str::CStr,
};

use super::{in_head, write_xdr, XdrBuf, Xprt, XDRBUF_SPARSE_PAGES};
use crate::kapi::{
    compat,
    ib::{Invalidated, SendDone},
};
use crate::sys;

/// An RPC task, borrowed for one callback.
///
/// # Invariants
///
/// `raw` is a live `rpc_task` for `'a` (the callback that received it).
pub(crate) struct Task<'a> {
    pub(super) raw: NonNull<sys::rpc_task>,
    pub(super) _life: PhantomData<&'a sys::rpc_task>,
}

/// An RPC request, borrowed for one callback.
///
/// # Invariants
///
/// `raw` is a live `rpc_rqst` of a transport of this module for `'a` (the
/// callback that received it), owned by the task acting for it.
pub(crate) struct Rqst<'a> {
    pub(super) raw: NonNull<sys::rpc_rqst>,
    pub(super) _life: PhantomData<&'a sys::rpc_rqst>,
}

/// A request found by XID and pinned: SUNRPC will not free or reuse it until
/// it is completed (or failed), which unpins it; dropping it unpins it and
/// leaves it waiting for its reply.
///
/// # Invariants
///
/// `raw` is an `rpc_rqst` found by `xprt_lookup_rqst` and pinned with
/// `xprt_pin_rqst` under the transport's queue lock; while `done` is false
/// it is pinned (so live and not reused), and `done` is set exactly when it
/// is completed or unpinned.
pub(crate) struct PinnedRqst {
    pub(super) raw: NonNull<sys::rpc_rqst>,
    pub(super) done: bool,
}

/// Output for [`Transport::print_stats`].
///
/// # Invariants
///
/// `seq` is the `seq_file` SUNRPC passed to `print_stats`, live and ours to
/// write for `'a`.
pub(crate) struct StatsWriter<'a> {
    pub(super) seq: NonNull<sys::seq_file>,
    pub(super) _life: PhantomData<&'a mut sys::seq_file>,
}

impl StatsWriter<'_> {
    /// Appends a NUL-terminated string.
    pub(crate) fn puts(&mut self, s: &CStr) {
        // SAFETY: `seq` is valid for the duration of the callback.
        unsafe { sys::__seq_puts(self.seq.as_ptr(), compat::cstr_ptr(s)) };
    }
}

impl Task<'_> {
    /// The raw pointer, used as the connect lock's owner cookie.
    pub(crate) fn as_ptr(&self) -> *mut sys::rpc_task {
        self.raw.as_ptr()
    }
}

impl Rqst<'_> {
    /// The request's address, to find the transport's state for it.
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    pub(super) fn get(&self) -> &sys::rpc_rqst {
        // SAFETY: valid for the callback (type invariant).
        unsafe { self.raw.as_ref() }
    }

    /// The XID as it goes on the wire (network byte order value).
    pub(crate) fn xid_be(&self) -> u32 {
        self.get().rq_xid
    }

    /// Length of the marshalled call.
    pub(crate) fn send_len(&self) -> usize {
        self.get().rq_snd_buf.len as usize
    }

    /// Claims a congestion window slot; false if the window is full.
    pub(crate) fn get_cong(&self, xprt: Xprt<'_>) -> bool {
        // SAFETY: valid transport and request.
        unsafe { sys::xprt_request_get_cong(xprt.as_ptr(), self.raw.as_ptr()) }
    }

    /// True if this request was already sent on the current connection.
    pub(crate) fn sent_on_this_connection(&self, xprt: Xprt<'_>) -> bool {
        self.get().rq_connect_cookie == xprt.connect_cookie()
    }

    /// True if a reply is expected (false for e.g. a GSS destroy context).
    #[inline]
    pub(crate) fn reply_expected(&self) -> bool {
        // SAFETY: the request's task is valid while it sends; its message's
        // procedure, when there is one, is its RPC program's static table
        // entry. (SUNRPC's `rpc_reply_expected`, read here: a call out to
        // a C helper costs more than the two loads.)
        unsafe {
            let proc_ = (*self.get().rq_task).tk_msg.rpc_proc;
            !proc_.is_null() && (*proc_).p_decode.is_some()
        }
    }

    /// Records the time of transmission, from which SUNRPC's per-operation
    /// statistics (mountstats RTT and queue time) are measured.
    #[inline]
    pub(crate) fn stamp_xmit(&self) {
        // SAFETY: the field belongs to the sending task, which is us;
        // `ktime_get` may be called in any context.
        unsafe { (*self.raw.as_ptr()).rq_xtime = sys::ktime_get() }
    }

    /// The ids of the request's task and its RPC client, as trace events
    /// print them (0 and `u32::MAX` without a task).
    pub(crate) fn task_ids(&self) -> (u32, u32) {
        let (mut task, mut client) = (0, 0);
        // SAFETY: the request is the sending task's (type invariant); the
        // helper only reads it and writes the two integers.
        unsafe { sys::rpcrdma_rs_rqst_task_ids(self.raw.as_ptr(), &mut task, &mut client) };
        (task, client)
    }

    /// Accounts a transmission.
    pub(crate) fn sent(&self, bytes: usize) {
        // SAFETY: these fields belong to the sending task, which is us.
        unsafe {
            let r = &mut *self.raw.as_ptr();
            r.rq_xmit_bytes_sent = r.rq_xmit_bytes_sent.wrapping_add(bytes);
        }
    }
}

/// Which of a request's two buffers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// The call (`rq_snd_buf`).
    Call,
    /// The reply (`rq_rcv_buf`).
    Reply,
}

impl Rqst<'_> {
    /// Fills in the missing pages of a reply buffer whose page array is
    /// sparse (`XDRBUF_SPARSE_PAGES`, NFSv3 GETACL): the transport is to
    /// allocate them, the upper layer frees them. Nothing for other
    /// requests.
    #[inline]
    pub(crate) fn fill_sparse_pages(&self) -> Result {
        // Looked at here, so that the usual request costs no call.
        if self.get().rq_rcv_buf.flags & XDRBUF_SPARSE_PAGES == 0 {
            return Ok(());
        }
        // SAFETY: the request is the sending task's (type invariant), and so
        // is its reply buffer, whose page array has an entry for every page
        // of its page list.
        kernel::error::to_result(unsafe {
            sys::rpcrdma_rs_alloc_sparse_pages(&raw mut (*self.raw.as_ptr()).rq_rcv_buf)
        })
    }

    /// The call (`rq_snd_buf`) or reply (`rq_rcv_buf`) buffer.
    #[inline]
    pub(crate) fn buf(&self, which: Which) -> XdrBuf<'_> {
        let r = self.get();
        XdrBuf { raw: if which == Which::Call { &r.rq_snd_buf } else { &r.rq_rcv_buf } }
    }

    /// Copies `out.len()` bytes of the call starting at `offset`.
    #[inline]
    pub(crate) fn copy_call_at(&self, offset: u32, out: &mut [u8]) -> Result {
        let len = u32::try_from(out.len()).map_err(|_| EINVAL)?;
        if len == 0 {
            return Ok(());
        }
        let b = &self.get().rq_snd_buf;
        if let Some(src) = in_head(b, offset, out.len()) {
            // SAFETY: the head holds `iov_len` readable bytes, of which
            // these `out.len()` are a part; `out` is another object.
            unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        // SAFETY: `rq_snd_buf` is stable while the task sends; `out` is
        // writable for `len` bytes; the function checks the range.
        let rc = unsafe { sys::read_bytes_from_xdr_buf(b, offset, out.as_mut_ptr().cast(), len) };
        if rc != 0 {
            Err(Error::from_errno(rc))
        } else {
            Ok(())
        }
    }

    /// True for a backward reply (the callback service answering the server).
    #[inline]
    pub(crate) fn is_backchannel(&self) -> bool {
        // A backward call's request carries no `rq_buffer` (see
        // `rpcrdma_rs_bc_prepare`): its reply is what is being sent.
        self.get().rq_buffer.is_null()
    }

    /// False for security flavours that must see every byte (krb5i/krb5p):
    /// no direct data placement for them.
    #[inline]
    pub(crate) fn ddp_allowed(&self) -> bool {
        // `au_flags` holds bit numbers: DATATOUCH is bit 1, not the mask 1.
        const DATATOUCH: c_ulong = 1 << sys::RPCAUTH_AUTH_DATATOUCH;
        // SAFETY: a request being sent has its credential, and the
        // credential its auth; the flags are read once, as `test_bit`
        // reads them.
        let flags = unsafe { core::ptr::read_volatile(&raw const (*(*self.get().rq_cred).cr_auth).au_flags) };
        flags & DATATOUCH == 0
    }
}

/// Proof that a request's pages are the RPC's again: the peer can no longer
/// reach its memory regions and no Send reads its call. Completing a
/// request needs one ([`PinnedRqst::released`]).
pub(crate) struct Released {
    _inv: Invalidated,
    _sent: SendDone,
}

impl Released {
    /// Both halves of the proof.
    pub(crate) fn new(inv: Invalidated, sent: SendDone) -> Self {
        Released { _inv: inv, _sent: sent }
    }
}

impl PinnedRqst {
    /// The request's address, to find the transport's state for it.
    #[inline]
    pub(crate) fn addr(&self) -> usize {
        self.raw.as_ptr() as usize
    }

    /// The request, now that its regions are invalidated and its Send is
    /// done: only a released request can be completed.
    pub(crate) fn released(self, _proof: Released) -> ReleasedRqst {
        ReleasedRqst { rqst: self }
    }
}

/// A pinned request whose memory the transport gave back ([`Released`]): it
/// may take its reply and be completed. Dropping it only unpins it.
///
/// # Invariants
///
/// `rqst` keeps [`PinnedRqst`]'s invariants (pinned, so live and not
/// reused, while not `done`), and a [`Released`] proof was given up for it:
/// its regions are invalidated and no Send reads its call, so its reply
/// buffers are the reply path's to fill until it is completed.
pub(crate) struct ReleasedRqst {
    rqst: PinnedRqst,
}

impl ReleasedRqst {
    /// The reply buffer (`rq_rcv_buf`).
    pub(crate) fn reply_buf(&self) -> XdrBuf<'_> {
        // SAFETY: pinned (type invariant), so the request and its buffers
        // stay; only the reply path, which holds `self`, changes them.
        XdrBuf { raw: unsafe { &(*self.rqst.raw.as_ptr()).rq_rcv_buf } }
    }

    /// The buffer the reply is received into (`rq_private_buf`).
    pub(crate) fn receive_buf(&self) -> XdrBuf<'_> {
        // SAFETY: as for `reply_buf`.
        XdrBuf { raw: unsafe { &(*self.rqst.raw.as_ptr()).rq_private_buf } }
    }

    /// Shortens the head of the receive buffer to `len` bytes (nothing if
    /// it is not longer), so that what follows the head (the page list)
    /// comes right after the reply's first `len` bytes.
    pub(crate) fn trim_head(&mut self, len: u32) {
        // SAFETY: pinned; the reply buffers are ours to fill until
        // completion (type invariant).
        unsafe {
            let r = &mut *self.rqst.raw.as_ptr();
            let Some(delta) = r.rq_private_buf.head[0].iov_len.checked_sub(len as usize) else { return };
            r.rq_private_buf.head[0].iov_len = len as usize;
            r.rq_private_buf.buflen = r.rq_private_buf.buflen.saturating_sub(delta as u32);
            r.rq_rcv_buf.head[0].iov_len = len as usize;
            r.rq_rcv_buf.buflen = r.rq_rcv_buf.buflen.saturating_sub(delta as u32);
        }
    }

    /// Copies `data` into the receive buffer at `offset` (laid out as
    /// head, page list, tail); fails if it does not fit.
    #[inline]
    pub(crate) fn write_at(&mut self, offset: u32, data: &[u8]) -> Result {
        // SAFETY: pinned; the reply buffers are ours to fill until
        // completion; `write_xdr` bounds the copy by the buffer.
        let rc = unsafe { write_xdr(&(*self.rqst.raw.as_ptr()).rq_private_buf, offset, data) };
        if rc != 0 {
            Err(Error::from_errno(rc))
        } else {
            Ok(())
        }
    }

    /// Completes the request with a reply of `len` bytes the caller placed
    /// in the receive buffer (copied with [`ReleasedRqst::write_at`] or written
    /// there by the server); never more than the buffer holds.
    pub(crate) fn complete_placed(mut self, len: u32) {
        // SAFETY: pinned.
        let buflen = unsafe { (*self.rqst.raw.as_ptr()).rq_private_buf.buflen };
        self.finish(len.min(buflen).min(c_int::MAX as u32) as c_int);
    }

    /// Completes a reply the server wrote whole into the Reply chunk
    /// (`written` bytes, already in the request's buffers).
    pub(crate) fn complete_reply_chunk(mut self, written: u32) {
        // SAFETY: pinned.
        let buflen = unsafe { (*self.rqst.raw.as_ptr()).rq_private_buf.buflen };
        self.finish(if written > buflen { -(sys::EIO as c_int) } else { written as c_int });
    }
    /// Copies `reply` into the request's receive buffer and completes it.
    pub(crate) fn complete_with(mut self, reply: &[u8]) {
        let len = u32::try_from(reply.len()).unwrap_or(u32::MAX);
        // SAFETY: the request is pinned, so its buffers stay; `rq_private_buf`
        // describes where SUNRPC wants reply bytes, and the copy is bounded by
        // it (an oversize reply fails with an error instead).
        let copied = unsafe {
            let r = &*self.rqst.raw.as_ptr();
            if len > r.rq_private_buf.buflen || write_xdr(&r.rq_private_buf, 0, reply) != 0 {
                -(sys::EIO as c_int)
            } else {
                len as c_int
            }
        };
        self.finish(copied);
    }

    /// Fails the request with `err`.
    pub(crate) fn fail(mut self, err: Error) {
        self.finish(err.to_errno());
    }

    fn finish(&mut self, copied: c_int) {
        if self.rqst.done {
            return;
        }
        self.rqst.done = true;
        // SAFETY: pinned in `lookup`; completes and unpins under queue_lock.
        unsafe {
            if copied < 0 {
                (*(*self.rqst.raw.as_ptr()).rq_task).tk_status = copied;
                sys::rpcrdma_rs_complete_and_unpin_rqst(self.rqst.raw.as_ptr(), 0);
            } else {
                sys::rpcrdma_rs_complete_and_unpin_rqst(self.rqst.raw.as_ptr(), copied);
            }
        }
    }
}

impl Drop for PinnedRqst {
    fn drop(&mut self) {
        // A lookup that completes nothing (a late reply of an old
        // connection, for a call sent again on the new one) only unpins:
        // the request goes on waiting for the reply that counts.
        if !self.done {
            self.done = true;
            // SAFETY: pinned in `lookup` and not completed; unpins under
            // queue_lock.
            unsafe { sys::rpcrdma_rs_unpin_rqst(self.raw.as_ptr()) };
        }
    }
}
