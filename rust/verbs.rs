// SPDX-License-Identifier: GPL-2.0

//! The RDMA machinery of an RPC-over-RDMA endpoint, client or server:
//! safe code over [`kapi::ib`](crate::kapi::ib), with the policy kapi
//! leaves out and no knowledge of RPC.
//!
//! - [`endpoint`]: a [`Connection`] and its handler ([`ConnHandler`]):
//!   setting it up, connecting, the release epoch, teardown.
//! - [`send`]: sending, and when a Send asks for a completion (every few
//!   Sends, and always for one that maps pages).
//! - [`recv`]: Receive buffers kept across reconnects ([`RecvCache`]) (the
//!   batched reposting is the connection's, in kapi).
//! - [`frwr`]: the pool of memory regions, registration and invalidation.
//! - [`probe`]: the liveness probe.
//! - [`freelist`]: the allocation-free index stack the pools use.
//! - [`selftest`]: a loopback test of what a server needs (listen and
//!   accept, RDMA Write and Read, Send With Invalidate, a held Receive).

pub(crate) mod endpoint;
pub(crate) mod freelist;
pub(crate) mod frwr;
pub(crate) mod probe;
pub(crate) mod recv;
pub(crate) mod selftest;
pub(crate) mod send;

use core::sync::atomic::AtomicU64;

pub(crate) use crate::kapi::ib::conn::SendFailed;
pub(crate) use crate::kapi::ib::QpSizes;
pub(crate) use crate::kapi::ib::{
    Acceptor, CmEvent, Completion, DeviceCaps, HeldRecv, Holding, Incoming, Invalidated, Listener,
    OnePostedRegistration, OneRegistration, PagesInFlight, PostedRegistration, Received, Registered, Registration,
    RwDir, SendDone, SendWriter, SgWriter, MAX_MRS, MAX_SEND_SGES,
};
pub(crate) use endpoint::{Connection, Live, ReleaseEpoch};
pub(crate) use freelist::FreeList;
pub(crate) use frwr::KeptMr;
pub(crate) use recv::RecvCache;

/// The transport logic riding on a [`Connection`].
pub(crate) trait ConnHandler: Send + Sync + Sized {
    /// An rdma_cm event arrived. Runs in the CM's work context; must not
    /// destroy the connection.
    fn cm_event(&self, event: CmEvent<'_>);

    /// A Receive completed successfully. The buffer is reposted when this
    /// returns: copy out what must be kept. Runs in process context and may
    /// sleep (to invalidate memory regions through `conn`).
    fn received(&self, conn: Live<'_, Self>, msg: Received<'_>);

    /// A Receive (or a registration's or invalidation's work request)
    /// failed, not flushed: the connection must be dropped.
    fn receive_failed(&self, status: u32);

    /// A work request was flushed while the connection was up (not in
    /// its teardown): the queue pair went to the error state without an
    /// error completion of ours, say because its responder met an error
    /// serving the peer. Called for every such completion; the connection
    /// must be dropped.
    fn queue_pair_flushed(&self);

    /// A LOCAL_INV could not be posted. The queue pair is already in the
    /// error state (the regions' rkeys reach nothing any more); the
    /// connection must be dropped.
    fn invalidate_failed(&self);

    /// A Send completed; its buffer is free again.
    fn send_done(&self, how: Completion);

    /// A liveness probe ([`Connection::probe`]) completed: `Ok` if the
    /// peer's queue pair acknowledged it, `Failed` if the device gave up
    /// reaching it (the connection is dead), `Flushed` if the queue pair
    /// went down meanwhile.
    fn probe_done(&self, how: Completion);

    /// Where this connection's Sends, Receive buffers and probes are
    /// counted.
    fn counters(&self) -> &'static VerbsCounters;

    /// A test hook: true if the next LOCAL_INV post is to fail as if the
    /// device had refused it. Never, unless the handler says so.
    fn inject_local_inv_failure(&self) -> bool {
        false
    }
}

/// Queue pair and buffer sizing, and the Send and Receive policy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpConfig {
    /// The queues and buffers to make.
    pub(crate) sizes: QpSizes,
    /// A Send is signalled at least once every this many Sends; the ones
    /// in between are reclaimed by the next signalled completion.
    pub(crate) signal_interval: u32,
}

/// What the connections and Receive caches count. The owner of the one
/// instance (the client, a `static`) decides where it is shown.
#[derive(Debug)]
pub(crate) struct VerbsCounters {
    /// Sends posted.
    pub(crate) sends: AtomicU64,
    /// Sends posted with a completion requested.
    pub(crate) sends_signalled: AtomicU64,
    /// Sends that carried DMA-mapped pages.
    pub(crate) sends_mapped: AtomicU64,
    /// Liveness probes posted ([`Connection::probe`]).
    pub(crate) probes: AtomicU64,
    /// Receive buffers allocated ([`RecvCache`]): it stays put across
    /// reconnects, which reuse a transport's buffers.
    pub(crate) recv_bufs_allocated: AtomicU64,
    /// Memory regions that exist now: made on a connection
    /// ([`Connection::grow_mrs`] and those made with the queue pair) and
    /// not yet freed with it. A gauge, not a count.
    pub(crate) mrs_live: AtomicU64,
}

impl VerbsCounters {
    /// All zero.
    pub(crate) const fn new() -> Self {
        VerbsCounters {
            sends: AtomicU64::new(0),
            sends_signalled: AtomicU64::new(0),
            sends_mapped: AtomicU64::new(0),
            probes: AtomicU64::new(0),
            recv_bufs_allocated: AtomicU64::new(0),
            mrs_live: AtomicU64::new(0),
        }
    }
}
