// SPDX-License-Identifier: GPL-2.0

//! Counters: per transport (the mountstats line) and module-wide (debugfs).

use core::sync::atomic::{AtomicU64, Ordering};

use kernel::str::CStr;

use crate::{
    kapi::{
        rpc::{StatsWriter, Xprt},
        time,
    },
    proto::stats,
};

use super::xprt::RdmaXprt;

/// Module-wide FRWR counters, shown in debugfs (`rpcrdma_rs/`): regions
/// registered, regions the server invalidated with Send With Invalidate, and
/// regions we invalidated with LOCAL_INV.
pub(crate) static MRS_REGISTERED: AtomicU64 = AtomicU64::new(0);

/// See [`MRS_REGISTERED`].
pub(crate) static REMOTE_INVALIDATIONS: AtomicU64 = AtomicU64::new(0);

/// See [`MRS_REGISTERED`].
pub(crate) static LOCAL_INVALIDATIONS: AtomicU64 = AtomicU64::new(0);

/// Backward calls (server to client, RFC 8167) handed to the callback
/// service; shown in debugfs.
pub(crate) static BACKWARD_CALLS: AtomicU64 = AtomicU64::new(0);

/// Replies dropped or failed as malformed, unexpected or for no pending
/// call, over all transports (debugfs; mountstats has it per mount).
pub(crate) static BAD_REPLIES: AtomicU64 = AtomicU64::new(0);

/// Liveness probes that failed, each ending its connection (debugfs).
pub(crate) static PROBE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Backward calls with chunks answered with ERR_CHUNK (debugfs).
pub(crate) static BACKWARD_CHUNK_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Connections dropped because the server exceeded our reverse credits
/// (debugfs).
pub(crate) static BACKCHANNEL_OVERFLOWS: AtomicU64 = AtomicU64::new(0);

/// Connections that settled on RPC-over-RDMA Version Two (debugfs).
pub(crate) static V2_CONNECTIONS: AtomicU64 = AtomicU64::new(0);

/// Version Two probes answered with ERR_VERS, after which the connection
/// went on with Version One (debugfs).
pub(crate) static V1_FALLBACKS: AtomicU64 = AtomicU64::new(0);

/// Transport characteristics messages (xcharext) received and applied,
/// answered or refused (debugfs).
pub(crate) static XCHAR_MESSAGES: AtomicU64 = AtomicU64::new(0);

/// Messages in a protocol version the connection does not speak, answered
/// with ERR_VERS (debugfs).
pub(crate) static ERR_VERS_SENT: AtomicU64 = AtomicU64::new(0);

/// Answers to backward calls (replies, RDMA_ERROR, xcharext responses)
/// that could not be sent, each closing its connection (debugfs).
pub(crate) static BACKWARD_REPLIES_UNSENDABLE: AtomicU64 = AtomicU64::new(0);

/// LOCAL_INV requests that could not be posted, each closing its
/// connection before the RPC completed (debugfs).
pub(crate) static INVALIDATE_FAILURES: AtomicU64 = AtomicU64::new(0);

/// Transport statistics (the RDMA-specific part of the mountstats line).
#[derive(Default)]
pub(super) struct Stats {
    pub(super) bad_reply: AtomicU64,
    pub(super) failed_marshal: AtomicU64,
    pub(super) empty_sendctx_q: AtomicU64,
    pub(super) pullup_copy: AtomicU64,
    pub(super) total_rdma_request: AtomicU64,
    pub(super) total_rdma_reply: AtomicU64,
    pub(super) read_chunks: AtomicU64,
    pub(super) write_chunks: AtomicU64,
    pub(super) reply_chunks: AtomicU64,
    pub(super) nomsg_calls: AtomicU64,
    pub(super) mrs_allocated: AtomicU64,
    pub(super) local_inv_needed: AtomicU64,
}

/// Accounts an invalidation of `registered` regions of which `local`
/// needed a LOCAL_INV (the rest the server invalidated remotely).
pub(super) fn count_invalidations(stats: &Stats, registered: usize, local: usize) {
    // Most replies need no LOCAL_INV, and many RPCs register nothing: skip
    // the locked adds of zero.
    if local > 0 {
        stats.local_inv_needed.fetch_add(local as u64, Ordering::Relaxed);
        LOCAL_INVALIDATIONS.fetch_add(local as u64, Ordering::Relaxed);
    }
    if registered > local {
        REMOTE_INVALIDATIONS.fetch_add((registered - local) as u64, Ordering::Relaxed);
    }
}

impl RdmaXprt {
    /// Writes the transport's mountstats line.
    pub(super) fn write_mountstats(&self, x: Xprt<'_>, out: &mut StatsWriter<'_>) {
        let st = x.stat();
        let hz = time::HZ;
        let c = stats::Counters {
            bind_count: st.bind_count,
            connect_count: st.connect_count,
            connect_time: stats::jiffies_to_secs(st.connect_time, hz),
            idle_time: stats::idle_time_secs(x.connected(), time::jiffies(), x.last_used(), hz),
            sends: st.sends,
            recvs: st.recvs,
            bad_xids: st.bad_xids,
            req_u: st.req_u,
            bklog_u: st.bklog_u,
            pullup_copy_count: self.stats.pullup_copy.load(Ordering::Relaxed),
            failed_marshal_count: self.stats.failed_marshal.load(Ordering::Relaxed),
            bad_reply_count: self.stats.bad_reply.load(Ordering::Relaxed),
            empty_sendctx_q: self.stats.empty_sendctx_q.load(Ordering::Relaxed),
            total_rdma_request: self.stats.total_rdma_request.load(Ordering::Relaxed),
            total_rdma_reply: self.stats.total_rdma_reply.load(Ordering::Relaxed),
            read_chunk_count: self.stats.read_chunks.load(Ordering::Relaxed),
            write_chunk_count: self.stats.write_chunks.load(Ordering::Relaxed),
            reply_chunk_count: self.stats.reply_chunks.load(Ordering::Relaxed),
            nomsg_call_count: self.stats.nomsg_calls.load(Ordering::Relaxed),
            mrs_allocated: self.stats.mrs_allocated.load(Ordering::Relaxed),
            local_inv_needed: self.stats.local_inv_needed.load(Ordering::Relaxed),
            ..Default::default()
        };
        let mut line = stats::LineBuf::<{ stats::MOUNTSTATS_MAX_LEN + 1 }>::new();
        if stats::write_mountstats(&mut line, &c).is_ok() && core::fmt::Write::write_str(&mut line, "\0").is_ok() {
            if let Ok(s) = CStr::from_bytes_with_nul(line.as_bytes()) {
                out.puts(s);
            }
        }
    }
}
