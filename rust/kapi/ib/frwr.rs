// SPDX-License-Identifier: GPL-2.0

//! Memory regions on a connection: making them, registering a lender's
//! pages into one for a token, and posting the REG_MRs in front of the
//! Send that advertises them. Which region is used next, and what becomes
//! of one once it is idle again, are the owner's (it gets the indices).
//! The end of a token is [`inv`](super::inv)'s.

use core::{ops::Range, pin::Pin, sync::atomic::Ordering};

use kernel::{
    alloc::KBox,
    error::{code::EINVAL, Error, Result},
};

use super::{
    buf::{Copying, Fill, Mapping, SendWriter},
    conn::Conn,
    events::Events,
    cq::Completion,
    mr::{FillSg, FrMr, MrState, Registered},
    sq::{Chain, NoChain, PostFailed},
    token::{InFlight, Registration, Lender, SendFailed, NO_MR, NO_RW},
};
use crate::{
    kapi::{
        cell::Lease,
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
            let mr = match unsafe { FrMr::new(device, pd, self.mr_pages, made, reg_done::<V>, super::inv::inv_done::<V>) } {
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
        fill: impl FillSg<D>,
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
        let wrs = usize::from(reg.count).wrapping_add(1);
        match self.post_send(reg.lender, wrs, RegChain { conn: self, reg: &reg }, invalidate, NO_RW, fill) {
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
                },
                Sent { signaled: p.signaled, mapped: p.mapped },
            )),
            Err(PostFailed { err, partial }) => {
                if partial {
                    // Some REG_MRs may be posted: the regions stay out of
                    // use (and releasing the token breaks the queue pair).
                    self.mark_broken(&reg);
                }
                Err(SendFailed { err, reg })
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
        match self.post_send(ANY_OWNER, 1, NoChain, invalidate, NO_RW, fill) {
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
    /// (their REG_MRs may have been posted by a post that stopped part of
    /// the way: releasing the token moves the queue pair to the error
    /// state).
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
}

/// What builds the Send of [`Conn::send_one`]: given the segment of the
/// region registered in front of it, writes the message that advertises
/// it. A closure does; so does a value whose [`FillOne::fill`] is
/// `#[inline(always)]` (see [`Fill`]).
pub(crate) trait FillOne {
    /// Writes the message advertising `seg` into `out`.
    fn fill(self, seg: &Registered, out: &mut SendWriter<'_, Mapping>) -> Result;
}

impl<F: FnOnce(&Registered, &mut SendWriter<'_, Mapping>) -> Result> FillOne for F {
    #[inline(always)]
    fn fill(self, seg: &Registered, out: &mut SendWriter<'_, Mapping>) -> Result {
        self(seg, out)
    }
}

/// Why [`Conn::send_one`] failed, and whether its region is idle again
/// (the caller's, to register again or give back). After a post that
/// stopped part of the way, the token comes back instead (`unposted`, its
/// region kept out of use until the connection goes), for the caller to
/// end with [`Conn::release_unposted`] outside any spinlock.
pub(crate) struct OneFailed {
    pub(crate) err: Error,
    pub(crate) idle: bool,
    pub(crate) unposted: Option<Registration>,
}

impl<V: Events> Conn<V> {
    /// [`Conn::begin`], [`Conn::register`] of region `index` and
    /// [`Conn::send`], in one call: most calls with chunks register one
    /// region (a READ's Write chunk, a WRITE's Read chunk). `fill_sg`
    /// describes the region's pages (the lender's, which the peer accesses
    /// in direction `D`), `tag` goes in the iova's upper half, and `fill`
    /// builds the Send, given the region's segment. No token exists
    /// between the steps, so none is built, moved or checked. Returns the
    /// token, how the Send went and the segment. On failure the lender is
    /// idle again, and so is the region unless `idle` says otherwise;
    /// `EBUSY` if a token of the lender exists, `EINVAL` (not idle) if the
    /// region is not made or not idle.
    ///
    /// `fill` runs under the spinlock that orders Sends: it must not sleep.
    #[inline(always)]
    pub(crate) fn send_one<D: Dir>(
        &self,
        lender: &Lender,
        index: usize,
        tag: u32,
        fill_sg: impl FillSg<D>,
        fill: impl FillOne,
    ) -> core::result::Result<(InFlight, Sent, Registered), OneFailed> {
        let idle = |err| OneFailed { err, idle: true, unposted: None };
        // Nothing is mapped for a connection going away. (Without its
        // objects it has no regions: `mr` finds none.)
        if self.dying.load(Ordering::Relaxed) {
            return Err(idle(errno::ENOTCONN()));
        }
        // A region that is not made, or not idle, is not the caller's to
        // give back: it stays as it is.
        let not_ours = OneFailed { err: EINVAL, idle: false, unposted: None };
        let Some(mr) = self.mr(index) else { return Err(not_ours) };
        let Some(mut m) = mr.cell.lease() else { return Err(not_ours) };
        if let Err(e) = lender.lend(&self.handle) {
            return Err(idle(e));
        }
        // The lender is away for the token this call makes; until it is
        // made, its hand-off is this call's, to give back on failure.
        let (seg, n) = match mr.map::<D>(&mut m, lender.id(), tag, fill_sg) {
            Ok(r) => r,
            Err(e) => {
                drop(m);
                // SAFETY: the hand-off is this call's (lent above, no token
                // made of it), and nothing of the lender's is mapped.
                let _released = unsafe { lender.give_back() };
                return Err(idle(e));
            }
        };
        trace::mr_map(tag, mr.index.into(), n as i32, seg.handle, seg.length, seg.offset, u32::from(D::INBOUND));
        m.next = NO_MR;
        let mut m = Some(m);
        let chain = OneRegChain { m: &mut m };
        match self.post_send(lender.id(), 2, chain, None, NO_RW, OneFill { fill, seg: &seg }) {
            // INVARIANT: the region's REG_MR went out with the Send; the
            // region's hand-off and the lender's are the token's.
            Ok(p) => Ok((
                InFlight {
                    lender: lender.id(),
                    conn: self.conn_id(),
                    head: mr.index,
                    count: 1,
                    mapped: p.mapped,
                    seq: p.seq,
                },
                Sent { signaled: p.signaled, mapped: p.mapped },
                seg,
            )),
            Err(PostFailed { err, partial }) => {
                let idle = match m.take() {
                    // Never linked: still leased, never seen by the device.
                    Some(mut m) => {
                        mr.unmap(&mut m);
                        true
                    }
                    // Its REG_MR may be posted: the region stays out of
                    // use, and the token comes back, for the caller to end
                    // outside its spinlocks (the queue pair must be moved
                    // to the error state before the lender's pages go).
                    None if partial => {
                        mr.set_broken();
                        // INVARIANT: the lender's hand-off and the region,
                        // handed off to the chain, are this token's.
                        let reg = Registration { lender: lender.id(), conn: self.conn_id(), head: mr.index, count: 1 };
                        return Err(OneFailed { err, idle: false, unposted: Some(reg) });
                    }
                    // SAFETY: handed off to the chain, whose post failed at
                    // its first work request: the device never saw it.
                    None => match unsafe { mr.cell.take_back() } {
                        Some(mut m) => {
                            mr.unmap(&mut m);
                            true
                        }
                        None => false,
                    },
                };
                // SAFETY: the hand-off is this call's (no token was made);
                // the region's REG_MR was not posted, nor the Send, which
                // would map the lender's pages.
                let _released = unsafe { lender.give_back() };
                Err(OneFailed { err, idle, unposted: None })
            }
        }
    }
}

/// The Send of [`Conn::send_one`], given the segment to advertise.
struct OneFill<'a, F> {
    fill: F,
    seg: &'a Registered,
}

impl<F: FillOne> Fill<Mapping> for OneFill<'_, F> {
    #[inline(always)]
    fn fill(self, out: &mut SendWriter<'_, Mapping>) -> Result {
        self.fill.fill(self.seg, out)
    }
}

/// The REG_MR of [`Conn::send_one`]'s region, leased and mapped, chained
/// in front of the Send; the lease is handed off as it is linked.
struct OneRegChain<'a, 'm> {
    m: &'a mut Option<Lease<'m, MrState>>,
}

// SAFETY: the region's REG_MR is the region's own (leased by the caller,
// live as long as the connection), handed off as it is linked in front of
// `send`; the region's pages are the lender's, with references its
// scatterlist holds. Two work requests, as `send_one` tells the post.
unsafe impl Chain for OneRegChain<'_, '_> {
    #[inline(always)]
    fn chain(self, send: *mut sys::ib_send_wr) -> Option<*mut sys::ib_send_wr> {
        let mut m = self.m.take()?;
        m.reg_wr.wr.next = send;
        let head = &raw mut m.reg_wr.wr;
        m.hand_off();
        Some(head)
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
pub(super) unsafe fn mr_completion<'a, V: Events>(
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
