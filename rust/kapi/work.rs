// SPDX-License-Identifier: GPL-2.0

//! Delayed work on the system long-running workqueue, embedded in a pinned
//! owner (the 6.12 `kernel` crate has no delayed work).

use core::{marker::PhantomData, pin::Pin};

use kernel::types::Opaque;

use crate::sys;

/// An owner of a [`DelayedWork`]; `ID` tells an owner's works apart, so that
/// one owner may embed several, each with its own `run`.
pub(crate) trait DelayedWorkItem<const ID: u64 = 0>: Sized + Sync {
    /// The embedded work.
    fn work(&self) -> &DelayedWork<Self, ID>;
    /// Runs in process context on `system_long_wq`.
    fn run(&self);
}

/// A `struct delayed_work` calling back its owner `T`.
///
/// Dropping it cancels the work and waits for a running callback, so the
/// owner must declare it as its first field: it then goes before anything the
/// callback could use.
#[repr(C)]
pub(crate) struct DelayedWork<T: DelayedWorkItem<ID>, const ID: u64 = 0> {
    raw: Opaque<sys::delayed_work>,
    owner: Opaque<*const T>,
    _owner: PhantomData<T>,
}

// SAFETY: the workqueue core synchronises the work item; `owner` is written
// once in `init` before the work can be queued.
unsafe impl<T: DelayedWorkItem<ID>, const ID: u64> Send for DelayedWork<T, ID> {}
// SAFETY: see `Send`.
unsafe impl<T: DelayedWorkItem<ID>, const ID: u64> Sync for DelayedWork<T, ID> {}

impl<T: DelayedWorkItem<ID>, const ID: u64> DelayedWork<T, ID> {
    /// A work item that is not yet tied to its owner; see [`DelayedWork::init`].
    pub(crate) fn new() -> Self {
        Self { raw: Opaque::uninit(), owner: Opaque::new(core::ptr::null()), _owner: PhantomData }
    }

    /// Ties the work to `owner`, which is pinned and so stays where it is
    /// until it is dropped (which cancels the work first).
    pub(crate) fn init(owner: Pin<&T>) {
        let this = <T as DelayedWorkItem<ID>>::work(&owner);
        // SAFETY: the work is not queued yet (it cannot be before `init`), and
        // `owner` is pinned for as long as the work exists.
        unsafe {
            *this.owner.get() = core::ptr::from_ref::<T>(&*owner);
            sys::rpcrdma_rs_init_delayed_work(this.raw.get(), Some(run::<T, ID>));
        }
    }

    /// Queues the work to run after `delay` jiffies (no-op if queued).
    pub(crate) fn queue(&self, delay: u64) {
        // SAFETY: initialised by `init` (callers queue only after it).
        unsafe { sys::rpcrdma_rs_queue_long_delayed(self.raw.get(), delay as kernel::ffi::c_ulong) };
    }

    /// Cancels the work and waits for a running callback to finish.
    pub(crate) fn cancel_sync(&self) {
        // SAFETY: `init` ran (owners call it right after pinning), or the
        // owner pointer is still null and the work was never queued.
        unsafe {
            if !(*self.owner.get()).is_null() {
                sys::cancel_delayed_work_sync(self.raw.get());
            }
        }
    }
}

impl<T: DelayedWorkItem<ID>, const ID: u64> Drop for DelayedWork<T, ID> {
    fn drop(&mut self) {
        self.cancel_sync();
    }
}

/// # Safety
///
/// Called by the workqueue with the `work_struct` inside a `DelayedWork<T, ID>`
/// that `init` tied to a live owner.
unsafe extern "C" fn run<T: DelayedWorkItem<ID>, const ID: u64>(work: *mut sys::work_struct) {
    // SAFETY: `work` is inside `raw`, the first field of a `repr(C)`
    // `DelayedWork<T, ID>`; its owner outlives it (dropping it cancels us).
    unsafe {
        let dw = sys::rpcrdma_rs_to_delayed_work(work).cast::<DelayedWork<T, ID>>();
        let owner = *(*dw).owner.get();
        <T as DelayedWorkItem<ID>>::run(&*owner);
    }
}
