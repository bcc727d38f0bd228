// SPDX-License-Identifier: GPL-2.0

//! Where a transport class's C structure is kept ([`ClassSlot`]): SUNRPC's
//! `xprt_class` for the client, the server core's `svc_xprt_class`. A
//! subsystem that registers such a class keeps pointing at it (the
//! transports of the class do, and calls the subsystem started may be
//! under way) for as long as the module may be in use, so the structure
//! lives in module memory, a `static` of the class's implementation: made
//! once, by the first registration, never changed by Rust again, and
//! registered by one registration at a time ([`Claim`]).

use core::{
    any::TypeId,
    cell::UnsafeCell,
    sync::atomic::{AtomicU8, Ordering},
};

use kernel::{
    error::{code::EBUSY, Result},
    types::Opaque,
};

const UNMADE: u8 = 0;
const MAKING: u8 = 1;
const MADE: u8 = 2;
const CLAIMED: u8 = 3;

/// A class structure of type `C` in module memory.
///
/// # Invariants
///
/// `state` is [`UNMADE`], [`MAKING`] (one thread writes `storage` and
/// `class`), [`MADE`] (`storage` holds the class of the Rust type `class`
/// names, written once and never again by Rust; not claimed) or
/// [`CLAIMED`] (as MADE, and one [`Claim`] exists, whose holder alone
/// registers the class with its subsystem, which then alone writes the
/// list head in it).
pub(crate) struct ClassSlot<C> {
    state: AtomicU8,
    class: UnsafeCell<Option<TypeId>>,
    storage: Opaque<C>,
}

// SAFETY: `class` and `storage` are written by one thread at a time (the
// one that moved `state` from UNMADE to MAKING), before anyone reads them
// (readers first see MADE or CLAIMED); after that only the subsystem the
// class is registered with writes it, under its own lock.
unsafe impl<C> Sync for ClassSlot<C> {}

impl<C> ClassSlot<C> {
    /// A slot with no class made yet.
    pub(crate) const fn new() -> Self {
        ClassSlot { state: AtomicU8::new(UNMADE), class: UnsafeCell::new(None), storage: Opaque::uninit() }
    }

    /// The class's address (for transports to point at: valid to read
    /// once a claim was made).
    pub(in crate::kapi) fn raw(&self) -> *mut C {
        self.storage.get()
    }

    /// Claims the slot for the class of `T`, which `make` builds the first
    /// time. Fails with `EBUSY` if the slot is claimed or being made, or
    /// holds the class of another type.
    pub(in crate::kapi) fn claim<T: 'static>(&'static self, make: impl FnOnce() -> C) -> Result<Claim<C>> {
        match self.state.compare_exchange(UNMADE, MAKING, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: MAKING is this thread's alone (type invariant):
                // nothing reads the slot until it is MADE.
                unsafe {
                    self.storage.get().write(make());
                    *self.class.get() = Some(TypeId::of::<T>());
                }
                self.state.store(MADE, Ordering::Release);
            }
            Err(MAKING) => return Err(EBUSY),
            Err(_) => {}
        }
        // SAFETY: MADE or CLAIMED: written once, only read from now on.
        if unsafe { *self.class.get() } != Some(TypeId::of::<T>()) {
            return Err(EBUSY);
        }
        if self.state.compare_exchange(MADE, CLAIMED, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(EBUSY);
        }
        // INVARIANT: CLAIMED above, by this value.
        Ok(Claim { slot: self })
    }
}

/// The one claim on a [`ClassSlot`]: its holder may register the class,
/// and must have unregistered it when the claim ends. Lost, the slot
/// stays claimed.
///
/// # Invariants
///
/// `slot` is CLAIMED, by this value.
pub(in crate::kapi) struct Claim<C: 'static> {
    slot: &'static ClassSlot<C>,
}

impl<C> Claim<C> {
    /// The class, made.
    pub(in crate::kapi) fn raw(&self) -> *mut C {
        self.slot.raw()
    }

    /// Ends the claim: another may be made.
    ///
    /// # Safety
    ///
    /// The class is registered with no subsystem, and the claim is not
    /// used (nor ended) again.
    pub(in crate::kapi) unsafe fn end(&self) {
        self.slot.state.store(MADE, Ordering::Release);
    }
}

/// A `&'static` [`ClassSlot`], in a form a constant may hold (rustc before
/// 1.84 refuses a constant whose value is a reference to interior-mutable
/// memory, but not a pointer made from one).
///
/// # Invariants
///
/// `0` was made from a `&'static ClassSlot<C>`.
pub(crate) struct SlotRef<C: 'static>(*const ClassSlot<C>);

impl<C> Clone for SlotRef<C> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<C> Copy for SlotRef<C> {}

impl<C> SlotRef<C> {
    /// Names `slot`.
    pub(crate) const fn new(slot: &'static ClassSlot<C>) -> Self {
        SlotRef(slot)
    }

    pub(in crate::kapi) fn get(self) -> &'static ClassSlot<C> {
        // SAFETY: made from a `&'static ClassSlot<C>` (type invariant).
        unsafe { &*self.0 }
    }
}
