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

use crate::{params, proto::v2::ConnVersion};

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
