// SPDX-License-Identifier: GPL-2.0

//! Credits (RFC 8166 section 3.3.1): the server's grant, applied only from
//! replies that matched a call and only by the connection that owns the
//! transport's congestion window.

use core::sync::atomic::Ordering;

use kernel::prelude::*;

use crate::verbs::{self, Connection, DeviceCaps, QpConfig};
use crate::{
    kapi::{errno, ratelimit::RateLimit, trace, PAGE_SIZE},
    proto::{credits, plan},
};

use super::{
    backchannel::{BC_RECEIVES, BC_SLOTS},
    chunks::MAX_MRS,
    class::MAX_PAYLOAD,
    conn::EpShared,
    stats::COUNTERS,
    xprt::RdmaXprt,
};

impl EpShared {
    /// Applies the server's credit grant from a reply that matched one of
    /// our calls (RFC 8166 section 3.3): from no other message, and only
    /// while this connection owns the transport's window, so that a late
    /// reply of an old connection cannot change the new one's.
    pub(super) fn grant(&self, xid: u32, credits: u32) {
        let max = self.max_requests.load(Ordering::Relaxed);
        let mut grant = credits::sanitize_grant(credits, max);
        if self.grant_debt.load(Ordering::Relaxed) != 0 {
            let debt = self.grant_debt.swap(0, Ordering::Relaxed);
            grant = grant.saturating_sub(debt).max(1);
        }
        // The grant rarely changes: look before taking the lock.
        if self.credits.load(Ordering::Relaxed) == grant {
            return;
        }
        let owner = self.cfg.window.lock();
        if *owner == self.cfg.generation {
            trace::credits(xid, self.credits.load(Ordering::Relaxed), grant);
            self.credits.store(grant, Ordering::Relaxed);
            let window = self.abandoned.lock().window(grant);
            self.xprt.get().set_cwnd(credits::cwnd_from_credits(window));
        }
        drop(owner);
    }

    /// The RPC of the call `xid` (host order), sent on this connection,
    /// ended before its reply came (a fatal signal, `umount -f`, a soft
    /// mount's timeout). The server still holds the Receive the call took
    /// (RFC 8166 section 3.3.1): its credit stays counted until the reply
    /// comes or the connection ends; where that would leave no credit, the
    /// connection ends now. (SUNRPC gave the call's congestion slot back
    /// already: the window shrinks instead.)
    #[cold]
    pub(super) fn abandon(&self, xid: u32) {
        let grant = self.credits.load(Ordering::Relaxed);
        let verdict = self.abandoned.lock().abandon(xid, grant);
        match verdict {
            credits::Abandon::Answered => {}
            credits::Abandon::Counted => {
                COUNTERS.abandoned_calls.fetch_add(1, Ordering::Relaxed);
                self.apply_window();
            }
            credits::Abandon::Close => {
                COUNTERS.abandoned_calls.fetch_add(1, Ordering::Relaxed);
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_info!(
                        "{}: calls abandoned before their replies hold the server's credits: reconnecting\n",
                        self.xprt.get().addr_str()
                    );
                }
                self.force_disconnect();
            }
        }
    }

    /// A reply with the XID `xid` (host order) answered no call: true if
    /// it answers an abandoned one, whose credit is then free again.
    #[cold]
    pub(super) fn late_reply(&self, xid: u32) -> bool {
        let freed = self.abandoned.lock().late_reply(xid);
        if freed {
            COUNTERS.late_replies.fetch_add(1, Ordering::Relaxed);
            self.apply_window();
        }
        freed
    }

    /// Sets the transport's window to the grant less the credits
    /// abandoned calls hold, while this connection owns it.
    fn apply_window(&self) {
        let owner = self.cfg.window.lock();
        if *owner == self.cfg.generation {
            let window = self.abandoned.lock().window(self.credits.load(Ordering::Relaxed));
            self.xprt.get().set_cwnd(credits::cwnd_from_credits(window));
        }
        drop(owner);
    }
}

/// Memory regions made with a connection: as many as one call may use
/// (its Read, Write and Reply chunks together), so that a call always
/// finds regions once the others' come back.
pub(super) const MRS_AT_CONNECT: usize = MAX_MRS;

/// Most pages one memory region covers: a page-aligned 1 MiB payload.
/// Not `MAX_PAYLOAD / PAGE_SIZE`, which counts the extra page of an
/// unaligned payload: 257 entries make an 8224-byte scatterlist, which
/// the allocator serves with 16 KiB of whole pages, and double the
/// device's page list (soft-RoCE's 16-byte entries go from a 4 KiB
/// allocation to an 8 KiB one), for every region.
const MR_MAX_PAGES: u32 = (1 << 20) / PAGE_SIZE;

/// What a connection's queues are sized to.
pub(super) struct QueueSizes {
    /// Requests the connection carries (our credit request).
    pub(super) max_requests: usize,
    /// Pages one memory region covers.
    pub(super) mr_pages: u32,
    /// SGEs one Send may carry.
    pub(super) send_sges: usize,
    /// The queue pair and buffers for that many requests.
    pub(super) qp: QpConfig,
}

impl RdmaXprt {
    /// Sizes a connection's queues from the device's limits `caps`: how
    /// many requests it can carry (each with its Sends, Receives, regions
    /// and work requests), the backchannel's share beside them, and the
    /// largest region and Send the device allows.
    pub(super) fn size_queues(&self, conn: &Connection<EpShared>, caps: &DeviceCaps) -> Result<QueueSizes> {
        // One region covers a whole page-aligned 1 MiB payload where the
        // device allows (an unaligned one takes two); see `MR_MAX_PAGES`.
        // Fewer where a test says so (debugfs `mr_pages`, as a device with
        // short page lists would have it).
        let cap = u32::try_from(COUNTERS.mr_pages.load(Ordering::Relaxed)).unwrap_or(u32::MAX);
        let device_pages = if cap == 0 { caps.max_fast_reg_pages } else { caps.max_fast_reg_pages.min(cap) };
        let mr_pages = device_pages.min(MR_MAX_PAGES);
        // No pages at all is too few as well. connect() refuses such a
        // device before it gets here, but the division below must not
        // depend on that: a division the compiler cannot prove safe is a
        // panic call site, and one that ends a function is one objtool
        // cannot follow (panic_const_div_by_zero is not in its list).
        if mr_pages == 0 || (MAX_PAYLOAD / PAGE_SIZE).div_ceil(mr_pages) as usize > MAX_MRS - 2 {
            pr_err!(
                "device {} registers at most {} pages at once: too few to carry 1 MiB I/O\n",
                conn.device_name(),
                device_pages
            );
            return Err(ENOMEM);
        }
        let (inline_send, inline_recv) = (self.settings.inline_write, self.settings.inline_read);
        // Every outstanding call needs a Send and, with the backchannel, a
        // Receive; the device bounds both queues.
        // Each request has two Send buffers: a reply often arrives before
        // the completion that gives its call's Send buffer back, and the
        // next call on that slot must not wait for it (nor stall every
        // other call, the backchannel's replies included, behind it). The
        // send queue holds the unreclaimed Sends with, on average, one
        // REG_MR each (a Send that would overfill it waits), and a
        // LOCAL_INV per memory region (two per request); the queue pair
        // adds two for the probe and the drain.
        let per_request = 2 * 2 + 2;
        let recv_batch = credits::recv_batch(self.max_requests) as usize;
        let limit = (caps.max_qp_wr as usize)
            .saturating_sub(BC_RECEIVES + recv_batch + 1)
            .min((caps.max_qp_wr as usize).saturating_sub(2 * BC_SLOTS + 2))
            / per_request;
        let max_requests = (self.max_requests as usize).min(limit);
        if max_requests == 0 {
            pr_err!("device {} cannot hold any RPC-over-RDMA request\n", conn.device_name());
            return Err(ENOMEM);
        }
        // The copied header and head, page pieces, the copied tail.
        let send_sges = (caps.max_send_sge as usize).min(verbs::MAX_SEND_SGES);
        if send_sges < plan::MIN_SEND_SGES as usize {
            pr_err!(
                "device {} allows {} SGEs per Send; RPC-over-RDMA needs {}\n",
                conn.device_name(),
                caps.max_send_sge,
                plan::MIN_SEND_SGES
            );
            return Err(errno::EPROTONOSUPPORT());
        }
        // Two regions per request, or fewer where a test says so (debugfs
        // `max_mrs`, as a device with few would have it).
        let cap = usize::try_from(COUNTERS.max_mrs.load(Ordering::Relaxed)).unwrap_or(usize::MAX);
        let max_mrs = if cap == 0 { max_requests * 2 } else { (max_requests * 2).min(cap) };
        let qp = QpConfig {
            send_bufs: 2 * max_requests + BC_SLOTS,
            send_buf_size: inline_send as usize,
            send_sges,
            recv_bufs: max_requests + BC_RECEIVES + recv_batch,
            recv_batch,
            recv_buf_size: inline_recv as usize,
            // Enough for any one call; more are made as calls need them
            // (`regions.rs`), up to two per request.
            mrs: MRS_AT_CONNECT.min(max_mrs),
            max_mrs,
            mr_pages,
            send_wrs: 2 * (2 * max_requests + BC_SLOTS),
            max_send_regs: MAX_MRS,
            // A client moves no data by RDMA Read or Write itself.
            rdma_ctxs: 0,
            signal_interval: credits::default_signal_interval(max_requests as u32),
        };
        Ok(QueueSizes { max_requests, mr_pages, send_sges, qp })
    }
}
