// SPDX-License-Identifier: GPL-2.0

//! Module parameters (declared in `params.c`), read and clamped to the
//! ranges the transport supports.

use crate::proto::cm;
use crate::sys;

/// Fewest and most requests per transport (as the in-tree client).
const SLOTS: (u32, u32) = (4, 16384);
/// Smallest and largest inline threshold (RFC 8797 sizes are 1..256 KiB; the
/// in-tree client allows 1 KiB..64 KiB).
const INLINE: (u32, u32) = (1024, 65536);

/// Requests in flight per transport.
pub(crate) fn slot_table_entries() -> u32 {
    // SAFETY: reads an integer parameter.
    unsafe { sys::rpcrdma_rs_param_slot_table_entries() }.clamp(SLOTS.0, SLOTS.1)
}

/// Largest reply received inline; the Receive buffer size.
fn max_inline_read() -> u32 {
    // SAFETY: reads an integer parameter.
    unsafe { sys::rpcrdma_rs_param_max_inline_read() }.clamp(INLINE.0, INLINE.1)
}

/// Largest call sent inline; the Send buffer size.
fn max_inline_write() -> u32 {
    // SAFETY: reads an integer parameter.
    unsafe { sys::rpcrdma_rs_param_max_inline_write() }.clamp(INLINE.0, INLINE.1)
}

/// RPC-over-RDMA versions allowed (`versions=`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Versions {
    pub(crate) v1: bool,
    pub(crate) v2: bool,
}

impl Versions {
    /// As the `versions=` parameter writes it.
    pub(crate) fn as_param(self) -> &'static str {
        match (self.v2, self.v1) {
            (true, true) => "2,1",
            (true, false) => "2",
            _ => "1",
        }
    }
}

/// The versions the transport may use.
fn versions() -> Versions {
    // SAFETY: reads an integer parameter.
    let mask = unsafe { sys::rpcrdma_rs_param_versions() };
    let v = Versions { v1: mask & (1 << 1) != 0, v2: mask & (1 << 2) != 0 };
    if v.v1 || v.v2 {
        v
    } else {
        Versions { v1: true, v2: false }
    }
}

/// Seconds without a Receive, while RPCs wait for replies, before the
/// connection is probed (`probe_interval`; 0: never).
pub(crate) fn probe_interval_s() -> u32 {
    // SAFETY: reads an integer parameter.
    unsafe { sys::rpcrdma_rs_param_probe_interval() }.min(3600)
}

/// The parameters a transport runs with, read once when it is created
/// (a mount): writing one later changes new mounts only, never a live
/// connection whose buffers were sized by the old values. (`probe_interval`
/// is read by each liveness check instead: it sizes nothing.)
#[derive(Clone, Copy)]
pub(crate) struct Settings {
    /// Receive buffer size and the Receive size advertised to the server
    /// (RFC 8797 and xcharext's XCHAR_RBSIZ): a multiple of 1 KiB, as the
    /// CM private data can express it, so that what we advertise and what
    /// we size replies by are the same number.
    pub(crate) inline_read: u32,
    /// Send buffer size and the largest inline call; a multiple of 1 KiB.
    pub(crate) inline_write: u32,
    /// `versions=`.
    pub(crate) versions: Versions,
}

impl Settings {
    /// The parameters as they are now.
    pub(crate) fn now() -> Settings {
        Settings {
            inline_read: cm::normalize_size(max_inline_read()),
            inline_write: cm::normalize_size(max_inline_write()),
            versions: versions(),
        }
    }
}

/// How long a connection attempt may take.
pub(crate) fn connect_timeout_ms() -> u32 {
    30_000
}
