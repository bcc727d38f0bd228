// SPDX-License-Identifier: GPL-2.0

//! Module parameters (declared in `params.c`), read and clamped to the
//! ranges the transport supports.

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
pub(crate) fn max_inline_read() -> u32 {
    // SAFETY: reads an integer parameter.
    unsafe { sys::rpcrdma_rs_param_max_inline_read() }.clamp(INLINE.0, INLINE.1)
}

/// Largest call sent inline; the Send buffer size.
pub(crate) fn max_inline_write() -> u32 {
    // SAFETY: reads an integer parameter.
    unsafe { sys::rpcrdma_rs_param_max_inline_write() }.clamp(INLINE.0, INLINE.1)
}

/// RPC-over-RDMA versions allowed (`versions=`).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Versions {
    pub(crate) v1: bool,
    pub(crate) v2: bool,
}

/// The versions the transport may use.
pub(crate) fn versions() -> Versions {
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

/// How long a connection attempt may take.
pub(crate) fn connect_timeout_ms() -> u32 {
    30_000
}
