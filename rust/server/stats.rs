// SPDX-License-Identifier: GPL-2.0

//! The server's counters, module-wide, shown in debugfs beside the
//! client's (`rpcrdma_rs/server_*`).

use core::sync::atomic::AtomicU64;

use kernel::{c_str, str::CStr};

use crate::verbs::VerbsCounters;

/// What the server's connections count.
pub(crate) struct ServerCounters {
    /// The verbs layer's counters of the server's connections.
    pub(crate) verbs: VerbsCounters,
    /// Connections accepted.
    pub(crate) connections: AtomicU64,
    /// Connections whose client speaks RPC-over-RDMA Version Two.
    pub(crate) v2_connections: AtomicU64,
    /// Transport characteristics messages (xcharext) received: merged,
    /// answered or refused.
    pub(crate) xchar_messages: AtomicU64,
    /// RDMA_ERROR ERR_VERS sent: a message in a version the connection
    /// does not speak.
    pub(crate) err_vers_sent: AtomicU64,
    /// Other RDMA_ERRORs sent: a call whose chunks or size cannot be
    /// carried (ERR_CHUNK; Version Two's ERR_BAD_HEADER), an OPTIONAL
    /// message of a type not supported (ERR_INVAL_OPTION).
    pub(crate) errors_sent: AtomicU64,
    /// Bytes written into the clients' Write and Reply chunks by RDMA
    /// Write.
    pub(crate) write_bytes: AtomicU64,
    /// Write and Reply chunks whose bytes were copied into pages of ours
    /// first, not all of them lying in the reply's own pages.
    pub(crate) chunks_copied: AtomicU64,
    /// Bytes of calls' Read chunks pulled by RDMA Read (posted).
    pub(crate) read_bytes: AtomicU64,
    /// Pages of pulled data items (an NFS WRITE's payload) given to nfsd
    /// threads as the call's own pages, not copied.
    pub(crate) read_pages_given: AtomicU64,
    /// Call contexts and pulls made in ones an earlier call of the
    /// connection was done with, not allocated.
    pub(crate) contexts_reused: AtomicU64,
    /// Backward calls (NFSv4.1 callbacks) sent.
    pub(crate) bc_calls: AtomicU64,
    /// Replies to backward calls that completed their call.
    pub(crate) bc_replies: AtomicU64,
    /// Replies to backward calls that answered no call waiting (a late
    /// reply, or none was sent on the connection): dropped.
    pub(crate) bc_replies_dropped: AtomicU64,
}

/// The server's counters.
pub(crate) static COUNTERS: ServerCounters = ServerCounters {
    verbs: VerbsCounters::new(),
    connections: AtomicU64::new(0),
    v2_connections: AtomicU64::new(0),
    xchar_messages: AtomicU64::new(0),
    err_vers_sent: AtomicU64::new(0),
    errors_sent: AtomicU64::new(0),
    write_bytes: AtomicU64::new(0),
    chunks_copied: AtomicU64::new(0),
    read_bytes: AtomicU64::new(0),
    read_pages_given: AtomicU64::new(0),
    contexts_reused: AtomicU64::new(0),
    bc_calls: AtomicU64::new(0),
    bc_replies: AtomicU64::new(0),
    bc_replies_dropped: AtomicU64::new(0),
};

impl ServerCounters {
    /// The read-only debugfs files: name and counter.
    pub(crate) fn debugfs_files(&'static self) -> [(&'static CStr, &'static AtomicU64); 14] {
        [
            (c_str!("server_connections"), &self.connections),
            (c_str!("server_v2_connections"), &self.v2_connections),
            (c_str!("server_xchar_messages"), &self.xchar_messages),
            (c_str!("server_err_vers_sent"), &self.err_vers_sent),
            (c_str!("server_errors_sent"), &self.errors_sent),
            (c_str!("server_sends"), &self.verbs.sends),
            (c_str!("server_write_bytes"), &self.write_bytes),
            (c_str!("server_chunks_copied"), &self.chunks_copied),
            (c_str!("server_read_bytes"), &self.read_bytes),
            (c_str!("server_read_pages_given"), &self.read_pages_given),
            (c_str!("server_contexts_reused"), &self.contexts_reused),
            (c_str!("server_bc_calls"), &self.bc_calls),
            (c_str!("server_bc_replies"), &self.bc_replies),
            (c_str!("server_bc_replies_dropped"), &self.bc_replies_dropped),
        ]
    }
}
