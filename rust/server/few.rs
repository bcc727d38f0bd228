// SPDX-License-Identifier: GPL-2.0

//! Short lists kept in place: the segments, pieces and bytes a call or a
//! reply works through are few for nearly every RPC (a READ's Write
//! chunk of one segment over one page), so they live in the value that
//! uses them, on the stack or in a box made anyway, and only a longer
//! list takes an allocation of its own. svcrdma keeps such lists in
//! contexts it recycles; allocations were about half of what our server
//! spent beyond it per 4 KiB READ (`Documentation/benchmarks.rst`).

use core::ops::{Deref, DerefMut};

use kernel::prelude::*;

/// A list of `T`, in place when it has at most `N` entries, else in an
/// allocation.
pub(super) enum Few<T: Copy, const N: usize> {
    /// The first `.1` entries of the array.
    In([T; N], usize),
    /// Every entry of the vector.
    Out(KVec<T>),
}

// Made and filled in place, not returned in a `Result`: a list of a few
// hundred bytes moved by value costs a `memcpy` at each move.
impl<T: Copy, const N: usize> Few<T, N> {
    /// An empty list; `fill` is what the room kept in place holds until
    /// pushed over (never read).
    pub(super) fn new(fill: T) -> Self {
        Few::In([fill; N], 0)
    }

    /// A list of `n` copies of `fill`: in place if `n` is at most `N`.
    pub(super) fn filled(fill: T, n: usize) -> Result<Self> {
        if n <= N {
            return Ok(Few::In([fill; N], n));
        }
        Ok(Few::Out(KVec::from_elem(fill, n, GFP_KERNEL)?))
    }

    /// Made `n` entries long, for the caller to write. A list in place
    /// that stays in place (`n` at most `N`) keeps its first entries and
    /// gets copies of `fill` after them: reused for as many entries, it
    /// writes nothing. Any other list is made anew, `n` copies of `fill`
    /// (what it had is not kept).
    pub(super) fn resize(&mut self, n: usize, fill: T) -> Result {
        if let Few::In(a, len) = self {
            if n <= N {
                if let Some(new) = a.get_mut(*len..n) {
                    new.fill(fill);
                }
                *len = n;
                return Ok(());
            }
        }
        *self = Few::filled(fill, n)?;
        Ok(())
    }

    /// Made empty, in place (`fill` as for [`Few::new`], if it was not).
    pub(super) fn clear(&mut self, fill: T) {
        match self {
            Few::In(_, len) => *len = 0,
            Few::Out(_) => *self = Few::new(fill),
        }
    }

    /// Adds `v` at the end; a list kept in place moves to an allocation
    /// once full.
    pub(super) fn push(&mut self, v: T) -> Result {
        if let Few::In(a, n) = self {
            if let Some(e) = a.get_mut(*n) {
                *e = v;
                *n += 1;
                return Ok(());
            }
        }
        Ok(self.spill(N.max(1))?.push(v, GFP_KERNEL)?)
    }

    /// The list's allocation, made with room for `more` entries beyond
    /// those it has if the list was kept in place.
    fn spill(&mut self, more: usize) -> Result<&mut KVec<T>> {
        if let Few::In(a, n) = self {
            let mut out = KVec::with_capacity(n.saturating_add(more), GFP_KERNEL)?;
            out.extend_from_slice(a.get(..*n).unwrap_or_default(), GFP_KERNEL)?;
            *self = Few::Out(out);
        }
        match self {
            Few::Out(o) => Ok(o),
            // Never: moved just above.
            Few::In(..) => Err(EINVAL),
        }
    }

    /// Adds `v` at the end of `list`, which is made (in place) with it if
    /// there is none: for a `T` with no value to fill the room with before
    /// the first.
    pub(super) fn push_to(list: &mut Option<Self>, v: T) -> Result {
        match list {
            Some(l) => l.push(v),
            None => {
                *list = Some(Few::In([v; N], 1));
                Ok(())
            }
        }
    }

    /// Adds copies of `v` until the list has `n` entries.
    pub(super) fn grow_to(&mut self, n: usize, v: T) -> Result {
        while self.len() < n {
            self.push(v)?;
        }
        Ok(())
    }
}

impl<T: Copy, const N: usize> Deref for Few<T, N> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        match self {
            Few::In(a, n) => a.get(..*n).unwrap_or_default(),
            Few::Out(v) => v,
        }
    }
}

impl<T: Copy, const N: usize> DerefMut for Few<T, N> {
    fn deref_mut(&mut self) -> &mut [T] {
        match self {
            Few::In(a, n) => a.get_mut(..*n).unwrap_or_default(),
            Few::Out(v) => v,
        }
    }
}
