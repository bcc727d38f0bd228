// SPDX-License-Identifier: GPL-2.0
//! Credits, Receive batching and Send Queue arithmetic (RFC 8166 section
//! 3.3.1).
//!
//! Everything here is plain counting; the kernel holds the locks and does the
//! posting. The pieces:
//!
//! * [`sanitize_grant`] and [`cwnd_from_credits`]: a peer's `rdma_credit`
//!   grant becomes the congestion window SUNRPC enforces.
//! * [`recv_batch`]: how many consumed Receives are reposted together (one
//!   chained `ib_post_recv`).
//! * [`SendQueue`]: Send Queue slot accounting and the completion-signalling
//!   policy.

/// SUNRPC's congestion window scale: `cwnd = credits << RPC_CWNDSHIFT`
/// (`RPC_CWNDSHIFT` in `include/linux/sunrpc/xprt.h`).
pub const RPC_CWNDSHIFT: u32 = 8;

/// Largest Receive refill batch [`recv_batch`] returns.
pub const MAX_RECV_BATCH: u32 = 32;

/// Sanitises a credit grant received from the peer: 0 becomes 1 (a zero
/// window would deadlock the transport: no Call could be sent to learn a new
/// grant) and the result never exceeds `max_requests` (our own slot count;
/// a `max_requests` of 0 is treated as 1).
pub fn sanitize_grant(grant: u32, max_requests: u32) -> u32 {
    grant.clamp(1, max_requests.max(1))
}

/// The SUNRPC congestion window (`xprt->cwnd`) for a credit count.
pub fn cwnd_from_credits(credits: u32) -> u64 {
    u64::from(credits) << RPC_CWNDSHIFT
}

/// Receive refill batch for a credit window: one eighth of the window,
/// at least 1 and at most [`MAX_RECV_BATCH`].
///
/// Scaling with the window keeps doorbells rare on busy wide windows
/// (128 credits: a chained post every 16 Replies) while a narrow window
/// does not pin many idle buffers (the in-tree client uses a fixed 7).
pub fn recv_batch(credits: u32) -> u32 {
    (credits / 8).clamp(1, MAX_RECV_BATCH)
}

/// A Send Queue failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqError {
    /// Not enough free slots: wait for a signalled completion.
    Full {
        /// Slots asked for.
        needed: u32,
        /// Slots free now.
        available: u32,
    },
}

/// What to do with a posted chain of WRs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendSignal {
    /// Set `IB_SEND_SIGNALED` on the chain's last WR.
    pub signaled: bool,
    /// Slots to give back with [`SendQueue::complete`] when that signalled
    /// WR completes (this chain plus every earlier unsignalled WR); 0 when
    /// not signalled.
    pub reclaim: u32,
}

/// Send Queue slot accounting and completion-signalling policy.
///
/// A slot is *reserved* before an RPC is marshalled (one for each WR it
/// may post: REG_MRs, Send, and the LOCAL_INVs it may post later), *posted*
/// when a chain goes out ([`post`](Self::post)), and *reclaimed* when a
/// signalled WR completes ([`complete`](Self::complete)): an unsignalled
/// WR's slot only comes back with the next signalled completion after it.
/// Reserved slots that will never be posted (marshalling failed, LOCAL_INVs
/// made unnecessary by Send With Invalidate) go back with
/// [`unreserve`](Self::unreserve).
///
/// A chain is signalled when the caller asks (the Send carries DMA-mapped
/// pages that must be unmapped promptly, or a LOCAL_INV chain whose
/// completion the caller waits for), when at least `signal_interval` WRs
/// would be unsignalled, or when fewer than `signal_interval` slots remain
/// free. The interval is clamped to half the usable queue, so as long as no
/// RPC reserves more than half of it, an RPC waiting for room can always
/// count on a signalled completion to come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendQueue {
    capacity: u32,
    in_use: u32,
    unsignaled: u32,
    interval: u32,
}

/// A default completion-signalling interval: one Send in eight of the credit
/// window (the in-tree client's choice), at least 1.
pub fn default_signal_interval(max_requests: u32) -> u32 {
    (max_requests / 8).max(1)
}

impl SendQueue {
    /// A Send Queue of `max_send_wr` WRs of which `reserved` are kept aside
    /// (drain WR, backchannel replies), signalling at least every
    /// `signal_interval` WRs.
    pub fn new(max_send_wr: u32, reserved: u32, signal_interval: u32) -> SendQueue {
        let capacity = max_send_wr.saturating_sub(reserved);
        let interval = signal_interval.clamp(1, (capacity / 2).max(1));
        SendQueue { capacity, in_use: 0, unsignaled: 0, interval }
    }

    /// Usable slots.
    pub fn capacity(&self) -> u32 {
        self.capacity
    }

    /// Slots reserved or posted and not yet reclaimed.
    pub fn in_use(&self) -> u32 {
        self.in_use
    }

    /// Free slots.
    pub fn available(&self) -> u32 {
        self.capacity.saturating_sub(self.in_use)
    }

    /// Posted WRs waiting for a signalled completion to reclaim them.
    pub fn unsignaled(&self) -> u32 {
        self.unsignaled
    }

    /// The effective signalling interval.
    pub fn signal_interval(&self) -> u32 {
        self.interval
    }

    /// Reserves `wrs` slots, or fails without changing anything.
    pub fn try_reserve(&mut self, wrs: u32) -> Result<(), SqError> {
        let available = self.available();
        if wrs > available {
            return Err(SqError::Full { needed: wrs, available });
        }
        // Cannot saturate: `wrs` fits in what is left of the capacity.
        self.in_use = self.in_use.saturating_add(wrs);
        Ok(())
    }

    /// Returns `wrs` reserved slots that will not be posted.
    pub fn unreserve(&mut self, wrs: u32) {
        self.in_use = self.in_use.saturating_sub(wrs);
    }

    /// Records the posting of a chain of `wrs` previously reserved WRs and
    /// decides whether its last WR is signalled. `must_signal` forces it.
    /// The signalled WR must be the chain's last (an earlier one completing
    /// would not prove the later ones done).
    pub fn post(&mut self, wrs: u32, must_signal: bool) -> SendSignal {
        let pending = self.unsignaled.saturating_add(wrs);
        if must_signal || pending >= self.interval || self.available() < self.interval {
            self.unsignaled = 0;
            SendSignal { signaled: true, reclaim: pending }
        } else {
            self.unsignaled = pending;
            SendSignal { signaled: false, reclaim: 0 }
        }
    }

    /// A signalled WR completed (successfully or flushed): gives back the
    /// `reclaim` slots its [`SendSignal`] carried.
    pub fn complete(&mut self, reclaim: u32) {
        self.in_use = self.in_use.saturating_sub(reclaim);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_sanitised() {
        assert_eq!(sanitize_grant(0, 128), 1);
        assert_eq!(sanitize_grant(1, 128), 1);
        assert_eq!(sanitize_grant(64, 128), 64);
        assert_eq!(sanitize_grant(128, 128), 128);
        assert_eq!(sanitize_grant(129, 128), 128);
        assert_eq!(sanitize_grant(u32::MAX, 128), 128);
        assert_eq!(sanitize_grant(5, 0), 1);
        assert_eq!(sanitize_grant(0, 0), 1);
    }

    #[test]
    fn cwnd_conversion() {
        assert_eq!(cwnd_from_credits(1), 256);
        assert_eq!(cwnd_from_credits(128), 32768);
        assert_eq!(cwnd_from_credits(u32::MAX), u64::from(u32::MAX) << 8);
    }

    #[test]
    fn receive_batches_scale_with_the_window() {
        assert_eq!(recv_batch(0), 1);
        assert_eq!(recv_batch(1), 1);
        assert_eq!(recv_batch(15), 1);
        assert_eq!(recv_batch(16), 2);
        assert_eq!(recv_batch(128), 16);
        assert_eq!(recv_batch(256), 32);
        assert_eq!(recv_batch(u32::MAX), MAX_RECV_BATCH);
    }

    #[test]
    fn send_queue_signals_every_interval() {
        let mut sq = SendQueue::new(1000, 1, 4);
        assert_eq!(sq.capacity(), 999);
        assert_eq!(sq.signal_interval(), 4);
        for _ in 0..3 {
            sq.try_reserve(1).unwrap();
            assert_eq!(sq.post(1, false), SendSignal { signaled: false, reclaim: 0 });
        }
        assert_eq!(sq.in_use(), 3);
        assert_eq!(sq.unsignaled(), 3);
        sq.try_reserve(1).unwrap();
        assert_eq!(sq.post(1, false), SendSignal { signaled: true, reclaim: 4 });
        assert_eq!(sq.unsignaled(), 0);
        sq.complete(4);
        assert_eq!(sq.in_use(), 0);
        // A Send with mapped pages is always signalled.
        sq.try_reserve(1).unwrap();
        assert_eq!(sq.post(1, false), SendSignal { signaled: false, reclaim: 0 });
        sq.try_reserve(3).unwrap();
        assert_eq!(sq.post(3, true), SendSignal { signaled: true, reclaim: 4 });
        sq.complete(4);
        assert_eq!(sq.available(), 999);
    }

    #[test]
    fn send_queue_reservations_and_full() {
        // Per RPC: 2 REG_MR + Send + 2 LOCAL_INV = 5 slots.
        let mut sq = SendQueue::new(12, 2, 100);
        assert_eq!(sq.capacity(), 10);
        assert_eq!(sq.signal_interval(), 5, "clamped to half the queue");
        sq.try_reserve(5).unwrap();
        sq.try_reserve(5).unwrap();
        assert_eq!(sq.try_reserve(1), Err(SqError::Full { needed: 1, available: 0 }));
        assert_eq!(sq.in_use(), 10);
        // Both Calls go out (REG_MR, REG_MR, Send): the queue is nearly full
        // so each chain is signalled.
        assert_eq!(sq.post(3, false), SendSignal { signaled: true, reclaim: 3 });
        assert_eq!(sq.post(3, false), SendSignal { signaled: true, reclaim: 3 });
        sq.complete(3);
        sq.complete(3);
        assert_eq!(sq.available(), 6);
        // The first Reply came with Send With Invalidate: one LOCAL_INV.
        sq.unreserve(1);
        assert_eq!(sq.post(1, true), SendSignal { signaled: true, reclaim: 1 });
        sq.complete(1);
        assert_eq!(sq.in_use(), 2);
        // Degenerate sizes do not panic.
        let mut sq = SendQueue::new(0, 5, 0);
        assert_eq!(sq.capacity(), 0);
        assert_eq!(sq.signal_interval(), 1);
        assert_eq!(sq.try_reserve(1), Err(SqError::Full { needed: 1, available: 0 }));
        sq.complete(7);
        sq.unreserve(7);
        assert_eq!(sq.post(u32::MAX, false).reclaim, u32::MAX);
        assert_eq!(sq.post(u32::MAX, false).reclaim, u32::MAX);
    }

    #[test]
    fn default_interval() {
        assert_eq!(default_signal_interval(128), 16);
        assert_eq!(default_signal_interval(7), 1);
        assert_eq!(default_signal_interval(0), 1);
    }
}
