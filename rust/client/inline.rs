// SPDX-License-Identifier: GPL-2.0

//! Inline thresholds (RFC 8166 section 3.3.2, RFC 8797, Version Two's
//! defaults and the server's receive buffer size).

use core::sync::atomic::Ordering;

use crate::proto::{
    cm,
    v2::{self, ConnVersion, Version},
};

use super::conn::EpShared;

impl EpShared {
    /// The inline thresholds in force now, `(calls, replies)`: 1024 while
    /// the Version Two probe is out, the RFC 8797 exchange for Version One,
    /// Version Two's 4096 default (bounded by our buffers) for Version Two.
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
        let settled = matches!(st, ConnVersion::Neg(v2::Negotiation::Settled(_)));
        let peer = self.peer_xch.lock();
        let t = match st {
            ConnVersion::Neg(v2::Negotiation::Settled(Version::V1)) => (n.send_threshold, n.recv_threshold),
            ConnVersion::Neg(v2::Negotiation::Settled(Version::V2)) => {
                // Calls: as large as the server says it can receive (its
                // Receive Buffer Size, 4096 until it says otherwise) and our
                // Send buffers hold. Replies: the 4096 default the server
                // assumes of us, though our buffers may be larger.
                let d = Version::V2.default_inline_threshold();
                let s = &self.cfg.settings;
                (peer.rbsiz.min(s.inline_write), d.min(s.inline_read))
            }
            _ => {
                let d = v2::NEGOTIATION_MAX_MESSAGE;
                (d.min(n.send_threshold), d.min(n.recv_threshold))
            }
        };
        // The CM exchange is done and the version settled: only the
        // server's characteristics can still change the thresholds, and
        // they clear the cache under the lock held here.
        if established.is_some() && settled {
            self.inline_cache.store(u64::from(t.0) << 32 | u64::from(t.1), Ordering::Release);
        }
        drop(peer);
        t
    }

    pub(super) fn negotiated(&self) -> cm::Negotiated {
        self.state.lock().1.unwrap_or(cm::Negotiated::BEFORE_EXCHANGE)
    }
}
