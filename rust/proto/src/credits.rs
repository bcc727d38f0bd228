// SPDX-License-Identifier: GPL-2.0
//! Credits, Receive posting and Send Queue arithmetic (RFC 8166 section 3.3.1,
//! RFC 8167 section 4).
//!
//! Everything here is plain counting; the kernel holds the locks and does the
//! posting. The pieces:
//!
//! * [`sanitize_grant`] and [`cwnd_from_credits`]: a peer's `rdma_credit`
//!   grant becomes the congestion window SUNRPC enforces.
//! * [`RecvPolicy`]: how many Receives to post now, so that at least one is
//!   posted for every Reply the server may send plus every reverse-direction
//!   Call it may send, refilled in batches (one chained `ib_post_recv`).
//! * [`SendQueue`]: Send Queue slot accounting and the completion-signalling
//!   policy.
//! * [`Credits`]: forward and reverse (backchannel) credits, accounted
//!   separately as RFC 8167 section 4.1 requires.

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

/// The credit count a congestion window stands for (saturating).
pub fn credits_from_cwnd(cwnd: u64) -> u32 {
    u32::try_from(cwnd >> RPC_CWNDSHIFT).unwrap_or(u32::MAX)
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

/// How many Receives to post now, given `posted` Receives outstanding, the
/// `target` that must stay posted and the refill `batch`.
///
/// Nothing while more than `target` are posted; otherwise enough to reach
/// `target + batch`. So the count never falls below `target` between
/// refills, and refills happen once per `batch` consumed Receives.
pub fn recvs_to_post(posted: u32, target: u32, batch: u32) -> u32 {
    if posted > target {
        0
    } else {
        (target - posted).saturating_add(batch)
    }
}

/// Receive posting policy of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvPolicy {
    /// Our maximum credit count (slot table size).
    pub max_credits: u32,
    /// Receives reserved for reverse-direction Calls (the reverse credits we
    /// grant; the in-tree client reserves twice its backchannel slot count).
    pub bc_reqs: u32,
}

impl RecvPolicy {
    /// Receives that must stay posted under a grant of `credits`:
    /// one per possible Reply plus the backchannel reserve.
    pub fn target(&self, credits: u32) -> u32 {
        sanitize_grant(credits, self.max_credits).saturating_add(self.bc_reqs)
    }

    /// Refill batch under a grant of `credits`.
    pub fn batch(&self, credits: u32) -> u32 {
        recv_batch(sanitize_grant(credits, self.max_credits))
    }

    /// Most Receives this policy ever has posted: full target plus the
    /// largest batch.
    pub fn depth(&self) -> u32 {
        self.target(self.max_credits).saturating_add(self.batch(self.max_credits))
    }

    /// Receive Queue size to create the QP with: [`depth`](Self::depth)
    /// plus one for the drain WR.
    pub fn max_recv_wr(&self) -> u32 {
        self.depth().saturating_add(1)
    }

    /// How many Receives to post now (after each Reply, with the current
    /// grant), never exceeding [`depth`](Self::depth) in total.
    pub fn to_post(&self, posted: u32, credits: u32) -> u32 {
        let n = recvs_to_post(posted, self.target(credits), self.batch(credits));
        n.min(self.depth().saturating_sub(posted))
    }

    /// Receives to post before connecting: the grant is 1 until the first
    /// Reply, so one for that Reply, the backchannel reserve and one batch.
    pub fn initial(&self) -> u32 {
        self.to_post(0, 1)
    }
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
/// A slot is *reserved* before an RPC is marshalled (its
/// [`WrBudget::total_wrs`](super::plan::WrBudget::total_wrs): REG_MRs,
/// Send, and the LOCAL_INVs it may post later), *posted* when a chain goes
/// out ([`post`](Self::post)), and *reclaimed* when a signalled WR completes
/// ([`complete`](Self::complete)): an unsignalled WR's slot only comes back
/// with the next signalled completion after it. Reserved slots that will
/// never be posted (marshalling failed, LOCAL_INVs made unnecessary by
/// Send With Invalidate) go back with [`unreserve`](Self::unreserve).
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

    /// Forgets everything (a new QP after reconnect).
    pub fn reset(&mut self) {
        self.in_use = 0;
        self.unsignaled = 0;
    }
}

/// A credit accounting failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreditError {
    /// Every forward credit is in use: wait for a Reply.
    NoCredit,
    /// The peer sent more reverse-direction Calls than we granted credits
    /// for (the in-tree client disconnects).
    BackchannelOverflow,
}

/// Counts one more Call in `in_flight`, or fails with `exhausted` (changing
/// nothing) if all `granted` credits are in use. Forward and reverse credits
/// are taken alike, each from its own counter.
fn take_credit(in_flight: &mut u32, granted: u32, exhausted: CreditError) -> Result<(), CreditError> {
    if *in_flight >= granted {
        return Err(exhausted);
    }
    *in_flight += 1;
    Ok(())
}

/// Forward and reverse (backchannel) credit accounting of one connection.
///
/// Forward credits are granted by the server in the `rdma_credit` field of
/// forward Replies and limit our outstanding Calls. Reverse credits are
/// granted by us in the `rdma_credit` field of our reverse-direction Replies
/// and limit the reverse Calls the server may have outstanding. The credit
/// field of a reverse-direction *Call* from the server is its request for
/// reverse credits and must not be fed to
/// [`on_forward_reply`](Self::on_forward_reply).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Credits {
    max_requests: u32,
    granted: u32,
    in_flight: u32,
    bc_granted: u32,
    bc_in_flight: u32,
}

impl Credits {
    /// A connection that may have `max_requests` forward Calls outstanding
    /// and grants `bc_granted` reverse credits. The forward grant starts at 1.
    pub fn new(max_requests: u32, bc_granted: u32) -> Credits {
        Credits { max_requests: max_requests.max(1), granted: 1, in_flight: 0, bc_granted, bc_in_flight: 0 }
    }

    /// Back to the state of a fresh connection: grant 1, nothing in flight.
    pub fn reset(&mut self) {
        self.granted = 1;
        self.in_flight = 0;
        self.bc_in_flight = 0;
    }

    /// Our slot count: the value to put in the `rdma_credit` field of every
    /// forward Call (we always ask for the maximum).
    pub fn max_requests(&self) -> u32 {
        self.max_requests
    }

    /// The current (sanitised) forward grant.
    pub fn granted(&self) -> u32 {
        self.granted
    }

    /// Forward Calls outstanding.
    pub fn in_flight(&self) -> u32 {
        self.in_flight
    }

    /// SUNRPC congestion window for the current grant.
    pub fn cwnd(&self) -> u64 {
        cwnd_from_credits(self.granted)
    }

    /// Applies the raw `rdma_credit` of a forward Reply. Returns the new
    /// sanitised grant if it changed (the caller then updates `xprt->cwnd`).
    pub fn on_forward_reply(&mut self, raw_grant: u32) -> Option<u32> {
        let g = sanitize_grant(raw_grant, self.max_requests);
        if g == self.granted {
            return None;
        }
        self.granted = g;
        Some(g)
    }

    /// Takes a forward credit for a Call about to be sent.
    pub fn try_start_call(&mut self) -> Result<(), CreditError> {
        take_credit(&mut self.in_flight, self.granted, CreditError::NoCredit)
    }

    /// Gives a forward credit back (Reply received or Call abandoned).
    pub fn finish_call(&mut self) {
        self.in_flight = self.in_flight.saturating_sub(1);
    }

    /// The reverse credits we grant: the value for the `rdma_credit` field
    /// of our reverse-direction Replies.
    pub fn reverse_grant(&self) -> u32 {
        self.bc_granted
    }

    /// Reverse-direction Calls being processed.
    pub fn reverse_in_flight(&self) -> u32 {
        self.bc_in_flight
    }

    /// A reverse-direction Call arrived. Fails if the server exceeded our grant.
    pub fn on_reverse_call(&mut self) -> Result<(), CreditError> {
        take_credit(&mut self.bc_in_flight, self.bc_granted, CreditError::BackchannelOverflow)
    }

    /// The Reply to a reverse-direction Call was sent (or the Call dropped).
    pub fn finish_reverse_call(&mut self) {
        self.bc_in_flight = self.bc_in_flight.saturating_sub(1);
    }

    /// Receives that must be posted now: one per forward credit plus one per
    /// reverse credit (RFC 8167 section 4.3.1).
    pub fn recv_target(&self) -> u32 {
        self.granted.saturating_add(self.bc_granted)
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
        assert_eq!(credits_from_cwnd(32768), 128);
        assert_eq!(credits_from_cwnd(255), 0);
        assert_eq!(credits_from_cwnd(u64::MAX), u32::MAX);
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
    fn receives_to_post() {
        assert_eq!(recvs_to_post(0, 10, 2), 12);
        assert_eq!(recvs_to_post(9, 10, 2), 3);
        assert_eq!(recvs_to_post(10, 10, 2), 2);
        assert_eq!(recvs_to_post(11, 10, 2), 0);
        assert_eq!(recvs_to_post(500, 10, 2), 0);
        assert_eq!(recvs_to_post(0, u32::MAX, 5), u32::MAX);
    }

    #[test]
    fn receive_policy_cycle() {
        let p = RecvPolicy { max_credits: 128, bc_reqs: 32 };
        assert_eq!(p.target(0), 33);
        assert_eq!(p.target(128), 160);
        assert_eq!(p.target(1000), 160);
        assert_eq!(p.batch(128), 16);
        assert_eq!(p.depth(), 176);
        assert_eq!(p.max_recv_wr(), 177);
        // Before connect: one Reply + backchannel + one batch of 1.
        assert_eq!(p.initial(), 34);
        // First Reply grants 128: one Receive consumed.
        let mut posted = 34 - 1;
        let n = p.to_post(posted, 128);
        assert_eq!(n, 160 - 33 + 16);
        posted += n;
        assert_eq!(posted, 176);
        // The next 15 Replies post nothing, the 16th refills one batch.
        for _ in 0..15 {
            posted -= 1;
            assert_eq!(p.to_post(posted, 128), 0);
        }
        posted -= 1;
        assert_eq!(posted, 160);
        assert_eq!(p.to_post(posted, 128), 16);
        // The grant drops: nothing to post while above the new target.
        assert_eq!(p.to_post(100, 8), 0);
        // Never past the depth, even if the counter is off.
        assert_eq!(p.to_post(176, 128), 0);
        assert_eq!(p.to_post(150, 128), 26);
        assert_eq!(p.to_post(u32::MAX, 128), 0);
        let p = RecvPolicy { max_credits: 0, bc_reqs: 0 };
        assert_eq!(p.initial(), 2);
        assert_eq!(p.max_recv_wr(), 3);
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
        sq.reset();
        assert_eq!(sq.in_use(), 0);
        assert_eq!(sq.unsignaled(), 0);
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

    #[test]
    fn forward_credits() {
        let mut c = Credits::new(128, 16);
        assert_eq!(c.granted(), 1);
        assert_eq!(c.cwnd(), 256);
        assert_eq!(c.max_requests(), 128);
        c.try_start_call().unwrap();
        assert_eq!(c.try_start_call(), Err(CreditError::NoCredit));
        assert_eq!(c.on_forward_reply(0), None, "0 means 1, unchanged");
        assert_eq!(c.on_forward_reply(64), Some(64));
        assert_eq!(c.on_forward_reply(64), None);
        assert_eq!(c.on_forward_reply(1000), Some(128));
        assert_eq!(c.cwnd(), 128 << 8);
        c.finish_call();
        for _ in 0..128 {
            c.try_start_call().unwrap();
        }
        assert_eq!(c.try_start_call(), Err(CreditError::NoCredit));
        assert_eq!(c.in_flight(), 128);
        assert_eq!(c.recv_target(), 144);
        c.reset();
        assert_eq!((c.granted(), c.in_flight()), (1, 0));
        c.finish_call();
        assert_eq!(c.in_flight(), 0);
    }

    #[test]
    fn reverse_credits_are_separate() {
        let mut c = Credits::new(8, 2);
        assert_eq!(c.reverse_grant(), 2);
        c.on_reverse_call().unwrap();
        c.on_reverse_call().unwrap();
        assert_eq!(c.on_reverse_call(), Err(CreditError::BackchannelOverflow));
        // Forward traffic is unaffected by the backchannel being full.
        c.try_start_call().unwrap();
        c.finish_reverse_call();
        assert_eq!(c.reverse_in_flight(), 1);
        c.on_reverse_call().unwrap();
        c.reset();
        assert_eq!(c.reverse_in_flight(), 0);
        c.finish_reverse_call();
        let mut none = Credits::new(0, 0);
        assert_eq!(none.max_requests(), 1);
        assert_eq!(none.on_reverse_call(), Err(CreditError::BackchannelOverflow));
    }
}
