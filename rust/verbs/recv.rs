// SPDX-License-Identifier: GPL-2.0

//! Receives reposted in batches.
//!
//! A consumed Receive is not reposted at once: once `recv_batch` have
//! gathered they go back in one chained post (one doorbell), kept in
//! [`RecvBatch`], the state the Receive CQ's handler keeps (kapi gives it
//! to that handler alone, one call at a time, so it takes no lock). The
//! spares posted at connect time cover those held back.

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
};

/// Consumed Receive buffers waiting to be reposted together, once `batch`
/// have gathered: the Receive CQ's handler's own state.
///
/// # Invariants
///
/// `n` is at most `list`'s length.
pub(crate) struct RecvBatch {
    list: KVec<usize>,
    n: usize,
    batch: usize,
}

impl RecvBatch {
    /// Room for `n` buffers, reposted `batch` at a time.
    pub(super) fn new(n: usize, batch: usize) -> Result<Self> {
        Ok(RecvBatch { list: KVec::from_elem(0usize, n, GFP_KERNEL)?, n: 0, batch: batch.max(1) })
    }

    /// Adds buffer `index`; true once a batch has gathered. With no room,
    /// which only a bug elsewhere causes (the list holds every Receive
    /// buffer, and a buffer is idle at most once at a time), `index` is
    /// dropped and true returned: the caller posts those gathered.
    #[inline]
    pub(super) fn push(&mut self, index: usize) -> bool {
        match self.list.get_mut(self.n) {
            Some(slot) => {
                *slot = index;
                // Below the list's length: the entry exists.
                self.n = self.n.wrapping_add(1);
                self.n >= self.batch
            }
            None => true,
        }
    }

    /// Takes a buffer back.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<usize> {
        self.n = self.n.checked_sub(1)?;
        self.list.get(self.n).copied()
    }
}
