// SPDX-License-Identifier: GPL-2.0

//! Fast registration (FRWR): the pool of memory regions, registering a
//! chunk's pages and invalidating them after the reply (RFC 8166 section
//! 3.4; the regions themselves are [`kapi::ib::mr`](crate::kapi::ib::mr)).

use kernel::error::Result;

use super::{
    endpoint::{Connection, EpState, Live},
    ConnHandler, Invalidated, PostedRegistration, Registered, Registration, SgWriter,
};
use crate::kapi::{errno, ib::Conn};

impl<T: ConnHandler> EpState<T> {
    /// See [`Connection::invalidate`].
    #[inline(always)]
    fn invalidate(
        &self,
        conn: &Conn<Self>,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
    ) -> (Invalidated, usize) {
        let fail = || self.handler.inject_local_inv_failure();
        let (proof, how) = conn.invalidate(reg, remotely_invalidated, fail, |i| {
            self.free_mrs.lock().push(i);
            self.note_release();
        });
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
        let st = self.conn.events();
        let index = st.free_mrs.lock().pop().ok_or_else(errno::ENOBUFS)?;
        self.conn.register(reg, index, to_device, xid, fill).inspect_err(|_| st.free_mrs.lock().push(index))
    }

    /// Regions made so far on this connection.
    pub(crate) fn mrs_made(&self) -> usize {
        self.conn.mrs_made()
    }

    /// True if every region made is in use and more may be made: a
    /// caller that failed with `ENOBUFS` for want of one should have
    /// [`Connection::grow_mrs`] called (from process context).
    pub(crate) fn mrs_exhausted(&self) -> bool {
        let c = &self.conn;
        c.mrs_made() < c.max_mrs() && c.events().free_mrs.lock().len() == 0
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
        Ok(k)
    }

    /// Gives back the regions of a token whose REG_MR requests were never
    /// posted (the call was not sent).
    pub(crate) fn release_unposted(&self, reg: Registration) -> Invalidated {
        let st = self.conn.events();
        self.conn.release_unposted(reg, |i| {
            st.free_mrs.lock().push(i);
            st.note_release();
        })
    }

    /// Invalidates the regions of `reg` and takes them back; see
    /// [`Live::invalidate`]. Sleeps.
    pub(crate) fn invalidate(
        &self,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
    ) -> (Invalidated, usize) {
        self.conn.events().invalidate(&self.conn, reg, remotely_invalidated)
    }
}

impl<T: ConnHandler> Live<'_, T> {
    /// Invalidates the regions of `reg` and takes them back; the region
    /// whose rkey the server already invalidated (Send With Invalidate) is
    /// skipped. Sleeps until the LOCAL_INV work requests complete. Returns
    /// how many regions needed a LOCAL_INV. A token from an earlier
    /// connection holds nothing and is simply emptied.
    pub(crate) fn invalidate(
        &self,
        reg: PostedRegistration,
        remotely_invalidated: Option<u32>,
    ) -> (Invalidated, usize) {
        self.0.events().invalidate(self.0, reg, remotely_invalidated)
    }
}
