// SPDX-License-Identifier: GPL-2.0

//! The liveness probe: a signalled zero-length RDMA Write that the peer's
//! queue pair must acknowledge (see [`Conn::probe`]).
//!
//! [`Conn::probe`]: crate::kapi::ib::Conn::probe

use core::sync::atomic::Ordering;

use kernel::error::Result;

use super::{endpoint::Connection, ConnHandler};

impl<T: ConnHandler> Connection<T> {
    /// Probes the peer; [`ConnHandler::probe_done`] gets the outcome. One
    /// probe at a time: `Ok(false)` if the last one has not completed yet.
    pub(crate) fn probe(&self) -> Result<bool> {
        let posted = self.conn.probe()?;
        if posted {
            self.conn.events().counters.probes.fetch_add(1, Ordering::Relaxed);
        }
        Ok(posted)
    }
}
