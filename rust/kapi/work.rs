// SPDX-License-Identifier: GPL-2.0

//! Delayed work on the system long-running workqueue, shaped like the 7.3
//! kernel crate's `workqueue::DelayedWork` (6.12 has none): the work item is
//! a field of an `Arc`-owned object, initialised in place, and a queued work
//! holds a reference to its owner, so the owner cannot go away while its
//! work is pending or running.

use core::marker::PhantomData;

use kernel::{ffi::c_ulong, prelude::*, sync::Arc, types::Opaque};

use crate::sys;

/// A `struct delayed_work` embedded in a `T`, calling back
/// [`DelayedWorkItem::run`] of `T` (the `ID`th work of `T`).
///
/// # Invariants
///
/// `raw` was initialised by `INIT_DELAYED_WORK` with `run::<T, ID>` as its
/// function. While it is queued, the workqueue owns one reference of the
/// `Arc<T>` it is embedded in (leaked by [`enqueue`], taken back by the
/// callback or by [`cancel_sync`]).
#[pin_data]
pub(crate) struct DelayedWork<T, const ID: u64 = 0> {
    #[pin]
    raw: Opaque<sys::delayed_work>,
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
            _owner: PhantomData,
        })
    }
}

/// Says where in `Self` its `ID`th [`DelayedWork`] is. Implement it with
/// [`impl_has_delayed_work!`](crate::impl_has_delayed_work).
///
/// # Safety
///
/// `OFFSET` is the offset in bytes of a field of type `DelayedWork<Self, ID>`
/// of `Self`.
pub(crate) unsafe trait HasDelayedWork<const ID: u64 = 0> {
    /// Where the work is in `Self`.
    const OFFSET: usize;
}

/// Implements [`HasDelayedWork`] for a field of a struct:
/// `impl_has_delayed_work!(impl HasDelayedWork<ID> for Type { connect_work });`
/// The field's type is checked to be `DelayedWork<Type, ID>`.
#[macro_export]
macro_rules! impl_has_delayed_work {
    (impl HasDelayedWork<$id:tt> for $t:ty { $field:ident }) => {
        // SAFETY: the offset is computed by `offset_of!` for a field whose
        // type the function below checks to be `DelayedWork<$t, $id>`.
        unsafe impl $crate::kapi::work::HasDelayedWork<$id> for $t {
            const OFFSET: usize = {
                fn _field_type(t: &$t) -> &$crate::kapi::work::DelayedWork<$t, $id> {
                    &t.$field
                }
                ::core::mem::offset_of!($t, $field)
            };
        }
    };
}

/// An object that owns one or more [`DelayedWork`]s (told apart by `ID`).
pub(crate) trait DelayedWorkItem<const ID: u64 = 0>: HasDelayedWork<ID> + Send + Sync + Sized {
    /// Runs in process context on `system_long_wq`, with the reference the
    /// queued work held.
    fn run(this: Arc<Self>);
}

/// The `ID`th work of the object at `this`.
fn work_of<T: HasDelayedWork<ID>, const ID: u64>(this: *const T) -> *mut sys::delayed_work {
    this.cast::<u8>().wrapping_add(T::OFFSET).cast_mut().cast()
}

/// Queues `this`'s `ID`th work to run after `delay` jiffies, giving it the
/// reference `this`. If it is already queued (or being cancelled), nothing
/// happens and the reference comes back.
pub(crate) fn enqueue<T: DelayedWorkItem<ID>, const ID: u64>(this: Arc<T>, delay: u64) -> Result<(), Arc<T>> {
    let ptr = Arc::into_raw(this);
    // SAFETY: `ptr` is a live `T` with a `DelayedWork<T, ID>` at `OFFSET`
    // (`HasDelayedWork`), initialised by `DelayedWork::new` (the only way to
    // make one). If queued, the workqueue owns the reference (type invariant).
    let queued = unsafe { sys::rpcrdma_rs_queue_long_delayed(work_of::<T, ID>(ptr), delay as c_ulong) };
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
    let ptr = core::ptr::from_ref(this);
    // SAFETY: `this` has an initialised `DelayedWork<T, ID>` at `OFFSET`.
    if unsafe { sys::cancel_delayed_work_sync(work_of::<T, ID>(ptr)) } {
        // SAFETY: it was queued, so `enqueue` leaked a reference of the
        // `Arc` holding `this` for it (type invariant), which is ours now.
        Some(unsafe { Arc::from_raw(ptr) })
    } else {
        None
    }
}

/// # Safety
///
/// Called by the workqueue with the `work_struct` of a queued
/// `DelayedWork<T, ID>`.
unsafe extern "C" fn run<T: DelayedWorkItem<ID>, const ID: u64>(work: *mut sys::work_struct) {
    // SAFETY: `work` is the work of a `delayed_work` at `T::OFFSET` in a `T`
    // (`HasDelayedWork`); it was queued by `enqueue`, which leaked a
    // reference of the `T`'s `Arc` for it, taken back here.
    let this = unsafe {
        let dw = sys::rpcrdma_rs_to_delayed_work(work);
        Arc::from_raw(dw.cast::<u8>().wrapping_sub(T::OFFSET).cast::<T>().cast_const())
    };
    T::run(this);
}
