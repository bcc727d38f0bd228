// SPDX-License-Identifier: GPL-2.0

//! Fast registration (FRWR): the pool of memory regions, registering a
//! chunk's pages and invalidating them after the reply (RFC 8166 section
//! 3.4; the regions themselves are [`kapi::ib::mr`](crate::kapi::ib::mr)).

use core::sync::atomic::{AtomicU64, Ordering};

use kernel::error::Result;

use super::{
    endpoint::{Connection, EpState, Live, ReleaseEpoch},
    ConnHandler, Invalidated, OnePostedRegistration, OneRegistration, PostedRegistration, Registered, Registration,
    SgWriter,
};
use crate::kapi::{errno, ib::Conn};

/// Bits of a [`KeptMr`] word that hold the region's index.
const KEPT_INDEX_BITS: u32 = 16;

/// A memory region one request keeps from its call for its next one, so
/// that the usual call (one region) takes and gives back its region
/// without the pool's lock (the C client keeps idle regions per request
/// the same way). The region is idle while kept. It belongs to one
/// connection, by generation: one of another connection is forgotten
/// (that connection's regions go with it). Taking it, here or through
/// [`Connection::reclaim_kept`], is one atomic exchange, so an idle region
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

    /// Takes the region kept for the connection `generation`, if any.
    /// One exchange, without a read first: a request's region is kept
    /// between its calls, so there mostly is one.
    #[inline]
    fn take(&self, generation: u64) -> Option<usize> {
        let v = self.0.swap(0, Ordering::AcqRel);
        (v != 0 && v >> KEPT_INDEX_BITS == generation).then_some((v & 0xffff) as usize)
    }

    /// Keeps region `index` of the connection `generation` (never 0);
    /// returns what the pool is to have back: a region of the same
    /// connection kept before, or `index` if it cannot be kept.
    #[inline]
    fn keep(&self, generation: u64, index: usize) -> Option<usize> {
        let Ok(i) = u16::try_from(index) else { return Some(index) };
        if generation == 0 || generation >> (64 - KEPT_INDEX_BITS) != 0 {
            return Some(index);
        }
        let old = self.0.swap(generation << KEPT_INDEX_BITS | u64::from(i), Ordering::AcqRel);
        (old != 0 && old >> KEPT_INDEX_BITS == generation).then_some((old & 0xffff) as usize)
    }
}

impl<T: ConnHandler> EpState<T> {
    /// Puts region `index` back in the pool. Out of line: the usual
    /// call's region is kept by its request, not pooled.
    #[inline(never)]
    fn pool_mr(&self, index: usize) {
        self.free_mrs.lock().push(index);
        self.note_release();
    }

    /// Gives back region `index` of the connection `generation`, idle
    /// again: kept in `kept`, if given, else to the pool.
    #[inline(always)]
    fn reuse_mr(&self, kept: Option<&KeptMr>, generation: u64, index: usize) {
        let back = match kept {
            Some(k) => k.keep(generation, index),
            None => Some(index),
        };
        if let Some(i) = back {
            self.pool_mr(i);
        }
    }

    /// See [`Connection::invalidate`]; the first region taken back is kept
    /// in `kept`, if given.
    #[inline(always)]
    fn invalidate(
        &self,
        conn: &Conn<Self>,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
        kept: Option<&KeptMr>,
    ) -> (Invalidated, usize) {
        let fail = || self.handler.inject_local_inv_failure();
        let generation = conn.generation();
        let (proof, how) = conn.invalidate(reg, remotely_invalidated, fail, |i| self.reuse_mr(kept, generation, i));
        if how.post_failed {
            self.handler.invalidate_failed();
        }
        (proof, how.local)
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Registers one memory region for `reg`: `fill` describes its pages
    /// (at most the region's depth), `to_device` is true for a Read chunk
    /// (the server reads our memory) and false for Write and Reply chunks.
    /// The REG_MR work request is posted in front of the next [`send`] with
    /// `reg`. Fails with `ENOBUFS` when no region is free.
    ///
    /// [`send`]: Connection::send
    pub(crate) fn register(
        &self,
        reg: &mut Registration,
        to_device: bool,
        xid: u32,
        fill: impl FnOnce(&mut SgWriter<'_>) -> Result,
    ) -> Result<Registered> {
        self.register_kept(reg, None, to_device, xid, fill)
    }

    /// [`Connection::register`], with the region `kept` holds for this
    /// connection if there is one, else one from the pool.
    #[inline(always)]
    pub(crate) fn register_kept(
        &self,
        reg: &mut Registration,
        kept: Option<&KeptMr>,
        to_device: bool,
        xid: u32,
        fill: impl FnOnce(&mut SgWriter<'_>) -> Result,
    ) -> Result<Registered> {
        let index = self.idle_mr(kept)?;
        self.conn.register(reg, index, to_device, xid, fill).inspect_err(|_| self.conn.events().pool_mr(index))
    }

    /// [`Connection::register_kept`] for a call that registers one region:
    /// returns the token that holds it, which [`Connection::send_one`]
    /// posts.
    #[inline(always)]
    pub(crate) fn register_kept_one(
        &self,
        kept: Option<&KeptMr>,
        to_device: bool,
        xid: u32,
        fill: impl FnOnce(&mut SgWriter<'_>) -> Result,
    ) -> Result<(Registered, OneRegistration)> {
        let index = self.idle_mr(kept)?;
        self.conn.register_one(index, to_device, xid, fill).inspect_err(|_| self.conn.events().pool_mr(index))
    }

    /// An idle region: the one `kept` holds for this connection if there
    /// is one, else one from the pool. Fails with `ENOBUFS` when the pool
    /// is empty.
    #[inline(always)]
    fn idle_mr(&self, kept: Option<&KeptMr>) -> Result<usize> {
        if let Some(i) = kept.and_then(|k| k.take(self.conn.generation())) {
            return Ok(i);
        }
        let st = self.conn.events();
        match st.free_mrs.lock().pop() {
            Some(i) => Ok(i),
            None => {
                st.mrs_wanted.store(true, Ordering::Relaxed);
                Err(errno::ENOBUFS())
            }
        }
    }

    /// Gives the region `kept` holds for this connection back to the pool
    /// (for calls waiting for one, when no more can be made); true if
    /// there was one.
    pub(crate) fn reclaim_kept(&self, kept: &KeptMr) -> bool {
        match kept.take(self.conn.generation()) {
            Some(i) => {
                self.conn.events().pool_mr(i);
                true
            }
            None => false,
        }
    }

    /// True if a registration found no region idle since the last call:
    /// regions are to be made ([`Connection::grow_mrs`]) or, when no more
    /// may be made, the kept ones reclaimed ([`Connection::reclaim_kept`]),
    /// from process context. Asking the pool itself after the failed call
    /// gave back what it had registered would not do: a call of two
    /// regions that got one finds one idle again, and waits for ever.
    pub(crate) fn take_mrs_wanted(&self) -> bool {
        let wanted = &self.conn.events().mrs_wanted;
        wanted.load(Ordering::Relaxed) && wanted.swap(false, Ordering::Relaxed)
    }

    /// True if no region is idle in the pool.
    pub(crate) fn mr_pool_empty(&self) -> bool {
        self.conn.events().free_mrs.lock().len() == 0
    }

    /// Most regions the connection may have.
    pub(crate) fn max_mrs(&self) -> usize {
        self.conn.max_mrs()
    }

    /// Regions made so far on this connection.
    pub(crate) fn mrs_made(&self) -> usize {
        self.conn.mrs_made()
    }

    /// True if the pool is empty and more regions may be made (see
    /// [`Connection::mr_pool_empty`]).
    pub(crate) fn mrs_exhausted(&self) -> bool {
        self.mrs_made() < self.max_mrs() && self.mr_pool_empty()
    }

    /// Makes up to `n` more regions and puts them on the free list;
    /// returns how many. Sleeps: call from process context (a worker),
    /// not from the send path, which holds a spinlock.
    pub(crate) fn grow_mrs(&self, n: usize) -> Result<usize> {
        let st = self.conn.events();
        let made = self.conn.add_mrs(n)?;
        let k = made.len();
        let mut free = st.free_mrs.lock();
        for i in made {
            free.push(i);
        }
        drop(free);
        st.note_release();
        self.count_mrs(k);
        Ok(k)
    }

    /// Gives back the regions of a token whose REG_MR requests were never
    /// posted (the call was not sent); `epoch`, the caller's reading from
    /// before it registered them, counts them as its own releases.
    pub(crate) fn release_unposted(&self, reg: Registration, epoch: &mut ReleaseEpoch) -> Invalidated {
        let st = self.conn.events();
        self.conn.release_unposted(reg, |i| {
            st.pool_mr(i);
            epoch.own(1);
        })
    }

    /// Invalidates the regions of `reg` and takes them back; see
    /// [`Live::invalidate`]. Sleeps.
    pub(crate) fn invalidate(
        &self,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
    ) -> (Invalidated, usize) {
        self.conn.events().invalidate(&self.conn, reg, remotely_invalidated, None)
    }
}

impl<T: ConnHandler> Live<'_, T> {
    /// Invalidates the regions of `reg` and takes them back; the region
    /// whose rkey the server already invalidated (Send With Invalidate) is
    /// skipped. Sleeps until the LOCAL_INV work requests complete. Returns
    /// how many regions needed a LOCAL_INV. A token from an earlier
    /// connection holds nothing and is simply emptied. The usual case (the
    /// one region the peer invalidated) is inlined here, the rest is a
    /// call (see `Conn::invalidate`).
    #[inline]
    pub(crate) fn invalidate(
        &self,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
        kept: Option<&KeptMr>,
    ) -> (Invalidated, usize) {
        self.0.events().invalidate(self.0, reg, remotely_invalidated, kept)
    }

    /// [`Live::invalidate`] of a token's one region
    /// ([`PostedRegistration::split`]): the usual call's. The region the
    /// server invalidated is taken back inline (its index and generation
    /// stay in registers); any other case is [`Live::invalidate`]'s.
    #[inline(always)]
    pub(crate) fn invalidate_one(
        &self,
        reg: OnePostedRegistration,
        remotely_invalidated: Option<u32>,
        kept: Option<&KeptMr>,
    ) -> (Invalidated, usize) {
        match self.0.invalidated_remotely(reg, remotely_invalidated) {
            Ok((proof, idle)) => {
                if let Some(i) = idle {
                    self.0.events().reuse_mr(kept, self.0.generation(), i);
                }
                (proof, 0)
            }
            Err(reg) => self.invalidate(reg.into(), remotely_invalidated, kept),
        }
    }
}
