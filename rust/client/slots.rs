// SPDX-License-Identifier: GPL-2.0

//! What the transport holds for each request between sending it and its
//! release.

use crate::{
    kapi::{
        rdma::{PagesInFlight, Registration},
        rpc::{Rqst, Xprt},
    },
    proto::v1,
};

use super::{
    chunks::{ReplyShape, MAX_CHUNK_SEGMENTS},
    stats::count_invalidations,
    xprt::RdmaXprt,
};

/// What the transport holds for one request between sending it and its
/// release: the memory regions it registered, the pages its Send may still
/// be reading, and how its reply comes back. The reply is checked against
/// it in place, under the slot's lock: nothing of it is copied per RPC.
pub(super) struct ReqState {
    pub(super) reg: Registration,
    pub(super) sent: PagesInFlight,
    pub(super) reply: ReplyShape,
    /// The segments of the Write or Reply chunk the call offered (the
    /// first `offered`): the only memory the server may say it wrote
    /// (`v1::check_returned_chunk`).
    pub(super) segs: [v1::Segment; MAX_CHUNK_SEGMENTS],
    pub(super) offered: usize,
}

impl ReqState {
    /// True if the state holds regions or a Send's pages to give back.
    pub(super) fn holds_anything(&self) -> bool {
        !self.reg.is_empty() || !self.sent.is_none()
    }

    /// Takes the request's regions and its Send's pages token out of the
    /// slot, for the caller to invalidate and wait for.
    pub(super) fn take(&mut self) -> (Registration, PagesInFlight) {
        (
            core::mem::replace(&mut self.reg, Registration::empty()),
            core::mem::replace(&mut self.sent, PagesInFlight::none()),
        )
    }
}

impl Default for ReqState {
    fn default() -> Self {
        ReqState {
            reg: Registration::empty(),
            sent: PagesInFlight::none(),
            reply: ReplyShape::Inline,
            segs: [v1::Segment::default(); MAX_CHUNK_SEGMENTS],
            offered: 0,
        }
    }
}

impl RdmaXprt {
    /// Gives back what a request that ended without its reply still holds.
    pub(super) fn release_held(&self, x: Xprt<'_>, rqst: &Rqst<'_>) {
        // An RPC that ended without its reply (signal, timeout) may still
        // have regions the server could write into: invalidate them before
        // its pages go back.
        let Some(slot) = self.slots.slot_of(rqst) else { return };
        // The usual case: the reply handler already took both back.
        if !slot.holds() {
            return;
        }
        let mut st = slot.state().lock();
        let (mut reg, mut sent) = st.take();
        slot.set_holds(&mut st, false);
        drop(st);
        if reg.is_empty() && sent.is_none() {
            return;
        }
        if let Some(ep) = self.endpoint() {
            ep.conn.wait_sent(&mut sent);
            if !reg.is_empty() {
                let registered = reg.len();
                let local = ep.conn.invalidate(&mut reg, None);
                count_invalidations(&self.stats, registered, local);
                // A task may be waiting for memory regions to send its call.
                x.write_space();
            }
        }
        // Without a connection the token is stale: its regions were
        // released when that connection was torn down, and dropping the
        // token here releases nothing twice.
    }
}
