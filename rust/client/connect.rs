// SPDX-License-Identifier: GPL-2.0

//! Setting up a connection (the connect worker): address and route
//! resolution, queue sizing from the device's limits, the RFC 8797 private
//! data, and waiting for the connection manager; tearing it down.

use core::sync::atomic::Ordering;

use kernel::{
    alloc::flags::GFP_KERNEL,
    prelude::*,
    sync::{Arc, ArcBorrow},
};

use crate::verbs::Connection;
use crate::kapi::ib::ConnHandle;
use crate::{
    kapi::{
        errno,
        rpc::{SendLocked, Task, Xprt},
        time, trace,
        work::{self, DelayedWork, DelayedWorkItem},
    },
    proto::{cm, credits},
};

use super::{
    class::INIT_REEST_S,
    conn::{Endpoint, EpConfig, EpShared},
    params,
    stats::COUNTERS,
    version,
    xprt::RdmaXprt,
};

/// Address and route resolution timeout.
pub(super) const RESOLVE_TIMEOUT_MS: u32 = 5000;

impl RdmaXprt {
    /// Drops the transport's connection; returns its identity, which
    /// says when it is gone: its teardown runs in whoever drops the last
    /// reference (a worker or a release may hold one for a while).
    pub(super) fn disconnect(&self, locked: &mut SendLocked<'_>) -> Option<Arc<ConnHandle>> {
        let ep = self.ep.replace(locked, None).unwrap_or(None);
        if ep.is_some() {
            // Its late replies no longer move the window (RFC 8166
            // section 3.3.3: credits belong to a connection).
            *self.window.lock() = 0;
        }
        let ep = ep?;
        trace::disconnect(|| self.xprt.get().addr_str(), 0);
        let shared = ep.shared();
        if shared.version.lock().probing() {
            // The probe was lost: start with Version One next time
            // (draft section 5.2).
            version::remember_v1_only(shared.server_key);
            pr_info!("{}: no answer to the Version Two probe: Version One from now on\n", self.xprt.get().addr_str());
        }
        let handle = ep.conn.handle().clone();
        // Dropping the last reference drains and tears the connection down.
        drop(ep);
        Some(handle)
    }

    /// Establishes a new connection (connect worker).
    pub(super) fn establish(&self) -> Result<Arc<Endpoint>> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        let shared = Arc::pin_init(
            EpShared::new(
                self.xprt.clone(),
                self.max_requests,
                EpConfig { settings: self.settings, generation, window: self.window.clone() },
                self.slots.clone(),
                self.bc.clone(),
                self.stats.clone(),
                self.recv_cache.clone(),
            ),
            GFP_KERNEL,
        )?;
        // Visible to `shutdown` from now on; it aborts the waits below.
        *self.pending.lock() = Some(shared.clone());
        if self.dying.load(Ordering::SeqCst) {
            return Err(errno::ECONNABORTED());
        }
        let mut conn = self.resolve(&shared)?;
        let caps = conn.device_caps()?;
        if !caps.frwr || caps.max_fast_reg_pages == 0 {
            pr_err!(
                "device {} cannot do fast registration (FRWR), which NFS/RDMA needs\n",
                conn.device_name()
            );
            return Err(errno::EPROTONOSUPPORT());
        }
        let sizes = self.size_queues(&conn, &caps)?;
        conn.create_qp(sizes.qp)?;
        shared.max_requests.store(sizes.max_requests as u32, Ordering::Relaxed);
        shared.mr_pages.store(sizes.mr_pages, Ordering::Relaxed);
        shared.send_sges.store(sizes.send_sges as u32, Ordering::Relaxed);
        self.stats.mrs_allocated.fetch_add(conn.mrs_made() as u64, Ordering::Relaxed);
        let (inline_send, inline_recv) = (self.settings.inline_write, self.settings.inline_read);
        // RFC 8797: our inline sizes, and that we handle Send With Invalidate.
        let ours = cm::PrivateData::new(inline_send, inline_recv, true);
        let pdata = ours.to_bytes();
        if COUNTERS.take_stale_rejection() {
            // A test hook: the attempt ends as a stale rejection would.
            shared.rejected(cm::REJ_STALE_CONN, 0);
        } else {
            conn.connect(&pdata, caps.max_qp_rd_atom.min(255) as u8)?;
        }
        let connect_ms = params::connect_timeout_ms();
        shared.wait(CmState::Established, connect_ms)?;
        Ok(Arc::new(Endpoint { conn }, GFP_KERNEL)?)
    }

    /// Creates the connection's cm_id and resolves the server's address
    /// and a route to it.
    fn resolve(&self, shared: &Arc<EpShared>) -> Result<Connection<EpShared>> {
        let x = self.xprt.get();
        let conn = Connection::new(x.net(), shared.clone())?;
        conn.resolve_addr(x.peer_addr(), RESOLVE_TIMEOUT_MS)?;
        shared.wait(CmState::AddrResolved, RESOLVE_TIMEOUT_MS)?;
        conn.resolve_route(RESOLVE_TIMEOUT_MS)?;
        shared.wait(CmState::RouteResolved, RESOLVE_TIMEOUT_MS)?;
        Ok(conn)
    }
}

impl DelayedWorkItem for RdmaXprt {
    fn work(&self) -> &DelayedWork<Self, 0> {
        &self.connect_work
    }

    /// The connect worker: drops the old connection, sets up a new one and
    /// tells SUNRPC how it went.
    fn run(this: Arc<Self>) {
        let x = this.xprt.get();
        // The send lock `connect` handed over, held until the end: without
        // it, a run nobody asked for, with nothing to do.
        let Some(mut lock) = this.connect_lock.lock().take() else { return };
        let mut locked = lock.locked();
        if let Some(old) = this.disconnect(&mut locked) {
            // The old connection's tokens (in requests that go again on
            // the new one) are ended once it is gone: wait for that, so
            // that a token a request holds is always of the current
            // connection or of one that is gone. Whoever still holds it
            // (a release, a worker) lets go soon: nothing it does waits
            // for the send lock this worker holds.
            old.wait_gone();
        }
        this.tried.store(true, Ordering::Relaxed);
        let result = this.establish();
        *this.pending.lock() = None;
        let status = match result {
            Ok(ep) => {
                let n = ep.shared().negotiated();
                pr_info!(
                    "connected to {} port {} via {}: inline thresholds {} (calls) and {} (replies) [rpcrdma_rs {}]\n",
                    x.addr_str(),
                    x.port(),
                    ep.conn.device_name(),
                    n.send_threshold,
                    n.recv_threshold,
                    crate::VERSION
                );
                let shared = ep.shared();
                trace::established(
                    || x.addr_str(),
                    shared.settled().map_or(0, |v| v.number()),
                    n.send_threshold,
                    n.recv_threshold,
                    shared.max_requests.load(Ordering::Relaxed),
                    u32::from(n.remote_invalidate),
                );
                // RFC 8166 section 3.3.3: credits do not outlive their
                // connection; one credit until the peer says more. From
                // now on only this connection's replies move the window.
                {
                    let mut owner = this.window.lock();
                    *owner = ep.shared().cfg.generation;
                    this.slots.forget_cong(x);
                    x.reset_cwnd(credits::cwnd_from_credits(1));
                }
                // The old value is the None `disconnect` left.
                if this.ep.replace(&mut locked, Some(ep)).is_ok() {
                    x.count_connect(&locked);
                    x.set_connected();
                    this.receives_seen.store(u64::MAX, Ordering::Relaxed);
                    RdmaXprt::schedule_liveness(&this);
                    Ok(())
                } else {
                    // Not reached: the lock is this transport's.
                    Err(EINVAL)
                }
            }
            Err(e) => {
                pr_info!("cannot connect to {} port {}: error {}\n", x.addr_str(), x.port(), e.to_errno());
                // No RDMA device for the route (one is being removed or not
                // yet added): to SUNRPC a network that is down for now,
                // retried after a delay, rather than an error for the RPC.
                if e == ENODEV || e == errno::EADDRNOTAVAIL() {
                    Err(errno::ENETUNREACH())
                } else {
                    Err(e)
                }
            }
        };
        trace::connect(|| x.addr_str(), status.as_ref().map_or_else(|e| e.to_errno(), |()| 0));
        x.connect_finished(lock, status);
    }
}

/// Where a connection is in its setup.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum CmState {
    Idle,
    AddrResolved,
    RouteResolved,
    Established,
    Failed(i32),
    Closed,
}

impl EpShared {
    /// Makes connection setup give up at its next wait, or now.
    pub(super) fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        self.set(CmState::Closed);
    }

    /// The server rejected the connection with `status` (and `pdata_len`
    /// bytes of private data). A stale connection (the server still holds
    /// an older one from our queue pair's number) passes: the attempt
    /// fails with `ENOTCONN`, which SUNRPC retries after a delay, from a
    /// new queue pair, even for a mount's first call. Anything else is a
    /// refusal (`ECONNREFUSED`), as the C client has it.
    pub(super) fn rejected(&self, status: i32, pdata_len: usize) {
        trace::reject(|| self.xprt.get().addr_str(), status);
        let errno = match cm::rejection(status) {
            cm::Rejection::Stale => {
                COUNTERS.stale_rejections.fetch_add(1, Ordering::Relaxed);
                pr_info!(
                    "{}: connection rejected as stale (the server still holds an older one): trying again\n",
                    self.xprt.get().addr_str()
                );
                errno::ENOTCONN()
            }
            cm::Rejection::Refused => {
                pr_info!("connection rejected (rdma_cm status {}, {} bytes of private data)\n", status, pdata_len);
                errno::ECONNREFUSED()
            }
        };
        self.set(CmState::Failed(errno.to_errno()));
    }

    pub(super) fn set(&self, s: CmState) {
        self.state.lock().0 = s;
        self.changed.notify_all();
    }

    /// Waits until the connection reaches `want`, fails, or `ms` pass.
    pub(super) fn wait(&self, want: CmState, ms: u32) -> Result {
        let mut left = time::ms_to_jiffies(ms);
        let mut g = self.state.lock();
        loop {
            if self.aborted.load(Ordering::Acquire) {
                return Err(errno::ECONNABORTED());
            }
            match g.0 {
                s if s == want => return Ok(()),
                CmState::Failed(e) => return Err(Error::from_errno(e)),
                CmState::Closed => return Err(errno::ECONNABORTED()),
                _ => {}
            }
            if left == 0 {
                return Err(errno::ETIMEDOUT());
            }
            time::wait_timeout(&self.changed, &mut g, &mut left)?;
        }
    }
}

impl RdmaXprt {
    /// Queues the connect worker (SUNRPC's `connect` op).
    pub(super) fn start_connect(this: ArcBorrow<'_, Self>, x: Xprt<'_>, task: &Task<'_>) {
        // SUNRPC calls this with the task holding the send lock, which it
        // hands to the connect worker. Were it not held, the worker could
        // not run; SUNRPC has already marked the transport CONNECTING, so
        // that is cleared here and the task tries again.
        let Some(lock) = x.lock_connect(task) else {
            pr_warn!("{}: connect without the transport's send lock\n", x.addr_str());
            x.connect_not_started(EAGAIN);
            return;
        };
        let delay = if this.tried.load(Ordering::Relaxed) {
            x.reconnect_delay(&lock, time::ms_to_jiffies(INIT_REEST_S * 1000))
        } else {
            0
        };
        // Only one exists (the lock has one holder): nothing is replaced.
        *this.connect_lock.lock() = Some(lock);
        // Already queued: the one queued does the job.
        drop(work::enqueue::<_, 0>(this.into(), delay));
    }
}
