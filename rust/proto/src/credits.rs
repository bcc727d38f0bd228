// SPDX-License-Identifier: GPL-2.0
//! Credits, Receive batching and Send completion signalling (RFC 8166
//! section 3.3.1).
//!
//! Everything here is plain counting; the kernel holds the locks and does the
//! posting. The pieces:
//!
//! * [`sanitize_grant`] and [`cwnd_from_credits`]: a peer's `rdma_credit`
//!   grant becomes the congestion window SUNRPC enforces.
//! * [`recv_batch`]: how many consumed Receives are reposted together (one
//!   chained `ib_post_recv`).
//! * [`SendSignals`]: when a Send asks for a completion.

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

/// Most calls a connection keeps counted after their RPC ended without a
/// reply (see [`Abandoned`]); one more closes the connection.
pub const MAX_ABANDONED: usize = 16;

/// Replies to no call remembered for a call abandoned just after them (see
/// [`Abandoned::late_reply`]).
const RECENT_UNMATCHED: usize = 4;

/// What [`Abandoned::abandon`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Abandon {
    /// The call stays counted: the window is now `grant - count`.
    Counted,
    /// Its reply came already (just before the RPC ended): nothing held.
    Answered,
    /// Counting it would leave no credit (or no room to remember it): the
    /// connection must be closed, which gives the server's Receives back.
    Close,
}

/// Calls whose RPC ended (a fatal signal, `umount -f`, a timeout of a soft
/// mount) after they were sent on a connection and before their reply
/// came. The server still holds a Receive for each until it replies (RFC
/// 8166 section 3.3.1: a credit is in use from the Send of the call to the
/// receipt of its reply), so each keeps one credit of the grant counted
/// until its reply comes, as a reply to no call, or the connection ends.
///
/// A reply and the end of its RPC can cross: the reply finds no call while
/// the RPC is still ending. The last few replies to no call are remembered
/// so that the end of the RPC they answer finds them.
#[derive(Debug, Default)]
pub struct Abandoned {
    xids: [u32; MAX_ABANDONED],
    count: usize,
    unmatched: [Option<u32>; RECENT_UNMATCHED],
    next_unmatched: usize,
}

impl Abandoned {
    /// Calls counted.
    pub fn count(&self) -> u32 {
        self.count as u32
    }

    /// The RPC of the call `xid`, sent on this connection, ended without
    /// its reply; the server granted `grant` credits.
    pub fn abandon(&mut self, xid: u32, grant: u32) -> Abandon {
        if let Some(slot) = self.unmatched.iter_mut().find(|u| **u == Some(xid)) {
            *slot = None;
            return Abandon::Answered;
        }
        match self.xids.get_mut(self.count) {
            Some(x) if self.count < (grant as usize).saturating_sub(1) => {
                *x = xid;
                self.count = self.count.saturating_add(1);
                Abandon::Counted
            }
            _ => Abandon::Close,
        }
    }

    /// A reply with the XID `xid` found no call: true if it answers an
    /// abandoned one, whose credit is free again.
    pub fn late_reply(&mut self, xid: u32) -> bool {
        let counted = self.xids.get_mut(..self.count).unwrap_or_default();
        if let Some(i) = counted.iter().position(|&x| x == xid) {
            // The last one takes its place.
            counted.swap(i, counted.len().saturating_sub(1));
            self.count = self.count.saturating_sub(1);
            return true;
        }
        if let Some(u) = self.unmatched.get_mut(self.next_unmatched) {
            *u = Some(xid);
        }
        self.next_unmatched = self.next_unmatched.wrapping_add(1) % RECENT_UNMATCHED;
        false
    }

    /// The credits calls may use: the grant less the abandoned calls' (at
    /// least 1: [`Abandoned::abandon`] never lets them take the last).
    pub fn window(&self, grant: u32) -> u32 {
        grant.saturating_sub(self.count as u32).max(1)
    }
}

/// A default completion-signalling interval: one Send in eight of the credit
/// window (the in-tree client's choice), at least 1.
pub fn default_signal_interval(max_requests: u32) -> u32 {
    (max_requests / 8).max(1)
}

/// When a Send asks for a completion.
///
/// A signalled Send's completion reclaims its buffer and the buffers of
/// every Send posted before it (the queue pair completes in order); an
/// unsignalled Send is reclaimed only with a later signalled one. A Send
/// is signalled when the caller asks (it carries DMA-mapped pages, which
/// should be unmapped promptly), when it would be the `interval`th
/// unsignalled Send in a row, or when fewer than `interval` buffers would
/// be left idle after it (completions come sooner as buffers run short).
/// The interval is clamped to half the buffers (at least 1): the newest
/// `interval` Sends include a signalled one, so while every buffer is
/// outstanding one of them is signalled, and a sender waiting for an idle
/// buffer always has a completion coming.
///
/// The connection keeps count of the outstanding buffers itself; this is
/// only the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendSignals {
    unsignaled: u32,
    interval: u32,
}

impl SendSignals {
    /// For `buffers` Send buffers, signalling at least every
    /// `signal_interval` Sends.
    pub fn new(buffers: u32, signal_interval: u32) -> SendSignals {
        // `clamp` asserts its bounds' order, a panic path the compiler need
        // not see through: the same, with `max` and `min`.
        SendSignals { unsignaled: 0, interval: signal_interval.max(1).min((buffers / 2).max(1)) }
    }

    /// Sends posted unsignalled since the last signalled one.
    pub fn unsignaled(&self) -> u32 {
        self.unsignaled
    }

    /// The effective signalling interval.
    pub fn interval(&self) -> u32 {
        self.interval
    }

    /// A Send is being posted, leaving `idle_after` buffers idle;
    /// `must_signal` forces a signal. True to signal it.
    #[inline]
    pub fn post(&mut self, must_signal: bool, idle_after: usize) -> bool {
        // Below the interval, which fits a `u32`: no wrap.
        let pending = self.unsignaled.wrapping_add(1);
        if must_signal || pending >= self.interval || idle_after < self.interval as usize {
            self.unsignaled = 0;
            true
        } else {
            self.unsignaled = pending;
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn abandoned_calls_keep_their_credit_until_answered() {
        let mut a = Abandoned::default();
        assert_eq!(a.window(2), 2);
        assert_eq!(a.abandon(7, 2), Abandon::Counted);
        assert_eq!(a.window(2), 1);
        // The last credit is never given up: the connection closes.
        assert_eq!(a.abandon(8, 2), Abandon::Close);
        assert_eq!(a.count(), 1);
        assert!(!a.late_reply(9));
        assert!(a.late_reply(7));
        assert_eq!(a.window(2), 2);
        assert!(!a.late_reply(7), "counted once");
    }

    #[test]
    fn a_reply_that_crossed_the_end_of_its_rpc_holds_nothing() {
        let mut a = Abandoned::default();
        assert!(!a.late_reply(5));
        assert_eq!(a.abandon(5, 8), Abandon::Answered);
        assert_eq!(a.count(), 0);
        // Remembered once only.
        assert_eq!(a.abandon(5, 8), Abandon::Counted);
        // Only the last few are remembered.
        for x in 100..110 {
            assert!(!a.late_reply(x));
        }
        assert_eq!(a.abandon(100, 8), Abandon::Counted);
        assert_eq!(a.abandon(109, 8), Abandon::Answered);
    }

    #[test]
    fn abandoned_calls_are_bounded() {
        let mut a = Abandoned::default();
        for x in 0..MAX_ABANDONED as u32 {
            assert_eq!(a.abandon(x, 128), Abandon::Counted);
        }
        assert_eq!(a.abandon(1000, 128), Abandon::Close);
        assert_eq!(a.window(128), 128 - MAX_ABANDONED as u32);
        for x in (0..MAX_ABANDONED as u32).rev() {
            assert!(a.late_reply(x));
        }
        assert_eq!(a.count(), 0);
        assert_eq!(a.window(0), 1);
    }

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
    fn sends_are_signalled_every_interval() {
        let mut s = SendSignals::new(1000, 4);
        assert_eq!(s.interval(), 4);
        for _ in 0..3 {
            assert!(!s.post(false, 500));
        }
        assert_eq!(s.unsignaled(), 3);
        assert!(s.post(false, 500), "the fourth in a row");
        assert_eq!(s.unsignaled(), 0);
        // A Send with mapped pages is always signalled.
        assert!(!s.post(false, 500));
        assert!(s.post(true, 500));
        // Fewer idle buffers than the interval: every Send is.
        assert!(s.post(false, 3));
        assert!(!s.post(false, 4));
        // Clamped to half the buffers; degenerate sizes do not panic.
        assert_eq!(SendSignals::new(10, 100).interval(), 5);
        assert_eq!(SendSignals::new(0, 0).interval(), 1);
        let mut s = SendSignals::new(0, 0);
        assert!(s.post(false, 0));
        assert!(s.post(false, usize::MAX));
    }

    /// Posts and completions on a ring of Send buffers, at random: whenever
    /// every buffer is outstanding, one of them is signalled, so a sender
    /// waiting for a buffer always gets one back.
    #[test]
    fn a_full_ring_always_has_a_completion_coming() {
        use crate::testutil::Rng;
        extern crate std;
        use std::collections::VecDeque;
        let mut rng = Rng(0x6a09_e667_f3bc_c909);
        for _ in 0..200 {
            let buffers = 1 + rng.below(40) as u32;
            let mut s = SendSignals::new(buffers, rng.below(u64::from(buffers) + 3) as u32);
            // Outstanding Sends, oldest first: signalled or not.
            let mut ring: VecDeque<bool> = VecDeque::new();
            for _ in 0..2_000 {
                let full = ring.len() == buffers as usize;
                if full {
                    assert!(ring.iter().any(|&sig| sig), "{buffers} buffers, all outstanding, none signalled");
                }
                let signalled = ring.iter().any(|&sig| sig);
                if !full && (!signalled || rng.below(2) == 0) {
                    let idle_after = buffers as usize - ring.len() - 1;
                    ring.push_back(s.post(rng.below(8) == 0, idle_after));
                } else if signalled {
                    // The oldest signalled Send completes, reclaiming it and
                    // everything posted before it.
                    while let Some(sig) = ring.pop_front() {
                        if sig {
                            break;
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn default_interval() {
        assert_eq!(default_signal_interval(128), 16);
        assert_eq!(default_signal_interval(7), 1);
        assert_eq!(default_signal_interval(0), 1);
    }
}
