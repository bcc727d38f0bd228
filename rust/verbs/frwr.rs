// SPDX-License-Identifier: GPL-2.0

//! Fast registration (FRWR): the pool of memory regions, registering a
//! chunk's pages and invalidating them after the reply (RFC 8166 section
//! 3.4; the regions themselves are [`kapi::ib::mr`](crate::kapi::ib::mr)).

use core::sync::atomic::Ordering;

use kernel::error::{Error, Result};

use super::{
    endpoint::{Connection, EpState, Live},
    Closed, ConnHandler, FillOne, FillSg, InFlight, Lender, Registered, Registration, Released, RemoteInv, Reuse,
};
use crate::kapi::{errno, ib::Conn, page::Dir};

impl<T: ConnHandler> EpState<T> {
    /// Puts region `index` back in the pool.
    #[inline(never)]
    pub(super) fn pool_mr(&self, index: usize) {
        self.free_mrs.lock().push(index);
        self.note_release();
    }

    /// See [`Connection::release`]; each region taken back goes to
    /// `reuse`.
    #[inline(always)]
    fn release(
        &self,
        conn: &Conn<Self>,
        lender: &Lender,
        t: InFlight,
        remotely_invalidated: Option<RemoteInv>,
        reuse: impl Reuse,
    ) -> core::result::Result<(Released, usize), InFlight> {
        let fail = || self.handler.inject_local_inv_failure();
        let (proof, how) = conn.release(lender, t, remotely_invalidated, fail, reuse)?;
        if how.post_failed {
            self.handler.invalidate_failed();
        }
        Ok((proof, how.local))
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Makes the token of `lender` on this connection, for registering
    /// regions ([`Connection::register`]) and the Send that advertises
    /// them. Fails with `EBUSY` if a token of the lender exists.
    #[inline(always)]
    pub(crate) fn begin(&self, lender: &Lender) -> Result<Registration> {
        self.conn.begin(lender)
    }

    /// Registers one memory region from the pool for `reg`: `fill`
    /// describes its pages (the token's lender's, at most the region's
    /// depth), which the peer reads (`D` is `Outbound`: a Read chunk) or
    /// writes (`Inbound`: Write and Reply chunks); `tag` goes in the iova's
    /// upper half. The REG_MR work request is posted in front of the next
    /// [`send`] of `reg`. Fails with `ENOBUFS` when no region is free.
    ///
    /// [`send`]: Connection::send
    #[inline(always)]
    pub(crate) fn register<D: Dir>(
        &self,
        reg: &mut Registration,
        tag: u32,
        fill: impl FillSg<D>,
    ) -> Result<Registered> {
        let index = self.pool_take()?;
        self.register_at(reg, index, tag, fill)
    }

    /// [`Connection::register`] of region `index`, which the caller took
    /// from the pool ([`Connection::pool_take`]) or kept since it came
    /// back idle; on failure it goes to the pool.
    #[inline(always)]
    pub(crate) fn register_at<D: Dir>(
        &self,
        reg: &mut Registration,
        index: usize,
        tag: u32,
        fill: impl FillSg<D>,
    ) -> Result<Registered> {
        self.conn.register(reg, index, tag, fill).inspect_err(|_| self.conn.events().pool_mr(index))
    }

    /// Registers region `index` (taken from the pool,
    /// [`Connection::pool_take`], or kept since it came back idle) for a
    /// token of `lender` and sends the message `fill` builds, which
    /// advertises it, in one call: see
    /// [`Conn::send_one`](crate::kapi::ib::Conn::send_one). On failure the
    /// region goes to the pool unless it is kept out of use (or was not
    /// idle: not the caller's); returns the error, how many regions went
    /// to the pool, and the token to end with
    /// [`Connection::release_unposted`], holding no spinlock, after a post
    /// that stopped part of the way.
    #[inline(always)]
    pub(crate) fn send_one<D: Dir>(
        &self,
        lender: &Lender,
        index: usize,
        tag: u32,
        fill_sg: impl FillSg<D>,
        fill: impl FillOne,
    ) -> core::result::Result<(InFlight, Registered), (Error, usize, Option<Registration>)> {
        match self.conn.send_one(lender, index, tag, fill_sg, fill) {
            Ok((t, sent, seg)) => {
                self.conn.events().count(sent);
                Ok((t, seg))
            }
            Err(f) => {
                if f.idle {
                    self.conn.events().pool_mr(index);
                }
                Err((f.err, usize::from(f.idle), f.unposted))
            }
        }
    }

    /// An idle region from the pool. Fails with `ENOBUFS` when the pool is
    /// empty, and remembers that one was wanted
    /// ([`Connection::take_mrs_wanted`]).
    #[inline(always)]
    pub(crate) fn pool_take(&self) -> Result<usize> {
        let st = self.conn.events();
        match st.free_mrs.lock().pop() {
            Some(i) => Ok(i),
            None => {
                st.mrs_wanted.store(true, Ordering::Relaxed);
                Err(errno::ENOBUFS())
            }
        }
    }

    /// Puts idle region `index` back in the pool (a waiting sender may try
    /// again: [`ConnHandler::released`]).
    pub(crate) fn pool_put(&self, index: usize) {
        self.conn.events().pool_mr(index);
    }

    /// True if a registration found no region idle since the last call:
    /// regions are to be made ([`Connection::grow_mrs`]) or, when no more
    /// may be made, idle ones the owner keeps given back, from process
    /// context. Asking the pool itself after the failed call gave back
    /// what it had registered would not do: a call of two regions that got
    /// one finds one idle again, and waits for ever.
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

    /// Gives back the regions of a token whose Send was never posted (the
    /// call was not sent) to the pool, and its lender. Returns the proof
    /// and how many regions went back, or the token if it is not
    /// `lender`'s or this connection's.
    pub(crate) fn release_unposted(
        &self,
        lender: &Lender,
        reg: Registration,
    ) -> core::result::Result<(Released, usize), Registration> {
        let st = self.conn.events();
        let mut n = 0;
        let proof = self.conn.release_unposted(lender, reg, |i| {
            st.pool_mr(i);
            n += 1;
        })?;
        Ok((proof, n))
    }

    /// Ends the token `t` of `lender`, its regions going back to the pool;
    /// see [`Live::release_closing`]. Sleeps.
    pub(crate) fn release(
        &self,
        lender: &Lender,
        t: InFlight,
        remotely_invalidated: Option<RemoteInv>,
    ) -> core::result::Result<(Released, usize), InFlight> {
        let st = self.conn.events();
        st.release(&self.conn, lender, t, remotely_invalidated, |i: usize| st.pool_mr(i))
    }
}

impl<T: ConnHandler> Live<'_, T> {
    /// Ends the token `t` of `lender` (a call's, answered on this
    /// connection): invalidates its regions, skipping the one whose rkey
    /// the server already invalidated (Send With Invalidate), and waits
    /// for its Send if it mapped pages. Sleeps until the LOCAL_INV work
    /// requests complete. Each region that may be registered again goes
    /// to `reuse` (which keeps it or gives it back, [`Live::pool_put`]).
    /// Returns the lender closed (no token of it can be made while the
    /// reply completes its request) and how many regions needed a
    /// LOCAL_INV. A token of another lender or connection comes back.
    #[inline(always)]
    pub(crate) fn release_closing<'l>(
        &self,
        lender: &'l Lender,
        t: InFlight,
        remotely_invalidated: Option<RemoteInv>,
        reuse: impl Reuse,
    ) -> core::result::Result<(Closed<'l>, usize), InFlight> {
        let st = self.0.events();
        let fail = || st.handler.inject_local_inv_failure();
        let (closed, how) = self.0.release_closing(lender, t, remotely_invalidated, fail, reuse)?;
        if how.post_failed {
            st.handler.invalidate_failed();
        }
        Ok((closed, how.local))
    }

    /// See [`Connection::pool_put`].
    pub(crate) fn pool_put(&self, index: usize) {
        self.0.events().pool_mr(index);
    }
}
