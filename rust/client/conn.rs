// SPDX-License-Identifier: GPL-2.0

//! One connection: the state its completion and connection manager
//! handlers share, and the messages it sends unasked (answers to the
//! server, which take no request of ours).

use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use kernel::{
    new_condvar, new_spinlock,
    prelude::*,
    sync::{Arc, CondVar, SpinLock},
};

use crate::verbs::{CmEvent, Completion, ConnHandler, Connection, Copying, Live, Received, SendWriter, VerbsCounters};
use crate::{
    kapi::{errno, ratelimit::RateLimit, rpc::XprtRef, trace},
    proto::{cm, credits, plan, v2::ConnVersion, xchar::Characteristics},
};

use super::{
    backchannel::BcPool,
    recvbufs::RecvCache,
    connect::CmState,
    params,
    slots::SlotTable,
    stats::{Stats, COUNTERS},
    version::{self, settled_number, NO_XID},
};

/// The part of a connection its completion and CM handlers share.
#[pin_data]
pub(super) struct EpShared {
    pub(super) xprt: XprtRef,
    pub(super) cfg: EpConfig,
    #[pin]
    pub(super) state: SpinLock<(CmState, Option<cm::Negotiated>)>,
    #[pin]
    pub(super) changed: CondVar,
    pub(super) max_requests: AtomicU32,
    pub(super) credits: AtomicU32,
    /// xprt_force_disconnect is asked for at most once per connection.
    pub(super) disconnecting: AtomicBool,
    /// The transport is going away: connection setup stops waiting.
    pub(super) aborted: AtomicBool,
    /// Credits the next grant is reduced by: messages of ours that took a
    /// server Receive and get no reply (ROPT_INITXCH).
    pub(super) grant_debt: AtomicU32,
    /// Calls sent on this connection whose RPC ended before their reply:
    /// each keeps a credit counted until it is answered (`credits.rs`).
    #[pin]
    pub(super) abandoned: SpinLock<credits::Abandoned>,
    pub(super) mr_pages: AtomicU32,
    pub(super) send_sges: AtomicU32,
    pub(super) slots: Arc<SlotTable>,
    pub(super) bc: Arc<BcPool>,
    pub(super) stats: Arc<Stats>,
    /// The transport's Receive buffers, kept across its connections.
    pub(super) recv_cache: Arc<RecvCache>,
    /// Bumped whenever Send buffers or memory regions come back; see
    /// [`EpShared::release_epoch`].
    released: AtomicU64,
    /// The protocol version of this connection.
    #[pin]
    pub(super) version: SpinLock<ConnVersion>,
    /// [`Self::version`] once settled, for the paths every RPC takes
    /// without the lock: 0 while unsettled, else the version number. A
    /// settled version never changes for the connection's life.
    pub(super) settled: AtomicU32,
    /// The inline thresholds [`Self::inline`] computes, `calls << 32 |
    /// replies`, once nothing they depend on can change but the server's
    /// characteristics; 0 until then, and again whenever those change.
    /// Stored only with [`Self::peer_xch`] locked.
    pub(super) inline_cache: AtomicU64,
    /// What [`Self::call_params`] gives, cached with
    /// [`Self::inline_cache`] and cleared with it: the settled version
    /// (bit 63 set for Version Two) and the inline thresholds less that
    /// version's extra header words (calls in bits 32 to 62, replies in
    /// the low 32); 0 while not cached.
    pub(super) call_cache: AtomicU64,
    /// The server, for remembering which version it speaks.
    pub(super) server_key: u64,
    /// XID of the probe refused with ERR_VERS: it is sent again, as
    /// Version One, on this same connection (draft section 5.2).
    pub(super) resend_xid: AtomicU64,
    /// Version Two: the server's transport characteristics, as its
    /// ROPT_INITXCH and ROPT_UPDXCH messages told them (xcharext).
    #[pin]
    pub(super) peer_xch: SpinLock<PeerXch>,
}

/// What a Version Two connection knows of the server's characteristics.
pub(super) struct PeerXch {
    /// Its characteristics: the defaults until it says otherwise.
    pub(super) chars: Characteristics,
    /// It said something (ROPT_INITXCH or ROPT_UPDXCH): it speaks
    /// xcharext.
    pub(super) heard: bool,
    /// Our ROPT_INITXCH went out, ahead of every call after the probe.
    pub(super) ours_sent: bool,
}

impl PeerXch {
    /// The server has our characteristics: it speaks xcharext, and ours
    /// reached it before any call that is not the probe (a Reliable
    /// Connection delivers in order).
    pub(super) fn has_ours(&self) -> bool {
        self.heard && self.ours_sent
    }
}

/// What a connection takes from its transport when it is set up.
pub(super) struct EpConfig {
    /// The transport's parameters (never the live module parameters).
    pub(super) settings: params::Settings,
    /// This connection's number in its transport.
    pub(super) generation: u64,
    /// The transport's window owner ([`RdmaXprt::window`]).
    pub(super) window: Arc<SpinLock<u64>>,
}

impl EpShared {
    pub(super) fn new(
        xprt: XprtRef,
        max_requests: u32,
        cfg: EpConfig,
        slots: Arc<SlotTable>,
        bc: Arc<BcPool>,
        stats: Arc<Stats>,
        recv_cache: Arc<RecvCache>,
    ) -> impl PinInit<Self, Error> {
        let server_key = version::server_key(xprt.get().peer_bytes().as_bytes());
        let start = version::start(server_key, cfg.settings.versions, cfg.settings.inline_read);
        try_pin_init!(EpShared {
            cfg,
            settled: AtomicU32::new(settled_number(&start)),
            inline_cache: AtomicU64::new(0),
            call_cache: AtomicU64::new(0),
            version <- new_spinlock!(start, "rpcrdma_rs:version"),
            server_key,
            resend_xid: AtomicU64::new(NO_XID),
            peer_xch <- new_spinlock!(PeerXch { chars: Characteristics::DEFAULT, heard: false, ours_sent: false }, "rpcrdma_rs:peer_xch"),
            xprt,
            state <- new_spinlock!((CmState::Idle, None), "rpcrdma_rs:cm_state"),
            changed <- new_condvar!("rpcrdma_rs:cm_changed"),
            max_requests: AtomicU32::new(max_requests),
            credits: AtomicU32::new(1),
            disconnecting: AtomicBool::new(false),
            aborted: AtomicBool::new(false),
            grant_debt: AtomicU32::new(0),
            abandoned <- new_spinlock!(credits::Abandoned::default(), "rpcrdma_rs:abandoned"),
            mr_pages: AtomicU32::new(1),
            send_sges: AtomicU32::new(plan::MIN_SEND_SGES),
            slots,
            bc,
            stats,
            recv_cache,
            released: AtomicU64::new(0),
        })
    }

    pub(super) fn force_disconnect(&self) {
        if !self.disconnecting.swap(true, Ordering::AcqRel) {
            self.xprt.get().force_disconnect();
        }
    }

    /// Sends a message that answers the server (a backward reply or error,
    /// an xcharext response). One we cannot send closes the connection
    /// (RFC 8166 section 4.5.4) rather than leave the server waiting.
    pub(super) fn send_answer(
        &self,
        conn: &Live<'_, Self>,
        what: &str,
        encode: impl FnOnce(&mut [u8]) -> Result<usize>,
    ) -> bool {
        match conn.send_copied(|out: &mut SendWriter<'_, Copying>| out.copy(encode)) {
            Ok(()) => true,
            Err(e) => {
                COUNTERS.backward_replies_unsendable.fetch_add(1, Ordering::Relaxed);
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!(
                        "{}: cannot send {} (error {}): closing the connection\n",
                        self.xprt.get().addr_str(),
                        what,
                        e.to_errno()
                    );
                }
                self.force_disconnect();
                false
            }
        }
    }
}

impl ConnHandler for EpShared {
    fn cm_event(&self, event: CmEvent<'_>) {
        match event {
            CmEvent::AddrResolved => self.set(CmState::AddrResolved),
            CmEvent::RouteResolved => self.set(CmState::RouteResolved),
            CmEvent::Established(pdata) => {
                let peer = cm::PrivateData::find(pdata);
                // Our sizes as the private data advertised them.
                let s = &self.cfg.settings;
                let n = cm::negotiate(s.inline_write, s.inline_read, true, peer.as_ref());
                let mut g = self.state.lock();
                *g = (CmState::Established, Some(n));
                drop(g);
                self.changed.notify_all();
            }
            CmEvent::AddrError(s) | CmEvent::RouteError(s) => {
                self.set(CmState::Failed(if s < 0 { s } else { errno::EHOSTUNREACH().to_errno() }))
            }
            CmEvent::Unreachable(status) => {
                pr_info!("server unreachable (rdma_cm status {})\n", status);
                self.set(CmState::Failed(errno::ENETUNREACH().to_errno()))
            }
            CmEvent::Rejected(status, pdata) => self.rejected(status, pdata.len()),
            CmEvent::ConnectError(status) => {
                pr_info!("connection error (rdma_cm status {})\n", status);
                self.set(CmState::Failed(errno::ENOTCONN().to_errno()))
            }
            CmEvent::DeviceRemoval => {
                // The connection's resources must go for the removal to
                // finish: the close the disconnect below starts frees them.
                pr_info!("{}: RDMA device going away: disconnecting\n", self.xprt.get().addr_str());
                trace::disconnect(|| self.xprt.get().addr_str(), ENODEV.to_errno());
                let was = self.state.lock().0;
                self.set(CmState::Closed);
                if was == CmState::Established {
                    self.force_disconnect();
                }
            }
            CmEvent::Disconnected | CmEvent::AddrChange => {
                trace::disconnect(|| self.xprt.get().addr_str(), errno::ECONNRESET().to_errno());
                let was = self.state.lock().0;
                self.set(CmState::Closed);
                if was == CmState::Established {
                    self.force_disconnect();
                }
            }
            CmEvent::Other | CmEvent::ConnectRequest(_) => {}
        }
    }

    fn received(&self, conn: Live<'_, Self>, msg: Received<'_>) {
        self.reply(&conn, msg.data, msg.invalidated);
    }

    fn receive_failed(&self, status: u32) {
        // A peer can provoke this at will (e.g. Send With Invalidate of
        // an rkey that is not ours): one line per 5 s at most.
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("Receive failed (status {}): reconnecting\n", status);
        }
        self.force_disconnect();
    }

    fn queue_pair_flushed(&self) {
        // Only a connection that is up: an attempt the CM failed (a REJ
        // moves its queue pair to the error state) fails its connect
        // anyway. A disconnect under way (ours, or the server's
        // DISCONNECTED) flushes the queue pair too: nothing new then.
        if self.state.lock().0 != CmState::Established || self.disconnecting.load(Ordering::Acquire) {
            return;
        }
        COUNTERS.flushed_connections.fetch_add(1, Ordering::Relaxed);
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!(
                "{}: queue pair in the error state with no error completion of ours: reconnecting\n",
                self.xprt.get().addr_str()
            );
        }
        self.force_disconnect();
    }

    fn counters(&self) -> &'static VerbsCounters {
        &COUNTERS.verbs
    }

    fn recv_buffer(&self, size: usize) -> Result<KVec<u8>> {
        self.recv_cache.take(size)
    }

    fn recv_buffers_freed(&self, bufs: impl Iterator<Item = KVec<u8>>) {
        self.recv_cache.give_back(bufs);
    }

    #[inline]
    fn released(&self) {
        self.released.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `released_since`: either the waiter sees
        // this bump, or its "waiting" flag is visible to our wake-up.
        core::sync::atomic::fence(Ordering::SeqCst);
    }

    fn inject_local_inv_failure(&self) -> bool {
        COUNTERS.take_local_inv_failure()
    }

    #[inline]
    fn inject_partial_post(&self) -> bool {
        COUNTERS.take_partial_post()
    }

    fn invalidate_failed(&self) {
        COUNTERS.invalidate_failures.fetch_add(1, Ordering::Relaxed);
        static MSG: RateLimit = RateLimit::new();
        if MSG.allow() {
            pr_warn!("{}: cannot invalidate memory regions: closing the connection\n", self.xprt.get().addr_str());
        }
        self.force_disconnect();
    }

    fn probe_done(&self, how: Completion) {
        let status = match how {
            Completion::Ok => 0,
            Completion::Flushed => errno::ECONNABORTED().to_errno(),
            Completion::Failed(_) => EIO.to_errno(),
        };
        trace::probe(|| self.xprt.get().addr_str(), status);
        if let Completion::Failed(status) = how {
            COUNTERS.liveness_probe_failures.fetch_add(1, Ordering::Relaxed);
            static MSG: RateLimit = RateLimit::new();
            if MSG.allow() {
                pr_warn!(
                    "{}: replies overdue and the server's queue pair does not answer a probe (status {}): reconnecting\n",
                    self.xprt.get().addr_str(),
                    status
                );
            }
            self.force_disconnect();
        }
    }

    fn send_done(&self, how: Completion) {
        match how {
            Completion::Ok => self.xprt.get().write_space(),
            Completion::Flushed => {}
            Completion::Failed(status) => {
                static MSG: RateLimit = RateLimit::new();
                if MSG.allow() {
                    pr_warn!("Send failed (status {}): reconnecting\n", status);
                }
                self.force_disconnect();
            }
        }
    }
}

/// One connection of a transport.
pub(super) struct Endpoint {
    pub(super) conn: Connection<EpShared>,
}

impl Endpoint {
    pub(super) fn shared(&self) -> &EpShared {
        self.conn.handler()
    }
}

/// A reading of a connection's release count ([`EpShared::release_epoch`]).
/// Each release on the connection adds one to its count; a reading is the
/// count when it was taken plus the releases its holder made since, so
/// that the holder's own releases never look like somebody else's.
pub(super) struct ReleaseEpoch(u64);

impl ReleaseEpoch {
    /// Counts `n` releases the holder made itself.
    pub(super) fn own(&mut self, n: u64) {
        self.0 = self.0.wrapping_add(n);
    }
}

impl EpShared {
    /// A reading of the count of resource releases (Send buffers, memory
    /// regions), taken before trying to send.
    ///
    /// Closes the lost-wakeup window of "no buffer, wait for space": read
    /// it before trying to send; after a failure with `ENOBUFS`, mark the
    /// transport as waiting (`xprt_wait_for_buffer_space`), then ask
    /// [`EpShared::released_since`]. If something was released after the
    /// reading, its wake-up may have found no waiter: retry at once. If
    /// not, every later release sees the waiting mark and wakes the task.
    /// What the attempt itself gave back (a call's unposted regions) moves
    /// the reading with it: a caller retrying for its own releases would
    /// retry for ever.
    ///
    /// The reading only has to come before the attempt (an acquire load, a
    /// plain load on x86): a release the attempt missed then counts after
    /// it. Telling a waiter from a release that missed its mark is
    /// [`EpShared::released_since`]'s, whose fence pairs with the one in
    /// every release; one per RPC here would be a locked instruction for
    /// nothing.
    #[inline]
    pub(super) fn release_epoch(&self) -> ReleaseEpoch {
        ReleaseEpoch(self.released.load(Ordering::Acquire))
    }

    /// True if resources were released on this connection since `epoch`
    /// was read, other than by the reader itself. Call it after marking
    /// the caller as waiting: the fence orders that mark before this
    /// reading, as each release orders its count before it looks for
    /// waiters.
    pub(super) fn released_since(&self, epoch: &ReleaseEpoch) -> bool {
        core::sync::atomic::fence(Ordering::SeqCst);
        self.released.load(Ordering::Relaxed) != epoch.0
    }
}
