// SPDX-License-Identifier: GPL-2.0

//! Which RPC-over-RDMA version a connection speaks (draft-rpcrdma-version-two
//! section 5).
//!
//! A new connection's first call goes as Version Two, alone and within the
//! Version One inline threshold: the probe. The server's answer settles the
//! version for the connection's life (`proto::v2::Negotiation`). A server
//! that answered ERR_VERS, or never answered the probe, is remembered here:
//! later connections to it start with Version One, with no probe and so no
//! extra round trip.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use kernel::{c_str, prelude::*};

use crate::verbs::{Live, RemoteInv};
use crate::{
    kapi::{errno, trace},
    proto::{
        credits, v1,
        v2::{self, ConnVersion, Decision, Version},
    },
};

use super::{backchannel::BC_SLOTS, chunks::Returned, conn::EpShared, params, stats::COUNTERS};

/// The version number `v` has settled on, or 0 (for [`EpShared::settled`]).
pub(super) fn settled_number(v: &ConnVersion) -> u32 {
    match v {
        ConnVersion::Neg(v2::Negotiation::Settled(v)) => v.number(),
        _ => 0,
    }
}

/// No XID (for [`EpShared::resend_xid`]).
pub(super) const NO_XID: u64 = u64::MAX;

impl EpShared {
    /// The version this connection settled on, if it has.
    pub(super) fn settled(&self) -> Option<Version> {
        match self.settled.load(Ordering::Acquire) {
            0 => None,
            n if n == Version::V2.number() => Some(Version::V2),
            _ => Some(Version::V1),
        }
    }

    /// True if this connection settled on Version Two.
    pub(super) fn is_v2(&self) -> bool {
        self.settled() == Some(Version::V2)
    }

    /// A message that does not decode in this connection's version: if its
    /// fixed prefix names another version, it is a request we cannot
    /// process (a reply to our calls comes in their version, draft section
    /// 5.3), and is answered with ERR_VERS in a version we speak, giving
    /// the range we speak (RFC 8166 section 4.2, draft section 5.2).
    /// Returns false if the message is not of another version.
    pub(super) fn refuse_version(&self, conn: &Live<'_, Self>, data: &[u8]) -> bool {
        let Ok(p) = v1::peek(data) else { return false };
        let allowed = self.cfg.settings.versions;
        let (ours, low, high) = match self.settled() {
            Some(v) => (v.number(), v.number(), v.number()),
            None => {
                let low = if allowed.v1 { Version::V1 } else { Version::V2 };
                let high = if allowed.v2 { Version::V2 } else { Version::V1 };
                (low.number(), low.number(), high.number())
            }
        };
        // Never answer an error with an error.
        if (low..=high).contains(&p.vers) || p.procedure == v1::RDMA_ERROR {
            return false;
        }
        self.count_bad_reply(p.xid, c_str!("request in a version we do not speak"));
        if self.send_answer(conn, "ERR_VERS", |buf| {
            v1::encode_err_vers_any_version(buf, p.xid, ours, BC_SLOTS as u32, low, high).map_err(|_| EINVAL)
        }) {
            COUNTERS.err_vers_sent.fetch_add(1, Ordering::Relaxed);
        }
        true
    }

    /// While the Version Two probe is out, its answer settles the
    /// connection's version (draft section 5). Returns `None` if `data`
    /// was consumed here, else whether it is to be read as Version Two's
    /// ([`EpShared::is_v2`], with the settled version read once; or the
    /// server's own RDMA2_OPTIONAL ahead of the probe's answer).
    #[inline(always)]
    pub(super) fn settle_version(&self, conn: &Live<'_, Self>, data: &[u8], invalidated: Option<RemoteInv>) -> Option<bool> {
        match self.settled() {
            None => self.settle_version_now(conn, data, invalidated),
            Some(v) => Some(v == Version::V2),
        }
    }

    /// [`EpShared::settle_version`] while the version is not settled: the
    /// first replies on a connection only.
    #[cold]
    #[inline(never)]
    fn settle_version_now(&self, conn: &Live<'_, Self>, data: &[u8], invalidated: Option<RemoteInv>) -> Option<bool> {
        let (decision, settled) = {
            let mut g = self.version.lock();
            let mut d = match &mut *g {
                ConnVersion::Neg(n @ v2::Negotiation::Probing { .. }) => n.on_reply(data),
                _ => return Some(self.is_v2()),
            };
            // A Version Two server's characteristics may come first
            // (xcharext section 4.1): read as Version Two, the probe's
            // answer still to come.
            if d == Decision::OptionalBeforeAnswer {
                return Some(true);
            }
            // versions=2: Version Two or nothing.
            if let Decision::FallBackToV1 { low, high } = d {
                if !self.cfg.settings.versions.v1 {
                    *g = ConnVersion::Neg(v2::Negotiation::Failed);
                    d = Decision::NoCommonVersion { low, high };
                }
            }
            let settled = settled_number(&g);
            self.settled.store(settled, Ordering::Release);
            (d, settled)
        };
        // The answer's XID (none if it is too short to have one).
        let xid = v1::peek(data).ok().map(|p| p.xid);
        trace::version(|| self.xprt.get().addr_str(), xid.unwrap_or(0), trace::VersionEvent::Settled as u32, settled);
        self.apply_decision(conn, xid, invalidated, decision).then(|| self.is_v2())
    }

    /// Acts on what the answer to the probe decided: counts and logs it,
    /// sends our characteristics on Version Two, has the probe's call sent
    /// again as Version One, or fails it. `xid` is the answer's. Returns
    /// false if the answer was consumed here.
    fn apply_decision(
        &self,
        conn: &Live<'_, Self>,
        xid: Option<u32>,
        invalidated: Option<RemoteInv>,
        decision: Decision,
    ) -> bool {
        let addr = self.xprt.get().addr_str();
        match decision {
            Decision::NotForProbe | Decision::OptionalBeforeAnswer => true,
            // A refused probe (RejectedV2) still settles Version Two; the
            // error fails the probe's RPC in `reply`, and grants nothing.
            Decision::UseV2 { .. } | Decision::RejectedV2(_) => {
                trace::version(|| self.xprt.get().addr_str(), xid.unwrap_or(0), trace::VersionEvent::Accepted as u32, 2);
                COUNTERS.v2_connections.fetch_add(1, Ordering::Relaxed);
                pr_info!("{}: using RPC-over-RDMA Version Two\n", addr);
                // Our characteristics go only where the grant has room for
                // a message without reply beside the next call: the server
                // assumes the defaults otherwise (xcharext section 4.1).
                let max = self.max_requests.load(Ordering::Relaxed);
                if let (Decision::UseV2 { credit }, Some(xid)) = (decision, xid) {
                    if credits::sanitize_grant(credit, max) >= 2 {
                        self.send_initxch(conn, xid);
                    }
                }
                true
            }
            Decision::FallBackToV1 { low, high } => {
                // The same call goes again, as Version One, on this same
                // connection; later connections start with Version One.
                COUNTERS.v1_fallbacks.fetch_add(1, Ordering::Relaxed);
                remember_v1_only(self.server_key);
                pr_info!(
                    "{}: server speaks RPC-over-RDMA versions {}..{}, not Two: using Version One\n",
                    addr,
                    low,
                    high
                );
                let Some(xid) = xid else { return false };
                trace::version(|| self.xprt.get().addr_str(), xid, trace::VersionEvent::Fallback as u32, 1);
                self.resend_xid.store(u64::from(xid), Ordering::Release);
                if let Some((rqst, _)) = self.take_request(conn, Returned::Error, xid, invalidated) {
                    // SUNRPC encodes and transmits it again (call_status).
                    rqst.fail(EAGAIN);
                }
                false
            }
            Decision::NoCommonVersion { low, high } => {
                pr_warn!(
                    "{}: server speaks RPC-over-RDMA versions {}..{} only, none of those allowed (versions={})\n",
                    addr,
                    low,
                    high,
                    self.cfg.settings.versions.as_param()
                );
                if let Some(xid) = xid {
                    if let Some((rqst, _)) = self.take_request(conn, Returned::Error, xid, invalidated) {
                        rqst.fail(errno::EPROTONOSUPPORT());
                    }
                }
                false
            }
            Decision::UnexpectedVersion(_) | Decision::Malformed(_) => {
                // Not an answer a Version Two server gives: speak Version
                // One to it from now on.
                self.count_bad_reply(xid.unwrap_or(0), c_str!("unexpected answer to the probe"));
                remember_v1_only(self.server_key);
                self.force_disconnect();
                false
            }
        }
    }
}

/// How many Version One-only servers are remembered (oldest forgotten).
const REMEMBERED: usize = 64;

/// Keys of servers known to speak Version One only; 0 is a free slot.
static V1_ONLY: [AtomicU64; REMEMBERED] = [const { AtomicU64::new(0) }; REMEMBERED];
static NEXT: AtomicUsize = AtomicUsize::new(0);

/// A server's key: a 64-bit FNV-1a hash of its socket address (family,
/// port, address). A collision would only make another server start with
/// Version One, which every server speaks.
pub(crate) fn server_key(addr: &[u8]) -> u64 {
    let h = addr.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3));
    h.max(1)
}

fn known_v1_only(key: u64) -> bool {
    V1_ONLY.iter().any(|k| k.load(Ordering::Relaxed) == key)
}

/// Remembers that the server with `key` speaks Version One only.
pub(crate) fn remember_v1_only(key: u64) {
    if known_v1_only(key) {
        return;
    }
    let i = NEXT.fetch_add(1, Ordering::Relaxed) % REMEMBERED;
    if let Some(slot) = V1_ONLY.get(i) {
        slot.store(key, Ordering::Relaxed);
    }
}

/// How a new connection to the server with `key` starts, given the
/// versions the transport may use and our Receive buffer size.
pub(crate) fn start(key: u64, allowed: params::Versions, recv_buf: u32) -> ConnVersion {
    ConnVersion::start(allowed.v1, allowed.v2, known_v1_only(key), recv_buf)
}
