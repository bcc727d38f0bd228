// SPDX-License-Identifier: GPL-2.0

//! A first-in first-out queue of fixed room, allocated once ([`Ring`]):
//! connection requests waiting for a thread, Receives and pulled calls
//! waiting for theirs.

use kernel::prelude::*;

/// Up to its room of values, oldest first.
///
/// # Invariants
///
/// `len <= slots.len()`; the `len` slots from `head` on (wrapping) hold a
/// value, the others none.
pub(super) struct Ring<T> {
    slots: KVec<Option<T>>,
    head: usize,
    len: usize,
}

impl<T> Ring<T> {
    /// An empty queue with room for `n` values. Sleeps.
    pub(super) fn new(n: usize) -> Result<Self> {
        let mut slots = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(Ring { slots, head: 0, len: 0 })
    }

    /// Appends `v`; gives it back if the queue is full.
    pub(super) fn push(&mut self, v: T) -> core::result::Result<(), T> {
        let room = self.slots.len();
        if self.len >= room {
            return Err(v);
        }
        // Below `room` (which is not 0): neither sum wraps.
        let i = (self.head + self.len) % room;
        match self.slots.get_mut(i) {
            Some(s) => {
                *s = Some(v);
                self.len += 1;
                Ok(())
            }
            None => Err(v),
        }
    }

    /// Takes the oldest value.
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let room = self.slots.len();
        let v = self.slots.get_mut(self.head)?.take();
        self.head = (self.head + 1) % room;
        self.len -= 1;
        v
    }

    /// The oldest value, left in place.
    pub(super) fn front(&self) -> Option<&T> {
        if self.len == 0 {
            return None;
        }
        self.slots.get(self.head)?.as_ref()
    }

    /// True if nothing is queued.
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}
