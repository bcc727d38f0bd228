// SPDX-License-Identifier: GPL-2.0

//! RPC tasks and requests (`struct rpc_task`, `struct rpc_rqst`) as the
//! transport's callbacks see them: borrowed for one call ([`Task`],
//! [`Rqst`]), or found by XID and pinned until completed ([`PinnedRqst`],
//! then [`ReleasedRqst`]).
//!
//! SUNRPC changes a request's fields from several threads under rules of
//! its own: none of these types makes a Rust reference to the whole C
//! structure; each reads or writes one field through the pointer, and says
//! whose the field is at that moment.

use core::{
    marker::PhantomData,
    ptr::{self, addr_of},
};

use kernel::{
    error::{Error, Result},
    ffi::{c_int, c_ulong},
    prelude::*,
    str::CStr,
};

use super::{
    storage::RqstBox,
    xdr::{in_head, read_once, write_xdr, XDRBUF_SPARSE_PAGES},
    XdrBuf, Xprt,
};
use crate::kapi::{compat, ib::Closed, page::Inbound};
use crate::sys;

/// An RPC task, borrowed for one callback.
///
/// # Invariants
///
/// `raw` is a live `rpc_task` for `'a` (the callback that received it).
pub(crate) struct Task<'a> {
    pub(super) raw: core::ptr::NonNull<sys::rpc_task>,
    pub(super) _life: PhantomData<&'a sys::rpc_task>,
}

/// An RPC request, borrowed for one callback.
///
/// # Invariants
///
/// `raw` is a live `rpc_rqst` of a transport of this module for `'a` (the
/// callback that received it), owned by the task acting for it, in an
/// `RqstBox` (see there: every request of this module's transports is).
pub(crate) struct Rqst<'a> {
    pub(super) raw: core::ptr::NonNull<sys::rpc_rqst>,
    pub(super) _life: PhantomData<&'a sys::rpc_rqst>,
}

/// A request found by XID and pinned: SUNRPC will not free or reuse it until
/// it is completed (or failed), which unpins it; dropping it unpins it and
/// leaves it waiting for its reply.
///
/// # Invariants
///
/// `raw` is an `rpc_rqst` of this module's transport (in an `RqstBox`)
/// found by `xprt_lookup_rqst` and pinned with `xprt_pin_rqst` under the
/// transport's queue lock; while `done` is false it is pinned (so live and
/// not reused), and `done` is set exactly when it is completed or
/// unpinned.
pub(crate) struct PinnedRqst {
    pub(super) raw: core::ptr::NonNull<sys::rpc_rqst>,
    pub(super) done: bool,
}

/// Output for [`Transport::print_stats`](super::Transport::print_stats).
///
/// # Invariants
///
/// `seq` is the `seq_file` SUNRPC passed to `print_stats`, live and ours to
/// write for `'a`.
pub(crate) struct StatsWriter<'a> {
    pub(super) seq: core::ptr::NonNull<sys::seq_file>,
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
    /// The tag of the request's storage (the slot index its transport gave
    /// it, see [`RqstStorage::new`](super::RqstStorage::new)).
    #[inline]
    pub(crate) fn tag(&self) -> usize {
        // SAFETY: the request is in an `RqstBox`, live for `'a` (type
        // invariant).
        unsafe { RqstBox::tag_of(self.raw) }
    }

    /// The XID as it goes on the wire (network byte order value).
    #[inline]
    pub(crate) fn xid_be(&self) -> u32 {
        // SAFETY (of the read): live for `'a`; the XID is set before the
        // request is sent and not changed while its task sends it.
        read_once!((*self.raw.as_ptr()).rq_xid)
    }

    /// Length of the marshalled call.
    #[inline]
    pub(crate) fn send_len(&self) -> usize {
        // SAFETY (of the read): live; the call buffer is the sending
        // task's.
        read_once!((*self.raw.as_ptr()).rq_snd_buf.len) as usize
    }

    /// Claims a congestion window slot; false if the window is full.
    pub(crate) fn get_cong(&self, xprt: Xprt<'_>) -> bool {
        // SAFETY: valid transport and request.
        unsafe { sys::xprt_request_get_cong(xprt.as_ptr(), self.raw.as_ptr()) }
    }

    /// True if this request was already sent on the current connection.
    pub(crate) fn sent_on_this_connection(&self, xprt: Xprt<'_>) -> bool {
        // SAFETY (of the read): live; the cookie is the sending task's.
        read_once!((*self.raw.as_ptr()).rq_connect_cookie) == xprt.connect_cookie()
    }

    /// True if a reply is expected (false for e.g. a GSS destroy context).
    #[inline]
    pub(crate) fn reply_expected(&self) -> bool {
        // SAFETY (of the reads): the request's task is valid while it
        // sends; its message's procedure, when there is one, is its RPC
        // program's static table entry. (SUNRPC's `rpc_reply_expected`,
        // read here: a call out to a C helper costs more than the loads.)
        let task = read_once!((*self.raw.as_ptr()).rq_task);
        let proc_ = read_once!((*task).tk_msg.rpc_proc);
        !proc_.is_null() && read_once!((*proc_).p_decode).is_some()
    }

    /// Records the time of transmission, from which SUNRPC's per-operation
    /// statistics (mountstats RTT and queue time) are measured.
    #[inline]
    pub(crate) fn stamp_xmit(&self) {
        // SAFETY: the field belongs to the sending task, which is us;
        // `ktime_get` may be called in any context.
        unsafe { *ptr::addr_of_mut!((*self.raw.as_ptr()).rq_xtime) = sys::ktime_get() }
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
        // SAFETY: the field belongs to the sending task, which is us.
        unsafe {
            let p = ptr::addr_of_mut!((*self.raw.as_ptr()).rq_xmit_bytes_sent);
            *p = (*p).wrapping_add(bytes);
        }
    }

    /// Fills in the missing pages of a reply buffer whose page array is
    /// sparse (`XDRBUF_SPARSE_PAGES`, NFSv3 GETACL): the transport is to
    /// allocate them, the upper layer frees them. Nothing for other
    /// requests.
    #[inline]
    pub(crate) fn fill_sparse_pages(&self) -> Result {
        // Looked at here, so that the usual request costs no call.
        // SAFETY (of the read): the reply buffer is the sending task's.
        if read_once!((*self.raw.as_ptr()).rq_rcv_buf.flags) & XDRBUF_SPARSE_PAGES == 0 {
            return Ok(());
        }
        // SAFETY: the request is the sending task's (type invariant), and so
        // is its reply buffer, whose page array has an entry for every page
        // of its page list.
        kernel::error::to_result(unsafe {
            sys::rpcrdma_rs_alloc_sparse_pages(ptr::addr_of_mut!((*self.raw.as_ptr()).rq_rcv_buf))
        })
    }

    /// Copies `out.len()` bytes of the call starting at `offset`. The
    /// usual case, bytes in the head, is inlined into each caller; the
    /// rest is a call.
    #[inline(always)]
    pub(crate) fn copy_call_at(&self, offset: u32, out: &mut [u8]) -> Result {
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: only the field's address is taken.
        let b = unsafe { addr_of!((*self.raw.as_ptr()).rq_snd_buf) };
        // SAFETY: the call buffer is the sending task's, stable while it
        // sends.
        if let Some(src) = unsafe { in_head(b, offset, out.len()) } {
            // SAFETY: the head holds `iov_len` readable bytes, of which
            // these `out.len()` are a part; `out` is another object.
            unsafe { ptr::copy_nonoverlapping(src, out.as_mut_ptr(), out.len()) };
            return Ok(());
        }
        self.copy_call_from_xdr(offset, out)
    }

    /// [`Rqst::copy_call_at`] of bytes not all in the head.
    #[inline(never)]
    fn copy_call_from_xdr(&self, offset: u32, out: &mut [u8]) -> Result {
        let len = u32::try_from(out.len()).map_err(|_| EINVAL)?;
        // SAFETY: only the field's address is taken.
        let b = unsafe { addr_of!((*self.raw.as_ptr()).rq_snd_buf) };
        // SAFETY: the call buffer is the sending task's, stable while it
        // sends; `out` is writable for `len` bytes; the function checks
        // the range.
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
        // SAFETY (of the read): set before the request is sent.
        read_once!((*self.raw.as_ptr()).rq_buffer).is_null()
    }

    /// The auth of the request's credential.
    #[inline]
    fn auth(&self) -> *mut sys::rpc_auth {
        // SAFETY (of the reads): a request being sent has its credential,
        // and the credential its auth, which outlive the send.
        let cred = read_once!((*self.raw.as_ptr()).rq_cred);
        read_once!((*cred).cr_auth)
    }

    /// False for security flavours that must see every byte (krb5i/krb5p):
    /// no direct data placement for them.
    #[inline]
    pub(crate) fn ddp_allowed(&self) -> bool {
        // `au_flags` holds bit numbers: DATATOUCH is bit 1, not the mask 1.
        const DATATOUCH: c_ulong = 1 << sys::RPCAUTH_AUTH_DATATOUCH;
        // SAFETY (of the read): the auth is live while the request is sent
        // (`auth`); the flags are read once, as `test_bit` reads them.
        let flags = read_once!((*self.auth()).au_flags);
        flags & DATATOUCH == 0
    }

    /// The security flavour of the request's credential (its auth's
    /// `au_flavor`: 1 for AUTH_UNIX, 390003..390005 for krb5, krb5i,
    /// krb5p), for trace events.
    pub(crate) fn auth_flavor(&self) -> u32 {
        // SAFETY (of the read): as in `ddp_allowed`.
        read_once!((*self.auth()).au_flavor)
    }
}

impl PinnedRqst {
    /// The tag of the request's storage.
    #[inline]
    pub(crate) fn tag(&self) -> usize {
        // SAFETY: pinned (so live), in an `RqstBox` (type invariant).
        unsafe { RqstBox::tag_of(self.raw) }
    }
}

/// A pinned request whose memory the transport gave back (made only with
/// its storage's [`Released`](crate::kapi::ib::Released) proof, by
/// [`RqstStorage::released`](super::RqstStorage::released)): it may take
/// its reply and be completed. Dropping it only unpins it.
///
/// # Invariants
///
/// `rqst` keeps [`PinnedRqst`]'s invariants (pinned, so live and not
/// reused, while not `done`), and nothing of its memory was in the
/// device's or the peer's reach when it was made: its reply buffers are
/// the reply path's to fill until it is completed. `closed` keeps its
/// storage's lender (`owner`) from lending anything meanwhile.
pub(crate) struct ReleasedRqst<'a> {
    rqst: PinnedRqst,
    owner: u64,
    // Dropped after `rqst` is completed (or unpinned): fields drop in
    // order, and the completing methods finish the request first.
    _closed: Closed<'a>,
}

impl<'a> ReleasedRqst<'a> {
    /// # Invariants
    ///
    /// Made only by the storage's `released`, given its lender closed.
    pub(super) fn new(rqst: PinnedRqst, closed: Closed<'a>) -> Self {
        ReleasedRqst { rqst, owner: closed.lender(), _closed: closed }
    }

    fn buf(&self, f: impl FnOnce(*mut sys::rpc_rqst) -> *const sys::xdr_buf) -> XdrBuf<'_, Inbound> {
        // INVARIANT: a reply buffer of the pinned request, the reply path's
        // to fill (type invariant).
        XdrBuf { raw: f(self.rqst.raw.as_ptr()), owner: self.owner, _life: PhantomData }
    }

    /// The reply buffer (`rq_rcv_buf`).
    pub(crate) fn reply_buf(&self) -> XdrBuf<'_, Inbound> {
        // SAFETY: only the field's address is taken.
        self.buf(|r| unsafe { addr_of!((*r).rq_rcv_buf) })
    }

    /// The buffer the reply is received into (`rq_private_buf`).
    pub(crate) fn receive_buf(&self) -> XdrBuf<'_, Inbound> {
        // SAFETY: only the field's address is taken.
        self.buf(|r| unsafe { addr_of!((*r).rq_private_buf) })
    }

    /// Shortens the head of the receive buffer to `len` bytes (nothing if
    /// it is not longer), so that what follows the head (the page list)
    /// comes right after the reply's first `len` bytes.
    pub(crate) fn trim_head(&mut self, len: u32) {
        let r = self.rqst.raw.as_ptr();
        // SAFETY: pinned; the reply buffers are ours to fill until
        // completion (type invariant); each field is written through the
        // pointer.
        unsafe {
            let head = ptr::addr_of_mut!((*r).rq_private_buf.head[0].iov_len);
            let Some(delta) = (*head).checked_sub(len as usize) else { return };
            *head = len as usize;
            let buflen = ptr::addr_of_mut!((*r).rq_private_buf.buflen);
            *buflen = (*buflen).saturating_sub(delta as u32);
            *ptr::addr_of_mut!((*r).rq_rcv_buf.head[0].iov_len) = len as usize;
            let buflen = ptr::addr_of_mut!((*r).rq_rcv_buf.buflen);
            *buflen = (*buflen).saturating_sub(delta as u32);
        }
    }

    /// Copies `data` into the receive buffer at `offset` (laid out as
    /// head, page list, tail); fails if it does not fit.
    #[inline]
    pub(crate) fn write_at(&mut self, offset: u32, data: &[u8]) -> Result {
        // SAFETY: pinned; the reply buffers are ours to fill until
        // completion; `write_xdr` bounds the copy by the buffer.
        let rc = unsafe { write_xdr(addr_of!((*self.rqst.raw.as_ptr()).rq_private_buf), offset, data) };
        if rc != 0 {
            Err(Error::from_errno(rc))
        } else {
            Ok(())
        }
    }

    /// The first word of the receive buffer's head, as on the wire (the
    /// XID of a reply the server wrote there); `None` if the head is
    /// shorter.
    pub(crate) fn head_word(&self) -> Option<u32> {
        let r = self.rqst.raw.as_ptr();
        // SAFETY: pinned; the reply buffers are ours until completion, and
        // no region names them any more (type invariant: the request was
        // released); the head is readable for `iov_len` bytes, of which
        // these are the first 4.
        unsafe {
            let head = ptr::addr_of!((*r).rq_private_buf.head[0]);
            if (*head).iov_len < 4 {
                return None;
            }
            Some(u32::from_be_bytes(ptr::read_unaligned((*head).iov_base.cast::<[u8; 4]>())))
        }
    }

    /// The receive buffer's room (`rq_private_buf.buflen`).
    fn room(&self) -> u32 {
        // SAFETY (of the read): pinned; ours until completion.
        read_once!((*self.rqst.raw.as_ptr()).rq_private_buf.buflen)
    }

    /// Completes the request with a reply of `len` bytes the caller placed
    /// in the receive buffer (copied with [`ReleasedRqst::write_at`] or written
    /// there by the server); never more than the buffer holds.
    pub(crate) fn complete_placed(mut self, len: u32) {
        let room = self.room();
        self.finish(len.min(room).min(c_int::MAX as u32) as c_int);
    }

    /// Completes a reply the server wrote whole into the Reply chunk
    /// (`written` bytes, already in the request's buffers).
    pub(crate) fn complete_reply_chunk(mut self, written: u32) {
        let room = self.room();
        self.finish(if written > room { -(sys::EIO as c_int) } else { written as c_int });
    }

    /// Copies `reply` into the request's receive buffer and completes it.
    pub(crate) fn complete_with(mut self, reply: &[u8]) {
        let len = u32::try_from(reply.len()).unwrap_or(u32::MAX);
        let copied = if len > self.room() {
            -(sys::EIO as c_int)
        } else {
            // SAFETY: the request is pinned, so its buffers stay;
            // `rq_private_buf` describes where SUNRPC wants reply bytes,
            // and the copy is bounded by it.
            match unsafe { write_xdr(addr_of!((*self.rqst.raw.as_ptr()).rq_private_buf), 0, reply) } {
                0 => len as c_int,
                _ => -(sys::EIO as c_int),
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
        let r = self.rqst.raw.as_ptr();
        // SAFETY: pinned in `lookup`; completes and unpins under queue_lock.
        // The task's status is the completing side's to set (SUNRPC's own
        // transports do so before `xprt_complete_rqst`).
        unsafe {
            if copied < 0 {
                let task = read_once!((*r).rq_task);
                *ptr::addr_of_mut!((*task).tk_status) = copied;
                sys::rpcrdma_rs_complete_and_unpin_rqst(r, 0);
            } else {
                sys::rpcrdma_rs_complete_and_unpin_rqst(r, copied);
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
