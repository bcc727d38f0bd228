// SPDX-License-Identifier: GPL-2.0

//! Client-side RPC transport classes (`struct xprt_class`).
//!
//! A [`ClassRegistration`] makes a [`TransportClass`] known to SUNRPC for its
//! netids, so that `mount -o proto=<netid>` reaches [`TransportClass::setup`].
//! Dropping the registration unregisters the class.

use core::{
    marker::PhantomData,
    mem::offset_of,
    pin::Pin,
    ptr,
    sync::atomic::{AtomicPtr, Ordering},
};

use kernel::{
    alloc::{flags::GFP_KERNEL, KBox},
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
pub(crate) trait TransportClass {
    /// Name of the class, printed by SUNRPC when it is registered.
    const NAME: &'static CStr;
    /// The `XPRT_TRANSPORT_*` identifier.
    const IDENT: u32;
    /// The netids (`proto=` values) this class serves.
    const NETIDS: [&'static CStr; MAX_NETIDS];

    /// Creates a transport for an RPC client.
    fn setup(args: &CreateArgs<'_>) -> Result<super::NewXprt>;

    /// Where the registered class is kept while it is registered: one
    /// `static` per class, so that two registrations of it fail.
    fn slot() -> &'static ClassSlot;
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

/// Where a registered class is found by the transports it creates: each
/// points back at its class (`xprt->xprt_class`), which SUNRPC reads (sysfs
/// `dstaddr`, adding transports to a client). The class's implementation
/// owns one, as a `static` ([`TransportClass::slot`]).
pub(crate) struct ClassSlot(AtomicPtr<sys::xprt_class>);

impl ClassSlot {
    /// No class registered.
    pub(crate) const fn new() -> Self {
        ClassSlot(AtomicPtr::new(ptr::null_mut()))
    }
}

/// A registered transport class; unregistered on drop.
///
/// # Invariants
///
/// `storage` holds an `xprt_class` registered with `xprt_register_transport`
/// by `new` (its netid list NUL-terminated) and stays registered, at this
/// pinned address, until `drop` unregisters it.
pub(crate) struct ClassRegistration<T: TransportClass> {
    storage: Pin<KBox<Opaque<ClassStorage>>>,
    _class: PhantomData<T>,
}

// SAFETY: after registration, the C side accesses the class only under its own
// `xprt_list_lock`; Rust never touches it again until `drop`, which runs once.
unsafe impl<T: TransportClass> Send for ClassRegistration<T> {}
// SAFETY: `ClassRegistration` has no methods taking `&self`.
unsafe impl<T: TransportClass> Sync for ClassRegistration<T> {}

impl<T: TransportClass> ClassRegistration<T> {
    /// Registers `T` with SUNRPC; `module` is held by SUNRPC around each
    /// `setup` call.
    pub(crate) fn new(module: &'static ThisModule) -> Result<Self> {
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
        let storage = KBox::pin(Opaque::new(ClassStorage { class, netid }), GFP_KERNEL)?;
        let raw = storage.get().cast::<sys::xprt_class>();
        if T::slot().0.compare_exchange(ptr::null_mut(), raw, Ordering::AcqRel, Ordering::Acquire).is_err() {
            return Err(EBUSY);
        }
        // SAFETY: `storage` is pinned on the heap and lives until `drop`
        // unregisters it; its netid strings are `'static`.
        if let Err(e) = to_result(unsafe { sys::xprt_register_transport(raw) }) {
            T::slot().0.store(ptr::null_mut(), Ordering::Release);
            return Err(e);
        }
        Ok(Self { storage, _class: PhantomData })
    }
}

impl<T: TransportClass> Drop for ClassRegistration<T> {
    fn drop(&mut self) {
        // SAFETY: the class was registered in `new`. SUNRPC holds a reference
        // on `owner` (this module) around every `setup` call, so none can be
        // running once module unload reaches this point; after unregistering,
        // no new one can start.
        let rc = unsafe { sys::xprt_unregister_transport(self.storage.get().cast()) };
        if rc != 0 {
            pr_warn!("xprt_unregister_transport failed: {}\n", rc);
        }
        // No transport of the class is left: each holds a module reference.
        T::slot().0.store(ptr::null_mut(), Ordering::Release);
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
            // else uses yet; the class outlives it (the transport holds a
            // module reference, and the class is unregistered at unload).
            unsafe { (*xprt.as_ptr()).xprt_class = T::slot().0.load(Ordering::Acquire) };
            xprt.as_ptr()
        }
        Err(e) => e.to_ptr(),
    }
}
