// SPDX-License-Identifier: GPL-2.0

//! Receive buffers kept across reconnects.
//!
//! Receive buffers are allocated once per transport, not per connection:
//! a connection takes them at creation (`ConnHandler::recv_buffer`),
//! DMA-maps them on its device, and gives them back unmapped when it is
//! torn down (`ConnHandler::recv_buffers_freed`), so a reconnect
//! allocates nothing. A buffer smaller than the new connection needs (the
//! inline size grew) is replaced.

use core::sync::atomic::Ordering;

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
    new_mutex,
    prelude::*,
    sync::Mutex,
};

use crate::verbs::VerbsCounters;

/// A transport's Receive buffers while no connection has them mapped.
#[pin_data]
pub(crate) struct RecvCache {
    #[pin]
    bufs: Mutex<Cached>,
    /// Counts the buffers allocated.
    counters: &'static VerbsCounters,
}

/// Entries `0..n` of `bufs` hold buffers; the rest are empty. `bufs` has
/// an entry for every buffer handed out (`out` of them), so that giving
/// them back, at a connection's teardown, never grows it.
struct Cached {
    bufs: KVec<KVec<u8>>,
    n: usize,
    out: usize,
}

impl RecvCache {
    /// An empty cache; buffers it allocates are counted in `counters`.
    pub(crate) fn new(counters: &'static VerbsCounters) -> impl PinInit<Self> {
        pin_init!(RecvCache {
            bufs <- new_mutex!(Cached { bufs: KVec::new(), n: 0, out: 0 }, "rpcrdma_rs:recv_cache"),
            counters,
        })
    }

    /// A buffer of `size` bytes: a cached one if it has that size, else a
    /// new one (the inline size changed). Sleeps.
    pub(super) fn take(&self, size: usize) -> Result<KVec<u8>> {
        let cached = {
            let mut c = self.bufs.lock();
            // Room for this buffer to come back (an empty `KVec` allocates
            // nothing).
            let out = c.out.checked_add(1).ok_or(ENOMEM)?;
            while c.bufs.len() < c.n.saturating_add(out) {
                c.bufs.push(KVec::new(), GFP_KERNEL)?;
            }
            c.out = out;
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

    /// Takes (unmapped) buffers back. Sleeps, but allocates nothing: it
    /// runs where a connection goes away, which may be a request's release.
    pub(super) fn give_back(&self, bufs: impl Iterator<Item = KVec<u8>>) {
        let mut c = self.bufs.lock();
        for data in bufs {
            c.out = c.out.saturating_sub(1);
            if data.is_empty() {
                continue;
            }
            let n = c.n;
            // There is an entry for it (see `Cached`); a buffer that was
            // never handed out finds none and is freed.
            if let Some(slot) = c.bufs.get_mut(n) {
                *slot = data;
                // Below `bufs.len()`: the entry exists.
                c.n = n.wrapping_add(1);
            }
        }
    }
}

