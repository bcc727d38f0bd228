// SPDX-License-Identifier: GPL-2.0

//! The RDMA machinery of an RPC-over-RDMA endpoint, client or server:
//! safe code over [`kapi::ib`](crate::kapi::ib), with the policy kapi
//! leaves out and no knowledge of RPC.
//!
//! - [`endpoint`]: a [`Connection`] and its handler ([`ConnHandler`]):
//!   setting it up, connecting, the release epoch, teardown.
//! - [`send`]: sending; the ring of Send buffers, the Send queue's room
//!   and when a Send asks for a completion (every few Sends, and always
//!   for one that maps pages).
//! - [`recv`]: consumed Receives reposted in batches.
//! - [`frwr`]: the pool of memory regions, registration and release.
//! - [`probe`]: the liveness probe.
//! - [`freelist`]: the allocation-free index stack the pools use.
//! - [`selftest`]: a loopback test of what a server needs (listen and
//!   accept, RDMA Write and Read, Send With Invalidate, a held Receive).

#![deny(unsafe_code)]

pub(crate) mod endpoint;
pub(crate) mod freelist;
pub(crate) mod frwr;
pub(crate) mod probe;
pub(crate) mod recv;
pub(crate) mod selftest;
pub(crate) mod send;

use core::sync::atomic::AtomicU64;

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
};

pub(crate) use crate::kapi::ib::{
    Acceptor, Closed, CmEvent, Completion, ConnRequest, Copying, DeviceCaps, DeviceName, Fill, FillOne, FillSg,
    HeldRecv, InFlight, Lender, Listener, Mapping, Received, Registered, Registration, Released, RemoteInv, Reuse,
    RwChunk, RwPosted, RwSeg, SendFailed, SendWriter, SgWriter, MAX_SEND_SGES,
};
pub(crate) use endpoint::{Connection, Live};
pub(crate) use freelist::FreeList;

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

    /// A test hook: true if the next Send that carries REG_MRs is to reach
    /// the queue pair only in part (its REG_MRs, not the Send). Never,
    /// unless the handler says so.
    fn inject_partial_post(&self) -> bool {
        false
    }

    /// A test hook: true if the next R/W operation posted alone
    /// ([`Connection::rw_post`]) is to reach the queue pair only in part
    /// (without its last work request). Never, unless the handler says so.
    fn inject_partial_rw_post(&self) -> bool {
        false
    }

    /// A Receive buffer of `size` bytes for a new connection (an owner may
    /// keep its buffers across connections); a new one unless the handler
    /// says otherwise. Sleeps.
    fn recv_buffer(&self, size: usize) -> Result<KVec<u8>> {
        Ok(KVec::from_elem(0u8, size, GFP_KERNEL)?)
    }

    /// The connection is being torn down: its Receive buffers, unmapped,
    /// for the handler to keep or free (freed unless it says otherwise).
    /// Sleeps, but must not allocate: it runs where a connection goes away.
    fn recv_buffers_freed(&self, bufs: impl Iterator<Item = KVec<u8>>) {
        bufs.for_each(drop);
    }

    /// An R/W operation posted alone ([`Connection::rw_post`]) completed:
    /// its `cookie` and how. Nothing unless the handler says otherwise.
    fn rw_done(&self, _cookie: u64, _how: Completion) {}

    /// Send buffers or memory regions came back (a Send completion that
    /// reclaimed some, a region given back to the pool): a sender waiting
    /// for them may try again. Called after the release, before the
    /// handler's own wake-ups.
    fn released(&self) {}
}

/// Queue pair and buffer sizing, and the Send and Receive policy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QpConfig {
    /// Send buffers (= Sends that may be outstanding).
    pub(crate) send_bufs: usize,
    /// Bytes in each Send buffer.
    pub(crate) send_buf_size: usize,
    /// SGEs a Send may carry (at most [`MAX_SEND_SGES`]).
    pub(crate) send_sges: usize,
    /// Receive buffers.
    pub(crate) recv_bufs: usize,
    /// Consumed Receives are reposted together, in one chained post, once
    /// this many have gathered (at least one); `recv_bufs` must include
    /// that many spares.
    pub(crate) recv_batch: usize,
    /// Bytes in each Receive buffer.
    pub(crate) recv_buf_size: usize,
    /// Memory regions made with the queue pair.
    pub(crate) mrs: usize,
    /// Most memory regions the connection may make in all.
    pub(crate) max_mrs: usize,
    /// Pages each memory region can cover.
    pub(crate) mr_pages: u32,
    /// Send queue slots the Sends and the REG_MRs posted with them may
    /// hold at once (at least one Send with `max_send_regs` of them). The
    /// queue pair also gets a slot per memory region for its LOCAL_INV.
    pub(crate) send_wrs: usize,
    /// Most REG_MRs one Send carries in front of it.
    pub(crate) max_send_regs: usize,
    /// R/W operations in flight at once (a server's RDMA Reads and
    /// Writes); 0 for a client.
    pub(crate) rdma_ctxs: u32,
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
    /// Receive buffers allocated (counted by the owner that makes them:
    /// the client keeps them across reconnects, which reuse a transport's
    /// buffers).
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

// `make misuse`: unsafe code in this module does not compile.
// misuse: verbs_unsafe unsafe_code
#[cfg(misuse = "verbs_unsafe")]
fn misuse_unsafe() -> u8 {
    let x = 0u8;
    // SAFETY: none: refused by the lint.
    unsafe { core::ptr::read(&x) }
}
