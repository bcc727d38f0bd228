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

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
};

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

/// The Send buffers in the order Sends use them, the Send queue's room,
/// and when to signal.
///
/// No list of free buffers is kept: the next buffer is the one after the
/// last posted, and it is free unless every buffer is outstanding.
///
/// # Invariants
///
/// `wrs_end` is empty or `next < wrs_end.len()`, `outstanding <=
/// wrs_end.len()`. The `outstanding` buffers before `next` (round the
/// ring) hold posted Sends not yet reclaimed, the oldest first. `room`
/// plus the slots held (`sent_wrs - reclaimed_wrs + reserved_wrs`,
/// wrapping) is the budget the ring was made with.
pub(crate) struct SendRing {
    /// Per Send buffer: `sent_wrs` just after its last Send was posted.
    wrs_end: KVec<usize>,
    /// The buffer the next Send uses.
    next: usize,
    /// Posted Sends not yet reclaimed: the buffers just before `next`.
    outstanding: usize,
    /// Send queue slots taken by every Send posted so far (wrapping): a
    /// Send takes one for itself and one per REG_MR chained in front.
    sent_wrs: usize,
    /// `sent_wrs` as of the last Send reclaimed: the outstanding Sends hold
    /// `sent_wrs - reclaimed_wrs` slots. On the device, a work request's
    /// slot is free once a signalled completion of it or of a later one
    /// arrives; a Send is reclaimed only then, so this never counts too
    /// few. Kept as two running sums, a completion gives back the slots of
    /// every Send it reclaims at once.
    reclaimed_wrs: usize,
    /// Send queue slots held by [`SendPolicy::reserve`].
    reserved_wrs: usize,
    /// Send queue slots free: the budget less those held, kept as it
    /// changes so that a post tests one value.
    room: usize,
    signals: SendSignals,
}

impl SendRing {
    /// A ring with no buffers (a connection before its queue pair).
    pub(super) fn idle() -> Self {
        Self::with(KVec::new(), 0, SendSignals::new(0, 1))
    }

    /// A ring of `n` buffers and `budget` send queue slots, signalling
    /// every `signal_interval` Sends at least.
    pub(super) fn new(n: usize, budget: usize, signal_interval: u32) -> Result<Self> {
        let buffers = u32::try_from(n).map_err(|_| kernel::error::code::EINVAL)?;
        Ok(Self::with(KVec::from_elem(0, n, GFP_KERNEL)?, budget, SendSignals::new(buffers, signal_interval)))
    }

    fn with(wrs_end: KVec<usize>, budget: usize, signals: SendSignals) -> Self {
        // INVARIANT: `next` is 0, nothing outstanding.
        SendRing {
            wrs_end,
            next: 0,
            outstanding: 0,
            sent_wrs: 0,
            reclaimed_wrs: 0,
            reserved_wrs: 0,
            room: budget,
            signals,
        }
    }

    /// The buffer after `i`, round the ring.
    #[inline(always)]
    fn after(&self, i: usize) -> usize {
        // `i` is an index, far below `usize::MAX`.
        let j = i.wrapping_add(1);
        if j >= self.wrs_end.len() {
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
            None => self.next.wrapping_add(self.wrs_end.len()).wrapping_sub(self.outstanding),
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
            None => index.wrapping_add(self.wrs_end.len()).wrapping_sub(oldest),
        };
        (d < self.outstanding).then_some(d)
    }
}

impl SendPolicy for SendRing {
    #[inline(always)]
    fn take(&mut self, wrs: usize) -> Option<usize> {
        if self.outstanding >= self.wrs_end.len() || wrs > self.room {
            return None;
        }
        Some(self.next)
    }

    #[inline(always)]
    fn signal(&mut self, _index: usize, mapped: bool) -> bool {
        // `take` found a buffer idle: `outstanding < len`.
        let idle_after = self.wrs_end.len().wrapping_sub(self.outstanding).wrapping_sub(1);
        self.signals.post(mapped, idle_after)
    }

    #[inline(always)]
    fn posted(&mut self, index: usize, wrs: usize, _mapped: bool) {
        self.next = self.after(index);
        // Neither count exceeds the ring's length: `take` found a buffer
        // that was not outstanding, and `wrs` slots free.
        self.outstanding = self.outstanding.wrapping_add(1);
        self.sent_wrs = self.sent_wrs.wrapping_add(wrs);
        self.room = self.room.wrapping_sub(wrs);
        let sent_wrs = self.sent_wrs;
        if let Some(end) = self.wrs_end.get_mut(index) {
            *end = sent_wrs;
        }
    }

    #[inline(always)]
    fn completed(&mut self, index: usize) -> usize {
        // Already reclaimed by a later signalled completion, if not
        // outstanding (a flushed unsignalled Send reports itself too).
        let Some(before) = self.outstanding_at(index) else { return 0 };
        // `before < outstanding <= len`: neither this nor the counts taken
        // back below can wrap.
        let n = before.wrapping_add(1);
        // The slots of every Send through `index`'s come back at once.
        let reclaimed = self.wrs_end.get(index).copied().unwrap_or(self.sent_wrs);
        // At most what the outstanding Sends held: the room stays within
        // the budget.
        self.room = self.room.wrapping_add(reclaimed.wrapping_sub(self.reclaimed_wrs));
        self.reclaimed_wrs = reclaimed;
        // INVARIANT: the `n` oldest outstanding buffers are idle again.
        self.outstanding = self.outstanding.wrapping_sub(n);
        n
    }

    fn reserve(&mut self, wrs: usize) -> bool {
        if wrs > self.room {
            return false;
        }
        // At most the budget now.
        self.reserved_wrs = self.reserved_wrs.wrapping_add(wrs);
        self.room = self.room.wrapping_sub(wrs);
        true
    }

    fn unreserve(&mut self, wrs: usize) {
        let wrs = wrs.min(self.reserved_wrs);
        self.reserved_wrs = self.reserved_wrs.wrapping_sub(wrs);
        // Back to where it was before they were reserved.
        self.room = self.room.wrapping_add(wrs);
    }
}

impl<T: ConnHandler> EpState<T> {
    /// Counts a posted Send.
    #[inline]
    fn count(&self, sent: Sent) {
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

    /// [`Connection::send`] with the RDMA Writes of `writes` chained in
    /// front of the Send (a responder's Write chunks): the returned token
    /// holds them until the Send is done. See
    /// [`Conn::send_with_writes`](crate::kapi::ib::Conn::send_with_writes)
    /// for what comes back on failure.
    #[allow(clippy::type_complexity)]
    pub(crate) fn send_with_writes(
        &self,
        reg: Registration,
        writes: RwChunk<Outbound>,
        invalidate: Option<u32>,
        fill: impl Fill<Mapping>,
    ) -> core::result::Result<InFlight, (SendFailed, Option<RwChunk<Outbound>>)> {
        let (t, sent) = self.conn.send_with_writes(reg, writes, invalidate, fill)?;
        self.conn.events().count(sent);
        Ok(t)
    }

    /// Sends a message that is copied whole into a Send buffer and names
    /// nothing else: no token. See [`Connection::send`].
    #[inline(always)]
    pub(crate) fn send_copied(&self, fill: impl Fill<Copying>) -> Result {
        let sent = self.conn.send_copied(None, fill)?;
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
