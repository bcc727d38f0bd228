// SPDX-License-Identifier: GPL-2.0

//! The protocol version of a connection (draft-rpcrdma-version-two section
//! 5, RFC 8166 section 4.2): set by the first message in a version this
//! server speaks and kept for the connection's life. Replies go in it
//! (section 5.3: the requester's version), and so do RDMA_ERRORs:
//! Version Two has no ERR_CHUNK, its ERR_BAD_HEADER says the same.

use core::sync::atomic::{AtomicU32, Ordering};

use kernel::prelude::*;

use super::{recv::ConnState, stats::COUNTERS, xprt::ServerXprt};
use crate::{
    kapi::trace,
    proto::{
        v1,
        v2::{self, Version},
    },
    verbs::{Connection, Copying, SendWriter},
};

/// A connection's protocol version.
///
/// # Invariants
///
/// `settled` is 0 (no message yet in a version served), or a version
/// `served` holds, and once set never changes.
pub(super) struct ConnVersion {
    settled: AtomicU32,
    /// The versions served (bit n: version n), from the `versions`
    /// module parameter when the connection was accepted.
    served: u32,
}

impl ConnVersion {
    /// A connection serving the versions of `mask` (bit n: version n; the
    /// `versions` parameter). Version One if none.
    pub(super) fn new(mask: u32) -> Self {
        let served = mask & ((1 << v1::VERSION) | (1 << v2::RPCRDMA_VERSION_2));
        let served = if served == 0 { 1 << v1::VERSION } else { served };
        ConnVersion { settled: AtomicU32::new(0), served }
    }

    /// The connection's version for a message of version `vers`: `Ok` if
    /// it is the connection's (settling it, if this is the first message
    /// in a version served), else `Err` with the range for ERR_VERS.
    /// Messages are taken in the order they came ([`ConnState::received`]),
    /// so the first settles it.
    #[inline]
    pub(super) fn check(&self, vers: u32) -> Result<Version, (u32, u32)> {
        let settled = self.settled.load(Ordering::Acquire);
        if settled != 0 {
            return if settled == vers { Ok(Self::of(vers)) } else { Err((settled, settled)) };
        }
        self.settle(vers)
    }

    /// The version a served `vers` names.
    fn of(vers: u32) -> Version {
        if vers == v2::RPCRDMA_VERSION_2 {
            Version::V2
        } else {
            Version::V1
        }
    }

    /// [`ConnVersion::check`] for the first message: settles the
    /// connection's version if `vers` is served.
    #[inline(never)]
    fn settle(&self, vers: u32) -> Result<Version, (u32, u32)> {
        let of = Self::of;
        let served = vers < 32 && self.served & (1 << vers) != 0;
        if !served {
            let low = if self.served & (1 << v1::VERSION) != 0 { v1::VERSION } else { v2::RPCRDMA_VERSION_2 };
            let high = if self.served & (1 << v2::RPCRDMA_VERSION_2) != 0 { v2::RPCRDMA_VERSION_2 } else { v1::VERSION };
            return Err((low, high));
        }
        match self.settled.compare_exchange(0, vers, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                if vers == v2::RPCRDMA_VERSION_2 {
                    COUNTERS.v2_connections.fetch_add(1, Ordering::Relaxed);
                }
                Ok(of(vers))
            }
            Err(now) if now == vers => Ok(of(vers)),
            Err(now) => Err((now, now)),
        }
    }

    /// The connection's version: Version One until a message settled it.
    pub(super) fn get(&self) -> Version {
        if self.settled.load(Ordering::Acquire) == v2::RPCRDMA_VERSION_2 {
            Version::V2
        } else {
            Version::V1
        }
    }
}

impl ConnState {
    /// Encodes into `out` the transport header of a reply to the call
    /// `xid` in the connection's version, granting our credits: RDMA_MSG
    /// (the reply follows) or, with `nomsg`, RDMA_NOMSG (the reply is in
    /// the Reply chunk), returning the chunks in `lists`. Its length.
    pub(super) fn encode_reply_header(&self, out: &mut [u8], xid: u32, nomsg: bool, lists: &v1::ChunkLists<'_>) -> Result<usize> {
        let credits = self.credits;
        match self.version.get() {
            Version::V1 if nomsg => v1::encode_nomsg(out, xid, credits, lists).map_err(|_| EINVAL),
            Version::V1 => v1::encode_msg(out, xid, credits, lists).map_err(|_| EINVAL),
            Version::V2 => {
                let c = v2::Chunks { direction: v2::Direction::Reply, lists: *lists };
                let body = if nomsg { v2::Body::NoMsg(c) } else { v2::Body::Msg(c) };
                v2::Header { xid, credit: credits, body }.encode(out).map_err(|_| EINVAL)
            }
        }
    }

    /// Sends the RDMA_ERROR for the call `xid` whose chunks or size this
    /// server cannot carry: ERR_CHUNK (Version One), ERR_BAD_HEADER
    /// (Version Two). An error: the caller closes the connection (the
    /// call would wait for ever).
    pub(super) fn send_error_chunk(&self, conn: &Connection<ServerXprt>, xid: u32) -> Result {
        let credits = self.credits;
        let v = self.version.get();
        COUNTERS.errors_sent.fetch_add(1, Ordering::Relaxed);
        trace::svc_err(xid, 2, 0, 0);
        conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
            let n = match v {
                Version::V1 => v1::encode_err_chunk(w.room(), xid, credits).map_err(|_| EINVAL)?,
                Version::V2 => {
                    v2::Header::error(xid, credits, v2::ErrorBody::BadHeader).encode(w.room()).map_err(|_| EINVAL)?
                }
            };
            w.copied(n)
        })
    }

    /// Sends ERR_VERS (versions `low` to `high`) for the message `xid`,
    /// in Version One's encoding, which Version Two shares (RFC 8166
    /// section 4.2: a version the receiver takes).
    pub(super) fn send_error_vers(&self, conn: &Connection<ServerXprt>, xid: u32, low: u32, high: u32) -> Result {
        let credits = self.credits;
        COUNTERS.err_vers_sent.fetch_add(1, Ordering::Relaxed);
        trace::svc_err(xid, 1, low, high);
        conn.send_copied(|w: &mut SendWriter<'_, Copying>| {
            let n = v1::encode_err_vers(w.room(), xid, credits, low, high).map_err(|_| EINVAL)?;
            w.copied(n)
        })
    }

    /// Most bytes a reply takes in one Send: our Send buffer, and the
    /// client's Receive buffer: RFC 8797's on Version One, its
    /// transport characteristics (4096 until it says) on Version Two.
    pub(super) fn send_max(&self) -> u32 {
        match self.version.get() {
            Version::V1 => self.send_max,
            Version::V2 => self.send_buf.min(self.peer_rbsiz.load(Ordering::Acquire)),
        }
    }

    /// The client takes Send With Invalidate: RFC 8797 section 4.1 on
    /// Version One, its Requester Remote Invalidation characteristic on
    /// Version Two (false until it says).
    pub(super) fn takes_remote_invalidate(&self) -> bool {
        match self.version.get() {
            Version::V1 => self.remote_invalidate,
            Version::V2 => self.peer_rem_inv.load(Ordering::Acquire),
        }
    }
}

