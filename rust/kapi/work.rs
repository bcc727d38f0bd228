// SPDX-License-Identifier: GPL-2.0

//! Delayed work on the system long-running workqueue, shaped like the 7.3
//! kernel crate's `workqueue::DelayedWork` (6.12 has none): the work item is
//! a field of an `Arc`-owned object, initialised in place, and a queued work
//! holds a reference to its owner, so the owner cannot go away while its
//! work is pending or running.
//!
//! The owner says where its work is with a safe accessor
//! ([`DelayedWorkItem::work`]); no `unsafe impl` of the owner's is needed:
//! a queued work records its owner's address itself, and a work that does
//! not lie inside its owner is refused.

use core::{
    marker::PhantomData,
    sync::atomic::{AtomicPtr, Ordering},
};

use kernel::{ffi::c_ulong, prelude::*, sync::Arc, types::Opaque};

use crate::sys;

/// A `struct delayed_work` embedded in a `T`, calling back
/// [`DelayedWorkItem::run`] of `T` (the `ID`th work of `T`).
///
/// # Invariants
///
/// `raw` is the first field (`repr(C)`) and was initialised by
/// `INIT_DELAYED_WORK` with `run::<T, ID>` as its function. While it is
/// queued, `owner` is the `T` it lies in, and the workqueue owns one
/// reference of the `Arc<T>` holding that `T` (leaked by [`enqueue`], taken
/// back by the callback or by [`cancel_sync`]).
#[pin_data]
#[repr(C)]
pub(crate) struct DelayedWork<T, const ID: u64 = 0> {
    #[pin]
    raw: Opaque<sys::delayed_work>,
    owner: AtomicPtr<T>,
    _owner: PhantomData<T>,
}

// SAFETY: the workqueue core serialises all access to the work item; the
// owner it refers to is `Send + Sync` (`DelayedWorkItem`).
unsafe impl<T: Send + Sync, const ID: u64> Send for DelayedWork<T, ID> {}
// SAFETY: see `Send`; no method gives access to the C data.
unsafe impl<T: Send + Sync, const ID: u64> Sync for DelayedWork<T, ID> {}

impl<T: DelayedWorkItem<ID>, const ID: u64> DelayedWork<T, ID> {
    /// A work item, initialised where it is placed.
    pub(crate) fn new() -> impl PinInit<Self> {
        pin_init!(DelayedWork {
            // SAFETY: `slot` is valid for writes and pinned (it stays where it
            // is until the owner is dropped, and no queued work outlives the
            // owner: a queued work holds a reference to it).
            raw <- Opaque::ffi_init(|slot| unsafe { sys::rpcrdma_rs_init_delayed_work(slot, Some(run::<T, ID>)) }),
            owner: AtomicPtr::new(core::ptr::null_mut()),
            _owner: PhantomData,
        })
    }
}

/// An object that owns one or more [`DelayedWork`]s (told apart by `ID`).
pub(crate) trait DelayedWorkItem<const ID: u64 = 0>: Send + Sync + Sized {
    /// The `ID`th work, a field of `self` (one elsewhere is refused).
    fn work(&self) -> &DelayedWork<Self, ID>;

    /// Runs in process context on `system_long_wq`, with the reference the
    /// queued work held.
    fn run(this: Arc<Self>);
}

/// `this`'s `ID`th work, if it lies inside `this` (the accessor is the
/// owner's, and nothing but the range makes it trustworthy).
fn work_of<T: DelayedWorkItem<ID>, const ID: u64>(this: &T) -> Option<&DelayedWork<T, ID>> {
    let w = this.work();
    let (base, at) = (core::ptr::from_ref(this) as usize, core::ptr::from_ref(w) as usize);
    let end = base.checked_add(core::mem::size_of::<T>())?;
    let w_end = at.checked_add(core::mem::size_of::<DelayedWork<T, ID>>())?;
    (at >= base && w_end <= end).then_some(w)
}

/// Queues `this`'s `ID`th work to run after `delay` jiffies, giving it the
/// reference `this`. If it is already queued (or being cancelled), or does
/// not lie inside `this`, nothing happens and the reference comes back.
pub(crate) fn enqueue<T: DelayedWorkItem<ID>, const ID: u64>(this: Arc<T>, delay: u64) -> Result<(), Arc<T>> {
    let Some(w) = work_of::<T, ID>(&this) else { return Err(this) };
    let raw = w.raw.get();
    let owner = core::ptr::from_ref(&w.owner);
    let ptr = Arc::into_raw(this);
    // INVARIANT: the work lies inside the `T` at `ptr` (checked), so the
    // owner is that `T`: the same value whoever queues it, written before
    // it can run.
    // SAFETY: `owner` is a field of the live `T` at `ptr` (checked above),
    // which the reference leaked just now keeps alive.
    unsafe { (*owner).store(ptr.cast_mut(), Ordering::Release) };
    // SAFETY: `raw` is an initialised `delayed_work` (made only by
    // `DelayedWork::new`) of the live `T`. If queued, the workqueue owns
    // the reference (type invariant).
    let queued = unsafe { sys::rpcrdma_rs_queue_long_delayed(raw, delay as c_ulong) };
    if queued {
        Ok(())
    } else {
        // SAFETY: not queued: the reference leaked above is still ours.
        Err(unsafe { Arc::from_raw(ptr) })
    }
}

/// Cancels `this`'s `ID`th work and waits for a running callback to finish;
/// returns the reference the work held if it was queued.
pub(crate) fn cancel_sync<T: DelayedWorkItem<ID>, const ID: u64>(this: &T) -> Option<Arc<T>> {
    let w = work_of::<T, ID>(this)?;
    // SAFETY: `w.raw` is an initialised `delayed_work` of the live `T`.
    if unsafe { sys::cancel_delayed_work_sync(w.raw.get()) } {
        // SAFETY: it was queued, so `enqueue` leaked a reference of the
        // `Arc` holding the `T` it lies in, whose address it recorded, for
        // it (type invariant): ours now.
        Some(unsafe { Arc::from_raw(w.owner.load(Ordering::Acquire).cast_const()) })
    } else {
        None
    }
}

/// # Safety
///
/// Called by the workqueue with the `work_struct` of a queued
/// `DelayedWork<T, ID>`.
unsafe extern "C" fn run<T: DelayedWorkItem<ID>, const ID: u64>(work: *mut sys::work_struct) {
    // SAFETY: `work` is the work of the `delayed_work` that is the first
    // field of a `repr(C)` `DelayedWork<T, ID>` (its function is this one,
    // set only by `DelayedWork::new`); it was queued by `enqueue`, which
    // recorded its owner and leaked a reference of the owner's `Arc` for
    // it, taken back here.
    let this = unsafe {
        let dw = sys::rpcrdma_rs_to_delayed_work(work).cast::<DelayedWork<T, ID>>();
        Arc::from_raw((*dw).owner.load(Ordering::Acquire).cast_const())
    };
    T::run(this);
}
