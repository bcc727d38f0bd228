// SPDX-License-Identifier: GPL-2.0

//! Exclusive ownership of a buffer that the device and the CPU take turns
//! with.
//!
//! A Send or Receive buffer, its scatter list and its work request, or the
//! scatterlist of a memory region, are touched by one party at a time: the
//! thread filling it, the device that reads or writes it while its work
//! request is posted, the completion handler that takes it back. The C
//! client keeps that rule in comments; here a [`LeaseCell`] keeps it in its
//! state, and only a [`Lease`] (one at a time) reaches the contents.

use core::{
    cell::UnsafeCell,
    marker::PhantomData,
    ops::{Deref, DerefMut},
    sync::atomic::{AtomicU8, Ordering},
};

const IDLE: u8 = 0;
const LEASED: u8 = 1;
const AWAY: u8 = 2;

/// A value owned, at any moment, by nobody (idle), by one [`Lease`], or by
/// whoever it was handed to with [`Lease::hand_off`] (the device, while a
/// work request that names it is posted).
///
/// # Invariants
///
/// `state` is `IDLE`, `LEASED` or `AWAY`. While it is `LEASED` exactly one
/// [`Lease`] of this cell exists and only it reaches `value`; while it is
/// `IDLE` or `AWAY` no `Lease` exists and no Rust code reaches `value`
/// (except through [`LeaseCell::get_mut`], which needs `&mut self`).
pub(crate) struct LeaseCell<T> {
    state: AtomicU8,
    value: UnsafeCell<T>,
}

// SAFETY: a shared `LeaseCell` hands its value to one `Lease` at a time (type
// invariant; the state moves by atomic compare-and-exchange), so sharing the
// cell between threads only ever moves the value between them: `T: Send`
// suffices, as for a mutex.
unsafe impl<T: Send> Sync for LeaseCell<T> {}

impl<T> LeaseCell<T> {
    /// An idle cell holding `value`.
    pub(crate) const fn new(value: T) -> Self {
        // INVARIANT: idle, no lease.
        LeaseCell { state: AtomicU8::new(IDLE), value: UnsafeCell::new(value) }
    }

    /// Takes the idle value; `None` if it is leased or away.
    #[inline]
    pub(crate) fn lease(&self) -> Option<Lease<'_, T>> {
        self.state.compare_exchange(IDLE, LEASED, Ordering::Acquire, Ordering::Relaxed).ok()?;
        // INVARIANT: the state went from idle to leased here: this is the
        // one lease.
        Some(Lease { cell: self, _value: PhantomData })
    }

    /// Takes back a value handed off with [`Lease::hand_off`]; `None` if
    /// it is not away.
    ///
    /// # Safety
    ///
    /// Whoever the value was handed to is done with it: the work request
    /// that named it completed (or was flushed, or never reached the
    /// device), so the device no longer reads or writes its memory.
    #[inline]
    pub(crate) unsafe fn take_back(&self) -> Option<Lease<'_, T>> {
        self.state.compare_exchange(AWAY, LEASED, Ordering::Acquire, Ordering::Relaxed).ok()?;
        // INVARIANT: the state went from away to leased here: this is the
        // one lease.
        Some(Lease { cell: self, _value: PhantomData })
    }

    /// Takes the value if it is idle, or away with whoever it was handed to
    /// done with it; `None` if it is leased. For a value handed off again
    /// and again whose owner learns by other means that a hand-off is over
    /// (a Send buffer, which the Send ring reclaims in bulk): it is taken
    /// back only when it is used next.
    ///
    /// # Safety
    ///
    /// If the value is away, whoever it was handed to is done with it, as
    /// for [`LeaseCell::take_back`].
    #[inline]
    pub(crate) unsafe fn lease_done(&self) -> Option<Lease<'_, T>> {
        // A swap of leased for leased changes nothing: the lease there is
        // stays the one.
        if self.state.swap(LEASED, Ordering::Acquire) == LEASED {
            return None;
        }
        // INVARIANT: the state went from idle or away to leased here: this
        // is the one lease.
        Some(Lease { cell: self, _value: PhantomData })
    }

    /// Makes a value that was handed off idle again, without taking it
    /// back first: for the holder of a hand-off that is done with it and
    /// has nothing to change in it (one store, where `take_back` and a
    /// dropped lease are an exchange and a store).
    ///
    /// # Safety
    ///
    /// The value is away, handed off to the caller (who holds what the
    /// hand-off was for, and gives it up here), and whoever it was handed
    /// to is done with it, as for [`LeaseCell::take_back`].
    #[inline]
    pub(crate) unsafe fn give_back(&self) {
        self.state.store(IDLE, Ordering::Release);
    }

    /// The value's address: for computing the address of a field (never
    /// to be dereferenced outside a lease).
    #[inline]
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.value.get()
    }

    /// True if the value is idle: nobody leases it and it is not away.
    #[inline]
    pub(crate) fn is_idle(&self) -> bool {
        self.state.load(Ordering::Acquire) == IDLE
    }

    /// The value, through the only reference to the cell (teardown, after
    /// the device let go of everything).
    pub(crate) fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// The one holder of a [`LeaseCell`]'s value. Dropping it makes the value
/// idle again.
///
/// Like a mutex guard, a lease is `Send` when `T` is and `Sync` only when
/// `T` is: sharing it shares `&T` (the `PhantomData` says so; the cell
/// reference alone would make it `Sync` for any `T: Send`).
///
/// # Invariants
///
/// `cell`'s state is `LEASED` and this is its only lease.
#[must_use = "dropping a lease makes the buffer idle again at once"]
pub(crate) struct Lease<'a, T> {
    cell: &'a LeaseCell<T>,
    _value: PhantomData<&'a mut T>,
}

impl<T> Lease<'_, T> {
    /// Gives the value away (to the device, by posting a work request that
    /// names it): nobody reaches it until [`LeaseCell::take_back`]. Call it
    /// before the post, as a completion may take the value back before the
    /// post returns; keep only raw pointers for the post itself.
    #[inline]
    pub(crate) fn hand_off(self) {
        self.cell.state.store(AWAY, Ordering::Release);
        // The lease ends here without making the value idle.
        core::mem::forget(self);
    }
}

impl<T> Deref for Lease<'_, T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this is the cell's one lease (type invariant), so nothing
        // else reaches the value while the borrow lasts.
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for Lease<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: as in `deref`, and the borrow of `self` is exclusive.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for Lease<'_, T> {
    #[inline]
    fn drop(&mut self) {
        self.cell.state.store(IDLE, Ordering::Release);
    }
}

/// Memory C code works on through pointers (an `rpc_rqst` SUNRPC fills in,
/// a buffer it encodes into): Rust code only hands out its address, and
/// reaches the contents through that pointer in `unsafe` code that says
/// who owns them at that moment.
///
/// # Invariants
///
/// No reference to the contents is ever created from a shared
/// `CShared`: they are reached only through [`CShared::get`]'s pointer.
#[repr(transparent)]
pub(crate) struct CShared<T>(kernel::types::Opaque<T>);

// SAFETY: a `CShared` is an address to safe code (type invariant): moving or
// sharing it between threads moves or shares no Rust reference to the
// contents. Who may touch them is decided by the C side's own rules, which
// every `unsafe` use of the pointer states.
unsafe impl<T> Send for CShared<T> {}
// SAFETY: see `Send`.
unsafe impl<T> Sync for CShared<T> {}

impl<T> CShared<T> {
    /// Holding `value`.
    pub(crate) const fn new(value: T) -> Self {
        CShared(kernel::types::Opaque::new(value))
    }

    /// The address of the contents, for C.
    #[inline]
    pub(crate) const fn get(&self) -> *mut T {
        self.0.get()
    }
}

/// A pinned heap value owned through a raw pointer. C callbacks hold
/// shared references into it (a CQ's or cm_id's context) while its owner
/// still writes fields nothing else reaches; a `Pin<KBox<T>>` could only do
/// that through `get_unchecked_mut`, a `&mut` to the whole value that
/// aliases the callbacks' references. Here the owner writes through
/// [`RawPin::as_ptr`], one field at a time, and says in its own SAFETY
/// comments why no reference covers that field meanwhile.
///
/// # Invariants
///
/// `ptr` is a pinned allocation made by [`RawPin::new`] with
/// `KBox::into_raw`; the value never moves, and only `Drop` frees it.
pub(crate) struct RawPin<T> {
    ptr: core::ptr::NonNull<T>,
}

// SAFETY: a `RawPin` owns its value like a `KBox` does.
unsafe impl<T: Send> Send for RawPin<T> {}
// SAFETY: see `Send`; `&RawPin` gives only `&T`.
unsafe impl<T: Sync> Sync for RawPin<T> {}

impl<T> RawPin<T> {
    /// Allocates and initialises the value in place.
    pub(crate) fn new(init: impl kernel::prelude::PinInit<T>) -> kernel::error::Result<Self> {
        use kernel::prelude::InPlaceInit;
        let b = kernel::alloc::KBox::pin_init(init, kernel::alloc::flags::GFP_KERNEL)?;
        // SAFETY: the value is never moved out of its allocation: the raw
        // pointer is only dereferenced in place, and `Drop` frees it.
        let raw = kernel::alloc::KBox::into_raw(unsafe { core::pin::Pin::into_inner_unchecked(b) });
        // INVARIANT: allocated pinned just above.
        core::ptr::NonNull::new(raw).map(|ptr| RawPin { ptr }).ok_or(kernel::error::code::ENOMEM)
    }

    /// The value's address, for writing a field in place.
    pub(crate) fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
}

impl<T> Deref for RawPin<T> {
    type Target = T;

    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: live until `Drop` (type invariant).
        unsafe { self.ptr.as_ref() }
    }
}

impl<T> Drop for RawPin<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by `KBox::into_raw` in `new`, freed once.
        drop(unsafe { kernel::alloc::KBox::from_raw(self.ptr.as_ptr()) });
    }
}

/// `n` values initialised in place in one allocation that never moves: each
/// is pinned for the slice's life.
///
/// # Invariants
///
/// `v` is never grown or shrunk after `new`, so its elements never move.
pub(crate) struct PinnedSlice<T> {
    v: kernel::alloc::KVVec<T>,
}

impl<T> PinnedSlice<T> {
    /// `n` values, the `i`th made by `init(i)`. The allocation may come
    /// from vmalloc: nothing in it may be mapped for DMA.
    pub(crate) fn new<I: kernel::prelude::PinInit<T>>(
        n: usize,
        mut init: impl FnMut(usize) -> kernel::error::Result<I>,
    ) -> kernel::error::Result<Self> {
        let mut v = kernel::alloc::KVVec::<T>::with_capacity(n, kernel::alloc::flags::GFP_KERNEL)?;
        for i in 0..n {
            let init = init(i)?;
            let Some(place) = v.spare_capacity_mut().first_mut() else {
                return Err(kernel::error::code::ENOMEM);
            };
            // SAFETY: `place` is the uninitialised element `i` of an
            // allocation that never moves: the vector has room for all `n`
            // values and is never grown or shrunk (type invariant), so the
            // value stays where it is initialised, pinned, until the slice
            // is dropped (which drops it in place).
            match unsafe { super::compat::pin_init_at(init, place.as_mut_ptr()) } {
                Ok(()) => {}
                Err(never) => match never {},
            }
            // SAFETY: elements `0..=i` are initialised.
            unsafe { super::compat::kvec_add_initialised(&mut v, 1) };
        }
        Ok(PinnedSlice { v })
    }

    /// The `i`th value.
    #[inline]
    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.v.get(i)
    }

    /// Every value.
    pub(crate) fn iter(&self) -> core::slice::Iter<'_, T> {
        self.v.iter()
    }
}
