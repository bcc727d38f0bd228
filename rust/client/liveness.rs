// SPDX-License-Identifier: GPL-2.0

//! The liveness check: RDMA has no keepalive, so a connection whose
//! replies are overdue is probed.

use core::sync::atomic::Ordering;

use kernel::sync::Arc;

use crate::kapi::{
    time, trace,
    work::{self, DelayedWork, DelayedWorkItem},
};

use super::{params, xprt::RdmaXprt};

/// The work ID of [`RdmaXprt`]'s liveness check (the connect worker is 0).
pub(super) const LIVENESS: u64 = 1;

/// The liveness check. RDMA has no keepalive: a server that disconnected
/// while the link was down (its DREQ lost), or whose queue pair is gone,
/// leaves a client whose calls were all delivered waiting for replies that
/// cannot come, until the RPC timeout (60 s by default) gives up on them.
/// Every `probe_interval` seconds, if RPCs wait for replies and no Receive
/// completed since the last look, the connection is probed
/// ([`Connection::probe`]): a live peer acknowledges the probe and nothing
/// happens (a slow server is not a dead one); a dead one fails it after the
/// device's retries, and the connection is dropped and set up again.
impl DelayedWorkItem<LIVENESS> for RdmaXprt {
    fn work(&self) -> &DelayedWork<Self, LIVENESS> {
        &self.liveness
    }

    fn run(this: Arc<Self>) {
        if this.dying.load(Ordering::SeqCst) {
            return;
        }
        // Not connected: the next connect starts the check again.
        let Some(ep) = this.endpoint() else { return };
        let seen = ep.conn.receives();
        let last = this.receives_seen.swap(seen, Ordering::Relaxed);
        if seen == last && this.xprt.get().replies_awaited() > 0 {
            // An error means the connection is on its way down anyway.
            match ep.conn.probe() {
                Ok(true) => trace::probe(|| this.xprt.get().addr_str(), 1),
                // One is out already.
                Ok(false) => {}
                Err(e) => trace::probe(|| this.xprt.get().addr_str(), e.to_errno()),
            }
        }
        drop(ep);
        RdmaXprt::schedule_liveness(&this);
    }
}

impl RdmaXprt {
    /// Queues the liveness check one interval from now (unless disabled or
    /// already queued).
    pub(super) fn schedule_liveness(this: &Arc<Self>) {
        let s = params::probe_interval_s();
        if s > 0 && !this.dying.load(Ordering::SeqCst) {
            // Already queued: that one does the job.
            drop(work::enqueue::<_, LIVENESS>(this.clone(), time::ms_to_jiffies(s * 1000)));
        }
    }
}
