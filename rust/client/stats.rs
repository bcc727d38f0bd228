// SPDX-License-Identifier: GPL-2.0

//! Counters: per transport (the mountstats line) and module-wide (debugfs).

use core::sync::atomic::{AtomicU64, Ordering};

use kernel::{c_str, str::CStr};

use crate::verbs::VerbsCounters;
use crate::{
    kapi::{
        rpc::{StatsWriter, Xprt},
        time,
    },
    proto::stats,
};

use super::xprt::RdmaXprt;

/// The module's counters and test hooks, one instance ([`COUNTERS`]),
/// shown in debugfs (`rpcrdma_rs/`, [`ModuleCounters::debugfs_files`]).
pub(crate) struct ModuleCounters {
    /// Module-wide FRWR counters: regions
    /// registered, regions the server invalidated with Send With Invalidate, and
    /// regions we invalidated with LOCAL_INV.
    pub(crate) mrs_registered: AtomicU64,
    /// See [`ModuleCounters::mrs_registered`].
    pub(crate) remote_invalidations: AtomicU64,
    /// See [`ModuleCounters::mrs_registered`].
    pub(crate) local_invalidations: AtomicU64,
    /// Backward calls (server to client, RFC 8167) handed to the callback
    /// service.
    pub(crate) backward_calls: AtomicU64,
    /// Replies dropped or failed as malformed, unexpected or for no pending
    /// call, over all transports (debugfs; mountstats has it per mount).
    pub(crate) bad_replies: AtomicU64,
    /// Liveness probes that failed, each ending its connection.
    pub(crate) liveness_probe_failures: AtomicU64,
    /// Backward calls with chunks answered with ERR_CHUNK.
    pub(crate) backward_chunk_errors: AtomicU64,
    /// Connections dropped because the server exceeded our reverse credits
    ///.
    pub(crate) backchannel_overflows: AtomicU64,
    /// Connections that settled on RPC-over-RDMA Version Two.
    pub(crate) v2_connections: AtomicU64,
    /// Version Two probes answered with ERR_VERS, after which the connection
    /// went on with Version One.
    pub(crate) v1_fallbacks: AtomicU64,
    /// Transport characteristics messages (xcharext) received and applied,
    /// answered or refused.
    pub(crate) xchar_messages: AtomicU64,
    /// Messages in a protocol version the connection does not speak, answered
    /// with ERR_VERS.
    pub(crate) err_vers_sent: AtomicU64,
    /// Answers to backward calls (replies, RDMA_ERROR, xcharext responses)
    /// that could not be sent, each closing its connection.
    pub(crate) backward_replies_unsendable: AtomicU64,
    /// LOCAL_INV requests that could not be posted, each closing its
    /// connection before the RPC completed.
    pub(crate) invalidate_failures: AtomicU64,
    /// Connections dropped because their queue pair went to the error
    /// state with only flushed completions to show for it.
    pub(crate) flushed_connections: AtomicU64,
    /// What the connections count: Sends, Receive buffers, probes.
    pub(crate) verbs: VerbsCounters,
    /// Memory regions given back to the pool by the requests that kept
    /// them, for calls that found none (every region made).
    pub(crate) mrs_reclaimed: AtomicU64,
    /// Connection attempts the server rejected as stale (it still held an
    /// older connection from the same queue pair number): retried, not
    /// failed.
    pub(crate) stale_rejections: AtomicU64,
    /// Calls whose RPC ended after they were sent and before their reply
    /// came: each kept a credit counted (RFC 8166 section 3.3.1).
    pub(crate) abandoned_calls: AtomicU64,
    /// Replies to abandoned calls, each giving its credit back.
    pub(crate) late_replies: AtomicU64,
    /// A test hook (debugfs `fail_local_inv`, writable): the next N
    /// LOCAL_INV posts fail as if the device had refused them.
    pub(crate) fail_local_inv: AtomicU64,
    /// A test hook (debugfs `fail_partial_post`, writable): the next N
    /// Sends that carry REG_MRs reach the queue pair only in part (the
    /// REG_MRs, not the Send), as a device that refused the chain part of
    /// the way would leave them.
    pub(crate) fail_partial_post: AtomicU64,
    /// A test hook (debugfs `max_mrs`, writable): the most memory regions
    /// a new connection may make, as a device with few would allow (0:
    /// two per request, the default).
    pub(crate) max_mrs: AtomicU64,
    /// A test hook (debugfs `mr_pages`, writable): the most pages one
    /// memory region of a new connection covers, as a device with short
    /// page lists would allow (0: as many as the device allows, up to a
    /// whole payload). Connecting fails below what 1 MiB I/O needs.
    pub(crate) mr_pages: AtomicU64,
    /// A test hook (debugfs `reject_stale`, writable): the next N
    /// connection attempts end, instead of connecting, as if the server
    /// had rejected them as stale.
    pub(crate) reject_stale: AtomicU64,
}

/// The counters of every transport of the module.
pub(crate) static COUNTERS: ModuleCounters = ModuleCounters::new();

impl ModuleCounters {
    const fn new() -> Self {
        ModuleCounters {
            mrs_registered: AtomicU64::new(0),
            remote_invalidations: AtomicU64::new(0),
            local_invalidations: AtomicU64::new(0),
            backward_calls: AtomicU64::new(0),
            bad_replies: AtomicU64::new(0),
            liveness_probe_failures: AtomicU64::new(0),
            backward_chunk_errors: AtomicU64::new(0),
            backchannel_overflows: AtomicU64::new(0),
            v2_connections: AtomicU64::new(0),
            v1_fallbacks: AtomicU64::new(0),
            xchar_messages: AtomicU64::new(0),
            err_vers_sent: AtomicU64::new(0),
            backward_replies_unsendable: AtomicU64::new(0),
            invalidate_failures: AtomicU64::new(0),
            flushed_connections: AtomicU64::new(0),
            verbs: VerbsCounters::new(),
            mrs_reclaimed: AtomicU64::new(0),
            stale_rejections: AtomicU64::new(0),
            abandoned_calls: AtomicU64::new(0),
            late_replies: AtomicU64::new(0),
            fail_local_inv: AtomicU64::new(0),
            fail_partial_post: AtomicU64::new(0),
            max_mrs: AtomicU64::new(0),
            mr_pages: AtomicU64::new(0),
            reject_stale: AtomicU64::new(0),
        }
    }

    /// The read-only debugfs files: name and counter.
    pub(crate) fn debugfs_files(&'static self) -> [(&'static CStr, &'static AtomicU64); 25] {
        [
            (c_str!("mrs_registered"), &self.mrs_registered),
            (c_str!("remote_invalidations"), &self.remote_invalidations),
            (c_str!("local_invalidations"), &self.local_invalidations),
            (c_str!("bad_replies"), &self.bad_replies),
            (c_str!("backward_calls"), &self.backward_calls),
            (c_str!("backward_chunk_errors"), &self.backward_chunk_errors),
            (c_str!("backchannel_overflows"), &self.backchannel_overflows),
            (c_str!("v2_connections"), &self.v2_connections),
            (c_str!("v1_fallbacks"), &self.v1_fallbacks),
            (c_str!("xchar_messages"), &self.xchar_messages),
            (c_str!("liveness_probes"), &self.verbs.probes),
            (c_str!("liveness_probe_failures"), &self.liveness_probe_failures),
            (c_str!("flushed_connections"), &self.flushed_connections),
            (c_str!("sends"), &self.verbs.sends),
            (c_str!("sends_signalled"), &self.verbs.sends_signalled),
            (c_str!("sends_mapped"), &self.verbs.sends_mapped),
            (c_str!("recv_bufs_allocated"), &self.verbs.recv_bufs_allocated),
            (c_str!("mrs_live"), &self.verbs.mrs_live),
            (c_str!("err_vers_sent"), &self.err_vers_sent),
            (c_str!("backward_replies_unsendable"), &self.backward_replies_unsendable),
            (c_str!("invalidate_failures"), &self.invalidate_failures),
            (c_str!("mrs_reclaimed"), &self.mrs_reclaimed),
            (c_str!("stale_rejections"), &self.stale_rejections),
            (c_str!("abandoned_calls"), &self.abandoned_calls),
            (c_str!("late_replies"), &self.late_replies),
        ]
    }

    /// The writable debugfs files (test hooks): name and value.
    pub(crate) fn debugfs_knobs(&'static self) -> [(&'static CStr, &'static AtomicU64); 5] {
        [
            (c_str!("fail_local_inv"), &self.fail_local_inv),
            (c_str!("fail_partial_post"), &self.fail_partial_post),
            (c_str!("max_mrs"), &self.max_mrs),
            (c_str!("mr_pages"), &self.mr_pages),
            (c_str!("reject_stale"), &self.reject_stale),
        ]
    }

    /// Takes one injected LOCAL_INV failure, if any is left.
    pub(super) fn take_local_inv_failure(&self) -> bool {
        take_one(&self.fail_local_inv)
    }

    /// Takes one injected partial post, if any is left (one load when
    /// there is none: it is asked for every Send with REG_MRs).
    #[inline]
    pub(super) fn take_partial_post(&self) -> bool {
        take_one(&self.fail_partial_post)
    }

    /// Takes one injected stale rejection, if any is left.
    pub(super) fn take_stale_rejection(&self) -> bool {
        take_one(&self.reject_stale)
    }
}

/// Takes one from the count a test hook holds; false if it holds none.
fn take_one(hook: &AtomicU64) -> bool {
    hook.load(Ordering::Relaxed) != 0
        && hook.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1)).is_ok()
}

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
        COUNTERS.local_invalidations.fetch_add(local as u64, Ordering::Relaxed);
    }
    if registered > local {
        COUNTERS.remote_invalidations.fetch_add((registered - local) as u64, Ordering::Relaxed);
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
