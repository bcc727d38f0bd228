// SPDX-License-Identifier: GPL-2.0

//! Ending a token: [`Conn::release`] invalidates its regions (one chained
//! LOCAL_INV post, waited for; none for the region the peer invalidated
//! with Send With Invalidate) and waits for its Send, then gives the
//! lender back, or keeps it closed for the request's completion
//! ([`Conn::release_closing`]); [`Conn::release_unposted`] gives back a
//! token whose Send was never posted. The LOCAL_INV completion is here too.

use core::{ptr, sync::atomic::Ordering};

use kernel::error::code::EIO;

use super::{
    conn::Conn,
    cq::Completion,
    events::Events,
    frwr::mr_completion,
    mr::{note_invalidated, FrMr},
    rq::RemoteInv,
    token::{Closed, InFlight, Invalidation, Lender, Registration, Released},
};
use crate::{kapi::trace, sys};

impl<V: Events> Conn<V> {
    /// Gives back the regions of a token whose Send was not posted (the
    /// call was not sent), and the lender: `freed` gets the index of each
    /// region that is idle again (not one kept out of use after a failed
    /// post). Returns the token if it is not `lender`'s or this
    /// connection's. If a post stopped part of the way with the token's
    /// REG_MRs (its regions are kept out of use), moves the queue pair to
    /// the error state first: then it sleeps, so call it holding no
    /// spinlock.
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
        let mut broken = false;
        for _ in 0..reg.count {
            let Some(mr) = self.mr(usize::from(i)) else { break };
            // SAFETY: the region belongs to the token, which is consumed
            // here; its REG_MR was never posted (or may have been, by a
            // post that stopped part of the way: then it stays away,
            // broken).
            let Some(mut m) = (unsafe { mr.cell.take_back() }) else { break };
            i = m.next;
            if mr.is_broken() {
                broken = true;
                m.hand_off();
                continue;
            }
            mr.unmap(&mut m);
            drop(m);
            freed(usize::from(mr.index));
        }
        if broken {
            // A REG_MR of the token may be posted: no RDMA operation of the
            // peer may reach its pages once they go back.
            self.break_qp();
        }
        // SAFETY: `reg` is the lender's token (checked), consumed here; its
        // regions were never posted, or the queue pair that may have
        // registered them is in the error state (just above); no Send
        // mapped its pages.
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
        reuse: impl Reuse,
    ) -> core::result::Result<(Released, Invalidation), InFlight> {
        let how = self.end(lender, t, remote, fail, reuse)?;
        // SAFETY: `end` consumed the lender's token after the work that
        // ends it: its regions are invalidated (or the queue pair is in
        // the error state), and its Send no longer reads the lender's
        // pages.
        Ok((unsafe { lender.give_back() }, how))
    }

    /// [`Conn::release`], keeping the lender closed: the token's hand-off
    /// passes to the returned [`Closed`] (what [`Lender::close`] of the
    /// proof would give, without giving the lender back in between).
    #[inline(always)]
    pub(crate) fn release_closing<'l>(
        &self,
        lender: &'l Lender,
        t: InFlight,
        remote: Option<RemoteInv>,
        fail: impl FnOnce() -> bool,
        reuse: impl Reuse,
    ) -> core::result::Result<(Closed<'l>, Invalidation), InFlight> {
        let how = self.end(lender, t, remote, fail, reuse)?;
        // SAFETY: as in `release`.
        Ok((unsafe { lender.close_consumed() }, how))
    }

    /// The work of [`Conn::release`]: consumes `t` if it is the token of
    /// `lender` on this connection, once nothing it names is in the
    /// device's or the peer's reach; the lender's hand-off, which the
    /// token owned, is then the caller's to end.
    #[inline(always)]
    fn end(
        &self,
        lender: &Lender,
        t: InFlight,
        remote: Option<RemoteInv>,
        fail: impl FnOnce() -> bool,
        mut reuse: impl Reuse,
    ) -> core::result::Result<Invalidation, InFlight> {
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
            // SAFETY: `t` holds these regions (type invariant of
            // `InFlight`) and is consumed here, after the call.
            unsafe { self.invalidate_posting(t.head, t.count, remotely_invalidated, fail, reuse) }
        };
        // The reply can overtake the Send's completion: the pages it maps
        // are the lender's again only once the HCA is done reading them.
        if t.mapped {
            self.wait_send(t.seq);
        }
        Ok(how)
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

    /// [`Conn::release`]'s invalidation of the `count` regions listed from
    /// `head` other than the one the peer already invalidated: a LOCAL_INV
    /// for each, posted in one chain (only the last signalled) and waited
    /// for. Takes the token's fields, not the token: passed by reference
    /// to a call, the token would live in memory on the usual path too.
    ///
    /// # Safety
    ///
    /// The regions are those of a token ([`InFlight`]) the caller holds
    /// and consumes after the call.
    #[inline(never)]
    unsafe fn invalidate_posting(
        &self,
        head: u16,
        count: u16,
        remotely_invalidated: Option<u32>,
        fail: impl FnOnce() -> bool,
        mut reuse: impl Reuse,
    ) -> Invalidation {
        let Ok(qp) = self.qp() else { return Invalidation::NONE };
        let mut chain: *mut sys::ib_send_wr = ptr::null_mut();
        let mut last: Option<&FrMr> = None;
        let mut local: usize = 0;
        let mut remote_seen = false;
        let mut broken = false;
        let mut i = head;
        for _ in 0..count {
            let Some(mr) = self.mr(usize::from(i)) else { break };
            // SAFETY: the region belongs to the caller's token (the
            // function's contract).
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
                // SAFETY: the chain's WRs belong to the token's regions, handed
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
        let mut i = head;
        for _ in 0..count {
            let Some(mr) = self.mr(usize::from(i)) else { break };
            // SAFETY: the region belongs to the caller's token; its LOCAL_INV (if any)
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
