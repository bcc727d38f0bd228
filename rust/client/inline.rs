// SPDX-License-Identifier: GPL-2.0

//! Inline thresholds (RFC 8166 section 3.3.2, RFC 8797, Version Two's
//! defaults and the server's receive buffer size).

use core::sync::atomic::Ordering;

use crate::proto::{
    cm,
    v2::{self, ConnVersion, Version},
};

use super::conn::EpShared;

/// What every call of a connection needs before it is planned: the
/// version it goes in and the inline thresholds the planner works with,
/// which size a Version One header (the version's extra header words are
/// taken off).
#[derive(Clone, Copy)]
pub(super) struct CallParams {
    pub(super) version: Version,
    /// Calls.
    pub(super) send: u32,
    /// Replies.
    pub(super) recv: u32,
}

impl CallParams {
    /// Calls of `version` under the inline thresholds `(send, recv)`.
    pub(super) fn of(version: Version, (send, recv): (u32, u32)) -> Self {
        let extra = version.extra_header_len();
        CallParams { version, send: send.saturating_sub(extra), recv: recv.saturating_sub(extra) }
    }

    /// Packed for [`EpShared::call_cache`]; 0 (never cached) if the call
    /// threshold does not fit its 31 bits.
    fn packed(self) -> u64 {
        if self.send > CALL_MASK {
            return 0;
        }
        let v2 = if self.version == Version::V2 { V2_BIT } else { 0 };
        v2 | u64::from(self.send) << 32 | u64::from(self.recv)
    }

    /// Unpacked from a non-zero [`EpShared::call_cache`].
    #[inline(always)]
    fn unpacked(c: u64) -> Self {
        let version = if c & V2_BIT != 0 { Version::V2 } else { Version::V1 };
        CallParams { version, send: (c >> 32) as u32 & CALL_MASK, recv: c as u32 }
    }
}

/// [`EpShared::call_cache`]'s Version Two bit.
const V2_BIT: u64 = 1 << 63;
/// The bits of [`EpShared::call_cache`]'s call threshold, once shifted.
const CALL_MASK: u32 = (1 << 31) - 1;

impl EpShared {
    /// What a call needs before it is planned, if the connection has
    /// cached it: once its version is settled and the CM exchange done,
    /// every call but the first few. One load where the version, the
    /// thresholds and the version's header words would each be read and
    /// tested.
    #[inline(always)]
    pub(super) fn call_params(&self) -> Option<CallParams> {
        match self.call_cache.load(Ordering::Acquire) {
            0 => None,
            c => Some(CallParams::unpacked(c)),
        }
    }

    /// The inline thresholds in force now, `(calls, replies)`: 1024 while
    /// the Version Two probe is out, the RFC 8797 exchange for Version One;
    /// for Version Two, calls up to the server's Receive buffer, replies
    /// Version Two's 4096 default, or our whole Receive buffer once the
    /// server has our characteristics (both bounded by our buffers).
    #[inline(always)]
    pub(super) fn inline(&self) -> (u32, u32) {
        // Set once the connection's thresholds can change only with the
        // server's characteristics: every call but the first few.
        let cached = self.inline_cache.load(Ordering::Acquire);
        if cached != 0 {
            return ((cached >> 32) as u32, cached as u32);
        }
        self.inline_uncached()
    }

    /// [`EpShared::inline`] worked out from the connection's state, cached
    /// when it can be.
    #[inline(never)]
    fn inline_uncached(&self) -> (u32, u32) {
        let established = self.state.lock().1;
        let n = established.unwrap_or(cm::Negotiated::BEFORE_EXCHANGE);
        let st = *self.version.lock();
        let peer = self.peer_xch.lock();
        let s = &self.cfg.settings;
        let t = st.inline_thresholds(n, peer.chars.rbsiz, s.inline_write, s.inline_read, peer.has_ours());
        // The CM exchange is done and the version settled: only the
        // server's characteristics can still change the thresholds, and
        // they clear the cache under the lock held here.
        if let (Some(_), ConnVersion::Neg(v2::Negotiation::Settled(v))) = (established, st) {
            self.inline_cache.store(u64::from(t.0) << 32 | u64::from(t.1), Ordering::Release);
            self.call_cache.store(CallParams::of(v, t).packed(), Ordering::Release);
        }
        drop(peer);
        t
    }

    pub(super) fn negotiated(&self) -> cm::Negotiated {
        self.state.lock().1.unwrap_or(cm::Negotiated::BEFORE_EXCHANGE)
    }
}
