// SPDX-License-Identifier: GPL-2.0

//! Memory regions on demand. A connection starts with as many regions as
//! one call may use ([`MRS_AT_CONNECT`]); a call that finds none idle
//! waits for buffer space, and a worker makes more, up to two per request:
//! a mount that never moves chunks, or only a few at a time, keeps a few
//! regions instead of hundreds (each with its page list in the device).
//! A request keeps one region between its calls ([`KeptMr`]); when no
//! more can be made, the worker takes the kept ones back for the calls
//! that wait.
//! Regions are made in process context, never in the send path (which
//! holds the slot's spinlock); once made they stay until the connection
//! goes, so the per-RPC path never allocates.

use core::sync::atomic::{AtomicU64, Ordering};

use kernel::{
    prelude::*,
    sync::{Arc, ArcBorrow},
};

use crate::kapi::{
    ratelimit::RateLimit,
    trace,
    work::{self, DelayedWork, DelayedWorkItem},
};

use super::{conn::Endpoint, credits::MRS_AT_CONNECT, stats::COUNTERS, xprt::RdmaXprt};

/// Bits of a [`KeptMr`] word that hold the region's index.
const KEPT_INDEX_BITS: u32 = 16;

/// A memory region one request keeps from its call for its next one, so
/// that the usual call (one region) takes and gives back its region
/// without the pool's lock (the C client keeps idle regions per request
/// the same way). The region is idle while kept. It belongs to one
/// connection, by its number: one of another connection is forgotten
/// (that connection's regions go with it). Taking it, here or through
/// [`SlotTable::reclaim_kept`](super::slots::SlotTable::reclaim_kept), is one atomic exchange, so an idle region
/// is in one place only: kept, or in the pool.
///
/// A request keeps one at most, so the requests' regions cannot starve
/// the pool for long: once no more can be made, the reclaim gives them
/// back.
pub(crate) struct KeptMr(AtomicU64);

impl KeptMr {
    /// Keeps nothing.
    pub(crate) const fn new() -> Self {
        KeptMr(AtomicU64::new(0))
    }

    /// Takes the region kept for the connection numbered `generation`, if
    /// any.
    /// One exchange, without a read first: a request's region is kept
    /// between its calls, so there mostly is one.
    #[inline]
    pub(super) fn take(&self, generation: u64) -> Option<usize> {
        let v = self.0.swap(0, Ordering::AcqRel);
        (v != 0 && v >> KEPT_INDEX_BITS == generation).then_some((v & 0xffff) as usize)
    }

    /// Keeps region `index` of the connection `generation` (never 0);
    /// returns what the pool is to have back: a region of the same
    /// connection kept before, or `index` if it cannot be kept.
    #[inline]
    pub(super) fn keep(&self, generation: u64, index: usize) -> Option<usize> {
        let Ok(i) = u16::try_from(index) else { return Some(index) };
        if generation == 0 || generation >> (64 - KEPT_INDEX_BITS) != 0 {
            return Some(index);
        }
        let old = self.0.swap(generation << KEPT_INDEX_BITS | u64::from(i), Ordering::AcqRel);
        (old != 0 && old >> KEPT_INDEX_BITS == generation).then_some((old & 0xffff) as usize)
    }
}


/// The work ID of [`RdmaXprt`]'s region maker (see [`super::liveness`]).
pub(super) const GROW_MRS: u64 = 2;

impl RdmaXprt {
    /// Has more regions made (or the kept ones reclaimed) if a call
    /// failed for want of one.
    pub(super) fn grow_mrs_later(this: ArcBorrow<'_, Self>, ep: &Endpoint) {
        if !this.dying.load(Ordering::SeqCst) && ep.conn.take_mrs_wanted() {
            // Already queued: that one does the job.
            drop(work::enqueue::<_, GROW_MRS>(this.into(), 0));
        }
    }
}

impl DelayedWorkItem<GROW_MRS> for RdmaXprt {
    fn work(&self) -> &DelayedWork<Self, GROW_MRS> {
        &self.grow_mrs
    }

    fn run(this: Arc<Self>) {
        if this.dying.load(Ordering::SeqCst) {
            return;
        }
        let Some(ep) = this.endpoint() else { return };
        // Half as many again as there are (a busy mount reaches its need
        // in a few steps, an idle one stays small).
        let n = (ep.conn.mrs_made() / 2).max(MRS_AT_CONNECT);
        let grown = if ep.conn.mrs_made() < ep.conn.max_mrs() { ep.conn.grow_mrs(n) } else { Ok(0) };
        if !matches!(grown, Ok(1..)) {
            // No more can be made: the regions idle requests keep go to
            // the calls that wait.
            let back = this.slots.reclaim_kept(&ep);
            if back > 0 {
                COUNTERS.mrs_reclaimed.fetch_add(back as u64, Ordering::Relaxed);
                trace::mrs_refresh(|| this.xprt.get().addr_str(), 0, ep.conn.mrs_made() as u32);
                this.xprt.get().write_space();
                return;
            }
        }
        match grown {
            Ok(0) => {}
            Ok(made) => {
                this.stats.mrs_allocated.fetch_add(made as u64, Ordering::Relaxed);
                trace::mrs_refresh(|| this.xprt.get().addr_str(), made as u32, ep.conn.mrs_made() as u32);
                // The waiting calls try again.
                this.xprt.get().write_space();
            }
            // The calls wait for regions in use to come back (there are
            // some: none was idle).
            Err(e) => {
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!(
                        "{}: cannot make more memory regions (error {}): calls wait for those in use\n",
                        this.xprt.get().addr_str(),
                        e.to_errno()
                    );
                }
            }
        }
    }
}
