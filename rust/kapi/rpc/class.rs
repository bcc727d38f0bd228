// SPDX-License-Identifier: GPL-2.0

//! Client-side RPC transport classes (`struct xprt_class`).
//!
//! A [`ClassRegistration`] makes a [`TransportClass`] known to SUNRPC for its
//! netids, so that `mount -o proto=<netid>` reaches [`TransportClass::setup`].
//! Dropping the registration unregisters the class.

use core::{
    any::TypeId,
    cell::UnsafeCell,
    marker::PhantomData,
    mem::offset_of,
    sync::atomic::{AtomicU8, Ordering},
};

use kernel::{
    error::{to_result, Result},
    ffi::c_char,
    prelude::*,
    str::CStr,
    types::Opaque,
    ThisModule,
};

use crate::sys;

/// Number of netids a class may list.
pub(crate) const MAX_NETIDS: usize = 2;

/// The arguments SUNRPC passes when it asks a class for a new transport.
///
/// # Invariants
///
/// `raw` is the `xprt_create` SUNRPC passed to the class's `setup`, valid
/// for `'a` (the call): `dstaddr` is NULL or a socket address of `addrlen`
/// bytes, `servername` NULL or a NUL-terminated string, `net` a live
/// namespace.
pub(crate) struct CreateArgs<'a> {
    raw: &'a sys::xprt_create,
}

impl CreateArgs<'_> {
    /// The server name the RPC client was created with, if any.
    pub(crate) fn servername(&self) -> Option<&CStr> {
        if self.raw.servername.is_null() {
            return None;
        }
        // SAFETY: `servername` is a NUL-terminated string owned by the RPC
        // client being created; it outlives the `setup` call that `self`
        // borrows from.
        Some(unsafe { crate::kapi::compat::cstr_from_ptr(self.raw.servername) })
    }

    /// The raw arguments, for [`super::new_xprt`].
    pub(super) fn raw(&self) -> &sys::xprt_create {
        self.raw
    }

    /// True if the destination is an IPv6 address.
    pub(crate) fn is_ipv6(&self) -> bool {
        // SAFETY: `dstaddr` is a valid socket address for the call (or NULL).
        !self.raw.dstaddr.is_null() && u32::from(unsafe { (*self.raw.dstaddr).sa_family }) == sys::AF_INET6
    }

    /// True if SUNRPC asks for a backchannel transport (NFSv4.1 on the server).
    pub(crate) fn is_backchannel(&self) -> bool {
        !self.raw.bc_xprt.is_null()
    }
}

/// A client-side RPC transport implementation.
pub(crate) trait TransportClass: 'static {
    /// Name of the class, printed by SUNRPC when it is registered.
    const NAME: &'static CStr;
    /// The `XPRT_TRANSPORT_*` identifier.
    const IDENT: u32;
    /// The netids (`proto=` values) this class serves.
    const NETIDS: [&'static CStr; MAX_NETIDS];

    /// Creates a transport for an RPC client.
    fn setup(args: &CreateArgs<'_>) -> Result<super::NewXprt>;

    /// Where the registered class is kept while it is registered: one
    /// `static` per class, so that two registrations of it fail. A
    /// constant, not a function: registering and `setup` must find the
    /// same one.
    const SLOT: ClassSlotRef;
}

/// `struct xprt_class` with room for its NUL-terminated flexible array of
/// netids (the list ends with an empty string).
#[repr(C)]
struct ClassStorage {
    class: sys::xprt_class,
    netid: [*const c_char; MAX_NETIDS + 1],
}

// The flexible array member must start exactly where our array does.
const _: () = assert!(offset_of!(ClassStorage, netid) == offset_of!(sys::xprt_class, netid));

/// Where a class is kept, in module memory: the `xprt_class` SUNRPC
/// registers and the transports it creates point back at
/// (`xprt->xprt_class`, read for sysfs `dstaddr` and when transports are
/// added to a client). The class's implementation owns one, as a `static`
/// ([`TransportClass::SLOT`]). Its contents are written once, by the first
/// registration, and live as long as the module: a transport of the class,
/// or a `setup` call SUNRPC started, which hold module references, never
/// see them freed or changed, even after a [`ClassRegistration`] was
/// dropped early.
///
/// # Invariants
///
/// `state` is [`UNMADE`], [`MAKING`] (one thread writes `storage` and
/// `class`), [`MADE`] (`storage` holds the class of the type `class`
/// names, written once and never again by Rust; not registered) or
/// [`REGISTERED`] (and registered with SUNRPC, which alone writes its list
/// head).
pub(crate) struct ClassSlot {
    state: AtomicU8,
    class: UnsafeCell<Option<TypeId>>,
    storage: Opaque<ClassStorage>,
}

const UNMADE: u8 = 0;
const MAKING: u8 = 1;
const MADE: u8 = 2;
const REGISTERED: u8 = 3;

// SAFETY: `class` and `storage` are written by one thread at a time (the
// one that moved `state` from UNMADE to MAKING), before anyone reads them
// (readers first see MADE or REGISTERED); after that only SUNRPC writes
// the list head, under its own lock.
unsafe impl Sync for ClassSlot {}

impl ClassSlot {
    /// A class not made yet.
    pub(crate) const fn new() -> Self {
        ClassSlot { state: AtomicU8::new(UNMADE), class: UnsafeCell::new(None), storage: Opaque::uninit() }
    }

    fn raw(&self) -> *mut sys::xprt_class {
        self.storage.get().cast()
    }
}

/// A `&'static` [`ClassSlot`], in a form a constant may hold (rustc before
/// 1.84 refuses a constant whose value is a reference to interior-mutable
/// memory, but not a pointer made from one).
///
/// # Invariants
///
/// `0` was made from a `&'static ClassSlot`.
#[derive(Clone, Copy)]
pub(crate) struct ClassSlotRef(*const ClassSlot);

impl ClassSlotRef {
    /// Names `slot`.
    pub(crate) const fn new(slot: &'static ClassSlot) -> Self {
        ClassSlotRef(slot)
    }

    fn get(self) -> &'static ClassSlot {
        // SAFETY: made from a `&'static ClassSlot` (type invariant).
        unsafe { &*self.0 }
    }
}

/// A registered transport class; unregistered on drop.
///
/// # Invariants
///
/// `T::SLOT` is [`REGISTERED`] (by `new`) until `drop` unregisters it.
pub(crate) struct ClassRegistration<T: TransportClass> {
    _class: PhantomData<T>,
}

impl<T: TransportClass> ClassRegistration<T> {
    /// Registers `T` with SUNRPC; `module` (this module) is held by SUNRPC
    /// around each `setup` call. Fails with `EBUSY` if `T` is registered,
    /// or if its slot holds another class.
    pub(crate) fn new(module: &'static ThisModule) -> Result<Self> {
        let slot = T::SLOT.get();
        match slot.state.compare_exchange(UNMADE, MAKING, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                // SAFETY: MAKING is this thread's alone (type invariant of
                // `ClassSlot`): nothing reads the slot until MADE.
                unsafe { Self::make(slot, module) };
                slot.state.store(MADE, Ordering::Release);
            }
            Err(MAKING) => return Err(EBUSY),
            Err(_) => {}
        }
        // SAFETY: MADE or REGISTERED: written once, read only now.
        if unsafe { *slot.class.get() } != Some(TypeId::of::<T>()) {
            return Err(EBUSY);
        }
        if slot.state.compare_exchange(MADE, REGISTERED, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(EBUSY);
        }
        // SAFETY: the class is made (its netid strings are `'static`) and
        // lives as long as the module; registered once (REGISTERED is
        // ours).
        if let Err(e) = to_result(unsafe { sys::xprt_register_transport(slot.raw()) }) {
            slot.state.store(MADE, Ordering::Release);
            return Err(e);
        }
        // INVARIANT: registered above.
        Ok(Self { _class: PhantomData })
    }

    /// Writes `T`'s class into `slot`.
    ///
    /// # Safety
    ///
    /// The caller moved `slot` from UNMADE to MAKING.
    unsafe fn make(slot: &ClassSlot, module: &'static ThisModule) {
        const EMPTY: &CStr = kernel::c_str!("");
        // SAFETY: `xprt_class` is plain C data (a list head, integers,
        // pointers and a char array); all zeroes is a valid value.
        let mut class: sys::xprt_class = unsafe { core::mem::zeroed() };
        class.ident = T::IDENT as i32;
        class.setup = Some(setup_callback::<T>);
        class.owner = module.as_ptr().cast();
        crate::kapi::copy_c_name(&mut class.name, T::NAME);
        let mut netid = [crate::kapi::compat::cstr_ptr(EMPTY); MAX_NETIDS + 1];
        for (slot, id) in netid.iter_mut().zip(T::NETIDS) {
            *slot = crate::kapi::compat::cstr_ptr(id);
        }
        // SAFETY: per the contract, nobody else reads or writes the slot.
        unsafe {
            slot.storage.get().write(ClassStorage { class, netid });
            *slot.class.get() = Some(TypeId::of::<T>());
        }
    }
}

impl<T: TransportClass> Drop for ClassRegistration<T> {
    fn drop(&mut self) {
        let slot = T::SLOT.get();
        // SAFETY: registered by `new` (type invariant); SUNRPC takes it off
        // its list under its lock. Transports of the class, and `setup`
        // calls under way, keep pointing at module memory that stays.
        let rc = unsafe { sys::xprt_unregister_transport(slot.raw()) };
        if rc != 0 {
            pr_warn!("xprt_unregister_transport failed: {}\n", rc);
        }
        slot.state.store(MADE, Ordering::Release);
    }
}

/// C entry point of `xprt_class.setup`.
///
/// # Safety
///
/// Called by SUNRPC with a valid `struct xprt_create` for the duration of the
/// call.
unsafe extern "C" fn setup_callback<T: TransportClass>(args: *mut sys::xprt_create) -> *mut sys::rpc_xprt {
    // SAFETY: guaranteed valid by the caller for the duration of this call.
    let args = CreateArgs { raw: unsafe { &*args } };
    match T::setup(&args) {
        Ok(xprt) => {
            let xprt = xprt.into_raw();
            // SAFETY: `setup` returned a transport it allocated and nobody
            // else uses yet; the class lives in module memory, which the
            // transport's module reference keeps.
            unsafe { (*xprt.as_ptr()).xprt_class = T::SLOT.get().raw() };
            xprt.as_ptr()
        }
        Err(e) => e.to_ptr(),
    }
}
