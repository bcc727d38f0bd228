// SPDX-License-Identifier: GPL-2.0

//! Module parameters (declared in `params.c`), read and clamped to the
//! ranges the transport supports.

use crate::{
    kapi::params::{self as raw, RawParams},
    proto::cm,
};

/// Fewest and most requests per transport (as the in-tree client).
const SLOTS: (u32, u32) = (4, 16384);
/// Smallest and largest inline threshold (RFC 8797 sizes are 1..256 KiB; the
/// in-tree client allows 1 KiB..64 KiB).
const INLINE: (u32, u32) = (1024, 65536);

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

/// The versions the transport may use (`versions=` as a bit mask; none
/// allowed means Version One).
fn versions(mask: u32) -> Versions {
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
    raw::read().probe_interval.min(3600)
}

/// The parameters a transport runs with, read once when it is created
/// (a mount): writing one later changes new mounts only, never a live
/// connection whose buffers were sized by the old values. (`probe_interval`
/// is read by each liveness check instead: it sizes nothing.)
#[derive(Clone, Copy)]
pub(crate) struct Settings {
    /// Requests in flight (`slot_table_entries`).
    pub(crate) slots: u32,
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
        Settings::from_raw(&raw::read())
    }

    /// Clamps one reading: the slot count and inline sizes to what the
    /// transport supports, the inline sizes then down to a multiple of 1 KiB.
    fn from_raw(p: &RawParams) -> Settings {
        let inline = |v: u32| cm::normalize_size(v.clamp(INLINE.0, INLINE.1));
        Settings {
            slots: p.slot_table_entries.clamp(SLOTS.0, SLOTS.1),
            inline_read: inline(p.max_inline_read),
            inline_write: inline(p.max_inline_write),
            versions: versions(p.versions),
        }
    }
}

/// How long a connection attempt may take.
pub(crate) fn connect_timeout_ms() -> u32 {
    30_000
}
