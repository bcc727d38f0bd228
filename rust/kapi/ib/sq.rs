// SPDX-License-Identifier: GPL-2.0

//! The Send queue of a connection: Sends numbered in the order they are
//! posted, and the rule that keeps their buffers safe. The queue pair
//! completes work requests in order, so a completion of the Send numbered
//! `n` (signalled, or flushed) proves every Send up to `n` done; a buffer
//! is taken for a new Send only if its last Send is numbered no higher
//! than the last one known done. That is all the mechanism needs: which
//! buffer a Send uses, when it asks for a completion and how many work
//! requests may be outstanding are the owner's [`SendPolicy`], whose
//! answers can make a Send fail or wait, never reach a buffer the device
//! still reads.
//!
//! Also here: the liveness probe's work request.

use core::{marker::PhantomData, ptr, sync::atomic::Ordering};

use kernel::{
    error::{
        code::{EBUSY, EINVAL},
        Error, Result,
    },
    ffi::c_int,
};

use super::{
    buf::{BufState, DmaBuf, Fill, SendWriter},
    conn::Conn,
    events::{completion, Events},
    cq::Completion,
    qp::PostError,
    token::NO_RW,
};
use crate::{
    kapi::{errno, trace},
    sys,
};

/// Which buffer a Send uses, when it asks for a completion and how full
/// the Send queue may get: the owner's, called under the lock that orders
/// Sends (calls never overlap; they must not sleep). A wrong answer can
/// make a Send fail or wait, never reach a buffer the device still reads:
/// such a buffer is refused whatever the policy says.
pub(crate) trait SendPolicy: Send {
    /// A Send with `wrs` work requests (itself and the REG_MRs chained in
    /// front) is to be posted: the buffer it uses, or `None` to make it
    /// fail with `ENOBUFS` (no buffer idle, or no room in the queue).
    fn take(&mut self, wrs: usize) -> Option<usize>;

    /// The Send in buffer `index` (`mapped`: it maps pages) is about to be
    /// posted: true to ask for its completion. Every Send posted before a
    /// signalled one is known done once that one completes; a buffer is
    /// free again only then.
    fn signal(&mut self, index: usize, mapped: bool) -> bool;

    /// It was posted, with `wrs` work requests.
    fn posted(&mut self, index: usize, wrs: usize, mapped: bool);

    /// A completion of the Send in buffer `index` arrived (signalled, or
    /// flushed): it and every Send before it are done. Returns how many
    /// buffers that gives back (for the owner's accounting).
    fn completed(&mut self, index: usize) -> usize;

    /// Takes `wrs` send queue slots for work requests of no Send buffer
    /// (an RDMA Read or Write), if there is room.
    fn reserve(&mut self, wrs: usize) -> bool;

    /// Gives back slots [`SendPolicy::reserve`] took, once their work
    /// requests completed.
    fn unreserve(&mut self, wrs: usize);
}

/// What the lock that orders Sends protects.
///
/// # Invariants
///
/// The send queue holds at most `posted_wrs - done_wrs + rw_wrs <= cap`
/// work requests of Send chains and R/W operations: `posted_wrs` counts
/// those of every Send chain posted, `done_wrs` those of the chains up to
/// the last Send known done, `rw_wrs` those reserved for R/W operations
/// posted alone. LOCAL_INVs (one per region at most) and the probe and the
/// drain have room of their own: so the drain always finds room, whatever
/// the owner's policy says.
pub(crate) struct SqLocked<P> {
    /// The number of the last Send posted (0: none yet).
    last_seq: u64,
    pub(super) cap: usize,
    posted_wrs: u64,
    done_wrs: u64,
    rw_wrs: usize,
    pub(super) policy: P,
}

impl<P> SqLocked<P> {
    pub(super) fn new(policy: P) -> Self {
        // INVARIANT: nothing posted, and no room until the queue pair is
        // made.
        SqLocked { last_seq: 0, cap: 0, posted_wrs: 0, done_wrs: 0, rw_wrs: 0, policy }
    }

    /// Whether `wrs` more work requests fit in the room kapi keeps.
    #[inline(always)]
    fn fits(&self, wrs: usize) -> bool {
        // `done_wrs <= posted_wrs`: both count the same chains, in order.
        let in_use = self.posted_wrs.wrapping_sub(self.done_wrs) as usize;
        in_use.saturating_add(self.rw_wrs).saturating_add(wrs) <= self.cap
    }
}

/// A Send that was posted: its number, and whether it maps pages.
pub(super) struct Posted {
    pub(super) seq: u64,
    pub(super) mapped: bool,
    pub(super) signaled: bool,
}

/// Why a post failed, and whether part of its chain reached the queue pair
/// (which is then in the error state, see [`Conn::post_send`]).
pub(super) struct PostFailed {
    pub(super) err: Error,
    pub(super) partial: bool,
}

impl From<Error> for PostFailed {
    fn from(err: Error) -> Self {
        PostFailed { err, partial: false }
    }
}

/// The liveness probe's work request; see [`Conn::probe`].
///
/// # Invariants
///
/// Its one pointer, `wr.wr_cqe`, is null or the connection's own
/// `probe_cqe`, in the same pinned allocation.
pub(super) struct ProbeWr(pub(super) sys::ib_rdma_wr);

// SAFETY: its one pointer names the connection's own probe CQE, in the same
// pinned allocation (type invariant).
unsafe impl Send for ProbeWr {}

/// What puts work requests in front of a Send: given the Send's, it links
/// them and returns the chain's head (`None`: the chain cannot be built).
/// Its [`Chain::chain`] is `#[inline(always)]`, inlined into the post
/// whatever its size (see [`Fill`]).
///
/// # Safety
///
/// The chain [`Chain::chain`] returns is posted as it is: every work
/// request in it must be one the connection owns and no one else reads or
/// posts (handed off, not posted), live until the queue pair is done with
/// it, pointing only at memory that is (the connection's, or pages a
/// token holds references of); it ends with `send`, and holds as many
/// work requests as the post was told (`wrs`). Only kapi implements it.
pub(super) unsafe trait Chain {
    /// Links the work requests in front of `send`.
    fn chain(self, send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr>;
}

/// No work request in front of the Send: the chain is the Send alone.
pub(super) struct NoChain;

// SAFETY: the chain is `send` alone, which the post built and owns.
unsafe impl Chain for NoChain {
    #[inline(always)]
    fn chain(self, send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr> {
        Some(send)
    }
}

impl<V: Events> Conn<V> {
    /// Posts a Send that `fill` builds, behind the REG_MR work requests
    /// `chain` puts in front of it (given the Send's work request, it
    /// returns the chain's head, with `wrs` requests in all); the Send
    /// invalidates the peer's `invalidate` rkey if given. A writer in
    /// `Mapping` mode maps pages of the lender `owner`. A Send that maps
    /// the lender's pages in place always asks for its completion,
    /// whatever the policy says: its token waits for it.
    ///
    /// On failure nothing was posted, unless `partial` says the chain
    /// reached the queue pair only in part: the Send itself was not
    /// posted, and the regions its REG_MRs registered must be kept out of
    /// use, and the queue pair moved to the error state (so that no region
    /// it registered is reachable by the peer) before their pages go back:
    /// the caller's, outside any spinlock (moving a queue pair's state may
    /// sleep). Inlined into each caller, whose fill is its own.
    ///
    /// `carried_rw` (`NO_RW`: none) is an R/W operation `chain` put in
    /// front of the Send that the Send's completion destroys: the caller
    /// hands its token over if the post succeeds. Such a Send, which reads
    /// pages through the operation, always asks for its completion too.
    #[inline(always)]
    pub(super) fn post_send<M>(
        &self,
        owner: u64,
        wrs: usize,
        chain: impl Chain,
        invalidate: Option<u32>,
        carried_rw: u16,
        fill: impl Fill<M>,
    ) -> core::result::Result<Posted, PostFailed> {
        let objs = self.objs.as_ref().ok_or_else(errno::ENOTCONN)?;
        let qp = objs.qp.as_ref().ok_or_else(errno::ENOTCONN)?;
        let device = objs.device();
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN().into());
        }
        // Taking a buffer, numbering the Send and posting it happen under
        // one hold of the lock, so that numbers follow the queue pair's
        // order.
        let mut g = self.sq.lock();
        // The queue's own bound first, whatever the policy answers.
        if !g.fits(wrs) {
            return Err(errno::ENOBUFS().into());
        }
        let index = g.policy.take(wrs).ok_or_else(errno::ENOBUFS)?;
        // The buffer itself, not its slot in the vector: its address is
        // then read once, not again after every atomic operation below.
        let buf: &DmaBuf = self.sends.get(index).map(|b| &**b).ok_or(EINVAL)?;
        // The rule: only a buffer whose last Send is done (`done_seq` is
        // written under this lock).
        let old_seq = buf.posted_seq.load(Ordering::Relaxed);
        if old_seq > self.done_seq.load(Ordering::Relaxed) {
            return Err(EBUSY.into());
        }
        // Its last Send's completion has not destroyed the R/W operation
        // it carried yet. (Never: that completion comes before any that
        // could have made the Send known done, and destroys it then.)
        if buf.carried_rw.load(Ordering::Relaxed) != NO_RW {
            return Err(EBUSY.into());
        }
        // SAFETY: the buffer's last Send (if any) is numbered no higher
        // than one known done (checked above), and the queue pair
        // completes in order: the device is done with it.
        let mut b = unsafe { buf.cell.lease_done() }.ok_or(EBUSY)?;
        // Pages its last Send mapped and no completion of its own
        // unmapped: the device is done with them too.
        // (`mapped` is written only under this lock: a load and a store,
        // no locked exchange.)
        if buf.mapped.load(Ordering::Relaxed) {
            buf.mapped.store(false, Ordering::Relaxed);
            buf.unmap_unposted(&mut b.pages);
        }
        let mapped = match self.fill_send(buf, &mut b, device, objs.lkey, owner, invalidate, fill) {
            Ok(mapped) => mapped,
            Err(e) => {
                buf.unmap_unposted(&mut b.pages);
                return Err(e.into());
            }
        };
        let send_wr = &raw mut b.send_wr;
        let Some(head) = chain.chain(send_wr) else {
            buf.unmap_unposted(&mut b.pages);
            return Err(EINVAL.into());
        };
        let reads = mapped || carried_rw != NO_RW;
        let signaled = g.policy.signal(index, reads) || reads;
        b.send_wr.send_flags = if signaled { sys::ib_send_flags_IB_SEND_SIGNALED as c_int } else { 0 };
        // Numbered before the post: its completion may come before the post
        // returns, and waits for this lock to read the number.
        let seq = g.last_seq.wrapping_add(1);
        buf.posted_seq.store(seq, Ordering::Relaxed);
        buf.mapped.store(mapped, Ordering::Relaxed);
        b.hand_off();
        // A test hook: post the chain without its Send, as if the device
        // had taken only part of it.
        let posted = if !ptr::eq(head, send_wr) && self.events.inject_partial_post() {
            // SAFETY: the chain's WRs are ours (handed off, not posted):
            // its `next` pointers are read and one is cut.
            unsafe { post_without_last(qp, head) }
        } else {
            // SAFETY: the Send points at the handed-off buffer and at pages
            // its mapping holds references of; what `chain` put in front of
            // it is as valid (`Chain`'s contract).
            unsafe { qp.post_send(head) }
        };
        if let Err(PostError { err, bad }) = posted {
            // The Send is the last of the chain: if it is where posting
            // stopped, whatever came before it was posted.
            let partial = !ptr::eq(bad, head.cast_const());
            buf.posted_seq.store(old_seq, Ordering::Relaxed);
            buf.mapped.store(false, Ordering::Relaxed);
            // SAFETY: the post failed at or before the Send: the device
            // never saw it.
            if let Some(mut b) = unsafe { buf.cell.take_back() } {
                buf.unmap_unposted(&mut b.pages);
            }
            drop(g);
            if partial {
                // The connection is no use any more. The queue pair is not
                // moved to the error state here: that may sleep, and the
                // caller may hold a spinlock. Whoever ends the token whose
                // regions the chain registered does it first
                // (`release_unposted`).
                return Err(PostFailed { err: errno::ENOTCONN(), partial });
            }
            return Err(PostFailed { err, partial });
        }
        g.last_seq = seq;
        // INVARIANT: the chain's work requests are counted in.
        g.posted_wrs = g.posted_wrs.wrapping_add(wrs as u64);
        buf.wrs_end.store(g.posted_wrs, Ordering::Relaxed);
        // Under the lock its completion takes first.
        buf.carried_rw.store(carried_rw, Ordering::Relaxed);
        // After the post: a Receive that reads a number finds every Send
        // up to it posted (see `RemoteInv`).
        self.sent_seq.store(seq, Ordering::Release);
        g.policy.posted(index, wrs, mapped);
        drop(g);
        Ok(Posted { seq, mapped, signaled })
    }

    /// Builds a Send in `b` (the buffer `buf`, leased): `fill` writes the
    /// message, then the work request gets its SGEs and opcode. Returns
    /// whether the message maps pages.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn fill_send<M>(
        &self,
        buf: &DmaBuf,
        b: &mut BufState,
        device: &super::Device,
        lkey: u32,
        owner: u64,
        invalidate: Option<u32>,
        fill: impl Fill<M>,
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
            owner,
            device,
            dma: buf.dma,
            lkey,
            _mode: PhantomData,
        };
        let filled = fill.fill(&mut w);
        // The buffer mapped no page before (unmapped when it was taken):
        // whether the Send maps pages is whether `fill` mapped some.
        let (used, nsge, mapped) = (w.used, w.n, w.pages.n > 0);
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

    /// A Send completion (signalled, or flushed) of buffer `buf`: every
    /// Send up to its number is done. Returns what the policy reclaimed.
    #[inline(always)]
    fn send_completed(&self, buf: &DmaBuf) -> usize {
        let mut g = self.sq.lock();
        let seq = buf.posted_seq.load(Ordering::Relaxed);
        let newer = seq > self.done_seq.load(Ordering::Relaxed);
        if newer {
            // Pages this Send mapped go now: the device is done with them
            // (its own completion), and nobody can take the buffer while
            // the lock is held.
            if buf.mapped.load(Ordering::Relaxed) {
                buf.mapped.store(false, Ordering::Relaxed);
                // SAFETY: its Send completed: the device is done with it.
                if let Some(mut b) = unsafe { buf.cell.take_back() } {
                    buf.unmap_pages(&mut b.pages);
                }
            }
            // INVARIANT: written with the lock held; the queue pair
            // completes in order, so every chain up to this one is done
            // (and the buffer's count is of its last Send, this one's).
            self.done_seq.store(seq, Ordering::Release);
            g.done_wrs = g.done_wrs.max(buf.wrs_end.load(Ordering::Relaxed)).min(g.posted_wrs);
        }
        // The R/W operation chained in front of this Send is done with it
        // (the queue pair completes in order): this completion destroys
        // it, its token having gone with the post. The completion is the
        // buffer's last Send's: the buffer is taken again only once a
        // completion of that Send or a later one came, and the CQ hands
        // them over in order, that Send's first.
        let rw = buf.carried_rw.swap(NO_RW, Ordering::Relaxed);
        let n = g.policy.completed(buf.index);
        drop(g);
        if rw != NO_RW {
            if let Ok(qp) = self.qp() {
                self.rw_end(qp, rw);
            }
        }
        if newer && self.send_waiters.load(Ordering::Acquire) > 0 {
            self.send_wait.notify_all();
        }
        n
    }

    /// Waits until the Send numbered `seq` is done. Sleeps; the wait is
    /// bounded by the queue pair's retry limit (a dead connection flushes
    /// every Send).
    pub(super) fn wait_send(&self, seq: u64) {
        if self.done_seq.load(Ordering::Acquire) >= seq {
            return;
        }
        self.send_waiters.fetch_add(1, Ordering::SeqCst);
        let mut g = self.sq.lock();
        while self.done_seq.load(Ordering::Acquire) < seq {
            self.send_wait.wait(&mut g);
        }
        drop(g);
        self.send_waiters.fetch_sub(1, Ordering::SeqCst);
    }

    /// Takes `wrs` send queue slots for an R/W operation, if the policy
    /// has room.
    pub(super) fn reserve_wrs(&self, wrs: usize) -> bool {
        let mut g = self.sq.lock();
        if !g.fits(wrs) || !g.policy.reserve(wrs) {
            return false;
        }
        // INVARIANT: counted until `unreserve_wrs`.
        g.rw_wrs = g.rw_wrs.saturating_add(wrs);
        true
    }

    /// Gives back what [`Conn::reserve_wrs`] took, once its work requests
    /// completed (or were flushed).
    pub(super) fn unreserve_wrs(&self, wrs: usize) {
        let mut g = self.sq.lock();
        g.rw_wrs = g.rw_wrs.saturating_sub(wrs);
        g.policy.unreserve(wrs)
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
            // SAFETY: a chain of one failed: the device never saw the WR.
            drop(unsafe { self.probe.take_back() });
            return Err(e.err);
        }
        Ok(true)
    }
}

/// Posts the chain from `head` without its last work request, and fails
/// as if the device had refused that one: what a post that stops part of
/// the way leaves (a test hook). A chain of one work request is not
/// posted at all.
///
/// # Safety
///
/// As for [`Qp::post_send`](super::qp::Qp::post_send) of the chain, which
/// is the caller's (built and not posted).
pub(super) unsafe fn post_without_last(
    qp: &super::qp::Qp,
    head: *mut sys::ib_send_wr,
) -> core::result::Result<(), PostError> {
    // SAFETY: the chain's WRs are valid and not posted (the contract).
    unsafe {
        if (*head).next.is_null() {
            return Err(PostError { err: kernel::error::code::EIO, bad: head });
        }
        let mut w = head;
        while !(*(*w).next).next.is_null() {
            w = (*w).next;
        }
        let last = (*w).next;
        (*w).next = ptr::null_mut();
        qp.post_send(head)?;
        Err(PostError { err: kernel::error::code::EIO, bad: last })
    }
}

/// Send completion handler.
///
/// # Safety
///
/// Called by ib_core for a Send posted by a [`Conn<V>`].
pub(super) unsafe extern "C" fn send_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, buf, wc) = unsafe { completion::<V>(cq, wc) };
    trace::wc_send(buf.index as u32, wc.status, wc.vendor_err, 0);
    let n = conn.send_completed(buf);
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
pub(super) unsafe extern "C" fn probe_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
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
