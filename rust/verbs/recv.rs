// SPDX-License-Identifier: GPL-2.0

//! Receive buffers: kept across reconnects, and reposted in batches.
//!
//! Receive buffers are allocated once per transport, not per connection:
//! a connection takes them at creation, DMA-maps them on its device, and
//! gives them back unmapped when it is torn down, so a reconnect allocates
//! nothing. A buffer smaller than the new connection needs (the inline
//! size grew) is replaced.
//!
//! A consumed Receive is not reposted at once: once `recv_batch` have
//! gathered they go back in one chained post (one doorbell), kept by the
//! Receive CQ's handler in the connection (`kapi::ib::Conn`). The spares
//! posted at connect time cover those held back.

use core::sync::atomic::Ordering;

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
    new_mutex,
    prelude::*,
    sync::Mutex,
};

use super::VerbsCounters;

/// A transport's Receive buffers while no connection has them mapped.
#[pin_data]
pub(crate) struct RecvCache {
    #[pin]
    bufs: Mutex<Cached>,
    /// Counts the buffers allocated.
    counters: &'static VerbsCounters,
}

/// Entries `0..n` of `bufs` hold buffers; the rest are empty.
struct Cached {
    bufs: KVec<KVec<u8>>,
    n: usize,
}

impl RecvCache {
    /// An empty cache; buffers it allocates are counted in `counters`.
    pub(crate) fn new(counters: &'static VerbsCounters) -> impl PinInit<Self> {
        pin_init!(RecvCache {
            bufs <- new_mutex!(Cached { bufs: KVec::new(), n: 0 }, "rpcrdma_rs:recv_cache"),
            counters,
        })
    }

    /// A buffer of `size` bytes: a cached one if it has that size, else a
    /// new one (the inline size changed). Sleeps.
    pub(super) fn take(&self, size: usize) -> Result<KVec<u8>> {
        let cached = {
            let mut c = self.bufs.lock();
            match c.n.checked_sub(1) {
                Some(last) => {
                    c.n = last;
                    c.bufs.get_mut(last).map(core::mem::take)
                }
                None => None,
            }
        };
        match cached {
            Some(data) if data.len() == size => Ok(data),
            _ => {
                self.counters.recv_bufs_allocated.fetch_add(1, Ordering::Relaxed);
                Ok(KVec::from_elem(0u8, size, GFP_KERNEL)?)
            }
        }
    }

    /// Takes (unmapped) buffers back. Sleeps.
    pub(super) fn give_back(&self, bufs: impl Iterator<Item = KVec<u8>>) {
        let mut c = self.bufs.lock();
        for data in bufs {
            if data.is_empty() {
                continue;
            }
            let n = c.n;
            if let Some(slot) = c.bufs.get_mut(n) {
                *slot = data;
            } else if c.bufs.push(data, GFP_KERNEL).is_err() {
                // The buffer is freed; the next connection allocates one.
                continue;
            }
            c.n += 1;
        }
    }
}
