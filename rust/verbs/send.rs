// SPDX-License-Identifier: GPL-2.0

//! Sending: the ring of Send buffers, the Send queue's room, and when a
//! Send asks for a completion.
//!
//! Sends take the buffers round the ring, one after the other, and are
//! posted in that order (kapi numbers and posts them under the lock its
//! policy is kept under). Only every few Sends is signalled: a signalled
//! completion gives back its buffer and every buffer posted before it (the
//! queue pair completes in order). A Send that maps pages is always
//! signalled, so that they are unmapped promptly. kapi refuses a buffer
//! whose last Send is not known done, whatever this ring says: its
//! accounting decides when a Send waits, never what the device may touch.

use core::sync::atomic::Ordering;

use kernel::error::Result;

use super::{
    endpoint::{Connection, EpState, Live},
    ConnHandler, Fill, InFlight, Registration, SendFailed,
};
use crate::{
    kapi::{
        ib::{Copying, Mapping, RwChunk, SendPolicy, Sent},
        page::Outbound,
    },
    proto::credits::SendSignals,
};

/// The Send buffers in the order Sends use them, and when to signal.
///
/// No list of free buffers is kept: the next buffer is the one after the
/// last posted, and it is free unless every buffer is outstanding. The
/// Send queue's room is not counted here: kapi counts it, and refuses a
/// Send or an R/W operation it has no room for before asking the policy.
///
/// # Invariants
///
/// `len` is 0 or `next < len`, `outstanding <= len`. The `outstanding`
/// buffers before `next` (round the ring) hold posted Sends not yet
/// reclaimed, the oldest first.
pub(crate) struct SendRing {
    /// The number of Send buffers.
    len: usize,
    /// The buffer the next Send uses.
    next: usize,
    /// Posted Sends not yet reclaimed: the buffers just before `next`.
    outstanding: usize,
    signals: SendSignals,
}

impl SendRing {
    /// A ring with no buffers (a connection before its queue pair).
    pub(super) fn idle() -> Self {
        Self::with(0, SendSignals::new(0, 1))
    }

    /// A ring of `n` buffers, signalling every `signal_interval` Sends at
    /// least.
    pub(super) fn new(n: usize, signal_interval: u32) -> Result<Self> {
        let buffers = u32::try_from(n).map_err(|_| kernel::error::code::EINVAL)?;
        Ok(Self::with(n, SendSignals::new(buffers, signal_interval)))
    }

    fn with(len: usize, signals: SendSignals) -> Self {
        // INVARIANT: `next` is 0, nothing outstanding.
        SendRing { len, next: 0, outstanding: 0, signals }
    }

    /// The buffer after `i`, round the ring.
    #[inline(always)]
    fn after(&self, i: usize) -> usize {
        // `i` is an index, far below `usize::MAX`.
        let j = i.wrapping_add(1);
        if j >= self.len {
            0
        } else {
            j
        }
    }

    /// The oldest outstanding Send's buffer (`next` if none is).
    #[inline(always)]
    fn oldest(&self) -> usize {
        match self.next.checked_sub(self.outstanding) {
            Some(i) => i,
            // Round the ring: `outstanding <= len` and `next < len` (type
            // invariant), so this neither wraps nor exceeds the ring.
            None => self.next.wrapping_add(self.len).wrapping_sub(self.outstanding),
        }
    }

    /// How far buffer `index` lies after the oldest outstanding one, if it
    /// holds an outstanding Send.
    #[inline(always)]
    fn outstanding_at(&self, index: usize) -> Option<usize> {
        let oldest = self.oldest();
        let d = match index.checked_sub(oldest) {
            Some(d) => d,
            // Round the ring; an `index` past the ring gives a `d` past
            // `outstanding`, whatever it wrapped to.
            None => index.wrapping_add(self.len).wrapping_sub(oldest),
        };
        (d < self.outstanding).then_some(d)
    }
}

impl SendPolicy for SendRing {
    #[inline(always)]
    fn take(&mut self, _wrs: usize) -> Option<usize> {
        // The queue's room is kapi's to check, and it did.
        (self.outstanding < self.len).then_some(self.next)
    }

    #[inline(always)]
    fn signal(&mut self, _index: usize, mapped: bool) -> bool {
        // `take` found a buffer idle: `outstanding < len`.
        let idle_after = self.len.wrapping_sub(self.outstanding).wrapping_sub(1);
        self.signals.post(mapped, idle_after)
    }

    #[inline(always)]
    fn posted(&mut self, index: usize, _wrs: usize, _mapped: bool) {
        self.next = self.after(index);
        // INVARIANT: below the ring's length: `take` found a buffer that
        // was not outstanding.
        self.outstanding = self.outstanding.wrapping_add(1);
    }

    #[inline(always)]
    fn completed(&mut self, index: usize) -> usize {
        // Already reclaimed by a later signalled completion, if not
        // outstanding (a flushed unsignalled Send reports itself too).
        let Some(before) = self.outstanding_at(index) else { return 0 };
        // `before < outstanding <= len`: no wrap.
        let n = before.wrapping_add(1);
        // INVARIANT: the `n` oldest outstanding buffers are idle again.
        self.outstanding = self.outstanding.wrapping_sub(n);
        n
    }

    fn reserve(&mut self, _wrs: usize) -> bool {
        // kapi found the room; the client has no R/W operations to ration.
        true
    }

    fn unreserve(&mut self, _wrs: usize) {}
}

impl<T: ConnHandler> EpState<T> {
    /// Counts a posted Send.
    #[inline]
    pub(super) fn count(&self, sent: Sent) {
        self.counters.sends.fetch_add(1, Ordering::Relaxed);
        // Most Sends are neither: skip the locked adds of zero.
        if sent.signaled {
            self.counters.sends_signalled.fetch_add(1, Ordering::Relaxed);
        }
        if sent.mapped {
            self.counters.sends_mapped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl<T: ConnHandler> Connection<T> {
    /// Sends one message for the token `reg`: `fill` (a closure, or a
    /// value that must be inlined: [`Fill`]) builds it, copying bytes into
    /// a pre-mapped buffer and mapping pages of the token's lender in place
    /// ([`SendWriter`](super::SendWriter)). The regions registered in `reg`
    /// are posted in front of the Send; the returned token holds them (and
    /// the Send, if it mapped pages) until [`Connection::release`]. Fails
    /// with `ENOBUFS` when every Send buffer is in flight or the queue is
    /// full (wait for [`ConnHandler::send_done`]); on failure the
    /// registration comes back.
    #[inline(always)]
    pub(crate) fn send(
        &self,
        reg: Registration,
        fill: impl Fill<Mapping>,
    ) -> core::result::Result<InFlight, SendFailed> {
        let (t, sent) = self.conn.send(reg, None, fill)?;
        self.conn.events().count(sent);
        Ok(t)
    }

    /// Sends a message copied whole into a Send buffer with the RDMA
    /// Writes of `writes` chained in front of it (a responder's Write and
    /// Reply chunks), as a Send With Invalidate of the peer's
    /// `invalidate` rkey if there is one. No token: the Send's completion
    /// destroys the writes and lets their pages go, and nobody waits for
    /// it. See [`Conn::send_after_writes`](crate::kapi::ib::Conn::send_after_writes)
    /// for what comes back on failure (`ENOBUFS`: no Send buffer free or
    /// no room in the queue, the writes back to post again).
    pub(crate) fn send_after_writes(
        &self,
        writes: RwChunk<Outbound>,
        invalidate: Option<u32>,
        fill: impl Fill<Copying>,
    ) -> core::result::Result<(), (kernel::error::Error, Option<RwChunk<Outbound>>)> {
        let sent = self.conn.send_after_writes(writes, invalidate, fill)?;
        self.conn.events().count(sent);
        Ok(())
    }

    /// Sends a message that is copied whole into a Send buffer and names
    /// nothing else: no token. See [`Connection::send`].
    #[inline(always)]
    pub(crate) fn send_copied(&self, fill: impl Fill<Copying>) -> Result {
        self.send_copied_invalidating(None, fill)
    }

    /// [`Connection::send_copied`], as a Send With Invalidate of the
    /// peer's rkey `invalidate` if there is one (a responder's reply that
    /// ends the call's registration: RFC 8797 section 4.1).
    #[inline(always)]
    pub(crate) fn send_copied_invalidating(&self, invalidate: Option<u32>, fill: impl Fill<Copying>) -> Result {
        let sent = self.conn.send_copied(invalidate, fill)?;
        self.conn.events().count(sent);
        Ok(())
    }
}

impl<T: ConnHandler> Live<'_, T> {
    /// [`Connection::send_copied`] from a completion handler.
    pub(crate) fn send_copied(&self, fill: impl Fill<Copying>) -> Result {
        let sent = self.0.send_copied(None, fill)?;
        self.0.events().count(sent);
        Ok(())
    }
}
