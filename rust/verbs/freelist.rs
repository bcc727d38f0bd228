// SPDX-License-Identifier: GPL-2.0

//! A stack of free indices with room for all of them, so that push and pop
//! never allocate.

use kernel::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::Result,
};

/// Indices of idle objects of a pool (buffers, regions, slots).
pub(crate) struct FreeList {
    slots: KVec<usize>,
    top: usize,
}

impl FreeList {
    /// An empty stack with room for nothing.
    pub(crate) const fn new() -> Self {
        FreeList { slots: KVec::new(), top: 0 }
    }

    /// A stack holding `0..n`.
    pub(crate) fn full(n: usize) -> Result<Self> {
        Self::first(n, n)
    }

    /// A stack holding `0..n`, with room for `room` indices (at least
    /// `n`).
    pub(crate) fn first(n: usize, room: usize) -> Result<Self> {
        let mut slots = KVec::from_elem(0usize, room.max(n), GFP_KERNEL)?;
        for (i, s) in slots.iter_mut().take(n).enumerate() {
            *s = i;
        }
        Ok(FreeList { slots, top: n })
    }

    /// Takes the index pushed last.
    #[inline]
    pub(crate) fn pop(&mut self) -> Option<usize> {
        let top = self.top.checked_sub(1)?;
        let v = *self.slots.get(top)?;
        self.top = top;
        Some(v)
    }

    /// Gives an index back; one beyond the room it was made with is
    /// dropped (a bug elsewhere, never a write out of bounds).
    #[inline]
    pub(crate) fn push(&mut self, index: usize) {
        if let Some(slot) = self.slots.get_mut(self.top) {
            *slot = index;
            // Below the list's length: the entry exists.
            self.top = self.top.wrapping_add(1);
        }
    }

    /// Indices held.
    pub(crate) fn len(&self) -> usize {
        self.top
    }
}
