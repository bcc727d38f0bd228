// SPDX-License-Identifier: GPL-2.0

//! Memory regions on a connection: making them, registering a lender's
//! pages into one for a token, posting the REG_MRs in front of the Send
//! that advertises them, and the one operation that ends a token
//! ([`Conn::release`]: invalidate its regions, wait for its Send) or
//! gives an unposted one back ([`Conn::release_unposted`]). Which region
//! is used next, and what becomes of one once it is idle again, are the
//! owner's (it gets the indices).

use core::{
    ops::Range,
    pin::Pin,
    ptr,
    sync::atomic::Ordering,
};

use kernel::{
    alloc::KBox,
    error::{
        code::{EINVAL, EIO},
        Result,
    },
};

use super::{
    buf::{Copying, Fill, Mapping},
    conn::Conn,
    events::Events,
    cq::Completion,
    mr::{note_invalidated, FrMr, Registered, SgWriter},
    rq::RemoteInv,
    sq::{Chain, NoChain, PostFailed},
    token::{InFlight, Invalidation, Lender, Registration, Released, SendFailed, NO_MR, NO_RW},
};
use crate::{
    kapi::{
        errno,
        page::{Dir, ANY_OWNER},
        trace,
    },
    sys,
};

/// How a Send went, for the owner's counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sent {
    /// It asked for a completion.
    pub(crate) signaled: bool,
    /// It carries DMA-mapped pages.
    pub(crate) mapped: bool,
}

impl<V: Events> Conn<V> {
    /// Region `index`, if it has been made.
    #[inline(always)]
    pub(super) fn mr(&self, index: usize) -> Option<&FrMr> {
        let p = self.mrs.get(index)?.load(Ordering::Acquire);
        // SAFETY: a non-null entry is a live, pinned region that only
        // `release_objects` frees, through `&mut` (type invariant); the
        // `Acquire` pairs with the `Release` that published it.
        unsafe { p.as_ref() }
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
    /// [`ConnBox::create_qp`](super::ConnBox::create_qp); returns the
    /// indices of those made, which are idle (the caller's free list takes
    /// them). Fails only if none could be made. Sleeps (allocates with
    /// `GFP_KERNEL`): call from process context, holding no spinlock.
    pub(crate) fn add_mrs(&self, n: usize) -> Result<Range<usize>> {
        let _g = self.mr_grow.lock();
        let start = self.mrs_made.load(Ordering::Relaxed);
        let end = start.saturating_add(n).min(self.mrs.len());
        if self.dying.load(Ordering::Acquire) {
            return Err(errno::ENOTCONN());
        }
        let pd = self.objs.as_ref().map(|o| &o.pd).ok_or_else(errno::ENOTCONN)?;
        let device = self.objs.as_ref().map(|o| o.device()).ok_or_else(errno::ENOTCONN)?;
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

    /// Makes the token of `lender` on this connection, holding no region
    /// yet: regions are registered into it ([`Conn::register`]) and the
    /// Send that advertises them takes it ([`Conn::send`]). Fails with
    /// `EBUSY` if a token of the lender exists.
    #[inline(always)]
    pub(crate) fn begin(&self, lender: &Lender) -> Result<Registration> {
        if self.objs.is_none() || self.dying.load(Ordering::Relaxed) {
            return Err(errno::ENOTCONN());
        }
        lender.lend(&self.handle)?;
        // INVARIANT: the lender is away for this token, of this connection,
        // which holds no region.
        Ok(Registration { lender: lender.id(), conn: self.conn_id(), head: NO_MR, count: 0 })
    }

    /// Registers memory region `index` (which the caller's free list says
    /// is idle) for `reg`: `fill` describes its pages (the token's
    /// lender's, at most the region's depth), which the peer accesses in
    /// direction `D`; `tag` goes in the iova's upper half. The REG_MR work
    /// request is posted in front of the Send that takes `reg`. On failure
    /// the region is idle again.
    #[inline(always)]
    pub(crate) fn register<D: Dir>(
        &self,
        reg: &mut Registration,
        index: usize,
        tag: u32,
        fill: impl FnOnce(&mut SgWriter<'_, D>) -> Result,
    ) -> Result<Registered> {
        if reg.conn != self.conn_id() || usize::from(reg.count) >= self.mrs.len() {
            return Err(EINVAL);
        }
        let mr = self.mr(index).ok_or(EINVAL)?;
        let mut m = mr.cell.lease().ok_or(EINVAL)?;
        let (seg, n) = mr.map::<D>(&mut m, reg.lender, tag, fill)?;
        trace::mr_map(tag, mr.index.into(), n as i32, seg.handle, seg.length, seg.offset, u32::from(D::INBOUND));
        m.next = reg.head;
        // INVARIANT: the region now belongs to the token, first in its
        // list, until invalidated or released; the count stays below the
        // number of regions (checked above).
        reg.head = mr.index;
        reg.count = reg.count.wrapping_add(1);
        m.hand_off();
        Ok(seg)
    }

    /// Sends one message: `fill` builds it, copying bytes into a pre-mapped
    /// buffer and mapping pages of the token's lender in place
    /// ([`SendWriter`](super::SendWriter)). The regions of `reg` are
    /// registered in front of the Send (one post: the queue pair's
    /// ordering makes them valid before the peer sees the message);
    /// `invalidate` makes it a Send With Invalidate of the peer's rkey.
    /// Returns the token of what the peer and the device may now reach,
    /// until [`Conn::release`]. Fails with `ENOBUFS` when the owner's
    /// policy finds no buffer or the send queue no room; on
    /// failure the registration comes back.
    ///
    /// `fill` runs under the spinlock that orders Sends: it must not sleep.
    #[inline(always)]
    pub(crate) fn send(
        &self,
        reg: Registration,
        invalidate: Option<u32>,
        fill: impl Fill<Mapping>,
    ) -> core::result::Result<(InFlight, Sent), SendFailed> {
        if reg.conn != self.conn_id() {
            return Err(SendFailed { err: EINVAL, reg });
        }
        match self.send_chained(&reg, 0, RegChain { conn: self, reg: &reg }, invalidate, false, fill) {
            Ok(r) => Ok(r),
            Err((err, _)) => Err(SendFailed { err, reg }),
        }
    }

    /// [`Conn::send`], with `chain` building the work requests in front of
    /// the Send (given the Send's, it returns the chain's head): the
    /// REG_MRs of `reg` and `extra` more. On a failure, whether part of
    /// the chain was posted (then the queue pair is in the error state and
    /// the regions are out of use until the connection goes).
    #[inline(always)]
    pub(super) fn send_chained(
        &self,
        reg: &Registration,
        extra: usize,
        chain: impl Chain,
        invalidate: Option<u32>,
        reads_pages: bool,
        fill: impl Fill<Mapping>,
    ) -> core::result::Result<(InFlight, Sent), (kernel::error::Error, bool)> {
        let wrs = usize::from(reg.count).wrapping_add(extra).wrapping_add(1);
        match self.post_send(reg.lender, wrs, chain, invalidate, reads_pages, fill) {
            // INVARIANT: the regions' REG_MRs went out with the Send; the
            // token moves into the `InFlight`.
            Ok(p) => Ok((
                InFlight {
                    lender: reg.lender,
                    conn: reg.conn,
                    head: reg.head,
                    count: reg.count,
                    mapped: p.mapped,
                    seq: p.seq,
                    rw: NO_RW,
                },
                Sent { signaled: p.signaled, mapped: p.mapped },
            )),
            Err(PostFailed { err, partial }) => {
                if partial {
                    // Some REG_MRs may be posted: the queue pair is in the
                    // error state, and the regions stay out of use.
                    self.mark_broken(reg);
                }
                Err((err, partial))
            }
        }
    }

    /// Sends a message that names nothing but the connection's own buffer
    /// (copied only: no token); `invalidate` makes it a Send With
    /// Invalidate. See [`Conn::send`].
    #[inline(always)]
    pub(crate) fn send_copied(
        &self,
        invalidate: Option<u32>,
        fill: impl Fill<Copying>,
    ) -> Result<Sent> {
        match self.post_send(ANY_OWNER, 1, NoChain, invalidate, false, fill) {
            Ok(p) => Ok(Sent { signaled: p.signaled, mapped: p.mapped }),
            Err(f) => Err(f.err),
        }
    }

    /// Chains the REG_MRs of the regions `reg` holds in front of `send`;
    /// `None` if the token names a region it does not hold.
    #[inline(always)]
    pub(super) fn chain_regs(&self, reg: &Registration, send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr> {
        let mut head = send;
        let mut i = reg.head;
        for _ in 0..reg.count {
            // SAFETY: the region belongs to the token (type invariant of
            // `Registration`) and holds nothing the device reads: its work
            // request is copied when posted.
            let mut m = self.mr(usize::from(i)).and_then(|mr| unsafe { mr.cell.take_back() })?;
            m.reg_wr.wr.next = head;
            head = &raw mut m.reg_wr.wr;
            i = m.next;
            m.hand_off();
        }
        Some(head)
    }

    /// Keeps the regions of `reg` out of use until the connection goes
    /// (their REG_MRs may have been posted on a queue pair now in the
    /// error state).
    #[cold]
    fn mark_broken(&self, reg: &Registration) {
        let mut i = reg.head;
        for _ in 0..reg.count {
            let Some(mr) = self.mr(usize::from(i)) else { return };
            // SAFETY: as in `chain_registrations`; it stays the token's.
            let Some(m) = (unsafe { mr.cell.take_back() }) else { return };
            i = m.next;
            mr.set_broken();
            m.hand_off();
        }
    }

    /// Gives back the regions of a token whose Send was not posted (the
    /// call was not sent), and the lender: `freed` gets the index of each
    /// region that is idle again (not one kept out of use after a failed
    /// post). Returns the token if it is not `lender`'s or this
    /// connection's.
    pub(crate) fn release_unposted(
        &self,
        lender: &Lender,
        reg: Registration,
        mut freed: impl FnMut(usize),
    ) -> core::result::Result<Released, Registration> {
        if reg.lender != lender.id() || reg.conn != self.conn_id() {
            return Err(reg);
        }
        let mut i = reg.head;
        for _ in 0..reg.count {
            let Some(mr) = self.mr(usize::from(i)) else { break };
            // SAFETY: the region belongs to the token, which is consumed
            // here; its REG_MR was never posted (or its queue pair is in
            // the error state, and it stays away: broken).
            let Some(mut m) = (unsafe { mr.cell.take_back() }) else { break };
            i = m.next;
            if mr.is_broken() {
                m.hand_off();
                continue;
            }
            mr.unmap(&mut m);
            drop(m);
            freed(usize::from(mr.index));
        }
        // SAFETY: `reg` is the lender's token (checked), consumed here; its
        // regions were never posted, or the queue pair that may have
        // registered them is in the error state; no Send mapped its pages.
        Ok(unsafe { lender.give_back() })
    }

    /// Ends the token `t` of `lender`: invalidates its regions (the one
    /// whose rkey the peer already invalidated with Send With Invalidate,
    /// as a Receive of this connection reported after the token's Send,
    /// `remote`, needs no LOCAL_INV) and waits for its Send
    /// if it mapped pages, then gives the lender back with the proof.
    /// Sleeps until the LOCAL_INV work requests complete. `reuse` gets the
    /// index of each region that may be registered again (not one whose
    /// invalidation failed: it keeps its rkey until the connection is torn
    /// down, unreachable once the queue pair is in the error state, where
    /// a failure leaves it). `fail` is asked just before a LOCAL_INV is
    /// posted: true makes the post fail as if the device had refused it
    /// (a test hook). A token of another lender or connection comes back.
    ///
    /// The usual case (one region, which the peer's Send With Invalidate
    /// already invalidated; no pages mapped: nothing to post or wait for)
    /// is inlined into the caller; the rest is a call.
    #[inline(always)]
    pub(crate) fn release(
        &self,
        lender: &Lender,
        t: InFlight,
        remote: Option<RemoteInv>,
        fail: impl FnOnce() -> bool,
        mut reuse: impl Reuse,
    ) -> core::result::Result<(Released, Invalidation), InFlight> {
        if t.lender != lender.id() || t.conn != self.conn_id() {
            return Err(t);
        }
        // Only a Receive of this connection that completed after the
        // token's Send was posted can have invalidated its regions.
        let remotely_invalidated = remote.filter(|r| r.conn == t.conn && t.seq <= r.sent).map(|r| r.rkey);
        let how = if t.count == 0 {
            Invalidation::NONE
        } else if let Some(i) = self.invalidated_remotely(&t, remotely_invalidated) {
            reuse.reuse(i);
            Invalidation::NONE
        } else {
            self.invalidate_posting(&t, remotely_invalidated, fail, &mut reuse)
        };
        // The reply can overtake the Send's completion: the pages it maps
        // (or the writes chained in front of it read) are the lender's
        // again only once the HCA is done reading them.
        if t.mapped {
            self.wait_send(t.seq);
        }
        if t.rw != NO_RW {
            if let Ok(qp) = self.qp() {
                // Done with the Send: nothing of them is posted.
                self.rw_end(qp, t.rw);
            }
        }
        // SAFETY: `t` is the lender's token (checked), consumed here; its
        // regions are invalidated (or the queue pair is in the error
        // state), and its Send no longer reads the lender's pages.
        Ok((unsafe { lender.give_back() }, how))
    }

    /// The usual case of [`Conn::release`]: `t` holds one region, whose
    /// rkey the peer's Send With Invalidate of `remotely_invalidated`
    /// invalidated. Takes it back and returns its index, idle again.
    #[inline(always)]
    fn invalidated_remotely(&self, t: &InFlight, remotely_invalidated: Option<u32>) -> Option<usize> {
        let remote = remotely_invalidated?;
        if t.count != 1 {
            return None;
        }
        let mr = self.mr(usize::from(t.head))?;
        // SAFETY: the region belongs to `t` (type invariant of `InFlight`),
        // which the caller holds; it goes back to it below unless taken.
        let mut m = unsafe { mr.cell.take_back() }?;
        if FrMr::rkey(&m) != remote || mr.is_broken() {
            m.hand_off();
            return None;
        }
        trace::mr_reminv(t.head.into(), remote);
        mr.unmap(&mut m);
        drop(m);
        Some(usize::from(t.head))
    }

    /// [`Conn::release`]'s invalidation of the regions of `t` other than
    /// the one the peer already invalidated: a LOCAL_INV for each, posted
    /// in one chain (only the last signalled) and waited for.
    #[inline(never)]
    fn invalidate_posting(
        &self,
        t: &InFlight,
        remotely_invalidated: Option<u32>,
        fail: impl FnOnce() -> bool,
        reuse: &mut impl Reuse,
    ) -> Invalidation {
        let Ok(qp) = self.qp() else { return Invalidation::NONE };
        let mut chain: *mut sys::ib_send_wr = ptr::null_mut();
        let mut last: Option<&FrMr> = None;
        let mut local: usize = 0;
        let mut remote_seen = false;
        let mut broken = false;
        let mut i = t.head;
        for _ in 0..t.count {
            let Some(mr) = self.mr(usize::from(i)) else { break };
            // SAFETY: the region belongs to `t`, which the caller holds.
            let Some(mut m) = (unsafe { mr.cell.take_back() }) else { break };
            i = m.next;
            broken |= mr.is_broken();
            let rkey = FrMr::rkey(&m);
            if !remote_seen && remotely_invalidated == Some(rkey) {
                remote_seen = true;
                trace::mr_reminv(mr.index.into(), rkey);
                m.hand_off();
                continue;
            }
            trace::mr_localinv(mr.index.into(), rkey);
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
            // One per region `t` holds, at most the connection's count.
            local = local.wrapping_add(1);
        }
        let mut post_failed = false;
        if let Some(last) = last.filter(|_| !broken) {
            let dying = self.dying.load(Ordering::Acquire);
            let posted = if dying || fail() {
                Err(EIO)
            } else {
                // SAFETY: the chain's WRs belong to `t`'s regions, handed
                // off; the regions outlive the queue pair.
                unsafe { qp.post_send(chain) }.map_err(|e| e.err)
            };
            if posted.is_err() {
                // The regions keep live rkeys, and some LOCAL_INVs may be
                // posted. Before the caller may give their pages back, the
                // queue pair goes to the error state, so that no RDMA
                // operation of the peer reaches them (RFC 8166 section
                // 4.5.4).
                broken = true;
                self.break_qp();
                post_failed = !dying;
            } else {
                let mut g = self.inv_lock.lock();
                while !last.inv_done.load(Ordering::Acquire) {
                    self.inv_wait.wait(&mut g);
                }
                drop(g);
                // A LOCAL_INV that failed (or was flushed) left the queue
                // pair in the error state.
                broken = !last.inv_ok.load(Ordering::Acquire);
            }
        }
        let mut i = t.head;
        for _ in 0..t.count {
            let Some(mr) = self.mr(usize::from(i)) else { break };
            // SAFETY: the region belongs to `t`; its LOCAL_INV (if any)
            // completed, or the queue pair is in the error state.
            let Some(mut m) = (unsafe { mr.cell.take_back() }) else { break };
            i = m.next;
            if broken || mr.is_broken() {
                // Out of use until the connection goes, which frees it.
                mr.set_broken();
                m.hand_off();
                continue;
            }
            mr.unmap(&mut m);
            drop(m);
            reuse.reuse(usize::from(mr.index));
        }
        Invalidation { local, post_failed }
    }
}

/// What gets each region a release frees for registering again (see
/// [`Conn::release`]): a closure does; so does a value whose
/// [`Reuse::reuse`] is `#[inline(always)]`, inlined however large (a
/// closure called from two places is a call at `opt-level=s`).
pub(crate) trait Reuse {
    /// Region `index` is idle: registering it again is the caller's.
    fn reuse(&mut self, index: usize);
}

impl<F: FnMut(usize)> Reuse for F {
    #[inline(always)]
    fn reuse(&mut self, index: usize) {
        self(index)
    }
}

/// The REG_MRs of the regions `reg` holds, chained in front of a Send on
/// `conn` ([`Conn::chain_regs`]).
struct RegChain<'a, V: Events> {
    conn: &'a Conn<V>,
    reg: &'a Registration,
}

// SAFETY: `chain_regs` links only regions of the token it takes back (its
// own, handed off to the chain, not posted; a region lives as long as the
// connection), `count` of them in front of `send`, and each points at the
// pages its token holds references of.
unsafe impl<V: Events> Chain for RegChain<'_, V> {
    #[inline(always)]
    fn chain(self, send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr> {
        self.conn.chain_regs(self.reg, send)
    }
}

/// Recovers the connection and memory region of a REG_MR or LOCAL_INV
/// completion.
///
/// # Safety
///
/// `cq` must be one of a live `Conn<V>`'s CQs and `wc` a completion whose
/// `wr_cqe` is the CQE at `offset` in a `FrMr` of it.
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
pub(super) unsafe extern "C" fn reg_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, _mr, wc) = unsafe { mr_completion::<V>(cq, wc, core::mem::offset_of!(FrMr, reg_cqe)) };
    conn.work_done(Completion::of(wc));
}

/// LOCAL_INV completion: wakes the invalidating thread.
///
/// # Safety
///
/// Called by ib_core for a LOCAL_INV posted by a [`Conn<V>`].
pub(super) unsafe extern "C" fn inv_done<V: Events>(cq: *mut sys::ib_cq, wc: *mut sys::ib_wc) {
    // SAFETY: per the function's contract.
    let (conn, mr, wc) = unsafe { mr_completion::<V>(cq, wc, core::mem::offset_of!(FrMr, inv_cqe)) };
    let how = Completion::of(wc);
    let g = conn.inv_lock.lock();
    note_invalidated(mr, how == Completion::Ok);
    drop(g);
    conn.inv_wait.notify_all();
    conn.work_done(how);
}
